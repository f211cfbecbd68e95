"""zl/results/prewarm.py and its wiring in _results_plugin: the capture's kernels loaded in a
background thread during start-up, joined before any test runs."""

import threading

import pytest
import torch

import _results_plugin
from zl.results import capture, prewarm


def _fake_cuda(monkeypatch, describe=None):
    """torch.cuda 'available' on the CPU: tensors made for 'cuda' stay on the CPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    real_ones = torch.ones
    monkeypatch.setattr(torch, "ones", lambda *a, device=None, **k: real_ones(*a, **k))
    monkeypatch.setattr(capture, "HOST_CAP", 1 << 10)
    monkeypatch.setattr(prewarm, "ELEMENTS", 1 << 11)
    if describe is not None:
        monkeypatch.setattr(capture, "describe", describe)


def test_without_cuda_it_says_so_and_joins_once():
    logged = []
    p = prewarm.Prewarm(logged.append)
    p.start()
    assert p.join() >= 0.0 and p.join() == 0.0
    assert p.outcome == "skipped (no CUDA device)"
    assert len(logged) == 1 and "skipped (no CUDA device)" in logged[0] and "waited" in logged[0]


def test_it_runs_the_large_record_path_once_per_float_dtype(monkeypatch):
    large = []
    real_large = capture._describe_large
    monkeypatch.setattr(capture, "_describe_large", lambda tensor, t: large.append(t.dtype) or real_large(tensor, t))
    _fake_cuda(monkeypatch)
    logged = []
    p = prewarm.Prewarm(logged.append)
    p.start()
    p.join()
    assert large == [torch.float16, torch.bfloat16, torch.float32]
    assert p.outcome == "float16, bfloat16, float32 loaded" and p.busy_s > 0
    assert "float16, bfloat16, float32 loaded" in logged[0]


def test_with_overlapping_runs_the_work_holds_the_device_lock_shared(monkeypatch, tmp_path):
    """Under --overlap the prewarm's kernels are GPU work like a test's: no other run may time
    beside them (taking the lock exclusively fails while they run), and the lock is free after."""
    import os
    from test_timing_exclusive import other_runs_probe
    lock = str(tmp_path / "device.lock")
    probe, can_time = other_runs_probe(lock)
    seen = []
    _fake_cuda(monkeypatch, describe=lambda t: seen.append(can_time()) or {})
    p = prewarm.Prewarm(lambda m: None, lock)
    p.start()
    p.join()
    assert seen == [False, False, False] and can_time()
    assert p.outcome.startswith("float16, bfloat16, float32 loaded under the device's shared lock (waited ")
    os.close(probe)


def test_the_overlap_lock_is_named_only_when_runs_overlap():
    from zl.timing.exclusive import overlap_lock
    assert overlap_lock("/tmp/l", "2") == "/tmp/l"
    assert overlap_lock("/tmp/l", "1") is None and overlap_lock("", "2") is None
    assert overlap_lock("/tmp/l", "many") is None          # named at configure, not here


def test_the_work_happens_off_the_calling_thread_and_join_waits_for_it(monkeypatch):
    release, started, threads = threading.Event(), threading.Event(), []

    def slow(t):
        threads.append(threading.current_thread().name)
        started.set()
        assert release.wait(10)
        return {}
    _fake_cuda(monkeypatch, describe=slow)
    p = prewarm.Prewarm(lambda m: None)
    p.start()
    assert started.wait(10)
    assert p.thread.is_alive()             # start() returned while the prewarm still runs
    threading.Timer(0.2, release.set).start()
    assert p.join() >= 0.15 and not p.thread.is_alive()
    assert set(threads) == {"zl-results-prewarm"}


def test_a_failing_prewarm_is_a_logged_outcome_not_an_error(monkeypatch):
    def boom(t):
        raise RuntimeError("no kernel image")
    _fake_cuda(monkeypatch, describe=boom)
    logged = []
    p = prewarm.Prewarm(logged.append)
    p.start()
    p.join()
    assert p.outcome.startswith("failed (RuntimeError('no kernel image')")
    assert "failed" in logged[0]


def test_the_session_joins_before_collection_ends_and_counts_the_wait(monkeypatch, tmp_path):
    from harness.fake_config import FakeConfig
    from zl.results.recorder import ResultsRecorder

    class Slow:
        def __init__(self):
            self.joins = 0

        def join(self):
            self.joins += 1
            return 0.25 if self.joins == 1 else 0.0
    slow = Slow()
    session = _results_plugin.ResultsSession(ResultsRecorder(tmp_path, lambda m: None), slow)
    session.pytest_collection_finish(None)
    assert slow.joins == 1 and session.recorder.seconds == pytest.approx(0.25)
    session.close()
    assert slow.joins == 2 and session.recorder.seconds == pytest.approx(0.25, abs=0.01)
    monkeypatch.setenv("OUT_DIR", str(tmp_path))
    monkeypatch.setenv("ZL_RESULTS_PREWARM", "sometimes")
    with pytest.raises(pytest.UsageError, match="ZL_RESULTS_PREWARM='sometimes'"):
        _results_plugin.pytest_configure(FakeConfig(_results_plugin))


@pytest.mark.parametrize("env, expect", [
    ({}, "prewarmed in the background: skipped (no CUDA device)"),
    ({"ZL_RESULTS_PREWARM": "0"}, None),
    ({"ZL_ENABLE_RESULTS": "0"}, None),
    ({"ZL_BACKEND": "musa"}, None),
])
def test_a_real_pytest_run_starts_it_only_where_it_applies(fake_pytest, tmp_path, env, expect):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: the outcome would differ")
    out = tmp_path / "out"
    r = fake_pytest("benchmark/test_abs.py::test_abs", "-p", "_results_plugin", OUT_DIR=str(out), **env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    lines = [line for line in (r.stdout + r.stderr).splitlines() if "prewarmed in the background" in line]
    if expect is None:
        assert lines == []
    else:
        assert len(lines) == 1 and expect in lines[0]


def test_a_bad_prewarm_switch_stops_a_real_run_with_a_usage_error(fake_pytest, tmp_path):
    r = fake_pytest("benchmark/test_abs.py::test_abs", "-p", "_results_plugin", OUT_DIR=str(tmp_path),
                    ZL_RESULTS_PREWARM="maybe")
    assert r.returncode == 4 and "ZL_RESULTS_PREWARM='maybe'" in r.stderr + r.stdout
    assert "Traceback" not in r.stderr
