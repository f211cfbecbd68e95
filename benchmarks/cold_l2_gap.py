#!/usr/bin/env python
"""Cold L2: what the graph timer's cold reading holds beyond CUPTI kernel time.

    cold_l2_gap.py run --work W [--cases op:RxC,...]
        per case (float16, one process): CUPTI kernel time per call with a flush (zero_ of a
        2x-L2 buffer) before each eager launch, per kernel (the reference of the 3 % cold
        target); the graph timer cold (ZL_L2=cold, median); and one graph of n (flush, call)
        pairs against three flush-only graphs: B (n flushes, the timer's own subtraction), B2
        (each flush split into two half-size writes) and B3 (each flush followed by a
        one-element add), each replayed untraced (CUDA events, median) and once under CUPTI;
        then the graph timer cold on each clock (ZL_COLD_CLOCK events and kernels),
        TIMER_ROUNDS times alternated, with the host seconds each do_bench took. W/cold_gap.json.
    cold_l2_gap.py summary --work W --out OUT
        OUT/cold_gap.md from W/cold_gap.json (no GPU).
Why: cold sum read 8-12 % above eager CUPTI on the H200, the excess in the graph replay. A
graph's calls are serial, so A - B holds the call's kernels plus one kernel boundary more than
B; B2 and B3 add a boundary to B, and their own extra kernel time is read from CUPTI, so the
boundary's cost is measured rather than assumed.
Inputs: one CUDA GPU, flag_gems importable. Outputs: W/cold_gap.json, OUT/cold_gap.md.
Exit status: 0 done (a failed case is a result), 1 nothing measured (no CUDA device, or every
case failed), 2 bad arguments or no cold_gap.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from zl import atomic  # noqa: E402
from zl.runlog.stats import call_span_us  # noqa: E402
from _graphs import capture_calls, graph_timer_ms, replay_ms  # noqa: E402
from timer_noise import device_events  # noqa: E402

DEFAULT_CASES = ("relu:4096x4096,sum:4096x4096,softmax:4096x4096,sum:8192x8192,relu:8192x8192,"
                 "relu:2048x4096,softmax:2048x4096")
OPS = ("relu", "sum", "softmax")
CALLS = 50      # calls per graph, as graph_timer_cost.py's in-graph CUPTI replay
REPLAYS = 7     # untraced replays per graph, interleaved
TIMER_ROUNDS = 3  # graph timer readings per clock, the clocks alternated
CLOCKS = ("events", "kernels")


def parse_cases(text: str):
    """'op:RxC,...' -> [(op, (R, C))]; ValueError naming the bad item."""
    cases = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        op, _, dims = item.partition(":")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            shape = ()
        if op not in OPS or len(shape) != 2 or min(shape) < 1:
            raise ValueError(f"case {item!r}: expected op:RxC with op one of {', '.join(OPS)}")
        cases.append((op, shape))
    if not cases:
        raise ValueError("no cases")
    return cases


def derive(m: dict) -> dict:
    """Per-call microseconds from one case's measurements (all in us per call)."""
    ev, busy = m["events"], m["busy"]
    split_extra = busy["B2"] - busy["B"]           # the second half-flush's own extra kernel time
    d = {"eager_sum": sum(m["eager_kernels"].values()),
         "net": ev["A"] - ev["B"], "net_split": ev["A"] - ev["B2"], "net_tiny": ev["A"] - ev["B3"],
         "split_extra": split_extra, "tiny_busy": busy["B3_tiny"],
         "boundary_split": ev["B2"] - ev["B"] - split_extra,
         "boundary_tiny": ev["B3"] - ev["B"] - busy["B3_tiny"]}
    for key in ("timer", "net", "net_split", "net_tiny"):
        value = m["timer"] if key == "timer" else d[key]
        d[f"{key}/eager"] = value / d["eager_sum"] if d["eager_sum"] else None
        d[f"{key}/span"] = value / m["span"] if m["span"] else None
    return d


def _kernels(prof):
    return [e for e in device_events(prof) if e.time_range.end > e.time_range.start]


