"""speedgate's own deadline: a hung case that uses perf is ended and named with no configuration of the user's, while
its host waits inside a C call (serially the run stops with the case's stacks; under xdist the worker is replaced and
the crash report names the case), and a slow honest case with many comparisons is not cut short."""

from __future__ import annotations

import json
import time

import pytest

from conftest import CASES, DEFAULT_TIMES, SCRIPTED_CONFTEST
from speedgate.deadline import Watchdog

pytestmark = pytest.mark.timing  # signals, deadlines, locks or clocks: tests/conftest.py

# Blocked in a C call: time.sleep releases the GIL (as CUDA's waits do); libc's sleep through ctypes.PyDLL keeps it.
BLOCKS = {
    "gil-released": "time.sleep(600)",
    "gil-held": "ctypes.PyDLL(None).sleep(600)",
}

# The tests around the hang get a deadline of their own: the run's 2 s is the hanging test's, and the first
# comparison of a process (its lazy imports) took longer than that on a loaded machine.
HANGING = CASES + """
import ctypes
import time

import pytest

def hang():
    {block}
    return 1.0

@pytest.mark.speedgate_deadline(120)
def test_before(perf):
    perf.compare(ref_2ms, opt_1ms)

def test_hangs(perf):
    perf.compare(ref_2ms, hang)

@pytest.mark.speedgate_deadline(120)
def test_after(perf):
    perf.compare(ref_2ms, opt_1ms)
"""

# No ini file of its own, only the scripted clock: a user's project. Its sides return Python floats, so no comparison
# imports torch (tests/test_plugin_modes.py holds that); a process's first comparison still imports the plugin's
# modules and numpy, which the deadlines below leave time for.
CLOCK = SCRIPTED_CONFTEST.format(times={**DEFAULT_TIMES, "hang": 1.0})
OUTER_TIMEOUT_S = 120  # pytester kills the run past this: a deadline that never fired fails the test instead of hanging


def _project(pytester: pytest.Pytester, block: str) -> str:
    """The project; returns how faulthandler names the line that blocks."""
    pytester.makeconftest(CLOCK)
    written = pytester.makepyfile(test_hang=HANGING.format(block=BLOCKS[block])).read_text()
    return f'test_hang.py", line {written.splitlines().index("    " + BLOCKS[block]) + 1} in hang'


@pytest.mark.parametrize("block", list(BLOCKS))
def test_a_serial_run_stops_at_the_hung_case_naming_it_with_its_stack(pytester: pytest.Pytester, block: str) -> None:
    blocked_at = _project(pytester, block)
    started = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--speedgate-deadline", "2",
                                           timeout=OUTER_TIMEOUT_S)
    took = time.monotonic() - started
    err = result.stderr.str()
    assert result.ret == 1, err
    assert took < 60, f"the run took {took:.0f} s"
    if block == "gil-released":
        assert "speedgate: test_hang.py::test_hangs ran past its deadline of 2 s since it started" in err
    else:  # the watchdog thread never got the GIL: faulthandler's timer (the backstop) dumped and exited
        assert "Timeout (0:00:04)!" in err
    # The stack of the blocked test, down to the call that never returned.
    assert blocked_at in err
    assert "test_hang.py::test_after" not in result.stdout.str()  # the run stopped there


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("block", list(BLOCKS))
def test_under_xdist_the_worker_is_replaced_and_the_case_named(pytester: pytest.Pytester, block: str, workers: str) -> None:
    blocked_at = _project(pytester, block)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", workers, "--speedgate-deadline", "2",
                                           "--speedgate-json=r.json", timeout=OUTER_TIMEOUT_S)
    result.assert_outcomes(passed=2, failed=1)
    # What the ended worker measured before the hang was saved by its watchdog, not lost with it (faulthandler's
    # timer, which ends a worker whose watchdog never got the GIL, cannot save it: then it is lost, and said so).
    cases = [case["case_id"] for case in json.loads((pytester.path / "r.json").read_text())["cases"]]
    assert "test_hang.py::test_after" in cases
    if block == "gil-released":
        assert "test_hang.py::test_before" in cases
    out = result.stdout.str()
    assert "crashed while running 'test_hang.py::test_hangs'" in out
    if block == "gil-released":
        assert "speedgate: test_hang.py::test_hangs ran past its deadline of 2 s since it started" in out
    else:
        assert "held the GIL, so faulthandler's timer ended the worker" in out
    assert blocked_at in out  # the stacks travel with the crash report


def test_each_finished_comparison_restarts_the_clock(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CLOCK)
    pytester.makepyfile(test_slow=CASES + """
import time

def test_three_slow_comparisons(perf):
    for name in ("a", "b", "c"):
        time.sleep(2.0)
        perf.compare(ref_2ms, opt_1ms, name=name)
    time.sleep(2.0)

def test_slow_without_perf():
    time.sleep(6)
""")
    # 8 s in all, never 5 s without progress (a comparison may take 3 s on a loaded machine, the first one with its
    # imports); the test without perf has no deadline.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--speedgate-deadline", "5", timeout=OUTER_TIMEOUT_S)
    result.assert_outcomes(passed=2)


def test_the_marker_sets_a_tests_deadline(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CLOCK)
    pytester.makepyfile(test_marked=CASES + """
import time
import pytest

def hang():
    time.sleep(600)
    return 1.0

@pytest.mark.speedgate_deadline(0)
def test_no_deadline(perf):
    time.sleep(1.5)
    perf.compare(ref_2ms, opt_1ms)

@pytest.mark.speedgate_deadline(1)
def test_short(perf):
    perf.compare(ref_2ms, hang)
""")
    # The run's deadline is 1 s, but the first test has none; the second's own 1 s ends it, with no option.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "speedgate_deadline=1", timeout=OUTER_TIMEOUT_S)
    assert "test_marked.py ." in result.stdout.str()  # the first test passed; the run ended in the second
    assert "speedgate: test_marked.py::test_short ran past its deadline of 1 s" in result.stderr.str()
    assert result.ret == 1


def test_a_bad_marker_is_a_usage_error_before_any_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad="""
import pytest

@pytest.mark.speedgate_deadline("soon")
def test_x(perf):
    pass
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*speedgate: test_bad.py::test_x: @pytest.mark.speedgate_deadline: 'soon' is not a number*"])


def test_a_disarmed_watchdog_never_fires(tmp_path) -> None:
    # In this process: a fired watchdog would end the test run itself.
    side = tmp_path / "side.txt"
    watchdog = Watchdog(2, side, backstop=True)
    for _ in range(3):
        watchdog.arm("t::x", 0.3)
        watchdog.progress("t::x::a")
        watchdog.disarm()
    time.sleep(0.8)
    assert side.read_text() == ""  # nothing to tell, and no hole of zeros for faulthandler to write after
    watchdog.close()
    assert not side.exists()
