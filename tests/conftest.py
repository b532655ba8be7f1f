"""Shared helpers for speedgate's own tests (pytester, CPU only)."""

from __future__ import annotations

import importlib
import json
import pkgutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

# Imported here, once, so that pytester's in-process runs find torch already loaded: pytester drops the
# modules a run imported, and importing torch a second time in one process crashes it.
import torch  # noqa: F401
import triton  # noqa: F401  (likewise)

# And matplotlib's pyplot and Agg backend where the chart extra is installed: an in-process run with --speedgate-chart
# imported them and they were dropped after it, while matplotlib and what an earlier test had imported of it
# (matplotlib.image) stayed; the next chart then mixed two copies of matplotlib's classes ("Single argument to
# subplot must be a three-digit integer, not GridSpec(...)"), failing or not by which tests its worker ran before.
try:
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.pyplot  # noqa: F401
except ImportError:
    pass

# And every speedgate module, for the same reason: a module a pytester run imported lazily (verdict, gate, ...) is
# dropped after it and imported anew by the next run, while the modules the outer run loaded stay; two copies of one
# enum then compare unequal by identity (Verdict.REGRESSED is not Verdict.REGRESSED), and a regression passes.
# Which modules the outer run loads changed with pytest 9.2; loading them all here makes it not matter.
import speedgate  # noqa: E402

for _module in pkgutil.iter_modules(speedgate.__path__):
    if _module.name == "__main__":
        continue
    importlib.import_module(f"speedgate.{_module.name}")

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    # What `-m timing` selects: the tests a loaded machine or a background job could break. They hold 20 runs in a
    # row beside three busy loops with SIGINT ignored (docs/ci.md); a new test of the kind carries the marker.
    config.addinivalue_line("markers", "timing: sends signals, or depends on deadlines, locks between processes or "
                                       "wall-clock time")

# A conftest for pytester projects: a scripted clock, so verdicts do not depend on this machine's speed.
SCRIPTED_CONFTEST = """
import os
import pytest
from speedgate.testing import ScriptedTimer

TIMES = {times!r}

@pytest.fixture
def speedgate_timer():
    return ScriptedTimer(TIMES)
"""

# Callables named after their scripted times.
CASES = """
def ref_2ms():
    return 1.0

def opt_1ms():
    return 1.0

def opt_2ms():
    return 1.0

def opt_500us():
    return 1.0
"""

DEFAULT_TIMES = {"ref_2ms": 2.0, "opt_1ms": 1.0, "opt_2ms": 2.0, "opt_500us": 0.5}


@pytest.fixture(autouse=True)
def _own_tmpdir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's subprocesses and in-process runs get their own TMPDIR: xdist workers' device lock lives under
    $TMPDIR/speedgate-locks, and a run elsewhere on the machine holding it (another checkout's tests, a CI neighbour,
    or this run's own suite cases, which take turns on the CPU's lock in the worker's $TMPDIR) must not stall these.
    An in-process run reads the folder through tempfile.gettempdir(), which keeps its first answer: cleared, so that
    it reads TMPDIR again (an in-process run's perf cases once waited up to 90 s for this run's compile cases)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path_factory.mktemp("tmpdir")))
    monkeypatch.setattr(tempfile, "tempdir", None)


@pytest.fixture(autouse=True)
def _timed_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """The root conftest switches the Triton interpreter on for CPU-only machines, which turns timing off;
    these tests time scripted or plain-Python callables and decide that per test."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester project with a scripted clock and a fixed hardware key."""
    pytester.makeconftest(SCRIPTED_CONFTEST.format(times=DEFAULT_TIMES))
    pytester.makeini("[pytest]\naddopts = --hardware-key test-box -p no:cacheprovider\n")
    return pytester


def baseline_doc(cases: dict[str, float], key: str = "test-box") -> dict[str, Any]:
    """A schema-valid baseline document with the given speedups."""
    return {
        "schema_version": 1,
        "hardware_key": key,
        "fingerprint": {"hardware": {"kind": "cpu", "name": "test"}, "software": {"torch": "0.0"}},
        "updated_at": "2026-01-01T00:00:00Z",
        "cases": {
            case_id: {
                "speedup": speedup,
                "reference_ms": 2.0,
                "optimized_ms": 2.0 / speedup,
                "ci_low": speedup * 0.99,
                "ci_high": speedup * 1.01,
                "noise": 0.01,
                "rounds": 20,
                "timer": "scripted",
                "measured_at": "2026-01-01T00:00:00Z",
                "software": {"torch": "0.0"},
            }
            for case_id, speedup in cases.items()
        },
    }


# One comparison of two constant functions (its node test_cases.py::test_gemm), for a project whose conftest scripts
# the timer and the kernels each side launched: what the gate then judges is the scripted times and facts alone.
ONE_COMPARISON = """
def reference():
    return 1.0

def optimized():
    return 1.0

def test_gemm(perf):
    perf.compare(reference, optimized, waive={"fixed-inputs": "constants: nothing to cache"})
"""


def entries_doc(cases: dict[str, dict[str, Any]], software: dict[str, Any], key: str = "test-box") -> dict[str, Any]:
    """A baseline document holding the given entries as they are, its fingerprint's software `software`."""
    return {"schema_version": 1, "hardware_key": key,
            "fingerprint": {"hardware": {"kind": "cpu", "name": "x"}, "software": software}, "cases": cases}


def write_entries(root: Path, cases: dict[str, dict[str, Any]], software: dict[str, Any],
                  key: str = "test-box") -> Path:
    """entries_doc written as root/baselines/<key>.json."""
    path = root / "baselines" / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries_doc(cases, software, key)))
    return path


def write_baseline(root: Path, cases: dict[str, float], key: str = "test-box") -> Path:
    path = root / "baselines" / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(baseline_doc(cases, key), indent=2, sort_keys=True) + "\n")
    return path
