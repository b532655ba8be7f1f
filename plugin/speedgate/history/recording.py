"""Recording a gate run into the history store, on the controller at the end of the run (--speedgate-history)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..baseline import now_iso
from .store import HistoryError, record_report

if TYPE_CHECKING:  # the session and finish types for annotations only
    from ..ending import Finish
    from ..session import SpeedgateSession

# Where CI services put the commit and branch being tested, checked before asking git (first found wins).
COMMIT_VARIABLES = ("SPEEDGATE_COMMIT", "GITHUB_SHA", "CI_COMMIT_SHA", "BUILD_SOURCEVERSION")
BRANCH_VARIABLES = ("SPEEDGATE_BRANCH", "GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BUILD_SOURCEBRANCHNAME")


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    out = done.stdout.strip()
    return out if done.returncode == 0 and out else None


def commit_and_branch(root: Path, environ: Mapping[str, str] = os.environ) -> tuple[str | None, str | None]:
    """The commit and branch this run measured: from the CI's variables, else from git in root; None when unknown
    (a detached HEAD has no branch)."""
    commit = next((environ[v] for v in COMMIT_VARIABLES if environ.get(v)), None) or _git(root, "rev-parse", "HEAD")
    branch = next((environ[v] for v in BRANCH_VARIABLES if environ.get(v)), None)
    if branch is None:
        name = _git(root, "rev-parse", "--abbrev-ref", "HEAD")
        branch = name if name != "HEAD" else None
    return commit, branch


def record_run(state: SpeedgateSession, done: Finish) -> None:
    """Record this run's timed cases and metrics; a store that cannot take them is an error of the run."""
    from .. import export

    s = state.settings
    path = s.history_path
    if path is None:
        return
    if not any(r.timed for r in state.records) and not state.metric_records:
        done.lines.append(f"history: nothing was timed, so nothing was recorded in {path}")
        return
    doc = export.json_report(
        state.records, state.metric_records, state.failed_nodeids,
        settings={"tolerance": s.tolerance, "strict": s.strict, "update_baselines": s.update_baselines},
        fingerprints=state.fingerprints, ceilings=state.ceilings_seen, gpu_state=state.gpu_state_at_start,
        workers=state.workers)
    commit, branch = commit_and_branch(Path.cwd())
    try:
        recorded = record_report(path, doc, source="gate", run_time=now_iso(), recorded_at=now_iso(), commit=commit,
                                 branch=branch, once=False)
    except HistoryError as exc:
        done.errors.append(f"history: {exc}")
        return
    done.lines.append(f"history: run {recorded.run_id} recorded in {path} ({recorded.rows} rows)")
    done.warnings.extend(drop_warnings(path, {(r.case_id, r.hardware_key) for r in state.records
                                              if r.timed and r.verdict.value == "pass"}))


def drop_warnings(path: Path, passed: set[tuple[str, str]]) -> list[str]:
    """A warning for each case this run passed whose series now ends in a drop of DEFAULT_DROP or more that the
    newest runs made visible (its last change is among the newest MIN_SIZE points), so it is said once. Nothing
    when ruptures is not installed."""
    from .changes import DEFAULT_DROP, MIN_SIZE, DetectorMissing, changes_in
    from .store import group_series, read_points

    try:
        import ruptures  # noqa: F401
    except ImportError:
        return []
    warnings = []
    try:
        for key, points in sorted(group_series(read_points(path)).items()):
            if key not in passed:
                continue
            series = changes_in(points)
            if series.dropped(DEFAULT_DROP) and series.changes[-1].index >= len(points) - MIN_SIZE and series.moved_at:
                start = series.moved_at
                warnings.append(
                    f"{key[0]} [{key[1]}] passed its tolerance, but its history now ends in a drop of "
                    f"{series.latest_move:+.1%} since run {start.run_after} ({start.commits()}): "
                    f"python -m speedgate history --db {path} --case '{key[0]}'")
    except (HistoryError, DetectorMissing) as exc:
        return [f"history: drops not checked: {exc}"]
    return warnings
