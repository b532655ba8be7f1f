"""What Triton and ptxas make of the suite's Hopper kernels, on any machine (no GPU needed): the flash-attention
kernel or the persistent fp8 matmul at one config and switch setting, compiled for sm_90 with Triton's own stages
(make_ir, ttir, ttgir, llir, ptx) and the ptxas Triton ships.

Usage: python lab/codegen_probe.py attention [--head-dim 128] [--causal] [--block 128x128] [--warps 8] [--stages 3]
       python lab/codegen_probe.py attention-gluon [--head-dim 128] [--causal] [--block 64x64] [--warps 4] [--stages 2]
           [--switch LOOKAHEAD=1 | --switch WARP_SPECIALIZED=1 [--switch PINGPONG=1]] (--block 128x128 --warps 8)
       python lab/codegen_probe.py fp8-matmul [--block 256x128x128] [--warps 8] [--stages 3]
       python lab/codegen_probe.py fp8-matmul-gluon [--stages 3] [--switch QUARTERS=1] [--switch LOADER=1]
       [--switch PERSISTENT=1]
       ... [--switch NAME=0|1|N ...] (a constexpr switch: FOLD=1, PROMOTE_TILES=4, WARP_SPECIALIZE=1, FP8_PRECISE=0)
Prints the warpgroup MMAs and their waits in program order from the TTGIR (`dot async`, `wait pendings=N`, loop
bounds: a dot followed at once by `wait pendings=0` runs synchronously, so what follows it cannot overlap it within
the warpgroup), whether a warp-specialized partition was made, and ptxas's registers, spills and its performance
notes (C7517: a warpgroup.wait injected so other instructions can read an MMA's accumulator; C7514: MMAs
serialized for that reason). docs/NOTES.md (2026-11-23) reads the answers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perftests.support.gluon_build import compile_to, dot_ops, ptxas_report  # noqa: E402


def attention(head_dim: int, causal: bool, block_m: int, block_n: int, warps: int, stages: int,
              switches: dict[str, Any], last: str = "ttgir") -> dict[str, Any]:
    """The flash kernel (bf16) at one config, compiled up to `last` (compile_to); the switches are those of
    lab/attention_variants.py (none: the suite's kernel)."""
    from lab import attention_variants

    desc = {"q_desc": block_m, "o_desc": block_m, "k_desc": block_n, "v_desc": block_n}
    signature = {name: f"tensordesc<bf16[{rows},{head_dim}]>" for name, rows in desc.items()}
    signature.update(sm_scale="fp32", S="i32")
    constants = {"HEAD_DIM": head_dim, "CAUSAL": causal, "BLOCK_M": block_m, "BLOCK_N": block_n, **switches}
    return compile_to(attention_variants._attn_fwd_variant.fn, signature, constants, warps, stages, last)


def fp8_matmul(block_m: int, block_n: int, block_k: int, warps: int, stages: int, switches: dict[str, Any],
               last: str = "ttgir") -> dict[str, Any]:
    """The persistent TMA matmul with fp8 (e4m3) operands, per-tensor scales and a bf16 output, at one config;
    FP8_PRECISE (promotion every K tile) unless a switch says otherwise; the other switches are those of
    lab/matmul_variants.py (none: the suite's kernel)."""
    from lab import matmul_variants

    signature = {"x_desc": f"tensordesc<fp8e4nv[{block_m},{block_k}]>", "w_desc": f"tensordesc<fp8e4nv[{block_n},{block_k}]>",
                 "y_desc": f"tensordesc<bf16[{block_m},{block_n}]>", "bias_ptr": "*bf16", "scale_x_ptr": "*fp32",
                 "scale_w_ptr": "*fp32", "row_scale_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32"}
    constants = {"HAS_BIAS": False, "ACTIVATION": None, "HAS_SCALE": True, "HAS_ROW_SCALE": False, "FP8_PRECISE": True,
                 "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": 8, "NUM_SMS": 132, **switches}
    return compile_to(matmul_variants._matmul_tma_persistent_variant.fn, signature, constants, warps, stages, last)


def attention_gluon(head_dim: int, causal: bool, block_m: int, block_n: int, warps: int, stages: int,
                    switches: dict[str, Any], last: str = "ttgir") -> dict[str, Any]:
    """The Gluon flash kernel (bf16) at one tile and schedule (perftests/kernels/attention_gluon.py's, and
    lab/attention_gluon_schedules.py's); `stages` is its K and V rings' slots. Switches: LOOKAHEAD=1 (block j's
    softmax under block j+1's q k^T instead of block j-1's p v); WARP_SPECIALIZED=1, the two-consumer-warpgroup
    kernel (BLOCK_M 128, `warps` 8), PINGPONG=1 its turn-taking, LOADER=1 its one-warp loader partition."""
    from lab import attention_gluon_schedules as schedules
    from perftests.kernels import attention_gluon as ag

    switches = dict(switches)
    unknown = set(switches) - {"LOOKAHEAD", "WARP_SPECIALIZED", "PINGPONG", "LOADER"}
    if unknown:
        raise ValueError(f"the Gluon flash kernel has no constexpr {sorted(unknown)}")
    shape = {"HEAD_DIM": head_dim, "CAUSAL": causal, "BLOCK_M": block_m, "BLOCK_N": block_n, "STAGES": stages}
    if switches.pop("WARP_SPECIALIZED", False):
        constants = {**shape, "PINGPONG": False, "LOADER": False, **switches}
        return compile_to(schedules._attn_fwd_ws_schedule, ag.signature(head_dim, ag.WARPGROUP_ROWS, block_n), constants,
                          4, 1, last)
    kernel = schedules._attn_fwd_lookahead if switches.pop("LOOKAHEAD", False) else ag.KERNELS["pv_under"]
    return compile_to(kernel, ag.signature(head_dim, block_m, block_n), {**shape, "num_warps": warps, **switches},
                      warps, 1, last)


def fp8_matmul_gluon(stages: int, last: str = "ttgir", quarters: bool = False, loader: bool = False,
                     persistent: bool = False) -> dict[str, Any]:
    """The Gluon fp8 matmul (128 x 256 x 128, two consumer warpgroups, precise accumulation) in any of its forms
    (lab/matmul_gluon_forms.py; the suite's own: halves, the loader, persistent) with `stages` ring slots: its K
    tiles as two MMA halves or (quarters) four quarters, with or without its loader partition, one output tile a
    program or (persistent, with the loader) a loop over tiles."""
    from lab import matmul_gluon_forms
    from perftests.kernels import matmul_gluon as mg

    constants = {"STAGES": stages, "GROUP_M": mg.GROUP_M, "QUARTERS": quarters, "LOADER": loader, "PERSISTENT": persistent}
    return compile_to(matmul_gluon_forms._fp8_matmul_form, mg.signature(), constants, 4, 1, last)


SM90_REGISTERS, SM90_SHARED, SM90_CTA_RESERVED, SM90_MAX_CTAS = 65536, 228 * 1024, 1024, 32


def occupancy(registers: int, warps: int, shared_bytes: int) -> dict[str, int]:
    """Thread blocks one H100 SM can hold at once, by registers (allocated per warp in units of 256) and by shared
    memory (228 KiB an SM, 1 KiB reserved per block): while one block's warps wait (for their MMAs, or run their
    softmax), another block's can issue. The theoretical figure; achieved occupancy needs a profiler."""
    per_warp = -(-registers * 32 // 256) * 256
    by_registers = SM90_REGISTERS // (per_warp * warps) if registers else SM90_MAX_CTAS
    by_shared = SM90_SHARED // (shared_bytes + SM90_CTA_RESERVED)
    return {"blocks_by_registers": by_registers, "blocks_by_shared": by_shared,
            "blocks_per_sm": min(by_registers, by_shared, SM90_MAX_CTAS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel", choices=("attention", "attention-gluon", "fp8-matmul", "fp8-matmul-gluon"))
    parser.add_argument("--head-dim", type=int, default=128, help="attention")
    parser.add_argument("--causal", action="store_true", help="attention")
    parser.add_argument("--block", default=None, help="attention BLOCK_MxBLOCK_N (128x128); fp8-matmul MxNxK (256x128x128)")
    parser.add_argument("--warps", type=int, default=8)
    parser.add_argument("--stages", type=int, default=3)
    parser.add_argument("--switch", action="append", default=[], metavar="NAME=VALUE", help="a constexpr switch, e.g. FOLD=1")
    args = parser.parse_args()
    from perftests.kernels.common import INTERPRETING

    if INTERPRETING:
        sys.exit("codegen_probe: unset TRITON_INTERPRET: the interpreter compiles nothing")
    switches: dict[str, Any] = {}
    for item in args.switch:
        name, _, value = item.partition("=")
        switches[name] = int(value) if value.isdigit() and value not in ("0", "1") else value not in ("0", "false", "False", "")
    try:
        if args.kernel in ("attention", "attention-gluon"):
            block_m, block_n = (int(v) for v in (args.block or "128x128").lower().split("x"))
            kernel = attention if args.kernel == "attention" else attention_gluon
            build = lambda last: kernel(args.head_dim, args.causal, block_m, block_n, args.warps, args.stages,  # noqa: E731
                                        switches, last)
        elif args.kernel == "fp8-matmul-gluon":
            build = lambda last: fp8_matmul_gluon(args.stages, last, bool(switches.get("QUARTERS")),  # noqa: E731
                                                  bool(switches.get("LOADER")), bool(switches.get("PERSISTENT")))
        else:
            block_m, block_n, block_k = (int(v) for v in (args.block or "256x128x128").lower().split("x"))
            build = lambda last: fp8_matmul(block_m, block_n, block_k, args.warps, args.stages, switches, last)  # noqa: E731
        compiled = build("ptx")
        report = ptxas_report(compiled["ptx"])
    except ValueError as exc:
        sys.exit(f"codegen_probe: {exc}")
    ttgir = compiled["ttgir"]
    print("\n".join(dot_ops(ttgir)))
    print(f"warp-specialized partitions: {'yes' if 'ttg.warp_specialize' in ttgir else 'no'}")
    print(f"ptxas: {report['registers']} registers, {report['spill_stores']} bytes spill stores, "
          f"{report['spill_loads']} bytes spill loads")
    held = occupancy(report["registers"] or 0, args.warps, compiled["shared"])
    print(f"shared memory: {compiled['shared'] // 1024} KiB; blocks per SM: {held['blocks_per_sm']} "
          f"(registers allow {held['blocks_by_registers']}, shared memory {held['blocks_by_shared']})")
    for note in report["notes"]:
        print(f"ptxas {note}")


if __name__ == "__main__":
    main()
