"""Statistics: medians, robust spread and the paired bootstrap interval."""

from __future__ import annotations

import random

import pytest

from speedgate.stats import bootstrap_ratio, ratio_of_medians, robust_cv


def test_ratio_of_medians_ignores_outliers() -> None:
    assert ratio_of_medians([2.0, 2.0, 2.0, 50.0], [1.0, 1.0, 1.0, 1.0]) == 2.0


def test_robust_cv_of_constant_samples_is_zero() -> None:
    assert robust_cv([3.0] * 10) == 0.0
    assert robust_cv([1.0]) == 0.0


def test_robust_cv_tracks_spread() -> None:
    rng = random.Random(1)
    samples = [rng.gauss(100.0, 5.0) for _ in range(5000)]
    assert robust_cv(samples) == pytest.approx(0.05, rel=0.1)


def test_interval_contains_true_ratio_and_narrows_with_rounds() -> None:
    rng = random.Random(7)
    ref = [rng.gauss(2.0, 0.1) for _ in range(400)]
    opt = [rng.gauss(1.0, 0.05) for _ in range(400)]
    small = bootstrap_ratio(ref[:20], opt[:20])
    large = bootstrap_ratio(ref, opt)
    assert large.low <= 2.0 <= large.high
    assert large.rel_halfwidth < small.rel_halfwidth
    assert large.low <= large.ratio <= large.high


def test_pairing_cancels_drift_shared_by_both_sides() -> None:
    # Both sides slow down together over the run (thermal drift): the ratio stays 2, and pairing keeps
    # the interval tight although each side alone spreads by a factor of two.
    ref = [2.0 * (1 + i / 100) for i in range(100)]
    opt = [1.0 * (1 + i / 100) for i in range(100)]
    est = bootstrap_ratio(ref, opt)
    assert est.ratio == pytest.approx(2.0, rel=1e-9)
    assert est.rel_halfwidth < 0.01


def test_bootstrap_is_deterministic() -> None:
    ref, opt = [2.0, 2.1, 1.9, 2.05] * 5, [1.0, 1.1, 0.95, 1.02] * 5
    assert bootstrap_ratio(ref, opt) == bootstrap_ratio(ref, opt)


@pytest.mark.parametrize(
    ("ref", "opt", "message"),
    [([1.0], [1.0, 2.0], "differ in length"), ([], [], "no samples")],
)
def test_bad_samples_are_refused(ref: list[float], opt: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bootstrap_ratio(ref, opt)
