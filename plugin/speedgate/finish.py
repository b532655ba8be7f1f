"""The end of a run on the controller: bless what passed, write every report, and the lines for the terminal."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import baseline as baseline_file
from . import report
from .blessing import bless_into
from .session import SpeedgateSession


@dataclass
class Finish:
    """What the end of the run did: the summary's header, blessing's lines, and errors (each fails the run)."""

    header: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # shown loudly, but the run may pass
    alerts: list[str] = field(default_factory=list)  # shown first, loudly: what the run could not gate
    unmatched: dict[str, Any] | None = None  # this hardware's baseline entries no collected test matched


def finish_run(state: SpeedgateSession, *, interrupted: bool = False) -> Finish:
    done = Finish()
    if state.used or state.records:  # the files as this run judged against them, before blessing rewrites them
        done.header = header_lines(state)
        if not state.settings.update_baselines:
            done.alerts = ungated(state)
    if state.settings.update_baselines and (state.records or state.metric_records):
        bless_all(state, done, interrupted)
    if not (state.settings.update_baselines or state.settings.correctness_only):
        check_unmatched(state, done)
    if not state.settings.correctness_only:
        check_unreported(state, done)
    if state.used and state.unmarked_anchors:
        done.lines.append(report.unmarked_anchors(sorted(state.unmarked_anchors)))
    contended = state.contention_warning()
    if contended:
        done.warnings.append(contended)
    write_reports(state, done)
    if state.settings.history_path is not None:
        from .history.recording import record_run

        record_run(state, done)
    return done


def bless_all(state: SpeedgateSession, done: Finish, interrupted: bool) -> None:
    """Bless each hardware key's passing results into its file; say what was written and what was not."""
    cases, metrics = state.blessable()
    if interrupted:
        done.lines.append("the run was interrupted: only tests that finished and passed were blessed")
    for worker in state.lost_workers:
        done.lines.append(f"xdist worker {worker} ended without its closing report (it crashed, was killed, or was "
                          "replaced after a CUDA fault): of what it ran, only results that reached this process before "
                          "were blessed")
    unblessed = {r.case_id: r.nodeid for r in state.records if r.timed and not state.finished_and_passed(r.nodeid)}
    for case_id, nodeid in sorted(unblessed.items()):
        why = "its test failed" if nodeid in state.failed_nodeids else "its test did not finish"
        done.lines.append(f"not blessed ({why}): {case_id}")
    for case_id in sorted({r.case_id for r in state.records if r.timed and not r.settled} - set(unblessed)):
        done.lines.append(f"not blessed (the device's speed still drifted when its rounds ended, so it measured no "
                          f"steady speed; its entry, if any, is kept: bless it again on a quiet machine): {case_id}")
    for key in sorted(set(cases) | set(metrics)):
        blessed = bless_into(state.baseline_path_for(key), hardware_key=key, fingerprint=state.fingerprint_for(key),
                             cases=cases.get(key, []), metrics=metrics.get(key, []), known=state.entries_read.get(key))
        if blessed.error:
            done.errors.append(blessed.error)
            continue
        state.docs[key] = blessed.doc
        done.lines.extend(blessed.lines)


def check_unmatched(state: SpeedgateSession, done: Finish) -> None:
    """List this hardware's baseline entries that no collected test matched (their gate is silently lost); when
    none matched at all the case ids drifted: warn loudly, and fail a strict run."""
    try:
        found = state.unmatched_entries(state.hardware_key)
    except baseline_file.BaselineError:
        return  # the header already says why the file is unusable
    if found is None:
        return
    done.unmatched = found
    example = min(state.collected_cases)
    lines, drift = report.unmatched(found["baseline"], found["orphaned"], found["matched"], example)
    done.lines += lines
    done.header += [line for line in lines if not line.startswith("  ")][:1]  # the count reaches the Markdown too
    if drift:
        (done.errors if state.settings.strict else done.warnings).append(drift)


