"""speedgate's options and ini keys: pytest --help lists them with their defaults; bad values are usage errors."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest

from speedgate import hardware
from speedgate.options import SHORT_SPELLINGS, SettingsError, add_options, read_settings

# A test that leaves this file behind ran; a usage error must stop the run before any test does.
RAN_MARKER = "ran.txt"
ONE_TEST = f"def test_runs():\n    open({RAN_MARKER!r}, 'w').close()\n"


class RecordingParser:
    """Stands in for pytest.Parser: keeps what add_options registers, so the tests follow the code."""

    def __init__(self) -> None:
        self.options: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        self.ini: list[tuple[str, str]] = []

    def getgroup(self, name: str, description: str = "") -> RecordingParser:
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.options.append((names, kwargs))

    def addini(self, name: str, help: str, type: Any = None, default: Any = None) -> None:
        self.ini.append((name, help))


def registered() -> RecordingParser:
    parser = RecordingParser()
    add_options(parser)  # type: ignore[arg-type]
    return parser


def squash(text: str) -> str:
    # argparse and pytest wrap help at spaces and hyphens and re-indent it; without whitespace both read alike.
    return re.sub(r"\s+", "", text)


def test_every_help_text_states_its_default_and_has_no_percent_sign() -> None:
    parser = registered()
    assert parser.options and parser.ini
    helps = [(names[0], kwargs["help"]) for names, kwargs in parser.options] + parser.ini
    for name, help_text in helps:
        assert "(default: " in help_text, f"{name}: say its default in its help text"
        # argparse expands '%' in an option's help ("%o" crashed --help); ini help prints as written, so '%%'
        # would show doubled there. The shared texts say "percent".
        assert "%" not in help_text, f"{name}: write 'percent', not '%'"


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_every_option_and_ini_key_with_its_default(pytester: pytest.Pytester, flag: str) -> None:
    parser = registered()
    result = pytester.runpytest_subprocess(flag)
    assert result.ret == 0, result.stderr.str()
    out = result.stdout.str()
    cli_part, ini_part = out.split("[pytest] configuration options", 1)
    cli_text, ini_text = squash(cli_part), squash(ini_part)
    for names, kwargs in parser.options:
        assert "(default: " in kwargs["help"], f"{names[0]}: say its default in its help text"
        for name in names:
            # "--name=METAVAR" (or "--name" for a switch), then the whole help text.
            pattern = re.escape(name) + r"(?:=[\w{},<>.-]+?)?" + re.escape(squash(kwargs["help"]))
            assert re.search(pattern, cli_text), f"{name} is missing from {flag}, or its help text differs"
    for name, short in SHORT_SPELLINGS.items():  # added once the conftests are loaded, each pointing at its full name
        assert re.search(re.escape(short) + r"(?:=[\w{},<>.-]+?)?shortfor" + re.escape(name) + r"\(default:", cli_text), short
    for name, help_text in parser.ini:
        assert "(default: " in help_text, f"ini key {name}: say its default in its help text"
        pattern = re.escape(name) + r"\(\w+\):" + re.escape(squash(help_text))
        assert re.search(pattern, ini_text), f"ini key {name} is missing from {flag}, or its help text differs"


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("speedgate_tolerance", "abc", "'abc' is not a number"),
        ("speedgate_budget", "-1", "'-1' must be a positive number of seconds"),
        ("speedgate_timer", "gpu", "'gpu' is not a timer; choose one of auto, cpu, cuda"),
        ("speedgate_noise", "2", "'2' must be a fraction in [[]0, 1)*"),
        ("speedgate_strict", "maybe", "*'maybe'*; use true/false, yes/no, on/off or 1/0*"),
        ("speedgate_correctness_only", "maybe", "*'maybe'*; use true/false, yes/no, on/off or 1/0*"),
    ],
)
def test_bad_ini_value_is_a_usage_error_naming_its_key(
    pytester: pytest.Pytester, key: str, value: str, reason: str
) -> None:
    pytester.makeini(f"[pytest]\n{key} = {value}\n")
    pytester.makepyfile(ONE_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*speedgate: ini key {key}: {reason}"])
    assert not (pytester.path / RAN_MARKER).exists()


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("YES", True), ("On", True), ("1", True), ("false", False), ("No", False), ("OFF", False), ("0", False)],
)
@pytest.mark.parametrize(("key", "field"), [("speedgate_strict", "strict"), ("speedgate_correctness_only", "correctness_only")])
def test_ini_switches_read_any_case(pytester: pytest.Pytester, key: str, field: str, value: str, expected: bool) -> None:
    pytester.makeini(f"[pytest]\n{key} = {value}\n")
    assert getattr(read_settings(pytester.parseconfig()), field) is expected


@pytest.mark.skipif(int(pytest.__version__.split(".")[0]) < 9, reason="pytest.toml arrived in pytest 9")
def test_toml_switch_takes_a_toml_bool(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pytest="[pytest]\nspeedgate_strict = true\nspeedgate_correctness_only = false\n")
    settings = read_settings(pytester.parseconfig())
    assert (settings.strict, settings.correctness_only) == (True, False)


def test_switches_default_to_off_and_the_cli_turns_them_on(pytester: pytest.Pytester) -> None:
    settings = read_settings(pytester.parseconfig())
    assert (settings.strict, settings.correctness_only) == (False, False)
    settings = read_settings(pytester.parseconfig("--speedgate-strict", "--correctness-only"))
    assert (settings.strict, settings.correctness_only) == (True, True)


@pytest.mark.parametrize(
    ("ini", "args", "named"),
    [("", ("--speedgate-timer", "cuda"), "--speedgate-timer cuda"), ("speedgate_timer = cuda\n", (), "ini key speedgate_timer = cuda")],
)
def test_cuda_timer_without_a_gpu_is_a_usage_error_before_any_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ini: str, args: tuple[str, ...], named: str
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # hides every GPU, also on a GPU machine
    pytester.makeini(f"[pytest]\n{ini}")
    pytester.makepyfile(ONE_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*speedgate: {named}: no GPU is visible (CUDA_VISIBLE_DEVICES='' hides every GPU)*auto or cpu*"]
    )
    assert not (pytester.path / RAN_MARKER).exists()


def test_cuda_timer_asks_nvml_when_cuda_visible_devices_is_unset(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(hardware, "nvml_device_count", lambda: 0)
    with pytest.raises(SettingsError, match=r"^--speedgate-timer cuda: no GPU is visible \(NVML sees none"):
        read_settings(pytester.parseconfig("--speedgate-timer", "cuda"))
    monkeypatch.setattr(hardware, "nvml_device_count", lambda: 2)
    assert read_settings(pytester.parseconfig("--speedgate-timer", "cuda")).timer == "cuda"


@pytest.mark.parametrize("args", [(), ("--speedgate-timer", "auto"), ("--speedgate-timer", "cpu")])
def test_no_gpu_probe_unless_the_cuda_timer_is_asked_for(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    def probe() -> list[str]:
        raise AssertionError("start-up probed for GPUs without --speedgate-timer cuda")

    monkeypatch.setattr(hardware, "visible_gpu_tokens", probe)
    assert read_settings(pytester.parseconfig(*args)).timer == (args[1] if args else "auto")


def test_options_module_imports_neither_pytest_nor_torch() -> None:
    # The pure modules (measure, compare) may import the defaults from speedgate.options.
    code = "import sys, speedgate.options\nbad = [m for m in ('pytest', 'torch', 'pynvml') if m in sys.modules]\nassert not bad, bad\n"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(("option", "module", "extra"), [("--speedgate-chart", "matplotlib", "chart"),
                                                         ("--speedgate-benchmark-json", "pytest_benchmark", "benchmark")])
def test_a_report_whose_package_is_missing_is_a_usage_error_before_any_test(
    pytester: pytest.Pytester, option: str, module: str, extra: str
) -> None:
    # None in sys.modules: Python's own way to make an import fail, set before speedgate reads its settings.
    pytester.makeconftest(f"import sys\nsys.modules[{module!r}] = None\n")
    pytester.makepyfile(ONE_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", option, "out.file")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"*speedgate: {option} needs {module}, which is not installed here: "
                                 f"pip install 'pytest-speedgate[[]{extra}[]]'"])
    assert not (pytester.path / RAN_MARKER).exists()
