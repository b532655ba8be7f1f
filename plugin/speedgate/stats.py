"""Robust statistics for paired timing samples: medians, spread, and a bootstrap interval on a speedup."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from statistics import median
from typing import Sequence

# 1.4826 * MAD estimates the standard deviation of normal data; robust to the odd slow sample.
_MAD_TO_SIGMA = 1.4826


def robust_cv(samples: Sequence[float]) -> float:
    """Coefficient of variation from the median absolute deviation (0 for fewer than two samples)."""
    if len(samples) < 2:
        return 0.0
    mid = median(samples)
    if mid <= 0:
        return math.inf
    mad = median(abs(x - mid) for x in samples)
    return _MAD_TO_SIGMA * mad / mid


@dataclass(frozen=True)
class RatioEstimate:
    """A ratio of medians with a percentile bootstrap interval."""

    ratio: float
    low: float
    high: float
    confidence: float
    rounds: int

    @property
    def rel_halfwidth(self) -> float:
        """Half the interval's width relative to the estimate: the noise figure of a comparison."""
        if self.ratio <= 0 or not math.isfinite(self.ratio):
            return math.inf
        return (self.high - self.low) / 2.0 / self.ratio


def ratio_of_medians(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    den = median(denominator)
    if den <= 0:
        return math.inf
    return median(numerator) / den


def bootstrap_ratio(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> RatioEstimate:
    """median(numerator) / median(denominator) with a paired bootstrap interval.

    Samples are paired by round (index i of both lists was measured back to back), so rounds are
    resampled together and slow drifts of the machine, which hit both sides of a round, cancel.
    """
    n = len(numerator)
    if n != len(denominator):
        raise ValueError(f"paired samples differ in length: {n} and {len(denominator)}")
    if n == 0:
        raise ValueError("no samples")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    point = ratio_of_medians(numerator, denominator)
    if n == 1:
        return RatioEstimate(point, point, point, confidence, n)
    rng = random.Random(seed * 1_000_003 + n)
    indices = range(n)
    ratios = []
    for _ in range(resamples):
        pick = rng.choices(indices, k=n)
        ratios.append(ratio_of_medians([numerator[i] for i in pick], [denominator[i] for i in pick]))
    ratios.sort()
    tail = (1.0 - confidence) / 2.0
    low = ratios[max(0, int(math.floor(tail * resamples)))]
    high = ratios[min(resamples - 1, int(math.ceil((1.0 - tail) * resamples)) - 1)]
    return RatioEstimate(point, min(low, point), max(high, point), confidence, n)


def sample_stats(samples_ms: Sequence[float]) -> dict[str, float | int]:
    """Summary of one side's samples in seconds, with pytest-benchmark's field names (for its JSON layout)."""
    data = sorted(x / 1e3 for x in samples_ms)
    n = len(data)
    if n == 0:
        return {}
    mean = sum(data) / n
    stddev = math.sqrt(sum((x - mean) ** 2 for x in data) / (n - 1)) if n > 1 else 0.0

    def quantile(q: float) -> float:
        pos = q * (n - 1)
        lo = int(math.floor(pos))
        hi = min(lo + 1, n - 1)
        return data[lo] + (data[hi] - data[lo]) * (pos - lo)

    q1, q3 = quantile(0.25), quantile(0.75)
    iqr = q3 - q1
    low_fence, high_fence = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    iqr_outliers = sum(1 for x in data if x < low_fence or x > high_fence)
    stddev_outliers = sum(1 for x in data if x < mean - stddev or x > mean + stddev)
    return {
        "min": data[0], "max": data[-1], "mean": mean, "stddev": stddev, "median": median(data), "q1": q1, "q3": q3,
        "iqr": iqr, "rounds": n, "iterations": 1, "total": sum(data), "ops": 1.0 / mean if mean > 0 else 0.0,
        "ld15iqr": next(x for x in data if x >= low_fence), "hd15iqr": next(x for x in reversed(data) if x <= high_fence),
        "iqr_outliers": iqr_outliers, "stddev_outliers": stddev_outliers, "outliers": f"{stddev_outliers};{iqr_outliers}",
    }
