"""The one executor interface between the batch and where cases run, and the local one.

An executor gets the per-device case lists and a `work(case, device)` callable and returns
when every device is done or asked to stop. Case logic (retries, timeouts, statuses) lives
in `work`, so a distributed engine can replace LocalExecutor without touching it.

Process-group bookkeeping for the local machine lives here too: `GroupGuard` registers each
case's process group with the reaper (zl/batch/reaper.py) and sets PR_SET_PDEATHSIG in the
child, so neither Ctrl-C nor a SIGKILL of run_batch.py leaves a case running.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

PR_SET_PDEATHSIG = 1
try:  # resolved in the parent: the child between fork and exec should do as little as possible
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: the reaper alone covers a parent's death
    _PRCTL = None


def child_setup(parent_pid: int) -> Callable[[], None]:
    """preexec_fn: die with the parent; if it already died between fork and here, die now."""
    def setup() -> None:
        if _PRCTL is not None:
            _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(137)
    return setup


class GroupGuard:
    """Tracks the case process groups alive now; kills them on abort and via the reaper."""

    def __init__(self, grace: float, detached: bool = False):
        """`detached`: the reaper is no child of this process (a Ray worker's children die
        with it, and the reaper must outlive it to kill the case groups' other members)."""
        self.grace = grace
        self.lock = threading.Lock()
        self.groups: Dict[int, subprocess.Popen] = {}
        self.aborted = False
        self.reaper = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("reaper.py")), str(grace),
             *(["--detach"] if detached else [])],
            stdin=subprocess.PIPE, text=True, start_new_session=True)

    def _tell(self, line: str) -> None:
        try:
            self.reaper.stdin.write(line + "\n")
            self.reaper.stdin.flush()
        except (OSError, ValueError):
            pass

    def spawn(self, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(list(argv), start_new_session=True,
                                preexec_fn=child_setup(os.getpid()), **kwargs)
        with self.lock:
            self.groups[proc.pid] = proc
            self._tell(f"+{proc.pid}")
            late = self.aborted
        if late:
            # an abort ran between Popen and the registration above: on a loaded 2-core CI
            # machine a case that started just as Ctrl-C arrived was missed, and run_batch.py
            # waited on it forever
            kill_group(proc.pid, proc, self.grace)
        return proc

    def release(self, proc: subprocess.Popen) -> bool:
        """Forget a finished case; True when members of its group outlived it (then killed)."""
        left = alive(proc.pid)
        if left:
            kill_group(proc.pid, proc, 0.0)
        with self.lock:
            self.groups.pop(proc.pid, None)
            self._tell(f"-{proc.pid}")
        return left

    def abort_all(self) -> None:
        """Kill every case group alive now, and any spawned from now on."""
        with self.lock:
            self.aborted = True
            procs = list(self.groups.values())
        for p in procs:
            kill_group(p.pid, p, self.grace)

    def close(self) -> None:
        try:
            self.reaper.stdin.close()
        except OSError:
            pass
        try:
            self.reaper.wait(timeout=self.grace + 5)
        except subprocess.TimeoutExpired:
            self.reaper.kill()


def alive(pgid: int) -> bool:
    """Any live (non-zombie) process in group pgid. A killed member stays a zombie until
    init reaps it; counting zombies would report killed groups as still running."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
            return True
        except OSError:
            return False
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def kill_group(pgid: int, proc: Optional[subprocess.Popen], grace: float) -> None:
    """TERM the whole group, wait up to `grace` for every member, then KILL what is left."""
    import time

    try:
        os.killpg(pgid, signal.SIGTERM)
    except OSError:
        pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive(pgid):
        if proc is not None:
            proc.poll()   # reap our own child so it does not linger as a zombie member
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    if proc is not None:
        proc.wait()


class Executor:
    """Interface: run each device's cases, at most `share` at a time per device (1, the only
    timing-valid setting, unless run_batch.py --share-device says otherwise)."""

    def run(self, shards: Dict[str, List], work: Callable[[object, str], None],
            may_start: Callable[[], bool]) -> None:
        raise NotImplementedError


class LocalExecutor(Executor):
    """`share` threads per device on this machine, pulling from that device's queue: a
    device's cases stay on it, and never more than `share` of them run at once."""

    def __init__(self, share: int = 1) -> None:
        if share < 1:
            raise ValueError(f"share must be >= 1 (got {share})")
        self.share = share
        self.errors: List[BaseException] = []
        self.threads: List[threading.Thread] = []

    def run(self, shards, work, may_start) -> None:
        def worker(device: str, pending: "queue.SimpleQueue") -> None:
            while may_start():
                try:
                    case = pending.get_nowait()
                except queue.Empty:
                    return
                try:
                    work(case, device)
                except BaseException as exc:  # recorded; the other workers keep going
                    self.errors.append(exc)
                    return

        self.threads = []
        for d, cs in shards.items():
            if not cs:
                continue
            pending: queue.SimpleQueue = queue.SimpleQueue()
            for c in cs:   # queue order = shard order (longest first under --balance)
                pending.put(c)
            self.threads += [threading.Thread(target=worker, args=(d, pending), daemon=True,
                                              name=f"device-{d}" + (f"-{i}" if self.share > 1 else ""))
                             for i in range(min(self.share, len(cs)))]
        for t in self.threads:
            t.start()
        self.join()

    def join(self) -> None:
        # join with a timeout: a bare join() would hold off KeyboardInterrupt in the main thread
        while any(t.is_alive() for t in self.threads):
            for t in self.threads:
                t.join(0.2)
