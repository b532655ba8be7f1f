"""Helpers the kernel modules share: the interpreter switch, and an autotuner's chosen config as plain values."""

from __future__ import annotations

import os
from typing import Any

INTERPRETING = os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on")


def plain_config(config: Any) -> dict[str, Any]:
    """A triton.Config as plain values: its meta-parameters, num_warps and num_stages (the form run_config() takes)."""
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def best_config(kernel: Any) -> dict[str, Any] | None:
    """An autotuned kernel's choice for the last key it ran, as plain values (recorded with the case's result)."""
    config = getattr(kernel, "best_config", None)
    return None if config is None else plain_config(config)


def run_config(kernel: Any, grid: Any, config: dict[str, Any], *args: Any, **kwargs: Any) -> None:
    """Launch an autotuned kernel at one given config (the autotuner's race skipped), its pre_hook applied as the
    autotuner would: for sweeps that time every config the way the gate times a case (lab/vendor_gap_probe.py)."""
    meta = dict(config)
    warps, stages = meta.pop("num_warps", None), meta.pop("num_stages", None)
    expected = set(kernel.configs[0].kwargs)
    if set(meta) != expected or warps is None or stages is None:
        raise ValueError(f"config must give {', '.join(sorted(expected))}, num_warps and num_stages; got {sorted(config)}")
    hook = kernel.configs[0].pre_hook
    if hook is not None:
        hook({**dict(zip(kernel.arg_names, args)), **kwargs, **meta})
    kernel.fn[grid](*args, **kwargs, **meta, num_warps=warps, num_stages=stages)
