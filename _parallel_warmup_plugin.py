"""pytest plugin: run the autotune sweep on N devices at once, measure on one.

With many shapes nearly all wall time is the autotune sweep, not the measurement.
`PARALLEL_WARMUP_GPUS=N` (N >= 2) shards the yaml's shape list round-robin over N
subprocesses, each pinned to one device through the backend's visibility variable
and recording its own picks (`_autotune_record_plugin`). The picks are merged into
this run's `autotune_records/<op>.json`, and the measurement then runs serially in
this process, on one device, replaying the merge. Artifacts and the latency table
are those of a run without the plugin.

Why these choices:
* Measurement never runs in parallel: N busy cards on one host couple through the
  power cap and cooling, so a card's latency depends on its neighbours. Only the
  decision "which config wins" is parallelised, and the count of keys whose
  winners differ across shards says how much that interference reached the sweep.
* Round-robin, not contiguous chunks: shape lists are usually sorted by size, so
  chunks would put every large (slow to sweep) shape on the same shard.
* Subprocesses, not pytest-xdist: `_device_setup_plugin` may create a device
  context at import, which fork-based workers do not survive, and each shard must
  get its own visibility variable before its runtime starts.
* Shards inherit the parent's device selection: `backend.enumerate_devices()` reads
  an explicit `ZL_PARALLEL_DEVICES` or the inherited visibility variable first, so
  a caller who picked idle cards 5,6 gets shards on 5 and 6, never on 0 and 1.

It steps back to the ordinary serial sweep, each time with its own log line, when:
BENCH_LEVEL is not core, a shard exits non-zero, the yaml has no entry for the op,
fewer than 2 shapes, REPLAY_FROM is set, fewer than 2 devices, or there is no
record dir / autotune plugin to hand the merge to. Unset or < 2: silent no-op.
"""

from __future__ import annotations

from zl import atomic
from zl.term import log as _term_log
import ast
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

GPUS_ENV = "PARALLEL_WARMUP_GPUS"
DEVICES_ENV = "ZL_PARALLEL_DEVICES"
WORKER_ENV = "ZL_PARALLEL_WORKER"
TIMEOUT_ENV = "ZL_PARALLEL_WARMUP_TIMEOUT"
AUTOTUNE_PLUGIN = "_autotune_record_plugin"
_NAME = "[parallel-warmup-plugin]"


def _log(msg: str) -> None:
    _term_log(_NAME, msg)


def _identity(**fields: Any) -> None:
    try:
        from zl.identity import update_identity
        update_identity(**fields)
    except Exception as exc:
        _log(f"run identity not updated ({type(exc).__name__}: {exc})")


