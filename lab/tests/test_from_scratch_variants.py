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
    if variant == "off":
        assert compile_time.from_scratch is compile_time.no_compile_caches
    stack = compile_time.from_scratch()
    assert isinstance(stack, contextlib.ExitStack)
    with stack:
        import torch._inductor.config

        assert torch._inductor.config.fx_graph_cache is False  # every variant compiles, none loads


def test_an_unknown_variant_is_refused(monkeypatch: pytest.MonkeyPatch, restore: object) -> None:
    monkeypatch.setenv("SPEEDGATE_FROM_SCRATCH", "warm")
    with pytest.raises(ValueError, match="'warm'"):
        plugin.pytest_configure(None)
    assert compile_time.from_scratch is restore
