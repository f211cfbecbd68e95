"""zl.supervise: the tie between a shell script and the commands it starts."""
import os
import signal
import subprocess
import sys
import time

import pytest

from harness.runner import REPO_ROOT

SUP = [sys.executable, "-m", "zl.supervise"]
ENV = dict(os.environ, PYTHONPATH=str(REPO_ROOT))


def _bash(script, timeout=120):
    return subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, env=ENV, capture_output=True,
                          text=True, timeout=timeout)


def test_exit_status_is_the_commands_and_usage_errors_are_2():
    assert _bash(f'{" ".join(SUP)} --parent $$ -- bash -c "exit 7"; exit $?').returncode == 7
    # the shell exec'd into the supervisor (its last command): $$ is the supervisor itself
    assert _bash(f'{" ".join(SUP)} --parent $$ -- bash -c "exit 7"').returncode == 7
    assert _bash(f'{" ".join(SUP)} --parent $$ -- bash -c "kill -TERM \\$\\$"').returncode == 143
    assert _bash(f'{" ".join(SUP)} --parent $$ -- /nonexistent/cmd').returncode == 127
    assert _bash(f'{" ".join(SUP)} --parent $$').returncode == 2
    assert _bash(f'{" ".join(SUP)} --parent $$ --').returncode == 2


def test_a_backgrounded_function_is_refused_with_a_reason_not_a_silent_143():
    """`tied CMD &` forks a subshell: the live $$ is then a grandparent (a device plan's
    batch never started and its log stayed empty)."""
    r = _bash(f'tied() {{ {" ".join(SUP)} --parent "$$" -- "$@"; }}\n'
              'tied echo started > /dev/null & wait $!; echo "rc=$?"')
    assert "rc=2" in r.stdout
    assert "is alive but is not this process's parent" in r.stderr
    # called directly in the background, the same tie works
    r = _bash(f'{" ".join(SUP)} --parent "$$" -- echo started & wait $!; echo "rc=$?"')
    assert "started" in r.stdout and "rc=0" in r.stdout


def test_a_dead_parent_means_143_and_the_command_never_runs(tmp_path):
    mark = tmp_path / "ran"
    r = subprocess.run([*SUP, "--parent", "999999999", "--", "touch", str(mark)], cwd=REPO_ROOT, env=ENV)
    assert r.returncode == 143 and not mark.exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signals are Linux's")
def test_sigkill_of_the_shell_takes_the_command_and_its_children(tmp_path):
    pids = tmp_path / "pids"
    shell = subprocess.Popen(
        ["bash", "-c", f'{" ".join(SUP)} --parent $$ --grace 1 -- bash -c '
                       f'"sleep 300 & echo \\$! >> {pids}; echo \\$\\$ >> {pids}; wait"; echo never'],
        cwd=REPO_ROOT, env=ENV)
    victims = []
    try:
        # both pids written: the command and its child are running (deadline: a loaded machine)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(victims) < 2:
            victims = [int(p) for p in pids.read_text().split()] if pids.exists() else []
            time.sleep(0.1)
        assert len(victims) == 2, "the supervised command never started"
        shell.send_signal(signal.SIGKILL)
        shell.wait()
        # the supervisor notices within its poll, TERMs, KILLs after --grace 1
        deadline = time.monotonic() + 60
        alive = victims
        while alive and time.monotonic() < deadline:
            alive = [p for p in victims if _running(p)]
            time.sleep(0.2)
        assert not alive
    finally:
        shell.kill()
        for pid in victims:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
