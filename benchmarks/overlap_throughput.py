#!/usr/bin/env python3
"""Cases per hour, GPU-busy share and A/A noise of run_batch.py at --overlap 1 and N, on the
same inventory nodes, in one sitting.

For each --overlap value K (in the order given) one A/A screen runs over the nodes:

    run_batch.py --ops <nodes> --switch ZL_AA_NOOP --overlap K --dtypes D --batch-dir OUT/overlap-K

ZL_AA_NOOP changes nothing, so side A (records autotune picks) and side B (replays them) are a
record/replay A/A pair per node, both timed. While a batch runs, `nvidia-smi` samples the GPU's
utilization every 100 ms (where it exists). The report (stdout and OUT/overlap_throughput.json):

- side runs, PASS side runs (timings valid) and nodes finished (every side a final status) per
  hour of the batch's wall (every call that made it, killed ones included);
- GPU-busy share (samples > 0) and mean utilization, over every call; where nvidia-smi gives
  clocks, the SM clock over busy samples and, per node, the clock each side timed at (the
  samples inside its timed stretches, lock_wait.json): the nodes whose sides timed at clocks
  more than 1 % apart, with their A/A beside the others'; statuses and screen verdicts per
  node, and whether they equal the first K's;
- the timing lock (overlap > 1): the seconds it was held alone, as a share of the wall, and the
  side runs per hour if it were never idle (the GPU-bound limit under exclusive timing); the
  seconds cases waited for it, how many held back GPU work while another timed, and the seconds
  they held it shared (zl/timing/exclusive.py: what a waiting timer must outlast);
- CPU: the median CPU seconds of a side run's processes (run_pytest.sh's CPU line) and the
  cores they kept busy over the wall (near the host's core count: short of CPU, not of GPU);
- case time: the side runs' own seconds (ops_status.csv) as a share of K slots over the wall,
  and the parts of it lock waits and TIMEOUT sides took;
- A/A noise: per node the median over shapes of |B/A - 1| of the gems latency, its median over
  nodes, and over all shapes by side A's latency (< 5 us, 5-50 us, >= 50 us: where noise sits);
- with --upstream, beside them: FlagGems' own harness over the same nodes in one pytest process
  (`--level core --mode cudagraph`, cold caches, nvidia-smi sampled): wall, nodes and passed nodes
  per hour (failures flagged), GPU-busy share, each node's outcome and seconds;
- with --reference JSON: each node's A/A beside another run's (its overlap_throughput.json,
  e.g. five of the nodes one case at a time), on the nodes both measured: the medians and on
  how many nodes the A/A here is no higher.

    python benchmarks/overlap_throughput.py --sample 40 --seed 1 --overlap 1 4 --out runs/ovl
    python benchmarks/overlap_throughput.py --sample 40 --seed 1 --overlap 4 --upstream --out runs/ovl
    python benchmarks/overlap_throughput.py --report-only --overlap 1 3 --out <unpacked bundle>/ovl
    python benchmarks/overlap_throughput.py --sample 40 --seed 1 --overlap 8 --out runs/ovl \
        --reference runs/solo/overlap_throughput.json     # runs/solo: --ops relu softmax --overlap 1

Nodes: --ops, or --sample N drawn with --seed from the inventory (ops/inventory_main.csv rows
that are not marked skip or dismissed, repo main). A batch directory that exists is resumed
(run_batch.py --resume), so the tool can be called again after a time limit. Exit status: 0
report written; 2 bad arguments (no nodes, an overlap < 1, a --reference that is not an
overlap_throughput.json or lacks --reference-overlap); 3 a batch left cases unrun (the report
covers what ran); 130 stopped by SIGTERM or Ctrl-C (run_batch.py killed with its cases, its
wall recorded). After 3 or 130, call again to resume.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from telemetry import (UtilizationSampler, clock_during, clock_line, clock_split, read_samples, sample_summary,
                       utilization_summary)
from zl import atomic
from zl.batch.screen import read_screen_rows
from zl.batch.status import node_finished, read_rows, side_ran
from zl.runlog.costs import aged_shares, figure_sum, lock_figures, zl_costs
from zl.runlog.parse import RunLogError, parse_run_log
from zl.runlog.stats import aa_by_latency, against_reference, band_label, load_reference
from zl.timing.exclusive import is_waiting, timed_stretches

ROOT = Path(__file__).resolve().parents[1]
SWITCH = "ZL_AA_NOOP"


def inventory_names() -> List[str]:
    """The run names `run_batch.py --all --repo main --list` would run, sorted."""
    r = subprocess.run([sys.executable, str(ROOT / "run_batch.py"), "--all", "--repo", "main", "--list",
                        "--devices", "0"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"!!! run_batch.py --list failed (exit {r.returncode}): {r.stderr.strip()[-400:]}")
    return sorted(ln.split("\t", 1)[0].split(":", 1)[1] for ln in r.stdout.splitlines() if "\tdevice=" in ln)


def draw(n: int, seed: int) -> List[str]:
    names = inventory_names()
    return random.Random(seed).sample(names, min(n, len(names)))


def log_figures(run_dir: Path) -> tuple:
    """(lock figures (zl.runlog.costs.lock_figures), CPU seconds, aged shares) of a side run's run.log."""
    try:
        text = (run_dir / "run.log").read_text(errors="replace")
    except OSError:
        return None, None, 0
    return lock_figures(text), zl_costs(text).get("cpu_s"), aged_shares(text)


