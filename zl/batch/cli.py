"""run_batch.py: run many FlagGems benchmark nodes through run_pytest.sh, one case directory
each, sharded over devices, one case at a time per device (--share-device N > 1: up to N at a
time, a functional sweep whose timings are invalid and marked so everywhere).

--resume --batch-dir B continues batch B: its cases, and the conditions batch.json recorded at
its start (backend, --dtypes, --shape-file and a digest of its content, --replay-root,
--switch, --use-flagtune, the environment variables that change a measurement, each FlagGems
tree's path and git commit + uncommitted changes, or a stat digest of a tree outside git).
Options left out are the batch's; a given option, the environment or a tree that differs exits
2 naming every difference, and so does another selection of cases. Reused untouched: cases
PASS/SKIP with .complete on every side (in a screen, with their screen.tsv row too); every
other case reruns, both sides.
One run_batch.py per batch directory (<batch>/.batch.lock, released when its holder dies,
however): a second exits 2 naming the holder's pid. A directory that already holds a batch
takes only --resume (exit 2 otherwise).
--share-device N (default 1): N cases at once per device. Screen verdicts (IR, results) stay
valid; every latency is measured under contention: each case gets ZL_DEVICE_SHARE=N (identity
device_share, refused by every comparison), ops_status notes shared_device=N. --resume keeps
a batch's caliber: 1 and > 1 never mix in one batch (exit 2).
--use-flagtune: USE_FLAGTUNE=1 for every case (the variable, inherited, works too).
--switch NAME --retune: also side C (NAME=1 tuned live, <batch>/retuned) after B where A passed.
--executor ray [--ray-address HOST:PORT]: every case (both sides of a screen) is one Ray task
holding one GPU of its node (1/N with --share-device N), returned compressed into this host's
batch directory; same tables, each row noting host=, node= and device_name=
(zl/batch/ray_executor.py; pip install -e '.[ray]'). Before the first case every GPU node is
checked: its FlagGems trees (each host's FLAGGEMS_DIR / FLAGGEMS_VLLM_DIR from its `ray start`
environment, else the driver's path) at the driver's commit and working state, its interpreter
(kit.sh, triton and flag_gems imports), its zl_bench checkout, its device; a timing batch runs
only on the batch's device (--ray-device-name, else the device of most GPUs) unless
--allow-mixed-hardware (the batch is then MIXED HARDWARE, everywhere it reports);
--ray-exclude-failing-nodes leaves refused nodes out (batch.json names each, with its reason).

Examples:
  python run_batch.py --all --devices 0,1,2,3 --dtypes float16 --op-timeout 1800
  python run_batch.py --ops softmax vllm:fused_marlin_moe nextafter_@nextafter_
  python run_batch.py --ops-file my_ops.txt --replay-root runs/batch_X
  python run_batch.py --resume --batch-dir runs/batch_X        # rerun only the unfinished
  python run_batch.py --ops-file list.txt --switch NAME --share-device 3   # functional screen
  python run_batch.py --all --executor ray --ray-address head:6379            # on a Ray cluster

Outputs:
  <batch>/<repo>/<run_name>/ (a single run's layout), <batch>/ops_status.csv (one row per case,
  rewritten atomically after every change), <batch>/summary.csv (batch_summary.py),
  <batch>/console/<repo>/<run_name>.log (run_pytest.sh's console, all attempts),
  <batch>/batch.json (the start's conditions and cases, one entry per call),
  <batch>/costs.tsv (per case: the graph timer's, the results check's and the IR plugin's
  seconds). Statuses: PASS, SKIP (runtime skip/xfail, no rows), NO_ROWS (exit 0, nothing
  measured), FAIL, TIMEOUT; PENDING/RUNNING/INTERRUPTED for cases not finished.

Exit codes:
  0    every case has a final status (the statuses carry the results)
  2    bad input, a batch directory in use or already holding a batch (without --resume),
       a --resume under other conditions; --executor ray without Ray importable (the message
       gives the install command), its cluster unreachable or without GPUs, a GPU node whose
       FlagGems tree is not the driver's commit and working state, no node of the batch's device
  3    cases left unstarted (--budget-s reached; rerun with --resume)
  4    the interpreter cannot import triton or flag_gems (checked once, before the first case;
       with --executor ray on every GPU node, with its kit.sh and zl_bench checkout)
  130  interrupted (Ctrl-C, SIGTERM): running cases killed, their rows INTERRUPTED
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

from zl import cli_help
from zl.backends import UnknownBackendError, get_backend, parse_device_list
from zl.batch import inventory as inv
from zl.batch import conditions as conds
from zl.batch.batchdir import (BatchDirError, DirLock, load_started, open_tables, refuse_used,
                               write_batch_record)
from zl.batch import judge_first, shard
from zl.batch.execute import conclude, execute, warn_shared
from zl.batch.partition import PartitionError
from zl.batch.select import SelectionError, Selector, read_dismiss, read_names_file
from zl.batch.ray_executor import Cluster, NodePreflightError, RayError, check_backend, require_ray
from zl.batch.screen import screen_sides
from zl.childenv import batch_case_base, inherited
from zl.config import environ
from zl.flaggems import checkout_commit
from zl.switches import SwitchError, env_switch

REPO_ROOT = Path(__file__).resolve().parents[2]
OPS_DIR = REPO_ROOT / "ops"
EXIT_OK, EXIT_USAGE, EXIT_INTERPRETER = 0, 2, 4
LOG = "[batch]"
RAY_DEVICE = "ray"   # the device column of a case Ray has not placed yet


class UsageError(ValueError):
    """Bad arguments or input (exit 2)."""


def _positive(kind):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not v > 0:
            raise argparse.ArgumentTypeError(f"must be > 0 (got {text})")
        return v
    return parse


def _share_count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {text}); 1 = one case at a time per device")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = cli_help.parser(__doc__, prog="run_batch.py")
    s = p.add_argument_group("selection")
    s.add_argument("--all", action="store_true", help="every inventory case but marked-skip and dismissed")
    s.add_argument("--ops", nargs="+", default=[], metavar="NAME", help="[repo:]run_name or [repo:]op")
    s.add_argument("--ops-file", type=Path, help="names, one per line, # comments")
    s.add_argument("--repo", action="append", choices=sorted(inv.REPO_ENV), help="with --all: only this repo")
    s.add_argument("--include-skipped", action="store_true", help="with --all: keep marked-skip cases")
    s.add_argument("--dismiss", type=Path, default=OPS_DIR / "dismiss.txt", help="left out of --all")
    s.add_argument("--list", action="store_true", help="print the cases and their devices, run nothing")
    d = p.add_argument_group("devices")
    d.add_argument("--backend", default=None, help="cuda/musa/rocm/ascend (default $ZL_BACKEND or cuda)")
    d.add_argument("--devices", default=None, help="comma separated ids (default: the backend's visible ones)")
    d.add_argument("--gpus", default=None, help="alias of --devices (giving both is an error)")
    d.add_argument("--balance", type=Path, help="screen.tsv or ops_status.csv: shard by measured time")
    d.add_argument("--share-device", type=_share_count, default=None, metavar="N",
                   help="run up to N cases at once per device (default 1, the only timing-valid "
                        "setting; N > 1 is a functional sweep: its timings are marked invalid; "
                        "with --resume: the batch's)")
    d.add_argument("--overlap", type=_share_count, default=None, metavar="N",
                   help="run up to N cases at once per device with exclusive timing: each do_bench "
                        "call holds the device's lock, start-up and compilation overlap (timings "
                        "valid; identity device_overlap=N, compared only with runs overlapped alike; "
                        "default 1; with --resume: the batch's)")
    r = p.add_argument_group("running")
    r.add_argument("--batch-dir", type=Path, help="output directory (default <runs>/batch_<timestamp>)")
    r.add_argument("--resume", action="store_true", help="with --batch-dir: continue that batch, under its conditions")
    r.add_argument("--op-timeout", type=_positive(float), default=1800.0, help="seconds per attempt")
    r.add_argument("--kill-grace", type=_positive(float), default=10.0, help="seconds from TERM to KILL")
    r.add_argument("--retries", type=int, default=2, choices=range(0, 10), metavar="N",
                   help="retries after pytest rc 1 / a signal death (default 2)")
    r.add_argument("--dtypes", default=None, help="space or comma separated dtypes (with fallbacks)")
    r.add_argument("--replay-root", type=Path, help="replay <root>/<repo>/<run_name> per case")
    r.add_argument("--shape-file", default=None, help="SHAPE_FILE for every case (default: upstream shapes)")
    r.add_argument("--use-flagtune", action="store_true", default=None,
                   help="USE_FLAGTUNE=1 for every case (FlagGems' widened tuning space)")
    r.add_argument("--judge", action="store_true", default=None,
                   help="time nothing: every side runs with ZL_JUDGE_ONLY=1 (code and results judged, "
                        "latencies nan, identity timer=none); with --resume: the batch's")
    r.add_argument("--judge-first", action="store_true",
                   help="with --switch: judge every node untimed into <batch>/judge, then time only the "
                        "changed ones and --controls A/A controls into <batch>/timed (zl/batch/judge_first.py)")
    r.add_argument("--judge-share", type=_share_count, default=None, metavar="N",
                   help="with --judge-first: cases at once per device in the untimed stage (default 1)")
    r.add_argument("--controls", type=int, default=10, metavar="N",
                   help="with --judge-first: NO_IR_DIFF nodes timed as A/A controls (default 10)")
    r.add_argument("--switch", metavar="NAME",
                   help="screen NAME: per case NAME=0 records into <batch>/before, then NAME=1 "
                        "replays it into <batch>/after; verdicts in <batch>/screen.tsv")
    r.add_argument("--retune", action=argparse.BooleanOptionalAction, default=None, help="with --switch: "
                   "side C, NAME=1 tuned live into <batch>/retuned (with --resume: the batch's)")
    x = p.add_argument_group("cluster")
    x.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local (default): this host's devices; ray: one Ray task per case, one GPU "
                        "each, on the cluster's nodes (pip install -e '.[ray]')")
    x.add_argument("--ray-address", default=None, metavar="ADDRESS",
                   help="with --executor ray: the cluster's head (HOST:6379; default $RAY_ADDRESS, else "
                        "the cluster running on this host, else a new one-host cluster; local: a new one)")
    x.add_argument("--ray-retries", type=int, default=3, choices=range(0, 10), metavar="N",
                   help="with --executor ray: reruns of a case whose node or worker died (default 3)")
    x.add_argument("--ray-exclude-failing-nodes", action="store_true",
                   help="with --executor ray: leave out the GPU nodes its check refuses (another "
                        "FlagGems tree, a failing interpreter) instead of refusing the batch")
    x.add_argument("--ray-device-name", default=None, metavar="NAME",
                   help="with --executor ray: the device a timing batch runs on, as torch names it "
                        "(default: the device of most GPUs; --resume: the batch's)")
    x.add_argument("--allow-mixed-hardware", action="store_true",
                   help="with --executor ray: also run on nodes of other devices; the batch and its "
                        "reports say MIXED HARDWARE and each row names its device")
    r.add_argument("--budget-s", type=_positive(float), default=None,
                   help="start no case that could end after this many seconds (then exit 3)")
    return p


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


def preflight_interpreter(backend_name: str) -> None:
    """Import triton and flag_gems once, for real, in the cases' interpreter, before the first
    case (the A/B drivers' preflight, `python -m zl.prepare campaign`): a broken install
    otherwise fails once per case and burns the whole batch."""
    base = inherited()
    py = base.get("ZL_PYTHON") or shutil.which("python") or shutil.which("python3") or sys.executable
    path = base.get("PYTHONPATH", "")
    env = dict(base, ZL_BACKEND=backend_name,
               PYTHONPATH=f"{REPO_ROOT}{os.pathsep + path if path else ''}")
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
            UnknownBackendError, conds.ShapeFileError, conds.RetuneError, RayError) as exc:
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
    if args.judge_first and (not args.switch or args.judge or args.list):
        raise UsageError("--judge-first needs --switch NAME (and no --judge or --list: it runs the "
                         "untimed stage itself)")
    if (args.judge_share is not None or args.controls != 10) and not args.judge_first:
        raise UsageError("--judge-share and --controls belong to --judge-first")
    if args.controls < 0:
        raise UsageError(f"--controls must be >= 0 (got {args.controls})")
    explicit = args.devices if args.devices is not None else args.gpus
    if explicit is not None and not parse_device_list(explicit):
        raise UsageError(f"--devices has no device id: {explicit!r}")
    if args.executor != "ray":
        given = [o for o, v in (("--ray-address", args.ray_address is not None),
                                ("--ray-exclude-failing-nodes", args.ray_exclude_failing_nodes),
                                ("--ray-device-name", args.ray_device_name is not None),
                                ("--allow-mixed-hardware", args.allow_mixed_hardware)) if v]
        if given:
            raise UsageError(f"{given[0]} needs --executor ray")
        return
    if explicit is not None or args.balance is not None:
        raise UsageError("--executor ray places cases on the cluster's GPUs itself; "
                         "drop --devices/--gpus/--balance")
    if args.overlap is not None and args.overlap > 1:
        raise UsageError("--overlap runs on the local executor only (its timing lock is a file on "
                         "this host); drop --overlap or --executor ray")
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
    """A --resume reuses finished cases only under the conditions they ran under."""
    diffs = conds.differences(started["conditions"], now)
    if diffs:
        raise UsageError("--resume: this call measures under other conditions than the batch "
                         "(batch.json); nothing was run. Differences:\n  " + "\n  ".join(diffs)
                         + "\nResume with the batch's options and environment, or start a new --batch-dir")


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
    shape_file: str                      # what the cases get (a path made absolute)
    common_env: Dict[str, str]           # set for every case on every side
    roots: Dict[str, str]                # repo -> resolved FlagGems tree
    conditions: Dict
    sides: List[Tuple[str, Dict[str, str]]]   # ("", {}) or before/after[/retuned] with the switch's value
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
        case_env=batch_case_base(common_env), roots=roots, retune=args.retune)
    if args.resume:
        check_conditions(started, conditions)
    return dict(backend=backend, run_script=run_script, dtypes=dtypes, shape_file=shape["shape_file"],
                common_env=common_env, roots=roots, conditions=conditions)


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
    sides = screen_sides(args.switch, args.retune)   # plain, or before/after[/retuned] of a screen
    return Plan(args=args, batch_dir=batch_dir, started=started, sides=sides, cases=cases,
                devices=devices, shards=shards, **measured)


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
        if args.executor == "ray":
            check_backend(plan.backend.name)
        else:   # this host's interpreter; with Ray, each GPU node's (cluster.check_nodes)
            preflight_interpreter(plan.backend.name)
        if args.executor == "ray":
            cluster = Cluster(args.ray_address, plan.backend.name, args.ray_retries, REPO_ROOT,
                              inherited().get("PYTHONPATH", ""))
            print(f"{LOG} {cluster.describe()}")
            cluster.check_nodes(plan)
        if held.lock is None:
            batch_dir.mkdir(parents=True, exist_ok=True)
            held.take()
            refuse_used(batch_dir)      # a batch that started here since the first look
        tables = open_tables(plan)
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
                 + (", retuned=1 (tuned live)" if args.retune else "") if args.switch else "")
              + (f"  {args.share_device} case(s) at a time per device" if args.share_device > 1 else "")
              + (f"  {args.overlap} case(s) at a time per device, timing exclusive" if args.overlap > 1 else ""))
        warn_shared(args.share_device)
        interrupted = execute(plan, tables, todo, batch_id, cluster)
        return conclude(plan, tables, interrupted)
    finally:
        if cluster is not None:
            cluster.shutdown()
        held.release()
