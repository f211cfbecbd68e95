import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n_cols
    x = tl.load(in_ptr + row * n_cols + offs, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * n_cols + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x, dim=-1, half_to_float=False):
    """aten::_softmax: any rank, any dim; one program per row of the moved-last dim."""
    dim = dim % x.ndim if x.ndim else 0
    xt = x.movedim(dim, -1).contiguous() if x.ndim else x.reshape(1)
    n = xt.shape[-1]
    rows = xt.numel() // max(n, 1)
    out_dtype = torch.float32 if half_to_float else x.dtype
    out = torch.empty(xt.shape, dtype=out_dtype, device=x.device)
    if rows and n:
        softmax_kernel[(rows,)](out, xt, n, BLOCK_N=triton.next_power_of_2(n))
    return out.movedim(-1, dim) if x.ndim else out.reshape(())
