"""Running a planned batch: every case to run on its device, the tables after each, and the
closing summary. zl/batch/cli.py decides what runs (the Plan); this module runs it.

One BatchRun object holds what the workers share (tables, screen, runners, the stop flag,
the progress count), each piece with its own lock; `work(case, device)` is the callable an
executor (zl/batch/executor.py) calls per case.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set, Tuple

from zl.batch import inventory as inv
from zl.batch.case import TIMING_LOCKS, CaseConfig, CaseRunner, case_dir, measured_first, unrestricted
from zl.batch.executor import GroupGuard, LocalExecutor
from zl.batch.screen import (BASELINE_MISMATCH, ROUND_SIDE_RE, SIDES, ScreenTable, baseline_differences,
                             replays_before, screen_row)
from zl.batch.status import UNFINISHED, StatusTable, blank_row
from zl.childenv import (batch_case_base, bytecode_cache_dir, inherited, ships_bytecode,
                         with_bytecode_cache)
from zl.runlog.costs import write_batch_costs

REPO_ROOT = Path(__file__).resolve().parents[2]
EXIT_OK, EXIT_UNFINISHED, EXIT_INTERRUPTED = 0, 3, 130
LOG = "[batch]"
Key = Tuple[str, str]
SHARED_WARNING = ("TIMINGS OF THIS BATCH ARE FUNCTIONAL ONLY: {n} cases shared each device "
                  "(--share-device {n}); statuses and screen verdicts hold, latencies and speedups "
                  "do not (identity device_share={n}, refused by every comparison)")


def slots_per_device(args) -> int:
    """Cases at once per device: --share-device N (functional) or --overlap N (exclusive timing)."""
    return max(args.share_device, args.overlap)


def warn_shared(share: int) -> None:
    if share > 1:
        print(f"!!! {LOG} " + SHARED_WARNING.format(n=share), flush=True)


@dataclass
class Tables:
    """The batch's output tables for this call: ops_status.csv per side, screen.tsv of a screen."""
    status: Dict[str, StatusTable]
    screen: Optional[ScreenTable]
    reused: Set[Key]
    # side A rows linked from a --baseline (zl/batch/judge_first.py): that side is not run
    adopted: Dict[Key, Dict[str, str]] = field(default_factory=dict)


class Progress:
    """The `(done/total) ... rate ETA` count, shared by the workers. Rate and ETA come from the
    wall clock since the first case started, so cases that overlap (--overlap, --share-device,
    several devices) and cases that wait for a lock count as the batch actually moves."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic):
        self.total, self.done = total, 0
        self.clock = clock
        self.t0 = clock()
        self.lock = threading.Lock()

    def one_done(self, line: Callable[[int, float], str]) -> None:
        """Count a finished case and print `line(cases done, minutes left at the pace so far)`,
        under the lock, so the console's counts come in order."""
        with self.lock:
            self.done += 1
            print(line(self.done, self.eta_min()), flush=True)

    def rate_per_hour(self) -> float:
        wall = self.clock() - self.t0
        return self.done / wall * 3600 if wall > 0 else 0.0

    def eta_min(self) -> float:
        rate = self.rate_per_hour()
        return (self.total - self.done) / rate * 60 if rate > 0 else 0.0


