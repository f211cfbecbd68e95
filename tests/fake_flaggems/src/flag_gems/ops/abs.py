import os

import torch
import triton
import triton.language as tl


@triton.jit
def abs_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr, SKEW: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.abs(x)
    if SKEW:
        # ZL_TEST_SKEW=1: a wrong answer at the same speed (one multiply per element).
        y = y * 1.01
    tl.store(y_ptr + offs, y, mask=mask)


def abs(x):
    xc = x.contiguous()
    y = torch.empty_like(xc)
    n = xc.numel()
    if n:
        # Read per call, like a compiler switch: side B of an A/B sets it.
        skew = os.environ.get("ZL_TEST_SKEW", "0") == "1"
        abs_kernel[(triton.cdiv(n, 256),)](xc, y, n, BLOCK_SIZE=256, SKEW=skew)
    return y
