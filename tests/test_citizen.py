"""The plugin as a good citizen: tests without perf never wait on the device lock, an xdist run's bad baseline is a
usage error, collection loads nothing it does not need, and JUnit output fits its family's schema."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import CASES, write_baseline
from speedgate import __version__

SLEEP_S = 1.5

# Records every DeviceLock.acquire of this process into LOG, then takes the lock as usual.
RECORDING_CONFTEST = """
import os
import speedgate.devices

LOG = {log!r}
_acquire = speedgate.devices.DeviceLock.acquire

def acquire(self, *args, **kwargs):
    with open(LOG, "a") as f:
        f.write(f"{{os.environ.get('PYTEST_XDIST_WORKER')}} {{self.path}}\\n")
    _acquire(self, *args, **kwargs)

speedgate.devices.DeviceLock.acquire = acquire
"""


def _private_lock_folder(monkeypatch: pytest.MonkeyPatch, path: Path) -> Path:
    """Both workers share the CPU, and their lock folder is this test's own (not the machine's $TMPDIR)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    tmp = path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    return tmp / "speedgate-locks"


@pytest.mark.timing
def test_tests_without_perf_run_in_parallel_and_never_take_the_device_lock(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    locks = _private_lock_folder(monkeypatch, pytester.path)
    log, intervals = pytester.path / "acquired.txt", pytester.path / "intervals.txt"
    pytester.makeconftest(RECORDING_CONFTEST.format(log=str(log)))
    pytester.makepyfile(
        test_sleep=f"""
import time
import pytest

@pytest.mark.parametrize("i", range(4))
def test_sleep(i):
    start = time.time()
    time.sleep({SLEEP_S})
    with open({str(intervals)!r}, "a") as f:
        f.write(f"{{start}} {{time.time()}}\\n")
"""
    )
    pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider").assert_outcomes(passed=4)
    assert not log.exists(), f"a test without perf took the device lock:\n{log.read_text()}"
    assert not locks.exists()
    spans = sorted(tuple(map(float, line.split())) for line in intervals.read_text().splitlines())
    assert len(spans) == 4
    assert spans[1][0] < spans[0][1], "the two workers never slept at the same time"
    wall = max(end for _, end in spans) - spans[0][0]
    assert wall < SLEEP_S * 2 * 1.3, f"4 sleeps of {SLEEP_S} s on 2 workers took {wall:.2f} s: serialised"


def test_perf_tests_still_take_the_lock_and_others_do_not(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    locks = _private_lock_folder(monkeypatch, pytester.path)
    log = pytester.path / "acquired.txt"
    pytester.makeconftest(RECORDING_CONFTEST.format(log=str(log)))
    pytester.makepyfile(
        test_mixed="""
def test_timed(perf):
    perf.compare(lambda: 1.0, lambda: 1.0)

def test_plain():
    pass

def test_other_plain():
    pass
"""
    )
    pytester.runpytest_subprocess("-n", "2", "--correctness-only", "-p", "no:cacheprovider").assert_outcomes(passed=3)
    taken = log.read_text().splitlines()
    assert len(taken) == 1 and taken[0].endswith(str(locks / "cpu.lock")), taken


@pytest.mark.timing
def test_an_in_process_run_inside_a_worker_takes_its_own_lock_again(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytester's in-process run inside an xdist worker is that worker to speedgate, and takes the device's lock while
    the outer test holds it, in the same process and thread: the lock must be re-entrant there, neither a deadlock
    nor an error. Two workers on this one device (the CPU) share it, so the outer test holds the lock."""
    _private_lock_folder(monkeypatch, pytester.path)
    pytester.makeconftest("pytest_plugins = ['pytester']\n")
    pytester.makepyfile(
        test_outer="""
INNER = '''
def test_inner(perf):
    perf.compare(lambda: 1.0, lambda: 1.0)
'''

def test_outer(perf, pytester):
    perf.compare(lambda: 1.0, lambda: 1.0)
    pytester.makepyfile(test_inner=INNER)
    inner = pytester.runpytest("--correctness-only", "-p", "no:cacheprovider")
    inner.assert_outcomes(passed=1)
"""
    )
    result = pytester.runpytest_subprocess("-n", "2", "--correctness-only", "-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("content", "problem"),
    [("{not json", "is not valid JSON"), ('{"schema_version": 1, "cases": []}', "")],
    ids=["corrupt", "schema-invalid"],
)
def test_xdist_bad_baseline_is_a_usage_error_naming_the_file(project: pytest.Pytester, content: str, problem: str) -> None:
    project.makepyfile(test_cases=CASES + "\ndef test_a(perf):\n    perf.compare(ref_2ms, opt_1ms)\n")
    path = write_baseline(project.path, {})
    path.write_text(content)
    result = project.runpytest_subprocess("-n", "2")
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    assert "INTERNALERROR" not in output
    assert f"speedgate: {path}: {problem}" in output
    assert path.read_text() == content


# Prints the modules a --co run of a trivial project loaded, at its very end (after every sessionfinish).
MODULES_CONFTEST = """
import sys

def pytest_unconfigure(config):
    print("MODULES", sorted(sys.modules))
"""

NOT_AT_COLLECTION = ("speedgate.session", "speedgate.fixture", "speedgate.measure", "speedgate.judging",
                     "speedgate.pipeline", "speedgate.checks", "speedgate.sides",
                     "speedgate.finish", "speedgate.report", "speedgate.export", "speedgate.baseline",
                     "speedgate.devices", "numpy", "jsonschema", "filelock", "torch", "triton", "pynvml")


def test_collection_of_a_project_without_perf_loads_only_the_hooks(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(MODULES_CONFTEST)
    pytester.makepyfile(test_plain="".join(f"def test_{i}():\n    assert {i} == {i}\n\n" for i in range(4)))

    def modules(*args: str) -> set[str]:
        result = pytester.runpytest_subprocess("--co", "-q", "-p", "no:cacheprovider", *args)
        assert result.ret == pytest.ExitCode.OK
        line = next(line for line in result.stdout.lines if line.startswith("MODULES "))
        return set(ast.literal_eval(line[len("MODULES "):]))

    loaded, without = modules(), modules("-p", "no:speedgate")
    assert "speedgate.plugin" in loaded and "speedgate.plugin" not in without
    added = sorted((loaded - without) & set(NOT_AT_COLLECTION))  # other plugins may load numpy; speedgate must not
    assert not added, f"speedgate loaded these at collection: {added}"


def test_a_report_asked_for_is_written_when_no_test_used_perf(project: pytest.Pytester) -> None:
    # The end of a run is skipped when nothing was measured, but not when a report file was asked for.
    project.makepyfile(test_plain="def test_plain():\n    pass\n")
    project.runpytest("--speedgate-json", "r.json").assert_outcomes(passed=1)
    report = json.loads((project.path / "r.json").read_text())
    assert report["cases"] == [] and report["metrics"] == []


JUNIT_TESTS = CASES + """
def test_fine(perf):
    perf.compare(ref_2ms, opt_1ms, name="pair")

def test_new(perf):
    perf.compare(ref_2ms, opt_500us)
"""

XSD = Path(__file__).parent / "data" / "junit-10.xsd"


def _junit(project: pytest.Pytester, family: str) -> ET.Element:
    project.makepyfile(test_cases=JUNIT_TESTS)
    write_baseline(project.path, {"test_cases.py::test_fine::pair": 2.0})
    project.runpytest("-o", f"junit_family={family}", "--junitxml", "out.xml").assert_outcomes(passed=2)
    return ET.parse(project.path / "out.xml").getroot()


def test_junit_xunit2_is_valid_and_says_the_run_once(project: pytest.Pytester) -> None:
    import xmlschema  # a test-only dependency (tox.ini), as in pytest's own JUnit tests

    root = _junit(project, "xunit2")
    errors = [str(e.reason) for e in xmlschema.XMLSchema(str(XSD)).iter_errors(str(project.path / "out.xml"))]
    assert not errors, errors
    assert not [p for case in root.iter("testcase") for p in case.iter("property")]
    suite = {p.get("name"): p.get("value") for p in root.find("testsuite").find("properties").iter("property")}
    assert suite == {"speedgate.hardware_key": "test-box", "speedgate.cases": "2", "speedgate.pass": "1",
                     "speedgate.new": "1"}


@pytest.mark.parametrize("family", ["xunit1", "legacy"])
def test_junit_xunit1_keeps_each_result_as_its_test_properties(project: pytest.Pytester, family: str) -> None:
    root = _junit(project, family)
    props = {case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
             for case in root.iter("testcase")}
    assert props["test_fine"]["speedgate.pair.verdict"] == "pass"
    assert props["test_new"]["speedgate.case.verdict"] == "new"



# A second project's tests that read the devices they see, and the modules their process loaded, into one file per
# process: xdist discards a worker's stdout.
DEVICE_READERS = """
import os
import sys
import pytest

@pytest.mark.parametrize("i", range(4))
def test_devices(i):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "serial")
    with open(os.path.join({out!r}, worker + ".devices"), "a") as f:
        f.write(os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>") + "\\n")
    with open(os.path.join({out!r}, worker + ".modules"), "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
"""


def _devices_seen(out: Path) -> dict[str, set[str]]:
    return {path.stem: set(path.read_text().split()) for path in out.glob("*.devices")}


@pytest.mark.parametrize("how", ["option", "ini"])
def test_xdist_workers_keep_every_gpu_unless_pinning_is_asked(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this suite may itself run under xdist
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    out = pytester.mkdir("seen")
    pytester.makepyfile(test_devices=DEVICE_READERS.format(out=str(out)))
    pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider").assert_outcomes(passed=4)
    assert _devices_seen(out) == {"gw0": {"0,1"}, "gw1": {"0,1"}}, "a project that never asked had its GPUs pinned"

    for path in out.iterdir():
        path.unlink()
    args = ["--speedgate-pin-workers"] if how == "option" else ["-o", "speedgate_pin_workers=true"]
    pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", *args).assert_outcomes(passed=4)
    assert _devices_seen(out) == {"gw0": {"0"}, "gw1": {"1"}}


def test_xdist_workers_of_a_project_without_perf_ask_nvml_nothing(pytester: pytest.Pytester,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Without CUDA_VISIBLE_DEVICES, a device lookup would ask NVML (import pynvml) in every worker.
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    out = pytester.mkdir("seen")
    pytester.makepyfile(test_devices=DEVICE_READERS.format(out=str(out)))
    pytester.makeconftest(f"""
import os, sys

def pytest_unconfigure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(os.path.join({str(out)!r}, "controller.modules"), "w") as f:
            f.write("\\n".join(sorted(sys.modules)))
""")
    pytester.mkdir("baselines").joinpath("notes.txt").write_text("a folder of the project's own\n")
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    assert _devices_seen(out) == {"gw0": {"<unset>"}, "gw1": {"<unset>"}}
    for worker in ("gw0", "gw1", "controller"):
        loaded = set((out / f"{worker}.modules").read_text().split())
        assert "speedgate.plugin" in loaded
        assert not loaded & {"pynvml", "speedgate.devices", "speedgate.session", "filelock"}, worker
    left = [p for p in pytester.path.rglob("*") if "speedgate" in p.name or p.suffix in (".json", ".md", ".png")]
    assert not left, f"files left behind: {left}"
    assert not (Path(os.environ["TMPDIR"]) / "speedgate-locks").exists()
    assert "speedgate" not in result.stdout.str().replace(f"speedgate-{__version__}", "")  # the plugins line


@pytest.mark.timing
@pytest.mark.parametrize("parallel", [["-n", "2"], ["-p", "no:xdist"]], ids=["xdist", "serial"])
def test_a_run_waiting_on_another_runs_device_lock_says_whom(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                            parallel: list[str]) -> None:
    """Two runs timing on one device at once take turns, xdist's or not (two blesses of one project on a 2-core box
    inflated each other's speedups with no warning before serial runs took the lock)."""
    _private_lock_folder(monkeypatch, pytester.path)  # both runs share the CPU and this test's lock folder
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    holding = pytester.path / "holding"
    # The second run's terminal (stderr, where a wait is said the moment it passes a second): the first run holds its
    # lock until it reads the wait there, however long the second run takes to start on a loaded machine.
    waits = pytester.path / "mine.err"
    other = pytester.mkdir("other")
    (other / "test_hold.py").write_text(f"""
import pathlib, time

def test_hold(perf):
    perf.compare(lambda: 1.0, lambda: 1.0)
    pathlib.Path({str(holding)!r}).touch()
    waits, deadline = pathlib.Path({str(waits)!r}), time.monotonic() + 120
    while time.monotonic() < deadline and "waiting for cpu" not in (waits.read_text() if waits.exists() else ""):
        time.sleep(0.05)
""")
    command = [sys.executable, "-m", "pytest", *parallel, "-p", "no:cacheprovider", "--correctness-only",
               "--hardware-key", "test-box"]
    first = subprocess.Popen(command, cwd=other, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    second = None
    try:
        deadline = time.monotonic() + 120
        while not holding.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert holding.exists(), first.communicate(timeout=60)[0]
        mine = pytester.mkdir("mine")
        (mine / "test_mine.py").write_text("def test_mine(perf):\n    perf.compare(lambda: 1.0, lambda: 1.0)\n")
        with open(waits, "w") as err:
            second = subprocess.Popen(command, cwd=mine, stdout=subprocess.PIPE, stderr=err, text=True)
            mine_out = second.communicate(timeout=180)[0]
    finally:
        # Each run is given time to end before it is killed: on a loaded machine the first can still be closing its
        # workers when the second has finished (killed there, it once exited -9 after printing "1 passed").
        for proc in (p for p in (first, second) if p is not None):
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        out = first.communicate(timeout=60)[0]
    assert first.returncode == 0, f"exit {first.returncode}\n{out}"
    assert second.returncode == 0 and "1 passed" in mine_out, mine_out
    said = mine_out + waits.read_text()
    waiter = "gw[01] " if "-n" in parallel else ""  # an xdist worker says which one waits
    assert re.search(f"speedgate: {waiter}waiting for cpu: another run holds its lock", said), said
    assert f"project {other}, test test_hold.py::test_hold" in said
    assert re.search(f"speedgate: {waiter}got cpu after waiting", said), said
    assert "waiting for" not in out  # the first run waited on no one


TWO_CASES = CASES + """
def test_a(perf):
    perf.compare(ref_2ms, opt_1ms)

def test_b(perf):
    perf.compare(ref_2ms, opt_2ms)
"""


def test_collect_only_leaves_the_report_of_the_last_run_alone(project: pytest.Pytester) -> None:
    project.makepyfile(test_cases=TWO_CASES)
    project.runpytest("--speedgate-json", "r.json").assert_outcomes(passed=2)
    written = (project.path / "r.json").read_text()
    assert len(json.loads(written)["cases"]) == 2
    result = project.runpytest("--co", "--speedgate-json", "r.json")
    assert result.ret == pytest.ExitCode.OK
    assert (project.path / "r.json").read_text() == written, "--co rewrote the report with an empty one"


def test_qq_prints_one_line_of_counts_and_what_went_wrong(project: pytest.Pytester) -> None:
    project.makepyfile(test_cases=TWO_CASES)
    write_baseline(project.path, {"test_cases.py::test_a": 2.0, "test_cases.py::test_b": 2.0})
    result = project.runpytest("-qq")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # -qq prints no outcome line to count
    out = result.stdout.str()
    assert "speedgate: 2 cases: 1 regressed, 1 pass" in out
    assert "ref ms" not in out and "detection power" not in out, "-qq printed the table"
    normal = project.runpytest()
    assert "ref ms" in normal.stdout.str()  # the table is still there without -qq
