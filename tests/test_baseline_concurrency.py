"""Concurrent blesses into one baseline file: update() loses no process's entries, nor their tests' seconds.

Run as a script (`python tests/test_baseline_concurrency.py`) to see the race the lock prevents: the same
blesses with a plain read, merge, write_atomic lose entries. The test does not assert that a race happens
(it would be flaky); it asserts that the locked way never loses one.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest

from speedgate import baseline

PROCESSES = 6
ENTRIES_EACH = 20
# Held inside change(), between the read and the write, to widen the window a concurrent writer can hit.
HOLD_S = 0.002
FINGERPRINT = {"hardware": {"kind": "cpu", "name": "test"}, "software": {}}

pytestmark = pytest.mark.timing  # signals, deadlines, locks or clocks: tests/conftest.py


def _entry(speedup: float) -> dict[str, Any]:
    return {"speedup": speedup, "reference_ms": 2.0, "optimized_ms": 2.0 / speedup, "ci_low": speedup * 0.99,
            "ci_high": speedup * 1.01, "noise": 0.01, "rounds": 20, "timer": "scripted",
            "measured_at": "2026-01-01T00:00:00Z", "software": {}}


def _bless(path: str, worker: int, locked: bool, start: Any) -> None:
    """One pytest process blessing ENTRIES_EACH cases one by one, through update() or without a lock."""
    start.wait()
    for i in range(ENTRIES_EACH):
        case_id = f"w{worker}.py::case_{i}"

        def change(existing: dict[str, Any] | None, case_id: str = case_id, i: int = i) -> dict[str, Any]:
            time.sleep(HOLD_S)
            doc, _ = baseline.merge(existing, hardware_key="test-box", fingerprint=FINGERPRINT,
                                    entries={case_id: _entry(2.0)}, rewrite_fraction={},
                                    test_seconds={case_id: 1.0 + i})
            return doc

        if locked:
            baseline.update(Path(path), change)
        else:
            baseline.write_atomic(Path(path), change(baseline.read(Path(path))))


def bless_at_once(path: Path, locked: bool) -> int:
    """How many entries the file holds after PROCESSES processes blessed ENTRIES_EACH each at the same time."""
    context = multiprocessing.get_context("spawn")  # no fork of a process that has torch loaded
    start = context.Event()
    workers = [context.Process(target=_bless, args=(str(path), w, locked, start)) for w in range(PROCESSES)]
    for p in workers:
        p.start()
    start.set()
    for p in workers:
        p.join(timeout=120)
    assert [p.exitcode for p in workers] == [0] * PROCESSES
    doc = baseline.read(path)
    return len(doc["cases"]) if doc else 0


def test_concurrent_updates_lose_no_entry(tmp_path: Path) -> None:
    path = tmp_path / "test-box.json"
    assert bless_at_once(path, locked=True) == PROCESSES * ENTRIES_EACH
    doc = baseline.read(path)
    assert doc is not None and {f"w{w}.py::case_{i}" for w in range(PROCESSES) for i in range(ENTRIES_EACH)} == set(doc["cases"])
    # Each test's seconds (the -n schedule's) too: a bless merges them into the file as it holds them under the lock.
    assert doc["test_seconds"] == {f"w{w}.py::case_{i}": 1.0 + i for w in range(PROCESSES) for i in range(ENTRIES_EACH)}


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for locked in (True, False):
            path = Path(tmp) / f"locked-{locked}.json"
            began = time.perf_counter()
            kept = bless_at_once(path, locked)
            print(f"{'update() with the lock' if locked else 'read/merge/write_atomic, no lock'}: "
                  f"{kept}/{PROCESSES * ENTRIES_EACH} entries kept ({time.perf_counter() - began:.1f} s)")


# The other run: a test of this run that writes the file as a concurrent bless would, while this run measures.
BLESSED_MEANWHILE = """
from pathlib import Path

def test_z_another_run_blesses():
    path = Path({path!r})
    path.parent.mkdir(exist_ok=True)
    path.write_text({doc!r})
"""


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_bless_says_which_entries_another_run_wrote_meanwhile(project: pytest.Pytester, xdist: tuple[str, ...]) -> None:
    """Entries a concurrent bless wrote after this run read the file are that run's, and named so; the counts still
    add up to this run's cases (they left those entries out once, and read 1 of 3)."""
    # Imported here: the spawned blessing processes import this module, and in a run that also collects perftests/
    # the name `conftest` can find the repository's root conftest first.
    from conftest import CASES, baseline_doc

    path = project.path / "baselines" / "test-box.json"
    project.makepyfile(test_cases=CASES + "\ndef test_a(perf):\n    perf.compare(ref_2ms, opt_1ms)\n"
                                          "\ndef test_b(perf):\n    perf.compare(ref_2ms, opt_1ms)\n"
                                          "\ndef test_c(perf):\n    perf.compare(ref_2ms, opt_1ms)\n",
                       test_z=BLESSED_MEANWHILE.format(path=str(path), doc=json.dumps(baseline_doc(
                           {"test_cases.py::test_a": 2.0, "test_cases.py::test_b": 4.0}))))
    result = project.runpytest_subprocess("--update-baselines", "-p", "no:randomly", *xdist)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([
        f"baseline {path}: 1 added, 1 updated, 1 kept (moved less than a third of their tolerance), 0 other entries untouched",
        "  2 entries were written by another run while this one ran (a concurrent bless), counted above*",
    ])
    out = result.stdout.str()
    assert "written meanwhile by another run, kept theirs: test_cases.py::test_a: 2x (this run: 2x)" in out
    assert "written meanwhile by another run, replaced by this run's: test_cases.py::test_b: 4x (this run: 2x)" in out
    assert "  added: test_cases.py::test_c: 2x" in out
    entries = json.loads(path.read_text())["cases"]
    assert {case: entry["speedup"] for case, entry in entries.items()} == {
        "test_cases.py::test_a": 2.0, "test_cases.py::test_b": 2.0, "test_cases.py::test_c": 2.0}
