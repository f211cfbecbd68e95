"""zl.timing.graph: the per-shape graph timer and its fallback rules.

Everything runs in-process on the CPU against a fake device interface (events from
perf_counter, an optional fake graph type whose capture/replay can be told to raise) and a
fake upstream do_bench, so each rule is checked on its own: the verdict per backend wording,
the deny list, the phase reported, the direct repeat on fallback rows, the RNG restoration,
and the forward-stream capture of backward benchmarks.
"""

from __future__ import annotations

import contextlib
import os
import time
import types

import pytest
import torch
import triton.testing

from harness.fake_device import FakeStream, make_interface
from test_timing_exclusive import other_runs_probe
from zl import markers
from zl.backends import get_backend
from zl.timing import capture, device, graph
from zl.timing.graph import GraphTimer
from zl.timing.session import TimingSession

DIRECT = markers.DIRECT_NO_CUDAGRAPH
POISONED = markers.CAPTURE_POISONED

DSA_FOOTER = ("\nCUDA kernel errors might be asynchronously reported at some other API call, so "
              "the stacktrace below might be incorrect.\nFor debugging consider passing "
              "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
              "assertions.\n")


@pytest.fixture
def timer(monkeypatch):
    """A GraphTimer installed over a fake upstream do_bench that returns 1.5, 2.5, ... ."""
    calls = []

    def fake_do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None,
                      return_mode="mean"):
        calls.append(dict(warmup=warmup, rep=rep, quantiles=quantiles, return_mode=return_mode))
        if quantiles is not None:
            return [0.5, 0.2, 0.8]
        if return_mode == "all":
            return [1.0, 2.0]
        return 0.5 + len(calls)

    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    monkeypatch.delenv("ZL_OP", raising=False)
    state = types.SimpleNamespace(calls=calls, fake=fake_do_bench, graph=None)

    def setup(backend="cuda", di=None, repeat=1, op="softmax"):
        state.graph = GraphTimer(get_backend(backend), repeat=repeat)
        state.graph.install()
        state.graph.op = op
        if di is not None:
            monkeypatch.setattr(device, "device_interface", lambda: di)
        return di

    state.setup = setup
    yield state
    if state.graph is not None:
        state.graph.uninstall()
    assert triton.testing.do_bench is fake_do_bench


def run(fn=lambda: None, **kw):
    kw.setdefault("warmup", 1)
    kw.setdefault("rep", 1)
    return triton.testing.do_bench(fn, **kw)


def marker_lines(capsys, name=DIRECT):
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith(name)]


# --- install / restore ----------------------------------------------------------------------

def test_install_replaces_and_uninstall_restores(timer):
    timer.setup()
    g = timer.graph
    assert triton.testing.do_bench is g.do_bench and g.installed
    g.install()  # idempotent: the original is not overwritten
    g.uninstall()
    assert triton.testing.do_bench is timer.fake and not g.installed and g.op is None


# --- the graph path itself ------------------------------------------------------------------

def test_graph_port_times_replays_and_restores_nothing_on_success(timer, capsys):
    di = timer.setup(di=make_interface(replay_ms=2.0))
    out = run(return_mode="median", rep=1)
    assert not marker_lines(capsys) and timer.calls == []  # upstream do_bench never called
    assert di.log.count("replay") == capture.N_REPLAYS
    assert di.log.index("capture_begin") < di.log.index("capture_end") < di.log.index("replay")
    # 2 ms per replay divided over >= 1 unrolled calls, not the 10 replays' 20 ms; the bound
    # leaves a loaded machine's oversleeping room
    assert 0 < out < 2.0 * 4


def test_graph_port_summarises_quantiles_as_floats(timer):
    timer.setup(di=make_interface())
    out = run(quantiles=[0.5, 0.2, 0.8])
    assert isinstance(out, list) and len(out) == 3 and all(isinstance(v, float) for v in out)


def test_warmup_settles_then_captures(timer):
    calls = []
    timer.setup(di=make_interface())
    run(lambda: (calls.append(1), time.sleep(0.001)), warmup=20, rep=1)
    # 1 discarded + >= 3 settled warm calls, then the port's own 1 + 5 + capture.
    assert len(calls) >= 1 + capture.WARMUP_SETTLED + 1 + 5 + 1


