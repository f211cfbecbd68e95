"""Exclusive timing on a device that several runs share: only the timed stretch is serialised.

run_batch.py --overlap N runs N cases per device at once, each with ZL_TIMING_LOCK (a lock
file per device) and ZL_DEVICE_OVERLAP=N. Process start, imports, collection and Triton
compilation overlap; every triton.testing.do_bench call (the benchmark's timing and the
autotuner's) is wrapped, outermost, by `ExclusiveBench`:

1. one call of fn and a device synchronize, outside the lock: the kernels it launches are
   compiled now (an autotuner's candidates compile in their own nested do_bench calls,
   each wrapped the same way), CPU work that may overlap another process's timing;
2. fcntl.flock(LOCK_EX) on the lock file, blocking; the timer's own do_bench (warmup,
   capture, replays; or Triton's benchmark of one autotune candidate); release.

While a run waits for the lock its --op-timeout clock stops: the run writes its waits to
`OUT_DIR/lock_wait.json` (WAIT_FILE: seconds waited, and since when it waits now) and the
batch credits them, up to one more --op-timeout (`waited_s`). Measured on the H200 at
--overlap 8: cases waited 5-49 s for the lock, and softmax_backward, which passed in 52 s
at --overlap 4, timed out at --op-timeout 90: a status depended on the overlap.

A do_bench called while this process holds the lock runs inside it. GPU work outside the
lock: the benchmark's input generation, the results plugin's comparisons and the one call
of step 1. Whether that leaves the timings as good as solo is measured, not assumed
(docs/validation/speed.md: at --overlap 3 and 4 the A/A held, at 8 it did not). The identity records
device_overlap=N (N > 1), a caliber field: an overlapped run compares only with a run
overlapped the same way.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Optional

from zl import atomic
from zl.device import parse_count

OVERLAP_ENV = "ZL_DEVICE_OVERLAP"
LOCK_ENV = "ZL_TIMING_LOCK"
OPT_OVERLAP = "--zl-device-overlap"
OPT_LOCK = "--zl-timing-lock"
WAIT_FILE = "lock_wait.json"


class ExclusiveTimingError(ValueError):
    """ZL_DEVICE_OVERLAP / ZL_TIMING_LOCK are unusable together or alone; names the setting."""


def parse_overlap(text: Optional[str], lock_path: Optional[str], share: int = 1) -> int:
    """How many runs overlap on this device (1 = solo). N > 1 needs a lock file: without one
    the runs would time each other's kernels, which is --share-device, not this."""
    n = parse_count(text, OVERLAP_ENV, ExclusiveTimingError)
    if n > 1 and not (lock_path or "").strip():
        raise ExclusiveTimingError(f"{OVERLAP_ENV}={n} needs {LOCK_ENV} (the device's timing lock "
                                   "file): overlapped runs without it time each other's kernels")
    if n > 1 and share > 1:
        raise ExclusiveTimingError(f"{OVERLAP_ENV}={n} with ZL_DEVICE_SHARE={share}: a run is "
                                   "either shared (functional only) or overlapped with exclusive "
                                   "timing, not both")
    return n


class ExclusiveBench:
    """A do_bench that takes the device's timing lock around `inner` (see the module doc)."""

    def __init__(self, inner: Callable, lock_path: str, synchronize: Callable[[], Any],
                 wait_file: Optional[str] = None) -> None:
        self.inner = inner
        self.lock_path = lock_path
        self.synchronize = synchronize
        self.wait_file = wait_file      # where the batch reads this run's waits (None: nowhere)
        try:
            self.fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ExclusiveTimingError(f"{LOCK_ENV}={lock_path!r} cannot be opened: "
                                       f"{exc.strerror}") from None
        self.depth = 0
        self.stats = {"calls": 0, "held_s": 0.0, "waited_s": 0.0, "precall_errors": 0}

    def __call__(self, fn, *args, **kwargs):
        if self.depth:   # inside this process's own locked stretch
            return self.inner(fn, *args, **kwargs)
        try:
            fn()
            self.synchronize()
        except Exception:
            # the locked call meets the same error where the timer judges it
            self.stats["precall_errors"] += 1
        self._note_wait(time.time())
        t0 = time.perf_counter()
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        t1 = time.perf_counter()
        self.stats["waited_s"] += t1 - t0
        self._note_wait(None)
        self.depth += 1
        try:
            return self.inner(fn, *args, **kwargs)
        finally:
            self.depth -= 1
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            self.stats["calls"] += 1
            self.stats["held_s"] += time.perf_counter() - t1

    def _note_wait(self, since: Optional[float]) -> None:
        if self.wait_file:
            atomic.write_json(self.wait_file, {"waited_s": round(self.stats["waited_s"], 3),
                                               "waiting_since": since})

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def summary(self, overlap: int) -> str:
        s = self.stats
        return (f"exclusive timing (overlap={overlap}, lock {self.lock_path}): {s['calls']} "
                f"do_bench call(s) held the device {s['held_s']:.3f} s, waited {s['waited_s']:.3f} s"
                + (f"; {s['precall_errors']} pre-call(s) raised and were retried under the lock"
                   if s["precall_errors"] else ""))


def waited_s(out_dir: Path, now: Optional[float] = None) -> float:
    """Seconds the run writing into `out_dir` has waited for the device's timing lock, the
    wait under way included (0.0 when it recorded none; a half-read file counts as none)."""
    try:
        rec = json.loads((Path(out_dir) / WAIT_FILE).read_text(encoding="utf-8"))
        total = float(rec.get("waited_s") or 0.0)
        since = rec.get("waiting_since")
    except (OSError, ValueError, TypeError, AttributeError):
        return 0.0
    if since is not None:
        total += max(0.0, (time.time() if now is None else now) - float(since))
    return total
