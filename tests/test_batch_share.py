"""run_batch.py --share-device N: several cases on one device at once, a functional sweep
whose timings are marked invalid everywhere (identity device_share, caliber refusal,
ops_status notes, summary.csv, warnings), and a batch that never mixes 1 and N > 1.
run_batch.py --overlap N: N cases per device too, each handed the device's timing lock
(zl/timing/exclusive.py), recorded as device_overlap, a caliber field kept across --resume."""

import csv
import fcntl
import json
import os
import threading
import time
from pathlib import Path

import pytest

import _device_setup_plugin as dsp
import batch_summary as bs
from harness.fake_config import FakeConfig
from harness.identity_links import link_fields
from test_batch import batch, most_at_once, status
from zl import identity as ri
from zl.batch.execute import lock_credit_s
from zl.batch.executor import LocalExecutor
from zl.flaggems import VENDOR_ENV_KEYS
from zl.runlog.caliber import complaints


def test_executor_runs_up_to_share_cases_per_device_and_keeps_each_on_its_device():
    cond = threading.Condition()
    active, peak, done = {"0": 0, "1": 0}, {"0": 0, "1": 0}, {"0": 0, "1": 0}
    seen = []
    held = {"share": 3, "stalled": False}

    def work(case, device):
        with cond:
            active[device] += 1
            peak[device] = max(peak[device], active[device])
            seen.append((case, device))
            cond.notify_all()
            # Each case is held until as many run on its device as the share allows (or none is
            # left to start), so the peak does not depend on how fast threads start on a loaded
            # machine. An executor that never gets there is let go once, after 60 s.
            full = lambda: active[device] >= min(held["share"], len(shards[device]) - done[device])
            if not cond.wait_for(lambda: full() or held["stalled"], timeout=60):
                held["stalled"] = True
                cond.notify_all()
            active[device] -= 1
            done[device] += 1
            cond.notify_all()

    shards = {"0": [f"a{i}" for i in range(7)], "1": ["b0", "b1"]}
    LocalExecutor(3).run(shards, work, lambda: True)
    assert peak == {"0": 3, "1": 2} and not held["stalled"]
    assert sorted(seen) == sorted((c, d) for d, cs in shards.items() for c in cs)
    peak.update({"0": 0, "1": 0})
    done.update({"0": 0, "1": 0})
    held["share"] = 1
    LocalExecutor().run(shards, work, lambda: True)
    assert peak == {"0": 1, "1": 1}
    with pytest.raises(ValueError, match="share must be >= 1"):
        LocalExecutor(0)


def test_shared_batch_overlaps_cases_and_marks_every_timing(tmp_path, capsys):
    bd = tmp_path / "b"
    times = tmp_path / "times"
    r = batch(tmp_path, "--ops", "softmax", "relu", "abs", "exp", "--devices", "0", "--batch-dir", bd,
              "--share-device", "2", ZL_STUB_PLAN="softmax=slow,relu=slow,abs=slow,exp=slow",
              ZL_STUB_SLOW_S="1", ZL_STUB_TIMES=str(times), ZL_DEVICE_SHARE="9")
    assert r.returncode == 0, r.stdout + r.stderr
    assert most_at_once(times) == 2            # two at a time, never three
    st = status(bd)
    assert all(v["status"] == "PASS" and "shared_device=2" in v["notes"] for v in st.values())
    ident = json.loads((bd / "main/relu/run_identity.json").read_text())
    assert ident["device_share"] == 2           # the parent's ZL_DEVICE_SHARE=9 never reaches a case
    assert json.loads((bd / "batch.json").read_text())["share_device"] == 2
    assert r.stdout.count("TIMINGS OF THIS BATCH ARE FUNCTIONAL ONLY") == 2   # start and end
    assert "!!! [batch-summary] rows measured on a shared device (device_share=2" in r.stdout
    with open(bd / "summary.csv", newline="") as fh:
        assert {row["device_share"] for row in csv.DictReader(fh)} == {"2"}
    capsys.readouterr()
    assert bs.main(["--batch", str(bd), "--json", str(tmp_path / "b.json")]) == 0
    assert "!!! [batch-summary] rows measured on a shared device" in capsys.readouterr().out
    assert "functional check" in json.loads((tmp_path / "b.json").read_text())["timing_warning"]
    # --resume may change N within shared (> 1), never to a timing-valid 1; left out, it is the batch's
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", "--share-device", "1")
    assert r.returncode == 2 and "started with --share-device 2, this call gives --share-device 1" in r.stderr
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", "--share-device", "3")
    assert r.returncode == 0 and "4 reused, 0 to run" in r.stdout, r.stdout + r.stderr
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0")
    assert r.returncode == 0 and "4 reused, 0 to run" in r.stdout, r.stdout + r.stderr
    assert [c["share_device"] for c in json.loads((bd / "batch.json").read_text())["calls"]] == [2, 3, 3]


