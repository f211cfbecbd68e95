#!/usr/bin/env python
"""The graph timer's cost against upstream, its A/A noise, and cold vs warm L2 against CUPTI.

    graph_timer_cost.py wall --flaggems-dir FG [--shape-file F] [--ops op:file,...] [--rotate R]
                        --work W [--deadline-s S] [--runs upstream,before,after1,after2]
                        [--mid-warmup-ms 100] [--profile]
        per operator (default: the six of the cost table, one of each kind), each run alone:
        upstream `pytest --mode cudagraph`, zl_bench before (ZL_GRAPH_WARMUP_MS=caller, the
        caller's whole warmup budget), zl_bench after (default) twice (A/A, run 2 replays run
        1's autotune picks); mid1/mid2 the same pair at --mid-warmup-ms, before2 replays
        before; --runs picks a subset. --rotate R starts the operator list R-1 places later,
        so over repetitions each operator sits at odd and even positions. Without
        --shape-file both sides run upstream's core shapes (benchmarks/cost_shapes.yaml is the
        two-shape set of the cost table). Every run gets its own Triton and FlagGems cache
        directories; one untimed import comes first; on every other operator upstream runs
        after its zl_bench partner. Wall and pytest's own time per run, each output line
        stamped (RUN/timeline.tsv: start-up, session and end); W/wall.json after every run. No
        run starts after --deadline-s. --profile: pytest's process under cProfile
        (cost_profile.py compare reads it; the timings of a profiled run are not costs).
    graph_timer_cost.py cold --work W
        in-process, 3 memory-bound float16 shapes: the graph timer warm and cold, and CUPTI
        kernel time (torch.profiler) back to back (warm) and with a flush of 2x L2 before every
        launch (cold, the flush kernel excluded by name), as a kernel-time sum and as the
        per-call span (first kernel start to last kernel end); also CUPTI records and CUDA
        events of a graph replay of the same calls; W/cold.json.
    graph_timer_cost.py summary --work W --out OUT
        OUT/cost.md from whatever the two stages left (no GPU).
Inputs: a FlagGems checkout whose flag_gems imports; one GPU with nothing else on it.
Outputs: W/wall.json, W/cold.json, W/<op>/<run>/ (output.log, timeline.tsv, the zl/ run
directory), OUT/cost.md.
Exit status: 0 done (failed runs are results), 2 bad arguments, or a summary whose W/wall.json
or W/cold.json is not what the two stages write.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from timer_noise import cupti_ms, fmt, kernel_intervals, pair_stats, parse_tables  # noqa: E402
from zl.runlog.stats import call_period_us, call_span_us  # noqa: E402
from zl import atomic, markers  # noqa: E402
from zl.runlog.costs import COSTS, COUNTS, zl_costs  # noqa: E402  (where the graph path spends its time)
import cost_profile  # noqa: E402
from _graphs import capture_calls, graph_timer_ms, replay_ms  # noqa: E402

# before2 replays before: the A/A of the caller's warmup, to set beside after1/after2 in one
# call; mid1/mid2 the same pair at --mid-warmup-ms (one H200 call read softmax's A/A at 0.32 %
# with 25 ms and 0.13 % with 1000 ms, so a budget between them is worth measuring)
RUNS = ("upstream", "before", "after1", "after2", "before2", "mid1", "mid2")
DEFAULT_RUNS = RUNS[:4]
PYTEST_TIME = re.compile(r"=+ .*\b(?:passed|failed|error)\b.* in ([0-9.]+)s")
SESSION_START = "test session starts"
COLD_CASES = (("relu", (4096, 4096)), ("sum", (4096, 4096)), ("softmax", (4096, 4096)))
# The cost table's six operators (op:file), one of each kind: backward, pointwise, reduction,
# normalisation, indexing, autotuned GEMM.
COST_OPS = ("softmax_backward_out:softmax", "clamp:clamp", "sum:sum", "softmax:softmax",
            "index_select:index_select", "mm:mm")


def rotated(ops, r: int) -> list:
    """`ops` starting r-1 places later: over repetitions r = 1, 2, ... each operator sits at
    odd and even positions, and run_order alternates which side of a pair runs first by
    position."""
    n = len(ops)
    return [ops[(i + r - 1) % n] for i in range(n)]


def say(msg: str) -> None:
    print(f"[graph_timer_cost {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_once(kind, op, stem, args, run_dir: Path, replay_from=None):
    run_dir.mkdir(parents=True, exist_ok=True)
    # Every run starts from cold caches, Triton's and FlagGems' (generated pointwise code and
    # the libtuner store, ~/.flaggems unless FLAGGEMS_CACHE_DIR): with a shared store the
    # upstream run, always first, filled it and the zl_bench runs after it reused it (mm on the
    # H200: 32.8 s of pytest upstream, 5.8 s after), which no cost ratio may include.
    env = dict(os.environ, PYTHONUNBUFFERED="1", FLAGGEMS_PERF_COLOR="never",
               TRITON_CACHE_DIR=tempfile.mkdtemp(prefix="triton_", dir=run_dir),
               FLAGGEMS_CACHE_DIR=tempfile.mkdtemp(prefix="flaggems_", dir=run_dir))
    if kind == "upstream":
        cmd = [sys.executable, "-u", "-m", "pytest", "-s", "--color=no",
               f"benchmark/test_{stem}.py::test_{op}", "--level", "core", "--mode", "cudagraph",
               "--dtypes", "float16"] + (["--shape_file", str(args.shape_file)] if args.shape_file else [])
        cwd = args.flaggems_dir
    else:
        env.update(OP=op, OP_FILE=stem, FLAGGEMS_DIR=str(args.flaggems_dir), DTYPES="float16",
                   BENCH_LEVEL="core", OUT_DIR=str(run_dir / "zl"))
        env.pop("SHAPE_FILE", None)
        if args.shape_file:
            env["SHAPE_FILE"] = str(args.shape_file)
        for key in ("REPLAY_FROM", "ZL_GRAPH_WARMUP_MS", "ZL_L2", "ZL_ENABLE_CUDAGRAPH",
                    "ZL_ISOLATE_TUNER_CACHE"):
            env.pop(key, None)
        if kind in ("before", "before2"):
            env["ZL_GRAPH_WARMUP_MS"] = "caller"
        elif kind in ("mid1", "mid2"):
            env["ZL_GRAPH_WARMUP_MS"] = format(getattr(args, "mid_warmup_ms", 100.0), "g")
        if replay_from is not None:
            env["REPLAY_FROM"] = str(replay_from)
        cmd, cwd = ["bash", str(ROOT / "run_pytest.sh")], ROOT
    if getattr(args, "profile", False):
        cmd = cost_profile.wrap(kind, cmd, env, run_dir)
    t0 = time.monotonic()
    rc, lines = run_stamped(cmd, cwd, env, args.run_timeout_s)
    wall = time.monotonic() - t0
    text = "".join(line for _, line in lines)
    atomic.write_text(run_dir / "output.log", text)
    atomic.write_text(run_dir / "timeline.tsv", "".join(f"{t:.3f}\t{line}" for t, line in lines))
    found = PYTEST_TIME.findall(text)
    ident_path = run_dir / "zl" / "run_identity.json"
    ident = json.loads(ident_path.read_text()) if ident_path.is_file() else {}
    return {"kind": kind, "op": op, "rc": rc, "wall_s": round(wall, 2),
            "pytest_s": float(found[-1]) if found else None, "rows": parse_tables(text),
            "fallback_markers": text.count(f"{markers.DIRECT_NO_CUDAGRAPH} op="),
            "graph_warmup_ms": ident.get("graph_warmup_ms"), "l2": ident.get("l2"),
            "costs": zl_costs(text) if kind != "upstream" else {},
            "phases": phases(lines, wall),
            "log_tail": text[-1500:] if rc != 0 else ""}


def run_stamped(cmd, cwd, env, timeout_s):
    """-> (rc or "timeout", [(seconds since start, line), ...]): stdout and stderr merged,
    each line stamped as it arrives, so a run's wall splits into phases (on the H200 zl_bench
    runs were up to 3.9 s slower than upstream outside pytest's own time, and nothing said
    where)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace")
    lines = []

    def read():
        for line in proc.stdout:
            lines.append((time.monotonic() - t0, line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = "timeout"
    reader.join(5)   # a grandchild still holding the pipe must not hang the driver
    return rc, list(lines)


def phases(lines, wall: float) -> dict:
    """A run's wall in three parts: start-up (to pytest's session header: interpreters,
    imports, plugin configuration, run_pytest.sh's preparation), pytest's session (to its
    summary line) and the end (unconfigure hooks, dumps, interpreter exit). {} when a
    marker line is missing (a run that died early)."""
    start = next((t for t, line in lines if SESSION_START in line), None)
    end = next((t for t, line in reversed(lines) if PYTEST_TIME.search(line)), None)
    if start is None or end is None:
        return {}
    return {"startup_s": round(start, 2), "session_s": round(end - start, 2),
            "end_s": round(wall - end, 2)}


def run_order(runs, index: int):
    """The runs of the index-th operator: on odd operators upstream moves behind the zl_bench
    run it is compared with (after1, else before), so whichever goes first on a warm host
    (page cache, clocks) is not always the same side. A replay stays behind its record."""
    order = list(runs)
    if index % 2 and "upstream" in order:
        partner = next((k for k in ("after1", "before") if k in order), None)
        if partner is not None:
            order.remove("upstream")
            order.insert(order.index(partner) + 1, "upstream")
    return order


def prime() -> None:
    """One untimed import of torch and flag_gems: the first process on a fresh machine reads
    their libraries from disk, and that run should not be anybody's measurement."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", "import torch, flag_gems"], capture_output=True, text=True)
    say(f"primed imports (rc={proc.returncode}, {time.monotonic() - t0:.1f} s, not counted)")


def wall_main(args) -> int:
    work = Path(args.work)
    out_json = work / "wall.json"
    prime()
    t0 = time.monotonic()
    results = []
    for index, item in enumerate(rotated(args.ops.split(","), args.rotate)):
        op, _, stem = item.partition(":")
        for kind in run_order(args.runs, index):
            if time.monotonic() - t0 > args.deadline_s:
                say(f"deadline: skipping {op} {kind}")
                results.append({"kind": kind, "op": op, "rc": "skipped_deadline", "rows": []})
                continue
            replay = {"after2": work / op / "after1" / "zl",
                      "before2": work / op / "before" / "zl",
                      "mid2": work / op / "mid1" / "zl"}.get(kind)
            say(f"{op} {kind}")
            r = run_once(kind, op, stem or op, args, work / op / kind, replay)
            say(f"  rc={r['rc']} wall={r['wall_s']} s pytest={r['pytest_s']} s rows={len(r['rows'])}")
            results.append(r)
            atomic.write_text(out_json, json.dumps(results, indent=1, default=str))
    return 0


def cupti_graph_ms(fn, cache, cold: bool, names, n: int = 50) -> dict:
    """One CUDA-graph replay of `n` calls of `fn` (each after a flush of `cache` when `cold`)
    under CUPTI, per call in ms: `kernel_ms` (busy time of `names`), `span_ms` (median first
    kernel start to last kernel end of one call), `period_ms` (median call start to the next
    call's start); and the same graph timed with CUDA events around the replay, divided by n:
    `event_traced_ms` (the profiled replay) and `event_ms` (median of 5 replays untraced);
    cold, also `event_net_ms`: event_ms less a graph of the n flushes alone, which is how the
    graph timer reads cold. In a graph one call's kernels run back to back, so this span, not
    the eager one (host launches between kernels), is what a graph timer is compared with on
    an operator of several kernels (sum: 2). The event figures say whether the graph timer's
    excess over CUPTI (relu +0.7-0.9 us per call on the H200) is in the replay itself
    (present in the same traced replay) or in how the timer reaches its number."""
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)

    graph = capture_calls(lambda: (cache.zero_() if cold else None, fn()), n)
    events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        traced = replay_ms(graph, *events)
        torch.cuda.synchronize()
    untraced = float(np.median([replay_ms(graph, *events) for _ in range(5)]))
    intervals = kernel_intervals(prof, names)
    busy = sum(e - s for s, e in intervals)
    out = {"kernel_ms": busy / n / 1e3, "span_ms": call_span_us(intervals, n) / 1e3,
           "period_ms": call_period_us(intervals, n) / 1e3,
           "event_traced_ms": traced / n, "event_ms": untraced / n}
    if cold:
        flushes = capture_calls(cache.zero_, n)
        flushes.replay()
        out["event_net_ms"] = out["event_ms"] - float(np.median([replay_ms(flushes, *events) for _ in range(5)])) / n
    return out


def _graph_cupti(fn, cache, names):
    """CUPTI kernel time and span per call inside a graph replay, warm and cold; the error
    text instead when the operator cannot be captured (the graph timer then falls back too)."""
    out = {}
    for mode in ("warm", "cold"):
        try:
            out[mode] = cupti_graph_ms(fn, cache, mode == "cold", names)
        except Exception as exc:  # a capture failure is a result here, not a crash
            out[mode] = {"error": repr(exc)[:200]}
    return out


def cold_main(args) -> int:
    import torch

    import flag_gems
    from zl.timing import l2

    nbytes = l2.flush_bytes(torch.cuda)
    cache = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda")
    ops = {"relu": torch.relu, "sum": torch.sum,
           "softmax": lambda x: torch.nn.functional.softmax(x, dim=-1)}

    out = {"flush_bytes": nbytes, "device": torch.cuda.get_device_name(0), "cases": []}
    for name, shape in COLD_CASES:
        x = torch.randn(shape, dtype=torch.float16, device="cuda")
        with flag_gems.use_gems():
            fn = (lambda f=ops[name]: f(x))
            fn()
            torch.cuda.synchronize()
            spans = []
            warm_k, names = cupti_ms(fn, cache, cold=False, spans=spans)
            cold_k, _ = cupti_ms(fn, cache, cold=True, names=names, spans=spans)
            case = {"op": name, "shape": list(shape), "kernels": sorted(names),
                    "cupti_warm_ms": warm_k, "cupti_cold_ms": cold_k,
                    "cupti_span_warm_ms": spans[0], "cupti_span_cold_ms": spans[1],
                    "graph_cupti": _graph_cupti(fn, cache, names),
                    "graph_warm_ms": graph_timer_ms(fn, "warm", "cold_stage"),
                    "graph_cold_ms": graph_timer_ms(fn, "cold", "cold_stage")}
        out["cases"].append(case)
        say(f"{name} {shape}: " + " ".join(f"{k}={v * 1e3:.2f}us" for k, v in case.items()
                                              if k.endswith("_ms")))
        atomic.write_text(Path(args.work) / "cold.json", json.dumps(out, indent=1))
    return 0


def _ratio(a, b):
    return a / b if a and b else None


def _us(ms):
    """A time in ms as microseconds for the tables, "-" when missing."""
    return fmt(None if ms is None else ms * 1e3)


def summary_main(args) -> int:
    work, out = Path(args.work), Path(args.out)
    md = ["# Graph-timer cost and cold L2", ""]
    wall = work / "wall.json"
    if wall.is_file():
        runs = json.loads(wall.read_text())
        by = {(r["op"], r["kind"]): r for r in runs}
        md += ["| op | upstream wall s (pytest s) | before wall (pytest) | after1 wall (pytest) "
               "| after2 wall (pytest) | after/upstream pytest (1, 2) | after/upstream wall (1, 2) "
               "| before/upstream pytest | A/A median % (max) | A/A before median % (max) | after vs before median % "
               "| rows up/before/after | fallback |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for op in dict.fromkeys(r["op"] for r in runs):
            up, bf, a1, a2, b2 = (by.get((op, k), {}) for k in ("upstream", "before", "after1", "after2", "before2"))
            aa_before = pair_stats(bf.get("rows", []), b2.get("rows", []))
            aa, ab = pair_stats(a1.get("rows", []), a2.get("rows", [])), \
                pair_stats(bf.get("rows", []), a1.get("rows", []))

            def wp(r):
                return f"{fmt(r.get('wall_s'), '.1f')} ({fmt(r.get('pytest_s'), '.1f')})" \
                    if r.get("wall_s") is not None else str(r.get("rc", "-"))

            def both(key):
                return ", ".join(fmt(_ratio(r.get(key), up.get(key)), ".2f") for r in (a1, a2))
            md.append(
                f"| {op} | {wp(up)} | {wp(bf)} | {wp(a1)} | {wp(a2)} | {both('pytest_s')} | "
                f"{both('wall_s')} | "
                f"{fmt(_ratio(bf.get('pytest_s'), up.get('pytest_s')), '.2f')} | "
                f"{fmt(aa.get('median_pct'))} ({fmt(aa.get('max_pct'))}) | "
                f"{fmt(aa_before.get('median_pct'))} ({fmt(aa_before.get('max_pct'))}) | "
                f"{fmt(ab.get('median_pct'))} | {len(up.get('rows', []))}/"
                f"{len(bf.get('rows', []))}/{len(a1.get('rows', []))} | "
                f"{a1.get('fallback_markers', '-')}/{a2.get('fallback_markers', '-')} |")
        if any(r["kind"] == "mid1" for r in runs):
            md += ["", "The A/A of each warmup budget (median % (max) of |run 2 / run 1 - 1| per row; "
                   "pytest s of run 1):", "",
                   "| op | 25 ms (after) | mid (mid1, mid2) | caller's (before) | pytest after1 / mid1 / before |",
                   "|---|---|---|---|---|"]
            for op in dict.fromkeys(r["op"] for r in runs):
                pairs = [("after1", "after2"), ("mid1", "mid2"), ("before", "before2")]
                cells = []
                for a, b in pairs:
                    st = pair_stats(by.get((op, a), {}).get("rows", []), by.get((op, b), {}).get("rows", []))
                    cells.append(f"{fmt(st.get('median_pct'))} ({fmt(st.get('max_pct'))})")
                secs = " / ".join(fmt(by.get((op, k), {}).get("pytest_s"), ".1f") for k in ("after1", "mid1", "before"))
                md.append(f"| {op} | " + " | ".join(cells) + f" | {secs} |")
        costed = [r for r in runs if r.get("costs")]
        if costed:
            keys = list(COSTS)
            md += ["", "Where zl_bench's own seconds went (from each run's log; the excess is the "
                   "run's wall minus upstream's):", "",
                   "| op | run | wall excess s | " + " | ".join(keys) + " |",
                   "|---|---|---|" + "---|" * len(keys)]
            for r in costed:
                up = by.get((r["op"], "upstream"), {})
                excess = (r["wall_s"] - up["wall_s"]) if up.get("wall_s") is not None else None
                md.append(f"| {r['op']} | {r['kind']} | {fmt(excess, '.1f')} | "
                          + " | ".join(str(r["costs"].get(k, "-")) if k in COUNTS
                                       else fmt(r["costs"].get(k), ".3f") for k in keys) + " |")
        phased = [r for r in runs if r.get("phases")]
        if phased:
            md += ["", "Each run's wall in phases (seconds, from each output line's arrival time): "
                   "start-up to pytest's session header, the session to its summary line, and the "
                   "end after it:", "",
                   "| op | run | wall | start-up | session | end | start-up + end vs upstream |",
                   "|---|---|---|---|---|---|---|"]
            for r in phased:
                ph, up = r["phases"], by.get((r["op"], "upstream"), {}).get("phases") or {}
                outside = ph["startup_s"] + ph["end_s"]
                delta = outside - (up["startup_s"] + up["end_s"]) if up else None
                md.append(f"| {r['op']} | {r['kind']} | {fmt(r['wall_s'], '.1f')} | "
                          f"{fmt(ph['startup_s'], '.2f')} | {fmt(ph['session_s'], '.2f')} | "
                          f"{fmt(ph['end_s'], '.2f')} | {fmt(delta, '+.2f')} |")
    cold = work / "cold.json"
    if cold.is_file():
        data = json.loads(cold.read_text())
        md += ["", f"Cold L2 ({data['device']}, flush {data['flush_bytes'] >> 20} MiB, float16):", "",
               "| op | shape | kernels | CUPTI warm us (span) | CUPTI cold us (span) | graph warm us "
               "| graph cold us | warm/CUPTI warm (span) | cold/CUPTI cold (span) | cold vs warm % |",
               "|---|---|---|---|---|---|---|---|---|---|"]
        for c in data["cases"]:
            gap = _ratio(c["graph_cold_ms"], c["graph_warm_ms"])
            sw, sc = c.get("cupti_span_warm_ms"), c.get("cupti_span_cold_ms")
            md.append(f"| {c['op']} | {c['shape']} | {len(c.get('kernels', []))} | "
                      f"{_us(c['cupti_warm_ms'])} ({_us(sw)}) | {_us(c['cupti_cold_ms'])} ({_us(sc)}) | "
                      f"{_us(c['graph_warm_ms'])} | {_us(c['graph_cold_ms'])} | "
                      f"{fmt(_ratio(c['graph_warm_ms'], c['cupti_warm_ms']), '.3f')} "
                      f"({fmt(_ratio(c['graph_warm_ms'], sw), '.3f')}) | "
                      f"{fmt(_ratio(c['graph_cold_ms'], c['cupti_cold_ms']), '.3f')} "
                      f"({fmt(_ratio(c['graph_cold_ms'], sc), '.3f')}) | "
                      f"{fmt(None if gap is None else (gap - 1) * 100, '+.1f')} |")
        rows = [c for c in data["cases"] if c.get("graph_cupti")]
        if rows:
            md += ["", "The same against CUPTI records of a graph replay (kernel time and per-call span "
                   "inside the graph, where one call's kernels run back to back; the period is one "
                   "call's first kernel start to the next call's, gap included):", "",
                   "| op | CUPTI-in-graph warm us (span) | CUPTI-in-graph cold us (span) | graph warm / span "
                   "| graph cold / span | CUPTI-in-graph warm period us | graph warm / period "
                   "| same replay, events warm us (traced) | graph warm / events | events cold net us "
                   "| graph cold / events net |",
                   "|---|---|---|---|---|---|---|---|---|---|---|"]
            for c in rows:
                g = c["graph_cupti"]

                def cell(mode):
                    m = g.get(mode, {})
                    return m.get("error") or f"{m['kernel_ms'] * 1e3:.2f} ({m['span_ms'] * 1e3:.2f})"

                def ratio(mode, key="span_ms"):
                    m = g.get(mode, {})
                    return fmt(_ratio(c[f"graph_{mode}_ms"], m.get(key)), ".3f")
                warm, cold = g.get("warm", {}), g.get("cold", {})
                # the period (call start to next call start) holds the gap between calls, as
                # the graph timer's reading does; the cold period also holds the flush, so only warm
                period = warm.get("period_ms")
                # the same replay timed by CUDA events (untraced, and traced in parentheses): an
                # excess over CUPTI present here is in the replay itself, not in the timer
                events = (f"{_us(warm.get('event_ms'))} ({_us(warm.get('event_traced_ms'))})"
                          if "event_ms" in warm else "-")
                md.append(f"| {c['op']} | {cell('warm')} | {cell('cold')} | {ratio('warm')} | {ratio('cold')} | "
                          f"{_us(period)} | {ratio('warm', 'period_ms')} | {events} | "
                          f"{ratio('warm', 'event_ms')} | {_us(cold.get('event_net_ms'))} | "
                          f"{ratio('cold', 'event_net_ms')} |")
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out / "cost.md", "\n".join(md) + "\n")
    print("\n".join(md), flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="graph_timer_cost.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=("wall", "cold", "summary"))
    ap.add_argument("--flaggems-dir", default=os.environ.get("FLAGGEMS_DIR", ""),
                    help="FlagGems checkout (default $FLAGGEMS_DIR)")
    ap.add_argument("--shape-file", default="", help="shape yaml for both sides (default: upstream's core shapes)")
    ap.add_argument("--ops", default=",".join(COST_OPS), help="op:file,... (default: the cost table's six)")
    ap.add_argument("--rotate", type=int, default=1, help="start the operator list R-1 places later (default 1)")
    ap.add_argument("--runs", default=",".join(DEFAULT_RUNS),
                    help="comma separated subset of " + ",".join(RUNS))
    ap.add_argument("--work", required=True, help="work folder (wall.json, cold.json, one folder per run)")
    ap.add_argument("--out", default="", help="summary: folder for cost.md")
    ap.add_argument("--deadline-s", type=float, default=360.0, help="wall: no run starts after this (default 360)")
    ap.add_argument("--run-timeout-s", type=float, default=90.0, help="wall: each run killed after this (default 90)")
    ap.add_argument("--profile", action="store_true",
                    help="each run under cProfile -> RUN/profile.pstats (cost_profile.py compare)")
    ap.add_argument("--mid-warmup-ms", type=float, default=100.0,
                    help="ZL_GRAPH_WARMUP_MS of the mid1/mid2 runs (default 100)")
    args = ap.parse_args(argv)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    if args.stage == "wall":
        if args.rotate < 1:
            ap.error(f"--rotate {args.rotate}: must be 1 or more")
        if not (args.ops and Path(args.flaggems_dir).is_dir()):
            ap.error("wall needs --ops and an existing --flaggems-dir")
        if args.shape_file and not Path(args.shape_file).is_file():
            ap.error(f"--shape-file {args.shape_file}: no such file")
        args.runs = [r for r in args.runs.split(",") if r]
        bad = [r for r in args.runs if r not in RUNS]
        if bad or not args.runs:
            ap.error(f"--runs: unknown {bad or '(empty)'}; choose from {','.join(RUNS)}")
        args.flaggems_dir = Path(args.flaggems_dir).resolve()
        args.shape_file = Path(args.shape_file).resolve() if args.shape_file else None
        return wall_main(args)
    if args.stage == "cold":
        return cold_main(args)
    if not args.out:
        ap.error("summary needs --out")
    try:
        return summary_main(args)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        print(f"!!! summary: {args.work}: wall.json or cold.json is not what the wall and cold stages "
              f"write ({exc!r})", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
