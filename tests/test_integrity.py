"""The plausibility rules: a time under the roofline floor, device work outside the timed stream."""

from __future__ import annotations

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
