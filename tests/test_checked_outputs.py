"""What compare() checks: a side returning None is an error, in-place kernels name outputs=, check=False is marked."""

from __future__ import annotations

import json

import pytest

# Sides named after their scripted times (see conftest.DEFAULT_TIMES); each test file defines its own bodies.
IN_PLACE = """
import torch

X = torch.arange(8, dtype=torch.float32)
OUT = torch.full((8,), float("nan"))  # one buffer both sides write, as in-place kernels do

def ref_2ms():
    torch.mul(X, 2.0, out=OUT)

def opt_1ms():
    torch.mul(X, 2.0, out=OUT)

def opt_500us():
    torch.mul(X, 3.0, out=OUT)  # wrong, into the same buffer the reference wrote
"""


def run(project: pytest.Pytester, body: str, *args: str) -> pytest.RunResult:
    project.makepyfile(test_cases=IN_PLACE + body)
    return project.runpytest(*args)


def cases(project: pytest.Pytester) -> dict:
    return json.loads((project.path / "baselines" / "test-box.json").read_text())["cases"]


FORGOTTEN = """
import torch

X = torch.arange(8, dtype=torch.float32)

def ref_2ms():
    return X * 2.0

def opt_1ms():
    return X * 2.0

def opt_500us():
    torch.mul(X, 2.0)  # the work is done, the result dropped: a forgotten return

def test_opt_forgot(perf):
    perf.compare(ref_2ms, opt_500us)

def test_ref_forgot(perf):
    perf.compare(opt_500us, opt_1ms)

def test_real(perf):
    perf.compare(ref_2ms, opt_1ms)
"""


@pytest.mark.parametrize("mode", [[], ["--correctness-only"]], ids=["timed", "untimed"])
def test_a_forgotten_return_names_the_side_and_fails(project: pytest.Pytester, mode: list[str]) -> None:
    project.makepyfile(test_cases=FORGOTTEN)
    result = project.runpytest(*mode)
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines([
        "*test_opt_forgot: the optimized callable returned None but the reference returned Tensor: a forgotten `return`?*",
    ])
    result.stdout.fnmatch_lines(["*test_ref_forgot: the reference callable returned None but the optimized returned Tensor*"])


NAN_REFERENCE = """
import torch

X = torch.arange(8, dtype=torch.float32)

def ref_2ms():
    return torch.log(X - 4.0)  # NaN where X < 4: the reference is broken

def opt_1ms():
    return X * 2.0

def opt_500us():
    return torch.log(X - 4.0) * 0.0  # NaN too: both broken

def test_reference_nan(perf):
    perf.compare(ref_2ms, opt_1ms)

def test_both_nan(perf):
    perf.compare(ref_2ms, opt_500us)
"""


@pytest.mark.parametrize("mode", [[], ["--update-baselines"]], ids=["gate", "bless"])
def test_a_reference_that_returns_nan_is_named_as_the_broken_side(project: pytest.Pytester, mode: list[str]) -> None:
    # Said before of such a case: "optimized output differs from reference: expected holds 4 NaN", which blamed the
    # side that was right.
    project.makepyfile(test_cases=NAN_REFERENCE)
    result = project.runpytest(*mode)
    result.assert_outcomes(failed=2)
    for test in ("test_reference_nan", "test_both_nan"):
        result.stdout.fnmatch_lines([f"*{test}: the reference's output on its first call is not finite "
                                     "(speedgate.assert_close: expected holds 4 NaN and 1 Inf of 8 elements*): the "
                                     "reference side is what is wrong here, not the optimized one*"])
    raised = [line for line in result.stdout.lines if line.startswith("E ")]  # the errors, not the source shown
    assert raised and not any("optimized output differs" in line for line in raised)
    assert not (project.path / "baselines" / "test-box.json").exists()


def test_a_forgotten_return_is_never_blessed(project: pytest.Pytester) -> None:
    """The original bug: the optimized side dropped its result, the check was skipped, and a fake 25.8x blessed."""
    project.makepyfile(test_cases=FORGOTTEN)
    project.runpytest("--update-baselines").assert_outcomes(failed=2, passed=1)
    assert set(cases(project)) == {"test_cases.py::test_real"}


