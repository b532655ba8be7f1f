"""Host launch time against device time for the 4096^3 bf16 matmul by four routes, in one process (GPU only).

Usage: python lab/launch_probe.py (from the repository root; run it in several fresh processes). Prints JSON per
side, before and after a torch.profiler pass: the host's time to launch one call, the host's time per iteration of
the timer's loop, the events' median with the host held ahead, and the rounds' median as time_each takes them.
This is how the "per-process slow mode" of the persistent TMA matmul was found to be the host falling behind
(H100, 2026-11-23; docs/NOTES.md).
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.getcwd())
from perftests.kernels import matmul as mm
from perftests.support.compiled import compiled
from speedgate.timers import CudaTimer

torch.manual_seed(0)
M = N = K = 4096
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
def linear(x, w):
    return F.linear(x, w)
c = compiled(linear)
sides = {
    "tma": lambda: mm.matmul_tma_persistent(x, w),
    "tiled": lambda: mm.matmul(x, w),
    "cublas": lambda: F.linear(x, w),
    "compiled": lambda: c(x, w),
}
for f in sides.values():
    for _ in range(5):
        f()
torch.cuda.synchronize()
t = CudaTimer(torch)

def host_ahead(fn, n=100):
    torch.cuda.synchronize()
    with torch.cuda.stream(t._flush_stream):
        torch.cuda._sleep(2_000_000_000 // 4)  # ~250 ms hold
    h0 = time.perf_counter()
    ev = torch.cuda.Event
    pairs = [(ev(enable_timing=True), ev(enable_timing=True)) for _ in range(n)]
    for s, e in pairs:
        t._flush_l2(torch.cuda.current_stream())
        s.record()
        fn()
        e.record()
    host = (time.perf_counter() - h0) / n * 1e3
    torch.cuda.synchronize()
    return host, statistics.median(s.elapsed_time(e) for s, e in pairs)

def host_call_only(fn, n=200):
    torch.cuda.synchronize()
    with torch.cuda.stream(t._flush_stream):
        torch.cuda._sleep(2_000_000_000 // 4)
    torch.cuda.current_stream().wait_stream(t._flush_stream)
    h0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - h0) / n * 1e3
    torch.cuda.synchronize()
    return host

def rounds(fn, n=200):
    ms = t.time_each([fn] * n)
    return statistics.median(ms), statistics.quantiles(ms, n=10)

res = {"pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0))[:4], "ncpu": len(os.sched_getaffinity(0))}
for phase in ("before_profiler", "after_profiler"):
    for name, fn in sides.items():
        call_host = host_call_only(fn)
        loop_host, ahead_ev = host_ahead(fn)
        med, dec = rounds(fn)
        res[f"{phase}:{name}"] = dict(call_host_ms=round(call_host, 4), loop_host_ms=round(loop_host, 4),
                                      host_ahead_events_ms=round(ahead_ev, 4), rounds_median_ms=round(med, 4),
                                      rounds_p10=round(dec[0], 4), rounds_p90=round(dec[-1], 4))
    if phase == "before_profiler":
        for fn in sides.values():
            t.profile_calls(fn)
print(json.dumps(res, indent=1))
