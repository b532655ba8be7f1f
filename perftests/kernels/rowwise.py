"""Row-wise fused Triton kernels: softmax, RMSNorm and LayerNorm forward, one program per row.

Each kernel reads its row once and writes it once: 2 * rows * cols * itemsize bytes (plus the weights).
Arithmetic is fp32 whatever the storage dtype (bf16 is loaded, widened, and rounded once at the store).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def _row_launch(n_cols: int) -> tuple[int, int]:
    """(BLOCK, num_warps) for a row of n_cols: the whole row in one block; 8 warps up to 4096 wide, 16 beyond."""
    block = triton.next_power_of_2(n_cols)
    warps = 4 if block <= 1024 else 8 if block <= 4096 else 16
    return block, warps


@triton.jit
def _softmax_kernel(out_ptr, x_ptr, x_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    y = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_norm_kernel(out_ptr, x_ptr, w_ptr, x_stride, out_stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(out_ptr + row * out_stride + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layer_norm_kernel(out_ptr, x_ptr, w_ptr, b_ptr, x_stride, out_stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_stride + cols, (centered * rstd * w + b).to(out_ptr.dtype.element_ty), mask=mask)


def _check_rows(x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError(f"expected a 2-D tensor with unit column stride, got shape {tuple(x.shape)} strides {x.stride()}")
    if out is None:
        return torch.empty_like(x)
    if out.shape != x.shape or out.dtype != x.dtype or out.stride(1) != 1:
        raise ValueError("out must match x in shape and dtype, with unit column stride")
    return out


def softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim of a 2-D tensor."""
    out = _check_rows(x, out)
    block, warps = _row_launch(x.shape[1])
    _softmax_kernel[(x.shape[0],)](out, x, x.stride(0), out.stride(0), x.shape[1], BLOCK=block, num_warps=warps)
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
    out = _check_rows(x, out)
    block, warps = _row_launch(x.shape[1])
    _rms_norm_kernel[(x.shape[0],)](out, x, weight, x.stride(0), out.stride(0), x.shape[1], eps, BLOCK=block, num_warps=warps)
    return out


def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, out: torch.Tensor | None = None
) -> torch.Tensor:
    out = _check_rows(x, out)
    block, warps = _row_launch(x.shape[1])
    _layer_norm_kernel[(x.shape[0],)](
        out, x, weight, bias, x.stride(0), out.stride(0), x.shape[1], eps, BLOCK=block, num_warps=warps
    )
    return out


# Eager references, written the way eager model code writes them: widen to fp32, compute, narrow once.
def softmax_eager(x: torch.Tensor) -> torch.Tensor:
    """max, subtract, exp, sum, divide: five kernels plus the casts."""
    x32 = x.float()
    e = (x32 - x32.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def rms_norm_eager(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def layer_norm_eager(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    mean = x32.mean(dim=-1, keepdim=True)
    var = (x32 - mean).pow(2).mean(dim=-1, keepdim=True)
    return ((x32 - mean) * torch.rsqrt(var + eps) * weight.float() + bias.float()).to(x.dtype)
