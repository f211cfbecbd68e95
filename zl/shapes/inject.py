"""Make the shape yaml win over shapes a Benchmark subclass hardcodes.

Upstream only reads the yaml in `Benchmark.set_shapes`; about 200 subclasses override
`set_shapes` with literal shapes, so a user's SHAPE_FILE silently does nothing for them.
After `init_user_config` (which calls `set_shapes`), `ShapeInjector.apply` looks the yaml
up the same way upstream does (`op_name`, then each class name along the MRO) and
replaces `self.shapes` with that entry. It steps back, saying so, where the entry's arity
differs from the class's own shapes (e.g. the catch-all `Benchmark:` key reaching a BLAS
class whose shapes are (B, M, N, K)): those shapes would crash the input builder or,
worse, measure something else.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import yaml

from zl.flaggems import SHAPE_MODES, BenchmarkMethodPatch
from zl.shapes.record import ShapeRecord
from zl.term import log as _term_log

TAG = "[shape-inject-plugin]"


class ShapeModeError(ValueError):
    """ZL_SHAPE_MODE is not one of inline / file / upstream."""


def log(message: str) -> None:
    _term_log(TAG, message)


def check_mode(mode: str) -> str:
    mode = (mode or "").strip()
    if mode and mode not in SHAPE_MODES:
        raise ShapeModeError(f"ZL_SHAPE_MODE={mode!r} is not one of {', '.join(SHAPE_MODES)}")
    return mode


def _arity(shape: Any) -> int:
    return len(shape) if isinstance(shape, (list, tuple)) else 1


def _as_tuple(shape: Any) -> Any:
    return tuple(shape) if isinstance(shape, (list, tuple)) else shape


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


class ShapeInjector:
    """One session's shape injection: settings, yaml cache, record, and the method patch."""

    def __init__(self, shape_file: str, mode: str, out_dir: Optional[str]):
        self.shape_file = (shape_file or "").strip()
        self.mode = check_mode(mode)
        self.record = ShapeRecord(out_dir)
        self._yaml: Optional[Dict[str, Any]] = None
        self.patch = BenchmarkMethodPatch("init_user_config", self._wrap_init_user_config, "set_shapes")

    def load_yaml(self) -> Dict[str, Any]:
        if self._yaml is None:
            with open(self.shape_file, "r", encoding="utf-8") as handle:
                data = yaml.safe_load(handle) or {}
            self._yaml = data if isinstance(data, dict) else {}
        return self._yaml

    def _wrap_init_user_config(self, original):
        injector = self

        def init_user_config(bench, *args, **kwargs):
            # Subclass overrides usually call super(); only the outermost call applies
            # the override, after every class in the chain has set its shapes.
            depth = getattr(bench, "_zl_shape_depth", 0)
            bench._zl_shape_depth = depth + 1
            try:
                result = original(bench, *args, **kwargs)
            finally:
                bench._zl_shape_depth = depth
            if depth == 0:
                injector.apply(bench)
            return result
        return init_user_config

    def apply(self, bench: Any) -> None:
        """Lay the yaml entry over `bench.shapes` (or step back), then record the result."""
        cls_name = type(bench).__name__
        if self.mode == "upstream" or not self.shape_file:
            self.record.add(bench, "upstream", None)
            return
        op_name = str(getattr(bench, "op_name", ""))
        try:
            config = self.load_yaml()
        except (OSError, yaml.YAMLError) as exc:
            log(f"cannot read shape yaml {self.shape_file} ({exc}); leaving {cls_name} shapes alone")
            self.record.add(bench, "class", None)
            return
        key, entry, tried = lookup(config, op_name, type(bench))
        if entry is None:
            log(f"no yaml entry for op={op_name} (tried: {', '.join(tried)}); "
                f"using {cls_name}'s own {len(bench.shapes or [])} shape(s)")
            self.record.add(bench, "class", None)
            return
        decision, shapes = decide(list(bench.shapes or []), list(entry["shapes"]))
        if decision == "arity_mismatch":
            have = sorted({_arity(s) for s in bench.shapes})
            want = sorted({_arity(s) for s in entry["shapes"]})
            log(f"op={op_name}: yaml key '{key}' has shape arity {want} but {cls_name} builds "
                f"arity {have}; stepping back, keeping the class's {len(bench.shapes)} shape(s)")
            self.record.add(bench, "class", key)
            return
        if decision == "override":
            log(f"op={op_name}: {cls_name} produced {len(bench.shapes or [])} shape(s); "
                f"replaced by {len(shapes)} from yaml key '{key}'")
            bench.shapes = shapes
            if entry.get("shape_desc"):
                bench.shape_desc = entry["shape_desc"]
        else:
            log(f"op={op_name}: {len(shapes)} shape(s) from yaml key '{key}'")
        self.record.add(bench, "yaml", key)

    def pytest_collection_finish(self, session):
        """Benchmark classes exist once the test modules are imported."""
        n = self.patch.apply()
        mode = self.mode or "(unset)"
        if n:
            log(f"shape mode={mode}; hooked init_user_config on {n} Benchmark class(es)")
        else:
            log(f"shape mode={mode}; no FlagGems Benchmark class found (nothing to inject)")

    def close(self) -> None:
        self.patch.restore()
