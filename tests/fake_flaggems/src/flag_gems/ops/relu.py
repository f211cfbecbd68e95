import os

import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n_elements, USE_SELECT: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    if USE_SELECT:
        # Switch on: compare + select instead of max, so the TTGIR differs
        # (arith.cmpf/select vs arith.maximumf) while the values do not.
        y = tl.where(x > 0, x, tl.zeros_like(x))
    else:
        y = tl.maximum(x, tl.zeros_like(x))
    tl.store(y_ptr + offs, y, mask=mask)


def switch_enabled():
    """ZL_TEST_SWITCH=1 selects the alternative kernel body (read at every call)."""
    return os.environ.get("ZL_TEST_SWITCH", "0").strip() == "1"


def relu(x):
    xc = x.contiguous()
    y = torch.empty_like(xc)
    n = xc.numel()
    block = 256
    if n:
        relu_kernel[(triton.cdiv(n, block),)](xc, y, n, USE_SELECT=switch_enabled(), BLOCK_SIZE=block)
    return y
