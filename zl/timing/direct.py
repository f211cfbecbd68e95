"""The direct timer: upstream `triton.testing.do_bench`, optionally the median of N calls.

do_bench already takes a median over iterations inside one call, which damps iteration
jitter but not drift across the call (clocks ramping, another process arriving); the median
over calls (ZL_DIRECT_REPEAT) is the layer it cannot see. A sequence result (quantiles,
return_mode="all") has no median across calls, so those requests get exactly one call.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import numpy as np

from .callers import caller_of_caller, tuner_module


def run_direct(original: Callable, fn, warmup=25, rep=100, grad_to_none=None,
               quantiles=None, return_mode="mean", repeat: int = 1):
    """`original` (upstream do_bench) once, or `repeat` times with the median taken."""
    if repeat <= 1 or quantiles is not None or return_mode == "all":
        return original(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                        quantiles=quantiles, return_mode=return_mode)
    samples = [float(original(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                              quantiles=None, return_mode=return_mode))
               for _ in range(repeat)]
    return float(np.median(samples))


def make_judge_do_bench(original: Callable, synchronize: Callable[[], object]) -> Callable:
    """ZL_JUDGE_ONLY: a do_bench that measures nothing. The benchmark's call runs fn once and
    synchronizes (its kernels compile and run, so the IR and results plugins see them) and
    returns nan, never a number; an autotuner's sweep keeps Triton's own do_bench, so the
    picks a judge run records are the picks a timed run would make."""

    def judge_do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None,
                       return_mode="mean"):
        if tuner_module(caller_of_caller()):
            return original(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                            quantiles=quantiles, return_mode=return_mode)
        fn()
        synchronize()
        nan = float("nan")
        if quantiles is not None:
            return [nan] * len(quantiles)
        return [nan] if return_mode == "all" else nan

    return judge_do_bench


def make_repeated_do_bench(original: Callable, repeat: int) -> Callable:
    """A do_bench with upstream's signature that runs `original` through run_direct."""

    def repeated_do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None,
                          return_mode="mean"):
        if tuner_module(caller_of_caller()):   # an autotuner's sweep: once, as upstream
            return original(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                            quantiles=quantiles, return_mode=return_mode)
        return run_direct(original, fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                          quantiles=quantiles, return_mode=return_mode, repeat=repeat)

    repeated_do_bench.zl_direct_repeat = repeat
    return repeated_do_bench


# The host-share probe runs this many back-to-back calls (fewer when one call is long).
HOST_PROBE_CALLS = 20
HOST_PROBE_BUDGET_MS = 10.0
# Spin cycles per second of host enqueue time (2x a 2 GHz clock): the spin must outlast
# the host's enqueueing of every probe call, or device idle gaps would count as device time.
SPIN_CYCLES_PER_S = 4e9


def host_share(host_ms: float, device_ms: float) -> float:
    """Percent of a direct per-call reading that is host dispatch, not device work.

    A do_bench call of a kernel reads at least the host's dispatch time; when that
    outlasts the kernel, the excess is the host's share (0 when the device is slower).
    """
    if host_ms <= 0 or host_ms <= device_ms:
        return 0.0
    return 100.0 * (host_ms - device_ms) / host_ms


def measure_host_share(di, fn, grad_to_none=None) -> Optional[float]:
    """Host-dispatch share (percent) of `fn`'s direct timing; None when it cannot be measured.

    Host time per call: wall clock for enqueueing N calls. Device time per call: events
    around the same N calls enqueued behind a spin kernel (`di._sleep`, torch.cuda's),
    so the device runs them back to back without waiting for the host. An interface
    without a spin kernel gives None (reported as unknown, never as 0).
    """
    spin = getattr(di, "_sleep", None)
    if spin is None:
        return None

    def reset():
        for x in grad_to_none or ():
            x.grad = None

    start, end = di.Event(enable_timing=True), di.Event(enable_timing=True)
    di.synchronize()
    start.record()
    reset()
    fn()
    end.record()
    di.synchronize()
    one = start.elapsed_time(end)
    fit = int(HOST_PROBE_BUDGET_MS / one) if one > 0 else HOST_PROBE_CALLS
    n = max(3, min(HOST_PROBE_CALLS, fit))
    t0 = time.perf_counter()
    for _ in range(n):
        reset()
        fn()
    host_s = (time.perf_counter() - t0) / n
    di.synchronize()
    spin(int(SPIN_CYCLES_PER_S * host_s * n) + 1)
    start.record()
    for _ in range(n):
        reset()
        fn()
    end.record()
    di.synchronize()
    return host_share(host_s * 1e3, start.elapsed_time(end) / n)
