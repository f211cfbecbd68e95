#!/usr/bin/env python
"""What the cold clocks cost a real FlagGems run, and what they read.

    cold_clock_runs.py run --call DIR --op OP[:FILE] --l2 warm|cold --clock auto|events|kernels
                           [--tag a] [--flaggems-dir FG] [--shape-file F] [--timeout-s 120]
        one run_pytest.sh run of FlagGems' benchmark/test_FILE.py::test_OP (FILE defaults to
        OP), float16, core level, ZL_L2 and ZL_COLD_CLOCK as given, fresh Triton and FlagGems
        caches (deleted afterwards), into DIR/clock_runs/OP_L2_CLOCK[_TAG]/: output.log,
        wall.txt (`rc=<status> wall_ms=<ms>`) and the run directory zl/. Run it alone on the GPU.
    cold_clock_runs.py table --out OUT.md CALL_DIR...
        per run: exit status, wall and pytest seconds, the graph timer's capture-and-replay
        seconds (its ledger line), the identity's l2 / cold_clock and FlagGems' latency per
        shape; the A/A of runs repeated with tags; then, per call and operator, the cold
        kernels clock's wall and pytest time over the cold events clock's (no GPU).
Exit status: run: the run's own status (124 when killed at --timeout-s), 2 bad arguments;
table: 0 written, 2 no run folder found.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
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
    # the run directory's identity (zl/), or a copy beside the log (trimmed evidence)
    ident_path = next((p for p in (folder / "zl" / "run_identity.json", folder / "run_identity.json")
                       if p.is_file()), None)
    ident = json.loads(ident_path.read_text()) if ident_path else {}
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


def run_main(args) -> int:
    """One run_pytest.sh run into CALL/clock_runs/OP_L2_CLOCK[_TAG]/, its wall in wall.txt."""
    op, _, stem = args.op.partition(":")
    folder = Path(args.call) / "clock_runs" / (f"{op}_{args.l2}_{args.clock}" + (f"_{args.tag}" if args.tag else ""))
    folder.mkdir(parents=True, exist_ok=True)
    caches = folder / "triton_cache", folder / "flaggems_cache"
    env = dict(os.environ, OP=op, OP_FILE=stem or op, DTYPES="float16", BENCH_LEVEL="core",
               OUT_DIR=str(folder / "zl"), ZL_L2=args.l2, ZL_COLD_CLOCK=args.clock,
               TRITON_CACHE_DIR=str(caches[0]), FLAGGEMS_CACHE_DIR=str(caches[1]))
    if args.flaggems_dir:
        env["FLAGGEMS_DIR"] = args.flaggems_dir
    env.pop("SHAPE_FILE", None)
    if args.shape_file:
        env["SHAPE_FILE"] = str(Path(args.shape_file).resolve())
    script = os.environ.get("ZL_RUN_PYTEST") or str(ROOT / "run_pytest.sh")
    t0 = time.monotonic()
    with open(folder / "output.log", "w", encoding="utf-8") as log:
        # a session of its own, so a timeout takes the run's whole process group along
        proc = subprocess.Popen(["bash", script], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=args.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = 124
    wall_ms = int((time.monotonic() - t0) * 1000)
    atomic.write_text(folder / "wall.txt", f"rc={rc} wall_ms={wall_ms}\n")
    for c in caches:
        shutil.rmtree(c, ignore_errors=True)
    text = (folder / "output.log").read_text(errors="replace")
    print(f"{folder.name}: rc={rc} wall_ms={wall_ms}; {len(re.findall(r'^SUCCESS', text, re.M))} SUCCESS rows; "
          f"{text.count('BENCHMARK_DIRECT_NO_CUDAGRAPH op=')} fallback markers")
    return rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="cold_clock_runs.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="stage", required=True)
    run = sub.add_parser("run", help="one run_pytest.sh run of a node on one clock")
    run.add_argument("--call", required=True, help="the call's folder (runs go to CALL/clock_runs/)")
    run.add_argument("--op", required=True, help="OP or OP:FILE (benchmark/test_FILE.py::test_OP)")
    run.add_argument("--l2", required=True, choices=("warm", "cold"))
    run.add_argument("--clock", required=True, choices=("auto", "events", "kernels"))
    run.add_argument("--tag", default="", help="a repeat's tag (letters and digits), for the A/A table")
    run.add_argument("--flaggems-dir", default="", help="FlagGems checkout (default: run_pytest.sh's)")
    run.add_argument("--shape-file", default=str(ROOT / "benchmarks" / "cost_shapes.yaml"),
                     help="shape yaml (default benchmarks/cost_shapes.yaml)")
    run.add_argument("--timeout-s", type=float, default=120.0, help="the run is killed after this (default 120)")
    tab = sub.add_parser("table", help="the table of the runs under CALL_DIR... (no GPU)")
    tab.add_argument("--out", required=True, help="the table (markdown)")
    tab.add_argument("calls", nargs="+", help="call folders holding clock_runs/")
    args = ap.parse_args(argv)
    if args.stage == "run":
        if not re.fullmatch(r"[A-Za-z0-9]*", args.tag):
            ap.error(f"--tag {args.tag!r}: letters and digits only")
        if args.shape_file and not Path(args.shape_file).is_file():
            ap.error(f"--shape-file {args.shape_file}: no such file")
        return run_main(args)
    calls = []
    for c in args.calls:
        folders = sorted(p for p in (Path(c) / "clock_runs").glob("*_*_*") if p.is_dir())
        if folders:
            calls.append((Path(c).name, [read_run(f) for f in folders]))
    if not calls:
        print(f"cold_clock_runs.py: no clock_runs/<op>_<l2>_<clock>/ under {', '.join(args.calls)}",
              file=sys.stderr)
        return 2
    md = ["# The cold clocks in real FlagGems runs (float16)", ""] + table(calls)
    atomic.write_text(Path(args.out), "\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
