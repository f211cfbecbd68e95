"""benchmarks/cupti_start_cost.py without a GPU: it says so and writes nothing; its
loop counter (the GIL probe) counts for the time asked or until told to stop."""

import importlib.util
from pathlib import Path

from harness.runner import assert_needs_cuda

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "cupti_start_cost.py"
_spec = importlib.util.spec_from_file_location("cupti_start_cost", SCRIPT)
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)


def test_count_for_stops_at_the_time_or_when_told():
    n, t = probe.count_for(0.05)
    assert n > 0 and 0.05 <= t < 1.0
    calls = []
    n, t = probe.count_for(0, until=lambda: calls.append(1) or len(calls) >= 3)
    assert n == 3000 and len(calls) == 3


def test_without_a_cuda_device_it_exits_1_and_writes_nothing(tmp_path):
    assert_needs_cuda(SCRIPT, tmp_path)
