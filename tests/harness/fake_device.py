"""Duck-typed device interfaces for in-process tests of zl.timing (no GPU, no Triton driver).

Events read perf_counter, streams remember what they waited on, and an optional fake graph
type can be told to raise at capture or replay, so each rule of the graph timer can be
checked on its own.
"""
from __future__ import annotations

import contextlib
import time
import types


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
    """A duck-typed device interface; `graph=False` gives one with no graph type.

    `.log` lists capture_begin / capture_end / replay / synchronize in call order.
    """
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


def recording_graph_type(di):
    """A graph type for `di` whose captures record what ran: `launch(x)` appends x to the graph
    being captured (a no-op outside a capture). Returns (graph type, launch, state); the graph's
    `ops` list is what a replay would run, and `replay()` logs and returns it."""
    state = types.SimpleNamespace(capturing=None)

    class RecordingGraph:
        def __init__(self):
            self.ops = []

        def capture_begin(self):
            state.capturing = self
            di.log.append("capture_begin")

        def capture_end(self):
            state.capturing = None

        def replay(self):
            di.log.append("replay")
            return list(self.ops)

    def launch(op) -> bool:
        if state.capturing is not None:
            state.capturing.ops.append(op)
            return True
        return False

    return RecordingGraph, launch, state
