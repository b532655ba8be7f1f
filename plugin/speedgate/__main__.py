"""`python -m speedgate ...`: command-line tools (compare, history, evidence)."""

from __future__ import annotations

import os
import signal
import sys

from .compare import main


def run() -> int:
    if sys.argv[1:2] == ["history"]:
        from .history.cli import main as history_main

        return history_main(sys.argv[2:])
    if sys.argv[1:2] == ["study"]:
        from .study import main as study_main

        return study_main(sys.argv[2:])
    if sys.argv[1:2] == ["evidence"]:
        from .evidence_cli import main as evidence_main

        return evidence_main(sys.argv[2:])
    return main()


try:
    code = run()
    sys.stdout.flush()  # here, so that a reader gone away is caught below and not at interpreter exit
except BrokenPipeError:
    # The reader stopped reading (`... | head`): not an error of this tool. Python's own advice: point stdout at
    # devnull, so the flush at exit does not fail again, and end as a program killed by SIGPIPE would.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = 128 + getattr(signal, "SIGPIPE", 13)
sys.exit(code)
