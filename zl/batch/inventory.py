"""Static inventory of a FlagGems benchmark tree: one row per test function.

The tree is read with `ast` only. Importing benchmark modules would import flag_gems,
torch and vendor probes (seconds each, and a hanging vendor tool blocks the import), and
an inventory of 1100 functions must not depend on which of them import cleanly here.

run_name is unique within a repo: a function name defined in several files (upstream has
`test_nextafter_` in test_nextafter.py and test_nextafter_.py) is named `<op>@<op_file>` in
every file that defines it, so no spelling depends on which file was read first.
"""

from __future__ import annotations

import ast
import csv
import io
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from zl import atomic
from zl.config import environ as config_environ

REPO_ENV = {"main": "FLAGGEMS_DIR", "vllm": "FLAGGEMS_VLLM_DIR"}
BUILTIN_MARKS = ("parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings")


class InventoryError(ValueError):
    """A tree or inventory file that cannot be read as a FlagGems benchmark inventory."""


@dataclass(frozen=True)
class Entry:
    repo: str
    op: str               # test function name minus `test_`
    op_file: str          # file stem minus `test_`
    test_file: str        # path relative to <root>/benchmark, e.g. test_FLA/test_x.py
    run_name: str         # unique within repo; the case directory name
    collected: str        # pytest items the function yields ("?" when not static)
    marked_skip: str      # "1" for an unconditional skip mark
    markers: str          # every mark name, space separated, in source order
    benchmark_class: str  # the first *Benchmark class the body constructs

    def node(self, root: str) -> str:
        return f"{Path(root).resolve()}/benchmark/{self.test_file}::test_{self.op}"


FIELDS = [f.name for f in fields(Entry)]


def _mark_name(dec: ast.expr) -> Tuple[str, Optional[ast.Call]]:
    call = dec if isinstance(dec, ast.Call) else None
    target = dec.func if call is not None else dec
    parts: List[str] = []
    while isinstance(target, ast.Attribute):
        parts.append(target.attr)
        target = target.value
    if isinstance(target, ast.Name):
        parts.append(target.id)
    parts.reverse()
    if len(parts) >= 3 and parts[-3:-1] == ["pytest", "mark"] or parts[:1] == ["mark"] and len(parts) == 2:
        return parts[-1], call
    return "", None


def _literal_len(node: ast.expr, consts: Dict[str, int]) -> Optional[int]:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return len(node.elts)
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    return None


def _unconditional_skip(name: str, call: Optional[ast.Call]) -> bool:
    if name == "skip":
        return True
    if name == "skipif" and call is not None and call.args:
        cond = call.args[0]
        return isinstance(cond, ast.Constant) and cond.value is True
    return False


def _bench_class(func: ast.FunctionDef) -> str:
    for node in ast.walk(func):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name.endswith("Benchmark"):
                return name
    return ""