def measure(op: str, shape, cache) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    import flag_gems

    x = torch.randn(shape, dtype=torch.float16, device="cuda")
    f = {"relu": torch.relu, "sum": torch.sum,
         "softmax": lambda t: torch.nn.functional.softmax(t, dim=-1)}[op]
    half = cache.numel() // 2
    lo, hi = cache[:half], cache[half:]
    # a one-element add: under use_gems() zero_ on any dtype is FlagGems' one fill kernel, so a
    # one-element fill shared the flush's name (a first H200 run read it as the flush)
    tiny = torch.zeros(1, dtype=torch.float32, device="cuda")
    with flag_gems.use_gems():
        def fn():
            return f(x)

        for _ in range(5):
            fn(), cache.zero_(), tiny.add_(1.0)
        torch.cuda.synchronize()

        def names_of(body):
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                body()
                torch.cuda.synchronize()
            return {e.name for e in _kernels(p)}

        op_names, tiny_names = names_of(fn), names_of(lambda: tiny.add_(1.0))
        if tiny_names & names_of(cache.zero_):
            raise RuntimeError(f"the one-element kernel {sorted(tiny_names)} shares a name with the flush")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(CALLS):
                cache.zero_()
                fn()
            torch.cuda.synchronize()
        eager = {}
        for e in _kernels(prof):
            if e.name in op_names:
                eager[e.name] = eager.get(e.name, 0.0) + (e.time_range.end - e.time_range.start) / CALLS

        def graph_of(body):
            body()
            torch.cuda.synchronize()
            g = capture_calls(body, CALLS)
            g.replay()
            torch.cuda.synchronize()
            return g

        graphs = {"A": graph_of(lambda: (cache.zero_(), fn())), "B": graph_of(cache.zero_),
                  "B2": graph_of(lambda: (lo.zero_(), hi.zero_())),
                  "B3": graph_of(lambda: (cache.zero_(), tiny.add_(1.0)))}
        events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = {k: [] for k in graphs}
        for _ in range(REPLAYS):
            for k, g in graphs.items():
                times[k].append(replay_ms(g, *events) * 1e3 / CALLS)
        busy, span = {}, None
        for k, g in graphs.items():
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                g.replay()
                torch.cuda.synchronize()
            ks = _kernels(p)
            if k == "A":
                mine = [(e.time_range.start, e.time_range.end) for e in ks if e.name in op_names]
                busy["A_op"] = sum(b - a for a, b in mine) / CALLS
                span = call_span_us(mine, CALLS)
                ks = [e for e in ks if e.name not in op_names]
            if k == "B3":
                busy["B3_tiny"] = sum(e.time_range.end - e.time_range.start
                                      for e in ks if e.name in tiny_names) / CALLS
                ks = [e for e in ks if e.name not in tiny_names]
            busy[k] = sum(e.time_range.end - e.time_range.start for e in ks) / CALLS
        clocks = {c: {"us": [], "host_s": []} for c in CLOCKS}
        for _ in range(TIMER_ROUNDS):
            for c in CLOCKS:
                t0 = time.perf_counter()
                clocks[c]["us"].append(graph_timer_ms(fn, "cold", "cold_l2_gap", clock=c) * 1e3)
                clocks[c]["host_s"].append(time.perf_counter() - t0)
    return {"op": op, "shape": list(shape), "eager_kernels": eager, "span": span,
            "events": {k: median(v) for k, v in times.items()}, "busy": busy,
            "timer": median(clocks["events"]["us"]), "clocks": clocks}


