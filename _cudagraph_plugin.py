"""pytest plugin: time `triton.testing.do_bench` calls with graph capture, per shape.

Loaded by `_timing_plugin` when the backend declares `supports_cuda_graph`; it is
not on the default `-p` list and does nothing by itself (loading it directly only
logs that). `install()` swaps do_bench for `graph_do_bench`, which for each call:

1. asks the backend's deny list whether this operator may be captured at all;
2. synchronises the device, so the capture stream cannot start before the inputs
   the benchmark just wrote on the current stream exist (an unsynchronised side
   stream gave an intermittent illegal instruction);
3. warms fn for the caller's warmup budget: one discarded call absorbs autotune
   and JIT, then steady-state calls. do_bench_cudagraph's own single warmup call
   is too short to settle the MoE kernels and made the first capture unstable
   run-to-run;
4. captures and replays under a scratch RNG state (see `scratch_rng`);
5. on failure asks the backend, by its vendor wording, how bad it was:
   recoverable -> plain do_bench (ZL_DIRECT_REPEAT times, median) plus a
   BENCHMARK_DIRECT_NO_CUDAGRAPH marker; poisoned -> BENCHMARK_CAPTURE_POISONED
   and re-raise; fatal -> re-raise, because a fallback latency would report a
   broken kernel as a measurement.

Backward benchmarks (`is_backward`) get their whole `get_latency` on a side stream
(`side_stream`), so the forward, and with it the backward autograd replays, is not
on the legacy default stream that no capture may touch. Their graph is then captured
on that same stream (`_graph_bench_port(stream=...)`, on torch.cuda too): captured from
any other stream, every autograd.grad call adds a cross-stream fork and join to the
graph, which on the H200 cost 5x the bare kernel on 64x64 and made gelu_backward's
latency move 9 % between identical runs (docs/validation/timing.md).

Streams, events and graphs come from Triton's active device interface (torch.cuda
on NVIDIA, torch_musa on MThreads), never from torch.cuda by name. On torch.cuda
upstream `triton.testing.do_bench_cudagraph` is called verbatim so CUDA numbers do
not move; elsewhere `_graph_bench_port` does the same steps through the interface
(upstream hard-codes torch.cuda, so on MUSA every capture raised and every row
silently fell back while the log claimed graph timing). An interface without a
graph type falls back on every shape, with the marker, and still gives each row.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from typing import Any, Dict

import pytest

from zl.term import log as _term_log, style
from zl.flaggems import BenchmarkMethodPatch

LOG_TAG = "[cudagraph-plugin]"
DIRECT_MARKER = "BENCHMARK_DIRECT_NO_CUDAGRAPH"
POISONED_MARKER = "BENCHMARK_CAPTURE_POISONED"
DETAIL_CHARS = 160
# Replays timed per call, as upstream do_bench_cudagraph does.
N_REPLAYS = 10

_STATE: Dict[str, Any] = {"original": None, "backend": None, "repeat": 1,
                          "forward_stream": None}
_CURRENT = {"op": None}  # operator of the pytest item now running


class NoGraphSupport(RuntimeError):
    """The active device interface exposes no graph type to capture into."""


def _log(message: str) -> None:
    _term_log(LOG_TAG, message)


def _marker(text: str, colour: str) -> None:
    """Markers go to stdout, interleaved with the result tables they annotate in run.log."""
    print(style(text, colour, stream=sys.stdout), flush=True)


# --- operator name --------------------------------------------------------------------------

def op_from_item(item) -> str:
    """pytest function name minus `test_` (parameters stripped): the deny-list key."""
    name = getattr(item, "originalname", None) or str(getattr(item, "name", "")).split("[", 1)[0]
    return name[len("test_"):] if name.startswith("test_") else name


def current_op() -> str:
    """The running item's operator; else ZL_OP / FLAGGEMS_PERF_CURRENT_OP; else '<unknown>'.

    The item wins over the environment because a whole-file node runs several test
    functions under one ZL_OP, and the deny list is keyed by function name.
    """
    return (_CURRENT["op"] or os.environ.get("ZL_OP", "").strip()
            or os.environ.get("FLAGGEMS_PERF_CURRENT_OP", "").strip() or "<unknown>")


# --- device interface -----------------------------------------------------------------------

def device_interface():
    """Triton's active device interface: torch.cuda on NVIDIA, torch_musa on MThreads."""
    from triton.runtime import driver
    return driver.active.get_device_interface()


def _is_torch_cuda(di) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and di is getattr(torch, "cuda", None)


def graph_type(di):
    for name in ("CUDAGraph", "MUSAGraph", "XPUGraph", "Graph"):
        cls = getattr(di, name, None)
        if cls is not None:
            return cls
    raise NoGraphSupport(f"device interface {getattr(di, '__name__', type(di).__name__)} "
                         "exposes no graph type")