def scan_file(path: Path, rel: str) -> List[dict]:
    """Rows (without repo/run_name) for the module-level test functions of one file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=str(path))
    except SyntaxError as exc:
        raise InventoryError(f"{path}: not parseable ({exc.msg}, line {exc.lineno})") from None
    consts: Dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            n = _literal_len(node.value, {})
            if n is not None:
                consts[node.targets[0].id] = n
    stem = Path(rel).stem
    rows = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.name.startswith("test_"):
            continue
        marks, skip, count = [], False, 1
        for dec in node.decorator_list:
            name, call = _mark_name(dec)
            if not name:
                continue
            marks.append(name)
            skip = skip or _unconditional_skip(name, call)
            if name == "parametrize" and count is not None:
                n = _literal_len(call.args[1], consts) if call is not None and len(call.args) > 1 else None
                count = None if n is None else count * n
        rows.append({
            "op": node.name[len("test_"):], "op_file": stem[len("test_"):], "test_file": rel,
            "collected": "?" if count is None else str(count), "marked_skip": "1" if skip else "0",
            "markers": " ".join(marks), "benchmark_class": _bench_class(node),
        })
    return rows


def benchmark_files(root: Path) -> List[Tuple[Path, str]]:
    """benchmark/test_*.py and the same inside sub-packages (test_FLA/ has no __init__.py)."""
    bench = Path(root) / "benchmark"
    if not bench.is_dir():
        raise InventoryError(f"{root}: no benchmark/ directory (is this a FlagGems checkout?)")
    out = []
    for dirpath, dirnames, filenames in os.walk(bench):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("test_") and name.endswith(".py"):
                path = Path(dirpath) / name
                out.append((path, path.relative_to(bench).as_posix()))
    return out


def scan_tree(root: Path, repo: str) -> List[Entry]:
    raw: List[dict] = []
    for path, rel in benchmark_files(root):
        raw.extend(scan_file(path, rel))
    counts: Dict[str, int] = {}
    for r in raw:
        counts[r["op"]] = counts.get(r["op"], 0) + 1
    names: Dict[str, int] = {}
    entries = []
    for r in raw:
        run_name = r["op"] if counts[r["op"]] == 1 else f"{r['op']}@{r['op_file']}"
        names[run_name] = names.get(run_name, 0) + 1
        entries.append((run_name, r))
    out = []
    for run_name, r in entries:
        if names[run_name] > 1:   # same function, same stem, different sub-packages
            run_name = f"{r['op']}@{r['test_file'][:-3]}"
        out.append(Entry(repo=repo, run_name=run_name, **r))
    return out


def to_csv(entries: Sequence[Entry], source: str = "") -> str:
    buf = io.StringIO()
    if source:
        buf.write(f"# {source}\n")
    w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    w.writeheader()
    for e in entries:
        w.writerow(asdict(e))
    return buf.getvalue()


def write_csv(path: Path, entries: Sequence[Entry], source: str = "") -> None:
    atomic.write_text(path, to_csv(entries, source))


def read_csv(path: Path) -> Tuple[List[Entry], str]:
    """(entries, source line) of an inventory CSV; `#` lines before the header are comments."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InventoryError(f"cannot read {path}: {exc}") from None
    source = ""
    while lines and lines[0].startswith("#"):
        source = source or lines[0][1:].strip()
        lines.pop(0)
    reader = csv.DictReader(lines)
    missing = [f for f in FIELDS if f not in (reader.fieldnames or [])]
    if missing:
        raise InventoryError(f"{path}: not an inventory (missing columns {', '.join(missing)})")
    return [Entry(**{k: row[k] for k in FIELDS}) for row in reader], source


def source_commit(source: str) -> str:
    """The `commit=<sha>` token of an inventory's source line, else ""."""
    for tok in source.split():
        if tok.startswith("commit="):
            return tok[len("commit="):]
    return ""


def load_for_tree(repo: str, root: Path, ops_dir: Path, commit: str) -> Tuple[List[Entry], str]:
    """The inventory of the tree at `root`: ops/inventory_<repo>.csv when it was generated from
    this very commit, else a scan of the tree now. Returns (entries, where they came from)."""
    csv_path = Path(ops_dir) / f"inventory_{repo}.csv"
    if commit and csv_path.is_file():
        entries, source = read_csv(csv_path)
        if source_commit(source) == commit:
            return entries, f"{csv_path} (commit {commit[:12]})"
    return scan_tree(root, repo), f"scan of {root}"


def repo_roots(environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """repo -> checkout for every repo whose variable is set (main defaults like run_pytest.sh)."""
    env = config_environ() if environ is None else environ
    out = {"main": env.get("FLAGGEMS_DIR") or "/workspace/dev/FlagGems"}
    if env.get("FLAGGEMS_VLLM_DIR"):
        out["vllm"] = env["FLAGGEMS_VLLM_DIR"]
    return out


def summarize(entries: Iterable[Entry]) -> str:
    entries = list(entries)
    files = {e.test_file for e in entries}
    skipped = sum(1 for e in entries if e.marked_skip == "1")
    dup = sum(1 for e in entries if "@" in e.run_name)
    return (f"{len(entries)} test functions in {len(files)} files, {skipped} marked skip, "
            f"{dup} disambiguated as <op>@<file>")
