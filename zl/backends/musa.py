"""Moore Threads MUSA (torch_musa)."""

from __future__ import annotations

import json
from typing import Dict, List

from .base import DeviceBackend, leading_number


class MusaBackend(DeviceBackend):
    name = "musa"
    visibility_env_keys = ("MUSA_VISIBLE_DEVICES",)
    torch_namespace = "musa"
    # FlagGems calls this vendor "mthreads" (src/flag_gems/runtime/backend/_mthreads), not "musa".
    flaggems_vendor = "mthreads"
    # torch_musa provides Stream, Event, synchronize and MUSAGraph, so capture works once the
    # timer takes them from the device interface instead of torch.cuda. Measured on an S5000 over
    # 15 operators: 11 captured, 3 fell back cleanly, 1 poisoned the context (capture_deny_ops).
    # It pays where launch overhead dominates (batch_norm 16x16x8x48: 0.0758 -> 0.0089 ms).
    supports_cuda_graph = True
    supports_mm_cluster_fix = False
    supports_triton_hooks = True
    # Upstream benchmarks gated on `torch.cuda.is_available()` although they dispatch through
    # flag_gems.device: on MThreads those gates turn working operators into "not measured".
    # The plugin drops them, each pinned to one file and one exact skip reason.
    compat_plugins = ("_musa_benchmark_compat_plugin",)
    # "unknown error" during a MUSA capture is not survivable: the fallback runs, then the process
    # dies at teardown with zero rows. Poisoned, so the operator is reported as capture-incompatible
    # instead of silently losing its measurement.
    poisoning_error_markers = ("unknown error",)
    # Seen on an S5000: capturing unique2 takes two recoverable fallbacks, then "MUSA error: unknown
    # error" ends the run at rc=1 with no rows. Keyed by the pytest function name minus `test_`; an
    # entry written as the file name ("unique") would silently never match.
    capture_deny_ops = ("unique2",)
    # No listing probe: the device count comes from MUSA_VISIBLE_DEVICES or torch.musa.
    list_command = None
    # mthreads-gmi has no CSV query mode; --json is its only machine-readable output.
    telemetry_argv = (
        "mthreads-gmi", "-q",
        "-d", "TEMPERATURE,CLOCK,POWER,UTILIZATION",
        "--json",
        "-i", "{dev}",
    )

    def parse_telemetry(self, raw: str) -> List[Dict[str, str]]:
        """Values arrive with units glued on ("36C", "1888MHz", "477.68W", "87%") and some keys
        carry trailing spaces ("Power Draw "), so keys are compared stripped and values by their
        leading number."""
        raw = raw or ""
        start = raw.find("{")
        if start < 0:
            return []
        try:
            data, _ = json.JSONDecoder().raw_decode(raw[start:])
        except ValueError:
            return []
        if not isinstance(data, dict):
            return []
        gpus = _get(data, "GPU") or []
        if isinstance(gpus, dict):
            gpus = [gpus]
        rows: List[Dict[str, str]] = []
        for gpu in gpus if isinstance(gpus, list) else []:
            if not isinstance(gpu, dict):
                continue
            index = str(_get(gpu, "Index") or "").strip()
            if not index:
                continue  # a row that cannot be attributed to a card is not evidence
            rows.append({
                "index": index,
                "sm_clock_mhz": leading_number(_get(_get(gpu, "Clocks"), "Graphics")),
                "mem_clock_mhz": leading_number(_get(_get(gpu, "Clocks"), "Memory")),
                "temp_c": leading_number(_get(_get(gpu, "Temperature"), "GPU Current Temp")),
                "power_w": leading_number(_get(_get(gpu, "Power Readings"), "Power Draw")),
                "util_pct": leading_number(_get(_get(gpu, "Utilization"), "Gpu")),
            })
        return rows


def _get(obj, key: str):
    """obj[key] with keys compared after stripping whitespace; None when absent or not a dict."""
    if not isinstance(obj, dict):
        return None
    if key in obj:
        return obj[key]
    for k, v in obj.items():
        if isinstance(k, str) and k.strip() == key:
            return v
    return None
