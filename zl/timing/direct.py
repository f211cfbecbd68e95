"""The direct timer: upstream `triton.testing.do_bench`, optionally the median of N calls.

do_bench already takes a median over iterations inside one call, which damps iteration
jitter but not drift across the call (clocks ramping, another process arriving); the median
over calls (ZL_DIRECT_REPEAT) is the layer it cannot see. A sequence result (quantiles,
return_mode="all") has no median across calls, so those requests get exactly one call.
"""

from __future__ import annotations

from typing import Callable

import numpy as np


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


def make_repeated_do_bench(original: Callable, repeat: int) -> Callable:
    """A do_bench with upstream's signature that runs `original` through run_direct."""

    def repeated_do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None,
                          return_mode="mean"):
        return run_direct(original, fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                          quantiles=quantiles, return_mode=return_mode, repeat=repeat)

    repeated_do_bench.zl_direct_repeat = repeat
    return repeated_do_bench
