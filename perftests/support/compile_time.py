"""Compile time: in fresh processes, cold (empty caches) and warm (caches filled by a run before); and in this
process, a first pass compiled from scratch (first_pass), with the number of frames dynamo compiled.

A builder is a 'module:function' that returns (callable, args). cold_and_warm runs first_compiled_call_s in a child
process (speedgate.launch.run_ranks, one rank): it compiles the callable with torch.compile(mode=...), calls it
once, synchronizes, and returns the seconds of that first call. Each measurement is its own process, so nothing
compiled in the test process (or in an earlier case) can help it. compile_in_fresh_process does the same for one
compile inside from_scratch(saving=True), reads the peak memory there too, and leaves its graph for the test's
process to load.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# Compile seconds gate at 100%: a doubling fails. The first process of a fresh machine compiles much slower than a
# calibrating process on a warm one, and a tighter tolerance blessed on a warm machine failed the next fresh one (the
# H100's compile cases: docs/results/calibration.md). Recompilation loops and lost caches, what these metrics exist
# to catch, cost 2x and more. Counts (compiles, graph breaks) stay exact. The host's own pace moves them too, with its
# cores idle, and no counter a virtual machine reads follows it (docs/results/gate-study-h200.md, "The twenty-first
# study"): the seconds are judged as timed.
COMPILE_TIME_TOLERANCE = 1.0


def _compiled(builder: str, mode: str) -> Callable[[], Any]:
    """In a child process: torch.compile(builder's callable) in mode, as a call of no arguments without autograd (not
    yet called: its first call compiles)."""
    import importlib

    import torch

    module, function = builder.split(":")
    fn, args = getattr(importlib.import_module(module), function)()
    return no_grad(torch.compile(fn, mode=None if mode == "default" else mode), *args)


def _three_calls_peak_gib(call: Callable[[], Any]) -> float:
    """The device's peak allocated GiB through three calls of an already compiled call, counted from what is
    allocated before them: the model, its input, what the compile kept."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**30


def first_compiled_call_s(builder: str, mode: str) -> float:
    """In the child process: the seconds of the first call of torch.compile(builder's callable), the compile."""
    import torch

    # The caches are this measurement's subject (empty, then filled by the cold run): not from_scratch.
    _, seconds = timed_call(_compiled(builder, mode), "cuda" if torch.cuda.is_available() else "cpu", from_empty=False)
    return seconds


def three_calls_peak_gib(builder: str, mode: str) -> float:
    """In the child process: the device's peak allocated memory (GiB) through three calls of
    torch.compile(builder's callable) after the one that compiles it: the model, its input, the compiled forward's
    buffers; nothing else has run in the process. Three: the modes that replay CUDA graphs (reduce-overhead,
    max-autotune) warm up on the compiling call, record the graph on the next and replay it after, so their graphs'
    memory pool is in the peak. The compiling call is not: in max-autotune it benchmarks GEMM candidates, with
    buffers of their own, wherever the caches do not hold the picks, and whether they did depended on the process
    that filled them (H200, docs/results/gate-runs.md)."""
    call = _compiled(builder, mode)
    call()  # the compile, and the graph modes' warm-up run
    return _three_calls_peak_gib(call)


def compiled_and_peak(builder: str, mode: str) -> dict[str, float | None]:
    """In the child process: the seconds of the first call of torch.compile(builder's callable), the compile, in
    the caches the caller's from_scratch(saving=True) made (empty: it compiles everything, and saves its graph
    there); then three_calls_peak_gib's peak after it (None on the CPU)."""
    import torch

    call = _compiled(builder, mode)
    cuda = torch.cuda.is_available()
    _, seconds = timed_call(call, "cuda" if cuda else "cpu", from_empty=False)
    return {"compile_s": seconds, "peak_gib": _three_calls_peak_gib(call) if cuda else None}


