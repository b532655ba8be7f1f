"""lab/allreduce_breakdown.py --profile: the traced P2P calls summarized per call, by kind of device work."""

from __future__ import annotations

import pytest

from lab import allreduce_breakdown as tool


def test_device_work_is_counted_per_call_by_kind_and_overlap_is_not_counted_twice() -> None:
    # Two calls, microseconds: a quantize kernel, a barrier, copies on a side stream overlapping a second kernel.
    call = [("_quantize_kernel", 0, 100, 7), ("cross_device_barrier", 100, 110, 7),
            ("Memcpy PtoP (Device -> Device)", 110, 300, 9), ("Memcpy PtoP (Device -> Device)", 150, 320, 9),
            ("_reduce_requantize_kernel", 200, 260, 7), ("_dequantize_kernel", 320, 400, 7)]
    events = call + [(name, start + 1000, end + 1000, stream) for name, start, end, stream in call]
    summary = tool.summarize_trace(events, calls=2)
    assert summary["streams"] == 2
    assert summary["span_ms"] == pytest.approx(1.4 / 2)  # first start 0, last end 1400, over 2 calls
    assert summary["busy_ms"] == pytest.approx(0.4)  # 0-400 each call is covered without a gap
    kinds = summary["kinds"]
    assert kinds["copy"] == {"count": 2.0, "busy_ms": pytest.approx(0.21)}  # 110-320: the overlap counted once
    assert kinds["barrier"]["count"] == 1.0 and kinds["quantize"]["busy_ms"] == pytest.approx(0.1)
    assert set(kinds) == {"copy", "barrier", "quantize", "reduce_requantize", "dequantize"}
    assert tool.summarize_trace([], calls=5)["span_ms"] == 0.0


def test_the_profile_table_has_a_row_per_rank_and_piece_count() -> None:
    summary = {"host_queue_ms": 0.05, "span_ms": 0.8, "busy_ms": 0.7, "streams": 2,
               "kinds": {"copy": {"count": 2.0, "busy_ms": 0.3}}}
    results = [{"rank": r, "profile": {"1": summary, "8": {**summary, "kinds": {}}}} for r in (0, 1)]
    lines = tool.profile_table(results).splitlines()
    assert len(lines) == 2 + 4
    assert lines[2].startswith("| 0 | 1 | 0.050 | 0.800 | 0.700 | 2 | 2, 0.300 |")
    assert lines[3].startswith("| 0 | 8 |") and lines[3].endswith("| - |")


def test_a_form_that_cannot_be_captured_is_named_with_its_error_not_raised() -> None:
    """--graph: where capture fails (here: no CUDA at all), graphed() returns one line saying why, and the other
    rows are still timed."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("on a GPU the capture may succeed; this checks the refusal path")
    why = tool.graphed(lambda: None)
    assert isinstance(why, str) and "\n" not in why and why.split(":")[0].endswith(("Error", "Exception"))
