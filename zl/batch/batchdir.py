"""The batch directory: one run_batch.py at a time in it, whether it already holds a batch,
batch.json (the start's conditions and cases, one entry per call) and the tables a call
starts from (what a --resume reuses)."""

from __future__ import annotations

import csv
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Optional

from zl import atomic, locks
from zl.batch import inventory as inv
from zl.batch.case import COMPLETE_MARK, case_dir
from zl.batch.execute import Tables
from zl.batch.screen import SIDES, ScreenTable, read_screen_rows
from zl.batch.status import COMPLETE, StatusFileError, StatusTable, blank_row, read_rows


class BatchDirError(ValueError):
    """The batch directory is in use, is no directory, already holds a batch, or holds none to
    resume, or its record (batch.json, judge_first.json) cannot be read as written (exit 2)."""


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
        raise BatchDirError(f"--batch-dir {batch_dir} is in use by another run_batch.py ({who}); "
                            "wait for it to end, or give another --batch-dir") from None
    except OSError as exc:
        raise BatchDirError(f"--batch-dir {batch_dir}: cannot lock {batch_dir / BATCH_LOCK}: "
                            f"{exc.strerror or exc}") from None


def refuse_not_dir(batch_dir: Path) -> None:
    """A --batch-dir that exists as something else than a directory (a file) is refused."""
    if batch_dir.exists() and not batch_dir.is_dir():
        raise BatchDirError(f"--batch-dir {batch_dir} exists and is not a directory; give a directory")


def make(batch_dir: Path) -> None:
    """Create the batch directory (and its parents): BatchDirError, naming it, when it is a
    file, lies under a file, or cannot be created."""
    refuse_not_dir(batch_dir)
    try:
        batch_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BatchDirError(f"--batch-dir {batch_dir}: cannot create it: {exc.strerror or exc}") from None


def refuse_used(batch_dir: Path) -> None:
    found = [m for m in USED_MARKS if (batch_dir / m).exists()]
    if found:
        raise BatchDirError(f"--batch-dir {batch_dir} already holds a batch ({', '.join(found)}); "
                            "continue it with --resume, or give a new directory")


def load_started(batch_dir: Path) -> Dict:
    """batch.json of the batch a --resume continues; it must carry the start's conditions."""
    path = batch_dir / "batch.json"
    try:
        started = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BatchDirError(f"--resume: {batch_dir} holds no batch (no batch.json)") from None
    except (OSError, ValueError) as exc:
        raise BatchDirError(f"--resume: {path} is unreadable: {exc}") from None
    if not (isinstance(started, dict) and isinstance(started.get("conditions"), dict)
            and isinstance(started.get("case_keys"), list)):
        raise BatchDirError(f"--resume: {path} records no measurement conditions (started by an older "
                            "run_batch.py): nothing proves its finished cases match this call; "
                            "start a new --batch-dir")
    check_started(path, started, "--resume")
    return started


class DirLock:
    """The batch directory's lock, taken once (see `claim`), released by `release`."""

    def __init__(self, batch_dir: Path):
        self.batch_dir = batch_dir
        self.lock: Optional[locks.Lock] = None

    def take(self) -> None:
        if self.lock is None:
            self.lock = claim(self.batch_dir)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None


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


# ------------------------------------------------------------------ the batch's files

def open_tables(plan) -> Tables:
    """ops_status.csv per side, every case's row from the start (reused rows as they were,
    the rest PENDING), and screen.tsv's table of a screen."""
    resume = plan.args.resume
    names = [n for n, _ in plan.sides]
    old = {n: read_rows(plan.side_dir(n) / "ops_status.csv") if resume else {} for n in names}
    try:
        old_screen = read_screen_rows(plan.batch_dir / "screen.tsv") if plan.args.switch and resume else {}
    except (UnicodeDecodeError, csv.Error) as exc:
        raise StatusFileError(f"{plan.batch_dir / 'screen.tsv'}: not UTF-8 TSV text ({exc}): "
                              "a damaged table") from None
    reused = reusable(plan.cases, names, {n: plan.side_dir(n) for n in names}, old,
                      old_screen if plan.args.switch else None)
    where = plan.device_of()
    keys = plan.keys
    status = {}
    for n in names:
        base = {k: old[n][k] if k in reused else
                blank_row(c.repo, c.op, c.op_file, c.run_name, plan.backend.name, where[k],
                          str(case_dir(plan.side_dir(n), c))) for c, k in zip(plan.cases, keys)}
        status[n] = StatusTable(plan.side_dir(n) / "ops_status.csv", keys, base)
    screen = ScreenTable(plan.batch_dir / "screen.tsv", keys, old_screen) if plan.args.switch else None
    return Tables(status=status, screen=screen, reused=reused)


