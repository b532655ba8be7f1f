"""Correctness-only and interpreter modes, xdist, pytest-benchmark alongside, real timing, import cost."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import CASES, write_baseline


def test_correctness_only_times_nothing_but_still_checks(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_cases=CASES
        + """
def bad():
    return 2.0

def test_ok(perf):
    r = perf.compare(ref_2ms, opt_1ms)
    assert r.timed is False and r.speedup is None and r.verdict == "untimed"

def test_bad(perf):
    perf.compare(ref_2ms, bad)
"""
    )
    write_baseline(project.path, {"test_cases.py::test_ok": 50.0})  # would regress if timed
    result = project.runpytest("--correctness-only")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_bad: optimized output differs from reference*2.0 vs expected 1.0*"])
    result.stdout.fnmatch_lines(["*test_cases.py::test_ok*-*-*untimed"])


def test_interpreter_disables_timing(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    project.makepyfile(test_cases=CASES + "\ndef test_ok(perf):\n    r = perf.compare(ref_2ms, opt_1ms)\n    assert not r.timed\n    assert 'interpreter' in r.note\n")
    project.runpytest().assert_outcomes(passed=1)


def test_xdist_results_reach_the_controller_which_alone_writes(project: pytest.Pytester) -> None:
    body = "".join(f"\ndef test_{i}(perf):\n    perf.compare(ref_2ms, opt_1ms)\n" for i in range(6))
    project.makepyfile(test_cases=CASES + body)
    write_baseline(project.path, {"test_cases.py::test_0": 2.0, "kept.py::test_x": 3.0})
    result = project.runpytest_subprocess("-n", "2", "--update-baselines", "--speedgate-json", "r.json")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*baselines/test-box.json: 5 added, 0 updated, 1 kept*1 other entries untouched*"])
    cases = json.loads((project.path / "baselines" / "test-box.json").read_text())["cases"]
    assert set(cases) == {f"test_cases.py::test_{i}" for i in range(6)} | {"kept.py::test_x"}
    report = json.loads((project.path / "r.json").read_text())
    assert len(report["cases"]) == 6
    # A regression found in a worker fails that test, and the controller shows it in the table.
    write_baseline(project.path, {f"test_cases.py::test_{i}": 2.0 if i else 4.0 for i in range(6)})
    gate = project.runpytest_subprocess("-n", "2")
    gate.assert_outcomes(passed=5, failed=1)
    gate.stdout.fnmatch_lines(["*test_cases.py::test_0*2.000x*4.000x*-50.0%*regressed*"])


@pytest.mark.parametrize("inside", ["", "gw1"], ids=["top", "inside-a-worker"])
def test_xdist_workers_get_their_own_gpu_or_take_turns(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                       inside: str) -> None:
    """inside: the run starts from a test of another run's xdist worker, whose PYTEST_XDIST_* variables it inherits;
    its controller once took itself for that worker and pinned itself to one GPU, so its own workers shared it."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    for name, value in (("PYTEST_XDIST_WORKER", inside), ("PYTEST_XDIST_WORKER_COUNT", "2")):
        if inside:
            monkeypatch.setenv(name, value)
        else:
            monkeypatch.delenv(name, raising=False)  # this suite may itself run under xdist
    project.makepyfile(
        test_cases=CASES
        + """
import os
from speedgate.devices import worker_from_env
def test_env(request):
    assignment = request.config.stash[__import__("speedgate.plugin").plugin.ASSIGNMENT_KEY]
    index, count = worker_from_env()
    print("ASSIGN", index, count, os.environ.get("CUDA_VISIBLE_DEVICES"), assignment.device, assignment.shared)
    assert assignment.device == ["5", "7"][index % 2]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == assignment.device
    assert assignment.shared is (count > 2)
"""
        + "".join(f"\ndef test_{i}(perf):\n    perf.compare(ref_2ms, opt_1ms)\n" for i in range(4))
    )
    # An outer mask of two GPUs: each of two workers gets one; three workers must share.
    for workers, summary in (("2", "xdist workers: gw0 on GPU 5, gw1 on GPU 7"),
                             ("3", "xdist workers: gw0 on GPU 5, gw1 on GPU 7, gw2 on GPU 5; devices shared*")):
        result = project.runpytest_subprocess("-n", workers, "-s", "-p", "no:randomly", "--speedgate-pin-workers")
        result.assert_outcomes(passed=5)
        result.stdout.fnmatch_lines([summary])


