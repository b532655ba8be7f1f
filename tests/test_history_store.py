"""The history store: round trip, concurrent writers, corrupt and newer-schema files, import order (CPU)."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from speedgate import export
from speedgate.history import cli, store
from speedgate.history.store import HistoryError, read_points, record_report
from speedgate.results import CompareResult, MetricResult
from speedgate.verdict import Verdict

KEY = "nvidia-h100-80gb-hbm3"
FINGERPRINT = {"hardware": {"kind": "gpu", "name": "NVIDIA H100 80GB HBM3"}, "software": {"torch": "2.11.0", "triton": "3.6.0"}}


def report_doc(speedups: dict[str, float], *, key: str = KEY, verdict: Verdict = Verdict.PASS, tolerance: float = 0.05,
               baseline: float | dict[str, float] | None = None, metrics: dict[str, float] | None = None) -> dict[str, Any]:
    """A --speedgate-json report as the plugin writes it (through CompareResult and export.json_report)."""
    records = [CompareResult(case_id=cid, nodeid=cid.split("::")[0] + "::" + cid.split("::")[1], name=None,
                             hardware_key=key, timed=True, verdict=verdict, note="", tolerance=tolerance, speedup=s,
                             reference_ms=2.0, optimized_ms=2.0 / s, ci_low=s * 0.99, ci_high=s * 1.01, noise=0.01,
                             baseline=_blessed(baseline, cid, s), change=0.0, check="returns")
               for cid, s in speedups.items()]
    metric_records = [MetricResult(metric_id=mid, nodeid=mid, name="compile_s", hardware_key=key, value=v, tolerance=0.2,
                                   direction="lower", unit="s", verdict=Verdict.PASS, note="", baseline=v)
                      for mid, v in (metrics or {}).items()]
    return export.json_report(records, metric_records, set(), settings={"tolerance": None}, fingerprints={key: FINGERPRINT},
                              ceilings={}, gpu_state={}, workers={})


def _blessed(baseline: float | dict[str, float] | None, case_id: str, speedup: float) -> float:
    """The case's blessed speedup: the one given (for all cases, or by case id), else its speedup."""
    if isinstance(baseline, dict):
        return baseline.get(case_id, speedup)
    return speedup if baseline is None else baseline


def write_report(path: Path, speedups: dict[str, float], **kwargs: Any) -> Path:
    path.write_text(json.dumps(report_doc(speedups, **kwargs)), encoding="utf-8")
    return path


def _record(db: Path, doc: dict[str, Any], commit: str | None = None) -> store.Recorded:
    return record_report(db, doc, source="test", run_time="2026-11-25T10:00:00Z", recorded_at="2026-11-25T10:00:01Z",
                         commit=commit, branch="main")


