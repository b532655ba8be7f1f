"""Trust, round 2: a side cannot hand back a result it did not compute on that call.

Each cheat here passed the gate before speedgate poisoned returned memory before every check and refilled inputs= sets
in place during the rounds (issue 29); each must now fail and never be blessed, and each honest control beside it
must pass. The pure parts (the poison, the refill) are tested directly."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from conftest import SCRIPTED_CONFTEST, write_baseline

SIDES = """
import torch

DEVICE = "cpu"
x = torch.arange(1000, dtype=torch.float32, device=DEVICE)

def make(seed):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    return (torch.randn(1000, generator=g, device=DEVICE),)

def ref_args(a):
    return a * 2

memo = {}

def pointer_memo(a):
    # A memo keyed on the input's address: each of the rotated sets is computed once.
    key = a.data_ptr()
    if key not in memo:
        memo[key] = a * 2
    return memo[key]

clone_memo = {}

def pointer_memo_clone(a):
    key = a.data_ptr()
    if key not in clone_memo:
        clone_memo[key] = a * 2
    return clone_memo[key].clone()  # real traffic, but not the work

last = {}

def reference():
    out = x * 2
    last["ref"] = out
    return out

def hands_back_the_reference():
    return last["ref"]

buffer = torch.empty(1000, device=DEVICE)
calls = {"half": 0}

def half_after_first():
    calls["half"] += 1
    n = 1000 if calls["half"] == 1 else 500
    torch.mul(x[:n], 2, out=buffer[:n])
    return buffer

OUT = torch.empty(1000, device=DEVICE)

def writes_out():
    torch.mul(x, 2, out=OUT)

def writes_nothing():
    pass

# Honest controls.
own = torch.empty(1000, device=DEVICE)

def reuses_its_buffer():
    torch.mul(x, 2, out=own)
    return own

own_args = torch.empty(1000, device=DEVICE)

def reuses_its_buffer_args(a):
    torch.mul(a, 2, out=own_args)
    return own_args

wide = torch.empty(2, 1000, device=DEVICE)

def view_of_its_output():
    torch.mul(x, 2, out=wide[0])
    return wide[0]

def make_gather(seed):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    return (torch.randn(1000, generator=g, device=DEVICE), torch.randperm(1000, generator=g, device=DEVICE))

def gather_ref(a, perm):
    return a[perm]

def gather(a, perm):
    return torch.index_select(a, 0, perm)

def identity_ref(a):
    return a.view(-1)

def identity(a):
    return a.view(-1)

def same_every_seed(seed):
    return (torch.ones(1000, device=DEVICE),)
"""

TESTS = SIDES + """
def test_pointer_memo(perf):
    perf.compare(ref_args, pointer_memo, inputs=make)

def test_pointer_memo_clone(perf):
    perf.compare(ref_args, pointer_memo_clone, inputs=make)

def test_hands_back_the_reference(perf):
    perf.compare(reference, hands_back_the_reference)

def test_half_of_a_reused_buffer(perf):
    perf.compare(reference, half_after_first)

def test_outputs_never_written(perf):
    perf.compare(writes_out, writes_nothing, outputs=lambda: OUT)

def test_control_reused_buffer(perf):
    perf.compare(reference, reuses_its_buffer)

def test_control_reused_buffer_on_inputs(perf):
    perf.compare(ref_args, reuses_its_buffer_args, inputs=make)

def test_control_view_of_own_output(perf):
    perf.compare(reference, view_of_its_output)

def test_control_gather_by_permutation(perf):
    perf.compare(gather_ref, gather, inputs=make_gather)

def test_control_returns_a_view_of_its_input(perf):
    perf.compare(identity_ref, identity, inputs=make)
