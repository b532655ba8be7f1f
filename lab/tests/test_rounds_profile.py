"""lab/rounds_profile.py's reading of a profiled batch of the gate's rounds (CPU, on a made-up trace)."""

from __future__ import annotations

import pytest

from lab.rounds_profile import calls_of, limits, summary


def batch(sides: list[str], gaps: dict[int, float], flush_us: float = 10.0) -> dict:
    """A batch of calls in order: the hold's spin, then per call a flush on stream 1 and the call's kernels on 7 (a
    reference: two kernels of 400 and 600 us; the optimized side: one of 170 us), gaps[i] us after call i's flush."""
    kernels, t = [{"name": "spin_kernel", "stream": 1, "start": 0.0, "us": 1000.0}], 1000.0
    times = []
    for i, side in enumerate(sides):
        kernels.append({"name": "fill_kernel", "stream": 1, "start": t, "us": flush_us})
        t += flush_us + gaps.get(i, 1.0)
        work = [("nvjet_mm", 400.0), ("triton_red_softmax", 600.0)] if side == "ref" else [("_attn_fwd_kernel", 170.0)]
        begin = t
        for name, us in work:
            kernels.append({"name": name, "stream": 7, "start": t, "us": us})
            t += us
        times.append((t - begin + gaps.get(i, 1.0)) / 1e3)
    return {"calls": len(sides), "times": times, "ahead": True, "kernels": kernels}


def test_each_call_is_cut_at_the_flushes_and_its_gap_is_measured_from_the_flush_end() -> None:
    calls = calls_of(batch(["ref", "opt", "opt", "ref"], {1: 8.0}), "_attn_fwd")
    assert [c["side"] for c in calls] == ["ref", "opt", "opt", "ref"]
    assert [c["after"] for c in calls] == [None, "ref", "opt", "opt"]
    assert calls[1]["gap_us"] == pytest.approx(8.0) and calls[2]["gap_us"] == pytest.approx(1.0)
    assert calls[1]["busy_ms"] == pytest.approx(0.170) and calls[0]["busy_ms"] == pytest.approx(1.0)
    assert calls[0]["longest"] == "triton_red_softmax"


def test_the_optimized_side_after_the_reference_is_told_from_after_itself() -> None:
    # AB/BA rounds where the kernel starts 8 us late after the reference only
    sides = ["ref", "opt", "opt", "ref"] * 5
    gaps = {i: 8.0 for i in range(1, len(sides)) if sides[i] == "opt" and sides[i - 1] == "ref"}
    got = summary([batch(sides, gaps)], "_attn_fwd")
    assert got[("triton_red_softmax", "ref")]["gap_us"] == pytest.approx(8.0)
    assert got[("triton_red_softmax", "opt")]["gap_us"] == pytest.approx(1.0)
    assert got[("triton_red_softmax", "ref")]["busy_ms"] == got[("triton_red_softmax", "opt")]["busy_ms"]
    assert got[("triton_red_softmax", "ref")]["event_ms"] > got[("triton_red_softmax", "opt")]["event_ms"]


def test_a_trace_without_one_flush_per_call_is_not_read() -> None:
    line = batch(["ref", "opt"], {})
    line["calls"] = 3
    assert calls_of(line, "_attn_fwd") == []


def test_a_limit_the_timer_took_names_the_call_that_set_it() -> None:
    lessons = [{"hold": 1.3, "device_ms": 50.0, "steps": [2.1, 0.1, 1.2, 0.1], "behind": None, "limit": 1.0},
               {"hold": 1.0, "device_ms": 50.0, "steps": [1.2, 0.1], "behind": 0.0, "limit": None}]
    assert limits(lessons) == ["a limit of 1.00 ms from a batch of 4 calls behind a 1.30 ms hold: call 0 took the host "
                               "2.10 ms (the median call 0.65 ms)"]


def test_the_plugin_reads_a_trace_through_speedgates_device_events(tmp_path, monkeypatch) -> None:
    import json
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "device"))
    sys.modules.pop("rounds_profile_plugin", None)
    import rounds_profile_plugin

    class Finished:
        def export_chrome_trace(self, path: str) -> None:
            Path(path).write_text(json.dumps({"traceEvents": [
                {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy", "ts": 5, "dur": 1, "args": {"stream": 7}},
                {"ph": "X", "cat": "kernel", "name": "k", "ts": 2, "dur": 3, "args": {"stream": 7}},
                {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 0, "dur": 1, "args": {"stream": 9}}]}))

    assert rounds_profile_plugin.traced(Finished()) == [
        {"name": "Memset (Device)", "stream": 9, "start": 0, "us": 1}, {"name": "k", "stream": 7, "start": 2, "us": 3}]
