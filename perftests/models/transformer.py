"""The chapter's small transformer: pre-norm decoder blocks over a token embedding, tied to no framework."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    vocab: int = 10_000
    d_model: int = 512
    heads: int = 8
    layers: int = 6
    d_ff: int = 2048


SMALL_CPU = Config(vocab=512, d_model=64, heads=4, layers=2, d_ff=128)


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
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


def workload(device: str) -> tuple[Config, int, int, torch.dtype]:
    """(config, batch, sequence, dtype): 16 x 1024 tokens in bf16 on the GPU; a toy on the CPU."""
    if device == "cuda":
        return Config(), 16, 1024, torch.bfloat16
    return SMALL_CPU, 2, 32, torch.float32


def compile_time_builder() -> tuple[Transformer, tuple[torch.Tensor]]:
    """For perftests.compile_time: the model and its input on this machine's device."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg, batch, seq, dtype = workload(device)
    model = build(cfg, device, dtype)
    tokens = torch.randint(0, cfg.vocab, (batch, seq), device=device)
    return model, (tokens,)
