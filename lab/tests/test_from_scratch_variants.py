"""lab/from_scratch_variants.py on the CPU: each variant puts its own emptying in place of the suite's from_scratch
for the run, no variant leaves the suite's own, and an unknown name stops the run naming it."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import pytest

from lab import from_scratch_variants as plugin
from perftests.support import compile_time


@pytest.fixture
def restore() -> object:
    suite_own = compile_time.from_scratch
    yield suite_own
    compile_time.from_scratch = suite_own  # type: ignore[assignment]


@pytest.mark.parametrize("variant", ["", "off", "keep_dir"])
def test_each_variant_swaps_the_suites_emptying(monkeypatch: pytest.MonkeyPatch, restore: object, variant: str,
                                                tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # keep_dir's folder stays: here, not in /tmp
    monkeypatch.setenv("SPEEDGATE_FROM_SCRATCH", variant)
    plugin.pytest_configure(None)
    if variant == "":
        assert compile_time.from_scratch is restore
        return
    assert compile_time.from_scratch is not restore
    import torch._inductor.config

    before = torch._inductor.config.fx_graph_cache
    for saving in (False, True):  # the suite's own keyword: a variant without it broke test_compile_mode
        stack = compile_time.from_scratch(saving=saving)
        assert isinstance(stack, contextlib.ExitStack)
        with stack:
            # without saving every variant compiles and loads nothing; with it, the FX graph cache is left as it was
            assert torch._inductor.config.fx_graph_cache is (before if saving else False)
    stack = compile_time.from_scratch()
    with stack:
        assert torch._inductor.config.fx_graph_cache is False


def test_an_unknown_variant_is_refused(monkeypatch: pytest.MonkeyPatch, restore: object) -> None:
    monkeypatch.setenv("SPEEDGATE_FROM_SCRATCH", "warm")
    with pytest.raises(ValueError, match="'warm'"):
        plugin.pytest_configure(None)
    assert compile_time.from_scratch is restore
