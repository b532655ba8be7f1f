"""A pytest plugin of the lab's device scripts: each test's start and end (wall clock, seconds since the epoch) and
nodeid appended to the file named by $SPEEDGATE_LAB_CLOCK, one tab-separated line per test, so that a host sampler's
readings (host_sampler.sh) can be matched to the test that ran under them. Loaded as `-p clock_plugin` with this
folder on PYTHONPATH (a top-level module: importing the lab package would settle the toolchain itself)."""

from __future__ import annotations

import os
import time

_started: dict[str, float] = {}


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _started[nodeid] = time.time()


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    path = os.environ.get("SPEEDGATE_LAB_CLOCK")
    if path:
        with open(path, "a") as f:
            f.write(f"{_started.pop(nodeid, float('nan')):.3f}\t{time.time():.3f}\t{nodeid}\n")
