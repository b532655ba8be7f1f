"""CUDA faults inside a case: the classifier on torch's own error types and texts, the serial "not run", the xdist
worker that ends after a sticky error (and its results that still arrive), out-of-memory cleanup, hang timeouts."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from conftest import CASES
from speedgate.faults import FaultKind, FaultWatch, WorkerCrashes, classify, classify_text, timeout_setting
from speedgate.fixture import CaseError


def torch_cuda_error(text: str, name: str) -> str:
    """A CUDA error as torch 2.x prints it (c10/cuda/CUDAException.cpp: the error string, then its cudaError name)."""
    return (f"CUDA error: {text}\nSearch for `{name}' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
            "group__CUDART__TYPES.html for more information.\nCUDA kernel errors might be asynchronously reported at "
            "some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing "
            "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")


ILLEGAL_ADDRESS = torch_cuda_error("an illegal memory access was encountered", "cudaErrorIllegalAddress")
OOM_TEXT = ("CUDA out of memory. Tried to allocate 10.00 TiB. GPU 0 has a total capacity of 79.19 GiB of which "
            "78.61 GiB is free. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by "
            "PyTorch but unallocated.")


@pytest.mark.parametrize(
    "text, name",
    [
        ("an illegal memory access was encountered", "cudaErrorIllegalAddress"),
        ("an illegal instruction was encountered", "cudaErrorIllegalInstruction"),
        ("misaligned address", "cudaErrorMisalignedAddress"),
        ("unspecified launch failure", "cudaErrorLaunchFailure"),
        ("device-side assert triggered", "cudaErrorAssert"),
    ],
)
def test_sticky_cuda_errors_poison_the_context(text: str, name: str) -> None:
    fault = classify(torch.AcceleratorError(torch_cuda_error(text, name)))
    assert fault is not None and fault.kind is FaultKind.POISONED
    assert fault.error == f"AcceleratorError: CUDA error: {text}"  # the first line, named by its type


def test_triton_driver_errors_and_wrapped_errors_are_seen() -> None:
    assert classify_text("Triton Error [CUDA]: an illegal memory access was encountered") is FaultKind.POISONED
    assert classify_text("cudaErrorLaunchFailure") is FaultKind.POISONED
    # perf.compare wraps what a callable raised in a CaseError; the cause is what counts.
    try:
        try:
            raise torch.AcceleratorError(ILLEGAL_ADDRESS)
        except RuntimeError as exc:
            raise CaseError("speedgate: t: the optimized callable raised AcceleratorError: ...") from exc
    except CaseError as wrapped:
        fault = classify(wrapped)
    assert fault is not None and fault.kind is FaultKind.POISONED and fault.error.startswith("AcceleratorError:")


def test_out_of_memory_is_recoverable_not_poison() -> None:
    fault = classify(torch.OutOfMemoryError(OOM_TEXT))
    assert fault is not None and fault.kind is FaultKind.OUT_OF_MEMORY
    assert fault.error.startswith("OutOfMemoryError: CUDA out of memory. Tried to allocate 10.00 TiB")
    raw = classify(torch.AcceleratorError(torch_cuda_error("out of memory", "cudaErrorMemoryAllocation")))
    assert raw is not None and raw.kind is FaultKind.OUT_OF_MEMORY


@pytest.mark.parametrize(
    "exc",
    [
        AssertionError(f"rank 1 failed:\n{ILLEGAL_ADDRESS}"),  # another process's error, quoted (a RankError)
        RuntimeError(torch_cuda_error("too many resources requested for launch", "cudaErrorLaunchOutOfResources")),
        ValueError("shapes differ"),
        None,
    ],
)
def test_other_errors_are_not_faults(exc: BaseException | None) -> None:
    assert classify(exc) is None


def test_the_first_culprit_is_kept_and_named() -> None:
    watch = FaultWatch()
    for nodeid in ("t.py::test_oob", "t.py::test_next"):
        rep = SimpleNamespace(when="call", failed=True, sections=[])
        watch.after_report(nodeid, rep, SimpleNamespace(value=torch.AcceleratorError(ILLEGAL_ADDRESS)))
    message = watch.not_run()
    assert message is not None and "poisoned by t.py::test_oob (AcceleratorError: CUDA error: an illegal" in message
    assert "-n 1" in message


def crash_report(nodeid: str) -> Any:
    """The report xdist's handle_crashitem makes for the test a dead worker was running."""
    return SimpleNamespace(nodeid=nodeid, outcome="failed", when="???", sections=[],
                           longrepr=f"worker 'gw0' crashed while running {nodeid!r}")


