"""Device facts of one run: FlagGems' vendor from the zl_bench backend, the device and
versions in run_identity.json, and the foreign-vendor report at the end.

GEMS_VENDOR must be set before flag_gems is imported: with it, FlagGems takes its env
fast path instead of running every vendor's query tool concurrently with no timeout
(one hanging tool blocks `import flag_gems`; the seed saw it hang in wait4 with the GPU
idle). A vendor the user chose (GEMS_VENDOR / FLAGGEMS_VENDOR / GEMS_BACKEND /
FLAGGEMS_BACKEND) is never overridden. The previous value is kept on a PatchStack so
`DeviceSetup.close` restores it.

Device name and arch are probed at configure and package versions at session end, so
preparing the vendor never initialises a device context or imports flag_gems itself.
Under Triton's interpreter the kernels run on the host whatever card is present, so
`device_arch` is `triton-interpreter` there (a caliber field: an interpreter run never
pairs with a device run).

Identity `finished` says whether pytest ran its session to the end: `{"status": "running"}`
from configure on, then at session finish `{"status": S, "exitstatus": N}` with pytest's
exit status N and S = complete (0 ok, 1 tests failed, 5 nothing collected), interrupted (2)
or error (3 internal error, 4 usage). A run killed before that (a signal, OOM) keeps
`running`; runs from before the field have none.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Iterable, List, Optional

import pytest

from zl import config as run_config
from zl import markers
from zl.backends import get_backend
from zl.childenv import inherited
from zl.flaggems import PACKAGES, apply_vendor_env, configured_vendor
from zl.identity import load_identity, update_identity
from zl.patching import PatchStack
from zl.term import log as _term_log

TAG = "[device-setup-plugin]"
DEVICE_SHARE_ENV = "ZL_DEVICE_SHARE"
INTERPRETER_ARCH = "triton-interpreter"
# pytest.ExitCode values -> identity `finished.status`; anything else is `error`.
_FINISHED_STATUS = {0: "complete", 1: "complete", 5: "complete", 2: "interrupted"}


class DeviceShareError(ValueError):
    """ZL_DEVICE_SHARE / --zl-device-share is not an integer >= 1."""


def parse_device_share(text: Optional[str]) -> int:
    """How many measurements share this run's device (run_batch.py --share-device); empty = 1.

    Anything but an integer >= 1 is an error: a misread value would drop the field that makes
    the comparison tools refuse a contended timing."""
    return parse_count(text, DEVICE_SHARE_ENV, DeviceShareError)


def parse_count(text: Optional[str], var: str, error: type) -> int:
    """An integer >= 1 from a setting's word (empty = 1); anything else raises `error` naming
    `var` and the word."""
    text = (text or "").strip()
    if not text:
        return 1
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise error(f"{var}={text!r} is not an integer >= 1")
    return n


def record_device_share(text: Optional[str]) -> int:
    """Write identity `device_share` when the device is shared (N > 1); a solo run has no field,
    so runs from before the field existed stay comparable with solo runs."""
    n = parse_device_share(text)
    if n > 1:
        update_identity(device_share=n)
        log(f"device shared with {n} concurrent measurements: a functional check, not a timing")
    return n


def log(message: str) -> None:
    _term_log(TAG, message)


def foreign_vendor_modules(active_vendor: str, modules: Optional[Iterable[str]] = None) -> List[str]:
    """FlagGems vendor roots imported in this process that are not the active vendor.

    Compared by path segment, not prefix: `_nvidia_x` must not pass for `_nvidia`.
    """
    names = list(sys.modules) if modules is None else list(modules)
    found = set()
    for name in names:
        for pkg in PACKAGES:
            prefix = f"{pkg}.runtime.backend._"
            if name.startswith(prefix):
                root = name[len(prefix):].split(".")[0]
                if root and root != active_vendor:
                    found.add(root)
    return sorted(found)


def package_version(module_name: str) -> str:
    mod = sys.modules.get(module_name)
    if mod is not None and getattr(mod, "__version__", None):
        return str(mod.__version__)
    try:
        from importlib.metadata import version

        return version(module_name)
    except Exception:
        return ""


def current_device_index(backend) -> Optional[str]:
    """The device the framework uses now, or None without a usable device API."""
    try:
        import torch

        api = getattr(torch, backend.torch_namespace, None) if backend.torch_namespace else None
        if api is None or not api.is_available() or api.device_count() <= 0:
            return None
        return str(api.current_device())
    except Exception:
        return None


def finished_status(exitstatus: int) -> Dict[str, Any]:
    """Identity `finished` for a session that ended with pytest exit status `exitstatus`."""
    code = int(exitstatus)
    return {"status": _FINISHED_STATUS.get(code, "error"), "exitstatus": code}


def triton_interpreted() -> bool:
    """True when Triton runs kernels in its interpreter (TRITON_INTERPRET), as Triton reads it."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except Exception:
        return inherited().get("TRITON_INTERPRET", "0").strip() == "1"


