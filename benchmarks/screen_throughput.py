#!/usr/bin/env python3
"""Wall, rate, CPU and GPU-busy share of run_batch.py's switch screen (`--judge-first`) on
inventory nodes, stage 1 projected to the whole inventory, beside upstream's one process.

One judge-first batch over the nodes, in OUT/screen:

    run_batch.py --ops <nodes> --switch NAME --judge-first --judge-share N --controls C
                 [--baseline DIR] [--overlap K] --dtypes D --op-timeout T --batch-dir OUT/screen

(`--all`: every node of the inventory instead of --ops). Stage 1 judges every node on both
sides untimed (code at every level, results); stage 2 times the nodes stage 1 found changed
and C A/A controls (zl/batch/judge_first.py). While a call runs, `nvidia-smi` samples the
GPU's utilization every 100 ms (where it exists). The report (stdout, OUT/screen_throughput.json
and OUT/screen_throughput.md):

- per stage: its wall (the seconds each call spent in it, summed: judge_first.json `walls`),
  the nodes it finished (every side a final status), its side runs (a side A linked from
  --baseline is none: it ran in the baseline's batch), nodes and side runs per hour, and its
  side runs' CPU: seconds per side run and cores busy over the stage's wall (near the host's
  core count, --judge-share is bounded by the CPU, not the GPU);
- stage 1 projected to the inventory: its node count (`run_batch.py --all --repo main --list`:
  rows not skipped nor dismissed) at stage 1's nodes per hour, in minutes, against --goal-min;
  and, arithmetic rather than a measurement, with --judge-share slots never idle at stage 1's
  case seconds per finished node (a short draw's tail amortised, as over the inventory);
- with --baseline: how many nodes' side A it linked, carried unjudged (SKIP, TIMEOUT), ran fresh;
- stage 1's verdict counts, the changed nodes, and every node it could not judge, with why;
- GPU-busy share (samples > 0) and mean utilization over every call of the screen;
- with --upstream: FlagGems' own harness over the same nodes in one pytest process
  (overlap_throughput.py's run: `--level core --mode cudagraph`, cold caches), its nodes and
  passed nodes per hour beside stage 1's, its failures flagged (one failed graph capture fails
  every later node of the process). Upstream times every node and judges no code; a screen runs two
  untimed sides per node, then times the changed ones.

    python benchmarks/screen_throughput.py --sample 40 --seed 11 --switch DISABLE_LLVM_OPT \\
        --judge-share 8 --out runs/scr
    python benchmarks/screen_throughput.py --all --switch DISABLE_LLVM_OPT --judge-share 12 \\
        --baseline runs/base/screen --out runs/scr_all --budget-s 540
    python benchmarks/screen_throughput.py --report-only --out <unpacked bundle>/scr

A screen directory that exists is resumed (run_batch.py --resume), so the tool can be called
again after a time limit; every call's wall counts. Exit status: 0 report written, the screen
ended with exit 0; 1 report written, the screen ended with another exit status (the report
names it: 5 is a baseline that did not stand for side A); 2 bad arguments (no nodes, --sample
with --all, --report-only without a screen in --out); 3 the screen left cases unrun
(--budget-s: call again to resume); 4 run_batch.py refused before stage 1 started (its exit
status and last console lines printed, no report: a --baseline of other conditions, say); 130 stopped by SIGTERM or Ctrl-C (run_batch.py killed with
its cases, the call's wall recorded; call again to resume).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overlap_throughput import (ROOT, add_node_options, add_upstream_options, draw, exit_status,
                                interrupt_on_sigterm, inventory_names, read_walls, run_batch_call, run_upstream,
                                summarize_upstream, upstream_table)
from telemetry import UtilizationSampler, clock_line, utilization_summary
from zl import atomic
from zl.batch.judge_first import JUDGE, SUMMARY, TIMED, linked
from zl.batch.status import node_finished, read_rows, side_ran

SCREEN = "screen"


def run_screen(nodes: List[str], args, out: Path) -> int:
    """One call of run_batch.py --judge-first (a new screen, or --resume); its wall appended
    to walls-screen.json, its utilization samples to util-screen.txt. -> its exit status."""
    sd = out / SCREEN
    cmd = [sys.executable, str(ROOT / "run_batch.py"), "--switch", args.switch, "--judge-first",
           "--judge-share", str(args.judge_share), "--controls", str(args.controls), "--dtypes", args.dtypes,
           "--op-timeout", str(args.op_timeout), "--batch-dir", str(sd)]
    resume = (sd / SUMMARY).is_file()
    if resume:
        cmd += ["--resume"]
    else:
        cmd += ["--all", "--repo", "main"] if args.all else ["--ops", *nodes]
        cmd += ["--baseline", str(args.baseline)] if args.baseline else []
    cmd += ["--overlap", str(args.overlap)] if args.overlap > 1 else []
    cmd += ["--devices", args.devices] if args.devices else []
    cmd += ["--budget-s", str(args.budget_s)] if args.budget_s else []
    sampler = UtilizationSampler(out / "util-screen.txt", append=resume)
    try:
        return run_batch_call(cmd, out / "console-screen.log", out / "walls-screen.json")
    finally:
        sampler.stop()


def stage_figures(stage_dir: Path, walls: List[float], cpu: Optional[Dict]) -> Dict:
    """One stage's figures from its batch directory and judge_first.json's walls and CPU."""
    a, b = read_rows(stage_dir / "before" / "ops_status.csv"), read_rows(stage_dir / "after" / "ops_status.csv")
    wall = round(sum(walls), 1)
    finished = side_runs = 0
    case_s = 0.0
    for key, row in a.items():
        pair = [row, b.get(key, {})]
        sides = [r.get("status", "-") for r in pair]
        finished += node_finished(sides)
        from_baseline = linked(stage_dir / "before", row)
        ran = [r for i, r in enumerate(pair) if side_ran(sides[i]) and not (i == 0 and from_baseline)]
        side_runs += len(ran)
        case_s += sum(int(r.get("elapsed_ms") or 0) for r in ran) / 1000
    cpu = cpu or {}
    return {"wall_s": wall, "calls": len(walls), "nodes": len(a), "nodes_finished": finished, "side_runs": side_runs,
            "nodes_per_hour": round(finished / wall * 3600, 1) if wall else None,
            "side_runs_per_hour": round(side_runs / wall * 3600, 1) if wall else None,
            "cpu_s_per_side_run": round(cpu["cpu_s"] / cpu["side_runs"], 1) if cpu.get("side_runs") else None,
            "cores_busy": cpu.get("cores_busy"), "case_s": round(case_s, 1),
            "case_s_per_node": round(case_s / finished, 1) if finished else None}


def summarize(out: Path, rc: Optional[int], inventory: int, goal_min: float) -> Dict:
    sd = out / SCREEN
    record = json.loads((sd / SUMMARY).read_text())
    walls = record.get("walls") or []
    stages = {st: stage_figures(sd / st, [w["wall_s"] for w in walls if w["stage"] == st],
                                (record.get("cpu") or {}).get(st)) for st in (JUDGE, TIMED)}
    rate = stages[JUDGE]["nodes_per_hour"]
    s1 = record.get("stage1") or {}
    # the slots never idle: judge_share cases always running, each node costing stage 1's mean
    # case seconds per finished node (the tail of a short draw amortised; arithmetic, not a measurement)
    per_node, slots = stages[JUDGE]["case_s_per_node"], record.get("judge_share") or 1
    full = round(inventory * per_node / (slots * 3600) * 60, 1) if per_node else None
    return {"rc": rc, "switch": record.get("switch"), "judge_share": record.get("judge_share"),
            "baseline": record.get("baseline_asked") or None, "calls": len(read_walls(out / "walls-screen.json")),
            "stages": stages, "inventory_nodes": inventory, "goal_min": goal_min,
            "projected_stage1_min": round(inventory / rate * 60, 1) if rate else None,
            "projected_stage1_slots_busy_min": full, "baseline_use": _baseline_use(record.get("baseline")),
            "counts": s1.get("counts"), "changed": s1.get("changed"), "controls": s1.get("controls"),
            "unjudged": s1.get("unjudged"), "stage2_exit": (record.get("stage2") or {}).get("exit"),
            "gpu": utilization_summary(out / "util-screen.txt")}


def _baseline_use(base: Optional[Dict]) -> Optional[Dict]:
    if not base:
        return None
    return {"linked": base.get("linked"), "carried": dict(base.get("carried") or {}),
            "fresh": dict(base.get("fresh") or {})}


def report(res: Dict, upstream: Optional[Dict]) -> str:
    share = f"--judge-share {res['judge_share']}" if res["judge_share"] else "one case at a time"
    out = [f"Switch {res['switch']}, stage 1 at {share}" + (f", side A from the baseline {res['baseline']}"
                                                            if res["baseline"] else "") + ":", "",
           "| stage | wall s (calls) | nodes | nodes finished | side runs | nodes/h | side runs/h | "
           "CPU-s per side run | cores busy |", "|" + "---|" * 9]
    for st, name in ((JUDGE, "1: every node judged, untimed"), (TIMED, "2: changed nodes and controls, timed")):
        f = res["stages"][st]
        out.append(f"| {name} | {f['wall_s']} ({f['calls']}) | {f['nodes']} | {f['nodes_finished']} | {f['side_runs']} | "
                   + " | ".join("n/a" if f[k] is None else str(f[k]) for k in
                                ("nodes_per_hour", "side_runs_per_hour", "cpu_s_per_side_run", "cores_busy")) + " |")
    proj = res["projected_stage1_min"]
    out.append("")
    out.append("Stage 1 projected to the inventory's {} nodes: {} (goal {:g} min).".format(
        res["inventory_nodes"], "n/a (no node finished)" if proj is None else
        f"{proj} min, {'within' if proj <= res['goal_min'] else 'over'} the goal", res["goal_min"]))
    full = res.get("projected_stage1_slots_busy_min")
    if full is not None:
        out.append(f"With the {res['judge_share'] or 1} slots never idle ({res['stages'][JUDGE]['case_s_per_node']} case "
                   f"seconds per node, arithmetic, not a measurement): {full} min.")
    use = res.get("baseline_use")
    if use:
        out.append(f"Side A from the baseline: {use['linked']} linked, {len(use['carried'])} carried unjudged "
                   f"(its SKIP or TIMEOUT), {len(use['fresh'])} run fresh.")
    g = res["gpu"]
    out.append("GPU-busy share over the screen: " + ("n/a (no nvidia-smi samples)" if not g else
                                                    f"{g['busy_share']:.1%} of {g['samples']} samples, mean "
                                                    f"utilization {g['mean_util']:.1f} %") + ".")
    if clock_line(g):
        out.append(clock_line(g))
    if res["counts"] is not None:
        out.append("Stage 1 verdicts: " + ", ".join(f"{k} {v}" for k, v in res["counts"].items())
                   + f"; changed: {', '.join(res['changed']) or 'none'}; controls: {', '.join(res['controls']) or 'none'}.")
        out += [f"- not judged: {n}: {why}" for n, why in res["unjudged"].items()]
    if res["rc"] not in (None, 0):
        out.append(f"The screen's last call ended with exit {res['rc']}.")
    if upstream is not None:
        out += upstream_table(upstream, "Upstream, one pytest process over the same nodes (every node timed once, "
                              "no code judged):")
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="screen_throughput.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_node_options(ap)
    ap.add_argument("--all", action="store_true", help="every node of the inventory (run_batch.py --all --repo main)")
    ap.add_argument("--switch", help="the variable screened (run_batch.py --switch)")
    ap.add_argument("--judge-share", type=int, default=6, help="stage 1's cases per device (default 6)")
    ap.add_argument("--controls", type=int, default=10, help="A/A controls stage 2 times (default 10)")
    ap.add_argument("--baseline", type=Path, help="an earlier judge-first batch of the same switch: side A from it")
    ap.add_argument("--overlap", type=int, default=1, help="stage 2's --overlap (default 1)")
    ap.add_argument("--budget-s", type=float, default=None, help="run_batch.py --budget-s per call")
    ap.add_argument("--goal-min", type=float, default=30.0, help="the inventory screen's goal (default 30 min)")
    ap.add_argument("--out", type=Path, required=True, help="folder: the screen, the samples, the report")
    ap.add_argument("--upstream", action="store_true",
                    help="after the screen, FlagGems' own harness over the same nodes in one pytest process")
    add_upstream_options(ap)
    ap.add_argument("--report-only", action="store_true", help="run nothing: the report of the screen in --out")
    args = ap.parse_args(argv)
    interrupt_on_sigterm()
    before = json.loads((args.out / "screen_throughput.json").read_text()) \
        if (args.out / "screen_throughput.json").is_file() else {}
    if args.report_only:
        if not (args.out / SCREEN / SUMMARY).is_file():
            ap.error(f"--report-only: {args.out} holds no screen ({SCREEN}/{SUMMARY})")
        nodes, rc, inventory = before.get("nodes") or [], before.get("rc"), before.get("inventory_nodes")
    else:
        if not args.switch:
            ap.error("--switch NAME is required")
        if args.all and (args.ops or args.sample):
            ap.error("--all runs every node: give no --ops or --sample")
        names = inventory_names()
        nodes = names if args.all else list(args.ops) or (draw(args.sample, args.seed) if args.sample > 0 else [])
        if not nodes:
            ap.error("no nodes: give --ops, --sample N or --all")
        args.out.mkdir(parents=True, exist_ok=True)
        inventory = len(names)
        rc = run_screen(nodes, args, args.out)
        if not (args.out / SCREEN / SUMMARY).is_file():
            # run_batch.py refused before stage 1 (a baseline of other conditions, say): no report
            tail = (args.out / "console-screen.log").read_text(errors="replace").strip().splitlines()[-6:]
            print(f"!!! screen_throughput.py: run_batch.py exited {rc} before the screen started; "
                  "nothing to report. Its last lines:\n" + "\n".join(tail), file=sys.stderr)
            return 4
        if args.upstream:
            run_upstream(nodes, args, args.out)
    res = summarize(args.out, rc, inventory or len(inventory_names()), args.goal_min)
    upstream = summarize_upstream(args.out)
    text = report(res, upstream)
    atomic.write_json(args.out / "screen_throughput.json", {"nodes": nodes, "dtypes": args.dtypes, **res,
                                                            "upstream": upstream}, indent=1, sort_keys=False)
    atomic.write_text(args.out / "screen_throughput.md", text + "\n")
    print(text)
    return 3 if rc == 3 else 0 if rc in (None, 0) else 1


if __name__ == "__main__":
    sys.exit(exit_status(main))
