"""FP8 linear layers through torch._scaled_mm: the optimization ladder's last rung.

The chapter used NVIDIA Transformer Engine for this step; it is not installed on our machines (and not on PyPI
as a wheel for the GPU's stack), so this is the same arithmetic written on PyTorch's own FP8 GEMM:
e4m3 operands with row-wise scales (one per output feature for the weight, quantized once; one per token for the
activation, computed on every call from its absolute maximum, "dynamic scaling"), fp32 accumulation inside the
GEMM, bf16 output, bias added after. Transformer Engine keeps a history of amax values for delayed scaling and
fuses the quantization into the preceding LayerNorm; under torch.compile the quantization here is fused by inductor.
"""

from __future__ import annotations

import torch
from torch import nn

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # largest finite e4m3fn value
# Relative rounding error of e4m3 (3 mantissa bits): at most half a unit in the last place, 2^-4.
E4M3_UNIT = 2.0**-4


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x / scale as e4m3, scale) with one fp32 scale per row, chosen so each row's largest |x| maps to 448."""
    amax = x.detach().abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12)
    scale = amax / E4M3_MAX
    return (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), scale


class FP8Linear(nn.Module):
    """y = x @ w.T + b with both operands in e4m3 (row-wise scales) and a bf16 result."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        out_features, in_features = linear.weight.shape
        if in_features % 16 or out_features % 16:
            raise ValueError(f"_scaled_mm needs dimensions divisible by 16, got {in_features} -> {out_features}")
        w8, w_scale = quantize_rows(linear.weight.detach())
        self.register_buffer("w8", w8)
        self.register_buffer("w_scale", w_scale.reshape(1, out_features))
        bias = linear.bias.detach().to(torch.bfloat16) if linear.bias is not None else None
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x8, x_scale = quantize_rows(x.reshape(-1, x.shape[-1]))
        y = torch._scaled_mm(x8, self.w8.t(), scale_a=x_scale, scale_b=self.w_scale, out_dtype=torch.bfloat16)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, y.shape[-1])


def fp8_linears(module: nn.Module) -> int:
    """Replace every nn.Linear below module, in place, by an FP8Linear; returns how many were replaced."""
    replaced = 0
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            setattr(module, name, FP8Linear(child))
            replaced += 1
        else:
            replaced += fp8_linears(child)
    return replaced
