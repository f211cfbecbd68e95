"""NVIDIA CUDA."""

from __future__ import annotations

from typing import Dict, List

from .base import DeviceBackend, TELEMETRY_FIELDS, leading_number

# nvidia-smi --query-gpu names, in TELEMETRY_FIELDS order.
_NVSMI_QUERY = "index,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu"


class CudaBackend(DeviceBackend):
    name = "cuda"
    visibility_env_keys = ("CUDA_VISIBLE_DEVICES",)
    torch_namespace = "cuda"
    flaggems_vendor = "nvidia"
    supports_cuda_graph = True
    # The mm cluster fix patches a Hopper-only (sm_90) launch path in FlagGems' nvidia backend.
    supports_mm_cluster_fix = True
    supports_triton_hooks = True
    # Enum spellings show up when the error comes through cuda-python / Triton's launcher rather
    # than through torch's message table.
    fatal_error_markers = DeviceBackend.fatal_error_markers + (
        "cudaerrorillegaladdress",
        "cudaerrorillegalinstruction",
        "cudaerrormisalignedaddress",
        "cudaerrorassert",
        "cudaerrorlaunchfailure",
        "cudaerrormemoryallocation",
        "cudaerrorhardwarestackerror",
        "hardware stack error",
    )
    # No CUDA wording is known to poison the context without also being fatal; left empty rather
    # than guessed. "operation failed due to a previous error during capture" (seen on the H200
    # for gelu_backward) ends the capture, not the context, so the fallback is sound.
    poisoning_error_markers = ()
    list_command = (("nvidia-smi", "--list-gpus"), "GPU ")
    telemetry_argv = (
        "nvidia-smi",
        f"--query-gpu={_NVSMI_QUERY}",
        "--format=csv,noheader,nounits",
        "-i", "{dev}",
    )

    memory_query_argv = ("nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits",
                         "-i", "{dev}")
    compute_apps_argv = ("nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                         "--format=csv,noheader", "-i", "{dev}")
    name_query_argv = ("nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "{dev}")

    def parse_telemetry(self, raw: str) -> List[Dict[str, str]]:
        rows: List[Dict[str, str]] = []
        for line in (raw or "").splitlines():
            parts = [p.strip() for p in line.split(",")]
            # Anything else (a header, "No devices were found", a driver warning) is not a row.
            if len(parts) != len(TELEMETRY_FIELDS) or not parts[0].isdigit():
                continue
            # "[N/A]" / "[Not Supported]" (power on some boards) become "" rather than text in a
            # numeric column.
            rows.append({f: (parts[0] if f == "index" else leading_number(v))
                         for f, v in zip(TELEMETRY_FIELDS, parts)})
        return rows
