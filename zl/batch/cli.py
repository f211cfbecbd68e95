"""run_batch.py: run many FlagGems benchmark nodes through run_pytest.sh, one case directory
each, sharded over devices, one case at a time per device (--share-device N > 1: up to N at a
time, a functional sweep whose timings are invalid and marked so everywhere).

    python run_batch.py --all --devices 0,1,2,3 --dtypes float16 --op-timeout 1800
    python run_batch.py --ops softmax vllm:fused_marlin_moe nextafter_@nextafter_
    python run_batch.py --ops-file my_ops.txt --replay-root runs/batch_X
    python run_batch.py --resume --batch-dir runs/batch_X        # rerun only the unfinished
    python run_batch.py --ops-file list.txt --switch NAME --share-device 3   # functional screen

Output: <batch>/<repo>/<run_name>/ (a single run's layout), <batch>/ops_status.csv (one row
per case, rewritten atomically after every change), <batch>/summary.csv (batch_summary.py),
<batch>/console/<repo>/<run_name>.log (run_pytest.sh's console, all attempts),
<batch>/batch.json (the start's conditions and cases, one entry per call),
<batch>/costs.tsv (per case: the graph timer's, the results check's and the IR plugin's seconds).
Statuses: PASS, SKIP (runtime skip/xfail, no rows), NO_ROWS (exit 0, nothing measured), FAIL,
TIMEOUT; PENDING/RUNNING/INTERRUPTED for cases not finished.
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
Exit codes: 0 every case has a final status (the statuses carry the results); 2 bad input, a
batch directory in use or already holding a batch (without --resume), a --resume under other
conditions; 4 the interpreter cannot import triton or flag_gems (checked once, before the
first case); 3 cases left unstarted (--budget-s reached; rerun with --resume); 130 interrupted
(Ctrl-C, SIGTERM): running cases killed, their rows INTERRUPTED.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Optional

from zl import atomic, locks
from zl.backends import UnknownBackendError, get_backend, parse_device_list
from zl.batch import inventory as inv
from zl.batch import conditions as conds
from zl.batch import shard
from zl.batch.case import COMPLETE_MARK, CaseConfig, CaseRunner, case_dir, inherited_env
from zl.batch.executor import GroupGuard, LocalExecutor
from zl.batch.partition import PartitionError
from zl.batch.select import SelectionError, Selector, read_dismiss, read_names_file
from zl.batch.screen import SIDES, ScreenTable, read_screen_rows, screen_row
from zl.batch.status import COMPLETE, UNFINISHED, StatusTable, blank_row, read_rows
from zl.flaggems import checkout_commit
from zl.runlog.costs import write_batch_costs
from zl.switches import SwitchError, env_switch

REPO_ROOT = Path(__file__).resolve().parents[2]
OPS_DIR = REPO_ROOT / "ops"
EXIT_OK, EXIT_USAGE, EXIT_UNFINISHED, EXIT_INTERPRETER, EXIT_INTERRUPTED = 0, 2, 3, 4, 130
LOG = "[batch]"


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
    summary, _, rest = __doc__.partition("\n\n")   # first paragraph, then the rest verbatim
    p = argparse.ArgumentParser(prog="run_batch.py", description=summary,
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=rest)
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
    r.add_argument("--switch", metavar="NAME",
                   help="screen NAME: per case NAME=0 records into <batch>/before, then NAME=1 "
                        "replays it into <batch>/after; verdicts in <batch>/screen.tsv")
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


def reusable(cases: List[inv.Entry], sides: List[str], side_dir: Dict[str, Path],
             old: Dict[str, Dict], old_screen: Optional[Dict]) -> set:
    """Keys of the cases a --resume keeps untouched: on every side a PASS/SKIP row whose case
    directory has its .complete mark (written last, so a killed case never has it), and in a
    screen, the pair's screen.tsv row. Anything less reruns the whole case, every side."""
    out = set()
    for c in cases:
        key = (c.repo, c.run_name)
        if all(old[n].get(key, {}).get("status") in COMPLETE
               and (case_dir(side_dir[n], c) / COMPLETE_MARK).is_file() for n in sides) \
                and (old_screen is None or key in old_screen):
            out.add(key)
    return out


class InterpreterError(RuntimeError):
    """The interpreter the cases will use cannot import triton or flag_gems."""


