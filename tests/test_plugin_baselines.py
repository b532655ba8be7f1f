"""Blessing and bad input through pytester: merges, atomic writes, corrupt files, bad options, failing cases."""

from __future__ import annotations

import json

import pytest

from conftest import CASES, write_baseline

# Zero-argument scripted sides: a strict run accepts their fixed inputs by name.
TESTS = CASES + """
FIXED = {"fixed-inputs": "scripted zero-argument sides"}

def test_a(perf):
    perf.compare(ref_2ms, opt_1ms, waive=FIXED)

def test_b(perf):
    perf.compare(ref_2ms, opt_500us, waive=FIXED)
"""


def read_cases(project: pytest.Pytester) -> dict:
    return json.loads((project.path / "baselines" / "test-box.json").read_text())["cases"]


def test_update_creates_the_file(project: pytest.Pytester) -> None:
    project.makepyfile(test_cases=TESTS)
    result = project.runpytest("--update-baselines")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*baselines/test-box.json: 2 added, 0 updated, 0 kept*"])
    doc = json.loads((project.path / "baselines" / "test-box.json").read_text())
    assert doc["hardware_key"] == "test-box" and doc["schema_version"] == 1
    assert doc["cases"]["test_cases.py::test_a"]["speedup"] == 2.0
    assert doc["cases"]["test_cases.py::test_b"]["speedup"] == 4.0
    entry = doc["cases"]["test_cases.py::test_a"]
    assert {"reference_ms", "optimized_ms", "noise", "measured_at", "software", "ci_low", "ci_high"} <= set(entry)
    assert "python" in entry["software"] and doc["fingerprint"]["hardware"]["kind"] in ("cpu", "gpu")
    # Then the gate passes against what was blessed, and writes nothing.
    before = (project.path / "baselines" / "test-box.json").read_text()
    project.runpytest("--speedgate-strict").assert_outcomes(passed=2)
    assert (project.path / "baselines" / "test-box.json").read_text() == before


def test_update_with_k_merges_a_subset(project: pytest.Pytester) -> None:
    project.makepyfile(test_cases=TESTS)
    write_baseline(project.path, {"test_cases.py::test_a": 1.0, "test_cases.py::test_b": 1.0, "gone.py::test_old": 7.0})
    result = project.runpytest("--update-baselines", "-k", "test_a")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*0 added, 1 updated, 0 kept*2 other entries untouched*"])
    cases = read_cases(project)
    assert cases["test_cases.py::test_a"]["speedup"] == 2.0
    assert cases["test_cases.py::test_b"]["speedup"] == 1.0  # not run: kept
    assert cases["gone.py::test_old"]["speedup"] == 7.0  # not in the suite any more: kept


def test_update_leaves_small_moves_alone(project: pytest.Pytester) -> None:
    project.makepyfile(test_cases=TESTS)
    path = write_baseline(project.path, {"test_cases.py::test_a": 2.04, "test_cases.py::test_b": 4.0})
    before = path.read_text()
    result = project.runpytest("--update-baselines")
    result.stdout.fnmatch_lines(["*0 added, 0 updated, 2 kept (moved less than a third of their tolerance)*"])
    assert path.read_text() == before  # nothing moved beyond tolerance/3: the file is not rewritten


def test_gate_does_not_ratchet(project: pytest.Pytester) -> None:
    project.makepyfile(test_cases=TESTS)
    path = write_baseline(project.path, {"test_cases.py::test_a": 1.0, "test_cases.py::test_b": 1.0})
    before = path.read_text()
    project.runpytest().assert_outcomes(passed=2)  # improved, but a gate run never rewrites the baseline
    assert path.read_text() == before


def test_failing_correctness_is_never_blessed(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_cases=CASES
        + """
import torch

def test_wrong(perf):
    x = torch.ones(8)
    perf.compare(ref_2ms, opt_1ms, name="timed")
    perf.assert_close(x * 2, x)

def test_right(perf):
    perf.compare(ref_2ms, opt_1ms)
"""
    )
    result = project.runpytest("--update-baselines")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*not blessed (its test failed): test_cases.py::test_wrong::timed*"])
    assert set(read_cases(project)) == {"test_cases.py::test_right"}


def test_output_mismatch_fails_the_compare(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_cases="""
import torch

def ref_2ms():
    return torch.ones(4)

def opt_1ms():
    return torch.tensor([1.0, 1.0, float("nan"), 1.0])

def test_nan(perf):
    perf.compare(ref_2ms, opt_1ms)
"""
    )
    result = project.runpytest("--update-baselines")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_nan: optimized output differs from reference*actual holds 1 NaN and 0 Inf*index (2,)*"])
    assert not (project.path / "baselines" / "test-box.json").exists()


