"""zl/timing/exclusive.py: the timed stretch of each do_bench call holds the device's lock
alone, a test's GPU work holds it shared, compilation drops the share, a waiting timer is not
starved, and the settings refuse what would time a shared device.

Processes, not threads: the lock is fcntl.flock between the runs of one device."""

from __future__ import annotations

import fcntl
import heapq
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from zl.timing.exclusive import ExclusiveBench, ExclusiveTimingError, parse_overlap

ROOT = Path(__file__).resolve().parents[1]

# One process: `calls` do_bench calls; the pre-call (taking `pre` s, the GPU work a case does
# between two timings) and the timed stretch stamp a file.
WORKER = textwrap.dedent('''
    import fcntl, os, sys, time
    from zl.timing.exclusive import ExclusiveBench
    lock, stamps, name, calls, hold = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    pre = float(sys.argv[6])

    def stamp(what):               # a file per process: appends from several may lose lines
        with open(f"{stamps}-{name}", "a") as fh:
            fh.write(f"{what} {name} {time.time():.6f}\\n")

    def timed(fn, **kw):
        stamp("start")
        time.sleep(hold)
        stamp("end")
        return 1.0

    bench = ExclusiveBench(timed, lock, lambda: None)
    real_flock = fcntl.flock

    def flock(fd, op):              # a timer announces itself by taking the gate shared
        real_flock(fd, op)
        if fd == bench.gate and op == fcntl.LOCK_SH:
            stamp("announced")

    fcntl.flock = flock
    stamp("ready")                  # imports done: what follows waits only on the lock
    if calls:                       # a timer: its test's run is GPU work too, like a case's
        with bench.gpu_work():
            for _ in range(calls):
                bench(lambda: stamp("pre") or time.sleep(pre))
    else:                           # a run doing GPU work in stretches until told to stop
        while not os.path.exists(stamps + ".stop"):
            with bench.gpu_work():
                stamp("win")
                time.sleep(hold)
                stamp("wout")
    print(bench.summary(2))
''')


def worker(tmp_path, name, calls=1, hold=0.05, pre=0.0):
    # Written once: rewriting it while an earlier worker's interpreter reads it ran an empty
    # script in CI (exit 0, no output).
    script = tmp_path / "worker.py"
    if not script.exists():
        staged = tmp_path / "worker.py.part"
        staged.write_text(WORKER)
        staged.replace(script)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, str(script), str(tmp_path / "device.lock"), str(tmp_path / "stamps"),
                             name, str(calls), str(hold), str(pre)], env=env, stdout=subprocess.PIPE, text=True)


def stamps(tmp_path, announced=False):
    """[(what, name, t)] of all processes in time order, each process's in its own order; the
    timers' gate announcements only when asked for, the workers' "ready" never."""
    per_process = [[(w, n, float(t)) for w, n, t in (ln.split() for ln in p.read_text().splitlines())
                    if w != "ready" and (announced or w != "announced")]
                   for p in sorted(tmp_path.glob("stamps-*"))]
    return list(heapq.merge(*per_process, key=lambda e: e[2]))


def wait_for(pred, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.02)
    return pred()


