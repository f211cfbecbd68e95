import torch
import triton
import triton.language as tl

# One block per row: rows longer than this are refused, which is how the fake
# tree produces "a shape whose measurement raises" (the pytest.fail path).
MAX_ROW = 1024


@triton.jit
def amax_kernel(x_ptr, y_ptr, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=-float("inf"))
    tl.store(y_ptr + row, tl.max(x, axis=0))


def amax(x, dim=(), keepdim=False):
    dims = [dim] if isinstance(dim, int) else list(dim)
    if len(dims) != 1 or x.ndim < 1:
        raise RuntimeError("fake amax supports exactly one reduction dim")
    d = dims[0] % x.ndim
    xt = x.movedim(d, -1).contiguous()
    n = xt.shape[-1]
    if n > MAX_ROW:
        raise RuntimeError(f"amax: row length {n} exceeds the single-block limit {MAX_ROW}")
    rows = xt.numel() // n
    y = torch.empty(xt.shape[:-1], dtype=x.dtype, device=x.device)
    amax_kernel[(rows,)](xt, y, n, BLOCK_N=triton.next_power_of_2(n))
    return y.unsqueeze(d) if keepdim else y
