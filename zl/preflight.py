"""The checks before a run or a campaign starts, each failure named.

- `preflight(run)`: run_pytest.sh's exit-3 checks (`!!! PREFLIGHT_FAILED check=<name>`): the
  FlagGems directory, the benchmark file, the shape file (zl.shapefile), the replay run, and
  that the interpreter finds triton and flag_gems.
- `check_tmpdir(env)`: TMPDIR (else the system's) takes new entries; ConfigError (exit 2).
- `prepare_campaign(env, driver)`: an A/B driver's preflight. It imports triton and
  flag_gems for real, once, in the interpreter the cells will use (a broken install otherwise
  fails once per cell and burns a campaign), on a throwaway tuner store: FlagGems creates its
  sqlite store at import, and a preflight must not write the user's ~/.flaggems while the
  campaign says `tuner=isolated`.
- `probe_interpreter(...)`, `device_problems(...)`: a frozen campaign's (zl.frozen.run) view of
  its interpreter (where triton and flag_gems import from, torch, the devices it sees) and the
  named ways its device is not the declared, idle one.
"""

from __future__ import annotations

import configparser
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from zl import flaggems, markers
from zl.backends import UnknownBackendError, get_backend
from zl.backends.base import device_argv
from zl.childenv import set_in_process, tuner_store
from zl.config import ConfigError, switch
from zl.shapefile import ShapeFileError, device_memory, validate_shape_file


class PreflightFailed(Exception):
    """A preflight check failed: exit 3, `!!! PREFLIGHT_FAILED check=<check>`."""

    def __init__(self, check: str, detail: str):
        super().__init__(detail)
        self.check = check
        self.detail = detail


def _not_a_file(what: str, path: str) -> str:
    """The failure of a path that must be a regular file, worded as the failure it is."""
    if not os.path.exists(path):
        return f"{what} not found: {path}"
    return f"{what} is not a regular file (a directory, device or fifo): {path}"


def preflight(run: Any) -> None:
    """Exit 3 checks, each named, each detail worded as the failure: a missing benchmark dir
    otherwise surfaces as pytest's "unrecognized arguments" (its conftest never loaded), which
    reads like a version problem. A SHAPE_FILE must be a regular file: /dev/zero reads forever
    and a fifo nobody writes blocks the reader."""
    cfg = run.cfg   # the facts zl.prepare resolved (node, shape file, replay run)
    if not os.path.isdir(cfg.flaggems_dir):
        raise PreflightFailed("flaggems_dir", f"FlagGems directory not found: {cfg.flaggems_dir}")
    bench_file = cfg.test_file.split("::", 1)[0]
    if not os.path.isfile(bench_file):
        raise PreflightFailed("benchmark_file", _not_a_file("benchmark file", bench_file))
    if cfg.shape_file:
        if not os.path.isfile(cfg.shape_file):
            raise PreflightFailed("shape_file", _not_a_file("shape file", cfg.shape_file))
        try:
            # Bounded, typed, and every shape's largest tensor must fit the device's memory
            # (the host's where no device answers): zl.shapefile, README's SHAPE_FILE row.
            note = validate_shape_file(cfg.shape_file, cfg.op, list(cfg.dtypes),
                                       device_memory(run.backend, run.env))
        except ShapeFileError as exc:
            raise PreflightFailed("shape_file", str(exc)) from None
        if note:
            run.notes.append(f">>> {note}")
    if cfg.replay_from and not os.path.isdir(cfg.replay_from):
        what = "is not a directory" if os.path.exists(cfg.replay_from) else "not found"
        raise PreflightFailed("replay_from", f"replay run directory {what}: {cfg.replay_from}")
    # Locate, not import: `import triton, flag_gems` cost ~10 s per run, paid again by pytest a
    # moment later, where a broken package still fails loudly. Campaigns import once (`campaign`).
    missing = [m for m in ("triton", "flag_gems") if importlib.util.find_spec(m) is None]
    if missing:
        raise PreflightFailed("interpreter", f"{sys.executable} cannot find {' or '.join(missing)}")


