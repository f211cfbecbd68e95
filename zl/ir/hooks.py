"""Attach an `IRCollector` to Triton and to FlagGems' Benchmark, and take it off again.

Everything is chained onto what is already installed (another tool's listener or hook
keeps running) and recorded on one `PatchStack`, so `IRSession.close` leaves Triton and
FlagGems exactly as it found them:
- `triton.knobs.compilation.listener` (chained: the previous listener runs first);
- `knobs.runtime.kernel_load_end_hook` / `launch_enter_hook` (a HookChain entry on
  triton >= 3.4, a chained callable before);
- `Autotuner._bench`, to tell sweep launches from measured ones, and each tuner's
  `pre_hook` once it has tuned: its `reset_only` call after the sweep is tuning too;
- `Benchmark.run` of each loaded FlagGems benchmark base, so that for that call the
  instance's `get_input_iter` yields through `IRCollector.track_inputs`.
The dump also runs at interpreter exit (atexit) as a backstop, so a run that dies
after compiling still leaves its IR; `close` removes that backstop.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
from typing import Any, Dict, List, Optional

from zl.flaggems import find_benchmark_bases
from zl.ir.collect import UNSCOPED, IRCollector, log
from zl.patching import PatchStack


def missing_knobs(triton_mod) -> Optional[str]:
    """Why this Triton cannot feed the collector, or None when it can."""
    knobs = getattr(triton_mod, "knobs", None)
    compilation = getattr(knobs, "compilation", None)
    runtime = getattr(knobs, "runtime", None)
    if knobs is None or compilation is None or runtime is None:
        return "triton.knobs (compilation/runtime) missing"
    if not hasattr(compilation, "listener"):
        return "triton.knobs.compilation.listener missing"
    for name in ("kernel_load_end_hook", "launch_enter_hook"):
        if not hasattr(runtime, name):
            return f"triton.knobs.runtime.{name} missing"
    return None


class TritonHooks:
    """Installs the collector's callbacks and wrappers; `uninstall` undoes all of them."""

    def __init__(self, collector: IRCollector):
        self.collector = collector
        self.patches = PatchStack()
        self.patched_benchmarks: List[type] = []

    def install(self, triton_mod) -> Optional[str]:
        """Returns None on success, else why collection is off (nothing installed then)."""
        why = missing_knobs(triton_mod)
        if why is not None:
            return why
        runtime = triton_mod.knobs.runtime
        self._chain_listener(triton_mod.knobs.compilation)
        self._add_hook(runtime, "kernel_load_end_hook", self.collector.on_kernel_load)
        self._add_hook(runtime, "launch_enter_hook", self.collector.on_launch)
        self._wrap_autotuner(triton_mod)
        self._wrap_graph_capture()
        return None

    def _wrap_graph_capture(self) -> None:
        """Mark launches made inside torch's CUDAGraph.capture_begin as the capture prologue's."""
        try:
            from torch.cuda.graphs import CUDAGraph
        except Exception:
            return  # no torch.cuda: nothing captures
        self._count_depth(CUDAGraph, "capture_begin", "prologue_depth")

    @contextlib.contextmanager
    def _raised(self, depth: str):
        """The collector's `depth` counter raised for the stretch (unwound on an exception)."""
        collector = self.collector
        setattr(collector, depth, getattr(collector, depth) + 1)
        try:
            yield
        finally:
            setattr(collector, depth, getattr(collector, depth) - 1)

    def _count_depth(self, cls: type, method: str, depth: str, on_enter=None) -> bool:
        """Wrap cls.method so the collector's `depth` counter is raised while it runs
        (`on_enter(obj)` first, where given)."""
        orig = getattr(cls, method, None)
        if orig is None:
            return False

        @functools.wraps(orig)
        def wrapper(obj, *args, **kwargs):
            if on_enter is not None:
                on_enter(obj)
            with self._raised(depth):
                return orig(obj, *args, **kwargs)
        self.patches.setattr(cls, method, wrapper)
        return True

    def _chain_listener(self, compilation) -> None:
        prev = compilation.listener
        ours = self.collector.on_compile
        if prev is None:
            new = ours
        else:
            def new(**kwargs):
                try:
                    prev(**kwargs)
                finally:
                    ours(**kwargs)
        compilation.listener = new
        self.patches.push(lambda: self._put_back(compilation, "listener", new, prev))

    @staticmethod
    def _put_back(target: Any, name: str, ours: Any, previous: Any) -> None:
        # Only while ours is still the installed one: a tool that chained onto us later
        # keeps its own entry (dropping it would silently remove that tool's callback).
        if getattr(target, name) is ours:
            setattr(target, name, previous)

    def _add_hook(self, runtime, name: str, func) -> None:
        current = getattr(runtime, name)
        if hasattr(current, "add") and hasattr(current, "remove"):  # HookChain (triton >= 3.4)
            current.add(func)
            self.patches.push(lambda: current.remove(func))
            return
        if current is None:
            new = func
        else:
            def new(*args, **kwargs):
                current(*args, **kwargs)
                func(*args, **kwargs)
        setattr(runtime, name, new)
        self.patches.push(lambda: self._put_back(runtime, name, new, current))

    def _wrap_autotuner(self, triton_mod) -> None:
        try:
            from triton.runtime.autotuner import Autotuner
        except Exception:
            Autotuner = getattr(getattr(triton_mod, "runtime", None), "Autotuner", None)
        if Autotuner is None or not self._count_depth(Autotuner, "_bench", "sweep_depth", self._reset_is_sweep):
            log("Autotuner._bench not found: sweep launches are counted as measured launches")

    def _reset_is_sweep(self, tuner: Any) -> None:
        """After its sweep, Triton's Autotuner (and FlagGems' LibTuner) calls
        `pre_hook(nargs, reset_only=True)` outside `_bench` to zero its `reset_to_zero`
        tensors once more. That launch (FlagGems' zero_: fill_scalar_kernel) happens only in a
        run that tunes, never in a replay, so counted as the operator's it made side A's IR
        differ from side B's (an H100 screen read adaptive_max_pool3d_backward IR_CHANGED@ttgir,
        fill_scalar_kernel on side A only).
        It is tuning: counted as the sweep's. Wrapped once per tuner, undone at close."""
        hook = getattr(tuner, "pre_hook", None)
        if not callable(hook) or getattr(hook, "_zl_reset_is_sweep", False):
            return

        def pre_hook(*args, **kwargs):
            if not kwargs.get("reset_only"):
                return hook(*args, **kwargs)
            with self._raised("sweep_depth"):
                return hook(*args, **kwargs)
        pre_hook._zl_reset_is_sweep = True
        try:
            self.patches.setattr(tuner, "pre_hook", pre_hook)
        except (AttributeError, TypeError) as exc:   # a tuner with slots or a read-only hook
            self.collector._note_error(f"wrapping {type(tuner).__name__}.pre_hook (its post-sweep "
                                       f"reset counts as the operator's): {exc!r}")

    def patch_benchmarks(self) -> None:
        """Wrap `run` of each loaded FlagGems Benchmark base class once."""
        for cls in find_benchmark_bases("run", "get_input_iter"):
            if cls not in self.patched_benchmarks and "run" in cls.__dict__:
                self.patches.setattr(cls, "run", self._tracking_run(cls.__dict__["run"]))
                self.patched_benchmarks.append(cls)

    def _tracking_run(self, orig):
        collector = self.collector

        @functools.wraps(orig)
        def run(bench, *args, **kwargs):
            had = "get_input_iter" in bench.__dict__
            saved = bench.__dict__.get("get_input_iter")
            inner = bench.get_input_iter

            def get_input_iter(*a, **k):
                return collector.track_inputs(inner(*a, **k))
            bench.get_input_iter = get_input_iter
            try:
                return orig(bench, *args, **kwargs)
            finally:
                if had:
                    bench.get_input_iter = saved
                else:
                    bench.__dict__.pop("get_input_iter", None)
                collector.label = UNSCOPED
        return run

    def uninstall(self) -> None:
        try:
            self.patches.undo_all()
        except Exception as exc:
            log(f"restore failed: {exc!r}")
        self.patched_benchmarks.clear()


