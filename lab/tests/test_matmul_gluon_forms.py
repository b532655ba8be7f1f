"""lab/matmul_gluon_forms.py: every form of the Gluon fp8 matmul computes _scaled_mm's product at the shapes the
suite's edge-shape test uses (GPU, Hopper; on the CPU the forms are compiled by test_gluon_variants_build.py), and the
launcher refuses a persistent grid without the loader."""

from __future__ import annotations

import pytest
import torch

from perftests.support import gluon_build
from perftests.support.matmul import fp8_operands, scaled_mm
from perftests.support.tolerance import reduction_atol
from perftests.test_triton_matmul import GLUON_EDGE_SHAPES


@pytest.mark.parametrize("M, N, K", GLUON_EDGE_SHAPES, ids=lambda v: str(v))
def test_every_form_computes_the_product(device: str, M: int, N: int, K: int) -> None:
    if reason := gluon_build.not_on_hopper(device, "lab/tests/test_gluon_variants_build.py"):
        pytest.skip(reason)
    from lab import matmul_gluon_forms

    x8, w8, sx, sw = fp8_operands(device, M, N, K, 0)
    expected = scaled_mm(x8, w8, sx, sw)
    for name, form in matmul_gluon_forms.forms().items():
        out = torch.full((M, N), float("nan"), device=device, dtype=torch.bfloat16)
        matmul_gluon_forms.fp8_matmul(x8, w8, sx, sw, out=out, **form)
        torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=reduction_atol(expected, K), msg=lambda m, name=name: f"{name}: {m}")
    with pytest.raises(ValueError, match="needs the loader"):
        matmul_gluon_forms.fp8_matmul(x8, w8, sx, sw, loader=False, persistent=True)
