"""The device-backend contract every zl_bench module reads instead of branching on a vendor name.

A backend answers: which visibility variable pins a child process to a card, which devices exist,
what the card is (identity for run_identity.json), which optional plugins are safe to load
(capability flags), how a graph-capture failure should be treated (vendor error wording), and how
to sample clocks/temperature (telemetry argv + parser). Subclasses mostly fill class attributes.
"""

from __future__ import annotations

import re
import subprocess
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from zl.childenv import inherited

# Every vendor visibility variable zl_bench knows. apply_visibility() clears the whole set before
# writing the active backend's keys: a parent shell with CUDA_VISIBLE_DEVICES=7 left over would
# otherwise ride along into a MUSA or ROCm child (HIP honours CUDA_VISIBLE_DEVICES too) and pin it
# to a card nobody asked for. tests/test_backends.py checks each backend's keys are listed here.
ALL_VISIBILITY_KEYS: Tuple[str, ...] = (
    "CUDA_VISIBLE_DEVICES",
    "MUSA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "ASCEND_RT_VISIBLE_DEVICES",
    "ASCEND_VISIBLE_DEVICES",
)

# One sample row, identical on every backend so two campaigns can be read side by side.
TELEMETRY_FIELDS: Tuple[str, ...] = (
    "index", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "power_w", "util_pct",
)

CAPTURE_VERDICTS: Tuple[str, ...] = ("fatal", "poisoned", "recoverable")

# Footers torch (and its vendor forks) append to EVERY accelerator error, whatever the cause.
# "...to enable device-side assertions." must not be read as "device-side assert triggered": doing
# so once turned each harmless capture refusal into a fatal error and disabled the fallback path.
_GENERIC_FOOTERS = (
    re.compile(r"compile with `?torch_use_\w+_dsa`? to enable device-side assertions\.?"),
    re.compile(r"\w+ kernel errors might be asynchronously reported at some other api call[^\n]*"),
    re.compile(r"for debugging consider passing \w+_launch_blocking=1\.?"),
)

# How many links of __cause__/__context__ to read. Wrappers (Triton's launcher, torch.cuda.graph's
# __exit__) re-raise with their own text; the device's words may sit one or two links down.
_MAX_CHAIN = 8


def parse_device_list(raw: Union[None, str, Iterable[str]]) -> List[str]:
    """'5, 6' or ['5', '6'] -> ['5', '6']; None / '' -> []."""
    if raw is None:
        return []
    items = raw.split(",") if isinstance(raw, str) else [str(x) for x in raw]
    return [tok.strip() for tok in items if tok.strip()]


def leading_number(value: object) -> str:
    """Leading number of a reading ('1888MHz' -> '1888', '[N/A]' -> ''); always a string."""
    m = re.match(r"^\s*(-?\d+(?:\.\d+)?)", str(value if value is not None else ""))
    return m.group(1) if m else ""


def exception_text(exc: BaseException) -> str:
    """Lower-cased 'Type: message' of exc and its cause/context chain, generic footers removed."""
    parts: List[str] = []
    seen = set()
    cur: Optional[BaseException] = exc
    while cur is not None and id(cur) not in seen and len(parts) < _MAX_CHAIN:
        seen.add(id(cur))
        try:
            text = f"{type(cur).__name__}: {cur}"
        except Exception:  # a broken __str__ must not turn classification into a crash
            text = type(cur).__name__
        parts.append(text.lower())
        cur = cur.__cause__ or cur.__context__
    joined = "\n".join(parts)
    for footer in _GENERIC_FOOTERS:
        joined = footer.sub(" ", joined)
    return joined


