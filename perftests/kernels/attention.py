"""Flash-attention forward in Triton: online softmax over key blocks, scores never leave the chip.

q, k, v: (B, H, S, D) contiguous, seen as (B * H * S, D) matrices through TMA descriptors (tiles never straddle
two heads: S is a multiple of every tile height). Work: 4 * B * H * S^2 * D flops (QK^T and PV), half of it
when causal. The fewest bytes: read q, k, v and write o, 4 * B * H * S * D * itemsize.

The kernel's blocks are public for the lab's variants, which rebuild its loop around them (lab/attention_variants.py):
kernel_configs, row_block_heavy_first, block_scores, causal_mask, softmax_step, accumulate, start_rows, store_rows;
and KERNEL, the autotuned kernel flash_attention launches.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from .common import INTERPRETING


def _set_block_shapes(nargs: dict[str, Any]) -> None:
    d = nargs["HEAD_DIM"]
    nargs["q_desc"].block_shape = [nargs["BLOCK_M"], d]
    nargs["o_desc"].block_shape = [nargs["BLOCK_M"], d]
    nargs["k_desc"].block_shape = [nargs["BLOCK_N"], d]
    nargs["v_desc"].block_shape = [nargs["BLOCK_N"], d]


# (BLOCK_M, BLOCK_N, num_warps, num_stages) on the GPU. One tile, not an autotuner's race: the one the vendor-gap
# sweep timed fastest in every shape of the suite, where a race picked differently from one process to the next
# (docs/results/vendor-gap.md; lab/attention_variants.py holds the candidates).
TILE = (64, 64, 4, 3)
INTERPRETER_TILE = (32, 16, 4, 1)  # small enough for the interpreter's shapes
LOG2E = tl.constexpr(1.4426950408889634)  # 1 / ln 2: the softmax runs in the log2 domain, on exp2


def kernel_configs() -> list[triton.Config]:
    bm, bn, warps, stages = INTERPRETER_TILE if INTERPRETING else TILE
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages, pre_hook=_set_block_shapes)]


@triton.jit
def row_block_heavy_first():
    """This program's row block. Causal row blocks near the end of the sequence have the most key blocks: launched
    first, the short ones fill the last wave instead of the long ones."""
    return tl.num_programs(0) - 1 - tl.program_id(0)


@triton.jit
def block_scores(q, k_desc, row0, start_n):
    """q k^T against the key block at start_n: (BLOCK_M, BLOCK_N) unscaled scores, k by TMA."""
    k = k_desc.load([row0 + start_n, 0])  # (BLOCK_N, D)
    return tl.dot(q, k.T)


@triton.jit
def causal_mask(qk, offs_m, start_n, BLOCK_N: tl.constexpr):
    """Scores of keys after their query set to -inf."""
    return tl.where(offs_m[:, None] >= (start_n + tl.arange(0, BLOCK_N))[None, :], qk, -float("inf"))


@triton.jit
def softmax_step(qk, m_i, l_i, qk_scale):
    """Online softmax of one block of unscaled scores: p, the factor alpha for the running sums, the new row maxima
    and sums. The scale is folded into one fused multiply-add per score, and the row maximum taken on unscaled
    scores (the scale is positive), scaled once a row."""
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    return p, alpha, m_new, l_i * alpha + tl.sum(p, 1)


@triton.jit
def accumulate(acc, p, alpha, v_desc, row0, start_n):
    """acc rescaled by alpha plus p v for the value block at start_n (v by TMA)."""
    v = v_desc.load([row0 + start_n, 0])  # (BLOCK_N, D)
    return tl.dot(p.to(v.dtype), v, acc * alpha[:, None])


@triton.jit
def _attn_inner(acc, l_i, m_i, q, k_desc, v_desc, row0, offs_m, start, stop, qk_scale,
                BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    for start_n in tl.range(start, stop, BLOCK_N):
        qk = block_scores(q, k_desc, row0, start_n)
        if MASKED:
            qk = causal_mask(qk, offs_m, start_n, BLOCK_N)
        p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i, qk_scale)
        acc = accumulate(acc, p, alpha, v_desc, row0, start_n)
    return acc, l_i, m_i


@triton.jit
def start_rows(q_desc, row0, start_m, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    """The row block's q (by TMA) and its running state: row maxima, row sums, the fp32 accumulator."""
    q = q_desc.load([row0 + start_m * BLOCK_M, 0])
    m_i = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    return q, m_i, l_i, acc


@triton.jit
def store_rows(o_desc, acc, l_i, row0, start_m, BLOCK_M: tl.constexpr):
    out = acc / l_i[:, None]
    o_desc.store([row0 + start_m * BLOCK_M, 0], out.to(o_desc.dtype))


# An autotuner of one config runs no race: it applies the config's pre_hook and records best_config, as reports use.
@triton.autotune(configs=kernel_configs(), key=["S", "HEAD_DIM", "CAUSAL"])
@triton.jit
def _attn_fwd_kernel(q_desc, k_desc, v_desc, o_desc, sm_scale, S,
                     HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    if CAUSAL:
        start_m = row_block_heavy_first()
    else:
        start_m = tl.program_id(0)
    row0 = tl.program_id(1) * S  # first row of this (batch, head) in the (B*H*S, D) view
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    q, m_i, l_i, acc = start_rows(q_desc, row0, start_m, BLOCK_M, HEAD_DIM)
    qk_scale = sm_scale * LOG2E
    if CAUSAL:
        # Blocks wholly below the diagonal need no mask; only the diagonal block does.
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_desc, v_desc, row0, offs_m, 0, start_m * BLOCK_M,
                                    qk_scale, BLOCK_N, False)
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_desc, v_desc, row0, offs_m, start_m * BLOCK_M,
                                    (start_m + 1) * BLOCK_M, qk_scale, BLOCK_N, True)
    else:
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_desc, v_desc, row0, offs_m, 0, S, qk_scale, BLOCK_N, False)
    store_rows(o_desc, acc, l_i, row0, start_m, BLOCK_M)


# The autotuned kernel flash_attention launches: what tools read its compiled form from (lab/inspect_kernels.py).
KERNEL = _attn_fwd_kernel

# The largest tile any config uses: S must be a multiple of it (no ragged-edge masks in the kernel).
MAX_BLOCK = 128


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """Refuse what the kernel cannot run (with the reason); the output tensor to write."""
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
    return out if out is not None else torch.empty_like(q)


def descriptors(*tensors: torch.Tensor) -> list[TensorDescriptor]:
    """TMA descriptors of (B, H, S, D) tensors seen as (B * H * S, D), with placeholder block shapes: the config's
    pre_hook sets them."""
    return [TensorDescriptor.from_tensor(t.view(-1, t.shape[-1]), [16, t.shape[-1]]) for t in tensors]


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) [+ causal mask]) v for (B, H, S, D) contiguous tensors, at the kernel's one tile;
    causal row blocks longest first, the softmax scale folded into one multiply-add per score. Its variants (other
    tiles, the switches the vendor-gap probe times) are lab/attention_variants.py's."""
    o = check_inputs(q, k, v, out)
    B, H, S, D = q.shape
    grid = lambda meta: (triton.cdiv(S, meta["BLOCK_M"]), B * H)  # noqa: E731
    _attn_fwd_kernel[grid](*descriptors(q, k, v, o), 1.0 / math.sqrt(D), S, HEAD_DIM=D, CAUSAL=causal)
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
