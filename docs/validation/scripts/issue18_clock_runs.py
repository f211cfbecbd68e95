#!/usr/bin/env python
"""Issue 18, session 14: what the cold clocks cost a real FlagGems run, and what they read.

    issue18_clock_runs.py --out OUT.md CALL_DIR...

Each CALL_DIR holds `clock_runs/<op>_<l2>_<clock>/` folders from device_session14.sh's
`node_run` (wall.txt, output.log, run_identity.json). The table lists per run: exit status,
wall and pytest seconds, the graph timer's capture-and-replay seconds (its ledger line), the
identity's l2 / cold_clock and FlagGems' latency per shape; then, per call and operator, the
cold kernels clock's wall and pytest time over the cold events clock's.
Exit status: 0 written, 2 no run folder found.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from zl import atomic  # noqa: E402

WALL = re.compile(r"rc=(\S+) wall_ms=(\d+)")
PYTEST_S = re.compile(r"passed.* in ([0-9.]+)s")
GRAPH_S = re.compile(r"capture and replays ([0-9.]+) s")
# upstream's row: status, torch and gems latency (ms), speedup, [more metrics], the size
# detail; the shape shown is the detail's first torch.Size
ROW = re.compile(r"^SUCCESS\s+([0-9.]+)\s+([0-9.]+)\s.*?torch\.Size\(\[([0-9, ]+)\]\)", re.M)


NAME = re.compile(r"^(?P<op>.+)_(?P<l2>warm|cold)_(?P<clock>auto|events|kernels)(?:_(?P<tag>[A-Za-z0-9]+))?$")


def read_run(folder: Path) -> dict:
    op, l2, clock, tag = NAME.match(folder.name).group("op", "l2", "clock", "tag")
    wall = WALL.search((folder / "wall.txt").read_text()) if (folder / "wall.txt").is_file() else None
    log = (folder / "output.log").read_text(errors="replace") if (folder / "output.log").is_file() else ""
    ident_path = folder / "run_identity.json"
    ident = json.loads(ident_path.read_text()) if ident_path.is_file() else {}
    pytest_s, graph_s = PYTEST_S.findall(log), GRAPH_S.findall(log)
    return {"op": op, "l2": l2, "clock": clock, "tag": tag, "rc": wall.group(1) if wall else None,
            "wall_s": int(wall.group(2)) / 1e3 if wall else None,
            "pytest_s": float(pytest_s[-1]) if pytest_s else None,
            "graph_s": float(graph_s[-1]) if graph_s else None,
            "ident": (ident.get("l2"), ident.get("cold_clock")),
            "gems_us": [(m.group(3).replace(" ", ""), float(m.group(2)) * 1e3) for m in ROW.finditer(log)]}


def _f(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def table(calls) -> list:
    md = ["| call | op | l2 | clock | rc | wall s | pytest s | capture and replays s | identity l2 / cold_clock | "
          "gems latency per shape (us) |", "|" + "---|" * 10]
    ratios = {}
    for call, runs in calls:
        for r in runs:
            shapes = ", ".join(f"{s}: {us:.2f}" for s, us in r["gems_us"]) or "-"
            shown = r["clock"] + (f"_{r['tag']}" if r["tag"] else "")
            md.append(f"| {call} | {r['op']} | {r['l2']} | {shown} | {r['rc']} | {_f(r['wall_s'])} | "
                      f"{_f(r['pytest_s'])} | {_f(r['graph_s'], '.3f')} | {r['ident'][0]} / {r['ident'][1]} | "
                      f"{shapes} |")
        # by the clock the identity recorded (auto resolves to one), repeats paired by tag
        by = {(r["op"], r["l2"], r["ident"][1], r["tag"]): r for r in runs}
        for (op, l2, clock, tag), r in by.items():
            ev = by.get((op, "cold", "events", tag))
            if (l2, clock) == ("cold", "kernels") and ev and ev["wall_s"] and ev["pytest_s"]:
                ratios.setdefault(op, []).append((call + (f"{tag}" if tag else ""),
                                                  r["wall_s"] / ev["wall_s"], r["pytest_s"] / ev["pytest_s"]))
    md += aa_table(calls)
    md += ["", "Cold kernels clock over cold events clock (by the identity's cold_clock), same call, "
           "operator and repeat:", "",
           "| op | per call: wall (pytest) | median wall | median pytest |", "|---|---|---|---|"]
    for op, rows in sorted(ratios.items()):
        per = ", ".join(f"{c}: {w:.2f} ({p:.2f})" for c, w, p in rows)
        md.append(f"| {op} | {per} | {median(w for _, w, _ in rows):.2f} | "
                  f"{median(p for _, _, p in rows):.2f} |")
    return md


def aa_table(calls) -> list:
    """Runs of one operator, L2 and clock repeated in a call (tags a, b): per shape, the gems
    latency's |b - a| / a."""
    md = []
    for call, runs in calls:
        groups = {}
        for r in runs:
            if r["tag"]:
                groups.setdefault((r["op"], r["l2"], r["clock"]), []).append(r)
        for (op, l2, clock), rs in sorted(groups.items()):
            if len(rs) < 2:
                continue
            a, b = sorted(rs, key=lambda r: r["tag"])[:2]
            deltas = [(s, abs(ub - ua) / ua * 100) for (s, ua), (_, ub) in zip(a["gems_us"], b["gems_us"])]
            if not md:
                md = ["", "A/A: the same node run twice in one call, gems latency per shape:", "",
                      "| call | op | l2 | clock | shape: a, b us (abs delta %) | median abs delta % |",
                      "|---|---|---|---|---|---|"]
            per = ", ".join(f"{s}: {ua:.3f}, {ub:.3f} ({d:.2f})" for (s, ua), (_, ub), (_, d)
                            in zip(a["gems_us"], b["gems_us"], deltas))
            md.append(f"| {call} | {op} | {l2} | {clock} | {per} | "
                      f"{median(d for _, d in deltas):.2f} |" if deltas else f"| {call} | {op} | {l2} | {clock} | - | - |")
    return md


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 2)[1])
    ap.add_argument("--out", required=True)
    ap.add_argument("calls", nargs="+")
    args = ap.parse_args(argv)
    calls = []
    for c in args.calls:
        folders = sorted(p for p in (Path(c) / "clock_runs").glob("*_*_*") if p.is_dir())
        if folders:
            calls.append((Path(c).name, [read_run(f) for f in folders]))
    if not calls:
        print(f"issue18_clock_runs: no clock_runs/<op>_<l2>_<clock>/ under {', '.join(args.calls)}",
              file=sys.stderr)
        return 2
    md = ["# Issue 18, session 14: the cold clocks in real FlagGems runs (H200, float16, "
          "issue18_shapes.yaml)", ""] + table(calls)
    atomic.write_text(Path(args.out), "\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
