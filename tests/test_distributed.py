"""Multi-process cases: run_ranks (results, a failing rank, a hung rank, nothing left behind) and the gate over
samples timed across ranks (perf.compare_samples with world_size=2: its own baseline file, re-measure, verdicts).
Ranks run on the CPU with gloo; no GPU is needed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from speedgate.launch import GRACE_S, RankError, run_ranks

pytestmark = pytest.mark.timing  # signals, deadlines, locks or clocks: tests/conftest.py

# How long two ranks may take to start (a fresh interpreter each) on a loaded 2-core box before the test gives up.
RANKS_START_S = 120

RANKS = '''
import os, time

def ok(value):
    return {"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"]), "value": value}

def _note_pid(folder):
    # Written whole, then renamed: a reader that sees the file sees the pid (a loaded box can stop a rank mid-write).
    path = os.path.join(folder, os.environ["RANK"] + ".pid")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)

def boom(folder):
    _note_pid(folder)
    if os.environ["RANK"] == "1":
        raise ValueError("rank one is broken")
    time.sleep(120)  # rank 0 waits for rank 1, as it would inside a collective

def hang(folder):
    _note_pid(folder)
    time.sleep(600)

def worst(fractions_by_rank):
    import torch.distributed as dist
    from speedgate.distributed import worst_throttling
    dist.init_process_group("gloo")
    try:
        return worst_throttling(fractions_by_rank[int(os.environ["RANK"])])
    finally:
        dist.destroy_process_group()

def held_on_fakes(ref_ms, opt_ms):
    # The held path over gloo, with a fake device clock: each call "takes" its side's time, and the rendezvous is a
    # real all-reduce, so ranks that queued different collectives would hang or mismatch.
    import torch.distributed as dist
    from speedgate import distributed

    class FakeTimer:
        batches, met = [], 0

        def time_each(self, fns, rendezvous=None):
            rendezvous()
            FakeTimer.met += 1
            FakeTimer.batches.append(len(fns))
            return [fn() for fn in fns]

    distributed._on_gpu = lambda: True
    distributed._device = lambda: "cpu"
    distributed._violations_reader = lambda: None
    distributed.timed_on_rank = lambda fn: fn()
    distributed.held_timer = lambda reference, optimized: FakeTimer()
    dist.init_process_group("gloo")
    try:
        out = distributed.measure_across_ranks(lambda: ref_ms, lambda: opt_ms, held=True,
                                               policy={"budget_s": 0.3, "target_rel_halfwidth": 0.05})
        return {**out, "batches": FakeTimer.batches, "met": FakeTimer.met}
    finally:
        dist.destroy_process_group()

def with_a_triton_kernel(ref_ms, opt_ms):
    # The optimized side launches a "Triton kernel" through a stand-in of triton.runtime.jit (a CPU has no GPU to
    # compile for): what measure_across_ranks notes of the first calls is the compiled kernel's own facts.
    import sys, types
    import torch.distributed as dist
    from speedgate.distributed import measure_across_ranks

    compiled = types.SimpleNamespace(
        name="quantize_kernel", n_regs=40, n_spills=0, asm={"ptx": "ld.global.v4.u32 %r1, [%rd1];\\nst.global.u8 [%rd2], %rs1;"},
        metadata=types.SimpleNamespace(shared=128, num_warps=4, num_stages=2))

    class JITFunction:
        def run(self, *args, **kwargs):
            return compiled

    sys.modules["triton.runtime.jit"] = types.SimpleNamespace(JITFunction=JITFunction)
    kernel = JITFunction()

    def optimized():
        kernel.run(grid=(1,))
        time.sleep(opt_ms / 1e3)

    dist.init_process_group("gloo")
    try:
        return measure_across_ranks(lambda: time.sleep(ref_ms / 1e3), optimized,
                                    policy={"budget_s": 0.3, "target_rel_halfwidth": 0.05})
    finally:
        dist.destroy_process_group()

def timed(ref_ms, opt_ms, held=False):
    import torch.distributed as dist
    from speedgate.distributed import measure_across_ranks
    dist.init_process_group("gloo")
    try:
        return measure_across_ranks(lambda: time.sleep(ref_ms / 1e3), lambda: time.sleep(opt_ms / 1e3),
                                    policy={"budget_s": 0.3, "target_rel_halfwidth": 0.05}, held=held)
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
    # The waiting rank is killed after the grace period, long before the call's 120 s deadline (the margin is for
    # starting two interpreters on a loaded box).
    assert time.monotonic() - start < GRACE_S + 50
    message = str(info.value)
    assert "rank 1: exited with code 1: ValueError: rank one is broken" in message
    assert "rank 0: did not finish" in message
    assert "Traceback" in message
    _gone(ranks_module)


def test_a_hung_rank_is_killed_at_the_deadline(ranks_module: Path) -> None:
    start = time.monotonic()
    # 5 s: time for both ranks to start and note their pids on a loaded box, far below the rank's 600 s sleep.
    with pytest.raises(RankError, match=r"rank 0: did not finish within 5 s"):
        run_ranks("ranks_mod:hang", 2, {"folder": str(ranks_module)}, timeout_s=5)
    assert time.monotonic() - start < 30
    _gone(ranks_module)


def _kill_left_behind(folder: Path, *procs: subprocess.Popen[str]) -> None:
    """What a failed test must not leave running: the processes it started, and the ranks they started (each in a
    session of its own, so killing their parent does not reach them)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for pid_file in folder.glob("*.pid"):
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ValueError):
            pass


