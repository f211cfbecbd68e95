"""One graph capture, step by step: warmup, a scratch RNG, capture, replay, summary.

`graph_bench_port` is upstream `triton.testing.do_bench_cudagraph` done through the active
device interface (upstream hard-codes torch.cuda); `graph_bench_cold` is the same with the
L2 flushed before every call and the flushes' own time subtracted (ZL_L2=cold), or read off
CUPTI's kernel timestamps (ZL_COLD_CLOCK=kernels, `kernel_clock`). The warmup
before a capture (`warmup_before_capture`) stops once the calls settle: do_bench_cudagraph's
own single warmup call is too short to settle the MoE kernels and made the first capture
unstable run-to-run.
"""

from __future__ import annotations

import contextlib
import gc
import time

from zl.term import log

from . import GRAPH_LOG_TAG, kernel_clock

# Replays timed per call, as upstream do_bench_cudagraph does.
N_REPLAYS = 10


def _log(message: str) -> None:
    log(GRAPH_LOG_TAG, message)


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
    saved = _save_generator_states(generators)
    swapped = _swap_in_graphsafe_clones([gen for gen, _ in saved])
    try:
        yield
    finally:
        torch.set_rng_state(cpu_state)
        _put_back(swapped, "graphsafe_set_state", "swap the device RNG state back")
        _put_back(saved, "set_state", "restore a device RNG state")


def _put_back(pairs, setter: str, what: str) -> None:
    """`gen.<setter>(value)` for each (gen, value); a failure is logged, the rest still run."""
    for gen, value in pairs:
        try:
            getattr(gen, setter)(value)
        except Exception as exc:
            _log(f"could not {what} after capture: {type(exc).__name__}: {exc}")


def _save_generator_states(generators):
    saved = []
    for gen in generators:
        try:
            saved.append((gen, gen.get_state()))
        except Exception:  # a generator that cannot be read cannot be restored either
            continue
    return saved


def _swap_in_graphsafe_clones(generators):
    """Swap a cloned state object into each graph-safe generator; -> [(gen, original)]."""
    swapped = []
    for gen in generators:
        if not (hasattr(gen, "graphsafe_get_state") and hasattr(gen, "clone_state")):
            continue
        try:
            original = gen.graphsafe_get_state()
            gen.graphsafe_set_state(gen.clone_state())
            swapped.append((gen, original))
        except Exception as exc:
            _log(f"graph-safe RNG swap unavailable ({type(exc).__name__}: {exc}); "
                 "an aborted capture may leave the generator flagged as capturing")
    return swapped


def reset_grads(grad_to_none) -> None:
    if grad_to_none is not None:
        for x in grad_to_none:
            x.grad = None


# The adaptive warmup stops once this many successive event-timed calls agree within
# WARMUP_TOLERANCE of their median (or WARMUP_FLOOR_MS, the events' resolution, for
# microsecond kernels), or once its budget is spent, or after WARMUP_MAX_CALLS calls.
WARMUP_SETTLED = 3
WARMUP_TOLERANCE = 0.05
WARMUP_FLOOR_MS = 0.002
WARMUP_MAX_CALLS = 200


def warmup_before_capture(di, fn, warmup_ms: float, grad_to_none=None, cap_ms=None) -> int:
    """One discarded call, then warm calls; returns how many warm calls ran.

    Why it exists: do_bench_cudagraph's own single warmup call is too short to settle the
    MoE kernels and made the first capture unstable run-to-run. With `cap_ms` (the
    default, ZL_GRAPH_WARMUP_MS) the calls are event-timed one by one and stop when
    WARMUP_SETTLED of them agree, within min(warmup_ms, cap_ms) of wall clock. With
    `cap_ms=None` (ZL_GRAPH_WARMUP_MS=caller) the caller's whole budget is spent: FlagGems'
    default 1000 ms per call took softmax's core shapes 10.1 s of pytest against 7.2 s
    (H200, docs/validation/timing.md).
    """
    fn()
    di.synchronize()
    budget = max(float(warmup_ms or 0), 0.0)
    if cap_ms is None:
        return _warmup_for_budget(di, fn, budget, grad_to_none)
    deadline = time.perf_counter() + min(budget, max(float(cap_ms), 0.0)) / 1e3
    start, end = di.Event(enable_timing=True), di.Event(enable_timing=True)
    times = []
    while True:
        reset_grads(grad_to_none)
        start.record()
        fn()
        end.record()
        di.synchronize()
        times.append(start.elapsed_time(end))
        if (_settled(times[-WARMUP_SETTLED:]) or len(times) >= WARMUP_MAX_CALLS
                or time.perf_counter() >= deadline):
            return len(times)