def test_sync_comes_first_and_side_stream_waits(timer):
    di = timer.setup(di=make_interface())
    streams = []
    orig = di.Stream

    def track(*a, **k):
        s = orig()
        streams.append(s)
        return s

    di.Stream = track
    run()
    assert di.log[0] == "synchronize"
    assert streams and streams[0].waited_on == "current"


def test_upstream_cudagraph_is_called_verbatim_on_torch_cuda(timer, monkeypatch):
    seen = {}

    def fake_cudagraph(fn, rep=20, grad_to_none=None, quantiles=None, return_mode="mean"):
        seen.update(rep=rep, return_mode=return_mode)
        return 0.125

    di = make_interface()
    timer.setup(di=di)
    monkeypatch.setattr(device, "is_torch_cuda", lambda d: d is di)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", fake_cudagraph)
    assert run(rep=7, return_mode="median") == 0.125
    assert seen == {"rep": 7, "return_mode": "median"}
    assert "capture_begin" not in di.log  # the port was not used


# --- no graph type --------------------------------------------------------------------------

def test_interface_without_graph_type_falls_back_every_shape(timer, capsys):
    di = timer.setup(di=make_interface(graph=False))
    values = [run(return_mode="median") for _ in range(3)]
    assert values == [1.5, 2.5, 3.5]
    lines = marker_lines(capsys)
    assert len(lines) == 3
    assert all("op=softmax phase=capture reason=NoGraphSupport" in line for line in lines)
    assert "synchronize" not in di.log  # refused before any device work or warmup


# --- classification through the timer -------------------------------------------------------

@pytest.mark.parametrize("backend,error,verdict", [
    ("cuda", RuntimeError("CUDA error: operation not permitted when stream is capturing"
                          + DSA_FOOTER), "recoverable"),
    ("cuda", RuntimeError("CUDA error: operation failed due to a previous error during capture"
                          + DSA_FOOTER), "recoverable"),
    ("cuda", RuntimeError("CUDA error: an illegal memory access was encountered" + DSA_FOOTER),
     "fatal"),
    ("cuda", RuntimeError("CUDA error: device-side assert triggered" + DSA_FOOTER), "fatal"),
    ("cuda", torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "fatal"),
    ("musa", RuntimeError("MUSA error: unknown error" + DSA_FOOTER.replace("CUDA", "MUSA")),
     "poisoned"),
    ("musa", RuntimeError("MUSA error: operation not permitted when stream is capturing"),
     "recoverable"),
    ("musa", RuntimeError("MUSA error: an illegal memory access was encountered"), "fatal"),
])
def test_capture_error_verdicts(timer, capsys, backend, error, verdict):
    di = timer.setup(backend=backend, di=make_interface(capture_error=error))
    if verdict == "recoverable":
        assert run(return_mode="median") == 1.5
        (line,) = marker_lines(capsys)
        assert line.startswith(f"{DIRECT} op=softmax phase=capture "
                               f"reason={type(error).__name__} detail='")
        detail = line.split("detail='", 1)[1].rsplit("'", 1)[0]
        assert len(detail) <= graph.DETAIL_CHARS and "\n" not in detail and "'" not in detail
        return
    with pytest.raises(type(error)) as info:
        run(return_mode="median")
    assert info.value is error  # the device's own exception, not a wrapper
    out = capsys.readouterr().out
    assert timer.calls == []  # no latency is produced for a broken kernel or a dead context
    assert DIRECT not in out
    if verdict == "poisoned":
        assert f"{POISONED} op=softmax phase=capture reason=RuntimeError" in out
    else:
        assert POISONED not in out
    assert di.log.count("capture_begin") == 1


def test_replay_failure_reports_phase_replay(timer, capsys):
    timer.setup(di=make_interface(replay_error=RuntimeError("replay refused")))
    assert run(return_mode="median") == 1.5
    (line,) = marker_lines(capsys)
    assert "phase=replay reason=RuntimeError detail='replay refused'" in line


