#!/usr/bin/env python
"""Which stream should a captured autograd backward run on? (issue 7, gelu_backward noise)

torch's gelu forward runs on a side stream `fwd` (as _cudagraph_plugin.side_stream does for
FlagGems' backward benchmarks); then `torch.autograd.grad(out, x, dout, retain_graph=True)`
is captured 800 times into one graph and the graph replayed 10 times (median us per call),
four captures per variant:
    capture_on_forward_stream  capture stream = fwd, where autograd runs the backward
    capture_on_new_stream      a fresh capture stream, as triton's do_bench_cudagraph makes
    aten                       torch.ops.aten.gelu_backward(dout, x): the bare kernel
Also profiles 10 eager autograd.grad calls (torch.profiler) to show what one call launches.
First run on the H200 inline in the call after round 9 (same code); raw output in
docs/validation/timing_h200/round9/backward_capture_stream.out.
    python benchmarks/backward_capture_stream.py
"""
import statistics as st

import torch
from torch.profiler import ProfilerActivity, profile


def bench(fn, cap, n):
    with torch.cuda.stream(cap):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=cap):
            for _ in range(n):
                fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(10):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b) / n * 1e3)
    return st.median(ts)


def main():
    for shape, n in [((64, 64), 800), ((4096, 4096), 800)]:
        x = torch.randn(shape, dtype=torch.float16, device="cuda").requires_grad_()
        d = torch.randn(shape, dtype=torch.float16, device="cuda")
        fwd = torch.cuda.Stream()
        fwd.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(fwd):
            out = torch.nn.functional.gelu(x)
        torch.cuda.synchronize()
        f = lambda: torch.autograd.grad((out,), [x], grad_outputs=(d,), retain_graph=True)  # noqa: E731
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(10):
                f()
            torch.cuda.synchronize()
        print(shape, "eager autograd.grad x10:")
        print(p.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=60))
        for name, cap in [("capture_on_forward_stream", fwd), ("capture_on_new_stream", None),
                          ("aten", None)]:
            r = []
            for _ in range(4):
                c = cap or torch.cuda.Stream()
                fn = (lambda: torch.ops.aten.gelu_backward(d, x)) if name == "aten" else f
                r.append(bench(fn, c, n))
            print(f"{name} {shape} us/call per capture: {[round(v, 2) for v in r]} "
                  f"spread {100 * (max(r) / min(r) - 1):.2f}%", flush=True)


if __name__ == "__main__":
    main()
