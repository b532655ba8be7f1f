"""The default tolerance by hardware key: CPU keys get DEFAULT_CPU_TOLERANCE, others DEFAULT_TOLERANCE, and a
tolerance the user sets (option, ini key, per case) wins on both."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import CASES, write_baseline
from speedgate.options import DEFAULT_CPU_TOLERANCE, DEFAULT_TOLERANCE, read_settings

CPU_KEY = "cpu-scripted-2c"
GPU_KEY = "nvidia-h200"
# A drop between the two defaults: inside the CPU one, outside the other. The scripted clock measures 2.0x.
DROP = (DEFAULT_TOLERANCE + DEFAULT_CPU_TOLERANCE) / 2
BLESSED = 2.0 / (1 - DROP)


def run_case(project: pytest.Pytester, key: str, *args: str, body: str = "perf.compare(ref_2ms, opt_1ms)") -> tuple[
        pytest.RunResult, dict]:
    project.makepyfile(test_cases=CASES + f"\ndef test_case(perf):\n    {body}\n")
    write_baseline(project.path, {"test_cases.py::test_case": BLESSED}, key=key)
    result = project.runpytest("--hardware-key", key, "--speedgate-json", "report.json", *args)
    return result, json.loads((project.path / "report.json").read_text())["cases"][0]


def test_the_drop_lies_between_the_defaults() -> None:
    assert DEFAULT_TOLERANCE < DROP < DEFAULT_CPU_TOLERANCE


@pytest.mark.parametrize(("key", "tolerance", "outcome"), [
    (CPU_KEY, DEFAULT_CPU_TOLERANCE, "passed"),
    (GPU_KEY, DEFAULT_TOLERANCE, "failed"),
])
def test_a_case_without_a_tolerance_gets_its_keys_default(project: pytest.Pytester, key: str, tolerance: float,
                                                          outcome: str) -> None:
    result, case = run_case(project, key)
    result.assert_outcomes(**{outcome: 1})
    assert case["tolerance"] == tolerance
    assert case["verdict"] == ("pass" if outcome == "passed" else "regressed")
    result.stdout.fnmatch_lines([f"*gate; default tolerance {tolerance:.0%}; timer auto*"])


@pytest.mark.parametrize("key", [CPU_KEY, GPU_KEY])
@pytest.mark.parametrize(("how", "tolerance"), [
    (("--speedup-tolerance", str(DEFAULT_TOLERANCE)), DEFAULT_TOLERANCE),
    (("--speedup-tolerance", str(DEFAULT_CPU_TOLERANCE)), DEFAULT_CPU_TOLERANCE),
    (("-o", f"speedgate_tolerance={DEFAULT_TOLERANCE}"), DEFAULT_TOLERANCE),
    (("-o", f"speedgate_tolerance={DEFAULT_CPU_TOLERANCE}"), DEFAULT_CPU_TOLERANCE),
])
def test_a_tolerance_the_user_sets_wins_on_every_key(project: pytest.Pytester, key: str, how: tuple[str, str],
                                                    tolerance: float) -> None:
    result, case = run_case(project, key, *how)
    assert case["tolerance"] == tolerance
    result.assert_outcomes(**{"passed" if tolerance > DROP else "failed": 1})
    result.stdout.fnmatch_lines([f"*gate; default tolerance {tolerance:.0%}; timer auto*"])


@pytest.mark.parametrize("key", [CPU_KEY, GPU_KEY])
def test_a_per_case_tolerance_wins_over_the_keys_default(project: pytest.Pytester, key: str) -> None:
    result, case = run_case(project, key, body=f"perf.compare(ref_2ms, opt_1ms, tolerance={DEFAULT_TOLERANCE})")
    assert case["tolerance"] == DEFAULT_TOLERANCE
    result.assert_outcomes(failed=1)


def test_the_summary_names_both_defaults_when_a_run_has_both_kinds_of_key(pytester: pytest.Pytester) -> None:
    settings = read_settings(pytester.parseconfig())
    assert settings.tolerance is None  # unset: each key's default applies
    assert settings.tolerance_words([CPU_KEY]) == f"default tolerance {DEFAULT_CPU_TOLERANCE:.0%}"
    assert settings.tolerance_words([CPU_KEY, GPU_KEY]) == (
        f"default tolerance {DEFAULT_TOLERANCE:.0%} ({DEFAULT_CPU_TOLERANCE:.0%} on cpu- hardware keys)")
    chosen = dataclasses.replace(settings, tolerance=0.05)
    assert chosen.tolerance_words([CPU_KEY, GPU_KEY]) == "default tolerance 5%"
    assert (chosen.default_tolerance(CPU_KEY), chosen.default_tolerance(GPU_KEY)) == (0.05, 0.05)
