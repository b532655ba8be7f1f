"""The matmul cases' operands, per-tensor e4m3 quantization and torch._scaled_mm references, shared by
test_triton_matmul.py and lab/graph_experiment.py."""

from __future__ import annotations

import torch

from perftests.support.inputs import generator

FP8_MAX = 448.0  # largest finite e4m3fn value


def operands(
    device: str, dtype: torch.dtype, M: int, N: int, K: int, g: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) and w (N, K), w scaled by 1/sqrt(K) so that outputs stay near unit size whatever K is; drawn from
    g (an input set's generator; by default set 0's)."""
    g = generator(device, 0) if g is None else g
    x = torch.randn(M, K, generator=g, device=device, dtype=dtype)
    w = (torch.randn(N, K, generator=g, device=device) / K**0.5).to(dtype)
    return x, w


def fp8_operands(device: str, M: int, N: int, K: int, seed: int = 0, bf16: bool = False) -> tuple[torch.Tensor, ...]:
    """Input set `seed` of the fp8 cases: (x8, w8, sx, sw), operands() in fp32 quantized per tensor to e4m3; with
    bf16=True also (xb, wb), the same operands unquantized in bf16 (the precision-change case's reference)."""
    x, w = operands(device, torch.float32, M, N, K, generator(device, seed))
    (x8, sx), (w8, sw) = quantize_e4m3(x), quantize_e4m3(w)
    return (x8, w8, sx, sw, x.to(torch.bfloat16), w.to(torch.bfloat16)) if bf16 else (x8, w8, sx, sw)


def quantize_e4m3(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor scaling: scale = amax / 448, q = t / scale in e4m3 (t ~= q * scale)."""
    scale = (t.abs().amax().float() / FP8_MAX).clamp(min=1e-12)
    return (t / scale).to(torch.float8_e4m3fn), scale


def scaled_mm(x8: torch.Tensor, w8: torch.Tensor, sx: torch.Tensor, sw: torch.Tensor) -> torch.Tensor:
    """The vendor's fp8 GEMM, its accumulator promoted to fp32 (torch._scaled_mm's default)."""
    return torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16)


def fp8_reference(x8: torch.Tensor, w8: torch.Tensor, sx: torch.Tensor, sw: torch.Tensor) -> torch.Tensor:
    """The vendor's product (scaled_mm) at any shape: torch._scaled_mm refuses K or N not a multiple of 16, so there
    the operands are zero-padded up to one (zero products add nothing to a sum) and the result cut back to N columns.
    The vendor's product, not the exact one: Hopper's fp8 tensor cores add within a K tile at less than fp32's
    precision, as every kernel using them does."""
    M, K = x8.shape
    N = w8.shape[0]
    if K % 16 == 0 and N % 16 == 0:
        return scaled_mm(x8, w8, sx, sw)
    Kp, Np = -(-K // 16) * 16, -(-N // 16) * 16
    xp = torch.zeros(M, Kp, dtype=x8.dtype, device=x8.device)
    wp = torch.zeros(Np, Kp, dtype=w8.dtype, device=w8.device)
    xp[:, :K].copy_(x8)
    wp[:N, :K].copy_(w8)
    return scaled_mm(xp, wp, sx, sw)[:, :N].contiguous()


def scaled_mm_fast(x8: torch.Tensor, w8: torch.Tensor, sx: torch.Tensor, sw: torch.Tensor) -> torch.Tensor:
    """The vendor's fp8 GEMM in its fast-accumulation mode (Hopper's reduced-precision accumulator over all of K)."""
    return torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16, use_fast_accum=True)
