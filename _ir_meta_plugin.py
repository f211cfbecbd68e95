"""Dump the TTGIR each benchmark shape really ran, with readable variant names.

Mechanism (all chained onto what is already installed, all undone at unconfigure):
- `triton.knobs.compilation.listener` records every compiled variant: kernel name,
  constexprs, signature/dtypes, specialisation (divisibility attributes),
  num_warps/num_stages and where its TTGIR sits in TRITON_CACHE_DIR.
- `knobs.runtime.kernel_load_end_hook` maps the loaded function handle to the
  variant's compile hash; `launch_enter_hook` then counts launches per
  (shape, variant). The launch payload carries only the kernel name and function
  handle (no arguments), hence the handle -> hash map.
- The shape: `Benchmark.run` is wrapped so that, for that call, the instance's
  `get_input_iter` yields through a tracker. Launches made while the benchmark
  builds input N (a randn kernel, say) are held and credited to input N once it is
  produced; launches after that belong to N until input N+1 is requested. The
  label is the benchmark's own input (its tensor shapes), not a guess from launch
  arguments, which the hook never sees. Launches outside any benchmark input
  (imports, a Benchmark subclass that overrides run()) go to `unscoped/`.
- `Autotuner._bench` is wrapped to tell sweep launches (autotune candidates) from
  measured ones: losers that only ran in the sweep are indexed, not dumped.
- The dump runs at pytest_unconfigure and, as a backstop, at interpreter exit
  (atexit), so a run that dies after compiling still leaves its IR.

Switches: FLAGGEMS_PERF_TTGIR_DUMP_DIR (run_pytest.sh sets `<run>/ttgir`) enables
the dump; ZL_ENABLE_IR=0 disables the plugin; ZL_IR_LEVELS=ttgir,llir,ptx dumps
more levels beside the TTGIR (switches that act after TTGIR, e.g. DISABLE_LLVM_OPT,
only show there). A Triton without knobs/hooks: one log line, collection off, the
run continues. Cost: one dict lookup per launch on the host; both sides of an A/B
carry it.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import sys
import threading
from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

_ROOT = os.path.dirname(os.path.abspath(__file__))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from zl.term import log as _term_log  # noqa: E402
from zl.ir import dump as _dump  # noqa: E402
from zl.switches import env_switch  # noqa: E402
from zl.flaggems import find_benchmark_bases  # noqa: E402
from zl.ir.variants import variant_record  # noqa: E402
from zl.ir import levels as _levels  # noqa: E402

TAG = "[ir-meta-plugin]"
DUMP_DIR_ENV = "FLAGGEMS_PERF_TTGIR_DUMP_DIR"
ENABLE_ENV = "ZL_ENABLE_IR"
LEVELS_ENV = "ZL_IR_LEVELS"
UNSCOPED = "unscoped"
LABEL_MAX = 120
# Binary / metadata artefacts in the cache group: not text IR.
_NOT_LEVELS = ("cubin", "hsaco", "json", "mubin", "so", "o", "bin", "source")


class IRLevelsError(ValueError):
    """ZL_IR_LEVELS names something that is not a text IR level."""


def _log(message: str) -> None:
    _term_log(TAG, message)


def parse_levels(raw: Optional[str]) -> List[str]:
    """`ttgir,llir,ptx` -> ['ttgir', 'llir', 'ptx']; ttgir is always first."""
    levels = ["ttgir"]
    for item in (raw or "").replace(" ", ",").split(","):
        item = item.strip().lower()
        if not item:
            continue
        if not re.fullmatch(r"[a-z][a-z0-9_]*", item) or item in _NOT_LEVELS:
            raise IRLevelsError(
                f"{LEVELS_ENV}: {item!r} is not a text IR level (use e.g. ttir,ttgir,llir,ptx,amdgcn)")
        if item not in levels:
            levels.append(item)
    return levels


def shape_label(item: Any) -> str:
    """Directory name for one benchmark input: its tensor shapes, `_`-joined.

    `(x[1024,1024], dim)` -> `1024x1024`; `(a[64,128], b[128,32])` -> `64x128_128x32`;
    a 0-d tensor is `scalar`. Non-tensor values (dims, flags) are left out, so inputs
    that differ only by them share a directory and are told apart by variant name.
    """
    shapes: List[str] = []

    def walk(obj: Any, depth: int = 0) -> None:
        if depth > 4:
            return
        shape = getattr(obj, "shape", None)
        if shape is not None and hasattr(obj, "dtype"):
            try:
                dims = [int(d) for d in shape]
            except (TypeError, ValueError):
                return
            shapes.append("x".join(str(d) for d in dims) if dims else "scalar")
        elif isinstance(obj, (list, tuple)):
            for sub in obj:
                walk(sub, depth + 1)
        elif isinstance(obj, dict):
            for sub in obj.values():
                walk(sub, depth + 1)

    walk(item)
    label = "_".join(shapes) if shapes else "noshape"
    if len(label) > LABEL_MAX:
        import hashlib
        label = label[:100] + "-h" + hashlib.sha1(label.encode()).hexdigest()[:8]
    return label


class IRCollector:
    """Everything the plugin learns in one process, and the dump of it."""

    def __init__(self, dump_dir: Optional[str], levels: Optional[List[str]] = None):
        self.dump_dir = dump_dir
        self.levels = levels or ["ttgir"]
        self.variants: Dict[str, Dict[str, Any]] = {}
        self.functions: Dict[Any, str] = {}
        self.counts: Dict[Tuple[str, str], List[int]] = defaultdict(lambda: [0, 0])
        self.unknown_names: Dict[str, str] = {}
        self.loaded_by_name: Dict[str, set] = defaultdict(set)
        self.label = UNSCOPED
        self.pending: Optional[Dict[str, List[int]]] = None
        self.sweep_depth = 0
        self.pid = os.getpid()
        self.dumped = False
        self.errors = 0
        self._lock = threading.Lock()

    # --- Triton callbacks (must never raise into Triton) -------------------------
    def on_compile(self, *, src=None, metadata=None, metadata_group=None, times=None, cache_hit=None, **_extra):
        try:
            rec = variant_record(src, metadata, metadata_group, cache_hit)
            if rec["hash"]:
                with self._lock:
                    self.variants[rec["hash"]] = rec
        except Exception as exc:
            self._note_error(f"compile listener: {exc!r}")

    def on_kernel_load(self, module=None, function=None, name=None, metadata_group=None, hash=None, *_a, **_k):
        try:
            if function is not None and hash:
                self.functions[function] = str(hash)
            if name and hash:
                self.loaded_by_name[str(name)].add(str(hash))
        except Exception as exc:  # unhashable handle on some backend
            self._note_error(f"kernel load hook: {exc!r}")

    def on_launch(self, metadata=None, *_a, **_k):
        try:
            data = getattr(metadata, "data", metadata) or {}
            h = self.functions.get(data.get("function"))
            if h is None:
                name = str(data.get("name") or "unknown_kernel")
                # A launch payload without a known function handle: the name is enough
                # only while a single variant of that kernel is loaded.
                loaded = self.loaded_by_name.get(name)
                if loaded and len(loaded) == 1:
                    h = next(iter(loaded))
                else:
                    h = f"unseen:{name}"
                    self.unknown_names[h] = name
            slot = 1 if self.sweep_depth > 0 else 0
            if self.pending is not None:
                self.pending.setdefault(h, [0, 0])[slot] += 1
            else:
                self.counts[(self.label, h)][slot] += 1
        except Exception as exc:
            self._note_error(f"launch hook: {exc!r}")

    def _note_error(self, message: str) -> None:
        self.errors += 1
        if self.errors <= 3:
            _log(f"ignored error in {message}")

    # --- shape tracking ------------------------------------------------------------
    def begin_input(self) -> None:
        self.pending = {}

    def end_input(self, label: Optional[str]) -> None:
        pending, self.pending = self.pending or {}, None
        self.label = label if label is not None else UNSCOPED
        for h, (n, s) in pending.items():
            slot = self.counts[(self.label, h)]
            slot[0] += n
            slot[1] += s

    def track_inputs(self, iterator):
        """Yield from a benchmark's input iterator, labelling launches by input."""
        it = iter(iterator)
        try:
            while True:
                self.begin_input()
                try:
                    item = next(it)
                except StopIteration:
                    self.end_input(UNSCOPED)
                    return
                except BaseException:
                    self.end_input(UNSCOPED)
                    raise
                self.end_input(shape_label(item))
                yield item
        finally:
            if self.pending is not None:
                self.end_input(UNSCOPED)
            self.label = UNSCOPED

    # --- dump ---------------------------------------------------------------------
    def dump(self, reason: str = "exit") -> Optional[Dict[str, Any]]:
        """Write the tree once; a forked child (other pid) never writes."""
        if self.dumped or not self.dump_dir or os.getpid() != self.pid:
            return None
        self.dumped = True
        with self._lock:
            counts = {k: tuple(v) for k, v in self.counts.items()}
            variants = dict(self.variants)
        try:
            summary = _dump.write_tree(self.dump_dir, variants, counts, self.levels, self.unknown_names)
        except Exception as exc:
            _log(f"IR dump to {self.dump_dir} failed ({exc!r}); run continues without it")
            return None
        try:  # every level's hash (ttgir..binary) for the screen verdict, whatever was dumped
            import time
            t0 = time.perf_counter()
            summary["fingerprints"] = _levels.record(self.dump_dir, variants)["levels"]
            _log(f"IR fingerprints {','.join(summary['fingerprints']) or 'none'} recorded in "
                 f"{(time.perf_counter() - t0) * 1e3:.1f} ms")
        except Exception as exc:
            _log(f"IR fingerprints not recorded ({exc!r}); the verdict falls back to dumped files")
        extra = f", TTGIR missing from cache for {len(summary['missing'])}" if summary["missing"] else ""
        _log(f"dumped {summary['files']} TTGIR file(s) for {len(variants)} compiled variant(s) "
             f"over {summary['shapes']} shape dir(s) to {self.dump_dir} ({reason}){extra}")
        return summary


