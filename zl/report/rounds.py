"""`batch_summary.py --ab-rounds ROOT`: an N-round A/B (ab_repeat.sh's r<k>_<A|B> cells).

Steps: check scipy, pick the cells of one campaign (saying which were used and which
ignored), check the caliber of those cells, load complete rounds, analyse
(zl.runlog.stats), print per-shape lines and the operator summary, and return everything
printed as one JSON-able dict, with what the page shows (views.augment). Fewer than 2
complete rounds, or no shape measured in every round, is NoReport (exit 5) after the
diagnostics are printed. Each run directory of the root is one LoadedRun: every step reads
the same bytes of its files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from zl.report.guard import (MARKER_LABELS, BadInput, NoReport, Refused, check_caliber,
                             fmt_pct, print_replay_fallbacks, replay_fallback_facts,
                             require_stats_libraries)
from zl.report import results as results_report
from zl.report import changes, verdicts, views
from zl.report.run import LoadedRun, Runs, code_text, pair_code
from zl.runlog.campaign import (Cell, CampaignChoice, MixedCampaigns, UnknownCampaign, cell_name,
                                select_campaign)
from zl.runlog.parse import RunLogError
from zl.runlog.stats import ALPHA, CELL_RE, RoundsData, analyse_rounds, key_text, load_rounds


def _root_runs(root: Path, runs: Runs) -> Dict[str, LoadedRun]:
    """Every run directory of the root (a directory holding run.log), by name: the cells and
    any other run the page lists among the identities. Nothing is read yet."""
    return {d.name: runs.get(d) for d in sorted(root.iterdir()) if d.is_dir() and (d / "run.log").is_file()}


def _cells(runs: Dict[str, LoadedRun]) -> Dict[Cell, LoadedRun]:
    return {(int(m.group(1)), m.group(2)): run for name, run in runs.items()
            for m in [CELL_RE.match(name)] if m}


def _campaign_cells(root: Path, name: str, campaign: Optional[str],
                    cells: Dict[Cell, LoadedRun]) -> CampaignChoice:
    if not cells:
        raise BadInput(f"{root}: no r<k>_<A|B>/run.log cells")
    try:
        choice = select_campaign({c: run.dir for c, run in cells.items()}, campaign,
                                 {c: run.identity for c, run in cells.items()})
    except UnknownCampaign as exc:
        raise BadInput(f"{root}: {exc}") from None
    except MixedCampaigns as exc:
        print(f"!!! [caliber] {name}: {exc}")
        raise Refused([str(exc)]) from None
    for line in choice.describe():
        print(f"[ab-rounds] {name}: {line}")
    return choice


def _load(root: Path, name: str, choice: CampaignChoice, cells: Dict[Cell, LoadedRun]) -> RoundsData:
    try:
        data = load_rounds(root, choice.used, read=lambda c: cells[c].parsed)
    except RunLogError as exc:
        raise BadInput(str(exc)) from None
    data = _drop_unfinished(data, cells)
    for msg in data.incomplete:
        print(f"!!! [ab-rounds] {name}: {msg} (excluded)")
    return data


def _drop_unfinished(data: RoundsData, cells: Dict[Cell, LoadedRun]) -> RoundsData:
    """A round with a cell whose run did not finish (LoadedRun.unfinished) is incomplete:
    its rows are whatever the cell measured before it stopped."""
    bad = {c: why for c, why in ((c, cells[c].unfinished) for c in data.logs) if why}
    if not bad:
        return data
    drop = {k for k, _ in bad}
    return RoundsData(rounds=[k for k in data.rounds if k not in drop], cells=data.cells,
                      incomplete=data.incomplete + [f"round {c[0]}: {cell_name(c)} did not finish: {why}"
                                                    for c, why in sorted(bad.items())],
                      logs={c: p for c, p in data.logs.items() if c[0] not in drop})


def _code(cells: Dict[Cell, LoadedRun]) -> Optional[Dict]:
    """r1_A vs r1_B through the screen's every-level verdict (ab_repeat.sh's round-1 check)."""
    a, b = cells.get((1, "A")), cells.get((1, "B"))
    return None if a is None or b is None else pair_code(a, b)


def _key_fields(k) -> Dict:
    return {"op": k[0], "dtype": k[1], "size_detail": k[2], "occurrence": k[3]}


def _as_json(name: str, root: Path, res: Dict, data: RoundsData, choice: CampaignChoice,
             caliber: Tuple[List[str], List[str]], cells: Dict[Cell, LoadedRun]) -> Dict:
    out = {"mode": "ab-rounds", "label": name, "root": str(root), "caliber_problems": caliber[0],
           "caliber_hazards": caliber[1],
           "campaign_id": choice.campaign_id,
           "cells_used": [cell_name(c) for c in sorted(choice.used)],
           "cells_ignored": {cell_name(c): cid for c, cid in sorted(choice.ignored.items())},
           **{k: v for k, v in res.items() if k not in ("shapes", "unpaired")}}
    out["shapes"] = [{**_key_fields(s["key"]), **{k: v for k, v in s.items() if k != "key"}}
                     for s in res["shapes"]]
    out["unpaired"] = [{**_key_fields(u["key"]), "reason": u["reason"]} for u in res["unpaired"]]
    out["markers"] = {cell_name(c): p.markers for c, p in sorted(data.logs.items())}
    out["replay_fallbacks"] = {cell_name(c): replay_fallback_facts(cells[c].identity, p)
                               for c, p in sorted(data.logs.items())}
    return out


def _print_shapes(name: str, res: Dict, judged: List[Dict]) -> None:
    print(f"[ab-rounds] {name}: per shape: A/A-calibrated verdict, median speedup [per-round "
          "min~max] A median -> B median (ms), side spreads A/B, rank-test verdict (p)")
    for s, j in zip(res["shapes"], judged):
        _, dtype, detail, occ = s["key"]
        p = "" if s["p_value"] is None else f" (p={s['p_value']:.3f})"
        flag = "" if s["sign_stable"] else "  SIGN-UNSTABLE"
        print(f"  {j['aa_verdict']:<8} {dtype:<16} {s['speedup_pct']:+7.2f}%  [{s['delta_min']:+.2f}%~"
              f"{s['delta_max']:+.2f}%]  {s['a_median']:.6f} -> {s['b_median']:.6f}  spread "
              f"{s['a_spread_pct']:.2f}%/{s['b_spread_pct']:.2f}%  {s['verdict']}{p}  {detail}"
              f"{f' #{occ + 1}' if occ else ''}{flag}  ({j['aa_reason']})")
    for u in res["unpaired"]:
        print(f"  UNPAIRED {key_text(u['key'])}: {u['reason']}")


def _print_operator(name: str, res: Dict) -> None:
    n, pr, ci = res["rounds"], res["per_round_median_pct"], res["geomean_ci95_pct"]
    print(f"[ab-rounds] {name}: {n} rounds x {len(res['shapes'])} shapes, median speedup "
          f"{fmt_pct(res['median_speedup_pct'])}, per-round medians "
          f"{' '.join(f'{x:+.2f}%' for x in pr)} (range {min(pr):+.2f}% ~ {max(pr):+.2f}%), "
          f"median side noise {res['median_side_noise_pct']:.2f}%")
    print(f"[ab-rounds] {name}: geomean speedup {fmt_pct(res['geomean_speedup_pct'])}"
          + (f", 95% bootstrap CI over rounds [{ci[0]:+.2f}%, {ci[1]:+.2f}%]" if ci else ""))
    counts = ", ".join(f"{k}={v}" for k, v in sorted(res["verdict_counts"].items()))
    print(f"[ab-rounds] {name}: verdicts: {counts}")


def _print_caveats(name: str, res: Dict, markers: Dict[str, Dict[str, int]]) -> None:
    n = res["rounds"]
    if not res["verdicts_possible"]:
        print(f"[ab-rounds] {name}: {n} rounds cannot reach alpha 0.05 (smallest attainable "
              f"Mann-Whitney p {res['min_attainable_p']:.3f}); per-shape verdicts need >= 4 rounds")
    if res["sign_unstable"]:
        print(f"[ab-rounds] {name}: {res['sign_unstable']}/{len(res['shapes'])} shape(s) changed "
              "the sign of their delta between rounds: their direction is not a conclusion")
    if res["unpaired"] or res["incomplete_rounds"]:
        print(f"[ab-rounds] {name}: INCOMPLETE: {len(res['unpaired'])} shape(s) not measured in "
              f"every round, {len(res['incomplete_rounds'])} incomplete round(s)")
    tot = {k: sum(m.get(k, 0) for m in markers.values()) for k in MARKER_LABELS}
    notes = [f"{MARKER_LABELS[k]}={v}" for k, v in tot.items() if v]
    if notes:
        print(f"[ab-rounds] {name}: timing regime annotations over all cells: {', '.join(notes)}")


def _verdicts(name: str, used: Dict[Cell, LoadedRun], out: Dict, res: Dict,
              controls: Sequence[Path], false_alarm: float, runs: Runs) -> Dict:
    """FASTER/SLOWER/SAME/UNCLEAR per shape (zl.report.verdicts): controls are the campaign's
    same-side cells across rounds (each an A/A where its code is identical at every level)
    and any --controls roots; the rank test must agree at ALPHA."""
    own, rejected = verdicts.rounds_controls(name, used)
    more, why = verdicts.dir_controls(controls, runs) if controls else ([], [])
    source = "this campaign's same-side cells across rounds" + (
        f" and --controls {' '.join(map(str, controls))}" if controls else "")
    first = used.get((1, "A")) or next(iter(used.values()))
    cal = verdicts.Calibration(own + more, verdicts.caliber_key(first.identity), source, false_alarm)
    weak = "" if res["verdicts_possible"] else (
        f"{res['rounds']} rounds cannot reach alpha {ALPHA} (smallest attainable Mann-Whitney p "
        f"{res['min_attainable_p']:.3f}): underpowered")
    block = verdicts.apply(out["shapes"], cal, "speedup_pct", "a_median", "p_value", ALPHA, weak,
                           rejected + why)
    for line in verdicts.text_lines(f"[ab-rounds] {name}", block["rule"], block["summary"]):
        print(line)
    return block


def report_ab_rounds(root: Path, label: str, allow: bool,
                     campaign: Optional[str] = None, controls: Sequence[Path] = (),
                     false_alarm: float = verdicts.DEFAULT_FALSE_ALARM) -> Dict:
    """Print the multi-round report and return it (raises Refused / BadInput / NoReport)."""
    root = Path(root)
    name = label or root.name
    require_stats_libraries()
    if not root.is_dir():
        raise BadInput(f"no such directory: {root}")
    loaded = Runs()
    runs = _root_runs(root, loaded)
    cells = _cells(runs)
    choice = _campaign_cells(root, name, campaign, cells)
    used = {c: cells[c] for c in choice.used}
    caliber = check_caliber([(cell_name(c), run.identity) for c, run in sorted(used.items())],
                            name, allow)
    data = _load(root, name, choice, used)
    res = analyse_rounds(data)
    checked = results_report.rounds_facts(used)
    out = results_report.ordered(_as_json(name, root, res, data, choice, caliber, used), checked)
    out["code"] = _code(used)
    # What changed per kernel, r1_A vs r1_B, when their code differs (as --ab's pair).
    r1a, r1b = used.get((1, "A")), used.get((1, "B"))
    out["changes"] = None if out["code"] is None else changes.pair_changes(r1a, r1b, out["code"])
    results_report.print_first(name, "ab-rounds", checked, "B vs r1_A")
    print(f"[ab-rounds] {name}: IR r1_A vs r1_B: {code_text(out['code'])}")
    for line in changes.text_lines(f"[ab-rounds] {name} r1_A vs r1_B", out["changes"]):
        print(line)
    if res["rounds"] < 2:
        out["status"] = "too_few_rounds"
        raise NoReport(f"{name}: need at least 2 complete rounds of r<k>_<A|B>/run.log "
                       f"(found {res['rounds']})", out)
    # The verdicts first (after the results check): what a reviewer decides on.
    out = verdicts.lead(out, _verdicts(name, used, out, res, controls, false_alarm, loaded))
    _print_shapes(name, res, out["shapes"])
    print_replay_fallbacks(name, "ab-rounds", {k: v for k, v in out["replay_fallbacks"].items()
                                               if v["events"] or v["replay_fallback_keys"]})
    results_report.print_line(name, "ab-rounds", checked, "B vs r1_A")
    for cell, r in checked["cells"].items():
        if cell.endswith("_A"):
            results_report.print_replay_difference(name, "ab-rounds", cell, r)
    if not res["shapes"]:
        out["status"] = "no_shapes"
        raise NoReport(f"{name}: {res['rounds']} rounds, but no shape succeeded in every round "
                       "on both sides", out)
    _print_operator(name, res)
    _print_caveats(name, res, out["markers"])
    out["status"] = "ok"
    return views.augment(out, runs)
