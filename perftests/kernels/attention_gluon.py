"""Flash-attention forward for Hopper in Gluon, with the softmax overlapped with the tensor cores.

The Triton kernel (attention.py) waits for each key block's scores and then runs that block's softmax with no MMA
in flight: Triton leaves a warpgroup MMA in flight only when its result feeds the same MMA's accumulator
(lab/codegen_probe.py attention shows it). Gluon states the schedule instead of asking a pipeliner for it, so this
kernel runs each block's softmax under an MMA of the same warpgroup, FlashAttention-3's intra-warpgroup overlap. Key
block j, in program order (the MMAs named after "in flight" are running):
    issue S[j] = q k[j]^T; issue PV[j-1] = acc + p[j-1] v[j-1]     in flight: S[j], PV[j-1]
    wait for S[j]                                                   in flight: PV[j-1]
    softmax of S[j] -> p[j], alpha[j]     (CUDA cores, under PV[j-1])
    wait for PV[j-1]; acc *= alpha[j]; refill the slots S[j] and PV[j-1] read
The accumulator is rescaled after PV[j-1] has added into it: acc = alpha[j] (acc + p[j-1] v[j-1]), the same sum.
No MMA stays in flight over the loop's back edge: written that way (FlashAttention-3's full schedule, the softmax
under both MMAs), ptxas serializes every MMA of the loop (notes C7514/C7515: lab/codegen_probe.py attention-gluon),
which undoes the overlap. K and V come by TMA into rings of STAGES slots, each refilled as soon as the MMA that read
it has retired.

Two forms of that schedule, chosen per head dim (CHOICE): "pv_under", one partition of BLOCK_M rows; and at
D = 128 "two_warpgroups_loader": 128-row blocks as two consumer warpgroups (warp_specialize), each the schedule on its
64 rows, both reading one K and one V ring that a one-warp loader partition fills (FlashAttention-3's producer and
consumers). The other schedules they were measured against are lab/attention_gluon_schedules.py's, built from this
module's blocks, which are public for it (load_block, row_block, mma_layouts, store_rows, softmax, issue_scores,
issue_pv, rescaled, pipelined_start and pipelined_finish, consumer_rows, consumer_state, last_pv, ws_consumer,
ws_loader, ws_allocate, the aggregates and KERNELS); the kernels carry nothing only the lab needs. The measurements,
docs/results/vendor-gap.md.

Same layout as attention.flash_attention: q, k, v (B, H, S, D) contiguous, seen as (B * H * S, D). Gluon has no
interpreter (and does not compile under TRITON_INTERPRET=1): on a machine without a GPU the kernel is compiled for
sm_90 in a subprocess (perftests/test_triton_attention.py) but never run.
"""

# No `from __future__ import annotations`: Triton's aggregates check each field against its annotation's class.

import functools
import math
from typing import Any

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from .gluon_common import CONSUMER_REGS, LOADER_REGS, Ring, aggregate, ring_phase, ring_slot

# The kernel's own choice by (head dim, causal): a schedule and its tile (BLOCK_M, BLOCK_N, num_warps, num_stages),
# 16 rows of q a warp (a warpgroup's MMA covers 64 rows), num_stages the K and V rings' slots: the fastest of every
# tile and schedule the vendor-gap probe timed against cuDNN's SDPA (docs/results/vendor-gap.md).
CHOICE = {(64, False): ("pv_under", (64, 128, 4, 2)), (64, True): ("pv_under", (64, 128, 4, 2)),
          (128, False): ("two_warpgroups_loader", (128, 128, 8, 2)),
          (128, True): ("two_warpgroups_loader", (128, 128, 8, 2))}
WARPGROUP_ROWS = 64  # rows of q a consumer warpgroup of the two-warpgroup form computes (4 warps of 16)
_WARPGROUP_ROWS = gl.constexpr(WARPGROUP_ROWS)  # the same, for the kernels
LOG2E = 1.4426950408889634  # exp2 of scores scaled by log2(e) / sqrt(D)


def choice(head_dim: int, causal: bool) -> tuple[str, dict[str, int]]:
    """The kernel's own schedule and tile for a head dim, as the lab's flash_attention takes them (schedule=,
    config=)."""
    schedule, tile = CHOICE[(head_dim, causal)]
    return schedule, dict(zip(("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"), tile))


