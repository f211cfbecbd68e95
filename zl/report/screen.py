"""`batch_summary.py --screen ROOT`: a screen's report (ab_rlc_test.sh's root, a run_batch.py
--switch batch, or a --judge-first batch).

Steps: the cells (views.screen_result) and what changed in each one's kernels, the failures
and wrong results first, the per-shape verdicts calibrated on the screen's every-level A/A
cells and --controls, side C of --retune, the rounds of a --rounds batch. A --judge-first
batch (ROOT holds judge_first.json) is reported through its timed stage, `ROOT/timed`, with
stage 1's outcome beside it under `judge_first`: its verdict counts, the baseline and its
check, and every node it could not judge with the reason. Cells measured on more than one GPU
model (a batch resumed on other hardware, an ab_rlc_test.sh root filled on two hosts) print
`!!! [screen] MIXED HARDWARE` and carry it as `timing_warning` / `mixed_hardware`, as --batch
does. Returns everything printed as one JSON-able dict.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from zl.batch.judge_first import SUMMARY, TIMED
from zl.report import changes, retune, rounds, verdicts, views
from zl.report.guard import BadInput, NoReport
from zl.report.run import Runs


def judge_first_root(root: Path) -> Tuple[Path, Optional[Dict]]:
    """(the screen to report, judge_first.json or None): a --judge-first batch's timed stage
    with its summary; any other root as given."""
    path = Path(root) / SUMMARY
    if not path.is_file():
        return Path(root), None
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: unreadable ({exc})") from None
    if not isinstance(summary, dict) or not (Path(root) / TIMED / "screen.tsv").is_file():
        raise BadInput(f"{root} is a judge-first batch without a timed stage to report "
                       f"({Path(root) / TIMED / 'screen.tsv'} missing); its stage 1 is in {path}")
    return Path(root) / TIMED, summary


def stage1_lines(summary: Dict) -> List[str]:
    """The terminal's account of stage 1: counts, the baseline's check, each unjudged node."""
    s1 = summary.get("stage1") or {}
    out = ["[judge-first] stage 1 (every node untimed): "
           + ", ".join(f"{k}={v}" for k, v in (s1.get("counts") or {}).items())
           + f"; {len(s1.get('changed') or [])} changed and {len(s1.get('controls') or [])} control(s) timed"]
    base = summary.get("baseline")
    if base:
        check = base.get("check") or {}
        out.append(f"[judge-first] side A from the baseline {base.get('dir')}: {base.get('linked')} node(s) "
                   f"linked, {len(base.get('carried') or {})} carried unjudged (its SKIP or TIMEOUT), "
                   f"{len(base.get('fresh') or {})} run fresh; checked on {len(check.get('checked') or [])} "
                   f"timed node(s), {len(check.get('drift') or {})} drifted")
        out += [f"!!! [judge-first] baseline drift: {n}: {v}" for n, v in (check.get("drift") or {}).items()]
    out += [f"[judge-first] not judged: {n}: {why}" for n, why in (s1.get("unjudged") or {}).items()]
    return out


def cell_devices(result: Dict, runs: Runs) -> List[Tuple[str, str]]:
    """(device_name, device_arch) of both runs of every cell: each run's identity, else the
    caliber columns of its screen.tsv row (run directories gone)."""
    out = []
    for o in result["ops"]:
        for side in ("before", "after"):
            ident = runs.get(Path(o["dirs"][side])).identity
            out.append(views.device_of_row(ident, "") if ident else
                       (o["caliber"].get("device_name", ""), o["caliber"].get("device_arch", "")))
    return out


def caliber_lines(ops: Sequence[Dict], most: int = 10) -> List[str]:
    """One `!!! [caliber]` line per problem the guard has with the screen's cells, naming the
    cells it holds for (a --judge or --share-device screen: every cell, one line)."""
    cells: Dict[str, List[str]] = {}
    for o in ops:
        for problem in o.get("caliber_problems") or []:
            cells.setdefault(problem, []).append(o["cell"])
    return [f"!!! [caliber] {', '.join(c[:most])}{f' and {len(c) - most} more' if len(c) > most else ''}: {p}"
            for p, c in cells.items()]


def report_screen(root: Path, false_alarm: float, controls: Sequence[Path], allow_caliber_mismatch: bool,
                  stage1: Optional[Dict] = None) -> Dict:
    runs = Runs()
    result = views.screen_result(root, runs)
    if stage1 is not None:
        result.update(label=f"{Path(root).parent.name} (judge-first, timed stage)", judge_first=stage1)
        for line in stage1_lines(stage1):
            print(line)
    changes.add_to_screen(result, runs)   # per kernel, for each cell whose code differs
    result["timing_warning"] = views.hardware_warning(cell_devices(result, runs), "cells")
    result["mixed_hardware"] = bool(result["timing_warning"])
    if result["timing_warning"]:
        print(f"!!! [screen] {result['timing_warning']}")
    for g in result["completion"]["failures"]:   # a screen stopped mid-list
        print(f"!!! [screen] {g['reason']}: {' '.join(g['ops']) or '-'}")
    by_cell = {o["cell"]: o for o in result["ops"]}
    for cell in result["wrong_results"]:   # first, before any speed
        print(f"!!! [screen] {cell}: WRONG RESULTS: {by_cell[cell]['results']}")
    for cell in result["torch_mismatches"]:
        print(f"!!! [screen] {cell}: results vs torch: {by_cell[cell]['results_torch']}")
    for line in caliber_lines(result["ops"]):   # before any speed: a refused cell's numbers are not the switch's
        print(line)
    print("[screen] verdicts: " + ", ".join(f"{k}={v}" for k, v in result["verdict_counts"].items()))
    if not result["ops"]:
        raise NoReport("the screen judged no cell", result)
    band = result["noise_band_pct"]
    print("[screen] noise band: " + (f"{band[0]:+.2f}% ~ {band[1]:+.2f}% " if band else "unknown ")
          + f"({result['noise_source']})")
    result = verdicts.lead(result, verdicts.judge_screen(result, runs, false_alarm, controls,
                                                         allow_caliber_mismatch))
    for line in verdicts.text_lines("[screen]", result["verdicts"]["rule"], result["verdicts"]["summary"]):
        print(line)
    print(verdicts.aa_line("[screen]", result["verdicts"]["aa_cells"]))
    retune.add_to_screen(result, runs, false_alarm, controls)   # --retune's side C
    for line in retune.text_lines("[screen] retune", result):
        print(line)
    for g in result["verdicts"]["change_groups"]:
        print(f"[screen] change {g['signature']}: {len(g['cells'])} cell(s) "
              + " ".join(f"{k}={n}" for k, n in g["shape_verdicts"].items() if n)
              + f": {' '.join(g['cells'])}")
    for o in result["ops"]:
        for line in changes.text_lines(f"[screen] {o['cell']}", o.get("changes"), most=0):
            print(line)
    for o in result["ops"]:
        for sh in o.get("shapes") or []:
            print(f"  {sh['aa_verdict']:<8} {o['cell']:<24} {sh['speedup_pct']:+8.2f}%  "
                  f"{sh['size_detail']}  ({sh['aa_reason']})")
    rounds.add_to_screen(result, runs, false_alarm, controls, allow_caliber_mismatch)
    return result
