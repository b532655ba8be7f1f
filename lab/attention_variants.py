"""The Triton flash kernel's variants (the vendor-gap probe's sides): the suite's kernel (perftests/kernels/
attention.py) with switches on its launch order, its softmax and its loop, at any candidate tile, optionally tracing
where its programs ran. Built from the suite's public blocks (block_scores, causal_mask, softmax_step, accumulate,
start_rows, store_rows, row_block_heavy_first, its kernel_configs); with every switch at its default it compiles to the suite kernel's PTX
(lab/ptx_diff.py checks it), so a probe's `default` side times the kernel the suite times. What each variant measured
is on the vendor-gap results page (docs/results/vendor-gap.md).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import globaltimer, smid

from lab.sweep import run_config
from perftests.kernels import attention as attn
from perftests.kernels.common import INTERPRETING

# The candidate tiles (BLOCK_M, BLOCK_N, num_warps, num_stages) the suite's one tile was chosen from: the tiles its
# autotuner used to race.
TILES = [(128, 64, 8, 3), (128, 128, 8, 3), (128, 128, 8, 2), (128, 64, 4, 3), (64, 64, 4, 3), (64, 128, 4, 3),
         (128, 32, 4, 4)]
SWITCHES = ("FOLD", "HEAVY_FIRST", "WARP_SPECIALIZE", "SOFTMAX", "EXP2_SPLIT", "LAZY_RESCALE")


def tile_configs() -> list[dict[str, Any]]:
    """Every candidate tile as run_config() takes it (the ones the causal split can use), the kernel's own first."""
    tiles = [attn.INTERPRETER_TILE] if INTERPRETING else list(dict.fromkeys([attn.TILE, *TILES]))
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
def _variant_inner(acc, l_i, m_i, q, k_desc, v_desc, row0, offs_m, start, stop, qk_scale,
                   BLOCK_N: tl.constexpr, MASKED: tl.constexpr, FOLD: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                   SOFTMAX: tl.constexpr, EXP2_SPLIT: tl.constexpr, LAZY_RESCALE: tl.constexpr):
    """The suite's _attn_inner with the switches: at their defaults, the suite's blocks in the suite's order."""
    for start_n in tl.range(start, stop, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        qk = attn.block_scores(q, k_desc, row0, start_n)
        if SOFTMAX:
            if not FOLD:
                qk = qk * qk_scale  # log2 domain: exp2 below
            if MASKED:
                qk = attn.causal_mask(qk, offs_m, start_n, BLOCK_N)
            if FOLD and not EXP2_SPLIT and not LAZY_RESCALE:
                p, alpha, m_i, l_i = attn.softmax_step(qk, m_i, l_i, qk_scale)
                acc = attn.accumulate(acc, p, alpha, v_desc, row0, start_n)
            else:
                if FOLD:
                    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
                else:
                    m_new = tl.maximum(m_i, tl.max(qk, 1))
                if LAZY_RESCALE:
                    # The running maxima kept, and acc not rescaled, unless one grew by more than 8 (log2):
                    # meanwhile p < 2^8, and l_i and acc share the stale maxima, so acc / l_i is unchanged
                    # (FlashAttention-4).
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
                    acc = attn.accumulate(acc, p, alpha, v_desc, row0, start_n)
                    m_i = m_new
        else:  # a timing diagnostic, wrong by design: (q k^T) v with no softmax, for what the MMAs alone take
            v = v_desc.load([row0 + start_n, 0])
            acc = tl.dot(qk.to(v.dtype), v, acc)
    return acc, l_i, m_i


# Why a kernel of its own and not the suite's with a hook: the switches sit inside the suite kernel's loop and
# around its launch order, where a hook would be a switch on the suite's kernel again. So this kernel repeats the
# suite kernel's dozen lines of structure (row block, causal split, store) around the suite's blocks.
@triton.autotune(configs=attn.kernel_configs(), key=["S", "HEAD_DIM", "CAUSAL", *SWITCHES])
@triton.jit
def _attn_fwd_variant(q_desc, k_desc, v_desc, o_desc, sm_scale, S,
                      HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      FOLD: tl.constexpr = True, HEAVY_FIRST: tl.constexpr = True, WARP_SPECIALIZE: tl.constexpr = False,
                      SOFTMAX: tl.constexpr = True, EXP2_SPLIT: tl.constexpr = False,
                      LAZY_RESCALE: tl.constexpr = False, trace=None):
    if trace is not None:  # a constexpr test: None compiles the kernel without the timestamps
        began = globaltimer()
    if HEAVY_FIRST and CAUSAL:
        start_m = attn.row_block_heavy_first()
    else:
        start_m = tl.program_id(0)
    row0 = tl.program_id(1) * S
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    q, m_i, l_i, acc = attn.start_rows(q_desc, row0, start_m, BLOCK_M, HEAD_DIM)
    qk_scale = sm_scale * attn.LOG2E
    if CAUSAL:
        acc, l_i, m_i = _variant_inner(acc, l_i, m_i, q, k_desc, v_desc, row0, offs_m, 0, start_m * BLOCK_M,
                                       qk_scale, BLOCK_N, False, FOLD, WARP_SPECIALIZE, SOFTMAX, EXP2_SPLIT,
                                       LAZY_RESCALE)
        acc, l_i, m_i = _variant_inner(acc, l_i, m_i, q, k_desc, v_desc, row0, offs_m, start_m * BLOCK_M,
                                       (start_m + 1) * BLOCK_M, qk_scale, BLOCK_N, True, FOLD, WARP_SPECIALIZE,
                                       SOFTMAX, EXP2_SPLIT, LAZY_RESCALE)
    else:
        acc, l_i, m_i = _variant_inner(acc, l_i, m_i, q, k_desc, v_desc, row0, offs_m, 0, S, qk_scale, BLOCK_N,
                                       False, FOLD, WARP_SPECIALIZE, SOFTMAX, EXP2_SPLIT, LAZY_RESCALE)
    attn.store_rows(o_desc, acc, l_i, row0, start_m, BLOCK_M)
    if trace is not None:
        slot = trace + (tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)) * 3
        tl.store(slot, began)
        tl.store(slot + 1, globaltimer())
        tl.store(slot + 2, smid().to(tl.int64))


