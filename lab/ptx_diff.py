"""Whether a change to the suite's kernels changed what they compile to: the PTX of every form the suite times, and of
each lab variant against the kernel switch it replaced, compiled for sm_90 on any machine (no GPU) from a git
revision ("before") and from the working tree ("after"), compared with the debug and line-info lines stripped.

Usage: python lab/ptx_diff.py [--before REV] [--python PYTHON ...] [--only TEXT ...] [--show N]

The forms are written down below as each side's kernel takes them: "before" is the kernels' interface at BEFORE (the
commit before issue 28 moved the experiments to the lab), "after" the working tree's. A switch the suite's form fixed
and the kernel no longer has (moved to the lab) is passed only where the kernel still declares it. Each side is
compiled in a process of its own (TRITON_INTERPRET unset), its kernels imported from its own tree, both through the
working tree's perftests/support/gluon_build.py (compile_to: Triton's own stages, no launch, so no autotuner race: a
Triton kernel is compiled at each config its autotuner keeps for the suite's operands). --python adds interpreters
(another Triton: e.g. the GPU machine's 3.6 in a venv of its own); every form is compiled by each.

Stripped before comparing: `.loc` and `.file` lines, the `$L__tmp`/`$L__func_*` labels that only debug ranges use,
the DWARF `.section .debug_*` blocks, and the kernel's own name (`.entry NAME`, `NAME_param_N`, and the padding
before a comment that its length sets: a lab variant is compared with the suite kernel it came from). Exit status 1
when any form differs, or fails to compile on one side only (a variant this Triton cannot build fails before and
after alike: reported as `same error`).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "95eccbb"  # main before issue 28's items 3 and 5: every experiment still a switch on the suite's kernels


@dataclass(frozen=True)
class Build:
    """One kernel at one constexpr setting, as compile_to takes it. signature: the runtime arguments' types, or
    ("module", "function", [args]) to ask the kernel module's own signature() for them. retired: switches the
    suite's form fixed, passed only where the kernel still declares them."""

    module: str
    kernel: str
    constants: dict[str, Any]
    warps: int
    stages: int
    signature: dict[str, str] | tuple[str, str, list[Any]]
    retired: dict[str, Any] = field(default_factory=dict)
    aligned: tuple[str, ...] = ()


@dataclass(frozen=True)
class Form:
    label: str
    before: Build
    after: Build | None = None  # None: the same build in the working tree


# ---------------------------------------------------------------- the forms the suite times

def attention_forms() -> list[Form]:
    """The Triton flash kernel at its one tile (64 x 64, 4 warps, 3 stages) for each head dim and mask the suite
    times, bf16."""
    forms = []
    for head_dim in (64, 128):
        for causal in (False, True):
            rows = {"q_desc": 64, "k_desc": 64, "v_desc": 64, "o_desc": 64}
            signature = {name: f"tensordesc<bf16[{n},{head_dim}]>" for name, n in rows.items()}
            build = Build("perftests.kernels.attention", "_attn_fwd_kernel",
                          {"HEAD_DIM": head_dim, "CAUSAL": causal, "BLOCK_M": 64, "BLOCK_N": 64}, 4, 3,
                          {**signature, "sm_scale": "fp32", "S": "i32"},
                          retired={"FOLD": True, "HEAVY_FIRST": True, "WARP_SPECIALIZE": False, "SOFTMAX": True,
                                   "EXP2_SPLIT": False, "LAZY_RESCALE": False, "trace": None},
                          aligned=("S",))
            forms.append(Form(f"attention D{head_dim} {'causal' if causal else 'full'}", build))
    return forms


MATMUL_16BIT_TILES = [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 8), (128, 128, 64, 3, 4),
                      (64, 256, 64, 4, 4), (128, 64, 64, 4, 4)]  # what prune keeps for 16-bit operands
MATMUL_8BIT_TILES = [(128, 256, 128, 3, 8), (256, 128, 128, 3, 8), (128, 128, 128, 4, 8), (128, 128, 128, 5, 8)]
# (name, operand type, output type, bias/row-scale pointer types, epilogue flags): each epilogue the suite times.
MATMUL_EPILOGUES = [
    ("bf16", "bf16", "bf16", {}, {}),
    ("fp16", "fp16", "fp16", {}, {}),
    ("bf16 bias gelu", "bf16", "bf16", {"bias_ptr": "*bf16"}, {"HAS_BIAS": True, "ACTIVATION": "gelu_tanh"}),
    ("bf16 row-scale gelu", "bf16", "bf16", {"row_scale_ptr": "*fp32"}, {"HAS_ROW_SCALE": True, "ACTIVATION": "gelu_tanh"}),
    ("fp8 precise", "fp8e4nv", "bf16", {"scale_x_ptr": "*fp32", "scale_w_ptr": "*fp32"}, {"HAS_SCALE": True, "FP8_PRECISE": True}),
    ("fp8 fast", "fp8e4nv", "bf16", {"scale_x_ptr": "*fp32", "scale_w_ptr": "*fp32"}, {"HAS_SCALE": True}),
]


