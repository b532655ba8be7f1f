"""Change points on synthetic series, and `python -m speedgate history`'s report and exit codes (CPU)."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_history_store import report_doc

from speedgate.history import changes
from speedgate.history.changes import DetectorMissing, breakpoints, changes_in, noise_of, order_by_movement
from speedgate.history.store import Point, record_report

pytest.importorskip("ruptures", reason="the history extra: pip install -e '.[history]'")


def points(values: list[float] | np.ndarray, ident: str = "t.py::test_a") -> list[Point]:
    return [Point(i + 1, None, f"commit{i + 1:03d}", None, "case", ident, "box", "pass", float(v), None, None, None, None,
                  None, None, None, False, {}) for i, v in enumerate(values)]


def noisy(n: int, sigma: float, seed: int, level: float = 1.5) -> np.ndarray:
    return np.round(level * np.exp(np.random.default_rng(seed).normal(0.0, sigma, n)), 4)


def test_a_step_is_found_where_it_is_with_its_size() -> None:
    values = noisy(60, 0.003, seed=1)
    values[40:] *= 0.97
    series = changes_in(points(values))
    assert [c.index for c in series.changes] == [40]
    change = series.changes[0]
    assert (change.run_before, change.run_after) == (40, 41)
    assert (change.commit_before, change.commit_after) == ("commit040", "commit041")
    assert change.commits() == "commit040..commit041"
    assert change.size == pytest.approx(-0.03, abs=0.003)
    assert series.dropped(0.02) and not series.dropped(0.05)


@pytest.mark.parametrize("seed", range(20))
def test_a_clean_series_has_no_change(seed: int) -> None:
    series = changes_in(points(noisy(60, 0.004, seed)))
    assert series.changes == () and series.latest_move is None and not series.dropped(0.001)


def test_a_creep_is_one_move_down_made_of_steps() -> None:
    values = noisy(60, 0.002, seed=3)
    values[19:] *= 0.995 ** np.arange(1, 42)
    series = changes_in(points(values))
    assert len(series.changes) >= 2 and all(c.size < 0 for c in series.changes)
    assert series.moved_at is not None and 18 <= series.moved_at.index <= 24
    total = values[-3:].mean() / values[:19].mean() - 1  # about -17%
    assert series.latest_move == pytest.approx(total, abs=0.03)
    assert all(abs(c.size) < 0.1 for c in series.changes)  # no single step holds the whole creep


def test_the_latest_move_is_the_last_run_of_same_sign_changes() -> None:
    values = np.array([1.0] * 10 + [1.1] * 10 + [1.05] * 10 + [1.0] * 10)
    series = changes_in(points(values))
    assert [c.index for c in series.changes] == [10, 20, 30]
    assert series.latest_move == pytest.approx(1.0 / 1.1 - 1)  # both drops since the rise
    assert series.moved_at is not None and series.moved_at.index == 20


def test_a_drop_is_accepted_by_a_re_bless_after_it() -> None:
    values = noisy(40, 0.003, seed=6)
    values[20:] *= 0.95
    blessed = [1.5] * 25 + [1.42] * 15  # re-blessed at run 26 at the new level
    pts = [dataclasses.replace(p, baseline=b) for p, b in zip(points(values), blessed)]
    series = changes_in(pts)
    assert series.latest_move == pytest.approx(-0.05, abs=0.005)
    assert series.reblessed_at == 26 and not series.dropped(0.02)
    still = changes_in([dataclasses.replace(p, baseline=1.5) for p in pts])
    assert still.reblessed_at is None and still.dropped(0.02)


def test_a_rise_is_not_a_drop() -> None:
    values = noisy(40, 0.003, seed=4)
    values[25:] *= 1.05
    series = changes_in(points(values))
    assert series.latest_move == pytest.approx(0.05, abs=0.005) and not series.dropped(0.02)


def test_short_series_have_no_changes() -> None:
    assert breakpoints([1.0, 0.5, 0.5]) == []
    assert changes_in(points([1.0])).changes == ()


def test_the_noise_estimate_follows_the_noise_not_a_slope() -> None:
    values = noisy(60, 0.005, seed=5)
    assert noise_of(values) == pytest.approx(0.005, rel=0.25)
    sloped = values * 0.995 ** np.arange(60)
    assert noise_of(sloped) == pytest.approx(noise_of(values), rel=0.05)
    assert noise_of([1.5] * 30) == changes.NOISE_FLOOR


def test_a_large_step_inflates_the_noise_estimate_but_is_still_found() -> None:
    """The price of a root mean square (docs/results/history.md): a 10% step over 0.5% noise is one difference in
    59 and doubles the estimate, which still leaves the step far above the penalty."""
    values = noisy(60, 0.005, seed=5)
    values[30:] *= 0.9
    assert 0.008 < noise_of(values) < 0.013
    assert [c.index for c in changes_in(points(values)).changes] == [30]


def test_the_c_search_matches_ruptures_pelt_l2() -> None:
    """KernelCPD(linear) is ruptures' C implementation of Pelt(model='l2'): the same breakpoints on random series."""
    import ruptures

    rng = np.random.default_rng(7)
    for _ in range(60):
        n = int(rng.integers(10, 120))
        signal = rng.normal(0, 0.01, n) + np.repeat(rng.normal(0, 0.02, 4), -(-n // 4))[:n]
        pen = changes.DEFAULT_PENALTY * 0.01 ** 2 * math.log(n)
        pelt = ruptures.Pelt(model="l2", min_size=2, jump=1).fit(signal.reshape(-1, 1)).predict(pen=pen)
        assert breakpoints(list(np.exp(signal)), noise=0.01) == [int(b) for b in pelt[:-1]]


def test_without_ruptures_the_message_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ruptures", None)
    with pytest.raises(DetectorMissing, match=r"pip install ruptures \(speedgate's `history` extra; in a clone of speedgate: "
                                              r"pip install -e '\.\[history\]'\)"):
        breakpoints([1.0] * 10)


def test_order_puts_the_cases_that_moved_first() -> None:
    flat = changes_in(points(noisy(30, 0.003, 1), "t.py::test_flat"))
    small = noisy(30, 0.003, 2)
    small[15:] *= 0.97
    big = noisy(30, 0.003, 3)
    big[15:] *= 0.9
    rise = noisy(30, 0.003, 4)
    rise[15:] *= 1.1
    ordered = order_by_movement([flat, changes_in(points(small, "t.py::test_small")), changes_in(points(rise, "t.py::test_rise")),
                                 changes_in(points(big, "t.py::test_big"))])
    assert [s.ident for s in ordered] == ["t.py::test_big", "t.py::test_rise", "t.py::test_small", "t.py::test_flat"]


def history_db(tmp_path: Path, step: float, runs: int = 30, at: int = 20) -> Path:
    """A store of runs of three cases: test_moves steps by `step` at run `at`; the others stay."""
    db = tmp_path / "h.db"
    rng = np.random.default_rng(11)
    for run in range(1, runs + 1):
        speedups = {f"t.py::test_{name}": round(float(level * math.exp(rng.normal(0, 0.003))), 4)
                    for name, level in (("moves", 1.5), ("steady", 2.0), ("other", 0.8))}
        if run >= at:
            speedups["t.py::test_moves"] = round(speedups["t.py::test_moves"] * (1 + step), 4)
        blessed = {"t.py::test_moves": 1.5, "t.py::test_steady": 2.0, "t.py::test_other": 0.8}
        record_report(db, report_doc(speedups, tolerance=0.1, baseline=blessed), source=f"run{run}",
                      run_time=f"2026-11-{run:02d}T00:00:00Z", recorded_at="2026-11-30T00:00:00Z", commit=commit(run),
                      branch="main")
    return db


def commit(run: int) -> str:
    return f"{run:03d}".ljust(40, "f")


def run_history(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speedgate", "history", *args], capture_output=True, text=True, timeout=120)


def test_history_exits_1_on_a_drop_and_reports_runs_size_and_commits(tmp_path: Path) -> None:
    db = history_db(tmp_path, step=-0.04)
    result = run_history("--db", str(db))
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{db}: 30 runs, 3 series")
    assert lines[1].startswith("t.py::test_moves [nvidia-h100-80gb-hbm3]: 30 runs, now ")
    commits = "019fffffff..020fffffff"
    assert any(line.startswith(f"  run 19 -> 20 ({commits}): 1.50") and line.endswith("(-4.0%)") for line in lines), lines
    assert "2 series without a change" in lines
    assert "1 series whose latest move is a drop of 2% or more: t.py::test_moves [nvidia-h100-80gb-hbm3]" in result.stderr


@pytest.mark.parametrize(("step", "args", "code"), [
    (-0.04, ("--drop", "0.05"), 0),          # a drop smaller than the threshold asked for
    (+0.04, (), 0),                          # a rise
    (-0.04, ("--case", "test_steady"), 0),   # filtered to a case that did not move
    (-0.04, ("--hardware-key", "other"), 0),
    (-0.04, ("--drop", "2"), 2),             # a bad option is a usage error
])
def test_history_exit_codes(tmp_path: Path, step: float, args: tuple[str, ...], code: int) -> None:
    result = run_history("--db", str(history_db(tmp_path, step=step, runs=12, at=6)), *args)
    assert result.returncode == code, result.stdout + result.stderr


def test_history_on_a_missing_or_corrupt_store_exits_2(tmp_path: Path) -> None:
    result = run_history("--db", str(tmp_path / "absent.db"))
    assert result.returncode == 2 and "no history store there" in result.stderr
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"garbage" * 100)
    result = run_history("--db", str(corrupt))
    assert result.returncode == 2 and f"{corrupt}: not a usable history store" in result.stderr


def test_compare_still_answers_on_its_own() -> None:
    result = subprocess.run([sys.executable, "-m", "speedgate", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "compare" in result.stdout
