"""Backward benchmarks run their whole `get_latency` on a side stream, and are captured on it.

Why: autograd runs each backward kernel on the stream its forward ran on. FlagGems'
backward benchmarks run the forward on the legacy default stream before timing, so every
capture of the backward hit "operation would make the legacy stream depend on a capturing
blocking stream" (H200, gelu_backward: all rows fell back to direct timing, whose A/A noise
was 20 %). With the forward on a side stream the backward's stream joins the capture. The
graph is then captured on that same stream: captured from any other stream, every
autograd.grad call adds a cross-stream fork and join to the graph, which on the H200 cost 5x
the bare kernel on 64x64 and made gelu_backward's latency move 9 % between identical runs
(docs/validation/timing.md).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from zl.flaggems import BenchmarkMethodPatch

from . import device


@contextlib.contextmanager
def side_stream(di):
    """Run the block on a fresh side stream ordered after, and joined back to, the ambient one.

    An interface without streams runs the block as is (yields None).
    """
    make = getattr(di, "Stream", None)
    enter = getattr(di, "stream", None)
    current = getattr(di, "current_stream", None)
    if make is None or enter is None or current is None:
        yield None
        return
    ambient = current()
    side = make()
    if hasattr(side, "wait_stream"):
        side.wait_stream(ambient)
    try:
        with enter(side):
            yield side
    finally:
        if hasattr(ambient, "wait_stream"):
            ambient.wait_stream(side)


class BackwardStreams:
    """Hooks Benchmark.get_latency so backward benchmarks run on a side stream, and tells the
    graph timer which stream that is (`forward_stream`, None outside a backward call)."""

    def __init__(self) -> None:
        self.forward_stream: Any = None
        self._patch = BenchmarkMethodPatch("get_latency", self._wrap)

    def apply(self) -> int:
        """Wrap get_latency on every FlagGems Benchmark class (and subclass) that defines it;
        returns how many were wrapped now (0 when already done)."""
        return self._patch.apply()

    def restore(self) -> None:
        self._patch.restore()
        self.forward_stream = None

    def _wrap(self, original: Callable) -> Callable:
        streams = self

        def get_latency(bench, op, *args, **kwargs):
            # Nested calls (a subclass calling super()) are already on the side stream.
            if not getattr(bench, "is_backward", False) or getattr(bench, "_zl_side_stream", False):
                return original(bench, op, *args, **kwargs)
            bench._zl_side_stream = True
            try:
                with side_stream(device.device_interface()) as forward_stream:
                    # the graph timer captures on this stream too (capture.graph_bench_port)
                    streams.forward_stream = forward_stream
                    return original(bench, op, *args, **kwargs)
            finally:
                streams.forward_stream = None
                bench._zl_side_stream = False

        return get_latency