def check_unreported(state: SpeedgateSession, done: Finish) -> None:
    """Warn about baseline entries whose test passed without measuring them (their gate is lost without a word);
    a strict gate fails on them."""
    if not state.used:
        return  # no test asked for perf: no file was read, and no device looked up for it
    for key in state.result_keys():
        try:
            entries = state.unreported_entries(key)
        except baseline_file.BaselineError:
            continue  # the header already says why the file is unusable
        if entries:
            warning = report.unreported(str(state.baseline_path_for(key)), entries)
            strict = state.settings.strict and not state.settings.update_baselines
            (done.errors if strict else done.warnings).append(warning)


def ungated(state: SpeedgateSession) -> list[str]:
    """One line per hardware key whose baseline file exists but lacks entries for comparisons or metrics this run
    measured: those read "new" and nothing gates them on this hardware."""
    from .verdict import Verdict

    lines = []
    for key in state.result_keys():
        if state.docs.get(key) is None:
            continue
        timed = [r for r in state.records if r.hardware_key == key and r.timed]
        metrics = [m for m in state.metric_records if m.hardware_key == key]
        missing = []
        for what, measured in (("comparisons", timed), ("metrics", metrics)):
            new = [r for r in measured if r.verdict == Verdict.NEW]
            if new:
                missing.append(f"{len(new)} of the {len(measured)} {what}")
        if missing:
            lines.append(f"{' and '.join(missing)} measured on {key} have no entry in {state.baseline_path_for(key)}: "
                         "nothing gates them on this hardware (bless them there with `pytest --update-baselines`, on "
                         "this kind of GPU)")
    return lines


def header_lines(state: SpeedgateSession) -> list[str]:
    keys = state.result_keys()
    errors: dict[str, str] = {}
    for key in keys:
        try:
            state.doc_for(key)
        except baseline_file.BaselineError as exc:
            errors[key] = str(exc)
    return report.header(
        keys, docs=state.docs, errors=errors, paths={k: state.baseline_path_for(k) for k in keys},
        updating=state.settings.update_baselines, gpu_state=state.gpu_state_at_start, ceilings=state.ceilings_seen,
        fingerprints=state.fingerprints, workers=state.workers,
    )


def write_reports(state: SpeedgateSession, done: Finish) -> None:
    """Every report file the run asked for (speedgate.reporting); a report that cannot be made is an error."""
    from .reporting import RunView, write_all

    run = RunView(
        records=state.records, metrics=state.metric_records, failed_nodeids=state.failed_nodeids,
        settings=state.settings, result_keys=state.result_keys(), fingerprints=state.fingerprints,
        ceilings=state.ceilings_seen, gpu_state=state.gpu_state_at_start, workers=state.workers, header=done.header,
        warnings=[*done.alerts, *done.warnings], errors=list(done.errors), unmatched=done.unmatched,
        now=baseline_file.now_iso(), test_seconds=dict(state.test_seconds),
    )
    done.errors.extend(write_all(run))


def terminal_lines(state: SpeedgateSession, done: Finish) -> list[tuple[str, bool]]:
    """The speedgate section of the terminal summary: (line, is_error)."""
    s = state.settings
    mode = "updating baselines" if s.update_baselines else ("strict gate" if s.strict else "gate")
    alerts = [(f"speedgate: not gated: {line}", True) for line in done.alerts]
    lines = [*done.header, f"{mode}; {s.tolerance_words(state.result_keys())}; timer {s.timer}"]
    lines += report.table(state.records, state.failed_nodeids) if state.records else []
    lines += report.by_test(state.records)
    lines += report.metrics_table(state.metric_records, state.failed_nodeids)
    lines += report.notes(state.records)
    lines += report.wide_tolerances(state.records)
    lines += [line for line in (report.detection_line(state.records), report.budget_line(state.records),
                                report.stages_line(state.records),
                                report.own_work_line(state.records, state.test_seconds)) if line]
    lines += done.lines
    return (alerts + [(line, False) for line in lines] + [(f"speedgate warning: {w}", True) for w in done.warnings]
            + [(f"speedgate error: {e}", True) for e in done.errors])
