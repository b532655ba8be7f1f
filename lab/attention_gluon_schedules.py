"""The Gluon flash kernel's other schedules and tiles (the vendor-gap probe's sides): the suite's two schedules
(perftests/kernels/attention_gluon.py: pv_under, two_warpgroups_loader) at any candidate tile, and the schedules they
were measured against: "lookahead" (block j's softmax under block j+1's q k^T, both MMAs waited for at the end of each
block), "two_warpgroups" (the two consumer warpgroups without the loader partition: warpgroup 0 refills a slot once
both have released it) and "pingpong" (the two take turns issuing their MMAs, FlashAttention-3's ping-pong, through an
mbarrier token; with or without the loader). Built from the suite's public blocks (its start and finish of the
one-partition kernel, its program aggregate, rings, softmax and MMA steps, its own consumer and loader partitions
where a schedule has them, its kernels); the loops are the lab's own: the turn-taking and the refills sit between the
suite loop's waits and MMAs, where a hook would be a switch on the suite's kernel again. So is the two-warpgroup
allocation, which keeps the `turn` barrier pair the ping-pong schedule passes its turn through: the suite's kernel
no longer allocates what only this schedule uses. What each schedule measured is on the vendor-gap results page
(docs/results/vendor-gap.md).
"""

# No `from __future__ import annotations`: the kernels module's aggregates are used here.

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, warpgroup_mma_wait

from lab.matmul_gluon_forms import TWO_CONSUMER_REGS
from perftests.kernels import attention_gluon as ag
from perftests.kernels.gluon_common import CONSUMER_REGS, LOADER_REGS, Ring, ring_phase, ring_slot

# The warp-specialized schedules (two consumer warpgroups on 128-row blocks) and all of them.
WARP_SPECIALIZED_SCHEDULES = ("two_warpgroups", "pingpong", "two_warpgroups_loader")
SCHEDULES = ("pv_under", "lookahead", *WARP_SPECIALIZED_SCHEDULES)
# The one-partition schedules' candidate tiles (BLOCK_M, BLOCK_N, num_warps, num_stages; 8 warps: two warpgroups in
# lockstep); the warp-specialized ones take BLOCK_M 128 (the probe times both lists).
TILES = [(64, 64, 4, 2), (64, 64, 4, 3), (128, 64, 8, 2), (128, 128, 8, 2), (64, 128, 4, 2), (64, 32, 4, 2), (64, 32, 4, 3)]
WARP_SPECIALIZED_TILES = [(128, 64, 8, 2), (128, 64, 8, 3), (128, 128, 8, 2)]
_WARPGROUP_ROWS = gl.constexpr(ag.WARPGROUP_ROWS)  # for the kernels


@gluon.jit
def _ws_allocate_with_turn(q_desc, k_desc, v_desc, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """The suite's ag.ws_allocate with `turn`, two barriers the ping-pong schedule passes its turn through, allocated
    and initialized where they stood when the schedules were the suite kernel's switches: every schedule (PINGPONG or
    not) compiles as it did then, so their measurements and lab/ptx_diff.py's comparison keep their meaning."""
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [2, _WARPGROUP_ROWS, HEAD_DIM], q_desc.layout)
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
    return (q_smem, k_smem, v_smem), q_bars, turn, Ring(k_ready, k_empty, STAGES), Ring(v_ready, v_empty, STAGES)


@gluon.jit
def _attn_fwd_lookahead(q_desc, k_desc, v_desc, o_desc, qk_scale, S,
                        HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                        STAGES: gl.constexpr, num_warps: gl.constexpr):
    p, m_i, l_i, acc, s_zero, s = ag.pipelined_start(q_desc, k_desc, v_desc, o_desc, qk_scale, S, HEAD_DIM, CAUSAL,
                                                      BLOCK_M, BLOCK_N, STAGES, num_warps)
    dtype: gl.constexpr = q_desc.dtype
    layouts: gl.constexpr = ag.mma_layouts(num_warps, BLOCK_N, HEAD_DIM)
    s_layout: gl.constexpr = layouts[0]
    p_layout: gl.constexpr = layouts[2]
    row_o: gl.constexpr = gl.SliceLayout(1, layouts[1])
    # Block j's softmax under block j+1's q k^T. The p v MMA is waited for within its iteration: left in flight over
    # the back edge, ptxas serializes every MMA of the loop (C7514, checked on the CPU).
    for j in range(0, p.n_blocks - 1):
        slot = ring_slot(j, STAGES)
        nxt = ring_slot(j + 1, STAGES)
        mbarrier.wait(p.k_bars.index(nxt), ring_phase(j + 1, STAGES))
        s_next = ag.issue_scores(p.q_smem, p.k_smem, nxt, s_zero)
        pr, alpha, m_i, l_i = ag.softmax(s, m_i, l_i, qk_scale, p.m0, j * BLOCK_N, CAUSAL, BLOCK_M, BLOCK_N, s_layout)
        acc = acc * gl.convert_layout(alpha, row_o)[:, None]
        mbarrier.wait(p.v_bars.index(slot), ring_phase(j, STAGES))
        pv = ag.issue_pv(gl.convert_layout(pr.to(dtype), p_layout), p.v_smem, slot, acc)
        s, acc = warpgroup_mma_wait(num_outstanding=0, deps=(s_next, pv))
        ag.load_block(p.k_desc, p.k_smem, p.k_bars, p.row0 + (j + 1 + STAGES) * BLOCK_N, nxt, j + 1 + STAGES < p.n_blocks)
        ag.load_block(p.v_desc, p.v_smem, p.v_bars, p.row0 + (j + STAGES) * BLOCK_N, slot, j + STAGES < p.n_blocks)
    last = p.n_blocks - 1
    pr, alpha, m_i, l_i = ag.softmax(s, m_i, l_i, qk_scale, p.m0, last * BLOCK_N, CAUSAL, BLOCK_M, BLOCK_N, s_layout)
    acc = acc * gl.convert_layout(alpha, row_o)[:, None]
    p16 = gl.convert_layout(pr.to(dtype), p_layout)
    ag.pipelined_finish(p, p16, acc, l_i, last)