def matmul_persistent_forms() -> list[Form]:
    """The persistent TMA matmul at every config its autotuner keeps for each epilogue the suite times (NUM_SMS: an
    H100's 132)."""
    forms = []
    for name, operand, output, pointers, flags in MATMUL_EPILOGUES:
        for bm, bn, bk, stages, warps in MATMUL_8BIT_TILES if operand == "fp8e4nv" else MATMUL_16BIT_TILES:
            signature = {"x_desc": f"tensordesc<{operand}[{bm},{bk}]>", "w_desc": f"tensordesc<{operand}[{bn},{bk}]>",
                         "y_desc": f"tensordesc<{output}[{bm},{bn}]>", "bias_ptr": f"*{output}",
                         "scale_x_ptr": f"*{output}", "scale_w_ptr": f"*{output}", "row_scale_ptr": f"*{output}",
                         **pointers, "M": "i32", "N": "i32", "K": "i32"}
            constants = {"HAS_BIAS": False, "ACTIVATION": None, "HAS_SCALE": False, "HAS_ROW_SCALE": False,
                         "FP8_PRECISE": False, **flags, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8,
                         "NUM_SMS": 132}
            build = Build("perftests.kernels.matmul", "_matmul_tma_persistent_kernel", constants, warps, stages,
                          signature, retired={"PROMOTE_TILES": 1, "WARP_SPECIALIZE": False},
                          aligned=("bias_ptr", "scale_x_ptr", "scale_w_ptr", "row_scale_ptr", "M", "N", "K"))
            forms.append(Form(f"matmul persistent {name} {bm}x{bn}x{bk} s{stages} w{warps}", build))
    return forms


def gluon_attention_forms() -> list[Form]:
    """The Gluon flash kernel's own choice per head dim and mask: pv_under at D 64, two_warpgroups_loader at D 128."""
    forms = []
    for causal in (False, True):
        mask = "causal" if causal else "full"
        shape = {"CAUSAL": causal, "BLOCK_N": 128, "STAGES": 2}
        forms.append(Form(f"gluon attention pv_under D64 {mask}",
                          Build("perftests.kernels.attention_gluon", "_attn_fwd_pipelined",
                                {**shape, "HEAD_DIM": 64, "BLOCK_M": 64, "num_warps": 4}, 4, 1,
                                ("perftests.kernels.attention_gluon", "signature", [64, 64, 128]),
                                retired={"LOOKAHEAD": False})))
        before = Build("perftests.kernels.attention_gluon", "_attn_fwd_ws",
                       {**shape, "HEAD_DIM": 128, "BLOCK_M": 128, "num_warps": 4}, 4, 1,
                       ("perftests.kernels.attention_gluon", "signature", [128, 64, 128]),
                       retired={"PINGPONG": False, "LOADER": True})
        # After: num_warps is no longer a constexpr of the kernel (its consumers are warpgroups of 4 warps). And the
        # lab's own form of it: since issue 48 the suite's kernel no longer allocates the `turn` barrier pair only the
        # lab's ping-pong schedule uses, so its PTX is this form's less that pair's allocation and initialization.
        after = replace(before, module="lab.attention_gluon_schedules", kernel="_attn_fwd_ws_schedule",
                        constants={**shape, "HEAD_DIM": 128, "BLOCK_M": 128})
        forms.append(Form(f"gluon attention two_warpgroups_loader D128 {mask}", before, after))
    return forms


def gluon_fp8_forms() -> list[Form]:
    """The Gluon fp8 matmul's own form: halves, the loader partition, persistent."""
    return [Form("gluon fp8 matmul halves loader persistent",
                 Build("perftests.kernels.matmul_gluon", "_fp8_matmul_kernel", {"STAGES": 3, "GROUP_M": 8}, 4, 1,
                       ("perftests.kernels.matmul_gluon", "signature", []),
                       retired={"QUARTERS": False, "LOADER": True, "PERSISTENT": True}))]