def test_a_worker_ended_on_purpose_is_not_counted_twice() -> None:
    crashes = WorkerCrashes()
    marked = SimpleNamespace(nodeid="t.py::test_oob", item_index=3, worker_id="gw0", speedgate_payload='{"x": 1}',
                             speedgate_fault={"kind": "poisoned", "error": "AcceleratorError: CUDA error: ..."})
    assert crashes.note_report(marked) == '{"x": 1}'
    assert crashes.note_report(SimpleNamespace(nodeid="t.py::test_a")) is None
    report = crash_report("t.py::test_oob")
    crashes.explain("t.py::test_oob", report, timeout_s=None)
    assert (report.outcome, report.when, report.longrepr) == ("passed", "teardown", None)  # closes the test's entry
    assert (report.item_index, report.worker_id) == (3, "gw0")


def test_a_worker_that_died_past_the_timeout_says_so() -> None:
    crashes = WorkerCrashes()
    crashes.started["t.py::test_hang"] = 0.0  # started long ago (time.monotonic() is far past 0 by now)
    report = crash_report("t.py::test_hang")
    crashes.explain("t.py::test_hang", report, timeout_s=2.0)
    assert report.outcome == "failed" and "crashed while running 't.py::test_hang'" in report.longrepr
    assert "past pytest-timeout's per-test limit of 2 s" in report.longrepr
    other = crash_report("t.py::test_segv")  # a crash without a known start or timeout is left as xdist wrote it
    crashes.explain("t.py::test_segv", other, timeout_s=2.0)
    assert other.longrepr == "worker 'gw0' crashed while running 't.py::test_segv'"


def test_timeout_setting_follows_pytest_timeout_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    def config(option: Any, ini: Any, installed: bool = True) -> Any:
        return SimpleNamespace(pluginmanager=SimpleNamespace(hasplugin=lambda name: installed),
                               getoption=lambda name, default=None: option, getini=lambda name: ini)

    monkeypatch.delenv("PYTEST_TIMEOUT", raising=False)
    assert timeout_setting(config(30.0, "600")) == 30.0
    assert timeout_setting(config(None, "600")) == 600.0
    monkeypatch.setenv("PYTEST_TIMEOUT", "90")
    assert timeout_setting(config(None, "600")) == 90.0
    assert timeout_setting(config(None, "600", installed=False)) is None
    monkeypatch.delenv("PYTEST_TIMEOUT")
    assert timeout_setting(config(None, "")) is None


FAULTS = f"""
import sys
import weakref
import torch

ILLEGAL_ADDRESS = {ILLEGAL_ADDRESS!r}

def test_first(perf):
    perf.compare(ref_2ms, opt_1ms)

def test_rank_error(perf):
    raise AssertionError("rank 1 failed: " + ILLEGAL_ADDRESS)  # another process's context: nothing to do here

def test_oob(perf):
    raise torch.AcceleratorError(ILLEGAL_ADDRESS)

def test_after(perf):
    perf.compare(ref_2ms, opt_500us)

def test_plain():
    pass
"""


def test_serial_run_reports_later_perf_cases_as_not_run_naming_the_culprit(project: pytest.Pytester) -> None:
    project.makepyfile(test_cases=CASES + FAULTS)
    result = project.runpytest("-p", "no:randomly")
    # test_after fails at setup (an error, never a skip: skips are routine on CPU and would hide it); test_plain,
    # which does not use perf, still runs.
    result.assert_outcomes(passed=2, failed=2, errors=1)
    result.stdout.fnmatch_lines([
        "*ERROR at setup of test_after*",
        "not run: the CUDA context of this process was poisoned by test_cases.py::test_oob (AcceleratorError: "
        "CUDA error: an illegal memory access was encountered)*-n 1*",
    ])
    result.stdout.fnmatch_lines(["*- speedgate -*", "*illegal memory access*the later cases that use perf are not run*"])