def test_solo_batch_runs_one_at_a_time_unmarked_and_refuses_a_shared_resume(tmp_path):
    bd = tmp_path / "b"
    times = tmp_path / "times"
    r = batch(tmp_path, "--ops", "softmax", "relu", "--devices", "0", "--batch-dir", bd,
              ZL_STUB_TIMES=str(times), ZL_DEVICE_SHARE="4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert most_at_once(times) == 1
    assert "device_share" not in json.loads((bd / "main/relu/run_identity.json").read_text())
    assert not any("shared_device" in v["notes"] for v in status(bd).values())
    assert "FUNCTIONAL ONLY" not in r.stdout and "shared device" not in r.stdout
    assert json.loads((bd / "batch.json").read_text())["share_device"] == 1
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", "--share-device", "2")
    assert r.returncode == 2 and "started with --share-device 1, this call gives --share-device 2" in r.stderr
    assert "Traceback" not in r.stderr


def test_budget_holds_for_every_worker_of_a_shared_device(tmp_path):
    bd = tmp_path / "b"
    # worst case per case = 1 + 0.5 + 5 s: only what starts in the first 0.5 s may start
    r = batch(tmp_path, "--ops", "softmax", "relu", "abs", "--devices", "0", "--batch-dir", bd,
              "--share-device", "2", "--op-timeout", "1", "--kill-grace", "0.5", "--budget-s", "7",
              ZL_STUB_PLAN="softmax=slow,relu=slow,abs=slow", ZL_STUB_SLOW_S="3")
    assert r.returncode == 3, r.stdout + r.stderr
    assert sorted(v["status"] for v in status(bd).values()) == ["PENDING", "TIMEOUT", "TIMEOUT"]


@pytest.mark.parametrize("value, needle", [("0", "must be >= 1"), ("-2", "must be >= 1"),
                                           ("two", "not an integer"), ("1.5", "not an integer")])
def test_bad_share_exits_2(tmp_path, value, needle):
    r = batch(tmp_path, "--ops", "softmax", "--share-device", value)
    assert r.returncode == 2 and "--share-device" in r.stderr and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "runs").exists()


def test_overlapped_batch_hands_each_device_one_timing_lock_and_keeps_its_setting(tmp_path):
    bd = tmp_path / "b"
    times = tmp_path / "times"
    r = batch(tmp_path, "--ops", "softmax", "relu", "abs", "exp", "--devices", "0,1", "--batch-dir", bd,
              "--overlap", "2", "--switch", "ZL_AB", ZL_STUB_PLAN="softmax=slow,relu=slow,abs=slow,exp=slow",
              ZL_STUB_SLOW_S="1", ZL_STUB_TIMES=str(times), ZL_DEVICE_OVERLAP="9", ZL_TIMING_LOCK="/elsewhere")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 case(s) at a time per device, timing exclusive" in r.stdout
    assert "FUNCTIONAL ONLY" not in r.stdout and "shared device" not in r.stdout
    per_device = {}
    for side in ("before", "after"):
        st = status(bd / side)
        assert all(v["status"] == "PASS" and "overlap=2" in v["notes"] for v in st.values()), st
        for name, row in st.items():
            ident = json.loads((bd / side / "main" / name / "run_identity.json").read_text())
            # the parent's ZL_DEVICE_OVERLAP=9 and lock never reach a case
            assert ident["device_overlap"] == 2 and "device_share" not in ident
            lock = Path(ident["stub_timing_lock"])
            assert lock == (bd / ".timing-locks" / f"device-{row['device']}.lock").resolve()
            per_device.setdefault(row["device"], set()).add(lock)
    # both sides of a screen, every case of a device: one lock; two devices: two locks
    assert sorted(per_device) == ["0", "1"] and all(len(v) == 1 for v in per_device.values())
    assert per_device["0"] != per_device["1"]
    assert json.loads((bd / "batch.json").read_text())["overlap"] == 2
    # --resume keeps the setting (caliber): another N exits 2, left out it is the batch's
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0,1", "--overlap", "1")
    assert r.returncode == 2 and "started with --overlap 2, this call gives --overlap 1" in r.stderr
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0,1")
    assert r.returncode == 0 and "4 reused, 0 to run" in r.stdout, r.stdout + r.stderr


