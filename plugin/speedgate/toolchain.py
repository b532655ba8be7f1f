"""One ptxas for every Triton kernel of a run, whichever tests ran before it.

Triton assembles a kernel with the ptxas that TRITON_PTXAS_PATH names when it compiles (its own bundled one when the
variable is unset), and keys every kernel with the version of the ptxas it found at its first compile in the
process (read once). torch.compile sets the variable, where it is unset, to the ptxas torch ships when inductor
first compiles a Triton kernel in the process itself. So, left alone, a kernel compiled before that moment is
assembled by Triton's ptxas and one compiled after it by torch's, under one key: its registers and speed followed the
tests run before it (a selection, -k, xdist's schedule; docs/results/gate-study-h200.md, "Two ptxas in one process").

At a run's first test, where the run has a test that uses perf, speedgate brings that moment forward
(settle_ptxas): Triton reads its key's version first, with the variable unset, as it did in every run whose first
Triton compile came before torch.compile's, then the variable is set as torch.compile would set it. Every kernel of
the run is then assembled by torch's ptxas, under the keys such a run made (an autotuner's held picks are found by
them). Those keys name Triton's ptxas, not the one that assembled the binary, so Triton's on-disk cache would hand the
run a binary that another process (a script, a probe, a run without speedgate) assembled with Triton's ptxas under the
same key: the run's binaries are kept in a folder of their ptxas's own instead, TRITON_CACHE_DIR's folder (Triton's
default where unset) with `speedgate-ptxas-<version>` below it (docs/results/gate-study-h200.md, "A cached binary of
the other ptxas"). A project that sets the variable keeps its own, and its cache as it is; where torch ships no ptxas
(a CPU build), or Triton's key cannot be read first, nothing is changed. Nothing here imports torch or triton at
import time: their folders are found from their packages' specs.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import re
import subprocess
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path

PTXAS_VARIABLE = "TRITON_PTXAS_PATH"
CACHE_VARIABLE = "TRITON_CACHE_DIR"
# Where each package keeps the CUDA tools it ships (ptxas; Triton's cuobjdump too), under its folder.
_TOOLS = {"torch": ("bin",), "triton": ("backends", "nvidia", "bin")}


@dataclass(frozen=True)
class Settled:
    """The ptxas that assembles the run's Triton kernels: its path, its version ('13.0.88'; None when it did not say)
    and whose it is: 'project' (the variable was set before speedgate looked), 'torch' (set by speedgate, as
    torch.compile would) or 'triton' (Triton's own: torch ships none, so torch.compile switches to none)."""

    path: str
    version: str | None
    whose: str
    cache: str | None = None  # the folder of its binaries, where speedgate set it ('torch'); else Triton's as it was


def bundled_tool(package: str, tool: str) -> Path | None:
    """The CUDA tool (ptxas, cuobjdump) that `package` (torch or triton) ships, when it is installed with one that
    can run; else None. Found from the package's spec: nothing is imported."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder).joinpath(*_TOOLS[package], tool)
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def bundled_ptxas(package: str) -> Path | None:
    """The ptxas `package` (torch or triton) ships, when it is installed with one that can run; else None."""
    return bundled_tool(package, "ptxas")


@functools.lru_cache(maxsize=8)
def ptxas_version(path: str) -> str | None:
    """'12.8.93' from `ptxas --version` ("... release 12.8, V12.8.93"), or None when it cannot run or says
    otherwise."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"\bV(\d+(?:\.\d+)+)", out)
    return match.group(1) if match else None


def read_triton_key_version(arch: int) -> bool:
    """Make Triton read the ptxas version it keys kernels for `arch` with (its NVIDIA backend's get_ptxas_version,
    cached for the process), now. False when this Triton has no such function or it fails: its keys are then made
    some other way, and nothing should be changed under them."""
    try:
        compiler = importlib.import_module("triton.backends.nvidia.compiler")
        read = getattr(compiler, "get_ptxas_version", None)
        if not callable(read):
            return False
        read(arch)  # positional, as Triton's backend hash calls it (its cache is keyed by the call's arguments)
    except Exception:  # noqa: BLE001 - any failure means the key was not read first
        return False
    return True


def triton_cache_dir() -> str:
    """The folder Triton keeps its compiled kernels in when TRITON_CACHE_DIR is unset: its knobs' answer, else its
    documented default (~/.triton/cache)."""
    try:
        return str(importlib.import_module("triton").knobs.cache.dir)
    except Exception:  # noqa: BLE001 - a Triton without knobs, or none: its default
        return str(Path.home() / ".triton" / "cache")


def binaries_folder(base: str, ptxas: str, version: str | None) -> Path:
    """The folder under `base` for binaries assembled by this ptxas alone: named by its version, or, where it did not
    say one, by its path."""
    tag = version or hashlib.sha256(ptxas.encode()).hexdigest()[:12]
    return Path(base) / f"speedgate-ptxas-{tag}"


def settle_ptxas(arch: int | None, environ: MutableMapping[str, str] | None = None,
                 read_key: Callable[[int], bool] | None = None) -> Settled | None:
    """Settle which ptxas assembles this process's Triton kernels for a GPU of compute capability `arch` (90 for
    sm_90; None: no GPU, nothing to settle) before a run's first test; see the module's docstring.
    read_key: what makes Triton read its key's version (read_triton_key_version). Children started after it inherit
    the variables. Returns what assembles them; None without a GPU or where it
    cannot be settled (torch ships a ptxas but Triton's key could not be read first: left to torch.compile)."""
    environ = os.environ if environ is None else environ
    if arch is None:
        return None
    named = environ.get(PTXAS_VARIABLE)
    if named:
        return Settled(named, ptxas_version(named), "project")
    torch_ptxas, triton_ptxas = bundled_ptxas("torch"), bundled_ptxas("triton")
    if torch_ptxas is not None:
        if not (read_key or read_triton_key_version)(arch):
            return None
        version = ptxas_version(str(torch_ptxas))
        environ[PTXAS_VARIABLE] = str(torch_ptxas)
        environ[CACHE_VARIABLE] = cache = str(binaries_folder(environ.get(CACHE_VARIABLE) or triton_cache_dir(),
                                                              str(torch_ptxas), version))
        return Settled(str(torch_ptxas), version, "torch", cache)
    if triton_ptxas is None:
        return None
    return Settled(str(triton_ptxas), ptxas_version(str(triton_ptxas)), "triton")


def settle_for_visible_gpu() -> Settled | None:
    """settle_ptxas for this process's first visible GPU, its target asked of NVML (speedgate.hardware), so that a
    process that times on the CPU does not start CUDA here; None where it sees no GPU."""
    from .hardware import compute_capability, visible_gpu_tokens

    gpus = visible_gpu_tokens()
    return settle_ptxas(compute_capability(gpus[0]) if gpus else None)


__all__ = ["CACHE_VARIABLE", "PTXAS_VARIABLE", "Settled", "binaries_folder", "bundled_ptxas", "bundled_tool", "ptxas_version",
           "read_triton_key_version", "settle_for_visible_gpu", "settle_ptxas", "triton_cache_dir"]