@gluon.jit
def load_block(desc, smem, bars, row, slot, pred):
    """One (BLOCK_N, D) tile by TMA into ring slot `slot`, signalling bars[slot] when its bytes have landed."""
    bar = bars.index(slot)
    mbarrier.expect(bar, desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(desc, [row, 0], bar, smem.index(slot), pred=pred)


@gluon.jit
def row_block(S, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
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
def mma_layouts(warps, block_n, head_dim):
    """The warpgroup MMA layouts of the scores (rows, BLOCK_N) and of the output (rows, HEAD_DIM), warps stacked
    along the rows (16 rows a warp), K 16 an instruction (16-bit operands), and p's operand layout for the p v MMA
    from registers."""
    s_layout = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps, 1], instr_shape=[16, block_n, 16])
    o_layout = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps, 1], instr_shape=[16, head_dim, 16])
    return s_layout, o_layout, gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)


@gluon.jit
def store_rows(acc, l_i, tile, o_desc, row, row_o: gl.constexpr):
    """acc / l_i in the output's dtype through `tile` (a q tile every MMA reading it has retired) to o's rows."""
    out = acc / gl.convert_layout(l_i, row_o)[:, None]
    tile.store(out.to(o_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [row, 0], tile)
    tma.store_wait(pendings=0)


@gluon.jit
def softmax(s, m_i, l_i, qk_scale, m0, start_n, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
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
def issue_scores(q_tile, k_smem, slot, s_zero):
    """S = q k^T against the key block in ring slot `slot`, issued (s_zero: the result's layout; use_acc=False)."""
    return warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)


@gluon.jit
def issue_pv(p16, v_smem, slot, acc):
    """acc + p v against the value block in ring slot `slot`, issued."""
    return warpgroup_mma(p16, v_smem.index(slot), acc, is_async=True)


@gluon.jit
def rescaled(acc, alpha, p, dtype: gl.constexpr, row_o: gl.constexpr, p_layout: gl.constexpr):
    """acc rescaled by alpha (after the p v MMA it was waited for) and p as the next p v MMA's 16-bit operand."""
    acc = acc * gl.convert_layout(alpha, row_o)[:, None]
    return acc, gl.convert_layout(p.to(dtype), p_layout)


# ---------------------------------------------------------------- pv_under: one partition of BLOCK_M rows

@aggregate
class Pipelined:
    """The one-partition kernel's program: descriptors, its q tile and the K and V rings (ready barriers only: the
    warpgroups that read a slot refill it), its rows, its shape (the MMAs' layouts follow from it: mma_layouts;
    Triton 3.6's aggregates cannot hold layouts)."""

    q_desc: tma.tensor_descriptor
    k_desc: tma.tensor_descriptor
    v_desc: tma.tensor_descriptor
    o_desc: tma.tensor_descriptor
    q_smem: gl.shared_memory_descriptor
    k_smem: gl.shared_memory_descriptor
    v_smem: gl.shared_memory_descriptor
    q_bar: gl.shared_memory_descriptor
    k_bars: gl.shared_memory_descriptor
    v_bars: gl.shared_memory_descriptor
    qk_scale: gl.tensor
    row0: gl.tensor
    m0: gl.tensor
    n_blocks: gl.tensor
    HEAD_DIM: gl.constexpr
    CAUSAL: gl.constexpr
    BLOCK_M: gl.constexpr
    BLOCK_N: gl.constexpr
    STAGES: gl.constexpr
    num_warps: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, descs, smem, bars, qk_scale, rows, HEAD_DIM, CAUSAL, BLOCK_M, BLOCK_N, STAGES, num_warps):
        self.q_desc, self.k_desc, self.v_desc, self.o_desc = descs
        self.q_smem, self.k_smem, self.v_smem = smem
        self.q_bar, self.k_bars, self.v_bars = bars
        self.qk_scale = qk_scale
        self.row0, self.m0, self.n_blocks = rows
        self.HEAD_DIM = gl.constexpr(HEAD_DIM)
        self.CAUSAL = gl.constexpr(CAUSAL)
        self.BLOCK_M = gl.constexpr(BLOCK_M)
        self.BLOCK_N = gl.constexpr(BLOCK_N)
        self.STAGES = gl.constexpr(STAGES)
        self.num_warps = gl.constexpr(num_warps)