"""

CHEATS = ["pointer_memo", "pointer_memo_clone", "hands_back_the_reference", "half_of_a_reused_buffer",
          "outputs_never_written"]
CONTROLS = ["control_reused_buffer", "control_reused_buffer_on_inputs", "control_view_of_own_output",
            "control_gather_by_permutation", "control_returns_a_view_of_its_input"]
TIMES = {"ref_args": 2.0, "pointer_memo": 0.01, "pointer_memo_clone": 0.5, "reference": 2.0,
         "hands_back_the_reference": 0.01, "half_after_first": 1.0, "writes_out": 2.0, "writes_nothing": 0.01,
         "reuses_its_buffer": 1.0, "reuses_its_buffer_args": 1.0, "view_of_its_output": 1.0, "gather_ref": 2.0,
         "gather": 1.0, "identity_ref": 1.0, "identity": 1.0}


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(SCRIPTED_CONFTEST.format(times=TIMES))
    pytester.makeini("[pytest]\naddopts = --hardware-key test-box -p no:cacheprovider\n")
    pytester.makepyfile(test_sides=TESTS)
    return pytester


def outcomes(result: pytest.RunResult) -> dict[str, str]:
    found = {}
    for line in result.stdout.lines:
        for name in CHEATS + CONTROLS:
            words = line.split()
            if words and words[0] == f"test_sides.py::test_{name}" and len(words) > 1 and words[1] in ("PASSED", "FAILED"):
                found[name] = words[1]
    return found


def test_each_cheat_fails_is_named_and_is_never_blessed(project: pytest.Pytester) -> None:
    result = project.runpytest("--update-baselines", "-v")
    assert outcomes(result) == {**dict.fromkeys(CHEATS, "FAILED"), **dict.fromkeys(CONTROLS, "PASSED")}
    text = result.stdout.str()
    # The memo keyed on addresses: a timed output after the sets were refilled in place (the last call's, or a batch's
    # spot check, which comes first when the rounds run long, as on a loaded machine).
    for name in ("pointer_memo", "pointer_memo_clone"):
        assert re.search(rf"test_sides.py::test_{name}: the optimized side's output (on the last timed call|in batch "
                         r"\d+ of the timed rounds) differs from reference \(computed on the same inputs, after "
                         r"speedgate refilled the input sets in place", text), name
    # Memory it did not write on that call: the reference's tensor, half a reused buffer, an untouched outputs=.
    for name in ("hands_back_the_reference", "half_of_a_reused_buffer", "outputs_never_written"):
        assert f"test_sides.py::test_{name}: optimized output differs from reference" in text, name
    assert "returned memory it did not write on that call: 1000 of 1000 elements" in text  # the reference's tensor
    assert "returned memory it did not write on that call: 500 of 1000 elements" in text  # half the buffer
    blessed = json.loads((project.path / "baselines" / "test-box.json").read_text())["cases"]
    assert set(blessed) == {f"test_sides.py::test_{name}" for name in CONTROLS}


def test_the_gate_fails_them_too(project: pytest.Pytester) -> None:
    project.runpytest("--update-baselines", "-k", "control").assert_outcomes(passed=len(CONTROLS), deselected=len(CHEATS))
    result = project.runpytest("-v")
    assert outcomes(result) == {**dict.fromkeys(CHEATS, "FAILED"), **dict.fromkeys(CONTROLS, "PASSED")}


def test_each_report_says_how_the_verdict_was_established(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SCRIPTED_CONFTEST.format(times={**TIMES, "same_every_seed": 1.0}))
    pytester.makeini("[pytest]\naddopts = --hardware-key test-box -p no:cacheprovider\n")
    pytester.makepyfile(test_sides=SIDES + """
def test_fresh(perf):
    perf.compare(ref_args, reuses_its_buffer_args, inputs=make)

def test_fixed(perf):
    perf.compare(reference, reuses_its_buffer)

def test_unchecked(perf):
    perf.compare(reference, reuses_its_buffer, check=False)

def test_same_data_every_seed(perf):
    perf.compare(ref_args, reuses_its_buffer_args, inputs=same_every_seed)

def test_caller(perf):
    perf.compare_samples(lambda: {"reference_ms": [2.0, 2.0, 2.0], "optimized_ms": [1.0, 1.0, 1.0]})
""")
    result = pytester.runpytest("--speedgate-json", "run.json", "--speedgate-markdown", "run.md")
    result.assert_outcomes(passed=5)
    cases = {c["case_id"].rpartition("::")[2]: c for c in json.loads((pytester.path / "run.json").read_text())["cases"]}
    assert {k: c["established"] for k, c in cases.items()} == {
        "test_fresh": "fresh inputs", "test_fixed": "fixed inputs", "test_unchecked": "unchecked",
        "test_same_data_every_seed": "fixed inputs",  # a refill that changes nothing cannot show a cached result
        "test_caller": "caller"}
    result.stdout.fnmatch_lines(["test_sides.py::test_fresh *fresh inputs*", "test_sides.py::test_fixed *fixed inputs*"])
    assert "| fresh inputs |" in (pytester.path / "run.md").read_text()


def test_strict_fails_fixed_inputs_unless_the_case_says_why(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SCRIPTED_CONFTEST.format(times=TIMES))
    pytester.makeini("[pytest]\naddopts = --hardware-key test-box -p no:cacheprovider\n")
    pytester.makepyfile(test_sides=SIDES + """
