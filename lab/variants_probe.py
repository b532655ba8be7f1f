"""Every compiled variant of named Triton kernels in a pytest process, written when the session ends: a pytest plugin
for the lab, to see why one kernel at one config has two register counts (docs/results/gate-study-h200.md).

    VARIANTS_OUT=DIR VARIANTS_KERNELS=perftests.kernels.attention:KERNEL[,module:name ...] \\
        python -m pytest ... -p lab.variants_probe

Writes DIR/variants-<worker>-<pid>.json (worker: xdist's id, or "main"): per kernel, per device, each compiled
variant in the order the process compiled it: its cache key, registers, spills, shared memory, the metadata Triton
compiled it with (options: warps, stages, ptx version, ptxas options...), and SHA-256 prefixes of its PTX and cubin.
Reads Triton's own caches (JITFunction.device_caches); launches and compiles nothing.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from pathlib import Path
from typing import Any


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


def variants(kernel: Any) -> dict[str, list[dict[str, Any]]]:
    """{device: [variant facts]} of a @triton.jit function (or an autotuner around one)."""
    jit = getattr(kernel, "fn", kernel)
    out: dict[str, list[dict[str, Any]]] = {}
    for device, caches in getattr(jit, "device_caches", {}).items():
        found = []
        for key, compiled in caches[0].items():
            asm = getattr(compiled, "asm", {}) or {}
            meta = getattr(compiled, "metadata", None)
            meta = meta._asdict() if hasattr(meta, "_asdict") else vars(meta) if meta is not None else {}
            found.append({
                "key": str(key)[:2000],
                "registers": getattr(compiled, "n_regs", None),
                "spills": getattr(compiled, "n_spills", None),
                "shared": meta.get("shared"),
                "ptx_sha256": hashlib.sha256(str(asm.get("ptx", "")).encode()).hexdigest()[:16],
                "cubin_sha256": hashlib.sha256(asm["cubin"]).hexdigest()[:16] if "cubin" in asm else None,
                "metadata": _plain(meta),
            })
        out[str(device)] = found
    return out


def pytest_sessionfinish(session: Any) -> None:
    out = os.environ.get("VARIANTS_OUT")
    if not out:
        return
    found = {}
    for spec in filter(None, os.environ.get("VARIANTS_KERNELS", "").split(",")):
        module, name = spec.split(":")
        found[spec] = variants(getattr(importlib.import_module(module), name))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(out).mkdir(parents=True, exist_ok=True)
    order = [item.nodeid for item in getattr(session, "items", [])]
    (Path(out) / f"variants-{worker}-{os.getpid()}.json").write_text(
        json.dumps({"worker": worker, "collected": order, "kernels": found}, indent=1, sort_keys=True))
