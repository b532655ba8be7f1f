"""FlexAttention, compiled: score mods and block-sparse masks, one small factory each, against eager attention with
the scores and mask materialized, and against SDPA where SDPA can express the same function.

Flops are counted with the block mask's sparsity (the blocks FlexAttention skips do no work): 4 * B * H * S^2 * D
* (1 - sparsity). Each mask or score mod is named, so results name it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from perftests.support.inputs import generator
from perftests.support.tolerance import intermediate_rounding_atol, reduction_atol

pytestmark = pytest.mark.compile

WINDOW = 256
DOCUMENTS = 4
SOFTCAP = 20.0


def causal_mask(b, h, q, kv):
    return q >= kv


def sliding_window_mask(b, h, q, kv):
    return (q >= kv) & (q - kv <= WINDOW)


def document_mask_for(doc_ids: torch.Tensor) -> Callable:
    def document_mask(b, h, q, kv):
        return (doc_ids[q] == doc_ids[kv]) & (q >= kv)

    return document_mask


def alibi_for(slopes: torch.Tensor) -> Callable:
    def alibi(score, b, h, q, kv):
        return score + slopes[h] * (kv - q)

    return alibi


def softcap(score, b, h, q, kv):
    return SOFTCAP * torch.tanh(score / SOFTCAP)


def shapes(device: str) -> tuple[int, int, int, int, torch.dtype]:
    return (4, 16, 2048, 64, torch.bfloat16) if device == "cuda" else (1, 2, 256, 32, torch.float32)


def dense(mask_fn: Callable | None, S: int, device: str) -> torch.Tensor | None:
    if mask_fn is None:
        return None
    idx = torch.arange(S, device=device)
    return mask_fn(0, 0, idx[:, None], idx[None, :])


def eager_attention(q, k, v, mask: torch.Tensor | None, bias: torch.Tensor | None, cap: float | None, wide: bool):
    """Scores materialized; wide=True computes them in fp32 (the accurate reference for the correctness check)."""
    dtype = q.dtype
    if wide:
        q, k, v = q.float(), k.float(), v.float()
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if bias is not None:
        scores = scores + bias
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores.float(), dim=-1).to(v.dtype) @ v).to(dtype)


CASES = ["causal", "sliding_window", "document", "alibi_causal", "softcap_causal"]


@pytest.mark.parametrize("case", CASES)
def test_flex_attention(perf, device: str, case: str) -> None:
    B, H, S, D, dtype = shapes(device)

    def make(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        g = generator(device, seed)
        return tuple(torch.randn(B, H, S, D, generator=g, device=device, dtype=dtype) for _ in range(3))

    q, k, v = make(0)
    # Document boundaries drawn from a fixed generator: the block sparsity, and so the flops, stay the same each run.
    doc_ids = torch.sort(torch.randint(0, DOCUMENTS, (S,), generator=torch.Generator().manual_seed(0))).values.to(device)
    slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / H) for i in range(H)], device=device)
    mask_fn = {"sliding_window": sliding_window_mask, "document": document_mask_for(doc_ids)}.get(case, causal_mask)
    score_mod = {"alibi_causal": alibi_for(slopes), "softcap_causal": softcap}.get(case)
    block_mask = create_block_mask(mask_fn, None, None, S, S, device=device)
    flex = torch.compile(flex_attention, dynamic=False)
    # Each side is a function of (q, k, v), timed on rotating input sets; the masks and the score mod's tensors are
    # the case's own, the same for every set.
    run_flex = lambda q, k, v: flex(q, k, v, score_mod=score_mod, block_mask=block_mask)  # noqa: E731

    mask = dense(mask_fn, S, device)
    idx = torch.arange(S, device=device)
    bias = slopes[:, None, None] * (idx[None, None, :] - idx[None, :, None]) if case == "alibi_causal" else None
    cap = SOFTCAP if case == "softcap_causal" else None
    expected = eager_attention(q, k, v, mask, bias, cap, wide=True)
    # 16-bit P before the PV product (GPU), and in any dtype an S-term sum taken in another order (online softmax).
    tol = dict(rtol=1.6e-2 if dtype == torch.bfloat16 else 1e-5,
               atol=intermediate_rounding_atol(expected, dtype, factor=2.0) + reduction_atol(expected, S))
    perf.assert_close(run_flex(q, k, v), expected, **tol)

    density = 1.0 - float(block_mask.sparsity()) / 100.0
    work: dict[str, Any] = dict(flops=4.0 * B * H * S * S * D * density, flops_dtype="bf16" if dtype == torch.bfloat16 else None)
    perf.compare(lambda q, k, v: eager_attention(q, k, v, mask, bias, cap, wide=False), run_flex, inputs=make,
                 name="vs_eager_materialized", check=False, **work)
    if case == "causal":
        sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    elif cap is None:  # a boolean mask, or an additive bias with the causal mask folded in
        attn_mask = mask if bias is None else bias.to(dtype).masked_fill(~mask, float("-inf"))
        sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # noqa: E731
    else:
        return  # soft-capping is not expressible in SDPA
    perf.compare(sdpa, run_flex, inputs=make, name="vs_sdpa", **tol, **work)
