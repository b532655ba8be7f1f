"""speedgate.interrupts: while a run's end writes what finished, one Ctrl-C is noted (and said) instead of raised, the
next raises as usual, and the previous handler is back after stop(). Real signals, sent to this process."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from speedgate.interrupts import NOTED, Deferred

pytestmark = pytest.mark.timing  # signals: tests/conftest.py


def sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_one_ctrl_c_is_noted_and_said_not_raised() -> None:
    said: list[str] = []
    before = signal.getsignal(signal.SIGINT)
    deferred = Deferred(said.append).start()
    try:
        assert not deferred.is_set()
        sigint()
        assert deferred.is_set() and deferred.count == 1
    finally:
        deferred.stop()
    deferred.stop()  # once only: a second stop changes nothing
    assert said == [NOTED] == ["speedgate: Ctrl-C: writing what finished first (once more to stop at once)"]
    assert signal.getsignal(signal.SIGINT) is before


def test_the_next_ctrl_c_stops_it_at_once_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGINT)
    deferred = Deferred().start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sigint()
            sigint()
            pytest.fail("not reached: the second Ctrl-C raises")  # pragma: no cover
    finally:
        deferred.stop()
    assert deferred.count == 2 and signal.getsignal(signal.SIGINT) is before
    with pytest.raises(KeyboardInterrupt):  # Python's own handling again
        sigint()


def test_off_the_main_thread_nothing_is_changed() -> None:
    seen: list[object] = []

    def run() -> None:
        deferred = Deferred().start()
        seen.append(deferred.is_set())
        seen.append(signal.getsignal(signal.SIGINT))
        deferred.stop()

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [False, before]