def gems_rows(run_dir: Path) -> Dict[str, float]:
    try:
        parsed = parse_run_log((run_dir / "run.log").read_text(errors="replace"))
    except (OSError, RunLogError):
        return {}
    return {f"{r.dtype}|{r.size_detail}": r.gems_lat for r in parsed.success_rows() if r.gems_lat}


def read_batch(bd: Path) -> Dict:
    a = {r["run_name"]: r for r in read_rows(bd / "before" / "ops_status.csv").values()}
    b = {r["run_name"]: r for r in read_rows(bd / "after" / "ops_status.csv").values()}
    verdicts = {r["run_name"]: r.get("verdict", "") for r in read_screen_rows(bd / "screen.tsv").values()}
    nodes = {}
    for name, row in a.items():
        # the case directories under this batch directory (it may have moved since it ran)
        da, db = bd / "before" / row["repo"] / name, bd / "after" / row["repo"] / name
        ra, rb = gems_rows(da), gems_rows(db)
        shapes = [(ra[k], rb[k] / ra[k] - 1) for k in ra if k in rb]   # (A's latency ms, B/A - 1)
        deltas = [abs(d) for _, d in shapes]
        figures = [log_figures(da), log_figures(db)]
        locks = [f[0] for f in figures if f[0] is not None]
        # each side's own seconds (ops_status.csv), and those of the sides that timed out
        secs = [(float(r.get("elapsed_ms") or 0) / 1000, r.get("status")) for r in (row, b.get(name, {}))]
        nodes[name] = {"status": f"{row['status']}/{b.get(name, {}).get('status', '-')}",
                       "verdict": verdicts.get(name, ""), "shapes": len(deltas), "shape_deltas": shapes,
                       "aa_median_abs_delta": float(np.median(deltas)) if deltas else None,
                       "lock_held_s": figure_sum(locks, 0), "lock_waited_s": figure_sum(locks, 1),
                       "cpu_s": [f[1] for f in figures if f[1] is not None], "aged_shares": sum(f[2] for f in figures),
                       # the part of those waits that held back this node's GPU work while others
                       # timed; the seconds its shares kept others' timers out
                       "share_waited_s": figure_sum(locks, 2), "share_held_s": figure_sum(locks, 3),
                       "share_stretches": figure_sum(locks, 4),
                       "case_s": round(sum(t for t, _ in secs), 3),
                       "timeout_case_s": round(sum(t for t, st in secs if st == "TIMEOUT"), 3),
                       # TIMEOUT sides killed still waiting for the lock: contention, not the op
                       "cut_waiting": sum(1 for (_, st), d in zip(secs, (da, db)) if st == "TIMEOUT" and is_waiting(d)),
                       "timed": [timed_stretches(da), timed_stretches(db)]}
    return nodes


