"""The chapter's fused MLP block: RMSNorm -> Linear -> GELU, with the norm and the activation fused around the GEMM.

Fused: one pass for the per-row RMS statistic, then one GEMM whose epilogue applies rstd and the GELU; the gain
g is folded into the weight when the layer is loaded. Eager writes the normalized x, the GEMM output and the
GELU output: 2 * M * N * itemsize more bytes than the fused path, plus the norm's passes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from perftests.kernels import matmul as mm
from perftests.kernels import mlp
from perftests.kernels.common import best_config
from perftests.kernels.rowwise import rms_norm_eager
from perftests.support.compiled import compare_with_compiled
from perftests.support.inputs import generator
from perftests.support.tolerance import intermediate_rounding_atol

pytestmark = pytest.mark.triton

EPS = 1e-6


def mlp_block_eager(x: torch.Tensor, gain: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.linear(rms_norm_eager(x, gain, EPS), w), approximate="tanh")


def test_fused_mlp_block(perf, hold_blessed, device: str) -> None:
    hold_blessed(mm._matmul_tma_persistent_kernel, "vs_eager")
    if device == "cuda":
        dtype, (M, K, N) = torch.bfloat16, (8192, 4096, 16384)  # tokens, d_model, d_ff
    else:
        dtype, (M, K, N) = torch.float16, (64, 96, 80)
    # The layer's weights are loaded once and shared by every call (gain folded into w at load time, outside
    # both timed sides); the input sets are its activations.
    gain = (torch.rand(K, device=device) + 0.5).to(dtype)
    w = (torch.randn(N, K, device=device) / K**0.5).to(dtype)
    w_folded = mlp.fold_gain(w, gain)
    make = lambda seed: (torch.randn(M, K, generator=generator(device, seed), device=device, dtype=dtype),)  # noqa: E731
    (x,) = make(0)
    eager = lambda x: mlp_block_eager(x, gain, w)  # noqa: E731
    fused = lambda x: mlp.fused_rmsnorm_linear_gelu(x, w_folded, EPS)  # noqa: E731
    expected = eager(x)
    # The sides round different 16-bit operands of the GEMM: eager the normalized x, fused w * g. Each operand
    # is off by up to one roundoff u, so a K-term dot product is off by up to u * sum|x_k w_k| per operand,
    # which for these random unit-scale rows is a few u at the pre-activation's largest magnitude (and
    # |GELU'| <= 1.13). The rounding of the outputs themselves is the dtype's rtol.
    pre = F.linear(rms_norm_eager(x, gain, EPS), w)
    tol = dict(rtol=1.6e-2 if dtype == torch.bfloat16 else 1e-3, atol=intermediate_rounding_atol(pre, dtype, factor=4 * 1.13))
    del pre
    perf.assert_close(fused(x), expected, **tol)
    work = dict(flops=mm.matmul_flops(M, N, K), flops_dtype="bf16" if dtype == torch.bfloat16 else "fp16")
    # Both comparisons' tolerances are calibrated wide. On H100 the held persistent kernel runs at one of two speeds
    # per process, and the evidence keeps both (docs/results/blind-cases.md, "The study on cards that blessed
    # nothing"). On H200 a comparison follows the SM clock each card settles at under its power cap by its sides'
    # elasticities apart: the held tile's cycles rise with the clock, the eager reference's memory-bound kernels' too,
    # cuBLAS's not; the other tile would move the clock from vs_compile to vs_eager (docs/results/gate-study-h200.md,
    # "The fused MLP's tile and the clock"; python -m lab.cycles_probe).
    perf.compare(eager, fused, name="vs_eager", **tol, **work, config=best_config(mm._matmul_tma_persistent_kernel),
                 inputs=make)
    compare_with_compiled(perf, device, mlp_block_eager, fused, make, fixed=(gain, w), **tol, **work)
