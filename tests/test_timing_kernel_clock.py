"""zl/timing/kernel_clock.py and the cold graph's kernel clock (ZL_COLD_CLOCK=kernels).

The traces split here were recorded on the H200 by benchmarks/kernel_clock_traces.py
(torch's own kernels through the timer's real path); the capture path runs on a fake device
with a tracer that hands out what the fake graph ran.
"""

from __future__ import annotations

import json
import types
import warnings
from pathlib import Path
from statistics import median

import pytest
import triton.testing

from harness.fake_device import make_interface, recording_graph_type
from zl import markers
from zl.backends import get_backend
from zl.runlog import caliber
from zl.timing import capture, device, kernel_clock, l2, select
from zl.timing.graph import GraphTimer

PAYLOAD = json.loads((Path(__file__).parent / "fixtures" / "kernel_clock" /
                      "h200_torch_kernels.json").read_text())
CASES = PAYLOAD["cases"]


def flush_names(case):
    return [k[0] for k in case["flush"]]


# --- splitting a trace recorded on the H200 ---------------------------------------------------

@pytest.mark.parametrize("name,chunk", [("relu", 2), ("float_sum", 4), ("softmax", 2)])
def test_the_recorded_traces_split_into_the_timers_own_samples(name, chunk):
    case = CASES[name]
    samples = kernel_clock.call_samples_us(case["kernels"], case["calls"], flush_names(case))
    # the same numbers the timer returned on the device, from the same trace (fewer calls than
    # N_REPLAYS: each group is one call)
    assert kernel_clock.group_means(samples, capture.N_REPLAYS) == pytest.approx(
        [ms * 1e3 for ms in case["samples_ms"]])
    assert len(case["kernels"]) == chunk * case["calls"]
    # each sample is its call's kernels only: well under the 27 us the flush took
    flush_us = case["flush"][0][2] - case["flush"][0][1]
    assert flush_us > 20
    for i, s in enumerate(samples):
        own = case["kernels"][i * chunk + 1:(i + 1) * chunk]
        assert s == pytest.approx(sum(e - b for _, b, e in own)) and 0 < s


def test_group_means_keep_a_resolution_finer_than_the_32_ns_tick():
    # CUPTI durations on the H200 are multiples of 32 ns, to the 1 ns the trace rounds to
    for case in CASES.values():
        for _, start, end in case["kernels"]:
            ns = round((end - start) * 1e3)
            assert min(ns % 32, 32 - ns % 32) <= 1
    ticks = [1.600] * 7 + [1.632] * 3           # a call's time in 32 ns steps
    assert median(ticks) == 1.600                # a median of calls moves in whole ticks
    means = kernel_clock.group_means(ticks, 2)
    assert means == pytest.approx([1.6, (1.6 * 2 + 1.632 * 3) / 5])
    assert kernel_clock.group_means([1.0, 2.0, 3.0], 10) == [1.0, 2.0, 3.0]
    assert kernel_clock.group_means(list(range(20)), 10)[0] == 0.5
    with pytest.raises(kernel_clock.KernelClockError):
        kernel_clock.group_means([], 10)


def test_a_memset_node_counts_as_one_of_the_calls_kernels():
    case = CASES["float_sum"]  # x.float().sum(): the cast, a memset, the reduction
    assert [k[0].split("(")[0] for k in case["kernels"][1:4]][1] == "Memset "
    samples = kernel_clock.call_samples_us(case["kernels"], case["calls"], flush_names(case))
    assert len(samples) == 2


def test_a_trace_that_does_not_divide_into_the_calls_is_refused():
    case = CASES["relu"]
    with pytest.raises(kernel_clock.KernelClockError, match="7 kernels do not split into 4 calls"):
        kernel_clock.call_samples_us(case["kernels"][:-1], case["calls"], flush_names(case))


def test_a_call_that_does_not_start_with_the_flush_is_refused():
    case = CASES["relu"]
    shifted = case["kernels"][1:] + case["kernels"][:1]  # every chunk now starts with relu
    with pytest.raises(kernel_clock.KernelClockError, match="call 0 does not start with the flush"):
        kernel_clock.call_samples_us(shifted, case["calls"], flush_names(case))


def test_a_call_without_kernels_of_its_own_is_refused():
    case = CASES["relu"]
    flushes = [case["flush"][0]] * 4
    with pytest.raises(kernel_clock.KernelClockError, match="launched no kernel of its own"):
        kernel_clock.call_samples_us(flushes, 4, flush_names(case))
    with pytest.raises(kernel_clock.KernelClockError, match="nothing to split"):
        kernel_clock.call_samples_us(case["kernels"], 0, flush_names(case))


# --- reading torch.profiler's events ----------------------------------------------------------

def event(name, start, end, device_type="DeviceType.CUDA"):
    return types.SimpleNamespace(name=name, device_type=device_type,
                                 time_range=types.SimpleNamespace(start=start, end=end))


