"""Resources and instruction mix of the suite's autotuned kernels (GPU only): the 'why' behind their speed.

Usage: python lab/inspect_kernels.py [--out DIR]
For each kernel at its autotuned config: registers, spills, shared memory, and counts of the SASS instructions
that tell the path it took (HGMMA/QGMMA: Hopper warpgroup MMAs; UTMALDG: TMA loads; LDGSTS: cp.async loads;
LDL/STL: local-memory spills; MUFU.EX2: exp2). Writes each kernel's SASS to DIR when given.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OPS = ("HGMMA", "QGMMA", "HMMA", "UTMALDG", "UTMASTG", "LDGSTS", "LDG", "STG", "LDS", "LDSM", "LDL", "STL", "MUFU.EX2", "BAR")


def op_counts(sass: str) -> Counter:
    counts: Counter = Counter()
    for line in sass.splitlines():
        match = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if not match:
            continue
        op = match.group(1)
        for name in OPS:
            if op == name or op.startswith(name + "."):
                counts[name] += 1
    return counts


def _sass(compiled: Any) -> str:
    """SASS of a compiled kernel: its cubin through cuobjdump (the CUDA toolkit's, else the one Triton ships)."""
    import shutil
    import subprocess
    import tempfile

    import triton

    tool = shutil.which("cuobjdump") or str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        return subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, check=True).stdout


def report(label: str, compiled: Any, out: Path | None) -> None:
    sass = _sass(compiled)
    counts = op_counts(sass)
    meta = compiled.metadata
    print(
        f"{label:<44} regs {compiled.n_regs:>3}  spills {compiled.n_spills:>3}  smem {meta.shared // 1024:>3} KiB  "
        + f"  SASS lines {len(sass.splitlines())}  "
        + "  ".join(f"{name} {counts[name]}" for name in OPS if counts[name])
    )
    if out is not None:
        (out / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', label)}.sass").write_text(sass)


def main() -> None:
    import torch
    import triton

    from perftests.kernels import attention as attn
    from perftests.kernels import matmul as mm

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)

    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    x8, w8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    for label, launch_args in (("bf16", (x, w, {})), ("fp8", (x8, w8, {"scale_x": one, "scale_w": one}))):
        a, b, kw = launch_args
        for kernel in ("tiled", "tma_persistent"):
            launch, tuner = mm.launcher(kernel)
            launch(a, b, **kw)  # autotunes
            _safe_report(f"matmul {kernel} {label} {n}^3 {mm.best_config(tuner)}", tuner, args.out)

    q, k, v = (torch.randn(2, 8, 8192, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    attn.flash_attention(q, k, v, True)
    tuner = attn.KERNEL
    _safe_report(f"flash attention causal S8192 D128 {mm.best_config(tuner)}", tuner, args.out)
    del triton


def _safe_report(label: str, tuner: Any, out: Path | None) -> None:
    from perftests.kernels.common import best_config

    try:
        report(label, compiled_for(tuner, best_config(tuner)), out)
    except Exception as exc:  # a diagnostic: say what could not be read and go on to the next kernel
        print(f"{label}: could not inspect: {type(exc).__name__}: {exc}")


def compiled_for(tuner: Any, config: dict[str, Any], constants: dict[str, Any] | None = None) -> Any:
    """The compiled kernel the autotuner ran for config (plain values, as plain_config() gives them): the cache entry
    whose constants match it, and `constants` (the constexpr switches that tell apart variants compiled at the same
    config, e.g. {"WARP_SPECIALIZE": True})."""
    fn = tuner.fn
    wanted = {**config, **(constants or {})}
    for cache in fn.device_caches.values():
        kernels = cache[0] if isinstance(cache, tuple) else cache
        for compiled in kernels.values():
            consts = dict(getattr(compiled, "src", None).constants if hasattr(compiled, "src") else {})
            opts = compiled.metadata
            names = {fn.arg_names[k[0]] if isinstance(k, tuple) else k: val for k, val in consts.items()}
            if all(names.get(key, getattr(opts, key, None)) == val for key, val in wanted.items()):
                return compiled
    raise LookupError(f"no compiled kernel for {wanted}")


if __name__ == "__main__":
    main()