def test_overlap_runs_n_at_once_and_a_solo_run_is_not_its_peer(tmp_path):
    bd = tmp_path / "b"
    times = tmp_path / "times"
    r = batch(tmp_path, "--ops", "softmax", "relu", "abs", "--devices", "0", "--batch-dir", bd,
              "--overlap", "3", ZL_STUB_PLAN="softmax=slow,relu=slow,abs=slow", ZL_STUB_SLOW_S="1",
              ZL_STUB_TIMES=str(times))
    assert r.returncode == 0, r.stdout + r.stderr
    assert most_at_once(times) == 3
    solo = _run(tmp_path / "solo", autotune_mode="record")
    over = _run(tmp_path / "over", autotune_mode="replay", device_overlap=3)
    assert complaints([("before", solo), ("after", over)]) == ["device_overlap differs: before=<missing>, after=3"]
    # overlapped alike: a valid pair (unlike device_share, equal values are fine)
    peer = _run(tmp_path / "peer", autotune_mode="record", device_overlap=3)
    assert complaints([("before", peer), ("after", over)]) == []
    # overlapped under the shared-stretch protocol vs before it existed: another caliber
    now = _run(tmp_path / "now", autotune_mode="replay", device_overlap=3, overlap_protocol="timed-alone-lifecycle")
    assert complaints([("before", peer), ("after", now)]) == [
        "overlap_protocol differs: before=<missing>, after=timed-alone-lifecycle"]
    # a run whose contexts and exits ran beside others' timings vs one where they did not
    then = _run(tmp_path / "then", autotune_mode="record", device_overlap=3, overlap_protocol="timed-alone")
    assert complaints([("before", then), ("after", now)]) == [
        "overlap_protocol differs: before=timed-alone, after=timed-alone-lifecycle"]


@pytest.mark.parametrize("args, needle", [
    (("--overlap", "0"), "must be >= 1"),
    (("--overlap", "2", "--share-device", "2"), "either shared (functional only) or overlapped"),
])
def test_bad_overlap_exits_2(tmp_path, args, needle):
    r = batch(tmp_path, "--ops", "softmax", *args)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "runs").exists()


def _run(d: Path, **ident) -> Path:
    d.mkdir(parents=True)
    (d / "run_identity.json").write_text(json.dumps({"backend": "cuda", "device": "0",
                                                     **link_fields(ident.get("autotune_mode")), **ident}))
    return d


def test_caliber_refuses_any_shared_run_even_when_both_sides_match(tmp_path):
    a = _run(tmp_path / "a", autotune_mode="record", device_share=2)
    b = _run(tmp_path / "b", autotune_mode="replay", device_share=2)
    got = complaints([("before", a), ("after", b)])
    assert got == [f"{s}: device shared with 2 concurrent measurements (device_share): "
                   "a functional check, not a timing" for s in ("before", "after")]
    solo_a = _run(tmp_path / "sa", autotune_mode="record")
    solo_b = _run(tmp_path / "sb", autotune_mode="replay")
    assert complaints([("before", solo_a), ("after", solo_b)]) == []
    mixed = complaints([("before", solo_a), ("after", b)])
    assert "device_share differs: before=<missing>, after=2" in mixed
    one = _run(tmp_path / "one", autotune_mode="replay", device_share=1)
    assert complaints([("before", solo_a), ("after", one)]) == ["device_share differs: before=<missing>, after=1"]


@pytest.fixture
def identity_dir(monkeypatch, tmp_path):
    for key in VENDOR_ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("ZL_DEVICE_SHARE", raising=False)
    monkeypatch.setenv("OUT_DIR", str(tmp_path))
    monkeypatch.setenv("ZL_BACKEND", "cuda")
    return tmp_path


def _configure(**opts):
    config = FakeConfig(dsp, **opts)
    try:
        dsp.pytest_configure(config)
    finally:
        dsp.pytest_unconfigure(config)


