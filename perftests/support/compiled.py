"""The compiler as the alternative: a Triton kernel against torch.compile of its own eager reference.

Each eager reference is a module-level function of its tensors, compiled once (fullgraph, static shapes) with
no choice made by timing candidates on the device, so every process, on every card, compiles the same reference:
inductor's deterministic mode (a GEMM takes the vendor library's kernel, a reduction inductor's heuristic config),
and its pointwise autotuning held (each pointwise kernel takes its first listed config; deterministic mode alone
still times those candidates, and picked differently per process). The first config is not always the one tuning
would pick: what holding it costs each reference is measured per kind (docs/results/gate-study-h200.md, "Inductor's
pointwise picks held"; docs/results/gate-study.md, section 6). With max-autotune's races instead, the
reference settled into one of two speeds per process, and its compile was most of a cold run's time
(docs/results/suite-time.md). A new shape recompiles under its own guards. The compiled function's first call
(trace, inductor) is the case's `reference_first_ms`: compile time is recorded, never timed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from perftests.support.inputs import compare_on_inputs

# Options of torch.compile(options=...): what the compiled reference is. Changing them can change every vs_compile
# reference: gate each kind's vs_compile tests (lab/device/lib.sh's compiled_refs), and re-bless the entries whose
# reference ran other kernels (the gate names them beside the verdict).
OPTIONS = {"deterministic": True, "triton.autotune_pointwise": False}
NAME = "vs_compile"
# Every parametrization of a case is a new shape or dtype for the same function: room for all of them,
# so dynamo never falls back to eager silently after its default of 8.
RECOMPILE_LIMIT = 64

_compiled: dict[Callable[..., Any], Callable[..., Any]] = {}


def compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    if fn not in _compiled:
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        _compiled[fn] = torch.compile(fn, options=dict(OPTIONS), dynamic=False, fullgraph=True)
    return _compiled[fn]


def compare_with_compiled(
    perf: Any,
    device: str,
    eager: Callable[..., Any],
    optimized: Callable[..., Any],
    inputs: Callable[[int], Sequence[Any]],
    *,
    fixed: tuple[Any, ...] = (),
    **kwargs: Any,
) -> Any:
    """perf.compare(torch.compile(eager), optimized, inputs=inputs, name='vs_compile'), on the GPU.

    Both sides are called on each input set, the compiled eager as eager(*set, *fixed): `fixed` holds what every
    call shares (eps, a layer's weights). An input set of the same shapes, dtypes and strides does not recompile.
    graph=True or bind='why' binds the sides to set 0 instead, waiving fresh inputs (see compare_on_inputs).

    On the CPU nothing is timed (the Triton side runs in the interpreter), and compiling every reference
    through inductor's C++ backend would spend CI minutes checking inductor rather than our kernels: skipped.
    """
    if device != "cuda":
        return None
    fn = compiled(eager)

    def reference(*args: Any) -> Any:
        return fn(*args, *fixed)

    return compare_on_inputs(perf, reference, optimized, inputs, name=NAME, **kwargs)
