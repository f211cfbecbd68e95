"""A batch-wide screen of one switch: per case, side A ($SWITCH=0) records, side B
($SWITCH=1) replays A's picks on the same device right after, and one screen.tsv row judges
the pair with ab_rlc_test.sh's rule, the one implementation in zl/screen_verdict.py:
NO_ROWS, WRONG_RESULTS, NO_TRITON, IR_CHANGED@<level> / BINARY_CHANGED (campaign.sh repeats
these), VARIANTS_DIFFER (the common code identical, the variant sets differ), NO_IR_DIFF.

screen.tsv has ab_rlc_test.sh's columns (so partition.py and campaign.sh read either; the
caliber's `device` column says where the pair ran), then repo and run_name.
"""

from __future__ import annotations

import csv
import io
import threading
from pathlib import Path
from typing import Dict, List, Tuple

from zl import atomic
from zl.ir.fingerprint import NoIRError, RunDirError, convert_count
from zl.runlog.caliber import CALIBER_FIELDS, caliber_of
from zl.screen_verdict import COLUMNS, judge

BASE_FIELDS = ["op", "op_file", "dtypes", "rows_before", "rows_after", "kernels_before",
               "kernels_after", "cvt_before", "cvt_after", "elapsed_before", "elapsed_after",
               "rc_before", "rc_after", "verdict"]
FIELDS = BASE_FIELDS + list(CALIBER_FIELDS) + list(COLUMNS) + ["repo", "run_name"]
SIDES = ("before", "after")
# side C of `--retune`: the switch on, tuning live and recorded (no REPLAY_FROM), run after B on
# the same device; its pair with side A is read by the report (zl/report/retune.py), not here.
RETUNED = "retuned"


def screen_sides(switch: str, retune: bool = False) -> List[Tuple[str, Dict[str, str]]]:
    """A batch's sides, (directory name, the variables it sets): one plain side without a
    switch; before (switch 0) and after (1) in a screen; then retuned (1) with --retune. Which
    side replays whose record is execute.BatchRun._config's: only after replays before."""
    if not switch:
        return [("", {})]
    return ([(s, {switch: str(i)}) for i, s in enumerate(SIDES)]
            + ([(RETUNED, {switch: "1"})] if retune else []))


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
