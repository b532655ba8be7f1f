"""lab.drift_probe takes the plugin's lock of its GPU (gpu_turn): a bless or a gate on the same GPU and the probe take
turns, and the probe says whom it waits for, as a gate does."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from lab.drift_probe import gpu_turn


def test_the_probe_waits_for_a_run_that_holds_its_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from speedgate.devices import DeviceLock

    bless = DeviceLock("7", tmp_path)
    # another run's hold, as its holder record says (its pid and run are not this process's)
    bless.acquire({"pid": 1, "run": "pid-1", "worker": None, "project": "/elsewhere/project",
                   "test": "perftests/test_triton_matmul.py::test_matmul"})
    entered = threading.Event()
    turns: list[dict[str, float]] = []

    def probe() -> None:
        with gpu_turn("7", "training", tmp_path) as turn:
            entered.set()
            turns.append(turn)

    thread = threading.Thread(target=probe)
    thread.start()
    time.sleep(1.5)  # past the lock's patience: the probe has said whom it waits for, and has not begun
    assert not entered.is_set()
    bless.release()
    thread.join(timeout=30)
    assert entered.is_set() and turns[0]["waited_s"] >= 1.5
    said = capsys.readouterr().out
    assert "another run holds its lock" in said and "test_matmul" in said, said
    # held while the block ran, given back after it: the next run takes the GPU at once
    again = DeviceLock("7", tmp_path)
    again.acquire()
    again.release()
