"""The history's order is the runs' own times: reports imported shuffled, and by several processes at once, give the
series, change points and latest speedup of the same reports imported oldest first (CPU)."""

from __future__ import annotations

import json
import math
import multiprocessing
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_history_store import report_doc

from speedgate.history import cli
from speedgate.history.store import parse_time, read_points, record_report

RUNS = 40
CREEP_FROM = 15
CASES = ("t.py::test_creeps", "t.py::test_steady")


def speedups_at(run: int) -> dict[str, float]:
    """Run `run` (0-based, in time order): a case that loses 0.6% a run from CREEP_FROM on, and a steady one."""
    rng = np.random.default_rng(1000 + run)
    creep = 0.994 ** max(0, run - CREEP_FROM + 1)
    return {"t.py::test_creeps": round(float(30.0 * creep * math.exp(rng.normal(0, 0.002))), 4),
            "t.py::test_steady": round(float(2.0 * math.exp(rng.normal(0, 0.002))), 4)}


def run_time(run: int) -> str:
    """Two runs a day, the first ones in October: text order and time order agree only after parsing offsets."""
    day, half = divmod(run, 2)
    return f"2026-10-{1 + day:02d}T{12 * half:02d}:00:00Z"


def write_reports(folder: Path) -> list[Path]:
    """RUNS reports in time order, each carrying its run_time and commit, as the plugin's --speedgate-json writes them."""
    folder.mkdir()
    paths = []
    for run in range(RUNS):
        doc = report_doc(speedups_at(run), baseline={"t.py::test_creeps": 30.0, "t.py::test_steady": 2.0})
        doc["run_time"] = run_time(run)
        doc["commit"] = f"{run:03d}".ljust(40, "c")
        path = folder / f"report-{run:02d}.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        paths.append(path)
    return paths


def summary(db: Path) -> list[tuple[Any, ...]]:
    """What a reader of `history` sees of each series, run ids aside: its speedups in order, its change points
    (index, before, after, commits), its latest move, and "now"."""
    found = []
    for series in cli.load_series(db):
        found.append((series.ident, [p.speedup for p in series.points],
                      [(c.index, c.before, c.after, c.commits()) for c in series.changes],
                      series.latest_move, series.points[-1].speedup))
    return sorted(found)


def _import(db: str, paths: list[str], barrier: Any) -> None:
    barrier.wait()
    if cli.main(["import", "--db", db, *paths]) != 0:
        raise SystemExit(1)


@pytest.mark.timing
def test_shuffled_concurrent_imports_give_the_history_of_the_runs_times(tmp_path: Path) -> None:
    pytest.importorskip("ruptures", reason="the history extra: pip install -e '.[history]'")
    paths = write_reports(tmp_path / "reports")
    in_order = tmp_path / "in-order.db"
    assert cli.main(["import", "--db", str(in_order), *map(str, paths)]) == 0
    expected = summary(in_order)
    creep = next(s for s in expected if s[0] == "t.py::test_creeps")
    assert len(creep[2]) >= 2 and creep[4] == speedups_at(RUNS - 1)["t.py::test_creeps"]  # the case this test is about

    # Four processes import a shuffled quarter each, all at once, the newest report among the first to land.
    shuffled = [str(p) for p in paths]
    random.Random(47).shuffle(shuffled)
    shuffled.remove(str(paths[-1]))
    shuffled.insert(0, str(paths[-1]))
    concurrent = tmp_path / "concurrent.db"
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_import, args=(str(concurrent), shuffled[k::4], barrier)) for k in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    assert [proc.exitcode for proc in procs] == [0] * 4
    points = read_points(concurrent)
    assert len({p.run_id for p in points}) == RUNS
    assert [parse_time(p.run_time) for p in points] == sorted(parse_time(p.run_time) for p in points)
    assert summary(concurrent) == expected


def test_runs_recorded_out_of_time_order_read_in_time_order(tmp_path: Path) -> None:
    """Times in any ISO 8601 form (an offset, no zone read as UTC, fractions) compare as times, not as text; runs at
    the same time keep the order they were recorded in."""
    db = tmp_path / "h.db"
    times = ["2026-11-25T12:00:00+02:00",   # 10:00 UTC: second, though its text sorts after the next one's
             "2026-11-25T09:30:00Z",        # first
             "2026-11-25T11:00:00.5",       # no zone: UTC, fourth
             "2026-11-25T10:00:00Z",        # the same time as the first line: after it, recorded later
             "2026-11-25T11:00:00.25Z"]     # third
    for k, when in enumerate(times):
        record_report(db, report_doc({"t.py::test_a": 1.0 + k / 10}), source="test", run_time=when,
                      recorded_at="2026-11-26T00:00:00Z", commit=f"c{k}", branch=None)
    assert [p.commit for p in read_points(db)] == ["c1", "c0", "c3", "c4", "c2"]


def test_import_reads_the_reports_time_and_refuses_one_that_is_not(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    early, late = (tmp_path / "early.json"), (tmp_path / "late.json")
    for path, when, speedup in ((late, "2026-11-20T10:00:00+01:00", 1.2), (early, "2026-11-19T10:00:00Z", 1.1)):
        doc = report_doc({"t.py::test_a": speedup})
        doc["run_time"] = when
        path.write_text(json.dumps(doc), encoding="utf-8")
    db = tmp_path / "h.db"
    assert cli.main(["import", "--db", str(db), str(late), str(early)]) == 0
    assert f"{late}: run 1 (ran 2026-11-20T09:00:00Z)" in capsys.readouterr().out  # stored in UTC
    assert [(p.run_id, p.speedup) for p in read_points(db)] == [(2, 1.1), (1, 1.2)]
    bad = tmp_path / "bad.json"
    doc = report_doc({"t.py::test_a": 1.3})
    doc["run_time"] = "last Tuesday"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    assert cli.main(["import", "--db", str(db), str(bad)]) == 2
    assert f"{bad}: its run_time 'last Tuesday' is not an ISO 8601 time" in capsys.readouterr().err
