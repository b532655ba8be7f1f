"""Compile time: in fresh processes, cold (empty caches) and warm (caches filled by a run before); and in this
process, a first pass compiled from scratch (first_pass), with the number of frames dynamo compiled.

A builder is a 'module:function' that returns (callable, args); the child process compiles the callable with
torch.compile(mode=...), calls it once, synchronizes, and reports the seconds of that first call. Each
measurement is its own process, so nothing compiled in the test process (or in an earlier case) can help it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

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


def no_compile_caches() -> contextlib.ExitStack:
    """Inductor's FX graph cache and AOTAutograd's cache off: a compile pass compiles, it does not load."""
    import torch._functorch.config
    import torch._inductor.config

    stack = contextlib.ExitStack()
    stack.enter_context(torch._inductor.config.patch(fx_graph_cache=False))
    if hasattr(torch._functorch.config, "enable_autograd_cache"):
        stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
    return stack


def frames_compiled() -> int:
    """Frames dynamo has compiled in this process (a recompilation counts again)."""
    import torch._dynamo.utils

    return int(torch._dynamo.utils.counters["frames"]["total"])


def timed_call(fn: Callable[[], Any], device: str) -> tuple[Any, float]:
    """(fn()'s result, the wall seconds of that one call, the device's work included): a first compiled call."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - start


def no_grad(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """A zero-argument callable that runs fn(*args) without autograd (an inference side of a comparison)."""
    import torch

    def call() -> Any:
        with torch.no_grad():
            return fn(*args)

    return call


def first_pass(run: Callable[[Any], Any], inputs: Sequence[Any], device: str) -> tuple[list[Any], float, int]:
    """(outputs, seconds, frames compiled) of the first pass of run over inputs, compiled from scratch.

    Dynamo's caches are reset (they are per code object, so another strategy compiling the same forward would
    otherwise be reused) and inductor's and AOTAutograd's caches are off.
    """
    import torch

    torch._dynamo.reset()
    before = frames_compiled()

    def run_all() -> list[Any]:
        with no_compile_caches(), torch.no_grad():
            return [run(x) for x in inputs]

    outputs, seconds = timed_call(run_all, device)
    return outputs, seconds, frames_compiled() - before


def schedule_pass(run: Callable[[Any], Any], inputs: Sequence[Any]) -> Callable[[], None]:
    """A zero-argument callable that runs `run` over every input once, without autograd: one pass of a schedule."""

    def call() -> None:
        for x in inputs:
            run(x)

    return no_grad(call)
