"""What the installed Triton interpreter cannot run, found by trying it: the lab tests that need it skip with the reason."""

from __future__ import annotations

import functools

import numpy
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction


def _loop_to(n):  # the bound a kernel argument
    for _ in tl.range(0, n, 1):
        pass


@functools.cache
def runtime_loop_bound_gap() -> str | None:
    """Why this interpreter cannot run a loop whose bound is known only at run time (a kernel argument, a program id:
    every key loop of the flash kernel, every K loop of the matmuls), or None when it can. Triton 3.6's interpreter
    turns the bound into a Python int with int() of its 1-element array, which numpy >= 2.4 refuses; 3.7 squeezes the
    array first (triton-lang/triton#9171). Tried on the interpreter whether or not this process interprets, so the
    answer also holds for a subprocess started with TRITON_INTERPRET=1."""
    try:
        InterpretedFunction(_loop_to)[(1,)](2)
    except Exception as exc:
        if "only 0-dimensional arrays can be converted to Python scalars" not in str(exc):
            raise
        return (f"triton {triton.__version__}'s interpreter cannot loop to a run-time bound under numpy {numpy.__version__}"
                " (it calls int() on a 1-element array, which numpy >= 2.4 refuses; fixed in triton 3.7, triton-lang/triton#9171)")
    return None
