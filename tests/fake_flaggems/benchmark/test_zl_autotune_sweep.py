"""Test-only benchmark for zl_bench's autotune tests (not part of the FlagGems mirror).

Two autotuned kernels whose winners the test controls through planted timers:
* `zl_scale_kernel` keys on `n`: one key per shape, a fixed winner (BLOCK=64), so a
  parallel sweep must merge to exactly what a serial sweep records.
* `zl_global_kernel` keys on a constant, so every shard tunes the same key. With
  ZL_TEST_PLANT_CONFLICT=1 its winner follows the shard's device, which plants a
  cross-shard conflict the sweep must count.
Each tuning sweep appends `<visible device> <kernel> <n>` to $ZL_TEST_SWEEP_TRACE,
and a worker whose device equals $ZL_TEST_FAIL_DEVICE fails, to exercise the
failing-shard path (one on $ZL_TEST_HANG_DEVICE hangs, writing its pid to
$ZL_TEST_HANG_PIDFILE, for the sweep timeout). `zl_lib_kernel` goes through the fake LibTuner, and the test
prints where its sqlite store lives and how many tuned rows it holds.
"""
import fcntl
import os
import sys

import pytest
import torch
import triton
import triton.language as tl

from flag_gems.utils import libentry as _libentry

from . import base

CONFIGS = [
    triton.Config({"BLOCK": 32}, num_warps=1, num_stages=1),
    triton.Config({"BLOCK": 64}, num_warps=2, num_stages=1),
    triton.Config({"BLOCK": 128}, num_warps=4, num_stages=1),
]


def _device() -> str:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "")


def _planted(kernel: str, winner_of):
    """do_bench stand-in: the config at index winner_of(n) is fastest."""
    state = {"i": 0}

    def bench(kernel_call, quantiles=None):
        kernel_call()
        i = state["i"] % len(CONFIGS)
        state["i"] += 1
        if i == 0:
            trace = os.environ.get("ZL_TEST_SWEEP_TRACE")
            if trace:
                with open(trace, "a") as f:    # the sweep's workers append at once
                    fcntl.flock(f, fcntl.LOCK_EX)
                    f.write(f"{_device() or '-'} {kernel} {state.get('n')}\n")
        t = 1.0 if i == winner_of() else 2.0 + i
        return [t, t, t]

    return bench, state


def _global_winner() -> int:
    if os.environ.get("ZL_TEST_PLANT_CONFLICT") == "1":
        try:
            return int(_device() or 0) % len(CONFIGS)
        except ValueError:
            return 0
    return 2


_scale_bench, _scale_state = _planted("zl_scale_kernel", lambda: 1)
_global_bench, _global_state = _planted("zl_global_kernel", _global_winner)


@triton.autotune(configs=CONFIGS, key=["n"], do_bench=_scale_bench)
@triton.jit
def zl_scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


@_libentry.libtuner(configs=CONFIGS[:2], key=["n"], warmup=1, rep=2)
@triton.jit
def zl_lib_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.autotune(configs=CONFIGS, key=["flag"], do_bench=_global_bench)
@triton.jit
def zl_global_kernel(x_ptr, y_ptr, n, flag, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


def _is_shard() -> bool:
    """A sweep shard: its run configuration (zl_bench's --zl-config) says so."""
    from zl.config import current
    return current().parallel_worker == "1"


def zl_sweep_op(x):
    n = x.numel()
    if (_is_shard()
            and _device() and _device() == os.environ.get("ZL_TEST_FAIL_DEVICE")):
        raise RuntimeError(f"planted failure on device {_device()}")
    if (_is_shard()
            and _device() and _device() == os.environ.get("ZL_TEST_HANG_DEVICE")):
        import time
        with open(os.environ["ZL_TEST_HANG_PIDFILE"], "w") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(3600)  # a shard that never finishes: the sweep's timeout must end it
    y = torch.empty_like(x)
    z = torch.empty_like(x)
    _scale_state["n"] = n
    _global_state["n"] = n
    zl_scale_kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, n)
    zl_global_kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](y, z, n, 7)
    zl_lib_kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](z, y, n)
    return y


def _input_fn(shape, dtype, device):
    yield (torch.randn(shape, dtype=dtype, device=device),)


@pytest.mark.zl_sweep
def test_zl_sweep():
    bench = base.GenericBenchmark(
        op_name="zl_sweep",
        input_fn=_input_fn,
        torch_op=zl_sweep_op,
        dtypes=[torch.float32],
    )
    bench.set_gems(zl_sweep_op)
    bench.run()
    store = _libentry.libcache
    rows = store._conn.execute("SELECT COUNT(*) FROM tuned_config").fetchone()[0]
    print(f"ZL_TEST_LIBCACHE={store.path} rows={rows}", file=sys.stderr, flush=True)
