"""The fused MLP block's kernels: RMSNorm -> Linear -> GELU as one statistics pass and one GEMM (the matmul
kernel's row-scale and GELU epilogue); the norm's gain is folded into the weight when the layer is loaded.

Work: 2*M*N*K flops (the GEMM); the statistics pass reads M*K*itemsize bytes more.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .matmul import matmul_tma_persistent


@triton.jit
def _rstd_kernel(rstd_ptr, x_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps))


def _rstd(x: torch.Tensor, eps: float) -> torch.Tensor:
    """1 / sqrt(mean(x^2) + eps) per row, in fp32: the RMSNorm statistic, M * K * itemsize bytes read."""
    rstd = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    block = min(triton.next_power_of_2(x.shape[1]), 4096)
    _rstd_kernel[(x.shape[0],)](rstd, x, x.stride(0), x.shape[1], eps, BLOCK=block, num_warps=8 if block >= 2048 else 4)
    return rstd


def fused_rmsnorm_linear_gelu(x: torch.Tensor, w_folded: torch.Tensor, eps: float) -> torch.Tensor:
    """gelu(rmsnorm(x) @ w.T) as one statistics pass and one GEMM.

    rmsnorm(x) = x * rstd[m] * g; since rstd[m] is a per-row scalar, (x * rstd * g) @ w.T = rstd[m] * (x @ (w * g).T).
    The gain g is folded into the weight once, when the layer is loaded (w_folded = w * g), and rstd is
    applied in the GEMM's epilogue, before the GELU: the normalized x is never written to memory.
    """
    rstd = _rstd(x, eps)
    return matmul_tma_persistent(x, w_folded, activation="gelu_tanh", row_scale=rstd)


def fold_gain(w: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    """w * g along K, in fp32 then rounded once to w's dtype."""
    return (w.float() * gain.float()[None, :]).to(w.dtype)
