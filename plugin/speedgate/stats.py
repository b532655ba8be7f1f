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