def test_warmup_failure_reports_phase_warmup(timer, capsys):
    n = []

    def fn():
        n.append(1)
        if len(n) == 2:
            raise ValueError("needs a bigger block")

    timer.setup(di=make_interface())
    assert run(fn, return_mode="median") == 1.5
    (line,) = marker_lines(capsys)
    assert "phase=warmup reason=ValueError" in line


def test_sync_failure_reports_phase_sync(timer, capsys):
    di = make_interface(sync_error=RuntimeError("stream busy"))
    timer.setup(di=di)
    # The context probe after a recoverable failure also fails: that is a dead context.
    with pytest.raises(RuntimeError):
        run()
    out = capsys.readouterr().out
    assert f"{POISONED} op=softmax phase=sync reason=RuntimeError" in out
    assert timer.calls == []


def test_unknown_verdict_fails_closed(timer, monkeypatch):
    backend = get_backend("cuda")
    timer.setup(di=make_interface(capture_error=RuntimeError("x")))
    monkeypatch.setattr(type(backend), "classify_capture_error", lambda self, exc: "maybe")
    with pytest.raises(RuntimeError):
        run()
    assert timer.calls == []


# --- deny list and operator name ------------------------------------------------------------

def test_deny_list_never_attempts_capture(timer, capsys):
    di = timer.setup(backend="musa", di=make_interface(), op="unique2")
    assert run(return_mode="median") == 1.5
    (line,) = marker_lines(capsys)
    assert line.startswith(f"{DIRECT} op=unique2 phase=denylist reason=KnownPoisoningOp")
    assert di.log == []  # not even a synchronize


def test_deny_list_is_keyed_by_function_name_not_file_name(timer, capsys):
    # benchmark/test_unique.py::test_unique2 -> op "unique2"; "unique" (the file) is not denied.
    di = timer.setup(backend="musa", di=make_interface(), op="unique")
    run()
    assert marker_lines(capsys) == [] and "capture_begin" in di.log


def test_op_from_item_strips_test_prefix_and_parameters():
    item = types.SimpleNamespace(originalname="test_unique2", name="test_unique2[float16]")
    assert graph.op_from_item(item) == "unique2"
    item = types.SimpleNamespace(name="test_gelu_backward[shape0]")
    assert graph.op_from_item(item) == "gelu_backward"
    assert graph.op_from_item(types.SimpleNamespace(name="layer_norm")) == "layer_norm"


def test_current_op_prefers_item_then_the_configured_op(monkeypatch):
    g = GraphTimer(get_backend("cuda"))
    monkeypatch.delenv("ZL_OP", raising=False)
    assert g.current_op() == "<unknown>"
    # One name per fact: the operator is ZL_OP (--zl-op), never a second variable.
    monkeypatch.setenv("FLAGGEMS_PERF_CURRENT_OP", "sum")
    assert g.current_op() == "<unknown>"
    monkeypatch.setenv("ZL_OP", "softmax")
    assert g.current_op() == "softmax"
    g.op = "softmax_backward"
    assert g.current_op() == "softmax_backward"


# --- direct repeat on fallback rows ---------------------------------------------------------

def test_fallback_rows_take_the_median_of_repeat_calls(timer, capsys):
    timer.setup(di=make_interface(graph=False), repeat=3)
    assert run(return_mode="median") == 2.5  # median of 1.5, 2.5, 3.5
    assert len(timer.calls) == 3
    (line,) = marker_lines(capsys)
    assert line.endswith(" repeat=3")


@pytest.mark.parametrize("kw,expected", [
    ({"quantiles": [0.5, 0.2, 0.8]}, [0.5, 0.2, 0.8]),
    ({"return_mode": "all"}, [1.0, 2.0]),
])
def test_fallback_sequences_are_not_repeated(timer, kw, expected):
    timer.setup(di=make_interface(graph=False), repeat=5)
    assert run(**kw) == expected
    assert len(timer.calls) == 1


# --- RNG state around an aborted capture ------------------------------------------------------

