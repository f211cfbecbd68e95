#!/usr/bin/env python3
"""The report of a batch_vs_upstream.sh batch root: statuses, failure reasons counted, cases per
hour by stage wall for zl_bench and upstream, screen verdicts (report.txt, on stdout).

    python3 benchmarks/batch_report.py BATCH_ROOT SHARE UPSTREAM_JOBS PLAIN_NAME

BATCH_ROOT is the folder batch_vs_upstream.sh filled (commands.tsv, PLAIN_NAME/ops_status.csv,
screen/, upstream/per_node.tsv, upstream/one_process.log); SHARE the cases run at once per GPU
(above 1 every figure is a functional sweep's, never a timing); UPSTREAM_JOBS the upstream
nodes run at once. Rerunnable on a returned bundle (`tar -xzf batch_validation.tgz -C dir`).
Exit status: 0 done, 2 bad arguments or input (a missing batch root, a SHARE or UPSTREAM_JOBS that is
not a positive integer, a malformed per_node.tsv line, a wall_s or elapsed_ms that is not a number).
"""
import argparse
import collections
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from zl.runlog.costs import pytest_finished, read_upstream_per_node  # noqa: E402

ap = argparse.ArgumentParser(prog="batch_report.py", description=__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("batch_root", help="the batch root batch_vs_upstream.sh filled")
def positive(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return text
ap.add_argument("share", type=positive, help="cases at once per GPU (1 = timings)")
ap.add_argument("upstream_jobs", type=positive, help="upstream nodes at once")
ap.add_argument("plain_name", help="the plain batch's folder under the root")
args = ap.parse_args()
if not Path(args.batch_root).is_dir():
    print(f"!!! {args.batch_root}: no such batch root", file=sys.stderr)
    sys.exit(2)
root = Path(args.batch_root)
if args.share != "1":
    print(f"!!! SHARE={args.share}: {args.share} cases at once per GPU; a functional sweep: "
          "elapsed times, cases/hour and every latency below are NOT timings")
def rows(p):
    return list(csv.DictReader(open(p, newline=""), delimiter="\t" if p.suffix == ".tsv" else ",")) if p.is_file() else []
def number(text, what):
    try:
        return float(text)
    except ValueError:
        print(f"!!! {what}: {text!r} is not a number", file=sys.stderr)
        sys.exit(2)
commands = rows(root / "commands.tsv")
plain = args.plain_name
def walls_of(stage):
    return [number(r["wall_s"], "commands.tsv wall_s") for r in commands if stage(r["stage"])]
def per_wall(n, walls, unit):
    # at SHARE > 1 the slots overlap: throughput is cases over the stage's wall time (every
    # call that ran the stage, reruns of TIMEOUT cases included)
    if walls:
        print(f"   {n} {unit}(s) over {sum(walls):g} s of stage wall: "
              f"{3600 * n / max(sum(walls), 1):.0f} {unit}s/hour on one device")
# the screen's two sides share their stage's wall: no per-side throughput for them
for name, path, stage in (("plain batch", root / plain / "ops_status.csv", plain),
                          ("screen side A", root / "screen/before/ops_status.csv", None),
                          ("screen side B", root / "screen/after/ops_status.csv", None)):
    rs = rows(path)
    if not rs:
        continue
    st = collections.Counter(r["status"] for r in rs)
    print(f"== {name}: {len(rs)} cases: " + ", ".join(f"{k}={v}" for k, v in sorted(st.items())))
    notes = collections.Counter()
    for r in rs:
        for part in (r.get("notes") or "").split(";"):
            key = part.split("(")[0].split("=")[0]
            if key in ("dtype_fallback", "dtype_rescue", "skipped", "no_cudagraph", "replay_fallback", "timeout_s"):
                notes[key] += 1
            if part.startswith("reason="):
                notes["reason: " + part[7:90]] += 1
    for k, v in notes.most_common():
        print(f"   {v:>3} x {k}")
    ran = [r for r in rs if r["elapsed_ms"] and r["status"] not in ("PENDING", "RUNNING", "INTERRUPTED", "NOT_RUN")]
    secs = sum(number(r["elapsed_ms"], f"{path} elapsed_ms") for r in ran) / 1000
    if ran and not secs > 0:   # FAIL rows of a case that never started record 0
        print(f"   {len(ran)} case(s), no case time recorded (elapsed_ms 0)")
    elif ran:
        print(f"   {len(ran)} case(s) in {secs:.0f} s of case time: {3600 * len(ran) / secs:.0f} cases/hour per slot")
        per_wall(len(ran), walls_of(lambda st: st == stage), "case")
up = root / "upstream/per_node.tsv"
if up.is_file():
    try:
        nodes = list(read_upstream_per_node(up).values())   # (rc, seconds)
    except ValueError as exc:
        print(f"!!! {exc}", file=sys.stderr)
        sys.exit(2)
    if nodes:
        secs = sum(sec for _, sec in nodes)
        print(f"== upstream one process per node: {len(nodes)} node(s), rc 0 on "
              f"{sum(rc == 0 for rc, _ in nodes)}, {secs} s of node time: {3600 * len(nodes) / max(secs, 1):.0f} nodes/hour "
              f"per slot ({args.upstream_jobs} at a time)")
        per_wall(len(nodes), walls_of(lambda st: st.startswith("upstream_per_node")), "node")
one = root / "upstream/one_process.log"
if one.is_file():
    # pytest -s puts the outcome on a line of its own after the benchmark's table
    done = len(pytest_finished(one.read_text(errors="replace")))
    runs = [r for r in commands if r["stage"] == "upstream_one_process"]
    if runs:
        wall = number(runs[-1]["wall_s"], "commands.tsv wall_s")
        print(f"== upstream one process: {done} node(s) finished in {wall:g} s of wall: "
              f"{3600 * done / max(wall, 1):.0f} nodes/hour (rc {runs[-1]['rc']})")
for r in commands:
    if r["stage"].startswith(("upstream", "plain", "screen")):
        print(f"   stage {r['stage']}: {r['wall_s']} s wall, rc {r['rc']}")
v = collections.Counter(r["verdict"] for r in rows(root / "screen/screen.tsv"))
if v:
    print("== screen verdicts: " + ", ".join(f"{k}={n}" for k, n in sorted(v.items())))
