#!/usr/bin/env bash
# One Triton kernel at one config, two register counts (the Triton attention reference of the Gluon attention cases:
# 138 serially, 148 under -n 2, docs/results/gate-study-h200.md): each run below from empty caches with
# lab/variants_probe.py dumping every compiled variant of the kernel when its process ends.
#   bash lab/device/variants_check.sh OUT     OUT/<run>/variants-*.json, OUT/<run>.log, OUT/summary.txt
set -uo pipefail
cd "$(dirname "$0")/../.."
deadline=$(($(date +%s) + ${DEADLINE:-400}))
source lab/device/lib.sh
begin_call "${1:?OUT}"
export VARIANTS_KERNELS=perftests.kernels.attention:KERNEL
file=perftests/test_triton_attention.py
probe() {  # LABEL [PYTEST ARGS...]
  local label=$1; shift
  (( $(left) > 40 )) || { echo "== $label: not run" >> "$work/summary.txt"; return; }
  env $(fresh) VARIANTS_OUT="$work/$label" CUDA_VISIBLE_DEVICES=${GPUS:-0,1} timeout -s INT -k 10 $(( $(left) - 10 )) \
    python3 -m pytest "$@" -p lab.variants_probe -p no:cacheprovider -q -rs > "$work/$label.log" 2>&1
  echo "== $label: exit $?; $(tail -1 "$work/$label.log")" >> "$work/summary.txt"
}
probe gluon-only "$file::test_flash_attention_gluon[2048-128-causal]"
probe triton-then-gluon "$file::test_flash_attention[8192-128-causal]" "$file::test_flash_attention_gluon[8192-128-causal]"
probe serial-causal128 "$file" -k "128-causal"
probe n2-file "$file" -n 2
python3 - "$work" >> "$work/summary.txt" <<'PY'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*/variants-*.json")):
    data = json.loads(path.read_text())
    for spec, devices in data["kernels"].items():
        for device, found in devices.items():
            for v in found:
                meta = v["metadata"]
                print(path.parent.name, data["worker"], device, v["registers"], v["spills"], v["shared"], v["ptx_sha256"],
                      v["cubin_sha256"], {k: meta.get(k) for k in ("num_warps", "num_stages", "maxnreg", "ptx_version",
                      "ptx_options", "arch", "hash")}, v["key"][:300])
PY
cat "$work/summary.txt"