def interface_label() -> str:
    """'torch.cuda (upstream do_bench_cudagraph)' etc., for the configure log line."""
    try:
        di = device_interface()
    except Exception as exc:
        return f"<no active driver: {type(exc).__name__}>"
    name = getattr(di, "__name__", None) or type(di).__name__
    if _is_torch_cuda(di):
        return f"{name} (upstream do_bench_cudagraph)"
    try:
        graph_type(di)
    except NoGraphSupport:
        return f"{name} (no graph type: every shape will fall back)"
    return f"{name} (graph timer through the device interface)"


# --- capture helpers ------------------------------------------------------------------------

@contextlib.contextmanager
def scratch_rng(di):
    """Run the block on a throwaway RNG state and put the process's state back after.

    Capturing registers the device generator's *state object* with the graph and
    flags it as capturing; only a completed capture clears the flag. Seen on the
    H200 with upstream gelu_backward: after an aborted capture the next
    `torch.randn(..., device="cuda")` raised "Offset increment outside graph
    capture encountered unexpectedly" and the operator lost every row. Restoring
    seed/offset with set_state() does not clear that flag, so where torch offers
    graph-safe states the capture runs on a cloned state object, swapped in before
    and swapped out after: the process's own state is never registered. Every draw
    during warmup/capture would also shift the fixed seeds _seed_plugin set, so
    the seed/offset values are restored too. An interface without
    `default_generators` (torch_musa) has no such registration; the CPU state is
    still restored.
    """
    import torch

    cpu_state = torch.get_rng_state()
    generators = tuple(getattr(di, "default_generators", ()) or ())
    saved, swapped = [], []
    for gen in generators:
        try:
            saved.append((gen, gen.get_state()))
        except Exception:  # a generator that cannot be read cannot be restored either
            continue
        if hasattr(gen, "graphsafe_get_state") and hasattr(gen, "clone_state"):
            try:
                original = gen.graphsafe_get_state()
                gen.graphsafe_set_state(gen.clone_state())
                swapped.append((gen, original))
            except Exception as exc:
                _log(f"graph-safe RNG swap unavailable ({type(exc).__name__}: {exc}); "
                     "an aborted capture may leave the generator flagged as capturing")
    try:
        yield
    finally:
        torch.set_rng_state(cpu_state)
        for gen, original in swapped:
            try:
                gen.graphsafe_set_state(original)
            except Exception as exc:
                _log(f"could not swap the device RNG state back after capture: "
                     f"{type(exc).__name__}: {exc}")
        for gen, state in saved:
            try:
                gen.set_state(state)
            except Exception as exc:
                _log(f"could not restore a device RNG state after capture: "
                     f"{type(exc).__name__}: {exc}")


def _reset_grads(grad_to_none) -> None:
    if grad_to_none is not None:
        for x in grad_to_none:
            x.grad = None


def warmup_before_capture(di, fn, warmup_ms: float, grad_to_none=None) -> int:
    """One discarded call, then steady-state calls for about `warmup_ms`; returns the count.

    The count comes from an event-timed call (as do_bench sizes its warmup) but the
    loop also stops at the wall-clock budget: for microsecond kernels the host
    launch path, not the device, sets the pace, and an event-sized count would
    overrun the budget several times over.
    """
    fn()
    di.synchronize()
    start, end = di.Event(enable_timing=True), di.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    di.synchronize()
    estimate = start.elapsed_time(end)
    budget = max(float(warmup_ms or 0), 0.0)
    n = max(1, int(budget / estimate)) if estimate > 0 else 1
    deadline = time.perf_counter() + budget / 1e3
    done = 0
    for _ in range(n):
        _reset_grads(grad_to_none)
        fn()
        done += 1
        if time.perf_counter() >= deadline:
            break
    di.synchronize()
    return done


@contextlib.contextmanager
def _capturing(di, graph, stream=None):
    # Garbage collection during capture can free tensors the graph still uses; upstream
    # (triton>=3.4 cuda_graph_without_gc) disables it for the same reason.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        if hasattr(di, "graph"):
            # The stream is named: torch.cuda.graph otherwise captures on a stream of its own.
            with di.graph(graph, **({"stream": stream} if stream is not None else {})):
                yield
        else:
            graph.capture_begin()
            try:
                yield
            finally:
                graph.capture_end()
    finally:
        if was_enabled:
            gc.enable()