@gluon.jit
def _schedule_consumer(p, turn, WG: gl.constexpr, PINGPONG: gl.constexpr, LOADER: gl.constexpr):
    """The suite's consumer (ag.ws_consumer) with PINGPONG (the two warpgroups take turns issuing their MMAs: a
    token passed through `turn`, so one's softmax runs while the other's MMAs do) and without the loader partition
    (LOADER False: warpgroup 0 issues every load, refilling a slot once both have released it)."""
    LOADS: gl.constexpr = WG == 0 and not LOADER
    STAGES: gl.constexpr = p.k_ring.STAGES
    dtype: gl.constexpr = p.q_desc.dtype
    layouts: gl.constexpr = ag.mma_layouts(4, p.BLOCK_N, p.HEAD_DIM)
    s_layout: gl.constexpr = layouts[0]
    p_layout: gl.constexpr = layouts[2]
    row_o: gl.constexpr = gl.SliceLayout(1, layouts[1])
    m0, n_blocks, q_tile, q_bar = ag.consumer_rows(p, WG)
    if LOADS:
        for i in gl.static_range(STAGES):
            ag.load_block(p.k_desc, p.k_smem, p.k_ring.ready, p.row0 + i * p.BLOCK_N, i, i < p.n_all)
            ag.load_block(p.v_desc, p.v_smem, p.v_ring.ready, p.row0 + i * p.BLOCK_N, i, i < p.n_all)
    m_i, l_i, acc, s_zero = ag.consumer_state(p)

    mbarrier.wait(q_bar, 0)
    slot = p.k_ring.wait_ready(0)
    if PINGPONG:
        mbarrier.wait(turn.index(WG), 0)
    s = ag.issue_scores(q_tile, p.k_smem, slot, s_zero)
    if PINGPONG:
        mbarrier.arrive(turn.index(1 - WG), count=1)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    p.k_ring.release(slot)
    if LOADS:
        mbarrier.wait(p.k_ring.empty.index(0), 0, pred=STAGES < p.n_all)
        ag.load_block(p.k_desc, p.k_smem, p.k_ring.ready, p.row0 + STAGES * p.BLOCK_N, 0, STAGES < p.n_all)
    pr, alpha, m_i, l_i = ag.softmax(s, m_i, l_i, p.qk_scale, m0, 0, p.CAUSAL, p.ROWS, p.BLOCK_N, s_layout)
    p16 = gl.convert_layout(pr.to(dtype), p_layout)
    for j in range(1, n_blocks):
        slot = ring_slot(j, STAGES)
        prev = ring_slot(j - 1, STAGES)
        p.k_ring.wait_ready_in(slot, j)
        p.v_ring.wait_ready_in(prev, j - 1)
        if PINGPONG:
            mbarrier.wait(turn.index(WG), j & 1)
        s = ag.issue_scores(q_tile, p.k_smem, slot, s_zero)
        pv = ag.issue_pv(p16, p.v_smem, prev, acc)
        if PINGPONG:
            mbarrier.arrive(turn.index(1 - WG), count=1)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))
        p.k_ring.release(slot)
        pr, alpha, m_i, l_i = ag.softmax(s, m_i, l_i, p.qk_scale, m0, j * p.BLOCK_N, p.CAUSAL, p.ROWS, p.BLOCK_N, s_layout)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
        p.v_ring.release(prev)
        if LOADS:  # refill once both warpgroups released the slot: use j's (K) and use j - 1's (V)
            refill_k = j + STAGES < p.n_all
            mbarrier.wait(p.k_ring.empty.index(slot), ring_phase(j, STAGES), pred=refill_k)
            ag.load_block(p.k_desc, p.k_smem, p.k_ring.ready, p.row0 + (j + STAGES) * p.BLOCK_N, slot, refill_k)
            refill_v = j - 1 + STAGES < p.n_all
            mbarrier.wait(p.v_ring.empty.index(prev), ring_phase(j - 1, STAGES), pred=refill_v)
            ag.load_block(p.v_desc, p.v_smem, p.v_ring.ready, p.row0 + (j - 1 + STAGES) * p.BLOCK_N, prev, refill_v)
        acc, p16 = ag.rescaled(acc, alpha, pr, dtype, row_o, p_layout)
    acc = ag.last_pv(p, p16, acc, n_blocks - 1)
    if PINGPONG:  # warpgroup 1 has a key block more past warpgroup 0's diagonal (causal): pass it the turn
        for _ in range(n_blocks, p.n_all):
            mbarrier.arrive(turn.index(1 - WG), count=1)
    ag.store_rows(acc, l_i, q_tile, p.o_desc, p.row0 + m0, row_o)


