#!/usr/bin/env python
"""What the results plugin's record of one large output costs, per implementation of capture.py.

Runs on the H200 logged 0.23 s (softmax) and 0.54 s (clamp) of results capture per run, two
4096x4096 outputs each, 5-9 % of the benchmark's pytest time, where the reductions themselves
read a few hundred MB. So the cost is not the arithmetic; this measures it where a run pays it:
in a fresh process (first use of every kernel included), the first and the second large
output, each implementation in its own processes, alternated.

    results_capture_cost.py --impl NAME=PATH [--impl NAME=PATH ...] [--repeat 3] [--numel N]
                     [--dtype float16] [--device cuda] --out DIR
        PATH is a capture.py (e.g. `git show REV:zl/results/capture.py > old.py`). Writes
        DIR/describe_cost.json (every sample, and per implementation whether its records of
        the same tensors agree with the first implementation's) and DIR/describe_cost.md.
Exit status: 0 done, 2 bad arguments, 3 a measuring process failed.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from zl import atomic  # noqa: E402
from zl.supervise import set_parent_death_signal  # noqa: E402

# One measuring process: load the implementation, make two outputs, time describe() on each.
_CHILD = r"""
import importlib.util, json, sys, time
import torch
path, numel, dtype, device = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
spec = importlib.util.spec_from_file_location("capture_under_test", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
def sync():
    if device.startswith("cuda"):
        torch.cuda.synchronize()
gen = torch.Generator(device=device).manual_seed(0)
x = torch.randn(numel, generator=gen, device=device).to(getattr(torch, dtype))
outs = [torch.softmax(x.float(), 0).to(x.dtype), torch.relu(x)]   # what a benchmark leaves
sync()
times, recs = [], []
for o in outs:
    t0 = time.perf_counter()
    recs.append(mod.describe(o))
    sync()
    times.append(time.perf_counter() - t0)
print(json.dumps({"seconds": times, "large": numel > mod.HOST_CAP,
                  "records": [{k: r[k] for k in ("digest", "nan", "inf", "min", "max", "mean",
                                                  "abs_mean")} for r in recs]}))
"""


def parse_impls(values):
    impls = []
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not Path(path).is_file():
            raise ValueError(f"--impl wants NAME=PATH to an existing capture.py, got {v!r}")
        impls.append((name, str(Path(path).resolve())))
    if len({n for n, _ in impls}) != len(impls):
        raise ValueError("--impl names must differ")
    return impls


def measure_once(path: str, args) -> dict:
    # the measuring process dies with this one, even when this one is killed outright
    proc = subprocess.run([sys.executable, "-c", _CHILD, path, str(args.numel), args.dtype, args.device],
                          capture_output=True, text=True, cwd=str(ROOT), timeout=args.timeout,
                          preexec_fn=lambda: set_parent_death_signal(signal.SIGKILL))
    if proc.returncode != 0:
        raise RuntimeError(f"measuring {path} failed (rc={proc.returncode}): {proc.stderr[-800:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return bool(np.isclose(a, b, rtol=1e-9, atol=0.0))


def agree(ref: list, recs: list) -> bool:
    """Same digests and counts; statistics equal up to float64 summation order."""
    for r, s in zip(ref, recs):
        if (r["digest"], r["nan"], r["inf"]) != (s["digest"], s["nan"], s["inf"]):
            return False
        if not all(_close(r[k], s[k]) for k in ("min", "max", "mean", "abs_mean")):
            return False
    return True


def report(doc: dict) -> str:
    a = doc["args"]
    lines = ["# Results capture: describe() of one large output, fresh process each sample",
             "", f"{a['numel']} elements of {a['dtype']} on {a['device']}, {a['repeat']} processes "
             "per implementation, alternated; milliseconds, median (min-max).", "",
             "| implementation | first output | second output | records agree with the first implementation |",
             "|---|---|---|---|"]
    for name, runs in doc["samples"].items():
        cols = []
        for i in range(2):
            ms = np.array([r["seconds"][i] for r in runs]) * 1e3
            cols.append(f"{np.median(ms):.1f} ({ms.min():.1f}-{ms.max():.1f})")
        lines.append(f"| {name} | {cols[0]} | {cols[1]} | {'yes' if doc['agree'][name] else '**no**'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="results_capture_cost.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", action="append", default=[], required=True,
                    help="NAME=PATH of a capture.py; repeat for each implementation")
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per implementation (default 3)")
    ap.add_argument("--numel", type=int, default=4096 * 4096, help="elements of each output (default 4096*4096)")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per measuring process (default 120)")
    ap.add_argument("--out", required=True, help="folder for describe_cost.json and describe_cost.md")
    args = ap.parse_args(argv)
    try:
        impls = parse_impls(args.impl)
        if args.repeat < 1 or args.numel < 1:
            raise ValueError("--repeat and --numel must be at least 1")
    except ValueError as exc:
        print(f"results_capture_cost.py: {exc}", file=sys.stderr)
        return 2
    samples = {name: [] for name, _ in impls}
    try:
        for _ in range(args.repeat):
            for name, path in impls:
                samples[name].append(measure_once(path, args))
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"results_capture_cost.py: {exc}", file=sys.stderr)
        return 3
    ref = samples[impls[0][0]][0]["records"]
    doc = {"args": vars(args), "samples": samples,
           "agree": {n: all(agree(ref, r["records"]) for r in runs) for n, runs in samples.items()}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out / "describe_cost.json", json.dumps(doc, indent=1) + "\n")
    text = report(doc)
    atomic.write_text(out / "describe_cost.md", text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
