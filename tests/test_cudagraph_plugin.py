"""Unit tests for _cudagraph_plugin: the per-shape graph timer and its fallback rules.

Everything runs in-process on the CPU against a fake device interface (events from
perf_counter, an optional fake graph type whose capture/replay can be told to raise) and a
fake upstream do_bench, so each rule is checked on its own: the verdict per backend wording,
the deny list, the phase reported, the direct repeat on fallback rows, the RNG restoration.
"""

from __future__ import annotations

import contextlib
import sys
import time
import types
from pathlib import Path

import pytest
import torch
import triton.testing

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import _cudagraph_plugin as cg  # noqa: E402
from zl.backends import get_backend  # noqa: E402

DSA_FOOTER = ("\nCUDA kernel errors might be asynchronously reported at some other API call, so "
              "the stacktrace below might be incorrect.\nFor debugging consider passing "
              "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
              "assertions.\n")


class FakeEvent:
    def __init__(self, enable_timing=False):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


class FakeStream:
    def __init__(self, *a, **k):
        self.waited_on = None

    def wait_stream(self, other):
        self.waited_on = other


def make_interface(capture_error=None, replay_error=None, sync_error=None, graph=True,
                   generators=(), replay_ms=0.0):
    """A duck-typed device interface; `graph=False` gives one with no graph type."""
    log = []

    class FakeGraph:
        def capture_begin(self):
            log.append("capture_begin")
            if capture_error is not None:
                raise capture_error

        def capture_end(self):
            log.append("capture_end")

        def replay(self):
            log.append("replay")
            if replay_error is not None:
                raise replay_error
            if replay_ms:
                time.sleep(replay_ms / 1e3)

    def synchronize(device=None):
        log.append("synchronize")
        if sync_error is not None:
            raise sync_error

    @contextlib.contextmanager
    def stream(s):
        yield s

    di = types.SimpleNamespace(__name__="fake_device", Event=FakeEvent, Stream=FakeStream,
                               synchronize=synchronize, stream=stream,
                               current_stream=lambda device=None: "current",
                               default_generators=tuple(generators), log=log)
    if graph:
        di.FakeGraphType = FakeGraph
        di.MUSAGraph = FakeGraph  # looked up by name, as torch_musa spells it
    return di


@pytest.fixture
def timer(monkeypatch):
    """graph_do_bench installed over a fake upstream do_bench that returns 1.5, 2.5, ... ."""
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
    monkeypatch.delenv("FLAGGEMS_PERF_CURRENT_OP", raising=False)
    state = types.SimpleNamespace(calls=calls, fake=fake_do_bench)

    def setup(backend="cuda", di=None, repeat=1, op="softmax"):
        cg.install(backend=get_backend(backend), repeat=repeat)
        cg._CURRENT["op"] = op
        if di is not None:
            monkeypatch.setattr(cg, "device_interface", lambda: di)
        return di

    state.setup = setup
    yield state
    cg.uninstall()
    assert triton.testing.do_bench is fake_do_bench


def run(fn=lambda: None, **kw):
    kw.setdefault("warmup", 1)
    kw.setdefault("rep", 1)
    return triton.testing.do_bench(fn, **kw)


def markers(capsys, name=cg.DIRECT_MARKER):
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith(name)]


# --- install / restore ----------------------------------------------------------------------

def test_install_replaces_and_uninstall_restores(timer):
    timer.setup()
    assert triton.testing.do_bench is cg.graph_do_bench and cg.is_installed()
    cg.install(backend=get_backend("cuda"))  # idempotent: the original is not overwritten
    cg.uninstall()
    assert triton.testing.do_bench is timer.fake and not cg.is_installed()


# --- the graph path itself ------------------------------------------------------------------

def test_graph_port_times_replays_and_restores_nothing_on_success(timer, capsys):
    di = timer.setup(di=make_interface(replay_ms=2.0))
    out = run(return_mode="median", rep=1)
    assert not markers(capsys) and timer.calls == []  # upstream do_bench never called
    assert di.log.count("replay") == cg.N_REPLAYS
    assert di.log.index("capture_begin") < di.log.index("capture_end") < di.log.index("replay")
    assert 0 < out < 2.0 * 1.5  # 2 ms per replay divided over >= 1 unrolled calls


def test_graph_port_summarises_quantiles_as_floats(timer):
    timer.setup(di=make_interface())
    out = run(quantiles=[0.5, 0.2, 0.8])
    assert isinstance(out, list) and len(out) == 3 and all(isinstance(v, float) for v in out)


