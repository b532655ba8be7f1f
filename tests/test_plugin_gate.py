"""The gate end to end through pytester: verdicts, failures, strict mode, messages."""

from __future__ import annotations

import json

import pytest

from conftest import CASES, write_baseline


def make_tests(pytester: pytest.Pytester, body: str) -> None:
    pytester.makepyfile(test_cases=CASES + body)


def test_regression_fails_that_test_only(project: pytest.Pytester) -> None:
    make_tests(
        project,
        """
def test_slow(perf):
    perf.compare(ref_2ms, opt_2ms)   # 1.0x against a blessed 2.0x

def test_fine(perf):
    perf.compare(ref_2ms, opt_1ms)

def test_plain():
    assert True
""",
    )
    write_baseline(project.path, {"test_cases.py::test_slow": 2.0, "test_cases.py::test_fine": 2.0})
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*SpeedRegression: test_cases.py::test_slow: speedup regressed: measured 1.000x (95% CI 1.000-1.000,*"
            " vs baseline 2.000x; tolerance 10% puts the floor at 1.800x*",
            "*Next: re-run this test to confirm*--update-baselines test_cases.py::test_slow*",
        ]
    )
    result.stdout.fnmatch_lines(["*test_cases.py::test_slow*regressed, re-measured*", "*test_cases.py::test_fine*2.000x*pass*"])


def test_all_compares_in_a_test_run_before_it_fails(project: pytest.Pytester) -> None:
    make_tests(
        project,
        """
def test_many(perf):
    perf.compare(ref_2ms, opt_2ms, name="a")
    perf.compare(ref_2ms, opt_2ms, name="b")
    print("body finished")
""",
    )
    write_baseline(project.path, {"test_cases.py::test_many::a": 2.0, "test_cases.py::test_many::b": 2.0})
    result = project.runpytest("-s")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*body finished*", "*test_many::a: speedup regressed*", "*test_many::b: speedup regressed*"])


def test_within_tolerance_passes(project: pytest.Pytester) -> None:
    make_tests(project, "\ndef test_ok(perf):\n    perf.compare(ref_2ms, opt_1ms)\n")
    write_baseline(project.path, {"test_cases.py::test_ok": 2.1})  # -4.8%, inside 10%
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_cases.py::test_ok*2.000x*2.100x*-4.8%*pass"])


def test_tolerance_option_and_per_call_tolerance(project: pytest.Pytester) -> None:
    make_tests(
        project,
        """
def test_default(perf):
    perf.compare(ref_2ms, opt_1ms)

def test_own(perf):
    perf.compare(ref_2ms, opt_1ms, tolerance=0.5)
""",
    )
    # 2.0x measured against 2.15x blessed: -7%, inside the default 10%, outside 5%.
    write_baseline(project.path, {"test_cases.py::test_default": 2.15, "test_cases.py::test_own": 2.15})
    project.runpytest().assert_outcomes(passed=2)
    result = project.runpytest("--speedup-tolerance", "0.05")
    result.assert_outcomes(passed=1, failed=1)  # the per-call tolerance wins over the option
    result.stdout.fnmatch_lines(["*test_default: speedup regressed*tolerance 5%*"])
    ini = project.runpytest("-o", "speedgate_tolerance=0.05")
    ini.assert_outcomes(passed=1, failed=1)


def test_improvement_reported_and_strict_fails_it(project: pytest.Pytester) -> None:
    make_tests(project, "\ndef test_fast(perf):\n    perf.compare(ref_2ms, opt_500us)\n")
    write_baseline(project.path, {"test_cases.py::test_fast": 2.0})
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_fast: improved beyond tolerance: 4.000x*re-bless with --update-baselines*"])
    strict = project.runpytest("--speedgate-strict")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*strict mode: bless the improvement*"])


