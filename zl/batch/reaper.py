"""Kill the batch's case process groups when run_batch.py dies, however it dies.

Started by run_batch.py in its own session with a pipe on stdin. run_batch writes `+PGID`
when a case starts and `-PGID` when it ends. End of file means run_batch is gone: a SIGKILL
runs no handler and PR_SET_PDEATHSIG reaches only the direct child (bash), not the pytest
and tee it started, so this process kills every group still registered, TERM then KILL.
Standalone on purpose (no zl imports): it must start in milliseconds and cannot fail to import.
"""

import os
import signal
import sys
import time


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except OSError:
        return False


def reap(groups, grace: float) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(g) for g in groups):
        time.sleep(0.05)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


def main() -> int:
    # Ctrl-C reaches the terminal's whole foreground group; this process must outlive
    # run_batch to clean up after it, so it ignores both.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grace = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    if sys.argv[2:3] == ["--detach"] and os.fork() > 0:
        # the parent exits at once: this process is nobody's child now, so a Ray raylet that
        # kills a dead worker's children (kill_child_processes_on_worker_exit) spares it
        os._exit(0)
    groups = set()
    for line in sys.stdin:
        line = line.strip()
        if line[:1] == "+" and line[1:].isdigit():
            groups.add(int(line[1:]))
        elif line[:1] == "-" and line[1:].isdigit():
            groups.discard(int(line[1:]))
    if groups:
        reap(sorted(groups), grace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
