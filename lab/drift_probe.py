"""Does a latency-timed case's speed drift over a process's calls, and with what? (GPU)

Usage: python -m lab.drift_probe OUT --case training|regional [--rounds 300] [--window 25] [--profile-at N]
                                  [--busy-at N --busy K]

Issue 46: two cases timed from an idle device vary more than their kernels do. On two H200 cards the training step's
two calibrating runs in one process differed by 14-15% (a 45% tolerance), and regional compilation's whole-model
reference read 19% (H200) to 44% (H100) slower than when blessed. This probe builds the case's two sides as its test
does, then times them alternately from an idle device (speedgate's CudaTimer, idle=True, what the case gates) for
--rounds rounds, the input set rotating as the gate's rounds rotate it. Per round it records both sides' times, the
host's time to issue each call, the SM clock and board power (NVML), the frames dynamo compiled so far and, for the
training step, both losses. OUT/drift-<case>.json keeps every round; the printout is one line per window of rounds:
the medians, the speedup, clock, power, frames and losses, so a drift shows with what moved beside it.
--profile-at N profiles both sides after round N as speedgate's audit does (a gate run's later measurements, a
calibrating run's second, come after its audit).
--busy-at N --busy K starts K host processes that spin in Python after round N, until the end: whether other work
on the host (another xdist worker compiling, say) moves a launch-bound pass. Each round also records the clock of the
core that launched it (its cpufreq reading, where the host shows one) and the host's load average.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def training_sides(torch: Any) -> dict[str, Callable[[int], Any]]:
    """The training step's sides as test_training_step builds them (32 sequences), each a function of an input seed
    returning its loss (warm() compiles it: the first call, then the momentum buffers' recompile)."""
    from perftests.models.transformer import build, token_ids, workload
    from perftests.test_compile_training import make_step

    cfg, _, seq, _ = workload("cuda")
    eager_model = build(cfg, "cuda", torch.float32).train()
    compiled_model = copy.deepcopy(eager_model)
    sets = [token_ids(cfg, 32, (seq, seq), "cuda", seed) for seed in range(8)]
    eager = make_step(eager_model, torch.optim.SGD(eager_model.parameters(), lr=1e-2, momentum=0.9), "cuda")
    torch._dynamo.reset()
    compiled = torch.compile(make_step(compiled_model, torch.optim.SGD(compiled_model.parameters(), lr=1e-2, momentum=0.9), "cuda"))
    sides = {"eager": lambda i: eager(*sets[i % len(sets)]), "compiled": lambda i: compiled(*sets[i % len(sets)])}
    return sides


def regional_sides(torch: Any) -> dict[str, Callable[[int], Any]]:
    """Regional compilation's sides as test_regional_vs_whole_model times them: one pass of the schedule through the
    whole model compiled (the reference) and through the model with each block compiled."""
    from perftests.models.transformer import build, token_ids, workload
    from perftests.support.compile_time import schedule_pass
    from perftests.test_compile_regional import SCHEDULE

    cfg, batch, _, dtype = workload("cuda")
    model = build(cfg, "cuda", dtype)
    sets = [token_ids(cfg, batch, SCHEDULE, "cuda", seed) for seed in range(8)]
    torch._dynamo.reset()
    whole = torch.compile(copy.deepcopy(model), dynamic=True)
    regional = copy.deepcopy(model)
    for block in regional.blocks:
        block.compile(dynamic=True)
    passes = {"whole": schedule_pass(whole), "regional": schedule_pass(regional)}
    sides = {name: (lambda i, p=p: p(*sets[i % len(sets)])) for name, p in passes.items()}
    return sides


def warm(torch: Any, sides: dict[str, Callable[[int], Any]]) -> None:
    """Three calls of each side (compiling what they compile), then the device drained."""
    for i in range(3):
        for fn in sides.values():
            fn(i)
    torch.cuda.synchronize()


def _spin() -> None:
    while True:
        pass


def host_state() -> dict[str, Any]:
    """The clock of the core this process last ran on (kHz, from cpufreq; absent where the host hides it) and the
    1-minute load average."""
    state: dict[str, Any] = {"load1": os.getloadavg()[0]}
    try:
        core = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36])
        state["core"] = core
        state["core_mhz"] = int(Path(f"/sys/devices/system/cpu/cpu{core}/cpufreq/scaling_cur_freq").read_text()) / 1e3
    except (OSError, ValueError, IndexError):
        pass
    return state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--case", choices=("training", "regional"), required=True)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--window", type=int, default=25)
    parser.add_argument("--profile-at", type=int, default=None,
                        help="after this round, profile both sides as speedgate's audit does (CudaTimer.profile_calls)")
    parser.add_argument("--busy-at", type=int, default=None, help="after this round, start --busy spinning host processes")
    parser.add_argument("--busy", type=int, default=0, help="how many spinning host processes --busy-at starts")
    args = parser.parse_args()
    import multiprocessing

    import torch

    from speedgate.gpu_state import open_monitor
    from speedgate.hardware import detect
    from speedgate.recompiles import compiled_frames
    from speedgate.timers.cuda import CudaTimer

    sides = (training_sides if args.case == "training" else regional_sides)(torch)
    t0 = time.perf_counter()
    warm(torch, sides)
    warm_s = time.perf_counter() - t0
    monitor = open_monitor(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0])
    timer = CudaTimer(torch)
    losses: dict[str, Any] = {}
    rounds: list[dict[str, Any]] = []
    busy: list[Any] = []
    for i in range(args.rounds):
        row: dict[str, Any] = {"round": i}
        order = list(sides.items()) if i % 2 == 0 else list(reversed(sides.items()))
        for name, fn in order:
            torch.cuda.synchronize()
            start = time.perf_counter()
            row[f"{name}_ms"] = timer.time_each([lambda fn=fn, name=name, i=i: losses.__setitem__(name, fn(i))], idle=True)[0]
            row[f"{name}_wall_ms"] = (time.perf_counter() - start) * 1e3
        for name, loss in losses.items():
            if isinstance(loss, torch.Tensor):
                row[f"{name}_loss"] = float(loss)
        if monitor is not None:
            state = monitor.read()
            row.update(mhz=state.sm_clock_mhz, watts=state.power_w)
        row["frames"] = compiled_frames()
        row.update(host_state(), busy=len(busy))
        rounds.append(row)
        if i == args.busy_at:
            busy = [multiprocessing.get_context("spawn").Process(target=_spin, daemon=True) for _ in range(args.busy)]
            for proc in busy:
                proc.start()
            print(f"started {len(busy)} spinning host processes after round {i}", flush=True)
        if i == args.profile_at:
            for fn in sides.values():
                timer.profile_calls(lambda fn=fn, i=i: fn(i))
            print(f"profiled both sides as the audit does after round {i}", flush=True)
    for proc in busy:
        proc.terminate()
    fp = detect(None)
    names = list(sides)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"drift-{args.case}.json").write_text(json.dumps(
        {"case": args.case, "card": fp.card, "hardware_key": fp.key, "warm_s": warm_s, "rounds": rounds}))
    print(f"{args.case} on {fp.key} card {fp.card}: warm-up {warm_s:.1f} s; windows of {args.window} rounds "
          f"(medians; speedup = {names[0]} / {names[1]})")
    for lo in range(0, len(rounds), args.window):
        part = rounds[lo:lo + args.window]

        def med(key: str, part: list[dict[str, Any]] = part) -> float:
            values = [r[key] for r in part if r.get(key) is not None]
            return statistics.median(values) if values else float("nan")

        a, b = med(f"{names[0]}_ms"), med(f"{names[1]}_ms")
        loss = " ".join(f"loss {n} {med(f'{n}_loss'):.4g}" for n in names if f"{n}_loss" in part[0])
        print(f"rounds {lo:4d}-{lo + len(part) - 1:4d}: {names[0]} {a:.3f} ms, {names[1]} {b:.3f} ms, {a / b:.3f}x; "
              f"wall {med(f'{names[0]}_wall_ms'):.3f}/{med(f'{names[1]}_wall_ms'):.3f} ms; {med('mhz'):.0f} MHz "
              f"{med('watts'):.0f} W; host core {med('core_mhz'):.0f} MHz, load {med('load1'):.1f}, "
              f"busy {part[-1]['busy']}; frames {part[-1]['frames']}; {loss}", flush=True)


if __name__ == "__main__":
    main()
