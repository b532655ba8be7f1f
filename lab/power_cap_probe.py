"""Why do the fp8 matmuls at 8192^3 time at two speeds? (GPU; test_fp8_matmul[tma_persistent-8192])

Usage: python -m lab.power_cap_probe OUT [--size 8192] [--batches 12]

In a whole-suite gate run the Triton persistent kernel's median moved between the three comparisons of one test,
while the profiler's busy time for it did not move (docs/results/calibration.md): its rounds fall into a fast
cluster and a slow one, and the median lands in whichever holds more. This probe times the same two sides
(torch._scaled_mm, the Triton kernel) with speedgate's own CUDA timer in batches of paired rounds, as the gate does
(a spin hold, then AB/BA rounds), and varies what comes before a batch:

  suite      batches of about 50 ms of work with the host's few ms between them (the gate's own rhythm)
  long       batches of about 400 ms of work
  cooled     the suite's batches, each after 300 ms idle
  preheated  the suite's batches, each after 300 ms of the optimized side, untimed
  rested     the long batches, each after 3 s idle (as after a compile): how long the full clock lasts then

For each it prints the median time of each side by position in the batch (round 0-1, 2-3, 4-7, ...), the ratio of
the medians, of the means and of the minima, and how many of the optimized side's rounds were within 2% of its
fastest. NVML's SM clock and power, sampled every 2 ms in a thread, are kept per batch (mean clock over the batch).
OUT/power_cap.json keeps every sample.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

CONDITIONS = {"suite": (50.0, 0.003, None), "long": (400.0, 0.003, None), "cooled": (50.0, 0.3, None),
              "preheated": (50.0, 0.0, 300.0), "rested": (400.0, 3.0, None)}
# work per batch (ms), host idle before it (s), untimed heat (ms); "rested" runs a quarter of the batches
BUCKETS = [(0, 2), (2, 4), (4, 8), (8, 16), (16, 32), (32, 64), (64, 128), (128, 10**9)]


def by_position(rounds: list[list[float]]) -> list[dict[str, Any]]:
    """The median of each bucket of round positions, over every batch: [{'rounds': '0-1', 'median_ms', 'n'}]."""
    rows = []
    for low, high in BUCKETS:
        values = [t for batch in rounds for i, t in enumerate(batch) if low <= i < high]
        if values:
            label = f"{low}-{high - 1}" if high < 10**9 else f"{low}+"
            rows.append({"rounds": label, "median_ms": statistics.median(values), "n": len(values)})
    return rows


def summary(ref: list[list[float]], opt: list[list[float]]) -> dict[str, Any]:
    """Ratios of the two sides' medians, means and minima over all rounds, and the optimized side's fast share."""
    r = [t for b in ref for t in b]
    o = [t for b in opt for t in b]
    fastest = min(o)
    return {"median_ratio": statistics.median(r) / statistics.median(o), "mean_ratio": statistics.fmean(r) /
            statistics.fmean(o), "min_ratio": min(r) / fastest, "rounds": len(o),
            "optimized_fast_share": sum(t <= fastest * 1.02 for t in o) / len(o)}


class Sampler:
    """NVML's SM clock (MHz) and power (W) every `period` seconds in a thread: [(host time, clock, watts)]."""

    def __init__(self, period: float = 0.002) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.period = period
        self.samples: list[tuple[float, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        nvml, handle = self._nvml, self._handle
        while not self._stop.is_set():
            clock = nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
            watts = nvml.nvmlDeviceGetPowerUsage(handle) / 1e3
            self.samples.append((time.perf_counter(), clock, watts))
            time.sleep(self.period)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> dict[str, float | None]:
        inside = [(c, w) for t, c, w in self.samples if start <= t <= end]
        if not inside:
            return {"clock_mhz": None, "watts": None}
        return {"clock_mhz": statistics.fmean(c for c, _ in inside), "watts": statistics.fmean(w for _, w in inside)}


def run(size: int, batches: int) -> dict[str, Any]:
    import torch

    from perftests.kernels import matmul as mm
    from perftests.support.matmul import fp8_operands, scaled_mm
    from speedgate.timers.cuda import CudaTimer

    x8, w8, sx, sw = fp8_operands("cuda", size, size, size, 0)

    def reference() -> Any:
        return scaled_mm(x8, w8, sx, sw)

    def optimized() -> Any:
        return mm.matmul_tma_persistent(x8, w8, scale_x=sx, scale_w=sw)

    _, tuner = mm.launcher("tma_persistent")
    timer = CudaTimer(torch)
    for fn in (reference, optimized):
        timer.first_call(fn)
    timer.time_each([reference, optimized] * 10)  # warm-up, and the hold learns the host's pace
    pair_ms = statistics.median(timer.time_each([reference, optimized] * 4)) * 2
    result: dict[str, Any] = {"size": size, "config": mm.best_config(tuner), "conditions": {}}
    with Sampler() as sampler:
        for name, (work_ms, idle_s, heat_ms) in CONDITIONS.items():
            count = max(1, int(work_ms / pair_ms))
            ref: list[list[float]] = []
            opt: list[list[float]] = []
            clocks = []
            for _ in range(max(1, batches // 4) if name == "rested" else batches):
                if heat_ms:
                    for _ in range(max(1, int(heat_ms / (pair_ms / 2)))):
                        optimized()
                else:
                    torch.cuda.synchronize()
                    time.sleep(idle_s)
                start = time.perf_counter()
                order = [f for i in range(count) for f in ((reference, optimized) if i % 2 == 0 else (optimized, reference))]
                times = timer.time_each(order)
                clocks.append(sampler.between(start, time.perf_counter()))
                pairs = [times[2 * i:2 * i + 2] for i in range(count)]
                ref.append([p[0] if i % 2 == 0 else p[1] for i, p in enumerate(pairs)])
                opt.append([p[1] if i % 2 == 0 else p[0] for i, p in enumerate(pairs)])
            result["conditions"][name] = {
                "rounds_per_batch": count, "summary": summary(ref, opt), "reference_by_position": by_position(ref),
                "optimized_by_position": by_position(opt), "batches": clocks, "reference_ms": ref, "optimized_ms": opt}
    return result


def report(result: dict[str, Any]) -> list[str]:
    lines = [f"fp8 {result['size']}^3, Triton persistent config {result['config']}"]
    for name, c in result["conditions"].items():
        s = c["summary"]
        clock = [b["clock_mhz"] for b in c["batches"] if b["clock_mhz"] is not None]
        lines.append(f"{name:10} {c['rounds_per_batch']:3} rounds a batch: speedup of medians {s['median_ratio']:.3f}x, "
                     f"of means {s['mean_ratio']:.3f}x, of minima {s['min_ratio']:.3f}x; optimized within 2% of its "
                     f"fastest in {100 * s['optimized_fast_share']:.0f}% of {s['rounds']} rounds; SM clock "
                     + (f"{min(clock):.0f}-{max(clock):.0f} MHz over the batches" if clock else "not sampled"))
        for ref_row, opt_row in zip(c["reference_by_position"], c["optimized_by_position"]):
            lines.append(f"{'':10} rounds {ref_row['rounds']:>6}: reference {ref_row['median_ms']:.4f} ms, "
                         f"optimized {opt_row['median_ms']:.4f} ms")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--batches", type=int, default=12)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result = run(args.size, args.batches)
    (args.out / "power_cap.json").write_text(json.dumps(result, indent=1))
    print("\n".join(report(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
