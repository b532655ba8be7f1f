"""speedgate as a guest in a user's project: it wakes only for its own `perf` fixture, reads only its own tests'
faults, costs a run without perf nothing beyond its hook module and options, and ends a hang as the user asked
(pytest-timeout's limit, a deadline derived from the blessed entries) with stderr a pipe, as in every CI log."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import CASES, DEFAULT_TIMES, SCRIPTED_CONFTEST
from speedgate import deadline

OUTER_TIMEOUT_S = 150  # a hang that nothing ended fails the test here instead of hanging the suite


def run_piped(folder: Path, *args: str, timeout: float = OUTER_TIMEOUT_S) -> tuple[subprocess.CompletedProcess[str], float]:
    """pytest in folder as CI runs it: stdout and stderr pipes (not files, not a terminal)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=folder, text=True,
                          capture_output=True, timeout=timeout,  # pipes, as in CI
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return done, time.monotonic() - started


# A side blocked in a call that a signal cannot end, as a host waiting on a hung kernel is: SIGALRM (pytest-timeout's
# signal method) is blocked in the waiting thread, and time.sleep releases the GIL, as CUDA's waits do.
HANGING = CASES + """
import signal
import time

def hang():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(600)
    return 1.0

def test_before(perf):
    perf.compare(ref_2ms, opt_1ms)

def test_hangs(perf):
    perf.compare(ref_2ms, hang)
"""
# torch imported by the conftest, as a GPU project's would: a first comparison that imports it takes seconds on a
# loaded machine, longer than these deadlines.
CLOCK = "import torch  # noqa: F401\n" + SCRIPTED_CONFTEST.format(times={**DEFAULT_TIMES, "hang": 1.0})


@pytest.mark.parametrize("ini", ["", "faulthandler_timeout = 1\n"], ids=["plain", "faulthandler_timeout"])
def test_a_hang_is_named_and_ended_with_stderr_a_pipe(pytester: pytest.Pytester, ini: str) -> None:
    pytester.makeconftest(CLOCK)
    pytester.makepyfile(test_hang=HANGING)
    pytester.makeini("[pytest]\n" + ini)
    done, took = run_piped(pytester.path, "--speedgate-deadline", "6")
    assert done.returncode != 0, done.stdout[-2000:]
    assert "test_hang.py::test_hangs ran past its deadline of 6 s" in done.stderr, done.stderr[-3000:]
    assert "The stacks of its threads" in done.stderr
    assert took < OUTER_TIMEOUT_S - 30


def test_pytest_timeouts_limit_ends_a_hang_its_signal_cannot(pytester: pytest.Pytester) -> None:
    """The user set pytest-timeout's --timeout (its signal method cannot interrupt the wait); speedgate's deadline,
    unset, would be minutes: the hung comparison ends at the user's limit, named."""
    pytest.importorskip("pytest_timeout")
    pytester.makeconftest(CLOCK)
    pytester.makepyfile(test_hang=HANGING)
    pytester.makeini("[pytest]\n")
    done, took = run_piped(pytester.path, "--timeout", "8")
    assert "test_hang.py::test_hangs ran past its deadline of 8 s" in done.stderr, done.stderr[-3000:]
    assert took < OUTER_TIMEOUT_S - 30


def test_a_deadline_derived_from_the_bless_ends_in_minutes_not_a_quarter_hour() -> None:
    entry = {"reference_first_ms": 1200.0, "optimized_first_ms": 3000.0, "reference_ms": 2.0, "optimized_ms": 1.0,
             "rounds": 400}
    assert deadline.from_blessed([entry]) == deadline.DERIVED_FLOOR_S  # 5.4 s of work: the floor
    slow = {**entry, "optimized_first_ms": 60_000.0}  # a minute of compiling: ten times that, within the flat cap
    assert deadline.from_blessed([entry, slow]) == pytest.approx(min(10 * (1.2 + 60 + 1.2), 900.0))
    assert deadline.from_blessed([]) == 900.0  # no entry: the flat default
    assert deadline.within_timeout(300.0, 40.0) == 40.0
    assert deadline.within_timeout(0.0, 40.0) == 40.0 and deadline.within_timeout(300.0, 0.0) == 300.0


