"""Everything run_pytest.sh needs before pytest starts, in two steps around the OUT_DIR lock.

    python -m zl.prepare claim                  # checks, then creates OUT_DIR
    python -m zl.prepare run --owner-pid PID    # (OUT_DIR locked) caches, run_config.json
    python -m zl.prepare campaign --driver D    # a campaign driver's preflight (zl.preflight)

Output: NUL-terminated records on stdout that the shell reads without eval (zl/sh/records.sh:
`NAME=value`, `NAME[]=value` appended to an array, `env.NAME=value` exported to pytest).

`claim` reads the run's variables (zl.config) and, in this order: validates them (exit 2,
`!!! <NAME> ...`), resolves node/op/shapes (zl.flaggems), the backend and the plugin plan
(zl.plan), runs the preflight checks (exit 3, zl.preflight), checks TMPDIR (exit 2) and
creates OUT_DIR. It changes nothing inside an existing OUT_DIR: the shell then locks OUT_DIR
(zl.locks), and only the lock holder may touch it. `run` resolves the same variables again
(the same code on the same environment), makes the private Triton cache and the inline shape
yaml, checks that OUT_DIR takes a write, moves an earlier run's files aside, sets up the tuner
cache, writes the identity stub and the run configuration (OUT_DIR/run_config.json, which
pytest reads through `--zl-config`). A write into OUT_DIR that fails is exit 6
(`!!! OUT_DIR_WRITE_FAILED`), and `run` removes what it made before failing.

The stub does not claim an autotune mode: the autotune plugin writes `autotune_mode` when
it actually runs; only a run without that plugin is stamped `off` here.
"""

from __future__ import annotations

import argparse
import errno
import glob
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from zl import childenv, flaggems, markers
from zl import config as run_config
from zl.backends import get_backend
from zl.config import ConfigError, RunVariables, check_name, run_variables
from zl.identity import update_identity
from zl.ir import RULES as IR_RULES
from zl.plan import AUTOTUNE_PLUGIN, missing_modules, plan_plugins, pytest_args
from zl.preflight import PreflightFailed, check_tmpdir, preflight, prepare_campaign
from zl.rundir import (EXIT_OUT_DIR_WRITE, TMP_PREFIXES, WRITE_ERRNOS, WRITE_FAILED_MARKER,
                       RunDirError, claim_out_dir, earlier_run_entries, move_previous_run,
                       probe_writable, reclaim_tmp, remove_new_entries)
from zl.shapefile import ShapeFileError, inline_yaml
from zl.switches import SwitchError

_ROOT = Path(__file__).resolve().parent.parent

# A variable with a bad value: exit 2 (zl.config names the variable).
BadValue = ConfigError
__all__ = ["BadValue", "PreflightFailed", "check_tmpdir", "main"]


class OutDirUnwritable(Exception):
    """A write into OUT_DIR failed (full disk, read-only, no permission): exit 6,
    `!!! OUT_DIR_WRITE_FAILED`."""

    def __init__(self, out, exc: OSError):
        self.out = str(out)
        self.detail = f"{errno.errorcode.get(exc.errno, exc.errno)}: {exc.strerror or exc}"
        super().__init__(f"{self.out}: {self.detail}")


Record = Tuple[str, Any]


def records(items: Iterable[Record]) -> bytes:
    """NUL-terminated `name=value` records (zl/sh/records.sh reads them); a value holding a
    NUL cannot be passed to the shell at all, so it is refused here."""
    out = []
    for name, value in items:
        text = str(value)
        if "\0" in text:
            raise ConfigError(f"{name}: a value holding a NUL byte cannot be passed on")
        out.append(f"{name}={text}\0")
    return "".join(out).encode("utf-8", "surrogateescape")


