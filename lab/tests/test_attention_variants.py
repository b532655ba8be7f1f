"""lab/attention_variants.py: the flash kernel's variants compute the suite kernel's attention (through the Triton
interpreter on the CPU), and the exp2 polynomial stays within a bf16 rounding."""

from __future__ import annotations

import pytest
import torch

from lab import attention_variants as variants
from lab.tests.interpreter_gaps import runtime_loop_bound_gap
from perftests.kernels import attention as attn
from perftests.support.inputs import generator


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_experiments_compute_the_same_attention(device: str, causal: bool) -> None:
    """The variants of the flash kernel (without the folded scale or the longest-first launch order, with warp
    specialization, ...) compute what the suite's kernel does, here through the interpreter; on the GPU the probe
    checks each variant against SDPA before timing it."""
    if device == "cuda":
        pytest.skip("on the GPU lab/vendor_gap_probe.py checks the variants beside their timing")
    if (gap := runtime_loop_bound_gap()) is not None:
        pytest.skip(f"{gap}; on the GPU lab/vendor_gap_probe.py checks the variants beside their timing")
    g = generator(device, 0)
    q, k, v = (torch.randn(1, 2, 96, 32, generator=g, device=device, dtype=torch.float16) for _ in range(3))
    default = attn.flash_attention(q, k, v, causal)  # the suite's kernel
    for variant in ({"fold": False}, {"heavy_first": False}, {"warp_specialize": True},
                    {"fold": False, "heavy_first": False}, {"exp2_split": True}, {"lazy_rescale": True},
                    {"lazy_rescale": True, "fold": False}):
        got = variants.flash_attention(q, k, v, causal, **variant)
        # fp16 outputs; the folded form rounds the scaled score once instead of twice.
        torch.testing.assert_close(got, default, rtol=1e-3, atol=1e-3, msg=lambda m, variant=variant: f"{variant}: {m}")
    # Keys whose scores grow along the sequence: a row's maximum jumps by more than 2^8 in later key blocks, so
    # lazy_rescale's rescaling branch runs mid-loop as well as in the first block.
    ramp = torch.linspace(1.0, 40.0, k.shape[2], device=device, dtype=k.dtype)[:, None]
    for grown in (q, k * ramp, v), (q, k * ramp.flip(0), v):
        torch.testing.assert_close(variants.flash_attention(*grown, causal, lazy_rescale=True),
                                   attn.flash_attention(*grown, causal), rtol=1e-3, atol=1e-3)
    # The timing diagnostic computes something else, as it says; the clock registers exist only on the GPU.
    assert not torch.allclose(variants.flash_attention(q, k, v, causal, softmax=False).float(), default.float(), atol=0.1)
    with pytest.raises(ValueError, match="trace needs the GPU"):
        variants.flash_attention(q, k, v, causal, trace=torch.zeros(3 * 2 * 3, dtype=torch.int64, device=device))
    # config= runs another tile, its pre_hook setting the TMA block shapes; a tile the causal split cannot use is
    # refused.
    got = variants.flash_attention(q, k, v, causal, config={"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1})
    torch.testing.assert_close(got, default, rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match="multiple of BLOCK_N"):
        variants.flash_attention(q, k, v, causal, config={"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1})


def test_exp2_on_fma_units_is_within_a_bf16_rounding(device: str) -> None:
    """The exp2_split experiment's 2^x by polynomial (attention_variants._exp2_fma): within 2.2e-4 of 2^x on the range the
    softmax uses (x <= 0; a bf16 rounding is 2.0e-3), never negative, near 0 below 2^-126 and at -inf (masked)."""
    import triton
    import triton.language as tl

    @triton.jit
    def apply(x_ptr, y_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(y_ptr + offs, variants._exp2_fma(tl.load(x_ptr + offs)))

    edges = torch.tensor([-0.5, -1.5, -2.5, -1e-30, 0.0, -126.0, -126.5, -200.0, -float("inf")])
    x = torch.cat([torch.linspace(-126.0, 0.0, 4096 - len(edges)), edges]).to(device)
    y = torch.empty_like(x)
    apply[(1,)](x, y, N=x.numel())
    exact = torch.exp2(x.double())
    normal = x >= -126.0
    assert float(((y.double() - exact) / exact)[normal].abs().max()) < 2.2e-4
    assert bool((y >= 0).all()) and float(y[~normal].max()) < 1.2e-38
