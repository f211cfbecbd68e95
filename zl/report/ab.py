"""`batch_summary.py --ab BEFORE AFTER`: one pair of runs, paired by shape.

Steps: resolve both logs (refusing a run compared with itself), check the caliber,
parse and pair, print rows / failures / summary / timing-regime notes / per-key replay
fallbacks, and return everything printed as one JSON-able dict, with what the page shows
(views.augment). Zero paired rows is NoReport (exit 5) after the diagnostics are printed.
Each side is one LoadedRun: every step reads the same bytes of its files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from zl.report.guard import (MARKER_LABELS, BadInput, NoReport, check_caliber, fmt_pct,
                             print_replay_fallbacks, refuse_self_comparison,
                             replay_fallback_facts)
from zl.report import changes
from zl.report import results as results_report
from zl.report import verdicts, views
from zl.report.run import LoadedRun, Runs, code_text, pair_code
from zl.runlog.parse import RunLogError, resolve_log
from zl.runlog.stats import PairReport, key_text, pair_logs


def _load_pair(runs: Runs, before: Path, after: Path) -> Tuple[LoadedRun, LoadedRun]:
    """Both sides, logs parsed; a run compared with itself is refused before either is parsed."""
    try:
        blog, alog = resolve_log(before), resolve_log(after)
        brun, arun = runs.get(blog.parent, blog), runs.get(alog.parent, alog)
        refuse_self_comparison(brun, arun)
        return runs.load(blog), runs.load(alog)
    except RunLogError as exc:
        raise BadInput(str(exc)) from None


def _label(label: str, run: LoadedRun) -> str:
    return label or str((run.identity or {}).get("op") or "") or run.dir.name


def _print_rows(name: str, rep: PairReport, rows: List[Dict]) -> None:
    print(f"[ab] {name}: gems latency (ms) before -> after, speedup = before/after - 1, verdict")
    for p in rows:
        detail, occ = p["size_detail"], p["occurrence"]
        print(f"  {p['dtype']:<16} {p['before_lat']:>12.6f} -> {p['after_lat']:<12.6f} "
              f"{p['speedup_pct']:+8.2f}%  {p['aa_verdict']:<8} {detail}"
              f"{f' #{occ + 1}' if occ else ''}  ({p['aa_reason']})")
    for u in rep.unpaired:
        print(f"  UNPAIRED {key_text(u['key'])}: {u['reason']}")
    for side, n, text in (("before", rep.before_failed, rep.before_failures),
                          ("after", rep.after_failed, rep.after_failures)):
        if n:
            print(f"  FAILED {side}: {n} failed test(s): {text}")


def _print_summary(name: str, rep: PairReport, s: Dict) -> None:
    line = (f"[ab] {name}: {s['paired']} paired rows, range {fmt_pct(s['min_pct'])} ~ "
            f"{fmt_pct(s['max_pct'])}, median {fmt_pct(s['median_pct'])}, "
            f"geomean {fmt_pct(s['geomean_pct'])}")
    if not s["complete"]:
        line += (f"  INCOMPLETE: {s['unpaired']} unpaired row(s), failed tests "
                 f"before={rep.before_failed} after={rep.after_failed}")
    if not s["paired"]:
        line += "  NO PAIRED ROWS"
    print(line)
    for side, why in s["unfinished"].items():
        print(f"!!! [ab] {name}: INCOMPLETE: {side} did not finish: {why}; its rows are "
              "what it measured before it stopped")
    notes = _marker_notes(rep.before_markers, rep.after_markers)
    if notes:
        print(f"[ab] {name}: timing regime annotations: {'; '.join(notes)} "
              "(fallback rows were timed differently from captured ones)")


def _marker_notes(before: Dict[str, int], after: Dict[str, int]) -> List[str]:
    notes = []
    for key in ("no_cudagraph", "replay_fallback", "capture_poisoned"):
        b, a = before.get(key, 0), after.get(key, 0)
        if b or a:
            notes.append(f"{MARKER_LABELS[key]} before={b} after={a}")
    return notes


def _row_keys(k) -> Dict:
    return {"op": k[0], "dtype": k[1], "size_detail": k[2], "occurrence": k[3]}


def _as_json(name: str, blog: Path, alog: Path, rep: PairReport, caliber: Tuple[List[str], List[str]],
             fallbacks: Dict, code: Dict, band: Dict, rows: List[Dict], block: Dict,
             what: Optional[Dict]) -> Dict:
    return {
        "mode": "ab", "label": name, "verdicts": block, "before": str(blog), "after": str(alog),
        "caliber_problems": caliber[0], "caliber_hazards": caliber[1],
        "code": code, "changes": what, **band,
        "summary": rep.summary(), "markers": {"before": rep.before_markers,
                                              "after": rep.after_markers},
        "replay_fallbacks": fallbacks,
        "failed_tests": {"before": rep.before_failed, "after": rep.after_failed},
        "failure_text": {"before": rep.before_failures, "after": rep.after_failures},
        "paired": rows,
        "unpaired": [{**_row_keys(u["key"]), "reason": u["reason"]} for u in rep.unpaired],
    }


def _verdicts(name: str, brun: LoadedRun, arun: LoadedRun, paired: List[Dict], controls: Sequence[Path],
              false_alarm: float, runs: Runs) -> Dict:
    """FASTER/SLOWER/SAME/UNCLEAR per shape (zl.report.verdicts), calibrated from --controls
    roots, else from the A/A cells of the screen root this pair sits in; this pair's own
    shapes are never among its controls."""
    # ab_rlc_test.sh's <root>/<cell>_before, or run_batch.py --switch's <root>/before/<repo>/<case>
    screen = next((d for d in (brun.dir.parent, brun.dir.parents[2] if len(brun.dir.parents) > 2 else None)
                   if d is not None and (d / "screen.tsv").is_file()), brun.dir.parent)
    if controls:
        got, rejected = verdicts.dir_controls(controls, runs)
        source = "--controls " + " ".join(map(str, controls))
    elif (screen / "screen.tsv").is_file():
        try:
            got, rejected = verdicts.screen_controls(screen, views.screen_result(screen, runs)["ops"], runs)
        except views.ReportInputError as exc:
            got, rejected = [], [str(exc)]
        source = f"the A/A cells of the screen {screen}"
    else:
        got, rejected = [], []
        source = "none (give --controls: a screen root or an --ab-rounds root measured alike)"
    cal = verdicts.Calibration(got, verdicts.pair_key(brun, arun), source, false_alarm,
                               exclude=[verdicts.pair_name(brun.dir)])
    block = verdicts.apply(paired, cal, "speedup_pct", "before_lat", rejected=rejected)
    for line in verdicts.text_lines(f"[ab] {name}", block["rule"], block["summary"]):
        print(line)
    return block


def report_ab(before: Path, after: Path, label: str, allow: bool, controls: Sequence[Path] = (),
              false_alarm: float = verdicts.DEFAULT_FALSE_ALARM) -> Dict:
    """Print the A/B report and return it as a dict (raises Refused / BadInput / NoReport)."""
    runs = Runs()
    brun, arun = _load_pair(runs, Path(before), Path(after))
    name = _label(label, brun)
    # A wrong answer is the first line of the report, before any caliber word.
    res = results_report.facts(brun, arun)
    results_report.print_first(name, "ab", res)
    caliber = check_caliber([("before", brun.identity), ("after", arun.identity)], name, allow)
    rep = pair_logs(brun.parsed, arun.parsed)
    # finished = the log's final line and, where recorded, the identity's `finished`
    rep.before_unfinished, rep.after_unfinished = brun.unfinished, arun.unfinished
    # The verdicts first (after the results check): what a reviewer decides on.
    rows = [{**_row_keys(p["key"]), "before_lat": p["before_lat"], "after_lat": p["after_lat"],
             "speedup_pct": p["speedup_pct"]} for p in rep.paired]
    block = _verdicts(name, brun, arun, rows, controls, false_alarm, runs)
    _print_rows(name, rep, rows)
    _print_summary(name, rep, rep.summary())
    fallbacks = {"before": replay_fallback_facts(brun.identity, brun.parsed),
                 "after": replay_fallback_facts(arun.identity, arun.parsed)}
    print_replay_fallbacks(name, "ab", fallbacks)
    # Beside the replay facts; no REPLAY_RESULTS_DIFFER here: side B also carries the switch,
    # so only --ab-rounds' A replays (same switch value as the record) can blame the replay.
    results_report.print_line(name, "ab", res)
    # The screen's every-level verdict, judged once; the band and every view read this.
    code = pair_code(brun, arun)
    band = views.ab_noise_band(brun.dir, code, rep.summary(), runs)
    print(f"[ab] {name}: IR: {code_text(code)}")
    what = changes.pair_changes(brun, arun, code)   # per kernel, when the code differs
    for line in changes.text_lines(f"[ab] {name}", what):
        print(line)
    print(f"[ab] {name}: noise band: " + (
        f"{fmt_pct(band['noise_band_pct'][0])} ~ {fmt_pct(band['noise_band_pct'][1])} "
        f"({band['noise_source']})" if band["noise_band_pct"] else f"unknown ({band['noise_source']})"))
    result = results_report.ordered(_as_json(name, brun.log, arun.log, rep, caliber, fallbacks,
                                             code, band, rows, block, what), res)
    if not rep.paired:
        result["status"] = "no_paired_rows"
        raise NoReport(f"{name}: no row succeeded on both sides: no speedup to report", result)
    result["status"] = "ok"
    return views.augment(result, {"before": brun, "after": arun})
