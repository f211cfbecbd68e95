"""benchmarks/kernel_clock_traces.py without a GPU: it says so and writes nothing.
(Its output on the H200 is tests/fixtures/kernel_clock/h200_torch_kernels.json, which
tests/test_timing_kernel_clock.py splits.)"""

import subprocess
import sys
from pathlib import Path

from harness.runner import assert_needs_cuda

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_clock_traces.py"


def test_without_a_cuda_device_it_exits_1_and_writes_nothing(tmp_path):
    assert_needs_cuda(SCRIPT, tmp_path)


def test_missing_out_is_a_usage_error():
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 2 and "--out" in r.stderr
