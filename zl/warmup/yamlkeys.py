"""Which yaml entry FlagGems' `set_shapes` would read for an op, found without importing it.

Parsed with `ast`: importing the test module would import FlagGems (and initialise a
device) in the parent process before the shards are pinned to theirs.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple


def _attr_name(node: Any) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _parse(path: Path) -> Optional[ast.AST]:
    try:
        return ast.parse(path.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
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
            return _attr_name(node.func), v.value, isinstance(back, ast.Constant) and back.value is True
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
    is how BLAS ops reach `BlasBenchmark`.

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


def benchmark_file(args: Sequence[str], cwd: Path) -> Optional[Path]:
    """The benchmark file named on pytest's command line, if any."""
    for a in args:
        if a.startswith("-"):
            continue
        p = Path(a.split("::", 1)[0])
        if p.suffix == ".py":
            p = p if p.is_absolute() else cwd / p
            if p.is_file():
                return p
    return None
