"""The history store: one SQLite file, one row per comparison and metric of each recorded gate run.

Writers take SQLite's write lock first (BEGIN IMMEDIATE, waiting up to BUSY_TIMEOUT_S for another writer), check
the file inside that lock, and insert a whole run or nothing, so concurrent runs lose nothing and two first writers
cannot both create the tables. A file that is not a store, or a store of a newer schema, raises HistoryError naming
it; nothing is ever deleted, rewritten or migrated in place.

A series follows the runs' own times (run_time, then the order they were recorded in), never the order reports were
imported in: an old report imported late takes its place in time, whichever process imported it.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
# SQLite's header field for "which application's file is this" (PRAGMA application_id): "SGHS", speedgate history store.
APPLICATION_ID = 0x53474853
# How long a writer waits for another writer's transaction (a gate run inserts a few hundred rows in milliseconds).
BUSY_TIMEOUT_S = 60.0

_SCHEMA = """
CREATE TABLE runs (
    run_id INTEGER PRIMARY KEY AUTOINCREMENT,  -- the order runs were recorded in (a series is ordered by run_time, then this)
    run_time TEXT,          -- when the run happened (UTC, ISO 8601), for an import see cli.run_time_of
    recorded_at TEXT NOT NULL,
    commit_id TEXT,         -- null when unknown
    branch TEXT,
    source TEXT NOT NULL,   -- 'gate' or the imported report's path
    digest TEXT NOT NULL UNIQUE,  -- sha256 of the run's measurements (an imported report is recorded once)
    settings TEXT NOT NULL  -- the run's gate settings, JSON
);
CREATE TABLE run_hardware (
    run_id INTEGER NOT NULL REFERENCES runs(run_id),
    hardware_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,  -- JSON: hardware and software as the run detected them
    software TEXT NOT NULL,     -- JSON: the fingerprint's software versions
    PRIMARY KEY (run_id, hardware_key)
);
CREATE TABLE results (
    run_id INTEGER NOT NULL REFERENCES runs(run_id),
    kind TEXT NOT NULL CHECK (kind IN ('case', 'metric')),
    ident TEXT NOT NULL,        -- case_id or metric_id
    hardware_key TEXT NOT NULL,
    nodeid TEXT,
    timed INTEGER,
    verdict TEXT NOT NULL,
    check_mode TEXT,            -- CompareResult.check: how the outputs were checked
    test_failed INTEGER NOT NULL,
    reference_ms REAL,
    optimized_ms REAL,
    speedup REAL,               -- a case's reference_ms / optimized_ms; a metric's value
    ci_low REAL,
    ci_high REAL,
    noise REAL,
    baseline REAL,
    change REAL,
    tolerance REAL,
    tolerance_pinned INTEGER,
    remeasured INTEGER,
    unit TEXT,
    direction TEXT,
    note TEXT,
    PRIMARY KEY (run_id, kind, ident, hardware_key)
);
CREATE INDEX results_series ON results (kind, ident, hardware_key, run_id);
CREATE VIEW history AS
    SELECT r.run_id, r.run_time, r.commit_id, r.branch, r.source, h.fingerprint, h.software, x.*
    FROM results x JOIN runs r USING (run_id) LEFT JOIN run_hardware h USING (run_id, hardware_key);
"""


class HistoryError(Exception):
    """A history store that cannot be used: its message names the file and why."""


@dataclass(frozen=True)
class Point:
    """One case (or metric) in one recorded run."""

    run_id: int
    run_time: str | None
    commit: str | None
    branch: str | None
    kind: str
    ident: str
    hardware_key: str
    verdict: str
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    baseline: float | None
    tolerance: float | None
    reference_ms: float | None
    optimized_ms: float | None
    check: str | None
    test_failed: bool
    software: dict[str, Any]


@dataclass(frozen=True)
class Recorded:
    """What record_report did: the new run's id, or None when the same measurements were already recorded."""

    run_id: int | None
    rows: int
    duplicate_of: int | None = None


