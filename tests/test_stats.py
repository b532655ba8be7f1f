"""Statistics: medians, robust spread and the paired bootstrap interval."""

from __future__ import annotations

import math
import os
import random
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from speedgate import stats
from speedgate.stats import (
    RatioEstimate,
    bootstrap_ratio,
    ratio_of_medians,
    robust_cv,
    sample_stats,
)


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


# --- The pure-Python implementations the numpy ones replaced, kept as the oracle for their results. ---


def _old_median(values: Sequence[float]) -> float:
    return statistics.median(values)


def _old_robust_cv(samples: Sequence[float]) -> float:
    if len(samples) < 2:
        return 0.0
    mid = _old_median(samples)
    if mid <= 0:
        return math.inf
    mad = _old_median([abs(x - mid) for x in samples])
    return 1.4826 * mad / mid


def _old_ratio_of_medians(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    den = _old_median(denominator)
    if den <= 0:
        return math.inf
    return _old_median(numerator) / den


def _old_bootstrap_ratio(
    numerator: Sequence[float], denominator: Sequence[float], confidence: float = 0.95, resamples: int = 1000
) -> RatioEstimate:
    n = len(numerator)
    point = _old_ratio_of_medians(numerator, denominator)
    if n == 1:
        return RatioEstimate(point, point, point, confidence, n)
    rng = random.Random(n)  # the old seed * 1_000_003 + n, for seed 0
    indices = range(n)
    ratios = []
    for _ in range(resamples):
        pick = rng.choices(indices, k=n)
        ratios.append(_old_ratio_of_medians([numerator[i] for i in pick], [denominator[i] for i in pick]))
    ratios.sort()
    tail = (1.0 - confidence) / 2.0
    low = ratios[max(0, math.floor(tail * resamples))]
    high = ratios[min(resamples - 1, math.ceil((1.0 - tail) * resamples) - 1)]
    return RatioEstimate(point, min(low, point), max(high, point), confidence, n)


def _old_sample_stats(samples_ms: Sequence[float]) -> dict[str, float | int | str]:
    data = sorted(x / 1e3 for x in samples_ms)
    n = len(data)
    if n == 0:
        return {}
    mean = sum(data) / n
    stddev = math.sqrt(sum((x - mean) ** 2 for x in data) / (n - 1)) if n > 1 else 0.0

    bench = pytest.importorskip("pytest_benchmark.stats").Stats()  # the quartiles are pytest-benchmark's
    for x in data:
        bench.update(x)
    q1, q3 = bench.q1, bench.q3
    iqr = q3 - q1
    low_fence, high_fence = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    iqr_outliers = sum(1 for x in data if x < low_fence or x > high_fence)
    stddev_outliers = sum(1 for x in data if x < mean - stddev or x > mean + stddev)
    return {
        "min": data[0], "max": data[-1], "mean": mean, "stddev": stddev, "median": _old_median(data), "q1": q1,
        "q3": q3, "iqr": iqr, "rounds": n, "iterations": 1, "total": sum(data), "ops": 1.0 / mean if mean > 0 else 0.0,
        "ld15iqr": next(x for x in data if x >= low_fence), "hd15iqr": next(x for x in reversed(data) if x <= high_fence),
        "iqr_outliers": iqr_outliers, "stddev_outliers": stddev_outliers, "outliers": f"{stddev_outliers};{iqr_outliers}",
    }


def _timings(rng: random.Random, n: int) -> list[float]:
    """Timing-like samples in ms: a lognormal body with the odd slow outlier, so the outlier counts are not zero."""
    return [rng.lognormvariate(0.0, 0.2) * (5.0 if rng.random() < 0.03 else 1.0) for _ in range(n)]


_SIZES = [1, 2, 3, 4, 10, 11, 100, 501, 2000]


@pytest.mark.parametrize("n", _SIZES)
def test_robust_cv_and_ratio_of_medians_match_the_pure_python_ones(n: int) -> None:
    rng = random.Random(n)
    ref, opt = _timings(rng, n), _timings(rng, n)
    assert robust_cv(ref) == pytest.approx(_old_robust_cv(ref), rel=1e-12, abs=0.0)
    assert ratio_of_medians(ref, opt) == pytest.approx(_old_ratio_of_medians(ref, opt), rel=1e-12, abs=0.0)


def test_ratio_of_no_samples_is_refused() -> None:
    with pytest.raises(ValueError, match="no samples"):
        ratio_of_medians([], [1.0])


def test_non_positive_medians_give_infinity() -> None:
    assert robust_cv([-1.0, 0.0, 0.0]) == math.inf
    assert ratio_of_medians([1.0, 2.0], [0.0, 0.0]) == math.inf


@pytest.mark.parametrize("n", [0, *_SIZES])
def test_sample_stats_match_the_pure_python_ones(n: int) -> None:
    samples = _timings(random.Random(100 + n), n)
    old, new = _old_sample_stats(samples), sample_stats(samples)
    assert new.keys() == old.keys()
    for key, value in old.items():
        # Same types as before: the JSON report writes these values as they are.
        assert type(new[key]) is type(value), key
        if isinstance(value, float):
            assert new[key] == pytest.approx(value, rel=1e-12, abs=0.0), key
        else:
            assert new[key] == value, key


def test_sample_stats_counts_outliers() -> None:
    samples = [1.0] * 20 + [1.1] * 20 + [50.0]
    stats = sample_stats(samples)
    assert stats["iqr_outliers"] == 1
    assert stats["hd15iqr"] == pytest.approx(1.1e-3)
    assert stats["outliers"] == f"{stats['stddev_outliers']};1"


@pytest.mark.parametrize("kind", ["gauss", "lognormal", "drift"])
def test_bootstrap_interval_agrees_with_the_pure_python_one(kind: str) -> None:
    rng = random.Random(5)
    if kind == "gauss":
        ref, opt = [rng.gauss(2.0, 0.1) for _ in range(500)], [rng.gauss(1.0, 0.05) for _ in range(500)]
    elif kind == "lognormal":
        ref = [2.0 * rng.lognormvariate(0.0, 0.2) for _ in range(500)]
        opt = [rng.lognormvariate(0.0, 0.3) for _ in range(500)]
    else:
        drift = [1.0 + i / 1000 + rng.gauss(0.0, 0.05) for i in range(500)]
        ref, opt = [2.0 * d * rng.gauss(1.0, 0.02) for d in drift], [d * rng.gauss(1.0, 0.02) for d in drift]
    old = _old_bootstrap_ratio(ref, opt, resamples=2000)
    new = bootstrap_ratio(ref, opt, resamples=2000)
    assert new.ratio == pytest.approx(old.ratio, rel=1e-12)
    # Different random streams: the ends agree within the resampling error (measured: under 0.4%).
    assert new.low == pytest.approx(old.low, rel=0.01)
    assert new.high == pytest.approx(old.high, rel=0.01)
    assert new.rel_halfwidth == pytest.approx(old.rel_halfwidth, rel=0.15)
    assert (new.confidence, new.rounds) == (old.confidence, old.rounds)


@pytest.mark.parametrize("n", [2, 3, 4, 7, 50, 301])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_interval_always_contains_the_estimate(n: int, seed: int) -> None:
    rng = random.Random(n * 10 + seed)
    ref, opt = _timings(rng, n), _timings(rng, n)
    est = bootstrap_ratio(ref, opt, resamples=200, seed=seed)
    assert est.low <= est.ratio <= est.high
    assert est.ratio == _old_ratio_of_medians(ref, opt)


def test_one_round_gives_a_zero_width_interval() -> None:
    est = bootstrap_ratio([2.0], [1.0])
    assert (est.ratio, est.low, est.high, est.rounds) == (2.0, 2.0, 2.0, 1)
    assert est.rel_halfwidth == 0.0


def test_seed_picks_the_resamples() -> None:
    rng = random.Random(3)
    ref, opt = _timings(rng, 200), _timings(rng, 200)
    assert bootstrap_ratio(ref, opt, seed=1) == bootstrap_ratio(ref, opt, seed=1)
    assert bootstrap_ratio(ref, opt, seed=1) != bootstrap_ratio(ref, opt, seed=2)


def test_chunked_resampling_gives_the_same_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    # numpy's Generator yields the same stream whether drawn in one block or in chunks, so a chunking mistake
    # (a row left unfilled, a chunk's sides paired with different rows) shows up as a difference here.
    rng = random.Random(4)
    ref, opt = _timings(rng, 301), _timings(rng, 301)
    whole = bootstrap_ratio(ref, opt, resamples=1001)
    monkeypatch.setattr(stats, "_MAX_DRAWS", 7 * 301 + 5)
    assert bootstrap_ratio(ref, opt, resamples=1001) == whole
    monkeypatch.setattr(stats, "_MAX_DRAWS", 1)
    assert bootstrap_ratio(ref, opt, resamples=1001) == whole


@pytest.mark.parametrize("columns", [1, 2, 5, 6, 101])
def test_row_medians_are_numpy_medians(columns: int) -> None:
    import numpy as np

    values = np.random.default_rng(columns).normal(size=(9, columns))
    expected = np.median(values, axis=1)
    assert np.array_equal(stats._row_medians(values.copy()), expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"confidence": 1.0}, "confidence must lie in"), ({"confidence": 0.0}, "confidence must lie in"),
     ({"resamples": 0}, "resamples must be at least 1")],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bootstrap_ratio([1.0, 2.0], [1.0, 2.0], **kwargs)


