"""Does a latency-timed case's speed drift over a process's calls, and with what? (GPU)

Usage: python -m lab.drift_probe OUT --case training|regional|graph_break [--rounds 300] [--window 25]
                                  [--profile-at N] [--busy-at N --busy K] [--cpus any|near|far]

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
--case graph_break: test_graph_break_fix[branch_cond]'s pair (the data-dependent branch, broken, against torch.cond),
whose two sides' times doubled together in some gate runs' processes (docs/results/gate-study-h200.md).
--cpus near|far runs the process on the cores NVML names as near the GPU (its NUMA node), or on every other core,
before anything is built: whether the host's states are the launching core's distance from the GPU. Each round records
the core's NUMA node. The run exits 2, saying so, where the host has no far cores.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# The tests whose comparisons each --case builds, by node id (their parametrizations included): what a study's clean
# run that did not pass asks this probe to look at (lab/probe_followups.py).
CASE_TESTS = {
    "training": "perftests/test_compile_training.py::test_training_step",
    "regional": "perftests/test_compile_regional.py::test_regional_vs_whole_model",
    "graph_break": "perftests/test_compile_graph_breaks.py::test_graph_break_fix[branch_cond]",
}


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


def graph_break_sides(torch: Any) -> dict[str, Callable[[int], Any]]:
    """test_graph_break_fix[branch_cond]'s sides as the test builds them on the GPU (width 1024, 256 rows, bf16, one
    config per pointwise kernel): the compiled model with the data-dependent branch (a break and a sync) and the
    compiled torch.cond form, each called under no_grad on a rotating input set."""
    import torch._inductor.config as inductor_config

    from perftests.support.inputs import generator
    from perftests.test_compile_graph_breaks import PAIRS

    inductor_config.triton.autotune_pointwise = False
    broken_cls, fixed_cls = PAIRS["branch_cond"]
    broken = broken_cls(1024).to(device="cuda", dtype=torch.bfloat16).eval()
    fixed = fixed_cls(1024).to(device="cuda", dtype=torch.bfloat16).eval()
    fixed.load_state_dict(broken.state_dict())
    sets = [torch.randn(256, 1024, generator=generator("cuda", seed), device="cuda", dtype=torch.bfloat16)
            for seed in range(8)]
    torch._dynamo.reset()
    models = {"broken": torch.compile(broken), "fixed": torch.compile(fixed, fullgraph=True)}

    def call(model: Any, i: int) -> Any:
        with torch.no_grad():
            return model(sets[i % len(sets)])

    return {name: (lambda i, m=m: call(m, i)) for name, m in models.items()}


def gpu_cores(index: int) -> tuple[set[int], set[int]]:
    """(the cores NVML names as near GPU `index`, the host's other usable cores)."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    words = pynvml.nvmlDeviceGetCpuAffinity(handle, ((os.cpu_count() or 64) + 63) // 64)
    near = {64 * w + bit for w, mask in enumerate(words) for bit in range(64) if mask >> bit & 1}
    usable = os.sched_getaffinity(0)
    return near & usable, usable - near


def numa_node(core: int) -> int | None:
    """The NUMA node of a core, from sysfs; None where the host does not show it."""
    for node in Path("/sys/devices/system/node").glob("node[0-9]*"):
        if (node / f"cpu{core}").exists():
            return int(node.name[4:])
    return None


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
        state["node"] = numa_node(core)
        state["core_mhz"] = int(Path(f"/sys/devices/system/cpu/cpu{core}/cpufreq/scaling_cur_freq").read_text()) / 1e3
    except (OSError, ValueError, IndexError):
        pass
    return state


def probe(torch: Any, sides: dict[str, Callable[[int], Any]],
          args: argparse.Namespace) -> tuple[list[dict[str, Any]], float]:
    """Both sides warmed, then timed alternately from an idle device for args.rounds rounds: (the rounds, the warm-up
    seconds)."""
    import multiprocessing

    from speedgate.gpu_state import open_monitor
    from speedgate.recompiles import compiled_frames
    from speedgate.timers.cuda import CudaTimer

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
            if isinstance(loss, torch.Tensor) and loss.numel() == 1:
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
    return rounds, warm_s


@contextlib.contextmanager
def gpu_turn(token: str, case: str, folder: Path | None = None) -> Iterator[dict[str, float]]:
    """The plugin's lock of GPU `token` (a CUDA_VISIBLE_DEVICES entry), held for the block: a gate or a bless on the
    same GPU takes turns with the probe instead of timing beside it (a chained call once started a bless beside a
    study's probe: docs/results/gate-study-h200.md, the twenty-third study). Whom it waits for is printed, as a
    gate prints it; the block gets {"waited_s": seconds}."""
    from speedgate.devices import DeviceLock, holder_record

    lock = DeviceLock(token, folder)
    started = time.monotonic()
    lock.acquire(holder_record(str(Path.cwd()), f"lab.drift_probe --case {case}"),
                 lambda words: print(words, flush=True))
    try:
        yield {"waited_s": time.monotonic() - started}
    finally:
        lock.release()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--case", choices=tuple(CASE_TESTS), required=True)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--window", type=int, default=25)
    parser.add_argument("--profile-at", type=int, default=None,
                        help="after this round, profile both sides as speedgate's audit does (CudaTimer.profile_calls)")
    parser.add_argument("--busy-at", type=int, default=None, help="after this round, start --busy spinning host processes")
    parser.add_argument("--busy", type=int, default=0, help="how many spinning host processes --busy-at starts")
    parser.add_argument("--cpus", choices=("any", "near", "far"), default="any",
                        help="the cores this process runs on: any (as the gate does), near the GPU, or the others")
    args = parser.parse_args()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]  # the GPU this process times on
    gpu = int(visible)
    near, far = gpu_cores(gpu)
    if args.cpus != "any":
        chosen = near if args.cpus == "near" else far
        if not chosen:
            raise SystemExit(f"--cpus {args.cpus}: GPU {gpu} has no such cores here (near: {sorted(near)}, far: none)")
        os.sched_setaffinity(0, chosen)
    print(f"GPU {gpu}: {len(near)} near cores, {len(far)} far; this process runs on {len(os.sched_getaffinity(0))} "
          f"({args.cpus})", flush=True)
    import torch

    from speedgate.hardware import detect

    build = {"training": training_sides, "regional": regional_sides, "graph_break": graph_break_sides}[args.case]
    with gpu_turn(visible, args.case) as turn:
        sides = build(torch)
        rounds, warm_s = probe(torch, sides, args)
    fp = detect(None)
    names = list(sides)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"drift-{args.case}.json").write_text(json.dumps(
        {"case": args.case, "card": fp.card, "hardware_key": fp.key, "warm_s": warm_s, "cpus": args.cpus,
         "lock_waited_s": turn["waited_s"], "near_cores": sorted(near), "far_cores": sorted(far), "rounds": rounds}))
    print(f"{args.case} on {fp.key} card {fp.card}: waited {turn['waited_s']:.1f} s for the GPU's lock; warm-up "
          f"{warm_s:.1f} s; windows of {args.window} rounds (medians; speedup = {names[0]} / {names[1]})")
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
              f"busy {part[-1]['busy']}; nodes {sorted({r.get('node') for r in part}, key=str)}; "
              f"frames {part[-1]['frames']}; {loss}", flush=True)


if __name__ == "__main__":
    main()