def run_one(k: int, nodes: List[str], args, bd: Path) -> int:
    """One run_batch.py call at overlap k (new, or --resume): wall to walls-overlap-k.json,
    samples to util-overlap-k.txt. -> its exit status."""
    cmd = [sys.executable, str(ROOT / "run_batch.py"), "--switch", SWITCH, "--overlap", str(k),
           "--dtypes", args.dtypes, "--op-timeout", str(args.op_timeout), "--batch-dir", str(bd)]
    resume = (bd / "batch.json").is_file()
    cmd += ["--resume"] if resume else ["--ops", *nodes]
    if args.devices:
        cmd += ["--devices", args.devices]
    if args.budget_s:
        cmd += ["--budget-s", str(args.budget_s)]
    sampler = UtilizationSampler(bd.parent / f"util-overlap-{k}.txt", append=resume)
    try:
        return run_batch_call(cmd, bd.parent / f"console-overlap-{k}.log", bd.parent / f"walls-overlap-{k}.json")
    finally:
        sampler.stop()


def read_walls(path: Path) -> List[float]:    # every run_batch.py call's wall ([] before any)
    return json.loads(path.read_text()) if path.is_file() else []


def interrupt_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C: wait_or_kill kills the child's own process group."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def exit_status(main: Callable[[], int]) -> int:
    """main()'s exit status; a stop is 130 with one line, a closed stdout (`| head`) costs nothing."""
    try:
        status = main()
        sys.stdout.flush()   # a closed stdout raises here, not in the interpreter's exit
        return status
    except KeyboardInterrupt:
        print(f"!!! {Path(sys.argv[0]).name} stopped: its run_batch.py was killed with its cases; "
              "call again with the same arguments to resume", file=sys.stderr, flush=True)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error at exit
        return 0


def wait_or_kill(proc: subprocess.Popen, each_line: Optional[Callable[[str], None]] = None) -> int:
    """Wait for `proc` (started in its own session), passing each line of its piped stdout to
    `each_line`; if this tool is stopped meanwhile, its whole process group is killed first."""
    try:
        if each_line is not None:
            for line in proc.stdout:
                each_line(line)
        return proc.wait()
    except BaseException:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        raise


def run_batch_call(cmd: List[str], console: Path, walls_file: Path) -> int:
    """Run `cmd` (a run_batch.py call) in its own process group, killed with this tool, output
    appended to `console`; its wall appended to `walls_file` also when this tool is stopped, so
    a resumed batch's rate covers every call, killed ones included. -> its exit status."""
    t0 = time.monotonic()
    try:
        with open(console, "a") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            return wait_or_kill(proc)
    finally:
        atomic.write_json(walls_file, read_walls(walls_file) + [round(time.monotonic() - t0, 3)])


