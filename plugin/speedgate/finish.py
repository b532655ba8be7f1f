"""The end of a run on the controller, as named stages over one snapshot of it (speedgate.ending.RunEnd), the way
speedgate.pipeline runs a comparison: what the run judged against, bless, the entries' checks, the reports, the
history; then the lines for the terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import report
from .baseline import now_iso
from .blessed import bless_run
from .ending import Finish
from .entries import check_entries
from .judged import judged_against

if TYPE_CHECKING:
    from .ending import RunEnd
    from .reporting import Reports


def finish_run(run: RunEnd, reports: Reports) -> Finish:
    """The stages in order, each adding to what the end did."""
    done = Finish(run)
    # One time for the run's end: what a bless writes is measured at the time its reports say they ran, so that a
    # bless's report given to `speedgate evidence` is known as the process the file already holds.
    now = now_iso()
    judged_against(run, done)  # the files as this run judged against them, before blessing rewrites them
    bless_run(run, done, now)
    check_entries(run, done)
    if run.contention:
        done.warnings.append(run.contention)
    done.errors.extend(reports.write_all(done.view(now)))  # a report that cannot be made is an error
    if run.settings.history_path is not None:  # --speedgate-history
        from .history.recording import record_run

        # history.recording annotates its argument as the session; it reads only what the snapshot holds by the
        # same names (records, metric_records, failed_nodeids, fingerprints, ceilings_seen, gpu_state_at_start, ...).
        record_run(run, done)  # type: ignore[arg-type]
    return done


def summary(done: Finish, quiet: bool = False) -> list[tuple[str, bool]]:
    """The speedgate section of the terminal summary, (line, is_error); none when the run has nothing to say. quiet
    (-qq): one line of counts, then what went wrong; the tables are the reports'."""
    run = done.run
    if not (run.records or run.metric_records or done.errors or done.warnings or done.lines or done.alerts):
        return []
    lines = terminal_lines(done)
    if not quiet:
        return lines
    counts = f"speedgate: {len(run.records)} cases: {report.tally(run.records)}"
    if run.metric_records:
        counts += f"; {len(run.metric_records)} metrics: {report.tally(run.metric_records)}"
    return [(counts, False), *((line, error) for line, error in lines if error)]


def terminal_lines(done: Finish) -> list[tuple[str, bool]]:
    """Every line of the speedgate section: (line, is_error)."""
    run, s = done.run, done.run.settings
    records = run.records
    mode = "updating baselines" if s.update_baselines else ("strict gate" if s.strict else "gate")
    alerts = [(f"speedgate: not gated: {line}", True) for line in done.alerts]
    lines = [*done.header, f"{mode}; {s.tolerance_words(run.result_keys)}; timer {s.timer}"]
    lines += report.table(records, run.failed_nodeids) if records else []
    lines += report.by_test(records)
    lines += report.metrics_table(run.metric_records, run.failed_nodeids)
    lines += report.notes(records)
    lines += report.wide_tolerances(records)
    lines += [line for line in (report.detection_line(records), report.budget_line(records), report.stages_line(records),
                                report.own_work_line(records, run.test_seconds)) if line]
    lines += done.lines
    return (alerts + [(line, False) for line in lines] + [(f"speedgate warning: {w}", True) for w in done.warnings]
            + [(f"speedgate error: {e}", True) for e in done.errors])


__all__ = ["Finish", "finish_run", "summary", "terminal_lines"]
