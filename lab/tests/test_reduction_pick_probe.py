"""lab/reduction_pick_probe.py's reading of a profiler trace, on a trace written here (the GPU run is the lab's)."""

from __future__ import annotations

from lab.reduction_pick_probe import reductions


def kernel(name: str, dur: float, grid: list[int], registers: int, shared: int) -> dict[str, object]:
    return {"cat": "kernel", "name": name, "dur": dur,
            "args": {"grid": grid, "block": [512, 1, 1], "registers per thread": registers, "shared memory": shared}}


def test_each_reduction_launch_shape_is_one_row_with_its_median_duration() -> None:
    trace = {"traceEvents": [
        kernel("triton_red_fused_amax_0", 10.0, [8192, 1, 1], 32, 4096),
        kernel("triton_poi_fused_gelu_1", 5.0, [1024, 1, 1], 20, 0),  # pointwise: not a reduction
        kernel("triton_red_fused_amax_0", 14.0, [8192, 1, 1], 32, 4096),
        kernel("triton_per_fused_norm_2", 3.0, [4096, 1, 1], 57, 0),
        kernel("triton_red_fused_amax_0", 11.0, [8192, 1, 1], 32, 4096),
        kernel("triton_red_fused_amax_0", 20.0, [4096, 1, 1], 50, 8192),  # the same kernel at another shape
        {"cat": "cpu_op", "name": "triton_red_fused_amax_0", "dur": 99.0},  # the host's side of a launch
    ]}
    rows = reductions(trace)
    assert [(row["name"], row["grid"], row["us"], row["launches"]) for row in rows] == [
        ("triton_red_fused_amax_0", [8192, 1, 1], 11.0, 3),
        ("triton_per_fused_norm_2", [4096, 1, 1], 3.0, 1),
        ("triton_red_fused_amax_0", [4096, 1, 1], 20.0, 1),
    ]
    assert rows[2]["registers"] == 50 and rows[2]["shared_bytes"] == 8192
    assert reductions({}) == []
