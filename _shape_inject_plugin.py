"""Make the shape yaml win over shapes a Benchmark subclass hardcodes, and record
the shapes each benchmark really used in `$OUT_DIR/shapes.yaml`.

Upstream only reads the yaml in `Benchmark.set_shapes`; about 200 subclasses
override `set_shapes` with literal shapes, so a user's SHAPE_FILE silently does
nothing for them. After `init_user_config` (which calls `set_shapes`), this
plugin looks the yaml up the same way upstream does — `op_name`, then each class
name along the MRO — and replaces `self.shapes` with that entry.

It steps back, saying so, where the yaml entry has a different arity from the
class's own shapes (e.g. the catch-all `Benchmark:` key reaching a BLAS class
whose shapes are (B, M, N, K)): feeding those shapes would crash the input
builder or, worse, measure something else. With SHAPE_MODE=upstream it changes
nothing and only records.

The effective shapes are written to `$OUT_DIR/shapes.yaml` (valid as a SHAPE_FILE
for a rerun); the yaml the run was started with is kept as `shapes.source.yaml`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from zl import atomic

from zl.term import log
from zl.flaggems import BenchmarkMethodPatch

TAG = "[shape-inject-plugin]"

_effective: Dict[str, Dict[str, Any]] = {}
_yaml_cache: Dict[str, Any] = {}


def _arity(shape: Any) -> int:
    return len(shape) if isinstance(shape, (list, tuple)) else 1


def _as_tuple(shape: Any) -> Any:
    return tuple(shape) if isinstance(shape, (list, tuple)) else shape


def load_yaml(path: str) -> Dict[str, Any]:
    if path not in _yaml_cache:
        with open(path, "r", encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
        _yaml_cache[path] = data if isinstance(data, dict) else {}
    return _yaml_cache[path]


def lookup(config: Dict[str, Any], op_name: str, cls: type) -> Tuple[Optional[str], Optional[dict], List[str]]:
    """Upstream's lookup order: op_name, then class names along the MRO."""
    tried = [op_name] + [c.__name__ for c in cls.__mro__ if c is not object]
    for key in tried:
        entry = config.get(key)
        if isinstance(entry, dict) and entry.get("shapes") is not None:
            return key, entry, tried
    return None, None, tried


def decide(current: List[Any], entry_shapes: List[Any]) -> Tuple[str, List[Any]]:
    """-> (decision, shapes): 'same' | 'override' | 'arity_mismatch'."""
    wanted = [_as_tuple(s) for s in entry_shapes]
    have = [_as_tuple(s) for s in (current or [])]
    if have == wanted:
        return "same", wanted
    have_arities = {_arity(s) for s in have}
    want_arities = {_arity(s) for s in wanted}
    if have and have_arities != want_arities:
        return "arity_mismatch", have
    return "override", wanted


def _record(bench: Any, source: str, key: Optional[str]) -> None:
    op = str(getattr(bench, "op_name", "") or type(bench).__name__)
    shapes = [list(s) if isinstance(s, tuple) else s for s in (getattr(bench, "shapes", None) or [])]
    _effective[op] = {"shapes": shapes, "shape_desc": getattr(bench, "shape_desc", ""),
                      "source": source, "key": key or "", "class": type(bench).__name__}
    out_dir = os.environ.get("OUT_DIR", "").strip()
    if not out_dir or not os.path.isdir(out_dir):
        return
    target = Path(out_dir) / "shapes.yaml"
    source_copy = Path(out_dir) / "shapes.source.yaml"
    if target.exists() and not source_copy.exists():
        os.replace(target, source_copy)
    header = "# shapes each benchmark really used (written by _shape_inject_plugin)\n"
    atomic.write_text(target, header + yaml.safe_dump(_effective, default_flow_style=None,
                                                          sort_keys=True))


def apply_override(bench: Any) -> None:
    mode = os.environ.get("ZL_SHAPE_MODE", "").strip()
    path = os.environ.get("ZL_SHAPE_FILE", "").strip()
    cls_name = type(bench).__name__
    if mode == "upstream" or not path:
        _record(bench, "upstream", None)
        return
    op_name = str(getattr(bench, "op_name", ""))
    try:
        config = load_yaml(path)
    except (OSError, yaml.YAMLError) as exc:
        log(TAG, f"cannot read shape yaml {path} ({exc}); leaving {cls_name} shapes alone")
        _record(bench, "class", None)
        return
    key, entry, tried = lookup(config, op_name, type(bench))
    if entry is None:
        log(TAG, f"no yaml entry for op={op_name} (tried: {', '.join(tried)}); "
                 f"using {cls_name}'s own {len(bench.shapes or [])} shape(s)")
        _record(bench, "class", None)
        return
    decision, shapes = decide(list(bench.shapes or []), list(entry["shapes"]))
    if decision == "arity_mismatch":
        have = sorted({_arity(s) for s in bench.shapes})
        want = sorted({_arity(s) for s in entry["shapes"]})
        log(TAG, f"op={op_name}: yaml key '{key}' has shape arity {want} but {cls_name} builds "
                 f"arity {have}; stepping back, keeping the class's {len(bench.shapes)} shape(s)")
        _record(bench, "class", key)
        return
    if decision == "override":
        log(TAG, f"op={op_name}: {cls_name} produced {len(bench.shapes or [])} shape(s); "
                 f"replaced by {len(shapes)} from yaml key '{key}'")
        bench.shapes = shapes
        if entry.get("shape_desc"):
            bench.shape_desc = entry["shape_desc"]
    else:
        log(TAG, f"op={op_name}: {len(shapes)} shape(s) from yaml key '{key}'")
    _record(bench, "yaml", key)


def _make_init_user_config(original):
    def init_user_config(self, *args, **kwargs):
        # Subclass overrides usually call super(); only the outermost call applies
        # the override, after every class in the chain has set its shapes.
        depth = getattr(self, "_zl_shape_depth", 0)
        self._zl_shape_depth = depth + 1
        try:
            result = original(self, *args, **kwargs)
        finally:
            self._zl_shape_depth = depth
        if depth == 0:
            apply_override(self)
        return result
    return init_user_config


_PATCH = BenchmarkMethodPatch("init_user_config", _make_init_user_config, "set_shapes")


def patch_benchmarks() -> int:
    return _PATCH.apply()


def restore() -> None:
    _PATCH.restore()


def pytest_collection_finish(session):
    """Benchmark classes exist once the test modules are imported."""
    n = patch_benchmarks()
    mode = os.environ.get("ZL_SHAPE_MODE", "") or "(unset)"
    if n:
        log(TAG, f"shape mode={mode}; hooked init_user_config on {n} Benchmark class(es)")
    else:
        log(TAG, f"shape mode={mode}; no FlagGems Benchmark class found (nothing to inject)")


def pytest_unconfigure(config):
    restore()
