"""Helpers the kernel modules share: the interpreter switch, and an autotuner's chosen config as plain values."""

from __future__ import annotations

import os
from typing import Any

INTERPRETING = os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on")


def plain_config(config: Any) -> dict[str, Any]:
    """A triton.Config as plain values: its meta-parameters, num_warps and num_stages (as reports record it)."""
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def best_config(kernel: Any) -> dict[str, Any] | None:
    """An autotuned kernel's choice for the last key it ran, as plain values (recorded with the case's result)."""
    config = getattr(kernel, "best_config", None)
    return None if config is None else plain_config(config)
