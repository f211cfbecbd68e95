"""Runtime facade: `device`, `torch_device_fn`, `torch_backend_device` like upstream.

Upstream binds `torch_device_fn` to the vendor's torch module (torch.cuda on
NVIDIA). The fake always executes on the CPU under the Triton interpreter, so it
binds a CPU equivalent; the *vendor* still comes from detection.
"""
from types import SimpleNamespace

import torch

from . import backend


class _CpuDeviceFn:
    """The torch.cuda functions the benchmark harness calls, for the CPU."""

    @staticmethod
    def synchronize(device=None):
        return None

    @staticmethod
    def empty_cache():
        return None

    @staticmethod
    def current_device():
        return "cpu"

    @staticmethod
    def device_count():
        return 1

    @staticmethod
    def is_available():
        return True


torch_device_fn = _CpuDeviceFn()
torch_backend_device = torch.backends.cpu
device = SimpleNamespace(
    name="cpu",
    vendor_name=backend.vendor_name,
    vendor_device_name=backend.device_name,
    device_count=1,
)