def test_a_verdict_against_an_entry_blessed_with_another_timer_says_so(project: pytest.Pytester) -> None:
    make_tests(project, "\ndef test_fast(perf):\n    perf.compare(ref_2ms, opt_500us)\n")
    path = write_baseline(project.path, {"test_cases.py::test_fast": 2.0})
    doc = json.loads(path.read_text())
    doc["cases"]["test_cases.py::test_fast"]["timer"] = "cuda-events"
    path.write_text(json.dumps(doc))
    result = project.runpytest("--speedgate-json", "report.json")
    result.assert_outcomes(passed=1)
    (case,) = json.loads((project.path / "report.json").read_text())["cases"]
    assert case["verdict"] == "improved"
    assert f"timed with {case['timer']}, blessed with cuda-events: re-bless with this timer" in case["note"]


def test_new_case_reported_and_strict_fails_it(project: pytest.Pytester) -> None:
    make_tests(project, "\ndef test_new(perf):\n    perf.compare(ref_2ms, opt_1ms)\n")
    write_baseline(project.path, {"test_cases.py::other": 2.0})
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_cases.py::test_new*2.000x*new"])
    strict = project.runpytest("--speedgate-strict")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*has no entry for this case; bless it with `pytest --update-baselines test_cases.py::test_new`*"])


def test_a_run_that_timed_nothing_does_not_advise_a_bless_that_would_write_nothing(project: pytest.Pytester) -> None:
    # The README's quick start under the Triton interpreter: its bless writes nothing (every side untimed), and the
    # gate after it said "create it with pytest --update-baselines", the command just run.
    make_tests(project, "\ndef test_new(perf):\n    perf.compare(ref_2ms, opt_1ms)\n")
    result = project.runpytest("--correctness-only")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*baselines/test-box.json: not found (nothing this run measured was timed, so a bless "
                                 "here writes none: create it with `pytest --update-baselines` where the cases are "
                                 "timed (on the GPU, without TRITON_INTERPRET or --correctness-only))*"])


def test_missing_baseline_file_passes_with_instructions(project: pytest.Pytester) -> None:
    make_tests(project, "\ndef test_new(perf):\n    perf.compare(ref_2ms, opt_1ms)\n")
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*hardware key test-box; baseline *baselines/test-box.json: not found (create it with `pytest --update-baselines` on this hardware)*"]
    )
    strict = project.runpytest("--speedgate-strict")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*strict mode: there is no baseline file *test-box.json for hardware key test-box*"])
    assert not (project.path / "baselines").exists()  # a gate run never writes


def test_result_object_and_named_cases(project: pytest.Pytester) -> None:
    make_tests(
        project,
        """
def test_result(perf):
    r = perf.compare(ref_2ms, opt_1ms, name="pair", flops=2e9, bytes=4e6)
    assert r.case_id == "test_cases.py::test_result::pair"
    assert r.speedup == 2.0 and r.reference_ms == 2.0 and r.optimized_ms == 1.0
    assert r.ci_low <= r.speedup <= r.ci_high
    assert r.achieved_tflops == 2.0 and r.achieved_gbps == 4.0
    assert r.reference_first_ms == 2.0
""",
    )
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_result::pair*2.0 TFLOP/s*"])


def test_duplicate_case_names_are_refused(project: pytest.Pytester) -> None:
    make_tests(project, "\ndef test_dup(perf):\n    perf.compare(ref_2ms, opt_1ms, name='x')\n    perf.compare(ref_2ms, opt_1ms, name='x')\n")
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*already compared in this test; give each compare a distinct name=*"])


def test_json_report(project: pytest.Pytester) -> None:
    make_tests(project, "\ndef test_a(perf):\n    perf.compare(ref_2ms, opt_1ms)\n")
    write_baseline(project.path, {"test_cases.py::test_a": 2.0})
    project.runpytest("--speedgate-json", "out/report.json").assert_outcomes(passed=1)
    report = json.loads((project.path / "out" / "report.json").read_text())
    (case,) = report["cases"]
    assert case["case_id"] == "test_cases.py::test_a" and case["verdict"] == "pass"
    assert case["speedup"] == 2.0 and case["baseline"] == 2.0 and case["test_failed"] is False
    assert "test-box" in report["fingerprints"]


