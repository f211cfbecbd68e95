#!/usr/bin/env python3
"""Summaries and A/B reports over FlagGems benchmark run.logs.

    python batch_summary.py BATCH_DIR [-o OUT.csv]
        summary.csv for a run_batch.py batch (<batch>/<repo>/<op>/run.log), one row per
        measured row, with backend/device/timer and the operator's status and notes from
        <batch>/ops_status.csv. Rerunnable on old batches.
    python batch_summary.py --ab BEFORE AFTER [--label OP] [--json FILE]
        pair two runs (run.log paths or run directories) by shape; per-shape gems
        latency before -> after and speedup % = before/after - 1; one summary line.
    python batch_summary.py --ab-rounds ROOT [--label OP] [--json FILE]
        an N-round A/B laid out as ROOT/r<k>_<A|B>/run.log (ab_repeat.sh): per-shape
        medians over rounds, per-round delta range, sign stability, side spreads,
        Mann-Whitney verdicts (>= 4 rounds) and a geomean with a bootstrap 95% CI.
    python batch_summary.py --screen ROOT | --batch DIR  [--json FILE] [--html FILE] [--png DIR]
        a screen root (ab_rlc_test.sh's screen.tsv + cell run dirs) or a run_batch.py
        batch (ops_status.csv) as one row per operator, failures grouped by reason.
    --html FILE / --png DIR (with --ab, --ab-rounds, --screen, --batch): a self-contained
        HTML page / the page's charts as PNGs (zl/report; needs matplotlib).
    python batch_summary.py --caliber RUN_DIR | --caliber-header
        the run's caliber fields as one TSV row (for screen.tsv and other tools).
    python batch_summary.py --cell-stats RUN_DIR
        one TSV row `success failed replay_fallback no_cudagraph capture_poisoned` from the
        run's log through this parser (the drivers' status.tsv / screen.tsv counts; failed =
        FAILED rows + failed pytest tests, since a failed shape never prints a row). A run
        without a readable run.log prints zeros with failed=1.

Before any latency is read, --ab / --ab-rounds compare every run's run_identity.json
(runlog/caliber.py CALIBER_FIELDS); a mismatch, a missing identity, or every run in
record mode prints `!!! [caliber] ...` and refuses. --allow-caliber-mismatch lets the
report through and still prints every problem.

Exit codes: 0 ok; 2 usage error or unreadable input (missing run.log / directory,
not a benchmark log); 4 caliber refusal.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from zl import atomic
from zl.runlog import caliber as cal
from zl.runlog.parse import RunLogError, read_run_log, resolve_log
from zl.runlog.stats import analyse_rounds, key_text, load_rounds, pair_logs
from zl.report import views

EXIT_OK, EXIT_USAGE, EXIT_CALIBER = 0, 2, 4

SUMMARY_FIELDS = [
    "repo", "op", "backend", "device", "timer",
    "fg_op_name", "dtype", "mode", "case_id", "row_status",
    "torch_lat", "gems_lat", "speedup", "extra_metrics", "size_detail",
    "op_status", "notes", "failures",
]
MARKER_LABELS = {"no_cudagraph": "BENCHMARK_DIRECT_NO_CUDAGRAPH",
                 "replay_fallback": "AUTOTUNE_REPLAY_FALLBACK",
                 "capture_poisoned": "BENCHMARK_CAPTURE_POISONED"}


class Refused(Exception):
    """Caliber refusal (exit 4)."""


class BadInput(Exception):
    """Unreadable input (exit 2)."""


# ---------------------------------------------------------------- caliber

def check_caliber(runs: Sequence[Tuple[str, Path]], label: str, allow: bool) -> List[str]:
    """Print hazards and complaints; raise Refused unless allowed. Returns the problems."""
    for h in cal.hazards(runs):
        print(f"warning [caliber] {label}: {h}")
    problems = cal.complaints(runs)
    head = "!!! [caliber]" if not allow else "warning [caliber]"
    for p in problems:
        print(f"{head} {label}: {p}")
    if problems and not allow:
        print(f"!!! [caliber] {label}: no report. If the runs really are comparable, "
              "rerun with --allow-caliber-mismatch")
        raise Refused()
    return problems


# ---------------------------------------------------------------- --ab

def _fmt_pct(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:+.2f}%"


def _marker_note(before: Dict[str, int], after: Dict[str, int]) -> List[str]:
    notes = []
    for key in ("no_cudagraph", "replay_fallback", "capture_poisoned"):
        b, a = before.get(key, 0), after.get(key, 0)
        if b or a:
            notes.append(f"{MARKER_LABELS[key]} before={b} after={a}")
    return notes


def _identity_op(run_dir: Path) -> str:
    try:
        return str(json.loads((run_dir / cal.IDENTITY_NAME).read_text(encoding="utf-8")).get("op") or "")
    except (OSError, ValueError, AttributeError):
        return ""


def report_ab(before: Path, after: Path, label: str, allow: bool) -> Dict:
    try:
        blog, alog = resolve_log(before), resolve_log(after)
    except RunLogError as exc:
        raise BadInput(str(exc)) from None
    name = label or _identity_op(blog.parent) or blog.parent.name
    problems = check_caliber([("before", blog.parent), ("after", alog.parent)], name, allow)
    try:
        rep = pair_logs(read_run_log(blog), read_run_log(alog))
    except RunLogError as exc:
        raise BadInput(str(exc)) from None
    print(f"[ab] {name}: gems latency (ms) before -> after, speedup = before/after - 1")
    for p in rep.paired:
        _, dtype, detail, occ = p["key"]
        print(f"  {dtype:<16} {p['before_lat']:>12.6f} -> {p['after_lat']:<12.6f} "
              f"{p['speedup_pct']:+8.2f}%  {detail}{f' #{occ + 1}' if occ else ''}")
    for u in rep.unpaired:
        print(f"  UNPAIRED {key_text(u['key'])}: {u['reason']}")
    for side, n, text in (("before", rep.before_failed, rep.before_failures),
                          ("after", rep.after_failed, rep.after_failures)):
        if n:
            print(f"  FAILED {side}: {n} failed test(s): {text}")
    s = rep.summary()
    line = (f"[ab] {name}: {s['paired']} paired rows, range {_fmt_pct(s['min_pct'])} ~ "
            f"{_fmt_pct(s['max_pct'])}, median {_fmt_pct(s['median_pct'])}, "
            f"geomean {_fmt_pct(s['geomean_pct'])}")
    if not s["complete"]:
        line += (f"  INCOMPLETE: {s['unpaired']} unpaired row(s), failed tests "
                 f"before={rep.before_failed} after={rep.after_failed}")
    if not s["paired"]:
        line += "  NO PAIRED ROWS"
    print(line)
    notes = _marker_note(rep.before_markers, rep.after_markers)
    if notes:
        print(f"[ab] {name}: timing regime annotations: {'; '.join(notes)} "
              "(fallback rows were timed differently from captured ones)")
    return {
        "mode": "ab", "label": name, "before": str(blog), "after": str(alog),
        "caliber_problems": problems, "caliber_hazards": cal.hazards(
            [("before", blog.parent), ("after", alog.parent)]),
        "summary": s, "markers": {"before": rep.before_markers, "after": rep.after_markers},
        "failed_tests": {"before": rep.before_failed, "after": rep.after_failed},
        "failure_text": {"before": rep.before_failures, "after": rep.after_failures},
        "paired": [{"op": p["key"][0], "dtype": p["key"][1], "size_detail": p["key"][2],
                    "occurrence": p["key"][3], "before_lat": p["before_lat"],
                    "after_lat": p["after_lat"], "speedup_pct": p["speedup_pct"]}
                   for p in rep.paired],
        "unpaired": [{"op": u["key"][0], "dtype": u["key"][1], "size_detail": u["key"][2],
                      "occurrence": u["key"][3], "reason": u["reason"]} for u in rep.unpaired],
    }


# ---------------------------------------------------------------- --ab-rounds

def report_ab_rounds(root: Path, label: str, allow: bool) -> Dict:
    if not root.is_dir():
        raise BadInput(f"no such directory: {root}")
    from zl.runlog.stats import find_cells
    cells = find_cells(root)
    name = label or root.name
    if not cells:
        raise BadInput(f"{root}: no r<k>_<A|B>/run.log cells")
    problems = check_caliber([(d.name, d) for _, d in sorted(cells.items())], name, allow)
    try:
        data = load_rounds(root)
    except RunLogError as exc:
        raise BadInput(str(exc)) from None
    for msg in data.incomplete:
        print(f"!!! [ab-rounds] {name}: {msg} (excluded)")
    res = analyse_rounds(data)
    n = res["rounds"]
    out = {"mode": "ab-rounds", "label": name, "root": str(root), "caliber_problems": problems,
           **{k: v for k, v in res.items() if k not in ("shapes", "unpaired")}}
    out["shapes"] = [{
        "op": s["key"][0], "dtype": s["key"][1], "size_detail": s["key"][2],
        "occurrence": s["key"][3], **{k: v for k, v in s.items() if k != "key"}}
        for s in res["shapes"]]
    out["unpaired"] = [{"op": u["key"][0], "dtype": u["key"][1], "size_detail": u["key"][2],
                        "occurrence": u["key"][3], "reason": u["reason"]} for u in res["unpaired"]]
    markers = {f"r{k}_{s}": p.markers for (k, s), p in sorted(data.logs.items())}
    out["markers"] = markers
    if n < 2:
        print(f"[ab-rounds] {name}: need at least 2 complete rounds of r<k>_<A|B>/run.log "
              f"(found {n})")
        out["status"] = "too_few_rounds"
        return out
    if not res["shapes"]:
        print(f"[ab-rounds] {name}: {n} rounds, but no shape succeeded in every round on both sides")
    print(f"[ab-rounds] {name}: per shape: median speedup [per-round min~max] "
          "A median -> B median (ms), side spreads A/B, verdict (p)")
    for s in res["shapes"]:
        _, dtype, detail, occ = s["key"]
        p = "" if s["p_value"] is None else f" (p={s['p_value']:.3f})"
        flag = "" if s["sign_stable"] else "  SIGN-UNSTABLE"
        print(f"  {dtype:<16} {s['speedup_pct']:+7.2f}%  [{s['delta_min']:+.2f}%~{s['delta_max']:+.2f}%]"
              f"  {s['a_median']:.6f} -> {s['b_median']:.6f}  spread {s['a_spread_pct']:.2f}%/"
              f"{s['b_spread_pct']:.2f}%  {s['verdict']}{p}  {detail}"
              f"{f' #{occ + 1}' if occ else ''}{flag}")
    for u in res["unpaired"]:
        print(f"  UNPAIRED {key_text(u['key'])}: {u['reason']}")
    if not res["shapes"]:
        out["status"] = "no_shapes"
        return out
    pr = res["per_round_median_pct"]
    print(f"[ab-rounds] {name}: {n} rounds x {len(res['shapes'])} shapes, median speedup "
          f"{_fmt_pct(res['median_speedup_pct'])}, per-round medians "
          f"{' '.join(f'{x:+.2f}%' for x in pr)} (range {min(pr):+.2f}% ~ {max(pr):+.2f}%), "
          f"median side noise {res['median_side_noise_pct']:.2f}%")
    ci = res["geomean_ci95_pct"]
    print(f"[ab-rounds] {name}: geomean speedup {_fmt_pct(res['geomean_speedup_pct'])}"
          + (f", 95% bootstrap CI over rounds [{ci[0]:+.2f}%, {ci[1]:+.2f}%]" if ci else ""))
    counts = ", ".join(f"{k}={v}" for k, v in sorted(res["verdict_counts"].items()))
    print(f"[ab-rounds] {name}: verdicts: {counts}")
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
    out["status"] = "ok"
    return out


# ---------------------------------------------------------------- batch summary.csv

def _read_ops_status(batch: Path) -> Dict[str, Dict[str, str]]:
    path = batch / "ops_status.csv"
    out: Dict[str, Dict[str, str]] = {}
    if not path.is_file():
        return out
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        for row in csv.DictReader(fh):
            repo = (row.get("repo") or "").strip()
            for name in (row.get("run_name"), row.get("op")):
                if name:
                    out.setdefault(f"{repo}/{name.strip()}", row)
            od = (row.get("out_dir") or "").strip()
            if od:
                out.setdefault(f"{Path(od).parent.name}/{Path(od).name}", row)
    return out


def summarize(batch: Path, out_path: Optional[Path] = None) -> Tuple[Path, int]:
    if not batch.is_dir():
        raise BadInput(f"no such batch directory: {batch}")
    logs = sorted(batch.glob("*/*/run.log"))
    if not logs:
        raise BadInput(f"{batch}: no <repo>/<op>/run.log found (is this a run_batch.py batch?)")
    status = _read_ops_status(batch)
    rows: List[Dict[str, str]] = []
    for log in logs:
        op_dir = log.parent
        repo = op_dir.parent.name
        srow = status.get(f"{repo}/{op_dir.name}", {})
        ident = cal.caliber_of(op_dir) or {}
        base = {
            "repo": repo, "op": srow.get("op") or op_dir.name,
            "backend": ident.get("backend") or srow.get("backend", ""),
            "device": ident.get("device") or srow.get("device") or srow.get("gpu", ""),
            "timer": ident.get("timer") or srow.get("timer", ""),
            "op_status": srow.get("status", ""), "notes": srow.get("notes", ""),
        }
        try:
            parsed = read_run_log(log)
        except RunLogError as exc:
            rows.append({**base, "failures": f"unreadable: {exc}"})
            continue
        fail = parsed.failure_text() if parsed.n_failed else ""
        if not parsed.rows:
            rows.append({**base, "failures": fail})
            continue
        counter: Dict[Tuple[str, str], int] = {}
        for r in parsed.rows:
            k = (r.op, r.dtype)
            i = counter.get(k, 0)
            counter[k] = i + 1
            rows.append({**base, **r.as_dict(), "case_id": f"case_{i:03d}", "failures": fail})
    out_path = out_path or batch / "summary.csv"
    import io
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=SUMMARY_FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k, "") for k in SUMMARY_FIELDS})
    atomic.write_text(out_path, buf.getvalue())
    return out_path, len(rows)


def cell_stats(run_dir: Path) -> Tuple[int, int, int, int, int]:
    """(success, failed, replay_fallback, no_cudagraph, capture_poisoned) for one run."""
    try:
        p = read_run_log(run_dir)
    except RunLogError:
        return 0, 1, 0, 0, 0
    failed = sum(1 for r in p.rows if r.row_status == "FAILED") + p.n_failed
    return (len(p.success_rows()), failed, p.markers["replay_fallback"],
            p.markers["no_cudagraph"], p.markers["capture_poisoned"])


# ---------------------------------------------------------------- CLI

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="batch_summary.py", description=__doc__.splitlines()[0],
                                epilog="exit codes: 0 ok, 2 usage/unreadable input, 4 caliber refusal")
    p.add_argument("batch_dir", type=Path, nargs="?", help="run_batch.py batch directory")
    p.add_argument("-o", "--output", type=Path, default=None, help="summary CSV (default <batch>/summary.csv)")
    p.add_argument("--ab", nargs=2, type=Path, metavar=("BEFORE", "AFTER"),
                   help="two run.log paths or run directories to pair by shape")
    p.add_argument("--ab-rounds", type=Path, default=None, metavar="ROOT",
                   help="multi-round A/B root holding r<k>_A/run.log and r<k>_B/run.log")
    p.add_argument("--label", default="", help="operator name shown in the report")
    p.add_argument("--json", type=Path, default=None, metavar="FILE",
                   help="also write everything the report shows as JSON")
    p.add_argument("--allow-caliber-mismatch", action="store_true",
                   help="report even when the runs' calibers differ (problems are still printed)")
    p.add_argument("--caliber", type=Path, default=None, metavar="RUN_DIR",
                   help="print the run's caliber fields as one TSV row")
    p.add_argument("--cell-stats", type=Path, default=None, metavar="RUN_DIR",
                   help="print success/failed/marker counts of one run as a TSV row")
    p.add_argument("--caliber-header", action="store_true",
                   help="print the caliber field names as one TSV row")
    p.add_argument("--screen", type=Path, default=None, metavar="ROOT",
                   help="an ab_rlc_test.sh root (screen.tsv) as a report (--json/--html/--png)")
    p.add_argument("--batch", type=Path, default=None, metavar="DIR",
                   help="a run_batch.py batch (ops_status.csv) as a report (--json/--html/--png)")
    p.add_argument("--html", type=Path, default=None, metavar="FILE",
                   help="write a self-contained HTML report (needs matplotlib)")
    p.add_argument("--png", type=Path, default=None, metavar="DIR",
                   help="write the report's charts as PNG files into DIR (needs matplotlib)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    modes = [bool(args.ab), args.ab_rounds is not None, args.caliber is not None,
             args.caliber_header, args.batch_dir is not None, args.cell_stats is not None,
             args.screen is not None, args.batch is not None]
    if sum(modes) != 1:
        print("batch_summary.py: give exactly one of BATCH_DIR, --ab, --ab-rounds, --screen, --batch, "
              "--caliber, --caliber-header (see --help)", file=sys.stderr)
        return EXIT_USAGE
    if (args.html or args.png) and not (args.ab or args.ab_rounds or args.screen or args.batch):
        print("batch_summary.py: --html/--png go with --ab, --ab-rounds, --screen or --batch",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.caliber_header:
            print("\t".join(cal.CALIBER_FIELDS))
            return EXIT_OK
        if args.cell_stats is not None:
            print("\t".join(str(v) for v in cell_stats(args.cell_stats)))
            return EXIT_OK
        if args.caliber is not None:
            if not args.caliber.is_dir():
                raise BadInput(f"no such run directory: {args.caliber}")
            print(cal.caliber_row(args.caliber))
            return EXIT_OK
        if args.batch_dir is not None:
            path, n = summarize(args.batch_dir, args.output)
            print(f"[batch-summary] {n} row(s) -> {path}")
            return EXIT_OK
        if args.ab:
            result = report_ab(args.ab[0], args.ab[1], args.label, args.allow_caliber_mismatch)
        elif args.ab_rounds is not None:
            result = report_ab_rounds(args.ab_rounds, args.label, args.allow_caliber_mismatch)
        elif args.screen is not None:
            result = views.screen_result(args.screen)
        else:
            result = views.batch_result(args.batch)
        # What the HTML page shows beyond the text report goes into the dict first, so
        # --json holds every number on the page.
        views.augment(result)
        if args.json is not None:
            atomic.write_text(args.json, json.dumps(result, indent=2, default=str) + "\n")
        if args.html or args.png:
            from zl.report import charts, html  # lazily: matplotlib only for --html/--png
            try:
                html.write_report(result, args.html, args.png)
            except charts.MissingMatplotlib as exc:
                print(f"!!! [batch-summary] {exc}", file=sys.stderr)
                return EXIT_USAGE
            print(f"[batch-summary] report -> {args.html or ''} {args.png or ''}".rstrip())
        return EXIT_OK
    except views.ReportInputError as exc:
        print(f"!!! [batch-summary] {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Refused:
        return EXIT_CALIBER
    except BadInput as exc:
        print(f"!!! [batch-summary] {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"!!! [batch-summary] {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