class BatchRun:
    """One call's cases: `work` runs a case (both sides of a screen) and records it."""

    def __init__(self, plan, tables: Tables, todo: Dict[str, List[inv.Entry]], batch_id: str,
                 pycache: str = ""):
        self.plan = plan
        # the bytecode cache ("": none set here), one folder per side: a side's cases share
        # theirs, and no side reads bytecode another side wrote (compile caches are per side)
        self.pycache = pycache
        self.tables = tables
        self.todo = todo
        self.stop = threading.Event()
        self.guard = GroupGuard(plan.args.kill_grace)
        self.runners = {name: CaseRunner(self._config(name, extra, batch_id), self.guard, self.stop)
                        for name, extra in plan.sides}
        n_todo = sum(len(v) for v in todo.values())
        self.progress = Progress(n_todo)
        self.t0 = time.monotonic()
        # a case that starts now may end this late: both sides timed out, then the kill grace;
        # under --overlap with --budget-s each side may also be credited up to one --op-timeout
        # of lock waits (without a budget, lock_credit_s: up to overlap - 1 of them)
        per_side = plan.args.op_timeout * (2 if plan.args.overlap > 1 else 1)
        self.worst_case = per_side * len(plan.sides) + plan.args.kill_grace + 5
        self.budget_refused_at: Optional[float] = None   # seconds in, when --budget-s first held a case back

    def _config(self, name: str, extra: Dict[str, str], batch_id: str) -> CaseConfig:
        p, a = self.plan, self.plan.args
        replay = (a.replay_root.resolve() if a.replay_root else
                  p.side_dir(SIDES[0]) if replays_before(name) else None)
        return CaseConfig(
            batch_dir=p.side_dir(name), run_script=p.run_script, roots=p.roots, backend=p.backend,
            op_timeout=a.op_timeout, kill_grace=a.kill_grace, retries=a.retries, dtypes=p.dtypes,
            dtype_fallback=p.dtype_fallback,
            replay_root=replay, shape_file=p.shape_file, batch_id=batch_id,
            extra_env={**p.common_env, **extra}, device_share=a.share_device,
            device_overlap=a.overlap, timing_locks=p.batch_dir / TIMING_LOCKS,
            lock_credit_s=lock_credit_s(a.op_timeout, a.overlap, a.budget_s),
            base_env=with_bytecode_cache(batch_case_base({**p.common_env, **extra}),
                                         str(Path(self.pycache, name or "cases")) if self.pycache else ""))

    def may_start(self) -> bool:
        if self.stop.is_set():
            return False
        budget = self.plan.args.budget_s
        elapsed = time.monotonic() - self.t0
        if budget is None or elapsed + self.worst_case <= budget:
            return True
        if self.budget_refused_at is None:
            self.budget_refused_at = elapsed
        return False

    def _reserve(self) -> str:
        a = self.plan.args
        return (f"a case starts only if it can end within the budget, so each start reserves its worst "
                f"case, --op-timeout {a.op_timeout:g} s" + (" x 2 (lock waits credited under --overlap)"
                                                            if a.overlap > 1 else "")
                + f" x {len(self.plan.sides)} side(s) + --kill-grace {a.kill_grace:g} s + 5 s = "
                f"{self.worst_case:g} s")

    def budget_plan(self) -> str:
        """The line said before the first case: how long --budget-s lets cases start ("" without one).
        On an H100 a 480 s budget at --overlap 12 --op-timeout 90 started cases for 105 s."""
        budget = self.plan.args.budget_s
        if budget is None:
            return ""
        window = budget - self.worst_case
        head = (f"{LOG} --budget-s {budget:g}: cases start during its first {window:.0f} s; " if window >= 0
                else f"!!! {LOG} --budget-s {budget:g} is below one case's reserve: no case will start; ")
        return head + self._reserve()

    def budget_note(self) -> str:
        """Why --budget-s held cases back ("" when it did not), named because the reserve is
        large: a screen at --op-timeout 180 reserves 375 s, so a 462 s budget starts cases for 87 s."""
        if self.budget_refused_at is None:
            return ""
        return (f"--budget-s {self.plan.args.budget_s:g} reached after {self.budget_refused_at:.0f} s: "
                + self._reserve() + "; give a larger --budget-s or a smaller --op-timeout")

    def work(self, c: inv.Entry, device: str) -> None:
        """Run the case here on `device`, each side's row written as it starts and ends."""
        def started(name: str) -> None:
            self.tables.status[name].set((c.repo, c.run_name), status="RUNNING", device=device, gpu=device)

        def ended(name: str, row: Dict[str, str]) -> None:
            self.tables.status[name].replace((c.repo, c.run_name), row)

        names, key = [n for n, _ in self.plan.sides], (c.repo, c.run_name)
        given = {names[0]: self.tables.adopted[key]} if key in self.tables.adopted else {}
        rows, dt = run_sides(self.runners, names, c, device, self.plan.dtypes,
                             self.plan.backend.name, self.plan.side_dir, started, ended, given)
        self.record(c, device, rows, dt)

    def record(self, c: inv.Entry, device: str, rows: Dict[str, Dict[str, str]], dt: str) -> None:
        """After a case's rows are in the tables: a screen's verdict (read from the case
        directories in this batch directory) and the progress line."""
        names = [n for n, _ in self.plan.sides]
        row = rows[names[0]]
        shown, verdict = row["status"], ""
        if self.tables.screen is not None and len(rows) > 1:
            row_b = rows[names[1]]
            if row_b["status"] != "INTERRUPTED":
                srow = screen_row(row, row_b, dt)
                if ((c.repo, c.run_name) in self.tables.adopted and row_b["status"] == "PASS"
                        and baseline_differences(row["out_dir"], row_b["out_dir"])):
                    srow["verdict"] = BASELINE_MISMATCH     # judge_first.select names the fields
                self.tables.screen.set((c.repo, c.run_name), srow)
                verdict = f" {srow['verdict']}"
            shown = sides_shown(names, rows)
            row = dict(row, elapsed_ms=str(sum(int(r.get("elapsed_ms") or 0) for r in rows.values())))
        elapsed = int(row.get("elapsed_ms") or 0) / 1000
        total = self.progress.total
        self.progress.one_done(lambda done, eta_min: (
            f"{LOG} ({done:>{len(str(total))}}/{total}) {shown:<11}{verdict} "
            f"{elapsed:7.1f}s rows={row['rows_success']}/{row['rows_total']} {c.repo}:{c.run_name} "
            f"device={device} rate {self.progress.rate_per_hour():.0f}/h ETA {eta_min:.1f}min"
            + (f"  {row['notes']}" if row.get("notes") else "")))