@dataclass
class Run:
    """The run being prepared. Every fact it resolves (node, op, shapes, directories) lives in
    `cfg`, the RunConfig that build_config completes, so zl.config's field list is the only
    one; `cfg.shape_file` is SHAPE_FILE as resolved until build_config puts in the file the
    run passes. The other fields are the preparation's own state."""
    env: Dict[str, str]
    vars: RunVariables
    cfg: run_config.RunConfig
    backend: Any = None
    plugins: List[str] = field(default_factory=list)
    cleared: bool = False        # an earlier run's files moved aside: what OUT_DIR holds now is ours
    records: List[Record] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def get(self, key: str, default: str = "") -> str:
        return self.env.get(key) or default

    def resolve(self, **facts: Any) -> None:
        """Record resolved facts in the configuration (RunConfig field names)."""
        self.cfg = replace(self.cfg, **facts)

    @property
    def out(self) -> Path:
        """OUT_DIR as `claim` or `prepare_run` resolved it; read before that is a bug, never
        a silent relative path."""
        if not self.cfg.out_dir:
            raise RuntimeError("Run.out read before claim / prepare_run resolved OUT_DIR")
        return Path(self.cfg.out_dir)

    @property
    def autotune_on(self) -> bool:
        return AUTOTUNE_PLUGIN in self.plugins


def read_run(env: Dict[str, str]) -> Run:
    """The variables (exit 2 on a bad value, zl.config), then node / op / shapes
    (zl.flaggems), backend and plugin plan; exit 2 on what cannot be resolved."""
    v = run_variables(env)
    # out_dir stays empty until claim / prepare_run resolve OUT_DIR (from_environ takes it raw).
    run = Run(env=env, vars=v, cfg=replace(run_config.from_environ(env), out_dir=""))
    try:
        res = flaggems.emit_run_env(run.get("TEST_NODE") or run.get("ZL_TEST_NODE"),
                                    run.get("OP", "softmax"), run.get("OP_FILE", "softmax"),
                                    run.get("FLAGGEMS_DIR", "/workspace/dev/FlagGems"),
                                    run.get("SHAPE_FILE"), run.get("SHAPE_MODE"))
        run.backend = get_backend(run.get("ZL_BACKEND", "cuda"))
        run.plugins = plan_plugins(run.backend.name, env=env)
    except (ValueError, SwitchError) as exc:   # NodeError, UnknownBackendError, SwitchError
        raise BadValue(str(exc)) from None
    run.resolve(backend=run.backend.name, op=check_name("OP", res["OP"]),
                op_file=check_name("OP_FILE", res["OP_FILE"]), flaggems_dir=res["FLAGGEMS_DIR"],
                test_file=res["TEST_FILE"], shape_file=res["SHAPE_FILE"], shape_mode=res["SHAPE_MODE"],
                bench_level=v.bench_level, seed=str(v.seed), direct_repeat=str(v.direct_repeat),
                isolate_tuner_cache=str(int(v.isolate)), color=v.color, dtypes=v.dtypes,
                use_flagtune=v.use_flagtune, replay_from=v.replay_from)
    missing = missing_modules(run.plugins)
    if missing:
        raise BadValue(f"plugin module(s) not importable: {' '.join(missing)} "
                       f"(check ZL_EXTRA_PLUGINS spelling)")
    if run.cfg.replay_from and not run.autotune_on:
        raise BadValue(f"REPLAY_FROM needs the autotune plugin, but it is not in this run's plan "
                       f"(ZL_ENABLE_AUTOTUNE={run.env.get('ZL_ENABLE_AUTOTUNE', '')!r}, "
                       f"backend {run.backend.name})")
    return run


def setup_tmp(run: Run, tmpdir: str, owner_pid: int) -> str:
    """Reclaim dead runs' temporaries, make the private Triton cache and (inline mode) the
    inline shape yaml; returns the `--shape_file` the run passes ("" for upstream shapes)."""
    reclaim_tmp(tmpdir)
    cfg = run.cfg
    try:
        # Private per run: every kernel really compiles, so its IR is really dumped.
        run.resolve(triton_cache_dir=tempfile.mkdtemp(prefix=f"zl_triton_cache.{owner_pid}.", dir=tmpdir))
        run.records.append(("CACHE_DIR", run.cfg.triton_cache_dir))
        if cfg.shape_mode == "upstream":
            return ""
        if cfg.shape_mode == "inline":
            core = Path(cfg.flaggems_dir) / "benchmark" / "core_shapes.yaml"
            try:
                passed = inline_yaml(core, run.env.get("INLINE_YAML", ""), tmpdir, owner_pid)
            except ShapeFileError as exc:
                raise BadValue(str(exc)) from None
            run.records.append(("INLINE_FILE", passed))
            return passed
    except OSError as exc:
        raise BadValue(f"TMPDIR={tmpdir!r}: cannot write the run's temporaries ({exc.strerror or exc})") from None
    return os.path.abspath(cfg.shape_file)


