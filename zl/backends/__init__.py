"""Registry of zl_bench device backends.

`get_backend(name)` resolves a name or alias to one shared backend object. An unknown name fails
closed with UnknownBackendError: a silent CUDA default would load CUDA-only plugins (graph capture,
the Hopper mm fix) on another vendor's device and report the result as valid.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple, Union

from .ascend import AscendBackend
from .base import (
    ALL_VISIBILITY_KEYS,
    CAPTURE_VERDICTS,
    TELEMETRY_FIELDS,
    DeviceBackend,
    parse_device_list,
)
from .cuda import CudaBackend
from .musa import MusaBackend
from .rocm import RocmBackend

DEFAULT_BACKEND = "cuda"

ALIASES: Dict[str, str] = {
    "nvidia": "cuda",
    "nv": "cuda",
    "amd": "rocm",
    "hip": "rocm",
    "npu": "ascend",
    "huawei": "ascend",
}

_INSTANCES: Dict[str, DeviceBackend] = {
    b.name: b for b in (CudaBackend(), MusaBackend(), RocmBackend(), AscendBackend())
}


class UnknownBackendError(ValueError):
    """A backend name that is neither a known backend nor an alias of one."""


def known_backends() -> Tuple[str, ...]:
    return tuple(sorted(_INSTANCES))


def normalize_backend_name(name: Optional[str]) -> str:
    """Canonical spelling of name ('' -> the default); unknown names pass through unchanged."""
    key = (name or "").strip().lower()
    if not key:
        return DEFAULT_BACKEND
    return ALIASES.get(key, key)


def get_backend(name: Optional[str] = None) -> DeviceBackend:
    """Backend for name, or for the run configuration's (ZL_BACKEND, default cuda) when None."""
    source = "backend"
    if name is None:
        from zl.config import current
        name = current().backend
        source = "ZL_BACKEND"
    backend = _INSTANCES.get(normalize_backend_name(name))
    if backend is None:
        raise UnknownBackendError(
            f"unknown {source} {name!r}; known: {', '.join(known_backends())} "
            f"(aliases: {', '.join(f'{a}={c}' for a, c in sorted(ALIASES.items()))})"
        )
    return backend


def enumerate_devices(backend: Optional[DeviceBackend] = None,
                      explicit: Union[None, str, Iterable[str]] = None) -> List[str]:
    return (backend or get_backend()).enumerate_devices(explicit)


__all__ = [
    "ALIASES",
    "ALL_VISIBILITY_KEYS",
    "CAPTURE_VERDICTS",
    "DEFAULT_BACKEND",
    "TELEMETRY_FIELDS",
    "DeviceBackend",
    "UnknownBackendError",
    "enumerate_devices",
    "get_backend",
    "known_backends",
    "normalize_backend_name",
    "parse_device_list",
]
