import os

import torch
import triton
import triton.language as tl

# Upstream's Hopper fp16 cluster path (src/flag_gems/ops/mm.py and
# runtime/backend/_nvidia/hopper/ops/mm.py): `mm` calls `cluster_remote_mm` when
# `cluster_remote_mm_scenario` holds, which needs FlagTree's TLE extension (HAS_TLE) and a
# device mesh. Here FAKE_FLAGGEMS_HAS_TLE=1 stands in for FlagTree, read at import like
# upstream's HAS_TLE; the fake has no cluster kernel, so reaching it raises the crash the
# _mm_cluster_fix_plugin routes around.
HAS_TLE = os.environ.get("FAKE_FLAGGEMS_HAS_TLE", "0") == "1"
BLOCK_CLUSTER_MESH = object() if HAS_TLE else None
TLE_REMOTE_BM = TLE_REMOTE_BN = TLE_REMOTE_BK = 16

# Three configs so the autotuner has a real choice to record and replay.
MM_CONFIGS = [
    triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}, num_warps=1, num_stages=1),
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, num_warps=2, num_stages=1),
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, num_stages=1),
]


@triton.autotune(configs=MM_CONFIGS, key=["M", "N", "K"])
@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
              stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    n_blocks_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // n_blocks_n
    pid_n = pid % n_blocks_n
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def cluster_remote_mm_scenario(a, b, c, M, N, K):
    return (HAS_TLE and BLOCK_CLUSTER_MESH is not None and a.dtype == torch.float16
            and b.dtype == torch.float16 and c.dtype == torch.float16
            and a.is_contiguous() and b.is_contiguous()
            and M >= TLE_REMOTE_BM and N >= TLE_REMOTE_BN and K >= TLE_REMOTE_BK)


def cluster_remote_mm(a, b, c, M, N, K):
    raise RuntimeError("CUDA error: an illegal memory access was encountered "
                       f"(fake cluster_remote_mm, M={M} N={N} K={K})")


def mm(a, b):
    """aten::mm for 2-D inputs of one dtype; strided (transposed) inputs are fine."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mm: incompatible shapes {tuple(a.shape)} @ {tuple(b.shape)}")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if cluster_remote_mm_scenario(a, b, c, M, N, K):
        return cluster_remote_mm(a, b, c, M, N, K)
    return general_mm(a, b, c, M, N, K)


def general_mm(a, b, c, M, N, K):
    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    mm_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                    c.stride(0), c.stride(1))
    return c