def test_warmup_runs_for_the_budget_then_captures(timer):
    calls = []
    timer.setup(di=make_interface())
    run(lambda: (calls.append(1), time.sleep(0.001)), warmup=20, rep=1)
    # 1 discarded + 1 estimate + ~20 ms of 1 ms calls, then the port's own 1 + 5 + capture.
    assert len(calls) >= 2 + 5 + 6


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
    monkeypatch.setattr(cg, "_is_torch_cuda", lambda d: d is di)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", fake_cudagraph)
    assert run(rep=7, return_mode="median") == 0.125
    assert seen == {"rep": 7, "return_mode": "median"}
    assert "capture_begin" not in di.log  # the port was not used


# --- no graph type --------------------------------------------------------------------------

def test_interface_without_graph_type_falls_back_every_shape(timer, capsys):
    di = timer.setup(di=make_interface(graph=False))
    values = [run(return_mode="median") for _ in range(3)]
    assert values == [1.5, 2.5, 3.5]
    lines = markers(capsys)
    assert len(lines) == 3
    assert all("op=softmax phase=capture reason=NoGraphSupport" in line for line in lines)
    assert "synchronize" not in di.log  # refused before any device work or warmup


# --- classification through the plugin ------------------------------------------------------

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
        (line,) = markers(capsys)
        assert line.startswith(f"{cg.DIRECT_MARKER} op=softmax phase=capture "
                               f"reason={type(error).__name__} detail='")
        detail = line.split("detail='", 1)[1].rsplit("'", 1)[0]
        assert len(detail) <= cg.DETAIL_CHARS and "\n" not in detail and "'" not in detail
        return
    with pytest.raises(type(error)):
        run(return_mode="median")
    out = capsys.readouterr().out
    assert timer.calls == []  # no latency is produced for a broken kernel or a dead context
    assert cg.DIRECT_MARKER not in out
    if verdict == "poisoned":
        assert f"{cg.POISONED_MARKER} op=softmax phase=capture reason=RuntimeError" in out
    else:
        assert cg.POISONED_MARKER not in out
    assert di.log.count("capture_begin") == 1


def test_replay_failure_reports_phase_replay(timer, capsys):
    timer.setup(di=make_interface(replay_error=RuntimeError("replay refused")))
    assert run(return_mode="median") == 1.5
    (line,) = markers(capsys)
    assert "phase=replay reason=RuntimeError detail='replay refused'" in line


def test_warmup_failure_reports_phase_warmup(timer, capsys):
    n = []

    def fn():
        n.append(1)
        if len(n) == 2:
            raise ValueError("needs a bigger block")

    timer.setup(di=make_interface())
    assert run(fn, return_mode="median") == 1.5
    (line,) = markers(capsys)
    assert "phase=warmup reason=ValueError" in line


def test_sync_failure_reports_phase_sync(timer, capsys):
    di = make_interface(sync_error=RuntimeError("stream busy"))
    timer.setup(di=di)
    # The context probe after a recoverable failure also fails: that is a dead context.
    with pytest.raises(RuntimeError):
        run()
    out = capsys.readouterr().out
    assert f"{cg.POISONED_MARKER} op=softmax phase=sync reason=RuntimeError" in out
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
    (line,) = markers(capsys)
    assert line.startswith(f"{cg.DIRECT_MARKER} op=unique2 phase=denylist "
                           "reason=KnownPoisoningOp")
    assert di.log == []  # not even a synchronize


def test_deny_list_is_keyed_by_function_name_not_file_name(timer, capsys):
    # benchmark/test_unique.py::test_unique2 -> op "unique2"; "unique" (the file) is not denied.
    di = timer.setup(backend="musa", di=make_interface(), op="unique")
    run()
    assert markers(capsys) == [] and "capture_begin" in di.log


def test_op_from_item_strips_test_prefix_and_parameters():
    item = types.SimpleNamespace(originalname="test_unique2", name="test_unique2[float16]")
    assert cg.op_from_item(item) == "unique2"
    item = types.SimpleNamespace(name="test_gelu_backward[shape0]")
    assert cg.op_from_item(item) == "gelu_backward"
    assert cg.op_from_item(types.SimpleNamespace(name="layer_norm")) == "layer_norm"


def test_current_op_prefers_item_then_env(monkeypatch):
    monkeypatch.setattr(cg, "_CURRENT", {"op": None})
    monkeypatch.delenv("ZL_OP", raising=False)
    monkeypatch.delenv("FLAGGEMS_PERF_CURRENT_OP", raising=False)
    assert cg.current_op() == "<unknown>"
    monkeypatch.setenv("FLAGGEMS_PERF_CURRENT_OP", "sum")
    assert cg.current_op() == "sum"
    monkeypatch.setenv("ZL_OP", "softmax")
    assert cg.current_op() == "softmax"
    cg._CURRENT["op"] = "softmax_backward"
    assert cg.current_op() == "softmax_backward"


