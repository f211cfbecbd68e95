#!/usr/bin/env python3
"""Check zl/backends/ and telemetry.py against a real NVIDIA GPU.

    python benchmarks/backend_probe.py --out DIR      (default $OUT, else ./validation_out)

What it checks, each against the real driver rather than recorded text:
- identity.json: CudaBackend.device_identity() (expect device_arch "9.0" on an H200),
  enumerate_devices(), probe_device_count().
- telemetry.tsv / telemetry.err / nvidia_smi_raw.txt: three samples through telemetry.py, plus the
  raw sampler output and what parse_telemetry made of it.
- classify.jsonl: one line per provoked error, each in its own subprocess (a fatal error kills the
  CUDA context): the exception text torch/Triton really produce, the verdict
  classify_capture_error() gives it, the verdict expected, and whether a fresh kernel still runs
  afterwards in the same process (`context_ok`), which is what "recoverable" promises.
Exit status: 0 when every verdict matches its expectation and identity/telemetry look sane, 1
otherwise (details in summary.txt).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Scenario name -> (expected verdict, code run in a child; it must raise inside `provoke()`).
SCENARIOS = {
    "sync_during_capture": ("recoverable", """
x = torch.ones(1024, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = x * 2
    torch.cuda.synchronize()
"""),
    "item_during_capture": ("recoverable", """
x = torch.ones(1024, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    (x * 2).sum().item()
"""),
    "device_side_assert": ("fatal", """
x = torch.ones(8, device="cuda")
idx = torch.tensor([1 << 20], device="cuda")
x[idx] = 3.0
torch.cuda.synchronize()
"""),
    "illegal_memory_access": ("fatal", """
x = torch.ones(8, device="cuda")
bad_store[(1,)](x, 1 << 40)
torch.cuda.synchronize()
"""),
    "out_of_memory": ("fatal", """
torch.empty(1 << 46, dtype=torch.uint8, device="cuda")
"""),
}

CHILD = r"""
import json, sys, traceback
sys.path.insert(0, {root!r})
import torch
import triton
import triton.language as tl
from zl.backends import get_backend


@triton.jit
def bad_store(p, off):
    # Store ~4 TiB past a live buffer: an illegal address on any GPU.
    tl.store(p + off, 1.0)


out = {{"scenario": {name!r}, "expected": {expected!r}}}
def provoke():
{body}
try:
    provoke()
    out["raised"] = False
except BaseException as exc:
    out["raised"] = True
    out["type"] = type(exc).__name__
    out["text"] = str(exc)
    out["chain"] = [f"{{type(e).__name__}}: {{e}}" for e in (exc.__cause__, exc.__context__) if e]
    out["verdict"] = get_backend("cuda").classify_capture_error(exc)
try:
    z = torch.arange(16, device="cuda") * 3
    torch.cuda.synchronize()
    out["context_ok"] = int(z.sum().item()) == 360
except BaseException as exc:
    out["context_ok"] = False
    out["context_error"] = str(exc)[:300]
print("RESULT " + json.dumps(out))
"""


def run_scenario(name: str, expected: str, code: str) -> dict:
    body = "\n".join("    " + ln for ln in code.strip().splitlines())
    src = CHILD.format(root=str(ROOT), name=name, expected=expected, body=body)
    # A file, not `python -c`: @triton.jit reads the kernel's source with inspect.
    with tempfile.TemporaryDirectory() as tmp:
        child = Path(tmp) / f"{name}.py"
        child.write_text(src)
        try:
            proc = subprocess.run([sys.executable, str(child)], capture_output=True, text=True,
                                  timeout=300)
        except subprocess.TimeoutExpired:
            return {"scenario": name, "expected": expected, "error": "timeout"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"scenario": name, "expected": expected, "error": f"rc={proc.returncode}",
            "stderr_tail": proc.stderr[-2000:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="backend_probe.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or "validation_out",
                    help="folder for identity.json, telemetry.tsv, nvidia_smi_raw.txt, classify.jsonl, summary.txt")
    out = Path(ap.parse_args(argv).out)
    out.mkdir(parents=True, exist_ok=True)
    problems = []

    from zl.backends import get_backend
    cuda = get_backend("cuda")
    ident = {"identity": cuda.device_identity(), "enumerate_devices": cuda.enumerate_devices(),
             "probe_device_count": cuda.probe_device_count()}
    (out / "identity.json").write_text(json.dumps(ident, indent=2) + "\n")
    if not ident["identity"]["device_name"] or not ident["identity"]["device_arch"]:
        problems.append(f"identity incomplete: {ident['identity']}")

    argv = cuda.telemetry_command("")
    try:
        raw = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raw = f"(could not run: {exc})"
    parsed = cuda.parse_telemetry(raw)
    (out / "nvidia_smi_raw.txt").write_text(
        "$ " + " ".join(argv) + "\n" + raw + "\nparsed:\n" + json.dumps(parsed, indent=1) + "\n")
    if not parsed:
        problems.append("parse_telemetry found no rows in real nvidia-smi output")
    tele = subprocess.run([sys.executable, str(ROOT / "telemetry.py"), str(out / "telemetry.tsv"),
                           "--interval", "1", "--count", "3"], capture_output=True, text=True)
    if tele.returncode != 0 or not (out / "telemetry.tsv").exists():
        problems.append(f"telemetry.py rc={tele.returncode}: {tele.stderr[-500:]}")

    with (out / "classify.jsonl").open("w") as fh:
        for name, (expected, code) in SCENARIOS.items():
            res = run_scenario(name, expected, code)
            fh.write(json.dumps(res) + "\n")
            if res.get("verdict") != expected:
                problems.append(f"{name}: verdict {res.get('verdict')!r}, expected {expected!r}"
                                f" ({res.get('text', res.get('error', ''))[:200]!r})")
            elif expected == "recoverable" and not res.get("context_ok"):
                problems.append(f"{name}: classified recoverable but the context died")

    summary = "OK\n" if not problems else "".join(f"PROBLEM {p}\n" for p in problems)
    (out / "summary.txt").write_text(summary)
    sys.stdout.write(summary)
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