def _summarize(times, quantiles, return_mode):
    import triton.testing as tt
    summarize = getattr(tt, "_summarize_statistics", None)
    if summarize is not None:
        return summarize(times, quantiles, return_mode)
    import numpy as np  # triton without the helper: same contract, numpy statistics
    if quantiles is not None:
        out = [float(v) for v in np.quantile(times, quantiles)]
        return out[0] if len(out) == 1 else out
    if return_mode == "all":
        return list(times)
    return float({"min": np.min, "max": np.max, "mean": np.mean,
                  "median": np.median}[return_mode](times))


def _graph_bench_port(di, graph_cls, step, fn, rep, grad_to_none, quantiles, return_mode,
                      stream=None):
    """Upstream do_bench_cudagraph's steps through the device interface.

    Estimate one call, unroll enough calls into one graph to fill `rep` ms so host
    launch overhead drops out, then time N_REPLAYS replays. Replay times go to the
    summariser as a plain list of floats, as in upstream: a tensor there makes
    "mean" raise and quantile requests return tensors that do not serialise.
    `stream`: capture on this stream (a backward benchmark's forward stream) instead
    of a fresh one.
    """
    side = stream
    if side is None:
        side = di.Stream()
        if hasattr(side, "wait_stream") and hasattr(di, "current_stream"):
            side.wait_stream(di.current_stream())
    with di.stream(side):
        fn()
        _reset_grads(grad_to_none)
        start, end = di.Event(enable_timing=True), di.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            fn()
        end.record()
        di.synchronize()
        estimate = start.elapsed_time(end) / 5
        n_repeat = 1000 if estimate == 0 else max(1, int(rep / estimate))
        graph = graph_cls()
        with _capturing(di, graph, stream):
            for _ in range(n_repeat):
                _reset_grads(grad_to_none)
                fn()
        di.synchronize()
        step["phase"] = "replay"
        times = []
        for _ in range(N_REPLAYS):
            start, end = di.Event(enable_timing=True), di.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            di.synchronize()
            times.append(start.elapsed_time(end) / n_repeat)
    return _summarize(times, quantiles, return_mode)


def _time_with_graph(step, fn, warmup, rep, grad_to_none, quantiles, return_mode):
    di = device_interface()
    forward_stream = _STATE["forward_stream"]
    # upstream verbatim on torch.cuda, except for a backward benchmark (upstream's own
    # cudagraph mode loses those rows entirely, so there is no upstream number to keep)
    upstream = _is_torch_cuda(di) and forward_stream is None
    graph_cls = None
    if not upstream:
        # Known before anything runs; failing here spares the warmup budget.
        step["phase"] = "capture"
        graph_cls = graph_type(di)
    step["phase"] = "sync"
    di.synchronize()
    step["phase"] = "warmup"
    warmup_before_capture(di, fn, warmup, grad_to_none)
    step["phase"] = "capture"
    with scratch_rng(di):
        if upstream:
            import triton.testing as tt
            # Upstream verbatim on CUDA; a replay failure inside it reports phase=capture.
            return tt.do_bench_cudagraph(fn, rep=rep, grad_to_none=grad_to_none,
                                         quantiles=quantiles, return_mode=return_mode)
        return _graph_bench_port(di, graph_cls, step, fn, rep, grad_to_none, quantiles,
                                 return_mode, stream=forward_stream)


def _detail(exc: BaseException) -> str:
    # One line, no single quotes, so `detail='...'` stays one parseable token group.
    return " ".join(str(exc).split())[:DETAIL_CHARS].replace("'", '"')


def _fallback(op, phase, reason, detail, fn, warmup, rep, grad_to_none, quantiles,
              return_mode):
    from _timing_plugin import run_direct
    repeat = int(_STATE["repeat"] or 1)
    suffix = f" repeat={repeat}" if repeat > 1 else ""
    _marker(f"{DIRECT_MARKER} op={op} phase={phase} reason={reason} detail='{detail}'{suffix}",
            "yellow")
    return run_direct(_STATE["original"], fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                      quantiles=quantiles, return_mode=return_mode, repeat=repeat)


def _classify(backend, exc: BaseException) -> str:
    if isinstance(exc, NoGraphSupport):
        return "recoverable"  # our own probe: nothing ran on the device
    verdict = backend.classify_capture_error(exc)
    if verdict not in ("fatal", "poisoned", "recoverable"):
        _log(f"backend {backend.name} returned verdict {verdict!r}; treating it as fatal")
        return "fatal"
    return verdict