def test_an_asynchronous_fault_fails_the_test_that_queued_it(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # As on the GPU: the kernel's illegal access surfaces at the next synchronize, which the plugin does after the body.
    def synchronize() -> None:
        raise torch.AcceleratorError(ILLEGAL_ADDRESS)

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    project.makepyfile(test_cases="def test_launches(perf):\n    pass\n\ndef test_next(perf):\n    pass\n")
    result = project.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines(["not run: the CUDA context * poisoned by test_cases.py::test_launches (AcceleratorError: *"])


@pytest.mark.timing
def test_xdist_replaces_the_worker_after_a_sticky_error_and_keeps_its_results(project: pytest.Pytester) -> None:
    project.makepyfile(test_cases=CASES + FAULTS)
    result = project.runpytest_subprocess("-n", "1", "-p", "no:randomly", "--update-baselines", "--junitxml", "j.xml")
    # Counted once: xdist's crash report of test_oob becomes its (passed) teardown report.
    result.assert_outcomes(passed=3, failed=2)
    output = result.stdout.str() + result.stderr.str()
    assert output.count("replacing crashed worker") == 1  # only the sticky error ends a worker, not the rank error
    assert "speedgate: ending xdist worker gw0: test_cases.py::test_oob poisoned its CUDA context" in output
    result.stdout.fnmatch_lines(["*xdist worker gw0 ends after this test*"])
    assert "crashed while running" not in result.stdout.str()
    assert (project.path / "j.xml").read_text().count("<testcase ") == 5  # one entry per test, none doubled
    # test_first ran in the worker that ended: its result rode on test_oob's report and was blessed.
    cases = json.loads((project.path / "baselines" / "test-box.json").read_text())["cases"]
    assert set(cases) == {"test_cases.py::test_first", "test_cases.py::test_after"}


def test_out_of_memory_frees_the_failed_test_before_the_next_starts(project: pytest.Pytester) -> None:
    project.makepyfile(test_oom=f"""
import sys
import weakref
import pytest
import torch

HELD = []

class Block:
    pass

def test_oom(perf):
    block = Block()  # what a test holds when it runs out of memory: kept alive by pytest's sys.last_traceback
    HELD.append(weakref.ref(block))
    raise torch.OutOfMemoryError({OOM_TEXT!r})

@pytest.fixture
def freed():
    return HELD[0]() is None and not hasattr(sys, "last_value")  # read at setup, before the next call clears sys.last_*

def test_next(perf, freed):
    assert freed
""")
    # A subprocess: an in-process run's hook recorder keeps every CallInfo, and so the failed test's frames.
    result = project.runpytest_subprocess("-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*OutOfMemoryError: CUDA out of memory*", "*- speedgate -*", "*CUDA cache is emptied*"])


@pytest.mark.timing
def test_a_hang_under_xdist_is_ended_by_pytest_timeout_and_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_hang="""
import time

def test_hang():
    time.sleep(60)  # stands for a kernel that never finishes: a blocked synchronize, which no signal interrupts

def test_next():
    pass
""")
    result = pytester.runpytest_subprocess("-n", "1", "-p", "no:randomly", "--timeout", "2", "--timeout-method", "thread")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*worker 'gw0' crashed while running 'test_hang.py::test_hang'",
        "speedgate: it ran * s, past pytest-timeout's per-test limit of 2 s: the case hung*",
    ])


def test_release_is_safe_without_cuda() -> None:
    from speedgate.faults import release_cuda_memory, synchronize_cuda

    sys.last_value = ValueError("x")
    release_cuda_memory()
    synchronize_cuda()  # CUDA never started on this machine: both are no-ops for the GPU
    assert not hasattr(sys, "last_value")
