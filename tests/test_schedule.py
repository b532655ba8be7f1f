"""speedgate.schedule: under -n, the longest work first by the seconds the baseline file records for each test; its
recording by a bless and by `python -m speedgate schedule`; and xdist's own order wherever it is not asked for."""

from __future__ import annotations

import heapq
import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import CASES, baseline_doc
from speedgate import baseline
from speedgate.case_ids import AnchoredIds
from speedgate.schedule import main, plan, report_seconds, scheduler_class
from speedgate.testing import ScriptedWorker

pytest.importorskip("xdist")


# -- the plan ------------------------------------------------------------------------------------------------------

def test_a_files_tests_are_one_unit_and_the_longest_unit_goes_first() -> None:
    collection = ["a.py::t1", "a.py::t2", "b.py::t1", "c.py::t1", "c.py::t2", "c.py::t3"]
    seconds = {"a.py::t1": 1.0, "a.py::t2": 1.0, "b.py::t1": 4.0, "c.py::t1": 2.0, "c.py::t2": 2.0, "c.py::t3": 0.5}
    made = plan(collection, seconds, workers=2)
    assert made.units == [("c.py", ["c.py::t1", "c.py::t2", "c.py::t3"]), ("b.py", ["b.py::t1"]),
                          ("a.py", ["a.py::t1", "a.py::t2"])]
    assert made.known == 6


def test_a_file_longer_than_a_workers_share_is_sent_test_by_test() -> None:
    collection = ["big.py::t1", "big.py::t2", "big.py::t3", "small.py::t1"]
    seconds = {"big.py::t1": 10.0, "big.py::t2": 30.0, "big.py::t3": 10.0, "small.py::t1": 5.0}
    made = plan(collection, seconds, workers=2)  # big.py: 50 s of 55 s, more than a worker's 27.5 s
    assert made.units == [("big.py::t2", ["big.py::t2"]), ("big.py::t1", ["big.py::t1"]),
                          ("big.py::t3", ["big.py::t3"]), ("small.py", ["small.py::t1"])]


def test_a_test_without_recorded_seconds_counts_as_the_shortest_recorded_one() -> None:
    made = plan(["a.py::new", "b.py::t1", "c.py::t1"], {"b.py::t1": 4.0, "c.py::t1": 0.5}, workers=2)
    assert made.estimate["a.py::new"] == 0.5
    assert made.known == 2
    assert [key for key, _ in made.units] == ["b.py", "a.py", "c.py"]  # ties keep the collection's order


def test_test_ids_are_the_baseline_files_ids_whatever_the_rootdir(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / "perf").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    (project / "perf" / "test_x.py").write_text("")
    # pytest's rootdir is the folder above the project here (no ini file there): node ids start with "proj/".
    ids = AnchoredIds(None, None, tmp_path)
    assert ids("proj/perf/test_x.py::test_a[1]") == "perf/test_x.py::test_a[1]"


# -- the scheduler, driven as xdist drives it -------------------------------------------------------------------------

def _config(dist: str = "load") -> Any:
    options = {"dist": dist, "maxschedchunk": None, "loadscopereorder": True, "tx": ["2*popen"], "numprocesses": 2}
    return SimpleNamespace(getvalue=options.__getitem__, getoption=lambda name, default=None: options.get(name, default),
                           option=SimpleNamespace(**options))


