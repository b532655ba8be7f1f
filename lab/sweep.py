"""Launching one of an autotuned kernel's configs without the autotuner's race: what the probes' sweeps time."""

from __future__ import annotations

from typing import Any


def run_config(kernel: Any, grid: Any, config: dict[str, Any], *args: Any, **kwargs: Any) -> None:
    """Launch an autotuned kernel at one given config (the autotuner's race skipped), its pre_hook applied as the
    autotuner would: for sweeps that time every config the way the gate times a case (lab/vendor_gap_probe.py).
    config: its meta-parameters, num_warps and num_stages, as plain_config() gives them."""
    meta = dict(config)
    warps, stages = meta.pop("num_warps", None), meta.pop("num_stages", None)
    expected = set(kernel.configs[0].kwargs)
    if set(meta) != expected or warps is None or stages is None:
        raise ValueError(f"config must give {', '.join(sorted(expected))}, num_warps and num_stages; got {sorted(config)}")
    hook = kernel.configs[0].pre_hook
    if hook is not None:
        hook({**dict(zip(kernel.arg_names, args)), **kwargs, **meta})
    kernel.fn[grid](*args, **kwargs, **meta, num_warps=warps, num_stages=stages)