@gluon.jit
def pipelined_start(q_desc, k_desc, v_desc, o_desc, qk_scale, S, HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr,
                     BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    """Everything before the key loop: the program's rows, shared memory and barriers, q and the first STAGES K and
    V blocks by TMA, the running state, and S[0] (retired, its K slot refilled). Returned in the order the names
    were first defined when this was the kernel's own body: a loop carries its values in that order, and the PTX
    follows it."""
    gl.static_assert(STAGES >= 2, "the last block's V is loaded while an earlier block is in the loop")
    dtype: gl.constexpr = q_desc.dtype
    layouts: gl.constexpr = mma_layouts(num_warps, BLOCK_N, HEAD_DIM)
    s_layout: gl.constexpr = layouts[0]  # (named: Triton 3.6 takes a layout argument only from a constexpr name)
    o_layout: gl.constexpr = layouts[1]
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row0, m0, n_blocks = row_block(S, BLOCK_M, BLOCK_N, CAUSAL)

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
        load_block(k_desc, k_smem, k_bars, row0 + i * BLOCK_N, i, i < n_blocks)
        load_block(v_desc, v_smem, v_bars, row0 + i * BLOCK_N, i, i < n_blocks)

    m_i = gl.full([BLOCK_M], -float("inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([BLOCK_M], gl.float32, layout=row_s)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)  # ignored (use_acc=False): a layout

    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_bars.index(0), 0)
    s = issue_scores(q_smem, k_smem, 0, s_zero)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    load_block(k_desc, k_smem, k_bars, row0 + STAGES * BLOCK_N, 0, STAGES < n_blocks)  # S[0] read slot 0
    p = Pipelined((q_desc, k_desc, v_desc, o_desc), (q_smem, k_smem, v_smem), (q_bar, k_bars, v_bars), qk_scale,
                  (row0, m0, n_blocks), HEAD_DIM, CAUSAL, BLOCK_M, BLOCK_N, STAGES, num_warps)
    return p, m_i, l_i, acc, s_zero, s


@gluon.jit
def pipelined_finish(p, p16, acc, l_i, last):
    """After the key loop: the last block's p v, the barriers retired, the rows stored."""
    mbarrier.wait(p.v_bars.index(ring_slot(last, p.STAGES)), ring_phase(last, p.STAGES))
    acc = issue_pv(p16, p.v_smem, ring_slot(last, p.STAGES), acc)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))

    mbarrier.invalidate(p.q_bar)
    for i in gl.static_range(p.STAGES):
        mbarrier.invalidate(p.k_bars.index(i))
        mbarrier.invalidate(p.v_bars.index(i))
    o_layout: gl.constexpr = mma_layouts(p.num_warps, p.BLOCK_N, p.HEAD_DIM)[1]
    store_rows(acc, l_i, p.q_smem, p.o_desc, p.row0 + p.m0, gl.SliceLayout(1, o_layout))


@gluon.jit
def _attn_fwd_pipelined(q_desc, k_desc, v_desc, o_desc, qk_scale, S,
                        HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                        STAGES: gl.constexpr, num_warps: gl.constexpr):
    p, m_i, l_i, acc, s_zero, s = pipelined_start(q_desc, k_desc, v_desc, o_desc, qk_scale, S, HEAD_DIM, CAUSAL,
                                                   BLOCK_M, BLOCK_N, STAGES, num_warps)
    dtype: gl.constexpr = q_desc.dtype
    layouts: gl.constexpr = mma_layouts(num_warps, BLOCK_N, HEAD_DIM)
    s_layout: gl.constexpr = layouts[0]
    p_layout: gl.constexpr = layouts[2]
    row_o: gl.constexpr = gl.SliceLayout(1, layouts[1])
    # Block j's softmax under block j-1's p v (FlashAttention-3's order): the accumulator is rescaled after p v has
    # added into it, acc = alpha[j] (acc + p[j-1] v[j-1]), the same sum.
    pr, alpha, m_i, l_i = softmax(s, m_i, l_i, qk_scale, p.m0, 0, CAUSAL, BLOCK_M, BLOCK_N, s_layout)
    p16 = gl.convert_layout(pr.to(dtype), p_layout)
    for j in range(1, p.n_blocks):
        slot = ring_slot(j, STAGES)
        prev = ring_slot(j - 1, STAGES)
        mbarrier.wait(p.k_bars.index(slot), ring_phase(j, STAGES))
        s = issue_scores(p.q_smem, p.k_smem, slot, s_zero)
        mbarrier.wait(p.v_bars.index(prev), ring_phase(j - 1, STAGES))
        pv = issue_pv(p16, p.v_smem, prev, acc)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))  # S[j] retired; PV[j-1] still running
        pr, alpha, m_i, l_i = softmax(s, m_i, l_i, qk_scale, p.m0, j * BLOCK_N, CAUSAL, BLOCK_M, BLOCK_N, s_layout)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
        load_block(p.k_desc, p.k_smem, p.k_bars, p.row0 + (j + STAGES) * BLOCK_N, slot, j + STAGES < p.n_blocks)
        load_block(p.v_desc, p.v_smem, p.v_bars, p.row0 + (j - 1 + STAGES) * BLOCK_N, prev, j - 1 + STAGES < p.n_blocks)
        acc, p16 = rescaled(acc, alpha, pr, dtype, row_o, p_layout)
    pipelined_finish(p, p16, acc, l_i, p.n_blocks - 1)


