"""Compile time measured in fresh processes: cold (empty compile caches) and warm (caches filled by a run before).

A builder is a 'module:function' that returns (callable, args); the child process compiles the callable with
torch.compile(mode=...), calls it once, synchronizes, and reports the seconds of that first call. Each
measurement is its own process, so nothing compiled in the test process (or in an earlier case) can help it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import importlib, json, sys, time
import torch
module, function = sys.argv[1].split(":")
fn, args = getattr(importlib.import_module(module), function)()
compiled = torch.compile(fn, mode=None if sys.argv[2] == "default" else sys.argv[2])
sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
sync()
start = time.perf_counter()
with torch.no_grad():
    compiled(*args)
sync()
print(json.dumps({"seconds": time.perf_counter() - start}))
"""

ROOT = Path(__file__).resolve().parents[1]


def _run(builder: str, mode: str, cache: Path, timeout_s: float) -> float:
    env = dict(os.environ)
    env.update(
        TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
        TRITON_CACHE_DIR=str(cache / "triton"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")])),
    )
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, builder, mode], env=env, capture_output=True, text=True, timeout=timeout_s
    )
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {builder} ({mode}) in a fresh process failed:\n{proc.stderr[-4000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["seconds"])


def cold_and_warm(builder: str, mode: str = "default", timeout_s: float = 900.0) -> tuple[float, float]:
    """(cold seconds, warm seconds): the first in an empty cache directory, the second in the same one after it."""
    with tempfile.TemporaryDirectory(prefix="speedgate-compile-cache-") as cache:
        cold = _run(builder, mode, Path(cache), timeout_s)
        warm = _run(builder, mode, Path(cache), timeout_s)
    return cold, warm