def test_a_case_that_raises_names_its_side(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_cases=CASES
        + """
def broken():
    raise RuntimeError("out of shared memory")

def test_raises(perf):
    perf.compare(ref_2ms, broken)

def test_other(perf):
    perf.compare(ref_2ms, opt_1ms)
"""
    )
    project.makeconftest(
        "import pytest\nfrom speedgate.testing import ScriptedTimer\n"
        "@pytest.fixture\ndef speedgate_timer():\n    return ScriptedTimer({'ref_2ms': 2.0, 'opt_1ms': 1.0, 'broken': 1.0})\n"
    )
    result = project.runpytest("--update-baselines")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*CaseError: speedgate: test_cases.py::test_raises: the optimized callable raised RuntimeError: out of shared memory*"])
    assert set(read_cases(project)) == {"test_cases.py::test_other"}


@pytest.mark.parametrize("update", [False, True])
@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ('{"schema_version": 1, "hardware_key": "test-box", "cases": {}}', "does not match the baseline schema at (top level): 'fingerprint' is a required property"),
    ],
)
def test_corrupt_baseline_is_a_usage_error_and_left_untouched(project: pytest.Pytester, update: bool, content: str, message: str) -> None:
    project.makepyfile(test_cases=TESTS)
    path = project.path / "baselines" / "test-box.json"
    path.parent.mkdir()
    path.write_text(content)
    result = project.runpytest(*(["--update-baselines"] if update else []))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*speedgate: *baselines/test-box.json: {message}*the file was left untouched: restore "
                                 "it (from version control), or move it aside and bless again with `pytest "
                                 "--update-baselines`"])
    assert path.read_text() == content
    assert [p.name for p in path.parent.iterdir()] == ["test-box.json"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hardware-key", "../../etc/passwd"], "*hardware key '../../etc/passwd' is not a safe file name*"),
        (["--speedup-tolerance", "1.5"], "*'1.5' must be a fraction in [[]0, 1)*"),
        (["--speedup-tolerance", "ten"], "*'ten' is not a number*"),
        (["--speedgate-timer", "sundial"], "*'sundial' is not a timer; choose one of auto, cpu, cuda*"),
        (["--speedgate-budget", "-1"], "*must be a positive number of seconds*"),
        (["--update-baselines", "--correctness-only"], "*--update-baselines needs timing*"),
        (["-o", "speedgate_tolerance=2"], "*ini key speedgate_tolerance: '2' must be a fraction*"),
    ],
)
def test_bad_option_values_are_usage_errors(project: pytest.Pytester, args: list[str], message: str) -> None:
    project.makepyfile(test_cases=TESTS)
    result = project.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_bad_key_from_environment(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    project.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    monkeypatch.setenv("SPEEDGATE_HARDWARE_KEY", "a/b")
    project.makepyfile(test_cases=TESTS)
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*SPEEDGATE_HARDWARE_KEY: hardware key 'a/b' is not a safe file name*"])


def test_baseline_dir_option(project: pytest.Pytester) -> None:
    project.makepyfile(test_cases=TESTS)
    project.runpytest("--update-baselines", "--baseline-dir", "elsewhere/bl").assert_outcomes(passed=2)
    assert (project.path / "elsewhere" / "bl" / "test-box.json").exists()
    assert not (project.path / "baselines").exists()


def test_software_drift_is_reported(project: pytest.Pytester) -> None:
    project.makepyfile(test_cases=TESTS)
    write_baseline(project.path, {"test_cases.py::test_a": 2.0, "test_cases.py::test_b": 4.0})
    result = project.runpytest()
    result.stdout.fnmatch_lines(["*software drift since the baseline: torch 0.0 -> *"])


def test_a_bless_into_a_new_file_says_it_was_not_found(project: pytest.Pytester) -> None:
    """The header describes the file as the run judged against it, not the one the bless just wrote: rows saying
    no-baseline-file under 'found, 2 cases' contradict each other."""
    project.makepyfile(test_cases=CASES + "".join(f"\ndef test_{i}(perf):\n    perf.compare(ref_2ms, opt_1ms)\n"
                                                  for i in range(2)))
    result = project.runpytest("--update-baselines", "--speedgate-markdown", "summary.md")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["hardware key test-box; baseline *test-box.json: not found",
                                 "*test_cases.py::test_0*no-baseline-file*", "baseline *test-box.json: 2 added, *"])
    assert "found, 2 cases" not in result.stdout.str()
    assert "found, 2 cases" not in (project.path / "summary.md").read_text()
    again = project.runpytest("--update-baselines")
    again.stdout.fnmatch_lines(["hardware key test-box; baseline *test-box.json: found, 2 cases"])
