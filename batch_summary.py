#!/usr/bin/env python3
"""Summaries and A/B reports over FlagGems benchmark run.logs.

Modes:
  BATCH_DIR [-o OUT.csv]
      summary.csv for a run_batch.py batch (<batch>/<repo>/<op>/run.log), one row per
      measured row, with backend/device/timer and the operator's status and notes from
      <batch>/ops_status.csv. Rerunnable on old batches. Rows measured on a shared device
      (run_batch.py --share-device N) carry device_share=N and a `!!!` line says their
      latencies and speedups are functional only, not timings. Each row names its
      device_name/device_arch (its identity, else run_batch.py --executor ray's notes); rows
      of more than one print `!!! ... MIXED HARDWARE` (--batch too, in its timing_warning;
      --screen too, from its cells' run identities).
  --ab BEFORE AFTER [--label OP]
      pair two runs (run.log paths or run directories) by shape; per-shape gems
      latency before -> after and speedup % = before/after - 1; one summary line;
      every autotune key the replay side tuned live (AUTOTUNE_REPLAY_FALLBACK) listed.
  --ab-rounds ROOT [--campaign ID] [--label OP]
      an N-round A/B laid out as ROOT/r<k>_<A|B>/run.log (ab_repeat.sh): per-shape
      medians over rounds, per-round delta range, sign stability, side spreads,
      Mann-Whitney verdicts (>= 4 rounds) and a geomean with a bootstrap 95% CI.
  --screen ROOT | --batch DIR
      a screen root (ab_rlc_test.sh's screen.tsv + cell run dirs) or a run_batch.py
      batch (ops_status.csv) as one row per operator, failures grouped by reason. A
      run_batch.py --switch --retune screen also gets A vs C (side C re-tuned live) beside
      A vs B, and per autotune key C's pick against A's and what B's replay made of A's;
      a --rounds screen, each node's --ab-rounds (controls: its A/A nodes' rounds). A
      --judge-first batch is reported through its timed stage with stage 1 beside it
      (verdict counts, the baseline and its check, every node not judged with the reason).
  --caliber RUN_DIR | --caliber-header
      the run's caliber fields as one TSV row (for screen.tsv and other tools).
  --cell-stats RUN_DIR
      one TSV row `success failed replay_fallback no_cudagraph capture_poisoned` from the
      run's log through this parser (the drivers' status.tsv / screen.tsv counts; failed =
      FAILED rows + failed pytest tests, since a failed shape never prints a row). A run
      without a readable run.log prints zeros with failed=1.
  --json FILE works with every mode; --html FILE / --png DIR with --ab, --ab-rounds,
  --screen, --batch (a self-contained HTML page / the page's charts as PNGs; zl/report;
  needs matplotlib).

Before any latency is read, --ab / --ab-rounds compare every run's run_identity.json
(zl/runlog/caliber.py CALIBER_FIELDS, autotune pinning); a mismatch, a missing identity,
no replaying side, a replay that could not use its record (replay_fallback), or cells of
mixed campaigns print `!!! [caliber] ...` and refuse. --screen prints each cell's problems
the same way (before any speed) and gives that cell no FASTER/SLOWER/SAME (UNCLEAR, naming
them) and no place among the A/A controls and the noise band; the other cells are judged.
--allow-caliber-mismatch lets a caliber or pinning problem through and still prints every
problem (a refused A/A cell is still no control). --ab-rounds counts
the cells of one campaign (campaign_id in each cell's identity; --campaign picks one,
else the newest) and names the cells it used and ignored.

Both reports also check results (zl/results, recorded by _results_plugin): side B's outputs
vs side A's (--ab-rounds: every cell vs r1_A) and each vs torch, as `match`, `within_tol`,
`MISMATCH (k/n shapes, worst error ...)` or `n/a (reason)`. A MISMATCH is the first line
(`!!! [ab] OP: WRONG RESULTS ...`) and the JSON's first key (`results`); the value is
printed beside the replay facts, and an A replay that did not reproduce r1_A's outputs is
marked `REPLAY_RESULTS_DIFFER label= side=`. It does not change the exit code.

Code: every report judges a pair's generated code with the screen's own every-level verdict
(zl/screen_verdict.py: IR_CHANGED@<level>, BINARY_CHANGED, VARIANTS_DIFFER, NO_IR_DIFF, NO_IR;
--ab-rounds: r1_A vs r1_B) and calls a pair an A/A, its range the noise band, only when every
level either side recorded, binary included, is identical on both sides. Where the code differs
(--ab, --ab-rounds r1_A vs r1_B, --screen), each kernel variant that differs is listed with its
facts on both sides (num_warps, num_stages, shared memory, registers and spills when the IR
plugin recorded them, else "not recorded", ttg.convert_layout count, lines), the first lines of
its first differing IR level and its IR files; a node's change signature ("+1 convert_layout,
-8 registers", "code only") groups a screen's changed cells (zl/report/changes.py).

Verdicts: each shape of --ab, --ab-rounds and --screen is FASTER, SLOWER, SAME or UNCLEAR
(zl/report/verdicts.py): FASTER/SLOWER only when |delta| exceeds its latency class's
threshold, calibrated from every-level A/A controls of the same caliber (--controls DIR...,
the screen root an --ab pair sits in, an --ab-rounds campaign's same-side cells across
rounds, a screen's own A/A cells and --controls) for at most --false-alarm false alarms per unchanged shape,
and with rounds only when the Mann-Whitney test agrees; the rule, the thresholds and the
expected number of false verdicts are printed before the per-shape list.

Completion: a run finished when its run.log ends with pytest's final summary line and, where
its identity records `finished`, that says `complete`. An unfinished side makes an --ab report
INCOMPLETE (`complete: false`, exit 0 as for unpaired rows); --ab-rounds drops its round.
The reports themselves live in zl/report/ (ab.py, rounds.py, guard.py, results.py, run.py).

Examples:
  python batch_summary.py runs/batch_X                       # -> runs/batch_X/summary.csv
  python batch_summary.py --ab runs/A runs/B --html ab.html
  python batch_summary.py --ab-rounds <root>/mm@float16 --label mm --json report.json --html rounds.html
  python batch_summary.py --screen runs/ab_rlc_X --html screen.html
  python batch_summary.py --batch runs/batch_X --html batch.html
  python batch_summary.py --caliber runs/A

Outputs:
  The report on stdout (TSV rows for --caliber, --caliber-header, --cell-stats; --batch prints
  only its `!!!` lines, its report is --json/--html/--png); BATCH_DIR mode writes
  <batch>/summary.csv (or -o). --json FILE, --html FILE and --png DIR are checked
  before anything runs (writable; not an input file, not inside an input run directory).
  Pages are drawn before --json says `ok`; a refused or failed report replaces the --json
  file with the failure and removes an earlier page and its charts. --json is standard JSON:
  a non-finite number would be null and listed under `non_finite_values`; a row whose latency
  ratio is not finite (e.g. 1e-320 ms) is unpaired with that reason.

Exit codes:
  0  ok; a report marked INCOMPLETE is still 0 (unpaired rows, failed tests, a run that did
     not finish: --json says `complete: false`, --ab-rounds drops that round)
  2  usage error or unusable input (missing or malformed run.log, a malformed ops_status.csv
     (BATCH_DIR, --batch), a malformed legend line named by file:line, a run compared with
     itself, --false-alarm outside 0 < RATE <= 0.5, a --controls directory of no known
     layout, an unwritable output or one equal to an input file or inside an input run
     directory, scipy or matplotlib missing, a page that could not be drawn)
  4  refusal: the runs are not comparable (caliber, autotune pinning, mixed campaigns)
  5  no report (zero paired rows, fewer than 2 complete rounds, no shape measured in every
     round, a screen stopped before it judged any cell: its INCOMPLETE line names the
     requested cells)
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from zl import atomic, cli_help
from zl.report.ab import report_ab
from zl.report.guard import (EXIT_CALIBER, EXIT_NO_REPORT, EXIT_OK, EXIT_USAGE, BadInput,
                             NoReport, Refused, check_dir_target, check_json_target,
                             check_outputs_apart)
from zl.report.rounds import report_ab_rounds
from zl.report.screen import judge_first_root, report_screen
from zl.report import verdicts, views
from zl.report.run import LoadedRun
from zl.runlog import caliber as cal
from zl.runlog.parse import RunLogError, read_run_log

__all__ = ["main", "report_ab", "report_ab_rounds", "summarize", "cell_stats", "Refused",
           "BadInput", "NoReport", "SUMMARY_FIELDS"]

SUMMARY_FIELDS = [
    "repo", "op", "backend", "device", "device_name", "device_arch", "timer", "device_share",
    "fg_op_name", "dtype", "mode", "case_id", "row_status",
    "torch_lat", "gems_lat", "speedup", "extra_metrics", "size_detail",
    "op_status", "notes", "failures",
]
CELL_STATS_FIELDS = ("success", "failed", "replay_fallback", "no_cudagraph", "capture_poisoned")


# ---------------------------------------------------------------- batch summary.csv

OPS_STATUS_NEED = ("op", "repo", "status")   # the columns --batch needs too (views.batch_result)


def _ops_status_rows(path: Path) -> List[Dict[str, str]]:
    """ops_status.csv's rows; BadInput (exit 2) when it is not UTF-8 CSV, lacks the repo, op
    and status columns or a row, or a row has more cells than the header: a corrupt table is
    refused as --batch refuses it, never summarised with an empty op_status."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh, strict=True)
            rows, header = list(reader), list(reader.fieldnames or ())
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BadInput(f"{path}: not a readable ops_status.csv ({type(exc).__name__}: {exc})") from None
    if not rows or not set(OPS_STATUS_NEED) <= set(header):
        raise BadInput(f"{path}: no rows with {' and '.join(OPS_STATUS_NEED)} columns (expected "
                       f"columns {list(OPS_STATUS_NEED)}, got {header if rows else 'no rows'})")
    for i, row in enumerate(rows, 1):
        if None in row:
            raise BadInput(f"{path}: data row {i} has more cells than the header")
    return rows


