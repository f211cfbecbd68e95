"""Shard processes for the parallel sweep, and what they must never do: outlive it.

Each shard is a pytest started in its own session (process group), so one signal
reaches it and anything it started. `ShardGroup` guarantees the group is killed on
every way out of the sweep: normal end, timeout, an exception (KeyboardInterrupt
included), SIGTERM/SIGHUP to the parent (handler installed for the sweep), interpreter
exit (atexit), and -- on Linux -- the parent's death by SIGKILL, through
prctl(PR_SET_PDEATHSIG) set in the child before it execs. Before this, a `timeout`
that killed the parent left the shards running and writing into the run directory.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_FORWARDED = (signal.SIGTERM, signal.SIGHUP)


def shard(items: Sequence[Any], n: int) -> List[List[Any]]:
    """Round-robin: shape lists are usually sorted by size, so contiguous chunks would
    put every large (slow to sweep) shape on the same shard."""
    return [list(items[i::n]) for i in range(n)]


def merge(records: Sequence[Dict[str, Dict[str, Any]]]) -> Tuple[Dict[str, Dict[str, Any]], int, int]:
    """(merged, total keys, conflicts). A key seen by several shards keeps the
    lowest shard's winner; it is a conflict when the winners differ."""
    merged: Dict[str, Dict[str, Any]] = {}
    conflicted = set()
    for rec in records:
        for kernel, keys in rec.items():
            dst = merged.setdefault(kernel, {})
            for key, cfg in keys.items():
                if key not in dst:
                    dst[key] = cfg
                elif dst[key] != cfg:
                    conflicted.add((kernel, key))
    return merged, sum(len(v) for v in merged.values()), len(conflicted)


# zl options a shard gets through its own run configuration (its record dir, OUT_DIR,
# shape file, IR dump, device, worker flag): copied from the parent's command line they
# would override it, and every shard would write into the parent's run directory.
SHARD_OWNED_PREFIXES = ("--zl-autotune-", "--zl-parallel-", "--zl-out-dir", "--zl-shape-file",
                        "--zl-config", "--zl-ttgir-dump-dir", "--zl-device")


def child_argv(args: Sequence[str], shape_file: str) -> List[str]:
    """The parent's pytest arguments with its --shape_file replaced by the shard's and the
    shard-owned zl options left out."""
    out: List[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        flag = a.split("=", 1)[0]
        if flag == "--shape_file" or flag.startswith(SHARD_OWNED_PREFIXES):
            skip = "=" not in a  # `--flag value`: drop the value too
            continue
        out.append(a)
    return out + ["--shape_file", shape_file]


def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


def die_with_parent():
    """A preexec_fn: SIGKILL this child when the process that started it dies.

    libc is resolved here, in the parent, so the child only makes one call between
    fork and exec. The getppid check closes the race where the parent died before
    prctl took effect (the child would then never get the signal)."""
    prctl = _prctl()
    parent = os.getpid()

    def preexec() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(137)

    return preexec


@dataclass
class Job:
    cmd: List[str]
    cwd: str
    env: Dict[str, str]
    log_path: str


class ShardGroup:
    """Runs jobs, each in its own process group; `with` guarantees none survives."""

    def __init__(self, kill_grace_s: float = 5.0) -> None:
        self.procs: List[subprocess.Popen] = []
        self.kill_grace_s = kill_grace_s
        self._previous: Dict[int, Any] = {}

    def __enter__(self) -> "ShardGroup":
        atexit.register(self.kill_all)
        for sig in _FORWARDED:
            try:
                self._previous[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread: atexit and PDEATHSIG still hold
                pass
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.kill_all()
        finally:
            atexit.unregister(self.kill_all)
            self._restore_signals()

    def _restore_signals(self) -> None:
        while self._previous:
            sig, handler = self._previous.popitem()
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: Any) -> None:
        previous = self._previous.get(signum, signal.SIG_DFL)
        self.kill_all()
        self._restore_signals()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            os.kill(os.getpid(), signum)  # die of the signal, as without this handler

    def start(self, job: Job) -> subprocess.Popen:
        with open(job.log_path, "w") as log:  # the child keeps its own descriptor
            proc = subprocess.Popen(job.cmd, cwd=job.cwd, env=job.env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=die_with_parent())
        self.procs.append(proc)
        return proc

    def wait(self, timeout_s: float) -> Tuple[List[int], List[int]]:
        """(return codes, indices killed at the deadline); the deadline covers all shards."""
        deadline = time.monotonic() + timeout_s
        rcs: List[int] = []
        timed_out: List[int] = []
        for i, proc in enumerate(self.procs):
            try:
                rcs.append(proc.wait(timeout=max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.kill(proc)
                rcs.append(proc.returncode if proc.returncode is not None else -signal.SIGKILL)
                timed_out.append(i)
        return rcs, timed_out

    def kill(self, proc: subprocess.Popen) -> None:
        """SIGTERM the shard's whole group, SIGKILL it after the grace time."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                break  # the group is empty
            try:
                proc.wait(timeout=self.kill_grace_s if sig == signal.SIGTERM else None)
                if sig == signal.SIGTERM:
                    # The leader is gone; anything it started may still be in the group.
                    os.killpg(proc.pid, signal.SIGKILL)
                break
            except subprocess.TimeoutExpired:
                continue
            except (ProcessLookupError, PermissionError):
                break

    def kill_all(self) -> None:
        for proc in self.procs:
            self.kill(proc)


def run_jobs(jobs: Sequence[Job], timeout_s: float) -> Tuple[List[int], List[int]]:
    """Start every job, wait for all within `timeout_s`; (return codes, timed-out indices)."""
    with ShardGroup() as group:
        for job in jobs:
            group.start(job)
        return group.wait(timeout_s)