def test_fixed(perf):
    perf.compare(reference, reuses_its_buffer)

def test_fixed_with_reason(perf):
    perf.compare(reference, reuses_its_buffer, waive={"fixed-inputs": "the model's state cannot be regenerated"})

def test_fresh(perf):
    perf.compare(ref_args, reuses_its_buffer_args, inputs=make)
""")
    pytester.runpytest("--update-baselines").assert_outcomes(passed=3)
    pytester.runpytest().assert_outcomes(passed=3)  # not strict: fixed inputs are reported, not failed
    result = pytester.runpytest("--speedgate-strict")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_sides.py::test_fixed: strict mode: its correctness was established on fixed "
                                 "inputs*waive={'fixed-inputs': 'why'}*"])
    result.stdout.fnmatch_lines(["*test_fixed_with_reason: waived fixed-inputs: the model's state cannot be regenerated"])


NO_WORK = """
import pytest
import torch
from speedgate.testing import ScriptedTimer

PROFILES = {
    "reference": {"events_ms": 2.0, "busy_ms": 1.9, "all_streams_ms": 1.9},
    "cached": {"events_ms": 0.01, "busy_ms": 0.0, "all_streams_ms": 0.0},
    "kernel": {"events_ms": 1.0, "busy_ms": 0.95, "all_streams_ms": 0.95, "lost": 1},
}

@pytest.fixture
def speedgate_timer():
    return ScriptedTimer({"reference": 2.0, "cached": 0.01, "kernel": 1.0}, profiles=PROFILES)
"""


def test_a_side_that_launched_no_device_work_fails_unless_waived(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(NO_WORK)
    pytester.makeini("[pytest]\naddopts = --hardware-key test-box -p no:cacheprovider\n")
    pytester.makepyfile(test_sides="""
import torch

x = torch.ones(8)

def reference():
    return x * 2

def cached():
    return x * 2  # the profile says it launched nothing

def kernel():
    return x * 2

def test_no_work(perf):
    perf.compare(reference, cached)

def test_no_work_is_the_point(perf):
    perf.compare(reference, cached, waive={"no-device-work": "answers from a table on the host, by design"})

def test_control(perf):
    perf.compare(reference, kernel)

def test_unknown_waiver(perf):
    perf.compare(reference, kernel, waive={"roofline": "trust me"})
""")
    result = pytester.runpytest("--update-baselines", "--speedgate-json", "run.json")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*test_no_work: the optimized side launched no device work in its profiled calls "
                                 "(busy 0 ms a call, against the reference's 1.9 ms)*cached or reused result*"])
    result.stdout.fnmatch_lines(["*waive={'roofline': ...}: not a check a case can waive*"])
    blessed = json.loads((pytester.path / "baselines" / "test-box.json").read_text())["cases"]
    assert set(blessed) == {"test_sides.py::test_no_work_is_the_point", "test_sides.py::test_control"}
    report = {c["case_id"]: c for c in json.loads((pytester.path / "run.json").read_text())["cases"]}
    assert report["test_sides.py::test_no_work_is_the_point"]["waived"] == {
        "no-device-work": "answers from a table on the host, by design"}
    assert report["test_sides.py::test_control"]["optimized_busy_ms"] == 0.95
    # a trace the profiler lost and a retry recorded (timers.cuda.LostTrace) is counted in the comparison's record
    assert report["test_sides.py::test_control"]["traces_lost"] == 1
    assert report["test_sides.py::test_no_work_is_the_point"]["traces_lost"] == 0


# -- the pure parts ------------------------------------------------------------------------------------------------
def test_poison_marks_every_dtype_and_spares_inputs() -> None:
    import torch

    from speedgate.sides import poison, unwritten

    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.complex64, torch.int32,
                  torch.uint8, torch.float8_e4m3fn, torch.float8_e5m2):
        t = torch.zeros(8).to(dtype)
        expected = torch.ones(8).to(dtype)
        assert poison([t[4:]], set()) == 1
        assert unwritten(t, expected) == (4, 8), dtype
    computed_nan = torch.tensor([1.0, float("nan")])
    assert unwritten(computed_nan, torch.ones(2)) == (0, 2)  # a NaN the call computed is not the poison
    data = torch.ones(8)
    view = data[2:]
    assert poison([view], {view.untyped_storage().data_ptr()}) == 0  # a view of an input: spared
    assert bool((data == 1).all())


def test_refill_keeps_the_tensors_and_changes_their_contents() -> None:
    import torch

    from speedgate.sides import CaseError, InputSets

    def make(seed: int) -> tuple[Any, ...]:
        g = torch.Generator().manual_seed(seed)
        return torch.randn(16, generator=g), torch.randperm(16, generator=g), 3

    sets = InputSets(make, "case")
    before = [(a.data_ptr(), a.clone(), p.data_ptr()) for a, p, _ in sets.sets]
    sets.refresh()
    for (a, p, k), (a_ptr, a_old, p_ptr) in zip(sets.sets, before):
        assert a.data_ptr() == a_ptr and p.data_ptr() == p_ptr and k == 3
        assert not torch.equal(a, a_old)
        assert sorted(p.tolist()) == list(range(16))  # still a permutation: the new contents come from make
    assert sets.distinct and sets.refreshes == 1
    bad = InputSets(lambda seed: (torch.zeros(16 + (seed > 2)),), "case")
    with pytest.raises(CaseError, match="every seed must make the same shapes"):
        bad.refresh()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


GPU_EXTRA = """
precomputed = x * 2