def remove_tmp(tmpdir: str, owner_pid: int) -> None:
    """What setup_tmp made for this owner (a failed preparation leaves no temporaries)."""
    for prefix in TMP_PREFIXES:
        for path in glob.glob(os.path.join(glob.escape(tmpdir), f"{prefix}{owner_pid}.*")):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
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
        run.resolve(out_dir=str(claim_out_dir(given, run.get("ZL_RUNS_ROOT", str(_ROOT / "runs")), run.cfg.op)))
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
    """shapes.yaml in the run directory: the yaml the run passes, or upstream's set."""
    out, core = run.out, Path(run.cfg.flaggems_dir) / "benchmark" / "core_shapes.yaml"
    if run.cfg.shape_mode == "upstream":
        # FlagGems' own set; the shape plugin rewrites shapes.yaml with what really ran.
        if core.is_file():
            shutil.copyfile(core, out / "shapes.yaml")
        else:
            (out / "shapes.yaml").write_text(f"source: upstream\nlevel: {run.vars.bench_level}\n",
                                             encoding="utf-8")
    if passed:
        shutil.copyfile(passed, out / "shapes.yaml")


def setup_autotune(run: Run) -> Tuple[str, str, str]:
    """(mode the shell shows, record dir, replay dir) for the autotune plugin."""
    if not run.autotune_on:
        return "off", "", ""
    if run.cfg.replay_from:
        run.resolve(replay_from=str(Path(run.cfg.replay_from).resolve()))
        return "replay", "", f"{run.cfg.replay_from}/autotune_records"
    return "record", f"{run.out}/autotune_records", ""


def setup_tuner_cache(run: Run) -> str:
    """FlagGems keeps LibTuner winners in a sqlite store that outlives runs. Shared, the side
    that runs first hands its winners to the other (mm's compiled variants fell 945 -> 33 from
    that alone). Isolated: a private store, deleted afterwards. Returns the caliber text."""
    if run.vars.isolate:
        tuner_dir = run.out / ".flaggems_cache"   # its config_cache: childenv.tuner_store
        run.resolve(tuner_cache_dir=str(tuner_dir))
        run.records.append(("TUNER_CACHE_DIR", run.cfg.tuner_cache_dir))
        return "isolated"
    if run.env.get("FLAGGEMS_DB_URL"):
        return f"shared({run.env['FLAGGEMS_DB_URL']})"
    return f"shared({run.env.get('FLAGGEMS_CACHE_DIR') or os.path.expanduser('~/.flaggems')})"


def build_config(run: Run, passed: str, record_dir: str, replay_dir: str, tuner_desc: str,
                 color: str) -> run_config.RunConfig:
    """The run configuration: the plugin settings from the environment, with every fact this
    preparation resolved (run.cfg) and the last ones, known only now, in place of the variable
    each came from."""
    return replace(run.cfg, shape_file=passed, record_dir=record_dir, replay_dir=replay_dir,
                   ttgir_dump_dir=str(run.out / "ttgir"), color=color or run.cfg.color,
                   tuner_cache=tuner_desc)


def write_stub(cfg: run_config.RunConfig, autotune_on: bool) -> None:
    """The identity fields only the preparation knows, from the run configuration. No
    autotune_mode unless the autotune plugin is absent: the plugin writes the mode it ran in."""
    fields = dict(schema_version=1, provider="flaggems", op=cfg.op, op_file=cfg.op_file,
                  test_file=cfg.test_file, flaggems_dir=cfg.flaggems_dir,
                  flaggems_commit=flaggems.checkout_commit(cfg.flaggems_dir), backend=cfg.backend,
                  device=cfg.device, bench_level=cfg.bench_level, shape_mode=cfg.shape_mode,
                  tuner_cache=cfg.tuner_cache, use_flagtune=int(cfg.use_flagtune), seed=int(cfg.seed),
                  dtypes=" ".join(cfg.dtypes), replay_from=cfg.replay_from or None,
                  campaign_id=cfg.campaign_id or None, ir_collection=IR_RULES)
    if not autotune_on:
        fields["autotune_mode"] = "off"
    update_identity(cfg.out_dir, **fields)


