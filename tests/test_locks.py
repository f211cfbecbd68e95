"""zl.locks: one holder at a time, the holder named, no stale lock after a kill."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from zl import locks

REPO = Path(__file__).resolve().parents[1]
HOLD = ("import sys, time\nfrom zl import locks\nlock = locks.acquire(sys.argv[1])\n"
        "print('locked', flush=True)\ntime.sleep(600)\n")


def _holder(path):
    """A child process that holds the lock; returns once it says it does."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], cwd=REPO, stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_acquire_is_refused_with_the_holders_pid(tmp_path):
    path = tmp_path / ".lock"
    with locks.acquire(path):
        with pytest.raises(locks.LockHeld) as err:
            locks.acquire(path)
        assert err.value.pid == os.getpid()
        assert f"pid {os.getpid()}" in str(err.value)
    # released: free again, and the file no longer names a holder
    assert path.read_text() == ""
    locks.acquire(path).release()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    path = tmp_path / ".lock"
    proc = _holder(path)
    try:
        with pytest.raises(locks.LockHeld) as err:
            locks.acquire(path)
        assert err.value.pid == proc.pid
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    lock = locks.acquire(path)     # no cleanup step: the kernel dropped the dead holder's lock
    assert locks.holder_pid(path, wait_s=0) == os.getpid()
    lock.release()


def test_lock_is_not_inherited_by_children(tmp_path):
    """A child that outlives the holder must not keep the lock alive (O_CLOEXEC)."""
    path = tmp_path / ".lock"
    lock = locks.acquire(path)
    child = subprocess.Popen(["sleep", "30"], close_fds=False)
    try:
        lock.release()
        locks.acquire(path).release()
    finally:
        child.kill()
        child.wait()


def test_shell_hold_locks_the_callers_descriptor(tmp_path):
    path = tmp_path / ".lock"
    script = (f'exec 9<>"{path}"\n'
              f'{sys.executable} -m zl.locks hold 9 "{path}" --pid $$ || exit 7\n'
              'echo "held $$"\nread -r _\n')
    shell = subprocess.Popen(["bash", "-c", script], cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        line = shell.stdout.readline().split()
        assert line[:1] == ["held"]
        with pytest.raises(locks.LockHeld) as err:
            locks.acquire(path)
        assert err.value.pid == int(line[1]) == shell.pid
        second = subprocess.run(["bash", "-c", f'exec 9<>"{path}"; {sys.executable} -m zl.locks hold 9 "{path}"'],
                                cwd=REPO, capture_output=True, text=True,
                                env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert second.returncode == 1 and f"locked by pid {shell.pid}" in second.stderr
    finally:
        shell.kill()
        shell.wait()
    locks.acquire(path).release()


def test_shell_hold_refuses_a_descriptor_on_another_file(tmp_path):
    other = tmp_path / "other"
    other.write_text("")
    (tmp_path / ".lock").write_text("")
    r = subprocess.run(["bash", "-c", f'exec 9<>"{other}"; {sys.executable} -m zl.locks hold 9 "{tmp_path / ".lock"}"'],
                       cwd=REPO, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 2 and "not open on" in r.stderr