def _read_ops_status(batch: Path) -> Dict[str, Dict[str, str]]:
    path = batch / "ops_status.csv"
    out: Dict[str, Dict[str, str]] = {}
    if not path.is_file():
        return out
    for row in _ops_status_rows(path):
        repo = (row.get("repo") or "").strip()
        for name in (row.get("run_name"), row.get("op")):
            if name:
                out.setdefault(f"{repo}/{name.strip()}", row)
        od = (row.get("out_dir") or "").strip()
        if od:
            out.setdefault(f"{Path(od).parent.name}/{Path(od).name}", row)
    return out


def _op_rows(log: Path, status: Dict[str, Dict[str, str]]) -> List[Dict[str, str]]:
    """summary.csv rows of one <repo>/<op>/run.log (one row even when nothing was measured)."""
    run = LoadedRun(log.parent, log)
    op_dir = run.dir
    repo = op_dir.parent.name
    srow = status.get(f"{repo}/{op_dir.name}", {})
    ident = cal.caliber_from(run.identity) or {}
    base = {
        "repo": repo, "op": srow.get("op") or op_dir.name,
        "backend": ident.get("backend") or srow.get("backend", ""),
        "device": ident.get("device") or srow.get("device") or srow.get("gpu", ""),
        "timer": ident.get("timer") or srow.get("timer", ""),
        "device_share": ident.get("device_share") or views.shared_device_of(srow.get("notes", "")),
        **dict(zip(("device_name", "device_arch"), views.device_of_row(ident, srow.get("notes", "")))),
        "op_status": srow.get("status", ""), "notes": srow.get("notes", ""),
    }
    try:
        parsed = run.parsed
    except RunLogError as exc:
        return [{**base, "failures": f"unreadable: {exc}"}]
    fail = parsed.failure_text() if parsed.n_failed else ""
    if not parsed.rows:
        return [{**base, "failures": fail}]
    rows, counter = [], {}
    for r in parsed.rows:
        i = counter.get((r.op, r.dtype), 0)
        counter[(r.op, r.dtype)] = i + 1
        rows.append({**base, **r.as_dict(), "case_id": f"case_{i:03d}", "failures": fail})
    return rows


