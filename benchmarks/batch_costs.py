#!/usr/bin/env python3
"""Per case of a run_batch.py batch: where zl_bench's seconds went, beside upstream's.

    python3 benchmarks/batch_costs.py BATCH_DIR [UPSTREAM_PER_NODE_TSV]     # TSV on stdout
    python3 benchmarks/batch_costs.py BATCH_DIR --wall-s 158 --slots 16 --inventory 1117

Reads `BATCH_DIR/ops_status.csv` and each case's `run.log` cost lines (the graph timer's
ledger, the results check, the IR fingerprints, the IR plugin's callbacks and dump;
`zl.runlog.costs`). With batch_vs_upstream.sh's `upstream/per_node.tsv` (upstream `pytest
--mode cudagraph`, one process per node) each case also gets upstream's seconds and zl_bench's
excess. A summary goes to stderr. On a --share-device batch every figure was taken under
contention: compare it only with upstream run at the same concurrency.
With --wall-s (the batch's wall, which the batch directory does not keep) the summary adds the
rate: side runs per hour, statuses, case seconds, CPU-s per PASS side run (costs.tsv, else the
run logs), cores busy; with --slots N, the rate if N cases had always been running (N x 3600 s
over the mean case seconds); with --inventory M, minutes for M side runs at each rate.
Exit status: 0 done, 2 bad arguments or an unreadable input.
"""
import argparse
import collections
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from zl.runlog.costs import batch_cost_rows, cost_table, read_upstream_per_node, summarise  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="batch_costs.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("batch_dir", help="a run_batch.py batch directory (ops_status.csv)")
    ap.add_argument("per_node", nargs="?", help="upstream's per_node.tsv (node, rc, seconds)")
    ap.add_argument("--wall-s", type=float, help="the batch's wall seconds: add the rate to the summary")
    ap.add_argument("--slots", type=int, help="with --wall-s: cases the batch ran at once")
    ap.add_argument("--inventory", type=int, help="with --wall-s: side runs to project the minutes for")
    args = ap.parse_args(argv)
    if args.wall_s is None and (args.slots or args.inventory):
        ap.error("--slots and --inventory need --wall-s")
    if (args.wall_s is not None and args.wall_s <= 0) or (args.slots or 1) < 1 or (args.inventory or 1) < 1:
        ap.error("--wall-s, --slots and --inventory must be positive")
    try:
        upstream = read_upstream_per_node(Path(args.per_node)) if args.per_node else None
        rows = batch_cost_rows(Path(args.batch_dir), upstream)
    except (OSError, ValueError) as exc:
        print(f"!!! {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(cost_table(rows) or "run_name\n")
    for line in summarise(rows):
        print("# " + line, file=sys.stderr)
    if args.wall_s is not None:
        for line in rate_lines(Path(args.batch_dir), rows, args.wall_s, args.slots, args.inventory):
            print("# " + line, file=sys.stderr)
    return 0


def rate_lines(batch: Path, rows, wall: float, slots, inventory) -> list:
    """The batch's rate over `wall` seconds, and what `slots` never idle would give. The case
    seconds are ops_status.csv's milliseconds (batch_cost_rows rounds each to 0.1 s)."""
    with open(batch / "ops_status.csv", newline="") as fh:
        cases = list(csv.DictReader(fh))
    if not cases:
        return [f"rate: no case in {batch / 'ops_status.csv'}"]
    source = rows
    if (batch / "costs.tsv").is_file():
        with open(batch / "costs.tsv", newline="") as fh:
            source = list(csv.DictReader(fh, delimiter="\t"))
    cpu = {r["run_name"]: float(r["cpu_s"]) for r in source if _number(r.get("cpu_s"))}
    status = {r["run_name"]: r["status"] for r in cases}
    passed = [cpu[n] for n in cpu if status.get(n) == "PASS"]
    case_s = sum(float(r.get("elapsed_ms") or 0) / 1000 for r in cases)
    n = len(cases)
    rate = n / wall * 3600
    counts = ", ".join(f"{k} {v}" for k, v in sorted(collections.Counter(status.values()).items()))
    out = [f"rate: {n} side run(s) in {wall:.1f} s: {rate:.1f} per hour ({counts})",
           f"case seconds {case_s:.1f} (mean {case_s / n:.1f} s a side run); cores busy "
           f"{sum(cpu.values()) / wall:.2f}"
           + (f"; CPU-s per PASS side run: median {statistics.median(passed):.1f}, mean "
              f"{statistics.mean(passed):.1f}" if passed else "")]
    full = slots * 3600 / (case_s / n) if slots and case_s else None
    if full:
        out.append(f"with {slots} slot(s) never idle: {full:.1f} side runs per hour")
    if inventory:
        out.append(f"{inventory} side runs: {inventory / rate * 60:.1f} minutes at the measured rate"
                   + (f", {inventory / full * 60:.1f} with {slots} slot(s) never idle" if full else ""))
    return out


def _number(text) -> bool:
    try:
        float(text)
        return True
    except (TypeError, ValueError):
        return False


if __name__ == "__main__":
    sys.exit(main())
