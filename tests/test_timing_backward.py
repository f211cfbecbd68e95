"""zl.timing.backward: backward benchmarks run on a side stream, which the timer captures on."""

from __future__ import annotations

import contextlib
import sys
import types

import pytest

from harness.fake_device import RecordingInterface
from zl.backends import get_backend
from zl.timing import backward, device
from zl.timing.graph import GraphTimer


def test_side_stream_orders_after_and_joins_back_to_the_ambient_stream():
    di = RecordingInterface()
    joined = []
    di.ambient.wait_stream = joined.append
    with backward.side_stream(di) as side:
        assert di.current is side and side is not di.ambient
        assert side.waited_on is di.ambient  # inputs written before are visible
    assert di.current is di.ambient
    assert joined == [side]  # later work on the ambient stream waits for the side's


def test_side_stream_without_streams_runs_the_block_as_is():
    with backward.side_stream(types.SimpleNamespace()) as side:
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


def install_bench_module(monkeypatch, seen):
    """A recording interface and the two bench classes, importable as FlagGems'
    `benchmark.base` (where find_benchmark_bases looks)."""
    di = RecordingInterface()
    monkeypatch.setattr(device, "device_interface", lambda: di)
    Benchmark, Child = make_bench_classes(di, seen)
    mod = types.ModuleType("base")
    mod.Benchmark = Benchmark
    monkeypatch.setitem(sys.modules, "benchmark.base", mod)
    return di, Benchmark, Child


@contextlib.contextmanager
def hooked_benchmarks(monkeypatch, seen):
    """Yields (interface, Benchmark, Child, streams, number of classes hooked); restores."""
    di, Benchmark, Child = install_bench_module(monkeypatch, seen)
    streams = backward.BackwardStreams()
    try:
        yield di, Benchmark, Child, streams, streams.apply()
    finally:
        streams.restore()


def test_backward_get_latency_runs_on_a_side_stream_and_forward_does_not(monkeypatch):
    seen = []
    with hooked_benchmarks(monkeypatch, seen) as (di, Benchmark, Child, streams, hooked):
        assert hooked == 2
        assert streams.apply() == 0  # idempotent
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
    with hooked_benchmarks(monkeypatch, []) as (di, Benchmark, _, _streams, _hooked):
        bench = Benchmark(is_backward=True)

        def boom():
            raise RuntimeError("shape failed")

        with pytest.raises(RuntimeError):
            bench.get_latency(boom)
        assert di.current is di.ambient and bench._zl_side_stream is False
        assert bench.get_latency(lambda: 5) == 5 and len(di.made) == 2


def test_backward_get_latency_exposes_its_forward_stream_to_the_timer(monkeypatch):
    seen = []
    with hooked_benchmarks(monkeypatch, []) as (di, Benchmark, _, streams, _hooked):
        Benchmark(is_backward=True).get_latency(lambda: seen.append(streams.forward_stream))
        assert seen == [di.made[0]] and streams.forward_stream is None
        Benchmark(is_backward=False).get_latency(lambda: seen.append(streams.forward_stream))
        assert seen[-1] is None  # forward benchmarks keep the upstream path

        def boom():
            raise RuntimeError("shape failed")

        with pytest.raises(RuntimeError):
            Benchmark(is_backward=True).get_latency(boom)
        assert streams.forward_stream is None


def test_uninstalling_the_graph_timer_restores_the_benchmark_classes(monkeypatch):
    seen = []
    _di, Benchmark, Child = install_bench_module(monkeypatch, seen)
    originals = (Benchmark.__dict__["get_latency"], Child.__dict__["get_latency"])
    timer = GraphTimer(get_backend("cuda"))
    timer.install()
    try:
        assert timer.backward.apply() == 2
        assert Benchmark.__dict__["get_latency"] is not originals[0]
    finally:
        timer.uninstall()
    assert (Benchmark.__dict__["get_latency"], Child.__dict__["get_latency"]) == originals
