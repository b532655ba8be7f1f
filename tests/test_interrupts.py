"""An interrupted or crashed --update-baselines run blesses only tests that finished and passed, and says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import CASES, DEFAULT_TIMES, SCRIPTED_CONFTEST, write_baseline

pytestmark = pytest.mark.timing  # signals, deadlines, locks or clocks: tests/conftest.py

# test_b has compared when the run stops; its old entry (1.0x) must survive, test_a's new speedup be written.
INTERRUPTED = CASES + """
def test_a(perf):
    perf.compare(ref_2ms, opt_1ms)

def test_b(perf):
    perf.compare(ref_2ms, opt_500us)
    {stop}

def test_c(perf):
    perf.compare(ref_2ms, opt_2ms)
"""


def waits_for_ctrl_c(marker: Path) -> str:
    """The lines of a test body (indented four spaces) that say the test is running (marker) and then wait for
    Ctrl-C: 30 s in short sleeps. One time.sleep(30) missed the signal a few times in a hundred runs on a loaded
    box: a SIGINT that arrives after the marker's write but before the sleep's system call is only flagged by
    CPython's handler, and the sleep then runs its whole length (an xdist worker so went on until xdist's teardown
    interrupted it, 15 s later, after the controller's wait for its closing report had ended). A loop looks at the
    flag between sleeps, as a test doing real work does between its calls."""
    return f"""open({str(marker)!r}, "w").close()
    from time import sleep
    for _ in range(600):
        sleep(0.05)"""


def read_cases(root: Path) -> dict:
    return json.loads((root / "baselines" / "test-box.json").read_text())["cases"]


def speedups(root: Path) -> dict[str, float]:
    return {case_id: entry["speedup"] for case_id, entry in read_cases(root).items()}


def test_ctrl_c_after_compare_blesses_only_finished_tests(project: pytest.Pytester) -> None:
    """KeyboardInterrupt in a test body is how pytest sees Ctrl-C: the run stops there."""
    project.makepyfile(test_cases=INTERRUPTED.format(stop="raise KeyboardInterrupt"))
    write_baseline(project.path, {"test_cases.py::test_b": 1.0})
    result = project.runpytest("--update-baselines", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert speedups(project.path) == {"test_cases.py::test_a": 2.0, "test_cases.py::test_b": 1.0}
    result.stdout.fnmatch_lines([
        "the run was interrupted: only tests that finished and passed were blessed",
        "not blessed (its test did not finish): test_cases.py::test_b",
        "*baselines/test-box.json: 1 added, 0 updated, 0 kept*1 other entries untouched*",
        "  added: test_cases.py::test_a: 2x",
    ])


def test_ctrl_c_inside_a_compared_callable_blesses_nothing_of_it(project: pytest.Pytester) -> None:
    """Ctrl-C during the timed rounds: the case never gets a result, so nothing of it can be blessed."""
    project.makepyfile(test_cases=CASES + """
def test_a(perf):
    perf.compare(ref_2ms, opt_1ms)

CALLS = [0]

def opt_500us():
    CALLS[0] += 1
    if CALLS[0] > 5:  # in the warm-up, after the first call and its check
        raise KeyboardInterrupt
    return 1.0

def test_b(perf):
    perf.compare(ref_2ms, opt_500us)
""")
    result = project.runpytest("--update-baselines", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert speedups(project.path) == {"test_cases.py::test_a": 2.0}
    result.stdout.fnmatch_lines(["the run was interrupted: only tests that finished and passed were blessed"])


@pytest.mark.parametrize("stop", [
    "raise RuntimeError('teardown broke')",
    "raise KeyboardInterrupt",
], ids=["error", "ctrl-c"])
def test_a_teardown_that_does_not_finish_blesses_nothing(project: pytest.Pytester, stop: str) -> None:
    """The call passed, then its fixture's teardown failed or was interrupted: the test did not finish and pass."""
    project.makepyfile(test_cases=CASES + f"""
import pytest

@pytest.fixture
def resource():
    yield
    {stop}

def test_a(perf):
    perf.compare(ref_2ms, opt_1ms)

def test_b(perf, resource):
    perf.compare(ref_2ms, opt_500us)
""")
    result = project.runpytest("--update-baselines", no_reraise_ctrlc=True)
    assert speedups(project.path) == {"test_cases.py::test_a": 2.0}
    why = "its test failed" if "RuntimeError" in stop else "its test did not finish"
    result.stdout.fnmatch_lines([f"not blessed ({why}): test_cases.py::test_b"])


