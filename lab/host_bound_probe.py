"""How much of a launch-bound case's speedup is the host's? The training step timed both ways, in one process (GPU)

Usage: python -m lab.host_bound_probe OUT [--rounds 40] [--batch 8]

`test_training_step::vs_eager` is timed with latency=True (each call from an idle device, its host work inside the
events), and its speedup read 1.06-1.31x on eight H200 cards (issue 46). This probe times eager and compiled steps
of the same model, alternating, three ways with speedgate's CUDA timer: from an idle device (latency=True, what the
case gates), held (the device's work alone, the host queued ahead), and the host's own time to queue one call
(perf_counter around the call, device held). OUT/host_bound.json keeps every sample; the last lines print the
medians and each way's speedup.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    import torch

    from perftests.models.transformer import build, token_ids, workload
    from perftests.test_compile_training import make_step
    from speedgate.hardware import detect
    from speedgate.timers.cuda import CudaTimer

    cfg, _, seq, _ = workload("cuda")
    eager_model = build(cfg, "cuda", torch.float32).train()
    compiled_model = copy.deepcopy(eager_model)
    batch = token_ids(cfg, args.batch, (seq, seq), "cuda", 0)
    eager = make_step(eager_model, torch.optim.SGD(eager_model.parameters(), lr=1e-2, momentum=0.9), "cuda")
    compiled = torch.compile(make_step(compiled_model, torch.optim.SGD(compiled_model.parameters(), lr=1e-2, momentum=0.9), "cuda"))
    sides = {"eager": lambda: eager(*batch), "compiled": lambda: compiled(*batch)}
    timer = CudaTimer(torch)
    for fn in sides.values():
        timer.first_call(fn)
        timer.first_call(fn)
    samples: dict[str, dict[str, list[float]]] = {way: {s: [] for s in sides} for way in ("idle", "held", "host")}
    for i in range(args.rounds):
        order = list(sides.items()) if i % 2 == 0 else list(reversed(sides.items()))
        for name, fn in order:
            samples["idle"][name].extend(timer.time_each([fn], idle=True))
        for name, fn in order:
            samples["held"][name].extend(timer.time_each([fn, fn]))
        for name, fn in order:
            torch.cuda.synchronize()
            timer.hold(200.0)
            start = time.perf_counter()
            fn()
            samples["host"][name].append((time.perf_counter() - start) * 1e3)
            torch.cuda.synchronize()
    fp = detect(None)
    result: dict[str, Any] = {"card": fp.card, "hardware_key": fp.key, "batch": args.batch, "samples": samples}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "host_bound.json").write_text(json.dumps(result))
    for way, by_side in samples.items():
        med = {s: statistics.median(v) for s, v in by_side.items()}
        cv = {s: statistics.pstdev(v) / statistics.fmean(v) for s, v in by_side.items()}
        print(f"{fp.card} batch {args.batch} {way:5} eager {med['eager']:.3f} ms (cv {cv['eager']:.3f})  compiled "
              f"{med['compiled']:.3f} ms (cv {cv['compiled']:.3f})  speedup {med['eager'] / med['compiled']:.3f}x", flush=True)


if __name__ == "__main__":
    main()