def test_aborted_capture_leaves_rng_states_untouched(timer, capsys):
    gen = torch.Generator().manual_seed(1234)
    torch.manual_seed(77)
    cpu_before, gen_before = torch.get_rng_state(), gen.get_state()

    class DrawingGraph:
        def capture_begin(self):
            torch.rand(16)
            torch.rand(16, generator=gen)
            raise RuntimeError("operation not permitted when stream is capturing")

        def capture_end(self):
            pass

    di = make_interface(generators=[gen])
    di.MUSAGraph = DrawingGraph
    timer.setup(di=di)
    run()
    assert len(marker_lines(capsys)) == 1
    assert torch.equal(torch.get_rng_state(), cpu_before)
    assert torch.equal(gen.get_state(), gen_before)


# --- backward benchmarks are captured on their forward stream ---------------------------------

def test_backward_capture_uses_the_port_on_the_forward_stream_even_on_torch_cuda(timer, monkeypatch):
    """Upstream do_bench_cudagraph captures on a fresh stream; for a backward that made
    every autograd call a cross-stream fork/join in the graph (H200: 8.2 us vs 1.5 us per
    call on 64x64). The port must capture on the forward stream and make no stream."""
    di = make_interface(replay_ms=1.0)
    entered, graphs = [], []

    @contextlib.contextmanager
    def stream_ctx(s):
        entered.append(s)
        yield s

    @contextlib.contextmanager
    def graph_ctx(graph_obj, stream=None):
        graphs.append(stream)
        yield

    made = []
    di.stream, di.graph = stream_ctx, graph_ctx
    di.Stream = lambda: made.append(FakeStream()) or made[-1]
    timer.setup(di=di)
    monkeypatch.setattr(device, "is_torch_cuda", lambda d: d is di)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph",
                        lambda *a, **k: pytest.fail("upstream capture used for a backward"))
    forward = FakeStream()
    monkeypatch.setattr(timer.graph.backward, "forward_stream", forward)
    assert run(return_mode="median") > 0
    assert made == [] and graphs == [forward] and set(entered) == {forward}
    assert di.log.count("replay") == capture.N_REPLAYS


def test_forward_capture_on_torch_cuda_stays_upstream_verbatim(timer, monkeypatch):
    di = make_interface()
    timer.setup(di=di)
    monkeypatch.setattr(device, "is_torch_cuda", lambda d: d is di)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", lambda *a, **k: 0.25)
    assert timer.graph.backward.forward_stream is None
    assert run() == 0.25 and "replay" not in di.log


def test_ledger_counts_calls_warmup_graph_and_fallbacks(timer, capsys, monkeypatch):
    """Where the graph path spends its time: every do_bench call lands in one
    of warmup, capture and replays, or a fallback row, and the line says how much of each."""
    timer.setup(di=make_interface(replay_ms=1.0))
    run(lambda: time.sleep(0.002), warmup=20, rep=1)
    g = timer.graph.ledger
    assert g["calls"] == 1 and g["warmup_calls"] >= 3 and g["fallbacks"] == 0
    assert g["warmup_s"] >= 0.002 * 3 and g["graph_s"] > 0
    # the backend object is shared by the whole session: patched, never assigned
    monkeypatch.setattr(timer.graph.backend, "denies_capture", lambda op: True)
    run(lambda: None)
    assert g["calls"] == 2 and g["fallbacks"] == 1 and g["fallback_s"] > 0
    line = timer.graph.ledger_line()
    assert line.startswith("graph timer spent ") and "over 2 do_bench call(s)" in line
    assert "1 fallback row(s)" in line and f"({g['warmup_calls']} timed call(s))" in line


def _call_from(module: str, **kw):
    """triton.testing.do_bench called from code whose module is `module`, as an autotuner's
    sweep calls it from triton.runtime.autotuner (or FlagGems' LibTuner from flag_gems)."""
    scope = {"__name__": module, "triton": triton}
    exec("def bench(fn, **kw):\n    return triton.testing.do_bench(fn, **kw)\n", scope)
    return scope["bench"](lambda: None, **kw)


@pytest.mark.parametrize("module", ["triton.runtime.autotuner", "flag_gems.utils.libentry",
                                    "flaggems_vllm.ops.x"])