FAILING_FIRST = CASES + """
def test_good(perf):
    perf.compare(ref_2ms, opt_1ms)

def test_broken(perf):
    raise RuntimeError("its inputs could not be built")
"""


@pytest.mark.parametrize("selection", ["both", "broken"])
def test_a_bless_names_a_test_that_failed_before_measuring(project: pytest.Pytester, selection: str) -> None:
    # Such a test has no result: a bless said nothing of it, and a bless where every test failed so printed no
    # speedgate section at all.
    project.makepyfile(test_cases=FAILING_FIRST)
    write_baseline(project.path, {"test_cases.py::test_old": 1.5})
    before = (project.path / "baselines" / "test-box.json").read_bytes()
    result = project.runpytest("--update-baselines", *(["-k", "broken"] if selection == "broken" else []))
    result.assert_outcomes(failed=1, passed=1 if selection == "both" else 0)
    result.stdout.fnmatch_lines(["not blessed (its test failed before it measured anything: RuntimeError: its inputs "
                                 "could not be built): test_cases.py::test_broken"])
    if selection == "broken":
        result.stdout.fnmatch_lines(["nothing blessed: no comparison or metric of this run could be (the lines above "
                                     "say why); every baseline file was left as it was"])
        assert (project.path / "baselines" / "test-box.json").read_bytes() == before
    else:
        assert speedups(project.path) == {"test_cases.py::test_old": 1.5, "test_cases.py::test_good": 2.0}
        assert "nothing blessed" not in result.stdout.str()


def sigint_when(project: pytest.Pytester, marker: Path, *args: str, group: bool = False,
                again_after: float | None = None, ended: list[float] | None = None,
                ends_within: float = 30.0) -> tuple[int, str]:
    """Run `pytest --update-baselines *args` in a subprocess and send it SIGINT once marker exists; group=True sends
    it to the whole process group, as a terminal's Ctrl-C does (xdist's workers get it too); again_after: a second
    SIGINT to the same target so many seconds after the first, as a person presses Ctrl-C again; ended: gets the
    seconds from the first SIGINT to the run's end; ends_within: seconds after the last SIGINT before the run is
    killed and the test fails."""
    plugin_root = str(Path(__import__("speedgate").__file__).parent.parent)
    # Its own TMPDIR, so xdist workers' device lock (under $TMPDIR/speedgate-locks) is not shared with other runs.
    tmp = project.path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([plugin_root, os.environ.get("PYTHONPATH", "")]),
           "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "--update-baselines", *args], cwd=project.path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=group,
                            # A run started in the background of a non-interactive shell inherits SIGINT ignored, and
                            # Python then never turns it into KeyboardInterrupt: give the child the default back.
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the test never reached its sleep"
            time.sleep(0.05)
        first = time.monotonic()
        for delay in (0.0,) if again_after is None else (0.0, again_after):
            time.sleep(delay)
            if group:
                os.killpg(proc.pid, signal.SIGINT)
            else:
                proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=ends_within)
        if ended is not None:
            ended.append(time.monotonic() - first)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out


def test_sigint_to_a_running_session(project: pytest.Pytester) -> None:
    """A real Ctrl-C: SIGINT to `pytest --update-baselines` while its second test sleeps after compare()."""
    marker = project.path / "compared"
    project.makepyfile(test_cases=INTERRUPTED.format(stop=waits_for_ctrl_c(marker)))
    ret, out = sigint_when(project, marker, "-p", "no:xdist")
    assert ret == pytest.ExitCode.INTERRUPTED, out
    assert speedups(project.path) == {"test_cases.py::test_a": 2.0}, out
    for line in ("the run was interrupted: only tests that finished and passed were blessed",
                 "not blessed (its test did not finish): test_cases.py::test_b", "  added: test_cases.py::test_a: 2x"):
        assert line in out.splitlines(), out