# -- a project's own perf fixture -------------------------------------------------------------------------------

OWN_PERF = """
import time
import pytest

@pytest.fixture
def perf():
    return "the project's own"

def test_uses_its_own(perf):
    time.sleep(1.0)
    assert perf == "the project's own"
"""


def test_a_projects_own_perf_fixture_is_left_alone(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_own=OWN_PERF)
    pytester.makeini("[pytest]\n")
    done, _ = run_piped(pytester.path, "--speedgate-deadline", "0.5")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
    assert "speedgate: 1 test(s) use a fixture named 'perf' that is not speedgate's" in done.stdout
    assert done.stdout.count("that is not speedgate's") == 1
    assert not (pytester.path / "baselines").exists()


def test_an_override_that_requests_speedgates_perf_is_speedgates(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CLOCK + """

@pytest.fixture
def perf(perf):
    return perf  # a project's wrapper around speedgate's own
""")
    pytester.makepyfile(test_wrapped=CASES + """
def test_wrapped(perf):
    perf.compare(ref_2ms, opt_1ms)
""")
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest("--hardware-key", "test-box")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_wrapped.py::test_wrapped*2.000x*"])
    assert "not speedgate's" not in result.stdout.str()


def test_a_cuda_fault_in_a_test_without_perf_is_not_speedgates_to_end(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    tests = "\n".join(f"def test_{i}():\n    pass\n" for i in range(7))
    pytester.makepyfile(test_many=tests + """
def test_fails():
    raise RuntimeError("CUDA error: an illegal memory access was encountered")
""")
    pytester.makeini("[pytest]\n")
    done, _ = run_piped(pytester.path, "-n", "2", "--max-worker-restart=0")
    assert "7 passed" in done.stdout and "1 failed" in done.stdout, done.stdout[-2000:]
    assert "ending xdist worker" not in done.stderr


def test_a_run_without_perf_loads_only_the_hook_module_and_its_options(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
import json, sys

def pytest_sessionfinish(session):
    with open("modules.json", "w") as f:
        json.dump(sorted(m for m in sys.modules if m.startswith("speedgate")), f)
""")
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    pytester.makeini("[pytest]\n")
    done, _ = run_piped(pytester.path)
    assert done.returncode == 0, done.stdout[-2000:]
    import json

    loaded = set(json.loads((pytester.path / "modules.json").read_text()))
    # The hook modules (plugin, its hookspecs, its xdist hooks where xdist is installed) and what registering the
    # options needs; no timer, hardware, fault, deadline, torch or NVML module.
    assert loaded <= {"speedgate", "speedgate.plugin", "speedgate.hookspecs", "speedgate.xdist_hooks",
                      "speedgate.options", "speedgate.reporting", "speedgate.tolerance"}, sorted(loaded)


def test_the_timer_choices_of_the_option_are_the_timer_kinds() -> None:
    from speedgate.options import TIMER_CHOICES
    from speedgate.timers import TimerKind

    assert TIMER_CHOICES == tuple(kind.value for kind in TimerKind)


def test_a_later_conftest_defining_a_short_spelling_is_told_the_way_out(pytester: pytest.Pytester) -> None:
    pytester.mkpydir("pkg")
    (pytester.path / "pkg" / "conftest.py").write_text(
        "def pytest_addoption(parser):\n    parser.addoption('--update-baselines', action='store_true')\n")
    (pytester.path / "pkg" / "test_x.py").write_text("def test_x():\n    pass\n")
    pytester.makeini("[pytest]\n")
    done, _ = run_piped(pytester.path)
    assert done.returncode != 0
    assert "speedgate: a conftest loaded during collection defines --update-baselines" in done.stdout, done.stdout[-2000:]
    assert "-p no:speedgate" in done.stdout and "--speedgate-update-baselines" in done.stdout
    # The same definition in the root conftest: the project keeps the name, and the run goes on.
    (pytester.path / "conftest.py").write_text((pytester.path / "pkg" / "conftest.py").read_text())
    (pytester.path / "pkg" / "conftest.py").unlink()
    done, _ = run_piped(pytester.path, "--update-baselines")
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-2000:]
