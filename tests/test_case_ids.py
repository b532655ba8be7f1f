"""Case ids: the same whatever the invocation (subfolder, absolute paths, --rootdir, either --baseline-dir form),
and baseline entries no collected test matches are listed (none matching at all: the loud drift warning)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CASES, DEFAULT_TIMES, SCRIPTED_CONFTEST
from speedgate.case_ids import args_folder, case_anchor, case_base, orphaned_entries

# Zero-argument scripted sides: strict runs below accept their fixed inputs by name.
TESTS = CASES + """
FIXED = {"fixed-inputs": "scripted zero-argument sides"}

def test_a(perf):
    perf.compare(ref_2ms, opt_1ms, waive=FIXED)

def test_b(perf):
    perf.compare(ref_2ms, opt_500us, name="vs_eager", waive=FIXED)
    perf.metric("recompiles", 0, tolerance=0.0)
"""
BLESSED = ["tests/sub/test_cases.py::test_a", "tests/sub/test_cases.py::test_b::vs_eager"]
BLESSED_METRICS = ["tests/sub/test_cases.py::test_b::recompiles"]


# -- the pure parts ----------------------------------------------------------------------------------------------
def test_anchor_is_the_ini_folder_when_the_tests_lie_under_it(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "setup.cfg").write_text("")
    assert case_anchor(tmp_path / "tests", tmp_path / "tox.ini") == tmp_path  # the ini wins over a nearer marker
    # An ini file elsewhere (found through a path given as an option value) does not anchor these tests.
    assert case_anchor(tmp_path / "tests", tmp_path / "other" / "tox.ini") == tmp_path / "tests"


def test_anchor_without_ini_is_the_nearest_marker_else_the_topmost_conftest(tmp_path: Path) -> None:
    deep = tmp_path / "proj" / "tests" / "sub"
    deep.mkdir(parents=True)
    (tmp_path / "proj" / "conftest.py").write_text("")
    (tmp_path / "proj" / "tests" / "conftest.py").write_text("")
    assert case_anchor(deep, None) == tmp_path / "proj"  # the topmost conftest.py
    (tmp_path / "proj" / ".git").write_text("gitdir: elsewhere\n")  # a git worktree's .git is a file
    (tmp_path / "proj" / "tests" / "pyproject.toml").write_text("")
    assert case_anchor(deep, None) == tmp_path / "proj" / "tests"  # the nearest marker


def test_a_bare_folder_is_anchored_at_the_folder_of_the_paths_given(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    (proj / "sub").mkdir(parents=True)
    (proj / "sub" / "test_x.py").write_text("")
    elsewhere = tmp_path / "store"
    elsewhere.mkdir()
    assert args_folder(["proj"], tmp_path) == proj
    assert args_folder([str(proj / "sub" / "test_x.py") + "::test_y"], elsewhere) == proj / "sub"
    assert args_folder(["proj/sub", "proj/missing"], tmp_path) == proj / "sub"  # a missing path counts for nothing
    assert args_folder([], proj) == proj
    assert case_anchor(proj / "sub", None, proj) == proj
    assert case_anchor(proj / "sub", None, elsewhere) is None  # tests outside the given paths: their node ids


def test_case_base_is_the_file_from_the_anchor_then_the_node_id_rest(tmp_path: Path) -> None:
    test_file = tmp_path / "perftests" / "test_x.py"
    assert case_base("x/test_x.py::TestC::test_y[a/b]", test_file, tmp_path) == "perftests/test_x.py::TestC::test_y[a/b]"
    assert case_base("../elsewhere/test_x.py::t", test_file, None) == "../elsewhere/test_x.py::t"  # no anchor


def test_orphans_are_unmatched_entries_of_collected_or_vanished_files(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_other.py").write_text("")
    entries = ["t/test_a.py::test_x::vs_eager", "t/test_a.py::test_p[2]", "t/test_a.py::test_old",
               "t/test_gone.py::test_z", "t/test_other.py::test_q"]
    matched, orphaned = orphaned_entries(entries, {"t/test_a.py::test_x", "t/test_a.py::test_p[2]"},
                                         {"t/test_a.py"}, [str(tmp_path)])
    # test_other.py exists but was not collected (a path selection): out of view, not orphaned.
    assert (matched, orphaned) == (2, ["t/test_a.py::test_old", "t/test_gone.py::test_z"])


# -- through pytest ----------------------------------------------------------------------------------------------
def make_project(pytester: pytest.Pytester, top: str = "ini") -> Path:
    """tests/sub/test_cases.py with the scripted clock beside it; at the top, what marks the project: a tox.ini, a
    .git folder, or only a conftest.py."""
    sub = pytester.mkpydir("tests") / "sub"
    sub.mkdir()
    (sub / "test_cases.py").write_text(TESTS)
    # Beside the tests: without an ini file, pytest loads no conftest.py above its rootdir (a subfolder run).
    (sub / "conftest.py").write_text(SCRIPTED_CONFTEST.format(times=DEFAULT_TIMES))
    if top == "ini":
        pytester.makeini("[pytest]\n")
    elif top == ".git":
        (pytester.path / ".git").mkdir()
    else:
        pytester.makeconftest("")
    return sub


def run(pytester: pytest.Pytester, cwd: Path, *args: str) -> tuple[pytest.RunResult, dict]:
    report = pytester.path / "report.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        result = pytester.runpytest("--hardware-key", "test-box", "-p", "no:cacheprovider",
                                    f"--speedgate-json={report}", *args)
    return result, json.loads(report.read_text())


def verdicts(doc: dict) -> dict[str, str]:
    return {r["case_id"]: r["verdict"] for r in doc["cases"]} | {m["metric_id"]: m["verdict"] for m in doc["metrics"]}


@pytest.mark.parametrize("top", ["ini", ".git", "conftest.py"])
def test_case_ids_do_not_depend_on_the_invocation(pytester: pytest.Pytester, top: str,
                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    sub = make_project(pytester, top)
    top = pytester.path
    # Outside the project, so that the option value given as its own word moves pytest's rootdir.
    baselines = tmp_path_factory.mktemp("elsewhere-baselines")
    blessed, doc = run(pytester, top, f"--baseline-dir={baselines}", "--update-baselines", "tests")
    blessed.assert_outcomes(passed=2)
    assert sorted(verdicts(doc)) == sorted(BLESSED + BLESSED_METRICS)
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    invocations = {
        "from the top": (top, [f"--baseline-dir={baselines}"]),
        "from a subfolder": (sub, [f"--baseline-dir={baselines}", "."]),
        "with absolute paths": (elsewhere, [f"--baseline-dir={baselines}", str(top / "tests")]),
        "with --rootdir": (top, ["--rootdir", str(elsewhere), f"--baseline-dir={baselines}", "tests"]),
        "with --baseline-dir DIR": (top, ["--baseline-dir", str(baselines), "tests"]),
        "with --baseline-dir=DIR": (top, [f"--baseline-dir={baselines}", "tests"]),
    }
    for name, (cwd, args) in invocations.items():
        # Strict: a 'new' case would fail the run, and so would baseline entries that match nothing.
        result, doc = run(pytester, cwd, "--speedgate-strict", *args)
        assert result.ret == 0, f"{name}: {result.stdout.str()}"
        assert verdicts(doc) == dict.fromkeys(BLESSED + BLESSED_METRICS, "pass"), name
        assert doc["unmatched_baseline_entries"]["orphaned"] == [], name


# A bare folder of test files: no ini file, no project marker, no conftest.py; the clock is the module's own.
BARE_TESTS = TESTS + f"""
import pytest
from speedgate.testing import ScriptedTimer

