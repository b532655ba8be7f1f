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
from perftests.support.elementwise import DTYPE_IDS, DTYPES, SCALE, inputs, sides, traffic

pytestmark = pytest.mark.triton

def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """torch.add as a Python function, for torch.compile."""
    return x + y


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_vector_add(perf, device: str, dtype: torch.dtype) -> None:
    make = lambda seed: inputs(device, dtype, seed)  # noqa: E731
    x, y = make(0)
    out = torch.full_like(x, float("nan"))  # poisoned: an element the kernel skips fails the check
    vector_add(x, y, out=out)
    perf.assert_close(out, torch.add(x, y))
    reference, optimized = sides("vector_add")
    perf.compare(reference, optimized, bytes=traffic(x), inputs=make)
    compare_with_compiled(perf, device, add, optimized, make, bytes=traffic(x))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_add_relu_scale(perf, device: str, dtype: torch.dtype) -> None:
    make = lambda seed: inputs(device, dtype, seed)  # noqa: E731
    x, y = make(0)
    out = torch.full_like(x, float("nan"))
    add_relu_scale(x, y, SCALE, out=out)
    expected = add_relu_scale_eager(x, y, SCALE)
    assert bool((expected == 0).any()) and bool((expected > 0).any()), "inputs must exercise both sides of the ReLU"
    perf.assert_close(out, expected)
    reference, optimized = sides("add_relu_scale")
    perf.compare(reference, optimized, bytes=traffic(x), inputs=make)
    compare_with_compiled(perf, device, add_relu_scale_eager, optimized, make, fixed=(SCALE,), bytes=traffic(x))


def test_compiled_reference_times_no_choice_on_the_device() -> None:
    """The vs_compile reference is torch.compile with inductor's deterministic mode and its pointwise autotuning
    held (no candidate timed on the device, so every process builds the same reference;
    perftests/support/compiled.py), built once per function. inductor's config refuses a name it does not know, so
    this fails if either setting goes away or is renamed."""
    from torch._inductor import config

    from perftests.support import compiled as support

    with config.patch(support.OPTIONS):
        assert config.deterministic is True
        assert config.triton.autotune_pointwise is False
    built = support.compiled(add)
    assert support.compiled(add) is built
