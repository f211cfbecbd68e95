"""zl.timing.capture: the scratch RNG around a capture and how a capture names its stream."""

from __future__ import annotations

import contextlib
import types

import pytest
import torch

from zl.timing import capture


def test_scratch_rng_restores_after_success_too():
    gen = torch.Generator().manual_seed(5)
    before = gen.get_state()
    cpu = torch.get_rng_state()
    with capture.scratch_rng(types.SimpleNamespace(default_generators=(gen,))):
        torch.rand(3, generator=gen)
        torch.rand(3)
    assert torch.equal(gen.get_state(), before) and torch.equal(torch.get_rng_state(), cpu)


def test_scratch_rng_without_default_generators_still_restores_cpu():
    cpu = torch.get_rng_state()
    with pytest.raises(KeyError):
        with capture.scratch_rng(types.SimpleNamespace()):
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
    gen = _GraphSafeGen()
    before = gen.current

    class DI:
        default_generators = (gen,)

    with pytest.raises(RuntimeError):
        with capture.scratch_rng(DI()):
            assert gen.current is not before  # the capture runs on a clone
            gen.capture_prologue()
            raise RuntimeError("capture invalidated")  # no epilogue: the flag stays set
    assert gen.current is before and not before.capturing
    assert gen.get_state() == (123, 0)


def test_an_unreadable_generator_is_neither_swapped_nor_restored():
    class Unreadable(_GraphSafeGen):
        def get_state(self):
            raise RuntimeError("no state here")

    gen = Unreadable()
    before = gen.current
    with capture.scratch_rng(types.SimpleNamespace(default_generators=(gen,))):
        assert gen.current is before
    assert gen.current is before


def test_capturing_names_the_stream_only_when_given():
    calls = []

    @contextlib.contextmanager
    def graph_ctx(graph, **kw):
        calls.append(kw)
        yield

    di = types.SimpleNamespace(graph=graph_ctx)
    with capture.capturing(di, object()):
        pass
    with capture.capturing(di, object(), stream="s"):
        pass
    assert calls == [{}, {"stream": "s"}]
