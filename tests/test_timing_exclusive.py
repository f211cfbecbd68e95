"""zl/timing/exclusive.py: the timed stretches of each do_bench call hold the device's lock,
the call that compiles and a lock-aware timer's capture do not, and the settings refuse what
would time a shared device.

Processes, not threads: the lock is fcntl.flock between the runs of one device."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from zl.timing.exclusive import ExclusiveBench, ExclusiveTimingError, parse_overlap

ROOT = Path(__file__).resolve().parents[1]

# One process: `calls` do_bench calls; the pre-call and the timed stretch stamp a file. With
# `capture` > 0 the timer is lock-aware, as the graph timer: a held stretch (warmup, estimate),
# `capture` seconds unheld (stamped cap0/cap1), a held stretch (replays). `peers` > 0: start
# once that many workers are ready.
WORKER = textwrap.dedent('''
    import os, sys, time
    from zl.timing.exclusive import ExclusiveBench
    lock, stamps, name, calls, hold = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    capture, peers = float(sys.argv[6]), int(sys.argv[7])

    def stamp(what):
        with open(stamps, "a") as fh:
            fh.write(f"{what} {name} {time.time():.6f}\\n")

    def timed(fn, **kw):
        stamp("start")
        time.sleep(hold)
        stamp("end")
        return 1.0

    def graph_like(fn, **kw):
        with bench.held():
            timed(fn)
        stamp("cap0")
        time.sleep(capture)
        stamp("cap1")
        with bench.held():
            return timed(fn)

    bench = ExclusiveBench(graph_like if capture else timed, lock, lambda: None, delegate=bool(capture))
    ready = os.path.join(os.path.dirname(stamps), "ready")
    if peers:
        with open(ready, "a") as fh:
            fh.write(name + "\\n")
        while len(open(ready).read().split()) < peers:
            time.sleep(0.005)
    for _ in range(calls):
        bench(lambda: stamp("pre"))
    print(bench.summary(2))
''')


def worker(tmp_path, name, calls=1, hold=0.05, capture=0.0, peers=0):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, str(script), str(tmp_path / "device.lock"), str(tmp_path / "stamps"),
                             name, str(calls), str(hold), str(capture), str(peers)],
                            env=env, stdout=subprocess.PIPE, text=True)


def stamps(tmp_path):
    p = tmp_path / "stamps"
    return [(w, n, float(t)) for w, n, t in (ln.split() for ln in p.read_text().splitlines())] if p.exists() else []


def wait_for(pred, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.02)
    return pred()


def test_the_compiling_call_runs_outside_the_lock_and_the_timed_stretch_waits_for_it(tmp_path):
    with open(tmp_path / "device.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)        # another run is timing on this device
        proc = worker(tmp_path, "b")
        assert wait_for(lambda: any(w == "pre" for w, _, _ in stamps(tmp_path)))
        time.sleep(0.5)
        assert [w for w, _, _ in stamps(tmp_path)] == ["pre"], "timed while the device was locked"
        fcntl.flock(held, fcntl.LOCK_UN)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert [w for w, _, _ in stamps(tmp_path)] == ["pre", "start", "end"]
    assert "1 do_bench call(s) held the device" in out and "waited 0.0" not in out


def peak_of_timed_stretches(marks) -> int:
    """Most timed stretches (start..end) running at once, over all runs."""
    events = sorted((t, 1 if w == "start" else -1) for w, _, t in marks if w in ("start", "end"))
    running, peak = 0, 0
    for _, step in events:   # at a tie an end sorts before a start
        running += step
        peak = max(peak, running)
    return peak


def test_timed_stretches_of_several_runs_never_overlap(tmp_path):
    procs = [worker(tmp_path, f"r{i}", calls=4, hold=0.03) for i in range(3)]
    for p in procs:
        p.communicate(timeout=120)
        assert p.returncode == 0
    marks = stamps(tmp_path)
    assert len([m for m in marks if m[0] in ("start", "end")]) == 2 * 3 * 4
    assert peak_of_timed_stretches(marks) == 1


def test_a_lock_aware_timers_capture_overlaps_another_runs_timing_its_stretches_never(tmp_path):
    """Two graph-like runs started together: each call's two held stretches (warmup and
    estimate, replays) never overlap the other run's, while a capture, unheld, runs beside
    the other run's timed stretches."""
    procs = [worker(tmp_path, f"r{i}", calls=3, hold=0.03, capture=0.15, peers=2) for i in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    marks = stamps(tmp_path)
    assert len([m for m in marks if m[0] in ("start", "end")]) == 2 * 2 * 3 * 2
    assert peak_of_timed_stretches(marks) == 1

    def spans(first, last, name):
        a = [t for w, n, t in marks if w == first and n == name]
        b = [t for w, n, t in marks if w == last and n == name]
        return list(zip(a, b))

    beside = [(c, s) for me, other in (("r0", "r1"), ("r1", "r0"))
              for c in spans("cap0", "cap1", me) for s in spans("start", "end", other)
              if s[0] < c[1] and c[0] < s[1]]
    assert beside, "no capture ran while the other run timed: the lock was held through it"
    assert all("3 do_bench call(s) held the device" in out and "over 6 locked stretch(es)" in out
               for out in outs)


def test_a_nested_call_runs_inside_the_held_lock_and_a_failing_pre_call_is_retried_under_it(tmp_path):
    calls = []

    def inner(fn, **kw):
        calls.append(kw.get("tag"))
        if kw.get("tag") == "outer":          # an autotuner benchmarking inside the timed call
            return bench(lambda: calls.append("inner-pre"), tag="inner") + 1
        return 1.0

    bench = ExclusiveBench(inner, str(tmp_path / "lock"), lambda: None)
    assert bench(lambda: calls.append("outer-pre"), tag="outer") == 2.0
    assert calls == ["outer-pre", "outer", "inner"]      # no pre-call inside the lock, no deadlock
    first = {"n": 0}

    def fails_once():
        first["n"] += 1
        if first["n"] == 1:
            raise RuntimeError("launch failed")

    assert bench(fails_once, tag="x") == 1.0
    assert bench.stats["precall_errors"] == 1 and bench.stats["calls"] == 2
    assert "1 pre-call(s) raised and were retried under the lock" in bench.summary(2)
    bench.close()


def test_held_stretches_are_counted_and_their_seconds_summed(tmp_path):
    """A delegating bench: `calls` counts do_bench calls, `stretches` acquisitions (a nested
    held() takes none); held and waited seconds are summed over the stretches, and the
    unheld part of the call (a capture) is in neither."""
    lock = str(tmp_path / "lock")
    other = os.open(lock, os.O_RDWR | os.O_CREAT)

    def another_run_holds_it_for(seconds):
        fcntl.flock(other, fcntl.LOCK_EX)
        threading.Timer(seconds, fcntl.flock, (other, fcntl.LOCK_UN)).start()

    def inner(fn, **kw):
        for _ in range(2):
            another_run_holds_it_for(0.05)
            with bench.held():
                with bench.held():
                    time.sleep(0.02)
            time.sleep(0.2)                 # unheld
        return 1.0

    bench = ExclusiveBench(inner, lock, lambda: None, delegate=True)
    assert bench(lambda: None) == 1.0 and bench.depth == 0
    s = bench.stats
    assert s["calls"] == 1 and s["stretches"] == 2
    assert 0.04 <= s["held_s"] < 0.35 and s["waited_s"] >= 0.08
    assert "1 do_bench call(s) held the device" in bench.summary(2)
    assert "over 2 locked stretch(es)" in bench.summary(2)
    with pytest.raises(RuntimeError):       # a stretch that raises still releases the lock
        with bench.held():
            raise RuntimeError("replay failed")
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fcntl.flock(other, fcntl.LOCK_UN)
    assert bench.depth == 0 and s["stretches"] == 3
    # a whole-call bench (direct timer): one stretch per call
    whole = ExclusiveBench(lambda fn, **kw: 1.0, lock, lambda: None)
    whole(lambda: None)
    whole(lambda: None)
    assert whole.stats["calls"] == whole.stats["stretches"] == 2
    bench.close()
    whole.close()
    os.close(other)


@pytest.mark.parametrize("overlap, lock, share, needle", [
    ("0", "/l", 1, "ZL_DEVICE_OVERLAP='0' is not an integer >= 1"),
    ("two", "/l", 1, "ZL_DEVICE_OVERLAP='two' is not an integer >= 1"),
    ("2", "", 1, "ZL_DEVICE_OVERLAP=2 needs ZL_TIMING_LOCK"),
    ("2", "/l", 2, "either shared (functional only) or overlapped"),
])
def test_bad_settings_are_named(overlap, lock, share, needle):
    with pytest.raises(ExclusiveTimingError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse_overlap(overlap, lock, share)


def test_good_settings_and_an_unopenable_lock():
    assert parse_overlap("", "", 1) == 1 and parse_overlap(" 3 ", "/l", 1) == 3
    assert parse_overlap("1", "", 4) == 1     # a shared run without overlap stays --share-device's
    with pytest.raises(ExclusiveTimingError, match="ZL_TIMING_LOCK='/proc/no-such-dir/l' cannot be opened"):
        ExclusiveBench(lambda fn: 0, "/proc/no-such-dir/l", lambda: None)