@pytest.mark.parametrize("first", ["test_a", "test_b"])
def test_sigint_to_an_xdist_run(project: pytest.Pytester, first: str) -> None:
    """Ctrl-C in a terminal reaches the controller and every worker: the worker that finished its test still
    reports it, the one inside the other test blesses nothing. Workers sharing the CPU hold its device lock for a
    whole test, so the two tests run one after the other in whichever order the workers take the lock: the test
    that finds the other one finished is the one interrupted (written so in both orders of the file, after the
    one-sided form deadlocked when test_b's worker took the lock first, waiting for test_a inside its turn)."""
    finished, marker = project.path / "finished", project.path / "compared"
    bodies = {"test_a": "perf.compare(ref_2ms, opt_1ms)", "test_b": "perf.compare(ref_2ms, opt_500us)"}
    tests = "".join(f"""
def {name}(perf):
    {bodies[name]}
    stop_if_second({name!r})
""" for name in (first, *(n for n in bodies if n != first)))
    project.makepyfile(test_cases=CASES + f"""
import os, time

def stop_if_second(name):
    if not os.path.exists({str(finished)!r}):  # the first to run: finish, and say who finished
        with open({str(finished)!r}, "w") as f:
            f.write(name)
        return
    time.sleep(3.0)  # the finished test's worker has reported it by now (1 s was too short once on a loaded box)
    {waits_for_ctrl_c(marker)}
""" + tests)
    write_baseline(project.path, {"test_cases.py::test_b": 1.0})
    ret, out = sigint_when(project, marker, "-n", "2", group=True)  # two tests, two workers: one each
    assert ret == pytest.ExitCode.INTERRUPTED, out
    done = finished.read_text()
    blessed = {"test_a": 2.0, "test_b": 4.0}[done]
    assert speedups(project.path) == {"test_cases.py::test_b": 1.0, f"test_cases.py::{done}": blessed}, out
    assert "the run was interrupted: only tests that finished and passed were blessed" in out.splitlines(), out
    line = {"test_a": "  added: test_cases.py::test_a: 2x", "test_b": "  updated: test_cases.py::test_b: 1x -> 4x"}[done]
    assert line in out.splitlines(), out


def test_sigint_to_an_xdist_run_blesses_what_a_still_running_worker_finished(project: pytest.Pytester) -> None:
    """Ctrl-C while a worker is inside its second test: its first test finished and passed, and the worker sends its
    results only at its end, after xdist's controller stopped listening at the interrupt. Those results were lost
    and the run said nothing of speedgate; the controller now waits for the interrupted workers' closing reports."""
    marker = project.path / "compared"
    project.makepyfile(test_cases=INTERRUPTED.format(stop=waits_for_ctrl_c(marker)))
    write_baseline(project.path, {"test_cases.py::test_b": 1.0})
    ret, out = sigint_when(project, marker, "-n", "1", group=True)  # one worker: test_a, then test_b stops
    assert ret == pytest.ExitCode.INTERRUPTED, out
    assert speedups(project.path) == {"test_cases.py::test_a": 2.0, "test_cases.py::test_b": 1.0}, out
    for line in ("the run was interrupted: only tests that finished and passed were blessed",
                 "not blessed (its test did not finish): test_cases.py::test_b", "  added: test_cases.py::test_a: 2x"):
        assert line in out.splitlines(), out


def test_sigint_to_the_xdist_controller_alone_says_what_it_could_not_bless(project: pytest.Pytester) -> None:
    """SIGINT to the controller only (a `kill -INT` of its process, not a terminal's Ctrl-C): the worker, still
    inside test_b, is not interrupted and does not report in time. The run must still say it was interrupted and
    that the worker's results did not arrive, never end with no speedgate section; and the file keeps test_b's entry."""
    marker = project.path / "compared"
    project.makepyfile(test_cases=INTERRUPTED.format(stop=waits_for_ctrl_c(marker)))
    write_baseline(project.path, {"test_cases.py::test_b": 1.0})
    ret, out = sigint_when(project, marker, "-n", "1")
    assert ret == pytest.ExitCode.INTERRUPTED, out
    assert speedups(project.path) == {"test_cases.py::test_b": 1.0}, out
    lines = out.splitlines()
    assert "the run was interrupted: only tests that finished and passed were blessed" in lines, out
    assert any(line.startswith("xdist worker gw0 ended without its closing report") for line in lines), out
    assert any(line.startswith("nothing blessed:") for line in lines), out


