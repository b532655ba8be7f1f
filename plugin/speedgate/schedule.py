"""Under `-n N`: xdist's workers sent the longest work first, by the seconds each test took when it was last blessed
on this hardware (the baseline file's `test_seconds`), so that no worker is left running the long tests alone at the
end while the others wait. xdist's own `--dist load` sends each worker a run of consecutive tests at the start; a
suite whose long tests sit together in one such run hands them to one worker (docs/results/suite-time.md, "the
longest work first", measured both on this suite).

A file's tests go to one worker together (its module fixtures are built once), unless the file alone is more than
a worker's share of the run: then its tests are sent one by one. The seconds are every test's, with perf or without
(a bless records them all); a test with none recorded (new since) counts as the shortest recorded one. The schedule
is used only under `--dist load` (what `-n` picks), without `--maxschedchunk`, with `--speedgate-schedule
longest-first` (the default) and where this hardware's baseline file records the seconds of at least one collected
test; otherwise xdist schedules as it would without speedgate.
Which tests run, and on how many workers, is never changed: only the order they are handed out in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEDULES = ("longest-first", "xdist")


def test_id(record: Mapping[str, Any], id_key: str) -> str:
    """The test id of a report's case or metric record: its id less '::<name>'."""
    full, name = str(record[id_key]), record.get("name")
    return full[: -len(name) - 2] if name and full.endswith(f"::{name}") else full


@dataclass(frozen=True)
class Plan:
    """The order work is handed out in: units (a file's tests, or one test), longest first."""

    units: list[tuple[str, list[str]]]  # unit key -> its node ids, in collection order
    estimate: dict[str, float]  # node id -> the seconds the plan counts for it
    known: int  # collected tests with recorded seconds

    def unit_of(self) -> dict[str, str]:
        return {nodeid: key for key, nodeids in self.units for nodeid in nodeids}


def plan(collection: Sequence[str], seconds: Mapping[str, float], workers: int) -> Plan:
    """The units of collection (node ids) and their order for `workers` workers, given the seconds recorded for
    some of them (by node id)."""
    known = {nodeid: float(seconds[nodeid]) for nodeid in collection if nodeid in seconds}
    fill = min(known.values()) if known else 0.0
    estimate = {nodeid: known.get(nodeid, fill) for nodeid in collection}
    files: dict[str, list[str]] = {}
    for nodeid in collection:
        files.setdefault(nodeid.partition("::")[0], []).append(nodeid)
    share = sum(estimate.values()) / max(workers, 1)
    units: list[tuple[str, list[str]]] = []
    for file, nodeids in files.items():
        if len(nodeids) > 1 and sum(estimate[n] for n in nodeids) > share:
            units.extend((nodeid, [nodeid]) for nodeid in nodeids)
        else:
            units.append((file, nodeids))
    order = sorted(range(len(units)), key=lambda i: (-sum(estimate[n] for n in units[i][1]), i))
    return Plan([units[i] for i in order], estimate, len(known))


def scheduler_class() -> type:
    """LongestFirstScheduling, built on xdist's LoadScopeScheduling (imported here: only an xdist controller asks)."""
    from xdist.scheduler.loadscope import LoadScopeScheduling  # type: ignore[import-not-found, unused-ignore]

    class LongestFirstScheduling(LoadScopeScheduling):  # type: ignore[misc, unused-ignore]
        """xdist's scope scheduler (a unit goes to one worker; a worker with two tests or fewer left gets the next
        unit; a crashed worker's unfinished units go back in the queue), with units and their order from plan()."""

        def __init__(self, config: Any, log: Any, seconds: Mapping[str, float], test_ids: Callable[[str], str],
                     said: Callable[[Plan, int], None]) -> None:
            super().__init__(config, log)
            self._seconds = seconds  # test id -> recorded seconds
            self._test_ids = test_ids
            self._said = said
            self._unit_of: dict[str, str] = {}

        def _split_scope(self, nodeid: str) -> str:
            return self._unit_of.get(nodeid, nodeid)

        def remove_node(self, node: Any) -> str | None:
            """A worker that ended: the test it was running (None when it had none left), never run again (xdist's
            scope schedulers would send it to another worker, where a test that kills its worker kills that one
            too; its load scheduler does not); its other unfinished tests go first to the next worker that asks."""
            workload = self.assigned_work.pop(node)
            pending = [nodeid for unit in workload.values() for nodeid, done in unit.items() if not done]
            if not pending:
                return None
            crashed = pending[0]  # a worker runs its tests in the order sent: the first not done was running
            for key, unit in reversed(list(workload.items())):
                rest = {nodeid: False for nodeid, done in unit.items() if not done and nodeid != crashed}
                if rest:
                    self.workqueue[key] = rest
                    self.workqueue.move_to_end(key, last=False)
            for other in self.assigned_work:
                self._reschedule(other)
            return crashed

        def schedule(self) -> None:
            assert self.collection_is_completed
            if self.collection is not None:  # type: ignore[has-type]  # the first distribution happened: as xdist does
                for node in self.nodes:
                    self._reschedule(node)
                return
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            self.collection = list(next(iter(self.registered_collections.values())))
            if not self.collection:
                return
            by_node = {nodeid: self._seconds[tid] for nodeid in self.collection
                       if (tid := self._test_ids(nodeid)) in self._seconds}
            made = plan(self.collection, by_node, len(self.nodes))
            self._unit_of = made.unit_of()
            for key, nodeids in made.units:
                self.workqueue[key] = dict.fromkeys(nodeids, False)
            self._said(made, len(self.nodes))
            for _ in range(max(len(self.nodes) - len(self.workqueue), 0)):  # more workers than units
                unused, _work = self.assigned_work.popitem()
                unused.shutdown()
            for node in self.nodes:
                self._assign_work_unit(node)
            for node in self.nodes:
                self._reschedule(node)
            if not self.workqueue:
                for node in self.nodes:
                    node.shutdown()

    return LongestFirstScheduling


