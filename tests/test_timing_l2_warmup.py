"""The bounded adaptive warmup before a capture, the cold-L2 graph, the host share
on fallback markers, and the two new settings (ZL_GRAPH_WARMUP_MS, ZL_L2) with their
identity fields and caliber refusal. CPU only: fake device interfaces count every call.
"""

from __future__ import annotations

import json
import time
import types

import pytest
import torch  # noqa: F401  (imported here so the timed test does not pay for it)
import triton.testing

from harness.fake_device import make_interface, recording_graph_type
from zl import markers
from zl.backends import get_backend
from zl.runlog import caliber
from zl.timing import capture, device, direct, l2, select
from zl.timing.graph import GraphTimer


def sleeper(ms):
    return lambda: time.sleep(ms / 1e3)


# --- the warmup before a capture ------------------------------------------------------------

def test_steady_calls_stop_the_warmup_after_the_settle_count():
    di = make_interface()
    done = capture.warmup_before_capture(di, lambda: None, 1000.0, cap_ms=25.0)
    # 3 steady calls settle it; a preempted call on a loaded host may add a few
    assert capture.WARMUP_SETTLED <= done <= 20
    # one sync after the discarded call, one per timed call: no more device round trips
    assert di.log.count("synchronize") == 1 + done


def test_unsettled_calls_stop_at_the_cap_not_the_callers_budget():
    flip = {"n": 0}

    def jittery():  # 1 ms, 3 ms, 1 ms, ...: never within 5 % of each other
        flip["n"] += 1
        time.sleep(0.001 if flip["n"] % 2 else 0.003)

    t0 = time.perf_counter()
    done = capture.warmup_before_capture(make_interface(), jittery, 1000.0, cap_ms=25.0)
    wall_ms = (time.perf_counter() - t0) * 1e3
    # FlagGems' default budget is 1000 ms; the cap holds it to ~25 ms plus one call (bound: half
    # the budget, room for a loaded machine's preemptions)
    assert done <= 25 and wall_ms < 500


def test_a_zero_budget_still_times_one_warm_call():
    di = make_interface()
    assert capture.warmup_before_capture(di, sleeper(1), 0.0, cap_ms=25.0) == 1


def test_caller_mode_spends_the_whole_budget_as_before():
    calls = []
    done = capture.warmup_before_capture(make_interface(), lambda: (calls.append(1),
                                                                     time.sleep(0.001)),
                                         30.0, cap_ms=None)
    # an event-sized count for 30 ms of 1 ms calls (>= 5 even if one call read 6 ms on a
    # loaded host), where the adaptive warmup stops after 3 steady calls
    assert done >= 5 and len(calls) == done + 2  # + discarded + estimate


def test_graph_timer_bounds_the_warmup_a_large_caller_budget_asks_for(monkeypatch):
    di = make_interface()
    monkeypatch.setattr(device, "device_interface", lambda: di)
    t = GraphTimer(get_backend("musa"), warmup_cap_ms=25.0)
    t.install()
    try:
        calls = []
        t0 = time.perf_counter()
        triton.testing.do_bench(lambda: calls.append(1), warmup=1000, rep=0.01)
        assert time.perf_counter() - t0 < 0.5
    finally:
        t.uninstall()
    # 1 sync before, 1 after the discarded call, 1 estimate, 1 after capture, 10 replays;
    # the rest are the warm calls, one sync each: bounded though the caller asked for 1 s
    warm = di.log.count("synchronize") - (4 + capture.N_REPLAYS)
    assert capture.WARMUP_SETTLED <= warm <= 20
    assert di.log.count("capture_begin") == 1


# --- cold L2 --------------------------------------------------------------------------------

def costed_interface(fn_ms, flush_ms):
    """A device whose graphs replay for the summed cost of what was captured in them."""
    di = make_interface()
    Recording, launch, state = recording_graph_type(di)
    state.flushes = 0

    class CostGraph(Recording):
        def replay(self):
            time.sleep(sum(super().replay()) / 1e3)

    def work(ms):
        if not launch(ms):
            time.sleep(ms / 1e3)

    di.MUSAGraph = CostGraph
    buf = types.SimpleNamespace(zero_=lambda: (setattr(state, "flushes", state.flushes + 1),
                                               work(flush_ms)))
    return di, state, (lambda: work(fn_ms)), buf