def lock_credit_s(op_timeout: float, overlap: int, budget_s: Optional[float]) -> float:
    """The lock-wait seconds an overlapped case may be credited beyond --op-timeout: one per
    other case on its device (each holds the lock for at most its own timeout between waits),
    so a case is cut for its own time, as one case at a time is; with --budget-s, one
    --op-timeout, the reserve each start is charged (a case ends within the budget)."""
    if overlap <= 1:
        return 0.0
    return op_timeout * (1 if budget_s is not None else overlap - 1)


def sides_shown(names: List[str], rows: Dict[str, Dict[str, str]]) -> str:
    """A screen case's side statuses on its progress line: round 1's A/B (and C of --retune)
    joined by '/', rounds 2..R counted, e.g. `PASS/PASS +10 round sides PASS` or
    `PASS/PASS +10 round sides: 9 PASS 1 FAIL` (one word per side would be 2R + 1 words); a
    round side that did not run after an interruption counts as PENDING, as its table says."""
    first = "/".join(rows[n]["status"] for n in names if n in rows and not ROUND_SIDE_RE.match(n))
    later = Counter(rows[n]["status"] if n in rows else "PENDING" for n in names if ROUND_SIDE_RE.match(n))
    n = sum(later.values())
    if not n:
        return first
    counts = later.most_common()
    if len(counts) == 1:
        return f"{first} +{n} round sides {counts[0][0]}"
    return f"{first} +{n} round sides: " + " ".join(f"{c} {s}" for s, c in counts)


def run_sides(runners: Dict[str, CaseRunner], names: List[str], c: inv.Entry, device: str, dtypes: str,
              backend: str, side_dir: Callable[[str], Path],
              started: Callable[[str], None] = lambda name: None,
              ended: Callable[[str, Dict[str, str]], None] = lambda name, row: None,
              given: Optional[Dict[str, Dict[str, str]]] = None) -> Tuple[Dict[str, Dict[str, str]], str]:
    """One case on `device`, every side, in the runners' directories: (row per side run, the
    dtypes side B measured). The executors' one case function: the local one calls it in a
    worker thread, the Ray one in a task on the case's node. In a screen, side B, then side C
    of --retune, runs after a PASS of side A (else its row is NOT_RUN) and measures what A
    measured: after a dtype fallback, without the restriction too (under --dtype-fallback
    first, with A's restriction, substituted alike; the dtypes returned are those A measured,
    the screen row's `dtypes`, so partition.py hands a campaign a dtype the op takes); the
    sides of rounds 2..R run only after a PASS of both sides of round 1 (a failing pair would
    fail R - 1 more times). An interrupted side ends the case (the sides after it stay
    PENDING, rerun by --resume)."""
    def side(name: str, dt: Optional[str]) -> Dict[str, str]:
        if given and name in given:       # a side already measured (a --baseline's side A)
            ended(name, given[name])
            return given[name]
        started(name)
        try:
            row, _ = runners[name].run(c, device, dtypes=dt)
        except Exception as exc:  # one case's harness error must not stop its device's shard
            row = blank_row(c.repo, c.op, c.op_file, c.run_name, backend, device,
                            str(case_dir(side_dir(name), c)), status="FAIL",
                            notes=f"reason=harness error {type(exc).__name__}: {exc}")
        ended(name, row)
        return row

    rows = {names[0]: side(names[0], None)}
    row_a = rows[names[0]]
    if len(names) == 1 or row_a["status"] == "INTERRUPTED":
        return rows, dtypes
    dt = "" if unrestricted(row_a["notes"]) else dtypes
    for name in names[1:]:
        # a round side (2..R) needs round 1 whole: both before and after passed
        needs = [names[0]] + ([SIDES[1]] if ROUND_SIDE_RE.match(name) else [])
        failed = next((n for n in needs if rows[n]["status"] != "PASS"), None)
        if failed is None:
            rows[name] = side(name, dt)
            if rows[name]["status"] == "INTERRUPTED":
                break
        else:
            rows[name] = blank_row(c.repo, c.op, c.op_file, c.run_name, backend, device,
                                   str(case_dir(side_dir(name), c)), status="NOT_RUN",
                                   notes=f"side {failed} ended {rows[failed]['status']}")
            ended(name, rows[name])
    return rows, measured_first(row_a["notes"]) or dt


