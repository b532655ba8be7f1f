"""Artifacts of a failing case, kept so a regression can be diagnosed without re-running it.

For each failing test: its comparisons' results and raw samples, the source of the project's Triton kernels with
each compiled variant's IR, PTX and SASS (where the toolchain is there), autotuners' chosen configurations, and
the Python code inductor generated in this process. Everything is best effort and says what it could not keep.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .advice import bless_command

README = """speedgate artifacts for {nodeid}

results.json   every comparison of the test: times, interval, baseline, verdict, note
samples.json   the raw per-round samples of both sides (milliseconds), in measurement order
failure.txt    pytest's report of the failure
triton/        the project's Triton kernels: source, and per compiled variant its TTGIR, PTX, SASS and metadata
inductor/      Python code torch.compile generated in this process (when it compiled anything)

What to do next: re-run the test alone to confirm (`pytest '{nodeid}'`); compare the SASS and configurations here
with a passing run's; if the change is intended, re-bless with {bless}.
{problems}"""


# Compiled variants kept per kernel (each costs a cuobjdump run for its SASS).
MAX_VARIANTS = 8


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:150] or "case"


def write(folder: Path, nodeid: str, results: list[dict[str, Any]], samples: dict[str, Any], failure: str,
          project_root: Path) -> Path:
    """Write one failing test's artifacts under folder/<slug(nodeid)>/ and return that path."""
    out = folder / slug(nodeid)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True, default=str) + "\n")
    (out / "samples.json").write_text(json.dumps(samples, indent=1) + "\n")
    (out / "failure.txt").write_text(failure)
    problems = []
    problems += _triton(out / "triton", project_root)
    problems += _inductor(out / "inductor")
    text = README.format(nodeid=nodeid, bless=bless_command(nodeid, quoted=True),
                         problems="\n".join(f"not kept: {p}" for p in problems))
    (out / "README.txt").write_text(text)
    return out


def _project_objects(root: Path) -> Iterable[tuple[str, Any]]:
    root = root.resolve()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path or name.startswith("speedgate"):
            continue
        try:
            inside = Path(path).resolve().is_relative_to(root)
        except (OSError, ValueError):
            continue
        if inside:
            for attr, obj in list(vars(module).items()):
                yield f"{name}.{attr}", obj


def _triton(out: Path, root: Path) -> list[str]:
    if "triton" not in sys.modules:
        return []
    problems: list[str] = []
    seen: set[int] = set()
    for qualname, obj in _project_objects(root):
        kind = type(obj).__name__
        if kind not in ("JITFunction", "Autotuner", "InterpretedFunction") or id(obj) in seen:
            continue
        seen.add(id(obj))
        fn = getattr(obj, "fn", obj) if kind == "Autotuner" else obj
        out.mkdir(parents=True, exist_ok=True)
        source = getattr(fn, "src", None)
        if source:
            (out / f"{qualname}.py").write_text(source)
        best = getattr(obj, "best_config", None)
        if best is not None:
            config = {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages}
            (out / f"{qualname}.best_config.json").write_text(json.dumps(config, indent=2, default=str) + "\n")
        variants = _compiled_variants(fn)
        if best is not None:
            # An autotuner compiled every config it tried; keep the one it chose.
            chosen = [c for c in variants if getattr(getattr(c, "metadata", None), "num_warps", None) == best.num_warps
                      and getattr(c.metadata, "num_stages", None) == best.num_stages]
            variants = chosen or variants
        for i, compiled in enumerate(variants[:MAX_VARIANTS]):
            stem = out / f"{qualname}.{i}"
            asm = getattr(compiled, "asm", {})
            for key in ("ttgir", "ptx"):
                try:
                    text = asm[key]
                except Exception:
                    continue
                (stem.with_suffix(f".{key}")).write_text(text if isinstance(text, str) else text.decode())
            meta = getattr(compiled, "metadata", None)
            if meta is not None:
                fields = meta._asdict() if hasattr(meta, "_asdict") else dict(vars(meta))
                fields.update(n_regs=getattr(compiled, "n_regs", None), n_spills=getattr(compiled, "n_spills", None))
                stem.with_suffix(".json").write_text(json.dumps(fields, indent=2, default=str) + "\n")
            problem = _sass(asm, stem.with_suffix(".sass"))
            if problem and problem not in problems:
                problems.append(problem)
    return problems


def _compiled_variants(fn: Any) -> list[Any]:
    variants: list[Any] = []
    for cache in getattr(fn, "device_caches", {}).values():
        kernels = cache[0] if isinstance(cache, tuple) else cache
        if isinstance(kernels, dict):
            variants.extend(kernels.values())
    return variants


def _sass(asm: Any, path: Path) -> str:
    try:
        cubin = asm["cubin"]
    except Exception:
        return ""
    import triton

    tool = shutil.which("cuobjdump") or str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")
    try:
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(cubin)
            f.flush()
            path.write_text(subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, check=True, timeout=60).stdout)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"SASS (cuobjdump: {exc})"
    return ""


def _inductor(out: Path) -> list[str]:
    codecache = sys.modules.get("torch._inductor.codecache")
    if codecache is None:
        return []
    cache = getattr(codecache, "PyCodeCache", None)
    modules = getattr(cache, "modules", None) or list(getattr(cache, "cache", {}).values())
    files = [str(f) for f in (getattr(m, "__file__", None) for m in modules) if f]
    if not files:
        return []
    out.mkdir(parents=True, exist_ok=True)
    for f in files:
        try:
            shutil.copy(f, out / Path(f).name)
        except OSError as exc:
            return [f"inductor code {f} ({exc})"]
    return []
