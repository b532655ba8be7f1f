"""The end's bless stage (--update-baselines): each hardware key's passing, settled results written into its baseline
file (speedgate.blessing), and the cases left unblessed, with why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .blessing import bless_into

if TYPE_CHECKING:
    from .ending import Finish, RunEnd
    from .results import CompareResult, MetricResult


def blessable(run: RunEnd) -> tuple[dict[str, list[CompareResult]], dict[str, list[MetricResult]]]:
    """Per hardware key, the timed results and metrics of tests that finished and passed: a failed check, an error or
    an interrupted test never reaches a baseline, nor a comparison whose device's speed never settled
    (speedgate.measure's settling): that is no speed of the kernel's."""
    cases: dict[str, list[CompareResult]] = {}
    metrics: dict[str, list[MetricResult]] = {}
    for r in run.records:
        if r.timed and r.settled and r.nodeid in run.finished:
            cases.setdefault(r.hardware_key, []).append(r)
    for m in run.metric_records:
        if m.nodeid in run.finished:
            metrics.setdefault(m.hardware_key, []).append(m)
    return cases, metrics


def blessed_seconds(run: RunEnd, key: str) -> dict[str, float]:
    """The seconds (setup, call and teardown) the run's tests took, by test id, for key's file: the order an xdist
    run on this machine hands tests out in (speedgate.schedule), which reads this machine's file. Every test's, with
    perf or without, goes into this machine's file; another key's (a run's results of several GPUs) gets none."""
    return dict(run.durations) if key == run.bench.hardware_key else {}


def not_blessed(run: RunEnd) -> list[str]:
    """What the run could not bless: an interrupted run, workers whose results were lost, failed or unfinished tests,
    comparisons whose device's speed still drifted."""
    lines = []
    if run.interrupted:
        lines.append("the run was interrupted: only tests that finished and passed were blessed")
    for worker in run.lost_workers:
        lines.append(f"xdist worker {worker} ended without its closing report (it crashed, was killed, was replaced "
                     "after a CUDA fault, or had not reported when the run was interrupted): of what it ran, only "
                     "results that reached this process before were blessed")
    unblessed = {r.case_id: r.nodeid for r in run.records if r.timed and r.nodeid not in run.finished}
    for case_id, nodeid in sorted(unblessed.items()):
        why = "its test failed" if nodeid in run.failed_nodeids else "its test did not finish"
        lines.append(f"not blessed ({why}): {case_id}")
    measured = {r.nodeid for r in run.records} | {m.nodeid for m in run.metric_records}
    for nodeid in sorted(run.failed_nodeids - measured):  # failed before any result: nothing in the lines above
        cause = run.failure_causes.get(nodeid)
        lines.append(f"not blessed (its test failed before it measured anything{': ' + cause if cause else ''}): "
                     f"{nodeid}")
    for case_id in sorted({r.case_id for r in run.records if r.timed and not r.settled} - set(unblessed)):
        lines.append(f"not blessed (the device's speed still drifted when its rounds ended, so it measured no "
                     f"steady speed; its entry, if any, is kept: bless it again on a quiet machine): {case_id}")
    return lines


def bless_run(run: RunEnd, done: Finish, now: str) -> None:
    """Bless each hardware key's passing results into its file, measured at `now` (the run's end, as its reports
    say); say what was written and what was not. The book then holds what was written, for the checks after this
    stage."""
    if not (run.settings.update_baselines
            and (run.records or run.metric_records or run.failed_nodeids or run.lost_workers)):
        return
    cases, metrics = blessable(run)
    done.lines.extend(not_blessed(run))
    if not (cases or metrics):
        done.lines.append("nothing blessed: no comparison or metric of this run could be (the lines above say why); "
                          "every baseline file was left as it was")
    book = run.book
    for key in sorted(set(cases) | set(metrics)):
        blessed = bless_into(book.path_for(key), hardware_key=key, fingerprint=run.fingerprint_for(key),
                             cases=cases.get(key, []), metrics=metrics.get(key, []), known=book.entries_read.get(key),
                             measured_at=now, test_seconds=blessed_seconds(run, key))
        if blessed.error:
            done.errors.append(blessed.error)
            continue
        book.docs[key] = blessed.doc
        done.lines.extend(blessed.lines)


__all__ = ["bless_run", "blessable", "blessed_seconds", "not_blessed"]
