"""The chapter's small transformer: pre-norm decoder blocks over a token embedding, tied to no framework."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from perftests.support.inputs import generator


@dataclass(frozen=True)
class Config:
    vocab: int = 10_000
    d_model: int = 512
    heads: int = 8
    layers: int = 6
    d_ff: int = 2048


SMALL_CPU = Config(vocab=512, d_model=64, heads=4, layers=2, d_ff=128)
# About 1.04 billion parameters: 18 blocks of 50.3M (4 d^2 + 2 d d_ff, plus biases and norms), embedding and head
# of 65.5M each; a Llama-1B-like width with this model's blocks.
LARGE = Config(vocab=32_000, d_model=2048, heads=16, layers=18, d_ff=8192)
LARGE_CPU = Config(vocab=1024, d_model=128, heads=4, layers=4, d_ff=512)


def manual_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention written out: the (S, S) scores and probabilities are materialized in memory."""
    s = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.attention = "sdpa"  # or "manual" (the optimization ladder's first rungs)
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.attention == "manual":
            att = manual_attention(q, k, v)
        else:
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Transformer(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build(cfg: Config, device: str, dtype: torch.dtype, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(cfg).to(device=device, dtype=dtype).eval()


def parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def linear_flops(model: nn.Module, tokens: int) -> float:
    """2 * tokens * weights of every linear layer: the forward's GEMM flops, attention's own matmuls aside."""
    return 2.0 * tokens * sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


def workload(device: str) -> tuple[Config, int, int, torch.dtype]:
    """(config, batch, sequence, dtype): 16 x 1024 tokens in bf16 on the GPU; a toy on the CPU."""
    if device == "cuda":
        return Config(), 16, 1024, torch.bfloat16
    return SMALL_CPU, 2, 32, torch.float32


def token_ids(cfg: Config, batch: int, lengths: Sequence[int], device: str, seed: int) -> tuple[torch.Tensor, ...]:
    """Input set `seed` of token ids: one (batch, length) int64 tensor per length, each id in [0, vocab), drawn from
    the set's generator. Every seed gives the same shapes (a compiled model does not recompile) and valid ids (a
    refill in place keeps them valid), and another seed other ids."""
    g = generator(device, seed)
    return tuple(torch.randint(0, cfg.vocab, (batch, length), generator=g, device=device) for length in lengths)


def compile_time_builder() -> tuple[Transformer, tuple[torch.Tensor]]:
    """For perftests.support.compile_time.cold_and_warm: the model and its input on this machine's device."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg, batch, seq, dtype = workload(device)
    model = build(cfg, device, dtype)
    tokens = torch.randint(0, cfg.vocab, (batch, seq), device=device)
    return model, (tokens,)