def test_a_second_sigint_cuts_the_controllers_wait_short_and_the_run_still_says_what_it_blessed(
        project: pytest.Pytester) -> None:
    """Ctrl-C pressed again while the controller waits for a worker's closing report (up to 10 s): it raised
    KeyboardInterrupt inside that wait, and the run ended with a traceback, no speedgate section and nothing of its
    finished tests written. The second one now ends the wait at once; the end is written as after one Ctrl-C. The
    project's wait is 120 s here, so a wait not cut short cannot end within the 60 s allowed, which leaves room for
    a loaded box (with the plugin's 10 s wait and a bound of 12 s, runs cut short took 12.8-19.9 s beside a CI run
    and three other loops of these tests, in 4 of about 30 runs)."""
    project.makeconftest(SCRIPTED_CONFTEST.format(times=DEFAULT_TIMES) + """
import speedgate.xdist_hooks
speedgate.xdist_hooks.INTERRUPT_WAIT_S = 120.0
""")
    marker = project.path / "compared"
    project.makepyfile(test_cases=INTERRUPTED.format(stop=waits_for_ctrl_c(marker)))
    write_baseline(project.path, {"test_cases.py::test_b": 1.0})
    ended: list[float] = []
    ret, out = sigint_when(project, marker, "-n", "1", again_after=1.0, ended=ended, ends_within=90)
    # Cut short: about 6 s on this box (xdist's teardown then interrupts the worker).
    assert ended[0] < 60.0, (ended, out)
    assert ret == pytest.ExitCode.INTERRUPTED, out
    assert speedups(project.path) == {"test_cases.py::test_b": 1.0}, out
    lines = out.splitlines()
    assert "Traceback (most recent call last):" not in lines, out
    assert "speedgate: Ctrl-C: writing what finished first (once more to stop at once)" in lines, out
    assert "the run was interrupted: only tests that finished and passed were blessed" in lines, out
    assert any(line.startswith("xdist worker gw0 ended without its closing report") for line in lines), out


@pytest.mark.parametrize(("order", "raised", "seen"), [
    ("trylast", "KeyboardInterrupt", None),
    ("tryfirst", "TypeError(\"unsupported operand type(s) for -: 'NoneType' and 'int'\")",
     "TypeError: unsupported operand type(s)"),
], ids=["second-ctrl-c", "report-crashes"])
def test_a_ctrl_c_whose_report_pytest_cut_short_still_blesses_only_what_finished(
        project: pytest.Pytester, order: str, raised: str, seen: str | None) -> None:
    """pytest's own report of a Ctrl-C (its pytest_keyboard_interrupt) can end early, and the session's exit status is
    then that of a run that finished: speedgate's end must still know it was interrupted, bless only what finished
    and say so. Played by a conftest whose own pytest_keyboard_interrupt raises.

    second-ctrl-c: a second Ctrl-C inside that report (KeyboardInterrupt, after speedgate's note). report-crashes: the
    report itself fails: on Python 3.11 a KeyboardInterrupt raised at an instruction with no line number makes
    pytest's traceback code compute `None - 1` (seen once in 192 runs on a loaded box, when the SIGINT reached a
    thread other than the main one); the run ends with that TypeError, and the hooks after the failing one never
    run. speedgate's note is tryfirst; the conftest's hook is tryfirst too here, and without the note's tryfirst
    this case fails."""
    project.makeconftest(SCRIPTED_CONFTEST.format(times=DEFAULT_TIMES) + f"""

@pytest.hookimpl({order}=True)
def pytest_keyboard_interrupt(excinfo):
    raise {raised}
""")
    project.makepyfile(test_cases=INTERRUPTED.format(stop="raise KeyboardInterrupt"))
    write_baseline(project.path, {"test_cases.py::test_b": 1.0})
    result = project.runpytest_subprocess("--update-baselines", "-p", "no:xdist")
    if seen is not None:
        assert seen in result.stderr.str() + result.stdout.str()
    assert speedups(project.path) == {"test_cases.py::test_a": 2.0, "test_cases.py::test_b": 1.0}, result.stdout.str()
    result.stdout.fnmatch_lines(["the run was interrupted: only tests that finished and passed were blessed",
                                 "not blessed (its test did not finish): test_cases.py::test_b"])