def summary_rows(batch: Path) -> List[Dict[str, str]]:
    if not batch.is_dir():
        raise BadInput(f"no such batch directory: {batch}")
    logs = sorted(batch.glob("*/*/run.log"))
    if not logs:
        raise BadInput(f"{batch}: no <repo>/<op>/run.log found (is this a run_batch.py batch?)")
    status = _read_ops_status(batch)
    return [{k: r.get(k, "") for k in SUMMARY_FIELDS} for log in logs for r in _op_rows(log, status)]


def summarize(batch: Path, out_path: Optional[Path] = None) -> Tuple[Path, List[Dict[str, str]]]:
    """Write summary.csv (default <batch>/summary.csv); returns its path and its rows."""
    rows = summary_rows(batch)
    out_path = out_path or batch / "summary.csv"
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=SUMMARY_FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic.write_text(out_path, buf.getvalue())
    return out_path, rows


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
    p = cli_help.parser(__doc__, prog="batch_summary.py")
    p.add_argument("batch_dir", type=Path, nargs="?", help="run_batch.py batch directory")
    p.add_argument("-o", "--output", type=Path, default=None, help="summary CSV (default <batch>/summary.csv)")
    p.add_argument("--ab", nargs=2, type=Path, metavar=("BEFORE", "AFTER"),
                   help="two run.log paths or run directories to pair by shape")
    p.add_argument("--ab-rounds", type=Path, default=None, metavar="ROOT",
                   help="multi-round A/B root holding r<k>_A/run.log and r<k>_B/run.log")
    p.add_argument("--campaign", default=None, metavar="ID",
                   help="--ab-rounds: use this campaign_id's cells (default: the newest campaign)")
    p.add_argument("--label", default="", help="operator name shown in the report")
    p.add_argument("--controls", nargs="+", type=Path, default=(), metavar="DIR",
                   help="--ab/--ab-rounds/--screen: A/A controls for the per-shape verdicts: "
                        "screen roots (their every-level A/A cells) or --ab-rounds roots "
                        "(same-side cells across rounds), measured with the judged pair's caliber")
    p.add_argument("--false-alarm", type=float, default=verdicts.DEFAULT_FALSE_ALARM,
                   metavar="RATE", help="per-shape false-alarm target of the verdict rule, in "
                   "(0, 0.5] (default 0.05; a latency class needs >= 1/RATE - 1 A/A controls)")
    p.add_argument("--json", type=Path, default=None, metavar="FILE",
                   help="also write everything the mode shows as JSON (any mode)")
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


