#!/usr/bin/env python
"""What moves a graph-timed kernel while other processes share the machine but not the timing?

Under `run_batch.py --overlap N` a case times alone (the device lock), yet at overlap 12 the
A/A of short kernels grew tenfold. Outside every locked stretch the other cases still burn the
host's cores and create, fill and destroy CUDA contexts (importing flag_gems creates one; a
case's exit frees its memory). This tool times a few kernels with Triton's
`do_bench_cudagraph` (the graph timer's call on CUDA) in this process, alone on the GPU, while
helper processes load the machine one way at a time:

    quiet    nothing else runs
    cpu      --cpu-helpers processes spin pure-Python loops (no CUDA; default twice the
             cores, so the timing thread must share a core: if even that moves nothing, the
             host's load is ruled out)
    context  --helpers processes create and destroy a CUDA context in a loop (no memory)
    memory   --helpers processes create a context, allocate and fill --alloc-gib GiB, free
             it and destroy the context, in a loop (the driver scrubs what they free)

Conditions alternate (quiet, cpu, context, memory; --rounds times) so slow drift spreads over
all of them. For each kernel and condition: the median reading, its ratio to quiet's median,
the pair spread (median |a - b| / mean of consecutive readings: an A/A of two readings), and
the median SM clock nvidia-smi read beside the readings.

    python benchmarks/timer_interference.py --out /tmp/interference
    python benchmarks/timer_interference.py --report-only --out /tmp/interference

Inputs: one CUDA GPU, nothing else running on it. Outputs in --out: timer_interference.json
(every reading), timer_interference.md (the table, also printed). Helpers are killed with
their process group when a condition ends, on SIGTERM and on Ctrl-C.
Exit status: 0 written, 1 no CUDA device, 2 bad arguments (or --report-only without a
measurement in --out), 130 interrupted.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from zl import atomic  # noqa: E402

CONDITIONS = ("quiet", "cpu", "context", "memory")
HELPER_MODES = CONDITIONS[1:]
JSON_NAME, MD_NAME = "timer_interference.json", "timer_interference.md"
# (name, elements) of an out-of-place fp16 add into a preallocated output: a graph of many
# calls allocates nothing. About 2 us, 15 us and 0.5 ms on an H100.
KERNELS = (("add_64k", 1 << 16), ("add_8m", 1 << 23), ("add_256m", 1 << 28))
SETTLE_S = 3.0   # helpers start (a context takes about a second) before the first reading


class UsageError(Exception):
    """A bad argument; exit 2 with the message."""


class NoDevice(Exception):
    """No CUDA device to time on; exit 1."""


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def pair_spread(values: List[float]) -> Optional[float]:
    """Median of |a - b| / mean(a, b) over consecutive readings; None under two readings."""
    pairs = [abs(a - b) / ((a + b) / 2) for a, b in zip(values, values[1:]) if a + b > 0]
    return statistics.median(pairs) if pairs else None


def summarize(readings: List[Dict]) -> List[Dict]:
    """One row per kernel and condition: n, median ms, ratio to quiet, pair spread, SM clock."""
    rows = []
    for kernel in dict.fromkeys(r["kernel"] for r in readings):
        quiet = [r["ms"] for r in readings if r["kernel"] == kernel and r["condition"] == "quiet"]
        base = statistics.median(quiet) if quiet else None
        for cond in CONDITIONS:
            mine = [r for r in readings if r["kernel"] == kernel and r["condition"] == cond]
            if not mine:
                continue
            ms = [r["ms"] for r in mine]
            clocks = [r["sm_mhz"] for r in mine if r.get("sm_mhz") is not None]
            med = statistics.median(ms)
            rows.append({"kernel": kernel, "condition": cond, "n": len(ms), "median_ms": med,
                         "vs_quiet": med / base if base else None, "pair_spread": pair_spread(ms),
                         "max_over_median": max(ms) / med if med else None,
                         "sm_mhz": statistics.median(clocks) if clocks else None})
    return rows


def _fmt(v, spec: str, suffix: str = "") -> str:
    return "n/a" if v is None else f"{format(v, spec)}{suffix}"


def render(meta: Dict, rows: List[Dict]) -> str:
    lines = [f"# Graph timer under interference ({meta.get('device', '?')}, {meta.get('helpers')} "
             f"helper(s), {meta.get('cpu_helpers')} in cpu, {meta.get('rounds')} round(s) x {meta.get('readings')} reading(s), rep "
             f"{meta.get('rep_ms')} ms)", "",
             "| kernel | condition | readings | median us | vs quiet | pair spread | max / median | SM MHz |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['kernel']} | {r['condition']} | {r['n']} | {_fmt(r['median_ms'] * 1e3, '.3f')} | "
                     f"{_fmt(r['vs_quiet'], '.4f')} | {_fmt(None if r['pair_spread'] is None else r['pair_spread'] * 100, '.2f', ' %')} | "
                     f"{_fmt(r['max_over_median'], '.4f')} | {_fmt(r['sm_mhz'], '.0f')} |")
    return "\n".join(lines) + "\n"


# ---- helper processes (run as `timer_interference.py --helper MODE`) ----

def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what} returned CUDA error {rc}")


def helper(mode: str, alloc_gib: float) -> int:
    """Load the machine one way until killed (see the module doc)."""
    if mode == "cpu":
        n = 0
        while True:
            n += 1
    cuda = ctypes.CDLL("libcuda.so.1")
    _check(cuda.cuInit(0), "cuInit")
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    _check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    size = int(alloc_gib * (1 << 30))
    while True:
        _check(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
        if mode == "memory":
            _check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)), "cuMemAlloc")
            _check(cuda.cuMemsetD8_v2(ptr, ctypes.c_ubyte(1), ctypes.c_size_t(size)), "cuMemsetD8")
            _check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
            _check(cuda.cuMemFree_v2(ptr), "cuMemFree")
        _check(cuda.cuCtxDestroy_v2(ctx), "cuCtxDestroy")


class Helpers:
    """`count` helper processes of one mode in their own process group, stopped on exit; a
    driver killed outright takes them with it (zl.batch.executor.child_setup)."""

    def __init__(self, mode: str, count: int, alloc_gib: float) -> None:
        from zl.batch.executor import child_setup
        self.procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--helper", mode,
                                        "--alloc-gib", str(alloc_gib)], start_new_session=True,
                                       preexec_fn=child_setup(os.getpid()),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                      for _ in range(count)]

    def failures(self) -> List[str]:
        """Why helpers that ended on their own ended (a helper only ends when killed)."""
        out = []
        for p in self.procs:
            if p.poll() is not None:
                out.append(f"helper pid {p.pid} exited {p.returncode}: "
                           + (p.stderr.read().decode(errors="replace").strip().splitlines() or ["?"])[-1])
        return out

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            p.wait()
            p.stderr.close()


def sm_clock() -> Optional[float]:
    """The SM clock in MHz of the card this process times on, read by telemetry.py's sampler
    (the card the visibility variable names, else the first); None where it cannot be read."""
    import telemetry
    from zl.backends import get_backend
    backend = get_backend("cuda")
    try:
        rows = telemetry.sample(backend, backend.telemetry_command(telemetry.resolve_device(backend, None)))
        return float(rows[0]["sm_clock_mhz"])
    except (telemetry.SamplerUnavailable, ValueError, IndexError, KeyError):
        return None


def measure(args) -> Dict:
    import torch
    import triton.testing as tt
    if not torch.cuda.is_available():
        raise NoDevice("needs a CUDA device")
    benches = []
    for name, n in KERNELS:
        x, y, z = (torch.randn(n, device="cuda", dtype=torch.float16) for _ in range(3))
        benches.append((name, lambda x=x, y=y, z=z: torch.add(x, y, out=z)))
    torch.cuda.synchronize()
    readings: List[Dict] = []
    for rnd in range(args.rounds):
        for cond in CONDITIONS:
            count = args.cpu_helpers if cond == "cpu" else args.helpers
            helpers = None if cond == "quiet" else Helpers(cond, count, args.alloc_gib)
            try:
                time.sleep(SETTLE_S if helpers else 0.0)
                for name, fn in benches:
                    for _ in range(args.readings):
                        ms = tt.do_bench_cudagraph(fn, rep=args.rep_ms)
                        readings.append({"round": rnd, "condition": cond, "kernel": name, "ms": ms,
                                         "sm_mhz": sm_clock(), "at": time.time()})
                bad = helpers.failures() if helpers else []
                if bad:
                    raise RuntimeError(f"condition {cond}: " + "; ".join(bad))
            finally:
                if helpers:
                    helpers.stop()
            print(f"round {rnd + 1}/{args.rounds} {cond}: done", file=sys.stderr, flush=True)
    return {"meta": {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                     "triton": __import__("triton").__version__, "helpers": args.helpers,
                     "cpu_helpers": args.cpu_helpers,
                     "rounds": args.rounds, "readings": args.readings, "rep_ms": args.rep_ms,
                     "alloc_gib": args.alloc_gib, "cores": os.cpu_count()},
            "readings": readings}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="timer_interference.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="folder for timer_interference.json and .md (required)")
    ap.add_argument("--helpers", type=int, default=12, help="helper processes per loaded condition (12)")
    ap.add_argument("--cpu-helpers", type=int, default=2 * (os.cpu_count() or 1),
                    help="spinning processes in the cpu condition (twice the cores)")
    ap.add_argument("--rounds", type=int, default=2, help="times the four conditions alternate (2)")
    ap.add_argument("--readings", type=int, default=5, help="do_bench_cudagraph calls per kernel and condition (5)")
    ap.add_argument("--rep-ms", type=float, default=100.0, help="do_bench_cudagraph's rep (100, FlagGems' own)")
    ap.add_argument("--alloc-gib", type=float, default=4.0, help="GiB each memory helper fills per loop (4)")
    ap.add_argument("--report-only", action="store_true", help="re-render the table from --out's JSON")
    ap.add_argument("--helper", choices=HELPER_MODES, help=argparse.SUPPRESS)
    return ap


def check(args) -> None:
    if not args.out:
        raise UsageError("--out is required: the folder for the measurement")
    for name in ("helpers", "cpu_helpers", "rounds", "readings"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(args, name)})")
    if args.rep_ms <= 0 or args.alloc_gib <= 0:
        raise UsageError("--rep-ms and --alloc-gib must be positive")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.helper:
        return helper(args.helper, args.alloc_gib)
    try:
        check(args)
    except UsageError as exc:
        print(f"timer_interference.py: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if args.report_only:
        try:
            data = json.loads((out / JSON_NAME).read_text())
        except (OSError, ValueError) as exc:
            print(f"timer_interference.py: --report-only: no readable {out / JSON_NAME} ({exc})", file=sys.stderr)
            return 2
    else:
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            data = measure(args)
        except NoDevice as exc:
            print(f"timer_interference.py: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("timer_interference.py: interrupted", file=sys.stderr)
            return 130
        atomic.write_text(out / JSON_NAME, json.dumps(data, indent=1))
    text = render(data["meta"], summarize(data["readings"]))
    atomic.write_text(out / MD_NAME, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