@pytest.mark.timing
def test_workers_sharing_a_device_take_turns_whole_tests(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU: both workers share the CPU
    monkeypatch.setenv("TMPDIR", str(project.mkdir("tmp")))  # this test's own lock folder, not the machine's
    log = project.path / "intervals.txt"
    project.makepyfile(
        test_cases=CASES
        + f"""
import time
def _run(perf):
    start = time.time()
    time.sleep(0.15)
    perf.compare(ref_2ms, opt_1ms)
    with open({str(log)!r}, "a") as f:
        f.write(f"{{start}} {{time.time()}}\\n")
"""
        + "".join(f"\ndef test_{i}(perf):\n    _run(perf)\n" for i in range(6))
    )
    project.runpytest_subprocess("-n", "2").assert_outcomes(passed=6)
    intervals = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    assert len(intervals) == 6
    for (_, end), (start, _) in zip(intervals, intervals[1:]):
        assert start >= end - 0.01, "two workers sharing one device ran tests at the same time"


@pytest.mark.timing
def test_device_lock_excludes_other_holders(tmp_path) -> None:
    import threading
    import time

    from speedgate.devices import DeviceLock

    inside = []
    overlap = []

    def worker() -> None:
        lock = DeviceLock("gpu0", tmp_path)
        lock.acquire()
        inside.append(1)
        overlap.append(len(inside))
        time.sleep(0.05)
        inside.pop()
        lock.release()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap == [1, 1, 1, 1]


def test_pytest_benchmark_keeps_working(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest-benchmark takes any run with PYTEST_XDIST_WORKER set for an xdist worker, and writes no JSON there: under
    # `-n`, this in-process run would inherit the outer worker's.
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    project.makepyfile(
        test_cases=CASES
        + """
def test_both(perf, benchmark):
    perf.compare(ref_2ms, opt_1ms)
    assert benchmark(sum, range(100)) == 4950
"""
    )
    result = project.runpytest("--benchmark-json", "bench.json")
    result.assert_outcomes(passed=1)
    bench = json.loads((project.path / "bench.json").read_text())
    assert bench["benchmarks"][0]["name"] == "test_both"


@pytest.mark.timing
def test_real_timing_catches_a_slowed_optimized_side(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end with the host clock: bless a 4x speedup, then make the optimized side 6x slower."""
    pytester.makeini("[pytest]\naddopts = --hardware-key real-clock -p no:cacheprovider --speedgate-timer cpu\n")
    pytester.makepyfile(
        test_real="""
import os

def work(n):
    total = 0
    for i in range(n):
        total += i * i
    return total

def reference():
    return work(40_000)

def optimized():
    for _ in range(int(os.environ.get("SLOWDOWN", "1"))):
        work(10_000)

def test_speedup(perf):
    perf.compare(reference, optimized, check=False)
"""
    )
    bless = pytester.runpytest_subprocess("--update-baselines")
    bless.assert_outcomes(passed=1)
    path = pytester.path / "baselines" / "real-clock.json"
    speedup = json.loads(path.read_text())["cases"]["test_real.py::test_speedup"]["speedup"]
    assert 2.5 < speedup < 6.0
    blessed = path.read_text()
    monkeypatch.setenv("SLOWDOWN", "6")
    slowed = pytester.runpytest_subprocess()
    assert slowed.ret == pytest.ExitCode.TESTS_FAILED
    slowed.assert_outcomes(failed=1)
    slowed.stdout.fnmatch_lines(["*test_speedup: speedup regressed*", "*regressed, re-measured*"])
    assert path.read_text() == blessed


def test_plugin_import_does_not_import_torch_triton_or_pynvml() -> None:
    code = (
        "import sys, speedgate.plugin, speedgate.session, speedgate.fixture\n"
        "bad = [m for m in ('torch', 'triton', 'pynvml', 'jsonschema', 'numpy') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_comparing_plain_python_sides_imports_no_torch(project: pytest.Pytester) -> None:
    """Sides that return Python values have no tensor to poison or compare: the run never imports torch. (It did, for
    the poison, and each of this suite's pytest subprocesses spent 1.5 s of CPU on it: a third of CI's time.)"""
    project.makeconftest(project.path.joinpath("conftest.py").read_text() + """
def pytest_unconfigure(config):
    import sys
    print("torch imported:", "torch" in sys.modules)
""")
    project.makepyfile(test_cases=CASES + "\ndef test_a(perf):\n    perf.compare(ref_2ms, opt_1ms)\n")
    result = project.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["torch imported: False"])


def test_perf_policy_follows_the_options(project: pytest.Pytester) -> None:
    """--speedgate-budget and --speedgate-noise reach perf.policy, which multi-process cases hand to their ranks."""
    project.makepyfile(test_policy="def test_p(perf):\n    assert perf.policy.budget_s == 0.5\n"
                                   "    assert perf.policy.target_rel_halfwidth == 0.02\n")
    project.runpytest("--speedgate-budget", "0.5", "--speedgate-noise", "0.02").assert_outcomes(passed=1)