def test_plugin_records_device_share_from_option_or_variable(identity_dir, monkeypatch):
    _configure()
    assert "device_share" not in ri.load_identity(str(identity_dir))
    _configure(zl_device_share="1")
    assert "device_share" not in ri.load_identity(str(identity_dir))
    monkeypatch.setenv("ZL_DEVICE_SHARE", "3")
    _configure()
    assert ri.load_identity(str(identity_dir))["device_share"] == 3
    _configure(zl_device_share="4")               # the command line wins over the variable
    assert ri.load_identity(str(identity_dir))["device_share"] == 4
    for bad in ("0", "x", "2.5"):
        with pytest.raises(pytest.UsageError, match="ZL_DEVICE_SHARE=.* is not an integer >= 1"):
            _configure(zl_device_share=bad)


def test_progress_rate_and_eta_follow_the_wall_clock_not_the_cases_own_seconds(capsys):
    from zl.batch.execute import Progress
    now = {"t": 100.0}
    p = Progress(10, clock=lambda: now["t"])
    now["t"] += 360                       # 4 cases done in 6 minutes of wall clock, overlapped
    for _ in range(4):
        p.one_done(lambda done, eta: f"{done} {eta:.1f}")
    assert capsys.readouterr().out.split("\n")[-2] == "4 9.0"    # 6 left at 40/h
    assert p.rate_per_hour() == 40.0
    assert Progress(3, clock=lambda: 5.0).eta_min() == 0.0          # nothing done yet: no guess


