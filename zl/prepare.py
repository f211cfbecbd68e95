"""Everything run_pytest.sh needs before pytest starts, in two steps around the OUT_DIR lock.

    python -m zl.prepare claim                  # checks, then creates OUT_DIR; prints shell lines
    python -m zl.prepare run --owner-pid PID    # (OUT_DIR locked) prints shell lines to eval
    python -m zl.prepare campaign               # a campaign driver's preflight (imports once)

`claim` reads the run's variables from the environment and, in this order: validates them
(exit 2, `!!! <NAME> ...`), resolves node/op/shapes (zl.flaggems), the backend and the
plugin plan (zl.plan), runs the preflight checks (exit 3, `!!! PREFLIGHT_FAILED check=`),
checks TMPDIR (exit 2) and creates OUT_DIR. It changes nothing inside an existing OUT_DIR:
the shell then locks OUT_DIR (zl.locks), and only the lock holder may touch it. `run` reads
and resolves the same variables again (the same code on the same environment), makes the
private Triton cache and the inline shape yaml, checks that OUT_DIR takes a write, moves an
earlier run's files aside, sets up the tuner cache and writes the identity stub. A write
into OUT_DIR that fails is exit 6 (`!!! OUT_DIR_WRITE_FAILED`), and `run` removes what it
made before failing. One module reads the variables for the shell: as six or seven
interpreter starts, each read the environment its own way (`ZL_ENABLE_AUTOTUNE=' 0'` was off
for the planner and on for the shell).

The stub does not claim an autotune mode: the autotune plugin writes `autotune_mode` when
it actually runs; only a run without that plugin is stamped `off` here.

`campaign` imports triton and flag_gems for real, once, in the interpreter the cells will
use (a broken install otherwise fails once per cell and burns a campaign), and prints the
campaign id and marker names for the driver. The import runs on a throwaway tuner cache:
FlagGems creates its sqlite store at import, and a preflight must not write the user's
~/.flaggems while the campaign says `tuner=isolated`.
"""

from __future__ import annotations

import argparse
import errno
import glob
import importlib.util
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from zl import flaggems, markers  # noqa: E402
from zl.backends import UnknownBackendError, get_backend  # noqa: E402
from zl.identity import update_identity  # noqa: E402
from zl.plan import AUTOTUNE_PLUGIN, missing_modules, plan_plugins, pytest_args  # noqa: E402
from zl.rundir import (EXIT_OUT_DIR_WRITE, TMP_PREFIXES, WRITE_ERRNOS,  # noqa: E402
                       WRITE_FAILED_MARKER, RunDirError, claim_out_dir, earlier_run_entries,
                       move_previous_run, probe_writable, reclaim_tmp, remove_new_entries)
from zl.shapefile import ShapeFileError, device_memory, inline_yaml, validate_shape_file  # noqa: E402
from zl.switches import SwitchError, env_switch  # noqa: E402

NAME_RE = re.compile(r"^[A-Za-z0-9_.@-]+$")
DTYPE_RE = re.compile(r"^[A-Za-z0-9_]+$")
DIRECT_REPEAT_RANGE = (1, 1000)
SEED_RANGE = (0, 2 ** 32 - 1)   # numpy's seed range; torch and random take it too
BENCH_LEVELS = ("core", "comprehensive")


class BadValue(Exception):
    """A variable with a bad value: exit 2."""


class OutDirUnwritable(Exception):
    """A write into OUT_DIR failed (full disk, read-only, no permission): exit 6,
    `!!! OUT_DIR_WRITE_FAILED`."""

    def __init__(self, out, exc: OSError):
        self.out = str(out)
        self.detail = f"{errno.errorcode.get(exc.errno, exc.errno)}: {exc.strerror or exc}"
        super().__init__(f"{self.out}: {self.detail}")


class PreflightFailed(Exception):
    """A preflight check failed: exit 3, `!!! PREFLIGHT_FAILED check=<check>`."""

    def __init__(self, check: str, detail: str):
        super().__init__(detail)
        self.check = check
        self.detail = detail


# ------------------------------------------------------------------ validation

def check_name(var: str, value: str) -> str:
    """An OP / OP_FILE / OPS part: becomes a path component and a node name, so no
    separators, no `..`, no glob characters."""
    if not NAME_RE.match(value or "") or ".." in value:
        raise BadValue(f"{var}={value!r} is not an operator name ([A-Za-z0-9_.@-], no '..')")
    return value


