#!/usr/bin/env python
"""The graph timer's cost table pooled over repetitions: per operator, the median wall and
pytest time of upstream and of zl_bench's record run over every repetition given, zl_bench's
medians against upstream's, each repetition's own ratio and the median of those ratios.

    cost_table_pool.py --out OUT.md WORK[:op,op...] [WORK[:op,...] ...]

WORK is a `graph_timer_cost.py wall` work folder (its wall.json); `:op,op` keeps only those
operators from it (a repetition made before a fix that changes them is left out for the
others). One run pair moved the wall ratio of the same operator by up to 0.2 between two
calls on the H200 (index_select 1.01 and 1.22), so a single pair cannot show a 1.1x target
either way. From 3 pairs on, the median per-pair pytest ratio also gets a 95 % bootstrap
interval (scipy, percentile, fixed seed): with per-pair ratios spread 0.90-1.19 (clamp),
whether a median of 1.09 or 1.11 is above 1.1 is not settled by the median alone.
Outputs: OUT.md (the table), also printed.
Exit status: 0 written; 2 bad arguments or a work folder without wall.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from zl import atomic  # noqa: E402

# record runs only: after2/before2 replay their partner's autotune picks and skip the sweep
# that upstream and the record run both pay (mm: 5 s of pytest against 33 s)
KINDS = ("upstream", "after1")


def load(specs: list[str]) -> list[dict]:
    runs = []
    for spec in specs:
        folder, _, ops = spec.partition(":")
        path = Path(folder) / "wall.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file (not a graph_timer_cost.py wall folder)")
        keep = set(filter(None, ops.split(",")))
        for r in json.loads(path.read_text()):
            if (not keep or r.get("op") in keep) and r.get("kind") in KINDS and r.get("rc") == 0:
                runs.append(dict(r, call=folder))
    return runs


def median_interval(ratios: list[float]) -> str:
    """'lo-hi': a 95 % percentile-bootstrap interval of the median; '-' under 3 values."""
    if len(ratios) < 3:
        return "-"
    from scipy.stats import bootstrap
    ci = bootstrap((np.asarray(ratios),), np.median, confidence_level=0.95, n_resamples=9999,
                   method="percentile", random_state=0).confidence_interval
    return f"{ci.low:.2f}-{ci.high:.2f}"


def table(runs: list[dict]) -> str:
    # Two statistics: the ratio of the medians, and the median of each call's own ratio. The
    # second keeps each pair's shared conditions together: on the H200 one call ran every run
    # of clamp 1.4 s slower (both sides), which moved the first statistic by 0.07.
    lines = ["| op | calls | upstream wall s (pytest s), median | after1 wall (pytest), median "
             "| after1/upstream pytest | after1/upstream wall | per-call wall ratios "
             "| per-call pytest ratios | median per-call ratio, pytest (wall) "
             "| 95 % interval, median per-call pytest ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for op in dict.fromkeys(r["op"] for r in runs):
        med, pairs = {}, []
        for kind in KINDS:
            mine = [r for r in runs if r["op"] == op and r["kind"] == kind]
            med[kind] = {k: float(np.median([r[k] for r in mine])) if mine else None
                         for k in ("wall_s", "pytest_s")}
        for call in dict.fromkeys(r["call"] for r in runs if r["op"] == op):
            pair = {r["kind"]: r for r in runs if r["op"] == op and r["call"] == call}
            if len(pair) == 2:
                pairs.append({k: pair["after1"][k] / pair["upstream"][k] for k in ("wall_s", "pytest_s")})
        up, a1 = med["upstream"], med["after1"]

        def ratio(key):
            return f"{a1[key] / up[key]:.2f}" if up[key] and a1[key] else "-"

        def cell(m):
            return f"{m['wall_s']:.1f} ({m['pytest_s']:.2f})" if m["wall_s"] is not None else "-"
        def listed(key):
            return ", ".join(f"{p[key]:.2f}" for p in pairs) or "-"
        paired = (f"{np.median([p['pytest_s'] for p in pairs]):.2f} "
                  f"({np.median([p['wall_s'] for p in pairs]):.2f})") if pairs else "-"
        lines.append(f"| {op} | {len(pairs)} | {cell(up)} | {cell(a1)} | {ratio('pytest_s')} | "
                     f"{ratio('wall_s')} | {listed('wall_s')} | {listed('pytest_s')} | {paired} | "
                     f"{median_interval([p['pytest_s'] for p in pairs])} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="cost_table_pool.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the pooled table (markdown)")
    ap.add_argument("work", nargs="+", help="graph_timer_cost.py wall folders, each optionally :op,op")
    args = ap.parse_args(argv)
    try:
        runs = load(args.work)
    except (FileNotFoundError, json.JSONDecodeError) as exc:
        print(f"cost_table_pool.py: {exc}", file=sys.stderr)
        return 2
    text = table(runs)
    atomic.write_text(Path(args.out), text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
