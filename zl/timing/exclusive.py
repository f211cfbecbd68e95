"""Exclusive timing on a device that several runs share: a timed stretch runs alone.

run_batch.py --overlap N runs N cases per device at once, each with ZL_TIMING_LOCK (a lock
file per device) and ZL_DEVICE_OVERLAP=N. Process start, imports, collection and Triton
compilation overlap. The lock file is a reader-writer lock (fcntl.flock on one file, a
second `<lock>.gate` file giving waiting timers priority):

- shared: each test's run (setup, body, teardown: input generation, the results plugin's
  outputs and upcast references, the pre-call below) holds the lock shared, so the
  overlapped runs' GPU work may overlap each other but never a timed stretch. A Triton
  compilation (`JITFunction._do_compile`) drops the share while it runs: it is CPU work;
- exclusive: every triton.testing.do_bench call (the benchmark's and the autotuner's) is
  wrapped, outermost, by `ExclusiveBench`: one call of fn and a device synchronize under the
  share (the kernels it launches compile now, share dropped), then the share is dropped and
  the lock taken exclusively for the timer's own do_bench (warmup, capture, replays; or
  Triton's benchmark of one autotune candidate); then the share is taken back.

A share is released only after a device synchronize (skipped while the stream captures a
graph), so no kernel of this run is still queued when another run starts timing.

A timer announces itself on the gate (`<lock>.gate`, held shared from before it waits until
it has timed); a share is taken only while holding the gate exclusively, that is while no
timer is announced. So once a timer waits, no new share starts: it waits for the current
shares to reach their next compile, do_bench or test end, not for a stream of them. Timers
announced together time one after another, with no share between them; the last of them
turns the lock into its test's share at once and lets the waiting runs in beside it. The
earlier gate, held only while waiting, let a share start between two waiting timers, and the
second then waited out its stretch; at overlap 8 on an H100 the 398 timings under it waited a
mean 5 s each. A run that has waited SHARE_AGE_S for its share closes the turnstile
(`<lock>.turn`, which a timer passes, shared, on its way to the gate) until the share is
taken: no new timer announces, and it gets in once the timers already announced have timed.
Without it a share waited as long as announcements overlapped: on an H100 at --overlap 12,
5 cases were killed after at least 79-98 s of waits, still waiting to start GPU work. No
process waits at the turnstile or the gate while holding the lock, so the protocol cannot
deadlock.

Why shared stretches exist: on the H200 at --overlap 8 with only do_bench under the lock,
A/A went from 0.1-1.4 % (overlap 4) to 0.9-27 % on the same nodes, medium and large shapes
slowing, 64x64 ones not: another run's GPU work (references, inputs) ran during replays.
A process's CUDA context is created, and at exit torn down, under a share as well
(`run_shared`, `hold_share_at_exit`): on an H100, 12 helper processes creating and
destroying contexts with no kernel of their own moved a 0.5 ms kernel's graph-timed readings up
to 6.5 %, and filling and freeing 4 GiB each up to 13.7 % (quiet: 0.01 %; SM clock 1980 MHz
throughout; benchmarks/timer_interference.py, docs/validation/speed.md). So is the results
plugin's prewarm (one describe per float dtype, in a thread during start-up).

While a run waits for the lock (either way) its --op-timeout clock stops: the run writes its
waits to `OUT_DIR/lock_wait.json` (WAIT_FILE: seconds waited, since when it waits now, and
each timed stretch's start and end)
and the batch credits them, up to one more --op-timeout per other case on the device
(zl.batch.execute.lock_credit_s; one with --budget-s). Measured at --overlap
8: cases waited 5-49 s, and softmax_backward timed out at --op-timeout 90 where it passed in
52 s at --overlap 4: a status depended on the overlap.

The identity records device_overlap=N and overlap_protocol=PROTOCOL (N > 1), caliber
fields: an overlapped run compares only with a run overlapped the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from zl import atomic
from zl.device import parse_count

OVERLAP_ENV = "ZL_DEVICE_OVERLAP"
LOCK_ENV = "ZL_TIMING_LOCK"
OPT_OVERLAP = "--zl-device-overlap"
OPT_LOCK = "--zl-timing-lock"
WAIT_FILE = "lock_wait.json"
GATE_SUFFIX = ".gate"
TURN_SUFFIX = ".turn"
# seconds a share waits behind announced timers before it closes the turnstile to new ones
SHARE_AGE_S = 5.0
# identity overlap_protocol: the shared/exclusive protocol above. `timed-alone` (earlier runs)
# left each process's context creation and exit outside the share; `timed-alone-lifecycle` does not.
PROTOCOL = "timed-alone-lifecycle"


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
    """A do_bench that times alone on the device, and the shared stretches of GPU work that
    keep other runs' timings out (see the module doc)."""

    def __init__(self, inner: Callable, lock_path: str, synchronize: Callable[[], Any],
                 wait_file: Optional[str] = None, share_age_s: float = SHARE_AGE_S) -> None:
        self.inner = inner
        self.lock_path = lock_path
        self.synchronize = synchronize
        self.wait_file = wait_file      # where the batch reads this run's waits (None: nowhere)
        self.share_age_s = share_age_s
        self.fd: Optional[int] = None
        self.gate: Optional[int] = None
        self.turn: Optional[int] = None
        try:
            self.fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self.gate = os.open(lock_path + GATE_SUFFIX, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self.turn = os.open(lock_path + TURN_SUFFIX, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            self.close()
            raise ExclusiveTimingError(f"{LOCK_ENV}={lock_path!r} cannot be opened: "
                                       f"{exc.strerror}") from None
        self.depth = 0
        self.shared = False             # this process holds the lock shared (GPU work under way)
        self.stats = {"calls": 0, "held_s": 0.0, "waited_s": 0.0, "precall_errors": 0,
                      "stretches": 0, "compiles": 0, "share_waited_s": 0.0, "settle_errors": 0,
                      "share_held_s": 0.0, "share_longest_s": 0.0, "share_takes": 0, "aged_shares": 0}
        self.share_since = 0.0          # when this process's current share was taken
        # each timed stretch's [start, end] (epoch s), in WAIT_FILE: what ran while it timed can
        # be read from samples of the device (SM clock, other runs' stamps) afterwards
        self.timed: list = []

    def __call__(self, fn, *args, **kwargs):
        if self.depth:   # inside this process's own locked stretch
            return self.inner(fn, *args, **kwargs)
        try:
            fn()
            self.synchronize()
        except Exception:
            # the locked call meets the same error where the timer judges it
            self.stats["precall_errors"] += 1
        was = self.shared
        if was:
            self._drop_share()
        t1 = self._take(fcntl.LOCK_EX)
        began = time.time()
        self.depth += 1
        try:
            return self.inner(fn, *args, **kwargs)
        finally:
            self.depth -= 1
            self.stats["calls"] += 1
            self.stats["held_s"] += time.perf_counter() - t1
            self.timed.append([round(began, 3), round(time.time(), 3)])
            if not (was and self._share_if_alone()):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
                fcntl.flock(self.gate, fcntl.LOCK_UN)    # the announcement ends with the timing
                if was:
                    self._take_share()
            self._note_wait(None)                        # the stretch on record, the lock let go

    def _share_if_alone(self) -> bool:
        """After a timed stretch, when no other timer is announced: turn the lock into this
        test's share at once and open the gate, so the runs waiting there start beside it.
        False when another timer is announced (it goes first; the caller queues behind it)."""
        try:   # ours the only announcement? (a failed conversion may drop it: the caller releases)
            fcntl.flock(self.gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(self.fd, fcntl.LOCK_SH)   # nobody waits for the lock: the gate is ours alone
        fcntl.flock(self.gate, fcntl.LOCK_UN)
        self._shared_from(time.perf_counter())
        return True

    def _take(self, mode: int) -> float:
        """Flock the lock in `mode` by the gate's rule (module doc); the wait is recorded.
        -> when taken. Exclusive: the gate stays held (shared) until the caller releases it."""
        self._note_wait(time.time())
        t0 = time.perf_counter()
        if mode == fcntl.LOCK_EX:
            fcntl.flock(self.turn, fcntl.LOCK_SH)     # closed while an aged share waits
            try:
                fcntl.flock(self.gate, fcntl.LOCK_SH)
            finally:
                fcntl.flock(self.turn, fcntl.LOCK_UN)
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX)
            except BaseException:
                fcntl.flock(self.gate, fcntl.LOCK_UN)
                raise
        else:
            self._close_gate()                        # no timer announced: the share comes at
            try:                                      # once, or when a timer just releasing ends
                fcntl.flock(self.fd, fcntl.LOCK_SH)
            finally:
                fcntl.flock(self.gate, fcntl.LOCK_UN)
        t1 = time.perf_counter()
        self.stats["waited_s"] += t1 - t0
        if mode == fcntl.LOCK_SH:
            self.stats["share_waited_s"] += t1 - t0
        self._note_wait(None)
        return t1

    def _close_gate(self) -> None:
        """Hold the gate exclusively (no timer announced) for a share. A blocking flock, so
        every share waiting behind a group of timers gets in as soon as the group has timed
        (polling instead, on a loaded 2-core machine, let timers in one by one, each paying a
        share's drain); a watchdog closes the turnstile once the wait reaches share_age_s."""
        try:
            fcntl.flock(self.gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        taken = threading.Event()
        try:
            threading.Thread(target=self._turnstile_watch, args=(taken,), daemon=True).start()
        except RuntimeError:    # Python 3.12 starts no thread at exit (_hold_share): no watchdog
            pass
        try:
            fcntl.flock(self.gate, fcntl.LOCK_EX)
        finally:
            taken.set()

    def _turnstile_watch(self, taken: threading.Event) -> None:
        """After share_age_s without the gate, close the turnstile until `taken` is set. Its
        own descriptor: closing it opens the turnstile, whatever the caller does meanwhile.
        Deadlock-free: no process waits at the turnstile or the gate while holding a share."""
        if taken.wait(self.share_age_s):
            return
        fd = os.open(self.lock_path + TURN_SUFFIX, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if not taken.is_set():
                self.stats["aged_shares"] += 1
            taken.wait()
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def gpu_work(self) -> Iterator[None]:
        """Hold the lock shared for a stretch of GPU work (a test's run); nested or inside a
        timed stretch it is already covered."""
        if self.shared or self.depth:
            yield
            return
        self._take_share()
        self.stats["stretches"] += 1
        try:
            yield
        finally:
            if self.shared:
                self._drop_share()

    def _take_share(self) -> None:
        self._shared_from(self._take(fcntl.LOCK_SH))

    def _shared_from(self, since: float) -> None:
        """This process holds the lock shared from `since` (perf_counter) on."""
        self.share_since, self.shared = since, True
        self.stats["share_takes"] += 1

    def _drop_share(self) -> None:
        """Release the share once this process's queued GPU work has finished: kernels still
        in flight after the release would run beside another run's timing."""
        try:
            self.synchronize()
        except Exception:
            # a failed launch resurfaces at the benchmark's own next synchronize
            self.stats["settle_errors"] += 1
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        self.shared = False
        # how long others' timers could have waited on this share (the settle included)
        held = time.perf_counter() - self.share_since
        self.stats["share_held_s"] += held
        self.stats["share_longest_s"] = max(self.stats["share_longest_s"], held)

    @contextlib.contextmanager
    def _share_dropped(self) -> Iterator[None]:
        """Drop this process's share for CPU work or a timed stretch; take it back after."""
        was = self.shared
        if was:
            self._drop_share()
        try:
            yield
        finally:
            if was:
                self._take_share()

    def compiling(self, compile_fn: Callable) -> Callable:
        """`compile_fn` (JITFunction._do_compile) run with the share dropped: compiling is
        CPU work that may overlap another run's timing."""
        bench = self

        @functools.wraps(compile_fn)
        def compile_outside_share(*args, **kwargs):
            bench.stats["compiles"] += 1
            with bench._share_dropped():
                return compile_fn(*args, **kwargs)
        return compile_outside_share

    def _note_wait(self, since: Optional[float]) -> None:
        if self.wait_file:
            atomic.write_json(self.wait_file, {"waited_s": round(self.stats["waited_s"], 3),
                                               "waiting_since": since, "timed": self.timed})

    def close(self) -> None:
        for name in ("fd", "gate", "turn"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)

    def summary(self, overlap: int) -> str:
        s = self.stats
        return (f"exclusive timing (overlap={overlap}, lock {self.lock_path}): {s['calls']} "
                f"do_bench call(s) held the device {s['held_s']:.3f} s, waited {s['waited_s']:.3f} s "
                f"({s['share_waited_s']:.3f} s of it for GPU work while others timed); "
                f"{s['stretches']} test run(s) held it shared {s['share_held_s']:.3f} s in "
                f"{s['share_takes']} stretch(es) (longest {s['share_longest_s']:.3f} s), "
                f"{s['compiles']} compile(s) outside"
                + (f"; {s['precall_errors']} pre-call(s) raised and were retried under the lock"
                   if s["precall_errors"] else "")
                + (f"; {s['settle_errors']} synchronize(s) before releasing the share raised"
                   if s["settle_errors"] else "")
                + (f"; {s['aged_shares']} share(s) waited {self.share_age_s:g} s and closed the turnstile"
                   if s["aged_shares"] else ""))


def run_shared(lock_path: str, work: Callable[[], Any], settle: Callable[[], Any]) -> float:
    """Run `work` (GPU work before the run's session exists: its CUDA context's creation, the
    results prewarm) holding the device's lock shared, `settle` (a synchronize) before the share
    is dropped, so no other run is timing meanwhile. -> seconds waited for the share (not
    credited to --op-timeout: this runs before the run's wait record)."""
    bench = ExclusiveBench(lambda *a, **k: None, lock_path, settle)
    try:
        with bench.gpu_work():
            work()
        return bench.stats["share_waited_s"]
    finally:
        bench.close()


def overlap_lock(lock_text: Optional[str], overlap_text: Optional[str]) -> Optional[str]:
    """The device's lock file when this run overlaps others on it (ZL_DEVICE_OVERLAP > 1 with
    ZL_TIMING_LOCK), else None; unusable settings are None here, named at configure."""
    lock = (lock_text or "").strip()
    try:
        return lock if parse_overlap(overlap_text, lock) > 1 else None
    except ValueError:
        return None


_HELD_AT_EXIT: dict = {}     # lock path -> the descriptor holding its share until exit


def _highest_fd() -> int:
    try:
        return max(int(n) for n in os.listdir("/proc/self/fd"))
    except (OSError, ValueError):
        return 255


def _hold_share(lock_path: str) -> None:
    """atexit: take the device's lock shared and keep it until this process is gone. The
    descriptor is moved above every open one: the kernel closes a dying process's descriptors
    in ascending order, so the device's own (its memory freed, its context destroyed) close
    before the share is let go. Python's later exit steps and the driver's run under it too."""
    if lock_path in _HELD_AT_EXIT:
        return
    try:
        bench = ExclusiveBench(lambda *a, **k: None, lock_path, lambda: None)
    except ExclusiveTimingError:
        return
    try:
        bench._take_share()
        _HELD_AT_EXIT[lock_path] = fcntl.fcntl(bench.fd, fcntl.F_DUPFD_CLOEXEC, _highest_fd() + 1)
    except OSError:
        pass
    finally:
        bench.close()        # the share stays with the moved descriptor (one open file)


def hold_share_at_exit(lock_path: str) -> None:
    """At this process's exit, hold the device's lock shared until the process is gone
    (`_hold_share`), so tearing down its context and freeing its memory never runs beside
    another run's timing. Registered once per lock; runs before handlers registered earlier
    (torch's among them). A process killed by a signal runs no exit handler."""
    import atexit
    atexit.unregister(_hold_share)
    atexit.register(_hold_share, lock_path)


def release_share_while_compiling(bench: ExclusiveBench, patches: Any) -> Optional[str]:
    """Wrap triton's JITFunction._do_compile (triton 3.6 to 3.9 have it) on `patches`
    (a PatchStack); None when done, else why compilation keeps the share."""
    try:
        from triton.runtime.jit import JITFunction
    except ImportError as exc:
        return f"triton.runtime.jit not importable ({exc})"
    original = getattr(JITFunction, "_do_compile", None)
    if not callable(original):
        return "this triton has no JITFunction._do_compile"
    patches.setattr(JITFunction, "_do_compile", bench.compiling(original))
    return None


def _wait_record(out_dir: Path) -> dict:
    """The WAIT_FILE the run writing into `out_dir` keeps ({} when it wrote none, or a half-read
    file: it counts as none)."""
    try:
        rec = json.loads((Path(out_dir) / WAIT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return rec if isinstance(rec, dict) else {}


def waited_s(out_dir: Path, now: Optional[float] = None) -> float:
    """Seconds the run writing into `out_dir` has waited for the device's timing lock, the
    wait under way included (0.0 when it recorded none; a half-read file counts as none)."""
    rec = _wait_record(out_dir)
    try:
        total = float(rec.get("waited_s") or 0.0)
    except (TypeError, ValueError):
        return 0.0
    since = rec.get("waiting_since")
    if since is not None:
        total += max(0.0, (time.time() if now is None else now) - float(since))
    return total


def is_waiting(out_dir: Path) -> bool:
    """Whether the run writing into `out_dir` is waiting for the device's timing lock now."""
    return _wait_record(out_dir).get("waiting_since") is not None


def timed_stretches(out_dir: Path) -> list:
    """The [start, end] epoch seconds of each timed stretch the run writing into `out_dir`
    recorded ([] where it recorded none, or its WAIT_FILE is unreadable)."""
    timed = _wait_record(out_dir).get("timed")
    return timed if isinstance(timed, list) else []
