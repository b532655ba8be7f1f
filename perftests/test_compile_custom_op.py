"""A hand-written Triton kernel inside a compiled model: the RMSNorm of a pre-norm MLP block as a PyTorch
operator, compiled with fullgraph=True (no graph break), against the same block whose RMSNorm the compiler
generates itself from the eager composite.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from perftests.kernels import ops
from perftests.kernels.rowwise import rms_norm_eager
from perftests.support.inputs import generator
from perftests.support.tolerance import intermediate_rounding_atol

pytestmark = pytest.mark.compile

EPS = 1e-6


class NormMLP(nn.Module):
    def __init__(self, width: int, norm: str) -> None:
        super().__init__()
        self.norm = norm
        self.gain = nn.Parameter(torch.rand(width) + 0.5)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.norm == "eager":
            h = rms_norm_eager(x, self.gain, EPS)
        elif self.norm == "custom_op":
            h = ops.rms_norm_op(x, self.gain, EPS)
        else:
            h = ops.rms_norm_triton_op(x, self.gain, EPS)
        return x + self.down(F.gelu(self.up(h)))


KINDS = ["custom_op", "triton_op"]


@pytest.mark.parametrize("kind", KINDS)
def test_triton_kernel_in_compiled_model(perf, device: str, kind: str) -> None:
    if kind == "triton_op" and not ops.HAS_TRITON_OP:
        pytest.skip("triton_op traces the kernel launch: GPU only (the interpreter's kernels cannot be traced)")
    width, rows, dtype = (4096, 8192, torch.bfloat16) if device == "cuda" else (64, 16, torch.float32)
    reference = NormMLP(width, "eager").to(device=device, dtype=dtype).eval()
    with_kernel = NormMLP(width, kind).to(device=device, dtype=dtype).eval()
    with_kernel.load_state_dict(reference.state_dict())
    # The weights are the blocks'; an input set is a batch of activations (the same shape every seed: no recompile).
    make = lambda seed: (torch.randn(rows, width, generator=generator(device, seed), device=device, dtype=dtype),)  # noqa: E731
    (x,) = make(0)

    torch._dynamo.reset()
    explanation = torch._dynamo.explain(with_kernel)(x)
    assert explanation.graph_break_count == 0, f"{kind}: {explanation.graph_break_count} graph breaks"
    perf.metric("graph_breaks", explanation.graph_break_count, tolerance=0.0)

    compiled_reference = torch.compile(reference, fullgraph=True)
    compiled_kernel = torch.compile(with_kernel, fullgraph=True)

    def run(model: nn.Module):
        def call(x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                return model(x)

        return call

    with torch.no_grad():
        expected = reference(x)
    # The two norms round differently (the kernel once at its store, eager's composite after widening); the
    # GEMMs carry that through: a few 16-bit roundoffs at the output's scale.
    tol = dict(rtol=1.6e-2 if dtype == torch.bfloat16 else 1.3e-6, atol=intermediate_rounding_atol(expected, dtype, factor=8.0))
    perf.assert_close(run(compiled_kernel)(x), expected, **tol)
    perf.compare(run(compiled_reference), run(compiled_kernel), name="vs_compiled_eager_norm", **tol, inputs=make)