def _tsv_mode(args) -> Dict:
    """--caliber-header, --caliber, --cell-stats: one TSV line on stdout."""
    if args.caliber_header:
        print("\t".join(cal.CALIBER_FIELDS))
        return {"mode": "caliber-header", "fields": list(cal.CALIBER_FIELDS)}
    if args.cell_stats is not None:
        stats = cell_stats(args.cell_stats)
        print("\t".join(str(v) for v in stats))
        return {"mode": "cell-stats", "run": str(args.cell_stats),
                **dict(zip(CELL_STATS_FIELDS, stats))}
    if not args.caliber.is_dir():
        raise BadInput(f"no such run directory: {args.caliber}")
    caliber = cal.caliber_of(args.caliber)
    print(cal.caliber_row(caliber))
    return {"mode": "caliber", "run": str(args.caliber), "caliber": caliber}


def _run_mode(args) -> Dict:
    if args.caliber_header or args.cell_stats is not None or args.caliber is not None:
        return _tsv_mode(args)
    if args.batch_dir is not None:
        path, rows = summarize(args.batch_dir, args.output)
        print(f"[batch-summary] {len(rows)} row(s) -> {path}")
        warnings = [w for w in (views.shared_warning(r["device_share"] for r in rows),
                                views.hardware_warning((r["device_name"], r["device_arch"]) for r in rows)) if w]
        for w in warnings:
            print(f"!!! [batch-summary] {w}")
        warning = "; ".join(warnings) or None
        return {"mode": "batch", "batch": str(args.batch_dir), "csv": str(path),
                "timing_warning": warning, "rows": rows}
    if args.screen is not None:
        return report_screen(args.screen, args.false_alarm, args.controls, args.allow_caliber_mismatch,
                             args.stage1)
    if args.batch is not None:
        result = views.batch_result(args.batch)
        by_op = {o["op"]: o for o in result["ops"]}
        for op in result["wrong_results"]:
            print(f"!!! [batch-summary] {op}: WRONG RESULTS vs torch: {by_op[op]['results_torch']['value']}")
        if result["timing_warning"]:
            print(f"!!! [batch-summary] {result['timing_warning']}")
        return result
    if args.ab:
        return report_ab(args.ab[0], args.ab[1], args.label, args.allow_caliber_mismatch,
                         args.controls, args.false_alarm)
    return report_ab_rounds(args.ab_rounds, args.label, args.allow_caliber_mismatch,
                            args.campaign, args.controls, args.false_alarm)


