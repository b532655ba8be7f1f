"""speedgate's own hooks (speedgate.hookspecs), each implemented in a fresh project's conftest.py: the conftests are
docs/hooks.md's examples, as written, so each test fails when its hook is not called or the page's example is wrong."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "hooks.md"
MARKER = "<!-- not run: a conftest.py; tests/test_hooks.py runs it -->"

# Two sides of busy work (loops, not sleeps: a clock of CPU time sees them too).
TESTS = """
def ref():
    return sum(i * i for i in range(40_000))

def opt():
    return sum(i * i for i in range(20_000)) + sum(i * i for i in range(20_000, 40_000))

def test_speed(perf):
    perf.compare(ref, opt, check=False)
"""
RUN = ("-p", "no:cacheprovider", "--hardware-key", "test-box", "--speedgate-budget", "0.2")


def conftest(hook: str) -> str:
    """docs/hooks.md's example conftest.py that implements hook."""
    blocks = re.findall(re.escape(MARKER) + r"\n```python\n(.*?)\n```", DOCS.read_text(), re.S)
    found = [block for block in blocks if f"def {hook}(" in block]
    assert len(found) == 1, f"docs/hooks.md has {len(found)} conftest examples implementing {hook}"
    return found[0] + "\n"


def test_a_conftest_adds_a_report_with_its_own_option(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(conftest("pytest_speedgate_reports"))
    pytester.makepyfile(test_speed=TESTS)
    help_text = pytester.runpytest_subprocess("--help", "-p", "no:cacheprovider").stdout.str()
    speedgate_section = help_text[help_text.index("speedgate:"):]
    assert "--speedups-csv=PATH" in speedgate_section and "write each comparison's speedup" in speedgate_section
    result = pytester.runpytest_subprocess(*RUN, "--speedups-csv", "out/speedups.csv")
    result.assert_outcomes(passed=1)
    lines = (pytester.path / "out" / "speedups.csv").read_text().splitlines()
    assert lines[0] == "case,speedup,verdict" and lines[1].startswith("test_speed.py::test_speed,")
    (pytester.path / "out" / "speedups.csv").unlink()
    pytester.runpytest_subprocess(*RUN).assert_outcomes(passed=1)  # not asked for: not written
    assert not (pytester.path / "out" / "speedups.csv").exists()


def test_a_report_whose_package_is_missing_is_a_usage_error_before_any_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
from speedgate.reporting import Report

class Never:
    def path(self, run, asked):
        return asked

    def write(self, run, path):
        raise AssertionError("never written")

def pytest_speedgate_reports():
    return [Report("never", Never, option="--never-report", help="never (default: not written)",
                   needs="speedgate_no_such_module", install="pip install nothing")]
""")
    pytester.makepyfile(test_speed=TESTS)
    result = pytester.runpytest_subprocess(*RUN, "--never-report", "x.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["*speedgate: --never-report needs speedgate_no_such_module, which is not installed "
                                 "here: pip install nothing"])


def test_a_conftest_makes_the_clock_of_the_kind_asked_for(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(conftest("pytest_speedgate_make_timer"))
    pytester.makepyfile(test_speed=TESTS)
    timers = {}
    for kind in ("cpu", "auto"):
        pytester.runpytest_subprocess(*RUN, "--speedgate-timer", kind, "--speedgate-json", f"{kind}.json").assert_outcomes(passed=1)
        timers[kind] = json.loads((pytester.path / f"{kind}.json").read_text())["cases"][0]["timer"]
    assert timers == {"cpu": "thread-time", "auto": "cpu-monotonic"}  # auto: the conftest returned None


def test_a_conftest_audits_every_measured_comparison(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(conftest("pytest_speedgate_audit"))
    pytester.makepyfile(test_speed=TESTS + """
def test_declares_too_much(perf):
    perf.compare(ref, opt, check=False, bytes=1e12)
""")
    result = pytester.runpytest_subprocess(*RUN, "--speedgate-json", "r.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*Dishonest: speedgate: test_speed.py::test_declares_too_much: declares 1e+12 bytes in "
                                 "* ms, * GB/s, more than this project's runners move (100 GB/s)*"])
