"""A plugin's session object: registered with pytest while the plugin is active, handed
back at unconfigure.

The pytest-timeout / pytest-randomly pattern: a `-p` module keeps no state of its own.
When its `pytest_configure` decides the plugin is active, it registers one object that
holds everything the session learns and patches (its hooks run from then on); its
`pytest_unconfigure` calls `release`, which unregisters the object and calls its
`close()`, where every patch is undone. A plugin that is off registers nothing, so
nothing of it runs later in the session, and a second session in the same process
starts from a clean object.
"""

from __future__ import annotations

from typing import Any, Optional


def register(config: Any, name: str, obj: Any) -> Any:
    """Register `obj` under `name` (e.g. "zl_ir_meta"); returns it."""
    config.pluginmanager.register(obj, name)
    return obj


def active(config: Any, name: str) -> Optional[Any]:
    """The registered object, or None while the plugin is off."""
    return config.pluginmanager.get_plugin(name)


def release(config: Any, name: str) -> Optional[Any]:
    """Unregister the object and close it (undo its patches); None when it was never active."""
    obj = config.pluginmanager.get_plugin(name)
    if obj is None:
        return None
    config.pluginmanager.unregister(obj)
    close = getattr(obj, "close", None)
    if close is not None:
        close()
    return obj
