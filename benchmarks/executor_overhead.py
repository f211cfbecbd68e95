#!/usr/bin/env python3
"""Per-case overhead of run_batch.py's executors, and whether the Ray executor gives the local
executor's statuses.

Two measurements, one per mode:

--stub (CPU, no GPU): the batch layer's own cost. The same N cases of the fake FlagGems tree run
through tests/fixtures/batch/stub_case.sh twice, each directly (`bash stub_case.sh`, one after
another) and through `run_batch.py --devices 0`; prints (batch wall - direct wall) / N: the
batch's start (inventory scan, reaper), process-group and reaper bookkeeping, the status table
rewrite, log parsing and the final batch_summary.py call, spread over the cases.

    python benchmarks/executor_overhead.py --stub [--cases 18]

--ray-address ADDRESS (a GPU machine, FlagGems importable, a Ray cluster already started): the
same inventory nodes through run_batch.py twice, alone on the GPU, one after the other:

    run_batch.py --ops <nodes> --share-device K --dtypes D --batch-dir OUT/local
    run_batch.py --ops <nodes> --share-device K --dtypes D --batch-dir OUT/ray --executor ray --ray-address ADDRESS

The report (stdout markdown, OUT/executor_overhead.json): each node's status under both and
whether they agree; each batch's wall (summed over resumed calls), the per-case overhead of the
Ray path ((ray wall - local wall) / cases, and the median of the per-case elapsed differences,
elapsed being the case's own time on its worker); where each Ray case ran (host, device), and
what a case directory weighs on the way back (its files, and the gzip'd tar the task returns).

    ray start --head --port=6379 --num-gpus=0 && ray start --address=127.0.0.1:6379 --num-gpus=1
    python benchmarks/executor_overhead.py --ray-address 127.0.0.1:6379 --sample 20 --seed 5 --share-device 4 --out runs/exo
    python benchmarks/executor_overhead.py --report-only --out <unpacked bundle>/exo

Nodes: --ops, or --sample N drawn with --seed from the inventory (as overlap_throughput.py draws).
A batch directory that exists is resumed. Exit status: 0 report written; 2 bad arguments (no
nodes, no --ray-address and no --stub, --report-only without both batches); 3 a batch left cases
unrun or its run_batch.py failed (the console logs under OUT say why); 130 stopped by SIGTERM or
Ctrl-C (call again to resume). A node without a final
status under both executors makes the comparison INCOMPLETE: no statuses verdict, no per-case
overhead. --report-only on a bundle without its case directories keeps the weights its
executor_overhead.json recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from overlap_throughput import (add_node_options, draw, exit_status, interrupt_on_sigterm,  # noqa: E402
                                read_walls, run_batch_call)
from zl import atomic  # noqa: E402
from zl.batch.ray_executor import pack  # noqa: E402
from zl.batch.status import UNFINISHED, note_value, read_rows  # noqa: E402
from zl.report import views  # noqa: E402

FAKE = ROOT / "tests" / "fake_flaggems"
STUB = ROOT / "tests" / "fixtures" / "batch" / "stub_case.sh"
STUB_OPS = ["softmax", "relu", "abs", "exp", "amax", "mm", "gelu_backward", "zl_flaky", "zl_sweep"]
EXECUTORS = ("local", "ray")


def stub_overhead(n: int) -> str:
    ops = [STUB_OPS[i % len(STUB_OPS)] for i in range(n)]
    env = dict(os.environ, FLAGGEMS_DIR=str(FAKE), ZL_RUN_PYTEST=str(STUB), NO_COLOR="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(FAKE / "src")]), TRITON_INTERPRET="1")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        for i, op in enumerate(ops):
            node = f"{FAKE}/benchmark/test_{op}.py::test_{op}"
            subprocess.run(["bash", str(STUB)], env=dict(env, TEST_NODE=node, OUT_DIR=f"{tmp}/d/{i}"),
                           stdout=subprocess.DEVNULL, check=True)
        direct = time.perf_counter() - t0
        uniq = list(dict.fromkeys(ops))
        t0 = time.perf_counter()
        runs = 0
        while runs < n:   # the batch runs each name once: repeat batches until n cases ran
            k = min(len(uniq), n - runs)
            subprocess.run([sys.executable, str(ROOT / "run_batch.py"), "--ops", *uniq[:k], "--devices", "0",
                            "--batch-dir", f"{tmp}/b{runs}"], env=env, stdout=subprocess.DEVNULL, check=True)
            runs += k
        batch = time.perf_counter() - t0
    return (f"{n} cases: direct {direct:.2f} s ({direct / n * 1000:.0f} ms/case), run_batch {batch:.2f} s "
            f"({batch / n * 1000:.0f} ms/case); batch layer overhead {(batch - direct) / n * 1000:.0f} ms per case")


def run_executor(name: str, nodes: List[str], args, bd: Path) -> int:
    """One run_batch.py call for executor `name` (a new batch, or --resume); its wall appended
    to walls-<name>.json, its output to console-<name>.log. -> its exit status."""
    cmd = [sys.executable, str(ROOT / "run_batch.py"), "--share-device", str(args.share_device),
           "--dtypes", args.dtypes, "--op-timeout", str(args.op_timeout), "--batch-dir", str(bd)]
    cmd += ["--resume"] if (bd / "batch.json").is_file() else ["--ops", *nodes]
    if name == "ray":
        cmd += ["--executor", "ray", "--ray-address", args.ray_address]
    elif args.devices:
        cmd += ["--devices", args.devices]
    return run_batch_call(cmd, bd.parent / f"console-{name}.log", bd.parent / f"walls-{name}.json")


def dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def final(row: Dict[str, str]) -> bool:
    """A row whose case ended (PASS, FAIL, TIMEOUT, SKIP, ...): not missing, pending, running
    or interrupted."""
    return bool(row.get("status")) and row["status"] not in UNFINISHED


def summarize(out: Path, rcs: Dict[str, Optional[int]]) -> Dict:
    """The comparison; with a case unfinished on either side it is incomplete: no verdict on
    the statuses and no per-case overhead (a wall over cases not all run is not a rate)."""
    rows = {x: {r["run_name"]: r for r in read_rows(out / x / "ops_status.csv").values()} for x in EXECUTORS}
    walls = {x: read_walls(out / f"walls-{x}.json") for x in EXECUTORS}
    nodes, diffs, sizes, packed, where, unfinished = [], [], [], [], {}, []
    for name in sorted(set(rows["local"]) | set(rows["ray"])):
        lo, ry = rows["local"].get(name, {}), rows["ray"].get(name, {})
        notes = ry.get("notes") or ""
        ran = f"{note_value(notes, 'host') or '?'}:{views.device_of_row(None, notes)[0] or '?'}"
        where[ran] = where.get(ran, 0) + 1
        e = {x: int(r["elapsed_ms"]) / 1000 if (r.get("elapsed_ms") or "").isdigit() else None
             for x, r in (("local", lo), ("ray", ry))}
        if not (final(lo) and final(ry)):
            unfinished.append(name)
        elif None not in e.values():
            diffs.append(e["ray"] - e["local"])
        case = Path(ry.get("out_dir") or "")
        if ry.get("out_dir") and case.is_dir():
            sizes.append(dir_bytes(case))
            packed.append(len(pack(case)))
        nodes.append({"node": name, "local": lo.get("status", "-"), "ray": ry.get("status", "-"),
                      "same": lo.get("status") == ry.get("status"), "elapsed_local_s": e["local"],
                      "elapsed_ray_s": e["ray"], "ray_ran_on": ran})
    n = len(nodes)
    wall = {x: sum(walls[x]) for x in EXECUTORS}
    return {"nodes": nodes, "cases": n, "rc": rcs, "walls_s": {x: round(w, 1) for x, w in wall.items()},
            "calls": {x: len(walls[x]) for x in EXECUTORS}, "unfinished": unfinished,
            "statuses_identical": n > 0 and not unfinished and all(x["same"] for x in nodes),
            "overhead_per_case_s": round((wall["ray"] - wall["local"]) / n, 2) if n and not unfinished else None,
            "median_elapsed_diff_s": round(float(np.median(diffs)), 2) if diffs else None,
            "ray_ran_on": where,
            "case_dir_kib": {"median": round(float(np.median(sizes)) / 1024, 1), "max": round(max(sizes) / 1024, 1)}
            if sizes else None,
            "returned_kib": {"median": round(float(np.median(packed)) / 1024, 1),
                             "max": round(max(packed) / 1024, 1)} if packed else None}


def kib(x: Optional[Dict]) -> str:
    return "n/a" if not x else f"{x['median']} / {x['max']}"


def report(s: Dict, share: int) -> str:
    out = [f"## Ray executor vs local executor: {s['cases']} nodes, --share-device {share}", "",
           "| | local | ray |", "|---|---|---|",
           f"| batch wall s (calls) | {s['walls_s']['local']} ({s['calls']['local']}) | "
           f"{s['walls_s']['ray']} ({s['calls']['ray']}) |",
           f"| run_batch.py exit | {s['rc']['local']} | {s['rc']['ray']} |", "",
           "- statuses identical: " + (f"INCOMPLETE, {len(s['unfinished'])} node(s) without a final status "
                                       f"under both executors: {' '.join(s['unfinished'])}" if s["unfinished"]
                                       else "yes" if s["statuses_identical"] else "NO"),
           f"- Ray per-case overhead: {s['overhead_per_case_s']} s by wall; median per-case elapsed "
           f"difference (ray - local) {s['median_elapsed_diff_s']} s",
           "- Ray cases ran on: " + ", ".join(f"{k} x{v}" for k, v in s["ray_ran_on"].items()),
           f"- a case directory (KiB, median and max): {kib(s['case_dir_kib'])} of files, returned as "
           f"{kib(s['returned_kib'])} of gzip'd tar",
           "", "| node | local | ray | elapsed local s | elapsed ray s |", "|---|---|---|---|---|"]
    out += [f"| {x['node']} | {x['local']} | {x['ray']}{'' if x['same'] else ' (differs)'} | "
            f"{x['elapsed_local_s']} | {x['elapsed_ray_s']} |" for x in s["nodes"]]
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="executor_overhead.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_node_options(ap)
    ap.add_argument("--stub", action="store_true", help="CPU: the batch layer's cost over the run script alone")
    ap.add_argument("--cases", type=int, default=18, help="with --stub: number of cases (the fake ops, repeated)")
    ap.add_argument("--ray-address", default="", help="the running Ray cluster's head (HOST:PORT)")
    ap.add_argument("--share-device", type=int, default=1, help="run_batch.py --share-device for both (default 1)")
    ap.add_argument("--out", type=Path, help="folder: the two batches and the report")
    ap.add_argument("--report-only", action="store_true", help="run nothing: report the batches in --out")
    args = ap.parse_args(argv)
    interrupt_on_sigterm()
    if args.stub:
        if args.cases < 1:
            ap.error("--cases must be >= 1")
        print(stub_overhead(args.cases))
        return 0
    if args.out is None:
        ap.error("--out is required (or --stub)")
    if args.share_device < 1:
        ap.error("--share-device must be >= 1")
    rcs: Dict[str, Optional[int]] = {x: None for x in EXECUTORS}
    if args.report_only:
        if not all((args.out / x / "batch.json").is_file() for x in EXECUTORS):
            ap.error(f"--report-only: {args.out} lacks a local and a ray batch")
    else:
        if not args.ray_address:
            ap.error("give --ray-address of a running cluster (or --stub, or --report-only)")
        nodes = list(args.ops) or (draw(args.sample, args.seed) if args.sample > 0 else [])
        if not nodes:
            ap.error("no nodes: give --ops or --sample N")
        args.out.mkdir(parents=True, exist_ok=True)
        for x in EXECUTORS:
            rcs[x] = run_executor(x, nodes, args, (args.out / x).resolve())
    prev = args.out / "executor_overhead.json"
    old = json.loads(prev.read_text()) if prev.is_file() else {}
    if args.report_only:
        rcs = old.get("rc") or rcs
    s = summarize(args.out.resolve(), rcs)
    share = json.loads((args.out / "local" / "batch.json").read_text()).get("share_device", args.share_device)
    if s["case_dir_kib"] is None:
        # a bundle returned without its case directories: the weights measured where they were
        s.update(case_dir_kib=old.get("case_dir_kib"), returned_kib=old.get("returned_kib"))
    text = report(s, share)
    print(text)
    atomic.write_json(args.out / "executor_overhead.json", dict(s, share_device=share),
                      indent=1, sort_keys=False)
    atomic.write_text(args.out / "executor_overhead.md", text + "\n")
    return 3 if not args.report_only and any(rc not in (None, 0) for rc in rcs.values()) else 0


if __name__ == "__main__":
    sys.exit(exit_status(main))