def test_ctrl_c_while_ranks_run_leaves_none_behind(ranks_module: Path) -> None:
    """Ctrl-C in the process that waits for its ranks (a compile-time case's fresh process, a multi-GPU case): the
    ranks run in sessions of their own, so the terminal's SIGINT reaches only the parent; they must not outlive it.

    The parent gets SIGINT's default action back: a suite started as a background job (`.ci/run &`, a CI runner's
    shell) inherits SIGINT ignored, and a Python started so never raises KeyboardInterrupt. Whatever fails, the
    parent and its ranks are killed before the test ends."""
    code = (f"import sys; sys.path.insert(0, {str(ranks_module)!r})\n"
            "from speedgate.launch import run_ranks\n"
            f"run_ranks('ranks_mod:hang', 2, {{'folder': {str(ranks_module)!r}}}, timeout_s=600)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + RANKS_START_S
        while len(list(ranks_module.glob("*.pid"))) < 2:
            assert parent.poll() is None, parent.communicate()[1]
            assert time.monotonic() < deadline, f"the ranks did not start within {RANKS_START_S} s"
            time.sleep(0.1)
        parent.send_signal(signal.SIGINT)
        _, err = parent.communicate(timeout=60)
        assert parent.returncode != 0 and "KeyboardInterrupt" in err, err
        _gone(ranks_module)
    finally:
        _kill_left_behind(ranks_module, parent)


def test_the_worst_ranks_throttling_is_every_ranks(ranks_module: Path) -> None:
    """Per policy, the largest fraction of any rank; a policy no rank could read stays out."""
    by_rank = [{"thermal": 0.1}, {"thermal": 0.3, "power": 0.2}]
    assert run_ranks("ranks_mod:worst", 2, {"fractions_by_rank": by_rank}, timeout_s=60) == [
        {"power": 0.2, "thermal": 0.3}, {"power": 0.2, "thermal": 0.3}]
    assert run_ranks("ranks_mod:worst", 2, {"fractions_by_rank": [{}, {}]}, timeout_s=60) == [{}, {}]


def test_a_master_port_taken_before_rank_0_listens_starts_the_ranks_again_on_another(
        ranks_module: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The port the OS called free is taken before rank 0 binds it (seen on a 2 x H200 host, 2026-11-27: rank 0's
    EADDRINUSE failed a case): the ranks start again on another port; a port taken every time fails with its cause."""
    import socket

    from speedgate import launch

    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    handed: list[int] = []
    real = launch.free_port

    def first_taken() -> int:
        handed.append(port if not handed else real())
        return handed[-1]

    monkeypatch.setattr(launch, "GRACE_S", 2.0)  # rank 1, waiting for a rank 0 that failed, is killed sooner
    try:
        monkeypatch.setattr(launch, "free_port", first_taken)
        by_rank = [{"thermal": 0.1}, {"power": 0.2}]
        assert run_ranks("ranks_mod:worst", 2, {"fractions_by_rank": by_rank}, timeout_s=RANKS_START_S) == [
            {"power": 0.2, "thermal": 0.1}] * 2
        assert len(handed) == 2 and handed[0] == port
        monkeypatch.setattr(launch, "free_port", lambda: port)
        with pytest.raises(RankError, match="rank 0: exited with code 1: .*(EADDRINUSE|address already in use)"):
            run_ranks("ranks_mod:worst", 2, {"fractions_by_rank": by_rank}, timeout_s=RANKS_START_S)
    finally:
        taken.close()


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


THROTTLED_TEST = '''
def test_hot(perf):
    samples = {"reference_ms": [2.0, 2.01, 1.99] * 10, "optimized_ms": [1.0, 1.01, 0.99] * 10, "seconds": 0.1,
               "stopped_by": "converged", "timer": "cuda-events-slowest-rank", "throttled": {"power": 0.5, "thermal": 0.2}}
    perf.compare_samples(lambda: samples, name="hot", world_size=2)
'''


def test_a_multi_gpu_cases_throttling_reaches_its_record_and_note(project: pytest.Pytester) -> None:
    """The ranks' worst throttling (measure_across_ranks's "throttled") is the case's, as an in-process case's own
    GPU's is: recorded, and a thermal fraction over the note's threshold named in the verdict's note. On the CPU the
    ranks read none."""
    project.makepyfile(test_hot=THROTTLED_TEST)
    project.runpytest("--update-baselines").assert_outcomes(passed=1)
    project.runpytest("--speedgate-json", "r.json").assert_outcomes(passed=1)
    record = json.loads((project.path / "r.json").read_text())["cases"][0]
    assert record["throttled"] == {"power": 0.5, "thermal": 0.2}
    assert "GPU thermally throttled for 20% of the comparison" in record["note"]


def test_ranks_on_the_cpu_report_no_throttling(ranks_module: Path) -> None:
    results = run_ranks("ranks_mod:timed", 2, {"ref_ms": 1.0, "opt_ms": 0.5}, timeout_s=120)
    assert [r["throttled"] for r in results] == [{}, {}]


def test_ranks_note_the_kernels_each_sides_first_call_compiled(ranks_module: Path) -> None:
    """measure_across_ranks notes the compiled kernels each side's first call launched, on every rank, as codegen
    facts; a side that launched none (here the reference, as NCCL's all-reduce) has no entry; a plain pair none."""
    results = run_ranks("ranks_mod:with_a_triton_kernel", 2, {"ref_ms": 1.0, "opt_ms": 0.5}, timeout_s=RANKS_START_S)
    for r in results:
        assert r["codegen"] == {"optimized": [{"name": "quantize_kernel", "registers": 40, "spills": 0,
                                               "shared_bytes": 128, "warps": 4, "stages": 2,
                                               "ptx": {"ld_global": 1, "st_global": 1, "total": 2}}]}
    assert all("codegen" not in r for r in run_ranks("ranks_mod:timed", 2, {"ref_ms": 1.0, "opt_ms": 0.5},
                                                       timeout_s=RANKS_START_S))


CODEGEN_TEST = '''
import json, os

def test_ranks(perf):
    spills = int(os.environ.get("SPILLS", "0"))
    kernels = os.environ.get("KERNELS")
    codegen = {"optimized": [{"name": "oneshot_kernel", "registers": 96, "spills": spills, "warps": 16}]}
    samples = {"reference_ms": [2.0, 2.01, 1.99] * 10, "optimized_ms": [1.0, 1.01, 0.99] * 10, "seconds": 0.1,
               "stopped_by": "converged", "timer": "cuda-events-held-slowest-rank",
               "codegen": json.loads(kernels) if kernels else codegen}
    perf.compare_samples(lambda: samples, name="ranks", world_size=2)
'''


def test_a_multi_gpu_cases_kernels_are_blessed_and_a_change_named(project: pytest.Pytester,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernels a compare_samples measurement names (measure_across_ranks's "codegen") are the case's, as an
    in-process case's are: blessed into its entry, compared with it in a gate run (a change named beside the
    verdict), and a malformed one refused naming the case."""
    project.makepyfile(test_ranks=CODEGEN_TEST)
    project.runpytest("--update-baselines").assert_outcomes(passed=1)
    entry = json.loads((project.path / "baselines" / "2x-test-box.json").read_text())["cases"]["test_ranks.py::test_ranks::ranks"]
    assert entry["codegen"] == {"optimized": [{"name": "oneshot_kernel", "registers": 96, "spills": 0, "warps": 16}]}

    monkeypatch.setenv("SPILLS", "24")
    project.runpytest("--speedgate-json", "r.json").assert_outcomes(passed=1)
    record = json.loads((project.path / "r.json").read_text())["cases"][0]
    assert record["codegen_changes"] == ["optimized oneshot_kernel: spills 0 -> 24"]
    assert "codegen changed since the bless: optimized oneshot_kernel: spills 0 -> 24" in record["note"]

    monkeypatch.setenv("KERNELS", '{"optimized": "oneshot_kernel"}')
    bad = project.runpytest()
    bad.assert_outcomes(failed=1)
    bad.stdout.fnmatch_lines(["*test_ranks.py::test_ranks::ranks: measure() returned unusable samples: its codegen's "
                              "'optimized' must be a list of kernels*"])


def test_held_ranks_keep_each_sides_times_apart_and_meet_once_a_batch_the_first_untimed(ranks_module: Path) -> None:
    """The held path's bookkeeping, on fakes: rounds alternate which side runs first, and each sample still lands on
    its own side; every batch (and the untimed one that teaches the hold) starts with one rendezvous on every rank;
    the timer is named held."""
    from speedgate.distributed import BATCH, HELD_TIMER

    results = run_ranks("ranks_mod:held_on_fakes", 2, {"ref_ms": 2.0, "opt_ms": 0.5}, timeout_s=RANKS_START_S)
    for r in results:
        assert r["timer"] == HELD_TIMER
        assert set(r["reference_ms"]) == {2.0} and set(r["optimized_ms"]) == {0.5}
        assert r["batches"][0] == 2 * BATCH and r["met"] == len(r["batches"]) == 1 + len(r["reference_ms"]) // BATCH
    assert results[0]["batches"] == results[1]["batches"]


def test_held_ranks_off_the_gpu_are_timed_by_the_host_clock_and_say_so(ranks_module: Path) -> None:
    """held=True holds devices; over gloo there is none: the host's clock, named as such, with the samples it took."""
    from speedgate.distributed import HOST_TIMER

    results = run_ranks("ranks_mod:timed", 2, {"ref_ms": 2.0, "opt_ms": 1.0, "held": True}, timeout_s=RANKS_START_S)
    assert [r["timer"] for r in results] == [HOST_TIMER, HOST_TIMER]
    assert results[0]["reference_ms"] == results[1]["reference_ms"] and min(results[0]["reference_ms"]) >= 2.0