def plan_words(made: Plan, workers: int, source: Path) -> str:
    """The line a run under -n says about its schedule."""
    total = len(made.estimate)
    longest = made.units[0] if made.units else None
    head = (f"; first {longest[0]} ({sum(made.estimate[n] for n in longest[1]):.1f} s)" if longest else "")
    return (f"speedgate: {workers} workers sent the longest work first, by the seconds {made.known} of {total} "
            f"collected tests took when blessed ({source}){head}; --speedgate-schedule xdist keeps xdist's order")


def report_seconds(report: Mapping[str, Any], hardware_key: str) -> dict[str, float]:
    """A --speedgate-json report's seconds of each test, by test id, where it measured for hardware_key: every
    test's (its `durations`, perf or not) where the report has them; else those of the tests that measured for the
    key and did not fail (a report names them by node id; their cases and metrics give each one's test id)."""
    tests: dict[str, str] = {}
    for records, id_key in ((report.get("cases") or [], "case_id"), (report.get("metrics") or [], "metric_id")):
        for record in records:
            if record.get("hardware_key") == hardware_key and not record.get("test_failed"):
                tests[str(record["nodeid"])] = test_id(record, id_key)
    if tests and report.get("durations"):
        return {str(test): float(seconds) for test, seconds in report["durations"].items()}
    failed = set(report.get("failed_tests") or [])
    seconds = report.get("test_seconds") or {}
    return {test: float(seconds[nodeid]) for nodeid, test in tests.items() if nodeid in seconds and nodeid not in failed}


def main(argv: Sequence[str]) -> int:
    from statistics import median

    from . import baseline as baseline_file
    from .evidence_cli import file_and_reports, read_reports

    parser = file_and_reports(
        "schedule", "the seconds a baseline file records for each test, which order an xdist run hands tests out in "
                    "(--speedgate-schedule longest-first); with reports, record their tests' seconds (the median "
                    "over the reports) into the file, as a bless records its own",
        "--speedgate-json reports of runs on this hardware")
    args = parser.parse_args(argv)
    reports = read_reports(parser, args.reports)
    for path, report in zip(args.reports, reports):
        if "test_seconds" not in report and "durations" not in report:
            parser.exit(2, f"speedgate schedule: {path}: records no test's seconds (its speedgate wrote none)\n")
    said: list[str] = []

    def change(existing: dict[str, Any] | None) -> dict[str, Any] | None:
        if existing is None:
            raise baseline_file.BaselineError(f"{args.baseline}: no such baseline file")
        key = existing["hardware_key"]
        measured: dict[str, list[float]] = {}
        for report in reports:
            for test, seconds in report_seconds(report, key).items():
                measured.setdefault(test, []).append(seconds)
        new = {test: median(values) for test, values in measured.items()}
        merged, rewritten = baseline_file.merge_seconds(baseline_file.recorded_seconds(existing), new)
        said.append(f"{args.baseline}: {len(reports)} report(s) read; {len(new)} tests measured for {key}, "
                    f"{len(rewritten)} of them recorded (new, or moved by more than "
                    f"{baseline_file.SECONDS_REWRITE_FRACTION:.0%} and {baseline_file.SECONDS_REWRITE_MIN:g} s)")
        return {**existing, "test_seconds": merged} if rewritten else None

    try:
        if args.reports:
            baseline_file.update(args.baseline, change)
        doc = baseline_file.read(args.baseline)
    except baseline_file.BaselineError as exc:
        parser.exit(2, f"speedgate schedule: {exc}; the file was left untouched\n")
    if doc is None:
        parser.exit(2, f"speedgate schedule: {args.baseline}: no such baseline file\n")
    if said:
        print(*said, sep="\n")
        return 0
    seconds = baseline_file.recorded_seconds(doc)
    if not seconds:
        print(f"{args.baseline}: records no test's seconds: an xdist run keeps xdist's order; a bless records them")
        return 0
    for test, value in sorted(seconds.items(), key=lambda item: (-item[1], item[0])):
        print(f"{value:8.1f} s  {test}")
    print(f"{args.baseline}: {len(seconds)} tests, {sum(seconds.values()):.0f} s in all")
    return 0


def wanted(config: Any, schedule: str) -> bool:
    """Whether this xdist run takes speedgate's schedule: asked for, under --dist load, without --maxschedchunk."""
    return (schedule == "longest-first" and config.getvalue("dist") == "load"
            and config.getoption("maxschedchunk", None) is None)


__all__ = ["Plan", "SCHEDULES", "main", "plan", "plan_words", "report_seconds", "scheduler_class", "test_id",
           "wanted"]
