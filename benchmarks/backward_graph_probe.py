#!/usr/bin/env python
"""Why is graph-timed gelu_backward noisy between runs? A probe with torch's own gelu.

FlagGems times a backward benchmark as `torch.autograd.grad(out, x, dout, retain_graph=True)`
and zl_bench's graph timer runs the forward on a side stream so autograd's backward can be
captured (zl.timing.backward.side_stream). Between two runs the graph-timed latency of
gelu_backward moved by 9.4 % (median, H200) while forward operators moved 0.2 %, in
the torch column as much as in the FlagGems one, so the cause sits in how the backward is
captured, not in a kernel. This probe times torch's gelu backward the way triton's
do_bench_cudagraph does (5 eager calls estimate n_repeat = rep / estimate, n_repeat calls
unrolled into one graph, 10 replays), but also reports what do_bench_cudagraph hides:
n_repeat, capture seconds and how much memory the graph's pool took.

Variants, each captured CAPTURES times in this process:
    autograd_side   the production path: forward on a side stream, autograd.grad captured
                    on the capture stream (the backward then runs on the forward's stream)
    autograd_same   every captured call switches to the forward's stream around
                    autograd.grad (joined to the capture stream before and after): still one
                    fork/join per call, so on the H200 it stayed as slow and noisy
                    as autograd_side; the fix is to capture on the forward's stream itself
                    (benchmarks/backward_capture_stream.py)
    aten_direct     torch.ops.aten.gelu_backward(dout, x) with no autograd (control)
Run it twice (two processes) to get the between-run spread the A/A screen sees:
    python benchmarks/backward_graph_probe.py --out probe1.jsonl
    python benchmarks/backward_graph_probe.py --out probe2.jsonl
    python benchmarks/backward_graph_probe.py --compare probe1.jsonl probe2.jsonl
Exit status: 0 done, 2 a --compare file missing, unreadable or not a probe's output.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time

SHAPES = [(64, 64), (1048576,), (4096, 4096), (64, 512, 512)]
VARIANTS = ("autograd_side", "autograd_same", "aten_direct")


def bench_graph(torch, fn, rep_ms: float, n_repeat_fixed: int = 0, cap=None):
    """do_bench_cudagraph's steps, returning what it measured and what it cost.

    `cap`: the capture stream (default a fresh one, as do_bench_cudagraph makes).
    """
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cap = cap if cap is not None else torch.cuda.Stream()
    with torch.cuda.stream(cap):
        fn()
        start.record()
        for _ in range(5):
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate = start.elapsed_time(end) / 5
        n_repeat = n_repeat_fixed or (1000 if estimate == 0 else max(1, int(rep_ms / estimate)))
        reserved0 = torch.cuda.memory_reserved()
        graph = torch.cuda.CUDAGraph()
        t0 = time.perf_counter()
        gc.disable()
        try:
            with torch.cuda.graph(graph, stream=cap):
                for _ in range(n_repeat):
                    fn()
        finally:
            gc.enable()
        capture_s = time.perf_counter() - t0
        torch.cuda.synchronize()
        pool_mb = (torch.cuda.memory_reserved() - reserved0) / 2**20
        times = []
        for _ in range(10):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            graph.replay()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e) / n_repeat)
    del graph
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return {"estimate_ms": estimate, "n_repeat": n_repeat, "capture_s": round(capture_s, 3),
            "pool_mb": round(pool_mb, 1), "ms_median": statistics.median(times),
            "ms_spread_pct": 100.0 * (max(times) / min(times) - 1)}


def forward_on_side_stream(torch, x, dout):
    """gelu's forward on a side stream, as zl.timing.backward.side_stream runs FlagGems'
    backward benchmarks; returns (that stream, the FlagGems-style autograd.grad call)."""
    fwd = torch.cuda.Stream()
    fwd.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(fwd):
        out = torch.nn.functional.gelu(x)
    torch.cuda.current_stream().wait_stream(fwd)
    return fwd, lambda: torch.autograd.grad((out,), [x], grad_outputs=(dout,), retain_graph=True)


def _make_fn(torch, variant, x, dout):
    if variant == "aten_direct":
        return lambda: torch.ops.aten.gelu_backward(dout, x)
    fwd, grad = forward_on_side_stream(torch, x, dout)
    if variant == "autograd_side":
        return grad

    def on_forward_stream():
        caller = torch.cuda.current_stream()
        fwd.wait_stream(caller)
        with torch.cuda.stream(fwd):
            result = grad()
        caller.wait_stream(fwd)
        return result
    return on_forward_stream


def probe(args) -> int:
    import torch
    dev = torch.device("cuda")
    # one line per capture as it finishes: a probe cut by a timeout keeps what it measured
    with open(args.out, "w") as sink:
        for shape in [tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")]:
            x = torch.randn(shape, dtype=torch.float16, device=dev).requires_grad_()
            dout = torch.randn(shape, dtype=torch.float16, device=dev)
            for variant in VARIANTS:
                fn = _make_fn(torch, variant, x, dout)
                for k in range(args.captures):
                    r = bench_graph(torch, fn, args.rep_ms, args.n_repeat)
                    r.update(shape="x".join(map(str, shape)), variant=variant, capture=k)
                    print(json.dumps(r), flush=True)
                    sink.write(json.dumps(r) + "\n")
                    sink.flush()
                del fn
                gc.collect()
                torch.cuda.empty_cache()
    return 0


FIELDS = ("shape", "variant", "ms_median", "n_repeat", "pool_mb", "capture_s")


def read_probe(path: str) -> list:
    """The capture records of one probe's JSONL; ValueError naming the file and line when a
    line is not one (a probe cut by a timeout ends after a whole line: no partial line)."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.startswith("{"):
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not JSON ({exc})") from None
            if not isinstance(rec, dict) or any(k not in rec for k in FIELDS):
                raise ValueError(f"{path}:{n}: not a capture record (needs {', '.join(FIELDS)})")
            out.append(rec)
    if not out:
        raise ValueError(f"{path}: no capture record")
    return out


def compare(paths) -> int:
    """Per shape x variant: within-run capture spread and between-run delta of the medians."""
    try:
        runs = [read_probe(p) for p in paths]
    except (OSError, ValueError) as exc:
        print(f"!!! {exc}", file=sys.stderr)
        return 2
    keys = sorted({(r["shape"], r["variant"]) for r in runs[0]},
                  key=lambda k: (k[1], k[0]))
    print("| variant | shape | n_repeat | pool MB | capture s | us/call run1 | us/call run2 "
          "| within-run spread % | between runs % |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in keys:
        per_run = [[r for r in run if (r["shape"], r["variant"]) == key] for run in runs]
        if any(not rs for rs in per_run):
            continue
        meds = [statistics.median(r["ms_median"] for r in rs) for rs in per_run]
        within = max(100.0 * (max(r["ms_median"] for r in rs) / min(r["ms_median"] for r in rs) - 1)
                     for rs in per_run)
        between = 100.0 * (meds[1] / meds[0] - 1) if len(meds) > 1 else float("nan")
        n_rep = "/".join(str(int(statistics.median(r["n_repeat"] for r in rs))) for rs in per_run)
        pool = max(r["pool_mb"] for rs in per_run for r in rs)
        cap_s = max(r["capture_s"] for rs in per_run for r in rs)
        print(f"| {key[1]} | {key[0]} | {n_rep} | {pool:.0f} | {cap_s:.2f} | "
              f"{1e3 * meds[0]:.2f} | {1e3 * meds[-1]:.2f} | {within:.2f} | {between:+.2f} |")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="backward_graph_probe.jsonl")
    ap.add_argument("--captures", type=int, default=3)
    ap.add_argument("--rep-ms", type=float, default=100.0, help="FlagGems' default repetition")
    ap.add_argument("--n-repeat", type=int, default=0, help="fixed unroll count (0: estimate)")
    ap.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                    help="comma list of AxB shapes (default: FlagGems' first four core shapes)")
    ap.add_argument("--compare", nargs="+", metavar="JSONL")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(args.compare)
    return probe(args)


if __name__ == "__main__":
    sys.exit(main())