class IRSession:
    """One collector attached to Triton for one session (a pytest run or a capture script)."""

    def __init__(self, collector: IRCollector, hooks: TritonHooks):
        self.collector = collector
        self.hooks = hooks
        self.closed = False
        atexit.register(self._atexit_dump)

    @classmethod
    def start(cls, triton_mod=None, dump_dir: Optional[str] = None,
              levels: Optional[List[str]] = None) -> Optional["IRSession"]:
        """Attach a collector; None (after one log line) when Triton cannot feed it."""
        if triton_mod is None:
            try:
                import triton as triton_mod
            except Exception as exc:
                log(f"triton not importable ({exc}); IR collection off")
                return None
        collector = IRCollector(dump_dir, levels)
        hooks = TritonHooks(collector)
        why = hooks.install(triton_mod)
        if why is not None:
            hooks.uninstall()
            log(f"{why} (triton {getattr(triton_mod, '__version__', '?')}); IR collection off, run continues")
            return None
        return cls(collector, hooks)

    def patch_benchmarks(self) -> None:
        self.hooks.patch_benchmarks()

    def _atexit_dump(self) -> None:
        self.collector.dump("atexit")

    def close(self, reason: str = "unconfigure") -> Optional[Dict[str, Any]]:
        """Dump what ran, then restore every wrapped callback and method (once)."""
        if self.closed:
            return None
        self.closed = True
        summary = self.collector.dump(reason)
        self.hooks.uninstall()
        atexit.unregister(self._atexit_dump)
        return summary
