"""A scripted timer for testing gates without real clocks: each callable's times come from a table; and an xdist
worker as a scheduler sees it, for driving a scheduler without processes."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from .timers import Fn, Timer


class ScriptedTimer(Timer):
    """Times by the callable's __name__: a number (always that), or a list of numbers taken in turn.

    The callables still run (so outputs and errors are real); only the clock is replaced. Override the
    `speedgate_timer` fixture to return one.
    """

    name = "scripted"

    def __init__(self, times: Mapping[str, float | Sequence[float]],
                 profiles: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        # profiles: what profile_calls reports per callable name ({"events_ms", "busy_ms", "all_streams_ms"}), to
        # test the audits that read the profiler's view on the CPU; without it the timer has no profiler.
        self._profiles = dict(profiles or {})
        self.can_profile = bool(self._profiles)
        self._cycles: dict[str, Any] = {}
        for fn_name, value in times.items():
            values: Iterable[float] = [value] if isinstance(value, (int, float)) else list(value)
            self._cycles[fn_name] = itertools.cycle(values)

    def _time(self, fn: Fn) -> float:
        inner = getattr(fn, "__wrapped__", fn)
        fn_name = getattr(inner, "__name__", repr(inner))
        if fn_name not in self._cycles:
            raise KeyError(f"ScriptedTimer has no times for callable {fn_name!r}")
        return float(next(self._cycles[fn_name]))

    def first_call(self, fn: Fn) -> tuple[float, Any]:
        return self._time(fn), fn()

    def time_each(self, fns: Sequence[Fn]) -> list[float]:
        out = []
        for fn in fns:
            fn()
            out.append(self._time(fn))
        return out

    def profile_calls(self, fn: Fn, calls: int = 10) -> dict[str, Any]:
        for _ in range(calls):
            fn()
        inner = getattr(fn, "__wrapped__", fn)
        return dict(self._profiles[getattr(inner, "__name__", repr(inner))])

    def describe(self) -> str:
        return "scripted times (tests only)"


class ScriptedWorker:
    """What an xdist scheduler asks of a worker (gateway.id, shutting_down, send_runtest_some, shutdown): the indices
    of the collection's tests sent to it, in order, in `queue`; running them is the caller's."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.queue: list[int] = []

    def send_runtest_some(self, indices: Sequence[int]) -> None:
        self.queue.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True
