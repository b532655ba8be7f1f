"""Which side moved, and the smallest regression a case can catch (issue: calibrated sensitivity)."""

from __future__ import annotations

import pytest

from speedgate.attribution import MOVED, detectable_drop, detection_summary, which_side_moved


def test_a_slower_reference_is_named_and_the_software_that_changed() -> None:
    entry = {"reference_ms": 0.134, "optimized_ms": 0.0912, "software": {"torch": "2.11.0"}}
    text, ref, opt = which_side_moved(0.175, 0.0915, entry, {"torch": "2.12.0"})
    assert ref == pytest.approx(0.175 / 0.134 - 1) and abs(opt or 0) < MOVED
    assert text == ("which side moved: the reference side is 31% slower than when blessed (0.134 -> 0.175 ms); "
                    "the optimized side is unchanged (0.0912 -> 0.0915 ms) (software since: torch 2.11.0 -> 2.12.0)")


def test_a_faster_optimized_side_and_missing_times() -> None:
    text, _, opt = which_side_moved(1.0, 0.5, {"reference_ms": 1.0, "optimized_ms": 1.0})
    assert opt == pytest.approx(-0.5) and "the optimized side is 50% faster than when blessed" in text
    text, ref, _ = which_side_moved(1.0, 0.5, {"optimized_ms": 1.0})
    assert ref is None and "the reference side has no blessed time to compare" in text


def test_a_speedup_out_of_its_band_with_neither_side_past_the_threshold_says_which_moved_more() -> None:
    # an H200 whose compiled reference ran 1.7% slower than on the blessing card, the Triton side 0.2%: the speedup
    # read 2.3% over a 2.0% band, "improved", while both sides counted as unchanged
    entry = {"reference_ms": 0.686, "optimized_ms": 0.5776}
    text, ref, opt = which_side_moved(0.6979, 0.5788, entry)
    assert abs(ref or 0) < MOVED and abs(opt or 0) < MOVED
    assert text == ("which side moved: neither side past 3%, the reference side the more: the reference side +1.7% "
                    "(0.686 -> 0.6979 ms); the optimized side +0.2% (0.5776 -> 0.5788 ms)")
    text, _, _ = which_side_moved(1.0, 1.02, {"reference_ms": 1.0, "optimized_ms": 1.0})
    assert "the optimized side the more" in text and "the reference side +0.0%" in text


def test_detectable_drop_grows_with_tolerance_and_noise() -> None:
    assert detectable_drop(0.10, 0.0) == pytest.approx(0.10)
    assert detectable_drop(0.10, 0.01) == pytest.approx(1 - 0.9 / 1.01)
    assert detectable_drop(0.03, 0.01) < detectable_drop(0.10, 0.01) < detectable_drop(0.10, 0.05)
    assert detectable_drop(0.1, None) is None
    assert detection_summary({}) is None
    assert detection_summary({"a": 0.1, "b": 0.2, "c": 0.04}) == (
        "detection power: 3 timed cases catch a drop of their speedup from this run's reading of at least 10.0% "
        "(median; best 4.0%, worst 20.0%: b)")


def test_a_reading_above_the_baseline_lets_a_larger_drop_through() -> None:
    # The twenty-fourth H200 study's K-chunked miss: judged against the kind's center 4.325x at 3.53%, the card read
    # 4.389x (+1.5%) with an interval of +-0.2%; a drop from there is caught past 1 - 0.9647 / (1.0148 x 1.002) = 5.1%,
    # so that run's 5% slowdown (4.389 -> 4.200x, 2.9% under the center) passed.
    drop = detectable_drop(0.0353, 0.002, 4.389 / 4.325 - 1)
    assert drop == pytest.approx(1 - 0.9647 / (4.389 / 4.325 * 1.002))
    assert 0.05 < drop < 0.052
    assert detectable_drop(0.0353, 0.002, 0.0) < 0.04  # from the baseline itself: the old figure
    assert detectable_drop(0.02, 0.002, -0.01) < detectable_drop(0.02, 0.002)  # a card below the center: less
    assert detectable_drop(0.02, 0.002, -0.05) == 0.0  # already under the floor
    assert detectable_drop(0.02, 0.002, -1.0) is None