def _run(scheduler: Any, nodes: list[ScriptedWorker], collection: list[str], took: dict[str, float],
         crash: tuple[str, str] | None = None) -> dict[str, Any]:
    """Run the schedule on fake workers, each test taking its seconds; crash=(worker, test): that worker dies while
    running that test. Returns {"finish": the last test's end, "ran": {worker: [test, ...]}, "crashed": the
    scheduler's answer}."""
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, list(collection))
    scheduler.schedule()
    events: list[tuple[float, int]] = []
    running: dict[int, int] = {}
    ran: dict[str, list[str]] = {node.gateway.id: [] for node in nodes}
    crashed = None
    alive = list(range(len(nodes)))

    def start(i: int, now: float) -> None:
        node = nodes[i]
        # A worker runs a test once it knows the next one, or has been told to shut down (xdist's worker loop).
        if i not in running and node.queue and (len(node.queue) > 1 or node.shutting_down):
            running[i] = node.queue.pop(0)
            heapq.heappush(events, (now + took[collection[running[i]]], i))

    for i in alive:
        start(i, 0.0)
    finish = 0.0
    while events:
        now, i = heapq.heappop(events)
        if i not in alive:
            continue
        finish = now
        index = running.pop(i)
        name = nodes[i].gateway.id
        if crash == (name, collection[index]):
            alive.remove(i)
            crashed = scheduler.remove_node(nodes[i])
            for j in alive:
                start(j, now)
            continue
        ran[name].append(collection[index])
        scheduler.mark_test_complete(nodes[i], index, took[collection[index]])
        for j in alive:
            start(j, now)
    return {"finish": finish, "ran": ran, "crashed": crashed}


# Two long files that xdist's own first chunks hand to one worker, then many short ones.
COLLECTION = ([f"test_a_long.py::t{i}" for i in range(3)] + [f"test_b_long.py::t{i}" for i in range(3)]
              + [f"test_short_{i}.py::t{j}" for i in range(6) for j in range(7)])
TOOK = {nodeid: (10.0 if "long" in nodeid else 1.0) for nodeid in COLLECTION}