def summarize(k: int, bd: Path, rc: Optional[int], stage: Optional[str] = None) -> Dict:
    """The figures of the batch bd, run at overlap k, from what its calls left beside it
    (walls-<stage>.json, util-<stage>.txt; stage: overlap-k unless named)."""
    stage = stage or f"overlap-{k}"
    walls = read_walls(bd.parent / f"walls-{stage}.json")
    wall = round(sum(walls), 3)   # the figures below are computed from this value
    per_node, samples = read_batch(bd), read_samples(bd.parent / f"util-{stage}.txt")
    for v in per_node.values():    # the SM clock each side timed at (its stretches' samples)
        v["timed_clock_mhz"] = [clock_during(samples, t) for t in v.pop("timed")]
    ran = sum(1 for v in per_node.values() for s in v["status"].split("/") if side_ran(s))
    passed = sum(1 for v in per_node.values() for s in v["status"].split("/") if s == "PASS")   # timings valid
    done = sum(1 for v in per_node.values() if node_finished(v["status"].split("/")))
    aa = [v["aa_median_abs_delta"] for v in per_node.values() if v["aa_median_abs_delta"] is not None]
    held = [v["lock_held_s"] for v in per_node.values() if v["lock_held_s"] is not None]
    waits = [(v["lock_waited_s"], v["share_waited_s"], v.get("share_held_s"), v.get("share_stretches"))
             for v in per_node.values() if v["lock_waited_s"] is not None]
    cpu = [c for v in per_node.values() for c in v.get("cpu_s", [])]
    case = round(sum(v.get("case_s", 0.0) for v in per_node.values()), 3)
    return {"overlap": k, "rc": rc, "wall_s": wall, "calls": len(walls), "side_runs": ran,
            "side_runs_per_hour": round(ran / wall * 3600, 1) if wall else None, "nodes_finished": done,
            "passed_side_runs": passed, "passed_side_runs_per_hour": round(passed / wall * 3600, 1) if wall else None,
            "nodes_per_hour": round(done / wall * 3600, 1) if wall else None,
            "gpu": sample_summary(samples),
            # the lock's busy share of the wall, and the rate if the lock were never idle
            "lock_held_share": round(sum(held) / wall, 3) if held and wall else None,
            "lock_bound_side_runs_per_hour": round(ran / sum(held) * 3600, 1) if held else None,
            # seconds cases waited for the lock, and of them the waits to start GPU work while
            # another case timed (None: some run predates the shared stretches)
            "lock_waited_s": figure_sum(waits, 0), "share_waited_s": figure_sum(waits, 1),
            # the seconds the cases held the lock shared: the stretches a timer had to wait out
            "share_held_s": figure_sum(waits, 2), "share_stretches": figure_sum(waits, 3),
            # CPU of the side runs' processes: per run, and the cores they kept busy over the wall
            # (above the host's core count less a margin, the batch waits on the CPU, not the GPU)
            "cpu_s_median": float(np.median(cpu)) if cpu else None,
            "cores_busy": round(sum(cpu) / wall, 2) if cpu and wall else None,
            # the cases' own seconds against k slots over the wall (below 1: slots stood empty,
            # e.g. a killed call's cases, the ends of calls), and the TIMEOUT sides' part of them
            "case_s": case, "slot_share": round(case / (k * wall), 3) if wall else None,
            "timeout_case_s": round(sum(v.get("timeout_case_s", 0.0) for v in per_node.values()), 3),
            "cut_waiting": sorted(n for n, v in per_node.items() if v.get("cut_waiting")),
            "aged_shares": sum(v.get("aged_shares", 0) for v in per_node.values()),
            "aa_median_over_nodes": float(np.median(aa)) if aa else None, "nodes": per_node,
            "aa_by_latency": aa_by_latency([p for v in per_node.values() for p in v.get("shape_deltas", [])]),
            "clock_split": clock_split([(n, *v["timed_clock_mhz"], v["aa_median_abs_delta"]) for n, v in per_node.items()])}


