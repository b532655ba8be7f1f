"""Baseline files: read and validate, merge blessed results, write atomically under a lock. Imports jsonschema and filelock lazily."""

from __future__ import annotations

import json
import math
import os
import secrets
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from . import codegen

SCHEMA_VERSION = 1
SCHEMA_RESOURCE = "baseline-v1.schema.json"
# How long update() waits for another process blessing into the same file. A bless holds the lock for a read,
# a merge and a write (fractions of a second: docs/results/plugin-constants.md), so running out means a stuck holder.
LOCK_TIMEOUT_S = 300.0
# A test's recorded seconds (the file's test_seconds: the order xdist's workers get tests in, speedgate.schedule) are
# rewritten only when they moved by more than this fraction and SECONDS_REWRITE_MIN, or were missing: a compile-bound
# test's seconds move by a third between hosts of one kind (docs/results/suite-time.md), which orders nothing anew.
SECONDS_REWRITE_FRACTION = 0.5
SECONDS_REWRITE_MIN = 1.0
SECONDS_DIGITS = 1


class BaselineError(Exception):
    """A baseline file that cannot be used; the message names the file and what is wrong."""


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    text = resources.files("speedgate").joinpath("schema").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def _entry_and_field(parts: list[str]) -> tuple[str, str]:
    """('cases/<case id>', 'speedup') for a place in a document: the entry a person looks up, then the field in it."""
    # Case ids contain '/', so the entry is always the first two parts under cases and metrics.
    split = 2 if len(parts) > 2 and parts[0] in ("cases", "metrics") else len(parts) - 1
    return "/".join(parts[:split]) or "(top level)", "/".join(parts[split:])


def _check_finite(value: Any, path: Path | str, parts: list[str]) -> None:
    """Raise BaselineError at the first NaN or infinite number anywhere in value."""
    # JSON schema cannot do this: every comparison with NaN is false, so NaN passes "minimum" and
    # "exclusiveMinimum" (jsonschema 4.26 accepts it for {"type": "number", "exclusiveMinimum": 0}), and so
    # does Infinity against any lower bound. A NaN speedup would switch the gate off for its case; an infinite
    # one would fail every run while a re-bless reports it "kept".
    if isinstance(value, float) and not math.isfinite(value):
        entry, field = _entry_and_field(parts)
        spelled = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        raise BaselineError(f"{path}: {entry}: {field} is {spelled}; every number must be finite")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite(item, path, [*parts, str(key)])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_finite(item, path, [*parts, str(index)])


def _check_intervals(doc: dict[str, Any], path: Path | str) -> None:
    """The one range the schema cannot say: a case's speedup lies inside its own 95% interval."""
    for case_id, case in doc["cases"].items():
        speedup, low, high = case["speedup"], case.get("ci_low"), case.get("ci_high")
        if (low is not None and low > speedup) or (high is not None and speedup > high):
            raise BaselineError(
                f"{path}: cases/{case_id}: speedup {speedup} is outside its interval [{low}, {high}]; "
                "ci_low <= speedup <= ci_high must hold"
            )


def validate(doc: Any, path: Path | str) -> None:
    """Raise BaselineError naming path, the entry and what is wrong: a number that is not finite, the first schema
    violation (ranges included), or a speedup outside its interval."""
    import jsonschema  # type: ignore[import-untyped, unused-ignore]

    _check_finite(doc, path, [])
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise BaselineError(f"{path}: does not match the baseline schema at {where}: {first.message}{more}")
    _check_intervals(doc, path)


