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
