"""Compiling the suite's Hopper kernels for sm_90 on any machine, for the CPU tests: Gluon has no interpreter and
does not compile under TRITON_INTERPRET=1 (which CI sets for the Triton kernels), so the compile runs in a subprocess
without it (build), through Triton's own stages and the ptxas it ships (compile_to, ptxas_report); what the tests read
of the result: the warpgroup MMAs and their waits (dot_ops, loops). The lab's probes compile their variants with it too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def not_on_hopper(device: str, cpu_test: str) -> str | None:
    """Why a Gluon case cannot run its kernel here, or None on Hopper: Gluon has no interpreter (`cpu_test`
    compiles the kernel for sm_90 on the CPU instead), and the kernels are written for sm_90. The case skips
    with it itself, so that pytest reports the skip at the case."""
    if device != "cuda":
        return f"Gluon has no interpreter: {cpu_test} compiles it for sm_90 on the CPU"
    import torch

    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"the Gluon kernel is written for Hopper (sm_90); this GPU is sm_{major}{minor}"
    return None


def build(script: str, timeout: float = 900) -> Any:
    """Run `script` (Python that prints one JSON line last) in a fresh interpreter with the repository on its path
    and TRITON_INTERPRET unset; return that JSON. A failure raises AssertionError with the compiler's stderr."""
    return build_each(script, [None], timeout)[0]


def build_each(script: str, items: Sequence[Any], timeout: float = 900) -> list[Any]:
    """`build` once for each item, with the item (JSON) bound to `ITEM` in the script, the builds at once (at most
    one a core): each kernel's compile and ptxas run in one thread, so several kernels built one after another take
    the sum of their times (docs/results/suite-time.md). The results in the items' order."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    prelude = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nITEM = __import__('json').loads(sys.argv[1])\n"
    width = max(1, min(len(items), os.cpu_count() or 1))
    with ThreadPoolExecutor(width) as pool:
        done = list(pool.map(lambda item: subprocess.run(
            [sys.executable, "-c", prelude + script, json.dumps(item)], capture_output=True, text=True, env=env,
            timeout=timeout), items))
    for item, one in zip(items, done):
        assert one.returncode == 0, f"the build for {item} exited {one.returncode}: {one.stderr[-3000:]}"
    return [json.loads(one.stdout.strip().splitlines()[-1]) for one in done]


def loops(ops: list[str]) -> list[list[str]]:
    """The MMA ops and waits of each innermost loop that has any, from dot_ops's list (a
    persistent kernel's K loops sit inside its loop over output tiles)."""
    found: list[list[str]] = []
    stack: list[tuple[list[str], bool]] = []  # (the loop's own ops, whether a loop is nested in it)
    for op in ops:
        if op == "for {":
            if stack:
                stack[-1] = (stack[-1][0], True)
            stack.append(([], False))
        elif op == "}" and stack:
            own, nested = stack.pop()
            if own and not nested:
                found.append(own)
        elif stack:
            stack[-1][0].append(op)
    return found