def read(path: Path) -> dict[str, Any] | None:
    """The validated contents of path, or None when it does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BaselineError(f"{path}: cannot be read: {exc}") from exc
    try:
        # NaN, Infinity and -Infinity are not JSON, but Python's json reads them. They are kept as floats here,
        # not refused, so that validate() refuses them naming the entry and field; parse_constant cannot say where.
        doc = json.loads(text, parse_constant=float)
    except json.JSONDecodeError as exc:
        raise BaselineError(f"{path}: is not valid JSON: {exc}") from exc
    validate(doc, path)
    checked: dict[str, Any] = doc
    return checked


@dataclass(frozen=True)
class Change:
    """What an update did to one case: 'added', 'updated' or 'kept' (moved less than the rewrite threshold)."""

    case_id: str
    action: str
    old_speedup: float | None
    new_speedup: float
    unit: str = "x"  # "x" for a case's speedup, "" for a metric's value


def _usable(value: Any, value_key: str) -> bool:
    """Whether an existing entry's value can be compared with: finite, and for a speedup, positive."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return value > 0 if value_key == "speedup" else True  # a metric's value may be 0 (no graph breaks)


def _merge_section(
    old: dict[str, Any], entries: dict[str, dict[str, Any]], rewrite_fraction: dict[str, float], value_key: str
) -> tuple[dict[str, Any], list[Change]]:
    unit = "x" if value_key == "speedup" else ""
    merged = dict(old)
    changes = []
    for case_id in sorted(entries):
        new = entries[case_id]
        previous = merged.get(case_id)
        if previous is None:
            merged[case_id] = new
            changes.append(Change(case_id, "added", None, new[value_key], unit))
            continue
        old_value = previous.get(value_key)
        if not _usable(old_value, value_key):
            # An unusable old value (NaN moves by NaN, never more than the threshold) must never stay "kept".
            merged[case_id] = new
            shown = old_value if isinstance(old_value, (int, float)) and not isinstance(old_value, bool) else None
            changes.append(Change(case_id, "updated", shown, new[value_key], unit))
            continue
        base = abs(previous[value_key]) or 1.0
        moved = abs(new[value_key] - previous[value_key]) / base
        # A new calibration is rewritten whatever the speedup did: its tolerance is what was asked for. So are other
        # kernels (another pick, the old one kept among the entry's picks): the facts are exact, never noise. A
        # kernel's share of its side's time is a measurement (codegen.MEASURED), and a fact the entry lacks is no
        # other kernel: neither alone rewrites it (codegen.same_kernels).
        method_changed = any(new.get(k) != previous.get(k) for k in ("config", "graphed", "timer", "calibration", "picks")) \
            or not codegen.same_kernels(previous.get("codegen"), new.get("codegen"))
        if moved > rewrite_fraction.get(case_id, 0.0) or method_changed:
            merged[case_id] = new
            changes.append(Change(case_id, "updated", previous[value_key], new[value_key], unit))
        else:
            # Kept, with the facts the run read that the entry lacks (a race, a share: codegen.completed).
            if (facts := codegen.completed(previous.get("codegen"), new.get("codegen"))) is not None:
                merged[case_id] = {**previous, "codegen": facts}
            changes.append(Change(case_id, "kept", previous[value_key], new[value_key], unit))
    return merged, changes


def recorded_seconds(doc: Mapping[str, Any] | None) -> dict[str, float]:
    """A baseline document's test id -> the seconds the test took when last blessed (empty when it records none)."""
    return {str(k): float(v) for k, v in ((doc or {}).get("test_seconds") or {}).items()}


def merge_seconds(old: Mapping[str, float], new: Mapping[str, float]) -> tuple[dict[str, float], list[str]]:
    """(old with new's seconds where a test had none, or moved by more than SECONDS_REWRITE_FRACTION of its old
    seconds and more than SECONDS_REWRITE_MIN; the test ids rewritten). Tests new does not name keep theirs."""
    merged = dict(old)
    rewritten = []
    for test, seconds in sorted(new.items()):
        value = round(float(seconds), SECONDS_DIGITS)
        before = merged.get(test)
        if before is None or abs(value - before) > max(SECONDS_REWRITE_FRACTION * before, SECONDS_REWRITE_MIN):
            merged[test] = value
            rewritten.append(test)
    return merged, rewritten