# ---------------------------------------------------------------- the lab's variants, against the switch each replaced

ATTENTION_SWITCHES = {"default": {}, "fold=False": {"FOLD": False}, "heavy_first=False": {"HEAVY_FIRST": False},
                      "warp_specialize": {"WARP_SPECIALIZE": True}, "no_softmax": {"SOFTMAX": False},
                      "exp2_split": {"EXP2_SPLIT": True}, "lazy_rescale": {"LAZY_RESCALE": True},
                      "lazy_rescale fold=False": {"LAZY_RESCALE": True, "FOLD": False}, "trace": {}}


def attention_variant_forms() -> list[Form]:
    """lab/attention_variants.py's kernel at each switch the suite's kernel had (its default: the suite's kernel),
    at the suite's tile and at one the sweep times."""
    forms = []
    for head_dim, causal, (bm, bn, warps, stages) in [(64, False, (64, 64, 4, 3)), (64, True, (64, 64, 4, 3)),
                                                      (128, False, (64, 64, 4, 3)), (128, True, (64, 64, 4, 3)),
                                                      (128, True, (128, 128, 8, 2))]:
        for name, switches in ATTENTION_SWITCHES.items():
            rows = {"q_desc": bm, "k_desc": bn, "v_desc": bn, "o_desc": bm}
            signature = {n: f"tensordesc<bf16[{r},{head_dim}]>" for n, r in rows.items()}
            signature.update(sm_scale="fp32", S="i32", **({"trace": "*i64"} if name == "trace" else {}))
            constants = {"HEAD_DIM": head_dim, "CAUSAL": causal, "BLOCK_M": bm, "BLOCK_N": bn, **switches}
            before = Build("perftests.kernels.attention", "_attn_fwd_kernel", constants, warps, stages, signature,
                           aligned=("S",))
            after = replace(before, module="lab.attention_variants", kernel="_attn_fwd_variant")
            forms.append(Form(f"lab attention {name} D{head_dim} {'causal' if causal else 'full'} {bm}x{bn}",
                              before, after))
    return forms


def matmul_variant_forms() -> list[Form]:
    """lab/matmul_variants.py's kernel at each switch the suite's persistent kernel had (its default: the suite's
    kernel), fp8 precise at the 128-deep tiles the suite's autotuner keeps and at the probe's 64 x 128 one."""
    forms = []
    switches = {"default": {}, "promote_every=2": {"PROMOTE_TILES": 2}, "promote_every=4": {"PROMOTE_TILES": 4},
                "warp_specialize": {"WARP_SPECIALIZE": True}}
    for bm, bn, bk, stages, warps in [*MATMUL_8BIT_TILES, (64, 128, 128, 3, 4)]:
        for name, switch in switches.items():
            for fast in (False, True):
                signature = {"x_desc": f"tensordesc<fp8e4nv[{bm},{bk}]>", "w_desc": f"tensordesc<fp8e4nv[{bn},{bk}]>",
                             "y_desc": f"tensordesc<bf16[{bm},{bn}]>", "bias_ptr": "*bf16", "scale_x_ptr": "*fp32",
                             "scale_w_ptr": "*fp32", "row_scale_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32"}
                constants = {"HAS_BIAS": False, "ACTIVATION": None, "HAS_SCALE": True, "HAS_ROW_SCALE": False,
                             "FP8_PRECISE": not fast, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8,
                             "NUM_SMS": 132, **switch}
                before = Build("perftests.kernels.matmul", "_matmul_tma_persistent_kernel", constants, warps, stages,
                               signature, aligned=("bias_ptr", "scale_x_ptr", "scale_w_ptr", "row_scale_ptr", "M", "N", "K"))
                after = replace(before, module="lab.matmul_variants", kernel="_matmul_tma_persistent_variant")
                forms.append(Form(f"lab matmul persistent {name} fp8 {'fast' if fast else 'precise'} {bm}x{bn}x{bk} "
                                  f"s{stages} w{warps}", before, after))
    return forms


def gluon_fp8_lab_forms() -> list[Form]:
    """lab/matmul_gluon_forms.py's kernel in each form, against the suite kernel's same switches."""
    forms = []
    for quarters in (False, True):
        for loader, persistent in ((False, False), (True, False), (True, True)):
            switches = {"QUARTERS": quarters, "LOADER": loader, "PERSISTENT": persistent}
            before = Build("perftests.kernels.matmul_gluon", "_fp8_matmul_kernel", {"STAGES": 3, "GROUP_M": 8, **switches},
                           4, 1, ("perftests.kernels.matmul_gluon", "signature", []))
            after = replace(before, module="lab.matmul_gluon_forms", kernel="_fp8_matmul_form")
            name = f"{'quarters' if quarters else 'halves'}{' loader' if loader else ''}{' persistent' if persistent else ''}"
            forms.append(Form(f"lab gluon fp8 matmul {name}", before, after))
    return forms


