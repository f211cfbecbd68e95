"""FlagGems' LibEntry dispatch caches, emptied for a session and restored after it.

`LibEntry.kernel_cache` remembers, per argument key, the constexprs of the first call
and then launches without asking the tuner again. A cache filled before the session
(an earlier session in the same process) would bypass the replay entirely, and the
configs a replay injected would stay pinned in it after the plugin is gone. So the
session starts with every LibEntry cache empty and ends with the earlier contents
back. Instances are found with one `gc` scan at configure rather than by wrapping
`LibEntry.run`, which is on every kernel launch's hot path.
"""

from __future__ import annotations

import gc
import sys
from typing import Any, Iterable, List

from zl.flaggems import PACKAGES
from zl.patching import PatchStack


def libentry_classes(packages: Iterable[str] = PACKAGES) -> List[type]:
    out = []
    for pkg in packages:
        mod = sys.modules.get(f"{pkg}.utils.libentry")
        cls = getattr(mod, "LibEntry", None) if mod is not None else None
        if isinstance(cls, type):
            out.append(cls)
    return out


def _cache_dicts(cache: Any) -> List[dict]:
    # Upstream keeps one dict per device (a tuple of dicts); the fake keeps one dict.
    if isinstance(cache, dict):
        return [cache]
    if isinstance(cache, (list, tuple)):
        return [d for d in cache if isinstance(d, dict)]
    return []


def isolate_kernel_caches(stack: PatchStack, classes: Iterable[type] = ()) -> int:
    """Empty every LibEntry kernel_cache now; `stack` puts the contents back. Returns
    how many caches held entries."""
    classes = tuple(classes) or tuple(libentry_classes())
    if not classes:
        return 0
    held = 0
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance reads obj.__class__, which some objects
        # (torch's deprecated reduce_op) answer with a warning.
        if not issubclass(type(obj), classes):
            continue
        for cache in _cache_dicts(getattr(obj, "kernel_cache", None)):
            saved = dict(cache)
            held += bool(saved)
            cache.clear()

            def undo(cache=cache, saved=saved) -> None:
                cache.clear()
                cache.update(saved)

            stack.push(undo)
    return held
