"""lab/tests/interpreter_gaps.py finds the interpreter's gaps exactly where they are: a probe that always found one
would skip the lab's checks on CI, one that never did would let them fail on the GPU machine."""

from __future__ import annotations

import numpy
import triton

from lab.tests.interpreter_gaps import runtime_loop_bound_gap


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def test_the_loop_bound_gap_is_found_under_triton_3_6_with_numpy_2_4_only() -> None:
    # Measured: triton 3.6.0 fails with numpy 2.4.6 and runs with 2.3.5; triton 3.7.1 runs with 2.4.6.
    expected = _minor(triton.__version__) < (3, 7) and _minor(numpy.__version__) >= (2, 4)
    gap = runtime_loop_bound_gap()
    assert (gap is not None) == expected, (triton.__version__, numpy.__version__, gap)
    if gap is not None:
        assert triton.__version__ in gap and numpy.__version__ in gap