# --- direct repeat on fallback rows ---------------------------------------------------------

def test_fallback_rows_take_the_median_of_repeat_calls(timer, capsys):
    timer.setup(di=make_interface(graph=False), repeat=3)
    assert run(return_mode="median") == 2.5  # median of 1.5, 2.5, 3.5
    assert len(timer.calls) == 3
    (line,) = markers(capsys)
    assert line.endswith(" repeat=3")


@pytest.mark.parametrize("kw,expected", [
    ({"quantiles": [0.5, 0.2, 0.8]}, [0.5, 0.2, 0.8]),
    ({"return_mode": "all"}, [1.0, 2.0]),
])
def test_fallback_sequences_are_not_repeated(timer, kw, expected):
    timer.setup(di=make_interface(graph=False), repeat=5)
    assert run(**kw) == expected
    assert len(timer.calls) == 1


# --- scratch RNG ----------------------------------------------------------------------------

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
    assert len(markers(capsys)) == 1
    assert torch.equal(torch.get_rng_state(), cpu_before)
    assert torch.equal(gen.get_state(), gen_before)


def test_scratch_rng_restores_after_success_too():
    gen = torch.Generator().manual_seed(5)
    before = gen.get_state()
    cpu = torch.get_rng_state()
    with cg.scratch_rng(types.SimpleNamespace(default_generators=(gen,))):
        torch.rand(3, generator=gen)
        torch.rand(3)
    assert torch.equal(gen.get_state(), before) and torch.equal(torch.get_rng_state(), cpu)


def test_scratch_rng_without_default_generators_still_restores_cpu():
    cpu = torch.get_rng_state()
    with pytest.raises(KeyError):
        with cg.scratch_rng(types.SimpleNamespace()):
            torch.rand(3)
            raise KeyError("boom")
    assert torch.equal(torch.get_rng_state(), cpu)


class _GraphSafeGen:
    """Models torch's CUDA generator: capture flags the *current state object*."""

    class State:
        def __init__(self, seed=0, offset=0):
            self.seed, self.offset, self.capturing = seed, offset, False

    def __init__(self):
        self.current = self.State(seed=123)

    def get_state(self):
        return (self.current.seed, self.current.offset)

    def set_state(self, value):
        self.current.seed, self.current.offset = value

    def graphsafe_get_state(self):
        return self.current

    def graphsafe_set_state(self, state):
        self.current = state

    def clone_state(self):
        return self.State(self.current.seed, self.current.offset)

    def capture_prologue(self):  # what CUDAGraph.capture_begin does to the generator
        self.current.capturing = True
        self.current.offset += 4


def test_aborted_capture_never_flags_the_process_generator():
    import _cudagraph_plugin as cg

    gen = _GraphSafeGen()
    before = gen.current

    class DI:
        default_generators = (gen,)

    with pytest.raises(RuntimeError):
        with cg.scratch_rng(DI()):
            gen.capture_prologue()
            raise RuntimeError("capture invalidated")  # no epilogue: the flag stays set
    assert gen.current is before and not before.capturing
    assert gen.get_state() == (123, 0)


# --- backward benchmarks run on a side stream -------------------------------------------------

class RecordingInterface:
    """Streams that remember who waited on whom, and which stream was current when."""

    def __init__(self):
        self.ambient = FakeStream()
        self.current = self.ambient
        self.made = []

    def Stream(self):
        s = FakeStream()
        s.joined = []
        self.made.append(s)
        return s

    def current_stream(self, device=None):
        return self.current

    @contextlib.contextmanager
    def stream(self, s):
        prev, self.current = self.current, s
        try:
            yield s
        finally:
            self.current = prev


def test_side_stream_orders_after_and_joins_back_to_the_ambient_stream():
    di = RecordingInterface()
    joined = []
    di.ambient.wait_stream = joined.append
    with cg.side_stream(di) as side:
        assert di.current is side and side is not di.ambient
        assert side.waited_on is di.ambient  # inputs written before are visible
    assert di.current is di.ambient
    assert joined == [side]  # later work on the ambient stream waits for the side's


def test_side_stream_without_streams_runs_the_block_as_is():
    with cg.side_stream(types.SimpleNamespace()) as side:
        assert side is None


def make_bench_classes(di, seen):
    class Benchmark:
        def __init__(self, is_backward):
            self.is_backward = is_backward

        def get_latency(self, op, *args, **kwargs):
            seen.append(di.current)
            return op(*args)

    class Child(Benchmark):
        def get_latency(self, op, *args, **kwargs):
            seen.append(("child", di.current))
            return super().get_latency(op, *args, **kwargs)

    return Benchmark, Child


