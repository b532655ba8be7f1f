"""Ctrl-C while speedgate writes what an interrupted run measured.

After a first Ctrl-C, a run's end waits for xdist workers' closing reports, absorbs them and blesses what finished:
a second Ctrl-C, the one a person presses when the first did not stop the run at once, raised KeyboardInterrupt
inside that work and lost every finished measurement without a word. While speedgate's end runs, a Ctrl-C is noted
instead: the end stops waiting for workers (pending.is_set) and writes what it has. One more stops it at once: the
baseline file is written whole or not at all (speedgate.baseline.write_atomic), so that one loses only what was not
yet written. Only on the main thread, where Python delivers signals.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType


class Pending:
    """The Ctrl-Cs noted while speedgate's end ran."""

    def __init__(self) -> None:
        self.count = 0

    def is_set(self) -> bool:
        return self.count > 0


@contextlib.contextmanager
def deferred_interrupts(say: Callable[[str], None] | None = None) -> Iterator[Pending]:
    """Within the block, the first Ctrl-C is noted (and said) rather than raised; a second one raises
    KeyboardInterrupt as usual. The previous handler is back after the block."""
    pending = Pending()
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return

    def note(signum: int, frame: FrameType | None) -> None:
        pending.count += 1
        if pending.count > 1:
            raise KeyboardInterrupt
        if say is not None:
            say("speedgate: Ctrl-C: writing what finished first (once more to stop at once)")

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield pending
    finally:
        signal.signal(signal.SIGINT, previous)


__all__ = ["Pending", "deferred_interrupts"]
