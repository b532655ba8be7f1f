"""Flash-attention forward for Hopper in Gluon, with the softmax overlapped with the tensor cores.

The Triton kernel (attention.py) waits for each key block's scores and then runs that block's softmax with no MMA
in flight: Triton 3.6 leaves a warpgroup MMA in flight only when its result feeds the same MMA's accumulator
(docs/NOTES.md, fifth session). Gluon states the schedule instead of asking a pipeliner for it, so this kernel
runs each block's softmax under an MMA of the same warpgroup, FlashAttention-3's intra-warpgroup overlap. Key block
j, in program order (the MMAs named after "in flight" are running):
    issue S[j] = q k[j]^T; issue PV[j-1] = acc + p[j-1] v[j-1]     in flight: S[j], PV[j-1]
    wait for S[j]                                                   in flight: PV[j-1]
    softmax of S[j] -> p[j], alpha[j]     (CUDA cores, under PV[j-1])
    wait for PV[j-1]; acc *= alpha[j]; refill the slots S[j] and PV[j-1] read
The accumulator is rescaled after PV[j-1] has added into it: acc = alpha[j] (acc + p[j-1] v[j-1]), the same sum.
Schedule "lookahead" (an experiment) runs block j's softmax under S[j+1] instead, and waits for both MMAs at the end
of each block. Neither leaves an MMA in flight over the loop's back edge: written that way (FlashAttention-3's full
schedule, the softmax under both MMAs), ptxas serializes every MMA of the loop (C7514/C7515, lab/codegen_probe.py
attention-gluon), which undoes the overlap. K and V come by TMA into rings of num_stages slots, each refilled as soon
as the MMA that read it has retired.

At D = 128 the kernel runs 128-row blocks as two consumer warpgroups (warp_specialize), each the schedule above on
its 64 rows, both reading one K and V ring that a one-warp loader partition fills ("two_warpgroups_loader",
FlashAttention-3's producer and consumers); "two_warpgroups" (the first consumer refills) and "pingpong" (the two
take turns at the tensor cores) are the experiments it was measured against. choice() gives the kernel's own
schedule and tile per head dim.

Same layout as attention.flash_attention: q, k, v (B, H, S, D) contiguous, seen as (B * H * S, D). Gluon has no
interpreter (and does not compile under TRITON_INTERPRET=1): on a machine without a GPU the kernel is compiled for
sm_90 in a subprocess (perftests/test_triton_attention.py) but never run.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# The warp-specialized schedules (two consumer warpgroups on 128-row blocks) and all of them.
WARP_SPECIALIZED_SCHEDULES = ("two_warpgroups", "pingpong", "two_warpgroups_loader")
SCHEDULES = ("pv_under", "lookahead", *WARP_SPECIALIZED_SCHEDULES)
# The kernel's own choice by (head dim, causal): a schedule and its tile (BLOCK_M, BLOCK_N, num_warps, num_stages),
# 16 rows of q a warp (a warpgroup's MMA covers 64 rows), num_stages the K and V rings' slots. Chosen on the H100
# (2026-11-24, lab/vendor_gap_probe.py --gluon, every tile and schedule interleaved against cuDNN's SDPA).
CHOICE = {(64, False): ("pv_under", (64, 128, 4, 2)), (64, True): ("pv_under", (64, 128, 4, 2)),
          (128, False): ("two_warpgroups_loader", (128, 128, 8, 2)),
          (128, True): ("two_warpgroups_loader", (128, 128, 8, 2))}
# The single-partition schedules' candidate tiles (8 warps: two warpgroups in lockstep); the warp-specialized ones
# take BLOCK_M 128 (lab/vendor_gap_probe.py --gluon times both lists).
TILES = [(64, 64, 4, 2), (64, 64, 4, 3), (128, 64, 8, 2), (128, 128, 8, 2), (64, 128, 4, 2), (64, 32, 4, 2), (64, 32, 4, 3)]
WARP_SPECIALIZED_TILES = [(128, 64, 8, 2), (128, 64, 8, 3), (128, 128, 8, 2)]


def choice(head_dim: int, causal: bool) -> tuple[str, dict[str, int]]:
    """The kernel's own schedule and tile for a head dim, as flash_attention's schedule= and config= take them."""
    schedule, tile = CHOICE[(head_dim, causal)]
    return schedule, dict(zip(("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"), tile))


@gluon.jit
def _load_block(desc, smem, bars, row, slot, pred):
    """One (BLOCK_N, D) tile by TMA into ring slot `slot`, signalling bars[slot] when its bytes have landed."""
    bar = bars.index(slot)
    mbarrier.expect(bar, desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(desc, [row, 0], bar, smem.index(slot), pred=pred)


@gluon.jit
def _row_block(S, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """This program's rows: the first row of its (batch, head) in the (B*H*S, D) view, its first query row within
    the sequence, and how many key blocks it reads (causal: up to the diagonal, the last one maybe past it, masked).
    Causal row blocks go longest first: the short ones fill the last wave."""
    if CAUSAL:
        start_m = gl.num_programs(0) - 1 - gl.program_id(0)
    else:
        start_m = gl.program_id(0)
    row0 = gl.program_id(1) * S
    m0 = start_m * BLOCK_M
    if CAUSAL:
        n_blocks = gl.cdiv(m0 + BLOCK_M, BLOCK_N)
    else:
        n_blocks = S // BLOCK_N
    return row0, m0, n_blocks


@gluon.constexpr_function
def _mma_layouts(warps, block_n, head_dim):
    """The warpgroup MMA layouts of the scores (rows, BLOCK_N) and of the output (rows, HEAD_DIM), warps stacked
    along the rows, and p's operand layout for the p v MMA from registers."""
    s_layout = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps, 1], instr_shape=[16, block_n, 16])
    o_layout = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps, 1], instr_shape=[16, head_dim, 16])
    return s_layout, o_layout, gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)


