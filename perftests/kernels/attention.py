"""Flash-attention forward in Triton: online softmax over key blocks, scores never leave the chip.

q, k, v: (B, H, S, D) contiguous, seen as (B * H * S, D) matrices through TMA descriptors (tiles never straddle
two heads: S is a multiple of every tile height). Work: 4 * B * H * S^2 * D flops (QK^T and PV), half of it
when causal. The fewest bytes: read q, k, v and write o, 4 * B * H * S * D * itemsize.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import globaltimer, smid
from triton.tools.tensor_descriptor import TensorDescriptor

from .common import INTERPRETING, run_config


def _set_block_shapes(nargs: dict[str, Any]) -> None:
    d = nargs["HEAD_DIM"]
    nargs["q_desc"].block_shape = [nargs["BLOCK_M"], d]
    nargs["o_desc"].block_shape = [nargs["BLOCK_M"], d]
    nargs["k_desc"].block_shape = [nargs["BLOCK_N"], d]
    nargs["v_desc"].block_shape = [nargs["BLOCK_N"], d]


# (BLOCK_M, BLOCK_N, num_warps, num_stages) on the GPU. One tile, not an autotuner's race: on the H100
# (2026-11-23, lab/vendor_gap_probe.py --sweep, every shape of the suite timed interleaved against cuDNN's SDPA)
# 64x64 at 4 warps and 3 stages was the fastest of 11 tiles in all 8 shapes, while the race picked 128x64 or
# 128x128 in some (5-8% slower there) and picked differently from one process to the next (a calibrated bless saw
# 0.758x and 0.805x for one case). Gated the same day: +1.2% to +9.5% on all 24 comparisons of the suite.
# TILES are the candidates the race used to run; the probe's sweep still times every one of them.
TILE = (64, 64, 4, 3)
TILES = [(128, 64, 8, 3), (128, 128, 8, 3), (128, 128, 8, 2), (128, 64, 4, 3), (64, 64, 4, 3), (64, 128, 4, 3),
         (128, 32, 4, 4)]
INTERPRETER_TILE = (32, 16, 4, 1)  # small enough for the interpreter's shapes


def _configs() -> list[triton.Config]:
    bm, bn, warps, stages = INTERPRETER_TILE if INTERPRETING else TILE
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages, pre_hook=_set_block_shapes)]


def tile_configs() -> list[dict[str, Any]]:
    """Every candidate tile as run_config() takes it (the ones the causal split can use), the kernel's own first."""
    tiles = [INTERPRETER_TILE] if INTERPRETING else list(dict.fromkeys([TILE, *TILES]))
    return [{"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": st} for bm, bn, w, st in tiles if bm % bn == 0]


@triton.jit
def _exp2_fma(x):
    """2^x for x <= 0 without the special-function unit (FlashAttention-4's trick): round x to j, 2^(x - j) by a
    polynomial in fused multiply-adds, j added into the exponent bits. Below 2^-126 it returns a denormal near 0."""
    x = tl.maximum(x, -126.0)
    t = x + 12582912.0  # 1.5 * 2^23: round(x) lands in the low mantissa bits of t
    f = x - (t - 12582912.0)  # in [-0.5, 0.5]
    # 2^f on [-0.5, 0.5], degree 3, fitted near-minimax at Chebyshev nodes: relative error 2.1e-4, below a bf16
    # rounding (2^-9 = 2.0e-3), which every p takes on its way into the p v MMA.
    poly = ((0.05294328182935715 * f + 0.24218228459358215) * f + 0.6935803294181824) * f + 0.9999609589576721
    j = t.to(tl.int32, bitcast=True) - 0x4B400000  # the bits of 12582912.0
    return (poly.to(tl.int32, bitcast=True) + (j << 23)).to(tl.float32, bitcast=True)


