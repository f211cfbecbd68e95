"""Whose `triton.testing.do_bench` call is it: the benchmark's, or an autotuner's?

zl_bench replaces `triton.testing.do_bench` for the benchmark's timed calls. Triton's
autotuner resolves the same name at its first sweep (`driver.active.get_benchmarker()`), and
FlagGems' LibTuner and flagtune inherit or wrap it, so without this check every config of a
sweep went through zl_bench's timer: on the H200 softmax_backward_out's first run made 14
do_bench calls where the benchmark made 4, and its pytest time was 1.68x upstream's, whose
autotuner keeps Triton's own do_bench (docs/validation/timing.md, section 4). A tuner's call
is handed to Triton's do_bench, as upstream's run would, so autotune picks and their cost
match upstream's.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Optional

# Modules whose do_bench calls are tuning, not the benchmark's measurement: the Triton
# runtime (autotuner and its lambdas) and the operator libraries (LibTuner, flagtune, and
# operators that time candidates at run time, such as FlagGems' act_quant).
TUNER_PACKAGES = ("triton", "flag_gems", "flaggems_vllm")
# zl_bench's own wrappers around do_bench (the --overlap lock): the caller is whoever called them.
TRANSPARENT_MODULES = ("zl.timing.exclusive",)


def tuner_module(frame: Optional[FrameType]) -> Optional[str]:
    """The calling module's name when it belongs to a tuner package, else None."""
    name = (frame.f_globals.get("__name__") or "") if frame is not None else ""
    root = name.split(".", 1)[0]
    return name if root in TUNER_PACKAGES else None


def caller_of_caller() -> Optional[FrameType]:
    """The frame that called the function calling this one, past zl_bench's transparent
    wrappers (None at the top of the stack)."""
    try:
        frame = sys._getframe(2)
    except ValueError:
        return None
    while frame is not None and frame.f_globals.get("__name__") in TRANSPARENT_MODULES:
        frame = frame.f_back
    return frame
