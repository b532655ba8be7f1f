"""Block-wise int8 quantization for communication: Triton kernels and their eager references.

A flat tensor is cut into blocks of QBLOCK elements; each block is stored as int8 codes and one fp32 scale,
scale = max|x| / 127 over the block, code = round(x / scale) (so |x - code * scale| <= scale / 2). On the wire a
bf16 block of 1024 elements (2048 bytes) becomes 1024 + 4 bytes: 0.502 of the bytes.

Three kernels, each one pass over its data with the arithmetic in fp32:
  quantize(x) -> (codes, scales)
  reduce_requantize(codes[W, n], scales[W, n / QBLOCK]) -> (codes, scales) of sum_w dequantize(codes[w], scales[w])
  dequantize(codes, scales) -> bf16
A program handles ROWS blocks (a [ROWS, QBLOCK] tile), ROWS and the warp count autotuned per size on the GPU
(one config under the interpreter); n must be a multiple of QBLOCK.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from perftests.kernels.common import INTERPRETING

QBLOCK = 1024


def _configs() -> list[triton.Config]:
    if INTERPRETING:
        return [triton.Config({"ROWS": 4}, num_warps=8)]
    return [triton.Config({"ROWS": rows}, num_warps=warps) for rows in (2, 4, 8, 16) for warps in (4, 8)]


_tune = triton.autotune(configs=_configs(), key=["n_blocks"])
LEVELS = 127.0
TINY = 1e-30  # below any block max worth quantizing; x <= amax keeps |x * 127 / TINY| <= 127 anyway


TINY_C = tl.constexpr(TINY)


@_tune
@triton.jit
def _quantize_kernel(x_ptr, q_ptr, s_ptr, n_blocks, BPS, SEG, SSEG, QBLOCK: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_blocks
    cols = tl.arange(0, QBLOCK)
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * QBLOCK + cols[None, :], mask=row_ok[:, None], other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=1)
    inv = 127.0 / tl.maximum(amax, TINY_C)  # an all-zero block: codes 0 (and no division by zero)
    y = x * inv[:, None]
    code = tl.where(y >= 0, tl.floor(y + 0.5), -tl.floor(-y + 0.5))  # round half away from zero
    seg = (rows // BPS).to(tl.int64)
    local = (rows % BPS).to(tl.int64)
    tl.store(q_ptr + (seg * SEG + local * QBLOCK)[:, None] + cols[None, :], code.to(tl.int8), mask=row_ok[:, None])
    tl.store(s_ptr + seg * SSEG + local, amax / 127.0, mask=row_ok)


@_tune
@triton.jit
def _reduce_requantize_kernel(q_ptr, s_ptr, out_q_ptr, out_s_ptr, own_q_ptr, own_s_ptr, own, world, n_blocks,
                              SEG, SSEG, QBLOCK: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_blocks
    offs = rows.to(tl.int64)[:, None] * QBLOCK + tl.arange(0, QBLOCK)[None, :]
    acc = tl.zeros([ROWS, QBLOCK], dtype=tl.float32)
    for w in range(world):
        if w == own:  # this rank's own contribution, read where it was quantized (no copy)
            q = tl.load(own_q_ptr + offs, mask=row_ok[:, None], other=0).to(tl.float32)
            s = tl.load(own_s_ptr + rows, mask=row_ok, other=0.0)
        else:
            q = tl.load(q_ptr + w * SEG + offs, mask=row_ok[:, None], other=0).to(tl.float32)
            s = tl.load(s_ptr + w * SSEG + rows, mask=row_ok, other=0.0)
        acc += q * s[:, None]
    amax = tl.max(tl.abs(acc), axis=1)
    inv = 127.0 / tl.maximum(amax, TINY_C)
    y = acc * inv[:, None]
    code = tl.where(y >= 0, tl.floor(y + 0.5), -tl.floor(-y + 0.5))
    tl.store(out_q_ptr + offs, code.to(tl.int8), mask=row_ok[:, None])
    tl.store(out_s_ptr + rows, amax / 127.0, mask=row_ok)


@_tune
@triton.jit
def _dequantize_kernel(q_ptr, s_ptr, out_ptr, own_q_ptr, own_s_ptr, own, n_blocks, BPS, SEG, SSEG,
                       QBLOCK: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_blocks
    cols = tl.arange(0, QBLOCK)
    seg = (rows // BPS).to(tl.int64)
    local = (rows % BPS).to(tl.int64)
    mine = seg == own  # rows of this rank's own segment are read where they were written (no copy)
    q_src = tl.where(mine[:, None], own_q_ptr + (local * QBLOCK)[:, None] + cols[None, :],
                     q_ptr + (seg * SEG + local * QBLOCK)[:, None] + cols[None, :])
    s_src = tl.where(mine, own_s_ptr + local, s_ptr + seg * SSEG + local)
    q = tl.load(q_src, mask=row_ok[:, None], other=0).to(tl.float32)
    s = tl.load(s_src, mask=row_ok, other=0.0)
    out = (q * s[:, None]).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + rows.to(tl.int64)[:, None] * QBLOCK + cols[None, :], out, mask=row_ok[:, None])


def _blocks(n: int) -> int:
    if n % QBLOCK:
        raise ValueError(f"quantized tensors must hold a multiple of {QBLOCK} elements, got {n}")
    return n // QBLOCK


def _grid(n_blocks: int):
    return lambda meta: (triton.cdiv(n_blocks, meta["ROWS"]),)


class Packed:
    """Codes and scales of `segments` equal chunks in one int8 buffer, each segment [codes | fp32 scales]: one
    collective moves both (the scales alone would be a second, latency-bound collective). A new buffer, or
    buffer= to lay the segments over existing int8 memory (a slice of a symmetric-memory allocation, say)."""

    def __init__(self, chunk: int, segments: int, device: torch.device | str | None = None, *,
                 buffer: torch.Tensor | None = None) -> None:
        self.chunk, self.segments = chunk, segments
        self.blocks = _blocks(chunk)  # per segment
        self.seg_bytes = self.segment_bytes(chunk)
        if buffer is None:
            buffer = torch.empty(segments * self.seg_bytes, dtype=torch.int8, device=device)
        elif buffer.numel() != segments * self.seg_bytes or buffer.dtype != torch.int8:
            raise ValueError("a packed buffer must be int8 of segments * (chunk + 4 * chunk / QBLOCK) bytes")
        self.buffer = buffer

    @staticmethod
    def segment_bytes(chunk: int) -> int:
        """Bytes of one segment: a chunk's int8 codes, then its fp32 scales."""
        return chunk + 4 * _blocks(chunk)

    @property
    def codes(self) -> torch.Tensor:
        return self.buffer  # segment j's codes start at j * seg_bytes

    @property
    def scales(self) -> torch.Tensor:
        return self.buffer.view(torch.float32)[self.chunk // 4:]  # segment j's scales start at j * seg_bytes / 4

    def layout(self) -> tuple[int, int, int]:
        """(blocks per segment, bytes per segment, floats per segment) for the kernels."""
        return self.blocks, self.seg_bytes, self.seg_bytes // 4

    def segment(self, j: int) -> Packed:
        return Packed(self.chunk, 1, buffer=self.buffer[j * self.seg_bytes:(j + 1) * self.seg_bytes])

    def unpack(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes (segments, chunk), scales (segments, blocks)) as separate tensors, for checks."""
        rows = self.buffer.view(self.segments, self.seg_bytes)
        return rows[:, :self.chunk], rows[:, self.chunk:].contiguous().view(torch.float32)


def quantize(x: torch.Tensor, codes: torch.Tensor | None = None, scales: torch.Tensor | None = None,
             *, packed: Packed | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize x into codes and scales, or into packed (x's chunks in its segments, in order)."""
    n_blocks = _blocks(x.numel())
    if packed is not None:
        if packed.segments * packed.chunk != x.numel():
            raise ValueError("packed buffer and input sizes differ")
        codes, scales = packed.codes, packed.scales
        bps, seg, sseg = packed.layout()
    else:
        codes = torch.empty(x.numel(), dtype=torch.int8, device=x.device) if codes is None else codes
        scales = torch.empty(n_blocks, dtype=torch.float32, device=x.device) if scales is None else scales
        bps, seg, sseg = n_blocks, 0, 0
    _quantize_kernel[_grid(n_blocks)](x, codes, scales, n_blocks, bps, seg, sseg, QBLOCK=QBLOCK)
    return codes, scales


def reduce_requantize(codes: torch.Tensor | None = None, scales: torch.Tensor | None = None,
                      out_codes: torch.Tensor | None = None, out_scales: torch.Tensor | None = None, *,
                      packed: Packed | None = None, out: Packed | None = None,
                      own: tuple[int, Packed] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The W contributions to one chunk (codes (W, n) and scales (W, n / QBLOCK), or the W segments of packed),
    dequantized, summed in fp32 and requantized (into out_codes/out_scales, or the one segment of out).
    own=(w, segment) reads contribution w from that one-segment Packed instead of from packed."""
    if packed is not None:
        world, n = packed.segments, packed.chunk
        codes, scales = packed.codes, packed.scales
        seg, sseg = packed.seg_bytes, packed.seg_bytes // 4
    else:
        world, n = codes.shape
        seg, sseg = n, n // QBLOCK
    n_blocks = _blocks(n)
    if out is not None:
        out_codes, out_scales = out.codes, out.scales
    out_codes = torch.empty(n, dtype=torch.int8, device=codes.device) if out_codes is None else out_codes
    out_scales = torch.empty(n_blocks, dtype=torch.float32, device=codes.device) if out_scales is None else out_scales
    own_index, own_q, own_s = (own[0], own[1].codes, own[1].scales) if own is not None else (-1, codes, scales)
    _reduce_requantize_kernel[_grid(n_blocks)](codes, scales, out_codes, out_scales, own_q, own_s, own_index, world,
                                               n_blocks, seg, sseg, QBLOCK=QBLOCK)
    return out_codes, out_scales


def dequantize(codes: torch.Tensor | None = None, scales: torch.Tensor | None = None, out: torch.Tensor | None = None,
               dtype: torch.dtype = torch.bfloat16, *, packed: Packed | None = None,
               own: tuple[int, Packed] | None = None) -> torch.Tensor:
    """codes and scales (or packed's segments) back to dtype; own=(j, segment) reads segment j from that
    one-segment Packed instead."""
    if packed is not None:
        codes, scales = packed.codes, packed.scales
        n = packed.segments * packed.chunk
        bps, seg, sseg = packed.layout()
    else:
        n = codes.numel()
        bps, seg, sseg = _blocks(n), 0, 0
    n_blocks = _blocks(n)
    out = torch.empty(n, dtype=dtype, device=codes.device) if out is None else out
    own_index, own_q, own_s = (own[0], own[1].codes, own[1].scales) if own is not None else (-1, codes, scales)
    _dequantize_kernel[_grid(n_blocks)](codes, scales, out, own_q, own_s, own_index, n_blocks, bps, seg, sseg,
                                        QBLOCK=QBLOCK)
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