def digest(doc: Mapping[str, Any]) -> str:
    """The identity of a run: its cases' and metrics' measurements (a report imported twice is one run)."""
    body = json.dumps({"cases": doc.get("cases", []), "metrics": doc.get("metrics", [])}, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()


@contextmanager
def _connection(path: Path, *, create: bool) -> Iterator[sqlite3.Connection]:
    if not create and not path.is_file():
        raise HistoryError(f"{path}: no history store there (record runs with --speedgate-history or "
                           "`python -m speedgate history import`)")
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as exc:
        raise HistoryError(f"{path}: cannot be opened as a history store: {exc}") from None
    try:
        yield conn
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise HistoryError(f"{path}: another process held the store's write lock for more than {BUSY_TIMEOUT_S:.0f} s "
                               f"({exc}); nothing was recorded") from None
        raise HistoryError(f"{path}: not a usable history store ({exc}); the file was left as it is") from None
    except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
        raise HistoryError(f"{path}: not a usable history store, corrupt or not SQLite ({exc}); the file was left as "
                           "it is: move it aside to start a new history") from None
    finally:
        conn.close()


def _check(conn: sqlite3.Connection, path: Path) -> bool:
    """Whether the file is a store this code can read and write; False for an empty file (no tables yet)."""
    application = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if application == 0 and version == 0 and tables == 0:
        return False
    if application != APPLICATION_ID:
        raise HistoryError(f"{path}: a SQLite file, but not a speedgate history store (application_id "
                           f"{application:#x}, expected {APPLICATION_ID:#x}); the file was left as it is")
    if version > SCHEMA_VERSION:
        raise HistoryError(f"{path}: written by a newer speedgate (history schema {version}; this one reads schema "
                           f"{SCHEMA_VERSION} and older): upgrade pytest-speedgate; the file was left as it is")
    if version < 1:
        raise HistoryError(f"{path}: a speedgate history store without a schema version; the file was left as it is")
    return True


def _create(conn: sqlite3.Connection) -> None:
    bare = re.sub(r"--[^\n]*", "", _SCHEMA)  # comments may hold ';'
    for statement in bare.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _flag(value: Any) -> int | None:
    return None if value is None else int(bool(value))


def _case_row(run_id: int, case: Mapping[str, Any]) -> tuple[Any, ...]:
    return (run_id, "case", case["case_id"], case["hardware_key"], case.get("nodeid"), _flag(case.get("timed")),
            case["verdict"], case.get("check") or None, int(bool(case.get("test_failed"))), case.get("reference_ms"),
            case.get("optimized_ms"), case.get("speedup"), case.get("ci_low"), case.get("ci_high"), case.get("noise"),
            # The blessed speedup, where the report has it: a re-bless changes it, evidence added to the file does not
            # (the gate may judge against the kind's center, which moves with it; History.reblessed_at reads this).
            case["blessed"] if case.get("blessed") is not None else case.get("baseline"), case.get("change"), case.get("tolerance"),
            _flag(case.get("tolerance_pinned")),
            _flag(case.get("remeasured")), None, None, case.get("note"))


def _metric_row(run_id: int, metric: Mapping[str, Any]) -> tuple[Any, ...]:
    return (run_id, "metric", metric["metric_id"], metric["hardware_key"], metric.get("nodeid"), None,
            metric["verdict"], None, int(bool(metric.get("test_failed"))), None, None, metric.get("value"), None, None,
            None, metric.get("baseline"), metric.get("change"), metric.get("tolerance"), None, None, metric.get("unit"),
            metric.get("direction"), metric.get("note"))


def record_report(path: Path, doc: Mapping[str, Any], *, source: str, run_time: str | None, commit: str | None,
                  branch: str | None, recorded_at: str, once: bool = True) -> Recorded:
    """Add one run (a --speedgate-json report's document) to the store at path, creating the store if the file is
    absent or empty. All of the run or none of it. once: a run whose measurements are already there is not added
    again (a report imported twice); a gate run records itself with once=False, since a deterministic clock can
    measure the same numbers twice."""
    cases = [c for c in doc.get("cases", []) if isinstance(c, Mapping)]
    metrics = [m for m in doc.get("metrics", []) if isinstance(m, Mapping)]
    fingerprints = doc.get("fingerprints") or {}
    run_digest = digest(doc) if once else f"{digest(doc)}:{uuid.uuid4().hex}"
    with _connection(path, create=True) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if not _check(conn, path):
                _create(conn)
            seen = conn.execute("SELECT run_id FROM runs WHERE digest = ?", (run_digest,)).fetchone()
            if seen is not None:
                conn.execute("ROLLBACK")
                return Recorded(None, 0, duplicate_of=int(seen[0]))
            cursor = conn.execute(
                "INSERT INTO runs (run_time, recorded_at, commit_id, branch, source, digest, settings) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_time, recorded_at, commit, branch, source, run_digest, json.dumps(doc.get("settings") or {}, sort_keys=True)))
            run_id = int(cursor.lastrowid or 0)
            conn.executemany("INSERT INTO run_hardware VALUES (?, ?, ?, ?)", [
                (run_id, key, json.dumps(fp, sort_keys=True), json.dumps((fp or {}).get("software") or {}, sort_keys=True))
                for key, fp in sorted(fingerprints.items())])
            rows = [_case_row(run_id, c) for c in cases] + [_metric_row(run_id, m) for m in metrics]
            if rows:
                conn.executemany(f"INSERT INTO results VALUES ({', '.join('?' * len(rows[0]))})", rows)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return Recorded(run_id, len(rows))


def parse_time(text: object) -> datetime | None:
    """An ISO 8601 time as an aware UTC datetime ("Z", an offset, or none, read as UTC); None when it is not one."""
    if not isinstance(text, str) or not text.strip():
        return None
    stamp = text.strip()
    if stamp[-1:] in ("Z", "z"):  # Python 3.10's fromisoformat does not read "Z"
        stamp = stamp[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


# Runs whose time cannot be read (none in a store this code wrote) sort by recorded_at, and before all others if that
# cannot be read either.
_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)


def run_order(run_time: str | None, recorded_at: str | None, run_id: int) -> tuple[datetime, int]:
    """Where a run stands in its history: by when it ran, then by the order it was recorded in."""
    return (parse_time(run_time) or parse_time(recorded_at) or _EARLIEST, run_id)


def read_points(path: Path, kind: str = "case") -> list[Point]:
    """Every recorded point of this kind, in the order the runs happened (run_order), then by case and hardware key."""
    with _connection(path, create=False) as conn:
        if not _check(conn, path):
            return []
        cursor = conn.execute(
            "SELECT x.run_id, r.run_time, r.commit_id, r.branch, x.kind, x.ident, x.hardware_key, x.verdict, x.speedup, "
            "x.ci_low, x.ci_high, x.baseline, x.tolerance, x.reference_ms, x.optimized_ms, x.check_mode, x.test_failed, "
            "h.software, r.recorded_at FROM results x JOIN runs r USING (run_id) "
            "LEFT JOIN run_hardware h USING (run_id, hardware_key) WHERE x.kind = ?", (kind,))
        rows = [tuple(row) for row in cursor]
    rows.sort(key=lambda row: (run_order(row[1], row[-1], row[0]), row[5], row[6]))
    return [_point(row[:-1]) for row in rows]


def _point(row: tuple[Any, ...]) -> Point:
    (run_id, run_time, commit, branch, kind, ident, hardware_key, verdict, speedup, ci_low, ci_high, baseline, tolerance,
     reference_ms, optimized_ms, check, test_failed, software) = row
    return Point(run_id, run_time, commit, branch, kind, ident, hardware_key, verdict, speedup, ci_low, ci_high, baseline,
                 tolerance, reference_ms, optimized_ms, check, bool(test_failed), json.loads(software or "{}"))


def count_runs(path: Path) -> int:
    with _connection(path, create=False) as conn:
        return int(conn.execute("SELECT count(*) FROM runs").fetchone()[0]) if _check(conn, path) else 0


def group_series(points: Sequence[Point]) -> dict[tuple[str, str], list[Point]]:
    """(ident, hardware_key) -> its points in the order given (read_points: the order the runs happened), timed
    points only (a speedup to follow)."""
    series: dict[tuple[str, str], list[Point]] = {}
    for point in points:
        if point.speedup is not None and point.speedup > 0:
            series.setdefault((point.ident, point.hardware_key), []).append(point)
    return series
