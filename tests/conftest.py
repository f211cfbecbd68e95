"""Shared fixtures: the fake FlagGems tree, the CPU Triton driver, run_pytest.sh runs."""
import sys
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

from harness import cpu_driver as _cpu_driver  # noqa: E402
from harness import runner as _runner  # noqa: E402

# The fake tree's benchmark/test_*.py are benchmarks for subprocess runs, not tests
# of this repo: never collect them here.
collect_ignore = ["fake_flaggems"]


@pytest.fixture(scope="session")
def fake_flaggems_dir() -> Path:
    """Root of the fake FlagGems checkout (has benchmark/ and src/flag_gems/)."""
    return _runner.FAKE_FLAGGEMS_DIR


@pytest.fixture
def cpu_driver(monkeypatch):
    """Active CpuDriver for in-process tests (TRITON_INTERPRET=1); removed afterwards."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    drv = _cpu_driver.install()
    try:
        yield drv
    finally:
        _cpu_driver.uninstall()


@pytest.fixture
def zl_run(tmp_path):
    """Call as `zl_run(OP="softmax", OP_FILE="softmax", ...)` -> runner.Result.

    Runs `bash run_pytest.sh` against the fake tree in a clean environment:
    FLAGGEMS_DIR=fake tree, PYTHONPATH=<repo>:<fake>/src, TRITON_INTERPRET=1,
    NO_COLOR=1, HOME=<tmp> (private ~/.flaggems), OUT_DIR=<tmp>/run unless
    given. Keyword `script=` runs another driver, `timeout=` bounds it, a value
    of None removes a variable. Each call gets its own sub-directory.
    """
    counter = {"n": 0}

    def _run(script="run_pytest.sh", timeout=240, args=(), **env):
        counter["n"] += 1
        work = tmp_path / f"zl{counter['n']}"
        work.mkdir()
        return _runner.run_zl(work, script=script, timeout=timeout, args=tuple(args), **env)

    return _run


@pytest.fixture
def fake_pytest(tmp_path):
    """Call as `fake_pytest("benchmark/test_softmax.py::test_softmax", "--level", "core")`.

    Plain pytest inside the fake tree (no run_pytest.sh); returns CompletedProcess.
    """
    counter = {"n": 0}

    def _run(node, *args, timeout=180, **env):
        counter["n"] += 1
        work = tmp_path / f"fp{counter['n']}"
        work.mkdir()
        return _runner.run_fake_pytest(work, node, *args, timeout=timeout, **env)

    return _run
