"""The structural rules, checked on the tree itself: modules stay small, plugins stay
apart, and the project's modules have no import cycle."""
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SKIP = {"tests", "docs", ".fg", ".git", ".whl", "runs", ".venv", ".scratch", "build"}
LIMIT = 500


def project_modules():
    """module name -> path, for every .py outside tests/ and docs/."""
    out = {}
    for path in REPO.rglob("*.py"):
        rel = path.relative_to(REPO)
        if rel.parts[0] in SKIP or "__pycache__" in rel.parts:
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports_of(path, name, known):
    """Project modules `path` imports, at any depth (function-level imports count too)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([p for p in up if p] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def test_no_module_outside_tests_and_docs_exceeds_500_lines():
    long = {n: len(p.read_text(encoding="utf-8").splitlines()) for n, p in project_modules().items()}
    assert {n: c for n, c in long.items() if c > LIMIT} == {}


def test_no_plugin_imports_another_plugin_or_the_planner():
    mods = project_modules()
    plugins = {n for n in mods if n.startswith("_") and n.endswith("_plugin")}
    assert len(plugins) >= 14
    for name in plugins - {"_device_guard_plugin"}:   # a pure alias module, by design
        bad = imports_of(mods[name], name, mods) & (plugins | {"zl.plan", "plugin_plan"})
        assert not bad, f"{name} imports {sorted(bad)}"


def test_no_import_cycle_among_project_modules():
    mods = project_modules()
    graph = {n: imports_of(p, n, mods) for n, p in mods.items()}
    # The reader sees real edges (else "no cycle" would be vacuous).
    assert "zl.atomic" in graph["zl.identity"] and "zl.backends" in graph["zl.plan"]
    # A package's __init__ importing its own submodules is not a cycle of ideas; drop those edges.
    for n in graph:
        graph[n] = {m for m in graph[n] if not m.startswith(n + ".")}
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
            if m not in state:
                visit(m)
        stack.pop()
        state[n] = "done"

    for n in sorted(graph):
        if n not in state:
            visit(n)


def _puts_repo_on_path(node) -> bool:
    """A module-level statement that calls `sys.path.insert` (directly or under its `if`/`for`)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "insert"
               and ast.unparse(n.func.value) == "sys.path" for n in ast.walk(node))


def repo_imports_before_path(path, known) -> list:
    """Module-level imports of project modules that `path` makes before it puts the repo root
    on sys.path (a script started as `python benchmarks/x.py` sees benchmarks/, not the root)."""
    early = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if _puts_repo_on_path(node):
            break
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        early += [n for n in names if n.split(".")[0] in known]
    return early


def test_every_benchmark_script_finds_the_repo_without_an_install():
    known = {n.split(".")[0] for n in project_modules() if not n.startswith("benchmarks")}
    scripts = sorted((REPO / "benchmarks").glob("*.py"))
    assert len(scripts) >= 20 and "zl" in known and "telemetry" in known
    early = {p.name: repo_imports_before_path(p, known) for p in scripts}
    assert {name: mods for name, mods in early.items() if mods} == {}


def test_the_path_check_sees_an_import_before_the_insert(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("import sys\nfrom zl import atomic\nsys.path.insert(0, 'r')\nimport telemetry\n")
    assert repo_imports_before_path(script, {"zl", "telemetry"}) == ["zl"]
