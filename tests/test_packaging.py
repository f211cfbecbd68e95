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


PRODUCT_SHELL = ["run_pytest.sh", "demo.sh", "ab_rlc_test.sh", "ab_repeat.sh", "ab_fold_test.sh",
                 "campaign.sh", *[f"zl/sh/{p.name}" for p in (REPO / "zl" / "sh").glob("*.sh")]]


def test_product_code_never_edits_the_import_path():
    """The installed package is how the kit is found: no sys.path edit in product modules,
    and no shell command puts the checkout on PYTHONPATH (demo.sh adds only the fake tree)."""
    python = [p for p in [*REPO.glob("*.py"), *(REPO / "zl").rglob("*.py")] if "__pycache__" not in p.parts]
    assert [str(p) for p in python if "sys.path" in p.read_text(encoding="utf-8")] == []
    offenders = []
    for rel in PRODUCT_SHELL:
        for n, line in enumerate((REPO / rel).read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if "PYTHONPATH=" in code and "FAKE/src" not in code:
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == []


def _python_wrapper(tmp_path, pythonpath=None):
    """An interpreter for ZL_PYTHON: this venv's python with site-packages off (-S: no install
    of zl_bench visible), or with PYTHONPATH set to another copy of the kit."""
    wrapper = tmp_path / "py"
    env_line = f"export PYTHONPATH={pythonpath}\n" if pythonpath else ""
    flags = "" if pythonpath else " -S"
    wrapper.write_text(f"#!/usr/bin/env bash\n{env_line}exec {sys.executable}{flags} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def test_a_command_without_the_kit_installed_exits_3_naming_the_install(tmp_path):
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    env["ZL_PYTHON"] = str(_python_wrapper(tmp_path))
    r = subprocess.run(["bash", str(REPO / "run_pytest.sh")], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "PREFLIGHT_FAILED check=interpreter" in r.stderr
    assert f"pip install -e {REPO.resolve()} --no-deps" in r.stderr and "Traceback" not in r.stderr


def test_a_command_running_another_checkouts_kit_exits_3(tmp_path):
    other = tmp_path / "other"
    shutil.copytree(REPO / "zl", other / "zl", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    env["ZL_PYTHON"] = str(_python_wrapper(tmp_path, pythonpath=other))
    for script in ("run_pytest.sh", "demo.sh", "ab_rlc_test.sh"):
        r = subprocess.run(["bash", str(REPO / script)], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 3, (script, r.stdout + r.stderr)
        assert f"imports zl_bench from {other.resolve()}, not from this checkout" in r.stderr
    # --help still answers without any kit
    h = subprocess.run(["bash", str(REPO / "run_pytest.sh"), "--help"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert h.returncode == 0 and h.stdout