def preflight_interpreter(backend_name: str) -> None:
    """Import triton and flag_gems once, for real, in the cases' interpreter, before the first
    case (the A/B drivers' preflight, `python -m zl.prepare campaign`): a broken install
    otherwise fails once per case and burns the whole batch."""
    py = os.environ.get("ZL_PYTHON") or shutil.which("python") or shutil.which("python3") or sys.executable
    path = os.environ.get("PYTHONPATH", "")
    env = dict(os.environ, ZL_BACKEND=backend_name,
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
    except InterpreterError as exc:
        print(f"!!! {LOG} {exc}", file=sys.stderr)
        return EXIT_INTERPRETER
    except (UsageError, SelectionError, inv.InventoryError, PartitionError, UnknownBackendError,
            conds.ShapeFileError) as exc:
        return _fail(str(exc))


# ------------------------------------------------------------------ the batch directory

BATCH_LOCK = ".batch.lock"
# What a batch writes into its directory first: any of them means the directory holds one.
USED_MARKS = ("batch.json", "ops_status.csv", f"{SIDES[0]}/ops_status.csv", "screen.tsv")


def claim(batch_dir: Path) -> locks.Lock:
    """One run_batch.py per batch directory: two would rewrite each other's tables. The lock
    dies with its holder, so a killed batch never blocks its --resume."""
    try:
        return locks.acquire(batch_dir / BATCH_LOCK)
    except locks.LockHeld as exc:
        who = f"pid {exc.pid}" if exc.pid is not None else "a process whose pid is not written yet"
        raise UsageError(f"--batch-dir {batch_dir} is in use by another run_batch.py ({who}); "
                         "wait for it to end, or give another --batch-dir") from None
    except OSError as exc:
        raise UsageError(f"--batch-dir {batch_dir}: cannot lock {batch_dir / BATCH_LOCK}: "
                         f"{exc.strerror or exc}") from None


def refuse_used(batch_dir: Path) -> None:
    found = [m for m in USED_MARKS if (batch_dir / m).exists()]
    if found:
        raise UsageError(f"--batch-dir {batch_dir} already holds a batch ({', '.join(found)}); "
                         "continue it with --resume, or give a new directory")


def load_started(batch_dir: Path) -> Dict:
    """batch.json of the batch a --resume continues; it must carry the start's conditions."""
    path = batch_dir / "batch.json"
    try:
        started = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--resume: {batch_dir} holds no batch (no batch.json)") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"--resume: {path} is unreadable: {exc}") from None
    if not (isinstance(started, dict) and isinstance(started.get("conditions"), dict)
            and isinstance(started.get("case_keys"), list)):
        raise UsageError(f"--resume: {path} records no measurement conditions (started by an older "
                         "run_batch.py): nothing proves its finished cases match this call; "
                         "start a new --batch-dir")
    return started


# ------------------------------------------------------------------ options and conditions

def check_args(args) -> None:
    """Checks of the command line alone (nothing read, nothing written)."""
    if args.devices is not None and args.gpus is not None:
        raise UsageError("--devices and --gpus are the same option; give one")
    if args.resume and args.batch_dir is None:
        raise UsageError("--resume needs --batch-dir")
    if args.switch is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", args.switch):
        raise UsageError(f"--switch is not a variable name: {args.switch!r}")
    explicit = args.devices if args.devices is not None else args.gpus
    if explicit is not None and not parse_device_list(explicit):
        raise UsageError(f"--devices has no device id: {explicit!r}")


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
    if args.share_device is None:
        args.share_device = calls[-1].get("share_device", started.get("share_device", 1))
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
        raise UsageError(f"--use-flagtune contradicts USE_FLAGTUNE={os.environ['USE_FLAGTUNE']!r} "
                         "in the environment; drop one of them")
    return {"USE_FLAGTUNE": "1"}


def check_conditions(started: Dict, now: Dict) -> None:
    """A --resume reuses finished cases only under the conditions they ran under."""
    diffs = conds.differences(started["conditions"], now)
    if diffs:
        raise UsageError("--resume: this call measures under other conditions than the batch "
                         f"(batch.json); nothing was run. Differences:\n  " + "\n  ".join(diffs)
                         + "\nResume with the batch's options and environment, or start a new --batch-dir")


# ------------------------------------------------------------------ run

def run(args) -> int:
    check_args(args)
    batch_dir = (args.batch_dir or Path(os.environ.get("ZL_RUNS_ROOT") or REPO_ROOT / "runs")
                 / f"batch_{datetime.now():%Y%m%d-%H%M%S}").resolve()
    # An existing directory is locked before it is read; a new one when it is first written.
    held = claim(batch_dir) if batch_dir.is_dir() and not args.list else None
    try:
        return run_claimed(args, batch_dir, held)
    finally:
        if held is not None:
            held.release()


def run_claimed(args, batch_dir: Path, held: Optional[locks.Lock]) -> int:
    started: Dict = {}
    if args.resume:
        started = load_started(batch_dir)
    elif not args.list:
        refuse_used(batch_dir)
    settle_options(args, started)
    if args.resume:
        check_resume_share(started, args.share_device)
    backend = get_backend(args.backend)
    run_script = Path(os.environ.get("ZL_RUN_PYTEST") or REPO_ROOT / "run_pytest.sh").resolve()
    if not run_script.is_file():
        raise UsageError(f"run script not found: {run_script}")
    shape = conds.shape_file_identity(args.shape_file)
    dtypes = " ".join(args.dtypes.replace(",", " ").split())
    common_env = flagtune_env(args.use_flagtune)
    roots = {repo: str(Path(root).resolve()) for repo, root in inv.repo_roots().items()}
    conditions = conds.collect(
        backend=backend.name, dtypes=dtypes, shape=shape,
        replay_root=str(args.replay_root.resolve()) if args.replay_root else "",
        switch=args.switch or "", use_flagtune=args.use_flagtune,
        case_env=inherited_env(common_env), roots=roots)
    if args.resume:
        check_conditions(started, conditions)

    # Side directories: one plain batch, or before/after of a switch screen.
    sides = [("", {})] if not args.switch else [(s, {args.switch: str(i)}) for i, s in enumerate(SIDES)]
    side_dir = {name: batch_dir / name if name else batch_dir for name, _ in sides}
    old = {name: read_rows(side_dir[name] / "ops_status.csv") if args.resume else {} for name, _ in sides}
    old_screen = read_screen_rows(batch_dir / "screen.tsv") if args.switch and args.resume else {}

    inventories = load_inventories()
    cases = select_cases(args, Selector(inventories), started.get("case_keys") if args.resume else None)
    missing_repo = sorted({c.repo for c in cases} - set(inv.repo_roots()))
    if missing_repo:
        raise UsageError(f"no checkout for repo(s) {missing_repo}")
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
    device_of = {(c.repo, c.run_name): d for d, cs in shards.items() for c in cs}
    if args.list:
        for c in cases:
            print(f"{c.repo}:{c.run_name}\tdevice={device_of[(c.repo, c.run_name)]}\t{c.test_file}::test_{c.op}")
        return EXIT_OK
    preflight_interpreter(backend.name)
    if held is None:
        batch_dir.mkdir(parents=True, exist_ok=True)
        held = claim(batch_dir)
        refuse_used(batch_dir)      # a batch that started here since the first look

    keys = [(c.repo, c.run_name) for c in cases]
    reused = reusable(cases, [n for n, _ in sides], side_dir, old, old_screen if args.switch else None)
    batch_id = f"{batch_dir.name}-{os.getpid()}-{int(time.time())}"
    now = datetime.now().isoformat(timespec="seconds")
    call = {"argv": sys.argv, "started": now, "batch_id": batch_id, "devices": devices,
            "reused": len(reused), "to_run": len(cases) - len(reused), "op_timeout_s": args.op_timeout,
            "share_device": args.share_device, "run_script": str(run_script)}
    record = dict(started) if started else {
        "argv": sys.argv, "backend": backend.name, "devices": devices, "cases": len(cases),
        "op_timeout_s": args.op_timeout, "dtypes": dtypes, "switch": args.switch or "",
        "run_script": str(run_script), "share_device": args.share_device, "started": now,
        "batch_id": batch_id, "roots": inv.repo_roots(), "conditions": conditions,
        "case_keys": [f"{r}:{n}" for r, n in keys]}
    record["reused"] = len(reused)
    record["calls"] = list(record.get("calls") or []) + [call]
    # batch.json first: a directory with tables always says what they were measured under
    atomic.write_json(batch_dir / "batch.json", record)
    tables = {}
    for name, _ in sides:
        base = {k: old[name][k] if k in reused else
                blank_row(c.repo, c.op, c.op_file, c.run_name, backend.name, device_of[k],
                          str(case_dir(side_dir[name], c))) for c, k in zip(cases, keys)}
        tables[name] = StatusTable(side_dir[name] / "ops_status.csv", keys, base)
        tables[name].write()
    screen = ScreenTable(batch_dir / "screen.tsv", keys, old_screen) if args.switch else None
    if args.resume:
        print(f"{LOG} resume: this call's conditions match the batch's start ({batch_dir / 'batch.json'})")
    todo = {d: [c for c in cs if (c.repo, c.run_name) not in reused] for d, cs in shards.items()}
    n_todo = sum(len(v) for v in todo.values())
    print(f"{LOG} backend={backend.name} {len(cases)} case(s), {len(reused)} reused, {n_todo} to run "
          f"on {len([d for d in todo if todo[d]])} device(s) {devices}  out={batch_dir}"
          + (f"  screen of {args.switch}: before=0 (record), after=1 (replay)" if args.switch else "")
          + (f"  {args.share_device} case(s) at a time per device" if args.share_device > 1 else ""))
    warn_shared(args.share_device)

    stop = threading.Event()
    guard = GroupGuard(args.kill_grace)
    runners = {}
    for name, extra in sides:
        replay = (args.replay_root.resolve() if args.replay_root else
                  side_dir[SIDES[0]] if name == SIDES[1] else None)
        runners[name] = CaseRunner(CaseConfig(
            batch_dir=side_dir[name], run_script=run_script, roots=roots, backend=backend,
            op_timeout=args.op_timeout, kill_grace=args.kill_grace, retries=args.retries,
            dtypes=dtypes, replay_root=replay, shape_file=shape["shape_file"], batch_id=batch_id,
            extra_env={**common_env, **extra}, device_share=args.share_device), guard, stop)
    t0 = time.monotonic()
    lock = threading.Lock()
    progress = {"done": 0, "spent": 0.0}
    worst_case = args.op_timeout * len(sides) + args.kill_grace + 5

    def may_start() -> bool:
        if stop.is_set():
            return False
        return args.budget_s is None or time.monotonic() - t0 + worst_case <= args.budget_s

    def run_side(name: str, c: inv.Entry, device: str, dt: Optional[str]) -> Dict[str, str]:
        key = (c.repo, c.run_name)
        tables[name].set(key, status="RUNNING", device=device, gpu=device)
        try:
            row, _ = runners[name].run(c, device, dtypes=dt)
        except Exception as exc:  # one case's harness error must not stop its device's shard
            row = blank_row(c.repo, c.op, c.op_file, c.run_name, backend.name, device,
                            str(case_dir(side_dir[name], c)), status="FAIL",
                            notes=f"reason=harness error {type(exc).__name__}: {exc}")
        tables[name].replace(key, row)
        return row

    def work(c: inv.Entry, device: str) -> None:
        row = run_side(sides[0][0], c, device, None)
        shown, verdict = row["status"], ""
        if screen is not None and row["status"] != "INTERRUPTED":
            # B measures what A measured: after a dtype fallback, without the restriction too
            dt = "" if "dtype_" in row["notes"] else dtypes
            if row["status"] == "PASS":
                row_b = run_side(SIDES[1], c, device, dt)
            else:
                row_b = blank_row(c.repo, c.op, c.op_file, c.run_name, backend.name, device,
                                  str(case_dir(side_dir[SIDES[1]], c)), status="NOT_RUN",
                                  notes=f"side before ended {row['status']}")
                tables[SIDES[1]].replace((c.repo, c.run_name), row_b)
            if row_b["status"] != "INTERRUPTED":
                srow = screen_row(row, row_b, dt)
                screen.set((c.repo, c.run_name), srow)
                verdict = f" {srow['verdict']}"
            shown = f"{row['status']}/{row_b['status']}"
            row = dict(row, elapsed_ms=str(int(row["elapsed_ms"] or 0) + int(row_b.get("elapsed_ms") or 0)))
        with lock:
            progress["done"] += 1
            progress["spent"] += int(row.get("elapsed_ms") or 0) / 1000.0
            done = progress["done"]
            active = max(1, len([d for d in todo if todo[d]])) * args.share_device
            eta = progress["spent"] / done * (n_todo - done) / active
            print(f"{LOG} ({done:>{len(str(n_todo))}}/{n_todo}) {shown:<11}{verdict} "
                  f"{int(row.get('elapsed_ms') or 0) / 1000:7.1f}s rows={row['rows_success']}/"
                  f"{row['rows_total']} {c.repo}:{c.run_name} device={device} ETA {eta / 60:.1f}min"
                  + (f"  {row['notes']}" if row.get("notes") else ""), flush=True)

    executor = LocalExecutor(args.share_device)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    interrupted = False
    try:
        executor.run(todo, work, may_start)
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        print(f"\n!!! {LOG} interrupted: killing running cases", file=sys.stderr, flush=True)
        guard.abort_all()
        executor.join()
    finally:
        signal.signal(signal.SIGTERM, previous)
        guard.close()
    for table in tables.values():
        for key in table.order:
            if table.get(key)["status"] == "RUNNING":   # a worker that never got to write its row
                table.set(key, status="INTERRUPTED", notes="interrupted")
    for exc in executor.errors:
        print(f"!!! {LOG} worker error: {exc!r}", file=sys.stderr)
    code = EXIT_OK
    for name, _ in sides:
        print(f"{LOG} ---- {name}" if name else f"{LOG} ----")
        code = max(code, finish(tables[name], side_dir[name], interrupted,
                                f"python run_batch.py --resume --batch-dir {batch_dir}"
                                + (f" --switch {args.switch}" if args.switch else "")))
    warn_shared(args.share_device)
    if screen is not None:
        verdicts = Counter(r["verdict"] for r in screen.rows.values())
        print(f"{LOG} screen of {args.switch}: " + ", ".join(f"{k}={v}" for k, v in sorted(verdicts.items()))
              + f" -> {batch_dir / 'screen.tsv'} (campaign.sh SCREEN=)")
    return EXIT_INTERRUPTED if interrupted else code


SHARED_WARNING = ("TIMINGS OF THIS BATCH ARE FUNCTIONAL ONLY: {n} cases shared each device "
                  "(--share-device {n}); statuses and screen verdicts hold, latencies and speedups "
                  "do not (identity device_share={n}, refused by every comparison)")


def warn_shared(share: int) -> None:
    if share > 1:
        print(f"!!! {LOG} " + SHARED_WARNING.format(n=share), flush=True)


def check_resume_share(started: Dict, share: int) -> None:
    """--resume keeps the batch's caliber: timing-valid (1) and shared (> 1) cases never mix in
    one ops_status.csv / summary.csv. A different N > 1 is fine: both are functional only."""
    before = started.get("share_device", 1)
    if not isinstance(before, int) or before < 1:
        raise UsageError(f"--resume: batch.json has share_device={before!r}, not an integer >= 1")
    if (before > 1) != (share > 1):
        raise UsageError(f"--resume: the batch was started with --share-device {before}, this call gives "
                         f"--share-device {share}; a batch is either timing-valid (1) or shared (> 1), never both")


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def finish(table: StatusTable, batch_dir: Path, interrupted: bool, resume: str) -> int:
    counts = table.counts()
    print(f"{LOG} status: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    reasons = Counter()
    for key in table.order:
        for part in table.get(key).get("notes", "").split(";"):
            if part.startswith("reason="):
                reasons[part[len("reason="):][:80]] += 1
    for reason, n in reasons.most_common(10):
        print(f"{LOG}   {n:>4} x {reason}")
    if any(batch_dir.glob("*/*/run.log")):
        r = subprocess.run([sys.executable, str(REPO_ROOT / "batch_summary.py"), str(batch_dir)],
                           capture_output=True, text=True)
        print((r.stdout or r.stderr).strip())
        # where each case's seconds went, from the plugins' own cost lines (issue 17)
        for line in write_batch_costs(batch_dir):
            print(f"{LOG} costs: {line}")
    print(f"{LOG} table: {batch_dir / 'ops_status.csv'}")
    if interrupted:
        return EXIT_INTERRUPTED
    left = sum(counts.get(s, 0) for s in UNFINISHED)
    if left:
        print(f"!!! {LOG} {left} case(s) not run; continue with: {resume}")
        return EXIT_UNFINISHED
    return EXIT_OK