class StepBack(Exception):
    """The sweep runs serially instead; `code` goes to run_identity.json."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------ request

def requested_gpus(environ=os.environ) -> int:
    """N from PARALLEL_WARMUP_GPUS; 0 means "not requested" (unset, < 2)."""
    raw = environ.get(GPUS_ENV, "").strip()
    if not raw:
        return 0
    try:
        n = int(raw)
    except ValueError:
        _log(f"!!! {GPUS_ENV}={raw!r} is not an integer; sweeping serially")
        return 0
    return n if n >= 2 else 0


def visible_devices() -> List[str]:
    explicit = os.environ.get(DEVICES_ENV, "").strip() or None
    try:
        from zl.backends import get_backend
        return list(get_backend().enumerate_devices(explicit))
    except Exception as exc:
        _log(f"device enumeration failed ({type(exc).__name__}: {exc})")
        return [d.strip() for d in (explicit or "").split(",") if d.strip()]


def pin_env(env: Dict[str, str], device: str) -> Dict[str, str]:
    try:
        from zl.backends import get_backend
        return get_backend().apply_visibility(env, device)
    except Exception:
        out = dict(env)
        out["CUDA_VISIBLE_DEVICES"] = device
        return out


# ------------------------------------------------------------------ yaml key (static)

def _attr_name(node: Any) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _parse(path: Path) -> Optional[ast.AST]:
    try:
        return ast.parse(path.read_text(errors="replace"))
    except Exception:
        return None


def _class_bases(tree: Optional[ast.AST]) -> Dict[str, List[str]]:
    if tree is None:
        return {}
    return {n.name: [b for b in (_attr_name(x) for x in n.bases) if b]
            for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}


def _sibling_modules(tree: ast.AST, folder: Path) -> List[Path]:
    """Modules of the benchmark package the test imports (`from . import base`,
    `from .base import X`, `from benchmark.base import X`), plus base.py."""
    names = {"base"}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            mod = n.module or ""
            if n.level and not mod:
                names.update(a.name for a in n.names)
            elif n.level or mod.startswith(folder.name + "."):
                names.add(mod.split(".")[-1])
    return [folder / f"{m}.py" for m in sorted(names) if (folder / f"{m}.py").is_file()]


def _benchmark_call(tree: ast.AST, op: str) -> Tuple[str, str, bool]:
    """(class name, op_name, is_backward) of the Benchmark built in `test_<op>`;
    falls back to any constructor called with op_name=<op>."""
    def scan(root: ast.AST, want_name: Optional[str]) -> Optional[Tuple[str, str, bool]]:
        for node in ast.walk(root):
            if not isinstance(node, ast.Call):
                continue
            kws = {k.arg: k.value for k in node.keywords if k.arg}
            v = kws.get("op_name")
            if not (isinstance(v, ast.Constant) and isinstance(v.value, str)):
                continue
            if want_name is not None and v.value != want_name:
                continue
            back = kws.get("is_backward")
            is_back = isinstance(back, ast.Constant) and back.value is True
            return _attr_name(node.func), v.value, is_back
        return None

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == f"test_{op}":
            hit = scan(node, None)
            if hit:
                return hit
    return scan(tree, op) or ("", "", False)


def yaml_key_candidates(test_py: Optional[Path], op: str) -> List[str]:
    """Keys FlagGems' set_shapes would try, in its order: op_name (with `_backward`
    for backward benchmarks), then each class name up the Benchmark chain -- that
    is how BLAS ops reach `BlasBenchmark`. Parsed with `ast`: importing the test
    module would import FlagGems (and initialise a device) in this process.

    Breadth-first over the bases, not a full C3 linearisation: the benchmark
    classes are single-inheritance in practice, and a miss only costs the sharding."""
    out = [op]
    tree = _parse(test_py) if test_py else None
    if tree is None:
        return out
    cls, op_name, is_back = _benchmark_call(tree, op)
    if op_name:
        first = f"{op_name}_backward" if is_back else op_name
        out = [first] + [k for k in (op,) if k != first]
    if not cls:
        return out
    graph = _class_bases(tree)
    for mod in _sibling_modules(tree, test_py.parent):
        for name, bases in _class_bases(_parse(mod)).items():
            graph.setdefault(name, bases)
    queue, seen = [cls], set()
    while queue:
        name = queue.pop(0)
        if not name or name in seen:
            continue
        seen.add(name)
        if name not in out:
            out.append(name)
        queue.extend(graph.get(name, []))
    return out


def read_shapes(shape_file: str, candidates: Sequence[str]) -> Tuple[Dict[str, Any], str, List[Any]]:
    """(whole yaml doc, matched key, shapes); key '' when nothing matched."""
    import yaml
    with open(shape_file) as f:
        doc = yaml.safe_load(f) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"{shape_file}: top level is not a mapping")
    for key in candidates:
        entry = doc.get(key)
        if isinstance(entry, dict) and "shapes" in entry:
            return doc, key, list(entry.get("shapes") or [])
    return doc, "", []


def shard(items: Sequence[Any], n: int) -> List[List[Any]]:
    return [list(items[i::n]) for i in range(n)]


def merge(records: Sequence[Dict[str, Dict[str, Any]]]) -> Tuple[Dict[str, Dict[str, Any]], int, int]:
    """(merged, total keys, conflicts). A key seen by several shards keeps the
    lowest shard's winner; it is a conflict when the winners differ."""
    merged: Dict[str, Dict[str, Any]] = {}
    conflicted = set()
    for rec in records:
        for kernel, keys in rec.items():
            dst = merged.setdefault(kernel, {})
            for key, cfg in keys.items():
                if key not in dst:
                    dst[key] = cfg
                elif dst[key] != cfg:
                    conflicted.add((kernel, key))
    total = sum(len(v) for v in merged.values())
    return merged, total, len(conflicted)


# ------------------------------------------------------------------ argv

def _test_module(args: Sequence[str], cwd: Path) -> Optional[Path]:
    for a in args:
        if a.startswith("-"):
            continue
        p = Path(a.split("::", 1)[0])
        if p.suffix == ".py":
            p = p if p.is_absolute() else cwd / p
            if p.is_file():
                return p
    return None


