"""A pytest plugin for a probe (-p lab.from_scratch_variants): SPEEDGATE_FROM_SCRATCH names how the suite's
compile timing (perftests.support.compile_time.from_scratch) empties the caches, so that one run can tell whether
the emptying changes the speed of the code it compiles (lab/device/from_scratch_probe.sh):

  unset     the suite's own (torch's fresh_cache: in-memory caches cleared, a fresh folder, deleted after)
  off       only the FX graph and AOTAutograd caches off (the runner's Triton and inductor folders stay)
  keep_dir  fresh_cache(delete=False): the same, but its folder is kept until the process ends
"""

from __future__ import annotations

import contextlib
import os
from typing import Any


def pytest_configure(config: Any) -> None:
    variant = os.environ.get("SPEEDGATE_FROM_SCRATCH", "")
    if not variant:
        return
    from perftests.support import compile_time

    if variant == "off":
        compile_time.from_scratch = compile_time.no_compile_caches  # type: ignore[assignment]
    elif variant == "keep_dir":
        def keep_dir() -> contextlib.ExitStack:
            import torch._inductor.utils as inductor_utils

            stack = compile_time.no_compile_caches()
            stack.enter_context(inductor_utils.fresh_cache(delete=False))
            return stack

        compile_time.from_scratch = keep_dir  # type: ignore[assignment]
    else:
        raise ValueError(f"SPEEDGATE_FROM_SCRATCH={variant!r}: one of off, keep_dir (or unset)")
