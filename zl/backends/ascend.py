"""Huawei Ascend (torch_npu)."""

from __future__ import annotations

from .base import DeviceBackend


class AscendBackend(DeviceBackend):
    name = "ascend"
    # ASCEND_RT_VISIBLE_DEVICES is what the CANN runtime reads; ASCEND_VISIBLE_DEVICES is the
    # container-level variable. Write both.
    visibility_env_keys = ("ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES")
    torch_namespace = "npu"
    flaggems_vendor = "ascend"
    # FlagGems times Ascend with its own do_bench_npu; there is no graph path to offer.
    supports_cuda_graph = False
    supports_mm_cluster_fix = False
    supports_triton_hooks = True

    def _device_arch(self, api, index: int) -> str:
        # torch_npu has no meaningful compute capability; the SoC name (e.g. Ascend910B3) is what
        # distinguishes one chip generation from another.
        return str(api.get_device_name(index))
