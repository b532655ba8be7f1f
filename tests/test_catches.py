"""speedgate.catches and `python -m speedgate evidence FILE --catch SHARE`: a slowdown read on each card of a file's
evidence, that card left out. Files built here, with the numbers worked out in the comments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import baseline_doc
from speedgate.baseline import validate
from speedgate.catches import Miss, catches, lines

PLUGIN = Path(__file__).resolve().parents[1] / "plugin"


def entry(blessed: float, cards: dict[str, list[float]], tolerance: float) -> dict[str, Any]:
    return {"speedup": blessed, "tolerance": tolerance,
            "calibration": {"runs": 2, "spread": 0.001, "measured_at": "2026-11-26T00:00:00Z",
                            "machines": {name: {"speedups": s} for name, s in cards.items()}}}


# Four cards at 1.00x and one at the kind's top, 1.03x. Left out, the top card's 5% slowdown reads 1.03 / 1.05 =
# 0.981x, 1.9% under the other four's center (1.00x), inside their 2.0% floor (no spread between them): missed. Each
# 1.00x card left out reads 1 / 1.05 = 0.952x, 4.8% under the center 1.00x the others give, outside the 4.4% their
# range (1.00-1.03x) gives: caught. At 10% the top card reads 0.936x, 6.4% under: caught.
TOP = {"a": [1.00], "b": [1.00], "c": [1.00], "d": [1.00], "e": [1.03]}


def test_the_card_at_the_kinds_top_misses_a_slowdown_the_others_catch() -> None:
    cases = {"top": entry(1.0, TOP, 0.044), "two-cards": entry(1.0, {"a": [1.0], "b": [1.01]}, 0.02),
             "blessed-only": {"speedup": 1.0, "tolerance": 0.02}}
    five = catches(cases, 0.05)
    assert (five.entries, five.readings, five.caught) == (1, 5, 4)  # two cards and none are not a kind's evidence
    assert five.missed == {"top": [Miss("e", 1.03, pytest.approx(1.03 / 1.05), pytest.approx(0.98))]}
    assert five.per_card == {"a": [0, 1], "b": [0, 1], "c": [0, 1], "d": [0, 1], "e": [1, 1]}
    ten = catches(cases, 0.10)
    assert (ten.caught, ten.missed) == (5, {})


def test_every_reading_of_a_card_counts_and_a_card_misses_once_per_comparison() -> None:
    # Card e ran twice (1.03x, 1.031x): both readings miss; it misses one comparison.
    cards = {**TOP, "e": [1.03, 1.031]}
    found = catches({"top": entry(1.0, cards, 0.044), "also": entry(1.0, cards, 0.044)}, 0.05)
    assert (found.readings, found.caught) == (12, 8)
    assert [m.speedup for m in found.missed["top"]] == [1.03, 1.031]
    assert found.per_card["e"] == [2, 2]
    said = lines(found)
    assert "top (tolerance 4.4%): missed on 1 of its 5 cards" in said
    assert "  card e: 1.03x slowed to 0.981x, over the floor 0.98x the others give" in said
    assert "card e: 0 of the 2 comparisons it gave evidence to catch it" in said
    assert said[-1] == ("0 of 2 comparisons (evidence from 3 cards or more) catch a 5% slowdown on every card of their "
                        "evidence; 8 of 12 readings caught; 1 of 5 cards miss it somewhere")


def test_a_file_without_three_cards_of_evidence_says_so() -> None:
    found = catches({"two-cards": entry(1.0, {"a": [1.0], "b": [1.01]}, 0.02)}, 0.05)
    assert found.entries == 0
    assert lines(found) == [
        "no comparison has evidence from 3 cards or more, so none can be read with a card left out: calibrating "
        "blesses, or gate runs' reports added with `python -m speedgate evidence FILE REPORTS`, from 3 cards of this "
        "kind give it that"]


def test_a_share_outside_0_to_1_is_refused() -> None:
    for share in (0.0, 1.0, 5.0, -0.05):
        with pytest.raises(ValueError, match="a fraction between 0 and 1"):
            catches({}, share)


CASE = "perftests/t.py::test_x::vs_y"


def kind_file(tmp_path: Path) -> Path:
    """A schema-valid baseline file whose one entry has TOP's evidence."""
    doc = baseline_doc({CASE: 1.0}, key="gpu-x")
    doc["cases"][CASE].update({"tolerance": 0.044, "calibration": entry(1.0, TOP, 0.044)["calibration"]})
    path = tmp_path / "gpu-x.json"
    validate(doc, path)
    path.write_text(json.dumps(doc))
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speedgate", "evidence", *args], capture_output=True, text=True,
                          env={"PYTHONPATH": str(PLUGIN), "PATH": "/usr/bin:/bin"})


def test_the_command_prints_the_misses_and_writes_nothing(tmp_path: Path) -> None:
    path = kind_file(tmp_path)
    before = path.read_bytes()
    done = run(str(path), "--catch", "0.05")
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[1] == f"{CASE} (tolerance 4.4%): missed on 1 of its 5 cards"
    assert out[-1].startswith("0 of 1 comparisons (evidence from 3 cards or more) catch a 5% slowdown")
    assert path.read_bytes() == before


@pytest.mark.parametrize("args, said", [
    (["--catch", "5"], "argument --catch: a slowdown is a fraction between 0 and 1 (0.05 for 5%), not 5"),
    (["--catch", "five"], "argument --catch: 'five' is not a number"),
    (["report.json", "--catch", "0.05"], "--catch reads the file's evidence and writes nothing: give it alone"),
    (["--catch", "0.05", "--restart", CASE], "--catch reads the file's evidence and writes nothing: give it alone"),
])
def test_a_wrong_catch_is_named_and_the_file_left_alone(tmp_path: Path, args: list[str], said: str) -> None:
    path = kind_file(tmp_path)
    before = path.read_bytes()
    done = run(str(path), *args)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert path.read_bytes() == before


def test_a_corrupt_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "kind.json"
    path.write_text('{"broken')
    done = run(str(path), "--catch", "0.05")
    assert done.returncode == 2 and "kind.json" in done.stderr and "JSON" in done.stderr, done.stderr
    assert path.read_text() == '{"broken'
