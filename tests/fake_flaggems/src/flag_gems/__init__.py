"""Fake FlagGems for zl_bench's CPU tests (see tests/fake_flaggems/README.md).

Import-time behaviour mirrors upstream where zl_bench's plugins can see it:
vendor detection from GEMS_VENDOR / FLAGGEMS_VENDOR / GEMS_BACKEND /
FLAGGEMS_BACKEND, the vendor package import, and the libtuner sqlite store
created once (so cache variables must be set before `import flag_gems`).
The GEMS_VENDOR value seen at import is printed and kept in `import_env`, so a
test can prove a plugin set it *before* this import.
"""
import contextlib
import os
import sys

import torch

from . import runtime
from .runtime.backend.device_finder import VENDOR_ENV_KEYS

__version__ = "0.1.0+fake"

import_env = {k: os.environ.get(k) for k in VENDOR_ENV_KEYS}
print(f"[fake-flag_gems] import GEMS_VENDOR={import_env['GEMS_VENDOR'] or '<unset>'} "
      f"vendor={runtime.device.vendor_name}", file=sys.stderr, flush=True)

device = "cpu"
vendor_name = runtime.device.vendor_name

from . import ops, utils  # noqa: E402  (needs runtime; creates the tuner store)
from .ops import abs, amax, exp, gelu_backward, mm, relu, softmax  # noqa: E402,F401
from .utils import libentry as _libentry  # noqa: E402,F401

# aten overloads the fake replaces inside use_gems(), on the CPU dispatch key
# (upstream registers on the device's key; here the device is the CPU).
_ATEN_IMPLS = (
    ("_softmax", softmax),
    ("mm", mm),
    ("gelu_backward", gelu_backward),
    ("relu", relu),
    ("abs", abs),
    ("amax", amax),
    ("exp", exp),
)


@contextlib.contextmanager
def use_gems(exclude=None, include=None):
    """Route the listed aten ops to the Triton kernels for the duration of the block."""
    skip = set(exclude or ())
    only = set(include) if include else None
    lib = torch.library.Library("aten", "IMPL")
    try:
        import warnings
        with warnings.catch_warnings():
            # "Overriding a previously registered kernel" is the point here.
            warnings.simplefilter("ignore", UserWarning)
            for name, fn in _ATEN_IMPLS:
                if name in skip or (only is not None and name not in only):
                    continue
                lib.impl(name, fn, "CPU")
        yield
    finally:
        lib._destroy()
