"""The package: every top-level module is declared, and a built wheel carries the plugins,
the kit and its shell helpers, so `pytest -p _timing_plugin` works from any directory."""
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent


def _pyproject():
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_every_top_level_module_is_declared():
    declared = set(_pyproject()["tool"]["setuptools"]["py-modules"])
    on_disk = {p.stem for p in REPO.glob("*.py")}
    assert declared == on_disk


def test_torch_and_triton_are_never_dependencies():
    project = _pyproject()["project"]
    names = [d.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
             for d in project["dependencies"]
             + [x for extra in project["optional-dependencies"].values() for x in extra]]
    assert "torch" not in names and "triton" not in names


def test_wheel_carries_plugins_kit_and_shell_helpers(tmp_path):
    import setuptools  # noqa: F401  the wheel build uses the environment's (requirements-ci.txt)
    # Built from a copy: setuptools writes build/ and *.egg-info beside the sources.
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".fg", ".whl", ".scratch", "runs", "docs", "build", "*.egg-info",
        "__pycache__"))
    out = tmp_path / "wheel"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(out), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel, = out.glob("zl_bench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in ("_timing_plugin.py", "_autotune_record_plugin.py", "batch_summary.py",
                     "zl/__init__.py", "zl/batch/cli.py", "zl/timing/graph.py", "zl/sh/entry.sh"):
        assert expected in names
    assert not any(n.startswith(("tests/", "docs/", "benchmarks/")) for n in names)
