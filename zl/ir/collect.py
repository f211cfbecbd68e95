"""What the IR plugin learns while benchmarks run: every compiled variant, and how often
each ran for each benchmark input.

Triton tells us three things through callbacks (installed by `zl.ir.hooks`):
- the compilation listener: a variant's kernel name, constexprs, signature,
  specialisation, num_warps/num_stages and where its IR sits in TRITON_CACHE_DIR;
- `kernel_load_end_hook`: which function handle belongs to which compile hash;
- `launch_enter_hook`: a launch, carrying only the kernel name and function handle
  (no arguments), hence the handle -> hash map.
The shape a launch belongs to is the benchmark's own input (`track_inputs` labels it
with the input's tensor shapes), not a guess from launch arguments the hook never sees.
`kernel_load_end_hook` runs right after the driver loaded the binary, which is when Triton
learns the kernel's registers and spills (`loaded_resources`).
Launches made while input N is being built (a randn kernel, say) are held and credited
to input N once it exists; launches outside any input go to `unscoped/`. Launches inside
the autotune sweep (`sweep_depth > 0`) are counted apart, so losers are indexed, not dumped.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
import threading
from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

from zl.ir import RULES  # noqa: F401  (re-exported: the collector's rules, zl.ir)
from zl.ir import dump as _dump
from zl.ir import levels as _levels
from zl.ir.variants import variant_record
from zl.term import log as _term_log

TAG = "[ir-meta-plugin]"
LEVELS_ENV = "ZL_IR_LEVELS"
UNSCOPED = "unscoped"
LABEL_MAX = 120
# Binary / metadata artefacts in the cache group: not text IR.
_NOT_LEVELS = ("cubin", "hsaco", "json", "mubin", "so", "o", "bin", "source")


class IRLevelsError(ValueError):
    """ZL_IR_LEVELS names something that is not a text IR level."""


def log(message: str) -> None:
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


# How far up from the load hook the CompiledKernel's _init_handles frame may sit: the hook,
# a HookChain (triton >= 3.4) or a chained callable, another tool's wrapper or two.
LOAD_FRAMES = 6


def loaded_resources(h: str) -> Dict[str, int]:
    """{'n_regs', 'n_spills'} of the kernel whose binary was just loaded, or {} (not recorded).

    Triton (3.4-3.9) gets both from the driver's `load_binary` in
    `CompiledKernel._init_handles`, sets them on the kernel, then calls
    `kernel_load_end_hook(module, function, name, metadata_group, hash)` without the kernel
    object. So the kernel is found on the stack: the `self` of a calling frame whose `hash`
    is this one. Anything else (a replayed payload, a Triton that loads otherwise) records
    nothing, which reports read as "not recorded", never as 0. On NVIDIA `n_spills` is the
    thread's local memory in 4-byte words (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES / 4).
    """
    frame = sys._getframe(1)
    for _ in range(LOAD_FRAMES):
        if frame is None:
            break
        kernel = frame.f_locals.get("self")
        try:
            if kernel is not None and str(getattr(kernel, "hash", "")) == h:
                out = {}
                for field in ("n_regs", "n_spills"):
                    value = getattr(kernel, field, None)
                    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                        out[field] = value
                return out
        except Exception:  # an object whose attribute lookup raises is not our kernel
            pass
        frame = frame.f_back
    return {}


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
        label = label[:100] + "-h" + hashlib.sha1(label.encode()).hexdigest()[:8]
    return label


class IRCollector:
    """Everything the IR plugin learns in one process, and the dump of it."""

    def __init__(self, dump_dir: Optional[str], levels: Optional[List[str]] = None):
        self.dump_dir = dump_dir
        self.levels = levels or ["ttgir"]
        self.variants: Dict[str, Dict[str, Any]] = {}
        self.functions: Dict[Any, str] = {}
        self.counts: Dict[Tuple[str, str], List[int]] = defaultdict(lambda: [0, 0])
        self.unknown_names: Dict[str, str] = {}
        self.loaded_by_name: Dict[str, set] = defaultdict(set)
        self.resources: Dict[str, Dict[str, int]] = {}   # hash -> loaded_resources()
        self.label = UNSCOPED
        self.pending: Optional[Dict[str, List[int]]] = None
        self.sweep_depth = 0
        self.pid = os.getpid()
        self.dumped = False
        self.errors = 0
        self._lock = threading.Lock()
        # Host seconds inside our Triton callbacks: a graph capture of a microsecond kernel
        # launches it ~rep/estimate (20000) times, each through on_launch; the dump line says
        # how long they took (with `launches`), so a run's extra time can be placed.
        self.hook_s = 0.0
        # Launches inside torch's CUDAGraph.capture_begin (its RNG seed/offset fill_, which
        # FlagGems runs under use_gems(): fill_scalar_kernel, 2 per shape on the H200): the
        # harness's, not the operator's, so indexed apart and never fingerprinted.
        self.prologue_depth = 0
        self.prologue: Dict[Tuple[str, str], int] = defaultdict(int)

    # --- Triton callbacks (must never raise into Triton) -------------------------
    def on_compile(self, *, src=None, metadata=None, metadata_group=None, times=None, cache_hit=None, **_extra):
        t0 = time.perf_counter()
        try:
            rec = variant_record(src, metadata, metadata_group, cache_hit)
            if rec["hash"]:
                with self._lock:
                    self.variants[rec["hash"]] = rec
        except Exception as exc:
            self._note_error(f"compile listener: {exc!r}")
        self.hook_s += time.perf_counter() - t0

    def on_kernel_load(self, module=None, function=None, name=None, metadata_group=None, hash=None, *_a, **_k):
        try:
            if function is not None and hash:
                self.functions[function] = str(hash)
            if name and hash:
                self.loaded_by_name[str(name)].add(str(hash))
            if hash and str(hash) not in self.resources:
                self.resources[str(hash)] = loaded_resources(str(hash))
        except Exception as exc:  # unhashable handle on some backend
            self._note_error(f"kernel load hook: {exc!r}")

    def on_launch(self, metadata=None, *_a, **_k):
        t0 = time.perf_counter()
        try:
            data = getattr(metadata, "data", metadata) or {}
            h = self.functions.get(data.get("function"))
            if h is None:
                h = self._hash_by_name(str(data.get("name") or "unknown_kernel"))
            slot = 1 if self.sweep_depth > 0 else 0
            if self.prologue_depth > 0:
                self.prologue[(self.label, h)] += 1
            elif self.pending is not None:
                self.pending.setdefault(h, [0, 0])[slot] += 1
            else:
                self.counts[(self.label, h)][slot] += 1
        except Exception as exc:
            self._note_error(f"launch hook: {exc!r}")
        self.hook_s += time.perf_counter() - t0

    @property
    def launches(self) -> int:
        """Launches seen so far: the measured, sweep, pending and capture-prologue counts."""
        return (sum(n + sw for n, sw in self.counts.values())
                + sum(n + sw for n, sw in (self.pending or {}).values()) + sum(self.prologue.values()))

    def _hash_by_name(self, name: str) -> str:
        # A launch payload without a known function handle: the name is enough only
        # while a single variant of that kernel is loaded; otherwise it is never guessed.
        loaded = self.loaded_by_name.get(name)
        if loaded and len(loaded) == 1:
            return next(iter(loaded))
        key = f"unseen:{name}"
        self.unknown_names[key] = name
        return key

    def _note_error(self, message: str) -> None:
        self.errors += 1
        if self.errors <= 3:
            log(f"ignored error in {message}")

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
        t_dump = time.perf_counter()
        with self._lock:
            counts = {k: tuple(v) for k, v in self.counts.items()}
            variants = {h: {**v, **self.resources.get(h, {})} for h, v in self.variants.items()}
            prologue = dict(self.prologue)
        try:
            summary = _dump.write_tree(self.dump_dir, variants, counts, self.levels, self.unknown_names,
                                       prologue)
        except Exception as exc:
            log(f"IR dump to {self.dump_dir} failed ({exc!r}); run continues without it")
            return None
        try:  # every level's hash (ttgir..binary) for the screen verdict, whatever was dumped
            t0 = time.perf_counter()
            summary["fingerprints"] = _levels.record(self.dump_dir, variants)["levels"]
            log(f"IR fingerprints {','.join(summary['fingerprints']) or 'none'} recorded in "
                f"{(time.perf_counter() - t0) * 1e3:.1f} ms")
        except Exception as exc:
            log(f"IR fingerprints not recorded ({exc!r}); the verdict falls back to dumped files")
        extra = f", TTGIR missing from cache for {len(summary['missing'])}" if summary["missing"] else ""
        log(f"dumped {summary['files']} TTGIR file(s) for {len(variants)} compiled variant(s) "
            f"over {summary['shapes']} shape dir(s) to {self.dump_dir} ({reason}){extra}")
        log(f"IR plugin spent {self.hook_s:.3f} s in Triton callbacks over {self.launches} launch(es) "
            f"and {time.perf_counter() - t_dump:.3f} s writing the dump")
        return summary
