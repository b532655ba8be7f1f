"""Recording from the gate run itself (--speedgate-history / ini speedgate_history), xdist included (pytester, CPU)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_history_store import report_doc

from conftest import CASES, SCRIPTED_CONFTEST, write_baseline
from speedgate.history import changes, recording  # noqa: F401  (loaded before pytester's in-process runs, as conftest says)
from speedgate.history.store import read_points, record_report

try:  # likewise: a run that imported ruptures (and scipy) would drop them, and numpy's C modules cannot load twice
    import ruptures  # noqa: F401
except ImportError:
    pass

TESTS = CASES + """
def test_fine(perf):
    perf.compare(ref_2ms, opt_1ms, name="pair")

def test_slow(perf):
    perf.compare(ref_2ms, opt_2ms)
"""


@pytest.fixture
def gate(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("SPEEDGATE_COMMIT", "c0ffee")
    monkeypatch.setenv("SPEEDGATE_BRANCH", "main")
    project.makepyfile(test_cases=TESTS)
    write_baseline(project.path, {"test_cases.py::test_fine::pair": 2.0, "test_cases.py::test_slow": 1.0})
    return project


def test_each_gate_run_is_recorded(gate: pytest.Pytester) -> None:
    db = gate.path / "out" / "history.db"
    for _ in range(2):
        result = gate.runpytest("--speedgate-history", "out/history.db")
        result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*history: run 2 recorded in {db} (2 rows)*"])
    recorded = read_points(db)
    assert [(p.run_id, p.ident, p.speedup, p.baseline, p.verdict, p.commit, p.branch, p.hardware_key) for p in recorded] == [
        (1, "test_cases.py::test_fine::pair", 2.0, 2.0, "pass", "c0ffee", "main", "test-box"),
        (1, "test_cases.py::test_slow", 1.0, 1.0, "pass", "c0ffee", "main", "test-box"),
        (2, "test_cases.py::test_fine::pair", 2.0, 2.0, "pass", "c0ffee", "main", "test-box"),
        (2, "test_cases.py::test_slow", 1.0, 1.0, "pass", "c0ffee", "main", "test-box"),
    ]
    assert recorded[0].check == "returns" and recorded[0].tolerance == pytest.approx(0.1)
    assert recorded[0].run_time is not None


def test_the_ini_key_is_relative_to_the_ini_file(gate: pytest.Pytester) -> None:
    gate.makeini("[pytest]\naddopts = --hardware-key test-box -p no:cacheprovider\nspeedgate_history = hist/h.db\n")
    sub = gate.mkdir("elsewhere")
    result = gate.runpytest("--rootdir", str(gate.path), "-c", str(gate.path / "tox.ini"), str(gate.path / "test_cases.py"),
                            "--speedgate-json", str(sub / "r.json"))
    result.assert_outcomes(passed=2)
    assert len(read_points(gate.path / "hist" / "h.db")) == 2


def test_not_asked_nothing_is_written(gate: pytest.Pytester) -> None:
    gate.runpytest().assert_outcomes(passed=2)
    assert not list(gate.path.rglob("*.db"))


def test_xdist_workers_results_are_recorded_once_by_the_controller(gate: pytest.Pytester) -> None:
    gate.makepyfile(test_more=CASES + "\n".join(f"""
def test_more_{i}(perf):
    perf.compare(ref_2ms, opt_1ms)
""" for i in range(6)))
    result = gate.runpytest_subprocess("-n", "2", "--speedgate-history", "h.db")
    result.assert_outcomes(passed=8)
    recorded = read_points(gate.path / "h.db")
    assert {p.run_id for p in recorded} == {1}
    assert sorted(p.ident for p in recorded) == sorted(
        ["test_cases.py::test_fine::pair", "test_cases.py::test_slow", *(f"test_more.py::test_more_{i}" for i in range(6))])


def test_a_corrupt_store_fails_the_run_and_is_left_as_it_is(gate: pytest.Pytester) -> None:
    db = gate.path / "h.db"
    db.write_bytes(b"not a database" * 100)
    result = gate.runpytest("--speedgate-history", "h.db")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*speedgate error: history: {db}: not a usable history store*left as it is*"])
    assert db.read_bytes() == b"not a database" * 100


def test_a_newer_store_fails_the_run_and_is_left_as_it_is(gate: pytest.Pytester) -> None:
    db = gate.path / "h.db"
    gate.runpytest("--speedgate-history", "h.db").assert_outcomes(passed=2)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 7")
    before = db.read_bytes()
    result = gate.runpytest("--speedgate-history", "h.db")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*speedgate error: history: *h.db: written by a newer speedgate (history schema 7*"])
    assert db.read_bytes() == before


def test_a_drop_the_tolerance_let_pass_is_a_warning(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight recorded runs at 2.0x, one at 1.9x, then this gate run at 1.9x: 5% below the blessed 2.0x passes its
    10% tolerance, and the history says the series now ends in a drop (once: the run after says nothing)."""
    pytest.importorskip("ruptures")
    monkeypatch.setenv("SPEEDGATE_COMMIT", "c0ffee")
    project.makeconftest(SCRIPTED_CONFTEST.format(times={"ref_2ms": 2.0, "opt_slower": 2.0 / 1.9}))
    project.makepyfile(test_cases="""
def ref_2ms():
    return 1.0

def opt_slower():
    return 1.0

def test_drifts(perf):
    perf.compare(ref_2ms, opt_slower, tolerance=0.1)
""")
    write_baseline(project.path, {"test_cases.py::test_drifts": 2.0})
    db = project.path / "h.db"
    for run, speedup in enumerate([2.0, 2.001, 1.999, 2.0005, 2.002, 1.998, 2.0015, 1.9995, 1.9]):
        doc = report_doc({"test_cases.py::test_drifts": speedup}, key="test-box", baseline=2.0, tolerance=0.1)
        record_report(db, doc, source=f"r{run}", run_time=None, recorded_at="x", commit=f"old{run}", branch=None)
    result = project.runpytest("--speedgate-history", "h.db")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*speedgate warning: test_cases.py::test_drifts [[]test-box[]] passed its tolerance, but its "
                                 "history now ends in a drop of -5.0% since run 9 (old7..old8)*"])
    again = project.runpytest("--speedgate-history", "h.db")
    again.assert_outcomes(passed=1)
    assert "ends in a drop" not in again.stdout.str()


def test_option_help_names_the_store(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--speedgate-history=PATH*", "*speedgate_history*"])
    assert Path  # noqa: B018  (keeps the import for annotations above)
