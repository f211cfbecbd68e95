"""A duck-typed Triton driver that times on the CPU under ``TRITON_INTERPRET=1``.

With the interpreter and no GPU, ``triton.runtime.driver.active`` has no driver
to create ("0 active drivers"), so ``triton.testing.do_bench`` and the
Autotuner's default benchmarker cannot run at all. This driver gives them a
device interface whose events are ``time.perf_counter`` stamps: the kernel runs
synchronously inside the interpreter, so wall time between two records is the
kernel's time.

The interface deliberately has no ``CUDAGraph`` / ``graph`` attribute, so any
graph-capture timer that probes for one falls back (as it must on a device
without graphs) instead of pretending to capture.

Install with ``install()`` (keeps the previous active driver) and undo with
``uninstall()``. Works with triton 3.6 and 3.9 (both expose
``triton.runtime.driver.set_active``).
"""
from __future__ import annotations

import contextlib
import time

try:  # DriverBase is an ABC in triton>=3.0; subclassing keeps isinstance checks happy.
    from triton.backends.driver import DriverBase as _DriverBase
except Exception:  # pragma: no cover - only on a triton without the backends package
    _DriverBase = object


class CpuEvent:
    """perf_counter-based stand-in for ``torch.cuda.Event``; times in ms."""

    def __init__(self, enable_timing: bool = False, **_ignored):
        self.enable_timing = enable_timing
        self._t = None

    def record(self, stream=None):
        self._t = time.perf_counter()

    def synchronize(self):
        return None

    def query(self):
        return True

    def elapsed_time(self, end: "CpuEvent") -> float:
        if self._t is None or end._t is None:
            # Same contract as CUDA: asking before both ends are recorded is an error.
            raise RuntimeError("CpuEvent.elapsed_time: both events must be recorded first")
        return (end._t - self._t) * 1e3


class CpuStream:
    """A stream object: the interpreter executes in order, so it carries no state."""

    def __init__(self, device=None, priority: int = 0, **_ignored):
        self.device = device
        self.priority = priority

    def synchronize(self):
        return None

    def wait_stream(self, other):
        return None

    def query(self):
        return True


class CpuDeviceInterface:
    """Subset of the ``torch.cuda`` module surface that triton.testing uses.

    No ``CUDAGraph`` and no ``graph``: see the module docstring.
    """

    Event = CpuEvent
    Stream = CpuStream
    _default_stream = CpuStream()
    _current = _default_stream

    @staticmethod
    def synchronize(device=None):
        return None

    @classmethod
    def current_stream(cls, device=None):
        return cls._current

    @classmethod
    def default_stream(cls, device=None):
        return cls._default_stream

    @classmethod
    def set_stream(cls, stream):
        cls._current = stream

    @classmethod
    @contextlib.contextmanager
    def stream(cls, stream):
        prev = cls._current
        cls._current = stream if stream is not None else prev
        try:
            yield stream
        finally:
            cls._current = prev

    @staticmethod
    def current_device():
        return 0

    @staticmethod
    def device_count():
        return 1

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def empty_cache():
        return None


class CpuDriver(_DriverBase):
    """The driver object handed to ``triton.runtime.driver.set_active``."""

    # A 1 MiB scratch buffer: enough for do_bench's "flush L2" write to cost
    # something real without slowing the interpreter-bound runs down.
    CACHE_BYTES = 1 << 20

    def __init__(self):
        self._di = CpuDeviceInterface

    @classmethod
    def is_active(cls):
        return True

    def map_python_to_cpp_type(self, ty: str) -> str:
        if ty.startswith("*"):
            return "void*"
        return {
            "i1": "bool", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
            "u1": "bool", "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
            "fp16": "float", "bf16": "float", "fp32": "float", "f32": "float", "fp64": "double",
        }.get(ty, "void*")

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget
        return GPUTarget("cpu", 0, 1)

    def get_active_torch_device(self):
        import torch
        return torch.device("cpu")

    def get_device_interface(self):
        return self._di

    def get_current_device(self):
        return 0

    def set_current_device(self, device):
        return None

    def get_current_stream(self, device=None):
        return 0

    def get_empty_cache_for_benchmark(self):
        import torch
        return torch.empty(self.CACHE_BYTES // 4, dtype=torch.int32)

    def clear_cache(self, cache):
        cache.zero_()

    def get_benchmarker(self):
        # Looked up at call time so a monkeypatched triton.testing.do_bench is
        # what the Autotuner uses, exactly as with the CUDA driver.
        import triton.testing
        return triton.testing.do_bench


def _driver_config():
    # `triton.runtime.driver` names both a module and the DriverConfig instance the
    # package re-exports; the package attribute is the instance.
    from triton.runtime import driver
    return driver


_saved = []  # stack of previously active drivers (None = nothing was active)


def is_installed() -> bool:
    return isinstance(getattr(_driver_config(), "_active", None), CpuDriver)


def gpu_driver_available() -> bool:
    """True when a real backend driver reports an active device."""
    try:
        from triton.backends import backends
    except Exception:
        return False
    for b in backends.values():
        try:
            if b.driver.is_active():
                return True
        except Exception:
            continue
    return False


def install() -> CpuDriver:
    """Make a CpuDriver the active Triton driver; return it. Idempotent."""
    cfg = _driver_config()
    current = getattr(cfg, "_active", None)
    if isinstance(current, CpuDriver):
        return current
    _saved.append(current)
    drv = CpuDriver()
    cfg.set_active(drv)
    return drv


def uninstall() -> None:
    """Restore whatever driver was active before the matching install()."""
    if not _saved:
        return
    prev = _saved.pop()
    # set_active(None) would leave DriverConfig to lazily create a default,
    # which is exactly the pre-install state when nothing was active.
    _driver_config()._active = prev
