"""A user's shape yaml, checked before a run starts (run_pytest.sh's `check=shape_file`).

Upstream reads SHAPE_FILE leniently: an empty file, or one without the operator's key, makes
the benchmark measure its own class's shapes and exit 0, and `[0, 64]` is "measured". Each of
those is a run that looks valid and measured something else, so they fail here by name.
Also builds the built-in inline yaml laid over upstream's core_shapes.yaml.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

import yaml


class ShapeFileError(ValueError):
    """The shape file cannot be used as given (one line, names the file and the problem)."""


def _positive_dims(value) -> bool:
    """Every integer positive (`[0, 64]` once ran as a "measured" empty shape), at least one
    integer, nothing but integers, lists, words and true/false.

    Words and booleans are parameters, not dimensions: the class-list entries the shape
    plugins accept carry conv padding modes ("valid") and flags (align_corners: true).
    """
    def ok(v) -> bool:
        if isinstance(v, bool) or (isinstance(v, str) and v.strip()):
            return True
        if isinstance(v, int):
            return v > 0
        if isinstance(v, (list, tuple)):
            return bool(v) and all(ok(x) for x in v)
        return False

    def has_int(v) -> bool:
        if isinstance(v, (list, tuple)):
            return any(has_int(x) for x in v)
        return isinstance(v, int) and not isinstance(v, bool)

    return isinstance(value, (list, tuple)) and ok(value) and has_int(value)


def validate_shape_file(path: str, op: str) -> Optional[str]:
    """ShapeFileError for an unusable file; a note (str) when the op's key is absent but a
    Benchmark class key may match it (upstream looks up op_name, then the class chain)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise ShapeFileError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "parse error"
        raise ShapeFileError(f"{path} is not valid yaml: {first}") from None
    if not isinstance(data, dict) or not data:
        raise ShapeFileError(f"{path} holds no operator entries (empty or not a mapping); "
                             "SHAPE_FILE=upstream runs FlagGems' own shapes")
    keys = [op] if op in data else [k for k in data if isinstance(k, str) and k.endswith("Benchmark")]
    if not keys:
        raise ShapeFileError(f"{path} has no '{op}:' entry (keys: "
                             f"{', '.join(map(str, list(data)[:8]))}); the run would measure the "
                             "benchmark's own shapes instead. Add the key, or say SHAPE_FILE=upstream")
    for key in keys:
        entry = data[key]
        shapes = entry.get("shapes") if isinstance(entry, dict) else None
        if not isinstance(shapes, list) or not shapes:
            raise ShapeFileError(f"{path}: '{key}' has no 'shapes:' list")
        for shape in shapes:
            if not _positive_dims(shape):
                raise ShapeFileError(f"{path}: '{key}' shape {shape!r} is not a list of "
                                     "positive integers (words and true/false are allowed as parameters)")
    if keys != [op]:
        return (f"{path} has no '{op}:' key; FlagGems' class-chain lookup decides among "
                f"{', '.join(keys)}")
    return None


def inline_yaml(core: Path, inline_text: str, tmpdir: str, owner_pid: int) -> str:
    """The built-in inline entries laid over upstream's core_shapes.yaml.

    Upstream's --shape_file replaces core_shapes.yaml instead of merging, so an op the
    inline yaml does not list would fall to DEFAULT_SHAPES (mm got 1-D shapes on the H200
    and died with "expected 4, got 1").
    """
    base = {}
    if core.is_file():
        base = yaml.safe_load(core.read_text(encoding="utf-8")) or {}
    try:
        base.update(yaml.safe_load(inline_text) or {})
    except yaml.YAMLError as exc:
        raise ShapeFileError(f"the built-in inline shape yaml does not parse: {exc}") from None
    fd, path = tempfile.mkstemp(prefix=f"zl_inline_shapes.{owner_pid}.", suffix=".yaml", dir=tmpdir)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        yaml.safe_dump(base, handle, default_flow_style=None, sort_keys=False)
    return path


