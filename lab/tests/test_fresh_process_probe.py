"""lab/fresh_process_probe.py on the CPU: each kind of child loads the graph the probe's own compile saved, and its
stamps cover the process from its spawn (or its fork) to its exit, in order."""

from __future__ import annotations

import math

from lab import fresh_process_probe as probe


def test_every_child_is_stamped_from_spawn_to_exit(tmp_path) -> None:
    # Each start method once: the one-thread variants run the same code under another environment variable, and
    # two more children compiling on the CPU cost CI about 40 s.
    rows = probe.children(repeat=1, suite_child=False, out=tmp_path, one_thread=False)
    assert rows[0]["step"].startswith("this process compiles") and rows[0]["process_s"] > 0
    steps = {row["step"]: row for row in rows[1:]}
    assert set(steps) == {"spawned", "forked after imports", "spawned, first call under cProfile"}
    assert "cumulative" in (tmp_path / "child_first_call.prof.txt").read_text()
    for row in steps.values():
        phases = [row[f"{p}_s"] for p in probe.PHASES if f"{p}_s" in row]
        assert len(phases) == len(probe.PHASES) and all(s >= 0 for s in phases)
        assert math.isclose(sum(phases) + row["exit_s"], row["process_s"], rel_tol=1e-6)
    assert probe.host()["usable_cpus"] >= 1
    assert steps["forked after imports"]["fork_to_exit_s"] < steps["forked after imports"]["process_s"]
