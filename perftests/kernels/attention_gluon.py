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
lookahead=True (an experiment) runs block j's softmax under S[j+1] instead, and waits for both MMAs at the end of
each block. Neither leaves an MMA in flight over the loop's back edge: written that way (FlashAttention-3's full
schedule, the softmax under both MMAs), ptxas serializes every MMA of the loop (C7514/C7515, tools/codegen_probe.py
attention-gluon), which undoes the overlap. K and V come by TMA into rings of num_stages slots, each refilled as soon
as the MMA that read it has retired.

Same layout as attention.flash_attention: q, k, v (B, H, S, D) contiguous, seen as (B * H * S, D). Gluon has no
interpreter (and does not compile under TRITON_INTERPRET=1): on a machine without a GPU the kernel is compiled for
sm_90 in a subprocess (perftests/test_triton_attention.py) but never run.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# (BLOCK_M, BLOCK_N, num_warps, num_stages) by head dim: 16 rows of q a warp (a warpgroup's MMA covers 64 rows);
# num_stages is the K and V rings' slots. TILES: the candidates tools/vendor_gap_probe.py --gluon times.
TILE = {64: (64, 128, 4, 2), 128: (64, 64, 4, 2)}
TILES = [(64, 64, 4, 2), (64, 64, 4, 3), (128, 64, 8, 2), (128, 128, 8, 2), (64, 128, 4, 2), (64, 32, 4, 2), (64, 32, 4, 3)]


def tile(head_dim: int) -> dict[str, int]:
    """The kernel's own tile for a head dim, as config= takes it."""
    return dict(zip(("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"), TILE[head_dim]))


@gluon.jit
def _load_block(desc, smem, bars, row, slot, pred):
    """One (BLOCK_N, D) tile by TMA into ring slot `slot`, signalling bars[slot] when its bytes have landed."""
    bar = bars.index(slot)
    mbarrier.expect(bar, desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(desc, [row, 0], bar, smem.index(slot), pred=pred)


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
    # The MMA layouts: scores (BLOCK_M, BLOCK_N) and output (BLOCK_M, HEAD_DIM), warps stacked along the rows; p
    # goes into the p v MMA from registers, in its operand layout.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    if CAUSAL:  # the row blocks with the most key blocks first: the short ones fill the last wave
        start_m = gl.num_programs(0) - 1 - gl.program_id(0)
    else:
        start_m = gl.program_id(0)
    row0 = gl.program_id(1) * S  # first row of this (batch, head) in the (B*H*S, D) view
    m0 = start_m * BLOCK_M
    if CAUSAL:  # key blocks up to the diagonal; the last may reach past it (BLOCK_N > BLOCK_M), masked
        n_blocks = gl.cdiv(m0 + BLOCK_M, BLOCK_N)
    else:
        n_blocks = S // BLOCK_N

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
    out = acc / gl.convert_layout(l_i, row_o)[:, None]
    q_smem.store(out.to(dtype))  # q's tile is free: every MMA that read it has retired
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [row0 + m0, 0], q_smem)
    tma.store_wait(pendings=0)


_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, out: torch.Tensor | None = None,
                    *, config: dict[str, int] | None = None, lookahead: bool = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) [+ causal mask]) v for (B, H, S, D) contiguous 16-bit tensors, on a Hopper GPU.
    config: BLOCK_M, BLOCK_N, num_warps, num_stages (the K and V ring's slots), as attention.flash_attention takes
    it; tile(D) when None. lookahead=True: block j's softmax under block j+1's q k^T (an experiment); False, the
    kernel's schedule: under block j-1's p v."""
    if not (q.shape == k.shape == v.shape) or q.dim() != 4:
        raise ValueError(f"q, k, v must be (B, H, S, D) of one shape; got {q.shape}, {k.shape}, {v.shape}")
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        raise ValueError("q, k, v must be contiguous")
    if q.dtype not in _GL_DTYPES or not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must be bf16 or fp16, one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    B, H, S, D = q.shape
    if D not in TILE:
        raise ValueError(f"head dim {D} not supported ({', '.join(map(str, TILE))})")
    chosen = config or tile(D)
    block_m, block_n, warps, stages = (chosen.get(key) for key in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"))
    if (not all(isinstance(x, int) for x in (block_m, block_n, warps, stages)) or block_m != 16 * warps
            or S % block_m or S % block_n or stages < 2):
        raise ValueError(f"config {chosen}: BLOCK_M must be 16 rows a warp and divide S ({S}), BLOCK_N divide S; "
                         f"num_stages at least 2")
    if out is not None and (out.shape != q.shape or out.dtype != q.dtype or not out.is_contiguous()):
        raise ValueError("out must be contiguous and match q in shape and dtype")
    o = out if out is not None else torch.empty_like(q)
    dtype = _GL_DTYPES[q.dtype]
    descs = []
    for t, rows in ((q, block_m), (k, block_n), (v, block_n), (o, block_m)):
        layout = gl.NVMMASharedLayout.get_default_for([rows, D], dtype)
        descs.append(TensorDescriptor.from_tensor(t.view(B * H * S, D), [rows, D], layout))
    qk_scale = 1.4426950408889634 / math.sqrt(D)  # log2(e) / sqrt(D): exp2 of scaled scores
    _attn_fwd_pipelined[(S // block_m, B * H)](*descs, qk_scale, S, HEAD_DIM=D, CAUSAL=causal, BLOCK_M=block_m,
                                               BLOCK_N=block_n, STAGES=stages, LOOKAHEAD=lookahead, num_warps=warps)
    return o


def signature(head_dim: int, block_m: int, block_n: int, dtype: Any = gl.bfloat16) -> dict[str, str]:
    """The kernel's argument types for compiling it without tensors (tests, tools/codegen_probe.py)."""
    types = {}
    for name, rows in (("q_desc", block_m), ("k_desc", block_n), ("v_desc", block_n), ("o_desc", block_m)):
        layout = gl.NVMMASharedLayout.get_default_for([rows, head_dim], dtype)
        types[name] = f"tensordesc<{dtype}[{rows},{head_dim}],{layout!r}>"
    return {**types, "qk_scale": "fp32", "S": "i32"}
