"""lab/power_cap_probe.py on the CPU: its tables by position in the batch, and its three ratios, on rounds made up to
hold a fast and a slow cluster (the GPU run is the probe's own)."""

from __future__ import annotations

from lab import power_cap_probe as probe


def test_positions_are_bucketed_over_every_batch() -> None:
    batches = [[1.0, 1.0, 2.0, 2.0, 3.0], [1.0, 1.2, 2.0, 2.2, 3.0]]
    rows = probe.by_position(batches)
    assert [row["rounds"] for row in rows] == ["0-1", "2-3", "4-7"]
    assert [row["n"] for row in rows] == [4, 4, 2]
    assert rows[0]["median_ms"] == 1.0 and rows[1]["median_ms"] == 2.0 and rows[2]["median_ms"] == 3.0


def test_a_median_that_changes_cluster_moves_where_the_minimum_does_not() -> None:
    ref = [[0.78] * 10]
    mostly_slow = probe.summary(ref, [[0.95] * 4 + [1.10] * 6])
    mostly_fast = probe.summary(ref, [[0.95] * 6 + [1.10] * 4])
    assert mostly_slow["median_ratio"] < 0.72 < 0.8 < mostly_fast["median_ratio"]  # the median jumps cluster
    assert mostly_slow["min_ratio"] == mostly_fast["min_ratio"]  # the fastest round does not
    assert mostly_slow["optimized_fast_share"] == 0.4 and mostly_fast["optimized_fast_share"] == 0.6
    assert mostly_slow["median_ratio"] < mostly_slow["mean_ratio"] < mostly_fast["mean_ratio"] < mostly_fast["median_ratio"]


def test_the_report_names_each_condition_and_its_positions() -> None:
    condition = {"rounds_per_batch": 2, "summary": probe.summary([[0.78, 0.79]], [[0.95, 1.1]]),
                 "reference_by_position": probe.by_position([[0.78, 0.79]]),
                 "optimized_by_position": probe.by_position([[0.95, 1.1]]),
                 "batches": [{"clock_mhz": 1755.0, "watts": 699.0}]}
    lines = probe.report({"size": 8192, "config": {"BLOCK_M": 128}, "conditions": {"suite": condition}})
    assert lines[0].startswith("fp8 8192^3")
    assert "suite" in lines[1] and "1755-1755 MHz" in lines[1] and "of minima 0.821x" in lines[1]
    assert "rounds    0-1: reference 0.7850 ms, optimized 1.0250 ms" in lines[2]
