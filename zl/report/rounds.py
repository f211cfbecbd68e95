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
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from zl.batch.screen import ROUND_SIDE_RE, SIDES, cell_of
from zl.ir.fingerprint import NO_IR, NO_IR_DIFF, VARIANTS_DIFFER
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

SIDES_AB = ("A", "B")


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
    data = _drop_other_code(_drop_unfinished(data, cells), cells)
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


def _drop_other_code(data: RoundsData, cells: Dict[Cell, LoadedRun]) -> RoundsData:
    """A round whose A or B cell compiled other code than that side's cell of the first complete
    round is incomplete: pooled, its delta would be of another build, not of the switch.
    Same code: NO_IR_DIFF, VARIANTS_DIFFER (every common variant identical), or no IR on either
    side (nothing went through Triton)."""
    if len(data.rounds) < 2:
        return data
    first = data.rounds[0]
    bad = {}
    for k in data.rounds[1:]:
        for side in SIDES_AB:
            code = pair_code(cells[(first, side)], cells[(k, side)])
            none = code["verdict"] == NO_IR and not any(code["fingerprints"].values())
            if code["verdict"] not in (NO_IR_DIFF, VARIANTS_DIFFER) and not none:
                bad.setdefault(k, []).append(f"r{k}_{side} compiled other code than r{first}_{side} "
                                             f"({code_text(code)})")
    if not bad:
        return data
    return RoundsData(rounds=[k for k in data.rounds if k not in bad], cells=data.cells,
                      incomplete=data.incomplete + [f"round {k}: {why}" for k, whys in sorted(bad.items())
                                                    for why in whys],
                      logs={c: p for c, p in data.logs.items() if c[0] not in bad})


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