def _settled(times) -> bool:
    if len(times) < WARMUP_SETTLED:
        return False
    mid = sorted(times)[len(times) // 2]
    return max(times) - min(times) <= max(WARMUP_TOLERANCE * mid, WARMUP_FLOOR_MS)


def _warmup_for_budget(di, fn, budget: float, grad_to_none) -> int:
    """The caller's whole warmup budget: an event-sized count for `budget` ms, cut at the wall clock
    (for microsecond kernels the host launch path sets the pace and the count would overrun)."""
    start, end = di.Event(enable_timing=True), di.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    di.synchronize()
    estimate = start.elapsed_time(end)
    n = max(1, int(budget / estimate)) if estimate > 0 else 1
    deadline = time.perf_counter() + budget / 1e3
    done = 0
    for _ in range(n):
        reset_grads(grad_to_none)
        fn()
        done += 1
        if time.perf_counter() >= deadline:
            break
    di.synchronize()
    return done


@contextlib.contextmanager
def capturing(di, graph, stream=None):
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


def summarize(times, quantiles, return_mode):
    import triton.testing as tt
    upstream = getattr(tt, "_summarize_statistics", None)
    if upstream is not None:
        return upstream(times, quantiles, return_mode)
    import numpy as np  # triton without the helper: same contract, numpy statistics
    if quantiles is not None:
        out = [float(v) for v in np.quantile(times, quantiles)]
        return out[0] if len(out) == 1 else out
    if return_mode == "all":
        return list(times)
    return float({"min": np.min, "max": np.max, "mean": np.mean,
                  "median": np.median}[return_mode](times))


def _capture_stream(di, stream):
    """The stream to capture on: the one given, else a fresh one ordered after the current."""
    if stream is not None:
        return stream
    side = di.Stream()
    if hasattr(side, "wait_stream") and hasattr(di, "current_stream"):
        side.wait_stream(di.current_stream())
    return side


def _estimate_ms(di, fn, grad_to_none) -> float:
    fn()
    reset_grads(grad_to_none)
    start, end = di.Event(enable_timing=True), di.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        fn()
    end.record()
    di.synchronize()
    return start.elapsed_time(end) / 5


def graph_bench_port(di, graph_cls, step, fn, rep, grad_to_none, quantiles, return_mode,
                     stream=None):
    """Upstream do_bench_cudagraph's steps through the device interface.

    Estimate one call, unroll enough calls into one graph to fill `rep` ms so host
    launch overhead drops out, then time N_REPLAYS replays. Replay times go to the
    summariser as a plain list of floats, as in upstream: a tensor there makes
    "mean" raise and quantile requests return tensors that do not serialise.
    `stream`: capture on this stream (a backward benchmark's forward stream) instead
    of a fresh one. `step["phase"]` says how far it got, for the fallback marker.
    """
    with di.stream(_capture_stream(di, stream)):
        estimate = _estimate_ms(di, fn, grad_to_none)
        n_repeat = 1000 if estimate == 0 else max(1, int(rep / estimate))
        graph = graph_cls()
        with capturing(di, graph, stream):
            for _ in range(n_repeat):
                reset_grads(grad_to_none)
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
    return summarize(times, quantiles, return_mode)


def graph_bench_cold(di, graph_cls, step, fn, rep, grad_to_none, quantiles, return_mode,
                     flush, stream=None, clock="events", tracer=None):
    """graph_bench_port with the L2 flushed before every call inside the graph (ZL_L2=cold).

    As tritonbench's cudagraph timer with cache clearing does: one graph holds n
    (flush, call) pairs, a second graph the same n flushes alone; each replay pair's
    difference, over n, is one sample, so the flush's own time is subtracted and a drift
    between replays hits both graphs of a pair alike. `flush()` writes a buffer larger
    than L2 on the current stream. `clock="kernels"` reads the (flush, call) graph with
    CUPTI's per-kernel timestamps instead (`_cold_kernel_samples`); `tracer` stands in for
    `kernel_clock.trace` in tests.
    """
    with di.stream(_capture_stream(di, stream)):
        flush()
        estimate = _estimate_ms(di, lambda: (flush(), fn()), grad_to_none)
        n_repeat = 1000 if estimate == 0 else max(1, int(rep / estimate))
        if clock == "kernels":
            times = _cold_kernel_samples(di, graph_cls, step, fn, grad_to_none, flush, stream,
                                         min(n_repeat, kernel_clock.MAX_TRACED_CALLS),
                                         tracer or kernel_clock.trace)
            return summarize(times, quantiles, return_mode)
        graph, flushes = graph_cls(), graph_cls()
        with capturing(di, graph, stream):
            for _ in range(n_repeat):
                flush()
                reset_grads(grad_to_none)
                fn()
        with capturing(di, flushes, stream):
            for _ in range(n_repeat):
                flush()
        di.synchronize()
        step["phase"] = "replay"
        times = []
        for _ in range(N_REPLAYS):
            with_fn, alone = _replay_ms(di, graph), _replay_ms(di, flushes)
            times.append((with_fn - alone) / n_repeat)
    return summarize(times, quantiles, return_mode)


def _cold_kernel_samples(di, graph_cls, step, fn, grad_to_none, flush, stream, calls, tracer):
    """ms per call, N_REPLAYS samples as upstream's: each the mean, over a group of calls, of a
    call's own kernels' CUPTI durations in one traced replay of `calls` (flush, call) pairs.
    The flush is traced eagerly first, on this stream and under the caller's dispatch state,
    for its kernel count and names (kernel_clock's docstring)."""
    flush_names = [k[0] for k in tracer(di, flush)]
    graph = graph_cls()
    with capturing(di, graph, stream):
        for _ in range(calls):
            flush()
            reset_grads(grad_to_none)
            fn()
    di.synchronize()
    step["phase"] = "replay"
    graph.replay()  # the first replay uploads the graph; it is not the one read
    di.synchronize()
    kernels = tracer(di, graph.replay)
    per_call = kernel_clock.call_samples_us(kernels, calls, flush_names)
    return [us / 1e3 for us in kernel_clock.group_means(per_call, N_REPLAYS)]


def _replay_ms(di, graph) -> float:
    start, end = di.Event(enable_timing=True), di.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    di.synchronize()
    return start.elapsed_time(end)
