#!/usr/bin/env python
"""Where the kernel clock's first trace spends its seconds, and whether another thread can pay them.

    cupti_start_cost.py --out FILE.json

In a fresh process (CUDA initialised, one kernel run): the main thread counts pure-Python loop
iterations for BASE_S seconds alone (its rate with the GIL to itself); then a background
thread opens and closes an empty torch.profiler CUDA session while the main thread keeps
counting until the thread ends; then the main thread times one more empty session and one
trace of a kernel. If the background start releases the GIL, the main thread's rate while it
runs stays near the base rate, and a start-up prewarm could hide the first trace's cost
(5.2-6.4 s on the H200) behind FlagGems' import.
Inputs: one CUDA GPU. Outputs: FILE.json (loop rates and seconds of each phase).
Exit status: 0 written, 1 no CUDA device, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from zl import atomic  # noqa: E402

BASE_S = 2.0


def count_for(seconds: float, until=None) -> tuple:
    """(iterations, seconds): a pure-Python loop for `seconds`, or until `until()` is true."""
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(1000):
            n += 1
        t = time.perf_counter() - t0
        if (until is not None and until()) or (until is None and t >= seconds):
            return n, t


def empty_session():
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]):
        pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="cupti_start_cost.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the measurement (JSON)")
    args = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("cupti_start_cost.py: needs a CUDA device", file=sys.stderr)
        return 1
    x = torch.ones(1 << 20, device="cuda")
    x.add_(1)
    torch.cuda.synchronize()
    base_n, base_t = count_for(BASE_S)
    done = {}

    def background():
        t0 = time.perf_counter()
        empty_session()
        done["s"] = time.perf_counter() - t0

    th = threading.Thread(target=background)
    th.start()
    n, t = count_for(0, until=lambda: "s" in done)
    th.join()
    t0 = time.perf_counter()
    empty_session()
    second = time.perf_counter() - t0
    from zl.timing import kernel_clock
    t0 = time.perf_counter()
    kernels = kernel_clock.trace(torch.cuda, lambda: x.add_(1))
    trace_s = time.perf_counter() - t0
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "base_rate_per_s": base_n / base_t, "rate_during_background_start_per_s": n / t,
           "background_start_s": done["s"], "main_thread_share": (n / t) / (base_n / base_t),
           "second_empty_session_s": second, "trace_after_s": trace_s, "kernels_traced": len(kernels)}
    print(json.dumps(out, indent=1))
    atomic.write_text(Path(args.out), json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