def merge(
    existing: dict[str, Any] | None,
    *,
    hardware_key: str,
    fingerprint: dict[str, Any],
    entries: dict[str, dict[str, Any]],
    rewrite_fraction: dict[str, float],
    metrics: dict[str, dict[str, Any]] | None = None,
    metric_rewrite_fraction: dict[str, float] | None = None,
    test_seconds: Mapping[str, float] | None = None,
) -> tuple[dict[str, Any], list[Change]]:
    """Fold blessed entries into a baseline document; cases and metrics not given are kept as they are.

    An entry already present is rewritten only when its value (a case's speedup, a metric's value) moved by more
    than its rewrite fraction (a third of its tolerance), or its configuration or way of timing changed (config,
    graphed, timer), so a re-bless shows real moves, not noise. test_seconds: the blessed tests' seconds, merged by
    merge_seconds; the document's own are kept whatever the bless.
    """
    cases, changes = _merge_section(existing["cases"] if existing else {}, entries, rewrite_fraction, "speedup")
    old_metrics = (existing or {}).get("metrics", {})
    merged_metrics, metric_changes = _merge_section(old_metrics, metrics or {}, metric_rewrite_fraction or {}, "value")
    changes += metric_changes
    touched = any(c.action != "kept" for c in changes)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "hardware_key": hardware_key,
        # The fingerprint is the one of the latest run that changed something.
        "fingerprint": fingerprint if touched or not existing else existing["fingerprint"],
        "updated_at": now_iso() if touched or not existing else existing.get("updated_at", now_iso()),
        "cases": cases,
    }
    if merged_metrics:
        doc["metrics"] = merged_metrics
    seconds, _rewritten = merge_seconds(recorded_seconds(existing), test_seconds or {})
    if seconds:
        doc["test_seconds"] = seconds
    return doc, changes


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def dumps(doc: dict[str, Any]) -> str:
    """Stable formatting: sorted keys, two-space indent, trailing newline, so a re-bless is a small diff."""
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"


def _existing_mode(path: Path) -> int | None:
    """The permission bits of the file at path, or None when there is none."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None


def write_atomic(path: Path, doc: dict[str, Any]) -> None:
    """Validate, write to a temporary file beside path, then rename over it: readers never see half a file.

    The file gets the mode of the file it replaces, or for a new file 0666 less the umask (and any default ACL),
    like any file the user writes.
    """
    validate(doc, path)
    text = dumps(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    keep_mode = _existing_mode(path)
    # Not tempfile.mkstemp: it creates the file 0600 whatever the umask, and the rename would carry that mode
    # over to the baseline file. os.open with 0o666 lets the system apply the umask; O_EXCL makes the name ours.
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if keep_mode is not None:
            os.chmod(tmp, keep_mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def update(
    path: Path, change: Callable[[dict[str, Any] | None], dict[str, Any] | None]
) -> dict[str, Any] | None:
    """Under an inter-process lock on path: read it (validated; None when missing), call change(existing), and
    write what it returns atomically (None: write nothing). Returns what was written, or None.

    Two pytest processes blessing into one file would otherwise both read it, and the later rename would drop
    the entries the other one added.
    """
    import filelock

    path.parent.mkdir(parents=True, exist_ok=True)
    # A sibling lock file, not the baseline file itself: write_atomic replaces the baseline file by rename, so a
    # lock held on it would be on the old inode, and the next process would lock the new one and go ahead.
    lock_path = f"{path}.lock"
    try:
        with filelock.FileLock(lock_path, timeout=LOCK_TIMEOUT_S):
            doc = change(read(path))
            if doc is not None:
                write_atomic(path, doc)
            return doc
    except filelock.Timeout as exc:
        raise BaselineError(
            f"{lock_path}: could not take the lock on {path.name} within {LOCK_TIMEOUT_S:.0f} s; another process "
            "is updating this baseline file and has not finished"
        ) from exc