def holding_lock(tmp_path):
    """A batch runner that holds device 0's timing lock for a while (see `holding`)."""
    def holding(seconds, *args, after_wait=False, **env):
        """Run the batch while holding the device's lock for `seconds`: from the start, or
        (after_wait) from the moment softmax records its wait, so that its start-up (4.2 s
        seen on a 2-core CI) does not eat into the wait."""
        bd = args[args.index("--batch-dir") + 1]
        lock = Path(bd) / ".timing-locks" / "device-0.lock"
        lock.parent.mkdir(parents=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        done = threading.Event()

        def release():
            record = Path(bd) / "main" / "softmax" / "lock_wait.json"
            while after_wait and not done.is_set():
                try:
                    if json.loads(record.read_text()).get("waiting_since") is not None:
                        break
                except (OSError, ValueError):
                    pass
                time.sleep(0.05)
            done.wait(seconds)
            fcntl.flock(fd, fcntl.LOCK_UN)
        releaser = threading.Thread(target=release)
        releaser.start()
        try:
            return batch(tmp_path, *args, **env)
        finally:
            done.set()
            releaser.join()
            os.close(fd)
    return holding


def test_op_timeout_does_not_count_the_wait_for_the_timing_lock_up_to_another_op_timeout(tmp_path):
    """Another run holds the device's lock: an overlapped case that waits for it longer than
    --op-timeout still passes; a wait beyond twice the timeout is a TIMEOUT that says how long
    it waited; a case that hangs without waiting times out at --op-timeout."""
    holding = holding_lock(tmp_path)
    # held 9.5 s from the wait's start against --op-timeout 8: the wait exceeds the timeout,
    # and start-up plus wait stay inside twice it
    r = holding(9.5, "--ops", "softmax", "--devices", "0", "--batch-dir", str(tmp_path / "b1"),
                "--overlap", "2", "--op-timeout", "8", after_wait=True, ZL_STUB_PLAN="softmax=lockwait")
    row = status(tmp_path / "b1")["softmax"]
    assert row["status"] == "PASS", (row, r.stdout + r.stderr)
    waited = json.loads((tmp_path / "b1" / "main" / "softmax" / "lock_wait.json").read_text())
    assert waited["waiting_since"] is None and 8.0 < waited["waited_s"] < 12.0
    t0 = time.monotonic()
    r = holding(9.0, "--ops", "softmax", "relu", "--devices", "0", "--batch-dir", str(tmp_path / "b2"),
                "--overlap", "2", "--op-timeout", "2", "--kill-grace", "1",
                ZL_STUB_PLAN="softmax=lockwait,relu=hang", ZL_STUB_STATE=str(tmp_path))
    st = status(tmp_path / "b2")
    assert st["softmax"]["status"] == "TIMEOUT" and "lock_waited_s=2" in st["softmax"]["notes"], st
    assert st["relu"]["status"] == "TIMEOUT" and "lock_waited_s" not in st["relu"]["notes"], st
    assert 3.5 <= int(st["softmax"]["elapsed_ms"]) / 1000 < 7.5 and 1.8 <= int(st["relu"]["elapsed_ms"]) / 1000 < 3.9
    assert time.monotonic() - t0 < 9.0 + 20


def test_overlapped_case_is_credited_one_op_timeout_of_lock_waits_per_other_case(tmp_path):
    """At --overlap 4 a case waiting 14 s for the lock at --op-timeout 6 passes: up to 3 x 6 s of
    waits are credited, so it is cut only for its own time. With --budget-s the credit stays one
    --op-timeout (the reserve each start is charged): a TIMEOUT that says it was cut waiting."""
    held = holding_lock(tmp_path)
    args = ("--ops", "softmax", "--devices", "0", "--overlap", "4", "--op-timeout", "6", "--kill-grace", "1")
    r = held(14.0, *args, "--batch-dir", str(tmp_path / "free"), after_wait=True, ZL_STUB_PLAN="softmax=lockwait")
    row = status(tmp_path / "free")["softmax"]
    assert row["status"] == "PASS", (row, r.stdout + r.stderr)
    waited = json.loads((tmp_path / "free" / "main" / "softmax" / "lock_wait.json").read_text())
    assert waited["waiting_since"] is None and 13.0 < waited["waited_s"] < 18.0
    r = held(14.0, *args, "--budget-s", "300", "--batch-dir", str(tmp_path / "budget"),
             after_wait=True, ZL_STUB_PLAN="softmax=lockwait")
    row = status(tmp_path / "budget")["softmax"]
    assert row["status"] == "TIMEOUT", (row, r.stdout + r.stderr)
    assert "lock_waited_s=6" in row["notes"] and "lock_wait_cut" in row["notes"], row
    assert int(row["elapsed_ms"]) / 1000 < 14.0


def test_lock_credit_is_one_op_timeout_per_other_case_or_one_under_a_budget():
    assert lock_credit_s(60.0, 1, None) == 0.0
    assert lock_credit_s(60.0, 2, None) == 60.0
    assert lock_credit_s(60.0, 12, None) == 660.0
    assert lock_credit_s(60.0, 12, 480.0) == 60.0


def test_budget_reserves_twice_the_op_timeout_per_side_under_overlap(tmp_path):
    """A case may be credited one more --op-timeout of lock waits, so its worst case under
    --overlap is 2 x 1 s + 0.5 s grace + 5 s = 7.5 s: a 7 s budget starts nothing (solo: 6.5 s)."""
    args = ("--ops", "softmax", "--devices", "0", "--op-timeout", "1", "--kill-grace", "0.5", "--budget-s", "7")
    r = batch(tmp_path, *args, "--batch-dir", tmp_path / "over", "--overlap", "2")
    assert r.returncode == 3 and status(tmp_path / "over")["softmax"]["status"] == "PENDING", r.stdout + r.stderr
    assert "x 2 (lock waits credited under --overlap) x 1 side(s)" in r.stdout + r.stderr
    assert "= 7.5 s" in r.stdout + r.stderr
    r = batch(tmp_path, *args, "--batch-dir", tmp_path / "solo")
    assert r.returncode == 0 and status(tmp_path / "solo")["softmax"]["status"] == "PASS", r.stdout + r.stderr


def test_a_real_overlapped_screen_holds_each_tests_gpu_work_shared_and_records_the_protocol(tmp_path):
    """The fake FlagGems tree with the real plugins, two nodes at --overlap 2: every side run
    times under the device's lock, holds it shared over its test, and says so; its identity
    carries the protocol, so the pair compares with itself and never with an older overlap."""
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "abs", "relu", "--devices", "0", "--dtypes", "float16", "--overlap", "2",
              "--switch", "ZL_AA_NOOP", "--batch-dir", bd, "--op-timeout", "200", stub=False, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    locks = bd / ".timing-locks"
    assert sorted(p.name for p in locks.iterdir()) == ["device-0.lock", "device-0.lock.gate", "device-0.lock.turn"]
    for side in ("before", "after"):
        st = status(bd / side)
        assert {n: v["status"] for n, v in st.items()} == {"abs": "PASS", "relu": "PASS"}, st
        for name in st:
            case = bd / side / "main" / name
            ident = json.loads((case / "run_identity.json").read_text())
            assert (ident["device_overlap"], ident["overlap_protocol"]) == (2, "timed-alone-lifecycle")
            log = (case / "run.log").read_text()
            line = [ln for ln in log.splitlines() if "exclusive timing (overlap=2" in ln]
            assert line and " 1 test run(s) held it shared" in line[-1] and "do_bench call(s) held" in line[-1], log
    pair = [("before", bd / "before/main/abs"), ("after", bd / "after/main/abs")]
    assert [c for c in complaints(pair) if "overlap" in c] == []