def test_the_pre_call_shares_the_device_and_the_timed_stretch_waits_for_the_others_work(tmp_path):
    with open(tmp_path / "device.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_SH)        # another run's GPU work on this device
        proc = worker(tmp_path, "b")
        assert wait_for(lambda: any(w == "pre" for w, _, _ in stamps(tmp_path)))
        time.sleep(0.5)
        assert [w for w, _, _ in stamps(tmp_path)] == ["pre"], "timed while the device was locked"
        fcntl.flock(held, fcntl.LOCK_UN)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert [w for w, _, _ in stamps(tmp_path)] == ["pre", "start", "end"]
    assert "1 do_bench call(s) held the device" in out and "waited 0.0" not in out


def test_a_run_waits_to_start_its_gpu_work_while_another_times(tmp_path):
    with open(tmp_path / "device.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)        # another run is timing on this device
        proc = worker(tmp_path, "b")
        # From "ready" on the worker only waits for the lock; its start-up (0.2 s here, more
        # on a loaded CI machine) must not eat into the second it is held out.
        assert wait_for(lambda: (tmp_path / "stamps-b").exists())
        time.sleep(1.0)
        assert stamps(tmp_path) == [], "GPU work started while another run timed"
        fcntl.flock(held, fcntl.LOCK_UN)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and [w for w, _, _ in stamps(tmp_path)] == ["pre", "start", "end"]
    share_wait = re.search(r"\(([0-9.]+) s of it for GPU work while others timed\)", out)
    assert share_wait and float(share_wait.group(1)) >= 0.8, out


def test_timed_stretches_of_several_runs_never_overlap(tmp_path):
    procs = [worker(tmp_path, f"r{i}", calls=4, hold=0.03) for i in range(3)]
    for p in procs:
        p.communicate(timeout=120)
        assert p.returncode == 0
    events = sorted((t, 1 if w == "start" else -1) for w, _, t in stamps(tmp_path) if w != "pre")
    assert len(events) == 2 * 3 * 4
    running, peak = 0, 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        running += step
        peak = max(peak, running)
    assert peak == 1


def other_runs_probe(lock):
    """(fd, can_time): whether another run could take the device's lock exclusively now."""
    probe = os.open(lock, os.O_RDWR | os.O_CREAT)

    def can_time():
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(probe, fcntl.LOCK_UN)
        return True
    return probe, can_time


def intervals(events, begin, end):
    """{name: [(t_begin, t_end), ...]} from the stamps `begin`/`end` of each process."""
    out, open_at = {}, {}
    for what, name, t in events:
        if what == begin:
            open_at[name] = t
        elif what == end:
            out.setdefault(name, []).append((open_at.pop(name), t))
    return out


def test_a_timed_stretch_never_meets_another_runs_gpu_work_and_a_waiting_timer_gets_in(tmp_path):
    """Three runs take back-to-back shared stretches (one always holds the lock shared) while
    a fourth times: flock alone would starve the timer; the gate lets it in, and no stretch
    of GPU work overlaps a timed one (H200, overlap 8: others' GPU work during replays read
    A/A up to 27 %)."""
    readers = [worker(tmp_path, f"w{i}", calls=0, hold=0.05) for i in range(3)]
    assert wait_for(lambda: len({n for w, n, _ in stamps(tmp_path) if w == "win"}) == 3)
    timer = worker(tmp_path, "t", calls=5, hold=0.03, pre=0.05)
    out, _ = timer.communicate(timeout=60)
    (tmp_path / "stamps.stop").write_text("")
    for p in readers:
        p.communicate(timeout=60)
        assert p.returncode == 0
    assert timer.returncode == 0 and "5 do_bench call(s)" in out and "1 test run(s) held it shared" in out
    events = stamps(tmp_path)
    timed = intervals(events, "start", "end")["t"]
    work = [iv for name, ivs in intervals(events, "win", "wout").items() for iv in ivs]
    assert len(timed) == 5 and len(work) >= 6
    clashes = [(t, w) for t in timed for w in work if w[0] < t[1] and t[0] < w[1]]
    assert clashes == []
    # the readers went on between the timer's calls, beside its own GPU work: a lone timer turns
    # the lock into its share and lets the runs waiting at the gate in
    first, last = timed[0][0], timed[-1][1]
    assert any(first < w[0] < last for w in work)


def test_timers_waiting_together_time_one_after_another_with_no_share_between(tmp_path):
    """Five timers and three runs in back-to-back shared stretches. A timer announced on the
    gate before another's timed stretch ended was waiting through it: the next timed stretch
    must then follow with no shared stretch begun in between (a gate held only while waiting
    let shares in between waiting timers, each timer paying a drain of its own). The
    announcement, not the pre-call, is the mark: between the two a share may rightly start."""
    readers = [worker(tmp_path, f"w{i}", calls=0, hold=0.15) for i in range(3)]
    assert wait_for(lambda: len({n for w, n, _ in stamps(tmp_path) if w == "win"}) == 3)
    timers = [worker(tmp_path, f"t{i}", calls=4, hold=0.1) for i in range(5)]
    for p in timers:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0 and "4 do_bench call(s)" in out
    (tmp_path / "stamps.stop").write_text("")
    for p in readers:
        p.communicate(timeout=60)
    events = stamps(tmp_path, announced=True)
    timed = sorted((iv, n) for n, ivs in intervals(events, "start", "end").items() for iv in ivs)
    wins = [t for w, _, t in events if w == "win"]
    chained = 0
    for (a, _), (b, owner) in zip(timed, timed[1:]):
        announced = max(t for w, n, t in events if w == "announced" and n == owner and t < b[0])
        if announced < a[1]:            # `owner` waited through a's timed stretch
            chained += 1
            assert not [t for t in wins if a[1] < t < b[0]], (a, b, owner)
    assert chained >= 3 and len(timed) == 20


def test_compiling_drops_the_share_and_takes_it_back(tmp_path, monkeypatch):
    from triton.runtime.jit import JITFunction
    from zl.patching import PatchStack
    from zl.timing.exclusive import release_share_while_compiling
    lock = str(tmp_path / "device.lock")
    probe, can_time = other_runs_probe(lock)
    seen = []
    monkeypatch.setattr(JITFunction, "_do_compile", lambda self, *a: seen.append(can_time()) or "kernel")
    probe_compile = JITFunction._do_compile
    bench = ExclusiveBench(lambda fn, **kw: 1.0, lock, lambda: None)
    patches = PatchStack()
    assert release_share_while_compiling(bench, patches) is None
    with bench.gpu_work():
        assert not can_time()
        assert JITFunction._do_compile(None, "key") == "kernel"
        assert seen == [True] and not can_time()          # free while compiling, shared again after
    assert can_time() and bench.stats["compiles"] == 1
    patches.undo_all()
    assert JITFunction._do_compile is probe_compile
    JITFunction._do_compile(None)                          # outside any stretch: nothing to drop
    assert seen == [True, True]
    bench.close()
    os.close(probe)


def test_the_share_total_counts_shared_stretches_not_compiles(tmp_path):
    """What a waiting timer must outlast: the seconds held shared (0.2 s, then 0.3 s), not the
    0.5 s compile between them, which dropped the share."""
    bench = ExclusiveBench(lambda fn, **kw: 1.0, str(tmp_path / "device.lock"), lambda: None)
    with bench.gpu_work():
        time.sleep(0.2)
        bench.compiling(lambda: time.sleep(0.5))()
        time.sleep(0.3)
    held, longest = bench.stats["share_held_s"], bench.stats["share_longest_s"]
    assert 0.5 <= held < 0.95 and 0.3 <= longest < 0.5 and bench.stats["share_takes"] == 2, bench.stats
    assert f"1 test run(s) held it shared {held:.3f} s in 2 stretch(es) (longest {longest:.3f} s)" in bench.summary(2)
    bench.close()


def test_a_share_is_released_only_after_this_runs_queued_work_finished(tmp_path):
    """Kernels still queued when the share drops would run beside another run's timing: the
    synchronize comes first, while the share still keeps timers out, at a test's end and
    before a compile; a synchronize that raises is counted and the share still released."""
    lock = str(tmp_path / "device.lock")
    probe, can_time = other_runs_probe(lock)
    syncs, fail = [], {"on": False}

    def synchronize():
        syncs.append(can_time())
        if fail["on"]:
            raise RuntimeError("an illegal memory access was encountered")

    bench = ExclusiveBench(lambda fn, **kw: 1.0, lock, synchronize)
    with bench.gpu_work():
        bench.compiling(lambda: syncs.append("compile " + str(can_time())))()
        assert syncs == [False, "compile True"]
    assert syncs == [False, "compile True", False] and can_time()
    fail["on"] = True
    with bench.gpu_work():
        pass
    assert can_time() and bench.stats["settle_errors"] == 1
    assert "1 synchronize(s) before releasing the share raised" in bench.summary(2)
    bench.close()
    os.close(probe)


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


def test_a_wait_is_written_for_the_batch_while_it_lasts_and_after(tmp_path):
    from zl.timing.exclusive import WAIT_FILE, waited_s
    lock = str(tmp_path / "device.lock")
    other = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(other, fcntl.LOCK_EX)
    bench = ExclusiveBench(lambda fn, **kw: 1.0, lock, lambda: None, wait_file=str(tmp_path / WAIT_FILE))
    assert waited_s(tmp_path) == 0.0                       # nothing recorded yet
    t = threading.Thread(target=bench, args=(lambda: None,))
    t.start()
    time.sleep(0.5)
    during = waited_s(tmp_path)
    assert 0.3 < during < 5.0 and waited_s(tmp_path, now=time.time() + 10) > during + 9   # under way
    released = time.time()
    fcntl.flock(other, fcntl.LOCK_UN)
    t.join()
    rec = json.loads((tmp_path / WAIT_FILE).read_text())
    assert rec["waiting_since"] is None and rec["waited_s"] >= 0.4
    # the timed stretch on record (epoch s), after the wait: what ran beside it can be looked up
    (start, end), = rec["timed"]
    assert released - 0.01 <= start <= end <= time.time()
    from zl.timing.exclusive import timed_stretches
    assert timed_stretches(tmp_path) == [[start, end]]
    assert waited_s(tmp_path, now=time.time() + 10) == rec["waited_s"]   # a finished wait stays put
    (tmp_path / WAIT_FILE).write_text("{half")
    assert waited_s(tmp_path) == 0.0 and timed_stretches(tmp_path) == []
    bench.close()
    os.close(other)


def timer_stream(lock, stop, n=3, hold=0.1, pre=0.02):
    """`n` threads timing back to back outside any share, each with its own descriptors (flock
    locks belong to open files): their announcements on the gate overlap without a gap."""
    def timer():
        bench = ExclusiveBench(lambda fn, **kw: time.sleep(hold) or 1.0, lock, lambda: None)
        try:
            while not stop.is_set():
                bench(lambda: time.sleep(pre))
        finally:
            bench.close()
    threads = [threading.Thread(target=timer) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def test_a_share_kept_out_by_a_stream_of_timers_gets_in_once_it_has_waited_its_age(tmp_path):
    """Timers keep the gate announced without a gap. A run that must start GPU work waits as
    long as the stream lasts (share_age_s 60 here), unless it has waited its age: then it
    closes the turnstile and gets in once the timers already announced have timed."""
    lock = str(tmp_path / "device.lock")
    stop = threading.Event()
    streams = timer_stream(lock, stop)
    got = {}

    def share(name, age):
        bench = ExclusiveBench(lambda *a, **k: None, lock, lambda: None, share_age_s=age)
        t0 = time.monotonic()
        with bench.gpu_work():
            got[name] = time.monotonic() - t0
        got[name + "_aged"] = bench.stats["aged_shares"]
        bench.close()

    try:
        time.sleep(0.3)
        patient = threading.Thread(target=share, args=("patient", 60.0))
        patient.start()
        time.sleep(2.5)
        assert "patient" not in got, "the stream left a gap: the test shows nothing"
        # once the aged share is in, the patient one may follow it through the same gap
        aged = threading.Thread(target=share, args=("aged", 1.0))
        aged.start()
        aged.join(timeout=10)
        assert 1.0 <= got.get("aged", 99) < 4.0 and got["aged_aged"] == 1, got
    finally:
        stop.set()
        for t in streams:
            t.join(timeout=30)
    patient.join(timeout=30)
    aged.join(timeout=30)
    assert got["patient"] >= 2.5 and got["patient_aged"] == 0, got


def test_an_aged_share_never_runs_beside_a_timed_stretch(tmp_path):
    """The turnstile changes who goes first, never exclusion: with an age of 0.2 s, shared
    stretches of GPU work and timed stretches stamped by threads never overlap."""
    lock = str(tmp_path / "device.lock")
    events, guard = [], threading.Lock()

    def stamp(what, name):
        with guard:
            events.append((what, name, time.monotonic()))

    def timer(name):
        def timed(fn, **kw):
            stamp("start", name)
            time.sleep(0.05)
            stamp("end", name)
            return 1.0
        bench = ExclusiveBench(timed, lock, lambda: None)
        for _ in range(15):
            bench(lambda: time.sleep(0.01))
        bench.close()

    def worker(name):
        bench = ExclusiveBench(lambda *a, **k: None, lock, lambda: None, share_age_s=0.2)
        for _ in range(6):
            with bench.gpu_work():
                stamp("win", name)
                time.sleep(0.05)
                stamp("wout", name)
        bench.close()

    threads = ([threading.Thread(target=timer, args=(f"t{i}",)) for i in range(3)]
               + [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(2)])
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    timed = [iv for ivs in intervals(events, "start", "end").values() for iv in ivs]
    shared = [iv for ivs in intervals(events, "win", "wout").values() for iv in ivs]
    assert len(timed) == 45 and len(shared) == 12
    assert not [(a, b) for a in timed for b in shared if a[0] < b[1] and b[0] < a[1]]


def test_a_share_taken_where_no_thread_may_start_waits_without_the_watchdog(tmp_path, monkeypatch):
    """At exit (the share held until the process is gone) Python 3.12 refuses new threads: the
    share still comes, by the plain blocking wait, once the timer holding the gate is done."""
    lock = str(tmp_path / "device.lock")
    timer = ExclusiveBench(lambda *a, **k: None, lock, lambda: None)
    fcntl.flock(timer.gate, fcntl.LOCK_SH)              # a timer announced
    threading.Timer(0.5, fcntl.flock, args=(timer.gate, fcntl.LOCK_UN)).start()

    def refuse(self):
        raise RuntimeError("can't create new thread at interpreter shutdown")
    monkeypatch.setattr(threading.Thread, "start", refuse)
    share = ExclusiveBench(lambda *a, **k: None, lock, lambda: None, share_age_s=0.1)
    t0 = time.monotonic()
    with share.gpu_work():
        waited = time.monotonic() - t0
    assert 0.4 < waited < 5.0 and share.stats["aged_shares"] == 0
    share.close()
    timer.close()
