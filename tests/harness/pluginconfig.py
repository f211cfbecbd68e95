"""Drive a `-p` plugin's configure/unconfigure in-process with a stand-in pytest config.

`PluginConfig(plugin_module, options={...}, args=[...], plugins=[...])` runs the
module's `pytest_addoption` on a real pytest Parser (so zl.options knows each option's
environment variable), answers `getoption` from `options` (None = not given on the
command line, so the variable is read) and keeps a minimal plugin manager: `register`,
`unregister`, `get_plugin` and `is_registered`, with `plugins` pre-registered by name.
"""
from __future__ import annotations

import types
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

from _pytest.config.argparsing import Parser
from pytest import Stash


_NOTSET = object()


class _PluginManager:
    def __init__(self, names: Iterable[str]) -> None:
        self.plugins: Dict[str, Any] = {name: object() for name in names}

    def register(self, plugin: Any, name: Optional[str] = None) -> str:
        name = name or str(id(plugin))
        if name in self.plugins:
            raise ValueError(f"plugin name already registered: {name}")
        self.plugins[name] = plugin
        return name

    def unregister(self, plugin: Any = None, name: Optional[str] = None) -> Any:
        name = name or next((n for n, p in self.plugins.items() if p is plugin), None)
        return self.plugins.pop(name, None)

    def get_plugin(self, name: str) -> Any:
        return self.plugins.get(name)

    def is_registered(self, plugin: Any) -> bool:
        return any(p is plugin for p in self.plugins.values())


class PluginConfig:
    def __init__(self, plugin_module: Any = None, options: Optional[Dict[str, Any]] = None,
                 args: Iterable[str] = (), plugins: Iterable[str] = (), cwd: Optional[Path] = None) -> None:
        self.parser = Parser(_ispytest=True)  # the real parser, so options register as in a run
        if plugin_module is not None and hasattr(plugin_module, "pytest_addoption"):
            plugin_module.pytest_addoption(self.parser)
        self._options = dict(options or {})
        self.pluginmanager = _PluginManager(plugins)
        self.invocation_params = types.SimpleNamespace(args=tuple(args), dir=Path(cwd or Path.cwd()))
        self.stash = Stash()   # per session, as pytest's (the plugins' hand-overs live there)

    def getoption(self, name: str, default: Any = _NOTSET, skip: bool = False) -> Any:
        """Like pytest's: a declared or given option's value, else `default`, else ValueError."""
        if name in self._options:
            return self._options[name]
        declared = any(name == opt.dest for grp in self.parser._groups for opt in grp.options)
        if declared:
            return None
        if default is not _NOTSET:
            return default
        raise ValueError(f"no option named {name!r}")
