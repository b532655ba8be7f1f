"""lab/clock_spread.py on reports built here: a comparison whose speedup follows the card's clock, one that does
not, a reading without clocks and a slowed duplicate left out."""

from __future__ import annotations

import math

import pytest

from lab import clock_spread
from lab.tests import written_reports
from speedgate.evidence import CALIBRATION_FLOOR


def case(case_id: str, card: str, mhz: float, speedup: float, **more) -> dict:
    return {"case_id": case_id, "card": card, "judged_at": f"t-{card}", "timed": True, "speedup": speedup,
            "reference_mhz": mhz + 10, "optimized_mhz": mhz, "reference_ms": 1.0, "optimized_ms": 1.0 / speedup,
            "timer": "cuda-sm-cycles-held", **more}


def reports() -> list[dict]:
    clocks = [1440 + 20 * i for i in range(8)]
    follows = [case("a::follows", f"card{i}", mhz, math.exp(-0.0003 * (mhz - 1500))) for i, mhz in enumerate(clocks)]
    # The same spread, but the speedups alternate with no order in the clock.
    noise = [0.01, -0.01, 0.008, -0.008, 0.01, -0.01, 0.008, -0.008]
    flat = [case("b::flat", f"card{i}", mhz, math.exp(noise[i])) for i, mhz in enumerate(clocks)]
    unclocked = [case("c::unclocked", f"card{i}", 1500, 1.0, optimized_mhz=None) for i in range(8)]
    return [{"speedgate_report_version": 1, "cases": follows[:4] + flat + unclocked},
            {"speedgate_report_version": 1, "cases": follows[4:] + follows[:1]}]


def test_a_speedup_that_follows_the_clock_leaves_no_residual_and_one_that_does_not_keeps_its_spread() -> None:
    by_case = clock_spread.readings(reports())
    assert sorted(by_case) == ["a::follows", "b::flat"]  # no clocks, no reading
    assert len(by_case["a::follows"]) == 8  # the repeated (card, judged_at) counted once
    rows = {r["case_id"]: r for r in clock_spread.spreads(by_case, cards=8)}
    follows, flat = rows["a::follows"], rows["b::flat"]
    assert follows["optimized_mhz"].slope == pytest.approx(-0.0003)
    assert follows["optimized_mhz"].residual == pytest.approx(0.0, abs=1e-12)
    assert follows["spread"] > 0.01
    assert flat["optimized_mhz"].residual > 0.9 * flat["spread"] > 0.008
    assert clock_spread.spreads(by_case, cards=9) == []
    text = clock_spread.table(list(rows.values()))
    assert "| `a::follows` | 8 (8) | cuda-sm-cycles-held |" in text and "-3.00% per 100 MHz" in text


def test_the_command_reads_reports_and_says_what_it_could_not_read(tmp_path, capsys) -> None:
    paths = written_reports(tmp_path, reports())
    assert clock_spread.main([*map(str, paths), "--case", "follows"]) == 0
    out = capsys.readouterr().out
    assert "a::follows" in out and "| `card0` | 1450 | 1440 |" in out
    assert clock_spread.main([str(paths[0]), "--cards", "9"]) == 1  # no comparison on 9 cards
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(SystemExit):
        clock_spread.main([str(broken)])
    assert "broken.json: not a readable speedgate report" in capsys.readouterr().err
    with pytest.raises(ValueError, match="at least 3"):
        clock_spread.fit([1.0, 2.0], [0.0, 0.1])


def test_a_card_left_out_is_met_by_the_line_where_the_speedup_follows_the_clock_and_not_where_it_does_not() -> None:
    by_case = clock_spread.readings(reports())
    follows = clock_spread.held_out(by_case["a::follows"])
    assert follows["cards"] == 8 and follows["readings"] == 8
    assert follows["rms_line"] == pytest.approx(0.0, abs=1e-12)
    assert follows["rms_plain"] > 0.01
    assert follows["tolerance_line"] == CALIBRATION_FLOOR  # nothing left: the floor
    flat = clock_spread.held_out(by_case["b::flat"])
    assert flat["rms_line"] > 0.008  # a line fitted to noise leaves a held-out card its noise
    with pytest.raises(ValueError, match="four cards or more"):
        clock_spread.held_out(by_case["a::follows"][:3])


def test_a_slowed_reading_is_judged_at_its_own_clock() -> None:
    clean = clock_spread.readings(reports())["a::follows"]
    # 5% slower at a clock 100 MHz above the clean cards' middle: the clock alone takes 3% off the speedup there
    slowed = [case("a::follows", "cardX", 1610, 0.95 * math.exp(-0.0003 * 110))]
    (row,) = clock_spread.judged_slowed(clean, slowed, (0.04, 0.02))
    assert row["line"] == pytest.approx(-0.05)
    assert row["caught_line"] and row["caught_plain"]
    assert row["plain"] < -0.07  # the center blames the clock's share on the slowdown too
    # and a clean reading at that clock is a drop only to the center
    (clean_there,) = clock_spread.judged_slowed(clean, [case("a::follows", "cardY", 1610, math.exp(-0.0003 * 110))],
                                                (0.02, 0.02))
    assert clean_there["line"] == pytest.approx(0.0, abs=1e-12) and not clean_there["caught_line"]
    assert clean_there["caught_plain"]
