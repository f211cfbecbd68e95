"""pytest plugin: choose the benchmark timer once, before any shape runs, and record it.

The choice is read off the backend's `supports_cuda_graph` capability, never off
"is this CUDA", together with ZL_ENABLE_CUDAGRAPH:

    auto (default), 1/true/on : graph capture where the backend declares it
    0/false/off/direct        : plain `triton.testing.do_bench` (timer=direct)
    1 on a backend without graphs is refused with a log line and stays direct.

With graphs selected this plugin loads `_cudagraph_plugin` (kept off the default
`-p` list on purpose: the decision lives here) which swaps do_bench for graph
timing with an honest per-shape fallback. `timer=cuda_graph` therefore means
capture was *attempted*, not that every row was captured: the fallback rows
carry a BENCHMARK_DIRECT_NO_CUDAGRAPH marker each. (On an MThreads S5000 every
shape of dropout/rand/masked_select falls back; ZL_ENABLE_CUDAGRAPH=0 times
them the same way and says so plainly.)

ZL_DIRECT_REPEAT=N (default 1) repeats the direct timer N times and takes the
median. do_bench already takes a median over iterations inside one call, which
damps iteration jitter but not drift across the call (clocks ramping, another
process arriving); the median over calls is the layer it cannot see. It applies
to the fallback rows of a graph run and, via a do_bench wrapper installed here,
to a wholly direct run. It is skipped when the caller asks for quantiles or
return_mode="all": the result is then a sequence and a median across calls is
not defined for it.

Fields written to run_identity.json: timer (cuda_graph|direct), graph_capture
(attempted|disabled|refused|unsupported), direct_repeat (int).
"""

from __future__ import annotations

import os
from typing import Callable, Optional, Tuple

import numpy as np

from zl.term import log as _term_log

LOG_TAG = "[timing-plugin]"

ENV_GRAPH = "ZL_ENABLE_CUDAGRAPH"
ENV_REPEAT = "ZL_DIRECT_REPEAT"

_OFF_WORDS = ("0", "false", "no", "off", "never", "direct")
_ON_WORDS = ("1", "true", "yes", "on", "always")
_AUTO_WORDS = ("", "auto")

TIMER_GRAPH = "cuda_graph"
TIMER_DIRECT = "direct"

# What this plugin replaced, so pytest_unconfigure can put it back.
_STATE = {"original_do_bench": None, "graph_installed": False, "choice": None}


class TimerConfigError(ValueError):
    """ZL_ENABLE_CUDAGRAPH holds a value that names no timer."""


def _log(message: str) -> None:
    _term_log(LOG_TAG, message)


# --- environment ----------------------------------------------------------------------------

def parse_graph_request(raw: Optional[str]) -> str:
    """ZL_ENABLE_CUDAGRAPH text -> 'auto' | 'on' | 'off'; anything else is a TimerConfigError."""
    value = (raw or "").strip().lower()
    if value in _AUTO_WORDS:
        return "auto"
    if value in _ON_WORDS:
        return "on"
    if value in _OFF_WORDS:
        return "off"
    raise TimerConfigError(
        f"{ENV_GRAPH}={raw!r} is not a timer choice; use auto (default), "
        f"1/true/on (graph capture where the backend supports it) or 0/false/off/direct")


def parse_direct_repeat(raw: Optional[str]) -> Tuple[int, Optional[str]]:
    """ZL_DIRECT_REPEAT text -> (n >= 1, warning or None). Garbage and n < 1 mean 1."""
    text = (raw or "").strip()
    if not text:
        return 1, None
    try:
        n = int(text)
    except ValueError:
        return 1, f"{ENV_REPEAT}={raw!r} is not an integer; using 1"
    if n < 1:
        return 1, f"{ENV_REPEAT}={raw!r} is below 1; using 1"
    return n, None


def direct_repeat() -> int:
    return parse_direct_repeat(os.environ.get(ENV_REPEAT))[0]


def choose_timer(backend, request: str) -> Tuple[str, str, Optional[str]]:
    """-> (timer, graph_capture, refusal message or None) for a parsed request."""
    supported = bool(getattr(backend, "supports_cuda_graph", False))
    if request == "off":
        return TIMER_DIRECT, "disabled", None
    if supported:
        return TIMER_GRAPH, "attempted", None
    if request == "on":
        return TIMER_DIRECT, "refused", (
            f"{ENV_GRAPH}=1 refused: backend {backend.name} does not declare graph capture; "
            f"timing stays direct")
    return TIMER_DIRECT, "unsupported", None


# --- the direct timer -----------------------------------------------------------------------

def run_direct(original: Callable, fn, warmup=25, rep=100, grad_to_none=None,
               quantiles=None, return_mode="mean", repeat: int = 1):
    """`original` (upstream do_bench) once, or `repeat` times with the median taken.

    A sequence result (quantiles, return_mode="all") has no median across calls, so
    those requests get exactly one call with the caller's arguments.
    """
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


def interface_name() -> str:
    """Name of Triton's active device interface for log lines; never raises."""
    try:
        from triton.runtime import driver
        di = driver.active.get_device_interface()
    except Exception as exc:  # no driver yet (e.g. CPU before the harness installs one)
        return f"<no active driver: {type(exc).__name__}>"
    return getattr(di, "__name__", None) or type(di).__name__


# --- pytest hooks ---------------------------------------------------------------------------

def pytest_configure(config):
    """Pick the timer, patch do_bench accordingly, write the identity fields."""
    import pytest

    try:
        from zl.backends import get_backend
        backend = get_backend()
        request = parse_graph_request(os.environ.get(ENV_GRAPH))
    except (TimerConfigError, ValueError) as exc:  # UnknownBackendError is a ValueError
        raise pytest.UsageError(f"{LOG_TAG} {exc}") from None

    repeat, warning = parse_direct_repeat(os.environ.get(ENV_REPEAT))
    if warning:
        _log(warning)
    timer, capture, refusal = choose_timer(backend, request)
    if refusal:
        _log(refusal)
    _STATE["choice"] = (timer, capture, repeat)

    import triton.testing as tt

    if timer == TIMER_GRAPH:
        config.pluginmanager.import_plugin("_cudagraph_plugin")
        import _cudagraph_plugin as cg
        cg.install(backend=backend, repeat=repeat)
        _STATE["graph_installed"] = True
        _log(f"timer=cuda_graph backend={backend.name} via {cg.interface_label()} "
             f"(capture per shape, fallback to do_bench with BENCHMARK_DIRECT_NO_CUDAGRAPH; "
             f"direct_repeat={repeat})")
    else:
        # Patched only when repeating, so the default direct run is upstream do_bench untouched.
        if repeat > 1:
            _STATE["original_do_bench"] = tt.do_bench
            tt.do_bench = make_repeated_do_bench(tt.do_bench, repeat)
        _log(f"timer=direct backend={backend.name} via {interface_name()} "
             f"(graph_capture={capture}; upstream do_bench"
             + (f", median of {repeat} calls)" if repeat > 1 else ")"))

    from zl.identity import update_identity
    update_identity(timer=timer, graph_capture=capture, direct_repeat=repeat)


def pytest_unconfigure(config):
    """Put back whatever do_bench this plugin replaced."""
    if _STATE["graph_installed"]:
        import _cudagraph_plugin as cg
        cg.uninstall()
        _STATE["graph_installed"] = False
    original = _STATE["original_do_bench"]
    if original is not None:
        import triton.testing as tt
        tt.do_bench = original
        _STATE["original_do_bench"] = None
    _STATE["choice"] = None
