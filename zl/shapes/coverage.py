"""Survey every Benchmark subclass of a FlagGems checkout: which mechanism fixes its shapes
and whether a shape yaml controls it once zl_bench's shape plugins are loaded.

Static (`ast`, nothing imported), so it runs for any FlagGems commit on any machine. The
mechanism words are `zl.shapes.mechanism`'s, the same reading the plugins make at run time.

Examples:
  python -m zl.shapes.coverage FLAGGEMS_DIR > docs/shape-coverage.md
  python -m zl.shapes.coverage FLAGGEMS_DIR --tsv        # one row per class, for scripts

Outputs:
  On stdout: a markdown page (counts per mechanism, then one row per class: file, class,
  op_name, mechanism, detail, whether a yaml controls it), or with --tsv the rows
  `file class op_name mechanism controlled`.

Exit codes:
  0  written
  2  FLAGGEMS_DIR has no benchmark/ directory or no Benchmark class
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from zl import cli_help
from zl.shapes import bespoke, mechanism as mech

ROOT_CLASS = "Benchmark"


@dataclass
class ClassInfo:
    file: str                       # relative to benchmark/
    name: str
    bases: List[str]
    methods: Dict[str, ast.FunctionDef]
    attrs: List[str]
    ops: List[str] = field(default_factory=list)   # op_name= values of its constructor calls


@dataclass
class Row:
    file: str
    name: str
    ops: List[str]
    mechanism: str
    detail: str
    controlled: str


def _base_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _op_names(tree: ast.AST) -> Dict[str, List[str]]:
    """Class name -> op_name string constants passed to its constructor in this module."""
    found: Dict[str, List[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            cls = _base_name(node.func)
            kws = {kw.arg: kw.value for kw in node.keywords}
            name = kws.get("op_name")
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                op = name.value
                # Benchmark.__init__ appends "_backward" for is_backward=True: that is the yaml key.
                backward = kws.get("is_backward")
                if isinstance(backward, ast.Constant) and backward.value is True and "_backward" not in op:
                    op += "_backward"
                ops = found.setdefault(cls, [])
                if op not in ops:
                    ops.append(op)
    return found


def scan(bench_dir: Path) -> Tuple[List[ClassInfo], List[Tuple[str, str, List[str]]]]:
    """Classes of every module, and (file, class name, op_names) of each module's constructor calls."""
    classes: List[ClassInfo] = []
    calls: List[Tuple[str, str, List[str]]] = []
    for path in sorted(bench_dir.rglob("*.py")):
        rel = path.relative_to(bench_dir).as_posix()
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        ops = _op_names(tree)
        calls.extend((rel, name, found) for name, found in ops.items())
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            methods = {n.name: n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            attrs = [t.id for n in node.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                     for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)]
            classes.append(ClassInfo(rel, node.name, [_base_name(b) for b in node.bases],
                                     methods, attrs + list(methods)))
    return classes, calls


class Hierarchy:
    """Resolve base names like Python would in these modules: same file first, then base.py."""

    def __init__(self, classes: Sequence[ClassInfo]):
        self.by_file: Dict[Tuple[str, str], ClassInfo] = {(c.file, c.name): c for c in classes}
        self.by_name: Dict[str, List[ClassInfo]] = {}
        for c in classes:
            self.by_name.setdefault(c.name, []).append(c)

    def resolve(self, name: str, from_file: str) -> Optional[ClassInfo]:
        for key in ((from_file, name), ("base.py", name), ("performance_utils.py", name)):
            if key in self.by_file:
                return self.by_file[key]
        same = self.by_name.get(name, [])
        return same[0] if len(same) == 1 else None

    def mro(self, cls: ClassInfo) -> List[ClassInfo]:
        out: List[ClassInfo] = []
        todo = [cls]
        while todo:
            c = todo.pop(0)
            if c in out:
                continue
            out.append(c)
            todo.extend(b for b in (self.resolve(n, c.file) for n in c.bases) if b is not None and b is not c)
        return out

    def is_benchmark(self, cls: ClassInfo) -> bool:
        return any(c.name == ROOT_CLASS and c.file in ("base.py", "performance_utils.py") for c in self.mro(cls)[1:])