class _Installer:
    """Installs/restores the Triton callbacks and the Benchmark/Autotuner wrappers."""

    def __init__(self, collector: IRCollector):
        self.collector = collector
        self.undo: List[Any] = []
        self.patched_benchmarks: List[type] = []

    def install(self, triton_mod) -> Optional[str]:
        """Returns None on success, else why collection is off (nothing left installed)."""
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
        self._chain_listener(compilation)
        self._add_hook(runtime, "kernel_load_end_hook", self.collector.on_kernel_load)
        self._add_hook(runtime, "launch_enter_hook", self.collector.on_launch)
        self._wrap_autotuner(triton_mod)
        return None

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

        def restore():
            if compilation.listener is new:
                compilation.listener = prev
        self.undo.append(restore)

    def _add_hook(self, runtime, name: str, func) -> None:
        current = getattr(runtime, name)
        if hasattr(current, "add") and hasattr(current, "remove"):  # HookChain (triton >= 3.4)
            current.add(func)
            self.undo.append(lambda: current.remove(func))
            return
        if current is None:
            new = func
        else:
            def new(*args, **kwargs):
                current(*args, **kwargs)
                func(*args, **kwargs)
        setattr(runtime, name, new)

        def restore():
            if getattr(runtime, name) is new:
                setattr(runtime, name, current)
        self.undo.append(restore)

    def _wrap_autotuner(self, triton_mod) -> None:
        try:
            from triton.runtime.autotuner import Autotuner
        except Exception:
            Autotuner = getattr(getattr(triton_mod, "runtime", None), "Autotuner", None)
        orig = getattr(Autotuner, "_bench", None) if Autotuner is not None else None
        if orig is None:
            _log("Autotuner._bench not found: sweep launches are counted as measured launches")
            return
        collector = self.collector

        @functools.wraps(orig)
        def _bench(self, *args, **kwargs):
            collector.sweep_depth += 1
            try:
                return orig(self, *args, **kwargs)
            finally:
                collector.sweep_depth -= 1
        Autotuner._bench = _bench
        self.undo.append(lambda: setattr(Autotuner, "_bench", orig))

    def patch_benchmarks(self) -> None:
        """Wrap `run` of each loaded FlagGems Benchmark base class once."""
        for cls in find_benchmark_bases("run", "get_input_iter"):
            if cls not in self.patched_benchmarks:
                self._wrap_run(cls)

    def _wrap_run(self, cls: type) -> None:
        orig = cls.__dict__.get("run")
        if orig is None:
            return
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
        cls.run = run
        self.patched_benchmarks.append(cls)
        self.undo.append(lambda: setattr(cls, "run", orig))

    def uninstall(self) -> None:
        while self.undo:
            undo = self.undo.pop()
            try:
                undo()
            except Exception as exc:
                _log(f"restore failed: {exc!r}")
        self.patched_benchmarks.clear()


