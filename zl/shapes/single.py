"""`ops/shapes_single.yaml`: one representative shape per operator key, for quick screens.

Generated from a static scan of a FlagGems checkout (the same `ast` reading as
`zl.shapes.coverage`), and checked against it, so no key is misspelled and no shape has an
arity its class would refuse.

The shape is the first of the class's own upstream set: the entry upstream's lookup finds in
benchmark/core_shapes.yaml (op_name, then class names along the MRO), or the first literal of
a `set_shapes` override, a class-level list or a registered bespoke class's list. Operators
whose shapes no yaml reaches, or whose own shapes are not literals, are listed in the header.
Keys are op_name values (with `_backward` where the constructor passes is_backward=True).

Examples:
  python -m zl.shapes.single FLAGGEMS_DIR > ops/shapes_single.yaml
  python -m zl.shapes.single FLAGGEMS_DIR --check ops/shapes_single.yaml

Outputs:
  On stdout: the yaml (a header naming the FlagGems commit and the operators left out, then
  `<op_name>: {shapes: [[...]]}` per key). With --check: nothing on success, one `!!!` line
  per problem on stderr.

Exit codes:
  0  written / checked clean
  1  --check found unknown keys, wrong arities or entries that are not `{shapes: [...]}`
  2  usage (no benchmark/ directory, unreadable or non-mapping yaml)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml

from zl import cli_help
from zl.shapes import bespoke, mechanism as mech
from zl.shapes.coverage import ROOT_CLASS, ClassInfo, Hierarchy, scan

BASE_FILES = ("base.py", "performance_utils.py")


def _literal_assigned(func: ast.AST, target: str) -> Optional[list]:
    """The literal list assigned to `self.<target>` (or local <target>) in func, if any."""
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, (ast.List, ast.Tuple)):
            t = node.targets[0]
            name = t.attr if isinstance(t, ast.Attribute) else t.id if isinstance(t, ast.Name) else ""
            if name == target:
                try:
                    return list(ast.literal_eval(node.value))
                except ValueError:
                    return None
    return None


def _class_literal(chain: Sequence[ClassInfo], attr: str, source: Dict[str, ast.Module]) -> Optional[list]:
    for c in chain:
        for node in ast.walk(source[c.file]):
            if isinstance(node, ast.ClassDef) and node.name == c.name:
                for stmt in node.body:
                    if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in stmt.targets):
                        try:
                            return list(ast.literal_eval(stmt.value))
                        except ValueError:
                            return None
    return None


def own_shapes(h: Hierarchy, cls: ClassInfo, op: str, core: dict, source: Dict[str, ast.Module]) -> Tuple[Optional[list], str]:
    """(upstream's shapes for this op, why none) from the static scan."""
    chain = h.mro(cls)
    names = [c.name for c in chain]
    attrs = {a for c in chain for a in c.attrs}
    owner = next((c for c in chain if "get_input_iter" in c.methods), None)
    kind = mech.classify_iter(owner.methods["get_input_iter"], attrs, names) if owner else mech.IterKind(mech.UNKNOWN)
    if kind.kind == mech.SELF_SHAPES:
        setter = next((c for c in chain if "set_shapes" in c.methods), None)
        if setter is None or (setter.name == ROOT_CLASS and setter.file in BASE_FILES) or \
                mech.classify_set_shapes(setter.methods["set_shapes"]) == mech.YAML:
            for key in [op] + names:
                entry = core.get(key)
                if isinstance(entry, dict) and entry.get("shapes"):
                    return list(entry["shapes"]), ""
            return None, "no core_shapes.yaml entry"
        found = _literal_assigned(setter.methods["set_shapes"], "shapes")
        return (found, "") if found else (None, f"{setter.name}.set_shapes builds no literal list")
    if kind.kind == mech.CLASS_LIST:
        found = _class_literal(chain, kind.attr, source)
        return (found, "") if found else (None, f"{kind.attr} is not a literal")
    if cls.name in bespoke.REGISTRY and kind.kind == mech.LOCAL_LIST and kind.literal:
        return list(kind.literal), ""
    return None, "no yaml reaches it" if cls.name not in bespoke.REGISTRY else "bespoke: shapes not literal"


def _arity(shape: Any) -> int:
    return len(shape) if isinstance(shape, (list, tuple)) else 1


def _plain(shape: Any) -> Any:
    return [_plain(x) for x in shape] if isinstance(shape, (list, tuple)) else shape


def collect(flaggems_dir: Path) -> Tuple[Dict[str, Dict[str, Any]], Dict[str, str]]:
    """({op: {"shape": first, "arities": [...], "class": name}}, {op: why omitted})."""
    bench = Path(flaggems_dir) / "benchmark"
    classes, calls = scan(bench)
    h = Hierarchy(classes)
    source = {c.file: ast.parse((bench / c.file).read_text(encoding="utf-8")) for c in classes}
    core_path = bench / "core_shapes.yaml"
    core = yaml.safe_load(core_path.read_text(encoding="utf-8")) if core_path.is_file() else {}
    chosen: Dict[str, Dict[str, Any]] = {}
    omitted: Dict[str, str] = {}
    for rel, name, ops in calls:
        cls = h.resolve(name, rel)
        if cls is None or not h.is_benchmark(cls):
            continue
        for op in ops:
            shapes, why = own_shapes(h, cls, op, core or {}, source)
            if shapes:
                chosen.setdefault(op, {"shape": _plain(shapes[0]), "arities": sorted({_arity(s) for s in shapes}),
                                       "class": cls.name})
            elif op not in chosen:
                omitted[op] = f"{cls.name}: {why}"
    for op in chosen:
        omitted.pop(op, None)
    return chosen, omitted


def render(chosen: Dict[str, Dict[str, Any]], omitted: Dict[str, str], commit: str) -> str:
    head = [f"# One representative shape per FlagGems operator key (first of its own upstream set), FlagGems {commit}.",
            "# Generated by `python -m zl.shapes.single FLAGGEMS_DIR`; checked by `--check`. Do not edit by hand.",
            f"# {len(chosen)} keys. Omitted ({len(omitted)}): no yaml reaches the class, or its shapes are not literals:"]
    head += [f"#   {op}: {why}" for op, why in sorted(omitted.items())]
    body = {op: {"shapes": [c["shape"]]} for op, c in sorted(chosen.items())}
    return "\n".join(head) + "\n" + yaml.safe_dump(body, default_flow_style=None, sort_keys=True)


def read(path: Path) -> Dict[str, Any]:
    """The yaml as {key: entry}; ValueError (exit 2) when unreadable or not a mapping."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a mapping of operator keys (top level is {type(data).__name__})")
    return data


def _shapes(entry: Any) -> Optional[list]:
    shapes = entry.get("shapes") if isinstance(entry, dict) else None
    return shapes if isinstance(shapes, list) and shapes else None


def shape_problems(data: Dict[str, Any]) -> List[str]:
    """Entries that are not `{shapes: [shape, ...]}` with at least one shape."""
    return [f"{key}: entry must be a mapping with a non-empty `shapes` list, got {entry!r}"
            for key, entry in sorted(data.items(), key=lambda kv: str(kv[0])) if _shapes(entry) is None]


def check(path: Path, chosen: Dict[str, Dict[str, Any]]) -> List[str]:
    data = read(path)
    problems = shape_problems(data)
    for key, entry in sorted(data.items(), key=lambda kv: str(kv[0])):
        if key not in chosen:
            problems.append(f"{key}: not an op_name of any Benchmark of this FlagGems (misspelled or removed)")
            continue
        for shape in _shapes(entry) or []:
            if _arity(shape) not in chosen[key]["arities"]:
                problems.append(f"{key}: shape {shape} has arity {_arity(shape)}, {chosen[key]['class']} "
                                f"takes {chosen[key]['arities']}")
    return problems


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = cli_help.parser(__doc__, prog="python -m zl.shapes.single")
    p.add_argument("flaggems_dir", help="a FlagGems checkout (its benchmark/ directory is read)")
    p.add_argument("--check", metavar="YAML", help="check this file instead of printing a new one")
    p.add_argument("--commit", default="", help="FlagGems commit named in the header")
    args = p.parse_args(argv)
    if not (Path(args.flaggems_dir) / "benchmark").is_dir():
        print(f"!!! {args.flaggems_dir} has no benchmark/ directory", file=sys.stderr)
        return 2
    chosen, omitted = collect(Path(args.flaggems_dir))
    if args.check:
        try:
            problems = check(Path(args.check), chosen)
        except ValueError as exc:
            print(f"!!! {exc}", file=sys.stderr)
            return 2
        for line in problems:
            print(f"!!! {line}", file=sys.stderr)
        return 1 if problems else 0
    sys.stdout.write(render(chosen, omitted, args.commit or "(commit not given)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
