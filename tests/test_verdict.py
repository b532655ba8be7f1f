"""The gate's decision from an interval, a baseline and a tolerance."""

from __future__ import annotations

import pytest

from speedgate.stats import RatioEstimate
from speedgate.verdict import Verdict, judge


def est(ratio: float, low: float, high: float) -> RatioEstimate:
    return RatioEstimate(ratio, low, high, 0.95, 50)


@pytest.mark.parametrize(
    ("estimate", "verdict"),
    [
        (est(2.0, 1.98, 2.02), Verdict.PASS),
        (est(1.5, 1.48, 1.52), Verdict.REGRESSED),  # whole interval below 2.0 * 0.9 = 1.8
        (est(1.75, 1.6, 1.85), Verdict.PASS),  # point below the floor, interval straddles it: noise
        (est(2.5, 2.45, 2.55), Verdict.IMPROVED),  # whole interval above 2.2
        (est(2.25, 2.15, 2.3), Verdict.PASS),
    ],
)
def test_judge(estimate: RatioEstimate, verdict: Verdict) -> None:
    assert judge(estimate, 2.0, 0.10, file_found=True).verdict is verdict


def test_regression_message_names_the_numbers() -> None:
    j = judge(est(1.5, 1.48, 1.52), 2.0, 0.10, file_found=True)
    assert "1.500x" in j.note and "2.000x" in j.note and "10%" in j.note and "1.480-1.520" in j.note
    assert "1.800x" in j.note
    assert j.change == pytest.approx(-0.25)


def test_straddling_point_estimate_is_noted() -> None:
    j = judge(est(1.75, 1.6, 1.85), 2.0, 0.10, file_found=True)
    assert "within noise" in j.note


def test_missing_entry_and_file() -> None:
    assert judge(est(1, 1, 1), None, 0.1, file_found=True).verdict is Verdict.NEW
    assert judge(est(1, 1, 1), None, 0.1, file_found=False).verdict is Verdict.NO_BASELINE_FILE


@pytest.mark.parametrize(
    ("verdict", "strict", "fails"),
    [
        (Verdict.REGRESSED, False, True),
        (Verdict.IMPROVED, False, False),
        (Verdict.IMPROVED, True, True),
        (Verdict.NEW, True, True),
        (Verdict.NO_BASELINE_FILE, False, False),
        (Verdict.NO_BASELINE_FILE, True, True),
        (Verdict.PASS, True, False),
    ],
)
def test_fails(verdict: Verdict, strict: bool, fails: bool) -> None:
    from speedgate.verdict import Judgement

    assert Judgement(verdict, None, None, None, "").fails(strict) is fails