def write_batch_record(plan, reused: int, batch_id: str, extra: Optional[Dict] = None) -> None:
    """batch.json: the start (conditions, cases, the first call's settings) kept as written,
    and one entry per call (with `extra`: --executor ray's node record). Written before the
    tables, so a directory with tables always says what they were measured under. A call
    that warns (MIXED HARDWARE) adds its line to the batch's `warnings`, kept for good."""
    args = plan.args
    now = datetime.now().isoformat(timespec="seconds")
    call = {"argv": sys.argv, "started": now, "batch_id": batch_id, "devices": plan.devices,
            "reused": reused, "to_run": len(plan.cases) - reused, "op_timeout_s": args.op_timeout,
            "share_device": args.share_device, "overlap": args.overlap, "run_script": str(plan.run_script),
            "executor": args.executor, "ray_address": args.ray_address or ""}
    record = dict(plan.started) if plan.started else {
        "argv": sys.argv, "backend": plan.backend.name, "devices": plan.devices, "cases": len(plan.cases),
        "op_timeout_s": args.op_timeout, "dtypes": plan.dtypes, "switch": args.switch or "",
        "run_script": str(plan.run_script), "share_device": args.share_device, "overlap": args.overlap, "started": now,
        "judge": bool(getattr(args, "judge", False)),
        "batch_id": batch_id, "roots": inv.repo_roots(), "conditions": plan.conditions,
        "case_keys": [f"{r}:{n}" for r, n in plan.keys]}
    call.update(extra or {})
    record["reused"] = reused
    record["calls"] = list(record.get("calls") or []) + [call]
    warning = ((extra or {}).get("ray") or {}).get("warning")
    if warning and warning not in record.get("warnings", []):
        record["warnings"] = list(record.get("warnings") or []) + [warning]
    atomic.write_json(plan.batch_dir / "batch.json", record)


# ------------------------------------------------------------------ a record's field types

# What each kind of field must hold: (how a message names it, the test).
KINDS = {
    "count": ("an integer >= 1", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1),
    "size": ("an integer >= 0", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
    "seconds": ("a number >= 0", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                and 0 <= v < float("inf")),
    "text": ("a string", lambda v: isinstance(v, str)),
    "flag": ("true or false", lambda v: isinstance(v, bool)),
    "object": ("an object", lambda v: isinstance(v, dict)),
    "texts": ("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "objects": ("a list of objects", lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v)),
    "trees": ("an object of objects",
              lambda v: isinstance(v, dict) and all(isinstance(x, dict) for x in v.values())),
}
# batch.json fields a --resume reads; a field left out takes its default, and null reads as
# left out where the code has always read it so (OR_NULL). Any other value is refused, naming
# the field and the file: a record edited by hand or by another tool is never half-read.
STARTED_FIELDS = {"case_keys": "texts", "calls": "objects", "share_device": "count", "overlap": "count",
                  "judge": "flag", "warnings": "texts"}
CONDITION_FIELDS = {"backend": "text", "dtypes": "text", "dtype_fallback": "text", "shape_file": "text",
                    "replay_root": "text", "switch": "text", "use_flagtune": "flag", "retune": "flag",
                    "rounds": "count", "device": "object", "environment": "object",
                    "compiler_env": "object", "toolchain": "object", "flaggems": "trees"}
CALL_FIELDS = {"share_device": "count", "ray": "object"}
TREE_FIELDS = {"changed": "texts", "changed_total": "size"}
DEVICE_FIELDS = {"models": "texts"}
OR_NULL = ("calls", "warnings", "backend", "switch", "replay_root", "device", "ray", "flaggems", "models")


def check_started(path: Path, started: Dict, label: str) -> None:
    """BatchDirError unless every field of batch.json (`started`, read from `path`) that a
    --resume or a --baseline reads has its kind; `label` starts the message."""
    check_fields(path, started, STARTED_FIELDS, label)
    cond = started.get("conditions") or {}
    check_fields(path, cond, CONDITION_FIELDS, label, "conditions.")
    check_fields(path, cond.get("device") or {}, DEVICE_FIELDS, label, "conditions.device.")
    for i, call in enumerate(started.get("calls") or []):
        check_fields(path, call, CALL_FIELDS, label, f"calls[{i}].")
        check_fields(path, call.get("ray") or {}, {"device": "object"}, label, f"calls[{i}].ray.")
    for repo, tree in (cond.get("flaggems") or {}).items():
        check_fields(path, tree, TREE_FIELDS, label, f"conditions.flaggems.{repo}.")


def check_fields(path: Path, record: Dict, fields: Dict[str, str], label: str, prefix: str = "",
                 required: tuple = (), nullable: tuple = OR_NULL) -> None:
    """BatchDirError (exit 2) naming `path` and the first field of `fields` present in `record`
    (or one of `required`, missing) whose value is not of its kind (KINDS); null passes for a
    field of `nullable`, which the reader takes as left out."""
    for name, kind in fields.items():
        if name not in record:
            if name in required:
                raise BatchDirError(f"{label}: {path}: {prefix}{name} is missing (a damaged record)")
            continue
        value = record[name]
        if value is None and name in nullable:
            continue
        what, ok = KINDS[kind]
        if not ok(value):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            raise BatchDirError(f"{label}: {path}: {prefix}{name} is {shown}, not {what} (a damaged "
                                "record, or not one run_batch.py wrote); nothing was run")
