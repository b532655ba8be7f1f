"""The end's checks of the baseline entries against the run, after blessing, and their words: entries no collected test
matched (renamed tests, drifted case ids), entries a passing test no longer measures, case ids only the run's
arguments anchored."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .advice import bless_flag
from .baseline import BaselineError

if TYPE_CHECKING:
    from .ending import Finish, RunEnd


def check_entries(run: RunEnd, done: Finish) -> None:
    """After blessing: entries no collected test matched (a gate's), entries a passing test left unmeasured (unless
    only correctness was checked), and case ids that only the run's arguments anchored."""
    settings = run.settings
    if not (settings.update_baselines or settings.correctness_only):
        unmatched(run, done)
    if not settings.correctness_only and run.used:
        unreported(run, done)
    if run.used and run.ids.unmarked_anchors:
        done.lines.append(unmarked_anchors_words(sorted(run.ids.unmarked_anchors)))


def unmatched(run: RunEnd, done: Finish) -> None:
    """List this hardware's baseline entries that no collected test matched (their gate is silently lost); when
    none matched at all the case ids drifted: warn loudly, and fail a strict run."""
    try:
        found = run.book.unmatched_entries(run.bench.hardware_key, run.ids)
    except BaselineError:
        return  # the header already says why the file is unusable
    if found is None:
        return
    done.unmatched = found
    lines, drift = unmatched_words(found["baseline"], found["orphaned"], found["matched"], min(run.ids.collected_cases))
    done.lines += lines
    done.header += [line for line in lines if not line.startswith("  ")][:1]  # the count reaches the Markdown too
    if drift:
        (done.errors if run.settings.strict else done.warnings).append(drift)


def unreported(run: RunEnd, done: Finish) -> None:
    """Warn about baseline entries whose test passed without measuring them (their gate is lost without a word); a
    strict gate fails on them."""
    settings = run.settings
    for key in run.result_keys:
        reported = ({r.case_id for r in run.records if r.hardware_key == key}
                    | {m.metric_id for m in run.metric_records if m.hardware_key == key})
        try:
            entries = run.book.unreported_entries(key, set(run.passed_cases), reported)
        except BaselineError:
            continue  # the header already says why the file is unusable
        if entries:
            warning = unreported_words(str(run.book.path_for(key)), entries)
            (done.errors if settings.strict and not settings.update_baselines else done.warnings).append(warning)


UNMATCHED_SHOWN = 20  # the terminal lists this many orphaned entries; the JSON report has them all


def unmatched_words(baseline: str, orphaned: Sequence[str], matched: int, example_case: str) -> tuple[list[str], str | None]:
    """The lines listing a baseline file's orphaned entries, and the warning when none of its entries matched (the
    case ids drifted, so every case is new and the gate checks nothing); None when some did."""
    if not orphaned:
        return [], None
    lines = [f"{len(orphaned)} entries of {baseline} match no collected test (renamed or deleted tests? these "
             "entries gate nothing now):"]
    lines += [f"  {entry}" for entry in orphaned[:UNMATCHED_SHOWN]]
    if len(orphaned) > UNMATCHED_SHOWN:
        lines.append(f"  ... and {len(orphaned) - UNMATCHED_SHOWN} more (--speedgate-json lists them all)")
    if matched:
        return lines, None
    return lines, (
        f"none of the {len(orphaned)} entries of {baseline} matched a collected test, so every case is new and the "
        f"gate checks nothing. Its ids look like '{orphaned[0]}', this run's like '{example_case}': if those name "
        "the same test, the case ids drifted (they are test paths relative to the folder of pytest's ini file, else "
        "of the nearest pyproject.toml, setup.cfg, tox.ini, setup.py or .git, else of the topmost conftest.py: did "
        "one of these move since the file was blessed?); if the tests were renamed, re-bless them with "
        f"{bless_flag()}"
    )


def unmarked_anchors_words(folders: Sequence[str]) -> str:
    """The note for case ids that only the run's arguments anchored (see case_ids.case_anchor)."""
    return (f"case ids here are relative to {', '.join(folders)}, the folder of the paths this run was given: nothing "
            "marks the project's top (no pytest ini file, pyproject.toml, setup.cfg, tox.ini, setup.py, .git or "
            "conftest.py at or above the tests), so a run given other paths (`pytest` and `pytest tests/test_x.py`) "
            "names the same tests otherwise and finds none of these entries. An empty conftest.py at the project's "
            "top fixes the ids")


UNREPORTED_SHOWN = 5  # the warning names this many entries a passing test left unmeasured


def unreported_words(baseline: str, entries: Sequence[str]) -> str:
    """The warning for baseline entries whose test passed in this run without measuring them."""
    shown = ", ".join(entries[:UNREPORTED_SHOWN])
    more = f" and {len(entries) - UNREPORTED_SHOWN} more" if len(entries) > UNREPORTED_SHOWN else ""
    return (f"{len(entries)} entries of {baseline} were not measured, though their tests ran and passed: {shown}{more}. "
            "Those tests no longer make these comparisons or metrics (renamed, removed, or made only on some runs), "
            "so nothing gates them. If they are gone on purpose, delete them from the file; a bless keeps them")


__all__ = ["check_entries", "unmarked_anchors_words", "unmatched_words", "unreported_words"]
