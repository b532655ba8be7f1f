"""lab.xdist_replay: xdist's own load scheduler replayed on recorded test times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("xdist")

from lab.xdist_replay import main, replay  # noqa: E402

# 64 tests, the suite's shape: eight long ones together, the second worker's opening chunk (a quarter of its share).
COLLECTION = [f"t.py::test_{i}" for i in range(64)]
LONG = {f"t.py::test_{i}" for i in range(8, 16)}
SECONDS = {name: (40.0 if name in LONG else 1.0) for name in COLLECTION}


def test_the_default_chunk_gives_one_worker_every_long_test() -> None:
    result = replay(COLLECTION, SECONDS)
    assert result == {"makespan": 320.0, "busy": {"gw0": 56.0, "gw1": 320.0}, "tests": {"gw0": 56, "gw1": 8}}


def test_one_at_a_time_shares_them() -> None:
    result = replay(COLLECTION, SECONDS, chunk=1)
    assert result == {"makespan": 188.0, "busy": {"gw0": 188.0, "gw1": 188.0}, "tests": {"gw0": 32, "gw1": 32}}


def test_a_test_without_a_time_counts_as_a_skip() -> None:
    result = replay(["a::x", "a::y", "a::z", "a::w"], {"a::x": 3.0})
    assert sum(result["busy"].values()) == pytest.approx(3.0 + 3 * 0.05)


def test_main_prints_both_schedules_of_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "run.json"
    report.write_text(json.dumps({"test_seconds": SECONDS}))
    collection = tmp_path / "collection.txt"
    collection.write_text("\n".join(COLLECTION))
    assert main([str(report), "--collection", str(collection)]) == 0
    out = capsys.readouterr().out
    assert "--maxschedchunk default: the last worker done at 320 s; gw0 56 s (56 tests), gw1 320 s (8 tests)" in out
    assert "--maxschedchunk 1: the last worker done at 188 s" in out


def test_main_refuses_a_report_of_another_collection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "run.json"
    report.write_text(json.dumps({"test_seconds": {"other.py::test_gone": 1.0}}))
    collection = tmp_path / "collection.txt"
    collection.write_text("\n".join(COLLECTION))
    assert main([str(report), "--collection", str(collection)]) == 2
    assert "not in the collection (first: other.py::test_gone)" in capsys.readouterr().err