class _Log:
    """xdist's log: callable, and each attribute another log."""

    def __call__(self, *args: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return self


def _longest_first() -> Any:
    # The node ids are the test ids here (AnchoredIds is tested above).
    return scheduler_class()(_config(), _Log(), dict(TOOK), lambda nodeid: nodeid, lambda made, workers: None)


def test_the_longest_work_goes_first_and_each_test_runs_once() -> None:
    from xdist.scheduler.load import LoadScheduling

    nodes = [ScriptedWorker("gw0"), ScriptedWorker("gw1")]
    ours = _run(_longest_first(), nodes, COLLECTION, TOOK)
    theirs = _run(LoadScheduling(_config(), _Log()), [ScriptedWorker("gw0"), ScriptedWorker("gw1")], COLLECTION, TOOK)
    assert sorted(ours["ran"]["gw0"] + ours["ran"]["gw1"]) == sorted(COLLECTION)
    # 102 s of tests on two workers: 51 s each at best. xdist's first chunks (6 tests each) give one worker both
    # long files, 60 s.
    assert ours["finish"] == 51.0
    assert theirs["finish"] >= 60.0
    # A file's tests stay on one worker.
    for worker_tests in ours["ran"].values():
        files = {t.partition("::")[0] for t in worker_tests}
        for file in files:
            assert all(t in worker_tests for t in COLLECTION if t.startswith(file + "::"))


def test_a_crashed_workers_unfinished_tests_go_to_the_other_worker() -> None:
    nodes = [ScriptedWorker("gw0"), ScriptedWorker("gw1")]
    out = _run(_longest_first(), nodes, COLLECTION, TOOK, crash=("gw0", "test_a_long.py::t1"))
    assert out["crashed"] == "test_a_long.py::t1"
    ran = out["ran"]["gw0"] + out["ran"]["gw1"]
    assert sorted(ran) == sorted(t for t in COLLECTION if t != "test_a_long.py::t1")
    assert "test_a_long.py::t2" in out["ran"]["gw1"]  # the crashed worker's unit, finished by the other


# -- the file: recorded by a bless, kept, refused when broken ---------------------------------------------------------

def test_seconds_are_rewritten_only_when_they_moved_by_more_than_half_and_a_second() -> None:
    old = {"a": 10.0, "b": 10.0, "short": 0.4}
    merged, rewritten = baseline.merge_seconds(old, {"a": 14.0, "b": 16.0, "c": 0.04, "short": 1.3})
    assert merged == {"a": 10.0, "b": 16.0, "c": 0.0, "short": 0.4}
    assert rewritten == ["b", "c"]


def test_a_bless_keeps_the_seconds_of_tests_it_did_not_run() -> None:
    existing = {**baseline_doc({"t.py::test_a::x": 2.0}), "test_seconds": {"t.py::test_a": 3.0, "u.py::test_b": 9.0}}
    doc, _ = baseline.merge(existing, hardware_key="test-box", fingerprint=existing["fingerprint"], entries={},
                            rewrite_fraction={}, test_seconds={"t.py::test_a": 6.0})
    assert doc["test_seconds"] == {"t.py::test_a": 6.0, "u.py::test_b": 9.0}
    doc, _ = baseline.merge(existing, hardware_key="test-box", fingerprint=existing["fingerprint"], entries={},
                            rewrite_fraction={})
    assert doc["test_seconds"] == existing["test_seconds"]


@pytest.mark.parametrize(("value", "says"), [(float("nan"), "test_seconds: t.py::test_a is NaN; every number must be finite"),
                                             (-1.0, "at test_seconds/t.py::test_a: -1.0 is less than the minimum of 0"),
                                             ("3", "at test_seconds/t.py::test_a: '3' is not of type 'number'")])
def test_a_broken_seconds_entry_is_refused_naming_it(tmp_path: Path, value: Any, says: str) -> None:
    path = tmp_path / "test-box.json"
    doc = {**baseline_doc({}), "test_seconds": {"t.py::test_a": value}}
    path.write_text(json.dumps(doc))  # Python writes NaN as the bare word NaN, which its reader takes back
    with pytest.raises(baseline.BaselineError) as caught:
        baseline.read(path)
    assert says in str(caught.value)


def test_a_bless_under_xdist_records_its_tests_seconds_and_the_next_run_schedules_by_them(
        project: pytest.Pytester) -> None:
    project.makepyfile(
        test_one=CASES + "\nimport time\n" + "".join(
            f"\ndef test_{i}(perf):\n    time.sleep(0.3)\n    perf.compare(ref_2ms, opt_1ms)\n" for i in range(2)),
        test_two=CASES + "\nimport time\ndef test_0(perf):\n    perf.compare(ref_2ms, opt_1ms)\n"
                         "\ndef test_plain():\n    time.sleep(0.2)\n")
    bless = project.runpytest_subprocess("-n", "2", "--update-baselines")
    bless.assert_outcomes(passed=4)
    bless.stdout.no_fnmatch_line("*sent the longest work first*")  # nothing recorded yet: xdist's order
    seconds = json.loads((project.path / "baselines" / "test-box.json").read_text())["test_seconds"]
    # Every test's, the one without perf too (its seconds are the schedule's as much as any).
    assert set(seconds) == {"test_one.py::test_0", "test_one.py::test_1", "test_two.py::test_0",
                            "test_two.py::test_plain"}
    assert seconds["test_one.py::test_0"] >= 0.3
    assert seconds["test_two.py::test_plain"] >= 0.2
    gate = project.runpytest_subprocess("-n", "2", "--speedgate-json", "r.json")
    gate.assert_outcomes(passed=4)
    # The first unit is the one the recorded seconds make longest (they vary with the machine's load).
    collection = ["test_one.py::test_0", "test_one.py::test_1", "test_two.py::test_0", "test_two.py::test_plain"]
    first = plan(collection, seconds, workers=2).units[0][0]
    gate.stdout.fnmatch_lines(["speedgate: 2 workers sent the longest work first, by the seconds 4 of 4 collected "
                               f"tests took when blessed (*test-box.json); first {first} (*"])
    for keep in (["--speedgate-schedule", "xdist"], ["--dist", "loadfile"], ["--maxschedchunk", "1"]):
        kept = project.runpytest_subprocess("-n", "2", *keep)
        kept.assert_outcomes(passed=4)
        kept.stdout.no_fnmatch_line("*sent the longest work first*")
    serial = project.runpytest_subprocess()
    serial.assert_outcomes(passed=4)
    serial.stdout.no_fnmatch_line("*sent the longest work first*")
    # The gate's report has every test's seconds by test id, which the command records from.
    report = json.loads((project.path / "r.json").read_text())
    assert set(report["durations"]) == set(seconds)
    assert report_seconds(report, "test-box") == report["durations"]


def test_asked_on_the_command_line_a_kept_order_says_why(project: pytest.Pytester) -> None:
    project.makepyfile(test_one=CASES + "".join(f"\ndef test_{i}(perf):\n    perf.compare(ref_2ms, opt_1ms)\n"
                                                for i in range(2)))
    plain = project.runpytest_subprocess("-n", "2")  # not asked: nothing said
    plain.assert_outcomes(passed=2)
    plain.stdout.no_fnmatch_line("*xdist's order kept*")
    asked = project.runpytest_subprocess("-n", "2", "--speedgate-schedule", "longest-first")
    asked.assert_outcomes(passed=2)
    asked.stdout.fnmatch_lines(["speedgate: --speedgate-schedule longest-first: xdist's order kept (no baseline file "
                                "in *baselines: a bless records each test's seconds)"])
    (project.path / "baselines").mkdir()
    (project.path / "baselines" / "test-box.json").write_text(json.dumps(baseline_doc({})))
    asked = project.runpytest_subprocess("-n", "2", "--speedgate-schedule", "longest-first", "--dist", "loadfile")
    asked.stdout.fnmatch_lines(["*xdist's order kept (it applies under --dist load, without --maxschedchunk)"])
    asked = project.runpytest_subprocess("-n", "2", "--speedgate-schedule", "longest-first")
    asked.stdout.fnmatch_lines(["*xdist's order kept (*test-box.json records no test's seconds: a bless that "
                                "rewrites it records them)"])


def test_a_projects_own_scheduler_is_kept(project: pytest.Pytester) -> None:
    project.makepyfile(test_one=CASES + "".join(f"\ndef test_{i}(perf):\n    perf.compare(ref_2ms, opt_1ms)\n"
                                                for i in range(3)))
    project.runpytest_subprocess("-n", "2", "--update-baselines").assert_outcomes(passed=3)
    project.makeconftest(project.path.joinpath("conftest.py").read_text() + """
from xdist.scheduler import LoadFileScheduling

class ProjectScheduling(LoadFileScheduling):
    pass

def pytest_xdist_make_scheduler(config, log):
    return ProjectScheduling(config, log)
""")
    result = project.runpytest_subprocess("-n", "2", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*scheduling tests via ProjectScheduling*"])
    result.stdout.no_fnmatch_line("*sent the longest work first*")


def test_an_unknown_schedule_is_a_usage_error_naming_the_choices(project: pytest.Pytester) -> None:
    project.makepyfile(test_one=CASES + "\ndef test_0(perf):\n    perf.compare(ref_2ms, opt_1ms)\n")
    result = project.runpytest_subprocess("--speedgate-schedule", "fastest")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'fastest' is not a schedule; choose one of longest-first, xdist*"])
    project.makeini("[pytest]\naddopts = --hardware-key test-box -p no:cacheprovider\nspeedgate_schedule = fastest\n")
    result = project.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*speedgate_schedule*'fastest' is not a schedule*"])


# -- python -m speedgate schedule ----------------------------------------------------------------------------------

def _report(cases: list[tuple[str, str, str]], seconds: dict[str, float], failed: Sequence[str] = ()) -> dict[str, Any]:
    return {"speedgate_report_version": 1, "failed_tests": list(failed), "test_seconds": seconds, "metrics": [],
            "cases": [{"nodeid": nodeid, "case_id": f"{nodeid}::{name}", "name": name, "hardware_key": key,
                       "test_failed": nodeid in failed} for nodeid, name, key in cases]}


def test_report_seconds_names_tests_as_the_file_does_and_leaves_out_failed_and_other_hardware() -> None:
    report = _report([("t.py::a", "vs_x", "test-box"), ("t.py::b", "vs_y", "test-box"), ("t.py::c", "vs_z", "other")],
                     {"t.py::a": 2.0, "t.py::b": 3.0, "t.py::c": 4.0}, failed=["t.py::b"])
    assert report_seconds(report, "test-box") == {"t.py::a": 2.0}


def test_the_command_records_the_median_of_reports_and_shows_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "test-box.json"
    path.write_text(json.dumps(baseline_doc({"t.py::a::vs_x": 2.0})))
    reports = []
    for i, value in enumerate((2.0, 4.0, 30.0)):
        reports.append(tmp_path / f"r{i}.json")
        reports[-1].write_text(json.dumps(_report([("t.py::a", "vs_x", "test-box")], {"t.py::a": value})))
    assert main([str(path), *map(str, reports)]) == 0
    assert "3 report(s) read; 1 tests measured for test-box, 1 of them recorded" in capsys.readouterr().out
    assert json.loads(path.read_text())["test_seconds"] == {"t.py::a": 4.0}
    assert main([str(path)]) == 0
    assert "     4.0 s  t.py::a" in capsys.readouterr().out


def test_the_command_refuses_what_is_not_a_report_and_leaves_the_file(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "test-box.json"
    path.write_text(json.dumps(baseline_doc({})))
    before = path.read_text()
    bad = tmp_path / "bad.json"
    for text, says in (("{", "cannot be read as JSON"), ("{}", "not a --speedgate-json report"),
                       ('{"speedgate_report_version": 1}', "records no test's seconds")):
        bad.write_text(text)
        with pytest.raises(SystemExit) as caught:
            main([str(path), str(bad)])
        assert caught.value.code == 2
        assert says in capsys.readouterr().err
    assert path.read_text() == before


def test_a_test_that_kills_its_worker_is_not_run_again_and_the_rest_run(project: pytest.Pytester) -> None:
    marker = project.path / "killed.txt"
    project.makepyfile(
        test_one=CASES + f"""
import os

def test_kills(perf):
    with open({str(marker)!r}, "a") as f:
        f.write("x")
    os._exit(3)

""" + "".join(f"\ndef test_{i}(perf):\n    perf.compare(ref_2ms, opt_1ms)\n" for i in range(3)),
        test_two=CASES + "".join(f"\ndef test_{i}(perf):\n    perf.compare(ref_2ms, opt_1ms)\n" for i in range(3)))
    # Seconds for every test, the killer first: it is handed out first, and its file's tests with it.
    seconds = {f"test_one.py::test_{i}": 1.0 for i in range(3)} | {f"test_two.py::test_{i}": 1.0 for i in range(3)}
    doc = {**baseline_doc({}), "test_seconds": {**seconds, "test_one.py::test_kills": 9.0}}
    (project.path / "baselines").mkdir()
    (project.path / "baselines" / "test-box.json").write_text(json.dumps(doc))
    # At most 2 replacement workers: xdist's scope schedulers would hand the killer to each in turn.
    result = project.runpytest_subprocess("-n", "2", "--max-worker-restart", "2")
    result.stdout.fnmatch_lines(["*sent the longest work first*first test_one.py*"])
    result.assert_outcomes(passed=6, failed=1)
    assert marker.read_text() == "x"  # run once: not handed to the other worker, whom it would kill too


def test_a_test_counts_once_its_teardown_is_reported() -> None:
    from speedgate.plugin import DURATIONS_KEY, _Durations

    config = SimpleNamespace(stash=pytest.Stash())
    durations = _Durations(config)  # type: ignore[arg-type]
    for nodeid, phases in (("t.py::whole", ("setup", "call", "teardown")), ("t.py::cut_short", ("setup", "call"))):
        for when in phases:
            durations.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, when=when, duration=1.5))  # type: ignore[arg-type]
    assert config.stash[DURATIONS_KEY] == {"t.py::whole": 4.5}