def cached_unchecked():
    return precomputed

def test_unchecked_cached(perf):
    perf.compare(reference, cached_unchecked, check=False)

def test_control_no_work_waived(perf):
    perf.compare(reference, cached_unchecked, check=False, waive={"no-device-work": "a test of the waiver"})
"""


@pytest.mark.skipif(not _cuda(), reason="the GPU run of the cheats needs CUDA: real timing, the profiler's device view")
def test_gpu_cheats_fail_and_controls_pass(pytester: pytest.Pytester) -> None:
    """The same cheats and controls on the GPU with the real timer (CUDA events, L2 flush, hold, profiler), and an
    unchecked side that does no device work at all: only the no-device-work audit can see it."""
    pytester.makeini("[pytest]\naddopts = --hardware-key gpu-trust -p no:cacheprovider\n")
    gpu = TESTS.replace('DEVICE = "cpu"', 'DEVICE = "cuda"').replace("1000", str(1 << 22)) + GPU_EXTRA
    pytester.makepyfile(test_sides=gpu)
    bless = pytester.runpytest_subprocess("--update-baselines", "-v", "--speedgate-json", "bless.json")
    found = outcomes(bless)
    assert found == {**dict.fromkeys(CHEATS, "FAILED"), **dict.fromkeys(CONTROLS, "PASSED")}, bless.stdout.str()
    bless.stdout.fnmatch_lines(["*test_unchecked_cached: the optimized side launched no device work*"])
    blessed = json.loads((pytester.path / "baselines" / "gpu-trust.json").read_text())["cases"]
    assert set(blessed) == {f"test_sides.py::test_{name}" for name in [*CONTROLS, "control_no_work_waived"]}
    gate = pytester.runpytest_subprocess("-v")
    assert outcomes(gate) == found


DRIFTING_CONFTEST = """
import pytest
from speedgate.testing import ScriptedTimer


class Drifting(ScriptedTimer):
    # In the rounds' batches (more than one pair; warm-up times one pair at a time): 'settles' runs its first 12
    # rounds at the full clock and then at the capped one; 'never' gets 3% slower every round, for 400 rounds.
    def __init__(self):
        super().__init__({"reference": 1.0, "settles": 1.2, "never": 1.0})
        self.rounds = {"settles": 0, "never": 0}

    def time_each(self, fns):
        times = super().time_each(fns)
        if len(fns) > 2:
            for i, fn in enumerate(fns):
                name = getattr(getattr(fn, "__wrapped__", fn), "__name__", "")
                if name in self.rounds:
                    k = self.rounds[name]
                    self.rounds[name] += 1
                    times[i] = (1.0 if k < 12 else 1.2) if name == "settles" else 1.03 ** min(k, 400)
        return times


@pytest.fixture
def speedgate_timer():
    return Drifting()
"""


def clock_project(pytester: pytest.Pytester, conftest: str, **files: str) -> None:
    """A pytester project whose conftest scripts the clock, with a fixed hardware key, and these test files."""
    pytester.makeconftest(conftest)
    pytester.makeini("[pytest]\naddopts = --hardware-key test-box -p no:cacheprovider\n")
    pytester.makepyfile(**files)


def drifting_project(pytester: pytest.Pytester) -> None:
    """Two comparisons under the Drifting clock: test_settles settles after its first 12 rounds, test_never never."""
    clock_project(pytester, DRIFTING_CONFTEST, test_drift="""