def test_both_none_asks_for_outputs_or_check_false(project: pytest.Pytester) -> None:
    result = run(project, """
def test_in_place(perf):
    perf.compare(ref_2ms, opt_1ms)
""", "--update-baselines")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_in_place: both sides returned None, so there is nothing to compare. For in-place "
                                 "kernels pass outputs=*or say check=False*"])
    assert not (project.path / "baselines" / "test-box.json").exists()


@pytest.mark.parametrize("mode", [[], ["--correctness-only"]], ids=["timed", "untimed"])
def test_outputs_compares_each_sides_buffer(project: pytest.Pytester, mode: list[str]) -> None:
    """The reference's buffer is copied before the optimized side overwrites it: a wrong optimized side fails."""
    result = run(project, """
def test_right(perf):
    perf.compare(ref_2ms, opt_1ms, outputs=lambda: OUT)

def test_wrong(perf):
    perf.compare(ref_2ms, opt_500us, outputs=lambda: OUT)

def test_nested(perf):
    perf.compare(ref_2ms, opt_500us, outputs=lambda: {"out": [OUT]})
""", "--speedgate-json", "report.json", *mode)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*test_wrong: outputs= after the optimized side differ from reference: "
                                 "speedgate.assert_close: 7 of 8 float32 elements exceed*"])
    assert "test_nested: outputs= after the optimized side differ from reference: " \
        "speedgate.assert_close at ['out'][0]" in result.stdout.str()
    report = json.loads((project.path / "report.json").read_text())
    (right,) = report["cases"]  # a failed check records nothing
    assert right["case_id"] == "test_cases.py::test_right" and right["check"] == "outputs"
    assert right["max_abs_error"] == 0.0


def test_outputs_first_call_only(project: pytest.Pytester) -> None:
    """outputs() runs once per side after its first call and once more after the rounds (the re-check after
    timing), never inside the timed rounds."""
    result = run(project, """
CALLS = []

def outputs():
    CALLS.append(1)
    return OUT

def test_once(perf):
    perf.compare(ref_2ms, opt_1ms, outputs=outputs)
    assert len(CALLS) == 4, CALLS
""")
    result.assert_outcomes(passed=1)


def test_outputs_misuse(project: pytest.Pytester) -> None:
    result = run(project, """
def test_both(perf):
    perf.compare(ref_2ms, opt_1ms, outputs=lambda: OUT, check=False)

def test_not_callable(perf):
    perf.compare(ref_2ms, opt_1ms, outputs=OUT)

def test_returns_none(perf):
    perf.compare(ref_2ms, opt_1ms, outputs=lambda: None)

def test_raises(perf):
    perf.compare(ref_2ms, opt_1ms, outputs=lambda: 1 / 0)
""")
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(["*test_both: outputs= names what to check, check=False turns the check off; pass one*"])
    result.stdout.fnmatch_lines(["*test_not_callable: outputs= must be a zero-argument callable, got Tensor*"])
    result.stdout.fnmatch_lines(["*test_returns_none: outputs= returned None after the reference: return what the sides write*"])
    result.stdout.fnmatch_lines(["*test_raises: outputs= raised ZeroDivisionError: division by zero (after the reference)*"])


def test_unchecked_cases_are_marked_in_every_report(project: pytest.Pytester) -> None:
    result = run(project, """
def test_unchecked(perf):
    perf.compare(ref_2ms, opt_1ms, check=False)
""", "--update-baselines", "--speedgate-json", "report.json", "--speedgate-markdown", "report.md")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_cases.py::test_unchecked *2.000x*no-baseline-file, unchecked"])
    report = json.loads((project.path / "report.json").read_text())
    assert [c["check"] for c in report["cases"]] == ["off"]
    assert "| no-baseline-file, unchecked |" in (project.path / "report.md").read_text()
    assert "check" not in cases(project)["test_cases.py::test_unchecked"]  # the baseline entry does not carry it


def test_checked_cases_are_not_marked() -> None:
    from speedgate.report import row
    from speedgate.results import CompareResult
    from speedgate.verdict import Verdict

    base = dict(case_id="t::c", nodeid="t::c", name=None, hardware_key="k", timed=False, verdict=Verdict.UNTIMED,
                note="", tolerance=0.1)
    for check, marked in (("returns", False), ("outputs", False), ("caller", False), ("", False), ("off", True)):
        result = CompareResult(**base, check=check)
        assert row(result, False)[-1].endswith(", unchecked") is marked, check
        assert CompareResult.from_json(result.to_json()) == result
