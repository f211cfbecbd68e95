"""Test-only benchmarks for run_batch.py (not part of the FlagGems mirror).

- test_zl_skipped: an unconditional skip mark (the inventory's marked_skip, left out of --all).
- test_zl_hang: a runtime skip unless ZL_TEST_HANG_PIDS names a file; then it starts a child,
  writes both pids there, ignores SIGTERM and sleeps (a hang that only KILL ends).
- test_zl_flaky: fails once when ZL_TEST_FLAKY_MARK names a file that does not exist yet
  (creating it), then runs relu like test_relu.
- test_zl_dup: the same function name as benchmark/test_ZL/test_zl_sub.py (run_name @file).
"""
import os
import signal
import subprocess
import time

import pytest
import torch

from . import base


@pytest.mark.skip(reason="zl_bench inventory test: unconditional skip")
@pytest.mark.zl_skipped
def test_zl_skipped():
    raise AssertionError("never runs")


@pytest.mark.zl_hang
def test_zl_hang():
    pidfile = os.environ.get("ZL_TEST_HANG_PIDS")
    if not pidfile:
        pytest.skip("hangs only when ZL_TEST_HANG_PIDS is set")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen(["sleep", "300"])
    with open(pidfile, "w") as fh:
        fh.write(f"{os.getpid()} {child.pid}\n")
    time.sleep(300)


@pytest.mark.zl_flaky
def test_zl_flaky():
    mark = os.environ.get("ZL_TEST_FLAKY_MARK")
    if mark and not os.path.exists(mark):
        open(mark, "w").close()
        pytest.fail("planted flaky failure (first attempt only)")
    bench = base.UnaryPointwiseBenchmark(op_name="relu", torch_op=torch.relu, dtypes=[torch.float32])
    bench.run()


@pytest.mark.zl_dup
def test_zl_dup():
    pytest.skip("inventory duplicate-name placeholder")
