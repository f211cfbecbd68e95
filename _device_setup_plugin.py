"""Set FlagGems' vendor from the zl_bench backend before flag_gems is imported,
record the run's device identity, and report foreign-vendor modules at the end.

Import time, on purpose: pytest imports `-p` plugins before it collects the
benchmark module, and FlagGems detects its vendor while that module imports
flag_gems. With GEMS_VENDOR set, FlagGems takes its env fast path instead of
running every vendor's query tool concurrently with no timeout (one hanging
tool blocks `import flag_gems`; the seed saw it hang in wait4 with the GPU idle).
A vendor the user chose (GEMS_VENDOR / FLAGGEMS_VENDOR / GEMS_BACKEND /
FLAGGEMS_BACKEND) is never overridden.

Device name and arch are probed in pytest_configure rather than at import, and
package versions at session end, so importing this module never initialises a
device context or imports flag_gems itself.
"""

from __future__ import annotations

import os
import sys
from typing import Iterable, List, Optional

from zl.identity import load_identity, update_identity
from zl.term import log
from zl.backends import get_backend
from zl.flaggems import apply_vendor_env, configured_vendor

TAG = "[device-setup-plugin]"
# Packages whose vendor implementations live under <pkg>.runtime.backend._<vendor>.
FLAGGEMS_PACKAGES = ("flag_gems", "flaggems_vllm")

_state = {"backend": None, "vendor": None}


def _setup_at_import() -> None:
    try:
        backend = get_backend()
    except Exception as exc:  # unknown backend: run_pytest.sh already refused; ad-hoc use only
        log(TAG, f"cannot resolve backend ({exc}); leaving GEMS_VENDOR to flag_gems")
        return
    user_choice = configured_vendor()
    vendor = apply_vendor_env(backend)
    _state.update(backend=backend, vendor=vendor)
    device = os.environ.get("ZL_DEVICE", "").strip()
    if not device:
        inherited = backend.inherited_devices()
        device = inherited[0] if inherited else ""
    update_identity(backend=backend.name, device=device, flaggems_vendor=vendor or "",
                    visibility_env=backend.visibility_env_keys[0] if backend.visibility_env_keys else "")
    how = "kept user's choice" if user_choice else "set from backend"
    log(TAG, f"backend={backend.name} GEMS_VENDOR={vendor or '(unset)'} ({how})")


def _version(module_name: str) -> str:
    mod = sys.modules.get(module_name)
    if mod is not None and getattr(mod, "__version__", None):
        return str(mod.__version__)
    try:
        from importlib.metadata import version

        return version(module_name)
    except Exception:
        return ""


def _current_device_index(backend) -> Optional[str]:
    try:
        import torch

        api = getattr(torch, backend.torch_namespace, None) if backend.torch_namespace else None
        if api is None or not api.is_available() or api.device_count() <= 0:
            return None
        return str(api.current_device())
    except Exception:
        return None


def pytest_configure(config):
    """Record device name/arch and the compiler/framework versions."""
    backend = _state["backend"]
    if backend is None:
        return
    fields = {}
    try:
        ident = backend.device_identity()
        fields.update(device_name=ident.get("device_name", ""), device_arch=ident.get("device_arch", ""))
    except Exception as exc:
        log(TAG, f"identity probe failed ({exc})")
    if not load_identity().get("device"):
        # Nothing pinned a card: record the one the framework actually uses, so a
        # run on the default card and one pinned elsewhere do not look alike.
        current = _current_device_index(backend)
        if current is not None:
            fields["device"] = current
    try:
        import triton

        fields["triton_version"] = str(getattr(triton, "__version__", ""))
    except Exception:
        fields["triton_version"] = ""
    try:
        import torch

        fields["torch_version"] = str(torch.__version__)
    except Exception:
        fields["torch_version"] = ""
    update_identity(**fields)
    log(TAG, f"device={fields.get('device_name') or '(none)'} arch={fields.get('device_arch') or '-'} "
             f"triton={fields.get('triton_version') or '-'} torch={fields.get('torch_version') or '-'}")


def foreign_vendor_modules(active_vendor: str, modules: Optional[Iterable[str]] = None) -> List[str]:
    """FlagGems vendor roots imported in this process that are not the active vendor.

    Compared by path segment, not prefix: `_nvidia_x` must not pass for `_nvidia`.
    """
    names = list(sys.modules) if modules is None else list(modules)
    found = set()
    for name in names:
        for pkg in FLAGGEMS_PACKAGES:
            prefix = f"{pkg}.runtime.backend._"
            if name.startswith(prefix):
                root = name[len(prefix):].split(".")[0]
                if root and root != active_vendor:
                    found.add(root)
    return sorted(found)


def pytest_sessionfinish(session, exitstatus):
    """Record the FlagGems package actually used, and report foreign vendor modules."""
    pkg_name = next((p for p in FLAGGEMS_PACKAGES if p in sys.modules), "")
    active = _state["vendor"] or ""
    if pkg_name:
        pkg = sys.modules[pkg_name]
        active = str(getattr(pkg, "vendor_name", "") or active)
        update_identity(flaggems_package=pkg_name, flag_gems_version=_version(pkg_name), flaggems_vendor=active)
    if not active:
        return
    foreign = foreign_vendor_modules(active)
    if foreign:
        # Report, never block: a shared utility may legitimately live under another
        # vendor. But `import` succeeding proves only that the file exists; the seed
        # saw router_gemm run NVIDIA's Hopper kernel on a MUSA card and die deep in
        # the JIT with an error that pointed nowhere near the cause.
        log(TAG, f"FOREIGN_VENDOR_MODULE active={active} loaded={','.join(foreign)}")
        log(TAG, "another vendor's FlagGems implementation was imported; if this operator's result "
                 "looks wrong, check whether the benchmark gates on vendor_name or only on import success")


_setup_at_import()
