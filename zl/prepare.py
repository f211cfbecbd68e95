"""Everything run_pytest.sh needs before pytest starts, in one interpreter.

    python -m zl.prepare run --owner-pid PID    # prints shell lines for run_pytest.sh to eval
    python -m zl.prepare campaign               # a campaign driver's preflight (imports once)

`run` reads the run's variables from the environment and, in this order: validates them
(exit 2, `!!! <NAME> ...`), resolves node/op/shapes (zl.flaggems), the backend and the
plugin plan (zl.plan), runs the preflight checks (exit 3, `!!! PREFLIGHT_FAILED check=`),
claims OUT_DIR and moves an earlier run's files aside, makes the private Triton cache and
the inline shape yaml, sets up the tuner cache and writes the identity stub. It used to be
six or seven interpreter starts of the shell script, each re-reading the environment its
own way (`ZL_ENABLE_AUTOTUNE=' 0'` was off for the planner and on for the shell).

The stub does not claim an autotune mode: the autotune plugin writes `autotune_mode` when
it actually runs; only a run without that plugin is stamped `off` here.

`campaign` imports triton and flag_gems for real, once, in the interpreter the cells will
use (a broken install otherwise fails once per cell and burns a campaign), and prints the
campaign id and marker names for the driver.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from zl import flaggems, markers  # noqa: E402
from zl.backends import UnknownBackendError, get_backend  # noqa: E402
from zl.identity import IDENTITY_NAME, update_identity  # noqa: E402
from zl.plan import AUTOTUNE_PLUGIN, missing_modules, plan_plugins, pytest_args  # noqa: E402
from zl.switches import SwitchError, env_switch  # noqa: E402

NAME_RE = re.compile(r"^[A-Za-z0-9_.@-]+$")
DTYPE_RE = re.compile(r"^[A-Za-z0-9_]+$")
DIRECT_REPEAT_RANGE = (1, 1000)
SEED_RANGE = (0, 2 ** 32 - 1)   # numpy's seed range; torch and random take it too
BENCH_LEVELS = ("core", "comprehensive")
# Entries that make a directory "an earlier run": only these directories are cleared
# aside, so OUT_DIR=. or a data directory is refused instead of emptied.
RUN_MARKERS = ("run.log", IDENTITY_NAME, "autotune_records", "ttgir", "shapes.yaml")
PREV_PREFIX = "prev-"
# Per-run temporaries in TMPDIR carry the owning shell's pid, so a run can reclaim what a
# SIGKILLed one left behind (a trap cannot run on SIGKILL).
TMP_PREFIXES = ("zl_triton_cache.", "zl_inline_shapes.")
RUN_TMP_NAMES = (".flaggems_cache",)


class BadValue(Exception):
    """A variable with a bad value: exit 2."""


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


# ------------------------------------------------------------------ shape file

def _positive_dims(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value > 0
    if isinstance(value, (list, tuple)):
        return bool(value) and all(_positive_dims(v) for v in value)
    return False


def validate_shape_file(path: str, op: str) -> Optional[str]:
    """PreflightFailed for an unusable file; a note (str) when the op's key is absent but a
    Benchmark class key may match it (upstream looks up op_name, then the class chain)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise PreflightFailed("shape_file", f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "parse error"
        raise PreflightFailed("shape_file", f"{path} is not valid yaml: {first}") from None
    if not isinstance(data, dict) or not data:
        raise PreflightFailed("shape_file", f"{path} holds no operator entries (empty or not a mapping); "
                              "SHAPE_FILE=upstream runs FlagGems' own shapes")
    keys = [op] if op in data else [k for k in data if isinstance(k, str) and k.endswith("Benchmark")]
    if not keys:
        raise PreflightFailed("shape_file", f"{path} has no '{op}:' entry (keys: "
                              f"{', '.join(map(str, list(data)[:8]))}); the run would measure the "
                              "benchmark's own shapes instead. Add the key, or say SHAPE_FILE=upstream")
    for key in keys:
        entry = data[key]
        shapes = entry.get("shapes") if isinstance(entry, dict) else None
        if not isinstance(shapes, list) or not shapes:
            raise PreflightFailed("shape_file", f"{path}: '{key}' has no 'shapes:' list")
        for shape in shapes:
            if not _positive_dims(shape):
                raise PreflightFailed("shape_file", f"{path}: '{key}' shape {shape!r} is not a list "
                                      "of positive integers")
    if keys != [op]:
        return (f"{path} has no '{op}:' key; FlagGems' class-chain lookup decides among "
                f"{', '.join(keys)}")
    return None


# ------------------------------------------------------------------ run directory

def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reclaim_tmp(tmpdir: str) -> List[str]:
    """Remove per-run temporaries whose owning shell is gone; returns what was removed."""
    removed = []
    try:
        names = os.listdir(tmpdir)
    except OSError:
        return removed
    for name in names:
        prefix = next((p for p in TMP_PREFIXES if name.startswith(p)), None)
        if prefix is None:
            continue
        pid = name[len(prefix):].split(".", 1)[0]
        if not pid.isdigit() or _pid_alive(int(pid)):
            continue
        path = os.path.join(tmpdir, name)
        shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else _unlink(path)
        removed.append(path)
    return removed


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def claim_out_dir(out_dir: str, runs_root: str, op: str) -> Path:
    """OUT_DIR as given (created), else a fresh `<runs_root>/<op>_<stamp>[-n]` claimed with mkdir."""
    if out_dir:
        path = Path(out_dir)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadValue(f"cannot create OUT_DIR={out_dir!r}: {exc.strerror}") from None
        return path.resolve()
    root = Path(runs_root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadValue(f"cannot create ZL_RUNS_ROOT={runs_root!r}: {exc.strerror}") from None
    base = root / f"{op}_{time.strftime('%Y%m%d-%H%M%S')}"
    # Timestamps are to the second: two runs started together step to -2, -3, ...
    for n in range(1, 1000):
        candidate = base if n == 1 else Path(f"{base}-{n}")
        try:
            candidate.mkdir()
            return candidate.resolve()
        except FileExistsError:
            continue
    raise BadValue(f"cannot claim a run directory under {root}")


def move_previous_run(out: Path) -> Optional[Path]:
    """A run directory describes one run: an earlier run's files go to `prev-<stamp>-<pid>/`.

    A stale `replay_from`, `shapes.source.yaml` or `*.used.json` left by the previous run
    otherwise reads as this run's. Temporaries of a killed run are deleted, not kept.
    """
    entries = [e for e in os.listdir(out) if not e.startswith(PREV_PREFIX)]
    if not entries:
        return None
    if not any(e in RUN_MARKERS or e.startswith("run.log.prev-") for e in entries):
        raise BadValue(f"OUT_DIR={out} is not empty and holds no earlier run "
                       f"({', '.join(sorted(entries)[:5])} ...); give an empty or new directory")
    aside = out / f"{PREV_PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    aside.mkdir()
    for name in entries:
        src = out / name
        if name in RUN_TMP_NAMES:
            shutil.rmtree(src, ignore_errors=True)
        elif name.startswith(f".{IDENTITY_NAME}.") and name.endswith(".lock"):
            continue  # the identity writers' lock, not a result
        else:
            os.replace(src, aside / name)
    return aside


# ------------------------------------------------------------------ the run

def _sh(name: str, value: str, export: bool = False) -> str:
    return f"{'export ' if export else ''}{name}={shlex.quote(str(value))}"


def _sh_array(name: str, values: Sequence[str]) -> str:
    return f"{name}=({' '.join(shlex.quote(v) for v in values)})"


def prepare_run(env: Dict[str, str], owner_pid: int) -> List[str]:
    """The shell lines for run_pytest.sh; raises BadValue / PreflightFailed."""
    def get(key: str, default: str = "") -> str:
        return env.get(key) or default

    bench_level = get("BENCH_LEVEL") or "core"
    if bench_level not in BENCH_LEVELS:
        raise BadValue(f"BENCH_LEVEL must be core or comprehensive (got: {bench_level})")
    use_flagtune = switch(env, "USE_FLAGTUNE", False)
    isolate = switch(env, "ZL_ISOLATE_TUNER_CACHE", False)
    color = get("FLAGGEMS_PERF_COLOR")
    if color.lower() not in ("", "always", "never"):
        raise BadValue(f"FLAGGEMS_PERF_COLOR must be always, never or empty (got: {color})")
    repeat = int_in_range("ZL_DIRECT_REPEAT", env.get("ZL_DIRECT_REPEAT"), 1, *DIRECT_REPEAT_RANGE)
    seed = int_in_range("ZL_SEED", env.get("ZL_SEED"), 0, *SEED_RANGE)
    dtypes = check_dtypes("DTYPES", get("DTYPES"))
    replay_from = get("REPLAY_FROM")

    try:
        res = flaggems.emit_run_env(get("TEST_NODE") or get("ZL_TEST_NODE"), get("OP") or "softmax",
                                    get("OP_FILE") or "softmax",
                                    get("FLAGGEMS_DIR") or "/workspace/dev/FlagGems",
                                    get("SHAPE_FILE"), get("SHAPE_MODE"))
    except ValueError as exc:
        raise BadValue(str(exc)) from None
    op, op_file = check_name("OP", res["OP"]), check_name("OP_FILE", res["OP_FILE"])
    try:
        backend = get_backend(get("ZL_BACKEND") or "cuda")
    except UnknownBackendError as exc:
        raise BadValue(str(exc)) from None
    try:
        plugins = plan_plugins(backend.name)
    except SwitchError as exc:
        raise BadValue(str(exc)) from None
    missing = missing_modules(plugins)
    if missing:
        raise BadValue(f"plugin module(s) not importable: {' '.join(missing)} "
                       f"(check ZL_EXTRA_PLUGINS spelling)")
    autotune_on = AUTOTUNE_PLUGIN in plugins
    if replay_from and not autotune_on:
        raise BadValue(f"REPLAY_FROM needs the autotune plugin, but it is not in this run's plan "
                       f"(ZL_ENABLE_AUTOTUNE={env.get('ZL_ENABLE_AUTOTUNE', '')!r}, backend {backend.name})")

    # -------------------------------------------------------------- preflight
    fg_dir, test_file = res["FLAGGEMS_DIR"], res["TEST_FILE"]
    shape_file, shape_mode = res["SHAPE_FILE"], res["SHAPE_MODE"]
    if not os.path.isdir(fg_dir):
        raise PreflightFailed("flaggems_dir", f"FlagGems directory exists: {fg_dir}")
    bench_file = test_file.split("::", 1)[0]
    if not os.path.isfile(bench_file):
        raise PreflightFailed("benchmark_file", f"benchmark file exists: {bench_file}")
    note = None
    if shape_file:
        if not os.path.isfile(shape_file):
            raise PreflightFailed("shape_file", f"shape file exists: {shape_file}")
        note = validate_shape_file(shape_file, op)
    if replay_from and not os.path.isdir(replay_from):
        raise PreflightFailed("replay_from", f"replay run directory exists: {replay_from}")
    # Locate, not import: pytest imports both a moment later and fails loudly there; the
    # campaign drivers do the real import once (`campaign`).
    import importlib.util
    if not all(importlib.util.find_spec(m) is not None for m in ("triton", "flag_gems")):
        raise PreflightFailed("interpreter", f"interpreter finds triton + flag_gems ({sys.executable})")

    # -------------------------------------------------------------- run directory
    tmpdir = env.get("TMPDIR") or tempfile.gettempdir()
    reclaim_tmp(tmpdir)
    out = claim_out_dir(get("OUT_DIR"), get("ZL_RUNS_ROOT") or str(_ROOT / "runs"), op)
    aside = move_previous_run(out)
    for sub in ("autotune_records", "ttgir"):
        (out / sub).mkdir(exist_ok=True)
    lines = [_sh("OP", op), _sh("OP_FILE", op_file), _sh("FLAGGEMS_DIR", fg_dir),
             _sh("TEST_FILE", test_file), _sh("SHAPE_MODE", shape_mode), _sh("BENCH_LEVEL", bench_level),
             _sh("ZL_BACKEND", backend.name, export=True), _sh("OUT_DIR", str(out), export=True),
             _sh("DTYPES", " ".join(dtypes)), _sh_array("DTYPE_ARGS", [a for d in dtypes for a in ("--dtypes", d)]),
             _sh_array("PLUGINS", pytest_args(plugins)),
             _sh("USE_FLAGTUNE", int(use_flagtune), export=True),
             _sh("ZL_ISOLATE_TUNER_CACHE", int(isolate), export=True),
             _sh("ZL_ENABLE_AUTOTUNE", int(autotune_on), export=True),
             _sh("ZL_DIRECT_REPEAT", repeat, export=True), _sh("ZL_SEED", seed, export=True)]
    messages = []
    if aside is not None:
        messages.append(f">>> OUT_DIR held an earlier run: its files were moved to {aside.name}/")
    if note:
        messages.append(f">>> {note}")
    cache_dir = tempfile.mkdtemp(prefix=f"zl_triton_cache.{owner_pid}.", dir=tmpdir)
    lines += [_sh("CACHE_DIR", cache_dir), _sh("TRITON_CACHE_DIR", cache_dir, export=True)]

    # -------------------------------------------------------------- shapes
    shape_args: List[str] = []
    zl_shape_file = ""
    core = Path(fg_dir) / "benchmark" / "core_shapes.yaml"
    if shape_mode == "upstream":
        if core.is_file():
            shutil.copyfile(core, out / "shapes.yaml")
        else:
            (out / "shapes.yaml").write_text(f"source: upstream\nlevel: {bench_level}\n", encoding="utf-8")
    elif shape_mode == "inline":
        zl_shape_file = _inline_yaml(core, env.get("INLINE_YAML", ""), tmpdir, owner_pid)
        lines.append(_sh("INLINE_FILE", zl_shape_file))
        shutil.copyfile(zl_shape_file, out / "shapes.yaml")
    else:
        zl_shape_file = os.path.abspath(shape_file)
        shutil.copyfile(zl_shape_file, out / "shapes.yaml")
    if zl_shape_file:
        shape_args = ["--shape_file", zl_shape_file]
    lines += [_sh_array("SHAPE_ARGS", shape_args), _sh("ZL_SHAPE_FILE", zl_shape_file, export=True)]

    # -------------------------------------------------------------- autotune + tuner cache
    if not autotune_on:
        lines += ["unset FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR"]
        mode_desc = "off"
    elif replay_from:
        replay_from = str(Path(replay_from).resolve())
        lines += [_sh("FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR", f"{replay_from}/autotune_records", export=True),
                  "unset FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR"]
        mode_desc = "replay"
    else:
        lines += [_sh("FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR", f"{out}/autotune_records", export=True),
                  "unset FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR"]
        mode_desc = "record"
    lines += [_sh("MODE_DESC", mode_desc), _sh("REPLAY_FROM", replay_from)]
    # FlagGems keeps LibTuner winners in a sqlite store that outlives runs. Shared, the side
    # that runs first hands its winners to the other (mm's compiled variants fell 945 -> 33
    # from that alone). Isolated: a private store, deleted afterwards.
    if isolate:
        tuner_dir = out / ".flaggems_cache"
        (tuner_dir / "config_cache").mkdir(parents=True, exist_ok=True)
        tuner_desc = "isolated"
        lines += [_sh("TUNER_CACHE_DIR", str(tuner_dir)),
                  _sh("FLAGGEMS_CACHE_DIR", str(tuner_dir), export=True),
                  _sh("FLAGGEMS_DB_URL", f"sqlite:///{tuner_dir}/config_cache/zl_isolated.db", export=True)]
    elif env.get("FLAGGEMS_DB_URL"):
        tuner_desc = f"shared({env['FLAGGEMS_DB_URL']})"
    else:
        tuner_desc = f"shared({env.get('FLAGGEMS_CACHE_DIR') or os.path.expanduser('~/.flaggems')})"
    lines.append(_sh("TUNER_DESC", tuner_desc))

    # -------------------------------------------------------------- device + identity stub
    device = get("ZL_DEVICE")
    vis_key = backend.visibility_env_keys[0] if backend.visibility_env_keys else ""
    # ZL_DEVICE pins the card through the backend's own visibility variable, unless the
    # caller already chose one.
    if device and vis_key and not env.get(vis_key):
        lines.append(_sh(vis_key, device, export=True))
    fields = dict(schema_version=1, provider="flaggems", op=op, op_file=op_file, test_file=test_file,
                  flaggems_dir=fg_dir, flaggems_commit=flaggems.checkout_commit(fg_dir),
                  backend=backend.name, device=device, bench_level=bench_level, shape_mode=shape_mode,
                  tuner_cache=tuner_desc, use_flagtune=int(use_flagtune), seed=seed,
                  dtypes=" ".join(dtypes), replay_from=replay_from or None,
                  campaign_id=get("ZL_CAMPAIGN_ID") or None)
    if not autotune_on:
        fields["autotune_mode"] = "off"
    try:
        update_identity(str(out), **fields)
    except OSError as exc:
        raise BadValue(f"cannot write {out / IDENTITY_NAME}: {exc}") from None
    lines.append(_sh_array("PREP_NOTES", messages))
    return lines


def _inline_yaml(core: Path, inline_text: str, tmpdir: str, owner_pid: int) -> str:
    """The built-in inline entries laid over upstream's core_shapes.yaml.

    Upstream's --shape_file replaces core_shapes.yaml instead of merging, so an op the
    inline yaml does not list would fall to DEFAULT_SHAPES (mm got 1-D shapes on the H200
    and died with "expected 4, got 1").
    """
    import yaml

    base = {}
    if core.is_file():
        base = yaml.safe_load(core.read_text(encoding="utf-8")) or {}
    try:
        base.update(yaml.safe_load(inline_text) or {})
    except yaml.YAMLError as exc:
        raise BadValue(f"the built-in inline shape yaml does not parse: {exc}") from None
    fd, path = tempfile.mkstemp(prefix=f"zl_inline_shapes.{owner_pid}.", suffix=".yaml", dir=tmpdir)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        yaml.safe_dump(base, handle, default_flow_style=None, sort_keys=False)
    return path


# ------------------------------------------------------------------ campaign preflight

def prepare_campaign(env: Dict[str, str], driver: str) -> List[str]:
    """Import triton and flag_gems for real; the campaign id and marker names as shell lines.

    Campaigns isolate the tuner cache unless the user says ZL_ISOLATE_TUNER_CACHE=0: a shared
    store hands the first side's winners to the other.
    """
    isolate = switch(env, "ZL_ISOLATE_TUNER_CACHE", True)
    allow_no_ir_diff = switch(env, "SWITCH_ALLOW_NO_IR_DIFF", False)
    try:
        backend = get_backend(env.get("ZL_BACKEND") or "cuda")
    except UnknownBackendError as exc:
        raise BadValue(str(exc)) from None
    # GEMS_VENDOR before flag_gems: FlagGems otherwise probes every vendor's CLI at import.
    flaggems.apply_vendor_env(backend)
    for module in ("triton", "flag_gems"):
        try:
            __import__(module)
        except BaseException as exc:  # noqa: BLE001 - any import failure ends the campaign here
            first = (str(exc).splitlines() or [""])[0]
            raise PreflightFailed("interpreter", f"{sys.executable} cannot import {module}: "
                                  f"{type(exc).__name__}: {first}") from None
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
    r = sub.add_parser("run", help="validate, resolve, preflight, claim OUT_DIR, write the identity stub")
    r.add_argument("--owner-pid", type=int, required=True, help="the run script's pid (temp names)")
    c = sub.add_parser("campaign", help="import triton + flag_gems once; print the campaign id")
    c.add_argument("--driver", required=True, help="driver name, part of the campaign id")
    args = p.parse_args(argv)
    env = dict(os.environ)
    try:
        lines = prepare_run(env, args.owner_pid) if args.cmd == "run" else \
            prepare_campaign(env, args.driver)
    except BadValue as exc:
        print(f"!!! {exc}", file=sys.stderr)
        return 2
    except PreflightFailed as exc:
        print(f"!!! {markers.format_marker(markers.PREFLIGHT_FAILED, check=exc.check)} "
              f"detail={exc.detail!r}", file=sys.stderr)
        return 3
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