def reference():
    return 1.0

def settles():
    return 1.0

def never():
    return 1.0

def test_settles(perf):
    perf.compare(reference, settles)

def test_never(perf):
    perf.compare(reference, never)
""")


@pytest.mark.timing
def test_a_run_reports_the_rounds_it_dropped_and_a_comparison_that_never_settled(pytester: pytest.Pytester) -> None:
    """The surface of run_rounds' settling: the JSON report counts the dropped rounds, and a comparison still
    drifting after the limit says so in its note and in `settled`; its verdict stands on what it measured."""
    drifting_project(pytester)
    result = pytester.runpytest("--speedgate-json", "run.json")
    result.assert_outcomes(passed=2)
    cases = {c["case_id"].rpartition("::")[2]: c for c in json.loads((pytester.path / "run.json").read_text())["cases"]}
    assert cases["test_settles"]["dropped_rounds"] > 0 and cases["test_settles"]["settled"] is True
    assert cases["test_settles"]["optimized_ms"] == 1.2  # the speed it settled at, not a mix of the two
    assert cases["test_never"]["settled"] is False and cases["test_never"]["dropped_rounds"] > 0
    assert "the device's speed still drifted" in cases["test_never"]["note"]
    result.stdout.fnmatch_lines(["*test_never*the device's speed still drifted*"])


@pytest.mark.timing
def test_a_comparison_that_never_settled_is_not_blessed(pytester: pytest.Pytester) -> None:
    """A bless takes no speed from a comparison whose device's speed still drifted when its rounds ended: the
    entry it had is kept (here 0.5x, written before), and the run says why; the one that settled is blessed."""
    drifting_project(pytester)
    path = write_baseline(pytester.path, {"test_drift.py::test_never": 0.5})
    result = pytester.runpytest("--update-baselines")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["not blessed (the device's speed still drifted when its rounds ended*): "
                                 "test_drift.py::test_never"])
    cases = json.loads(path.read_text())["cases"]
    assert cases["test_drift.py::test_never"]["speedup"] == 0.5  # kept as it was
    assert cases["test_drift.py::test_settles"]["speedup"] == pytest.approx(1.0 / 1.2, rel=1e-3)


LATE_CONFTEST = """
import pytest
from speedgate.testing import ScriptedTimer


class Late(ScriptedTimer):
    # Steady through the first measurement (the judged one), then 3% slower every round of the next. A measurement's
    # rounds come in batches of more than one pair; its warm-up calls each side alone. Counted by measurement, not by
    # round: how many rounds the judged one takes depends on how long its statistics take on this machine (the
    # checks' share of the timed work), and on a loaded box it took more than a fixed count allowed.
    def __init__(self):
        super().__init__({"reference": 1.0, "late": 1.0})
        self.measurements = 0  # whose rounds have ended
        self.in_rounds = False
        self.k = 0

    def time_each(self, fns):
        times = super().time_each(fns)
        if len(fns) <= 2:
            self.measurements += self.in_rounds
            self.in_rounds = False
            return times
        self.in_rounds = True
        if self.measurements >= 1:
            for i, fn in enumerate(fns):
                if getattr(getattr(fn, "__wrapped__", fn), "__name__", "") == "late":
                    times[i] = 1.03 ** min(self.k, 400)
                    self.k += 1
        return times


@pytest.fixture
def speedgate_timer():
    return Late()
"""


@pytest.mark.timing
def test_a_calibration_whose_later_run_never_settled_is_not_blessed(pytester: pytest.Pytester) -> None:
    """--speedgate-calibrate measures again in the process; a run still drifting at its end would put the device's
    drift into the calibration's spread (and the entry's tolerance), so the comparison is not blessed."""
    clock_project(pytester, LATE_CONFTEST, test_late="""
def reference():
    return 1.0

def late():
    return 1.0

def test_late(perf):
    perf.compare(reference, late)
""")
    # In a process of its own: its rounds' batching must not depend on what earlier tests in this one left.
    result = pytester.runpytest_subprocess("--update-baselines", "--speedgate-calibrate", "2", "--speedgate-json",
                                           "run.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["not blessed (the device's speed still drifted*): test_late.py::test_late"])
    case = json.loads((pytester.path / "run.json").read_text())["cases"][0]
    assert case["settled"] is False and case["speedup"] == 1.0  # the judged run was steady; a later one was not
    assert "the device's speed still drifted in a calibrating run after the judged one" in case["note"]
    assert not (pytester.path / "baselines" / "test-box.json").exists()