def test_device_kernels_keeps_device_events_in_start_order():
    events = [event("b", 5.0, 7.0), event("cudaGraphLaunch", 0.0, 9.0, "DeviceType.CPU"),
              event("a", 1.0, 3.0), event("memset", 4.0, 4.0)]
    assert kernel_clock.device_kernels(events) == [("a", 1.0, 3.0), ("memset", 4.0, 4.0),
                                                   ("b", 5.0, 7.0)]


class FakeProfile:
    """Stands in for torch.profiler.profile: warns as torch does on exit, or fails on entry."""

    error = None
    events_given = []

    def __init__(self, activities=None):
        pass

    def __enter__(self):
        if FakeProfile.error is not None:
            raise FakeProfile.error
        return self

    def __exit__(self, *exc):
        warnings.warn("Warning: Profiler clears events at the end of each cycle.Only events "
                      "from the current cycle will be reported.", UserWarning)
        return False

    def events(self):
        return FakeProfile.events_given


@pytest.fixture
def fake_profile(monkeypatch):
    import torch.profiler
    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    FakeProfile.error, FakeProfile.events_given = None, [event("k", 1.0, 2.0)]
    yield FakeProfile
    FakeProfile.error = None


def test_trace_runs_the_body_and_keeps_torch_profilers_cycle_warning_out(fake_profile):
    di, ran = make_interface(), []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert kernel_clock.trace(di, lambda: ran.append(1)) == [("k", 1.0, 2.0)]
    assert ran == [1] and di.log == ["synchronize"]
    assert not caught


def test_a_profiler_that_cannot_start_is_a_kernel_clock_error(fake_profile):
    fake_profile.error = RuntimeError("Can't disable Kineto profiler when it's not running\n x")
    with pytest.raises(kernel_clock.KernelClockError,
                       match=r"the kernel trace failed \(RuntimeError: Can't disable"):
        kernel_clock.trace(make_interface(), lambda: None)


def test_a_trace_inside_another_profiler_is_refused_and_leaves_it_running():
    from torch.profiler import ProfilerActivity, profile
    ran = []
    with profile(activities=[ProfilerActivity.CPU]) as outer:
        with pytest.raises(kernel_clock.KernelClockError, match="another torch.profiler session"):
            kernel_clock.trace(make_interface(), lambda: ran.append(1))
        assert kernel_clock.profiler_busy()
    assert ran == [] and not kernel_clock.profiler_busy()
    assert outer.events() is not None  # the user's session ended normally and kept its trace


def test_the_kernel_clock_needs_cuda_and_cupti(monkeypatch):
    assert "backend musa has no kernel clock" in kernel_clock.unavailable_reason("musa")
    import torch.profiler as tp
    monkeypatch.setattr(tp, "supported_activities", lambda: {tp.ProfilerActivity.CPU})
    assert "no CUPTI" in kernel_clock.unavailable_reason("cuda")
    monkeypatch.setattr(tp, "supported_activities",
                        lambda: {tp.ProfilerActivity.CPU, tp.ProfilerActivity.CUDA})
    assert kernel_clock.unavailable_reason("cuda") == ""


# --- the cold graph on the kernel clock -------------------------------------------------------

def traced_interface(call_us=(3.0, 5.0)):
    """A fake device whose graph remembers what was captured; the tracer reports one flush
    kernel per flush and `call_us` kernels per call, in capture order."""
    di = make_interface()
    Graph, launch, state = recording_graph_type(di)
    state.traced, state.calls_in_trace = [], []

    def tracer(d, body):
        ran = body()  # a replay returns what it ran; an eager flush runs outside any graph
        replay = isinstance(ran, list)
        state.traced.append("replay" if replay else "flush")
        if replay:
            state.calls_in_trace.append(ran.count("call"))
        kernels, t = [], 0.0
        for op in ran if replay else ["flush"]:
            for j, us in enumerate([27.0] if op == "flush" else call_us):
                kernels.append((f"{op}{j}", t, t + us))
                t += us + 0.5
        return kernels

    di.MUSAGraph = Graph
    return di, state, (lambda: launch("call")), (lambda: launch("flush")), tracer


def test_the_kernel_clock_returns_the_calls_own_kernel_time(monkeypatch):
    di, state, fn, flush, tracer = traced_interface(call_us=(3.0, 5.0))
    times = capture.graph_bench_cold(di, di.MUSAGraph, {}, fn, 1000.0, None, None, "all", flush,
                                     clock="kernels", tracer=tracer)
    # capped at MAX_TRACED_CALLS calls in N_REPLAYS samples, 8 us each (the flush and the
    # 0.5 us starts between kernels left out)
    assert len(times) == capture.N_REPLAYS
    assert times == pytest.approx([0.008] * len(times))
    # the flush traced eagerly, one capture, an untraced replay (upload), then the traced one
    assert state.traced == ["flush", "replay"]
    assert state.calls_in_trace == [kernel_clock.MAX_TRACED_CALLS]
    assert di.log.count("capture_begin") == 1 and di.log.count("replay") == 2
    assert capture.graph_bench_cold(di, di.MUSAGraph, {}, fn, 1000.0, None, None, "median",
                                    flush, clock="kernels", tracer=tracer) == pytest.approx(0.008)


