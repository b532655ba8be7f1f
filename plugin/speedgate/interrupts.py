"""Ctrl-C while speedgate writes what an interrupted run measured.

After a first Ctrl-C, a run's end waits for xdist workers' closing reports, absorbs them and blesses what finished:
a second Ctrl-C, the one a person presses when the first did not stop the run at once, raised KeyboardInterrupt
inside that work and lost every finished measurement without a word; pressed a moment later, inside xdist's own
teardown of its workers (up to 10 s), it cut the summary that says what was blessed. From the start of speedgate's
end to pytest's unconfigure, a Ctrl-C is noted instead: the end stops waiting for workers (Deferred.is_set), writes
what it has and the run ends with its summary. One more stops it at once: the baseline file is written whole or not
at all (speedgate.baseline.write_atomic), so that one loses only what was not yet written. Only on the main thread,
where Python delivers signals.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

NOTED = "speedgate: Ctrl-C: writing what finished first (once more to stop at once)"


class Deferred:
    """The Ctrl-Cs noted between start() and stop(); say: where the first one is said."""

    def __init__(self, say: Callable[[str], None] | None = None) -> None:
        self.count = 0
        self._say = say
        self._previous: Any = None
        self._installed = False

    def is_set(self) -> bool:
        return self.count > 0

    def start(self) -> Deferred:
        """From now on the first Ctrl-C is noted (and said) rather than raised; a second one raises KeyboardInterrupt
        as usual. Nothing changes off the main thread."""
        if not self._installed and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._note)
            self._installed = True
        return self

    def stop(self) -> None:
        """The handler that was there before start(), back (once; a no-op when start() changed nothing)."""
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt
        if self._say is not None:
            self._say(NOTED)


__all__ = ["NOTED", "Deferred"]
