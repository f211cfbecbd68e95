"""Test-only benchmark (not part of the FlagGems mirror): a kernel autotuned with Triton's
default benchmarker, which looks up `triton.testing.do_bench` when it first sweeps, so it
meets zl_bench's replacement: one sweep of 3 configs per shape."""
import pytest
import torch
import triton
import triton.language as tl

from . import base

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=1, num_stages=1) for b in (32, 64, 128)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def zl_default_tuned_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3.0, mask=mask)


def zl_default_tuned_op(x):
    y = torch.empty_like(x)
    n = x.numel()
    zl_default_tuned_kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, n)
    return y


def _input_fn(shape, dtype, device):
    yield (torch.randn(shape, dtype=dtype, device=device),)


@pytest.mark.zl_default_tuner
def test_zl_default_tuner():
    bench = base.GenericBenchmark(op_name="zl_default_tuner", input_fn=_input_fn,
                                  torch_op=lambda x: x * 3.0, dtypes=[torch.float32])
    bench.set_gems(zl_default_tuned_op)
    bench.run()
