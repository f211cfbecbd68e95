"""Run zl_bench's real shell drivers (run_pytest.sh) against the fake FlagGems tree.

`zl_run()` builds a clean environment (no inherited CUDA_VISIBLE_DEVICES,
FLAGGEMS_*, ZL_* ... from the developer's shell, which would make a test depend
on who runs it), runs `bash run_pytest.sh` in a subprocess with a timeout, and
returns a `Result` with the run directory and its run.log text.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

REPO_ROOT = Path(__file__).resolve().parents[2]
FAKE_FLAGGEMS_DIR = REPO_ROOT / "tests" / "fake_flaggems"

# Inherited variables kept in the child: enough to find python/bash and nothing
# that changes what is measured.
_PASSTHROUGH = ("PATH", "LANG", "LC_ALL", "TMPDIR", "PYENV_ROOT", "PYENV_VERSION")


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    out_dir: Optional[Path]
    log_text: str

    @property
    def output(self) -> str:
        """stdout + stderr, for assertions that do not care which stream."""
        return self.stdout + self.stderr

    def explain(self) -> str:
        """A failure message with everything needed to debug the run."""
        return (f"rc={self.returncode} out_dir={self.out_dir}\n--- stdout ---\n{self.stdout[-6000:]}"
                f"\n--- stderr ---\n{self.stderr[-6000:]}")


def base_env(home: Path, **overrides) -> dict:
    """Clean environment for a child that runs the fake tree on the CPU.

    HOME is private so `~/.flaggems` (the libtuner sqlite store) never leaks
    between tests. An override of None removes the variable.
    """
    env = {k: os.environ[k] for k in _PASSTHROUGH if k in os.environ}
    env.update(
        HOME=str(home),
        FLAGGEMS_DIR=str(FAKE_FLAGGEMS_DIR),
        PYTHONPATH=f"{REPO_ROOT}{os.pathsep}{FAKE_FLAGGEMS_DIR / 'src'}",
        TRITON_INTERPRET="1",
        NO_COLOR="1",
        ZL_PYTHON=sys.executable,
        PYTHONDONTWRITEBYTECODE="1",
    )
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def run_zl(tmp_path: Path, script: str = "run_pytest.sh", timeout: float = 240,
           args: tuple = (), **env_overrides) -> Result:
    """Run `bash <repo>/<script>`; OUT_DIR defaults to tmp_path/'run' unless given."""
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    env_overrides.setdefault("OUT_DIR", str(tmp_path / "run"))
    env = base_env(home, **env_overrides)
    try:
        proc = subprocess.run(["bash", str(REPO_ROOT / script), *args], cwd=str(tmp_path),
                              env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{script} exceeded {timeout}s\n--- stdout ---\n{exc.stdout}\n"
                             f"--- stderr ---\n{exc.stderr}") from None
    out_dir = Path(env["OUT_DIR"]) if env.get("OUT_DIR") else None
    log = out_dir / "run.log" if out_dir else None
    log_text = log.read_text(errors="replace") if log is not None and log.is_file() else ""
    return Result(proc.returncode, proc.stdout, proc.stderr, out_dir, log_text)


def run_fake_pytest(tmp_path: Path, node: str, *pytest_args: str, timeout: float = 180,
                    **env_overrides) -> subprocess.CompletedProcess:
    """Run plain `python -m pytest <node>` inside the fake tree (no zl_bench driver).

    Extra zl_bench plugins can be loaded with `"-p", "<name>"` in pytest_args;
    the repo root is on PYTHONPATH.
    """
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = base_env(home, **env_overrides)
    cmd = [sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider", node, *pytest_args]
    return subprocess.run(cmd, cwd=str(FAKE_FLAGGEMS_DIR), env=env, capture_output=True,
                          text=True, timeout=timeout)


def procs_with_env(needle: str) -> list:
    """PIDs (other than this one) whose environment mentions `needle`: a run's OUT_DIR or a
    campaign's AB_ROOT marks every process it started, so none may be left after a kill."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if needle.encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def assert_needs_cuda(script: Path, tmp_path: Path, *args: str) -> None:
    """A GPU-only validation script on a machine without CUDA: exit 1, says so, no traceback,
    and no --out file written (skipped where a CUDA device exists)."""
    import pytest
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    out = tmp_path / "out.json"
    r = subprocess.run([sys.executable, str(script), "--out", str(out), *args],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "needs a CUDA device" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()