@triton.jit
def _exp2(x, EXP2_SPLIT: tl.constexpr):
    """2^x of a (rows, cols) block; EXP2_SPLIT: every other column through _exp2_fma, the rest through the
    special-function unit (MUFU, 16 a clock an SM against 128 fused multiply-adds), the two units side by side."""
    if EXP2_SPLIT:
        mufu, fma = tl.split(tl.reshape(x, (x.shape[0], x.shape[1] // 2, 2)))
        return tl.reshape(tl.join(tl.math.exp2(mufu), _exp2_fma(fma)), (x.shape[0], x.shape[1]))
    else:
        return tl.math.exp2(x)


@triton.jit
def _exponent(qk, m, qk_scale, FOLD: tl.constexpr):
    """The softmax's exponent (log2 domain) of scores against row maxima m; FOLD: qk is unscaled and the scale is
    folded in, one fused multiply-add per score instead of a multiply and a subtraction."""
    if FOLD:
        return qk * qk_scale - m[:, None]
    else:
        return qk - m[:, None]


@triton.jit
def _attn_inner(acc, l_i, m_i, q, k_desc, v_desc, row0, offs_m, start, stop, qk_scale,
                BLOCK_N: tl.constexpr, MASKED: tl.constexpr, FOLD: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                SOFTMAX: tl.constexpr, EXP2_SPLIT: tl.constexpr, LAZY_RESCALE: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(start, stop, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        k = k_desc.load([row0 + start_n, 0])  # (BLOCK_N, D), by TMA
        qk = tl.dot(q, k.T)
        if SOFTMAX:
            if not FOLD:
                qk = qk * qk_scale  # log2 domain: exp2 below
            if MASKED:
                qk = tl.where(offs_m[:, None] >= (start_n + offs_n)[None, :], qk, -float("inf"))
            if FOLD:  # the row maximum taken on unscaled scores (the scale is positive), scaled once a row
                m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            else:
                m_new = tl.maximum(m_i, tl.max(qk, 1))
            if LAZY_RESCALE:
                # The running maxima kept, and acc not rescaled, unless one grew by more than 8 (log2): meanwhile
                # p < 2^8, and l_i and acc share the stale maxima, so acc / l_i is unchanged (FlashAttention-4).
                if tl.max(m_new - m_i, 0) > 8.0:
                    alpha = tl.math.exp2(m_i - m_new)
                    acc = acc * alpha[:, None]
                    l_i = l_i * alpha
                    m_i = m_new
                p = _exp2(_exponent(qk, m_i, qk_scale, FOLD), EXP2_SPLIT)
                l_i = l_i + tl.sum(p, 1)
                v = v_desc.load([row0 + start_n, 0])
                acc = tl.dot(p.to(v.dtype), v, acc)
            else:
                p = _exp2(_exponent(qk, m_new, qk_scale, FOLD), EXP2_SPLIT)
                alpha = tl.math.exp2(m_i - m_new)
                l_i = l_i * alpha + tl.sum(p, 1)
                v = v_desc.load([row0 + start_n, 0])  # (BLOCK_N, D)
                acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
                m_i = m_new
        else:  # a timing diagnostic, wrong by design: (q k^T) v with no softmax, for what the MMAs alone take
            v = v_desc.load([row0 + start_n, 0])
            acc = tl.dot(qk.to(v.dtype), v, acc)
    return acc, l_i, m_i


# An autotuner of one config runs no race: it applies the config's pre_hook and records best_config, as reports use.
@triton.autotune(configs=_configs(), key=["S", "HEAD_DIM", "CAUSAL", "FOLD", "HEAVY_FIRST", "WARP_SPECIALIZE", "SOFTMAX",
                                               "EXP2_SPLIT", "LAZY_RESCALE"])
@triton.jit
def _attn_fwd_kernel(q_desc, k_desc, v_desc, o_desc, sm_scale, S,
                     HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     FOLD: tl.constexpr = True, HEAVY_FIRST: tl.constexpr = True, WARP_SPECIALIZE: tl.constexpr = False,
                     SOFTMAX: tl.constexpr = True, EXP2_SPLIT: tl.constexpr = False,
                     LAZY_RESCALE: tl.constexpr = False, trace=None):
    if trace is not None:  # a constexpr test: None compiles the kernel without the timestamps
        began = globaltimer()
    if HEAVY_FIRST and CAUSAL:
        # Causal row blocks near the end of the sequence have the most key blocks: launched first, the short ones
        # fill the last wave instead of the long ones.
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    row0 = tl.program_id(1) * S  # first row of this (batch, head) in the (B*H*S, D) view
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    q = q_desc.load([row0 + start_m * BLOCK_M, 0])
    m_i = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # 1 / ln 2
    if CAUSAL:
        # Blocks wholly below the diagonal need no mask; only the diagonal block does.
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_desc, v_desc, row0, offs_m, 0, start_m * BLOCK_M,
                                    qk_scale, BLOCK_N, False, FOLD, WARP_SPECIALIZE, SOFTMAX, EXP2_SPLIT, LAZY_RESCALE)
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_desc, v_desc, row0, offs_m, start_m * BLOCK_M,
                                    (start_m + 1) * BLOCK_M, qk_scale, BLOCK_N, True, FOLD, WARP_SPECIALIZE, SOFTMAX,
                                    EXP2_SPLIT, LAZY_RESCALE)
    else:
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_desc, v_desc, row0, offs_m, 0, S, qk_scale, BLOCK_N, False,
                                    FOLD, WARP_SPECIALIZE, SOFTMAX, EXP2_SPLIT, LAZY_RESCALE)
    out = acc / l_i[:, None]
    o_desc.store([row0 + start_m * BLOCK_M, 0], out.to(o_desc.dtype))
    if trace is not None:
        slot = trace + (tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)) * 3
        tl.store(slot, began)
        tl.store(slot + 1, globaltimer())
        tl.store(slot + 2, smid().to(tl.int64))


def program_count(q: torch.Tensor, config: dict[str, Any] | None = None) -> int:
    """How many programs flash_attention launches for q at config (the kernel's own tile when None): one per row
    block of each (batch, head), as many as a trace= tensor needs slots for."""
    B, H, S, _ = q.shape
    return B * H * (S // (config or {}).get("BLOCK_M", TILE[0]))


# The largest tile any config uses: S must be a multiple of it (no ragged-edge masks in the kernel).
MAX_BLOCK = 128


def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, out: torch.Tensor | None = None, *,
    fold: bool = True, heavy_first: bool = True, warp_specialize: bool = False, config: dict[str, Any] | None = None,
    trace: torch.Tensor | None = None, softmax: bool = True, exp2_split: bool = False,
    lazy_rescale: bool = False,
) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) [+ causal mask]) v for (B, H, S, D) contiguous tensors.

    fold folds the softmax scale into one multiply-add per score, heavy_first launches the causal row blocks with
    the most key blocks first; both on since the H100 measured them (+2-5% and +1-2%, lab/vendor_gap_probe.py),
    off for the probe's comparison with the kernel before them. Experiments of the probe, off by default:
    warp_specialize=True asks Triton to split the key loop into producer (TMA) and consumer warps (it does not
    build for this loop with Triton 3.6 on sm_90); config= runs another tile (BLOCK_M, BLOCK_N, num_warps,
    num_stages; tile_configs() lists the candidates). trace= (an int64 tensor of 3 per program, GPU only) receives
    each program's start and end on the device's nanosecond clock and the SM it ran on, in launch order
    (program_id(1) major): what lab/vendor_gap_probe.py --residency reads the achieved blocks per SM from.
    exp2_split=True computes half the softmax's exponentials with fused multiply-adds (_exp2_fma) instead of the
    special-function unit; lazy_rescale=True rescales acc and l_i only when a row's maximum grew by more than 2^8
    (one block-wide test a key block instead of a multiply per output element): experiments, off. softmax=False is
    a timing diagnostic, wrong by design: (q k^T) v with no softmax, the loop's MMAs and loads alone (the probe's
    `no_softmax` side: what the softmax adds to each key block that the MMAs do not hide)."""
    if not (q.shape == k.shape == v.shape) or q.dim() != 4:
        raise ValueError(f"q, k, v must be (B, H, S, D) of one shape; got {q.shape}, {k.shape}, {v.shape}")
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        raise ValueError("q, k, v must be contiguous")
    B, H, S, D = q.shape
    if D not in (16, 32, 64, 128):
        raise ValueError(f"head dim {D} not supported (16, 32, 64, 128)")
    tile = 32 if INTERPRETING else MAX_BLOCK
    if S % tile:
        raise ValueError(f"sequence length {S} must be a multiple of {tile}")
    if out is not None and (out.shape != q.shape or out.dtype != q.dtype or not out.is_contiguous()):
        raise ValueError("out must be contiguous and match q in shape and dtype")
    if trace is not None and (INTERPRETING or trace.dtype != torch.int64 or trace.numel() < 3 * program_count(q, config)):
        raise ValueError(f"trace needs the GPU (the interpreter has no clock registers) and an int64 tensor of at least "
                         f"3 x {program_count(q, config)} elements (3 per program)")
    o = out if out is not None else torch.empty_like(q)
    # Placeholder block shapes: the config's pre_hook sets them.
    descs = [TensorDescriptor.from_tensor(t.view(B * H * S, D), [16, D]) for t in (q, k, v, o)]
    grid = lambda meta: (triton.cdiv(S, meta["BLOCK_M"]), B * H)  # noqa: E731
    switches = dict(HEAD_DIM=D, CAUSAL=causal, FOLD=fold, HEAVY_FIRST=heavy_first, WARP_SPECIALIZE=warp_specialize,
                    SOFTMAX=softmax, EXP2_SPLIT=exp2_split, LAZY_RESCALE=lazy_rescale, trace=trace)
    if config is None:
        _attn_fwd_kernel[grid](*descs, 1.0 / math.sqrt(D), S, **switches)
        return o
    bm, bn = config.get("BLOCK_M"), config.get("BLOCK_N")
    if not (isinstance(bm, int) and isinstance(bn, int) and 0 < bn <= bm and bm % bn == 0 and S % bm == 0):
        # The causal split needs BLOCK_M to be a multiple of BLOCK_N (as tile_configs keeps), the grid S one of BLOCK_M.
        raise ValueError(f"config {config}: BLOCK_M must divide S ({S}) and be a multiple of BLOCK_N")
    run_config(_attn_fwd_kernel, grid, config, *descs, 1.0 / math.sqrt(D), S, **switches)
    return o


def attention_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """The textbook form: materialize the (S, S) scores, mask, softmax in fp32, multiply by v."""
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        S = q.shape[-2]
        mask = torch.ones(S, S, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v


def attention_flops(B: int, H: int, S: int, D: int, causal: bool) -> float:
    flops = 4.0 * B * H * S * S * D
    return flops / 2 if causal else flops