def _module_version(name: str) -> str:
    try:
        module = __import__(name)
        return str(getattr(module, "__version__", ""))
    except Exception:
        return ""


class DeviceSetup:
    """One session's vendor environment and identity facts; `close` restores GEMS_VENDOR."""

    def __init__(self) -> None:
        self.patches = PatchStack()
        self.backend = None
        self.vendor: Optional[str] = None
        self.requested: tuple = (None, None)
        self.device = ""
        self.closed = False

    def prepare(self, backend_name: Optional[str] = None, device: Optional[str] = None,
                record: bool = True) -> None:
        """Resolve the backend (None: the run configuration's), set GEMS_VENDOR, and (record)
        write backend/device to the identity. At plugin import the session's configuration is
        not known yet (its --zl-config is not parsed), so that call records nothing.

        Raises zl.backends.UnknownBackendError for a name no backend answers to.
        """
        self.requested = (backend_name, device)
        backend = get_backend(backend_name)
        user_choice = configured_vendor()
        vendor = apply_vendor_env(backend, self.patches)
        self.backend, self.vendor = backend, vendor
        self.device = (run_config.current().device if device is None else device).strip()
        if record:
            self.record_identity()
        how = "kept user's choice" if user_choice else "set from backend"
        log(f"backend={backend.name} GEMS_VENDOR={vendor or '(unset)'} ({how})")

    def record_identity(self) -> None:
        """backend, device (else the inherited visibility list's first), vendor."""
        backend, device = self.backend, self.device
        if not device:
            inherited = backend.inherited_devices()
            device = inherited[0] if inherited else ""
        update_identity(backend=backend.name, device=device, flaggems_vendor=self.vendor or "",
                        visibility_env=backend.visibility_env_keys[0] if backend.visibility_env_keys else "")

    def probe(self) -> Dict[str, str]:
        """Record device name/arch and the compiler/framework versions."""
        fields: Dict[str, Any] = {}
        try:
            ident = self.backend.device_identity()
            fields.update(device_name=ident.get("device_name", ""), device_arch=ident.get("device_arch", ""))
        except Exception as exc:
            log(f"identity probe failed ({exc})")
        if triton_interpreted():
            fields["device_name"] = fields.get("device_name") or "cpu"
            fields["device_arch"] = INTERPRETER_ARCH
        fields["finished"] = {"status": "running"}
        if not load_identity().get("device"):
            # Nothing pinned a card: record the one the framework actually uses, so a
            # run on the default card and one pinned elsewhere do not look alike.
            current = current_device_index(self.backend)
            if current is not None:
                fields["device"] = current
        fields["triton_version"] = _module_version("triton")
        fields["torch_version"] = _module_version("torch")
        update_identity(**fields)
        log(f"device={fields.get('device_name') or '(none)'} arch={fields.get('device_arch') or '-'} "
            f"triton={fields.get('triton_version') or '-'} torch={fields.get('torch_version') or '-'}")
        return fields

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        """Record the FlagGems package actually used, report foreign vendor modules, and
        record that the session finished (after the other plugins' session-finish work)."""
        try:
            self.report_packages()
        finally:
            update_identity(finished=finished_status(exitstatus))

    def report_packages(self, modules: Optional[Iterable[str]] = None) -> List[str]:
        pkg_name = next((p for p in PACKAGES if p in sys.modules), "")
        active = self.vendor or ""
        if pkg_name:
            pkg = sys.modules[pkg_name]
            active = str(getattr(pkg, "vendor_name", "") or active)
            update_identity(flaggems_package=pkg_name, flag_gems_version=package_version(pkg_name),
                            flaggems_vendor=active)
        if not active:
            return []
        foreign = foreign_vendor_modules(active, modules)
        if foreign:
            # Report, never block: a shared utility may legitimately live under another
            # vendor. But `import` succeeding proves only that the file exists; the seed
            # saw router_gemm run NVIDIA's Hopper kernel on a MUSA card and die deep in
            # the JIT with an error that pointed nowhere near the cause.
            log(markers.format_marker(markers.FOREIGN_VENDOR_MODULE, active=active, loaded=",".join(foreign)))
            log("another vendor's FlagGems implementation was imported; if this operator's result "
                "looks wrong, check whether the benchmark gates on vendor_name or only on import success")
        return foreign

    def close(self) -> None:
        """Put GEMS_VENDOR back as it was before `prepare`."""
        self.closed = True
        self.patches.undo_all()
