"""Elementwise Triton kernels against eager PyTorch: the vector-add control case and fused add + ReLU + scale."""

from __future__ import annotations

import pytest
import torch

from perftests.kernels.elementwise import (
    add_relu_scale,
    add_relu_scale_eager,
    vector_add,
)
from perftests.support.compiled import compare_with_compiled
from perftests.support.elementwise import DTYPE_IDS, DTYPES, SCALE, inputs, pair

pytestmark = pytest.mark.triton

def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """torch.add as a Python function, for torch.compile."""
    return x + y


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_vector_add(perf, device: str, dtype: torch.dtype) -> None:
    x, y = inputs(device, dtype)
    out = torch.full_like(x, float("nan"))  # poisoned: an element the kernel skips fails the check
    vector_add(x, y, out=out)
    perf.assert_close(out, torch.add(x, y))
    reference, optimized, traffic = pair("vector_add", x, y)
    perf.compare(reference, optimized, bytes=traffic)
    compare_with_compiled(perf, device, add, (x, y), optimized, bytes=traffic)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_add_relu_scale(perf, device: str, dtype: torch.dtype) -> None:
    x, y = inputs(device, dtype)
    out = torch.full_like(x, float("nan"))
    add_relu_scale(x, y, SCALE, out=out)
    expected = add_relu_scale_eager(x, y, SCALE)
    assert bool((expected == 0).any()) and bool((expected > 0).any()), "inputs must exercise both sides of the ReLU"
    perf.assert_close(out, expected)
    reference, optimized, traffic = pair("add_relu_scale", x, y)
    perf.compare(reference, optimized, bytes=traffic)
    compare_with_compiled(perf, device, add_relu_scale_eager, (x, y, SCALE), optimized, bytes=traffic)