def check_dtypes(var: str, value: str) -> List[str]:
    words = value.replace(",", " ").split()
    for word in words:
        if not DTYPE_RE.match(word):
            raise BadValue(f"{var}={value!r}: {word!r} is not a dtype name ([A-Za-z0-9_])")
    return words


def int_in_range(var: str, raw: Optional[str], default: int, lo: int, hi: int) -> int:
    text = (raw or "").strip()
    if not text:
        return default
    # Length first: int() of a 20-digit string is fine, but a huge repeat count hangs a run.
    if not re.fullmatch(r"[0-9]{1,12}", text) or not lo <= int(text) <= hi:
        raise BadValue(f"{var}={raw!r} must be an integer in {lo}..{hi}")
    return int(text)


def switch(env: Dict[str, str], name: str, default: bool) -> bool:
    try:
        return env_switch(name, default, environ=env)
    except SwitchError as exc:
        raise BadValue(str(exc)) from None


# ------------------------------------------------------------------ the run

def _sh(name: str, value, export: bool = False) -> str:
    return f"{'export ' if export else ''}{name}={shlex.quote(str(value))}"


def _sh_array(name: str, values: Sequence[str]) -> str:
    return f"{name}=({' '.join(shlex.quote(v) for v in values)})"


@dataclass
class Run:
    """The validated, resolved run; fields filled step by step by prepare_run."""
    env: Dict[str, str]
    bench_level: str = "core"
    use_flagtune: bool = False
    isolate: bool = False
    repeat: int = 1
    seed: int = 0
    dtypes: List[str] = field(default_factory=list)
    replay_from: str = ""
    op: str = ""
    op_file: str = ""
    fg_dir: str = ""
    test_file: str = ""
    shape_file: str = ""
    shape_mode: str = ""
    backend: object = None
    plugins: List[str] = field(default_factory=list)
    out: Optional[Path] = None
    cleared: bool = False        # an earlier run's files moved aside: what OUT_DIR holds now is ours
    lines: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def get(self, key: str, default: str = "") -> str:
        return self.env.get(key) or default

    @property
    def autotune_on(self) -> bool:
        return AUTOTUNE_PLUGIN in self.plugins


def read_variables(run: Run) -> None:
    """The plain variables: exit 2 on a bad value, on/off words through zl.switches."""
    run.bench_level = run.get("BENCH_LEVEL", "core")
    if run.bench_level not in BENCH_LEVELS:
        raise BadValue(f"BENCH_LEVEL must be core or comprehensive (got: {run.bench_level})")
    run.use_flagtune = switch(run.env, "USE_FLAGTUNE", False)
    run.isolate = switch(run.env, "ZL_ISOLATE_TUNER_CACHE", False)
    color = run.get("FLAGGEMS_PERF_COLOR")
    if color.lower() not in ("", "always", "never"):
        raise BadValue(f"FLAGGEMS_PERF_COLOR must be always, never or empty (got: {color})")
    run.repeat = int_in_range("ZL_DIRECT_REPEAT", run.env.get("ZL_DIRECT_REPEAT"), 1, *DIRECT_REPEAT_RANGE)
    run.seed = int_in_range("ZL_SEED", run.env.get("ZL_SEED"), 0, *SEED_RANGE)
    run.dtypes = check_dtypes("DTYPES", run.get("DTYPES"))
    run.replay_from = run.get("REPLAY_FROM")


def resolve(run: Run) -> None:
    """Node / op / shapes (zl.flaggems), backend, plugin plan; exit 2 on what cannot be."""
    try:
        res = flaggems.emit_run_env(run.get("TEST_NODE") or run.get("ZL_TEST_NODE"),
                                    run.get("OP", "softmax"), run.get("OP_FILE", "softmax"),
                                    run.get("FLAGGEMS_DIR", "/workspace/dev/FlagGems"),
                                    run.get("SHAPE_FILE"), run.get("SHAPE_MODE"))
        run.backend = get_backend(run.get("ZL_BACKEND", "cuda"))
        run.plugins = plan_plugins(run.backend.name)
    except (ValueError, SwitchError) as exc:   # NodeError, UnknownBackendError, SwitchError
        raise BadValue(str(exc)) from None
    run.op, run.op_file = check_name("OP", res["OP"]), check_name("OP_FILE", res["OP_FILE"])
    run.fg_dir, run.test_file = res["FLAGGEMS_DIR"], res["TEST_FILE"]
    run.shape_file, run.shape_mode = res["SHAPE_FILE"], res["SHAPE_MODE"]
    missing = missing_modules(run.plugins)
    if missing:
        raise BadValue(f"plugin module(s) not importable: {' '.join(missing)} "
                       f"(check ZL_EXTRA_PLUGINS spelling)")
    if run.replay_from and not run.autotune_on:
        raise BadValue(f"REPLAY_FROM needs the autotune plugin, but it is not in this run's plan "
                       f"(ZL_ENABLE_AUTOTUNE={run.env.get('ZL_ENABLE_AUTOTUNE', '')!r}, "
                       f"backend {run.backend.name})")