def _out_dir_error(run: Run, exc: OSError) -> Exception:
    if exc.errno in WRITE_ERRNOS:
        return OutDirUnwritable(run.out, exc)
    return BadValue(f"OUT_DIR={run.out}: {exc}")


def prepare_claim(env: Dict[str, str]) -> List[Record]:
    """Step one, before the lock: every check, then OUT_DIR created (an existing one is left
    as it is). Records: OUT_DIR, OUT_DIR_CREATED (1 = this step made it) and PREP_NOTES."""
    run = read_run(env)
    preflight(run)
    check_tmpdir(env)
    created = claim(run)
    return ([("OUT_DIR", str(run.out)), ("OUT_DIR_CREATED", int(created))]
            + [("PREP_NOTES[]", note) for note in run.notes])


def prepare_run(env: Dict[str, str], owner_pid: int, color: str = "") -> List[Record]:
    """Step two, OUT_DIR locked by the shell: run_config.json written, records for
    run_pytest.sh. Raises BadValue (TMPDIR included) or OutDirUnwritable, having removed
    what it made first."""
    run = read_run(env)
    tmpdir = check_tmpdir(env)
    if not run.get("OUT_DIR"):
        raise BadValue("OUT_DIR is not set: `python -m zl.prepare run` follows `claim`, which sets it")
    run.resolve(out_dir=str(Path(run.get("OUT_DIR")).resolve()))
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
            mode_desc, record_dir, replay_dir = setup_autotune(run)
            tuner_desc = setup_tuner_cache(run)
            cfg = build_config(run, passed, record_dir, replay_dir, tuner_desc, color)
            write_stub(cfg, run.autotune_on)
            path = run_config.write(cfg, str(run.out))
        except OSError as exc:
            raise _out_dir_error(run, exc) from None
    except BaseException:
        remove_tmp(tmpdir, owner_pid)
        if run.cleared:   # never before the earlier run was moved aside: those files are not ours
            remove_new_entries(run.out)
        raise
    exports = childenv.child_environ(cfg, run.backend, env)
    pytest_argv = [run_config.OPTION, str(path)] + (["--shape_file", passed] if passed else []) \
        + [a for d in cfg.dtypes for a in ("--dtypes", d)] + ["--level", cfg.bench_level]
    return (run.records + [(f"env.{k}", v) for k, v in exports.items()]
            + [("PLUGINS[]", a) for a in pytest_args(run.plugins)]
            + [("PYTEST_ARGS[]", a) for a in pytest_argv]
            + [("OP", cfg.op), ("FLAGGEMS_DIR", cfg.flaggems_dir), ("TEST_FILE", cfg.test_file),
               ("SHAPE_MODE", cfg.shape_mode), ("BENCH_LEVEL", cfg.bench_level),
               ("ZL_BACKEND", cfg.backend), ("OUT_DIR", cfg.out_dir), ("RUN_CONFIG", str(path)),
               ("USE_FLAGTUNE", int(cfg.use_flagtune)), ("MODE_DESC", mode_desc),
               ("TUNER_DESC", tuner_desc)]
            # After the claim step's notes (the shape file's), which the shell already holds.
            + [("PREP_NOTES[]", note) for note in run.notes])


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m zl.prepare",
                                description="pre-pytest preparation of run_pytest.sh / campaign preflight; "
                                            "prints NUL-terminated records (zl/sh/records.sh)")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("claim", help="validate, resolve, preflight, check TMPDIR, create OUT_DIR")
    r = sub.add_parser("run", help="(OUT_DIR locked) caches, earlier run aside, identity stub, run_config.json")
    r.add_argument("--owner-pid", type=int, required=True, help="the run script's pid (temp names)")
    r.add_argument("--color", choices=("always", "never"), default=None,
                   help="the console colour the shell chose (recorded in run_config.json)")
    c = sub.add_parser("campaign", help="import triton + flag_gems once; print the campaign id")
    c.add_argument("--driver", required=True, help="driver name, part of the campaign id")
    args = p.parse_args(argv)
    env = run_config.environ()
    try:
        if args.cmd == "claim":
            out = prepare_claim(env)
        elif args.cmd == "run":
            out = prepare_run(env, args.owner_pid, args.color or "")
        else:
            out = prepare_campaign(env, args.driver)
        data = records(out)
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
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