def test_the_graph_timer_falls_back_with_the_marker_when_the_trace_fails(monkeypatch, capsys):
    di = make_interface()
    monkeypatch.setattr(device, "device_interface", lambda: di)
    monkeypatch.setattr(device, "is_torch_cuda", lambda d: False)

    def refuse(d, body):
        raise kernel_clock.KernelClockError("the kernel trace failed (RuntimeError: CUPTI busy)")

    monkeypatch.setattr(kernel_clock, "trace", refuse)
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **k: 1.25)
    buf = types.SimpleNamespace(zero_=lambda: None)
    t = GraphTimer(get_backend("cuda"), l2="cold", cold_clock="kernels",
                   flush=l2.FlushBuffer(allocate=lambda n: buf))
    t.install()
    try:
        t.op = "sum"
        assert triton.testing.do_bench(lambda: None, warmup=1, rep=1) == 1.25
    finally:
        t.uninstall()
    (line,) = [x for x in capsys.readouterr().out.splitlines()
               if x.startswith(markers.DIRECT_NO_CUDAGRAPH)]
    assert "op=sum phase=capture reason=KernelClockError" in line
    assert "CUPTI busy" in line and "l2=cold_by_do_bench_flush" in line


# --- the setting and the caliber ---------------------------------------------------------------

@pytest.mark.parametrize("raw", [None, "", " Auto "])
def test_auto_reads_kernels_only_where_cupti_can_read_a_cold_graph(raw, monkeypatch):
    monkeypatch.setattr(kernel_clock, "unavailable_reason", lambda backend_name: "")
    assert select.parse_cold_clock(raw, l2="cold") == ("kernels", None)
    assert select.parse_cold_clock(raw, l2="warm") == ("events", None)
    assert select.parse_cold_clock(raw, l2="cold", timer="direct") == ("events", None)
    monkeypatch.setattr(kernel_clock, "unavailable_reason", lambda backend_name: "no CUPTI here")
    assert select.parse_cold_clock(raw, l2="cold") == ("events", "cold_clock=events: no CUPTI here")


def test_parse_cold_clock_accepts_kernels_only_where_it_can_be_read(monkeypatch):
    monkeypatch.setattr(kernel_clock, "unavailable_reason", lambda backend_name: "")
    assert select.parse_cold_clock("KERNELS", l2="cold") == ("kernels", None)
    assert select.parse_cold_clock("events", l2="cold") == ("events", None)
    with pytest.raises(select.ColdClockError,
                       match="--zl-cold-clock=kernels cannot be used: the L2 mode is warm"):
        select.parse_cold_clock("kernels", "--zl-cold-clock", l2="warm")
    with pytest.raises(select.ColdClockError, match="needs the graph timer; this run's timer is direct"):
        select.parse_cold_clock("kernels", l2="cold", timer="direct")
    monkeypatch.setattr(kernel_clock, "unavailable_reason", lambda backend_name: "no CUPTI")
    with pytest.raises(select.ColdClockError, match="cannot be used: no CUPTI"):
        select.parse_cold_clock("kernels", l2="cold")
    with pytest.raises(select.ColdClockError, match="'ncu' is not a cold clock"):
        select.parse_cold_clock("ncu", l2="cold")


def write_identity(d: Path, **fields):
    d.mkdir(parents=True)
    base = {"backend": "cuda", "timer": "cuda_graph", "graph_warmup_ms": "25"}
    (d / "run_identity.json").write_text(json.dumps(dict(base, **fields)))
    return d


def test_cold_runs_on_different_clocks_are_refused(tmp_path):
    a = write_identity(tmp_path / "a", l2="cold", cold_clock="events")
    b = write_identity(tmp_path / "b", l2="cold", cold_clock="kernels")
    assert "cold_clock differs: a=events, b=kernels" in caliber.complaints([("a", a), ("b", b)])


def test_a_cold_run_from_before_the_setting_reads_as_the_events_clock(tmp_path):
    old = write_identity(tmp_path / "old", l2="cold")
    new = write_identity(tmp_path / "new", l2="cold", cold_clock="events")
    kernels = write_identity(tmp_path / "k", l2="cold", cold_clock="kernels")
    warm = write_identity(tmp_path / "w", l2="warm")
    assert not [c for c in caliber.complaints([("old", old), ("new", new)]) if "differs" in c]
    assert any(c.startswith("cold_clock differs") for c in
               caliber.complaints([("old", old), ("k", kernels)]))
    assert caliber.caliber_of(warm)["cold_clock"] is None
