"""Concurrent blesses into one baseline file: update() loses no process's entries.

Run as a script (`python tests/test_baseline_concurrency.py`) to see the race the lock prevents: the same
blesses with a plain read, merge, write_atomic lose entries. The test does not assert that a race happens
(it would be flaky); it asserts that the locked way never loses one.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

from speedgate import baseline

PROCESSES = 6
ENTRIES_EACH = 20
# Held inside change(), between the read and the write, to widen the window a concurrent writer can hit.
HOLD_S = 0.002
FINGERPRINT = {"hardware": {"kind": "cpu", "name": "test"}, "software": {}}


def _entry(speedup: float) -> dict[str, Any]:
    return {"speedup": speedup, "reference_ms": 2.0, "optimized_ms": 2.0 / speedup, "ci_low": speedup * 0.99,
            "ci_high": speedup * 1.01, "noise": 0.01, "rounds": 20, "timer": "scripted",
            "measured_at": "2026-01-01T00:00:00Z", "software": {}}


def _bless(path: str, worker: int, locked: bool, start: Any) -> None:
    """One pytest process blessing ENTRIES_EACH cases one by one, through update() or without a lock."""
    start.wait()
    for i in range(ENTRIES_EACH):
        case_id = f"w{worker}.py::case_{i}"

        def change(existing: dict[str, Any] | None, case_id: str = case_id) -> dict[str, Any]:
            time.sleep(HOLD_S)
            doc, _ = baseline.merge(existing, hardware_key="test-box", fingerprint=FINGERPRINT,
                                    entries={case_id: _entry(2.0)}, rewrite_fraction={})
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


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for locked in (True, False):
            path = Path(tmp) / f"locked-{locked}.json"
            began = time.perf_counter()
            kept = bless_at_once(path, locked)
            print(f"{'update() with the lock' if locked else 'read/merge/write_atomic, no lock'}: "
                  f"{kept}/{PROCESSES * ENTRIES_EACH} entries kept ({time.perf_counter() - began:.1f} s)")