class DrawingFailed(BadInput):
    """The page or a chart could not be drawn (exit 2): no page, no `status: ok`."""


def _write_pages(args, result: Dict) -> None:
    """--html/--png: a view of the same dict --json holds (augment() put the page's extras in).
    Drawn whole in memory before anything is written; DrawingFailed names what went wrong."""
    if not (args.html or args.png):
        return
    from zl.report import charts, html  # lazily: matplotlib only for --html/--png
    try:
        html.write_report(result, args.html, args.png)
    except charts.MissingMatplotlib as exc:
        raise DrawingFailed(str(exc)) from None
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - any drawing failure: named, and no stale page
        raise DrawingFailed(f"could not draw the page ({type(exc).__name__}: {exc})") from None
    print(f"[batch-summary] report -> {args.html or ''} {args.png or ''}".rstrip())


def _clear_pages(args) -> None:
    """A refused or failed report leaves no page or chart of an earlier report behind."""
    if not (args.html or args.png):
        return
    from zl.report.html import clear_report  # no matplotlib needed
    try:
        for path in clear_report(args.html, args.png):
            print(f"[batch-summary] removed {path} (an earlier report; this one has no page)",
                  file=sys.stderr)
    except OSError as exc:
        print(f"!!! [batch-summary] could not remove an earlier page: {exc}", file=sys.stderr)


def _write_json(path: Optional[Path], result: Dict) -> None:
    if path is not None and result:
        atomic.write_text(path, json_text(result))


def json_text(result: Dict) -> str:
    """Standard JSON (no Infinity/NaN, which json.loads elsewhere may reject): a non-finite
    float left in the dict becomes null and its place is listed under `non_finite_values`."""
    found: List[str] = []
    clean = _finite(result, "", found)
    if found:
        clean["non_finite_values"] = found
    return json.dumps(clean, indent=2, default=str, allow_nan=False) + "\n"


def _finite(obj, where: str, found: List[str]):
    if isinstance(obj, float) and not math.isfinite(obj):
        found.append(f"{where or '.'}={obj!r}")
        return None
    if isinstance(obj, dict):
        return {k: _finite(v, f"{where}.{k}", found) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v, f"{where}[{i}]", found) for i, v in enumerate(obj)]
    return obj


def _write_json_quietly(path: Optional[Path], result: Dict) -> None:
    """On a failure path: a second error must not hide the first one."""
    try:
        _write_json(path, result)
    except OSError as exc:
        print(f"!!! [batch-summary] --json {path}: {exc}", file=sys.stderr)


