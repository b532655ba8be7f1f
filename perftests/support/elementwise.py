"""The elementwise cases' workload (dtypes, inputs, reference/optimized pairs), shared by test_triton_elementwise.py
and lab/stability.py, which times the same callables with triton.testing.do_bench."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from perftests.kernels.elementwise import (
    add_relu_scale,
    add_relu_scale_eager,
    vector_add,
)
from perftests.support.inputs import generator

SCALE = 0.5
DTYPES = [torch.float32, torch.bfloat16]
DTYPE_IDS = [str(d).removeprefix("torch.") for d in DTYPES]


def numel(device: str) -> int:
    # GPU: 2**26 elements (256 MiB per fp32 tensor, far beyond a 50 MiB L2). CPU interpreter: small and
    # odd-sized, so the masked tail is exercised.
    return 2**26 if device == "cuda" else 3 * 1024 + 17


def inputs(device: str, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Input set `seed`: x and y, standard normal."""
    n = numel(device)
    g = generator(device, seed)
    return torch.randn(n, generator=g, device=device, dtype=dtype), torch.randn(n, generator=g, device=device, dtype=dtype)


def sides(kind: str) -> tuple[Callable[[torch.Tensor, torch.Tensor], Any], Callable[[torch.Tensor, torch.Tensor], Any]]:
    """(reference, optimized) as functions of (x, y), for 'vector_add' or 'add_relu_scale'."""
    if kind == "vector_add":
        return torch.add, vector_add
    if kind == "add_relu_scale":
        return (lambda x, y: add_relu_scale_eager(x, y, SCALE)), (lambda x, y: add_relu_scale(x, y, SCALE))
    raise ValueError(f"unknown elementwise kind {kind!r}; choose 'vector_add' or 'add_relu_scale'")


def traffic(x: torch.Tensor) -> int:
    """Bytes the optimized side must move: read x and y, write out."""
    return 3 * x.numel() * x.element_size()


def pair(kind: str, x: torch.Tensor, y: torch.Tensor) -> tuple[Callable[[], Any], Callable[[], Any], int]:
    """(reference, optimized, bytes) as zero-argument callables on x and y: what lab/stability.py times with
    do_bench beside the gate, which calls sides() on rotated input sets."""
    reference, optimized = sides(kind)
    return (lambda: reference(x, y)), (lambda: optimized(x, y)), traffic(x)