# ---------------------------------------------------------------- two_warpgroups_loader: two consumers and a loader

@aggregate
class TwoWarpgroups:
    """What every partition of the two-warpgroup kernel reads: descriptors; a q tile and its barrier per consumer
    warpgroup; the K and V rings (a slot released by both consumers); the scale; the program's rows (its first row
    in the (B*H*S, D) view, its first query row, the key blocks it reads); the shapes."""

    q_desc: tma.tensor_descriptor
    k_desc: tma.tensor_descriptor
    v_desc: tma.tensor_descriptor
    o_desc: tma.tensor_descriptor
    q_smem: gl.shared_memory_descriptor
    k_smem: gl.shared_memory_descriptor
    v_smem: gl.shared_memory_descriptor
    q_bars: gl.shared_memory_descriptor
    k_ring: Ring
    v_ring: Ring
    qk_scale: gl.tensor
    row0: gl.tensor
    m0: gl.tensor
    n_all: gl.tensor
    HEAD_DIM: gl.constexpr
    CAUSAL: gl.constexpr
    BLOCK_N: gl.constexpr
    ROWS: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, descs, smem, q_bars, k_ring, v_ring, qk_scale, rows, HEAD_DIM, CAUSAL, BLOCK_N):
        self.q_desc, self.k_desc, self.v_desc, self.o_desc = descs
        self.q_smem, self.k_smem, self.v_smem = smem
        self.q_bars = q_bars
        self.k_ring, self.v_ring = k_ring, v_ring
        self.qk_scale = qk_scale
        self.row0, self.m0, self.n_all = rows
        self.HEAD_DIM = gl.constexpr(HEAD_DIM)
        self.CAUSAL = gl.constexpr(CAUSAL)
        self.BLOCK_N = gl.constexpr(BLOCK_N)
        self.ROWS = gl.constexpr(WARPGROUP_ROWS)


