"""A batch-wide screen of one switch: per case, side A ($SWITCH=0) records, side B
($SWITCH=1) replays A's picks on the same device right after, and one screen.tsv row judges
the pair with ab_rlc_test.sh's rule, the one implementation in zl/screen_verdict.py:
NO_ROWS, WRONG_RESULTS, NO_TRITON, IR_CHANGED@<level> / BINARY_CHANGED (campaign.sh repeats
these), VARIANTS_DIFFER (the common code identical, the variant sets differ), NO_IR_DIFF.
With --rounds R the pair is round 1 of an ab_repeat.sh-style A/B: rounds 2..R follow on the
same device, every side replaying A's record; the verdict stays round 1's.

screen.tsv has ab_rlc_test.sh's columns (so partition.py and campaign.sh read either; the
caliber's `device` column says where the pair ran), then repo and run_name.
"""

from __future__ import annotations

import csv
import io
import re
import threading
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from zl import atomic
from zl.ir.fingerprint import NoIRError, RunDirError, convert_count
from zl.runlog.caliber import CALIBER_FIELDS, caliber_of, read_identity
from zl.screen_verdict import COLUMNS, judge

BASE_FIELDS = ["op", "op_file", "dtypes", "rows_before", "rows_after", "kernels_before",
               "kernels_after", "cvt_before", "cvt_after", "elapsed_before", "elapsed_after",
               "rc_before", "rc_after", "verdict"]
FIELDS = BASE_FIELDS + list(CALIBER_FIELDS) + list(COLUMNS) + ["repo", "run_name"]
SIDES = ("before", "after")
# side C of `--retune`: the switch on, tuning live and recorded (no REPLAY_FROM), run after B on
# the same device; its pair with side A is read by the report (zl/report/retune.py), not here.
RETUNED = "retuned"
# --rounds R: rounds 2..R of the pair, each side a directory named as ab_repeat.sh's cell
# (before = r1_A, after = r1_B); batch_summary.py --screen reads them as one --ab-rounds per node.
ROUND_SIDE_RE = re.compile(r"^r([2-9]|[1-9][0-9]+)_([AB])$")


def round_sides(rounds: int) -> List[str]:
    """The side directories of rounds 2..R in run order, ab_repeat.sh's: an even round runs B
    then A, an odd one A then B (round 1 is before, after), so a drift in one direction over
    the case (clock ramp, heating) does not land on one side."""
    return [f"r{k}_{s}" for k in range(2, rounds + 1) for s in ("BA" if k % 2 == 0 else "AB")]


def cell_of(side: str) -> Optional[Tuple[int, str]]:
    """The ab_repeat.sh cell (round, A|B) a screen side stands for; None for side C."""
    if side in SIDES:
        return 1, "AB"[SIDES.index(side)]
    m = ROUND_SIDE_RE.match(side)
    return (int(m.group(1)), m.group(2)) if m else None


def replays_before(side: str) -> bool:
    """Sides that replay side before's autotune record: after and every side of rounds 2..R
    (ab_repeat.sh's caliber: configs pinned across rounds and sides). Side C tunes live."""
    cell = cell_of(side)
    return cell is not None and cell != (1, "A")


def screen_sides(switch: str, retune: bool = False, rounds: int = 1) -> List[Tuple[str, Dict[str, str]]]:
    """A batch's sides in run order, (directory name, the variables it sets): one plain side
    without a switch; before (switch 0) and after (1) in a screen; then retuned (1) with
    --retune, right after round 1 so that A vs C, a single pair, stays as close in time as
    A vs B; then rounds 2..R (round_sides; A sides 0, B sides 1). Which side replays whose
    record is execute.BatchRun._config's (replays_before)."""
    if not switch:
        return [("", {})]
    return ([(s, {switch: str(i)}) for i, s in enumerate(SIDES)]
            + ([(RETUNED, {switch: "1"})] if retune else [])
            + [(s, {switch: "0" if s.endswith("A") else "1"}) for s in round_sides(rounds)])


