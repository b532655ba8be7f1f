"""Elementwise Triton kernels: vector add (the control case) and the chapter's fused add + ReLU + scale."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Elements per program. Untuned for now: the gate's smoke case; the kernel suite tunes it with measurements.
BLOCK_SIZE = 2048
NUM_WARPS = 8


@triton.jit
def _vector_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    # Arithmetic in fp32: the interpreter holds bf16 as raw bits, and the GPU rounds once at the store anyway.
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (x + y).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _add_relu_scale_kernel(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    z = tl.maximum(x + y, 0.0) * scale
    tl.store(out_ptr + offsets, z.to(out_ptr.dtype.element_ty), mask=mask)


def _check_pair(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
        raise ValueError(f"x and y must match: {x.shape}/{x.dtype}/{x.device} vs {y.shape}/{y.dtype}/{y.device}")
    if not (x.is_contiguous() and y.is_contiguous()):
        raise ValueError("x and y must be contiguous")
    if out is None:
        return torch.empty_like(x)
    if out.shape != x.shape or out.dtype != x.dtype or not out.is_contiguous():
        raise ValueError("out must be contiguous and match x in shape and dtype")
    return out


def vector_add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x + y. Moves 3 * n * itemsize bytes, like torch.add: the control case, about 1.0x."""
    out = _check_pair(x, y, out)
    n = x.numel()
    _vector_add_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, y, out, n, BLOCK=BLOCK_SIZE, num_warps=NUM_WARPS)
    return out


def add_relu_scale(x: torch.Tensor, y: torch.Tensor, scale: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = relu(x + y) * scale in one pass: 3 * n * itemsize bytes (read x, y; write out)."""
    out = _check_pair(x, y, out)
    n = x.numel()
    _add_relu_scale_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, y, out, n, float(scale), BLOCK=BLOCK_SIZE, num_warps=NUM_WARPS)
    return out


def add_relu_scale_eager(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    """The eager reference: three kernels, 7 * n * itemsize bytes (add 3, relu 2, mul 2)."""
    return torch.relu(x + y) * scale