class DeviceBackend:
    """One hardware runtime. Callers read these attributes; they never test `backend.name`."""

    name: str = ""
    # First key is the canonical one (recorded in run_identity.json, used by the shell drivers).
    visibility_env_keys: Tuple[str, ...] = ()
    # torch.<namespace> used for device count and identity probes.
    torch_namespace: str = ""
    # FlagGems' vendor_name for this runtime (src/flag_gems/runtime/backend/_<vendor>).
    flaggems_vendor: str = ""
    supports_cuda_graph: bool = False
    supports_mm_cluster_fix: bool = False
    supports_triton_hooks: bool = True
    # Plugins a backend needs ahead of the core list; none exist in this tree yet.
    compat_plugins: Tuple[str, ...] = ()

    # Graph-capture failure wording, matched lower-case against the exception chain.
    #   fatal    : the kernel failed on the device; a fallback latency would report a broken kernel.
    #   poisoned : the capture attempt left the context unusable; falling back measures inside a
    #              dead process (seen: fallback marker printed, then zero rows at teardown).
    # Anything else is a kernel refusing capture: ordinary, and the direct timer takes over.
    fatal_error_markers: Tuple[str, ...] = (
        "illegal memory access",
        "illegal address",
        "illegal instruction",
        "misaligned address",
        "out of memory",
        "device-side assert triggered",
        "unspecified launch failure",
        "uncorrectable ecc",
    )
    poisoning_error_markers: Tuple[str, ...] = ()
    # Operators (pytest function name minus `test_`, i.e. ZL_OP) whose capture
    # attempt is known to poison this runtime; they are never offered to capture.
    capture_deny_ops: Tuple[str, ...] = ()

    # Optional device-listing probe: (argv, line prefix); prefix "" counts non-empty lines.
    list_command: Optional[Tuple[Sequence[str], str]] = None
    # One-shot telemetry sampler argv; "{dev}" marks the device value. Empty = no sampler.
    telemetry_argv: Tuple[str, ...] = ()
    # Total-memory query argv, one MiB number per device line; "{dev}" marks the device value.
    # Empty = unknown (zl.shapefile then bounds shapes by the host's memory).
    memory_query_argv: Tuple[str, ...] = ()
    # The compute processes on a device, one per output line; "{dev}" marks the device value.
    # Empty = this runtime offers no such query (a frozen campaign then cannot show it is idle).
    compute_apps_argv: Tuple[str, ...] = ()
    # The model name of a device, one line; "{dev}" marks the device value. Empty = this runtime
    # offers no such query (run_batch.py then records no model: zl/batch/conditions.py).
    name_query_argv: Tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    # --- visibility -----------------------------------------------------------------------------
    def visibility_env(self, device: str) -> Dict[str, str]:
        return {key: str(device) for key in self.visibility_env_keys}

    def apply_visibility(self, env: Dict[str, str], device: str) -> Dict[str, str]:
        """Copy of env pinned to `device`: every vendor's key cleared, then ours written."""
        out = dict(env)
        for key in ALL_VISIBILITY_KEYS:
            out.pop(key, None)
        out.update(self.visibility_env(device))
        return out

    def inherited_devices(self, environ: Optional[Dict[str, str]] = None) -> List[str]:
        environ = inherited() if environ is None else environ
        for key in self.visibility_env_keys:
            listed = parse_device_list(environ.get(key, ""))
            if listed:
                return listed
        return []

    def enumerate_devices(self, explicit: Union[None, str, Iterable[str]] = None) -> List[str]:
        """Device ids to pin children to, in this order of precedence:
        explicit list, the inherited visibility variable, a probe, then ['0'].

        The inherited variable must win over a probe: a caller who chose idle cards with
        CUDA_VISIBLE_DEVICES=5,6 would otherwise get bare indices 0,1 written into the children,
        which the runtime reads as absolute ids -- exactly the busy cards being avoided.
        """
        listed = parse_device_list(explicit)
        if listed:
            return listed
        listed = self.inherited_devices()
        if listed:
            return listed
        n = self.probe_device_count()
        if n > 0:
            return [str(i) for i in range(n)]
        return ["0"]

    def probe_device_count(self) -> int:
        n = self._probe_list_command()
        return n if n > 0 else self._probe_torch_count()

    def _probe_list_command(self) -> int:
        if not self.list_command:
            return 0
        argv, prefix = self.list_command
        try:
            # Bounded: vendor tools have been seen to hang, and nothing may block a batch on them.
            proc = subprocess.run(list(argv), text=True, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return 0
        if proc.returncode != 0:
            return 0
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        if prefix:
            lines = [ln for ln in lines if ln.startswith(prefix)]
        return len(lines)

    def _torch_api(self, torch_module=None):
        if not self.torch_namespace:
            return None
        if torch_module is None:
            try:
                import torch as torch_module  # noqa: F811 (lazy: importing torch costs seconds)
            except Exception:
                return None
        return getattr(torch_module, self.torch_namespace, None)

    def _probe_torch_count(self, torch_module=None) -> int:
        try:
            api = self._torch_api(torch_module)
            return int(api.device_count()) if api is not None else 0
        except Exception:
            return 0

    # --- identity -------------------------------------------------------------------------------
    def device_identity(self, torch_module=None) -> Dict[str, str]:
        """{backend, device_name, device_arch, timer_api, flaggems_vendor}; empty strings where
        unknown. Best effort and never raises: identity is evidence, not a precondition."""
        info = {
            "backend": self.name,
            "device_name": "",
            "device_arch": "",
            "timer_api": f"torch.{self.torch_namespace}" if self.torch_namespace else "",
            "flaggems_vendor": self.flaggems_vendor,
        }
        try:
            api = self._torch_api(torch_module)
            if api is None or int(api.device_count()) <= 0:
                return info
            index = int(api.current_device()) if hasattr(api, "current_device") else 0
        except Exception:
            return info
        try:
            info["device_name"] = str(api.get_device_name(index))
        except Exception:
            pass
        try:
            info["device_arch"] = self._device_arch(api, index)
        except Exception:
            pass
        return info

    def _device_arch(self, api, index: int) -> str:
        if hasattr(api, "get_device_capability"):
            major, minor = api.get_device_capability(index)[:2]
            return f"{int(major)}.{int(minor)}"
        props = api.get_device_properties(index)
        return f"{int(props.major)}.{int(props.minor)}"

    # --- graph capture --------------------------------------------------------------------------
    def classify_capture_error(self, exc: BaseException) -> str:
        """-> 'fatal' | 'poisoned' | 'recoverable' from the vendor wording in exc's chain."""
        text = exception_text(exc)
        if any(m in text for m in self.fatal_error_markers):
            return "fatal"
        if any(m in text for m in self.poisoning_error_markers):
            return "poisoned"
        return "recoverable"

    def denies_capture(self, op: str) -> bool:
        return bool(op) and op in self.capture_deny_ops

    def device_processes(self, device: str) -> Optional[List[str]]:
        """The processes running on `device`, one line each ([] when idle); None when no query
        answers (none for this runtime, the tool missing, failing or hanging)."""
        if not self.compute_apps_argv:
            return None
        try:
            proc = subprocess.run(device_argv(self.compute_apps_argv, device), text=True,
                                  capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        if proc.returncode != 0:
            return None
        return [ln.strip() for ln in proc.stdout.splitlines()
                if ln.strip() and not ln.lower().startswith("no running")]

    def device_models(self, devices: Sequence[str]) -> Optional[List[str]]:
        """The model name of each of `devices` (ids as the visibility variable takes them), in
        order, by `name_query_argv`; None when this runtime has no query or it does not name
        every one (the tool missing, failing, hanging, or no such device: a host without a GPU).
        The tool's numbering is its own: nvidia-smi's is PCI bus order, CUDA's fastest-first
        unless CUDA_DEVICE_ORDER=PCI_BUS_ID; on a host of one model the two name the same."""
        if not self.name_query_argv or not devices:
            return None
        out: List[str] = []
        for device in devices:
            try:
                proc = subprocess.run(device_argv(self.name_query_argv, device), text=True,
                                      capture_output=True, timeout=30)
            except (OSError, subprocess.SubprocessError):
                return None
            names = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
            if proc.returncode != 0 or len(names) != 1 or names[0].lower().startswith("no devices"):
                return None
            out.append(names[0])
        return out

    # --- telemetry ------------------------------------------------------------------------------
    def telemetry_command(self, device: str = "") -> List[str]:
        """Sampler argv (device_argv of telemetry_argv): without a pinned device the sampler
        covers every card."""
        return device_argv(self.telemetry_argv, device)

    def parse_telemetry(self, raw: str) -> List[Dict[str, str]]:
        """One dict per device with TELEMETRY_FIELDS as keys (string values, '' if unknown)."""
        return []


def device_argv(argv: Sequence[str], device: str = "") -> List[str]:
    """A vendor tool's argv with "{dev}" filled in. Without a device the argument holding
    "{dev}" and the flag before it are dropped, so the tool covers every card; a bare
    trailing "-i" would make it fail instead."""
    out: List[str] = []
    device = str(device or "").strip()
    for arg in argv:
        if "{dev}" in arg:
            if not device:
                if out and out[-1].startswith("-"):
                    out.pop()
                continue
            arg = arg.replace("{dev}", device)
        out.append(arg)
    return out