def upstream_ids(nodes: List[str], devices: str) -> Dict[str, str]:
    """run name -> FlagGems' pytest node id (relative to the FlagGems tree), as run_batch.py
    --list resolves it from the inventory."""
    r = subprocess.run([sys.executable, str(ROOT / "run_batch.py"), "--ops", *nodes, "--list",
                        "--devices", devices or "0"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"!!! run_batch.py --list failed (exit {r.returncode}): {r.stderr.strip()[-400:]}")
    rows = [ln.split("\t") for ln in r.stdout.splitlines() if "\tdevice=" in ln]
    return {row[0].split(":", 1)[1]: f"benchmark/{row[2]}" for row in rows}


def run_upstream(nodes: List[str], args, out: Path) -> int:
    """FlagGems' own harness over the same nodes in ONE pytest process (`--level core --mode
    <--upstream-mode>`), with cold caches of its own, every output line stamped with the time
    it was printed (zl.runlog.costs.node_seconds) into upstream.log, nvidia-smi sampled into
    util-upstream.txt. -> pytest's exit status."""
    from zl.batch.inventory import repo_roots
    ids = upstream_ids(nodes, args.devices)
    cache = out / "upstream-cache"
    shutil.rmtree(cache, ignore_errors=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", TRITON_CACHE_DIR=str(cache / "triton"),
               FLAGGEMS_CACHE_DIR=str(cache / "flaggems"))
    if args.devices:
        env["CUDA_VISIBLE_DEVICES"] = args.devices.split(",")[0]
    left_out = [n for n in args.upstream_leave_out if n in nodes]
    cmd = [sys.executable, "-m", "pytest", "-s", "-v", "--tb=line", "-p", "no:cacheprovider",
           *[ids[n] for n in nodes if n in ids and n not in left_out], "--level", "core", "--mode", args.upstream_mode]
    for dt in args.dtypes.replace(",", " ").split():
        cmd += ["--dtypes", dt]
    sampler = UtilizationSampler(out / "util-upstream.txt")
    t0 = time.monotonic()
    try:
        with open(out / "upstream.log", "w") as log:
            log.write(f"{time.time():.2f} start: {' '.join(cmd)}\n")
            proc = subprocess.Popen(cmd, cwd=repo_roots()["main"], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True)

            def stamp(line: str) -> None:
                log.write(f"{time.time():.2f} {line}")
                log.flush()
            rc = wait_or_kill(proc, stamp)
            log.write(f"{time.time():.2f} rc={rc}\n")
    finally:
        sampler.stop()
    atomic.write_json(out / "upstream.json", {"ids": ids, "rc": rc, "wall_s": round(time.monotonic() - t0, 3),
                                              "left_out": left_out})
    return rc


def summarize_upstream(out: Path) -> Optional[Dict]:
    """The one-process run's figures (zl.runlog.costs.one_process_figures), its exit status,
    the nodes left out and its GPU-busy share; None when it did not run."""
    from zl.runlog.costs import one_process_figures
    if not (out / "upstream.json").is_file():
        return None
    meta = json.loads((out / "upstream.json").read_text())
    names = {v: k for k, v in meta["ids"].items()}
    figures = one_process_figures((out / "upstream.log").read_text(errors="replace"), names)
    return {"rc": meta["rc"], "left_out": meta.get("left_out", []), **figures,
            "gpu": utilization_summary(out / "util-upstream.txt")}


def upstream_table(u: Dict, title: str) -> List[str]:
    """The one-process run's table; failed nodes flagged: one failed graph capture fails every
    later node of the process within a second (softmax_backward took 35 of 39 H100 nodes)."""
    g = u["gpu"] or {}
    out = ["", title, "", "| wall s | nodes finished | passed | nodes/h | passed/h | GPU-busy share | mean util % | "
           "pytest exit |", "|---|---|---|---|---|---|---|---|",
           f"| {u['wall_s']} | {u['nodes_finished']} | {u['nodes_passed']} | {u['nodes_per_hour']} | "
           f"{u['passed_per_hour']} | {'n/a' if not g else format(g['busy_share'], '.1%')} | "
           f"{'n/a' if not g else format(g['mean_util'], '.1f')} | {u['rc']} |"]
    if u["nodes_failed"]:
        out += ["", f"!!! upstream's one process failed {u['nodes_failed']} of {u['nodes_finished']} node(s), the first "
                f"{u['first_failed']}: compare passed/h, or run it again with --upstream-leave-out {u['first_failed']}"]
    return out + (["", "Left out of the one-process run (--upstream-leave-out): " + ", ".join(u["left_out"])]
                  if u["left_out"] else [])


def pct(x: Optional[float], digits: int = 2) -> str:    # 0.0379 -> 3.79%, None -> n/a
    return "n/a" if x is None else format(x, f".{digits}%")


def report(results: List[Dict], upstream: Optional[Dict] = None) -> str:
    first = results[0]["nodes"]
    out = ["| overlap | wall s | side runs | side runs/h | PASS side runs/h | nodes finished | nodes/h | GPU-busy "
           "share | mean util % | lock held / wall | side runs/h if the lock never idled | A/A median abs delta | "
           "statuses = first | verdicts = first |", "|" + "---|" * 14]
    for r in results:
        g = r["gpu"] or {}
        same_s = all(r["nodes"].get(n, {}).get("status") == v["status"] for n, v in first.items())
        same_v = all(r["nodes"].get(n, {}).get("verdict") == v["verdict"] for n, v in first.items())
        busy = "n/a" if not g else format(g["busy_share"], ".1%")
        util = "n/a" if not g else format(g["mean_util"], ".1f")
        held = "n/a" if r["lock_held_share"] is None else format(r["lock_held_share"], ".1%")
        bound = "n/a" if r["lock_bound_side_runs_per_hour"] is None else r["lock_bound_side_runs_per_hour"]
        out.append(f"| {r['overlap']} | {r['wall_s']} | {r['side_runs']} | {r['side_runs_per_hour']} | "
                   f"{r.get('passed_side_runs_per_hour', 'n/a')} | {r['nodes_finished']} | {r['nodes_per_hour']} | {busy} | {util} | {held} | {bound} | {pct(r['aa_median_over_nodes'])} | {same_s} | {same_v} |")
    for r in results:
        if clock_line(r["gpu"]):
            out.append(f"\nOverlap {r['overlap']}: {clock_line(r['gpu'])}")
        c = r.get("clock_split")
        if c:
            out.append(f"\nOverlap {r['overlap']}: the sides timed at SM clocks of {c['clock_min']:g}-{c['clock_max']:g} MHz; "
                       f"{len(c['apart_nodes'])} of {c['nodes']} node(s) timed their sides more than {c['apart']:.0%} apart "
                       f"(A/A median {pct(c['aa_apart'])}, the others {pct(c['aa_together'])})"
                       + (": " + ", ".join(c["apart_nodes"]) if c["apart_nodes"] else "") + ".")
        out.append(f"\nOverlap {r['overlap']}: A/A by side A's latency: " + "; ".join(
            f"{band_label(b)} {b['shapes']} shape(s), median {pct(b['median_abs'])}, B slower in "
            f"{pct(b['positive_share'], 0)}" for b in r.get("aa_by_latency") or []) + ".")
        if r.get("cores_busy") is not None:
            out.append(f"\nOverlap {r['overlap']}: the side runs' processes used a median {r['cpu_s_median']:.1f} CPU-s "
                       f"each, {r['cores_busy']:.2f} cores on average over the wall.")
        if r.get("case_s"):
            waits = "" if not r.get("lock_waited_s") else f"lock waits {r['lock_waited_s'] / r['case_s']:.1%} of it, "
            out.append(f"\nOverlap {r['overlap']}: the side runs' own seconds sum to {r['case_s']:.0f} s, "
                       f"{r['slot_share']:.1%} of {r['overlap']} slot(s) over the wall; {waits}TIMEOUT sides "
                       f"{r['timeout_case_s']:.0f} s ({r['timeout_case_s'] / r['case_s']:.1%})"
                       + (f"; killed still waiting for the lock: {', '.join(r['cut_waiting'])}."
                          if r.get("cut_waiting") else "."))
        if r.get("share_waited_s") is not None and r.get("lock_waited_s"):
            out.append(f"\nOverlap {r['overlap']}: cases waited {r['lock_waited_s']:.1f} s for the lock in all, "
                       f"{r['share_waited_s']:.1f} s of it ({r['share_waited_s'] / r['lock_waited_s']:.1%}) "
                       "to start GPU work while another case timed"
                       + (f" ({r['aged_shares']} share(s) closed the turnstile after waiting their age)"
                          if r.get("aged_shares") else "")
                       + ("." if r.get("share_held_s") is None else
                          f"; they held it shared {r['share_held_s']:.1f} s in all "
                          f"({r['share_held_s'] / max(r['side_runs'], 1):.1f} s per side run"
                          + ("" if not r.get("share_stretches") else
                             f", {r['share_held_s'] / r['share_stretches']:.2f} s per stretch") + ")."))
    if upstream is not None:
        out += upstream_table(upstream, "Upstream, one pytest process over the same nodes, cold caches, each node "
                              "run once (a screen runs two sides per node):")
    out += ["", "| node | " + " | ".join(f"overlap {r['overlap']}: status, verdict, A/A" for r in results)
            + (" | upstream: outcome, s" if upstream is not None else "") + " |",
            "|---|" + "---|" * (len(results) + (upstream is not None))]
    for n in first:
        cells = []
        for r in results:
            v = r["nodes"].get(n, {})
            cells.append(f"{v.get('status', '-')} {v.get('verdict', '')} {pct(v.get('aa_median_abs_delta'))}")
        if upstream is not None:
            u = upstream["nodes"].get(n)
            cells.append(f"{u['outcome']} {u['seconds']}" if u else
                         "left out" if n in upstream["left_out"] else "not finished")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def reference_report(cmp: Dict) -> str:
    out = [f"A/A against the reference ({cmp['path']}, overlap {cmp['overlap']}), on the nodes both measured:", "",
           "| overlap | nodes | A/A median, reference | A/A median, here | nodes no higher than the reference |",
           "|---|---|---|---|---|"]
    for k, c in cmp["per_overlap"].items():
        out.append(f"| {k} | {len(c['nodes'])} | {pct(c['median_reference'])} | {pct(c['median'])} | {c['no_higher']} |")
    for k, c in cmp["per_overlap"].items():
        out += ["", f"| node | reference A/A | overlap {k} A/A |", "|---|---|---|"]
        out += [f"| {n} | {pct(a)} | {pct(b)} |" for n, (a, b) in c["nodes"].items()]
    return "\n".join(out)


def add_node_options(ap: argparse.ArgumentParser) -> None:
    """The nodes and the batch settings every stage of this tool (and verdict_evidence.py) runs."""
    ap.add_argument("--ops", nargs="+", default=[], help="inventory run names")
    ap.add_argument("--sample", type=int, default=0, help="draw this many nodes from the inventory")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dtypes", default="float16")
    ap.add_argument("--devices", default="", help="run_batch.py --devices (default: its own)")
    ap.add_argument("--op-timeout", type=float, default=300)


def add_upstream_options(ap: argparse.ArgumentParser) -> None:
    """How run_upstream runs FlagGems' harness (this tool's and screen_throughput.py's)."""
    ap.add_argument("--upstream-mode", default="cudagraph", help="its --mode (default cudagraph)")
    ap.add_argument("--upstream-leave-out", nargs="+", default=[], metavar="NAME",
                    help="nodes the one-process run leaves out (a failed capture fails every later node); named")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="overlap_throughput.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_node_options(ap)
    ap.add_argument("--overlap", type=int, nargs="+", default=[1, 4], help="values to compare, first = reference")
    ap.add_argument("--budget-s", type=float, default=None, help="run_batch.py --budget-s per batch")
    ap.add_argument("--out", type=Path, required=True, help="folder: one batch per overlap value, the report")
    ap.add_argument("--upstream", action="store_true", help="after the batches, FlagGems' own harness over the "
                    "same nodes in one pytest process (cold caches, nvidia-smi sampled), reported beside them")
    ap.add_argument("--upstream-only", action="store_true",
                    help="run only the one-process upstream run (again), the batches in --out reported as they are")
    add_upstream_options(ap)
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: the report of the batches already in --out (e.g. a returned bundle)")
    ap.add_argument("--reference", type=Path, metavar="JSON",
                    help="another run's overlap_throughput.json (e.g. the same nodes one case at a time): "
                         "each node's A/A beside it")
    ap.add_argument("--reference-overlap", type=int, metavar="K", help="its overlap value to use (default: its first)")
    args = ap.parse_args(argv)
    interrupt_on_sigterm()
    if any(k < 1 for k in args.overlap):
        ap.error("--overlap values must be >= 1")
    try:    # checked before anything runs
        ref = load_reference(args.reference, args.reference_overlap) if args.reference is not None else None
    except ValueError as exc:
        ap.error(str(exc))
    if args.report_only:
        if not all((args.out / f"overlap-{k}" / "batch.json").is_file() for k in args.overlap):
            ap.error(f"--report-only: {args.out} holds no batch for every --overlap value")
        before = json.loads((args.out / "overlap_throughput.json").read_text()) \
            if (args.out / "overlap_throughput.json").is_file() else {}
        nodes = before.get("nodes") or list(args.ops)
        results = [summarize(k, (args.out / f"overlap-{k}").resolve(), None) for k in args.overlap]
    else:
        nodes = list(args.ops) or (draw(args.sample, args.seed) if args.sample > 0 else [])
        if not nodes:
            ap.error("no nodes: give --ops or --sample N")
        args.out.mkdir(parents=True, exist_ok=True)
        results = []
        for k in args.overlap:
            bd = (args.out / f"overlap-{k}").resolve()
            results.append(summarize(k, bd, None if args.upstream_only else run_one(k, nodes, args, bd)))
        if args.upstream or args.upstream_only:
            run_upstream(nodes, args, args.out)
    upstream = summarize_upstream(args.out)
    text = report(results, upstream)
    cmp = None
    if ref is not None:
        cmp = against_reference(results, ref, args.reference)
        text += "\n\n" + reference_report(cmp)
    atomic.write_json(args.out / "overlap_throughput.json",
                      {"nodes": nodes, "switch": SWITCH, "dtypes": args.dtypes, "results": results,
                       "upstream": upstream, "reference": cmp}, indent=1, sort_keys=False)
    atomic.write_text(args.out / "overlap_throughput.md", text + "\n")
    print(text)
    return 3 if any(r["rc"] == 3 for r in results) else 0


if __name__ == "__main__":
    sys.exit(exit_status(main))