def compile_to(fn: Any, signature: dict[str, str], constants: dict[str, Any], warps: int, stages: int,
               last: str, aligned: tuple[str, ...] = ()) -> dict[str, Any]:
    """Compile a @triton.jit or @gluon.jit function through Triton's stages up to `last` ("ttgir" or "ptx") for
    sm_90, on any machine (the interpreter off). `signature` types the runtime arguments; every other argument is a
    constexpr, from `constants` or its default; `aligned` names arguments known divisible by 16 (as a launch
    specializes pointers and integers). Returns each stage's text by its name, and "shared": the dynamic shared
    memory in bytes (Triton's metadata; 0 before llir)."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler.compiler import ASTSource

    _ = fn.cache_key  # what a launch computes first: it hashes every function and aggregate the kernel reaches
    unknown = set(constants) - set(fn.arg_names)
    if unknown:
        raise ValueError(f"the kernel has no constexpr {sorted(unknown)}; its arguments: {fn.arg_names}")
    constants = dict(constants)
    signature = dict(signature)
    for name in fn.arg_names:
        if name not in signature:
            signature[name] = "constexpr"
            constants.setdefault(name, fn.params[fn.arg_names.index(name)].default)
    if fn.is_gluon():  # a Gluon kernel states its layouts: its source starts at TTGIR
        from triton.experimental.gluon._runtime import GluonASTSource as ASTSource
    target = GPUTarget("cuda", 90, 32)
    backend = CUDABackend(target)
    source = ASTSource(fn=fn, signature=signature,
                       constexprs={(fn.arg_names.index(k),): v for k, v in constants.items()},
                       attrs={(fn.arg_names.index(name),): backend.parse_attr("D") for name in aligned})
    options = backend.parse_options({"num_warps": warps, "num_stages": stages})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = source.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                            context)
    stages_: dict[str, Any] = {}
    backend.add_stages(stages_, options, source.language)
    metadata: dict[str, Any] = {}
    order = ["ttir", "ttgir", "llir", "ptx"]
    found: dict[str, Any] = {}
    for stage in order[:order.index(last) + 1]:
        if stage not in stages_:  # Gluon: no TTIR stage, its source is TTGIR already
            found[stage] = str(module)
            continue
        module = stages_[stage](module, metadata)
        found[stage] = str(module)
    return {**found, "shared": int(metadata.get("shared", 0))}


def ptxas_report(ptx: str) -> dict[str, Any]:
    """Registers, spill bytes and performance notes (C75xx) of ptxas -v for sm_90a, with the ptxas Triton compiles
    with."""
    import tempfile

    from triton.backends.nvidia.compiler import get_ptxas

    ptxas = get_ptxas(90).path  # Triton's own choice: TRITON_PTXAS_PATH, else the one it ships
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        done = subprocess.run([ptxas, "-arch=sm_90a", "-v", "-o", str(Path(tmp) / "kernel.cubin"), str(src)],
                              capture_output=True, text=True, timeout=300)
    log = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"ptxas failed: {log[-1000:]}")
    regs = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    notes = sorted({m.group(1) + ": " + m.group(2).strip() for m in re.finditer(r"\((C75\d\d)\) ([^\n]*?)(?: in (?:the )?function.*)?$", log, re.M)})
    return {"registers": int(regs.group(1)) if regs else None,
            "spill_stores": int(spills.group(1)) if spills else None,
            "spill_loads": int(spills.group(2)) if spills else None,
            "notes": notes}


def dot_ops(ttgir: str) -> list[str]:
    """The warpgroup MMA ops and their waits, in program order, with loop boundaries: `dot async` / `dot` and
    `wait pendings=N`, `for {` / `}` (an scf.for's body). A dot followed at once by `wait pendings=0` runs
    synchronously: what follows it cannot overlap it within the warpgroup."""
    ops: list[str] = []
    depth_marks: list[int] = []
    for line in ttgir.splitlines():
        text = line.strip()
        if " = scf.for " in text:
            ops.append("for {")
            depth_marks.append(len(line) - len(line.lstrip()))
        elif text.startswith("}") and depth_marks and len(line) - len(line.lstrip()) == depth_marks[-1]:
            ops.append("}")
            depth_marks.pop()
        elif "ttng.warp_group_dot_wait" in text:
            pendings = re.search(r"pendings = (\d+)", text)
            ops.append(f"wait pendings={pendings.group(1) if pendings else '?'}")
        elif "ttng.warp_group_dot " in text or "ttng.warp_group_dot\t" in text:
            ops.append("dot async" if "isAsync = true" in text else "dot")
    return ops


def gluon_attention(head_dim: int, causal: bool, last: str = "ptx") -> dict[str, Any]:
    """The suite's Gluon flash kernel (perftests/kernels/attention_gluon.py, bf16) at its own schedule and tile for
    a head dim and mask (choice()), compiled up to `last` as flash_attention launches it."""
    from perftests.kernels import attention_gluon as ag

    schedule, tile = ag.choice(head_dim, causal)
    block_m, block_n, warps, stages = (tile[key] for key in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"))
    shape = {"HEAD_DIM": head_dim, "CAUSAL": causal, "BLOCK_M": block_m, "BLOCK_N": block_n, "STAGES": stages}
    if schedule == "two_warpgroups_loader":
        signature = ag.signature(head_dim, ag.WARPGROUP_ROWS, block_n)
        return compile_to(ag._attn_fwd_ws, signature, shape, 4, 1, last)
    signature = ag.signature(head_dim, block_m, block_n)
    return compile_to(ag._attn_fwd_pipelined, signature, {**shape, "num_warps": warps}, warps, 1, last)


def gluon_fp8_matmul(last: str = "ptx") -> dict[str, Any]:
    """The suite's Gluon fp8 matmul (perftests/kernels/matmul_gluon.py) in its own form, compiled up to `last` as
    fp8_matmul launches it."""
    from perftests.kernels import matmul_gluon as mg

    return compile_to(mg._fp8_matmul_kernel, mg.signature(), {"STAGES": mg.STAGES, "GROUP_M": mg.GROUP_M}, 4, 1, last)