def test_round_trip(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    first = _record(db, report_doc({"t.py::test_a": 1.5, "t.py::test_b::pair": 2.0}, metrics={"t.py::test_c::compile": 3.0}),
                    "aaaa")
    second = _record(db, report_doc({"t.py::test_a": 1.4}, verdict=Verdict.REGRESSED, baseline=1.5), "bbbb")
    assert (first.run_id, first.rows, second.run_id, second.rows) == (1, 3, 2, 1)
    points = read_points(db)
    assert [(p.run_id, p.ident, p.speedup, p.commit, p.verdict) for p in points] == [
        (1, "t.py::test_a", 1.5, "aaaa", "pass"), (1, "t.py::test_b::pair", 2.0, "aaaa", "pass"),
        (2, "t.py::test_a", 1.4, "bbbb", "regressed")]
    last = points[-1]
    assert last.hardware_key == KEY and last.branch == "main" and last.run_time == "2026-11-25T10:00:00Z"
    assert last.ci_low == pytest.approx(1.386) and last.ci_high == pytest.approx(1.414)
    assert (last.baseline, last.tolerance, last.check, last.test_failed) == (1.5, 0.05, "returns", False)
    assert last.reference_ms == 2.0 and last.optimized_ms == pytest.approx(2.0 / 1.4)
    assert last.software == FINGERPRINT["software"]
    metric = read_points(db, kind="metric")
    assert [(m.ident, m.speedup) for m in metric] == [("t.py::test_c::compile", 3.0)]
    # The view a person can query with the sqlite3 shell holds every column, fingerprint included.
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT commit_id, fingerprint, speedup, tolerance, verdict FROM history WHERE run_id = 2").fetchone()
    assert row[0] == "bbbb" and json.loads(row[1]) == FINGERPRINT and row[2:] == (1.4, 0.05, "regressed")


def test_the_same_run_is_recorded_once(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    doc = report_doc({"t.py::test_a": 1.5})
    assert _record(db, doc).run_id == 1
    again = _record(db, doc, commit="other")
    assert again.run_id is None and again.duplicate_of == 1
    assert store.count_runs(db) == 1


def _writer(db: str, worker: int, runs: int, barrier: Any) -> None:
    barrier.wait()
    for run in range(runs):
        speedups = {f"t.py::test_{case}": 1.0 + worker / 10 + run / 1000 + case / 1e5 for case in range(20)}
        _record(Path(db), report_doc(speedups), commit=f"w{worker}-r{run}")


@pytest.mark.timing
def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    """Six processes record eight runs each into one new store at once: every run and row arrives, once."""
    db = tmp_path / "h.db"
    ctx = multiprocessing.get_context("spawn")
    workers, runs = 6, 8
    barrier = ctx.Barrier(workers)
    procs = [ctx.Process(target=_writer, args=(str(db), w, runs, barrier)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * workers
    points = read_points(db)
    assert store.count_runs(db) == workers * runs and len(points) == workers * runs * 20
    commits = {p.commit for p in points}
    assert commits == {f"w{w}-r{r}" for w in range(workers) for r in range(runs)}
    for commit in commits:  # each run's rows all under one run id
        assert len({p.run_id for p in points if p.commit == commit}) == 1


def test_a_corrupt_file_is_an_error_and_left_as_it_is(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    garbage = b"this is not SQLite at all\n" * 200
    db.write_bytes(garbage)
    with pytest.raises(HistoryError, match=rf"{db}: not a usable history store, corrupt or not SQLite"):
        _record(db, report_doc({"t.py::test_a": 1.5}))
    with pytest.raises(HistoryError, match=str(db)):
        read_points(db)
    assert db.read_bytes() == garbage


def test_a_truncated_store_is_an_error_and_left_as_it_is(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    for run in range(30):
        _record(db, report_doc({f"t.py::test_{i}": 1.0 + run / 100 for i in range(40)}))
    cut = db.read_bytes()[: db.stat().st_size // 2]
    db.write_bytes(cut)
    with pytest.raises(HistoryError, match=rf"{db}: not a usable history store"):
        read_points(db)
    with pytest.raises(HistoryError, match=str(db)):
        _record(db, report_doc({"t.py::test_a": 9.0}))
    assert db.read_bytes() == cut


def test_a_newer_schema_is_an_error_and_left_as_it_is(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _record(db, report_doc({"t.py::test_a": 1.5}))
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    before = db.read_bytes()
    with pytest.raises(HistoryError, match=rf"{db}: written by a newer speedgate \(history schema 2; this one reads schema 1"):
        _record(db, report_doc({"t.py::test_a": 1.4}))
    with pytest.raises(HistoryError, match="newer speedgate"):
        read_points(db)
    assert db.read_bytes() == before


def test_another_programs_sqlite_file_is_not_taken_over(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    before = db.read_bytes()
    with pytest.raises(HistoryError, match=rf"{db}: a SQLite file, but not a speedgate history store"):
        _record(db, report_doc({"t.py::test_a": 1.5}))
    assert db.read_bytes() == before


def test_reading_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "absent.db"
    with pytest.raises(HistoryError, match=rf"{db}: no history store there"):
        read_points(db)
    assert not db.exists()


def test_import_keeps_the_order_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = [write_report(tmp_path / f"{name}.json", {"t.py::test_a": speedup})
               for name, speedup in (("c", 1.3), ("a", 1.1), ("b", 1.2))]
    db = tmp_path / "h.db"
    assert cli.main(["import", "--db", str(db), *map(str, reports), "--commit", "c1", "--commit", "c2", "--commit", "c3"]) == 0
    points = read_points(db)
    assert [(p.run_id, p.speedup, p.commit, p.branch) for p in points] == [
        (1, 1.3, "c1", None), (2, 1.1, "c2", None), (3, 1.2, "c3", None)]
    assert points[0].run_time is not None and points[0].run_time.endswith("Z")  # the file's time: reports carry none
    # Imported again, with a fourth: only the fourth is new.
    fourth = write_report(tmp_path / "d.json", {"t.py::test_a": 1.0})
    assert cli.main(["import", "--db", str(db), *map(str, reports), str(fourth), "--branch", "main"]) == 0
    out = capsys.readouterr().out
    assert f"{reports[0]}: already recorded as run 1, skipped" in out
    assert [(p.run_id, p.speedup, p.commit, p.branch) for p in read_points(db)][-1] == (4, 1.0, None, "main")


def test_import_checks_every_report_before_recording_any(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_report(tmp_path / "good.json", {"t.py::test_a": 1.3})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"cases": {}}))
    baseline_like = tmp_path / "baseline.json"
    baseline_like.write_text("{not json")
    db = tmp_path / "h.db"
    assert cli.main(["import", "--db", str(db), str(good), str(bad)]) == 2
    assert f"{bad}: not a --speedgate-json report" in capsys.readouterr().err
    assert cli.main(["import", "--db", str(db), str(good), str(baseline_like)]) == 2
    assert f"{baseline_like}: cannot be read as JSON" in capsys.readouterr().err
    assert cli.main(["import", "--db", str(db), str(good), str(good), "--commit", "a", "--commit", "b", "--commit", "c"]) == 2
    assert "--commit given 3 times for 2 reports" in capsys.readouterr().err
    assert not db.exists()


def test_import_into_a_corrupt_store_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_report(tmp_path / "good.json", {"t.py::test_a": 1.3})
    db = tmp_path / "h.db"
    db.write_bytes(b"\x00garbage" * 100)
    assert cli.main(["import", "--db", str(db), str(good)]) == 2
    assert f"speedgate history: {db}: not a usable history store" in capsys.readouterr().err
    assert db.read_bytes() == b"\x00garbage" * 100


def test_the_store_keeps_the_blessed_speedup_not_the_center_the_gate_judged_against(tmp_path: Path) -> None:
    # A gate judges against the kind's center once two cards gave evidence; adding evidence moves the center without
    # a re-bless. The history's re-bless detection (History.reblessed_at) must see the blessed speedup only.
    db = tmp_path / "h.db"
    for run, center in enumerate((1.50, 1.52, 1.55)):
        doc = report_doc({"t.py::test_a": 1.5}, baseline=center)
        doc["cases"][0]["blessed"] = 1.48
        _record(db, doc, f"c{run}")
    older = report_doc({"t.py::test_a": 1.5}, baseline=1.49)  # a report from before the field existed
    _record(db, older, "c3")
    assert [p.baseline for p in read_points(db)] == [1.48, 1.48, 1.48, 1.49]