_state: Dict[str, Any] = {"collector": None, "installer": None}


def _enabled() -> bool:
    return env_switch(ENABLE_ENV, True)


def _atexit_dump() -> None:
    collector = _state.get("collector")
    if collector is not None:
        collector.dump("atexit")


def activate(triton_mod=None, dump_dir: Optional[str] = None, levels: Optional[List[str]] = None) -> Optional[IRCollector]:
    """Install the collector (used by pytest_configure and by the H200 capture script)."""
    if triton_mod is None:
        try:
            import triton as triton_mod
        except Exception as exc:
            _log(f"triton not importable ({exc}); IR collection off")
            return None
    collector = IRCollector(dump_dir, levels)
    installer = _Installer(collector)
    why = installer.install(triton_mod)
    if why is not None:
        installer.uninstall()
        _log(f"{why} (triton {getattr(triton_mod, '__version__', '?')}); IR collection off, run continues")
        return None
    _state.update(collector=collector, installer=installer)
    atexit.register(_atexit_dump)
    return collector


def deactivate(reason: str = "unconfigure") -> Optional[Dict[str, Any]]:
    collector, installer = _state.get("collector"), _state.get("installer")
    summary = collector.dump(reason) if collector is not None else None
    if installer is not None:
        installer.uninstall()
    try:
        atexit.unregister(_atexit_dump)
    except Exception:
        pass
    _state.update(collector=None, installer=None)
    return summary


def pytest_configure(config):
    """Chain the listener and hooks when IR collection is on."""
    if not _enabled():
        return
    dump_dir = os.environ.get(DUMP_DIR_ENV, "").strip()
    if not dump_dir:
        return
    import pytest
    try:
        levels = parse_levels(os.environ.get(LEVELS_ENV, ""))
    except IRLevelsError as exc:
        raise pytest.UsageError(str(exc))
    activate(dump_dir=os.path.abspath(dump_dir), levels=levels)


def pytest_runtest_setup(item):
    """Wrap Benchmark.run once the benchmark module is imported."""
    installer = _state.get("installer")
    if installer is not None:
        installer.patch_benchmarks()


def pytest_unconfigure(config):
    """Dump what ran, then restore every wrapped callback and method."""
    deactivate("unconfigure")
