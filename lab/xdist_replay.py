"""A whole-suite run's `-n 2` schedule replayed on the CPU: xdist's own load scheduler, fed a report's test times.

    python -m lab.xdist_replay REPORT.json [REPORT.json ...] [--collection FILE] [--workers 2] [--chunks none,1]
                                [--longest-first]

Each REPORT is a `--speedgate-json` report of a run of the suite (its `durations`, every test's seconds, setup to
teardown, as its worker ran it; a report without them gives `test_seconds`, those of the tests that used perf). The
collection is the order pytest collected the tests in (FILE: the node ids of `pytest perftests --collect-only -q`, one a
line; by default collected here); a test the report has no time for (a skip) counts as 0.05 s. The replay drives xdist's
`LoadScheduling` itself (the class `-n 2` uses under `--dist load`, its default), with one fake worker per GPU that runs
its queue in order and reports each test done after the test's recorded seconds, and prints, for each `--maxschedchunk`
(none: xdist's default), the seconds each worker ran tests and the last to finish. `--longest-first` replays speedgate's
own scheduler (speedgate.schedule, what `-n` uses where the baseline file records tests' seconds) too, given the same
report's seconds as the file's.

What it leaves out: each worker's start (imports, collection, the run's first device setup), the same for both
workers, and that a test's time on a worker may depend on what ran before it there (caches, the GPU's heat) and
beside it on the other (the compiled cases took longer, sent one at a time, on one 2 x H200 host: measured by
lab/device/schedule_check.sh, docs/results/suite-time.md). A replayed time is an estimate of the schedule's share of
a run, never a measurement: a results page says which it is.
"""

from __future__ import annotations

import argparse
import heapq
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

SKIPPED_SECONDS = 0.05


class _Quiet:
    """A scheduler's log, which prints every step: callable, and each attribute another such log."""

    def __call__(self, *args: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return self


def replay(collection: Sequence[str], seconds: Mapping[str, float], workers: int = 2,
           chunk: int | None = None, longest_first: bool = False) -> dict[str, Any]:
    """The schedule xdist's LoadScheduling (or, longest_first, speedgate's scheduler given `seconds` as the file's)
    makes of `collection` on `workers` workers, each test taking its `seconds` (SKIPPED_SECONDS when absent):
    {"makespan": the last worker's finish, "busy": {worker: seconds}, "tests": {worker: count}}."""
    from xdist.scheduler.load import LoadScheduling

    from speedgate.schedule import scheduler_class
    from speedgate.testing import ScriptedWorker

    options = {"tx": [f"{workers}*popen"], "maxschedchunk": chunk}
    config = SimpleNamespace(getvalue=options.__getitem__, getoption=options.__getitem__)
    scheduler = (scheduler_class()(config, _Quiet(), seconds, lambda nodeid: nodeid, lambda made, count: None)
                 if longest_first else LoadScheduling(config, _Quiet()))  # type: ignore[arg-type]
    nodes = [ScriptedWorker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        scheduler.add_node(node)  # type: ignore[arg-type]
    for node in nodes:
        scheduler.add_node_collection(node, list(collection))  # type: ignore[arg-type]
    scheduler.schedule()
    took = [float(seconds.get(nodeid, SKIPPED_SECONDS)) for nodeid in collection]
    busy = {node.gateway.id: 0.0 for node in nodes}
    count = {node.gateway.id: 0 for node in nodes}
    events: list[tuple[float, int]] = []
    running: dict[int, int] = {}

    def start(i: int, now: float) -> None:
        node = nodes[i]
        if i not in running and node.queue:
            running[i] = node.queue.pop(0)
            heapq.heappush(events, (now + took[running[i]], i))

    for i in range(workers):
        start(i, 0.0)
    finish = 0.0
    while events:
        now, i = heapq.heappop(events)
        finish = now  # events leave in time order: the last is the run's end
        index = running.pop(i)
        name = nodes[i].gateway.id
        busy[name] += took[index]
        count[name] += 1
        scheduler.mark_test_complete(nodes[i], index, took[index])  # type: ignore[arg-type]
        start(i, now)
    if sum(count.values()) != len(collection):
        raise RuntimeError(f"the replay ran {sum(count.values())} of {len(collection)} tests")
    return {"makespan": finish, "busy": busy, "tests": count}


def collected(paths: Sequence[str] = ("perftests",)) -> list[str]:
    """The node ids `pytest --collect-only -q` lists for paths, in its order."""
    out = subprocess.run([sys.executable, "-m", "pytest", *paths, "--collect-only", "-q", "-p", "no:cacheprovider"],
                         capture_output=True, text=True, check=False).stdout
    return [line.strip() for line in out.splitlines() if "::" in line and not line.startswith(" ")]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.xdist_replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", help="--speedgate-json reports of whole-suite runs")
    parser.add_argument("--collection", help="node ids in collection order, one a line (default: collected here)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunks", default="none,1", help="--maxschedchunk values to replay (none: the default)")
    parser.add_argument("--longest-first", action="store_true", help="speedgate's scheduler too")
    args = parser.parse_args(argv)
    collection = (Path(args.collection).read_text().split() if args.collection else collected())
    chunks = [None if c == "none" else int(c) for c in args.chunks.split(",")]
    for path in args.reports:
        report = json.loads(Path(path).read_text())
        # Every test's seconds where the report has them (its durations, by test id: this repository's node ids),
        # else those of the tests that used perf.
        seconds = report.get("durations") or report["test_seconds"]
        unknown = sorted(set(seconds) - set(collection))
        if unknown:
            print(f"{path}: {len(unknown)} timed tests are not in the collection (first: {unknown[0]})", file=sys.stderr)
            return 2
        print(f"{path}: {len(seconds)} timed tests, {sum(seconds.values()):.0f} s in all, the longest "
              f"{max(seconds.values()):.0f} s")
        for chunk in chunks:
            result = replay(collection, seconds, args.workers, chunk)
            busy = ", ".join(f"{name} {value:.0f} s ({result['tests'][name]} tests)"
                             for name, value in result["busy"].items())
            print(f"  --maxschedchunk {chunk or 'default'}: the last worker done at {result['makespan']:.0f} s; "
                  f"{busy}")
        if args.longest_first:
            result = replay(collection, seconds, args.workers, longest_first=True)
            print(f"  longest first: the last worker done at {result['makespan']:.0f} s; "
                  + ", ".join(f"{n} {v:.0f} s ({result['tests'][n]} tests)" for n, v in result["busy"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
