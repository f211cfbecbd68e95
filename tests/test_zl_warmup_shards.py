"""zl.warmup.shards: sweep shards never outlive the sweep.

The shard here is a fake that hangs (and starts a grandchild in its process group),
so every exit path of the parent can be checked for leftovers: the deadline, an
exception, SIGTERM and SIGKILL of the parent, interpreter exit without unwinding, and
a shard that exits but leaves a process behind.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from zl.warmup import DEFAULT_TIMEOUT_S
from zl.warmup.plan import StepBack, sweep_timeout
from zl.warmup.shards import Job, ShardGroup, run_jobs

REPO = Path(__file__).resolve().parents[1]

HANG = textwrap.dedent("""
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {child.pid}\\n")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    if sys.argv[2] == "exit":
        sys.exit(0)
    time.sleep(600)
""")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and prctl")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_dead(pids, within=60.0) -> list:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _pids(pid_file: Path, within=120.0) -> list:
    deadline = time.monotonic() + within
    while not pid_file.is_file():
        assert time.monotonic() < deadline, "the fake shard never started"
        time.sleep(0.1)
    return [int(x) for x in pid_file.read_text().split()]


def _job(tmp_path: Path, how: str = "hang", name: str = "s0") -> Job:
    script = tmp_path / "shard.py"
    script.write_text(HANG)
    return Job([sys.executable, str(script), str(tmp_path / f"{name}.pids"), how], str(tmp_path),
               dict(os.environ), str(tmp_path / f"{name}.log"))


def test_a_hanging_shard_is_killed_at_the_deadline_with_its_group(tmp_path):
    # The deadline starts once the shard has started its grandchild (its pid file exists): a
    # deadline that could fall before that would test nothing on a slow machine.
    with ShardGroup() as group:
        group.start(_job(tmp_path))
        pids = _pids(tmp_path / "s0.pids")
        t0 = time.monotonic()
        rcs, timed_out = group.wait(timeout_s=1.0)
        waited = time.monotonic() - t0
    assert timed_out == [0] and rcs[0] != 0
    assert waited < 60  # 1 s, the kill (SIGTERM ends the fake at once), a loaded machine's margin
    assert _wait_dead(pids) == []


def test_a_shard_that_exits_leaves_nothing_behind(tmp_path):
    rcs, timed_out = run_jobs([_job(tmp_path, "exit")], timeout_s=60.0)
    assert (rcs, timed_out) == ([0], [])
    assert _wait_dead(_pids(tmp_path / "s0.pids")) == []  # its grandchild is gone too


def test_an_exception_in_the_parent_kills_the_shards(tmp_path):
    with pytest.raises(RuntimeError):
        with ShardGroup() as group:
            group.start(_job(tmp_path))
            pids = _pids(tmp_path / "s0.pids")
            raise RuntimeError("the sweep's caller failed")
    assert _wait_dead(pids) == []


PARENT = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from zl.warmup.shards import Job, ShardGroup
    job = Job({cmd!r}, {cwd!r}, dict(os.environ), {log!r})
    group = ShardGroup().__enter__()
    group.start(job)
    while not os.path.exists({pids!r}):
        time.sleep(0.05)
    if sys.argv[1] == "exit":
        sys.exit(0)  # leaves without unwinding the group: atexit must still kill it
    time.sleep(600)
""")


def _parent(tmp_path: Path, how: str) -> subprocess.Popen:
    job = _job(tmp_path)
    code = PARENT.format(repo=str(REPO), cmd=job.cmd, cwd=job.cwd, log=job.log_path,
                         pids=str(tmp_path / "s0.pids"))
    return subprocess.Popen([sys.executable, "-c", code, how], cwd=str(tmp_path))


@pytest.mark.parametrize("how", ["sigterm", "sigkill", "exit"])
def test_shards_die_with_their_parent(tmp_path, how):
    parent = _parent(tmp_path, how)
    try:
        shard_pid, grandchild_pid = _pids(tmp_path / "s0.pids")
        if how == "sigterm":
            parent.send_signal(signal.SIGTERM)
            assert parent.wait(timeout=30) == -signal.SIGTERM  # it still dies of the signal
            assert _wait_dead([shard_pid, grandchild_pid]) == []
        elif how == "sigkill":
            parent.kill()
            parent.wait(timeout=30)
            # PR_SET_PDEATHSIG: the shard itself dies with the parent, no handler involved.
            assert _wait_dead([shard_pid]) == []
        else:
            assert parent.wait(timeout=60) == 0
            assert _wait_dead([shard_pid, grandchild_pid]) == []
    finally:
        if parent.poll() is None:
            parent.kill()
        for pid in _pids(tmp_path / "s0.pids", within=1):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_sweep_has_a_default_timeout_and_no_unlimited_value():
    assert sweep_timeout("") == DEFAULT_TIMEOUT_S
    assert sweep_timeout(" 90 ") == 90.0
    for bad in ("0", "-5", "inf", "nan", "soon"):
        with pytest.raises(StepBack) as info:
            sweep_timeout(bad)
        assert info.value.code == "bad_timeout" and "ZL_PARALLEL_WARMUP_TIMEOUT" in str(info.value)