@pytest.fixture
def speedgate_timer():
    return ScriptedTimer({DEFAULT_TIMES!r})
"""


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_case_ids_of_a_bare_folder_do_not_depend_on_how_the_baseline_folder_is_passed(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, xdist: tuple[str, ...]
) -> None:
    proj = pytester.mkdir("proj")
    (proj / "test_cases.py").write_text(BARE_TESTS)
    store = tmp_path_factory.mktemp("abs") / "store"
    common = ("--hardware-key", "test-box", "-p", "no:cacheprovider", "--speedgate-json=r.json", *xdist)
    blessed = pytester.runpytest_subprocess(*common, "proj", f"--baseline-dir={store}", "--update-baselines")
    blessed.assert_outcomes(passed=2)
    entries = json.loads((store / "test-box.json").read_text())
    assert sorted([*entries["cases"], *entries["metrics"]]) == [
        "test_cases.py::test_a", "test_cases.py::test_b::recompiles", "test_cases.py::test_b::vs_eager"]
    for args in (["proj", "--baseline-dir", str(store)], ["--baseline-dir", str(store), str(proj)],
                 ["--speedgate-baseline-dir", str(store), "proj/test_cases.py"]):
        gated = pytester.runpytest_subprocess(*common, "--speedgate-strict", *args)
        assert gated.ret == 0, f"{args}: {gated.stdout.str()}"
        doc = json.loads((pytester.path / "r.json").read_text())
        assert set(verdicts(doc).values()) == {"pass"}, args


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_bare_folder_is_told_that_its_ids_follow_the_paths_given(pytester: pytest.Pytester,
                                                                    xdist: tuple[str, ...]) -> None:
    """Nothing marks the project: ids are relative to the folder of the paths the run was given, so `pytest` and
    `pytest proj/tests/test_cases.py` name the same tests otherwise (found as a user would, blessing one way and
    gating the other: every case new, every entry an orphan). The run says so, and how to fix it; with a
    conftest.py at the top the ids are fixed, and it says nothing."""
    tests = pytester.mkdir("proj") / "tests"
    tests.mkdir()
    (tests / "test_cases.py").write_text(BARE_TESTS)
    common = ("--hardware-key", "test-box", "-p", "no:cacheprovider", *xdist)
    result = pytester.runpytest_subprocess(*common, "proj/tests/test_cases.py", "--update-baselines")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"case ids here are relative to {tests}, the folder of the paths this run was "
                                 "given: nothing marks the project's top*An empty conftest.py at the project's top*"])
    (pytester.path / "proj" / "conftest.py").write_text("")
    result = pytester.runpytest_subprocess(*common, "proj", "--update-baselines")
    result.assert_outcomes(passed=2)
    assert "case ids here are relative to" not in result.stdout.str()


def test_renamed_and_deleted_tests_leave_orphans_listed(pytester: pytest.Pytester) -> None:
    sub = make_project(pytester)
    (sub / "test_old.py").write_text(CASES + "def test_o(perf):\n    perf.compare(ref_2ms, opt_1ms)\n")
    run(pytester, pytester.path, "--update-baselines")[0].assert_outcomes(passed=3)
    (sub / "test_old.py").unlink()
    (sub / "test_cases.py").write_text(TESTS.replace("def test_b(", "def test_b_renamed("))
    result, doc = run(pytester, pytester.path)
    result.assert_outcomes(passed=2)  # not strict: a renamed test is new, and the gate goes on
    orphaned = ["tests/sub/test_cases.py::test_b::recompiles", "tests/sub/test_cases.py::test_b::vs_eager",
                "tests/sub/test_old.py::test_o"]
    result.stdout.fnmatch_lines(["*3 entries of *test-box.json match no collected test*", *[f"  {e}" for e in orphaned]])
    assert doc["unmatched_baseline_entries"]["orphaned"] == sorted(orphaned)
    assert doc["unmatched_baseline_entries"]["matched"] == 1
    assert "speedgate warning" not in result.stdout.str()  # one entry matched: no drift


def test_deselected_and_unselected_tests_are_not_orphans(pytester: pytest.Pytester) -> None:
    sub = make_project(pytester)
    (sub / "test_more.py").write_text(CASES + "def test_m(perf):\n    perf.compare(ref_2ms, opt_1ms)\n")
    run(pytester, pytester.path, "--update-baselines")[0].assert_outcomes(passed=3)
    result, doc = run(pytester, pytester.path, "-k", "test_a", "tests/sub/test_cases.py")
    result.assert_outcomes(passed=1, deselected=1)
    assert doc["unmatched_baseline_entries"] == {
        "hardware_key": "test-box", "baseline": str(pytester.path / "baselines" / "test-box.json"), "entries": 4,
        "matched": 3, "orphaned": []}  # test_b deselected, test_more.py not selected: neither is orphaned
    assert "match no collected test" not in result.stdout.str()


def test_ids_that_match_nothing_warn_loudly_and_fail_a_strict_run(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    run(pytester, pytester.path, "--update-baselines")[0].assert_outcomes(passed=2)
    # The ini file moves into tests/: the anchor moves with it, every id drifts ('sub/test_cases.py::...').
    (pytester.path / "tox.ini").rename(pytester.path / "tests" / "tox.ini")
    baseline_dir = f"--baseline-dir={pytester.path / 'baselines'}"
    result, doc = run(pytester, pytester.path, baseline_dir)
    assert result.ret == 0 and set(verdicts(doc).values()) == {"new"}
    result.stdout.fnmatch_lines([
        "*3 entries of *test-box.json match no collected test*",
        "speedgate warning: none of the 3 entries of *test-box.json matched a collected test*"
        "'tests/sub/test_cases.py::test_a', this run's like 'sub/test_cases.py::test_a'*",
    ])
    strict, _ = run(pytester, pytester.path, baseline_dir, "--speedgate-strict")
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(["speedgate error: none of the 3 entries of *test-box.json matched a collected test*"])


UNMEASURED = ["tests/sub/test_cases.py::test_b::recompiles", "tests/sub/test_cases.py::test_b::vs_eager"]


def test_a_passing_test_that_no_longer_measures_its_entries_warns_and_fails_a_strict_gate(
        pytester: pytest.Pytester) -> None:
    """test_b still passes, but its comparison was renamed and its metric dropped: the two entries gate nothing.
    Without the check, this run said nothing about them (they match a collected test, so they are not orphans)."""
    sub = make_project(pytester)
    run(pytester, pytester.path, "--update-baselines")[0].assert_outcomes(passed=2)
    (sub / "test_cases.py").write_text(TESTS.replace('name="vs_eager"', 'name="vs_torch"').replace(
        '    perf.metric("recompiles", 0, tolerance=0.0)\n', ""))
    result, doc = run(pytester, pytester.path)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"speedgate warning: 2 entries of *test-box.json were not measured, though their "
                                 f"tests ran and passed: {', '.join(UNMEASURED)}. *delete them from the file*"])
    assert doc["unmatched_baseline_entries"]["orphaned"] == []  # not orphans: their test was collected and ran
    # A strict gate fails a new case in its test, so here only the metric is gone.
    (sub / "test_cases.py").write_text(TESTS.replace('    perf.metric("recompiles", 0, tolerance=0.0)\n', ""))
    strict, _ = run(pytester, pytester.path, "--speedgate-strict")
    strict.assert_outcomes(passed=2)
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(["speedgate error: 1 entries of *test-box.json were not measured*: "
                                 "tests/sub/test_cases.py::test_b::recompiles.*"])
    # A bless says so too, and keeps them: removing an entry is the user's call.
    blessed, _ = run(pytester, pytester.path, "--update-baselines")
    blessed.stdout.fnmatch_lines(["speedgate warning: 1 entries of *test-box.json were not measured*"])
    entries = json.loads((pytester.path / "baselines" / "test-box.json").read_text())
    assert set(UNMEASURED) <= {*entries["cases"], *entries["metrics"]}


@pytest.mark.parametrize("how", ["deselected", "failed", "skipped"])
def test_entries_of_a_test_that_did_not_pass_are_not_called_unmeasured(pytester: pytest.Pytester, how: str) -> None:
    sub = make_project(pytester)
    run(pytester, pytester.path, "--update-baselines")[0].assert_outcomes(passed=2)
    cut = TESTS.replace('    perf.compare(ref_2ms, opt_500us, name="vs_eager", waive=FIXED)\n', "").replace(
        '    perf.metric("recompiles", 0, tolerance=0.0)\n',
        {"deselected": "    pass\n", "failed": "    assert False\n", "skipped": "    pytest.skip('no')\n"}[how])
    (sub / "test_cases.py").write_text("import pytest\n" + cut)
    result, _ = run(pytester, pytester.path, *(["-k", "test_a"] if how == "deselected" else []))
    result.assert_outcomes(passed=1, **{"deselected": {"deselected": 1}, "failed": {"failed": 1},
                                        "skipped": {"skipped": 1}}[how])
    assert "were not measured" not in result.stdout.str()


def test_xdist_workers_send_the_tests_that_passed(pytester: pytest.Pytester) -> None:
    sub = make_project(pytester)
    pytester.runpytest_subprocess("--hardware-key", "test-box", "-p", "no:cacheprovider", "--update-baselines")
    (sub / "test_cases.py").write_text(TESTS.replace('    perf.metric("recompiles", 0, tolerance=0.0)\n', ""))
    result = pytester.runpytest_subprocess("--hardware-key", "test-box", "-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["speedgate warning: 1 entries of *test-box.json were not measured*: "
                                 "tests/sub/test_cases.py::test_b::recompiles.*"])


def test_xdist_workers_send_what_they_collected(pytester: pytest.Pytester) -> None:
    sub = make_project(pytester)
    (sub / "test_old.py").write_text(CASES + "def test_o(perf):\n    perf.compare(ref_2ms, opt_1ms)\n")
    pytester.runpytest_subprocess("--hardware-key", "test-box", "-p", "no:cacheprovider", "--update-baselines")
    (sub / "test_old.py").unlink()
    result = pytester.runpytest_subprocess("--hardware-key", "test-box", "-p", "no:cacheprovider", "-n", "2",
                                           "--speedgate-json=r.json")
    result.assert_outcomes(passed=2)
    unmatched = json.loads((pytester.path / "r.json").read_text())["unmatched_baseline_entries"]
    assert (unmatched["matched"], unmatched["orphaned"]) == (3, ["tests/sub/test_old.py::test_o"])
    result.stdout.fnmatch_lines(["*1 entries of *test-box.json match no collected test*"])


def test_default_baseline_dir_sits_beside_the_ini_file(pytester: pytest.Pytester) -> None:
    """--rootdir elsewhere or a run from a subfolder must not move the default baseline folder off the ini's."""
    pytester.makeini("[pytest]\naddopts = --hardware-key test-box -p no:cacheprovider\n")
    sub = pytester.mkdir("tests")
    from speedgate.options import read_settings

    class Config:
        inipath = pytester.path / "tox.ini"
        rootpath = sub

        @staticmethod
        def getoption(name: str) -> object:
            return None

        @staticmethod
        def getini(name: str) -> object:
            return None

    assert read_settings(Config()).baseline_dir == pytester.path / "baselines"


def test_last_failed_runs_call_no_entry_an_orphan(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """--lf collects only a file's failed tests: the entries of its other tests are out of view, not renamed."""
    sub = make_project(pytester)
    (sub / "test_cases.py").write_text(TESTS + "\nimport os\n\ndef test_c(perf):\n    assert not os.environ.get('BREAK_C')\n"
                                               "    perf.compare(ref_2ms, opt_1ms)\n")
    common = ("--hardware-key", "test-box", "--speedgate-json=r.json", "--speedgate-markdown=s.md")  # the cache stays on
    pytester.runpytest(*common, "--update-baselines").assert_outcomes(passed=3)
    monkeypatch.setenv("BREAK_C", "1")
    pytester.runpytest(*common).assert_outcomes(passed=2, failed=1)
    monkeypatch.delenv("BREAK_C")
    result = pytester.runpytest(*common, "--lf")
    result.assert_outcomes(passed=1)  # only test_c ran
    assert "match no collected test" not in result.stdout.str()
    assert "match no collected test" not in (pytester.path / "s.md").read_text()
    assert json.loads((pytester.path / "r.json").read_text())["unmatched_baseline_entries"]["orphaned"] == []