def check_tmpdir(env: Mapping[str, str]) -> str:
    """TMPDIR (else the system default) as a directory this run can create entries in;
    ConfigError otherwise. Checked before OUT_DIR exists: a missing TMPDIR used to end in a
    traceback after OUT_DIR and its subdirectories had been made."""
    raw = env.get("TMPDIR", "")
    try:
        tmpdir = raw or tempfile.gettempdir()
    except FileNotFoundError as exc:   # gettempdir() found no usable directory
        raise ConfigError(f"TMPDIR is unset and no usable temporary directory exists ({exc}); "
                          "set TMPDIR to a writable directory") from None
    if not os.path.isdir(tmpdir):
        raise ConfigError(f"TMPDIR={tmpdir!r} is not a directory (the run's private Triton cache "
                          "and shape yaml go there); create it or point TMPDIR at a writable directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix="zl_tmpdir_probe.", dir=tmpdir))
    except OSError as exc:
        raise ConfigError(f"TMPDIR={tmpdir!r} is not writable ({exc.strerror}); "
                          "point TMPDIR at a writable directory") from None
    return tmpdir


def prepare_campaign(env: Mapping[str, str], driver: str) -> List[Tuple[str, Any]]:
    """Import triton and flag_gems for real; the campaign id and marker names as records.

    Campaigns isolate the tuner cache unless the user says ZL_ISOLATE_TUNER_CACHE=0: a shared
    store hands the first side's winners to the other. The import itself always runs on a
    throwaway store (removed afterwards), isolated campaign or not.
    """
    isolate = switch(env, "ZL_ISOLATE_TUNER_CACHE", True)
    allow_no_ir_diff = switch(env, "SWITCH_ALLOW_NO_IR_DIFF", False)
    try:
        backend = get_backend(env.get("ZL_BACKEND") or "cuda")
    except UnknownBackendError as exc:
        raise ConfigError(str(exc)) from None
    # GEMS_VENDOR before flag_gems: FlagGems otherwise probes every vendor's CLI at import.
    flaggems.apply_vendor_env(backend)
    scratch = tempfile.mkdtemp(prefix=f"zl_preflight_cache.{os.getpid()}.", dir=check_tmpdir(env))
    for name, value in tuner_store(scratch, "zl_preflight.db").items():
        set_in_process(name, value)
    try:
        for module in ("triton", "flag_gems"):
            try:
                __import__(module)
            except BaseException as exc:  # noqa: BLE001 - any import failure ends the campaign here
                first = (str(exc).splitlines() or [""])[0]
                raise PreflightFailed("interpreter", f"{sys.executable} cannot import {module}: "
                                      f"{type(exc).__name__}: {first}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    campaign_id = f"{driver}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{os.urandom(3).hex()}"
    return [("env.ZL_CAMPAIGN_ID", campaign_id), ("env.ZL_ISOLATE_TUNER_CACHE", int(isolate)),
            ("SWITCH_ALLOW_NO_IR_DIFF", int(allow_no_ir_diff)),
            ("M_CELL_TIMEOUT", markers.CELL_TIMEOUT), ("M_CELL_KILLED", markers.CELL_KILLED),
            ("M_PREFLIGHT_FAILED", markers.PREFLIGHT_FAILED),
            ("M_SWITCH_NO_IR_DIFF", markers.SWITCH_NO_IR_DIFF)]


# Run by the campaign's interpreter in the FlagGems tree with the campaign's environment, the
# tree's pytest.ini `pythonpath` first on PYTHONPATH (`tree_pythonpath`), as pytest puts it, so
# triton and flag_gems are the ones its benchmark and correctness runs import.
INTERPRETER_PROBE = r"""
import json, sys
tree, backend = sys.argv[1], sys.argv[2]
import triton, flag_gems, torch
from importlib import metadata
from zl.backends import get_backend
vcs = ""
for name in getattr(metadata, "packages_distributions", dict)().get("triton", []):   # Python >= 3.10
    try:
        vcs = vcs or json.loads(metadata.distribution(name).read_text("direct_url.json") or "{}")["vcs_info"]["commit_id"]
    except Exception:
        pass
b = get_backend(backend)
n, uuid = b._probe_torch_count(torch), ""
try:
    uuid = str(b._torch_api(torch).get_device_properties(0).uuid) if n else ""
except Exception:
    pass
print("ZL_PROBE " + json.dumps({"triton_file": triton.__file__, "triton_version": getattr(triton, "__version__", ""),
      "triton_vcs_commit": vcs, "flag_gems_file": flag_gems.__file__, "torch_version": torch.__version__,
      "device_count": n, "device_uuid": uuid, **b.device_identity(torch)}))
"""


def tree_pythonpath(tree: str, env: Mapping[str, str]) -> Dict[str, str]:
    """`env` with the tree's pytest.ini `pythonpath` entries ahead of its PYTHONPATH."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(os.path.join(tree, "pytest.ini"))
    entries = [os.path.join(tree, e) for e in ini.get("pytest", "pythonpath", fallback="").split()]
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(entries + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return out


def probe_interpreter(python: str, tree: str, backend: str, env: Mapping[str, str]) -> Dict[str, Any]:
    """The interpreter's module files and versions, pip's commit record of triton, its device
    count, identity and UUID (where the runtime reports one: a resumed campaign must be on the
    same physical device); PreflightFailed("interpreter") naming why when it cannot import them."""
    try:
        proc = subprocess.run([python, "-c", INTERPRETER_PROBE, tree, backend], cwd=tree,
                              env=tree_pythonpath(tree, env), capture_output=True, text=True, timeout=600)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ZL_PROBE ")), "")
        if line:
            return json.loads(line[len("ZL_PROBE "):])
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        why = str(exc)
    raise PreflightFailed("interpreter", f"{python} in {tree}: {why}")


def device_problems(backend: Any, device: str, probe: Optional[Mapping[str, Any]] = None, want: int = 1,
                    model: str = "") -> List[Tuple[str, str]]:
    """(code, what) for each way `device` is not what a campaign declared: not exactly `want`
    devices of `model` visible through it (when `probe` says what the interpreter sees), or
    not idle (the backend's compute-apps query), or no query can tell."""
    out: List[Tuple[str, str]] = []
    where = f"{backend.visibility_env_keys[0]}={device}"
    if probe is not None:
        name = probe.get("device_name") or ""
        if probe["device_count"] != want:
            out.append(("devices_visible_mismatch", f"{probe['device_count']} device(s) visible through {where}, "
                        f"the manifest declares {want}"))
        elif model.lower() not in name.lower() and name.lower() not in model.lower():
            out.append(("device_model_mismatch", f"{where} is {name!r}, not {model!r}"))
    procs = backend.device_processes(device)
    if procs is None:
        query = " ".join(device_argv(backend.compute_apps_argv, device)) or f"{backend.name} offers none"
        out.append(("device_check_unavailable", f"no query shows {where} idle ({query})"))
    elif procs:
        out.append(("device_busy", f"{where} runs {len(procs)} other process(es): {'; '.join(procs[:3])}"))
    return out