def _mode(args) -> str:
    return ("ab" if args.ab else "ab-rounds" if args.ab_rounds is not None else "screen"
            if args.screen is not None else "batch" if args.batch is not None else "other")


def _failure_json(args, status: str, code: int, **fields) -> Dict:
    """What --json holds when there is no report: a file left from an earlier, successful
    report at that path must not stand in for this one."""
    return {"mode": _mode(args), "status": status, "exit_code": code, **fields}


def _check_outputs(args) -> None:
    """Before anything runs or is written: no output inside the inputs, every output writable."""
    mode = _mode(args)
    if mode != "other":
        dirs, files = views.report_inputs(mode, {"ab": args.ab, "ab-rounds": args.ab_rounds,
                                                 "screen": args.screen, "batch": args.batch}[mode])
        for root in args.controls:   # the A/A controls are inputs too
            dirs += sorted(p.parent for p in Path(root).glob("*/run.log"))
            files.append(Path(root) / "screen.tsv")
        check_outputs_apart([("--json", args.json), ("--html", args.html), ("--png", args.png)],
                            dirs, files)
    check_json_target(args.json)
    check_json_target(args.html, "--html")
    check_dir_target(args.png, "--png")


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    modes = [bool(args.ab), args.ab_rounds is not None, args.caliber is not None,
             args.caliber_header, args.batch_dir is not None, args.cell_stats is not None,
             args.screen is not None, args.batch is not None]
    if sum(modes) != 1:
        print("batch_summary.py: give exactly one of BATCH_DIR, --ab, --ab-rounds, --screen, --batch, "
              "--caliber, --caliber-header, --cell-stats (see --help)", file=sys.stderr)
        return EXIT_USAGE
    if (args.html or args.png) and not (args.ab or args.ab_rounds or args.screen or args.batch):
        print("batch_summary.py: --html/--png go with --ab, --ab-rounds, --screen or --batch",
              file=sys.stderr)
        return EXIT_USAGE
    if args.controls and not (args.ab or args.ab_rounds or args.screen):
        print("batch_summary.py: --controls goes with --ab, --ab-rounds or --screen",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        verdicts.check_false_alarm(args.false_alarm)
    except verdicts.BadFalseAlarm as exc:
        print(f"batch_summary.py: --false-alarm: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        args.screen, args.stage1 = judge_first_root(args.screen) if args.screen else (None, None)
        if args.batch is not None and (args.batch / "ops_status.csv").is_file():
            _ops_status_rows(args.batch / "ops_status.csv")   # refused as BATCH_DIR refuses it
        _check_outputs(args)
    except BadInput as exc:  # nothing was written, nothing removed
        print(f"!!! [batch-summary] {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        # --ab / --ab-rounds put what the page shows beyond the text report into the dict
        # (views.augment), so --json holds every number on the page.
        result = _run_mode(args)
        # The page first: --json says `ok` only once the page it describes exists.
        _write_pages(args, result)
        _write_json(args.json, result)
        return EXIT_OK
    except Refused as exc:
        _clear_pages(args)
        _write_json_quietly(args.json, _failure_json(args, "refused", EXIT_CALIBER,
                                             caliber_problems=exc.problems))
        return EXIT_CALIBER
    except NoReport as exc:
        print(f"!!! [no report] {exc} (exit {EXIT_NO_REPORT})")
        _clear_pages(args)
        _write_json_quietly(args.json, {**exc.result, "exit_code": EXIT_NO_REPORT, "message": str(exc)})
        return EXIT_NO_REPORT
    except (BadInput, OSError, views.ReportInputError, verdicts.BadControls) as exc:
        print(f"!!! [batch-summary] {exc}", file=sys.stderr)
        _clear_pages(args)
        _write_json_quietly(args.json, _failure_json(args, "error", EXIT_USAGE, message=str(exc)))
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
