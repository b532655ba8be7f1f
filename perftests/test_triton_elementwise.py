"""Elementwise Triton kernels against eager PyTorch: the vector-add control case and fused add + ReLU + scale."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

from perftests.kernels.elementwise import (
    add_relu_scale,
    add_relu_scale_eager,
    vector_add,
)
from perftests.support.compiled import compare_with_compiled

pytestmark = pytest.mark.triton

SCALE = 0.5
DTYPES = [torch.float32, torch.bfloat16]
DTYPE_IDS = [str(d).removeprefix("torch.") for d in DTYPES]


def numel(device: str) -> int:
    # GPU: 2**26 elements (256 MiB per fp32 tensor, far beyond a 50 MiB L2). CPU interpreter: small and
    # odd-sized, so the masked tail is exercised.
    return 2**26 if device == "cuda" else 3 * 1024 + 17


def inputs(device: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    n = numel(device)
    return torch.randn(n, device=device, dtype=dtype), torch.randn(n, device=device, dtype=dtype)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """torch.add as a Python function, for torch.compile."""
    return x + y


def pair(kind: str, x: torch.Tensor, y: torch.Tensor) -> tuple[Callable[[], Any], Callable[[], Any], int]:
    """(reference, optimized, bytes the optimized side must move) for one kind; shared with tools/stability.py."""
    traffic = 3 * x.numel() * x.element_size()  # read x and y, write out
    if kind == "vector_add":
        return (lambda: torch.add(x, y)), (lambda: vector_add(x, y)), traffic
    if kind == "add_relu_scale":
        return (lambda: add_relu_scale_eager(x, y, SCALE)), (lambda: add_relu_scale(x, y, SCALE)), traffic
    raise ValueError(kind)


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
