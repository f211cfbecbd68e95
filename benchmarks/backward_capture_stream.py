#!/usr/bin/env python
"""Which stream should a captured autograd backward run on? (gelu_backward's graph-timed noise)

torch's gelu forward runs on a side stream `fwd` (as zl.timing.backward.side_stream does for
FlagGems' backward benchmarks); then `torch.autograd.grad(out, x, dout, retain_graph=True)`
is captured 800 times into one graph and the graph replayed 10 times (median us per call),
four captures per variant:
    capture_on_forward_stream  capture stream = fwd, where autograd runs the backward
    capture_on_new_stream      a fresh capture stream, as triton's do_bench_cudagraph makes
    aten                       torch.ops.aten.gelu_backward(dout, x): the bare kernel
Also profiles 10 eager autograd.grad calls (torch.profiler) to show what one call launches.
Each capture goes through backward_graph_probe.py's loop (`bench_graph` with a fixed
unroll). Inputs: one CUDA GPU (torch's own kernels, no FlagGems). Outputs: the table and the
profile on stdout. The H200 run (docs/validation/timing.md, section 3) used its own copy of
that loop (3 warmup calls where the shared loop makes 1 + 5 estimate calls; the captured and
replayed part is the same); raw output in docs/validation/raw/timing.tar.xz,
backward_capture/backward_capture_stream.out.
    python benchmarks/backward_capture_stream.py
"""
import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from backward_graph_probe import bench_graph, forward_on_side_stream  # noqa: E402

UNROLL, CAPTURES = 800, 4


def main(argv=None) -> int:
    argparse.ArgumentParser(prog="backward_capture_stream.py", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    if not torch.cuda.is_available():
        print("backward_capture_stream.py: needs a CUDA device", file=sys.stderr)
        return 1
    for shape in [(64, 64), (4096, 4096)]:
        x = torch.randn(shape, dtype=torch.float16, device="cuda").requires_grad_()
        d = torch.randn(shape, dtype=torch.float16, device="cuda")
        fwd, f = forward_on_side_stream(torch, x, d)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(10):
                f()
            torch.cuda.synchronize()
        print(shape, "eager autograd.grad x10:")
        print(p.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=60))
        for name, cap in [("capture_on_forward_stream", fwd), ("capture_on_new_stream", None),
                          ("aten", None)]:
            fn = (lambda: torch.ops.aten.gelu_backward(d, x)) if name == "aten" else f
            r = [1e3 * bench_graph(torch, fn, 0.0, UNROLL, cap)["ms_median"]
                 for _ in range(CAPTURES)]
            print(f"{name} {shape} us/call per capture: {[round(v, 2) for v in r]} "
                  f"spread {100 * (max(r) / min(r) - 1):.2f}%", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
