"""lab/evidence_center.py on a file built here: a case blessed on its kind's slowest card, the other cards left out
one at a time, counted under both rules."""

from __future__ import annotations

import json

import pytest

from lab import evidence_center


def entry(blessed: float, cards: dict[str, list[float]], tolerance: float) -> dict:
    return {"speedup": blessed, "tolerance": tolerance,
            "calibration": {"runs": 2, "spread": 0.001, "measured_at": "2026-11-26T00:00:00Z",
                            "machines": {name: {"speedups": s} for name, s in cards.items()}}}


def test_a_bless_on_the_slowest_card_sets_off_alarms_that_the_center_does_not(tmp_path) -> None:
    # The bless on card a, the slowest (1.25x); the others at 1.30-1.34x. Left out, card e (1.34x) reads 7.2% over
    # the bless, outside the 6.7% that the other four cards' spread gives, and 3.1% over their center.
    cards = {"a": [1.25], "b": [1.30], "c": [1.30], "d": [1.31], "e": [1.34]}
    cases = {"slow-bless": entry(1.25, cards, 0.05), "one-card": entry(1.0, {"a": [1.0, 1.01]}, 0.02)}
    out = evidence_center.leave_one_card_out(cases)
    assert out["entries"] == 1 and out["readings"] == 5
    assert out["blessed"] == {"inside": 4, "below": 0, "above": 1}
    assert out["center"] == {"inside": 5, "below": 0, "above": 0}
    [(case, before, now)] = evidence_center.caught_drops(cases)
    assert case == "slow-bless" and before == pytest.approx(1 - 1.25 * 0.95 / 1.30)  # 8.7% and now == pytest.approx(0.05)
    path = tmp_path / "kind.json"
    path.write_text(json.dumps({"cases": cases}))
    lines = evidence_center.table(path)
    assert lines[0].startswith("kind.json: 1 entries") and "| against the kind's center | 5 | 0 | 0 |" in lines


def test_the_robust_rule_is_not_widened_by_one_outlier_card_and_the_rules_are_counted() -> None:
    # Eight cards, one blessed far above the rest (the H100 fp8 tiled-8192 shape: 0.740 against 0.635-0.685).
    cards = {"a": [0.740], **{name: [0.635 + 0.007 * i] for i, name in enumerate("bcdefgh")}}
    calibration = entry(0.740, cards, 0.33)["calibration"]
    from speedgate import evidence

    without = entry(0.685, {k: v for k, v in cards.items() if k != "a"}, 0.05)["calibration"]
    old = evidence.spread_of(evidence.summarize(calibration)), evidence.spread_of(evidence.summarize(without))
    robust = evidence_center.robust_spread(calibration), evidence_center.robust_spread(without)
    assert old[0] > 2 * old[1]  # the outlier more than doubles the range-based spread
    assert robust[0] < 1.3 * robust[1]  # and barely moves the robust one
    out = evidence_center.rules_left_out({"fp8": entry(0.740, cards, 0.33)})
    assert set(out) == set(evidence_center.RULES)
    assert all(sum(c[k] for k in ("inside", "below", "above")) == 8 for c in out.values())



def test_the_table_ends_with_what_a_slowdown_does_on_each_card(tmp_path) -> None:
    """The reading of speedgate.catches (tests/test_catches.py), at 5% and at 10%, after the rules' table."""
    cards = {"a": [1.00], "b": [1.00], "c": [1.00], "d": [1.00], "e": [1.03]}
    path = tmp_path / "kind.json"
    path.write_text(json.dumps({"cases": {"top": entry(1.0, cards, 0.044)}}))
    lines = evidence_center.table(path)
    summary = [line for line in lines if "comparisons (evidence from 3 cards or more) catch" in line]
    assert summary == [
        "0 of 1 comparisons (evidence from 3 cards or more) catch a 5% slowdown on every card of their evidence; "
        "4 of 5 readings caught; 1 of 5 cards miss it somewhere",
        "1 of 1 comparisons (evidence from 3 cards or more) catch a 10% slowdown on every card of their evidence; "
        "5 of 5 readings caught; 0 of 5 cards miss it somewhere"]
