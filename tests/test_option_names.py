"""Speedgate's short option spellings (--update-baselines, ...) never crash a project or plugin that defines the same
names: pytest starts, their option keeps its meaning, speedgate's --speedgate-... spelling still works, and a run that
uses perf is warned."""

from __future__ import annotations

import json

import pytest

from speedgate import __version__
from speedgate.options import SHORT_SPELLINGS

# Each short spelling as the project defines it, with what the project's test then reads for the given value.
SHORT_VALUES = {
    "--update-baselines": None,  # a switch
    "--baseline-dir": "store",
    "--hardware-key": "other-box",
    "--speedup-tolerance": "0.5",
    "--correctness-only": None,
}
# speedgate's own reading of the prefixed spelling with that value: a field of its Settings and the value expected.
SETTINGS_FIELD = {
    "--update-baselines": ("update_baselines", True, False),
    "--baseline-dir": ("baseline_dir", "store", "baselines"),  # the folder's name
    "--hardware-key": ("hardware_key", "other-box", None),
    "--speedup-tolerance": ("tolerance", 0.5, None),
    "--correctness-only": ("correctness_only", True, False),
}

# Writes the project's reading of its option and speedgate's settings, from a test that uses perf (so that speedgate
# has something to warn about).
TESTS = """
import json
from speedgate.plugin import SETTINGS_KEY

def test_reads_both(perf, request):
    perf.assert_close(1.0, 1.0)
    s = request.config.stash[SETTINGS_KEY]
    with open("seen.json", "w") as f:
        json.dump({{"project": request.config.getoption({flag!r}), "update_baselines": s.update_baselines,
                   "baseline_dir": s.baseline_dir.name, "hardware_key": s.hardware_key, "tolerance": s.tolerance,
                   "correctness_only": s.correctness_only}}, f)
"""


def _define(short: str, dest: str | None) -> str:
    """pytest_addoption of a project that defines short (a switch or an option with a value) for itself."""
    kind = 'action="store_true"' if SHORT_VALUES[short] is None else 'default="unset"'
    dest_arg = f", dest={dest!r}" if dest else ""
    return f"    parser.addoption({short!r}, {kind}{dest_arg}, help=\"the project's own\")\n"


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, object]]:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "always", *args)
    seen = json.loads((pytester.path / "seen.json").read_text())
    (pytester.path / "seen.json").unlink()
    return result, seen


def _args(flag: str, value: str | None) -> list[str]:
    return [flag] if value is None else [flag, value]


@pytest.mark.parametrize("dest", [None, "same", "other"])
@pytest.mark.parametrize("short", list(SHORT_VALUES))
def test_a_conftest_that_defines_a_short_spelling_keeps_it(pytester: pytest.Pytester, short: str, dest: str | None) -> None:
    # dest: pytest's own (from the name), the same one given explicitly, or another.
    explicit = {None: None, "same": short.lstrip("-").replace("-", "_"), "other": "projects_own"}[dest]
    pytester.makeconftest("def pytest_addoption(parser):\n" + _define(short, explicit))
    pytester.makepyfile(test_both=TESTS.format(flag=short))
    value = SHORT_VALUES[short]
    field, expected, default = SETTINGS_FIELD[short]
    prefixed = next(name for name, s in SHORT_SPELLINGS.items() if s == short)

    result, seen = _run(pytester, *_args(short, value))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    assert seen["project"] == (True if value is None else value), "the project's option lost its meaning"
    assert seen[field] == default, f"speedgate took the project's {short}"
    result.stdout.fnmatch_lines([f"*PytestConfigWarning: speedgate: this project or another plugin defines {short} "
                                 f"(speedgate's is {prefixed})*keeps that meaning*"])

    result, seen = _run(pytester, *_args(prefixed, value))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    assert seen[field] == expected, f"{prefixed} did not reach speedgate"
    assert seen["project"] == (False if value is None else "unset")


def test_a_plugin_that_defines_a_short_spelling_keeps_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(own_plugin="def pytest_addoption(parser):\n" + _define("--baseline-dir", None))
    pytester.makepyfile(test_both=TESTS.format(flag="--baseline-dir"))
    pytester.syspathinsert()
    result, seen = _run(pytester, "-p", "own_plugin", "--baseline-dir", "store", "--update-baselines")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    assert (seen["project"], seen["baseline_dir"], seen["update_baselines"]) == ("store", "baselines", True)
    result.stdout.fnmatch_lines(["*defines --baseline-dir (speedgate's is --speedgate-baseline-dir)*"])
    result, seen = _run(pytester, "-p", "own_plugin", "--speedgate-baseline-dir=store")
    assert (seen["project"], seen["baseline_dir"]) == ("unset", "store")


def test_help_lists_both_spellings_where_free_and_the_prefixed_one_where_not(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("def pytest_addoption(parser):\n" + _define("--update-baselines", None))
    result = pytester.runpytest_subprocess("--help")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    out = result.stdout.str()
    assert "the project's own" in out
    for name, short in SHORT_SPELLINGS.items():
        assert name in out
        assert (f"short for {name}" in out) is (short != "--update-baselines"), short


def test_a_run_without_perf_is_not_warned(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("def pytest_addoption(parser):\n" + _define("--update-baselines", None))
    pytester.makepyfile(test_plain="def test_plain(request):\n    assert request.config.getoption('--update-baselines')\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--update-baselines")
    result.assert_outcomes(passed=1)
    assert "speedgate" not in result.stdout.str().replace(f"speedgate-{__version__}", "")  # the plugins line


def test_a_value_given_apart_is_no_test_path(pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory) -> None:
    """`--baseline-dir DIR` before the short spelling exists: DIR must not become a folder to load conftests from."""
    store = tmp_path_factory.mktemp("elsewhere") / "store"
    store.mkdir()
    store.joinpath("conftest.py").write_text("raise SystemExit('a conftest in the baseline folder was loaded')\n")
    pytester.makepyfile(test_both=TESTS.format(flag="--speedgate-baseline-dir"))
    result, seen = _run(pytester, "--baseline-dir", str(store))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    assert seen["baseline_dir"] == "store"


@pytest.mark.parametrize("own", [False, True])
def test_the_advice_names_the_bless_option_that_blesses_here(pytester: pytest.Pytester, own: bool) -> None:
    # Where the project's conftest defines --update-baselines, `pytest --update-baselines` is its own option: every
    # hint must name speedgate's --speedgate-update-baselines instead, or the user runs a command that blesses nothing.
    if own:
        pytester.makeconftest("def pytest_addoption(parser):\n" + _define("--update-baselines", None))
    pytester.makepyfile(test_timed="""
def test_timed(perf):
    perf.compare(lambda: sum(range(3000)), lambda: sum(range(1000)), check=False)
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--update-baselines" if own else "-q")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    flag = "--speedgate-update-baselines" if own else "--update-baselines"
    result.stdout.fnmatch_lines([f"*not found (create it with `pytest {flag}` on this hardware)*"])
    assert not list((pytester.path / "baselines").glob("*.json")), "the project's --update-baselines blessed"
    if own:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--speedgate-update-baselines")
        assert result.ret == pytest.ExitCode.OK and list((pytester.path / "baselines").glob("*.json"))