def preflight(run: Run) -> None:
    """Exit 3 checks, each named: a missing benchmark dir otherwise surfaces as pytest's
    "unrecognized arguments" (its conftest never loaded), which reads like a version problem."""
    if not os.path.isdir(run.fg_dir):
        raise PreflightFailed("flaggems_dir", f"FlagGems directory exists: {run.fg_dir}")
    bench_file = run.test_file.split("::", 1)[0]
    if not os.path.isfile(bench_file):
        raise PreflightFailed("benchmark_file", f"benchmark file exists: {bench_file}")
    if run.shape_file:
        if not os.path.isfile(run.shape_file):
            raise PreflightFailed("shape_file", f"shape file exists: {run.shape_file}")
        try:
            # Bounded, typed, and every shape's largest tensor must fit the device's memory
            # (the host's where no device answers): zl.shapefile, README's SHAPE_FILE row.
            note = validate_shape_file(run.shape_file, run.op, run.dtypes,
                                       device_memory(run.backend, run.env))
        except ShapeFileError as exc:
            raise PreflightFailed("shape_file", str(exc)) from None
        if note:
            run.notes.append(f">>> {note}")
    if run.replay_from and not os.path.isdir(run.replay_from):
        raise PreflightFailed("replay_from", f"replay run directory exists: {run.replay_from}")
    # Locate, not import: `import triton, flag_gems` cost ~10 s per run, paid again by pytest a
    # moment later, where a broken package still fails loudly. Campaigns import once (`campaign`).
    if not all(importlib.util.find_spec(m) is not None for m in ("triton", "flag_gems")):
        raise PreflightFailed("interpreter", f"interpreter finds triton + flag_gems ({sys.executable})")


