"""A case whose optimized side launches a Triton kernel that spins forever: speedgate's deadline must end it and name
it, in a project with no ini file of its own (run.sh copies this file into a fresh folder as test_spin.py).

On a GPU the host then waits in torch.cuda.synchronize(), a C call that never returns; on a CPU machine the Triton
interpreter (TRITON_INTERPRET=1) spins in Python instead, which checks the script, not the GPU's case.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"


@triton.jit
def _spin_kernel(flag_ptr, out_ptr):
    # The flag is zero and nothing ever sets it: a volatile load is re-read each turn, so the loop never ends.
    flag = tl.load(flag_ptr, volatile=True)
    while flag == 0:
        flag = tl.load(flag_ptr, volatile=True)
    tl.store(out_ptr, flag)


def spin() -> torch.Tensor:
    flag = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    out = torch.empty(1, dtype=torch.int32, device=DEVICE)
    _spin_kernel[(1,)](flag, out)
    if DEVICE == "cuda":
        torch.cuda.synchronize()  # the host waits here, inside CUDA, for a kernel that never finishes
    return out


def reference() -> torch.Tensor:
    return torch.ones(1, dtype=torch.int32, device=DEVICE)


def add_reference() -> torch.Tensor:
    return X + 1.0


def add_optimized() -> torch.Tensor:
    return torch.add(X, 1.0)


X = torch.randn(1 << 20, device=DEVICE)


def test_spins(perf):
    perf.compare(reference, spin)


def test_after(perf):
    # Under xdist this runs in the fresh worker that replaced the one the deadline ended.
    perf.compare(add_reference, add_optimized, tolerance=0.9)
