#!/usr/bin/env bash
# On a Hopper GPU (the device tool), in one call: install CUTLASS's Python DSL from the carried .cutlass/ (staged on a
# machine with the package index by `python tools/stage_cutlass.py`), compile both CUTLASS kernels of
# perftests/kernels/cutlass_gemm.py (compile time, registers, spills, shared memory), check them against cuBLAS at
# edge shapes and the suite's large ones (output poisoned with NaN), check one replays in a CUDA graph, time each
# against cuBLAS side by side (CUDA events around each call, a device hold while the host queues, L2 flushed before
# every call, median of many, the two sides alternating) with the tile/cluster/swizzle variants beside the default,
# print a short table, then run the suite's CUTLASS cases with the gate's JSON report.
#
#   bash lab/device/cutlass_check.sh [all|check|suite]     # all (default): check and time, then the suite
#
# Files under $OUT: cutlass.json (the gate's report), timing.json (the table's numbers), cutlass_check.tgz (logs).
# The suite's part gets what is left of SUITE_BUDGET seconds (default 520, so the call ends inside 9 minutes); if it
# runs out, give `suite` alone in a second call.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=${1:-all}
out=${OUT:?OUT must name a folder (the device tool sets it)}
logs="$out/logs"
mkdir -p "$logs"
export PYTHONUNBUFFERED=1
budget=${SUITE_BUDGET:-520}

finish() {
    tar -C "$out" -czf "$out/cutlass_check.tgz" logs && rm -rf "$logs"
    ls -la "$out"
    # The table again, last, where the device tool's output tail shows it.
    [[ -f "$out/timing.json" ]] && python3 - "$out/timing.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['device']}: checks {'passed' if r.get('ok') else 'FAILED'}, graph {r.get('graph')}")
for b in r["builds"]:
    print(f"  build {b['kind']}: {b['compile_s']} s, {b['reg']} registers, local {b['local']}, smem {b['dynamic_smem']} + {b['shared']}")
print(f"  {'kind':5s} {'shape':5s} {'config':14s} {'vendor':>8s} {'cutlass':>8s} {'triton':>8s} {'speedup':>8s} {'TFLOP/s':>7s}")
for row in r["rows"]:
    tri = f"{row['triton_ms']:8.3f}" if row["triton_ms"] else " " * 8
    print(f"  {row['kind']:5s} {row['shape']:5s} {row['config']:14s} {row['vendor_ms']:8.3f} {row['cutlass_ms']:8.3f} {tri} "
          f"{row['speedup_vs_vendor']:7.3f}x {row['tflops']:7.0f}")
PY
}
trap finish EXIT

# 1. The DSL (and jsonschema, which the plugin reads baseline files with) from the staged archive.
if ! exports=$(python3 tools/stage_cutlass.py --install --target /tmp/site --check 2> "$logs/install.log"); then
    cat "$logs/install.log"; exit 3
