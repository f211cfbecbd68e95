"""run_batch.py's run: the plan (options settled, a --resume's conditions checked, cases
selected and placed), the interpreter check, the batch directory's lock, then the cases
(zl/batch/execute.py). The command line and its --help text: zl/batch/options.py.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from zl.backends import UnknownBackendError, get_backend, parse_device_list
from zl.batch import inventory as inv
from zl.batch import conditions as conds
from zl.batch.batchdir import (BatchDirError, DirLock, load_started, make, open_tables, refuse_not_dir,
                               refuse_used, write_batch_record)
from zl.batch import judge_first, shard
from zl.batch.execute import conclude, execute, warn_shared
from zl.batch.options import OPS_DIR, build_parser
from zl.batch.partition import PartitionError
from zl.batch.select import SelectionError, Selector, read_dismiss, read_names_file
from zl.batch.ray_executor import Cluster, check_backend, require_ray
from zl.batch.ray_nodes import NodePreflightError, RayError, recorded_device
from zl.batch.screen import round_sides, screen_sides
from zl.batch.status import StatusFileError
from zl.childenv import batch_case_base, inherited
from zl.config import environ
from zl.flaggems import checkout_commit
from zl.switches import SwitchError, env_switch

REPO_ROOT = Path(__file__).resolve().parents[2]
EXIT_OK, EXIT_USAGE, EXIT_INTERPRETER = 0, 2, 4
LOG = "[batch]"
RAY_DEVICE = "ray"   # the device column of a case Ray has not placed yet


class UsageError(ValueError):
    """Bad arguments or input (exit 2)."""


def _fail(msg: str) -> int:
    print(f"!!! {LOG} {msg}", file=sys.stderr)
    return EXIT_USAGE


def load_inventories() -> Dict[str, List[inv.Entry]]:
    out = {}
    for repo, root in inv.repo_roots().items():
        if not Path(root, "benchmark").is_dir():
            raise UsageError(f"{inv.REPO_ENV[repo]}={root} has no benchmark/ directory")
        entries, where = inv.load_for_tree(repo, Path(root), OPS_DIR, checkout_commit(root))
        print(f"{LOG} inventory {repo}: {inv.summarize(entries)} ({where})")
        out[repo] = entries
    return out


def select_cases(args, selector: Selector, batch_keys: Optional[List[str]]) -> List[inv.Entry]:
    """The cases to run. A --resume (`batch_keys`: the batch's cases) without a selection takes
    the batch's; with one, it must select exactly the batch's cases (a table that silently
    lost or gained rows would no longer be the batch it claims)."""
    names = list(args.ops)
    if args.ops_file:
        names += read_names_file(args.ops_file)
    chosen = bool(names) or args.all
    if not chosen and batch_keys is not None:
        names = list(batch_keys)
    if not names and not args.all:
        raise UsageError("nothing selected: give --all, --ops or --ops-file")
    cases, notes = selector.select(names, args.all, args.repo or (), read_dismiss(args.dismiss)
                                   if args.all else {}, args.include_skipped)
    for n in notes:
        print(f"{LOG} {n}")
    if not cases:
        raise UsageError("the selection is empty")
    if chosen and batch_keys is not None:
        now = [f"{c.repo}:{c.run_name}" for c in cases]
        added = [k for k in now if k not in set(batch_keys)]
        left_out = [k for k in batch_keys if k not in set(now)]
        if added or left_out:
            raise UsageError("--resume: the selection differs from the batch's cases"
                             + (f"; not in the batch: {' '.join(added)}" if added else "")
                             + (f"; the batch's cases left out: {' '.join(left_out)}" if left_out else "")
                             + "; resume without --all/--ops/--ops-file to take the batch's cases")
    return cases


class InterpreterError(RuntimeError):
    """The interpreter the cases will use cannot import triton or flag_gems."""


def case_python(base: Dict[str, str]) -> str:
    """The interpreter run_pytest.sh gives the cases."""
    return base.get("ZL_PYTHON") or shutil.which("python") or shutil.which("python3") or sys.executable


def preflight_interpreter(backend_name: str) -> None:
    """Import triton and flag_gems once, for real, in the cases' interpreter, before the first
    case (the A/B drivers' preflight, `python -m zl.prepare campaign`): a broken install
    otherwise fails once per case and burns the whole batch."""
    base = inherited()
    py = case_python(base)
    # the installed kit, as each case's run_pytest.sh finds it (zl/sh/kit.sh)
    env = dict(base, ZL_BACKEND=backend_name)
    proc = subprocess.run([py, "-m", "zl.prepare", "campaign", "--driver", "run_batch"], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        raise InterpreterError(lines[-1] if lines else f"{py} -m zl.prepare campaign exited {proc.returncode}")


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (InterpreterError, NodePreflightError) as exc:
        print(f"!!! {LOG} {exc}", file=sys.stderr)
        return EXIT_INTERPRETER
    except (UsageError, BatchDirError, SelectionError, inv.InventoryError, PartitionError,
            UnknownBackendError, conds.ShapeFileError, conds.RetuneError, conds.RoundsError,
            conds.DtypeFallbackError, conds.DeviceModelError, judge_first.BaselineError, RayError,
            StatusFileError) as exc:
        return _fail(str(exc))


# ------------------------------------------------------------------ options and conditions

def check_args(args) -> None:
    """Checks of the command line alone (nothing read, nothing written)."""
    if args.devices is not None and args.gpus is not None:
        raise UsageError("--devices and --gpus are the same option; give one")
    if args.resume and args.batch_dir is None:
        raise UsageError("--resume needs --batch-dir")
    if args.switch is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", args.switch):
        raise UsageError(f"--switch is not a variable name: {args.switch!r}")
    if args.rounds is not None:   # what the command line says; settle_rounds the rest
        args.rounds = conds.parse_rounds(args.rounds)
        conds.refuse_rounds(args.rounds, args.switch, args.judge, args.share_device)
    if args.judge_first and (not args.switch or args.judge or args.list):
        raise UsageError("--judge-first needs --switch NAME (and no --judge or --list: it runs the "
                         "untimed stage itself)")
    if (args.judge_share is not None or args.controls != 10 or args.baseline) and not args.judge_first:
        raise UsageError("--judge-share, --controls and --baseline belong to --judge-first")
    if args.baseline and args.executor == "ray":
        raise UsageError("--baseline links side A's case directories on this host, where Ray's side B "
                         "cannot replay them; drop --baseline or --executor ray")
    if args.baseline and args.controls == 0:
        raise UsageError("--baseline with --controls 0: the controls are where the timed stage checks "
                         "the baseline against a fresh side A; give --controls N >= 1")
    if args.controls < 0:
        raise UsageError(f"--controls must be >= 0 (got {args.controls})")
    explicit = args.devices if args.devices is not None else args.gpus
    if explicit is not None and not parse_device_list(explicit):
        raise UsageError(f"--devices has no device id: {explicit!r}")
    if args.executor != "ray":
        given = [o for o, v in (("--ray-address", args.ray_address is not None),
                                ("--ray-exclude-failing-nodes", args.ray_exclude_failing_nodes),
                                ("--ray-device-name", args.ray_device_name is not None)) if v]
        if given:
            raise UsageError(f"{given[0]} needs --executor ray")
        return
    if explicit is not None or args.balance is not None:
        raise UsageError("--executor ray places cases on the cluster's GPUs itself; "
                         "drop --devices/--gpus/--balance")
    require_ray()


def settle_options(args, started: Dict) -> None:
    """Options a --resume leaves out take the batch's values (so the printed resume command
    works as printed); a fresh batch gets the defaults. A given option stays as given and
    is compared with the batch's by `check_conditions`."""
    cond = started.get("conditions", {})
    calls = started.get("calls") or [{}]
    if args.backend is None:
        args.backend = cond.get("backend") or None
    if args.dtypes is None:
        args.dtypes = cond.get("dtypes", "")
    conds.settle_dtype_fallback(args, started)
    if args.shape_file is None:
        args.shape_file = cond.get("shape_file", "")
    if args.replay_root is None and cond.get("replay_root"):
        args.replay_root = Path(cond["replay_root"])
    if args.switch is None:
        args.switch = cond.get("switch") or None
    if args.use_flagtune is None:
        args.use_flagtune = bool(cond.get("use_flagtune", False))
    if args.judge is None:
        args.judge = bool(started.get("judge", False))
    conds.settle_retune(args, started)
    if args.share_device is None:
        args.share_device = calls[-1].get("share_device", started.get("share_device", 1))
    if args.overlap is None:
        args.overlap = started.get("overlap", 1)
    if args.overlap > 1 and args.share_device > 1:
        raise UsageError(f"--overlap {args.overlap} with --share-device {args.share_device}: a batch is "
                         "either shared (functional only) or overlapped with exclusive timing; give one")
    conds.settle_rounds(args, started)
    if args.switch and args.replay_root:
        raise UsageError("--switch replays its own side A; it cannot take --replay-root")
    if args.replay_root is not None and not args.replay_root.is_dir():
        raise UsageError(f"--replay-root is not a directory: {args.replay_root}")


def flagtune_env(use_flagtune: bool) -> Dict[str, str]:
    """--use-flagtune sets USE_FLAGTUNE=1 for every case; an inherited off value contradicts it."""
    if not use_flagtune:
        return {}
    try:
        inherited = env_switch("USE_FLAGTUNE", True)
    except SwitchError as exc:
        raise UsageError(str(exc)) from None
    if not inherited:
        raise UsageError(f"--use-flagtune contradicts USE_FLAGTUNE={environ()['USE_FLAGTUNE']!r} "
                         "in the environment; drop one of them")
    return {"USE_FLAGTUNE": "1"}


def check_conditions(started: Dict, now: Dict) -> None:
    """A --resume reuses finished cases only under the conditions they ran under (the device
    section apart: it is known once the devices are placed, see `settle_device`)."""
    diffs = conds.differences({k: v for k, v in started["conditions"].items() if k != conds.DEVICE}, now)
    if diffs:
        raise UsageError("--resume: this call measures under other conditions than the batch "
                         "(batch.json); nothing was run. Differences:\n  " + "\n  ".join(diffs)
                         + conds.older_record_note(started["conditions"]) + "\nResume with the batch's options and environment, or start a new --batch-dir")


def check_resume_overlap(started: Dict, overlap: int) -> None:
    """--resume keeps the batch's --overlap: device_overlap is a caliber field, so cases
    overlapped N ways and M ways must not meet in one table."""
    before = started.get("overlap", 1)
    if before != overlap:
        raise UsageError(f"--resume: the batch was started with --overlap {before}, this call gives "
                         f"--overlap {overlap}; its timings compare only with the batch's own setting")


def check_resume_share(started: Dict, share: int) -> None:
    """--resume keeps the batch's caliber: timing-valid (1) and shared (> 1) cases never mix in
    one ops_status.csv / summary.csv. A different N > 1 is fine: both are functional only."""
    before = started.get("share_device", 1)
    if not isinstance(before, int) or before < 1:
        raise UsageError(f"--resume: batch.json has share_device={before!r}, not an integer >= 1")
    if (before > 1) != (share > 1):
        raise UsageError(f"--resume: the batch was started with --share-device {before}, this call gives "
                         f"--share-device {share}; a batch is either timing-valid (1) or shared (> 1), never both")


# ------------------------------------------------------------------ the plan

@dataclass
class Plan:
    """Everything decided before the first case: options settled, conditions checked, cases
    selected and placed. Nothing in it changes while the batch runs."""
    args: argparse.Namespace
    batch_dir: Path
    started: Dict                        # batch.json of the batch a --resume continues, else {}
    backend: object                      # zl.backends DeviceBackend
    run_script: Path
    dtypes: str                          # normalised: space separated
    dtype_fallback: str                  # all / first: where upstream refuses `dtypes`
    shape_file: str                      # what the cases get (a path made absolute)
    common_env: Dict[str, str]           # set for every case on every side
    roots: Dict[str, str]                # repo -> resolved FlagGems tree
    conditions: Dict
    sides: List[Tuple[str, Dict[str, str]]]   # ("", {}) or a screen's (screen.screen_sides) with the switch's value
    cases: List[inv.Entry]
    devices: List[str]
    shards: Dict[str, List[inv.Entry]]

    def side_dir(self, name: str) -> Path:
        return self.batch_dir / name if name else self.batch_dir

    @property
    def keys(self) -> List[Tuple[str, str]]:
        return [(c.repo, c.run_name) for c in self.cases]

    def device_of(self) -> Dict[Tuple[str, str], str]:
        return {(c.repo, c.run_name): d for d, cs in self.shards.items() for c in cs}


def settle_measurement(args, started: Dict) -> Dict:
    """The options, environment and trees the cases will measure under, as Plan fields; a
    --resume's must equal the batch's start."""
    settle_options(args, started)
    if args.resume:
        check_resume_share(started, args.share_device)
        check_resume_overlap(started, args.overlap)
    backend = get_backend(args.backend)
    run_script = Path(environ().get("ZL_RUN_PYTEST") or REPO_ROOT / "run_pytest.sh").resolve()
    if not run_script.is_file():
        raise UsageError(f"run script not found: {run_script}")
    shape = conds.shape_file_identity(args.shape_file)
    dtypes = " ".join(args.dtypes.replace(",", " ").split())
    common_env = flagtune_env(args.use_flagtune)
    if args.judge:      # every side untimed (ZL_JUDGE_ONLY); recorded with the case environment
        common_env["ZL_JUDGE_ONLY"] = "1"
    roots = {repo: str(Path(root).resolve()) for repo, root in inv.repo_roots().items()}
    conditions = conds.collect(
        backend=backend.name, dtypes=dtypes, shape=shape,
        replay_root=str(args.replay_root.resolve()) if args.replay_root else "",
        switch=args.switch or "", use_flagtune=args.use_flagtune,
        case_env=batch_case_base(common_env), roots=roots, retune=args.retune, rounds=args.rounds,
        dtype_fallback=args.dtype_fallback,
        toolchain=conds.toolchain_identity(case_python(inherited()), inherited()))
    if args.resume:
        check_conditions(started, conditions)
    return dict(backend=backend, run_script=run_script, dtypes=dtypes, dtype_fallback=args.dtype_fallback,
                shape_file=shape["shape_file"], common_env=common_env, roots=roots, conditions=conditions)


def place(args, backend, cases: List[inv.Entry]) -> Tuple[List[str], Dict[str, List[inv.Entry]]]:
    """The devices and each one's cases (by measured weight with --balance, else by hash)."""
    if args.executor == "ray":   # Ray places each case on a free GPU of the cluster
        return [RAY_DEVICE], {RAY_DEVICE: list(cases)}
    # after the selection: without an explicit list this may probe the devices (seconds)
    explicit = args.devices if args.devices is not None else args.gpus
    devices = backend.enumerate_devices(explicit)
    if len(set(devices)) != len(devices):
        raise UsageError(f"device listed twice: {','.join(devices)}")
    if args.balance:
        shards, unmeasured = shard.by_weight(cases, devices, shard.read_weights(args.balance))
        print(f"{LOG} balanced by {args.balance}; {unmeasured} case(s) without a measured time")
    else:
        shards = shard.by_hash(cases, devices)
    return devices, shards


def plan_batch(args, batch_dir: Path) -> Plan:
    started: Dict = {}
    if args.resume:
        started = load_started(batch_dir)
    elif not args.list:
        refuse_used(batch_dir)
    measured = settle_measurement(args, started)
    cases = select_cases(args, Selector(load_inventories()), started.get("case_keys") if args.resume else None)
    missing_repo = sorted({c.repo for c in cases} - set(inv.repo_roots()))
    if missing_repo:
        raise UsageError(f"no checkout for repo(s) {missing_repo}")
    devices, shards = place(args, measured["backend"], cases)
    sides = screen_sides(args.switch, args.retune, args.rounds)   # plain, or a screen's (screen.py)
    plan = Plan(args=args, batch_dir=batch_dir, started=started, sides=sides, cases=cases,
                devices=devices, shards=shards, **measured)
    if args.executor != "ray":   # with Ray, once its node check chose the batch's device (run)
        name_query = " ".join(plan.backend.name_query_argv[:1]) or f"{plan.backend.name} has no name query"
        settle_device(plan, plan.backend.device_models(devices), f"devices {','.join(devices)}, {name_query}")
    return plan


def settle_device(plan: Plan, models: Optional[List[str]], where: str) -> None:
    """conditions' device section: the GPU models of the devices the cases run on (`where`:
    which devices, found how); a --resume on other models is refused (DeviceModelError)."""
    plan.conditions[conds.DEVICE] = conds.device_section(models)
    named = plan.conditions[conds.DEVICE]["models"] or []
    if len(named) > 1 and not plan.args.allow_mixed_hardware:   # Ray records its one batch device
        raise conds.DeviceModelError(f"{where}: the devices are {conds.models_text(named)}; a timing batch "
                                     "compares within one GPU model. Choose devices of one model, or pass "
                                     "--allow-mixed-hardware (its reports then say MIXED HARDWARE)")
    if plan.args.resume:
        older = recorded_device(plan.started)   # a Ray batch from before the section
        conds.check_device(plan.started["conditions"], plan.conditions[conds.DEVICE], where,
                           (older or {}).get("name"))


def list_cases(plan: Plan) -> int:
    where = plan.device_of()
    for c in plan.cases:
        print(f"{c.repo}:{c.run_name}\tdevice={where[(c.repo, c.run_name)]}\t{c.test_file}::test_{c.op}")
    return EXIT_OK


# ------------------------------------------------------------------ run

def run(args) -> int:
    """Plan, (list and stop,) check the interpreter, lock the directory, write the tables, run
    the cases, summarise. Each step raises UsageError / InterpreterError on what it refuses."""
    check_args(args)
    batch_dir = (args.batch_dir or Path(environ().get("ZL_RUNS_ROOT") or REPO_ROOT / "runs")
                 / f"batch_{datetime.now():%Y%m%d-%H%M%S}").resolve()
    refuse_not_dir(batch_dir)       # a file there: refused before anything is read
    if args.judge_first:
        args.batch_dir = batch_dir
        return judge_first.run(args, run, lambda m: print(f"{LOG} {m}", flush=True))
    held = DirLock(batch_dir)
    cluster = None
    try:
        # an existing directory is locked before it is read; a new one when first written
        if batch_dir.is_dir() and not args.list:
            held.take()
        plan = plan_batch(args, batch_dir)
        if args.list:
            return list_cases(plan)
        if args.baseline_side is not None:      # stage 1 of --judge-first --baseline
            judge_first.check_baseline(args.baseline_side, plan.conditions)
        if args.executor == "ray":
            check_backend(plan.backend.name)
        else:   # this host's interpreter; with Ray, each GPU node's (cluster.check_nodes)
            preflight_interpreter(plan.backend.name)
        if args.executor == "ray":
            cluster = Cluster(args.ray_address, plan.backend.name, args.ray_retries, REPO_ROOT,
                              inherited().get("PYTHONPATH", ""))
            print(f"{LOG} {cluster.describe()}")
            cluster.check_nodes(plan)
            settle_device(plan, [cluster.record["device"]["name"]], "the Ray node check's device")
        if held.lock is None:
            make(batch_dir)
            held.take()
            refuse_used(batch_dir)      # a batch that started here since the first look
        tables = open_tables(plan)
        if args.baseline_side is not None:
            tables.adopted = judge_first.adopt(args.baseline_side, plan.cases, plan.side_dir(plan.sides[0][0]),
                                               tables.reused, float(args.op_timeout),
                                               args.share_device or 1)
        batch_id = f"{batch_dir.name}-{os.getpid()}-{int(time.time())}"
        write_batch_record(plan, len(tables.reused), batch_id,
                           {"ray": cluster.record} if cluster is not None else None)
        for table in tables.status.values():
            table.write()
        if args.resume:
            print(f"{LOG} resume: this call's conditions match the batch's start ({batch_dir / 'batch.json'})")
        todo = {d: [c for c in cs if (c.repo, c.run_name) not in tables.reused] for d, cs in plan.shards.items()}
        n_todo = sum(len(v) for v in todo.values())
        print(f"{LOG} backend={plan.backend.name} {len(plan.cases)} case(s), {len(tables.reused)} reused, "
              f"{n_todo} to run on {len([d for d in todo if todo[d]])} device(s) {plan.devices}  out={batch_dir}"
              + (f"  screen of {args.switch}: before=0 (record), after=1 (replay)"
                 + (", retuned=1 (tuned live)" if args.retune else "")
                 + (f", rounds 2..{args.rounds}: {' '.join(round_sides(args.rounds))} (replay before)"
                    if args.rounds > 1 else "") if args.switch else "")
              + (f"  {args.share_device} case(s) at a time per device" if args.share_device > 1 else "")
              + (f"  {args.overlap} case(s) at a time per device, timing exclusive" if args.overlap > 1 else ""))
        warn_shared(args.share_device)
        interrupted, budget_note = execute(plan, tables, todo, batch_id, cluster)
        return conclude(plan, tables, interrupted, budget_note)
    finally:
        if cluster is not None:
            cluster.shutdown()
        held.release()