def _print_shapes(name: str, res: Dict, judged: List[Dict], tag: str = "ab-rounds") -> None:
    print(f"[{tag}] {name}: per shape: A/A-calibrated verdict, median speedup [per-round "
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


def _print_operator(name: str, res: Dict, tag: str = "ab-rounds") -> None:
    n, pr, ci = res["rounds"], res["per_round_median_pct"], res["geomean_ci95_pct"]
    print(f"[{tag}] {name}: {n} rounds x {len(res['shapes'])} shapes, median speedup "
          f"{fmt_pct(res['median_speedup_pct'])}, per-round medians "
          f"{' '.join(f'{x:+.2f}%' for x in pr)} (range {min(pr):+.2f}% ~ {max(pr):+.2f}%), "
          f"median side noise {res['median_side_noise_pct']:.2f}%")
    print(f"[{tag}] {name}: geomean speedup {fmt_pct(res['geomean_speedup_pct'])}"
          + (f", 95% bootstrap CI over rounds [{ci[0]:+.2f}%, {ci[1]:+.2f}%]" if ci else ""))
    counts = ", ".join(f"{k}={v}" for k, v in sorted(res["verdict_counts"].items()))
    print(f"[{tag}] {name}: verdicts: {counts}")


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
    cal = verdicts.Calibration(own + more, verdicts.pair_key(first, *used.values()), source, false_alarm)
    block = verdicts.apply(out["shapes"], cal, "speedup_pct", "a_median", "p_value", ALPHA,
                           _underpowered(res), rejected + why)
    for line in verdicts.text_lines(f"[ab-rounds] {name}", block["rule"], block["summary"]):
        print(line)
    return block


def _underpowered(res: Dict) -> str:
    """Why no shape of these rounds can be FASTER/SLOWER whatever its delta, or ""."""
    return "" if res["verdicts_possible"] else (
        f"{res['rounds']} rounds cannot reach alpha {ALPHA} (smallest attainable Mann-Whitney p "
        f"{res['min_attainable_p']:.3f}): underpowered")


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


# ---------------------------------------------------------------- a run_batch.py --rounds screen

SCREEN_TAG = "screen rounds"


def screen_cells(root: Path, before_dir: Path, runs: Runs) -> Dict[Cell, LoadedRun]:
    """One node of a run_batch.py --switch screen as --ab-rounds cells: every side directory of
    the root that zl.batch.screen.cell_of names (before = r1_A, after = r1_B, r<k>_<A|B>) and
    that holds the node's run.log. Nothing is written: the cells are the batch's own runs."""
    repo, run_name = Path(before_dir).relative_to(root / SIDES[0]).parts
    out = {}
    for d in sorted(root.iterdir()):
        cell = cell_of(d.name)
        if cell is not None and (d / repo / run_name / "run.log").is_file():
            out[cell] = runs.get(d / repo / run_name)
    return out


def _screen_node(root: Path, name: str, cells: Dict[Cell, LoadedRun], cal: verdicts.Calibration,
                 rejected: List[str], allow: bool) -> Tuple[Dict, Optional[Dict]]:
    """(the node's JSON, analyse_rounds' dict or None): one node's rounds, as report_ab_rounds
    analyses them (caliber, complete rounds, zl.runlog.stats), judged by the screen's
    calibration; `status` says whether it has shapes.
    One case's sides all come from one run_batch.py call (a --resume reruns a case whole), so
    they are one campaign."""
    try:
        caliber = check_caliber([(cell_name(c), r.identity) for c, r in sorted(cells.items())], name, allow)
    except Refused as exc:
        return {"status": "refused", "caliber_problems": exc.problems}, None
    choice = CampaignChoice(None, {c: r.dir for c, r in cells.items()})
    try:
        data = _load(root, name, choice, cells)
    except BadInput as exc:
        return {"status": "unreadable", "message": str(exc)}, None
    res = analyse_rounds(data)
    out = _as_json(name, root, res, data, choice, caliber, cells)
    out["cell_dirs"] = {cell_name(c): str(r.dir) for c, r in sorted(cells.items())}
    out["results"] = {k: v for k, v in results_report.rounds_facts(cells).items() if k != "sides"}
    if res["rounds"] < 2 or not res["shapes"]:
        out["status"] = "too_few_rounds" if res["rounds"] < 2 else "no_shapes"
        return out, None
    out["verdicts"] = verdicts.apply(out["shapes"], cal, "speedup_pct", "a_median", "p_value", ALPHA,
                                     _underpowered(res), rejected)
    out["aa_verdict_counts"] = {v: sum(s["aa_verdict"] == v for s in out["shapes"]) for v in verdicts.VERDICTS}
    out["status"] = "ok"
    return out, res


# The kinds of a --rounds screen's own controls (`controls_by_kind` of the block and of each
# node's rule), then those of --controls DIRs.
AB_OF_AA_NODES = "round_pairs_of_aa_nodes"
SAME_SIDE = "same_side_across_rounds"
MORE = "controls_dirs"
KIND_TEXT = {AB_OF_AA_NODES: "every round's A/B pair of the screen's A/A nodes (NO_IR_DIFF)",
             SAME_SIDE: "every node's same-side cells of consecutive rounds (r<k>_A~r<k+1>_A, "
                        "r<k>_B~r<k+1>_B)"}


def _round_controls(ops: Sequence[Dict], cells: Dict[str, Dict[Cell, LoadedRun]]
                    ) -> Tuple[List[verdicts.Control], List[str]]:
    """A --rounds screen's own A/A controls, each pair checked again to be identical at every
    level, binary included (else rejected, with the reason):
    - AB_OF_AA_NODES: every round's A/B pair of the screen's every-level A/A nodes;
    - SAME_SIDE: every node's consecutive same-side cells (r<k>_A with r<k+1>_A, B with B),
      changed nodes included. Both cells of such a pair run the same side's source with the
      switch at the same value and the configs side before picked (r1_A recorded them, every
      later side replays them), so the same code runs the same configs: their delta is
      measurement noise only, as --ab-rounds's same-side controls. They run 1 to 4 sides apart
      (a round's A/B pair: 1), so drift can widen, not narrow, the threshold they set.
    Every pair of a node is named by the node's side A (verdicts.pair_name), so that a node is
    never calibrated by its own cells (Calibration's `exclude`). Each control has `kind`."""
    controls: List[verdicts.Control] = []
    rejected: List[str] = []
    for o in ops:
        mine = cells.get(o["cell"]) or {}
        pairs = []
        if o["code"].get("aa"):
            pairs += [(AB_OF_AA_NODES, (k, "A"), (k, "B"), f"r{k}")
                      for k in sorted({k for k, s in mine if (k, "A") in mine and (k, "B") in mine})]
        for side in "AB":
            ks = sorted(k for k, s in mine if s == side)
            pairs += [(SAME_SIDE, (i, side), (j, side), f"r{i}_{side}~r{j}_{side}")
                      for i, j in zip(ks, ks[1:])]
        for kind, x, y, tag in pairs:
            got, why = verdicts.pair_controls(verdicts.pair_name(o["dirs"]["before"]), mine[x], mine[y])
            controls += [dict(c, source=f"{c['source']} {tag}", kind=kind) for c in got]
            rejected += [f"{why} ({tag})"] if why else []
    return controls, rejected


def controls_by_kind(controls: Sequence[verdicts.Control]) -> Dict[str, int]:
    """How many control shapes of each kind (AB_OF_AA_NODES, SAME_SIDE, MORE), every kind named."""
    return {k: sum(1 for c in controls if c.get("kind", MORE) == k) for k in (AB_OF_AA_NODES, SAME_SIDE, MORE)}


def add_to_screen(result: Dict, runs: Runs, false_alarm: float = verdicts.DEFAULT_FALSE_ALARM,
                  more: Sequence[Path] = (), allow: bool = False) -> Optional[Dict]:
    """Each node of a run_batch.py --rounds screen gets `rounds` (its --ab-rounds analysis:
    per-shape medians over rounds, per-round range, bootstrap interval, Mann-Whitney, and the
    verdict rule with _round_controls's two kinds and --controls as controls, the node's own
    left out, `controls_by_kind` in its rule); the result gets `rounds` (the rule, the counts
    over nodes, `controls_by_kind` before any node is left out). The
    console gets report_ab_rounds's per-shape and per-node lines. Call after
    verdicts.judge_screen. None, and nothing added, for a screen without rounds."""
    root = Path(result["root"])
    if not any(ROUND_SIDE_RE.match(d.name) for d in root.iterdir() if d.is_dir()):
        return None
    require_stats_libraries()
    cells = {o["cell"]: screen_cells(root, Path(o["dirs"]["before"]), runs) for o in result["ops"]
             if Path(o["dirs"]["before"]).parent.parent == root / SIDES[0]}
    controls, rejected = _round_controls(result["ops"], cells)
    if more:
        extra, why = verdicts.dir_controls(more, runs)
        controls, rejected = controls + [dict(c, kind=MORE) for c in extra], rejected + why
    kinds = controls_by_kind(controls)
    where = ("; ".join([f"{KIND_TEXT[k]}: {kinds[k]} shape(s)" for k in (AB_OF_AA_NODES, SAME_SIDE)]
                       + ([f"--controls {' '.join(map(str, more))}: {kinds[MORE]} shape(s)"] if more else []))
             + " in the screen (every pair identical at every level, binary included)")
    nodes, skipped, judged, rule, analysed = [], {}, [], None, {}
    for o in result["ops"]:
        mine = cells.get(o["cell"]) or {}
        if (1, "A") not in mine or not any(k > 1 for k, _ in mine):
            skipped[o["cell"]] = "no side of rounds 2..R has a run.log (round 1 did not pass both sides)"
            continue
        cal = verdicts.Calibration(controls, verdicts.pair_key(mine[(1, "A")], *mine.values()),
                                   f"{where}, of which this node's own cells are left out", false_alarm,
                                   exclude=[verdicts.pair_name(o["dirs"]["before"])])
        node, analysed[o["cell"]] = _screen_node(root, o["cell"], mine, cal, rejected, allow)
        if node.get("verdicts"):
            node["verdicts"]["rule"]["controls_by_kind"] = controls_by_kind(cal.controls)
        o["rounds"] = node
        if node["status"] != "ok":
            skipped[o["cell"]] = "; ".join(x for x in [node["status"], node.get("message", "")]
                                           + node.get("caliber_problems", []) + node.get("incomplete_rounds", []) if x)
            continue
        nodes.append(o["cell"])
        rule = rule or node["verdicts"]["rule"]
        judged += [{"verdict": s["aa_verdict"], "false_alarm_bound": s["false_alarm_bound"],
                    "p": s["p_value"]} for s in node["shapes"]]
    block = {"sides": "before = r1_A, after = r1_B, r<k>_<A|B> = rounds 2..R (zl/batch/screen.py)",
             "nodes": nodes, "not_analysed": skipped, "rule": rule, "controls": len(controls),
             "controls_by_kind": kinds,
             "rejected_controls": rejected,
             "summary": verdicts.summary(judged, [j["p"] for j in judged], ALPHA),
             "wrong_results": [c for c in nodes if result_mismatch(result, c)]}
    result["rounds"] = block
    _print_screen(result, block, analysed)
    return block


def result_mismatch(result: Dict, cell: str) -> bool:
    """A node whose outputs in some round differ from r1_A's beyond tolerance."""
    node = next(o for o in result["ops"] if o["cell"] == cell).get("rounds") or {}
    return (node.get("results") or {}).get("status") == "mismatch"


def wrong_results_lines(result: Dict) -> List[str]:
    """`<node>: rounds: <worst cell vs r1_A>` per node of block `wrong_results`: the page's red
    box and the console's first rounds line (a speedup of a different answer is no gain)."""
    cells = (result.get("rounds") or {}).get("wrong_results") or []
    by = {o["cell"]: o for o in result["ops"]}
    return [f"{c}: rounds: {by[c]['rounds']['results']['value']}" for c in cells]


def _print_screen(result: Dict, block: Dict, analysed: Dict[str, Optional[Dict]]) -> None:
    for line in wrong_results_lines(result):
        print(f"!!! [{SCREEN_TAG}] WRONG RESULTS: {line}")
    if block["rule"] is not None:
        for line in verdicts.text_lines(f"[{SCREEN_TAG}]", block["rule"], block["summary"]):
            print(line)
    for o in result["ops"]:
        node = o.get("rounds")
        if o["cell"] in block["nodes"]:
            _print_operator(o["cell"], node, SCREEN_TAG)
            _print_shapes(o["cell"], analysed[o["cell"]], node["shapes"], SCREEN_TAG)
    for cell, why in block["not_analysed"].items():
        print(f"[{SCREEN_TAG}] {cell}: no rounds report: {why}")


def html_section(result: Dict, table: Callable[..., str], esc: Callable[[object], str]) -> str:
    """The page's section for a --rounds screen, drawn with the page's own `table` and `esc`
    (zl/report/page.py): one row per node, then one per shape. "" without rounds."""
    block = result.get("rounds")
    if not block:
        return ""

    def num(v: Optional[float]):
        return (fmt_pct(v), "" if v is None else f"{v:.6g}", "" if not v else ("up" if v > 0 else "down"))

    def counts(c: Dict[str, int]) -> str:
        return " ".join(f"{k}={n}" for k, n in c.items() if n) or "-"

    nodes, shapes = [], []
    for o in result["ops"]:
        node = o.get("rounds")
        if o["cell"] not in block["nodes"]:
            continue
        ci = node["geomean_ci95_pct"]
        nodes.append([o["cell"], (str(node["rounds"]), node["rounds"]), num(node["median_speedup_pct"]),
                      num(node["geomean_speedup_pct"]),
                      f"[{ci[0]:+.2f}%, {ci[1]:+.2f}%]" if ci else "-", counts(node["aa_verdict_counts"]),
                      node["results"]["value"], "; ".join(node["incomplete_rounds"])])
        shapes += [[o["cell"], s["dtype"], s["size_detail"], (s["aa_verdict"], None,
                    {verdicts.FASTER: "up", verdicts.SLOWER: "down"}.get(s["aa_verdict"], "")),
                    num(s["speedup_pct"]), f"{s['delta_min']:+.2f}% ~ {s['delta_max']:+.2f}%",
                    (f"{s['a_median']:.6f}", s["a_median"]), (f"{s['b_median']:.6f}", s["b_median"]),
                    "-" if s["p_value"] is None else f"{s['p_value']:.3f}", s["aa_reason"]]
                   for s in node["shapes"]]
    rule = block["rule"] or {}
    return ('<div id="rounds"><h2>Rounds (run_batch.py --rounds)</h2>'
            f'<div class="sub">{esc(block["sides"])}; per shape the median over rounds of A/B - 1, '
            f'judged by: {esc(rule.get("text", "no node analysed"))}; controls: '
            f'{esc(rule.get("control_source", "-"))}</div><div>'
            + "".join(f'<span class="kpi">{esc(k)} <b>{n}</b></span>'
                      for k, n in block["summary"]["counts"].items())
            + "</div>" + table(["node", "rounds", "median speedup", "geomean", "95% CI over rounds",
                                "shape verdicts", "results over rounds", "incomplete"], nodes, sortable=True)
            + table(["node", "dtype", "shape", "verdict", "median speedup", "per-round range",
                     "A median (ms)", "B median (ms)", "Mann-Whitney p", "why"], shapes, sortable=True)
            + "".join(f'<div class="sub">{esc(c)}: no rounds report: {esc(w)}</div>'
                      for c, w in block["not_analysed"].items())
            + "</div>")
