"""Where each measured shape came from, written to run_identity.json and shapes.yaml.

Three words, per shape: `yaml` (the run's shape file supplied it), `upstream` (the run asked
for FlagGems' own shapes, SHAPE_MODE=upstream), `hardcoded` (a shape file was given but the
class measured its own shapes: no key, another arity, or no mechanism reaches the class).

run_identity.json gets `shape_sources` ({op: {source, class, mechanism, key, shapes}}) and
`shape_source` (one string, `op=source` pairs sorted), which is a caliber field: two runs of
one operator whose shapes came from different places are different experiments.

shapes.yaml (written first by `_shape_inject_plugin`) gets the same entry per op, with the
shapes really iterated: for classes whose `get_input_iter` ignores `self.shapes`, the entry
that plugin wrote would name shapes that were never measured.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import yaml

from zl import atomic
from zl.config import current
from zl.identity import load_identity, update_identity

YAML, UPSTREAM, HARDCODED = "yaml", "upstream", "hardcoded"
SHAPES_YAML = "shapes.yaml"
SOURCE_COPY = "shapes.source.yaml"


class ShapeYamlError(ValueError):
    """The run's shape yaml cannot be read or is not a mapping."""


def as_tuple(shape: Any) -> Any:
    return tuple(shape) if isinstance(shape, (list, tuple)) else shape


def arities(shapes: Iterable[Any]) -> List[int]:
    return sorted({len(s) if isinstance(s, (list, tuple)) else 1 for s in shapes})


def requested_file() -> Optional[str]:
    """The shape yaml of this run; None when it measures upstream's own shapes."""
    cfg = current()
    if cfg.shape_mode.strip() == "upstream":
        return None
    return cfg.shape_file.strip() or None


def load_table(path: str, _cache: Dict[str, dict] = {}) -> dict:  # noqa: B006 - per-process cache
    if path not in _cache:
        try:
            with open(path, "r", encoding="utf-8") as handle:
                data = yaml.safe_load(handle)
        except (OSError, yaml.YAMLError) as exc:
            raise ShapeYamlError(f"cannot read shape yaml {path}: {exc}") from exc
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ShapeYamlError(f"shape yaml {path} is not a mapping of op -> {{shapes: [...]}}")
        _cache[path] = data
    return _cache[path]


def lookup(table: dict, op_name: str, cls: type) -> Tuple[Optional[str], Optional[list], List[str]]:
    """Upstream's order: op_name, then class names along the MRO -> (key, shapes, tried)."""
    tried = [op_name] + [c.__name__ for c in cls.__mro__ if c is not object]
    for key in tried:
        entry = table.get(key)
        if isinstance(entry, dict) and isinstance(entry.get("shapes"), list):
            return key, [as_tuple(s) for s in entry["shapes"]], tried
    return None, None, tried


def op_of(bench: Any) -> str:
    return str(getattr(bench, "op_name", "") or type(bench).__name__)


def _plain(shape: Any) -> Any:
    return [_plain(x) for x in shape] if isinstance(shape, (list, tuple)) else shape


class Recorder:
    """The provenance entries one plugin decided; merged into the run's files on each record."""

    def __init__(self, writer: str):
        self.writer = writer
        self.entries: Dict[str, Dict[str, Any]] = {}

    def record(self, bench: Any, mechanism: str, shapes: Optional[Sequence[Any]],
               sources: Sequence[str], key: Optional[str] = None) -> Dict[str, Any]:
        per_shape = list(sources)
        entry: Dict[str, Any] = {
            "class": type(bench).__name__,
            "mechanism": mechanism,
            "source": "+".join(sorted(set(per_shape))) if per_shape else HARDCODED,
            "key": key or "",
        }
        if shapes is not None:
            entry["shapes"] = [_plain(s) for s in shapes]
        if len(set(per_shape)) > 1:
            entry["sources"] = per_shape
        self.entries[op_of(bench)] = entry
        self.flush()
        return entry

    def flush(self) -> None:
        out_dir = current().out_dir.strip()
        if not self.entries or not out_dir or not os.path.isdir(out_dir):
            return
        merged = dict(load_identity(out_dir).get("shape_sources") or {})
        merged.update({op: {k: v for k, v in e.items() if k != "shapes"} | {"shapes": len(e.get("shapes") or [])}
                       for op, e in self.entries.items()})
        update_identity(out_dir, shape_sources=merged,
                        shape_source=",".join(f"{op}={merged[op]['source']}" for op in sorted(merged)))
        self._merge_shapes_yaml(Path(out_dir))

    def _merge_shapes_yaml(self, out_dir: Path) -> None:
        target, source_copy = out_dir / SHAPES_YAML, out_dir / SOURCE_COPY
        if target.exists() and not source_copy.exists():
            # run_pytest.sh put the starting yaml there; keep it under the name the
            # shape-inject plugin also uses, whichever of us writes first.
            os.replace(target, source_copy)
            current: dict = {}
        else:
            try:
                current = yaml.safe_load(target.read_text(encoding="utf-8")) or {} if target.exists() else {}
            except (OSError, yaml.YAMLError):
                current = {}
        if not isinstance(current, dict):
            current = {}
        for op, entry in self.entries.items():
            previous = current.get(op) if isinstance(current.get(op), dict) else {}
            current[op] = {**{k: v for k, v in previous.items() if k == "shape_desc"}, **entry}
        header = f"# shapes each benchmark really used, with their source (last written by {self.writer})\n"
        atomic.write_text(target, header + yaml.safe_dump(current, default_flow_style=None, sort_keys=True))
