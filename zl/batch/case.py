"""One case of a batch: run_pytest.sh in its own process group, with timeout, retries and
the two dtype fallbacks, into `<batch>/<repo>/<run_name>/` (exactly a single run's layout).

Rules, each from the batch design:
- `--op-timeout` kills the whole group (TERM, then KILL after the grace) and records TIMEOUT
  without a retry: a hang repeats, and a retry would cost another full timeout.
- pytest rc 1 and signal deaths retry up to `retries` times, stopping early when the same rc
  repeats (a deterministic failure). Every earlier attempt's log is kept as run.attempt<N>.log.
- With `dtypes`, upstream's "can't be supported by this op" reruns without the restriction
  (`dtype_fallback`, policy `all`); any other failure with zero rows gets one unrestricted last
  try (`dtype_rescue`: a torch baseline that cannot build the restricted dtype fails differently).
  Under `--dtype-fallback first` (ZL_DTYPE_FALLBACK=first in every attempt) upstream no longer
  refuses: the run measures the op's first declared dtype and its DTYPE_FALLBACK line becomes
  the note `dtype_fallback=first:<dtype>`, with no rerun.
- Runtime skipif/xfail with no rows is SKIP: upstream itself declares no signal there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from zl import atomic
from zl.childenv import batch_case_base, batch_case_environ
from zl.flaggems import UNSUPPORTED_DTYPE
from zl.batch.executor import GroupGuard, kill_group
from zl.batch.inventory import Entry
from zl.batch.status import blank_row, join_notes, note_value
from zl.markers import CELL_TIMEOUT, COUNTED, DTYPE_FALLBACK, format_marker
from zl.runlog.caliber import caliber_of
from zl.runlog.parse import RunLogError, read_run_log
from zl.timing.exclusive import is_waiting, waited_s

SKIP_RE = re.compile(r"(\d+) (skipped|xfailed)\b")
PREFLIGHT_RE = re.compile(r"PREFLIGHT_FAILED check=(\S+)")
FIRST_DTYPE_RE = re.compile(rf"(?:^|\s){DTYPE_FALLBACK} op=\S* asked=\S* measured=(\S+)", re.M)
COMPLETE_MARK = ".complete"
# the per-device timing lock files of an --overlap batch, under the batch directory
TIMING_LOCKS = ".timing-locks"


@dataclass
class CaseConfig:
    batch_dir: Path
    run_script: Path
    roots: Dict[str, str]               # repo -> FlagGems checkout
    backend: object                     # zl.backends DeviceBackend
    op_timeout: float
    kill_grace: float = 10.0
    retries: int = 2
    dtypes: str = ""
    dtype_fallback: str = "all"         # ZL_DTYPE_FALLBACK of every attempt (run_batch.py --dtype-fallback)
    replay_root: Optional[Path] = None
    shape_file: str = ""
    batch_id: str = ""
    extra_env: Dict[str, str] = field(default_factory=dict)
    device_share: int = 1               # cases sharing one device at once (> 1: functional only)
    device_overlap: int = 1             # cases overlapping on one device, timing exclusive (> 1)
    timing_locks: Optional[Path] = None  # directory of the per-device timing lock files
    # --overlap: the most lock-wait seconds credited to --op-timeout (0: one --op-timeout).
    # Capped at one timeout, 5 of the 9 TIMEOUTs of an overlap-12 screen on an H100 were killed
    # still waiting for the lock (waited at least 79-98 s of 120 s): contention, not a slow case.
    lock_credit_s: float = 0.0
    # the environment every case starts from (zl.childenv.batch_case_base on the batch's host);
    # None: this process's. A Ray task gets the driver's, so the cases measure under the
    # conditions batch.json recorded, whatever environment the node's Ray worker has.
    base_env: Optional[Dict[str, str]] = None


@dataclass
class Attempt:
    rc: int
    timed_out: bool
    interrupted: bool
    leftover: bool
    lock_waited_s: float = 0.0      # credited to --op-timeout under --overlap (at a timeout)
    lock_wait_cut: bool = False     # killed while waiting for the timing lock (at a timeout)


def _clean(text: str, limit: int = 160) -> str:
    text = " ".join(text.replace(";", ",").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def timing_lock_file(locks: Optional[Path], device: str) -> Path:
    """The lock every overlapped case on `device` takes around each do_bench call."""
    if locks is None:
        raise ValueError("--overlap > 1 needs the batch's timing lock directory")
    locks.mkdir(parents=True, exist_ok=True)
    return locks / f"device-{device}.lock"


def first_dtypes(text: str) -> str:
    """The dtypes `--dtype-fallback first` measured in place of refused ones, from the
    DTYPE_FALLBACK lines of a run's log: '+'-joined, first seen first ("" when none)."""
    return "+".join(dict.fromkeys(FIRST_DTYPE_RE.findall(text)))


