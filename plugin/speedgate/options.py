"""Command-line options and ini keys, read once into a frozen Settings (precedence: CLI > env > ini > default)."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .reporting import BUILT_IN, ReportRegistry
from .tolerance import DEFAULT_CPU_TOLERANCE, DEFAULT_TOLERANCE, default_for, is_cpu_key

if TYPE_CHECKING:  # pytest only for annotations: the pure modules import the defaults below from here
    import pytest

T = TypeVar("T")

__all__ = ["DEFAULT_BUDGET_S", "DEFAULT_CPU_TOLERANCE", "DEFAULT_TARGET_NOISE", "DEFAULT_TOLERANCE", "Settings",
           "SettingsError", "add_options", "is_cpu_key", "read_settings"]

# The clocks --speedgate-timer chooses from (timers.TimerKind's values: a test holds the two equal). Spelled here so
# that registering the options imports no timer.
TIMER_CHOICES = ("auto", "cpu", "cuda")
DEFAULT_BUDGET_S = 2.0
DEFAULT_TARGET_NOISE = 0.01
# Longer than any honest case takes between two comparisons: a first call that compiles (torch.compile's
# max-autotune, a Triton autotuner with many configs) can take minutes on a GPU.
DEFAULT_DEADLINE_S = 900.0
# The deadline's marker (speedgate.deadline enforces it), registered with the options so that a run without perf
# loads no deadline.
DEADLINE_MARKER = "speedgate_deadline"
DEADLINE_MARKER_HELP = (f"{DEADLINE_MARKER}(seconds): this test's deadline (speedgate ends it as hung after seconds "
                        "without finishing a comparison; 0: none)")

# Each text serves both a command-line option (argparse expands '%' in it, so never write one: say "percent")
# and an ini key (printed as written), and ends with its default.
HELP_UPDATE = "measure the passing cases and merge their speedups into the baseline file, keeping other cases (default: off)"
HELP_BASELINE_DIR = ("folder of <hardware_key>.json baseline files (default: baselines/ beside the ini file, else "
                     "<rootdir>/baselines)")
HELP_HARDWARE_KEY = (
    "use this hardware key instead of the detected one; also env SPEEDGATE_HARDWARE_KEY "
    "(default: the key of the first visible GPU, else of the CPU)"
)
HELP_TOLERANCE = (
    "allowed fractional drop of a speedup below its baseline, in [0, 1), for every case that names none "
    f"(default: {DEFAULT_TOLERANCE}, and {DEFAULT_CPU_TOLERANCE} on CPU hardware keys, those named cpu-...)"
)
HELP_ARTIFACTS = "keep failing tests' artifacts (samples, Triton source/PTX/SASS, inductor code) under DIR (default: not kept)"
HELP_CORRECTNESS = "run every comparison's correctness check but time nothing and gate nothing (default: off)"
HELP_STRICT = "also fail new cases, improvements beyond tolerance and a missing baseline file (default: off)"
HELP_TIMER = (
    "clock for comparisons: auto (CUDA events when torch sees a GPU, else the host clock), cpu, "
    "or cuda, which needs a visible GPU (default: auto)"
)
HELP_BUDGET = f"seconds of timed rounds allowed for one comparison before it stops (default: {DEFAULT_BUDGET_S})"
HELP_CALIBRATE = (
    "with --update-baselines: measure each comparison N times (N >= 2, fresh rounds in this process) and write each "
    "entry's tolerance from the spread of its N speedups, with that evidence (default: off, entries get the "
    "case's or the default tolerance)"
)
HELP_NOISE = (
    "stop measuring once the 95 percent interval on a speedup is within +- this fraction of it "
    f"(default: {DEFAULT_TARGET_NOISE})"
)
HELP_HISTORY = (
    "record every timed case and metric of the run in this history store (SQLite; created if absent), for "
    "`python -m speedgate history`; ini paths are relative to the ini file (default: not recorded)"
)
HELP_DEADLINE = (
    "seconds a test that uses perf may go without finishing a comparison (from its start, then from each "
    "comparison's end) before speedgate ends it as hung, naming it with the stacks of its threads: serially the run "
    "stops, under xdist the worker is replaced; 0 for none; a test's @pytest.mark.speedgate_deadline(SECONDS) "
    "overrides it, and pytest-timeout's limit (--timeout, ini timeout, its marker) ends a hung comparison too "
    f"(default: 10 times what the test's longest comparison took when blessed, 300 to {DEFAULT_DEADLINE_S:g} s; "
    f"{DEFAULT_DEADLINE_S:g} without an entry)"
)
HELP_PIN_WORKERS = (
    "under xdist, give each worker its own GPU (CUDA_VISIBLE_DEVICES narrowed to one entry, round-robin, before any "
    "conftest loads); for runs that time GPU work. Off, every worker sees every GPU and tests that use perf take "
    "turns on the first one (default: off)"
)
HELP_SCHEDULE = (
    "under xdist's --dist load (what -n picks), the order tests are handed to workers: longest-first sends the "
    "longest work first, by the seconds each test took when last blessed on this hardware (a file's tests together "
    "unless the file alone is more than a worker's share), where the baseline file records them; xdist keeps xdist's "
    "own order (default: longest-first)"
)


def number(text: str) -> float:
    """An option's value as a number, or argparse's own error naming the text: the first step of every numeric
    option's check, here and in the command-line tools."""
    try:
        return float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _fraction(text: str) -> float:
    value = number(text)
    if not (math.isfinite(value) and 0.0 <= value < 1.0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a fraction in [0, 1), e.g. 0.1 for 10 percent")
    return value


def _positive(text: str) -> float:
    value = number(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def deadline_seconds(text: str) -> float:
    """A deadline in seconds: a finite number >= 0 (0: none)."""
    value = number(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds >= 0 (0: no deadline)")
    return value


def _runs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 2:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 2: a spread needs two measurements")
    return value


def _hardware_key(text: str) -> str:
    try:
        from . import hardware

        return hardware.validate_key(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _schedule(text: str) -> str:
    from .schedule import SCHEDULES

    if text not in SCHEDULES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a schedule; choose one of {', '.join(SCHEDULES)}")
    return text


def _timer(text: str) -> str:
    if text not in TIMER_CHOICES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a timer; choose one of {', '.join(TIMER_CHOICES)}")
    return text


# Speedgate's options under the names users type, which other projects use too (a conftest's own --update-baselines):
# each is registered as its --speedgate-... spelling, which no one else defines, and the short spelling is added
# beside it once the project's initial conftests have registered theirs, only where it is still free (add_short_spellings).
SHORT_SPELLINGS = {
    "--speedgate-update-baselines": "--update-baselines",
    "--speedgate-baseline-dir": "--baseline-dir",
    "--speedgate-hardware-key": "--hardware-key",
    "--speedgate-tolerance": "--speedup-tolerance",
    "--speedgate-correctness-only": "--correctness-only",
}


def _short_named_options() -> dict[str, dict[str, Any]]:
    """The options that also have a short spelling: prefixed name -> add_argument's keywords (dest included)."""
    return {
        "--speedgate-update-baselines": dict(dest="speedgate_update_baselines", action="store_true", default=False,
                                             help=HELP_UPDATE),
        "--speedgate-baseline-dir": dict(dest="speedgate_baseline_dir", default=None, metavar="DIR", help=HELP_BASELINE_DIR),
        "--speedgate-hardware-key": dict(dest="speedgate_hardware_key", default=None, metavar="KEY", type=_hardware_key,
                                         help=HELP_HARDWARE_KEY),
        "--speedgate-tolerance": dict(dest="speedgate_tolerance", default=None, metavar="FRACTION", type=_fraction,
                                      help=HELP_TOLERANCE),
        "--speedgate-correctness-only": dict(dest="speedgate_correctness_only", action="store_true", default=None,
                                             help=HELP_CORRECTNESS),
    }


def add_options(parser: pytest.Parser) -> ReportRegistry:
    """Register speedgate's command-line options (one group, every name prefixed), its own reports' (each report
    owns its option: speedgate.reporting) and its ini keys. Returns the registry of reports, which a project's
    reports join (pytest_speedgate_reports)."""
    group = parser.getgroup("speedgate", "speedgate: gate optimizations on correctness and measured speedup")
    for name, keywords in _short_named_options().items():
        group.addoption(name, **keywords)
    reports = ReportRegistry(group)
    reports.add(BUILT_IN)
    group.addoption("--speedgate-artifacts", default=None, metavar="DIR", help=HELP_ARTIFACTS)
    group.addoption("--speedgate-strict", action="store_true", default=None, help=HELP_STRICT)
    group.addoption("--speedgate-timer", default=None, type=_timer, metavar="{auto,cpu,cuda}", help=HELP_TIMER)
    group.addoption("--speedgate-budget", default=None, type=_positive, metavar="SECONDS", help=HELP_BUDGET)
    group.addoption("--speedgate-noise", default=None, type=_fraction, metavar="FRACTION", help=HELP_NOISE)
    group.addoption("--speedgate-calibrate", default=None, type=_runs, metavar="N", help=HELP_CALIBRATE)
    group.addoption("--speedgate-history", default=None, metavar="PATH", help=HELP_HISTORY)
    group.addoption("--speedgate-pin-workers", action="store_true", default=None, help=HELP_PIN_WORKERS)
    group.addoption("--speedgate-deadline", default=None, type=deadline_seconds, metavar="SECONDS", help=HELP_DEADLINE)
    group.addoption("--speedgate-schedule", default=None, type=_schedule, metavar="{longest-first,xdist}",
                    help=HELP_SCHEDULE)
    # Values are parsed by read_settings, so that a bad one's message names its key. The switches keep pytest's
    # bool type, which also takes a TOML true/false in pytest.toml (a "string" key rejects those).
    parser.addini("speedgate_baseline_dir", HELP_BASELINE_DIR, default=None)
    parser.addini("speedgate_tolerance", HELP_TOLERANCE, default=None)
    parser.addini("speedgate_correctness_only", HELP_CORRECTNESS, type="bool", default=False)
    parser.addini("speedgate_strict", HELP_STRICT, type="bool", default=False)
    parser.addini("speedgate_timer", HELP_TIMER, default=None)
    parser.addini("speedgate_budget", HELP_BUDGET, default=None)
    parser.addini("speedgate_noise", HELP_NOISE, default=None)
    parser.addini("speedgate_history", HELP_HISTORY, default=None)
    parser.addini("speedgate_pin_workers", HELP_PIN_WORKERS, type="bool", default=False)
    parser.addini("speedgate_deadline", HELP_DEADLINE, default=None)
    parser.addini("speedgate_schedule", HELP_SCHEDULE, default=None)
    return reports


def add_short_spellings(parser: pytest.Parser) -> list[str]:
    """Add --update-baselines, --baseline-dir, ... beside their --speedgate-... spellings, each where no plugin or
    initial conftest defined that name first (theirs keeps its meaning). Call once the initial conftests are loaded
    (pytest runs plugins' pytest_addoption before conftests', and the second to register a name fails). Returns the
    short spellings left to others."""
    group = parser.getgroup("speedgate")
    taken = []
    for name, keywords in _short_named_options().items():
        short = SHORT_SPELLINGS[name]
        default = keywords["help"][keywords["help"].rindex("(default: "):]  # every help text ends with its default
        try:
            group.addoption(short, **{**keywords, "help": f"short for {name} {default}"})
        except (ValueError, argparse.ArgumentError):  # pytest's duplicate check, argparse's conflicting option string
            taken.append(short)
    return taken


def value_options() -> list[str]:
    """The short spellings that take a value (--baseline-dir DIR, ...)."""
    return [SHORT_SPELLINGS[name] for name, keywords in _short_named_options().items() if "action" not in keywords]


def drop_option_values(early_config: pytest.Config, args: list[str]) -> None:
    """`--baseline-dir DIR`: until the short spellings exist, pytest's early parse takes DIR for a test path and would
    look for conftests there. Drop such values from the paths that initial conftests are looked up from."""
    paths = getattr(early_config.known_args_namespace, "file_or_dir", None)
    if not paths:
        return
    for flag, value in zip(args, args[1:]):
        if flag in value_options() and value in paths:
            paths.remove(value)


def shadowed_words(taken: list[str]) -> str:
    """The warning for short spellings that another plugin or the project's conftest defined."""
    pairs = ", ".join(f"{short} (speedgate's is {name})" for name, short in SHORT_SPELLINGS.items() if short in taken)
    return (f"speedgate: this project or another plugin defines {pairs}: there the name keeps that meaning; speedgate "
            "takes only its --speedgate-... spelling")


@dataclass(frozen=True)
class Settings:
    update_baselines: bool
    baseline_dir: Path
    hardware_key: str | None
    tolerance: float | None  # None: not set, each case gets its hardware key's default (see default_tolerance)
    artifacts_dir: Path | None
    correctness_only: bool
    strict: bool
    timer: str
    budget_s: float
    target_noise: float
    calibrate_runs: int | None = None  # --speedgate-calibrate: measurements per comparison when blessing; None: off
    history_path: Path | None = None  # --speedgate-history / ini speedgate_history: the store to record into; None: off
    pin_workers: bool = False  # --speedgate-pin-workers: one GPU per xdist worker (applied before conftests load)
    deadline_s: float | None = None  # --speedgate-deadline: 0 for none; None: unset (each test's from its entries)
    schedule: str = "longest-first"  # --speedgate-schedule: the order xdist's workers are sent tests in

    def default_tolerance(self, hardware_key: str) -> float:
        """The tolerance of a case that names none and has no calibrated entry (speedgate.tolerance's rule)."""
        return default_for(hardware_key, self.tolerance).value

    def tolerance_words(self, hardware_keys: Iterable[str]) -> str:
        """'default tolerance 10%' for the summary: the one in effect for these keys, or both defaults."""
        effective = {self.default_tolerance(key) for key in hardware_keys}
        if self.tolerance is not None or len(effective) == 1:
            return f"default tolerance {self.tolerance if self.tolerance is not None else effective.pop():.0%}"
        return f"default tolerance {DEFAULT_TOLERANCE:.0%} ({DEFAULT_CPU_TOLERANCE:.0%} on cpu- hardware keys)"


class SettingsError(ValueError):
    """A bad option or ini value; the message names the option."""


def _from_ini(config: pytest.Config, name: str, parse: Callable[[str], T]) -> T | None:
    """The ini key's parsed value, or None when it is unset or empty."""
    raw = config.getini(name)
    text = "" if raw is None else str(raw).strip()
    if not text:
        return None
    try:
        return parse(text)
    except argparse.ArgumentTypeError as exc:
        raise SettingsError(f"ini key {name}: {exc}") from None


def _ini_path(config: pytest.Config, name: str, home: Path) -> Path | None:
    """The ini key's path, relative to the ini file's folder (home), or None when unset."""
    text = _from_ini(config, name, str)
    return None if text is None else (home / text).absolute()


def _ini_switch(config: pytest.Config, name: str) -> bool:
    import pytest  # already loaded: there is a config

    try:
        return bool(config.getini(name))
    except (ValueError, pytest.UsageError) as exc:  # pytest 8 raises ValueError, 9.2 UsageError; neither names the key
        raise SettingsError(f"ini key {name}: {exc}; use true/false, yes/no, on/off or 1/0 (any case)") from None


def _require_gpu(source: str) -> None:
    """Raise unless a GPU is visible. NVML only (torch is not imported), and only asked when the cuda timer is."""
    from . import hardware

    if hardware.visible_gpu_tokens():
        return
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    reason = (
        f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU"
        if hidden is not None
        else "NVML sees none: no NVIDIA driver, or nvidia-ml-py is missing"
    )
    raise SettingsError(f"{source}: no GPU is visible ({reason}); use the auto or cpu timer on this machine")


def pin_workers_asked(early_config: pytest.Config) -> bool:
    """Whether --speedgate-pin-workers or ini speedgate_pin_workers asks to pin xdist workers' GPUs. Read before the
    conftests load (pinning must precede any CUDA start): the command line as parsed so far, then the ini file."""
    namespace = getattr(early_config, "known_args_namespace", early_config.option)
    if getattr(namespace, "speedgate_pin_workers", None):
        return True
    try:
        return _ini_switch(early_config, "speedgate_pin_workers")
    except SettingsError:
        return False  # read_settings reports the bad value once the run is configured


def read_settings(config: pytest.Config) -> Settings:
    """Resolve every option once; raises SettingsError for a bad ini or environment value, or a timer without its GPU."""

    def opt(name: str) -> object:
        return config.getoption(name)

    def pick(cli_name: str, ini_name: str, parse: Callable[[str], T], default: T) -> T:
        value: T | None = config.getoption(cli_name)
        if value is not None:
            return value
        from_ini = _from_ini(config, ini_name, parse)
        return default if from_ini is None else from_ini

    def cli_path(name: str) -> Path | None:
        value = opt(name)
        return Path(str(value)).absolute() if value else None

    rootdir = Path(config.rootpath)
    cli_baseline_dir = opt("speedgate_baseline_dir")
    baseline_dir = str(cli_baseline_dir) if cli_baseline_dir else _from_ini(config, "speedgate_baseline_dir", str)
    # Beside the ini file when there is one: pytest's rootdir moves with --rootdir and with the working directory.
    home = Path(str(config.inipath.parent)) if config.inipath else rootdir
    baseline_path = Path(baseline_dir) if baseline_dir else home / "baselines"
    if not baseline_path.is_absolute():
        # CLI paths are relative to where pytest was started; ini paths to the ini file's folder.
        base = Path.cwd() if cli_baseline_dir else config.inipath.parent if config.inipath else rootdir
        baseline_path = base / baseline_path

    key: str | None = config.getoption("speedgate_hardware_key")
    if key is None and os.environ.get("SPEEDGATE_HARDWARE_KEY"):
        from . import hardware

        try:
            key = hardware.validate_key(os.environ["SPEEDGATE_HARDWARE_KEY"])
        except ValueError as exc:
            raise SettingsError(f"SPEEDGATE_HARDWARE_KEY: {exc}") from None

    timer = pick("speedgate_timer", "speedgate_timer", _timer, "auto")
    if timer == "cuda":
        _require_gpu("--speedgate-timer cuda" if opt("speedgate_timer") else "ini key speedgate_timer = cuda")

    # Left None when unset: the default depends on each case's hardware key (Settings.default_tolerance).
    tolerance: float | None = config.getoption("speedgate_tolerance")
    if tolerance is None:
        tolerance = _from_ini(config, "speedgate_tolerance", _fraction)
    settings = Settings(
        update_baselines=bool(opt("speedgate_update_baselines")),
        baseline_dir=baseline_path,
        hardware_key=key,
        tolerance=tolerance,
        artifacts_dir=cli_path("speedgate_artifacts"),
        correctness_only=bool(opt("speedgate_correctness_only")) or _ini_switch(config, "speedgate_correctness_only"),
        strict=bool(opt("speedgate_strict")) or _ini_switch(config, "speedgate_strict"),
        timer=timer,
        budget_s=pick("speedgate_budget", "speedgate_budget", _positive, DEFAULT_BUDGET_S),
        target_noise=pick("speedgate_noise", "speedgate_noise", _fraction, DEFAULT_TARGET_NOISE),
        calibrate_runs=opt("speedgate_calibrate"),  # type: ignore[arg-type]  # parsed by _runs
        history_path=cli_path("speedgate_history") or _ini_path(config, "speedgate_history", home),
        pin_workers=bool(opt("speedgate_pin_workers")) or _ini_switch(config, "speedgate_pin_workers"),
        deadline_s=pick("speedgate_deadline", "speedgate_deadline", deadline_seconds, None),
        schedule=pick("speedgate_schedule", "speedgate_schedule", _schedule, "longest-first"),
    )
    if settings.calibrate_runs is not None and not settings.update_baselines:
        raise SettingsError("--speedgate-calibrate writes tolerances into the baseline file; it needs "
                            "--update-baselines")
    if settings.update_baselines and settings.correctness_only:
        raise SettingsError("--update-baselines needs timing; it cannot be combined with --correctness-only")
    return settings
