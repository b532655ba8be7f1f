"""speedgate.interrupts: while a run's end writes what finished, one Ctrl-C is noted (and said) instead of raised, the
next raises as usual, and the previous handler is back after. Real signals, sent to this process."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from speedgate.interrupts import deferred_interrupts

pytestmark = pytest.mark.timing  # signals: tests/conftest.py


def sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_one_ctrl_c_is_noted_and_said_not_raised() -> None:
    said: list[str] = []
    before = signal.getsignal(signal.SIGINT)
    with deferred_interrupts(said.append) as pending:
        assert not pending.is_set()
        sigint()
        assert pending.is_set() and pending.count == 1
    assert said == ["speedgate: Ctrl-C: writing what finished first (once more to stop at once)"]
    assert signal.getsignal(signal.SIGINT) is before


def test_the_next_ctrl_c_stops_it_at_once_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), deferred_interrupts() as pending:
        sigint()
        sigint()
        pytest.fail("not reached: the second Ctrl-C raises")  # pragma: no cover
    assert pending.count == 2 and signal.getsignal(signal.SIGINT) is before
    with pytest.raises(KeyboardInterrupt):  # Python's own handling again
        sigint()


def test_off_the_main_thread_nothing_is_changed() -> None:
    seen: list[object] = []

    def run() -> None:
        with deferred_interrupts() as pending:
            seen.append(pending.is_set())
            seen.append(signal.getsignal(signal.SIGINT))

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [False, before]