def graph_do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None,
                   return_mode="mean"):
    """Drop-in for triton.testing.do_bench: graph timing with per-shape honest fallback."""
    op = current_op()
    backend = _STATE["backend"]
    args = (fn, warmup, rep, grad_to_none, quantiles, return_mode)
    # For a deny-listed operator the attempt itself is the damage (it poisons the
    # context), so it is never made, not even once per run to rediscover that.
    if backend.denies_capture(op):
        return _fallback(op, "denylist", "KnownPoisoningOp",
                         f"{backend.name} denies capture for {op}", *args)
    step = {"phase": "sync"}
    try:
        return _time_with_graph(step, *args)
    except Exception as exc:
        verdict = _classify(backend, exc)
        phase, reason, detail = step["phase"], type(exc).__name__, _detail(exc)
        if verdict == "fatal":
            _log(f"fatal device error for op={op} phase={phase} ({reason}); not falling back")
            raise
        if verdict == "recoverable" and not isinstance(exc, NoGraphSupport):
            # Confirm the context survived the attempt before timing inside it: a dead
            # context showed up once as a fallback marker followed by zero rows.
            try:
                device_interface().synchronize()
            except Exception as probe:
                verdict, reason = "poisoned", type(probe).__name__
                detail = _detail(probe)
                if _classify(backend, probe) == "fatal":
                    raise probe from exc
        if verdict == "poisoned":
            _marker(f"{POISONED_MARKER} op={op} phase={phase} reason={reason} "
                    f"detail='{detail}'", "red")
            _log(f"capture attempt left the context unusable for op={op}; re-run it with "
                 f"ZL_ENABLE_CUDAGRAPH=0 and add it to backend {backend.name}'s deny list")
            raise
        return _fallback(op, phase, reason, detail, *args)


# --- backward benchmarks: forward on a side stream ------------------------------------------

@contextlib.contextmanager
def side_stream(di):
    """Run the block on a fresh side stream ordered after, and joined back to, the ambient one.

    Why: autograd runs each backward kernel on the stream its forward ran on. FlagGems'
    backward benchmarks run the forward on the legacy default stream before timing,
    so every capture of the backward hit "operation would make the legacy stream
    depend on a capturing blocking stream" (H200, gelu_backward: all rows fell back
    to direct timing, whose A/A noise was 20 %). With the forward on a side stream,
    the backward's stream simply joins the capture. An interface without streams
    runs the block as is.
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


def _side_stream_get_latency(original):
    def get_latency(self, op, *args, **kwargs):
        # Nested calls (a subclass calling super()) are already on the side stream.
        if not getattr(self, "is_backward", False) or getattr(self, "_zl_side_stream", False):
            return original(self, op, *args, **kwargs)
        self._zl_side_stream = True
        try:
            with side_stream(device_interface()) as forward_stream:
                # the timer captures on this stream too (see _graph_bench_port)
                _STATE["forward_stream"] = forward_stream
                return original(self, op, *args, **kwargs)
        finally:
            _STATE["forward_stream"] = None
            self._zl_side_stream = False
    return get_latency


_BACKWARD_PATCH = BenchmarkMethodPatch("get_latency", _side_stream_get_latency)


def patch_backward_benchmarks() -> int:
    """Wrap get_latency on every FlagGems Benchmark class (and subclass) that defines it."""
    return _BACKWARD_PATCH.apply()


def restore_backward_benchmarks() -> None:
    _BACKWARD_PATCH.restore()


# --- install / pytest hooks -----------------------------------------------------------------

def install(backend, repeat: int = 1) -> None:
    """Replace triton.testing.do_bench with graph_do_bench (idempotent)."""
    import triton.testing as tt
    _STATE["backend"] = backend
    _STATE["repeat"] = max(1, int(repeat))
    if _STATE["original"] is None:
        _STATE["original"] = tt.do_bench
        tt.do_bench = graph_do_bench


def uninstall() -> None:
    import triton.testing as tt
    if _STATE["original"] is not None:
        tt.do_bench = _STATE["original"]
    _STATE.update(original=None, backend=None, repeat=1)
    _CURRENT["op"] = None


def is_installed() -> bool:
    return _STATE["original"] is not None


def pytest_configure(config):
    """Say so when loaded without the timing plugin, which owns the decision."""
    if not config.pluginmanager.has_plugin("_timing_plugin"):
        _log("loaded without _timing_plugin: do_bench left untouched "
             "(load -p _timing_plugin; it decides whether graph capture applies)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Remember the running item's operator for markers and the deny list."""
    _CURRENT["op"] = op_from_item(item)


def pytest_runtest_logfinish(nodeid, location):
    _CURRENT["op"] = None


def pytest_collection_finish(session):
    """Benchmark classes exist once the test modules are imported: move backward forwards
    onto a side stream so their backward can be captured (only while graph timing is on)."""
    if is_installed():
        n = patch_backward_benchmarks()
        if n:
            _log(f"backward benchmarks run their forward on a side stream and are "
                 f"graph-captured on it (get_latency hooked on {n} Benchmark class(es))")


def pytest_unconfigure(config):
    """Restore triton.testing.do_bench and the Benchmark classes."""
    restore_backward_benchmarks()
    uninstall()
