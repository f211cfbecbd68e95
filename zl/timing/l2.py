"""The buffer a cold-L2 graph (ZL_L2=cold) writes before every timed call.

Its size is twice the device's L2 (`get_device_properties(...).L2_cache_size`), so nothing
the kernel read on the previous call survives; 256 MB, do_bench's own flush size, where
the interface does not say. It is allocated once per session, on first use, on the device
of do_bench's own cache buffer (Triton's driver knows which device that is on every
backend; the interface's name does not).
"""

from __future__ import annotations

from typing import Callable, Optional

DEFAULT_FLUSH_BYTES = 256 * 1024 * 1024
L2_MULTIPLE = 2


def flush_bytes(di) -> int:
    """2x the device's L2 size; DEFAULT_FLUSH_BYTES when the interface cannot tell."""
    try:
        props = di.get_device_properties(di.current_device())
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    except Exception:  # an interface without properties: do_bench's size, said in the log
        l2 = 0
    return L2_MULTIPLE * l2 if l2 > 0 else DEFAULT_FLUSH_BYTES


def _driver_cache():
    from triton.runtime import driver
    return driver.active.get_empty_cache_for_benchmark()


class FlushBuffer:
    """`flush()` zeroes a buffer of `flush_bytes(di)` on the current stream."""

    def __init__(self, allocate: Optional[Callable[[int], object]] = None) -> None:
        self._allocate = allocate or self._allocate_on_driver_device
        self.buffer = None
        self.nbytes = 0

    @staticmethod
    def _allocate_on_driver_device(nbytes: int):
        import torch
        device = _driver_cache().device
        return torch.empty(nbytes // 4, dtype=torch.int32, device=device)

    def ensure(self, di) -> None:
        if self.buffer is None:
            self.nbytes = flush_bytes(di)
            self.buffer = self._allocate(self.nbytes)

    def flush(self) -> None:
        self.buffer.zero_()

    def release(self) -> None:
        self.buffer, self.nbytes = None, 0
