"""Set FlagGems' vendor from the zl_bench backend before flag_gems is imported, record the
run's device identity, and report foreign-vendor modules at the end (code: `zl.device`).

What it patches: the environment variable GEMS_VENDOR only, and only when the user chose
no vendor (GEMS_VENDOR / FLAGGEMS_VENDOR / GEMS_BACKEND / FLAGGEMS_BACKEND). It is set at
import time, on purpose: pytest imports `-p` plugins before it collects the benchmark
module, and FlagGems detects its vendor while that module imports flag_gems (without
GEMS_VENDOR it runs every vendor's query tool with no timeout; one hanging tool blocks the
import). The previous value is recorded and restored at unconfigure.

When it steps back: at import, an unknown ZL_BACKEND leaves GEMS_VENDOR to flag_gems (one
log line); at configure the same name is a usage error (exit 4) naming the known backends,
because a run on an unnamed backend must not produce a valid-looking identity.
`--zl-backend` / `--zl-device` on the command line replace the import-time values in
`pytest_load_initial_conftests`, before the benchmark's conftest imports flag_gems; given
after an earlier `-p` plugin imported FlagGems they are a usage error.

A shared device (ZL_DEVICE_SHARE / --zl-device-share N > 1, set by run_batch.py
--share-device) is recorded as identity `device_share`; the caliber guard refuses such runs'
timings (zl/runlog/caliber.py). A value that is not an integer >= 1 is a usage error.

Why: both sides of an A/B must run the same vendor's kernels on the card they name;
run_identity.json records backend, device, vendor and versions so the comparison tools
can refuse a pair that differs.
"""

from __future__ import annotations

import sys

import pytest

from zl import config as run_config
from zl import options, registry
from zl.backends import UnknownBackendError, normalize_backend_name
from zl.flaggems import PACKAGES
from zl.device import (DEVICE_SHARE_ENV, DeviceSetup, DeviceShareError, foreign_vendor_modules,  # noqa: F401
                       log, record_device_share)  # (foreign_vendor_modules, log: re-exported for the alias)

NAME = "zl_device_setup"
_STASH = pytest.StashKey[DeviceSetup]()


def _prepare_at_import() -> DeviceSetup:
    setup = DeviceSetup()
    try:
        setup.prepare(record=False)
    except UnknownBackendError as exc:  # run_pytest.sh already refused; ad-hoc use only
        log(f"cannot resolve backend ({exc}); leaving GEMS_VENDOR to flag_gems")
    return setup


# The one object made before configure: GEMS_VENDOR must be set before flag_gems is
# imported, i.e. before any hook runs. pytest_configure adopts it (or a fresh one).
_AT_IMPORT = _prepare_at_import()


def pytest_addoption(parser):
    options.add(parser, "--zl-backend", "ZL_BACKEND",
                "device backend: cuda, musa, rocm, ascend (aliases nvidia, nv, amd, hip, npu, huawei)", "cuda")
    options.add(parser, "--zl-device", "ZL_DEVICE",
                "device id recorded in run_identity.json; empty = the inherited visibility list's first")
    options.add(parser, "--zl-device-share", DEVICE_SHARE_ENV,
                "measurements sharing this device at once (run_batch.py --share-device); > 1 is "
                "recorded as identity device_share and every comparison refuses the run's timings", "1")


def _setup_for(backend, device) -> DeviceSetup:
    """The import-time setup while it stands for what was asked, else a fresh one."""
    explicit = (backend, device) != (None, None)
    if not explicit and not _AT_IMPORT.closed and _AT_IMPORT.backend is not None:
        return _AT_IMPORT
    if explicit and any(pkg in sys.modules for pkg in PACKAGES):
        # FlagGems picked its vendor when it was imported; changing GEMS_VENDOR now would
        # record one vendor in run_identity.json while the kernels come from another.
        raise pytest.UsageError("--zl-backend/--zl-device given after FlagGems was imported "
                                "(by an earlier -p plugin); set ZL_BACKEND/ZL_DEVICE instead")
    if not _AT_IMPORT.closed:
        _AT_IMPORT.close()
    setup = DeviceSetup()
    try:
        setup.prepare(backend, device)
    except UnknownBackendError as exc:
        raise pytest.UsageError(str(exc))
    return setup


def pytest_load_initial_conftests(early_config, parser, args):
    """Apply command-line values before the benchmark's conftest imports flag_gems."""
    if _STASH in early_config.stash:  # loaded under both names
        return
    ns = early_config.known_args_namespace
    backend, device = getattr(ns, "zl_backend", None), getattr(ns, "zl_device", None)
    cfg = run_config.early_of(early_config)   # the session's configuration from here on
    if getattr(ns, run_config.OPTION_DEST, None) and (backend, device) == (None, None) \
            and not _is_import_time(cfg):
        backend, device = cfg.backend, cfg.device   # the file names another backend or device
    setup = _setup_for(backend, device)
    setup.record_identity()
    early_config.stash[_STASH] = setup


def _is_import_time(cfg) -> bool:
    """The import-time setup already stands for the configuration's backend and device."""
    return (not _AT_IMPORT.closed and _AT_IMPORT.backend is not None
            and _AT_IMPORT.backend.name == normalize_backend_name(cfg.backend)
            and _AT_IMPORT.device == cfg.device.strip())


def pytest_configure(config):
    """Register the session's setup and probe the device."""
    if registry.active(config, NAME) is not None:  # loaded under both names
        return
    stash = getattr(config, "stash", None)
    setup = stash.get(_STASH, None) if stash is not None else None
    if setup is None:  # a configure without the early hook (in-process tests)
        setup = _setup_for(config.getoption("zl_backend", default=None),
                           config.getoption("zl_device", default=None))
        setup.record_identity()
    registry.register(config, NAME, setup)   # first: unconfigure restores GEMS_VENDOR even after a refusal
    try:
        record_device_share(options.value(config, "--zl-device-share"))
    except DeviceShareError as exc:
        raise pytest.UsageError(str(exc)) from None
    setup.probe()


def pytest_unconfigure(config):
    """Restore GEMS_VENDOR."""
    registry.release(config, NAME)
