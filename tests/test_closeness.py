"""assert_close: dtype-aware tolerances, non-finite values, shapes, dtypes, containers."""

from __future__ import annotations

import math

import pytest
import torch

from speedgate.closeness import assert_close


def test_equal_tensors_pass_and_report_zero_error() -> None:
    x = torch.randn(64, 64)
    result = assert_close(x, x.clone())
    assert result.max_abs_error == 0 and result.rel_error == 0 and result.elements == 64 * 64


def test_float32_tolerance_is_tight() -> None:
    x = torch.randn(1000, dtype=torch.float32) + 3.0
    assert_close(x * (1 + 1e-7), x)
    with pytest.raises(AssertionError, match="elements exceed"):
        assert_close(x * (1 + 1e-4), x)


def test_bfloat16_gets_its_own_default() -> None:
    x = torch.randn(1000).to(torch.bfloat16) + 3
    y = (x.float() * (1 + 2 ** -8)).to(torch.bfloat16)  # one bf16 ulp-ish
    assert_close(y, x)
    with pytest.raises(AssertionError):
        assert_close((x.float() * 1.05).to(torch.bfloat16), x)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_actual_fails(bad: float) -> None:
    x = torch.ones(10)
    y = x.clone()
    y[3] = bad
    with pytest.raises(AssertionError, match=r"actual holds .* \(first at index \(3,\)\)"):
        assert_close(y, x)


def test_nan_in_both_still_fails() -> None:
    x = torch.full((4,), float("nan"))
    with pytest.raises(AssertionError, match="NaN"):
        assert_close(x, x.clone())


def test_shape_and_dtype_mismatch() -> None:
    with pytest.raises(AssertionError, match="shape mismatch"):
        assert_close(torch.ones(3), torch.ones(4))
    with pytest.raises(AssertionError, match="dtype mismatch"):
        assert_close(torch.ones(3, dtype=torch.float16), torch.ones(3))


def test_integers_must_match_exactly() -> None:
    a = torch.arange(10)
    b = a.clone()
    b[7] += 1
    with pytest.raises(AssertionError, match="1 of 10 int64 elements differ"):
        assert_close(b, a)


def test_explicit_tolerances_and_message_reports_relative_error() -> None:
    x = torch.ones(100)
    assert_close(x * 1.01, x, rtol=0.02, atol=0.0)
    with pytest.raises(AssertionError, match="relative L2 error 0.01"):
        assert_close(x * 1.01, x, rtol=0.001, atol=0.0)
    with pytest.raises(ValueError, match="both rtol and atol"):
        assert_close(x, x, rtol=0.1)


def test_nested_containers_and_numbers() -> None:
    x = torch.randn(5)
    assert_close((x, [1, 2.0], {"k": 3.0}), (x.clone(), [1, 2.0], {"k": 3.0}))
    with pytest.raises(AssertionError, match=r"at \[1\]\[1\]"):
        assert_close((x, [1, 2.5]), (x, [1, 2.0]))
    with pytest.raises(AssertionError, match="lengths differ"):
        assert_close([1, 2], [1])
    with pytest.raises(AssertionError, match="not finite"):
        assert_close(math.nan, 1.0)
    with pytest.raises(AssertionError, match="exact match"):
        assert_close(3, 4)
    with pytest.raises(AssertionError, match="cannot compare"):
        assert_close("a", "a")


def test_rel_l2_bound_is_normwise() -> None:
    x = torch.randn(4096)
    noisy = x + 0.05 * torch.randn(4096)  # about 5% relative L2 error, far beyond any elementwise default
    result = assert_close(noisy, x, rel_l2=0.08)
    assert 0.03 < result.rel_error < 0.08
    with pytest.raises(AssertionError, match=r"relative L2 error 0\.0\d+ exceeds the bound 0\.02"):
        assert_close(noisy, x, rel_l2=0.02)
    with pytest.raises(AssertionError, match="elements exceed"):
        assert_close(noisy, x)


def test_rel_l2_still_checks_nan_shape_and_arguments() -> None:
    x = torch.randn(16)
    y = x.clone()
    y[0] = float("nan")
    with pytest.raises(AssertionError, match="NaN"):
        assert_close(y, x, rel_l2=0.5)
    with pytest.raises(AssertionError, match="shape mismatch"):
        assert_close(x[:8], x, rel_l2=0.5)
    with pytest.raises(ValueError, match="not both"):
        assert_close(x, x, rtol=0.1, atol=0.1, rel_l2=0.5)
    with pytest.raises(ValueError, match="finite and positive"):
        assert_close(x, x, rel_l2=float("nan"))