def check_tmpdir(env: Dict[str, str]) -> str:
    """TMPDIR (else the system default) as a directory this run can create entries in; exit 2
    otherwise. Checked before OUT_DIR exists: a missing TMPDIR used to end in a traceback
    after OUT_DIR and its subdirectories had been made, an empty run directory left behind."""
    raw = env.get("TMPDIR", "")
    try:
        tmpdir = raw or tempfile.gettempdir()
    except FileNotFoundError as exc:   # gettempdir() found no usable directory
        raise BadValue(f"TMPDIR is unset and no usable temporary directory exists ({exc}); "
                       "set TMPDIR to a writable directory") from None
    if not os.path.isdir(tmpdir):
        raise BadValue(f"TMPDIR={tmpdir!r} is not a directory (the run's private Triton cache "
                       "and shape yaml go there); create it or point TMPDIR at a writable directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix="zl_tmpdir_probe.", dir=tmpdir))
    except OSError as exc:
        raise BadValue(f"TMPDIR={tmpdir!r} is not writable ({exc.strerror}); "
                       "point TMPDIR at a writable directory") from None
    return tmpdir


def setup_tmp(run: Run, tmpdir: str, owner_pid: int) -> str:
    """Reclaim dead runs' temporaries, make the private Triton cache and (inline mode) the
    inline shape yaml; returns the `--shape_file` the run passes ("" for upstream shapes)."""
    reclaim_tmp(tmpdir)
    try:
        # Private per run: every kernel really compiles, so its IR is really dumped.
        cache_dir = tempfile.mkdtemp(prefix=f"zl_triton_cache.{owner_pid}.", dir=tmpdir)
        run.lines += [_sh("CACHE_DIR", cache_dir), _sh("TRITON_CACHE_DIR", cache_dir, export=True)]
        if run.shape_mode == "upstream":
            return ""
        if run.shape_mode == "inline":
            core = Path(run.fg_dir) / "benchmark" / "core_shapes.yaml"
            try:
                passed = inline_yaml(core, run.env.get("INLINE_YAML", ""), tmpdir, owner_pid)
            except ShapeFileError as exc:
                raise BadValue(str(exc)) from None
            run.lines.append(_sh("INLINE_FILE", passed))
            return passed
    except OSError as exc:
        raise BadValue(f"TMPDIR={tmpdir!r}: cannot write the run's temporaries ({exc.strerror or exc})") from None
    return os.path.abspath(run.shape_file)


def remove_tmp(tmpdir: str, owner_pid: int) -> None:
    """What setup_tmp made for this owner (a failed preparation leaves no temporaries)."""
    for prefix in TMP_PREFIXES:
        for path in glob.glob(os.path.join(glob.escape(tmpdir), f"{prefix}{owner_pid}.*")):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                _unlink(path)


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def claim(run: Run) -> bool:
    """Create OUT_DIR (given) or a fresh runs/<op>_<stamp>; True when this call created it.
    Nothing inside an existing OUT_DIR changes here: that waits for the lock."""
    given = run.get("OUT_DIR")
    existed = bool(given) and os.path.isdir(given)
    try:
        run.out = claim_out_dir(given, run.get("ZL_RUNS_ROOT", str(_ROOT / "runs")), run.op)
        earlier_run_entries(run.out)   # before the shell writes its lock file into it
    except RunDirError as exc:
        if exc.errno in WRITE_ERRNOS:
            raise OutDirUnwritable(given or run.get("ZL_RUNS_ROOT", str(_ROOT / "runs")),
                                   OSError(exc.errno, str(exc))) from None
        raise BadValue(str(exc)) from None
    return not existed


def setup_dirs(run: Run) -> None:
    """OUT_DIR (created by `claim`, locked by the shell, probed): move an earlier run aside,
    make the plugins' subdirectories."""
    try:
        aside = move_previous_run(run.out)
    except RunDirError as exc:
        raise BadValue(str(exc)) from None
    run.cleared = True
    if aside is not None:
        run.notes.insert(0, f">>> OUT_DIR held an earlier run: its files were moved to {aside.name}/")
    for sub in ("autotune_records", "ttgir"):
        (run.out / sub).mkdir(exist_ok=True)


def setup_shapes(run: Run, passed: str) -> None:
    """shapes.yaml in the run directory and the `--shape_file` the run passes."""
    out, core = run.out, Path(run.fg_dir) / "benchmark" / "core_shapes.yaml"
    if run.shape_mode == "upstream":
        # FlagGems' own set; the shape plugin rewrites shapes.yaml with what really ran.
        if core.is_file():
            shutil.copyfile(core, out / "shapes.yaml")
        else:
            (out / "shapes.yaml").write_text(f"source: upstream\nlevel: {run.bench_level}\n", encoding="utf-8")
    if passed:
        shutil.copyfile(passed, out / "shapes.yaml")
    run.lines += [_sh_array("SHAPE_ARGS", ["--shape_file", passed] if passed else []),
                  _sh("ZL_SHAPE_FILE", passed, export=True)]


def setup_autotune(run: Run) -> str:
    """Record / replay directories for the autotune plugin; returns the mode the shell shows."""
    if not run.autotune_on:
        run.lines.append("unset FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR")
        return "off"
    if run.replay_from:
        run.replay_from = str(Path(run.replay_from).resolve())
        run.lines += [_sh("FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR", f"{run.replay_from}/autotune_records", export=True),
                      "unset FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR"]
        return "replay"
    run.lines += [_sh("FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR", f"{run.out}/autotune_records", export=True),
                  "unset FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR"]
    return "record"


def setup_tuner_cache(run: Run) -> str:
    """FlagGems keeps LibTuner winners in a sqlite store that outlives runs. Shared, the side
    that runs first hands its winners to the other (mm's compiled variants fell 945 -> 33 from
    that alone). Isolated: a private store, deleted afterwards. Returns the caliber text."""
    if run.isolate:
        tuner_dir = run.out / ".flaggems_cache"
        (tuner_dir / "config_cache").mkdir(parents=True, exist_ok=True)
        run.lines += [_sh("TUNER_CACHE_DIR", str(tuner_dir)),
                      _sh("FLAGGEMS_CACHE_DIR", str(tuner_dir), export=True),
                      _sh("FLAGGEMS_DB_URL", f"sqlite:///{tuner_dir}/config_cache/zl_isolated.db", export=True)]
        return "isolated"
    if run.env.get("FLAGGEMS_DB_URL"):
        return f"shared({run.env['FLAGGEMS_DB_URL']})"
    return f"shared({run.env.get('FLAGGEMS_CACHE_DIR') or os.path.expanduser('~/.flaggems')})"


def write_stub(run: Run, tuner_desc: str) -> None:
    """The identity fields only the shell side knows. No autotune_mode unless the autotune
    plugin is absent: the plugin writes the mode it really ran in."""
    device = run.get("ZL_DEVICE")
    fields = dict(schema_version=1, provider="flaggems", op=run.op, op_file=run.op_file,
                  test_file=run.test_file, flaggems_dir=run.fg_dir,
                  flaggems_commit=flaggems.checkout_commit(run.fg_dir), backend=run.backend.name,
                  device=device, bench_level=run.bench_level, shape_mode=run.shape_mode,
                  tuner_cache=tuner_desc, use_flagtune=int(run.use_flagtune), seed=run.seed,
                  dtypes=" ".join(run.dtypes), replay_from=run.replay_from or None,
                  campaign_id=run.get("ZL_CAMPAIGN_ID") or None)
    if not run.autotune_on:
        fields["autotune_mode"] = "off"
    update_identity(str(run.out), **fields)


def _out_dir_error(run: Run, exc: OSError) -> Exception:
    if exc.errno in WRITE_ERRNOS:
        return OutDirUnwritable(run.out, exc)
    return BadValue(f"OUT_DIR={run.out}: {exc}")


def prepare_claim(env: Dict[str, str]) -> List[str]:
    """Step one, before the lock: every check, then OUT_DIR created (an existing one is left
    as it is). Shell lines: OUT_DIR, OUT_DIR_CREATED (1 = this step made it) and PREP_NOTES."""
    run = Run(env=env)
    read_variables(run)
    resolve(run)
    preflight(run)
    check_tmpdir(env)
    created = claim(run)
    return [_sh("OUT_DIR", str(run.out), export=True), _sh("OUT_DIR_CREATED", int(created)),
            _sh_array("PREP_NOTES", run.notes)]


def prepare_run(env: Dict[str, str], owner_pid: int) -> List[str]:
    """Step two, OUT_DIR locked by the shell: the shell lines for run_pytest.sh. Raises
    BadValue (TMPDIR included) or OutDirUnwritable, having removed what it made first."""
    run = Run(env=env)
    read_variables(run)
    resolve(run)
    tmpdir = check_tmpdir(env)
    if not run.get("OUT_DIR"):
        raise BadValue("OUT_DIR is not set: `python -m zl.prepare run` follows `claim`, which sets it")
    run.out = Path(run.get("OUT_DIR")).resolve()
    try:
        # First, before anything is made or moved: a full disk otherwise showed only when the
        # tee first wrote run.log, the earlier run already moved aside.
        probe_writable(run.out)
    except OSError as exc:
        raise _out_dir_error(run, exc) from None
    try:
        passed = setup_tmp(run, tmpdir, owner_pid)
        try:
            setup_dirs(run)
            setup_shapes(run, passed)
            mode_desc = setup_autotune(run)
            tuner_desc = setup_tuner_cache(run)
            write_stub(run, tuner_desc)
        except OSError as exc:
            raise _out_dir_error(run, exc) from None
    except BaseException:
        remove_tmp(tmpdir, owner_pid)
        if run.cleared:   # never before the earlier run was moved aside: those files are not ours
            remove_new_entries(run.out)
        raise
    # ZL_DEVICE pins the card through the backend's own visibility variable, unless the
    # caller already chose one.
    device, keys = run.get("ZL_DEVICE"), run.backend.visibility_env_keys
    if device and keys and not env.get(keys[0]):
        run.lines.append(_sh(keys[0], device, export=True))
    dtype_args = [a for d in run.dtypes for a in ("--dtypes", d)]
    return run.lines + [
        _sh("OP", run.op), _sh("OP_FILE", run.op_file), _sh("FLAGGEMS_DIR", run.fg_dir),
        _sh("TEST_FILE", run.test_file), _sh("SHAPE_MODE", run.shape_mode),
        _sh("BENCH_LEVEL", run.bench_level), _sh("ZL_BACKEND", run.backend.name, export=True),
        _sh("OUT_DIR", str(run.out), export=True), _sh("DTYPES", " ".join(run.dtypes)),
        _sh_array("DTYPE_ARGS", dtype_args), _sh_array("PLUGINS", pytest_args(run.plugins)),
        # Normalised: every later reader (FlagGems, the plugins) sees 0/1, not the user's word.
        _sh("USE_FLAGTUNE", int(run.use_flagtune), export=True),
        _sh("ZL_ISOLATE_TUNER_CACHE", int(run.isolate), export=True),
        _sh("ZL_ENABLE_AUTOTUNE", int(run.autotune_on), export=True),
        _sh("ZL_DIRECT_REPEAT", run.repeat, export=True), _sh("ZL_SEED", run.seed, export=True),
        _sh("MODE_DESC", mode_desc), _sh("REPLAY_FROM", run.replay_from), _sh("TUNER_DESC", tuner_desc),
        # After the claim step's notes (the shape file's), which the shell already holds.
        "PREP_NOTES+=(" + " ".join(shlex.quote(n) for n in run.notes) + ")"]


# ------------------------------------------------------------------ campaign preflight

def prepare_campaign(env: Dict[str, str], driver: str) -> List[str]:
    """Import triton and flag_gems for real; the campaign id and marker names as shell lines.

    Campaigns isolate the tuner cache unless the user says ZL_ISOLATE_TUNER_CACHE=0: a shared
    store hands the first side's winners to the other. The import itself always runs on a
    throwaway store (FlagGems' own variables pointed at a temporary directory, removed
    afterwards): `import flag_gems` creates its sqlite store, and this check must leave no
    trace in the user's ~/.flaggems, isolated campaign or not.
    """
    isolate = switch(env, "ZL_ISOLATE_TUNER_CACHE", True)
    allow_no_ir_diff = switch(env, "SWITCH_ALLOW_NO_IR_DIFF", False)
    try:
        backend = get_backend(env.get("ZL_BACKEND") or "cuda")
    except UnknownBackendError as exc:
        raise BadValue(str(exc)) from None
    # GEMS_VENDOR before flag_gems: FlagGems otherwise probes every vendor's CLI at import.
    flaggems.apply_vendor_env(backend)
    scratch = tempfile.mkdtemp(prefix=f"zl_preflight_cache.{os.getpid()}.", dir=check_tmpdir(env))
    os.environ["FLAGGEMS_CACHE_DIR"] = scratch
    os.environ["FLAGGEMS_DB_URL"] = f"sqlite:///{scratch}/config_cache/zl_preflight.db"
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
    return [_sh("ZL_CAMPAIGN_ID", campaign_id, export=True),
            _sh("ZL_ISOLATE_TUNER_CACHE", int(isolate), export=True),
            _sh("SWITCH_ALLOW_NO_IR_DIFF", int(allow_no_ir_diff)),
            _sh("M_CELL_TIMEOUT", markers.CELL_TIMEOUT), _sh("M_CELL_KILLED", markers.CELL_KILLED),
            _sh("M_PREFLIGHT_FAILED", markers.PREFLIGHT_FAILED),
            _sh("M_SWITCH_NO_IR_DIFF", markers.SWITCH_NO_IR_DIFF)]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m zl.prepare",
                                description="pre-pytest preparation of run_pytest.sh / campaign preflight")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("claim", help="validate, resolve, preflight, check TMPDIR, create OUT_DIR")
    r = sub.add_parser("run", help="(OUT_DIR locked) caches, earlier run aside, identity stub")
    r.add_argument("--owner-pid", type=int, required=True, help="the run script's pid (temp names)")
    c = sub.add_parser("campaign", help="import triton + flag_gems once; print the campaign id")
    c.add_argument("--driver", required=True, help="driver name, part of the campaign id")
    args = p.parse_args(argv)
    env = dict(os.environ)
    try:
        if args.cmd == "claim":
            lines = prepare_claim(env)
        elif args.cmd == "run":
            lines = prepare_run(env, args.owner_pid)
        else:
            lines = prepare_campaign(env, args.driver)
    except BadValue as exc:
        print(f"!!! {exc}", file=sys.stderr)
        return 2
    except OutDirUnwritable as exc:
        print(f"!!! {markers.format_marker(WRITE_FAILED_MARKER, out=exc.out)} detail={exc.detail!r}: "
              "OUT_DIR cannot take this run's files (full disk, read-only or no permission); "
              "nothing was run", file=sys.stderr)
        return EXIT_OUT_DIR_WRITE
    except PreflightFailed as exc:
        print(f"!!! {markers.format_marker(markers.PREFLIGHT_FAILED, check=exc.check)} "
              f"detail={exc.detail!r}", file=sys.stderr)
        return 3
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
