"""lab/nvshmem_probe.py: each step's outcome recorded in order, a refusal reported with its exact error instead of
raised, and (on the CPU, two ranks over gloo) the walk ends in a verdict on every rank rather than a hang."""

from __future__ import annotations

import pytest

from lab import nvshmem_probe as probe


def test_a_failing_step_is_recorded_with_its_error_and_ends_the_walk() -> None:
    steps = probe.Steps()
    assert steps.run("first", lambda: 3) == 3
    with pytest.raises(probe.Stop):
        steps.run("second", lambda: 1 / 0)
    assert [r["step"] for r in steps.rows] == ["first", "second"]
    assert steps.rows[0] == {"step": "first", "ok": True, "value": 3}
    assert steps.rows[1]["error"] == "ZeroDivisionError: division by zero" and "1 / 0" in steps.rows[1]["traceback"]
    assert probe.verdict(steps.rows) == "stopped at 'second': ZeroDivisionError: division by zero"
    assert probe.verdict(steps.rows[:1]) == "all 1 steps held" and probe.verdict([]) == "nothing ran"
    steps.run("an object", lambda: object())
    assert steps.rows[-1]["value"] == "object"  # what cannot travel as JSON is named by its type


def test_two_cpu_ranks_each_end_in_a_verdict() -> None:
    """No GPU: the walk stops where this stack refuses (no NVSHMEM on a CPU build), on both ranks, with the step
    and its error, and the process group is left cleanly (run_ranks would raise on a rank that failed or hung)."""
    from speedgate.launch import run_ranks

    results = run_ranks("lab.nvshmem_probe:probe", 2, {"numel": probe.BLOCK}, timeout_s=120)
    assert [r["rank"] for r in results] == [0, 1]
    for r in results:
        assert r["gpu"] == "cpu" and r["steps"], r
        failed = [row for row in r["steps"] if not row["ok"]]
        assert len(failed) <= 1 and r["verdict"].startswith("stopped at" if failed else "all ")
        if failed:
            assert failed[0] is r["steps"][-1] and failed[0]["error"].splitlines()[0] in r["verdict"]
