"""The plausibility rules: a time under the roofline floor, device work outside the timed stream."""

from __future__ import annotations

import pytest

from speedgate.integrity import PLAUSIBLE_PEAK_FRACTION, busy_ms, implausible, outside_stream


def test_busy_time_is_the_union_of_overlapping_intervals() -> None:
    assert busy_ms([]) == 0.0
    assert busy_ms([(0, 10), (5, 12), (20, 25)]) == 17.0  # two streams overlapping, then a gap
    assert busy_ms([(20, 25), (0, 10), (2, 3)]) == 15.0


def test_a_time_under_the_floor_is_implausible_and_says_why() -> None:
    assert implausible("c", 1.0, 1.0 * PLAUSIBLE_PEAK_FRACTION * 0.99, "memory", flops=None, nbytes=3e9,
                       ceiling="copy 3000 GB/s") is None
    reason = implausible("c", 0.05, 1.0, "memory", flops=None, nbytes=3e9, ceiling="copy 3000 GB/s")
    assert reason is not None
    assert "3e+09 bytes" in reason and "copy 3000 GB/s" in reason and "0.05 ms" in reason and "2000% of peak" in reason


def test_work_beyond_the_events_points_at_another_stream() -> None:
    assert outside_stream("c", "optimized", 1.0, 1.1) is None  # launch gaps, profiler rounding
    reason = outside_stream("c", "optimized", 0.01, 1.5)
    assert reason is not None and "another stream" in reason and "0.01 ms" in reason


def test_busy_per_call_windows_each_call_between_its_flush_and_the_next():
    from speedgate.integrity import busy_per_call

    flushes = [(0, 10), (100, 110), (200, 210)]
    work = [(12, 40), (45, 60),  # call 1: two kernels with a gap
            (111, 150),  # call 2
            (212, 230), (220, 260)]  # call 3: two streams overlapping, the window open-ended
    assert busy_per_call(work, flushes) == [43.0, 39.0, 48.0]


def test_busy_per_call_leaves_work_beside_a_later_flush_to_the_all_streams_total():
    from speedgate.integrity import busy_per_call

    # call 1 queued work on another stream that ran on through the second flush: the window clips it
    flushes = [(0, 10), (100, 110)]
    work = [(12, 20), (50, 105), (111, 120)]
    assert busy_per_call(work, flushes) == [58.0, 9.0]
    assert busy_ms(work) == 72.0


def test_a_profiled_trace_leaves_the_spin_and_the_flushes_out_and_sees_a_side_stream():
    from speedgate.integrity import profiled_busy

    flush, timed, side = 7, 1, 9  # stream ids as the trace gives them
    spin = [(0, 30000, flush)]
    calls = [(30000 + 100 * i, 30010 + 100 * i, flush) for i in range(3)]  # a 10 us flush starts each call
    honest = [(30012 + 100 * i, 30062 + 100 * i, timed) for i in range(3)]  # 50 us of work per call
    found = profiled_busy(spin + calls + honest, 3)
    assert found == pytest.approx({"busy_ms": 0.05, "all_streams_ms": 0.05})
    # A side stream that runs 80 us per call beside the timed stream's 5 us, on past the next flush
    cheat = [(30012 + 100 * i, 30017 + 100 * i, timed) for i in range(3)]
    cheat += [(30015 + 100 * i, 30095 + 100 * i, side) for i in range(3)]
    found = profiled_busy(spin + calls + cheat, 3)
    assert found["all_streams_ms"] == pytest.approx(0.083) and found["busy_ms"] < found["all_streams_ms"] * 1.01


def test_a_trace_whose_flushes_do_not_count_out_falls_back_to_the_average():
    from speedgate.integrity import profiled_busy

    spin, flushes = [(0, 100, 7)], [(100, 110, 7)]  # one flush seen for 2 calls
    work = [(112, 152, 1), (160, 200, 1)]
    assert profiled_busy(spin + flushes + work, 2) == pytest.approx({"busy_ms": 0.04, "all_streams_ms": 0.04})
    assert profiled_busy([], 2) == {"busy_ms": 0.0, "all_streams_ms": 0.0}
