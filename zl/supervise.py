"""Run a command so that it cannot outlive the shell script that started it.

    python -m zl.supervise --parent PID [--cwd DIR] [--grace S] -- CMD [ARG ...]

Why: an orphaned pytest kept writing into a run directory after its driver was killed
(it rewrote a rerun's `autotune_records/meta.json`), and a SIGKILLed campaign left its
telemetry sampler appending forever. A shell cannot trap SIGKILL, so the tie has to be
made from the child's side:

- this supervisor starts a new process group (it is the leader), so the driver can
  signal the command and everything it spawned with one `kill -- -PID`;
- it asks the kernel for a parent-death signal (prctl PR_SET_PDEATHSIG): when PID dies,
  even by SIGKILL, the supervisor gets SIGTERM;
- on SIGTERM/SIGINT/SIGHUP it passes the signal on to the command, gives it `--grace`
  seconds, then SIGKILLs its whole group;
- the command itself gets SIGKILL as its own parent-death signal, so it dies with the
  supervisor even if the supervisor is SIGKILLed.

Exit status: the command's own; 128+N when it died of signal N (the shell's convention);
2 for a usage error (including a live --parent that is not the direct parent); 143 when
--parent had already died; 127 when the command cannot be started.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from typing import List, Optional

from zl.rundir import pid_alive

PR_SET_PDEATHSIG = 1
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def set_parent_death_signal(sig: int) -> bool:
    """Ask Linux to send `sig` to this process when its parent dies; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _child_setup() -> None:
    # Runs in the forked child before exec: signals a non-interactive shell ignored for
    # its background jobs (SIGINT, SIGQUIT) would otherwise stay ignored through exec.
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    set_parent_death_signal(signal.SIGKILL)


def _kill_group(sig: int) -> None:
    try:
        os.killpg(os.getpgid(0), sig)
    except OSError:
        pass


def run(cmd: List[str], parent: Optional[int], cwd: Optional[str], grace: float) -> int:
    try:
        os.setpgid(0, 0)
    except OSError:
        pass  # already a group leader (started by setsid or a job-control shell)
    set_parent_death_signal(signal.SIGTERM)
    state = {"signal": 0}

    def on_signal(signum, _frame):
        state["signal"] = state["signal"] or signum

    for sig in FORWARDED:
        signal.signal(sig, on_signal)
    # `bash -c 'python -m zl.supervise --parent $$ ...'` execs us in the shell's place: we
    # are that shell, and the death signal already ties us to its parent.
    if parent == os.getpid():
        parent = None
    # The parent may have died before prctl took effect: then no signal will ever come.
    if parent is not None and os.getppid() != parent:
        if pid_alive(parent):
            # A backgrounded shell function (`f ... &`) runs in a forked subshell, so $$ is
            # a grandparent: the tie would silently bind to the subshell instead (a device
            # plan did exactly that and its batch never started).
            print(f"!!! zl.supervise: --parent {parent} is alive but is not this process's "
                  f"parent (that is {os.getppid()}): start zl.supervise directly from the shell "
                  "whose PID you pass, not from a backgrounded function or subshell",
                  file=sys.stderr)
            return 2
        return 128 + signal.SIGTERM
    try:
        child = subprocess.Popen(cmd, cwd=cwd, preexec_fn=_child_setup)
    except OSError as exc:
        print(f"!!! zl.supervise: cannot start {cmd[0]!r}: {exc}", file=sys.stderr)
        return 127
    deadline = None
    while True:
        try:
            rc = child.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        if state["signal"] and deadline is None:
            try:
                child.send_signal(state["signal"])
            except OSError:
                pass
            deadline = time.monotonic() + grace
        if deadline is not None and time.monotonic() >= deadline:
            _kill_group(signal.SIGKILL)  # ends this process too; the kernel reaps the rest
    # Whatever the command left behind in the group goes with it (a finished run must not
    # leave a writer in its run directory either).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _kill_group(signal.SIGTERM)
    if state["signal"]:
        return 128 + state["signal"]
    return 128 - rc if rc < 0 else rc


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    split = args.index("--")
    p = argparse.ArgumentParser(prog="python -m zl.supervise", add_help=True)
    p.add_argument("--parent", type=int, default=None, help="PID whose death ends the command")
    p.add_argument("--cwd", default=None)
    p.add_argument("--grace", type=float, default=5.0, help="seconds between forwarding and SIGKILL")
    opts = p.parse_args(args[:split])
    cmd = args[split + 1:]
    if not cmd:
        print("!!! zl.supervise: no command after --", file=sys.stderr)
        return 2
    return run(cmd, opts.parent, opts.cwd, opts.grace)


if __name__ == "__main__":
    sys.exit(main())
