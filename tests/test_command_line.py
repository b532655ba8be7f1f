"""`python -m speedgate`: its help lists every subcommand the dispatcher runs, and each answers its own --help."""

from __future__ import annotations

import subprocess
import sys

import pytest

from speedgate.__main__ import COMMANDS


def speedgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speedgate", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args", [("--help",), ("-h",), ()], ids=["--help", "-h", "no-arguments"])
def test_the_help_lists_every_subcommand_with_one_line(args: tuple[str, ...]) -> None:
    done = speedgate(*args)
    text = done.stdout if args else done.stderr  # without a command: a usage error, on stderr
    assert done.returncode == (0 if args else 2), done.stderr
    listed = [line.split()[0] for line in text.split("commands:\n", 1)[1].splitlines() if line.startswith("  ")]
    assert listed == list(COMMANDS) and {"compare", "history", "evidence"} <= set(listed)
    for name, command in COMMANDS.items():
        assert f"  {name.ljust(max(map(len, COMMANDS)))}  {command.summary}" in text.splitlines()


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_subcommand_answers_its_own_help(name: str) -> None:
    done = speedgate(name, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m speedgate " + name), done.stdout[:200]


def test_an_unknown_command_is_a_usage_error_naming_the_choices() -> None:
    done = speedgate("comapre", "a.json", "b.json")
    assert done.returncode == 2
    assert "unknown command 'comapre' (choose from compare, history, evidence, schedule, study)" in done.stderr


def test_the_version_is_the_packages() -> None:
    from importlib import metadata

    assert speedgate("--version").stdout.strip() == f"pytest-speedgate {metadata.version('pytest-speedgate')}"
