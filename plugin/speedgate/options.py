"""Command-line options and ini keys, read once into a frozen Settings (precedence: CLI > env > ini > default)."""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .hardware import validate_key
from .timers import TIMER_CHOICES

DEFAULT_TOLERANCE = 0.10
DEFAULT_BUDGET_S = 2.0
DEFAULT_TARGET_NOISE = 0.01

HELP_UPDATE = "measure and write the speedups of passing cases into the baseline file (merged; other cases kept)"
HELP_BASELINE_DIR = "folder of <hardware_key>.json baseline files (default: <rootdir>/baselines)"
HELP_HARDWARE_KEY = "use this hardware key instead of the detected fingerprint (env SPEEDGATE_HARDWARE_KEY)"
HELP_TOLERANCE = f"allowed fractional drop of a speedup below its baseline, in [0, 1) (default: {DEFAULT_TOLERANCE})"
HELP_JSON = "write every case's measurement and verdict to this JSON file"
HELP_MARKDOWN = "write the summary table as Markdown to this file (also appended to $GITHUB_STEP_SUMMARY when set)"
HELP_BENCHMARK_JSON = "write timed cases in pytest-benchmark's JSON layout (readable by `pytest-benchmark compare`)"
HELP_ARTIFACTS = "keep failing tests' artifacts (samples, Triton source/PTX/SASS, inductor code) under DIR"
HELP_CHART = "draw the run as a PNG (needs matplotlib): speedup against baseline with tolerance bands, and % of peak"
HELP_CORRECTNESS = "run every comparison's correctness check but time nothing and gate nothing"
HELP_STRICT = "also fail new cases, improvements beyond tolerance and a missing baseline file"
HELP_TIMER = "clock for comparisons: auto (CUDA events when torch sees a GPU, else the host clock), cpu, cuda (default: auto)"
HELP_BUDGET = f"seconds of timed rounds allowed for one comparison before it stops (default: {DEFAULT_BUDGET_S})"
HELP_NOISE = (
    "stop measuring once the 95 percent interval on a speedup is within +- this fraction of it "
    f"(default: {DEFAULT_TARGET_NOISE})"
)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and 0.0 <= value < 1.0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a fraction in [0, 1), e.g. 0.1 for 10%")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def _hardware_key(text: str) -> str:
    try:
        return validate_key(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _timer(text: str) -> str:
    if text not in TIMER_CHOICES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a timer; choose one of {', '.join(TIMER_CHOICES)}")
    return text


def add_options(parser: Any) -> None:
    group = parser.getgroup("speedgate", "speedgate: gate optimizations on correctness and measured speedup")
    group.addoption("--update-baselines", action="store_true", default=False, help=HELP_UPDATE)
    group.addoption("--baseline-dir", default=None, metavar="DIR", help=HELP_BASELINE_DIR)
    group.addoption("--hardware-key", default=None, metavar="KEY", type=_hardware_key, help=HELP_HARDWARE_KEY)
    group.addoption("--speedup-tolerance", default=None, metavar="FRACTION", type=_fraction, help=HELP_TOLERANCE)
    group.addoption("--speedgate-json", default=None, metavar="PATH", help=HELP_JSON)
    group.addoption("--speedgate-markdown", default=None, metavar="PATH", help=HELP_MARKDOWN)
    group.addoption("--speedgate-benchmark-json", default=None, metavar="PATH", help=HELP_BENCHMARK_JSON)
    group.addoption("--speedgate-artifacts", default=None, metavar="DIR", help=HELP_ARTIFACTS)
    group.addoption("--speedgate-chart", default=None, metavar="PATH", help=HELP_CHART)
    group.addoption("--correctness-only", action="store_true", default=None, help=HELP_CORRECTNESS)
    group.addoption("--speedgate-strict", action="store_true", default=None, help=HELP_STRICT)
    group.addoption("--speedgate-timer", default=None, type=_timer, metavar="{auto,cpu,cuda}", help=HELP_TIMER)
    group.addoption("--speedgate-budget", default=None, type=_positive, metavar="SECONDS", help=HELP_BUDGET)
    group.addoption("--speedgate-noise", default=None, type=_fraction, metavar="FRACTION", help=HELP_NOISE)
    parser.addini("speedgate_baseline_dir", HELP_BASELINE_DIR, default=None)
    parser.addini("speedgate_tolerance", HELP_TOLERANCE, default=None)
    parser.addini("speedgate_correctness_only", HELP_CORRECTNESS, type="bool", default=False)
    parser.addini("speedgate_strict", HELP_STRICT, type="bool", default=False)
    parser.addini("speedgate_timer", HELP_TIMER, default=None)
    parser.addini("speedgate_budget", HELP_BUDGET, default=None)
    parser.addini("speedgate_noise", HELP_NOISE, default=None)


@dataclass(frozen=True)
class Settings:
    update_baselines: bool
    baseline_dir: Path
    hardware_key: str | None
    tolerance: float
    json_path: Path | None
    markdown_path: Path | None
    benchmark_json_path: Path | None
    artifacts_dir: Path | None
    chart_path: Path | None
    correctness_only: bool
    strict: bool
    timer: str
    budget_s: float
    target_noise: float


class SettingsError(ValueError):
    """A bad option or ini value; the message names the option."""


def _from_ini(config: Any, name: str, parse: Any, default: Any) -> Any:
    raw = config.getini(name)
    if raw in (None, ""):
        return default
    if isinstance(raw, bool):
        return raw
    try:
        return parse(str(raw).strip())
    except argparse.ArgumentTypeError as exc:
        raise SettingsError(f"ini key {name}: {exc}") from None


def read_settings(config: Any) -> Settings:
    """Resolve every option once; raises SettingsError for a bad ini or environment value."""
    opt = config.getoption
    rootdir = Path(str(config.rootpath))

    baseline_dir = opt("baseline_dir") or _from_ini(config, "speedgate_baseline_dir", str, None)
    baseline_path = Path(baseline_dir) if baseline_dir else rootdir / "baselines"
    if not baseline_path.is_absolute():
        # CLI paths are relative to where pytest was started; ini paths to the ini file's folder.
        base = Path.cwd() if opt("baseline_dir") else Path(str(config.inipath.parent)) if config.inipath else rootdir
        baseline_path = base / baseline_path

    key = opt("hardware_key")
    if key is None and os.environ.get("SPEEDGATE_HARDWARE_KEY"):
        try:
            key = validate_key(os.environ["SPEEDGATE_HARDWARE_KEY"])
        except ValueError as exc:
            raise SettingsError(f"SPEEDGATE_HARDWARE_KEY: {exc}") from None

    def pick(cli_name: str, ini_name: str, parse: Any, default: Any) -> Any:
        value = opt(cli_name)
        return value if value is not None else _from_ini(config, ini_name, parse, default)

    json_path = opt("speedgate_json")
    settings = Settings(
        update_baselines=bool(opt("update_baselines")),
        baseline_dir=baseline_path,
        hardware_key=key,
        tolerance=pick("speedup_tolerance", "speedgate_tolerance", _fraction, DEFAULT_TOLERANCE),
        json_path=Path(json_path).absolute() if json_path else None,
        markdown_path=Path(opt("speedgate_markdown")).absolute() if opt("speedgate_markdown") else None,
        chart_path=Path(opt("speedgate_chart")).absolute() if opt("speedgate_chart") else None,
        artifacts_dir=Path(opt("speedgate_artifacts")).absolute() if opt("speedgate_artifacts") else None,
        benchmark_json_path=Path(opt("speedgate_benchmark_json")).absolute() if opt("speedgate_benchmark_json") else None,
        correctness_only=bool(pick("correctness_only", "speedgate_correctness_only", bool, False)),
        strict=bool(pick("speedgate_strict", "speedgate_strict", bool, False)),
        timer=pick("speedgate_timer", "speedgate_timer", _timer, "auto"),
        budget_s=pick("speedgate_budget", "speedgate_budget", _positive, DEFAULT_BUDGET_S),
        target_noise=pick("speedgate_noise", "speedgate_noise", _fraction, DEFAULT_TARGET_NOISE),
    )
    if settings.update_baselines and settings.correctness_only:
        raise SettingsError("--update-baselines needs timing; it cannot be combined with --correctness-only")
    return settings