@pytest.mark.parametrize("parallel", [["-p", "no:xdist"], ["-n", "1"]], ids=["serial", "xdist"])
def test_a_ctrl_c_after_speedgates_end_leaves_its_summary_whole(project: pytest.Pytester, parallel: list[str]) -> None:
    """Ctrl-C pressed while xdist tears its workers down (up to 10 s) or pytest prints the summary, after the file
    was written: it cut the summary that says what was blessed, with a traceback. It is noted now, and the run ends
    with its summary and the exit status of an interrupted run. Played by a conftest whose sessionfinish, after
    speedgate's (and, under xdist, where xdist's teardown runs), sends this process SIGINT."""
    project.makeconftest(SCRIPTED_CONFTEST.format(times=DEFAULT_TIMES) + """
import os, signal

@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):
        os.kill(os.getpid(), signal.SIGINT)
""")
    project.makepyfile(test_cases=CASES + """
def test_a(perf):
    perf.compare(ref_2ms, opt_1ms)
""")
    result = project.runpytest_subprocess("--update-baselines", *parallel)
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out
    assert speedups(project.path) == {"test_cases.py::test_a": 2.0}, out
    assert "Traceback (most recent call last):" not in out and "KeyboardInterrupt" not in out, out
    result.stdout.fnmatch_lines(["  added: test_cases.py::test_a: 2x"])
    result.stderr.fnmatch_lines(["speedgate: Ctrl-C: writing what finished first (once more to stop at once)"])


def test_sigint_to_the_xdist_controller_leaves_a_run_without_perf_alone(project: pytest.Pytester) -> None:
    """The same interrupt in a project whose tests never use perf: its workers hold nothing of speedgate's, so none
    is waited for or named as lost, and no speedgate section is printed."""
    marker = project.path / "started"
    project.makepyfile(test_plain=f"""
def test_a():
    assert True

def test_b():
    open({str(marker)!r}, "w").close()
    import time
    time.sleep(30)
""")
    ret, out = sigint_when(project, marker, "-n", "1")
    assert ret == pytest.ExitCode.INTERRUPTED, out
    assert "ended without its closing report" not in out and "= speedgate =" not in out, out
    assert not (project.path / "baselines").exists(), out


def test_a_crashed_xdist_worker_blesses_nothing_it_ran(project: pytest.Pytester) -> None:
    """A worker that dies sends no payload: none of its results reach the controller, so none is blessed."""
    project.makepyfile(test_cases=CASES + """
import os

def test_a(perf):
    perf.compare(ref_2ms, opt_1ms)

def test_b(perf):
    perf.compare(ref_2ms, opt_500us)
    os._exit(3)
""")
    write_baseline(project.path, {"test_cases.py::test_b": 1.0})
    # Two tests, two workers: xdist sends one to each (round robin); test_b's worker dies after its compare().
    result = project.runpytest_subprocess("-n", "2", "--update-baselines", "--speedgate-json", "report.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*worker 'gw*' crashed while running 'test_cases.py::test_b'*"])
    result.stdout.fnmatch_lines(["xdist worker gw* ended without its closing report (it crashed, was killed, was "
                                 "replaced after a CUDA fault, or had not reported when the run was interrupted)*"])
    assert speedups(project.path) == {"test_cases.py::test_a": 2.0, "test_cases.py::test_b": 1.0}
    # What reached the controller: test_a's result only; the dead worker's record of test_b never arrived.
    report = json.loads((project.path / "report.json").read_text())
    assert [c["case_id"] for c in report["cases"]] == ["test_cases.py::test_a"]