@contextlib.contextmanager
def hooked_benchmarks(monkeypatch, seen):
    """A recording interface and the two bench classes, importable as FlagGems'
    `benchmark.base` (where find_benchmark_bases looks), get_latency hooked for the block.
    Yields (interface, Benchmark, Child, number of classes hooked)."""
    di = RecordingInterface()
    monkeypatch.setattr(cg, "device_interface", lambda: di)
    Benchmark, Child = make_bench_classes(di, seen)
    mod = types.ModuleType("base")
    mod.Benchmark = Benchmark
    monkeypatch.setitem(sys.modules, "benchmark.base", mod)
    try:
        yield di, Benchmark, Child, cg.patch_backward_benchmarks()
    finally:
        cg.restore_backward_benchmarks()


def test_backward_get_latency_runs_on_a_side_stream_and_forward_does_not(monkeypatch):
    seen = []
    with hooked_benchmarks(monkeypatch, seen) as (di, Benchmark, Child, hooked):
        assert hooked == 2
        assert cg.patch_backward_benchmarks() == 0  # idempotent
        assert Benchmark(is_backward=False).get_latency(lambda x: x + 1, 1) == 2
        assert seen == [di.ambient] and di.made == []
        seen.clear()
        assert Child(is_backward=True).get_latency(lambda x: x * 3, 2) == 6
        # one side stream for the whole call, the nested super() call included
        assert len(di.made) == 1
        assert seen == [("child", di.made[0]), di.made[0]]
        assert di.current is di.ambient
    assert "__wrapped__" not in Benchmark.__dict__["get_latency"].__dict__
    assert "__wrapped__" not in Child.__dict__["get_latency"].__dict__


def test_side_stream_flag_is_cleared_when_get_latency_raises(monkeypatch):
    with hooked_benchmarks(monkeypatch, []) as (di, Benchmark, _, _hooked):
        bench = Benchmark(is_backward=True)

        def boom():
            raise RuntimeError("shape failed")

        with pytest.raises(RuntimeError):
            bench.get_latency(boom)
        assert di.current is di.ambient and bench._zl_side_stream is False
        assert bench.get_latency(lambda: 5) == 5 and len(di.made) == 2


# --- backward benchmarks are captured on their forward stream ---------------------------------

def test_backward_get_latency_exposes_its_forward_stream_to_the_timer(monkeypatch):
    seen = []
    with hooked_benchmarks(monkeypatch, []) as (di, Benchmark, _, _hooked):
        Benchmark(is_backward=True).get_latency(lambda: seen.append(cg._STATE["forward_stream"]))
        assert seen == [di.made[0]] and cg._STATE["forward_stream"] is None
        Benchmark(is_backward=False).get_latency(lambda: seen.append(cg._STATE["forward_stream"]))
        assert seen[-1] is None  # forward benchmarks keep the upstream path

        def boom():
            raise RuntimeError("shape failed")

        with pytest.raises(RuntimeError):
            Benchmark(is_backward=True).get_latency(boom)
        assert cg._STATE["forward_stream"] is None


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
    def graph_ctx(graph, stream=None):
        graphs.append(stream)
        yield

    made = []
    di.stream, di.graph = stream_ctx, graph_ctx
    di.Stream = lambda: made.append(FakeStream()) or made[-1]
    timer.setup(di=di)
    monkeypatch.setattr(cg, "_is_torch_cuda", lambda d: d is di)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph",
                        lambda *a, **k: pytest.fail("upstream capture used for a backward"))
    forward = FakeStream()
    monkeypatch.setitem(cg._STATE, "forward_stream", forward)
    assert run(return_mode="median") > 0
    assert made == [] and graphs == [forward] and set(entered) == {forward}
    assert di.log.count("replay") == cg.N_REPLAYS


def test_forward_capture_on_torch_cuda_stays_upstream_verbatim(timer, monkeypatch):
    di = make_interface()
    timer.setup(di=di)
    monkeypatch.setattr(cg, "_is_torch_cuda", lambda d: d is di)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", lambda *a, **k: 0.25)
    assert cg._STATE["forward_stream"] is None
    assert run() == 0.25 and "replay" not in di.log


def test_capturing_names_the_stream_only_when_given():
    calls = []

    @contextlib.contextmanager
    def graph_ctx(graph, **kw):
        calls.append(kw)
        yield

    di = types.SimpleNamespace(graph=graph_ctx)
    with cg._capturing(di, object()):
        pass
    with cg._capturing(di, object(), stream="s"):
        pass
    assert calls == [{}, {"stream": "s"}]
