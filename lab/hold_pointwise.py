"""A pytest plugin for measuring, never loaded by the suite: `-p lab.hold_pointwise` turns inductor's pointwise
autotuning off for every compile of the run (each pointwise kernel takes its first listed config, as the compiled
references of perftests/support/compiled.py do), so that a case can be measured held before it holds anything
(issue 46: test_dynamic_shapes[dynamic]'s two compiled sides; lab/device/held_picks_check.sh)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    import torch._inductor.config as inductor_config

    inductor_config.triton.autotune_pointwise = False
