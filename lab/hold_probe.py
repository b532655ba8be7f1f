"""A/B in one process (GPU only): time_each with the device hold, without it, and without it on the old flush
(a stream context and wait_stream per call), alternated 3 times per side; then the profiled events and busy time.

Usage: python lab/hold_probe.py (from the repository root). The table in docs/NOTES.md (H100, 2026-11-23)
came from it.
"""
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.getcwd())
from perftests.kernels import attention as attn
from perftests.kernels import matmul as mm
from speedgate.timers import CudaTimer

g = torch.Generator(device="cuda").manual_seed(0)
def r(*s, dt=torch.bfloat16):
    return torch.randn(*s, device="cuda", dtype=dt, generator=g)
x4, w4 = r(4096, 4096), r(4096, 4096)
x8, w8 = r(8192, 8192), r(8192, 8192)
q, k, v = (r(2, 16, 8192, 64) for _ in range(3))
sides = {
    "tma4096": lambda: mm.matmul_tma_persistent(x4, w4),
    "cublas4096": lambda: F.linear(x4, w4),
    "tiled8192": lambda: mm.matmul(x8, w8),
    "cublas8192": lambda: F.linear(x8, w8),
    "attn8192c": lambda: attn.flash_attention(q, k, v, True),
    "sdpa8192c": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
}
for f in sides.values():
    for _ in range(3):
        f()
torch.cuda.synchronize()
t = CudaTimer(torch)

def old_flush(timed):
    cuda = torch.cuda
    t._flush_stream.wait_stream(timed)
    with cuda.stream(t._flush_stream):
        t._flush.zero_()
    timed.wait_stream(t._flush_stream)
new_flush = t._flush_l2

res = {"cycles_per_ms": t.cycles_per_ms, "flush_ms": t.flush_ms}
for name, fn in sides.items():
    per = {"held": [], "nohold": [], "oldflush_nohold": []}
    n = max(20, min(200, int(60 / max(0.05, statistics.median(t.time_each([fn] * 5, hold=5.0))))))
    for _rep in range(3):
        for cond in per:
            t._flush_l2 = old_flush if cond == "oldflush_nohold" else new_flush
            if cond == "held":
                t.time_each([fn] * n)  # learn the hold
                ms = t.time_each([fn] * n)
            else:
                ms = t.time_each([fn] * n, hold=0.0)
            per[cond].append(round(statistics.median(ms), 4))
    t._flush_l2 = new_flush
    prof = t.profile_calls(fn)
    res[name] = {**per, "n": n, "profiled_events": round(prof["events_ms"], 4), "busy": round(prof["busy_ms"], 4)}
    print(name, res[name], flush=True)
print(json.dumps(res))