fi
eval "$exports"
tail -2 "$logs/install.log"
python3 -c "import speedgate" 2>/dev/null || python3 -m pip install -q --no-deps --no-build-isolation -e . > "$logs/pip.log" 2>&1 \
    || { cat "$logs/pip.log"; exit 3; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader | tee "$logs/gpu.txt"

# 2. Compile, check, time.
if [[ $phase == all || $phase == check ]]; then
python3 - "$out/timing.json" <<'PY' 2>&1 | tee "$logs/check.log"
import json, statistics, sys, time

import torch
import torch.nn.functional as F

from perftests.kernels import cutlass_gemm as cg
from perftests.kernels import matmul as mm
from perftests.support.inputs import generator
from perftests.support.matmul import fp8_operands, fp8_reference, operands
from perftests.support.tolerance import reduction_atol

torch.manual_seed(0)
dev = "cuda"
SHAPES = {"4096": (4096, 4096, 4096), "8192": (8192, 8192, 8192), "llm": (8192, 28672, 4096)}
EDGES = [(128, 256, 128), (200, 136, 80), (1152, 2304, 640), (4224, 8448, 384), (1280, 768, 1024)]
VARIANTS = {  # name: GemmConfig keywords; the default first
    "default": {}, "cluster1x1": {"cluster_m": 1}, "cluster1x2": {"cluster_m": 1, "cluster_n": 2},
    "swizzle1": {"swizzle": 1}, "swizzle4": {"swizzle": 4}, "swizzle16": {"swizzle": 16}, "tile128x128": {"tile_n": 128},
    "epi_whole_tile": {"epilogue_stages": 8},  # the tile's stores all in flight (3 ring stages instead of 4)
}
results = {"device": torch.cuda.get_device_name(), "rows": [], "checks": [], "builds": []}


def inputs(kind, M, N, K, seed=0):
    if kind == "bf16":
        x, w = operands(dev, torch.bfloat16, M, N, K, generator(dev, seed))
        return (x, w), {}, lambda: F.linear(x, w)
    x8, w8, sx, sw = fp8_operands(dev, M, N, K, seed)
    # fp8_reference: _scaled_mm, on zero-padded operands at edge shapes it refuses
    return (x8, w8), {"scale_x": sx, "scale_w": sw}, lambda: fp8_reference(x8, w8, sx, sw)


def check(kind, M, N, K, config=cg.DEFAULT_CONFIG):
    args, kw, vendor = inputs(kind, M, N, K, seed=M + N + K)
    out = torch.full((M, N), float("nan"), device=dev, dtype=torch.bfloat16)
    cg.matmul(*args, **kw, out=out, config=config)
    expected = vendor()
    torch.cuda.synchronize()
    err = float((out.float() - expected.float()).norm() / expected.float().norm())
    unwritten = int(out.isnan().sum())
    try:
        torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=reduction_atol(expected, K))
        ok = unwritten == 0
    except AssertionError as exc:
        ok, err = False, f"{err:.2e} ({str(exc).splitlines()[0]})"
    results["checks"].append({"kind": kind, "shape": [M, N, K], "config": config.__dict__, "ok": ok, "rel_l2": err, "nan": unwritten})
    print(f"check {kind:5s} {M}x{N}x{K} {'ok' if ok else 'FAIL'} rel_l2={err if isinstance(err, str) else f'{err:.2e}'} nan={unwritten}")
    return ok


def bench(fns, reps=40):
    """Median ms of each fn: L2 flushed before every call, a device hold while the host queues, sides alternating."""
    flush = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device=dev)
    for fn in fns:
        for _ in range(3):
            fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            torch.cuda._sleep(1_000_000)  # the device stays busy while the host queues what follows
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(); fn(); end.record()
            times[i].append((start, end))
    torch.cuda.synchronize()
    return [statistics.median(s.elapsed_time(e) for s, e in ts) for ts in times]


t0 = time.time()
for kind in ("bf16", "fp8"):  # compile time and what ptxas made of each
    dtype = torch.bfloat16 if kind == "bf16" else torch.float8_e4m3fn
    problem = cg.Problem(8192, 8192, 8192, "16bit" if kind == "bf16" else "fp8_precise", dtype, torch.bfloat16)
    t = time.time()
    report = cg.compile_report(problem)
    ops = {k: v for k, v in report.pop("opcodes").items() if k.split(".")[0] in ("HGMMA", "QGMMA", "LDL", "STL")}
    results["builds"].append({"kind": kind, "compile_s": round(time.time() - t, 2), **report, "mma_ops": ops})
    print(f"build {kind}: {time.time() - t:.1f} s, {report}, {ops}")

ok = all([check(kind, *shape) for kind in ("bf16", "fp8") for shape in EDGES + [SHAPES["8192"], SHAPES["llm"]]])
for name, kw in list(VARIANTS.items())[1:]:
    ok &= all([check(kind, *EDGES[2], cg.GemmConfig(**kw)) for kind in ("bf16", "fp8")])