@pytest.mark.parametrize("torch_cuda", [False, True])
def test_cold_graph_subtracts_the_flushes_own_time(monkeypatch, torch_cuda):
    di, state, fn, buf = costed_interface(fn_ms=2.0, flush_ms=4.0)
    sizes = []
    monkeypatch.setattr(device, "device_interface", lambda: di)
    monkeypatch.setattr(device, "is_torch_cuda", lambda d: torch_cuda)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph",
                        lambda *a, **k: pytest.fail("upstream graph has no flush in it"))
    t = GraphTimer(get_backend("cuda"), l2="cold",
                   flush=l2.FlushBuffer(allocate=lambda n: sizes.append(n) or buf))
    t.install()
    try:
        out = triton.testing.do_bench(fn, warmup=5, rep=30, return_mode="median")
    finally:
        t.uninstall()
    assert sizes == [l2.DEFAULT_FLUSH_BYTES]  # the fake has no device properties
    assert di.log.count("capture_begin") == 2 and state.flushes > 0
    assert 1.0 < out < 5.0  # the 2 ms call, not 6 ms with its flush (room for oversleeping)


def test_flush_size_is_twice_the_l2_the_device_reports():
    props = types.SimpleNamespace(L2_cache_size=50 * 2**20)
    di = types.SimpleNamespace(current_device=lambda: 0, get_device_properties=lambda i: props)
    assert l2.flush_bytes(di) == 100 * 2**20
    assert l2.flush_bytes(types.SimpleNamespace()) == l2.DEFAULT_FLUSH_BYTES


# --- host share on fallback rows --------------------------------------------------------------

def test_host_share_arithmetic():
    assert direct.host_share(10.0, 2.0) == pytest.approx(80.0)
    assert direct.host_share(1.0, 5.0) == 0.0 and direct.host_share(0.0, 0.0) == 0.0


def host_bound_interface(device_ms_per_call):
    """Events count the calls between them: device time is `device_ms_per_call` per call
    however long the host takes to issue it."""
    di = make_interface(graph=False)
    state = types.SimpleNamespace(calls=0, spins=[])

    class CountingEvent:
        def __init__(self, enable_timing=False):
            self.n = 0

        def record(self, stream=None):
            self.n = state.calls

        def elapsed_time(self, end):
            return (end.n - self.n) * device_ms_per_call

    di.Event = CountingEvent
    di._sleep = state.spins.append
    return di, state


def test_measured_host_share_marks_a_host_bound_row(monkeypatch, capsys):
    di, state = host_bound_interface(0.05)
    monkeypatch.setattr(device, "device_interface", lambda: di)
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **k: 1.0)

    def fn():  # 1 ms of host dispatch for a 0.05 ms kernel
        state.calls += 1
        time.sleep(0.001)

    t = GraphTimer(get_backend("musa"), l2="cold")
    t.install()
    try:
        assert triton.testing.do_bench(fn, warmup=1, rep=1) == 1.0
    finally:
        t.uninstall()
    (line,) = [x for x in capsys.readouterr().out.splitlines()
               if x.startswith(markers.DIRECT_NO_CUDAGRAPH)]
    share = int(line.split("host_share=", 1)[1].split("%", 1)[0])
    assert 80 <= share <= 100 and state.spins and state.spins[0] > 0
    assert " l2=cold_by_do_bench_flush" in line


def test_host_share_is_unknown_without_a_spin_kernel():
    assert direct.measure_host_share(make_interface(), lambda: None) is None


# --- settings, identity, caliber --------------------------------------------------------------

@pytest.mark.parametrize("raw,cap", [(None, 25.0), ("", 25.0), ("caller", None),
                                     (" CALLER ", None), ("0", 0.0), ("50.5", 50.5)])
def test_parse_graph_warmup(raw, cap):
    assert select.parse_graph_warmup(raw) == cap


@pytest.mark.parametrize("raw", ["-1", "lots", "nan", "inf"])
def test_parse_graph_warmup_rejects_garbage(raw):
    with pytest.raises(select.GraphWarmupError, match="ZL_GRAPH_WARMUP_MS"):
        select.parse_graph_warmup(raw)


@pytest.mark.parametrize("raw,mode", [(None, "warm"), ("", "warm"), ("Cold", "cold"),
                                      ("warm", "warm")])
def test_parse_l2(raw, mode):
    assert select.parse_l2(raw) == mode


def test_parse_l2_rejects_garbage_with_the_name_given():
    with pytest.raises(select.L2ModeError, match="--zl-l2='lukewarm'"):
        select.parse_l2("lukewarm", "--zl-l2")


def test_runs_of_different_l2_or_warmup_are_refused(tmp_path):
    base = {"backend": "cuda", "timer": "cuda_graph", "l2": "warm", "graph_warmup_ms": "25"}
    for field, other in (("l2", "cold"), ("graph_warmup_ms", "caller")):
        dirs = []
        for name, value in (("a", base[field]), ("b", other)):
            d = tmp_path / field / name
            d.mkdir(parents=True)
            (d / "run_identity.json").write_text(json.dumps(dict(base, **{field: value})))
            dirs.append((name, d))
        assert any(c.startswith(f"{field} differs") for c in caliber.complaints(dirs))