def gluon_attention_lab_forms() -> list[Form]:
    """lab/attention_gluon_schedules.py's kernels at each schedule (and the suite's pv_under at other tiles), against
    the suite kernel's same switches, D 64 and 128, full and causal."""
    forms = []
    module = "perftests.kernels.attention_gluon"
    for head_dim in (64, 128):
        for causal in (False, True):
            mask = f"D{head_dim} {'causal' if causal else 'full'}"
            for bm, bn, warps, stages in [(64, 64, 4, 2), (128, 128, 8, 2)]:
                shape = {"HEAD_DIM": head_dim, "CAUSAL": causal, "BLOCK_M": bm, "BLOCK_N": bn, "STAGES": stages,
                         "num_warps": warps}
                signature = (module, "signature", [head_dim, bm, bn])
                for lookahead in (False, True):
                    before = Build(module, "_attn_fwd_pipelined", {**shape, "LOOKAHEAD": lookahead}, warps, 1, signature)
                    after = (replace(before, module="lab.attention_gluon_schedules", kernel="_attn_fwd_lookahead",
                                     constants=shape) if lookahead else replace(before, constants=shape))
                    forms.append(Form(f"lab gluon attention {'lookahead' if lookahead else 'pv_under'} {mask} {bm}x{bn}",
                                      before, after))
            for bn, stages in [(64, 2), (128, 2)]:
                shape = {"HEAD_DIM": head_dim, "CAUSAL": causal, "BLOCK_M": 128, "BLOCK_N": bn, "STAGES": stages}
                for name, pingpong, loader in [("two_warpgroups", False, False), ("pingpong", True, False),
                                               ("pingpong loader", True, True), ("two_warpgroups_loader", False, True)]:
                    switches = {"PINGPONG": pingpong, "LOADER": loader}
                    before = Build(module, "_attn_fwd_ws", {**shape, **switches, "num_warps": 4}, 4, 1,
                                   (module, "signature", [head_dim, 64, bn]))
                    after = replace(before, module="lab.attention_gluon_schedules", kernel="_attn_fwd_ws_schedule",
                                    constants={**shape, **switches})
                    forms.append(Form(f"lab gluon attention {name} {mask} 128x{bn}", before, after))
    return forms


def forms() -> list[Form]:
    return [*attention_forms(), *gluon_attention_forms(), *gluon_fp8_forms(), *matmul_persistent_forms(),
            *attention_variant_forms(), *matmul_variant_forms(), *gluon_fp8_lab_forms(), *gluon_attention_lab_forms()]


# ---------------------------------------------------------------- compiling one side (a process of its own)

DEBUG_LINE = re.compile(r"^\s*\.(loc|file)\b|^\$L__(tmp|func_begin|func_end)\d+:\s*$")


def stripped(ptx: str) -> str:
    """The PTX without its debug and line-info lines (DEBUG_LINE, the .section .debug_* blocks) and with the
    kernel's name replaced by KERNEL."""
    lines, in_debug = [], False
    for line in ptx.splitlines():
        if in_debug:
            in_debug = line.strip() != "}"
            continue
        if line.lstrip().startswith(".section") and ".debug" in line:
            in_debug = True
            continue
        if not DEBUG_LINE.match(line):
            lines.append(line)
    text = "\n".join(lines)
    entry = re.search(r"\.entry\s+([\w$]+)", text)
    if entry:  # the name, and the padding before comments that its length sets
        text = re.sub(r"[ \t]+//", " //", re.sub(rf"\b{re.escape(entry.group(1))}(?=\b|_param_)", "KERNEL", text))
    return text


