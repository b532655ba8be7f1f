"""Row-wise fused Triton kernels (softmax, RMSNorm, LayerNorm) against eager composites and torch's own ops.

Byte ratios (eager composite / fused), counting full-size passes over the (M, N) tensor, for a 16-bit input:
- softmax eager: x.float() (read 1 + write 2 units), amax (2), subtract (4), exp (4), sum (2), divide (4),
  .to() (2 + 1) = 22 units of 16 bits against the fused kernel's 2 (read, write): about 11x;
  for fp32 input: amax 1, subtract 2, exp 2, sum 1, divide 2 = 8 passes against 2: about 4x.
- torch.softmax is a fused kernel itself: about 1.0x is the target.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from perftests.kernels import rowwise
from perftests.support.compiled import compare_with_compiled
from perftests.support.inputs import generator

pytestmark = pytest.mark.triton

DTYPES = [torch.float32, torch.bfloat16]
DTYPE_IDS = ["float32", "bfloat16"]
EPS = 1e-6


def shape(device: str) -> tuple[int, int]:
    # GPU: 8192 x 8192 (256 MiB fp32, 128 MiB bf16: beyond L2). CPU interpreter: a few odd-width rows.
    return (8192, 8192) if device == "cuda" else (7, 1000)


def traffic(x: torch.Tensor, extra: int = 0) -> int:
    """Read x once and write the output once, plus any weight vectors."""
    return 2 * x.numel() * x.element_size() + extra


def rows(device: str, dtype: torch.dtype, seed: int) -> torch.Tensor:
    return torch.randn(shape(device), generator=generator(device, seed), device=device, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_softmax(perf, device: str, dtype: torch.dtype) -> None:
    make = lambda seed: (rows(device, dtype, seed) * 3,)  # noqa: E731
    (x,) = make(0)
    out = torch.full_like(x, float("nan"))
    rowwise.softmax(x, out=out)
    perf.assert_close(out, torch.softmax(x, dim=-1))
    fused = rowwise.softmax
    perf.compare(rowwise.softmax_eager, fused, name="vs_eager", bytes=traffic(x), inputs=make)
    perf.compare(lambda x: torch.softmax(x, dim=-1), fused, name="vs_torch", bytes=traffic(x), inputs=make)
    compare_with_compiled(perf, device, rowwise.softmax_eager, fused, make, bytes=traffic(x))


def norm_inputs(device: str, dtype: torch.dtype, seed: int, bias: bool) -> tuple[torch.Tensor, ...]:
    """Input set `seed` of a norm: rows x, the gain w in [0.5, 1.5), and for LayerNorm x shifted by 1 and a bias b."""
    g = generator(device, seed)
    x = torch.randn(shape(device), generator=g, device=device, dtype=dtype)
    w = torch.rand(x.shape[1], generator=g, device=device, dtype=dtype) + 0.5
    if not bias:
        return x, w
    return x + 1.0, w, torch.randn(x.shape[1], generator=g, device=device, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rms_norm(perf, device: str, dtype: torch.dtype) -> None:
    make = lambda seed: norm_inputs(device, dtype, seed, bias=False)  # noqa: E731
    x, w = make(0)
    out = torch.full_like(x, float("nan"))
    rowwise.rms_norm(x, w, EPS, out=out)
    perf.assert_close(out, F.rms_norm(x, (x.shape[1],), w, EPS))
    fused = lambda x, w: rowwise.rms_norm(x, w, EPS)  # noqa: E731
    nbytes = traffic(x, w.numel() * w.element_size())
    perf.compare(lambda x, w: rowwise.rms_norm_eager(x, w, EPS), fused, name="vs_eager", bytes=nbytes, inputs=make)
    perf.compare(lambda x, w: F.rms_norm(x, (x.shape[1],), w, EPS), fused, name="vs_torch", bytes=nbytes, inputs=make)
    compare_with_compiled(perf, device, rowwise.rms_norm_eager, fused, make, fixed=(EPS,), bytes=nbytes)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_layer_norm(perf, device: str, dtype: torch.dtype) -> None:
    make = lambda seed: norm_inputs(device, dtype, seed, bias=True)  # noqa: E731
    x, w, b = make(0)
    out = torch.full_like(x, float("nan"))
    rowwise.layer_norm(x, w, b, EPS, out=out)
    perf.assert_close(out, F.layer_norm(x, (x.shape[1],), w, b, EPS))
    fused = lambda x, w, b: rowwise.layer_norm(x, w, b, EPS)  # noqa: E731
    nbytes = traffic(x, 2 * w.numel() * w.element_size())
    perf.compare(lambda x, w, b: rowwise.layer_norm_eager(x, w, b, EPS), fused, name="vs_eager", bytes=nbytes, inputs=make)
    perf.compare(lambda x, w, b: F.layer_norm(x, (x.shape[1],), w, b, EPS), fused, name="vs_torch", bytes=nbytes,
                 inputs=make)
    compare_with_compiled(perf, device, rowwise.layer_norm_eager, fused, make, fixed=(EPS,), bytes=nbytes)
