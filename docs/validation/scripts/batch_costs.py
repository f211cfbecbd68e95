#!/usr/bin/env python3
"""Per case of a run_batch.py batch: where zl_bench's seconds went, beside upstream's.

    python3 docs/validation/scripts/batch_costs.py <batch_dir> [<upstream per_node.tsv>]   # TSV on stdout

Reads `<batch_dir>/ops_status.csv` and each case's `run.log` cost lines (the graph timer's
ledger, the results check, the IR fingerprints, the IR plugin's callbacks and dump;
`zl.runlog.costs`). With device_batch.sh's `upstream/per_node.tsv` (upstream `pytest --mode
cudagraph`, one process per node) each case also gets upstream's seconds and zl_bench's excess.
A summary goes to stderr. On a --share-device batch every figure was taken under contention:
compare it only with upstream run at the same concurrency.
Exit status: 0 done, 2 bad arguments or an unreadable input.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from zl.runlog.costs import batch_cost_rows, cost_table, read_upstream_per_node, summarise  # noqa: E402


def main(argv):
    if argv in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if len(argv) not in (1, 2):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        upstream = read_upstream_per_node(Path(argv[1])) if len(argv) == 2 else None
        rows = batch_cost_rows(Path(argv[0]), upstream)
    except (OSError, ValueError) as exc:
        print(f"!!! {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(cost_table(rows) or "run_name\n")
    for line in summarise(rows):
        print("# " + line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