def _run(target: str, builder: str, mode: str, cache: Path | None, timeout_s: float, *,
         extra_env: dict[str, str] | None = None) -> Any:
    """target(builder, mode) in a fresh process, with its compile caches in cache (None: this process's, which
    inside from_scratch() is the fresh folder)."""
    from speedgate.launch import RankError, run_ranks

    env = {**os.environ, **(extra_env or {})}
    if cache is not None:
        env.update(TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), TRITON_CACHE_DIR=str(cache / "triton"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    payload = {"builder": builder, "mode": mode}
    try:
        [value] = run_ranks(f"{__name__}:{target}", 1, payload, timeout_s=timeout_s, env=env)
    except RankError as exc:
        raise RuntimeError(f"compiling {builder} ({mode}) in a fresh process failed:\n{exc}") from exc
    return value


def cold_and_warm(builder: str, mode: str = "default", timeout_s: float = 900.0) -> tuple[float, float]:
    """(cold seconds, warm seconds): the first in an empty cache directory, the second in the same one after it."""
    with tempfile.TemporaryDirectory(prefix="speedgate-compile-cache-") as cache:
        cold = float(_run("first_compiled_call_s", builder, mode, Path(cache), timeout_s))
        warm = float(_run("first_compiled_call_s", builder, mode, Path(cache), timeout_s))
    return cold, warm


def peak_gib_in_fresh_process(builder: str, mode: str, timeout_s: float = 900.0) -> float:
    """three_calls_peak_gib in a fresh process, whose compile loads what the compile before it under the same
    from_scratch(saving=True) saved (called inside one): a peak that no earlier test in this process can change (their
    leftovers, a CUDA graph pool they created), and that the autotuner's benchmarking does not set."""
    return float(_run("three_calls_peak_gib", builder, mode, None, timeout_s))


def compile_in_fresh_process(builder: str, mode: str, timeout_s: float = 900.0) -> tuple[float, float | None]:
    """(compile seconds, peak GiB or None on the CPU): compiled_and_peak in a fresh process, called inside
    from_scratch(saving=True): the compile is timed from the empty folder in a process where nothing else has run,
    and it saves its graph there, so that this process loads it (loaded_graphs counts the loads) instead of
    compiling it again."""
    import torch

    # Code compiled for the CPU is keyed on the thread count, which the root conftest sets to 1 in an xdist worker:
    # there the fresh process runs as many, or this one would not find its graph.
    threads = None if torch.cuda.is_available() else {"OMP_NUM_THREADS": str(torch.get_num_threads())}
    found = _run("compiled_and_peak", builder, mode, None, timeout_s, extra_env=threads)
    return float(found["compile_s"]), None if found["peak_gib"] is None else float(found["peak_gib"])


def loaded_graphs() -> int:
    """Graphs this process has loaded from inductor's FX graph cache so far (its counter, a hit per graph)."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["fxgraph_cache_hit"])


def no_compile_caches() -> contextlib.ExitStack:
    """Inductor's FX graph cache and AOTAutograd's cache off: a compile pass compiles, it does not load."""
    import torch._functorch.config
    import torch._inductor.config

    stack = contextlib.ExitStack()
    stack.enter_context(torch._inductor.config.patch(fx_graph_cache=False))
    if hasattr(torch._functorch.config, "enable_autograd_cache"):
        stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
    return stack


def from_scratch(*, saving: bool = False) -> contextlib.ExitStack:
    """no_compile_caches(), and inductor's and Triton's on-disk caches (compiled kernels, the autotuner's picks) in a
    fresh temporary folder for the duration (torch's own fresh_cache): a compile timed inside compiles from scratch
    whatever the machine's caches hold. Without it a compile-seconds metric measured the runner's caches: blessed on
    a warm machine, it failed the next fresh one (docs/results/suite-time.md).

    saving=True leaves the FX graph and AOTAutograd caches on: the folder starts empty, so the first compile inside
    still compiles everything, and it saves its graph there for a fresh process started inside the block
    (peak_gib_in_fresh_process) to load instead of compiling it again."""
    import torch._inductor.utils as inductor_utils

    stack = contextlib.ExitStack() if saving else no_compile_caches()
    fresh = getattr(inductor_utils, "fresh_cache", None) or getattr(inductor_utils, "fresh_inductor_cache", None)
    if fresh is None:
        stack.close()
        raise RuntimeError("this torch has neither torch._inductor.utils.fresh_cache nor fresh_inductor_cache: "
                           "a compile cannot be timed from empty caches")
    stack.enter_context(fresh())
    return stack


@contextlib.contextmanager
def compile_cache_in(folder: Path) -> Iterator[None]:
    """Inductor's and Triton's on-disk caches in `folder` for the duration, the FX graph and AOTAutograd caches on:
    what from_scratch(saving=True) does in a temporary folder, in one the caller keeps, so that a later block in the
    same folder loads the graphs an earlier one saved instead of compiling them again. The compiler's in-memory
    lookups of its folders are cleared on the way in and out (as torch's fresh_cache does on the way in)."""
    import torch._inductor.utils as inductor_utils

    clear = getattr(inductor_utils, "clear_caches", None)
    if clear is None:
        raise RuntimeError("this torch has no torch._inductor.utils.clear_caches: its compile caches cannot be moved "
                           "to a folder of the test's")
    folder.mkdir(parents=True, exist_ok=True)
    saved = {key: os.environ.get(key) for key in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    clear()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    os.environ["TRITON_CACHE_DIR"] = str(folder / "triton")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        clear()


def compile_holding(call: Callable[[], Any], picks: Mapping[str, Any], folder: Path) -> tuple[Any, dict[str, Any]]:
    """(call()'s result, the picks its compile used): call()'s compile in `folder`, an empty one seeded with held
    autotuner picks (autotune_picks.write_picks), so that it takes them instead of timing candidates, with epilogue
    fusion decided by inductor's rules instead of timed (a timing no cache keeps, so it would race in every process),
    and every kernel compiled in this process: a kernel compiled in a worker comes back without its held config's
    mark of a finished search (Triton's Config does not pickle it), and its search ran again here and picked another
    config in every process (docs/results/gate-study-h200.md, "max-autotune's picks, held").
    The picks returned are the folder's after the compile: the held ones, plus whatever it timed afresh or searched
    again (autotune_picks.timed_afresh and searched_again tell which)."""
    import torch._inductor.config as inductor_config

    from perftests.support.autotune_picks import read_picks, write_picks

    if folder.exists() and any(folder.iterdir()):
        raise ValueError(f"compile_holding({folder}): the folder is not empty, so the compile could load a graph")
    write_picks(folder, picks)
    with compile_cache_in(folder), inductor_config.patch(benchmark_epilogue_fusion=False, compile_threads=1):
        out = call()
    return out, read_picks(folder)


def frames_compiled() -> int:
    """Frames dynamo has compiled in this process (a recompilation counts again): the plugin's own counter, the
    one its recompilation check reads."""
    import torch._dynamo.utils  # noqa: F401 - imported so that the counter exists

    from speedgate.fixture import compiled_frames

    return compiled_frames()


_warmed: set[str] = set()


def warm_compiler(device: str) -> None:
    """Compile and run a small function once per process and device, before any compile is timed.

    The first compile in a process also pays the compiler's one-time start (imports, its worker pool, the device's
    code generation), which would otherwise land in whichever case compiles first (the H100's compile cases:
    docs/results/gate-runs.md). Gated compile seconds are the case's own.
    """
    if device in _warmed:
        return
    import torch

    def tiny(x: torch.Tensor) -> torch.Tensor:
        return (torch.sin(x) * 2.0).sum(dim=-1)

    with no_compile_caches():
        torch.compile(tiny, dynamic=False)(torch.ones(8, 16, device=device))
    if device == "cuda":
        torch.cuda.synchronize()
    _warmed.add(device)


def wake_compile_workers() -> bool:
    """Inductor's compile workers started and answering, before a compile is timed; False where this process has no
    pool to wake (compile threads 1, a torch without these calls).

    The pool starts with the process's first compile (warm_compiler's small one finishes before it is ready), and it
    stops its workers after a while without a compile (inductor's quiesce_async_compile_pool, a minute by default),
    starting them again at the next. A compile that finds the pool not ready waits for it: a cost set by what this
    process compiled before and when (with -k, under -n 2: by the tests before it), not by the case
    (docs/results/gate-study-h200.md, the third study).
    """
    try:
        from torch._inductor.async_compile import AsyncCompile, get_compile_threads

        if get_compile_threads() <= 1:
            return False
        AsyncCompile.wait_pool_ready()  # its first start (warm_compiler's compile began it)
        AsyncCompile.wakeup()  # no message when the workers run; else the pool starts them
        AsyncCompile.process_pool().submit(AsyncCompile._get_ready).result(timeout=300)
    except (ImportError, AttributeError, RuntimeError):  # another torch; a daemonic process has no pool
        return False
    return True


def timed_call(fn: Callable[[], Any], device: str, *, from_empty: bool = True) -> tuple[Any, float]:
    """(fn()'s result, the wall seconds of that one call, the device's work included): a first compiled call,
    after the compiler's one-time start (warm_compiler), compiled from scratch (from_scratch) unless from_empty is
    False: the caller's caches (cold_and_warm's children, whose caches are what they measure; or a caller inside a
    from_scratch() of its own, to run more in the caches this compile filled)."""
    import torch

    warm_compiler(device)
    wake_compile_workers()

    from speedgate.timers import CpuTimer

    # The plugin's host clock around a synchronized call: what CudaTimer.first_call does, without building a
    # CudaTimer, whose L2-flush buffer (twice the L2) would count in the peak memory that test_compile_mode gates.
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def call_and_sync() -> Any:
        out = fn()
        sync()
        return out

    sync()
    with from_scratch() if from_empty else contextlib.nullcontext():
        ms, out = CpuTimer().first_call(call_and_sync)
    return out, ms / 1e3


def no_grad(fn: Callable[..., Any], *bound: Any) -> Callable[..., Any]:
    """A callable that runs fn(*bound, *args) without autograd: an inference side of a comparison, zero-argument
    when every argument is bound, else a function of its input set (perf.compare(..., inputs=make))."""
    import torch

    def call(*args: Any) -> Any:
        with torch.no_grad():
            return fn(*bound, *args)

    return call


def first_pass(run: Callable[[Any], Any], inputs: Sequence[Any], device: str, *,
               keep: Path | None = None) -> tuple[list[Any], float, int]:
    """(outputs, seconds, frames compiled) of the first pass of run over inputs, compiled from scratch.

    Dynamo's caches are reset (they are per code object, so another strategy compiling the same forward would
    otherwise be reused). Without `keep`, inductor's and AOTAutograd's caches are off and the on-disk ones in a
    temporary folder. With `keep`, an empty folder, the pass compiles there with those caches on, so they save what
    it compiled: compile_cache_in(keep) loads it later (nothing in an empty folder can help the pass itself; each
    graph it compiles is a new one).
    """
    import torch

    if keep is not None and keep.exists() and any(keep.iterdir()):
        raise ValueError(f"first_pass(keep={keep}): the folder is not empty, so the pass would not compile from scratch")
    warm_compiler(device)  # before counting frames: its own compile is not the pass's
    torch._dynamo.reset()
    before = frames_compiled()

    def run_all() -> list[Any]:
        with no_compile_caches() if keep is None else contextlib.nullcontext(), torch.no_grad():
            return [run(x) for x in inputs]

    if keep is None:
        outputs, seconds = timed_call(run_all, device)
    else:
        with compile_cache_in(keep):
            outputs, seconds = timed_call(run_all, device, from_empty=False)
    return outputs, seconds, frames_compiled() - before


@contextlib.contextmanager
def one_pointwise_config() -> Iterator[None]:
    """Inside: inductor gives each pointwise kernel the one config its heuristics choose, instead of timing a few
    in every process and keeping the fastest (triton.autotune_pointwise). For a comparison of compiled passes whose
    pointwise candidates time alike in isolation and apart inside the pass, so that a process's coin flip between
    them moved the ratio with no change to the code (docs/results/gate-study.md, section 8). Compile, save and load
    the graphs inside it: the setting is part of the FX graph cache's key."""
    import torch._inductor.config as inductor_config

    with inductor_config.patch({"triton.autotune_pointwise": False}):
        yield


def schedule_pass(run: Callable[[Any], Any]) -> Callable[..., None]:
    """A callable that runs `run` once on each of its arguments, without autograd, and returns nothing: one pass of a
    schedule, whose inputs are one input set (perf.compare(..., inputs=make), make(seed) returning the schedule)."""

    def call(*inputs: Any) -> None:
        for x in inputs:
            run(x)

    return no_grad(call)