def classify(h: Hierarchy, cls: ClassInfo) -> Row:
    chain = h.mro(cls)
    names = [c.name for c in chain]
    attrs = {a for c in chain for a in c.attrs}
    owner = next((c for c in chain if "get_input_iter" in c.methods), None)
    kind = mech.classify_iter(owner.methods["get_input_iter"], attrs, names) if owner else mech.IterKind(mech.UNKNOWN)
    ops = cls.ops
    where = f" ({owner.name}.get_input_iter)" if owner is not None and owner is not cls else ""
    registered = bespoke.REGISTRY.get(cls.name)
    if kind.kind == mech.SELF_SHAPES:
        setter = next((c for c in chain if "set_shapes" in c.methods), None)
        base_method = setter is None or (setter.name == ROOT_CLASS and setter.file in ("base.py", "performance_utils.py"))
        how = mech.classify_set_shapes(None if base_method else setter.methods["set_shapes"])
        if how == mech.YAML:
            return Row(cls.file, cls.name, ops, "yaml lookup", f"set_shapes: op_name, then {', '.join(names[:3])}...",
                       "yes (upstream lookup)")
        detail = f"{setter.name}.set_shapes" + (" does nothing (DEFAULT_SHAPES)" if how == mech.NOOP else " assigns literals")
        return Row(cls.file, cls.name, ops, "set_shapes " + ("no-op" if how == mech.NOOP else "override"), detail,
                   "yes (_shape_inject_plugin, same arity)")
    if kind.kind == mech.CLASS_LIST:
        return Row(cls.file, cls.name, ops, "get_input_iter class list", f"loops over {kind.attr}{where}",
                   "yes (_shape_iter_inject_plugin, same arity)")
    label = {mech.LOCAL_LIST: "get_input_iter local list", mech.BESPOKE: "bespoke inputs",
             mech.UNKNOWN: "no get_input_iter"}[kind.kind]
    detail = f"loops over local {kind.attr}{where}" if kind.kind == mech.LOCAL_LIST else \
        (f"builds its inputs in {owner.name}.get_input_iter" if owner else "abstract: defines no input iterator")
    if registered is not None:
        return Row(cls.file, cls.name, ops, label, detail, f"yes (_bespoke_shape_plugin: {registered.fields})")
    return Row(cls.file, cls.name, ops, label, detail, "no: upstream shapes kept, the run says so")


def survey(flaggems_dir: Path) -> List[Row]:
    bench_dir = Path(flaggems_dir) / "benchmark"
    classes, calls = scan(bench_dir)
    h = Hierarchy(classes)
    for rel, name, ops in calls:
        target = h.resolve(name, rel)
        if target is not None:
            target.ops.extend(op for op in ops if op not in target.ops)
    rows = [classify(h, c) for cs in h.by_name.values() for c in cs if h.is_benchmark(c)]
    return sorted(rows, key=lambda r: (r.file, r.name))


def _commit(flaggems_dir: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(flaggems_dir), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def render_markdown(rows: Sequence[Row], commit: str) -> str:
    by_mech = Counter(r.mechanism for r in rows)
    controlled = sum(1 for r in rows if r.controlled.startswith("yes"))
    lines = [
        "# Shape coverage of FlagGems' benchmark classes",
        "",
        f"Generated by `python -m zl.shapes.coverage FLAGGEMS_DIR` (static `ast` survey) for FlagGems "
        f"commit {commit or '(unknown: not a git checkout; pass --commit)'}. Regenerate it for another commit; "
        "do not edit by hand.",
        "",
        "Mechanism: how the class fixes the shapes it measures. `yaml lookup` = upstream's `set_shapes` "
        "(op_name, then class names along the MRO); `set_shapes override`/`no-op` = the class assigns its own "
        "shapes; `get_input_iter class list` = the iterator loops over a class-level list, not `self.shapes`; "
        "`local list` = over a list written inside the method; `bespoke inputs` = inputs built another way.",
        "",
        "Controlled: whether a SHAPE_FILE entry decides what is measured with zl_bench's shape plugins "
        "loaded. Where it cannot (no key, other arity, no mechanism), the run prints one line naming the "
        "class and measures upstream's shapes; run_identity.json `shape_sources` records which.",
        "",
        f"Classes: {len(rows)}; yaml-controlled: {controlled}; not: {len(rows) - controlled}.",
        "",
        "| mechanism | classes |",
        "|---|---|",
    ]
    lines += [f"| {m} | {n} |" for m, n in sorted(by_mech.items(), key=lambda kv: (-kv[1], kv[0]))]
    lines += ["", "| file | class | op_name | mechanism | detail | yaml controls it |", "|---|---|---|---|---|---|"]
    for r in rows:
        ops = ", ".join(r.ops[:4]) + (f" (+{len(r.ops) - 4})" if len(r.ops) > 4 else "") if r.ops else "-"
        lines.append(f"| {r.file} | {r.name} | {ops} | {r.mechanism} | {r.detail} | {r.controlled} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = cli_help.parser(__doc__, prog="python -m zl.shapes.coverage")
    p.add_argument("flaggems_dir", help="a FlagGems checkout (its benchmark/ directory is read)")
    p.add_argument("--tsv", action="store_true", help="tab-separated rows instead of markdown")
    p.add_argument("--commit", default="", help="commit to name in the header when the tree is not a checkout")
    args = p.parse_args(argv)
    root = Path(args.flaggems_dir)
    if not (root / "benchmark").is_dir():
        print(f"!!! {root} has no benchmark/ directory", file=sys.stderr)
        return 2
    rows = survey(root)
    if not rows:
        print(f"!!! no Benchmark subclass found under {root / 'benchmark'}", file=sys.stderr)
        return 2
    if args.tsv:
        print("file\tclass\top_name\tmechanism\tcontrolled")
        for r in rows:
            print(f"{r.file}\t{r.name}\t{','.join(r.ops)}\t{r.mechanism}\t{r.controlled}")
    else:
        sys.stdout.write(render_markdown(rows, args.commit or _commit(root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
