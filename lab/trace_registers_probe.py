"""What the profiler's trace says a kernel's registers are, against what its compiled binary says, when another
variant of the same name (same grid and block) ran before it: the Triton attention kernel, non-causal and causal,
at head dim 128 (docs/results/gate-study-h200.md).

    python -m lab.trace_registers_probe [--order full,causal,full,causal] [--seq 2048]
    TRACE_EVENTS_OUT=FILE python -m pytest ... -p lab.trace_registers_probe

In one process: both variants compiled and their binaries' registers read (n_regs); then, for each name in
--order, that variant's calls profiled as the audit profiles them (CudaTimer.profile_calls), printing every kernel
event of the trace (name, grid, block, registers per thread) and the kernels speedgate.codegen keeps from
it. As a pytest plugin: every trace's kernel events the audit reads, a JSON line each in FILE, with the running test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "plugin"))


def _recorder(write: Callable[[list[dict[str, object]]], None]) -> None:
    """speedgate.codegen.trace_kernels made to hand each trace's kernel events (the flush stream's left out) to
    write before it keeps its distinct kernels."""
    from speedgate import codegen

    keep = codegen.trace_kernels

    def recording(events, skip_stream=None):
        events = list(events)
        write([{"name": n[:40], "stream": s, **{k: v for k, v in json.loads(m).items()
                if k in ("grid", "block", "registers per thread", "shared memory")}}
               for n, s, m in events if s != skip_stream])
        return keep(events, skip_stream)

    codegen.trace_kernels = recording


def pytest_configure(config: Any) -> None:
    out = os.environ.get("TRACE_EVENTS_OUT")
    if out:
        def write(events: list[dict[str, object]]) -> None:
            with open(out, "a") as f:
                f.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST"), "events": events}) + "\n")

        _recorder(write)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.trace_registers_probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--order", default="full,causal,full,causal")
    parser.add_argument("--seq", type=int, default=2048)
    args = parser.parse_args()
    import torch

    from perftests.kernels import attention as attn
    from speedgate.timers.cuda import CudaTimer

    B, H, S, D = 16384 // args.seq, 1024 // 128, args.seq, 128
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    sides = {"full": lambda: attn.flash_attention(q, k, v, False), "causal": lambda: attn.flash_attention(q, k, v, True)}
    order = args.order.split(",")
    for name in dict.fromkeys(order):
        sides[name]()
    torch.cuda.synchronize()
    jit = attn.KERNEL.fn
    for _device, caches in jit.device_caches.items():
        for key, compiled in caches[0].items():
            constexprs = [c for c in key[0] if c[0] == "constexpr"] if isinstance(key, tuple) and key else str(key)[:80]
            print(json.dumps({"binary": str(constexprs), "n_regs": compiled.n_regs, "shared": compiled.metadata.shared}))
    raw: list[list[dict[str, object]]] = []
    _recorder(raw.append)
    timer = CudaTimer(torch)
    for name in order:
        profiled = timer.profile_calls(sides[name])
        print(json.dumps({"profiled": name, "kept": profiled["kernels"], "lost": profiled["lost"]}))
        print(json.dumps({"events": raw[-1] if raw else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