def test_an_autotuners_call_goes_to_tritons_do_bench_and_is_counted(timer, module):
    """On the H200 softmax_backward_out's sweep went through the graph timer
    (14 do_bench calls where the benchmark made 4; pytest 1.68x upstream's)."""
    di = timer.setup(di=make_interface())
    got = _call_from(module, warmup=7, rep=9, quantiles=(0.5, 0.2, 0.8))
    assert got == [0.5, 0.2, 0.8]                     # upstream's answer, untouched
    assert timer.calls == [dict(warmup=7, rep=9, quantiles=(0.5, 0.2, 0.8), return_mode="mean")]
    g = timer.graph.ledger
    assert g["tuner_calls"] == 1 and g["calls"] == 0 and "replay" not in di.log
    assert "; 1 autotuner call(s) left to Triton's do_bench" in timer.graph.ledger_line()


def test_the_benchmarks_call_is_timed_by_the_graph(timer):
    """A module outside the tuner packages (the benchmark suite, `benchmark.base`, or a
    package merely named like one) is measured by the timer."""
    di = timer.setup(di=make_interface(replay_ms=1.0))
    for module in ("benchmark.base", "tritonbench.x"):
        _call_from(module, warmup=1, rep=1)
    g = timer.graph.ledger
    assert g["calls"] == 2 and g["tuner_calls"] == 0 and timer.calls == []
    assert di.log.count("replay") > 0


# --- exclusive timing (--overlap): the whole graph call under the lock -----------------------

@pytest.fixture
def exclusive(timer, tmp_path):
    """`.make()` wires exclusive timing over the installed graph timer as the session does;
    `.locked()` says whether the device's lock file is held (a second open file's
    non-blocking flock fails while it is)."""
    lock = str(tmp_path / "device.lock")
    probe, can_time = other_runs_probe(lock)
    sessions = []

    def locked() -> bool:
        return not can_time()

    def make():
        session = TimingSession(timer.graph.backend, "cuda_graph", "enabled", 1)
        session.graph = timer.graph
        session.make_exclusive(lock, 2)
        sessions.append(session)
        assert triton.testing.do_bench is session.exclusive
        return session.exclusive

    yield types.SimpleNamespace(make=make, locked=locked)
    for session in sessions:
        session.pytest_unconfigure(None)
    os.close(probe)


def test_under_exclusive_timing_the_capture_holds_the_lock_with_warmup_and_replays(timer, exclusive):
    """Past the compiling pre-call, the lock holds sync, warmup, estimate, capture and
    replays. Released for the capture (at overlap 8), eight H200 nodes read A/A 0.9-27 %
    against 0.1-1.4 % held (overlap 4), for a median lock time per node of 14.2 s against 15.0 s."""
    di = timer.setup(di=make_interface(replay_ms=0.5))
    bench = exclusive.make()
    trace = []

    class Probed(di.MUSAGraph):
        def capture_begin(self):
            trace.append(("capture_begin", exclusive.locked()))
            super().capture_begin()

        def replay(self):
            trace.append(("replay", exclusive.locked()))
            super().replay()

    di.MUSAGraph = Probed
    sync = di.synchronize
    di.synchronize = lambda device=None: (trace.append(("sync", exclusive.locked())), sync())[1]
    out = run(lambda: (trace.append(("fn", exclusive.locked())), time.sleep(0.0005)), warmup=5, rep=5)
    assert out > 0 and not exclusive.locked()
    assert trace[:2] == [("fn", False), ("sync", False)]          # ExclusiveBench's pre-call
    rest = trace[2:]
    assert ("capture_begin", True) in rest and [w for w, _ in rest].count("replay") == capture.N_REPLAYS
    assert all(held for _, held in rest)
    assert bench.stats["calls"] == 1 and bench.stats["held_s"] > 0


def test_under_exclusive_timing_a_tuners_call_and_a_fallback_row_hold_the_lock(
        timer, exclusive, monkeypatch, capsys):
    timer.setup(di=make_interface(graph=False))    # no graph type: every benchmark row falls back
    bench = exclusive.make()
    held = []

    def upstream(fn, **kw):
        held.append(exclusive.locked())
        return 0.5

    monkeypatch.setattr(timer.graph, "upstream", upstream)
    assert _call_from("triton.runtime.autotuner", warmup=1, rep=1) == 0.5
    assert run(return_mode="median") == 0.5
    assert held == [True, True] and len(marker_lines(capsys)) == 1
    assert bench.stats["calls"] == 2
    assert not exclusive.locked()
