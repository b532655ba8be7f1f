"""Robust statistics for paired timing samples: medians, spread, and a bootstrap interval on a speedup."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

# numpy is imported inside the functions, so that importing this module (at pytest start-up) stays cheap.

# 1.4826 * MAD estimates the standard deviation of normal data; robust to the odd slow sample.
_MAD_TO_SIGMA = 1.4826
# Resampled rounds drawn at once: 512 KB per gathered float64 array, so a chunk stays in a core's L2 cache and
# memory stays bounded. 2000 rounds x 2000 resamples: 40 ms in chunks of 65_536, 60-85 ms in one chunk of 4e6
# (CPU dev box, 2 cores, shared; 32_768 to 262_144 were within noise for 100 to 2000 rounds).
_MAX_DRAWS = 65_536


def robust_cv(samples: Sequence[float]) -> float:
    """Coefficient of variation from the median absolute deviation (0 for fewer than two samples)."""
    if len(samples) < 2:
        return 0.0
    import numpy as np

    data = np.asarray(samples, dtype=np.float64)
    mid = float(np.median(data))
    if mid <= 0:
        return math.inf
    mad = float(np.median(np.abs(data - mid)))
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
    # np.median of nothing is nan with a warning; statistics.median raised a ValueError, and so do we.
    if len(numerator) == 0 or len(denominator) == 0:
        raise ValueError("no samples")
    import numpy as np

    den = float(np.median(np.asarray(denominator, dtype=np.float64)))
    if den <= 0:
        return math.inf
    return float(np.median(np.asarray(numerator, dtype=np.float64))) / den


def _row_medians(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """The median of each row, as np.median(values, axis=1), partitioning `values` in place.

    One partition at the upper middle plus the maximum of the lower half: about twice as fast as np.median,
    whose partition at both middles costs 11.4 ms against 6.1 ms on 400 x 2000 rounds (CPU dev box, 2 cores).
    """
    half = values.shape[1] // 2
    values.partition(half, axis=1)
    upper: NDArray[np.float64] = values[:, half]
    if values.shape[1] % 2:
        return upper
    lower: NDArray[np.float64] = values[:, :half].max(axis=1)
    return (lower + upper) / 2.0


def _resampled_ratios(
    numerator: NDArray[np.float64], denominator: NDArray[np.float64], resamples: int, rng: np.random.Generator
) -> NDArray[np.float64]:
    """ratio_of_medians of `resamples` paired resamples: one row of round indices per resample, both sides
    gathered by the same row. Rows are drawn in chunks of at most _MAX_DRAWS rounds (see there)."""
    import numpy as np

    n = len(numerator)
    ratios = np.empty(resamples, dtype=np.float64)
    rows = max(1, _MAX_DRAWS // n)
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        pick = rng.integers(0, n, size=(stop - start, n))
        # The gathered arrays are fresh copies, so _row_medians may partition them in place.
        num = _row_medians(numerator[pick])
        den = _row_medians(denominator[pick])
        # As ratio_of_medians: a median time <= 0 in the denominator gives an infinite ratio.
        ratios[start:stop] = np.divide(num, den, out=np.full_like(num, np.inf), where=den > 0)
    return ratios


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
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    point = ratio_of_medians(numerator, denominator)
    if n == 1:
        return RatioEstimate(point, point, point, confidence, n)
    import numpy as np

    num = np.asarray(numerator, dtype=np.float64)
    den = np.asarray(denominator, dtype=np.float64)
    ratios = _resampled_ratios(num, den, resamples, np.random.default_rng(seed * 1_000_003 + n))
    tail = (1.0 - confidence) / 2.0
    low_rank = max(0, math.floor(tail * resamples))
    high_rank = min(resamples - 1, math.ceil((1.0 - tail) * resamples) - 1)
    ratios.partition([low_rank, high_rank])
    low, high = float(ratios[low_rank]), float(ratios[high_rank])
    return RatioEstimate(point, min(low, point), max(high, point), confidence, n)


def benchmark_quartiles(ordered: Sequence[float]) -> tuple[float, float]:
    """(q1, q3) of sorted data as pytest-benchmark's Stats computes them, so that a file in its layout reads as one it
    wrote: Wikipedia's method 3 for an odd count (a weighted pair of ranks), method 2 (the median of each half) for
    an even one. numpy's linear interpolation gives other values at 15-40 rounds."""
    n = len(ordered)
    if n == 1:
        return ordered[0], ordered[0]
    if n % 2:
        k, r = divmod(n, 4)
        if r == 1:
            return 0.25 * ordered[k - 1] + 0.75 * ordered[k], 0.75 * ordered[3 * k] + 0.25 * ordered[3 * k + 1]
        return 0.75 * ordered[k] + 0.25 * ordered[k + 1], 0.25 * ordered[3 * k + 1] + 0.75 * ordered[3 * k + 2]
    return statistics.median(ordered[: n // 2]), statistics.median(ordered[n // 2:])


def sample_stats(samples_ms: Sequence[float]) -> dict[str, float | int | str]:
    """Summary of one side's samples in seconds, with pytest-benchmark's field names and its Stats's rules (for its
    JSON layout)."""
    n = len(samples_ms)
    if n == 0:
        return {}
    import numpy as np

    data = np.sort(np.asarray(samples_ms, dtype=np.float64) / 1e3)
    mean = float(data.mean())
    stddev = float(data.std(ddof=1)) if n > 1 else 0.0
    q1, q3 = benchmark_quartiles([float(v) for v in data])
    iqr = q3 - q1
    low_fence, high_fence = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    # data is sorted: the first sample inside the low fence and the last one inside the high fence.
    inside_low = int(np.searchsorted(data, low_fence, side="left"))
    inside_high = int(np.searchsorted(data, high_fence, side="right"))
    iqr_outliers = inside_low + (n - inside_high)
    stddev_outliers = int(np.count_nonzero((data < mean - stddev) | (data > mean + stddev)))
    return {
        "min": float(data[0]), "max": float(data[-1]), "mean": mean, "stddev": stddev,
        "median": float(np.median(data)), "q1": q1, "q3": q3, "iqr": iqr, "rounds": n, "iterations": 1,
        "total": float(data.sum()), "ops": 1.0 / mean if mean > 0 else 0.0,
        "ld15iqr": float(data[inside_low]), "hd15iqr": float(data[inside_high - 1]),
        "iqr_outliers": iqr_outliers, "stddev_outliers": stddev_outliers, "outliers": f"{stddev_outliers};{iqr_outliers}",
    }


# Settling (speedgate.measure): one side's speed moved between two halves of its rounds when the medians lie more than
# SETTLE_DRIFT apart, by more than SETTLE_SIGMAS standard errors of their difference, and the halves apart in rank in
# SETTLE_SEPARATION of their pairs (the evidence behind these: docs/results/calibration.md).
SETTLE_DRIFT = 0.03
SETTLE_SIGMAS = 4.0
SETTLE_SEPARATION = 0.9


def drifting(first: list[float], second: list[float]) -> bool:
    """Whether one side's speed moved between two halves of its rounds: the medians apart by more than SETTLE_DRIFT
    and by more than SETTLE_SIGMAS standard errors of their difference (from each half's robust spread), and the
    halves apart in rank too (in at least SETTLE_SEPARATION of the pairs of a round from each, the same one is the
    slower): a MAD of a few rounds can understate their noise."""
    a, b = statistics.median(first), statistics.median(second)
    if a <= 0 or b <= 0:
        return False
    moved = abs(b / a - 1.0)
    # The median's standard error is about 1.2533 sigma / sqrt(n) for normal data.
    noise = math.hypot(*(1.2533 * robust_cv(h) / math.sqrt(len(h)) for h in (first, second)))
    if moved <= SETTLE_DRIFT or moved <= SETTLE_SIGMAS * noise:
        return False
    import numpy as np

    # The share of pairs (x from the first half, y from the second) with y slower, ties counted half.
    x = np.sort(np.asarray(first, dtype=np.float64))
    y = np.asarray(second, dtype=np.float64)
    below = np.searchsorted(x, y, side="left")
    ties = np.searchsorted(x, y, side="right") - below
    slower = float((below + 0.5 * ties).sum()) / (len(x) * len(y))
    return max(slower, 1.0 - slower) >= SETTLE_SEPARATION


