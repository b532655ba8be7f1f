"""Which of a kernel's warpgroup MMAs Triton keeps in flight: the flash-attention kernel compiled to TTGIR for
sm_90 (Hopper) on any machine, no GPU needed, and its `warp_group_dot` / `warp_group_dot_wait` ops in order.

Usage: python tools/ttgir_dots.py [--head-dim 128] [--causal] [--block 128x128] [--warps 8] [--stages 3]
       [--switch FOLD=1 ...]
A dot followed at once by a wait with `pendings = 0` runs synchronously: whatever comes after it (the softmax)
cannot overlap it within the warpgroup. That is the question behind FlashAttention-3's intra-warpgroup overlap,
answered from the compiler's output before any GPU time is spent (docs/NOTES.md, 2026-11-23, fifth session).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def attention_ttgir(head_dim: int, causal: bool, block_m: int, block_n: int, warps: int, stages: int,
                    switches: dict[str, Any]) -> str:
    """The flash kernel's TTGIR for sm_90 at one config (Triton's own stages: make_ir, ttir, ttgir)."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler.compiler import ASTSource

    from perftests.kernels import attention as attn

    fn = attn._attn_fwd_kernel.fn
    desc = {"q_desc": block_m, "o_desc": block_m, "k_desc": block_n, "v_desc": block_n}
    signature: dict[str, str] = {name: f"tensordesc<bf16[{rows},{head_dim}]>" for name, rows in desc.items()}
    signature.update(sm_scale="fp32", S="i32")
    constants = {"HEAD_DIM": head_dim, "CAUSAL": causal, "BLOCK_M": block_m, "BLOCK_N": block_n, **switches}
    unknown = set(constants) - set(fn.arg_names)
    if unknown:
        raise ValueError(f"the kernel has no constexpr {sorted(unknown)}; its arguments: {fn.arg_names}")
    for name in fn.arg_names:
        if name not in signature:
            signature[name] = "constexpr"
            constants.setdefault(name, fn.params[fn.arg_names.index(name)].default)
    source = ASTSource(fn=fn, signature=signature,
                       constexprs={(fn.arg_names.index(k),): v for k, v in constants.items()})
    target = GPUTarget("cuda", 90, 32)
    backend = CUDABackend(target)
    options = backend.parse_options({"num_warps": warps, "num_stages": stages})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = source.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                            context)
    stages_: dict[str, Any] = {}
    backend.add_stages(stages_, options, source.language)
    for stage in ("ttir", "ttgir"):
        module = stages_[stage](module, {})
    return str(module)


def dot_ops(ttgir: str) -> list[str]:
    """The warpgroup MMA ops and their waits, in program order, with loop boundaries: `dot async` / `dot` and
    `wait pendings=N`, `for {` / `}` (an scf.for's body)."""
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
        elif "ttng.warp_group_dot " in text:
            ops.append("dot async" if "isAsync = true" in text else "dot")
    return ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--block", default="128x128", help="BLOCK_MxBLOCK_N")
    parser.add_argument("--warps", type=int, default=8)
    parser.add_argument("--stages", type=int, default=3)
    parser.add_argument("--switch", action="append", default=[], metavar="NAME=0|1", help="a constexpr switch, e.g. FOLD=1")
    args = parser.parse_args()
    from perftests.kernels.common import INTERPRETING

    if INTERPRETING:
        sys.exit("ttgir_dots: unset TRITON_INTERPRET: the interpreter compiles nothing")
    block_m, block_n = (int(v) for v in args.block.lower().split("x"))
    switches = {}
    for item in args.switch:
        name, _, value = item.partition("=")
        switches[name] = value not in ("0", "false", "False", "")
    try:
        ttgir = attention_ttgir(args.head_dim, args.causal, block_m, block_n, args.warps, args.stages, switches)
    except ValueError as exc:
        sys.exit(f"ttgir_dots: {exc}")
    print("\n".join(dot_ops(ttgir)))


if __name__ == "__main__":
    main()