@gluon.jit
def _store_rows(acc, l_i, tile, o_desc, row, row_o: gl.constexpr):
    """acc / l_i in the output's dtype through `tile` (a q tile every MMA reading it has retired) to o's rows."""
    out = acc / gl.convert_layout(l_i, row_o)[:, None]
    tile.store(out.to(o_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [row, 0], tile)
    tma.store_wait(pendings=0)


@gluon.jit
def _softmax(s, m_i, l_i, qk_scale, m0, start_n, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
             BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
    """Online softmax of one block of unscaled scores s: p (fp32), the factor alpha for the running sums, the new
    row maxima and sums. The scale (log2 e / sqrt(D)) is folded into one multiply-add per score."""
    if CAUSAL:
        if start_n + BLOCK_N > m0:  # a block on the diagonal: keys after the query are masked
            rows = m0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
            cols = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
            s = gl.where(rows[:, None] >= cols[None, :], s, -float("inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_i


@gluon.jit
def _attn_fwd_pipelined(q_desc, k_desc, v_desc, o_desc, qk_scale, S,
                        HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                        STAGES: gl.constexpr, LOOKAHEAD: gl.constexpr, num_warps: gl.constexpr):
    gl.static_assert(STAGES >= 2, "the last block's V is loaded while an earlier block is in the loop")
    dtype: gl.constexpr = q_desc.dtype
    layouts: gl.constexpr = _mma_layouts(num_warps, BLOCK_N, HEAD_DIM)
    s_layout: gl.constexpr = layouts[0]
    o_layout: gl.constexpr = layouts[1]
    p_layout: gl.constexpr = layouts[2]
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    row0, m0, n_blocks = _row_block(S, BLOCK_M, BLOCK_N, CAUSAL)

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_bars.index(i), count=1)
        mbarrier.init(v_bars.index(i), count=1)

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [row0 + m0, 0], q_bar, q_smem)
    for i in gl.static_range(STAGES):
        _load_block(k_desc, k_smem, k_bars, row0 + i * BLOCK_N, i, i < n_blocks)
        _load_block(v_desc, v_smem, v_bars, row0 + i * BLOCK_N, i, i < n_blocks)

    m_i = gl.full([BLOCK_M], -float("inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([BLOCK_M], gl.float32, layout=row_s)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)  # ignored (use_acc=False): a layout

    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_bars.index(0), 0)
    s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    _load_block(k_desc, k_smem, k_bars, row0 + STAGES * BLOCK_N, 0, STAGES < n_blocks)  # S[0] read slot 0
    if LOOKAHEAD:
        # Block j's softmax under block j+1's q k^T. The p v MMA is waited for within its iteration: left in
        # flight over the back edge, ptxas serializes every MMA of the loop (C7514, checked on the CPU).
        for j in range(0, n_blocks - 1):
            slot = j % STAGES
            nxt = (j + 1) % STAGES
            mbarrier.wait(k_bars.index(nxt), ((j + 1) // STAGES) & 1)
            s_next = warpgroup_mma(q_smem, k_smem.index(nxt).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            p, alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, m0, j * BLOCK_N, CAUSAL, BLOCK_M, BLOCK_N, s_layout)
            acc = acc * gl.convert_layout(alpha, row_o)[:, None]
            mbarrier.wait(v_bars.index(slot), (j // STAGES) & 1)
            pv = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index(slot), acc, is_async=True)
            s, acc = warpgroup_mma_wait(num_outstanding=0, deps=(s_next, pv))
            _load_block(k_desc, k_smem, k_bars, row0 + (j + 1 + STAGES) * BLOCK_N, nxt, j + 1 + STAGES < n_blocks)
            _load_block(v_desc, v_smem, v_bars, row0 + (j + STAGES) * BLOCK_N, slot, j + STAGES < n_blocks)
        last = n_blocks - 1
        p, alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, m0, last * BLOCK_N, CAUSAL, BLOCK_M, BLOCK_N, s_layout)
        acc = acc * gl.convert_layout(alpha, row_o)[:, None]
        p16 = gl.convert_layout(p.to(dtype), p_layout)
    else:
        # Block j's softmax under block j-1's p v (FlashAttention-3's order): the accumulator is rescaled after
        # p v has added into it, acc = alpha[j] (acc + p[j-1] v[j-1]), the same sum.
        p, alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, m0, 0, CAUSAL, BLOCK_M, BLOCK_N, s_layout)
        p16 = gl.convert_layout(p.to(dtype), p_layout)
        for j in range(1, n_blocks):
            slot = j % STAGES
            prev = (j - 1) % STAGES
            mbarrier.wait(k_bars.index(slot), (j // STAGES) & 1)
            s = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            mbarrier.wait(v_bars.index(prev), ((j - 1) // STAGES) & 1)
            pv = warpgroup_mma(p16, v_smem.index(prev), acc, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))  # S[j] retired; PV[j-1] still running
            p, alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, m0, j * BLOCK_N, CAUSAL, BLOCK_M, BLOCK_N, s_layout)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
            _load_block(k_desc, k_smem, k_bars, row0 + (j + STAGES) * BLOCK_N, slot, j + STAGES < n_blocks)
            _load_block(v_desc, v_smem, v_bars, row0 + (j - 1 + STAGES) * BLOCK_N, prev, j - 1 + STAGES < n_blocks)
            acc = acc * gl.convert_layout(alpha, row_o)[:, None]
            p16 = gl.convert_layout(p.to(dtype), p_layout)
        last = n_blocks - 1
    mbarrier.wait(v_bars.index(last % STAGES), (last // STAGES) & 1)
    acc = warpgroup_mma(p16, v_smem.index(last % STAGES), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))

    mbarrier.invalidate(q_bar)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(k_bars.index(i))
        mbarrier.invalidate(v_bars.index(i))
    _store_rows(acc, l_i, q_smem, o_desc, row0 + m0, row_o)



@gluon.jit
def _ws_consumer(q_desc, k_desc, v_desc, o_desc, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                 turn, qk_scale, row0, m0_cta, n_all, HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr,
                 BLOCK_N: gl.constexpr, STAGES: gl.constexpr, PINGPONG: gl.constexpr, LOADER: gl.constexpr,
                 WG: gl.constexpr):
    """One consumer warpgroup of the two-warpgroup kernel: rows [m0 + 64 WG, m0 + 64 WG + 64) of the CTA's 128, the
    pv_under schedule, K and V slots released through the empty barriers (both warpgroups arrive); warpgroup 0 also
    issues the TMA loads, refilling a slot once both have released it. PINGPONG: the two take turns issuing their
    MMAs (a token passed through `turn`), so one's softmax runs while the other's MMAs do. LOADER: a partition of
    its own issues the loads (_ws_loader) and neither consumer does."""
    LOADS: gl.constexpr = WG == 0 and not LOADER
    dtype: gl.constexpr = q_desc.dtype
    layouts: gl.constexpr = _mma_layouts(4, BLOCK_N, HEAD_DIM)
    s_layout: gl.constexpr = layouts[0]
    o_layout: gl.constexpr = layouts[1]
    p_layout: gl.constexpr = layouts[2]
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    m0 = m0_cta + 64 * WG
    if CAUSAL:
        n_blocks = gl.cdiv(m0 + 64, BLOCK_N)
    else:
        n_blocks = n_all
    q_tile = q_smem.index(WG)
    q_bar = q_bars.index(WG)
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [row0 + m0, 0], q_bar, q_tile)
    if LOADS:
        for i in gl.static_range(STAGES):
            _load_block(k_desc, k_smem, k_ready, row0 + i * BLOCK_N, i, i < n_all)
            _load_block(v_desc, v_smem, v_ready, row0 + i * BLOCK_N, i, i < n_all)

    m_i = gl.full([64], -float("inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([64], gl.float32, layout=row_s)
    acc = gl.zeros([64, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([64, BLOCK_N], gl.float32, layout=s_layout)

    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_ready.index(0), 0)
    if PINGPONG:
        mbarrier.wait(turn.index(WG), 0)
    s = warpgroup_mma(q_tile, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    if PINGPONG:
        mbarrier.arrive(turn.index(1 - WG), count=1)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    mbarrier.arrive(k_empty.index(0), count=1)
    if LOADS:
        mbarrier.wait(k_empty.index(0), 0, pred=STAGES < n_all)
        _load_block(k_desc, k_smem, k_ready, row0 + STAGES * BLOCK_N, 0, STAGES < n_all)
    p, alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, m0, 0, CAUSAL, 64, BLOCK_N, s_layout)
    p16 = gl.convert_layout(p.to(dtype), p_layout)
    for j in range(1, n_blocks):
        slot = j % STAGES
        prev = (j - 1) % STAGES
        mbarrier.wait(k_ready.index(slot), (j // STAGES) & 1)
        mbarrier.wait(v_ready.index(prev), ((j - 1) // STAGES) & 1)
        if PINGPONG:
            mbarrier.wait(turn.index(WG), j & 1)
        s = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        pv = warpgroup_mma(p16, v_smem.index(prev), acc, is_async=True)
        if PINGPONG:
            mbarrier.arrive(turn.index(1 - WG), count=1)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))
        mbarrier.arrive(k_empty.index(slot), count=1)
        p, alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, m0, j * BLOCK_N, CAUSAL, 64, BLOCK_N, s_layout)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
        mbarrier.arrive(v_empty.index(prev), count=1)
        if LOADS:
            refill_k = j + STAGES < n_all
            mbarrier.wait(k_empty.index(slot), (j // STAGES) & 1, pred=refill_k)
            _load_block(k_desc, k_smem, k_ready, row0 + (j + STAGES) * BLOCK_N, slot, refill_k)
            refill_v = j - 1 + STAGES < n_all
            mbarrier.wait(v_empty.index(prev), ((j - 1) // STAGES) & 1, pred=refill_v)
            _load_block(v_desc, v_smem, v_ready, row0 + (j - 1 + STAGES) * BLOCK_N, prev, refill_v)
        acc = acc * gl.convert_layout(alpha, row_o)[:, None]
        p16 = gl.convert_layout(p.to(dtype), p_layout)
    last = n_blocks - 1
    mbarrier.wait(v_ready.index(last % STAGES), (last // STAGES) & 1)
    acc = warpgroup_mma(p16, v_smem.index(last % STAGES), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    if PINGPONG:  # warpgroup 1 has a key block more past warpgroup 0's diagonal (causal): pass it the turn
        for _ in range(n_blocks, n_all):
            mbarrier.arrive(turn.index(1 - WG), count=1)
    _store_rows(acc, l_i, q_tile, o_desc, row0 + m0, row_o)


@gluon.jit
def _ws_loader(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, row0, n_all,
               BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """The loader partition (one warp): every K and V block of the program into the rings, a slot refilled once both
    consumer warpgroups have released it."""
    for b in range(n_all):
        slot = b % STAGES
        reuse = b >= STAGES
        mbarrier.wait(k_empty.index(slot), ((b // STAGES) - 1) & 1, pred=reuse)
        _load_block(k_desc, k_smem, k_ready, row0 + b * BLOCK_N, slot, True)
        mbarrier.wait(v_empty.index(slot), ((b // STAGES) - 1) & 1, pred=reuse)
        _load_block(v_desc, v_smem, v_ready, row0 + b * BLOCK_N, slot, True)


@gluon.jit
def _attn_fwd_ws(q_desc, k_desc, v_desc, o_desc, qk_scale, S, HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr,
                 BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, PINGPONG: gl.constexpr,
                 num_warps: gl.constexpr, LOADER: gl.constexpr = False):
    gl.static_assert(BLOCK_M == 128, "two consumer warpgroups of 64 rows")
    gl.static_assert(STAGES >= 2, "every K and V block is loaded inside warpgroup 0's loop")
    dtype: gl.constexpr = q_desc.dtype
    row0, m0, n_all = _row_block(S, BLOCK_M, BLOCK_N, CAUSAL)
    q_smem = gl.allocate_shared_memory(dtype, [2, 64, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(q_bars.index(i), count=1)
        mbarrier.init(turn.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_empty.index(i), count=2)
    fence_async_shared()
    if PINGPONG:
        mbarrier.arrive(turn.index(0), count=1)  # warpgroup 0 issues first
    if LOADER:
        gl.warp_specialize([
            (_ws_consumer, (q_desc, k_desc, v_desc, o_desc, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                            v_empty, turn, qk_scale, row0, m0, n_all, HEAD_DIM, CAUSAL, BLOCK_N, STAGES, PINGPONG,
                            LOADER, 0)),
            (_ws_consumer, (q_desc, k_desc, v_desc, o_desc, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                            v_empty, turn, qk_scale, row0, m0, n_all, HEAD_DIM, CAUSAL, BLOCK_N, STAGES, PINGPONG,
                            LOADER, 1)),
            (_ws_loader, (k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, row0, n_all, BLOCK_N,
                          STAGES)),
        ], [4, 1], [232, 24])
    else:
        gl.warp_specialize([
            (_ws_consumer, (q_desc, k_desc, v_desc, o_desc, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                            v_empty, turn, qk_scale, row0, m0, n_all, HEAD_DIM, CAUSAL, BLOCK_N, STAGES, PINGPONG,
                            LOADER, 0)),
            (_ws_consumer, (q_desc, k_desc, v_desc, o_desc, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                            v_empty, turn, qk_scale, row0, m0, n_all, HEAD_DIM, CAUSAL, BLOCK_N, STAGES, PINGPONG,
                            LOADER, 1)),
        ], [4], [240])


_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


@functools.cache
def _shared_layout(rows: int, head_dim: int, dtype: Any) -> Any:
    """The shared-memory layout of a (rows, head_dim) tile of q, k, v or o, computed once per shape (each
    get_default_for call costs about 9 us of host time a launch: H100 host, 2026-11-24)."""
    return gl.NVMMASharedLayout.get_default_for([rows, head_dim], dtype)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, out: torch.Tensor | None = None,
                    *, config: dict[str, int] | None = None, schedule: str | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) [+ causal mask]) v for (B, H, S, D) contiguous 16-bit tensors, on a Hopper GPU.

    schedule (the kernel's choice() for the head dim and mask when None): "pv_under", each block's softmax under the
    previous block's p v in one warpgroup; "lookahead", under the next block's q k^T; "two_warpgroups", 128-row
    blocks on two consumer warpgroups (Gluon's warp_specialize), each running pv_under on its 64 rows, sharing one
    K and V ring that the first refills once both have released a slot; "pingpong", the same with the two taking
    turns to issue their MMAs (FlashAttention-3's ping-pong, through an mbarrier token); "two_warpgroups_loader", the
    two with a one-warp partition of its own issuing every load (FlashAttention-3's producer). config: BLOCK_M, BLOCK_N,
    num_warps, num_stages (the K and V rings' slots), as attention.flash_attention takes it; the two-warpgroup
    schedules take BLOCK_M 128 and num_warps 8."""
    if not (q.shape == k.shape == v.shape) or q.dim() != 4:
        raise ValueError(f"q, k, v must be (B, H, S, D) of one shape; got {q.shape}, {k.shape}, {v.shape}")
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        raise ValueError("q, k, v must be contiguous")
    if q.dtype not in _GL_DTYPES or not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must be bf16 or fp16, one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    B, H, S, D = q.shape
    if (D, causal) not in CHOICE:
        raise ValueError(f"head dim {D} not supported ({', '.join(sorted({str(d) for d, _ in CHOICE}))})")
    own_schedule, own_tile = choice(D, causal)
    schedule = schedule or own_schedule
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    warp_specialized = schedule in WARP_SPECIALIZED_SCHEDULES
    chosen = config or own_tile
    block_m, block_n, warps, stages = (chosen.get(key) for key in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"))
    if (not all(isinstance(x, int) for x in (block_m, block_n, warps, stages)) or block_m != 16 * warps
            or S % block_m or S % block_n or stages < 2 or (warp_specialized and block_m != 128)):
        raise ValueError(f"config {chosen}: BLOCK_M must be 16 rows a warp and divide S ({S}), BLOCK_N divide S; "
                         f"num_stages at least 2; the two-warpgroup schedules take BLOCK_M 128 (8 warps)")
    if out is not None and (out.shape != q.shape or out.dtype != q.dtype or not out.is_contiguous()):
        raise ValueError("out must be contiguous and match q in shape and dtype")
    o = out if out is not None else torch.empty_like(q)
    dtype = _GL_DTYPES[q.dtype]
    descs = []
    q_rows = 64 if warp_specialized else block_m  # each consumer warpgroup loads and stores its own 64 rows
    for t, rows in ((q, q_rows), (k, block_n), (v, block_n), (o, q_rows)):
        layout = _shared_layout(rows, D, dtype)
        descs.append(TensorDescriptor.from_tensor(t.view(B * H * S, D), [rows, D], layout))
    qk_scale = 1.4426950408889634 / math.sqrt(D)  # log2(e) / sqrt(D): exp2 of scaled scores
    if warp_specialized:
        _attn_fwd_ws[(S // block_m, B * H)](*descs, qk_scale, S, HEAD_DIM=D, CAUSAL=causal, BLOCK_M=block_m,
                                            BLOCK_N=block_n, STAGES=stages, PINGPONG=schedule == "pingpong",
                                            LOADER=schedule == "two_warpgroups_loader", num_warps=4)
        return o
    _attn_fwd_pipelined[(S // block_m, B * H)](*descs, qk_scale, S, HEAD_DIM=D, CAUSAL=causal, BLOCK_M=block_m,
                                               BLOCK_N=block_n, STAGES=stages, LOOKAHEAD=schedule == "lookahead",
                                               num_warps=warps)
    return o


def signature(head_dim: int, block_m: int, block_n: int, dtype: Any = gl.bfloat16) -> dict[str, str]:
    """The kernel's argument types for compiling it without tensors (perftests/support/gluon_build.py, the lab)."""
    types = {}
    for name, rows in (("q_desc", block_m), ("k_desc", block_n), ("v_desc", block_n), ("o_desc", block_m)):
        layout = _shared_layout(rows, head_dim, dtype)
        types[name] = f"tensordesc<{dtype}[{rows},{head_dim}],{layout!r}>"
    return {**types, "qk_scale": "fp32", "S": "i32"}