def test_importing_stats_leaves_numpy_unloaded() -> None:
    # pytest loads the plugin at start-up; numpy's import (about 0.1 s) waits until a statistic is computed.
    plugin_root = str(Path(stats.__file__).parents[1])
    code = "import sys, speedgate.stats; sys.exit('numpy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": plugin_root}, check=False)
    assert done.returncode == 0


@pytest.mark.parametrize("rounds", [1, 2, 3, 4, 5, 6, 7, 15, 16, 17, 18, 19, 24, 25, 31, 40, 101])
def test_sample_stats_are_pytest_benchmarks_own(rounds: int) -> None:
    """The pytest-benchmark JSON's statistics as its Stats computes them (its quartiles are not numpy's)."""
    bench_stats = pytest.importorskip("pytest_benchmark.stats")
    rng = random.Random(rounds)
    samples_ms = [rng.lognormvariate(0.0, 0.3) for _ in range(rounds)]
    theirs = bench_stats.Stats()
    for ms in samples_ms:
        theirs.update(ms / 1e3)
    ours = sample_stats(samples_ms)
    for field, value in theirs.as_dict().items():
        if isinstance(value, str):
            assert ours[field] == value, field
        else:
            assert ours[field] == pytest.approx(value, rel=1e-9, abs=1e-15), field
