"""The device's ceilings, measured once per run: copy bandwidth and dense matmul rate per dtype (GPU only).

A case's "% of peak" is its roofline floor over its measured time: floor = max(bytes / copy bandwidth,
flops / matmul rate of its dtype). Ceilings are measured here, on this device, with the same CUDA events,
rather than taken from a datasheet.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from .precision import fp32_matmul_precision

# Sizes: a 1 GiB copy (20x the H100's L2) and 8192^3 matmuls, large enough to reach steady state.
COPY_BYTES = 2**30
MATMUL_N = 8192
MATMUL_DTYPES = ("bf16", "fp16", "fp8", "tf32", "fp32")


@dataclass
class Ceilings:
    """Measured ceilings; matmul rates are filled in lazily, per dtype, as cases ask for them."""

    copy_gbps: float
    matmul_tflops: dict[str, float] = field(default_factory=dict)

    def floor_ms(self, flops: float | None, nbytes: float | None, flops_dtype: str | None) -> tuple[float, str] | None:
        """(the roofline floor in ms, 'memory' or 'compute'), or None when nothing is known to bound the case."""
        terms = []
        if nbytes:
            terms.append((nbytes / (self.copy_gbps * 1e9) * 1e3, "memory"))
        if flops and flops_dtype and flops_dtype in self.matmul_tflops:
            terms.append((flops / (self.matmul_tflops[flops_dtype] * 1e12) * 1e3, "compute"))
        return max(terms) if terms else None

    def to_json(self) -> dict[str, Any]:
        return {"copy_gbps": self.copy_gbps, "matmul_tflops": dict(self.matmul_tflops)}


def _events_median_ms(torch: Any, fn: Callable[[], Any], warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return median(s.elapsed_time(e) for s, e in pairs)


def measure_copy_gbps(torch: Any) -> float:
    src = torch.randn(COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    ms = _events_median_ms(torch, lambda: dst.copy_(src), warmup=5, reps=30)
    return 2 * COPY_BYTES / (ms * 1e-3) / 1e9  # bytes read + bytes written


def measure_matmul_tflops(torch: Any, dtype_name: str) -> float:
    if dtype_name not in MATMUL_DTYPES:
        raise ValueError(f"no matmul ceiling for {dtype_name!r}; choose one of {', '.join(MATMUL_DTYPES)}")
    n = MATMUL_N
    if dtype_name == "fp8":
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        one = torch.ones((), device="cuda")

        def fn() -> Any:
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    else:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}[dtype_name]
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)

        def fn() -> Any:
            return a @ b

        precision = (fp32_matmul_precision(torch, "high" if dtype_name == "tf32" else "highest")
                     if dtype == torch.float32 else contextlib.nullcontext())
        with precision:
            ms = _events_median_ms(torch, fn, warmup=5, reps=20)
        return 2 * n**3 / (ms * 1e-3) / 1e12
    ms = _events_median_ms(torch, fn, warmup=5, reps=20)
    return 2 * n**3 / (ms * 1e-3) / 1e12
