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


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_softmax(perf, device: str, dtype: torch.dtype) -> None:
    x = torch.randn(shape(device), device=device, dtype=dtype) * 3
    out = torch.full_like(x, float("nan"))
    rowwise.softmax(x, out=out)
    perf.assert_close(out, torch.softmax(x, dim=-1))
    fused = lambda: rowwise.softmax(x)  # noqa: E731
    perf.compare(lambda: rowwise.softmax_eager(x), fused, name="vs_eager", bytes=traffic(x))
    perf.compare(lambda: torch.softmax(x, dim=-1), fused, name="vs_torch", bytes=traffic(x))
    compare_with_compiled(perf, device, rowwise.softmax_eager, (x,), fused, bytes=traffic(x))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rms_norm(perf, device: str, dtype: torch.dtype) -> None:
    x = torch.randn(shape(device), device=device, dtype=dtype)
    w = torch.rand(x.shape[1], device=device, dtype=dtype) + 0.5
    out = torch.full_like(x, float("nan"))
    rowwise.rms_norm(x, w, EPS, out=out)
    perf.assert_close(out, F.rms_norm(x, (x.shape[1],), w, EPS))
    fused = lambda: rowwise.rms_norm(x, w, EPS)  # noqa: E731
    nbytes = traffic(x, w.numel() * w.element_size())
    perf.compare(lambda: rowwise.rms_norm_eager(x, w, EPS), fused, name="vs_eager", bytes=nbytes)
    perf.compare(lambda: F.rms_norm(x, (x.shape[1],), w, EPS), fused, name="vs_torch", bytes=nbytes)
    compare_with_compiled(perf, device, rowwise.rms_norm_eager, (x, w, EPS), fused, bytes=nbytes)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_layer_norm(perf, device: str, dtype: torch.dtype) -> None:
    x = torch.randn(shape(device), device=device, dtype=dtype) + 1.0
    w = torch.rand(x.shape[1], device=device, dtype=dtype) + 0.5
    b = torch.randn(x.shape[1], device=device, dtype=dtype)
    out = torch.full_like(x, float("nan"))
    rowwise.layer_norm(x, w, b, EPS, out=out)
    perf.assert_close(out, F.layer_norm(x, (x.shape[1],), w, b, EPS))
    fused = lambda: rowwise.layer_norm(x, w, b, EPS)  # noqa: E731
    nbytes = traffic(x, 2 * w.numel() * w.element_size())
    perf.compare(lambda: rowwise.layer_norm_eager(x, w, b, EPS), fused, name="vs_eager", bytes=nbytes)
    perf.compare(lambda: F.layer_norm(x, (x.shape[1],), w, b, EPS), fused, name="vs_torch", bytes=nbytes)
    compare_with_compiled(perf, device, rowwise.layer_norm_eager, (x, w, b, EPS), fused, bytes=nbytes)
