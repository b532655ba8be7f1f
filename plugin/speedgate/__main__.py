"""`python -m speedgate COMMAND ...`: the command-line tools, one line each in COMMANDS."""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import __version__


@dataclass(frozen=True)
class Command:
    """A subcommand: `module:function`, called with the arguments after its name, and what it does in one line."""

    target: str
    summary: str
    # The function's own parser expects the command's name first (compare's does).
    with_name: bool = False

    def function(self) -> Callable[[list[str]], int]:
        module, name = self.target.split(":")
        function: Callable[[list[str]], int] = getattr(importlib.import_module(module), name)
        return function


# Add a subcommand with one line here; its module is imported only when it runs.
COMMANDS: dict[str, Command] = {
    "compare": Command("speedgate.compare:main", "judge NEW's speedups against OLD's (baseline files or --speedgate-json "
                       "reports)", with_name=True),
    "history": Command("speedgate.history.cli:main", "the history of gate runs: record them, find where each case's "
                       "speedup shifted, draw a page"),
    "evidence": Command("speedgate.evidence_cli:main", "add gate runs' speedups to a baseline file's calibration "
                        "evidence, show that evidence by card, or restart an entry's evidence"),
    "schedule": Command("speedgate.schedule:main", "the seconds a baseline file records for each test (the order an "
                        "xdist run hands tests out in), or record them from reports"),
    "study": Command("speedgate.study:main", "what a gate catches: clean and slowed gate runs of a selection, per "
                     "comparison"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: python -m speedgate COMMAND [ARGUMENTS...]", "",
             "speedgate's command-line tools; `python -m speedgate COMMAND --help` gives a command's own options.", "",
             "commands:"]
    lines += [f"  {name.ljust(width)}  {command.summary}" for name, command in COMMANDS.items()]
    return "\n".join(lines) + "\n"


def run(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args:
        sys.stderr.write(usage())
        return 2
    if args[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        return 0
    if args[0] == "--version":
        print(f"pytest-speedgate {__version__}")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        sys.stderr.write(usage() + f"\npython -m speedgate: unknown command {args[0]!r} (choose from "
                         f"{', '.join(COMMANDS)})\n")
        return 2
    return command.function()(args if command.with_name else args[1:])


if __name__ == "__main__":
    try:
        code = run(sys.argv[1:])
        sys.stdout.flush()  # here, so that a reader gone away is caught below and not at interpreter exit
    except BrokenPipeError:
        # The reader stopped reading (`... | head`): not an error of this tool. Python's own advice: point stdout at
        # devnull, so the flush at exit does not fail again, and end as a program killed by SIGPIPE would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 128 + getattr(signal, "SIGPIPE", 13)
    sys.exit(code)
