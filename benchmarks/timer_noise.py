#!/usr/bin/env python
"""How noisy is each timer? A/A runs of FlagGems benchmarks plus a CUPTI cross-check.

For every operator, four timers each run the same benchmark node twice:

    zl_graph      run_pytest.sh, graph capture (ZL_DIRECT_REPEAT=5 for any fallback rows);
                  the second run replays the first run's autotune picks, as an A/B does
    zl_direct     run_pytest.sh with ZL_ENABLE_CUDAGRAPH=0 ZL_DIRECT_REPEAT=5 (replayed too)
    up_kernel     upstream `pytest <node> --level core --mode kernel`
    up_cudagraph  upstream `pytest <node> --level core --mode cudagraph`

Shapes are upstream's core set (SHAPE_FILE=upstream) so all four time the same rows. The
two runs of a pair are matched row by row (dtype + Size Detail) and the script reports,
per timer: rows kept in each run, median / p90 / max |A/A delta| of the Gems latency.

Then, in a child process, a few softmax shapes are timed in-process by each timer and by
torch.profiler (CUPTI kernel time): warm (back-to-back calls) for the graph timers, which
never flush L2, and cold (L2 flushed between calls, the flush kernel excluded) for the
direct timers, which flush before every call like do_bench. Each timer's ratio to its
profiler reference is reported, with per-timer medians over all shapes and over kernels
of 10 us or more.

Usage (one H200; each zl_bench run compiles from a private Triton cache, so a run takes
~20-30 s and 3 operators x 4 timers x 2 runs do not fit one 10-minute call: split them):
    PYTHONUNBUFFERED=1 python benchmarks/timer_noise.py --flaggems-dir /path/FlagGems \
        --ops softmax,gelu_backward --out "$OUT"
    PYTHONUNBUFFERED=1 python benchmarks/timer_noise.py --flaggems-dir /path/FlagGems \
        --ops sum --skip-profile --out "$OUT"
No new pair starts after --budget-s (default 470 s); skipped pairs are listed as such.
Re-render the tables of an earlier run (no GPU): --render old/timer_noise.json --out DIR.

Writes to --out: timer_noise.json (everything, raw), timer_noise_rows.tsv (every row of
every run), timer_noise_pairs.tsv (per operator x timer statistics), timer_noise.md.
Exit status: 0 done (even if some runs failed: that is a result), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from zl import atomic, markers  # noqa: E402
from zl.flaggems import checkout_commit  # noqa: E402
from zl.identity import IDENTITY_NAME  # noqa: E402
from zl.runlog.parse import RunLogError, parse_run_log  # noqa: E402
from zl.runlog.stats import call_period_us, call_span_us  # noqa: E402  (CUPTI call intervals)
from zl.timing.kernel_clock import is_device_event  # noqa: E402

# FlagGems test function -> benchmark file stem (checked against the checkout at start).
OP_FILES = {"softmax": "softmax", "gelu_backward": "gelu", "sum": "sum",
            "layer_norm": "layer_norm", "gelu": "gelu"}
TIMERS = ("zl_graph", "zl_direct", "up_kernel", "up_cudagraph")
PROFILE_SHAPES = ((4096, 4096), (64, 512, 512), (1024, 1024, 1024), (64, 64))

RUN_TIMEOUT_S = 240

DIRECT_MARKER = markers.DIRECT_NO_CUDAGRAPH
POISONED_MARKER = markers.CAPTURE_POISONED


def say(msg: str) -> None:
    print(f"[timer-noise {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --- parsing --------------------------------------------------------------------------------

def parse_tables(text: str) -> List[Dict]:
    """Rows of every FlagGems result table in a log: op, dtype, status, latencies, detail.

    Through the project's one run.log parser (`zl.runlog.parse`), so folded tables come back
    with upstream's own Size Detail text; a log with no benchmark output has no rows.
    """
    try:
        parsed = parse_run_log(text)
    except RunLogError:
        return []
    return [{"op": r.op, "dtype": r.dtype, "status": r.row_status, "torch_ms": r.torch_lat,
             "gems_ms": r.gems_lat, "speedup": r.speedup, "detail": r.size_detail}
            for r in parsed.rows]


def row_keys(rows: List[Dict]) -> List[Tuple]:
    seen: Dict[Tuple, int] = {}
    keys = []
    for r in rows:
        base = (r["op"], r["dtype"], r["detail"])
        seen[base] = seen.get(base, 0) + 1
        keys.append(base + (seen[base],))
    return keys


def pair_stats(a_rows: List[Dict], b_rows: List[Dict]) -> Dict:
    """|A/A delta| of Gems latency over rows present (and measured) in both runs."""
    a = {k: r for k, r in zip(row_keys(a_rows), a_rows)}
    b = {k: r for k, r in zip(row_keys(b_rows), b_rows)}
    deltas = []
    for key in a.keys() & b.keys():
        x, y = a[key]["gems_ms"], b[key]["gems_ms"]
        if x and y:
            deltas.append(abs(y - x) / x * 100.0)
    out = {"rows_a": len(a_rows), "rows_b": len(b_rows), "matched": len(deltas)}
    if deltas:
        arr = np.asarray(deltas)
        out.update(median_pct=float(np.median(arr)), p90_pct=float(np.percentile(arr, 90)),
                   max_pct=float(arr.max()))
    return out


# --- running --------------------------------------------------------------------------------

class NodeError(ValueError):
    """An --ops entry that names no benchmark function in the checkout."""


def check_node(flaggems_dir: Path, op: str, op_file: str) -> None:
    path = flaggems_dir / "benchmark" / f"test_{op_file}.py"
    if not path.is_file():
        raise NodeError(f"{path} not found (op {op}); give --ops {op}:<file stem>")
    if not re.search(rf"^def test_{re.escape(op)}\(", path.read_text(), re.M):
        raise NodeError(f"{path} has no test_{op}()")


def run_one(timer: str, op: str, op_file: str, args, run_dir: Path,
            replay_from: Optional[Path]) -> Dict:
    run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", FLAGGEMS_PERF_COLOR="never")
    if timer.startswith("zl_"):
        env.update(OP=op, OP_FILE=op_file, FLAGGEMS_DIR=str(args.flaggems_dir),
                   SHAPE_FILE="upstream", BENCH_LEVEL="core", DTYPES=args.dtypes,
                   OUT_DIR=str(run_dir / "zl"), ZL_DIRECT_REPEAT="5")
        env.pop("REPLAY_FROM", None)
        if timer == "zl_direct":
            env["ZL_ENABLE_CUDAGRAPH"] = "0"
        else:
            env.pop("ZL_ENABLE_CUDAGRAPH", None)
        if replay_from is not None:
            env["REPLAY_FROM"] = str(replay_from)
        cmd, cwd = ["bash", str(ROOT / "run_pytest.sh")], ROOT
    else:
        mode = "kernel" if timer == "up_kernel" else "cudagraph"
        cmd = [sys.executable, "-u", "-m", "pytest", "-s", "--color=no",
               f"benchmark/test_{op_file}.py::test_{op}", "--level", "core", "--mode", mode]
        for dt in args.dtypes.split():
            cmd += ["--dtypes", dt]
        cwd = args.flaggems_dir
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
        rc, text = proc.returncode, proc.stdout + "\n" + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc = "timeout"
        text = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) \
            else (exc.stdout or "")
    (run_dir / "output.log").write_text(text)
    rows = parse_tables(text)
    identity = {}
    ident_path = run_dir / "zl" / IDENTITY_NAME
    if ident_path.is_file():
        identity = json.loads(ident_path.read_text())
    return {"timer": timer, "op": op, "rc": rc, "wall_s": round(time.monotonic() - t0, 1),
            # " op=" keeps the timing plugin's configure line, which names the marker, out.
            "rows": rows, "direct_markers": text.count(f"{DIRECT_MARKER} op="),
            "poisoned_markers": text.count(f"{POISONED_MARKER} op="),
            "marker_phases": sorted(set(re.findall(rf"{DIRECT_MARKER} op=\S+ phase=(\S+)", text))),
            "identity": {k: identity.get(k) for k in
                         ("timer", "graph_capture", "direct_repeat", "autotune_mode")},
            "log_tail": text[-1500:] if (rc != 0 or not rows) else ""}


# --- profiler cross-check (child process) ----------------------------------------------------

def cupti_ms(fn, cache, cold: bool, names=None, n: int = 50, spans=None):
    """CUPTI device time per call of `fn` (ms) and the kernel names seen; `cold` zeroes
    `cache` (larger than L2) before every call and counts only `names` (the flush is a
    kernel too). Shared by the timer comparison and benchmarks/graph_timer_cost.py.
    A list as `spans` also receives the median per-call span (ms, first kernel's start to
    last kernel's end), which includes the gaps between an operator's kernels."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            if cold:
                cache.zero_()
            fn()
        torch.cuda.synchronize()
    total, seen = 0.0, set()
    for evt in prof.key_averages():
        t = getattr(evt, "self_device_time_total", None)
        if t is None:
            t = getattr(evt, "self_cuda_time_total", 0.0)
        if t and (names is None or evt.key in names):
            total += t
            seen.add(evt.key)
    if spans is not None:
        spans.append(call_span_us(kernel_intervals(prof, seen), n) / 1e3)
    return total / n / 1e3, seen


def device_events(prof):
    """The profile's device-side events (kernels, on torch.cuda)."""
    return [e for e in prof.events() if is_device_event(e)]


def kernel_intervals(prof, names):
    """(start, end) in us of every device-side event of a kernel in `names`."""
    return [(e.time_range.start, e.time_range.end) for e in device_events(prof) if e.name in names]


def profile_main(args) -> int:
    import torch
    import triton.testing as tt
    import flag_gems
    from zl.backends import get_backend
    from zl.timing.direct import run_direct
    from zl.timing.graph import GraphTimer

    upstream_do_bench, upstream_graph = tt.do_bench, tt.do_bench_cudagraph
    cache = torch.empty(int(256e6 // 4), dtype=torch.int, device="cuda")
    warmup, rep = 200, 100

    results = []
    for shape in PROFILE_SHAPES:
        x = torch.randn(shape, dtype=torch.float16, device="cuda")
        with flag_gems.use_gems():
            def fn():
                return torch.nn.functional.softmax(x, dim=-1)

            fn()
            torch.cuda.synchronize()
            warm_ms, names = cupti_ms(fn, cache, cold=False)
            cold_ms, _ = cupti_ms(fn, cache, cold=True, names=names)
            timings = {}
            timings["up_kernel"] = tt.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
            timings["up_cudagraph"] = upstream_graph(fn, rep=rep, return_mode="median")
            timings["zl_direct"] = run_direct(upstream_do_bench, fn, warmup=warmup, rep=rep,
                                              return_mode="median", repeat=5)
            graph = GraphTimer(get_backend("cuda"), repeat=5)
            graph.install()
            try:
                graph.op = "softmax"
                timings["zl_graph"] = tt.do_bench(fn, warmup=warmup, rep=rep,
                                                  return_mode="median")
            finally:
                graph.uninstall()
        ref = {"zl_graph": warm_ms, "up_cudagraph": warm_ms,
               "zl_direct": cold_ms, "up_kernel": cold_ms}
        results.append({"shape": list(shape), "kernels": sorted(names),
                        "profiler_warm_ms": warm_ms, "profiler_cold_ms": cold_ms,
                        "timers_ms": timings,
                        "ratio_to_profiler": {k: (v / ref[k] if ref[k] else None)
                                              for k, v in timings.items()}})
        say(f"profile softmax {shape}: warm {warm_ms * 1e3:.1f} us cold {cold_ms * 1e3:.1f} us "
            + " ".join(f"{k}={v * 1e3:.1f}us" for k, v in timings.items()))
        del x
        torch.cuda.empty_cache()
    Path(args.profile_out).write_text(json.dumps(results, indent=2))
    return 0


# --- report ---------------------------------------------------------------------------------

def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


# The accuracy target covers kernels of 10 us and more: below that a timer's fixed cost
# (launch, event resolution) is a large fraction of the kernel and no timer is expected to match.
ACCURACY_FLOOR_MS = 0.010


def profile_medians(profile: List[Dict]) -> Dict[str, Dict[str, Optional[float]]]:
    """Per timer: median ratio to the profiler's kernel time over all profiled shapes ("all")
    and over the shapes whose warm kernel time is >= ACCURACY_FLOOR_MS ("ge_10us")."""
    out: Dict[str, Dict[str, Optional[float]]] = {}
    for t in TIMERS:
        for key, keep in (("all", lambda p: True),
                          ("ge_10us", lambda p: p["profiler_warm_ms"] >= ACCURACY_FLOOR_MS)):
            vals = [p["ratio_to_profiler"][t] for p in profile
                    if keep(p) and p["ratio_to_profiler"].get(t) is not None]
            out.setdefault(t, {})[key] = float(np.median(vals)) if vals else None
    return out


def write_outputs(out: Path, meta: Dict, runs: List[Dict], pairs: List[Dict],
                  profile: Optional[List[Dict]]) -> None:
    out.mkdir(parents=True, exist_ok=True)

    def write(name: str, text: str) -> None:
        atomic.write_text(out / name, text)

    write("timer_noise.json", json.dumps({"meta": meta, "pairs": pairs, "runs": runs,
                                           "profile": profile}, indent=2, default=str))
    lines = ["op\ttimer\trun\trc\tdtype\tstatus\ttorch_ms\tgems_ms\tdetail"]
    for r in runs:
        for row in r["rows"]:
            lines.append("\t".join(str(x) for x in (
                r["op"], r["timer"], r["run"], r["rc"], row["dtype"], row["status"],
                row["torch_ms"], row["gems_ms"], row["detail"])))
    write("timer_noise_rows.tsv", "\n".join(lines) + "\n")
    cols = ("op", "timer", "rows_a", "rows_b", "matched", "median_pct", "p90_pct", "max_pct",
            "direct_markers", "poisoned_markers", "rc")
    write("timer_noise_pairs.tsv", "\n".join(
        ["\t".join(cols)] + ["\t".join(str(p.get(c, "")) for c in cols) for p in pairs]) + "\n")

    md = ["# Timer noise (A/A)", "",
          f"FlagGems {meta.get('flaggems_commit') or '(not a git checkout)'} on {meta.get('device', '?')}; "
          f"dtypes {meta['dtypes']}; level core; {meta['wall_s']:.0f} s total.", "",
          "| op | timer | rows run1/run2 | matched | median abs A/A % | p90 % | max % "
          "| fallback markers | rc |",
          "|---|---|---|---|---|---|---|---|---|"]
    for p in pairs:
        md.append(f"| {p['op']} | {p['timer']} | {p.get('rows_a', 0)}/{p.get('rows_b', 0)} | "
                  f"{p.get('matched', 0)} | {fmt(p.get('median_pct'))} | "
                  f"{fmt(p.get('p90_pct'))} | {fmt(p.get('max_pct'))} | "
                  f"{p.get('direct_markers', 0)} | {p.get('rc', '')} |")
    if profile:
        md += ["", "## softmax float16: timer / CUPTI kernel time", "",
               "Graph timers against warm back-to-back kernel time; direct timers against "
               "cold (L2 flushed) kernel time.", "",
               "| shape | kernel warm us | kernel cold us | " + " | ".join(TIMERS) + " |",
               "|---|---|---|" + "---|" * len(TIMERS)]
        for p in profile:
            md.append(f"| {p['shape']} | {p['profiler_warm_ms'] * 1e3:.1f} | "
                      f"{p['profiler_cold_ms'] * 1e3:.1f} | " + " | ".join(
                          fmt(p["ratio_to_profiler"].get(t), ".3f") for t in TIMERS) + " |")
        med = profile_medians(profile)
        for key, label in (("all", "median, all shapes"), ("ge_10us", "median, kernel >= 10 us")):
            md.append(f"| {label} | | | " + " | ".join(fmt(med[t][key], ".3f") for t in TIMERS)
                      + " |")
    write("timer_noise.md", "\n".join(md) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--flaggems-dir", default=os.environ.get("FLAGGEMS_DIR", ""))
    ap.add_argument("--ops", default="softmax,gelu_backward,sum",
                    help="comma list; op or op:file_stem (default file from a built-in table)")
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    ap.add_argument("--dtypes", default="float16", help="space separated, passed as --dtypes")
    ap.add_argument("--timers", default=",".join(TIMERS))
    ap.add_argument("--work-dir", default="", help="run directories (default: a temp dir)")
    ap.add_argument("--budget-s", type=float, default=470.0,
                    help="start no new pair after this many seconds (the profile runs first)")
    ap.add_argument("--skip-profile", action="store_true")
    ap.add_argument("--render", default="", metavar="JSON",
                    help="only rewrite the .md/.tsv (and .json) in --out from a timer_noise.json "
                         "written earlier; runs nothing")
    ap.add_argument("--profile-child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--profile-out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.profile_child:
        return profile_main(args)

    if not args.out:
        ap.error("--out (or $OUT) is required")
    if args.render:
        try:
            data = json.loads(Path(args.render).read_text())
            parts = (data["meta"], data["runs"], data["pairs"], data["profile"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            ap.error(f"--render {args.render!r}: not a timer_noise.json ({exc})")
        write_outputs(Path(args.out), *parts)
        return 0
    if not args.flaggems_dir or not Path(args.flaggems_dir).is_dir():
        ap.error(f"--flaggems-dir {args.flaggems_dir!r} is not a directory")
    args.flaggems_dir = Path(args.flaggems_dir).resolve()
    timers = [t.strip() for t in args.timers.split(",") if t.strip()]
    bad = [t for t in timers if t not in TIMERS]
    if bad:
        ap.error(f"unknown timers {bad}; known: {', '.join(TIMERS)}")
    ops: List[Tuple[str, str]] = []
    for item in args.ops.split(","):
        op, _, stem = item.strip().partition(":")
        if not op:
            continue
        stem = stem or OP_FILES.get(op, op)
        try:
            check_node(args.flaggems_dir, op, stem)
        except NodeError as exc:
            ap.error(str(exc))
        ops.append((op, stem))
    out = Path(args.out)
    work = Path(args.work_dir) if args.work_dir else Path(
        os.environ.get("TMPDIR", "/tmp")) / f"timer_noise_{os.getpid()}"
    t0 = time.monotonic()
    meta = {"ops": ops, "timers": timers, "dtypes": args.dtypes,
            "flaggems_dir": str(args.flaggems_dir), "work_dir": str(work)}
    try:
        meta["flaggems_commit"] = checkout_commit(str(args.flaggems_dir), short=True)
        meta["device"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader", "-i", "0"],
            capture_output=True, text=True).stdout.strip()
    except OSError:
        pass

    profile = None
    if not args.skip_profile:
        say("profiler cross-check (softmax, child process)")
        prof_out = work / "profile.json"
        work.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-u", __file__, "--profile-child", "1",
                               "--profile-out", str(prof_out)], cwd=ROOT, timeout=300,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"))
        if proc.returncode == 0 and prof_out.is_file():
            profile = json.loads(prof_out.read_text())
        else:
            say(f"profiler child exited {proc.returncode}; no profile section")
            meta["profile_rc"] = proc.returncode

    runs, pairs = [], []
    for op, stem in ops:
        for timer in timers:
            elapsed = time.monotonic() - t0
            if elapsed > args.budget_s:
                say(f"budget spent ({elapsed:.0f} s): skipping {op}/{timer}")
                pairs.append({"op": op, "timer": timer, "rc": "skipped_budget"})
                continue
            pair_runs = []
            for k in (1, 2):
                replay = (work / op / timer / "run1" / "zl"
                          if timer.startswith("zl_") and k == 2 else None)
                say(f"{op} {timer} run {k}")
                r = run_one(timer, op, stem, args, work / op / timer / f"run{k}", replay)
                r["run"] = k
                say(f"  rc={r['rc']} rows={len(r['rows'])} markers={r['direct_markers']} "
                    f"{r['wall_s']} s")
                pair_runs.append(r)
                runs.append(r)
            a, b = pair_runs
            stats = pair_stats(a["rows"], b["rows"])
            stats.update(op=op, timer=timer, rc=f"{a['rc']}/{b['rc']}",
                         direct_markers=f"{a['direct_markers']}/{b['direct_markers']}",
                         poisoned_markers=a["poisoned_markers"] + b["poisoned_markers"])
            pairs.append(stats)
            meta["wall_s"] = time.monotonic() - t0
            write_outputs(out, meta, runs, pairs, profile)  # partial results survive a kill
    meta["wall_s"] = time.monotonic() - t0
    write_outputs(out, meta, runs, pairs, profile)
    say(f"done in {meta['wall_s']:.0f} s; see {out / 'timer_noise.md'}")
    print((out / "timer_noise.md").read_text(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
