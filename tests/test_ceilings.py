"""The roofline floor from measured ceilings (pure arithmetic; measuring needs a GPU)."""

from __future__ import annotations

import pytest

from speedgate.ceilings import Ceilings


def test_memory_bound_floor() -> None:
    c = Ceilings(copy_gbps=3000.0)
    floor, bound = c.floor_ms(None, 3e9, None)
    assert floor == pytest.approx(1.0) and bound == "memory"


def test_compute_bound_floor_needs_a_measured_dtype() -> None:
    c = Ceilings(copy_gbps=3000.0, matmul_tflops={"bf16": 700.0})
    floor, bound = c.floor_ms(1.4e12, 3e6, "bf16")
    assert floor == pytest.approx(2.0) and bound == "compute"
    assert c.floor_ms(1.4e12, None, "fp8") is None  # no fp8 ceiling measured: nothing to compare against
    assert c.floor_ms(None, None, None) is None