def test_plugin_is_inert_without_the_fixture(project: pytest.Pytester) -> None:
    project.makepyfile(test_plain="def test_plain():\n    assert True\n")
    (project.path / "baselines").mkdir()
    (project.path / "baselines" / "test-box.json").write_text("{corrupt")
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    assert "= speedgate =" not in result.stdout.str()


def test_config_is_recorded_and_a_change_reported(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    make_tests(
        project,
        """
import os
def test_tuned(perf):
    perf.compare(ref_2ms, opt_1ms, config={"BLOCK_M": int(os.environ.get("BM", "128")), "num_warps": 8})
""",
    )
    project.runpytest("--update-baselines").assert_outcomes(passed=1)
    entry = json.loads((project.path / "baselines" / "test-box.json").read_text())["cases"]["test_cases.py::test_tuned"]
    assert entry["config"] == {"BLOCK_M": 128, "num_warps": 8}
    monkeypatch.setenv("BM", "64")
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*configuration changed since the baseline: {'BLOCK_M': 128, 'num_warps': 8} -> {'BLOCK_M': 64, 'num_warps': 8}*"])


def test_a_large_config_change_is_told_by_its_settings(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config of hundreds of settings (max-autotune's held picks) is not printed whole in the note: how many
    settings changed, were added or went, and the first of them by path."""
    make_tests(
        project,
        """
import os
def test_tuned(perf):
    picks = {f"choice{i}": 0.5 for i in range(40)}
    picks["choice3"] = float(os.environ.get("T3", "0.5"))
    if os.environ.get("MORE"):
        picks["choice99"] = 1.0
    perf.compare(ref_2ms, opt_1ms, config={"gemm": picks})
""",
    )
    project.runpytest("--update-baselines").assert_outcomes(passed=1)
    monkeypatch.setenv("T3", "0.7")
    monkeypatch.setenv("MORE", "1")
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*configuration changed since the baseline: 1 changed, 1 added of 40 settings "
                                 "(~gemm/choice3; +gemm/choice99)*"])
    assert "choice10" not in result.stdout.str()


def test_a_case_gets_the_config_it_was_blessed_with(project: pytest.Pytester) -> None:
    """perf.blessed_config: what a case holds its autotuner to. A gate run and a calibrating bless get the entry's
    config; a plain re-bless gets None (the autotuner chooses afresh), as do a comparison with no entry and one whose
    entry recorded no config. perf.blessing: whether the run writes the baseline, plain or calibrating."""
    make_tests(
        project,
        """
import json, os
def test_tuned(perf):
    seen = {"tuned": perf.blessed_config(), "plain": perf.blessed_config("plain"), "absent": perf.blessed_config("absent"),
            "blessing": perf.blessing}
    with open(os.environ["SEEN"], "a") as f:
        f.write(json.dumps(seen) + "\\n")
    perf.compare(ref_2ms, opt_1ms, config={"BLOCK_M": 128, "num_warps": 8})
    perf.compare(ref_2ms, opt_1ms, name="plain")
""",
    )
    seen = project.path / "seen.jsonl"
    env = {"SEEN": str(seen)}
    for args in (["--update-baselines"], [], ["--update-baselines"], ["--update-baselines", "--speedgate-calibrate", "2"]):
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            project.runpytest(*args).assert_outcomes(passed=1)
    first, gate, plain_bless, calibrating = [json.loads(line) for line in seen.read_text().splitlines()]
    assert first == {"tuned": None, "plain": None, "absent": None, "blessing": True}  # nothing blessed yet
    assert gate == {"tuned": {"BLOCK_M": 128, "num_warps": 8}, "plain": None, "absent": None, "blessing": False}
    assert plain_bless["tuned"] is None and plain_bless["blessing"] is True
    assert calibrating["tuned"] == {"BLOCK_M": 128, "num_warps": 8} and calibrating["blessing"] is True


def test_bad_flops_dtype_and_config(project: pytest.Pytester) -> None:
    make_tests(
        project,
        """
def test_dtype(perf):
    perf.compare(ref_2ms, opt_1ms, flops=1e9, flops_dtype="int4")

def test_config(perf):
    perf.compare(ref_2ms, opt_1ms, config={"fn": object()})
""",
    )
    result = project.runpytest()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*flops_dtype='int4' is not one of bf16, fp16, fp8, tf32, fp32*", "*config= must hold plain JSON values*"])


def test_pairs_of_a_test_are_shown_side_by_side(project: pytest.Pytester) -> None:
    make_tests(
        project,
        """
def test_kernel(perf):
    perf.compare(ref_2ms, opt_1ms, name="vs_eager")
    perf.compare(ref_2ms, opt_500us, name="vs_vendor")
    perf.compare(opt_2ms, opt_1ms, name="vs_compile")
""",
    )
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["speedup of the optimized side against each reference, per test:", "test_cases.py::test_kernel  vs_eager 2.000x  vs_vendor 4.000x  vs_compile 2.000x"]
    )


LOCATED = """
def _helper(perf):
    perf.compare(ref_2ms, opt_2ms, name="helped")


def test_direct(perf):
    x = 1
    perf.compare(ref_2ms, opt_1ms, name="fine")
    perf.compare(ref_2ms, opt_2ms, name="slow")
    assert x == 1


def test_through_a_helper(perf):
    _helper(perf)


class TestInAClass:
    def test_method(self, perf):
        perf.metric("recompiles", 3, tolerance=0.0)
"""


@pytest.mark.parametrize("tb", ["short", "long", "line"])
def test_a_regression_is_reported_at_the_tests_line(project: pytest.Pytester, tb: str) -> None:
    source = project.makepyfile(test_cases=CASES + LOCATED).read_text().splitlines()

    def line_of(text: str) -> int:
        return source.index(text) + 1

    write_baseline(project.path, {"test_cases.py::test_direct::fine": 2.0, "test_cases.py::test_direct::slow": 2.0,
                                  "test_cases.py::test_through_a_helper::helped": 2.0})
    baseline = json.loads((project.path / "baselines" / "test-box.json").read_text())
    baseline["metrics"] = {"test_cases.py::TestInAClass::test_method::recompiles": {
        "value": 0.0, "tolerance": 0.0, "direction": "lower", "unit": "", "measured_at": "2026-01-01T00:00:00Z",
        "software": {"torch": "0.0"}}}
    (project.path / "baselines" / "test-box.json").write_text(json.dumps(baseline))
    result = project.runpytest(f"--tb={tb}")
    result.assert_outcomes(failed=3)
    failures = result.stdout.str().split("= FAILURES =")[1].split("= speedgate =")[0]
    assert "speedgate/plugin.py" not in failures and "pluggy" not in failures, "the plugin's frames are shown"
    direct = line_of('    perf.compare(ref_2ms, opt_2ms, name="slow")')
    helper = line_of("    _helper(perf)")
    method = line_of('        perf.metric("recompiles", 3, tolerance=0.0)')
    if tb == "short":
        result.stdout.fnmatch_lines([f"test_cases.py:{direct}: in test_direct", '    perf.compare(ref_2ms, opt_2ms, name="slow")',
                                     "E   *SpeedRegression: test_cases.py::test_direct::slow: speedup regressed*"])
        result.stdout.fnmatch_lines([f"test_cases.py:{helper}: in test_through_a_helper", "    _helper(perf)"])
        result.stdout.fnmatch_lines([f"test_cases.py:{method}: in test_method"])
    elif tb == "long":
        result.stdout.fnmatch_lines([">       perf.compare(ref_2ms, opt_2ms, name=\"slow\")", "E       *SpeedRegression: *",
                                     "*", f"test_cases.py:{direct}: SpeedRegression"])
    else:
        result.stdout.fnmatch_lines([f"*test_cases.py:{direct}: *SpeedRegression: test_cases.py::test_direct::slow*"])
