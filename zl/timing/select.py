"""Which timer a session uses: read the two settings, then ask the backend's capability.

The choice is read off the backend's `supports_cuda_graph`, never off "is this CUDA":

    auto (default), 1/true/on : graph capture where the backend declares it
    0/false/off/direct        : plain `triton.testing.do_bench` (timer=direct)
    1 on a backend without graphs is refused with a log line and stays direct.

Each setting is a field of the run configuration (zl.config) and a pytest option, so
run_pytest.sh (variables, run_config.json) and a direct pytest user (options) are read by the
same parser.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

from zl import options
from zl.switches import SwitchError, parse_switch

from . import exclusive

ENV_GRAPH = "ZL_ENABLE_CUDAGRAPH"
ENV_REPEAT = "ZL_DIRECT_REPEAT"
ENV_WARMUP = "ZL_GRAPH_WARMUP_MS"
ENV_L2 = "ZL_L2"
ENV_COLD_CLOCK = "ZL_COLD_CLOCK"
OPT_GRAPH = "--zl-cudagraph"
OPT_REPEAT = "--zl-direct-repeat"
OPT_WARMUP = "--zl-graph-warmup-ms"
OPT_L2 = "--zl-l2"
OPT_COLD_CLOCK = "--zl-cold-clock"

# The warmup before each capture stops once event-timed calls settle, and never runs longer
# than this (or the caller's own budget, if smaller). FlagGems passes --warmup (1000 ms by
# default) to every do_bench call; spending all of it, for torch and gems on every shape, took
# softmax's core shapes 10.1 s of pytest against 7.2 s at 25 ms on the H200, for an A/A of
# 0.09 % against 0.12 % (docs/validation/timing.md, sections 4-5).
DEFAULT_WARMUP_MS = "25"
# ZL_GRAPH_WARMUP_MS=caller: the caller's whole budget, for before/after comparisons.
WARMUP_CALLER = "caller"
L2_MODES = ("warm", "cold")
# events: the replay timed by events, each kernel's in-graph start included (as warm reads);
# kernels: CUPTI's per-kernel durations, the starts left out (zl/timing/kernel_clock.py).
COLD_CLOCKS = ("events", "kernels")
# auto: kernels where CUPTI can read the cold graph, else events (said in the log).
COLD_CLOCK_WORDS = ("auto",) + COLD_CLOCKS

AUTO_WORDS = ("", "auto")
# `direct` names the timer the off position selects; it has always been accepted as off.
EXTRA_OFF = ("direct",)

TIMER_GRAPH = "cuda_graph"
TIMER_DIRECT = "direct"
TIMER_NONE = "none"          # ZL_JUDGE_ONLY: code and results judged, nothing timed
ENV_JUDGE = "ZL_JUDGE_ONLY"
OPT_JUDGE = "--zl-judge-only"
# Off: the torch baseline is not timed (zl.timing.session.TorchBaselineOff).
ENV_TIME_TORCH = "ZL_TIME_TORCH"
OPT_TIME_TORCH = "--zl-time-torch"
# On: the heap is frozen after collection (zl.timing.session.TimingSession.freeze_heap).
ENV_GC_FREEZE = "ZL_GC_FREEZE"
OPT_GC_FREEZE = "--zl-gc-freeze"


class TimerConfigError(SwitchError):
    """ZL_ENABLE_CUDAGRAPH (or --zl-cudagraph) holds a value that names no timer."""


class GraphWarmupError(ValueError):
    """ZL_GRAPH_WARMUP_MS (or --zl-graph-warmup-ms) is neither `caller` nor a number >= 0."""


class L2ModeError(ValueError):
    """ZL_L2 (or --zl-l2) names no L2 mode (warm or cold)."""


class ColdClockError(ValueError):
    """ZL_COLD_CLOCK (or --zl-cold-clock) names no clock, or one this run cannot use."""


def add_options(parser: Any) -> None:
    """Declare both settings in the zl_bench option group."""
    options.add(parser, OPT_GRAPH, ENV_GRAPH,
                "timer: auto or 1/true/on = graph capture where the backend declares it, "
                "0/false/off/direct = plain triton.testing.do_bench", "auto")
    options.add(parser, OPT_REPEAT, ENV_REPEAT,
                "direct timer (and graph fallback rows): run do_bench N times, take the median",
                "1")
    options.add(parser, OPT_WARMUP, ENV_WARMUP,
                "graph timer: warm up before each capture until event-timed calls settle, "
                "for at most min(this, the caller's warmup) ms; `caller` = the caller's whole "
                "budget", DEFAULT_WARMUP_MS)
    options.add(parser, OPT_L2, ENV_L2,
                "warm = back-to-back calls (L2 keeps the inputs); cold = L2 flushed before "
                "every timed call inside the graph, the flush's own time subtracted", "warm")
    options.add(parser, OPT_COLD_CLOCK, ENV_COLD_CLOCK,
                "ZL_L2=cold only: kernels = CUPTI's per-kernel durations through "
                "torch.profiler (torch.cuda); events = the graph replay timed by events (each "
                "kernel's in-graph start included, as the warm reading); auto = kernels where "
                "CUPTI can read the graph, else events", "auto")
    options.add(parser, OPT_JUDGE, ENV_JUDGE,
                "1 = time nothing: each benchmark do_bench call runs once and reports nan (the IR "
                "and results plugins still judge the code); autotune sweeps stay Triton's; "
                "identity timer=none, refused by every timing comparison", "0")
    options.add(parser, OPT_TIME_TORCH, ENV_TIME_TORCH,
                "0/off = do not time the torch baseline: FlagGems' get_latency of torch_op outside "
                "use_gems() returns nan untimed (Torch Latency and speedup print nan; the gems "
                "latencies an A/B compares are timed as always, at half the GPU time); identity "
                "time_torch=off, a caliber field", "1")
    options.add(parser, OPT_GC_FREEZE, ENV_GC_FREEZE,
                "1 = freeze the heap after collection (gc.freeze), so the gc.collect() FlagGems "
                "runs after every shape scans only what the run made since; 0/off = leave the "
                "collector alone", "1")
    options.add(parser, exclusive.OPT_OVERLAP, exclusive.OVERLAP_ENV,
                "runs overlapping on this device (run_batch.py --overlap N); N > 1 needs "
                "--zl-timing-lock and is recorded as identity device_overlap", "1")
    options.add(parser, exclusive.OPT_LOCK, exclusive.LOCK_ENV,
                "lock file of the device's runs: each do_bench call holds it alone, each test's "
                "GPU work shared (run_batch.py --overlap sets it)", "")


def read_setting(config: Any, flag: str, env: str) -> Tuple[str, str]:
    """(raw value, the name to blame in a message): the option when given, else the variable."""
    given = config.getoption(flag.lstrip("-").replace("-", "_"), default=None)
    return options.value(config, flag), (flag if given is not None else env)


def parse_graph_request(raw: Optional[str], name: str = ENV_GRAPH) -> str:
    """ZL_ENABLE_CUDAGRAPH text -> 'auto' | 'on' | 'off'; anything else is a TimerConfigError."""
    if (raw or "").strip().lower() in AUTO_WORDS:
        return "auto"
    try:
        return "on" if parse_switch(raw, True, name=name, extra_off=EXTRA_OFF) else "off"
    except SwitchError:
        raise TimerConfigError(
            f"{name}={raw!r} is not a timer choice; use auto (default), "
            f"1/true/on (graph capture where the backend supports it) or 0/false/off/direct"
        ) from None


def parse_direct_repeat(raw: Optional[str], name: str = ENV_REPEAT) -> Tuple[int, Optional[str]]:
    """ZL_DIRECT_REPEAT text -> (n >= 1, warning or None). Garbage and n < 1 mean 1, logged."""
    text = (raw or "").strip()
    if not text:
        return 1, None
    try:
        n = int(text)
    except ValueError:
        return 1, f"{name}={raw!r} is not an integer; using 1"
    if n < 1:
        return 1, f"{name}={raw!r} is below 1; using 1"
    return n, None


def parse_graph_warmup(raw: Optional[str], name: str = ENV_WARMUP) -> Optional[float]:
    """ZL_GRAPH_WARMUP_MS text -> cap in ms (None = `caller`); a bad value is GraphWarmupError."""
    text = (raw or "").strip().lower() or DEFAULT_WARMUP_MS
    if text == WARMUP_CALLER:
        return None
    try:
        cap = float(text)
    except ValueError:
        cap = float("nan")
    if not math.isfinite(cap) or cap < 0:
        raise GraphWarmupError(f"{name}={raw!r} is not a warmup cap; use a number of ms >= 0 "
                               f"(default {DEFAULT_WARMUP_MS}) or {WARMUP_CALLER!r}")
    return cap


def warmup_label(cap: Optional[float]) -> str:
    """The run_identity.json value: `caller` or the cap as written without a trailing .0."""
    return WARMUP_CALLER if cap is None else format(cap, "g")


def parse_l2(raw: Optional[str], name: str = ENV_L2) -> str:
    """ZL_L2 text -> 'warm' | 'cold' (empty = warm); anything else is an L2ModeError."""
    text = (raw or "").strip().lower() or "warm"
    if text not in L2_MODES:
        raise L2ModeError(f"{name}={raw!r} is not an L2 mode; use warm (default) or cold")
    return text


def parse_cold_clock(raw: Optional[str], name: str = ENV_COLD_CLOCK, l2: str = "warm",
                     backend_name: str = "cuda", timer: str = TIMER_GRAPH) -> Tuple[str, Optional[str]]:
    """ZL_COLD_CLOCK text -> ('events' | 'kernels', a note for the log or None).

    `auto` (default): kernels where the kernel clock can be read (a cold graph on torch.cuda
    with CUPTI), else events, and the note says why. `kernels` where it would measure nothing
    (a warm L2, the direct timer, no CUPTI) is a ColdClockError, as is a word that names no
    clock: a silent events reading would be a different caliber."""
    text = (raw or "").strip().lower() or "auto"
    if text not in COLD_CLOCK_WORDS:
        raise ColdClockError(f"{name}={raw!r} is not a cold clock; use auto (default), events "
                             "or kernels")
    if text == "events":
        return text, None
    from .kernel_clock import unavailable_reason
    # `said`: only where a cold graph runs does auto's fallback to events need a log line;
    # elsewhere no clock reads anything
    if l2 != "cold":
        why, said = f"the L2 mode is {l2}; only a cold graph has a kernel clock", False
    elif timer != TIMER_GRAPH:
        why, said = f"the kernel clock needs the graph timer; this run's timer is {timer}", False
    else:
        why, said = unavailable_reason(backend_name), True
    if text == "auto":
        if not why:
            return "kernels", None
        return "events", (f"cold_clock=events: {why}" if said else None)
    if why:
        raise ColdClockError(f"{name}=kernels cannot be used: {why}")
    return text, None


def choose_timer(backend, request: str, name: str = ENV_GRAPH) -> Tuple[str, str, Optional[str]]:
    """-> (timer, graph_capture, refusal message or None) for a parsed request."""
    supported = bool(getattr(backend, "supports_cuda_graph", False))
    if request == "off":
        return TIMER_DIRECT, "disabled", None
    if supported:
        return TIMER_GRAPH, "attempted", None
    if request == "on":
        return TIMER_DIRECT, "refused", (
            f"{name}=1 refused: backend {backend.name} does not declare graph capture; "
            f"timing stays direct")
    return TIMER_DIRECT, "unsupported", None