def compile_side(tree: Path, builds: list[dict[str, Any]]) -> dict[str, Any]:
    """Every build compiled to PTX from `tree`'s kernels: {label: stripped PTX, or {"error": why}}."""
    import importlib
    import importlib.util

    sys.path.insert(0, str(tree))
    # compile_to from the working tree, under a name of its own: `tree` may hold another perftests package.
    spec = importlib.util.spec_from_file_location("_ptx_diff_build", ROOT / "perftests" / "support" / "gluon_build.py")
    assert spec and spec.loader
    build_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_module)
    from triton.runtime.autotuner import Autotuner

    out: dict[str, Any] = {}
    for item in builds:
        label, build = item["label"], Build(**{**item["build"], "aligned": tuple(item["build"]["aligned"])})
        try:
            kernel = getattr(importlib.import_module(build.module), build.kernel)
            fn = kernel.fn if isinstance(kernel, Autotuner) else kernel
            signature = build.signature
            if isinstance(signature, list):  # ("module", "function", [args]), through JSON
                module, function, args = signature
                signature = getattr(importlib.import_module(module), function)(*args)
            constants = {**build.constants, **{k: v for k, v in build.retired.items() if k in fn.arg_names}}
            ptx = build_module.compile_to(fn, signature, constants, build.warps, build.stages, "ptx", build.aligned)["ptx"]
            out[label] = stripped(ptx)
        except Exception as exc:  # reported per form: one form that fails does not hide the others
            text = str(exc)
            out[label] = {"error": f"{type(exc).__name__}: {text if len(text) < 1200 else text[:300] + ' ... ' + text[-900:]}"}
    import triton

    return {"triton": triton.__version__, "forms": out}


def run_side(python: str, tree: Path, builds: list[tuple[str, Build]]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    payload = json.dumps([{"label": label, "build": asdict(build)} for label, build in builds])
    done = subprocess.run([python, str(Path(__file__).resolve()), "--side", str(tree)], input=payload,
                          capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"ptx_diff: compiling {tree} with {python} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def checkout(rev: str, into: Path) -> Path:
    """perftests/ of revision `rev` (git archive), unpacked into `into`."""
    done = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "perftests"], capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"ptx_diff: git archive {rev}: {done.stderr.decode()[-500:]}")
    with tarfile.open(fileobj=BytesIO(done.stdout)) as archive:
        archive.extractall(into, filter="data")
    return into


def compare(before: dict[str, Any], after: dict[str, Any], labels: list[str], show: int) -> tuple[int, int]:
    """Print each form's verdict; return how many differ or failed on one side, and how many failed alike."""
    bad = alike = 0
    for label in labels:
        old, new = before["forms"][label], after["forms"][label]
        if isinstance(old, dict) and old == new:  # a variant this Triton cannot build, before as after
            alike += 1
            print(f"same error {label}: {old['error'].splitlines()[0][:200]}")
        elif isinstance(old, dict) or isinstance(new, dict):
            bad += 1
            print(f"FAILED     {label}: before {old['error'] if isinstance(old, dict) else 'built'}; "
                  f"after {new['error'] if isinstance(new, dict) else 'built'}"[:show * 120])
        elif old == new:
            print(f"identical  {label} ({len(new.splitlines())} lines)")
        else:
            bad += 1
            diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "before", "after", lineterm="", n=1))
            print(f"DIFFERS    {label}: {sum(line.startswith(('+', '-')) for line in diff[2:])} lines")
            print("\n".join("    " + line for line in diff[:show]))
    return bad, alike


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=BEFORE, help=f"the revision compiled as 'before' (default {BEFORE})")
    parser.add_argument("--python", nargs="+", default=[sys.executable], help="interpreters to compile with (each its own Triton)")
    parser.add_argument("--only", nargs="+", default=[], metavar="TEXT", help="only the forms whose label contains one of these")
    parser.add_argument("--show", type=int, default=40, help="lines of each difference shown")
    parser.add_argument("--side", type=Path, help=argparse.SUPPRESS)  # internal: compile one side (builds on stdin)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(compile_side(args.side, json.loads(sys.stdin.read()))))
        return
    chosen = [f for f in forms() if not args.only or any(text in f.label for text in args.only)]
    if not chosen:
        raise SystemExit(f"ptx_diff: no form's label contains any of {args.only}")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        tree = checkout(args.before, Path(tmp))
        for python in args.python:
            with ThreadPoolExecutor(2) as pool:
                old = pool.submit(run_side, python, tree, [(f.label, f.before) for f in chosen])
                new = pool.submit(run_side, python, ROOT, [(f.label, f.after or f.before) for f in chosen])
                before, after = old.result(), new.result()
            print(f"## triton {after['triton']} ({python}): {args.before} against the working tree")
            failed, alike = compare(before, after, [f.label for f in chosen], args.show)
            print(f"{len(chosen) - failed - alike} of {len(chosen)} forms identical, {alike} failing alike before and after, "
                  f"{failed} differing\n")
            bad += failed
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
