"""Which timer a session uses: read the two settings, then ask the backend's capability.

The choice is read off the backend's `supports_cuda_graph`, never off "is this CUDA":

    auto (default), 1/true/on : graph capture where the backend declares it
    0/false/off/direct        : plain `triton.testing.do_bench` (timer=direct)
    1 on a backend without graphs is refused with a log line and stays direct.

Each setting is a pytest option whose default is its environment variable, so run_pytest.sh
(variables) and a direct pytest user (options) are read by the same parser.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from zl import options
from zl.switches import SwitchError, parse_switch

ENV_GRAPH = "ZL_ENABLE_CUDAGRAPH"
ENV_REPEAT = "ZL_DIRECT_REPEAT"
OPT_GRAPH = "--zl-cudagraph"
OPT_REPEAT = "--zl-direct-repeat"

AUTO_WORDS = ("", "auto")
# `direct` names the timer the off position selects; it has always been accepted as off.
EXTRA_OFF = ("direct",)

TIMER_GRAPH = "cuda_graph"
TIMER_DIRECT = "direct"


class TimerConfigError(SwitchError):
    """ZL_ENABLE_CUDAGRAPH (or --zl-cudagraph) holds a value that names no timer."""


def add_options(parser: Any) -> None:
    """Declare both settings in the zl_bench option group."""
    options.add(parser, OPT_GRAPH, ENV_GRAPH,
                "timer: auto or 1/true/on = graph capture where the backend declares it, "
                "0/false/off/direct = plain triton.testing.do_bench", "auto")
    options.add(parser, OPT_REPEAT, ENV_REPEAT,
                "direct timer (and graph fallback rows): run do_bench N times, take the median",
                "1")


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