@gluon.jit
def _attn_fwd_ws_schedule(q_desc, k_desc, v_desc, o_desc, qk_scale, S, HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr,
                          BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, PINGPONG: gl.constexpr,
                          LOADER: gl.constexpr = False):
    gl.static_assert(BLOCK_M == 128, "two consumer warpgroups of 64 rows")
    gl.static_assert(STAGES >= 2, "every K and V block is loaded inside warpgroup 0's loop")
    rows = ag.row_block(S, BLOCK_M, BLOCK_N, CAUSAL)
    smem, q_bars, turn, k_ring, v_ring = _ws_allocate_with_turn(q_desc, k_desc, v_desc, HEAD_DIM, BLOCK_N, STAGES)
    p = ag.TwoWarpgroups((q_desc, k_desc, v_desc, o_desc), smem, q_bars, k_ring, v_ring, qk_scale, rows, HEAD_DIM,
                         CAUSAL, BLOCK_N)
    if PINGPONG:
        mbarrier.arrive(turn.index(0), count=1)  # warpgroup 0 issues first
    if LOADER:
        if PINGPONG:
            gl.warp_specialize([(_schedule_consumer, (p, turn, 0, PINGPONG, LOADER)),
                                (_schedule_consumer, (p, turn, 1, PINGPONG, LOADER)), (ag.ws_loader, (p,))],
                               [4, 1], [CONSUMER_REGS, LOADER_REGS])
        else:
            gl.warp_specialize([(ag.ws_consumer, (p, 0)), (ag.ws_consumer, (p, 1)), (ag.ws_loader, (p,))],
                               [4, 1], [CONSUMER_REGS, LOADER_REGS])
    else:
        gl.warp_specialize([(_schedule_consumer, (p, turn, 0, PINGPONG, LOADER)),
                            (_schedule_consumer, (p, turn, 1, PINGPONG, LOADER))], [4], [TWO_CONSUMER_REGS])


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, out: torch.Tensor | None = None,
                    *, config: dict[str, int] | None = None, schedule: str | None = None) -> torch.Tensor:
    """The suite's ag.flash_attention at any schedule and tile (defaults: the suite's choice() for the head dim and
    mask). schedule: "pv_under" and "two_warpgroups_loader" (the suite's), "lookahead", "two_warpgroups", "pingpong"
    (see the module's docstring); config: BLOCK_M, BLOCK_N, num_warps, num_stages (the K and V rings' slots), as
    attention.flash_attention takes it; the two-warpgroup schedules take BLOCK_M 128 and num_warps 8."""
    o = ag.check_inputs(q, k, v, out)
    B, H, S, D = q.shape
    own_schedule, own_tile = ag.choice(D, causal)
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
    grid = (S // block_m, B * H)
    shape = dict(HEAD_DIM=D, CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages)
    if warp_specialized:  # each consumer warpgroup loads and stores its own rows
        descs = ag.descriptors(q, k, v, o, ag.WARPGROUP_ROWS, block_n)
        _attn_fwd_ws_schedule[grid](*descs, ag.qk_scale(D), S, **shape, PINGPONG=schedule == "pingpong",
                                    LOADER=schedule == "two_warpgroups_loader", num_warps=4)
        return o
    descs = ag.descriptors(q, k, v, o, block_m, block_n)
    kernel = _attn_fwd_lookahead if schedule == "lookahead" else ag.KERNELS["pv_under"]
    kernel[grid](*descs, ag.qk_scale(D), S, **shape, num_warps=warps)
    return o
