"""The grep-able marker vocabulary: one definition that writers and counters share.

Other tools (batch_summary, the drivers, timer_noise) count these lines, so a spelling
written in two places would make one side count zero without an error.
"""

from __future__ import annotations

from typing import Any

PREFLIGHT_FAILED = "PREFLIGHT_FAILED"
DIRECT_NO_CUDAGRAPH = "BENCHMARK_DIRECT_NO_CUDAGRAPH"
CAPTURE_POISONED = "BENCHMARK_CAPTURE_POISONED"
REPLAY_FALLBACK = "AUTOTUNE_REPLAY_FALLBACK"
# A replayed config the replaying tuner does not list (`reason=not_a_candidate|unknown_kwargs`).
REPLAY_FOREIGN_CONFIG = "AUTOTUNE_REPLAY_FOREIGN_CONFIG"
FOREIGN_VENDOR_MODULE = "FOREIGN_VENDOR_MODULE"
CELL_TIMEOUT = "CELL_TIMEOUT"
CELL_KILLED = "CELL_KILLED"
SWITCH_NO_IR_DIFF = "SWITCH_NO_IR_DIFF"
# ZL_DTYPE_FALLBACK=first measured the op's first declared dtype where upstream refused the
# dtypes asked: `DTYPE_FALLBACK op=<op> asked=<dtype,...> measured=<dtype>`.
DTYPE_FALLBACK = "DTYPE_FALLBACK"
CALIBER = "[caliber]"

# Short names used in tables (cell stats, ops_status notes) -> the marker each counts.
COUNTED = {
    "no_cudagraph": DIRECT_NO_CUDAGRAPH,
    "replay_fallback": REPLAY_FALLBACK,
    "capture_poisoned": CAPTURE_POISONED,
}


def format_marker(name: str, **fields: Any) -> str:
    """`NAME k=v k=v`; None values are left out, spaces in values kept as written."""
    parts = [name] + [f"{k}={v}" for k, v in fields.items() if v is not None]
    return " ".join(parts)
REPLAY_RESULTS_DIFFER = "REPLAY_RESULTS_DIFFER"