def measured_first(notes: str) -> str:
    """The dtypes a case's `dtype_fallback=first:<a+b>` note names, space separated ("" when none)."""
    return note_value(notes, "dtype_fallback").partition("first:")[2].replace("+", " ")


def unrestricted(notes: str) -> bool:
    """Whether a case's final attempt ran without its --dtypes (`dtype_fallback` of policy
    `all`, or `dtype_rescue`); `dtype_fallback=first:<dtype>` ran with them."""
    return any(p == "dtype_fallback" or p.startswith("dtype_rescue") for p in (notes or "").split(";"))


def case_dir(batch_dir: Path, e: Entry) -> Path:
    return Path(batch_dir) / e.repo / e.run_name


class CaseRunner:
    def __init__(self, cfg: CaseConfig, guard: GroupGuard, stop):
        self.cfg = cfg
        self.guard = guard
        self.stop = stop          # threading.Event: abort the running attempt, start nothing

    # ------------------------------------------------------------------ environment
    def env(self, e: Entry, device: str, out_dir: Path, dtypes: str, replay: str) -> Dict[str, str]:
        """The case's run_pytest.sh variables over the batch's base (zl.childenv)."""
        root = self.cfg.roots[e.repo]
        values = {
            "TEST_NODE": e.node(root), "FLAGGEMS_DIR": str(Path(root).resolve()),
            "OUT_DIR": str(out_dir), "ZL_BACKEND": self.cfg.backend.name, "ZL_DEVICE": device,
            "DTYPES": dtypes, "FLAGGEMS_PERF_COLOR": "never", "NO_COLOR": "1",
            "ZL_BATCH_ID": self.cfg.batch_id,
        }
        if self.cfg.dtype_fallback != "all":   # recorded in the identity (dtype_fallback, caliber)
            values["ZL_DTYPE_FALLBACK"] = self.cfg.dtype_fallback
        if self.cfg.device_share > 1:   # recorded in the identity, so no report trusts the timing
            values["ZL_DEVICE_SHARE"] = str(self.cfg.device_share)
        if self.cfg.device_overlap > 1:  # both sides of a screen take one lock per device
            values["ZL_DEVICE_OVERLAP"] = str(self.cfg.device_overlap)
            values["ZL_TIMING_LOCK"] = str(timing_lock_file(self.cfg.timing_locks, device))
        if self.cfg.shape_file:
            values["SHAPE_FILE"] = self.cfg.shape_file
        if replay:
            values["REPLAY_FROM"] = replay
        base = self.cfg.base_env if self.cfg.base_env is not None else batch_case_base(self.cfg.extra_env)
        return batch_case_environ(self.cfg.backend, device, base, values)

    def console_path(self, e: Entry) -> Path:
        return Path(self.cfg.batch_dir) / "console" / e.repo / f"{e.run_name}.log"

    # ------------------------------------------------------------------ one attempt
    def attempt(self, e: Entry, device: str, out_dir: Path, dtypes: str, replay: str, n: int) -> Attempt:
        console = self.console_path(e)
        console.parent.mkdir(parents=True, exist_ok=True)
        with open(console, "a", encoding="utf-8") as fh:
            fh.write(f"===== attempt {n} device={device} dtypes={dtypes or '<all>'}\n")
            fh.flush()
            proc = self.guard.spawn(["bash", str(self.cfg.run_script)], cwd=str(self.cfg.batch_dir),
                                    env=self.env(e, device, out_dir, dtypes, replay),
                                    stdin=subprocess.DEVNULL, stdout=fh, stderr=fh)
        deadline = time.monotonic() + self.cfg.op_timeout
        credit = 0.0        # --overlap: the seconds this attempt waited for the timing lock
        cap = self.cfg.lock_credit_s or self.cfg.op_timeout
        timed_out = interrupted = cut = False
        while proc.poll() is None:
            if self.stop.is_set():
                interrupted = True
            elif time.monotonic() >= deadline + credit:
                if self.cfg.device_overlap > 1:
                    credit = min(cap, waited_s(out_dir))
                timed_out = time.monotonic() >= deadline + credit
                cut = timed_out and self.cfg.device_overlap > 1 and is_waiting(out_dir)
            if timed_out or interrupted:
                kill_group(proc.pid, proc, self.cfg.kill_grace)
                break
            time.sleep(0.1)
        leftover = self.guard.release(proc)
        rc = proc.returncode
        rc = 128 - rc if rc is not None and rc < 0 else rc
        if timed_out:
            rc = 124
            with open(out_dir / "run.log", "a", encoding="utf-8") as fh:
                fh.write("!!! " + format_marker(CELL_TIMEOUT, op=e.op, run_name=e.run_name,
                                                timeout_s=f"{self.cfg.op_timeout:g}") + "\n")
        return Attempt(rc=rc, timed_out=timed_out, interrupted=interrupted, leftover=leftover,
                       lock_waited_s=credit, lock_wait_cut=cut)

    # ------------------------------------------------------------------ reading the result
    def classify(self, e: Entry, out_dir: Path, rc: int, timed_out: bool) -> Dict[str, str]:
        try:
            parsed = read_run_log(out_dir)
        except RunLogError:
            parsed = None
        rows = parsed.rows if parsed else []
        ok = sum(1 for r in rows if r.row_status == "SUCCESS")
        m = SKIP_RE.findall(parsed.final_line) if parsed else []
        skipped = sum(int(n) for n, _ in m)
        notes = []
        if parsed:
            notes += [f"{k}={parsed.markers.get(k, 0)}" for k in COUNTED if parsed.markers.get(k, 0)]
        if skipped:
            notes.append(f"skipped={skipped}")
        if timed_out:
            status = "TIMEOUT"
            notes.append(f"timeout_s={self.cfg.op_timeout:g}")
        elif rc == 0:
            status = "PASS" if ok else ("SKIP" if skipped else "NO_ROWS")
        else:
            status = "FAIL"
        if status in ("FAIL", "NO_ROWS", "PASS") and parsed and parsed.n_failed:
            notes.append(f"failed_tests={parsed.n_failed}")
        if status == "FAIL":
            notes.append("reason=" + _clean(self.failure_reason(e, out_dir, parsed, rc)))
        return {"status": status, "return_code": str(rc), "rows_total": str(len(rows)),
                "rows_success": str(ok), "notes": join_notes(*notes)}

    def failure_reason(self, e: Entry, out_dir: Path, parsed, rc: int) -> str:
        text = self.log_text(e, out_dir)
        pf = PREFLIGHT_RE.search(text)
        if pf:
            return f"preflight {pf.group(1)}"
        if UNSUPPORTED_DTYPE in text:
            return UNSUPPORTED_DTYPE
        if parsed is not None:
            ft = parsed.failure_text(limit=1)
            if ft:
                return ft.replace(f"{Path(self.cfg.roots[e.repo]).resolve()}/benchmark/", "")
        bad = [ln for ln in text.splitlines() if ln.startswith("!!!")]
        if bad:
            return bad[-1][4:]
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("=====")]
        return f"rc={rc}: {lines[-1]}" if lines else f"rc={rc}"

    @staticmethod
    def final_log(out_dir: Path) -> str:
        """The final attempt's run.log ("" when unreadable); earlier ones are run.attempt<N>.log."""
        try:
            return (out_dir / "run.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def log_text(self, e: Entry, out_dir: Path) -> str:
        parts = []
        for p in (out_dir / "run.log", self.console_path(e)):
            try:
                parts.append(p.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                pass
        return "\n".join(parts)

    # ------------------------------------------------------------------ the case
    def run(self, e: Entry, device: str, dtypes: Optional[str] = None) -> Tuple[Dict[str, str], bool]:
        """(status row, interrupted); `dtypes` overrides the configured restriction (None = keep).
        The case directory is wiped first: a killed run's stale IR or autotune records must
        never mix into this one's."""
        cfg = self.cfg
        out_dir = case_dir(cfg.batch_dir, e)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        out_dir.mkdir(parents=True)
        console = self.console_path(e)
        if console.exists():
            console.unlink()
        row = blank_row(e.repo, e.op, e.op_file, e.run_name, cfg.backend.name, device, str(out_dir))
        replay = ""
        if cfg.replay_root is not None:
            src = Path(cfg.replay_root) / e.repo / e.run_name
            if not src.is_dir():
                row.update(status="FAIL", return_code="", elapsed_ms="0", rows_total="0",
                           rows_success="0", notes=f"reason=no replay source {src}")
                return row, False
            replay = str(src.resolve())
        t0 = time.monotonic()
        restrict = cfg.dtypes if dtypes is None else dtypes
        dtypes, notes, rcs = restrict, [], []
        phase_rcs: List[int] = []
        fell_back = False
        retries = 0
        n = 0
        leftovers = 0
        while True:
            n += 1
            if n > 1:
                self._archive(out_dir, n - 1)
            a = self.attempt(e, device, out_dir, dtypes, replay, n)
            leftovers += a.leftover
            rcs.append(a.rc)
            phase_rcs.append(a.rc)
            if a.interrupted:
                row.update(status="INTERRUPTED", return_code=str(a.rc),
                           elapsed_ms=str(int((time.monotonic() - t0) * 1000)), notes="interrupted")
                return row, True
            if a.timed_out or a.rc == 0:
                break
            text = self.log_text(e, out_dir)
            if dtypes and not fell_back and UNSUPPORTED_DTYPE in text:
                fell_back, dtypes, phase_rcs = True, "", []
                notes.append("dtype_fallback")
                continue
            retryable = a.rc == 1 or a.rc >= 128
            repeated = len(phase_rcs) >= 2 and phase_rcs[-1] == phase_rcs[-2]
            if retryable and retries < cfg.retries and not repeated:
                retries += 1
                continue
            break
        result = self.classify(e, out_dir, rcs[-1], a.timed_out)
        if (restrict and not fell_back and not a.timed_out
                and result["status"] in ("FAIL", "NO_ROWS") and result["rows_success"] == "0"):
            first = result["notes"].split("reason=", 1)[-1] if "reason=" in result["notes"] else result["status"]
            notes.append(f"dtype_rescue(first: {_clean(first, 60)})")
            n += 1
            self._archive(out_dir, n - 1)
            a = self.attempt(e, device, out_dir, "", replay, n)
            rcs.append(a.rc)
            if a.interrupted:
                row.update(status="INTERRUPTED", return_code=str(a.rc), notes="interrupted")
                return row, True
            result = self.classify(e, out_dir, a.rc, a.timed_out)
        measured = first_dtypes(self.final_log(out_dir)) if cfg.dtype_fallback == "first" else ""
        if measured:
            notes.append(f"dtype_fallback=first:{measured}")
        if a.timed_out and a.lock_waited_s:
            notes.append(f"lock_waited_s={a.lock_waited_s:.0f}")
        if a.timed_out and a.lock_wait_cut:
            notes.append("lock_wait_cut")
        if len(rcs) > 1:
            notes.append("rc=" + "->".join(map(str, rcs)))
        if leftovers:
            notes.append(f"leftover_processes_killed={leftovers}")
        if cfg.device_share > 1:
            notes.append(f"shared_device={cfg.device_share}")
        if cfg.device_overlap > 1:
            notes.append(f"overlap={cfg.device_overlap}")
        row.update(result)
        row["notes"] = join_notes(result["notes"], *notes)
        row["elapsed_ms"] = str(int((time.monotonic() - t0) * 1000))
        ident = caliber_of(out_dir) or {}
        row["backend"] = ident.get("backend") or row["backend"]
        row["device"] = row["gpu"] = ident.get("device") or device
        row["timer"] = ident.get("timer", "")
        if row["status"] in ("PASS", "SKIP"):
            atomic.write_text(out_dir / COMPLETE_MARK, row["status"] + "\n")
        return row, False

    @staticmethod
    def _archive(out_dir: Path, n: int) -> None:
        """Keep attempt n's log; clear the rest so the next attempt starts a clean run dir."""
        log = out_dir / "run.log"
        if log.is_file():
            os.replace(log, out_dir / f"run.attempt{n}.log")
        for p in out_dir.iterdir():
            if p.name.startswith("run.attempt"):
                continue
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
