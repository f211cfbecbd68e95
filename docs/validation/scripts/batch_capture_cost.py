#!/usr/bin/env python3
"""Per case of a run_batch.py batch: what the results check and the IR fingerprints added.

    python3 docs/validation/scripts/batch_capture_cost.py <batch_dir>   # TSV on stdout

Reads `<batch_dir>/ops_status.csv` and each case's `run.log` (the results plugin's
"N calls, X s outside the timed loops" line and the IR plugin's "recorded in X ms" line).
The share is (capture + fingerprints) / the case's elapsed time. On a --share-device batch
every figure was taken under contention: a functional indication, not a timing.
"""
import csv
import re
import sys
from pathlib import Path

CAPTURE = re.compile(r"\[results-plugin\] outputs of .* \((\d+) calls, ([0-9.]+) s outside the timed loops\)")
FINGERPRINT = re.compile(r"\[ir-meta-plugin\] IR fingerprints \S+ recorded in ([0-9.]+) ms")


def main(argv):
    if argv in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    if not (Path(argv[0]) / "ops_status.csv").is_file():
        print(f"!!! {argv[0]}: no ops_status.csv (not a run_batch.py batch directory)", file=sys.stderr)
        return 2
    root = Path(argv[0])
    out = csv.writer(sys.stdout, delimiter="\t", lineterminator="\n")
    out.writerow(["run_name", "status", "elapsed_s", "capture_calls", "capture_s", "fingerprint_ms", "share_pct"])
    shares = []
    for row in csv.DictReader(open(root / "ops_status.csv")):
        log = Path(row["out_dir"]).name
        text = (root / row["repo"] / log / "run.log")
        text = text.read_text(errors="replace") if text.is_file() else ""
        cap, fp = CAPTURE.findall(text), FINGERPRINT.findall(text)
        calls = sum(int(c) for c, _ in cap)
        cap_s = sum(float(s) for _, s in cap)
        fp_ms = sum(float(m) for m in fp)
        elapsed = float(row["elapsed_ms"] or 0) / 1000
        share = (cap_s + fp_ms / 1000) / elapsed * 100 if elapsed and cap else None
        if share is not None and row["status"] == "PASS":
            shares.append(share)
        out.writerow([row["run_name"], row["status"], f"{elapsed:.1f}", calls, f"{cap_s:.3f}", f"{fp_ms:.1f}",
                      "-" if share is None else f"{share:.2f}"])
    if shares:
        shares.sort()
        print(f"# PASS cases with a capture: {len(shares)}; share median {shares[len(shares) // 2]:.2f} %, "
              f"max {shares[-1]:.2f} %", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