def child_argv(args: Sequence[str], shape_file: str) -> List[str]:
    out: List[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "--shape_file":
            skip = True
            continue
        if a.startswith("--shape_file="):
            continue
        out.append(a)
    return out + ["--shape_file", shape_file]


# ------------------------------------------------------------------ run shards

def run_shards(shards: List[List[Any]], doc: Dict[str, Any], key: str, op: str, scratch: Path,
               args: Sequence[str], cwd: Path, devices: Sequence[str]) -> Tuple[List[Path], List[int]]:
    """Run one pytest per shard; returns (record dirs, indices that failed)."""
    import yaml
    timeout = float(os.environ.get(TIMEOUT_ENV, "0") or 0) or None
    procs = []
    for i, shapes in enumerate(shards):
        w = scratch / f"shard{i}"
        (w / "autotune_records").mkdir(parents=True)
        sub = dict(doc)
        sub[key] = dict(doc[key], shapes=shapes)
        shape_path = w / "shapes.yaml"
        shape_path.write_text(yaml.safe_dump(sub, sort_keys=False))
        env = pin_env(dict(os.environ), devices[i])
        env.update({
            WORKER_ENV: "1",                                  # no recursion
            "OUT_DIR": str(w),                                # identity/IR stay private
            "ZL_DEVICE": devices[i],
            "ZL_SHAPE_FILE": str(shape_path),
            "FLAGGEMS_PERF_TTGIR_DUMP_DIR": str(w / "ttgir"),
            "FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR": str(w / "autotune_records"),
        })
        env.pop("FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR", None)   # a shard must sweep
        env.pop("ZL_AUTOTUNE_PRESWEPT", None)
        if env.get("ZL_ISOLATE_TUNER_CACHE", "0") == "1":
            # One sqlite per shard: N writers on one store is what isolation avoids.
            fg = w / "flaggems_cache"
            (fg / "config_cache").mkdir(parents=True)
            env["FLAGGEMS_CACHE_DIR"] = str(fg)
            env["FLAGGEMS_DB_URL"] = f"sqlite:///{fg}/config_cache/zl_shard.db"
        log = open(w / "worker.log", "w")
        cmd = [sys.executable, "-m", "pytest"] + child_argv(args, str(shape_path))
        p = subprocess.Popen(cmd, cwd=str(cwd), env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        procs.append((i, p, log, w))
    bad: List[int] = []
    deadline = time.time() + timeout if timeout else None
    try:
        for i, p, log, _ in procs:
            try:
                rc = p.wait(timeout=max(1.0, deadline - time.time()) if deadline else None)
            except subprocess.TimeoutExpired:
                _kill(p)
                rc = -1
            log.close()
            if rc != 0:
                bad.append(i)
    except BaseException:
        for _, p, log, _ in procs:
            _kill(p)
            log.close()
        raise
    return [w / "autotune_records" for _, _, _, w in procs], bad


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=10)
    except Exception:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except Exception:
            pass


# ------------------------------------------------------------------ hooks

def _plan(config) -> Tuple[str, Dict[str, Any], str, List[Any], List[str]]:
    """Everything the sweep needs, or StepBack with the reason."""
    if os.environ.get("FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR", "").strip():
        raise StepBack("replay", "REPLAY_FROM is set: the configs are already pinned, "
                       "nothing to sweep")
    if not os.environ.get("FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR", "").strip():
        raise StepBack("no_record_dir", "FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR is not set, so "
                       "there is nowhere to publish the merged configs")
    if config.pluginmanager.get_plugin(AUTOTUNE_PLUGIN) is None:
        raise StepBack("no_autotune_plugin", f"{AUTOTUNE_PLUGIN} is not loaded "
                       "(ZL_ENABLE_AUTOTUNE=0?), so nothing would replay the merge")
    level = str(_option(config, "level") or os.environ.get("ZL_BENCH_LEVEL", "")
                or "comprehensive").strip().lower()
    if level != "core":
        # At comprehensive FlagGems merges set_more_shapes() -- per-class Python this
        # plugin cannot see -- into the yaml's list. Sharding the yaml alone sweeps a
        # subset (mm: 5 of 29 shapes, 90 AUTOTUNE_REPLAY_FALLBACK reason=key_missing)
        # and every uncovered key then tunes live in a run that claims to replay.
        raise StepBack("bench_level", f"--level {level} merges shapes this plugin cannot "
                       "enumerate (set_more_shapes); sharding a subset would break the "
                       "same-config premise, so sweeping serially instead")
    op = (os.environ.get("ZL_OP") or "").strip()
    if not op:
        raise StepBack("no_op", "ZL_OP is not set; cannot tell which yaml entry to shard")
    shape_file = str(_option(config, "shape_file") or os.environ.get("ZL_SHAPE_FILE", "") or "")
    if not shape_file or not Path(shape_file).is_file():
        raise StepBack("no_shape_file", f"no readable --shape_file ({shape_file or 'unset'}); "
                       "sweeping serially")
    cwd = Path(config.invocation_params.dir)
    test_py = _test_module(list(config.invocation_params.args), cwd)
    candidates = yaml_key_candidates(test_py, op)
    try:
        doc, key, shapes = read_shapes(shape_file, candidates)
    except Exception as exc:
        raise StepBack("bad_shape_file", f"cannot read shapes from {shape_file} "
                       f"({type(exc).__name__}: {exc}); sweeping serially")
    if not key:
        raise StepBack("no_yaml_entry", f"no yaml entry for {op!r} in {shape_file} "
                       f"(tried: {', '.join(candidates)}); sweeping serially")
    if len(shapes) < 2:
        raise StepBack("few_shapes", f"only {len(shapes)} shape(s) under yaml key {key!r}; "
                       "sharding would not pay off, sweeping serially")
    devices = visible_devices()
    if len(devices) < 2:
        raise StepBack("few_devices", f"only {len(devices)} device(s) visible "
                       f"({','.join(devices) or 'none'}); need 2 to shard, sweeping serially")
    return op, doc, key, shapes, devices


def _option(config, name: str) -> Any:
    try:
        return config.getoption(name)
    except (ValueError, AttributeError):
        return None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Sweep before any measurement plugin configures (tryfirst), then hand the
    merge to _autotune_record_plugin through ZL_AUTOTUNE_PRESWEPT."""
    if os.environ.get(WORKER_ENV) == "1":
        return
    want = requested_gpus()
    if not want:
        return
    try:
        op, doc, key, shapes, devices = _plan(config)
    except StepBack as sb:
        _log(str(sb))
        _identity(autotune_sweep="serial", autotune_sweep_reason=sb.code)
        return
    n = min(want, len(shapes), len(devices))
    if want > len(devices):
        _log(f"{GPUS_ENV}={want} but only {len(devices)} device(s) visible; using {n}")
    parts = shard(shapes, n)
    scratch = Path(tempfile.mkdtemp(prefix=f"zl_warmup_{op}_"))
    _log(f"sweeping {len(shapes)} shapes (yaml key {key!r}) on {n} devices "
         f"{list(devices[:n])} (shards: {[len(s) for s in parts]}); this phase's latency "
         "is discarded, only configs are kept")
    t0 = time.time()
    keep = True
    try:
        rec_dirs, bad = run_shards(parts, doc, key, op, scratch, list(config.invocation_params.args),
                                   Path(config.invocation_params.dir), devices[:n])
        elapsed = time.time() - t0
        if bad:
            # A dead shard's shapes were never swept; publishing the merge would
            # hand the measurement a config set with holes that silently self-tune.
            _log(f"shard(s) {bad} exited non-zero after {elapsed:.0f}s; their shapes were "
                 "never swept, so the merged configs would have holes. Discarding this "
                 f"sweep and falling back to normal serial autotune (worker logs kept in {scratch})")
            _identity(autotune_sweep="serial", autotune_sweep_reason="shard_failed")
            return
        import _autotune_record_plugin as rec
        merged, total, conflicts = merge([rec.load_records(str(d), op) for d in rec_dirs])
        if not total:
            _log(f"shards recorded no autotune configs after {elapsed:.0f}s (nothing of this "
                 f"op autotunes?); sweeping serially (worker logs kept in {scratch})")
            _identity(autotune_sweep="serial", autotune_sweep_reason="no_records")
            return
        record_dir = os.environ["FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR"]
        atomic.write_json(rec.record_path(record_dir, op), merged)
        rec.write_meta(record_dir, op)
        os.environ[rec.PRESWEPT_ENV] = "1"
        keep = False
        _log(f"sweep done in {elapsed:.0f}s: {len(merged)} kernel(s) / {total} config(s) -> "
             f"{rec.record_path(record_dir, op)}; measurement continues serially on one device")
        if conflicts:
            _log(f"WARNING {conflicts} config key(s) got different winners across shards "
                 "-- parallel interference reached the sweep; rerun without "
                 f"{GPUS_ENV} before drawing conclusions")
        _identity(autotune_sweep=f"parallel:{n}", autotune_sweep_conflicts=conflicts)
    except Exception as exc:
        _log(f"sweep failed ({type(exc).__name__}: {exc}); sweeping serially "
             f"(worker logs kept in {scratch})")
        _identity(autotune_sweep="serial", autotune_sweep_reason="sweep_error")
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)


def pytest_unconfigure(config):
    """Drop the hand-over flag so a later session in this process starts clean."""
    if os.environ.get(WORKER_ENV) != "1":
        os.environ.pop("ZL_AUTOTUNE_PRESWEPT", None)
