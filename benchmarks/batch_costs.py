#!/usr/bin/env python3
"""Per case of a run_batch.py batch: where zl_bench's seconds went, beside upstream's.

    python3 benchmarks/batch_costs.py BATCH_DIR [UPSTREAM_PER_NODE_TSV]     # TSV on stdout

Reads `BATCH_DIR/ops_status.csv` and each case's `run.log` cost lines (the graph timer's
ledger, the results check, the IR fingerprints, the IR plugin's callbacks and dump;
`zl.runlog.costs`). With batch_vs_upstream.sh's `upstream/per_node.tsv` (upstream `pytest
--mode cudagraph`, one process per node) each case also gets upstream's seconds and zl_bench's
excess. A summary goes to stderr. On a --share-device batch every figure was taken under
contention: compare it only with upstream run at the same concurrency.
Exit status: 0 done, 2 bad arguments or an unreadable input.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from zl.runlog.costs import batch_cost_rows, cost_table, read_upstream_per_node, summarise  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="batch_costs.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("batch_dir", help="a run_batch.py batch directory (ops_status.csv)")
    ap.add_argument("per_node", nargs="?", help="upstream's per_node.tsv (node, rc, seconds)")
    args = ap.parse_args(argv)
    try:
        upstream = read_upstream_per_node(Path(args.per_node)) if args.per_node else None
        rows = batch_cost_rows(Path(args.batch_dir), upstream)
    except (OSError, ValueError) as exc:
        print(f"!!! {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(cost_table(rows) or "run_name\n")
    for line in summarise(rows):
        print("# " + line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
