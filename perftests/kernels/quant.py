"""Block-wise int8 quantization for communication: Triton kernels and their eager references.

A flat tensor is cut into blocks of QBLOCK elements; each block is stored as int8 codes and one fp32 scale,
scale = max|x| / 127 over the block, code = round(x / scale) (so |x - code * scale| <= scale / 2). On the wire a
bf16 block of 1024 elements (2048 bytes) becomes 1024 + 4 bytes: 0.502 of the bytes.

Three kernels, each one pass over its data with the arithmetic in fp32:
  quantize(x) -> (codes, scales)
  reduce_requantize(codes[W, n], scales[W, n / QBLOCK]) -> (codes, scales) of sum_w dequantize(codes[w], scales[w])
  dequantize(codes, scales) -> bf16
A program handles ROWS blocks (a [ROWS, QBLOCK] tile); n must be a multiple of QBLOCK.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

QBLOCK = 1024
ROWS = 4
LEVELS = 127.0
TINY = 1e-30  # below any block max worth quantizing; x <= amax keeps |x * 127 / TINY| <= 127 anyway


TINY_C = tl.constexpr(TINY)


@triton.jit
def _quantize_kernel(x_ptr, q_ptr, s_ptr, n_blocks, QBLOCK: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_blocks
    offs = rows.to(tl.int64)[:, None] * QBLOCK + tl.arange(0, QBLOCK)[None, :]
    x = tl.load(x_ptr + offs, mask=row_ok[:, None], other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=1)
    scale = amax / 127.0
    inv = 127.0 / tl.maximum(amax, TINY_C)  # an all-zero block: codes 0 (and no division by zero)
    y = x * inv[:, None]
    code = tl.where(y >= 0, tl.floor(y + 0.5), -tl.floor(-y + 0.5))  # round half away from zero
    tl.store(q_ptr + offs, code.to(tl.int8), mask=row_ok[:, None])
    tl.store(s_ptr + rows, scale, mask=row_ok)


@triton.jit
def _reduce_requantize_kernel(q_ptr, s_ptr, out_q_ptr, out_s_ptr, world, n_blocks, n_elems,
                              QBLOCK: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_blocks
    offs = rows.to(tl.int64)[:, None] * QBLOCK + tl.arange(0, QBLOCK)[None, :]
    acc = tl.zeros([ROWS, QBLOCK], dtype=tl.float32)
    for w in range(world):
        q = tl.load(q_ptr + w * n_elems + offs, mask=row_ok[:, None], other=0).to(tl.float32)
        s = tl.load(s_ptr + w * n_blocks + rows, mask=row_ok, other=0.0)
        acc += q * s[:, None]
    amax = tl.max(tl.abs(acc), axis=1)
    inv = 127.0 / tl.maximum(amax, TINY_C)  # an all-zero block: codes 0 (and no division by zero)
    y = acc * inv[:, None]
    code = tl.where(y >= 0, tl.floor(y + 0.5), -tl.floor(-y + 0.5))
    tl.store(out_q_ptr + offs, code.to(tl.int8), mask=row_ok[:, None])
    tl.store(out_s_ptr + rows, amax / 127.0, mask=row_ok)


@triton.jit
def _dequantize_kernel(q_ptr, s_ptr, out_ptr, n_blocks, QBLOCK: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_blocks
    offs = rows.to(tl.int64)[:, None] * QBLOCK + tl.arange(0, QBLOCK)[None, :]
    q = tl.load(q_ptr + offs, mask=row_ok[:, None], other=0).to(tl.float32)
    s = tl.load(s_ptr + rows, mask=row_ok, other=0.0)
    tl.store(out_ptr + offs, (q * s[:, None]).to(out_ptr.dtype.element_ty), mask=row_ok[:, None])


def _blocks(n: int) -> int:
    if n % QBLOCK:
        raise ValueError(f"quantized tensors must hold a multiple of {QBLOCK} elements, got {n}")
    return n // QBLOCK


def _grid(n_blocks: int) -> tuple[int]:
    return (triton.cdiv(n_blocks, ROWS),)


def quantize(x: torch.Tensor, codes: torch.Tensor | None = None, scales: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    n_blocks = _blocks(x.numel())
    codes = torch.empty(x.numel(), dtype=torch.int8, device=x.device) if codes is None else codes
    scales = torch.empty(n_blocks, dtype=torch.float32, device=x.device) if scales is None else scales
    _quantize_kernel[_grid(n_blocks)](x, codes, scales, n_blocks, QBLOCK=QBLOCK, ROWS=ROWS, num_warps=8)
    return codes, scales


def reduce_requantize(codes: torch.Tensor, scales: torch.Tensor, out_codes: torch.Tensor | None = None,
                      out_scales: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """codes (W, n) int8 and scales (W, n / QBLOCK): the W contributions to one chunk, summed and requantized."""
    world, n = codes.shape
    n_blocks = _blocks(n)
    out_codes = torch.empty(n, dtype=torch.int8, device=codes.device) if out_codes is None else out_codes
    out_scales = torch.empty(n_blocks, dtype=torch.float32, device=codes.device) if out_scales is None else out_scales
    _reduce_requantize_kernel[_grid(n_blocks)](codes, scales, out_codes, out_scales, world, n_blocks, n,
                                               QBLOCK=QBLOCK, ROWS=ROWS, num_warps=8)
    return out_codes, out_scales


def dequantize(codes: torch.Tensor, scales: torch.Tensor, out: torch.Tensor | None = None,
               dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    n_blocks = _blocks(codes.numel())
    out = torch.empty(codes.numel(), dtype=dtype, device=codes.device) if out is None else out
    _dequantize_kernel[_grid(n_blocks)](codes, scales, out, n_blocks, QBLOCK=QBLOCK, ROWS=ROWS, num_warps=8)
    return out


# -- eager references ------------------------------------------------------------------------------------------
def quantize_eager(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    blocks = x.float().reshape(-1, QBLOCK)
    amax = blocks.abs().amax(dim=1)
    inv = LEVELS / amax.clamp(min=TINY)
    y = blocks * inv[:, None]
    codes = torch.where(y >= 0, torch.floor(y + 0.5), -torch.floor(-y + 0.5)).to(torch.int8)
    return codes.reshape(-1), amax / LEVELS


def dequantize_eager(codes: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return (codes.float().reshape(-1, QBLOCK) * scales[:, None]).reshape(-1).to(dtype)


def reduce_requantize_eager(codes: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    world, n = codes.shape
    total = (codes.float().reshape(world, -1, QBLOCK) * scales.reshape(world, -1, 1)).sum(dim=0)
    return quantize_eager(total.reshape(-1))