# CUDA graph: the suite times fp8 at 4096^3 as graph replays.
args, kw, vendor = inputs("fp8", 4096, 4096, 4096)
out = torch.full((4096, 4096), float("nan"), device=dev, dtype=torch.bfloat16)
try:
    cg.matmul(*args, **kw, out=out)
    graph = torch.cuda.CUDAGraph()
    out.fill_(float("nan"))
    with torch.cuda.graph(graph):
        cg.matmul(*args, **kw, out=out)
    graph.replay(); torch.cuda.synchronize()
    torch.testing.assert_close(out, vendor(), rtol=1.6e-2, atol=reduction_atol(out, 4096))
    print("graph capture and replay: ok")
    results["graph"] = "ok"
except Exception as exc:  # noqa: BLE001 - reported, not raised: the table still matters
    print(f"graph capture and replay: FAILED {type(exc).__name__}: {exc}")
    results["graph"] = f"{type(exc).__name__}: {exc}"
    ok = False

print(f"\n{'kind':5s} {'shape':16s} {'config':12s} {'vendor ms':>9s} {'cutlass ms':>10s} {'triton ms':>9s} {'vs vendor':>9s} {'TFLOP/s':>8s}")
for kind in ("bf16", "fp8"):
    for shape_id, (M, N, K) in SHAPES.items():
        args, kw, vendor = inputs(kind, M, N, K)
        variants = VARIANTS if shape_id == "8192" else {"default": {}}
        for name, cfg in variants.items():
            config = cg.GemmConfig(**cfg)
            triton = (lambda: mm.matmul_tma_persistent(*args, **kw)) if name == "default" else None
            fns = [vendor, lambda config=config: cg.matmul(*args, **kw, config=config)] + ([triton] if triton else [])
            ms = bench(fns)
            row = {"kind": kind, "shape": shape_id, "config": name, "vendor_ms": ms[0], "cutlass_ms": ms[1],
                   "triton_ms": ms[2] if triton else None, "speedup_vs_vendor": ms[0] / ms[1],
                   "tflops": mm.matmul_flops(M, N, K) / ms[1] / 1e9}
            results["rows"].append(row)
            tri = f"{ms[2]:9.3f}" if triton else " " * 9
            print(f"{kind:5s} {shape_id:16s} {name:12s} {ms[0]:9.3f} {ms[1]:10.3f} {tri} {row['speedup_vs_vendor']:8.3f}x {row['tflops']:8.0f}")
results["ok"] = bool(ok)
results["seconds"] = round(time.time() - t0, 1)
json.dump(results, open(sys.argv[1], "w"), indent=1)
print(f"checks {'all passed' if ok else 'FAILED'}; {results['seconds']} s")
PY
fi

# 3. The suite's CUTLASS cases, gated, with the JSON report (what is left of the budget).
if [[ $phase == all || $phase == suite ]]; then
    left=$(( budget - SECONDS ))
    (( left > 60 )) || { echo "no time left for the suite ($left s): run '$0 suite' in a call of its own"; exit 4; }
    # SUITE_ARGS, e.g. "--update-baselines --speedgate-calibrate 2" to bless (the baseline files come back under
    # $OUT/baselines); GATE_AFTER=1 then gates in a second process against what was just blessed.
    timeout "$left" python3 -m pytest -p no:cacheprovider perftests/test_cutlass_matmul.py -q -rs ${SUITE_ARGS:-} \
        --speedgate-json "$out/cutlass.json" > "$logs/suite.log" 2>&1
    rc=$?
    tail -40 "$logs/suite.log"
    echo "suite rc=$rc after ${SECONDS} s"
    mkdir -p "$out/baselines" && cp baselines/*.json "$out/baselines/"
    left=$(( budget - SECONDS ))
    if [[ ${GATE_AFTER:-0} == 1 ]] && (( left > 60 )); then
        timeout "$left" python3 -m pytest -p no:cacheprovider perftests/test_cutlass_matmul.py -q -rs \
            --speedgate-json "$out/cutlass_gate.json" > "$logs/gate.log" 2>&1
        echo "gate rc=$? after ${SECONDS} s"; tail -25 "$logs/gate.log"
    fi
fi