def wants_bytecode_cache(plan) -> bool:
    """--bytecode-cache: shared, off, or auto: shared when the cases' torch (batch.json's
    toolchain) ships no bytecode for their Python."""
    mode = plan.args.bytecode_cache
    if mode != "auto":
        return mode == "shared"
    tool = plan.conditions.get("toolchain") or {}
    torch_dir = (tool.get("torch") or {}).get("path") or ""
    return bool(torch_dir) and not ships_bytecode(torch_dir, str(tool.get("python") or ""))


def shared_bytecode_cache() -> str:
    """The bytecode cache this call's local cases share (zl.childenv), named on the console;
    "" (each case compiles its own) when the user set PYTHONPYCACHEPREFIX or TMPDIR refuses it."""
    try:
        path = bytecode_cache_dir(inherited(), os.getpid())
    except OSError as exc:
        print(f"!!! {LOG} no shared bytecode cache in TMPDIR ({exc}): every case compiles its "
              "Python modules from source", flush=True)
        return ""
    if path:
        print(f"{LOG} bytecode cache shared by this call's cases: {path} (PYTHONPYCACHEPREFIX, "
              "removed at the end)", flush=True)
    return path


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def execute(plan, tables: Tables, todo: Dict[str, List[inv.Entry]], batch_id: str,
            cluster=None) -> Tuple[bool, str]:
    """Run `todo` (device -> cases) here, or on `cluster` (zl/batch/ray_executor.py's
    connection) -> (True when Ctrl-C or SIGTERM stopped it, why --budget-s held cases back or
    ""). An interruption kills the running cases with their process groups (Ray tasks
    cancelled), and every row still RUNNING reads INTERRUPTED."""
    pycache = shared_bytecode_cache() if cluster is None and wants_bytecode_cache(plan) else ""
    batch = BatchRun(plan, tables, todo, batch_id, pycache)
    said = batch.budget_plan()
    if said:
        print(said, flush=True)
    executor = cluster.executor(batch) if cluster is not None else LocalExecutor(slots_per_device(plan.args))
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    interrupted = False
    try:
        executor.run(todo, batch.work, batch.may_start)
    except KeyboardInterrupt:
        interrupted = True
        batch.stop.set()
        print(f"\n!!! {LOG} interrupted: killing running cases", file=sys.stderr, flush=True)
        batch.guard.abort_all()
        executor.join()
    finally:
        signal.signal(signal.SIGTERM, previous)
        batch.guard.close()
        if pycache:
            shutil.rmtree(pycache, ignore_errors=True)
    for table in tables.status.values():
        for key in table.order:
            if table.get(key)["status"] == "RUNNING":   # a worker that never got to write its row
                table.set(key, status="INTERRUPTED", notes="interrupted")
    for exc in executor.errors:
        print(f"!!! {LOG} worker error: {exc!r}", file=sys.stderr)
    return interrupted, batch.budget_note()


def conclude(plan, tables: Tables, interrupted: bool, budget_note: str = "") -> int:
    """The closing summary of every side (and the screen); the batch's exit code. A side with
    cases not run says why when --budget-s held them back (`budget_note`)."""
    args = plan.args
    code = EXIT_OK
    resume = (f"python run_batch.py --resume --batch-dir {plan.batch_dir}"
              + (f" --switch {args.switch}" if args.switch else ""))
    for name, _ in plan.sides:
        print(f"{LOG} ---- {name}" if name else f"{LOG} ----")
        code = max(code, finish(tables.status[name], plan.side_dir(name), interrupted, resume, budget_note))
    warn_shared(args.share_device)
    if tables.screen is not None:
        verdicts = Counter(r["verdict"] for r in tables.screen.rows.values())
        print(f"{LOG} screen of {args.switch}: " + ", ".join(f"{k}={v}" for k, v in sorted(verdicts.items()))
              + f" -> {plan.batch_dir / 'screen.tsv'} (campaign.sh SCREEN=)")
    return EXIT_INTERRUPTED if interrupted else code


def finish(table: StatusTable, batch_dir: Path, interrupted: bool, resume: str, budget_note: str = "") -> int:
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
        # where each case's seconds went, from the plugins' own cost lines
        for line in write_batch_costs(batch_dir):
            print(f"{LOG} costs: {line}")
    print(f"{LOG} table: {batch_dir / 'ops_status.csv'}")
    if interrupted:
        return EXIT_INTERRUPTED
    left = sum(counts.get(s, 0) for s in UNFINISHED)
    if left:
        if budget_note:
            print(f"!!! {LOG} {budget_note}")
        print(f"!!! {LOG} {left} case(s) not run; continue with: {resume}")
        return EXIT_UNFINISHED
    return EXIT_OK
