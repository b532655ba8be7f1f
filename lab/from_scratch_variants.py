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

    # Each takes the suite's keyword: saving=True leaves the FX graph and AOTAutograd caches on, as the suite's does
    # (its fresh process loads the timed compile); a variant that ignored it broke the suite's call.
    if variant == "off":
        def off(*, saving: bool = False) -> contextlib.ExitStack:
            return contextlib.ExitStack() if saving else compile_time.no_compile_caches()

        compile_time.from_scratch = off
    elif variant == "keep_dir":
        def keep_dir(*, saving: bool = False) -> contextlib.ExitStack:
            import torch._inductor.utils as inductor_utils

            stack = contextlib.ExitStack() if saving else compile_time.no_compile_caches()
            stack.enter_context(inductor_utils.fresh_cache(delete=False))
            return stack

        compile_time.from_scratch = keep_dir
    else:
        raise ValueError(f"SPEEDGATE_FROM_SCRATCH={variant!r}: one of off, keep_dir (or unset)")
