"""Helpers the kernel modules share: the interpreter switch, an autotuner's chosen config as plain values, and an
autotuner held to one of its candidates."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

INTERPRETING = os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on")


def plain_config(config: Any) -> dict[str, Any]:
    """A triton.Config as plain values: its meta-parameters, num_warps and num_stages (as reports record it)."""
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def best_config(kernel: Any) -> dict[str, Any] | None:
    """An autotuned kernel's choice for the last key it ran, as plain values (recorded with the case's result)."""
    config = getattr(kernel, "best_config", None)
    return None if config is None else plain_config(config)


def hold(kernel: Any, config: Mapping[str, Any] | None) -> Callable[[], None]:
    """Limit an autotuned kernel (triton.autotune) to its candidate whose plain values are `config`, so that it runs
    that config without a race; returns the function that gives the candidates back. With no config, or none of the
    candidates equal to it (they changed since the bless), the kernel keeps every candidate and races as before (the
    case's report then names the config change)."""
    candidates = list(getattr(kernel, "configs", None) or [])
    match = [c for c in candidates if config is not None and plain_config(c) == dict(config)]
    if not match:
        return lambda: None
    kernel.configs = match[:1]

    def restore() -> None:
        kernel.configs = candidates

    return restore
