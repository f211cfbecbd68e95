"""AMD ROCm (HIP). ROCm builds of PyTorch expose the device as torch.cuda."""

from __future__ import annotations

from .base import DeviceBackend


class RocmBackend(DeviceBackend):
    name = "rocm"
    # HIP reads HIP_VISIBLE_DEVICES, the ROCr runtime ROCR_VISIBLE_DEVICES; write both so a
    # mixed parent environment cannot leave the child looking at other cards.
    visibility_env_keys = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
    torch_namespace = "cuda"
    flaggems_vendor = "amd"
    # Not validated on ROCm: the timing plugin stays on the direct timer there.
    supports_cuda_graph = False
    supports_mm_cluster_fix = False
    supports_triton_hooks = True
    fatal_error_markers = DeviceBackend.fatal_error_markers + (
        "hiperrorillegaladdress",
        "memory access fault",
    )

    def _device_arch(self, api, index: int) -> str:
        # torch reports a CUDA-style capability on ROCm that does not name the chip; the gfx
        # target (e.g. gfx942) is what selects kernels and tuning tables.
        try:
            arch = getattr(api.get_device_properties(index), "gcnArchName", "") or ""
        except Exception:
            arch = ""
        return str(arch).split(":")[0] if arch else super()._device_arch(api, index)
