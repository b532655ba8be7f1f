"""Change points in a case's speedup over recorded runs: where it shifted, by how much, between which commits.

The detector is ruptures' PELT (exact search with a penalty per change, least-squares cost: KernelCPD's linear
kernel, ruptures' C implementation of Pelt(model="l2"), which gives the same segments) on log speedups; its penalty scales with the
series' own noise, estimated from the spread of consecutive differences (robust to the steps themselves). Why this
package and not Apache Otava or MongoDB's E-divisive, and how the penalty was chosen: docs/results/history.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .store import Point

# The penalty per change in units of the noise variance, times log(n) (BIC-like). Chosen with lab/history_study.py
# on 60-run series drawn with the H100 file's spreads (docs/results/history.md): at 6 a clean series of a case with
# under 2% noise exits 1 at some run in at most 1% of histories (7% at 4), for a 3% step found one run later.
DEFAULT_PENALTY = 6.0
# The smallest segment: a change is reported once two runs stand on its far side.
MIN_SIZE = 2
# The noise estimate's floor (relative): speedups are recorded to four significant figures, so a steady series can
# show no spread at all; below this the detector would report rounding steps.
NOISE_FLOOR = 5e-4
# A drop of the latest move at least this large fails `python -m speedgate history` (exit 1): the smallest tolerance
# the committed H100 file gives any case (2%), so history flags what a single run would be judged on.
DEFAULT_DROP = 0.02


class DetectorMissing(RuntimeError):
    """ruptures is not installed."""


@dataclass(frozen=True)
class Change:
    """The speedup moved between two consecutive points of a series (index: the first point after the move)."""

    index: int
    run_before: int
    run_after: int
    commit_before: str | None
    commit_after: str | None
    before: float  # the median speedup of the segment before
    after: float   # and of the segment after

    @property
    def size(self) -> float:
        return self.after / self.before - 1.0

    def commits(self) -> str:
        """The commit range the move happened in: (last commit before, first commit after]."""
        if self.commit_before is None and self.commit_after is None:
            return "commits unknown"
        return f"{_short(self.commit_before)}..{_short(self.commit_after)}"


@dataclass(frozen=True)
class Series:
    """One case on one hardware key over the recorded runs, with its change points."""

    ident: str
    hardware_key: str
    points: tuple[Point, ...]
    changes: tuple[Change, ...]
    noise: float  # the relative noise the penalty used

    @property
    def latest_move(self) -> float | None:
        """The size of the latest move: the last change and any changes of the same sign just before it (a creep
        shows as a staircase of small steps), as last segment / the segment before the staircase - 1."""
        if not self.changes:
            return None
        down = self.changes[-1].size < 0
        first = len(self.changes) - 1
        while first > 0 and (self.changes[first - 1].size < 0) == down:
            first -= 1
        return self.changes[-1].after / self.changes[first].before - 1.0

    @property
    def moved_at(self) -> Change | None:
        """The first change of the latest move."""
        if not self.changes:
            return None
        down = self.changes[-1].size < 0
        first = len(self.changes) - 1
        while first > 0 and (self.changes[first - 1].size < 0) == down:
            first -= 1
        return self.changes[first]

    @property
    def reblessed_at(self) -> int | None:
        """The run whose blessed speedup first differs from the one in force before the latest move: the move was
        accepted by a re-bless (--update-baselines) there. None when it was not, or the points carry no baseline."""
        start = self.moved_at
        if start is None:
            return None
        before = self.points[start.index - 1].baseline
        for point in self.points[start.index:]:
            if before is not None and point.baseline is not None and point.baseline != before:
                return point.run_id
        return None

    def dropped(self, threshold: float) -> bool:
        """Whether the latest move is a drop of at least threshold (a fraction) that no re-bless has accepted since."""
        move = self.latest_move
        return move is not None and move <= -threshold and self.reblessed_at is None


def _short(commit: str | None) -> str:
    return "?" if not commit else commit[:10]


def noise_of(values: Sequence[float]) -> float:
    """The series' noise as a standard deviation of log speedup: the root mean square of consecutive differences,
    centred on their median (a creep's steady slope is not noise), over sqrt(2); floored at NOISE_FLOOR.

    Not their MAD, though a step moves the MAD less: on the 10-20 runs a history starts with, the MAD often came out
    at half the true noise, and the detector then reported the noise as drops (docs/results/history.md). A step
    inflates this estimate by one difference in n - 1, which only makes the detector slower to call it."""
    logs = np.log(np.asarray(values, dtype=float))
    if len(logs) < 3:
        return NOISE_FLOOR
    diffs = np.diff(logs)
    diffs = diffs - np.median(diffs)
    return max(float(np.sqrt(np.mean(diffs * diffs))) / math.sqrt(2.0), NOISE_FLOOR)


def breakpoints(values: Sequence[float], *, penalty: float = DEFAULT_PENALTY, noise: float | None = None,
                min_size: int = MIN_SIZE) -> list[int]:
    """Indexes where a new segment starts (never 0 nor len(values)), by PELT on log speedups."""
    n = len(values)
    if n < 2 * min_size:
        return []
    try:
        import ruptures
    except ImportError:
        raise DetectorMissing("change points need ruptures: pip install ruptures (speedgate's `history` extra; in a "
                              "clone of speedgate: pip install -e '.[history]')") from None
    sigma = noise if noise is not None else noise_of(values)
    signal = np.log(np.asarray(values, dtype=float)).reshape(-1, 1)
    algo = ruptures.KernelCPD(kernel="linear", min_size=min_size, jump=1).fit(signal)
    ends = algo.predict(pen=penalty * sigma * sigma * math.log(n))
    return [int(e) for e in ends[:-1]]


def _median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=float)))


def changes_in(points: Sequence[Point], *, penalty: float = DEFAULT_PENALTY, noise: float | None = None) -> Series:
    """The series of these points (one case, one hardware key, in the order the runs happened) with its change points; noise: the
    relative noise to scale the penalty by (default: noise_of the series)."""
    if not points:
        raise ValueError("a series needs at least one point")
    values = [float(p.speedup) for p in points if p.speedup is not None]
    if len(values) != len(points):
        raise ValueError("every point of a series needs a speedup")
    sigma = noise if noise is not None else noise_of(values)
    cuts = breakpoints(values, penalty=penalty, noise=sigma)
    bounds = [0, *cuts, len(values)]
    changes = []
    for k, cut in enumerate(cuts):
        before, after = values[bounds[k]:cut], values[cut:bounds[k + 2]]
        changes.append(Change(cut, points[cut - 1].run_id, points[cut].run_id, points[cut - 1].commit, points[cut].commit,
                              _median(before), _median(after)))
    return Series(points[0].ident, points[0].hardware_key, tuple(points), tuple(changes), sigma)


def order_by_movement(series: Sequence[Series]) -> list[Series]:
    """Series that moved first (largest latest move first, drops before rises of the same size), then the rest by
    name."""
    return sorted(series, key=lambda s: (s.latest_move is None, -abs(s.latest_move or 0.0), (s.latest_move or 0.0) > 0,
                                         s.ident, s.hardware_key))
