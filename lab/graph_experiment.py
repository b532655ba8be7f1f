"""Does CUDA-graph replay remove the slow mode of a 0.1 ms kernel? (GPU only; prints one line per repeat)

Times the persistent fp8 fast-accumulation matmul at 4096^3 against torch._scaled_mm(use_fast_accum=True) with the
gate's own measurement loop, plain and graph-replayed, several times in one process.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(repeats: int = 4) -> None:
    import torch

    from perftests.kernels import matmul as mm
    from perftests.support.matmul import operands, quantize_e4m3, scaled_mm_fast
    from speedgate.measure import Policy, measure_pair
    from speedgate.timers import CudaTimer

    x, w = operands("cuda", torch.float32, 4096, 4096, 4096)
    x8, sx = quantize_e4m3(x)
    w8, sw = quantize_e4m3(w)
    reference = lambda: scaled_mm_fast(x8, w8, sx, sw)  # noqa: E731
    optimized = lambda: mm.matmul_tma_persistent(x8, w8, scale_x=sx, scale_w=sw, fp8_fast_accum=True)  # noqa: E731
    timer = CudaTimer(torch)
    for mode in ("plain", "graph", "plain", "graph") * (repeats // 2):
        m = measure_pair(reference, optimized, timer, Policy(), prepare_rounds=timer.graphed if mode == "graph" else None)
        print(f"{mode:<6} speedup {m.speedup:.3f} ({m.estimate.low:.3f}-{m.estimate.high:.3f})  "
              f"ref {m.reference_ms:.4f} ms  opt {m.optimized_ms:.4f} ms  opt cv {m.optimized_cv:.1%}  rounds {m.rounds}")


if __name__ == "__main__":
    main()
