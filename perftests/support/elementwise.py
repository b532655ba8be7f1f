"""The elementwise cases' workload (dtypes, inputs, reference/optimized pairs), shared by test_triton_elementwise.py
and tools/stability.py, which times the same callables with triton.testing.do_bench."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from perftests.kernels.elementwise import (
    add_relu_scale,
    add_relu_scale_eager,
    vector_add,
)

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


def pair(kind: str, x: torch.Tensor, y: torch.Tensor) -> tuple[Callable[[], Any], Callable[[], Any], int]:
    """(reference, optimized, bytes the optimized side must move) for 'vector_add' or 'add_relu_scale'."""
    traffic = 3 * x.numel() * x.element_size()  # read x and y, write out
    if kind == "vector_add":
        return (lambda: torch.add(x, y)), (lambda: vector_add(x, y)), traffic
    if kind == "add_relu_scale":
        return (lambda: add_relu_scale_eager(x, y, SCALE)), (lambda: add_relu_scale(x, y, SCALE)), traffic
    raise ValueError(f"unknown elementwise kind {kind!r}; choose 'vector_add' or 'add_relu_scale'")
