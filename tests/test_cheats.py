"""Optimized sides that cheat, or carry the bugs that look like cheating, must fail and never be blessed.

CPU classes here (pytester, scripted clock): right only on the checked call, half the work after it, a cached result
under inputs=, inputs changed in place; and a control that passes. GPU classes (side stream, cached result, beyond
the roofline) run only where CUDA is available.
"""

from __future__ import annotations

import json

import pytest

from conftest import CASES

CHEATS = CASES + """
import torch

x = torch.arange(1000, dtype=torch.float32)


def reference():
    return x * 2

calls = {"n": 0}

def right_once():
    calls["n"] += 1
    return x * 2 if calls["n"] == 1 else torch.zeros_like(x)

def half_after_first():
    calls["n"] += 1
    out = x * 2
    if calls["n"] > 1:
        out[500:] = 0
    return out


def make(seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1000, generator=g),)

def ref_args(a):
    return a * 2

cache = {}

def cached(a):
    if "out" not in cache:
        cache["out"] = a * 2
    return cache["out"]

def mutates(a):
    a.mul_(2)
    return a

def honest(a):
    return a + a


def test_right_only_on_the_checked_call(perf):
    perf.compare(reference, right_once)

def test_half_the_work_after_the_checked_call(perf):
    calls["n"] = 0
    perf.compare(reference, half_after_first)

def test_cached_result(perf):
    perf.compare(ref_args, cached, inputs=make)

def test_mutated_inputs(perf):
    perf.compare(ref_args, mutates, inputs=make)

def test_control(perf):
    perf.compare(ref_args, honest, inputs=make)
"""

TIMES = {"reference": 2.0, "right_once": 1.0, "half_after_first": 1.0, "ref_args": 2.0, "cached": 0.01,
         "mutates": 1.0, "honest": 1.0}


@pytest.fixture
def cheats(pytester: pytest.Pytester) -> pytest.Pytester:
    from conftest import SCRIPTED_CONFTEST

    pytester.makeconftest(SCRIPTED_CONFTEST.format(times=TIMES))
    pytester.makeini("[pytest]\naddopts = --hardware-key test-box -p no:cacheprovider\n")
    pytester.makepyfile(test_sides=CHEATS)
    return pytester


def test_cheats_fail_and_are_never_blessed(cheats: pytest.Pytester) -> None:
    result = cheats.runpytest("--update-baselines")
    result.assert_outcomes(passed=1, failed=4)
    result.stdout.fnmatch_lines([
        "*test_right_only_on_the_checked_call*right on the first call*wrong after timing*",
    ])
    result.stdout.fnmatch_lines(["*test_half_the_work_after_the_checked_call*right on the first call*wrong after timing*"])
    result.stdout.fnmatch_lines(["*test_cached_result*differs from reference*"])
    result.stdout.fnmatch_lines(["*test_mutated_inputs*changed its inputs*"])
    blessed = json.loads((cheats.path / "baselines" / "test-box.json").read_text())["cases"]
    assert set(blessed) == {"test_sides.py::test_control"}


def test_cheats_fail_the_gate_too(cheats: pytest.Pytester) -> None:
    cheats.runpytest("--update-baselines", "-k", "control").assert_outcomes(passed=1)
    cheats.runpytest().assert_outcomes(passed=1, failed=4)


GPU_CHEATS = """
import torch

N = 32 * 2**20
x = torch.randn(N, device="cuda")
y = torch.randn(N, device="cuda")
ADD_BYTES = 3 * N * 4
side = torch.cuda.Stream()


def reference():
    return x + y

def honest():
    return torch.add(x, y)

def side_stream():
    out = torch.empty_like(x)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.add(x, y, out=out)
    out.record_stream(side)
    side.synchronize() if not hasattr(side_stream, "checked") else None  # right when checked, then racing
    side_stream.checked = True
    return out

precomputed = x + y

def cached():
    return precomputed

small_x, small_y = x[: N // 64], y[: N // 64]

def small_reference():
    return small_x + small_y

def small():
    return torch.add(small_x, small_y)


def make(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(N, device="cuda", generator=g), torch.randn(N, device="cuda", generator=g))

def add(a, b):
    return a + b

memo = {}

def memoised(a, b):
    if "out" not in memo:
        memo["out"] = a + b
    return memo["out"]


def test_control(perf):
    perf.compare(reference, honest, bytes=ADD_BYTES)

def test_side_stream(perf):
    perf.compare(reference, side_stream, bytes=ADD_BYTES)

def test_cached_result_beyond_roofline(perf):
    perf.compare(reference, cached, bytes=ADD_BYTES)

def test_cached_result_fresh_inputs(perf):
    perf.compare(add, memoised, inputs=make)

def test_declares_more_work_than_it_does(perf):
    perf.compare(small_reference, small, bytes=ADD_BYTES)
"""


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda(), reason="GPU cheat classes need CUDA (side streams, device timing, the roofline)")
def test_gpu_cheats_fail_and_are_never_blessed(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naddopts = --hardware-key gpu-cheats -p no:cacheprovider\n")
    pytester.makepyfile(test_gpu_sides=GPU_CHEATS)
    bless = pytester.runpytest_subprocess("--update-baselines")
    bless.assert_outcomes(passed=1, failed=4)
    bless.stdout.fnmatch_lines(["*test_side_stream*does not fit in its timed interval*another stream*"])
    # Caught before the roofline now: the check after timing poisons what it returned before (issue 29).
    bless.stdout.fnmatch_lines(["*test_cached_result_beyond_roofline*returned memory it did not write*"])
    bless.stdout.fnmatch_lines(["*test_cached_result_fresh_inputs*differs from reference*refilled the input sets in place*"])
    bless.stdout.fnmatch_lines(["*test_declares_more_work_than_it_does*implausible*"])
    blessed = json.loads((pytester.path / "baselines" / "gpu-cheats.json").read_text())["cases"]
    assert set(blessed) == {"test_gpu_sides.py::test_control"}
    pytester.runpytest_subprocess().assert_outcomes(passed=1, failed=4)


def test_same_bits_catches_writes_in_any_dtype() -> None:
    import torch

    from speedgate.sides import same_bits

    x = torch.randn(64)
    assert same_bits((x, 3), (x.clone(), 3))
    nan = torch.full((4,), float("nan"))
    assert same_bits(nan, nan.clone())  # NaN inputs are unchanged inputs
    y = x.clone()
    y[7] += 1e-6
    assert not same_bits(x, y)
    if hasattr(torch, "float8_e4m3fn"):
        f8 = torch.randn(16).to(torch.float8_e4m3fn)
        g8 = f8.clone()
        assert same_bits(f8, g8)
        g8.view(torch.uint8)[3] ^= 1
        assert not same_bits(f8, g8)
