#!/usr/bin/env python
"""Record what the cold graph's kernel clock (ZL_COLD_CLOCK=kernels) reads on a real GPU.

    kernel_clock_traces.py --out FILE.json

Runs `zl.timing.capture.graph_bench_cold(clock="kernels")` on three torch-native calls of a
4096x4096 float16 tensor (relu: one kernel; x.float().sum(): a cast and a reduction; softmax:
one kernel), with a tracer that keeps what `kernel_clock.trace` returned: the eager flush's
kernels and the traced replay's. The file feeds tests/test_timing_kernel_clock.py, so the
CPU suite splits traces CUPTI really produced (no FlagGems code: torch's own kernels).
Inputs: one CUDA GPU. Outputs: FILE.json (each trace with its host seconds).
Exit status: 0 written, 1 no CUDA device, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from zl import atomic  # noqa: E402

# do_bench's `rep` in ms: a few calls per graph keep the payload small (the timer itself
# traces up to kernel_clock.MAX_TRACED_CALLS).
REP_MS = 0.25
TRACE_S = []  # host seconds of every kernel_clock.trace call, in order (the first starts CUPTI)


def record(fn, flush):
    import torch
    from zl.timing import capture, kernel_clock

    traces = []

    def tracer(di, body):
        t0 = time.perf_counter()
        kernels = kernel_clock.trace(di, body)
        traces.append(kernels)
        TRACE_S.append(round(time.perf_counter() - t0, 4))
        return kernels

    fn()
    torch.cuda.synchronize()
    samples = capture.graph_bench_cold(torch.cuda, torch.cuda.CUDAGraph, {}, fn, REP_MS, None,
                                       None, "all", flush, clock="kernels", tracer=tracer)
    flush_kernels, replay = traces
    # torch-native calls never launch the flush's fill kernel, so its count is the call count
    calls = sum(1 for k in replay if k[0] == flush_kernels[0][0])
    return {"flush": flush_kernels, "kernels": replay, "calls": calls, "samples_ms": samples}


def nested(fn) -> str:
    """What the graph timer's kernel clock does while another torch.profiler traces the
    process (a user profiling a cold run): its reading, or the marker line it printed."""
    import contextlib
    import io

    import triton.testing as tt
    from torch.profiler import ProfilerActivity, profile
    from zl.backends import get_backend
    from zl.timing.graph import GraphTimer

    timer = GraphTimer(get_backend("cuda"), l2="cold", cold_clock="kernels")
    timer.install()
    out = io.StringIO()
    try:
        timer.op = "relu"
        with profile(activities=[ProfilerActivity.CUDA]), contextlib.redirect_stdout(out):
            ms = tt.do_bench(fn, warmup=25, rep=5, return_mode="median")
    except Exception as exc:
        return f"raised {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    finally:
        timer.uninstall()
    printed = " ".join(out.getvalue().split())[:300]
    return f"read {ms * 1e3:.2f} us; printed: {printed or '(nothing)'}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernel_clock_traces.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the traces (JSON)")
    args = ap.parse_args(argv)
    import torch
    from zl.timing import l2

    if not torch.cuda.is_available():
        print("kernel_clock_traces.py: needs a CUDA device", file=sys.stderr)
        return 1
    buf = l2.FlushBuffer()
    buf.ensure(torch.cuda)
    x = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
    calls = {"relu": lambda: torch.relu(x), "float_sum": lambda: x.float().sum(),
             "softmax": lambda: torch.softmax(x, dim=-1)}
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "shape": [4096, 4096], "dtype": "float16", "flush_bytes": buf.nbytes, "cases": {}}
    for name, fn in calls.items():
        out["cases"][name] = record(fn, buf.flush)
        case = out["cases"][name]
        print(f"{name}: {case['calls']} calls, {len(case['kernels'])} kernels traced, "
              f"samples {[round(v * 1e3, 3) for v in case['samples_ms']]} us", flush=True)
    out["trace_s"] = TRACE_S
    out["inside_another_profiler"] = nested(calls["relu"])
    print(f"trace seconds: {TRACE_S}; inside another profiler: {out['inside_another_profiler']}")
    atomic.write_text(Path(args.out), json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