@gluon.jit
def consumer_rows(p, WG: gl.constexpr):
    """Consumer warpgroup WG's rows: its first query row, the key blocks it reads, its q tile (its load issued)."""
    m0 = p.m0 + p.ROWS * WG
    if p.CAUSAL:
        n_blocks = gl.cdiv(m0 + p.ROWS, p.BLOCK_N)
    else:
        n_blocks = p.n_all
    q_tile = p.q_smem.index(WG)
    q_bar = p.q_bars.index(WG)
    mbarrier.expect(q_bar, p.q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(p.q_desc, [p.row0 + m0, 0], q_bar, q_tile)
    return m0, n_blocks, q_tile, q_bar


@gluon.jit
def consumer_state(p):
    """A consumer's running row maxima and sums, its accumulator, and a zero scores tile (the MMA's layout)."""
    layouts: gl.constexpr = mma_layouts(4, p.BLOCK_N, p.HEAD_DIM)
    s_layout: gl.constexpr = layouts[0]
    o_layout: gl.constexpr = layouts[1]
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    m_i = gl.full([p.ROWS], -float("inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([p.ROWS], gl.float32, layout=row_s)
    acc = gl.zeros([p.ROWS, p.HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([p.ROWS, p.BLOCK_N], gl.float32, layout=s_layout)
    return m_i, l_i, acc, s_zero


@gluon.jit
def last_pv(p, p16, acc, last):
    """A consumer after its key loop: the last block's p v, retired."""
    slot = p.v_ring.wait_ready(last)
    acc = issue_pv(p16, p.v_smem, slot, acc)
    return warpgroup_mma_wait(num_outstanding=0, deps=(acc,))


@gluon.jit
def ws_consumer(p, WG: gl.constexpr):
    """Consumer warpgroup WG: rows [m0 + ROWS WG, m0 + ROWS (WG + 1)) of the program's 2 ROWS, the pv_under
    schedule, each K and V slot released once read (the loader refills it when both consumers have)."""
    dtype: gl.constexpr = p.q_desc.dtype
    layouts: gl.constexpr = mma_layouts(4, p.BLOCK_N, p.HEAD_DIM)
    s_layout: gl.constexpr = layouts[0]
    p_layout: gl.constexpr = layouts[2]
    row_o: gl.constexpr = gl.SliceLayout(1, layouts[1])
    m0, n_blocks, q_tile, q_bar = consumer_rows(p, WG)
    m_i, l_i, acc, s_zero = consumer_state(p)

    mbarrier.wait(q_bar, 0)
    slot = p.k_ring.wait_ready(0)
    s = issue_scores(q_tile, p.k_smem, slot, s_zero)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    p.k_ring.release(slot)
    pr, alpha, m_i, l_i = softmax(s, m_i, l_i, p.qk_scale, m0, 0, p.CAUSAL, p.ROWS, p.BLOCK_N, s_layout)
    p16 = gl.convert_layout(pr.to(dtype), p_layout)
    for j in range(1, n_blocks):
        slot = ring_slot(j, p.k_ring.STAGES)
        prev = ring_slot(j - 1, p.v_ring.STAGES)
        p.k_ring.wait_ready_in(slot, j)
        p.v_ring.wait_ready_in(prev, j - 1)
        s = issue_scores(q_tile, p.k_smem, slot, s_zero)
        pv = issue_pv(p16, p.v_smem, prev, acc)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))
        p.k_ring.release(slot)
        pr, alpha, m_i, l_i = softmax(s, m_i, l_i, p.qk_scale, m0, j * p.BLOCK_N, p.CAUSAL, p.ROWS, p.BLOCK_N, s_layout)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
        p.v_ring.release(prev)
        acc, p16 = rescaled(acc, alpha, pr, dtype, row_o, p_layout)
    acc = last_pv(p, p16, acc, n_blocks - 1)
    store_rows(acc, l_i, q_tile, p.o_desc, p.row0 + m0, row_o)


@gluon.jit
def ws_loader(p):
    """The loader partition (one warp): every K and V block of the program into the rings, a slot refilled once both
    consumer warpgroups have released it."""
    for b in range(p.n_all):
        slot = p.k_ring.wait_empty(b)
        load_block(p.k_desc, p.k_smem, p.k_ring.ready, p.row0 + b * p.BLOCK_N, slot, True)
        slot = p.v_ring.wait_empty(b)
        load_block(p.v_desc, p.v_smem, p.v_ring.ready, p.row0 + b * p.BLOCK_N, slot, True)


@gluon.jit
def ws_allocate(q_desc, k_desc, v_desc, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """Shared memory and barriers of the two-warpgroup kernel: a q tile per consumer, and the K and V rings (ready:
    TMA's bytes; empty: both consumers)."""
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [2, _WARPGROUP_ROWS, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(q_bars.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_empty.index(i), count=2)
    fence_async_shared()
    return (q_smem, k_smem, v_smem), q_bars, Ring(k_ready, k_empty, STAGES), Ring(v_ready, v_empty, STAGES)


@gluon.jit
def _attn_fwd_ws(q_desc, k_desc, v_desc, o_desc, qk_scale, S, HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr,
                 BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    gl.static_assert(BLOCK_M == 2 * _WARPGROUP_ROWS, "two consumer warpgroups")
    gl.static_assert(STAGES >= 2, "the loader fills a slot while the consumers read another")
    rows = row_block(S, BLOCK_M, BLOCK_N, CAUSAL)
    smem, q_bars, k_ring, v_ring = ws_allocate(q_desc, k_desc, v_desc, HEAD_DIM, BLOCK_N, STAGES)
    p = TwoWarpgroups((q_desc, k_desc, v_desc, o_desc), smem, q_bars, k_ring, v_ring, qk_scale, rows, HEAD_DIM, CAUSAL,
                      BLOCK_N)
    # The two consumers (the default partition, and a worker of a warpgroup) and the loader (one warp).
    gl.warp_specialize([(ws_consumer, (p, 0)), (ws_consumer, (p, 1)), (ws_loader, (p,))], [4, 1],
                       [CONSUMER_REGS, LOADER_REGS])


# The kernel of each schedule (flash_attention launches them; the lab's schedules compile and launch them at other
# tiles, lab/attention_gluon_schedules.py).
KERNELS = {"pv_under": _attn_fwd_pipelined, "two_warpgroups_loader": _attn_fwd_ws}

_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


@functools.cache
def _shared_layout(rows: int, head_dim: int, dtype: Any) -> Any:
    """The shared-memory layout of a (rows, head_dim) tile of q, k, v or o, computed once per shape (get_default_for
    costs host time at every launch: docs/results/timing.md)."""
    return gl.NVMMASharedLayout.get_default_for([rows, head_dim], dtype)


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """Refuse what the kernels cannot run (with the reason); the output tensor to write."""
    if not (q.shape == k.shape == v.shape) or q.dim() != 4:
        raise ValueError(f"q, k, v must be (B, H, S, D) of one shape; got {q.shape}, {k.shape}, {v.shape}")
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        raise ValueError("q, k, v must be contiguous")
    if q.dtype not in _GL_DTYPES or not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must be bf16 or fp16, one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if (q.shape[-1], False) not in CHOICE:
        raise ValueError(f"head dim {q.shape[-1]} not supported ({', '.join(sorted({str(d) for d, _ in CHOICE}))})")
    if out is not None and (out.shape != q.shape or out.dtype != q.dtype or not out.is_contiguous()):
        raise ValueError("out must be contiguous and match q in shape and dtype")
    return out if out is not None else torch.empty_like(q)


def descriptors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, q_rows: int, block_n: int) -> list[Any]:
    """TMA descriptors of q, k, v, o seen as (B * H * S, D): q and o by tiles of q_rows, k and v of block_n."""
    B, H, S, D = q.shape
    dtype = _GL_DTYPES[q.dtype]
    return [TensorDescriptor.from_tensor(t.view(B * H * S, D), [rows, D], _shared_layout(rows, D, dtype))
            for t, rows in ((q, q_rows), (k, block_n), (v, block_n), (o, q_rows))]


def qk_scale(head_dim: int) -> float:
    """log2(e) / sqrt(D): the scores' scale, for exp2."""
    return LOG2E / math.sqrt(head_dim)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) [+ causal mask]) v for (B, H, S, D) contiguous 16-bit tensors, on a Hopper GPU, in the
    kernel's own schedule and tile for the head dim and mask (choice()); S a multiple of the tile."""
    o = check_inputs(q, k, v, out)
    B, H, S, D = q.shape
    schedule, tile = choice(D, causal)
    block_m, block_n, warps, stages = (tile[key] for key in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"))
    if S % block_m or S % block_n:
        raise ValueError(f"sequence length {S} must be a multiple of the tile ({block_m} x {block_n})")
    grid = (S // block_m, B * H)
    if schedule == "two_warpgroups_loader":  # each consumer warpgroup loads and stores its own rows
        descs = descriptors(q, k, v, o, WARPGROUP_ROWS, block_n)
        _attn_fwd_ws[grid](*descs, qk_scale(D), S, HEAD_DIM=D, CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n,
                           STAGES=stages, num_warps=4)
    else:
        descs = descriptors(q, k, v, o, block_m, block_n)
        _attn_fwd_pipelined[grid](*descs, qk_scale(D), S, HEAD_DIM=D, CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n,
                                  STAGES=stages, num_warps=warps)
    return o


def signature(head_dim: int, block_m: int, block_n: int, dtype: Any = gl.bfloat16) -> dict[str, str]:
    """The kernel's argument types for compiling it without tensors (perftests/support/gluon_build.py, the lab)."""
    types = {}
    for name, rows in (("q_desc", block_m), ("k_desc", block_n), ("v_desc", block_n), ("o_desc", block_m)):
        layout = _shared_layout(rows, head_dim, dtype)
        types[name] = f"tensordesc<{dtype}[{rows},{head_dim}],{layout!r}>"
    return {**types, "qk_scale": "fp32", "S": "i32"}
