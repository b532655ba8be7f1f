"""lab/matmul_variants.py: the persistent matmul's variants compute the suite kernel's product (through the Triton
interpreter on the CPU), and bad switches are refused with their reason."""

from __future__ import annotations

import pytest
import torch

from lab import matmul_variants as variants
from lab.tests.interpreter_gaps import runtime_loop_bound_gap
from perftests.kernels import matmul as mm
from perftests.support.matmul import fp8_operands

CPU_SHAPE = (100, 80, 80)  # M, N, K as the suite's CPU cases: 3 K tiles of 32 at K = 80, the last zero-filled past K


def test_experiments_compute_the_same_product(device: str) -> None:
    """The variants of the persistent kernel (a promotion every 2 or 3 K tiles, warp specialization, the tile loop
    flattened, two programs an SM, a config without the race) compute the product the suite's kernel does. Through the interpreter, whose
    fp8 dot is exact, the split accumulator must match to fp32 roundoff (3 K tiles of 32 at K = 80: a partial group
    and a zero-filled tile past K). On the GPU the probe checks each variant against the exact product before
    timing it."""
    if device == "cuda":
        pytest.skip("on the GPU lab/vendor_gap_probe.py checks the variants beside their timing")
    if (gap := runtime_loop_bound_gap()) is not None:
        pytest.skip(f"{gap}; on the GPU lab/vendor_gap_probe.py checks the variants beside their timing")
    M, N, K = CPU_SHAPE
    x8, w8, sx, sw = fp8_operands(device, M, N, K, 0)
    default = mm.matmul_tma_persistent(x8, w8, scale_x=sx, scale_w=sw)  # the suite's kernel
    for variant in ({"promote_every": 2}, {"promote_every": 3}, {"warp_specialize": True}, {"flatten": True},
                    {"blocks_per_sm": 2}):
        got = variants.matmul_tma_persistent(x8, w8, scale_x=sx, scale_w=sw, **variant)
        # One bf16 rounding apart at most (the fp32 sums are associated differently); a dropped or doubled K tile
        # would be a third of the product off.
        ulp = 2.0**-7 * float(default.float().abs().max())
        torch.testing.assert_close(got.float(), default.float(), rtol=2.0**-7, atol=ulp, msg=lambda m, variant=variant: f"{variant}: {m}")
    with pytest.raises(ValueError, match="promote_every"):
        variants.matmul_tma_persistent(x8, w8, scale_x=sx, scale_w=sw, promote_every=0)
    with pytest.raises(ValueError, match="blocks_per_sm"):
        variants.matmul_tma_persistent(x8, w8, scale_x=sx, scale_w=sw, blocks_per_sm=0)
    # config= runs one tile the autotuner did not pick (its pre_hook setting the TMA block shapes): same product.
    forced = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2, "num_warps": 4, "num_stages": 1}
    got = variants.matmul_tma_persistent(x8, w8, scale_x=sx, scale_w=sw, config=forced)
    torch.testing.assert_close(got.float(), default.float(), rtol=2.0**-7, atol=2.0**-7 * float(default.float().abs().max()))
    with pytest.raises(ValueError, match="GROUP_M"):
        variants.matmul_tma_persistent(x8, w8, scale_x=sx, scale_w=sw, config={"BLOCK_M": 16, "num_warps": 4, "num_stages": 1})
