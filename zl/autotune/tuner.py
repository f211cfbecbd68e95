"""The Autotuner.run wrapper: see the key the tuner computed, answer it on replay.

`Autotuner.run` (and the `run` of every subclass that defines its own, such as
FlagGems' `LibTuner`) is wrapped. For one call the tuner's `self.cache` is swapped for
`CacheProxy`, so the key is whatever the tuner itself computed and looked up -- never
recomputed here, which keeps this correct across Triton 3.6 / 3.9 key layouts and
LibTuner's strategy-normalised keys.

Per-tuner bookkeeping (kernel name, key texts, re-entrancy) lives on `TunerPatch`,
not on the tuner objects, so nothing of a session stays behind on them.
"""

from __future__ import annotations

import weakref
from typing import Any, Dict, List

from zl.autotune.configs import key_to_str, kernel_name
from zl.autotune.session import AutotuneSession
from zl.patching import PatchStack


class CacheProxy:
    """Stands in for `tuner.cache` during one `run` call; remembers the key the
    tuner asked about and, when replaying, answers with the recorded config."""

    __slots__ = ("inner", "session", "tuner", "kernel", "key", "keystr", "forced", "wrote", "_strs")

    def __init__(self, inner: Any, session: AutotuneSession, tuner: Any, kernel: str, strs: Dict) -> None:
        self.inner = inner
        self.session = session
        self.tuner = tuner
        self.kernel = kernel
        self.key = None
        self.keystr = None
        self.forced = None
        self.wrote = False
        self._strs = strs

    def _see(self, key: Any) -> None:
        if self.keystr is not None and key == self.key:
            return
        self.key = key
        try:
            ks = self._strs.get(key)
        except TypeError:
            ks = None
        if ks is None:
            ks = key_to_str(key)
            try:
                self._strs[key] = ks
            except TypeError:
                pass
        self.keystr = ks
        self.forced = self.session.lookup(self.tuner, self.kernel, ks)

    def __contains__(self, key: Any) -> bool:
        self._see(key)
        return True if self.forced is not None else key in self.inner

    def __getitem__(self, key: Any) -> Any:
        self._see(key)
        return self.forced if self.forced is not None else self.inner[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._see(key)
        self.wrote = True
        self.inner[key] = value

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __getattr__(self, name: str) -> Any:  # anything else goes to the real cache
        return getattr(self.inner, name)

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self):
        return iter(self.inner)


def _note_used(session: AutotuneSession, tuner: Any, inner: Any, proxy: CacheProxy, kernel: str) -> None:
    """Record the config this call ran with, read back from the tuner's cache.

    Reading back, not diffing the cache's key set: a warm cache (LibTuner's sqlite,
    Triton's disk cache) takes the cached branch and inserts no key."""
    cfg = proxy.forced
    if cfg is None:
        if not proxy.wrote and (kernel, proxy.keystr) in session.seen_cfg:
            return  # warm hit on a key already recorded: skip the re-read (hot path)
        try:
            cfg = inner[proxy.key] if proxy.key in inner else None
        except Exception:
            cfg = None
    if cfg is None:
        cfg = getattr(tuner, "best_config", None)
    if cfg is not None:
        session.note(kernel, proxy.keystr, cfg, getattr(tuner, "configs", ()))


class TunerPatch:
    """Wraps Autotuner.run, every existing subclass that defines run, and -- through
    __init_subclass__ -- every subclass created later (flag_gems and its LibTuner may be
    imported after configure). Every change goes on `stack`; `stack.undo_all()` undoes it."""

    def __init__(self, session: AutotuneSession, stack: PatchStack) -> None:
        self.session = session
        self.stack = stack
        self._kernels: "weakref.WeakKeyDictionary[Any, tuple]" = weakref.WeakKeyDictionary()
        self._running: set = set()   # id() of tuners inside a wrapped run (inner super().run())

    def _info(self, tuner: Any) -> tuple:
        try:
            info = self._kernels.get(tuner)
        except TypeError:  # not weak-referenceable: compute per call
            return kernel_name(tuner), {}
        if info is None:
            info = (kernel_name(tuner), {})
            self._kernels[tuner] = info
        return info

    def wrap(self, original):
        patch = self

        def run(tuner, *args, **kwargs):
            inner = getattr(tuner, "cache", None)
            if id(tuner) in patch._running or inner is None:
                return original(tuner, *args, **kwargs)  # inner super().run(): outer owns it
            kernel, strs = patch._info(tuner)
            proxy = CacheProxy(inner, patch.session, tuner, kernel, strs)
            tuner.cache = proxy
            patch._running.add(id(tuner))
            try:
                return original(tuner, *args, **kwargs)
            finally:
                patch._running.discard(id(tuner))
                if tuner.__dict__.get("cache") is proxy:
                    tuner.cache = inner
                if proxy.keystr is None:
                    if len(getattr(tuner, "configs", ()) or ()) > 1:
                        patch.session.uncaptured.add(kernel)
                else:
                    _note_used(patch.session, tuner, inner, proxy, kernel)

        run._zl_wrapped = True
        run.__wrapped__ = original
        return run

    def patch_class(self, cls: type) -> None:
        own = cls.__dict__.get("run")
        if own is None or getattr(own, "_zl_wrapped", False):
            return
        self.stack.setattr(cls, "run", self.wrap(own))

    def install(self, autotuner_cls: type) -> None:
        self.patch_class(autotuner_cls)
        for sub in _all_subclasses(autotuner_cls):
            self.patch_class(sub)
        orig = autotuner_cls.__dict__.get("__init_subclass__")
        patch = self

        def __init_subclass__(cls, **kw):
            if orig is not None:
                orig.__get__(None, cls)(**kw)
            else:
                super(autotuner_cls, cls).__init_subclass__(**kw)
            patch.patch_class(cls)

        self.stack.setattr(autotuner_cls, "__init_subclass__", classmethod(__init_subclass__))


def _all_subclasses(cls: type) -> List[type]:
    out, todo = [], list(cls.__subclasses__())
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out