def _ir_counts(run_dir: Path) -> Tuple[int, int]:
    try:
        c = convert_count(run_dir, launch_floor=1)
        return c["ttgir_files"], c["measured_convert_count"]
    except (NoIRError, RunDirError):
        return 0, 0


def screen_row(a: Dict[str, str], b: Dict[str, str], dtypes: str) -> Dict[str, str]:
    da, db = Path(a["out_dir"]), Path(b["out_dir"])
    ka, ca = _ir_counts(da)
    kb, cb = _ir_counts(db)
    ra, rb = int(a.get("rows_success") or 0), int(b.get("rows_success") or 0)
    cal = caliber_of(da) or {}
    row = {
        "op": a["op"], "op_file": a["op_file"], "dtypes": dtypes.replace(" ", ",") or "<all>",
        "rows_before": ra, "rows_after": rb, "kernels_before": ka, "kernels_after": kb,
        "cvt_before": ca, "cvt_after": cb,
        "elapsed_before": round(int(a.get("elapsed_ms") or 0) / 1000),
        "elapsed_after": round(int(b.get("elapsed_ms") or 0) / 1000),
        "rc_before": a.get("return_code", ""), "rc_after": b.get("return_code", ""),
        "repo": a["repo"], "run_name": a["run_name"],
    }
    row.update(judge(ra, rb, a.get("return_code", ""), b.get("return_code", ""), da, db))
    row.update({k: cal.get(k, "") for k in CALIBER_FIELDS})
    return {k: str(v) for k, v in row.items()}


class ScreenTable:
    """screen.tsv in batch order, rewritten atomically after every case."""

    def __init__(self, path: Path, keys: List[Tuple[str, str]], old: Dict[Tuple[str, str], Dict[str, str]]):
        self.path = Path(path)
        self.order = list(keys)
        self.rows = {k: old[k] for k in keys if k in old}
        self.lock = threading.Lock()

    def set(self, key: Tuple[str, str], row: Dict[str, str]) -> None:
        with self.lock:
            self.rows[key] = row
            buf = io.StringIO()
            w = csv.DictWriter(buf, fieldnames=FIELDS, delimiter="\t", lineterminator="\n",
                               extrasaction="ignore")
            w.writeheader()
            for k in self.order:
                if k in self.rows:
                    w.writerow(self.rows[k])
            atomic.write_text(self.path, buf.getvalue())


def read_screen_rows(path: Path) -> Dict[Tuple[str, str], Dict[str, str]]:
    if not Path(path).is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as fh:
        return {(r.get("repo", ""), r.get("run_name", "")): r for r in csv.DictReader(fh, delimiter="\t")}


# A screen pair whose side A was linked from a --baseline (zl/batch/judge_first.py): its run
# identity must agree with side B's on every field that changes what is compiled, run or
# compared; else the pair judges two setups, not the switch.
BASELINE_MISMATCH = "BASELINE_MISMATCH"
BASELINE_FIELDS = ("backend", "device_name", "device_arch", "triton_version", "torch_version",
                   "flaggems_package", "dtypes", "dtype_fallback", "bench_level", "shape_mode",
                   "shape_source", "tuner_cache", "use_flagtune", "seed")


def baseline_differences(run_a: Path, run_b: Path) -> List[str]:
    """`field: baseline X, side B Y` for each BASELINE_FIELDS field that differs (absent on one
    side included); one line naming the file when an identity cannot be read."""
    a, b = read_identity(Path(run_a)), read_identity(Path(run_b))
    if a is None or b is None:
        return [f"run_identity.json unreadable in {run_a if a is None else run_b}"]
    missing = "<absent>"
    return [f"{k}: baseline {a.get(k, missing)!r}, side B {b.get(k, missing)!r}"
            for k in BASELINE_FIELDS if a.get(k, missing) != b.get(k, missing)]
