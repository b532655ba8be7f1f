"""lab/cycles_probe.py's reading of a side's cycles against its clock, on recorded medians (CPU)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab.cycles_probe import elasticity, family, pairs

ROOT = Path(__file__).resolve().parents[2]


def conditions(side: str, points: dict[str, tuple[float, float]]) -> dict[str, dict[str, dict[str, float]]]:
    """A measure() result whose `side` ran at (MHz, cycles) in each condition."""
    return {name: {"medians": {f"{side}_mhz": mhz, f"{side}_cycles": cycles}} for name, (mhz, cycles) in points.items()}


def test_cycles_at_the_sms_pace_read_zero_and_a_fixed_time_reads_one() -> None:
    compute = conditions("opt", {"long": (1400.0, 2.5e6), "suite": (1500.0, 2.5e6), "cooled": (1700.0, 2.5e6)})
    assert elasticity(compute, "opt") == pytest.approx(0.0)
    fixed_ms = 1.6  # a wait the SM clock does not set: its cycles are the clock's kHz times its time
    waiting = conditions("ref", {c: (mhz, mhz * 1e3 * fixed_ms) for c, mhz in
                                 (("long", 1400.0), ("suite", 1500.0), ("cooled", 1700.0))})
    assert elasticity(waiting, "ref") == pytest.approx(1.0)


def test_it_takes_the_conditions_furthest_apart_in_clock_not_the_first_and_last() -> None:
    # suite sits between; half the time fixed at the lowest clock -> the slope between the extremes only
    res = conditions("opt", {"suite": (1500.0, 9.9e9), "long": (1000.0, 1.0e6), "cooled": (2000.0, 1.0e6 * 2**0.5)})
    assert elasticity(res, "opt") == pytest.approx(0.5)


def test_no_elasticity_where_the_clock_did_not_move() -> None:
    res = conditions("opt", {"suite": (1500.0, 2.5e6), "cooled": (1505.0, 2.6e6)})
    assert elasticity(res, "opt") is None


def test_an_unknown_condition_is_named_before_anything_runs() -> None:
    done = subprocess.run([sys.executable, "-m", "lab.cycles_probe", "out", "--conditions", "suite,warm"],
                          cwd=ROOT, capture_output=True, text=True, env={"PYTHONPATH": f"{ROOT / 'plugin'}:{ROOT}",
                                                                          "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert "unknown condition(s) warm; known: suite, cooled, long" in done.stderr
    assert not (ROOT / "out").exists()


@pytest.mark.parametrize("name, expected", [("fp8_tiled", "matmul"), ("gluon", "matmul"), ("k_chunked", "k_chunked"),
                                            ("attn2048_sdpa", "attn2048_"), ("mlp", "mlp"), ("mlp_128x256s3w8", "mlp"),
                                            ("mlp_block_eager_128x256", "mlp_block_")])
def test_each_pair_belongs_to_the_family_that_builds_it(name: str, expected: str) -> None:
    assert family(name) == expected


def test_only_the_families_asked_for_are_built(capsys: pytest.CaptureFixture[str]) -> None:
    # On the CPU every family fails to build, each saying so: only the asked one may have tried.
    found = pairs(None, 8192, "cpu", ["k_chunked"])
    printed = capsys.readouterr().out
    assert found == {}
    assert printed.startswith("k_chunked pairs left out: ")
    assert "matmul pairs" not in printed and "attn2048_" not in printed and "mlp" not in printed