def program_count(q: torch.Tensor, config: dict[str, Any] | None = None) -> int:
    """How many programs flash_attention launches for q at config (the kernel's own tile when None): one per row
    block of each (batch, head), as many as a trace= tensor needs slots for."""
    B, H, S, _ = q.shape
    return B * H * (S // (config or {}).get("BLOCK_M", attn.TILE[0]))


def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, out: torch.Tensor | None = None, *,
    fold: bool = True, heavy_first: bool = True, warp_specialize: bool = False, config: dict[str, Any] | None = None,
    trace: torch.Tensor | None = None, softmax: bool = True, exp2_split: bool = False,
    lazy_rescale: bool = False,
) -> torch.Tensor:
    """The suite's attn.flash_attention with its switches; every default is the suite kernel's own form.

    fold=False scales the scores by a multiply and subtracts the maxima instead of one fused multiply-add;
    heavy_first=False launches the causal row blocks in sequence order; warp_specialize=True asks Triton to split the
    key loop into producer (TMA) and consumer warps; config= runs another tile (BLOCK_M, BLOCK_N, num_warps,
    num_stages; tile_configs() lists the candidates). trace= (an int64 tensor of 3 per program, GPU only) receives
    each program's start and end on the device's nanosecond clock and the SM it ran on, in launch order
    (program_id(1) major): what lab/vendor_gap_probe.py --residency reads the achieved blocks per SM from.
    exp2_split=True computes half the softmax's exponentials with fused multiply-adds (_exp2_fma) instead of the
    special-function unit; lazy_rescale=True rescales acc and l_i only when a row's maximum grew by more than 2^8
    (one block-wide test a key block instead of a multiply per output element). softmax=False is a timing
    diagnostic, wrong by design: (q k^T) v with no softmax, the loop's MMAs and loads alone (the probe's
    `no_softmax` side: what the softmax adds to each key block that the MMAs do not hide)."""
    o = attn.check_inputs(q, k, v, out)
    if trace is not None and (INTERPRETING or trace.dtype != torch.int64 or trace.numel() < 3 * program_count(q, config)):
        raise ValueError(f"trace needs the GPU (the interpreter has no clock registers) and an int64 tensor of at least "
                         f"3 x {program_count(q, config)} elements (3 per program)")
    B, H, S, D = q.shape
    descs = attn.descriptors(q, k, v, o)
    grid = lambda meta: (triton.cdiv(S, meta["BLOCK_M"]), B * H)  # noqa: E731
    switches = dict(HEAD_DIM=D, CAUSAL=causal, FOLD=fold, HEAVY_FIRST=heavy_first, WARP_SPECIALIZE=warp_specialize,
                    SOFTMAX=softmax, EXP2_SPLIT=exp2_split, LAZY_RESCALE=lazy_rescale, trace=trace)
    if config is None:
        _attn_fwd_variant[grid](*descs, 1.0 / math.sqrt(D), S, **switches)
        return o
    bm, bn = config.get("BLOCK_M"), config.get("BLOCK_N")
    if not (isinstance(bm, int) and isinstance(bn, int) and 0 < bn <= bm and bm % bn == 0 and S % bm == 0):
        # The causal split needs BLOCK_M to be a multiple of BLOCK_N (as tile_configs keeps), the grid S one of BLOCK_M.
        raise ValueError(f"config {config}: BLOCK_M must divide S ({S}) and be a multiple of BLOCK_N")
    run_config(_attn_fwd_variant, grid, config, *descs, 1.0 / math.sqrt(D), S, **switches)
    return o
