"""A pytest plugin of the lab's device scripts: the gate's own timed rounds under torch.profiler, to tell where a
side's event time goes when it exceeds its kernels' (the causal flash kernel beside its compiled reference:
docs/results/gate-study-h200.md). Loaded as `-p rounds_profile_plugin` with this folder on PYTHONPATH, with
$SPEEDGATE_LAB_ROUNDS naming a JSON-lines file: every batch of 4 calls or more that CudaTimer.time_each times with a
learned hold (the rounds and warm-ups; not the audit's own profiled calls, which pass their hold) runs under the
profiler, up to $SPEEDGATE_LAB_ROUNDS_MAX batches a test (default 40), and one line per batch is written: each call's
event ms, its kernels on the timed stream (name, start and length in us), and the flush kernel's end before it; and
every lesson the timer takes from a held batch (spy_on_holds), profiled or not. The
profiler slows the host's launches; the hold is learned from the batches before, so a line also says whether the
host stayed ahead (a batch it did not is not the gate's rhythm). lab/rounds_profile.py reads the file."""

from __future__ import annotations

import json
import os
from typing import Any

_profiled: dict[str, Any] = {"count": 0, "inside": False}


def pytest_runtest_setup(item: Any) -> None:
    _profiled["count"] = 0
    _profiled["test"] = item.nodeid


def traced(prof: Any) -> list[dict[str, Any]]:
    """Every kernel and memset of a finished trace (speedgate's device_events): name, stream, start and length in us."""
    from speedgate.timers.cuda import device_events

    return [{"name": str(e.get("name")), "stream": (e.get("args") or {}).get("stream"), "start": e.get("ts"),
             "us": e.get("dur")} for e in device_events(prof) if e.get("cat") in ("kernel", "gpu_memset")]


def pytest_configure(config: Any) -> None:
    path = os.environ.get("SPEEDGATE_LAB_ROUNDS")
    if not path:
        return
    from speedgate.timers.cuda import CudaTimer

    limit = int(os.environ.get("SPEEDGATE_LAB_ROUNDS_MAX", "40"))
    original = CudaTimer.time_each

    def time_each(self: Any, fns: Any, hold: float | None = None, idle: bool = False, rendezvous: Any = None) -> list[float]:
        if (hold is not None or idle or rendezvous is not None or len(fns) < 4 or _profiled["count"] >= limit
                or _profiled["inside"]):  # a batch cut in pieces times them through here: one trace for the batch
            return original(self, fns, hold=hold, idle=idle, rendezvous=rendezvous)
        from torch.profiler import ProfilerActivity, profile

        _profiled["count"] += 1
        self._torch.cuda.synchronize()
        _profiled["inside"] = True
        try:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                times = original(self, fns)
                self._torch.cuda.synchronize()
        finally:
            _profiled["inside"] = False
        line = {"test": _profiled.get("test"), "calls": len(fns), "times": times, "ahead": bool(self.last_ahead),
                "kernels": traced(prof)}
        with open(path, "a") as out:
            out.write(json.dumps(line) + "\n")
        return times

    CudaTimer.time_each = time_each  # type: ignore[method-assign]
    spy_on_holds(path)


def spy_on_holds(path: str) -> None:
    """Each lesson the timer takes from a held batch (speedgate.timers.cuda.learn_hold): the hold, the host's steps
    (ms per call), the device floor and what it learned, one line each ({"hold": ...}) in the same file: where a
    limit came from, and which call's step set it."""
    from speedgate.timers import cuda
    from speedgate.timers.holds import host_steps

    learn = cuda.learn_hold

    def learn_hold(marks_ms: Any, device_ms: float, hold: float, keys: Any = None) -> Any:
        learned = learn(marks_ms, device_ms, hold, keys)
        steps = host_steps(marks_ms)
        with open(path, "a") as out:
            out.write(json.dumps({"test": _profiled.get("test"), "hold": hold, "device_ms": device_ms,
                                  "steps": [round(v, 4) for v in steps], "behind": learned[0],
                                  "limit": learned[1]}) + "\n")
        return learned

    cuda.learn_hold = learn_hold  # type: ignore[assignment]
