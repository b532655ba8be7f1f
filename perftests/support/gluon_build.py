"""Compiling Gluon kernels for sm_90 on any machine, for the CPU tests: Gluon has no interpreter and does not
compile under TRITON_INTERPRET=1 (which CI sets for the Triton kernels), so the compile runs in a subprocess
without it, through tools/codegen_probe.py (Triton's own stages and the ptxas it ships)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def not_on_hopper(device: str, cpu_test: str) -> str | None:
    """Why a Gluon case cannot run its kernel here, or None on Hopper: Gluon has no interpreter (`cpu_test`
    compiles the kernel for sm_90 on the CPU instead), and the kernels are written for sm_90. The case skips
    with it itself, so that pytest reports the skip at the case."""
    if device != "cuda":
        return f"Gluon has no interpreter: {cpu_test} compiles it for sm_90 on the CPU"
    import torch

    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"the Gluon kernel is written for Hopper (sm_90); this GPU is sm_{major}{minor}"
    return None


def build(script: str, timeout: float = 900) -> Any:
    """Run `script` (Python that prints one JSON line last) in a fresh interpreter with the repository on its path
    and TRITON_INTERPRET unset; return that JSON. A failure raises AssertionError with the compiler's stderr."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    prelude = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
    done = subprocess.run([sys.executable, "-c", prelude + script], capture_output=True, text=True, env=env,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def loops(ops: list[str]) -> list[list[str]]:
    """The MMA ops and waits of each innermost loop that has any, from tools/codegen_probe.dot_ops's list (a
    persistent kernel's K loops sit inside its loop over output tiles)."""
    found: list[list[str]] = []
    stack: list[tuple[list[str], bool]] = []  # (the loop's own ops, whether a loop is nested in it)
    for op in ops:
        if op == "for {":
            if stack:
                stack[-1] = (stack[-1][0], True)
            stack.append(([], False))
        elif op == "}" and stack:
            own, nested = stack.pop()
            if own and not nested:
                found.append(own)
        elif stack:
            stack[-1][0].append(op)
    return found
