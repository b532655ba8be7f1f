#!/usr/bin/env bash
# Can another process's Triton binary still reach a gate run through the shared disk cache (toolchain.settle_ptxas's
# folder of its own, docs/results/gate-study-h200.md "A cached binary of the other ptxas")? A plain process (no
# speedgate, no lab: Triton's own ptxas) compiles the flash attention kernel of test_flash_attention[2048-128-causal]
# into Triton's default cache and prints its registers; then gate processes of that case run in the same default
# cache (no fresh(): the cache is the subject), and their reports' kernel facts and any "codegen changed" are shown.
#   bash lab/device/ptxas_cache_check.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:?OUT}"
export PYTHONUNBUFFERED=1
unset TRITON_CACHE_DIR TORCHINDUCTOR_CACHE_DIR
show_step() { grep -E "registers|codegen|passed|failed|folder|speedgate-ptxas" "$work/$1.log" | cut -c1-260; }
step plain 240 python3 - <<'PY'
import os, torch
from perftests.kernels import attention as attn
B, H, S, D = 8, 8, 2048, 128
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
attn.flash_attention(q, k, v, True)
torch.cuda.synchronize()
kernel = attn._attn_fwd_kernel
fn = getattr(kernel, "fn", kernel)
for caches in fn.device_caches.values():
    for compiled in caches[0].values():
        print(f"plain process (Triton's ptxas): _attn_fwd_kernel registers {compiled.n_regs}, spills {compiled.n_spills}")
print("cache folder:", os.environ.get("TRITON_CACHE_DIR") or os.path.expanduser("~/.triton/cache"))
PY
ls -d ~/.triton/cache/speedgate-ptxas-* 2>/dev/null | sed 's/^/settled folder before the gate: /' >> "$work/summary.txt"
for i in 1 2; do
  step "gate$i" 240 python3 -m pytest perftests/test_triton_attention.py -p no:cacheprovider -q -rs \
    -k "test_flash_attention and 2048-128-causal and not gluon" --baseline-dir baselines --speedgate-json "$work/gate$i.json"
  python3 - "$work/gate$i.json" >> "$work/summary.txt" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for case in report["cases"]:
    regs = {side: [(k["name"], k.get("registers"), k.get("spills")) for k in kernels]
            for side, kernels in (case.get("codegen") or {}).items()}
    print(f"gate: {case['name']}: {case['verdict']} {case['speedup']:.4f}; kernels {regs}; "
          f"codegen_changes {case.get('codegen_changes')}; note {case.get('note', '')[:200]}")
PY
done
ls -d ~/.triton/cache/speedgate-ptxas-* 2>/dev/null | sed 's/^/settled folder after the gate: /' >> "$work/summary.txt"
cat "$work/summary.txt"
