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
