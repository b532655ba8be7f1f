"""Multi-process cases: run_ranks (results, a failing rank, a hung rank, nothing left behind) and the gate over
samples timed across ranks (perf.compare_samples with world_size=2: its own baseline file, re-measure, verdicts).
Ranks run on the CPU with gloo; no GPU is needed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from speedgate.launch import GRACE_S, RankError, run_ranks

RANKS = '''
import os, time

def ok(value):
    return {"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"]), "value": value}

def _note_pid(folder):
    with open(os.path.join(folder, os.environ["RANK"] + ".pid"), "w") as f:
        f.write(str(os.getpid()))

def boom(folder):
    _note_pid(folder)
    if os.environ["RANK"] == "1":
        raise ValueError("rank one is broken")
    time.sleep(120)  # rank 0 waits for rank 1, as it would inside a collective

def hang(folder):
    _note_pid(folder)
    time.sleep(600)

def timed(ref_ms, opt_ms):
    import torch.distributed as dist
    from speedgate.distributed import measure_across_ranks
    dist.init_process_group("gloo")
    try:
        return measure_across_ranks(lambda: time.sleep(ref_ms / 1e3), lambda: time.sleep(opt_ms / 1e3),
                                    policy={"budget_s": 0.3, "target_rel_halfwidth": 0.05})
    finally:
        dist.destroy_process_group()
'''


@pytest.fixture
def ranks_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "ranks_mod.py").write_text(RANKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _gone(folder: Path) -> None:
    pids = [int(p.read_text()) for p in folder.glob("*.pid")]
    assert pids, "the ranks never started"
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_results_come_back_in_rank_order(ranks_module: Path) -> None:
    assert run_ranks("ranks_mod:ok", 3, {"value": 7}, timeout_s=60) == [
        {"rank": r, "world": 3, "value": 7} for r in range(3)
    ]


def test_a_failing_rank_fails_the_call_with_its_error_and_leaves_nothing(ranks_module: Path) -> None:
    start = time.monotonic()
    with pytest.raises(RankError) as info:
        run_ranks("ranks_mod:boom", 2, {"folder": str(ranks_module)}, timeout_s=120)
    assert time.monotonic() - start < GRACE_S + 10  # the waiting rank is killed after the grace period
    message = str(info.value)
    assert "rank 1: exited with code 1: ValueError: rank one is broken" in message
    assert "rank 0: did not finish" in message
    assert "Traceback" in message
    _gone(ranks_module)


def test_a_hung_rank_is_killed_at_the_deadline(ranks_module: Path) -> None:
    start = time.monotonic()
    with pytest.raises(RankError, match=r"rank 0: did not finish within 2 s"):
        run_ranks("ranks_mod:hang", 2, {"folder": str(ranks_module)}, timeout_s=2)
    assert time.monotonic() - start < 10
    _gone(ranks_module)


def test_bad_target_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="package.module:function"):
        run_ranks("no_colon", 2)
    with pytest.raises(RankError, match="ModuleNotFoundError: No module named 'no_such_module_here'"):
        run_ranks("no_such_module_here:f", 1, timeout_s=60)


GATE_TEST = '''
import os
from speedgate.launch import run_ranks

def test_two_ranks(perf):
    opt_ms = float(os.environ.get("OPT_MS", "1.0"))
    measure = lambda: run_ranks("ranks_mod:timed", 2, {"ref_ms": 2.0, "opt_ms": opt_ms}, timeout_s=120)[0]
    perf.compare_samples(measure, name="two_ranks", world_size=2)
'''


def test_samples_from_ranks_are_gated_under_their_own_key(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    (project.path / "ranks_mod.py").write_text(RANKS)
    project.makepyfile(test_multi=GATE_TEST)
    bless = project.runpytest("--update-baselines")
    bless.assert_outcomes(passed=1)
    assert not (project.path / "baselines" / "test-box.json").exists()
    doc = json.loads((project.path / "baselines" / "2x-test-box.json").read_text())
    entry = doc["cases"]["test_multi.py::test_two_ranks::two_ranks"]
    assert 1.4 < entry["speedup"] < 2.2 and entry["rounds"] >= 15
    assert doc["hardware_key"] == "2x-test-box" and doc["fingerprint"]["hardware"]["gpu_count"] == 2

    project.runpytest("--speedgate-json", "r.json").assert_outcomes(passed=1)
    record = json.loads((project.path / "r.json").read_text())["cases"][0]
    assert record["hardware_key"] == "2x-test-box" and record["verdict"] == "pass"
    assert record["timer"] == "perf-counter-slowest-rank"

    monkeypatch.setenv("OPT_MS", "2.0")
    slow = project.runpytest("--speedgate-json", "r.json")
    slow.assert_outcomes(failed=1)
    record = json.loads((project.path / "r.json").read_text())["cases"][0]
    assert record["verdict"] == "regressed" and record["remeasured"]
    slow.stdout.fnmatch_lines(["*2x-test-box*"])