def run_main(args) -> int:
    import torch
    from zl.timing import l2

    if not torch.cuda.is_available():
        print("cold_l2_gap.py: run needs a CUDA device (torch.cuda.is_available() is False)",
              file=sys.stderr)
        return 1
    cache = torch.empty(l2.flush_bytes(torch.cuda) // 4, dtype=torch.int32, device="cuda")
    out = {"device": torch.cuda.get_device_name(0), "flush_bytes": cache.numel() * 4,
           "calls": CALLS, "replays": REPLAYS, "cases": []}
    path = Path(args.work) / "cold_gap.json"
    for op, shape in args.cases:
        try:
            case = measure(op, shape, cache)
        except Exception as exc:  # one case's failure is a result; the others still run
            case = {"op": op, "shape": list(shape), "error": repr(exc)[:300]}
        out["cases"].append(case)
        print(json.dumps(case), flush=True)
        atomic.write_text(path, json.dumps(out, indent=1))
    if all("error" in c for c in out["cases"]):
        print(f"cold_l2_gap.py: every case failed (first: {out['cases'][0]['error']})", file=sys.stderr)
        return 1
    return 0


def _f(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def summary_main(args) -> int:
    path = Path(args.work) / "cold_gap.json"
    if not path.is_file():
        print(f"cold_l2_gap.py: no {path}", file=sys.stderr)
        return 2
    data = json.loads(path.read_text())
    md = ["# Cold L2: the graph timer's reading against CUPTI, and the kernel boundary", "",
          f"{data['device']}, flush {data['flush_bytes'] / 2**20:.0f} MiB, float16, "
          f"{data['calls']} calls per graph, median of {data['replays']} untraced replays; "
          "microseconds per call.", "",
          "| op | shape | eager CUPTI per kernel | eager CUPTI sum | in-graph span | graph timer cold | "
          "A-B | A-B2 | A-B3 | B2 extra kernel | B3 add kernel | boundary (B2) | boundary (B3) | "
          "timer / eager | A-B / eager | A-B2 / eager | A-B3 / eager | timer / span |",
          "|" + "---|" * 18]
    for c in data["cases"]:
        head = f"| {c['op']} | {'x'.join(map(str, c['shape']))} |"
        if "error" in c:
            md.append(head + f" error: {c['error']} |" + " |" * 16)
            continue
        d = derive(c)
        per = ", ".join(f"{v:.2f}" for v in c["eager_kernels"].values())
        md.append(head + f" {per} | {_f(d['eager_sum'])} | {_f(c['span'])} | {_f(c['timer'])} | "
                  f"{_f(d['net'])} | {_f(d['net_split'])} | {_f(d['net_tiny'])} | "
                  f"{_f(d['split_extra'])} | {_f(d['tiny_busy'])} | {_f(d['boundary_split'])} | "
                  f"{_f(d['boundary_tiny'])} | {_f(d['timer/eager'], '.3f')} | "
                  f"{_f(d['net/eager'], '.3f')} | {_f(d['net_split/eager'], '.3f')} | "
                  f"{_f(d['net_tiny/eager'], '.3f')} | {_f(d['timer/span'], '.3f')} |")
    md += ["", "A: n (flush, call) pairs; B: n flushes (the graph timer's subtraction); B2: each "
           "flush as two half-size writes; B3: each flush then a one-element add. The extra kernel "
           "columns are CUPTI busy time; a boundary is the events difference less that time."]
    md += clock_table(data["cases"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out / "cold_gap.md", "\n".join(md) + "\n")
    print("\n".join(md))
    return 0


def clock_table(cases) -> list:
    """Markdown lines: the graph timer cold on each clock against eager CUPTI (cases measured
    before ZL_COLD_CLOCK existed have no `clocks` and are left out)."""
    rows = [c for c in cases if "clocks" in c]
    if not rows:
        return []
    md = ["", "The graph timer cold on each clock (ZL_COLD_CLOCK), readings in us (each the median "
          "of its samples), against eager CUPTI; host seconds per do_bench call:", "",
          "| op | shape | eager CUPTI sum | events readings | kernels readings | events / eager | "
          "kernels / eager | host s, events | host s, kernels |", "|" + "---|" * 9]
    for c in rows:
        eager = sum(c["eager_kernels"].values())
        ev, ke = c["clocks"]["events"], c["clocks"]["kernels"]

        def ratios(values):
            return ", ".join(f"{v / eager:.3f}" for v in values) if eager else "-"

        md.append(f"| {c['op']} | {'x'.join(map(str, c['shape']))} | {eager:.2f} | "
                  f"{', '.join(f'{v:.2f}' for v in ev['us'])} | "
                  f"{', '.join(f'{v:.2f}' for v in ke['us'])} | {ratios(ev['us'])} | "
                  f"{ratios(ke['us'])} | {median(ev['host_s']):.2f} | {median(ke['host_s']):.2f} |")
    return md


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="cold_l2_gap.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=("run", "summary"))
    ap.add_argument("--work", required=True, help="folder for cold_gap.json")
    ap.add_argument("--out", default="", help="summary: folder for cold_gap.md")
    ap.add_argument("--cases", default=DEFAULT_CASES, help=f"op:RxC,... (default {DEFAULT_CASES})")
    args = ap.parse_args(argv)
    try:
        args.cases = parse_cases(args.cases)
    except ValueError as exc:
        ap.error(f"--cases: {exc}")
    Path(args.work).mkdir(parents=True, exist_ok=True)
    if args.stage == "run":
        return run_main(args)
    if not args.out:
        ap.error("summary needs --out")
    return summary_main(args)


if __name__ == "__main__":
    sys.exit(main())
