import torch
import triton
import triton.language as tl

from flag_gems.utils.libentry import libentry, libtuner


# Kept small: on the CPU interpreter every config costs a full do_bench per key.
@libentry()
@libtuner(
    configs=[
        triton.Config({"BLOCK_SIZE": 128}, num_warps=2, num_stages=1),
        triton.Config({"BLOCK_SIZE": 512}, num_warps=4, num_stages=1),
    ],
    key=["n_elements"],
    warmup=2,
    rep=4,
)
@triton.jit
def gelu_backward_kernel(dy_ptr, x_ptr, dx_ptr, n_elements,
                         APPROX_TANH: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if APPROX_TANH:
        k0 = 0.7978845608028654  # sqrt(2/pi)
        inner = k0 * (x + 0.044715 * x * x * x)
        t = 2.0 * tl.sigmoid(2.0 * inner) - 1.0  # tanh(inner)
        d_inner = k0 * (1.0 + 3.0 * 0.044715 * x * x)
        grad = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner
    else:
        cdf = 0.5 * (1.0 + tl.math.erf(x * 0.7071067811865476))
        pdf = tl.exp(-0.5 * x * x) * 0.3989422804014327
        grad = cdf + x * pdf
    tl.store(dx_ptr + offs, (dy * grad).to(dx_ptr.dtype.element_ty), mask=mask)


def gelu_backward(grad_output, self, approximate="none"):
    """aten::gelu_backward through a libtuner + libentry kernel."""
    dy = grad_output.contiguous()
    x = self.contiguous()
    dx = torch.empty_like(x)
    n = x.numel()

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_SIZE"]),)

    gelu_backward_kernel[grid](dy, x, dx, n, APPROX_TANH=(approximate == "tanh"))
    return dx
