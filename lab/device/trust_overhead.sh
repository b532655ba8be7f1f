#!/usr/bin/env bash
# On a GPU machine (the device tool): the GPU trust tests, then a subset of the suite gated against the committed
# baseline file by the plugin before issue 29 (.oldplugin/, a copy of the plugin at 95eccbb) and after, alternately,
# each run's wall time and JSON report kept. Usage: bash lab/device/trust_overhead.sh OUT [SUBSET...]
set -uo pipefail
out=${1:?OUT}; shift
subset=("$@")
[ ${#subset[@]} -gt 0 ] || subset=(perftests/test_triton_elementwise.py perftests/test_triton_rowwise.py perftests/test_triton_l2.py perftests/test_triton_mlp.py)
export PYTHONUNBUFFERED=1
python3 - <<'PY' > "$out/card.txt"
import pynvml, hashlib
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)
s = pynvml.nvmlDeviceGetSerial(h); s = s.decode() if isinstance(s, bytes) else s
print("card", hashlib.sha256(s.strip().encode()).hexdigest()[:12], "serial ending", s.strip()[-6:], pynvml.nvmlDeviceGetName(h))
PY
cat "$out/card.txt"
run() {  # label, plugin path ("" = the checkout's), then pytest args
  local label=$1 path=$2; shift 2
  local t0=$(date +%s.%N)
  PYTHONPATH=$path timeout 400 python3 -m pytest -p no:cacheprovider -q "$@" > "$out/$label.log" 2>&1
  local rc=$?
  echo "$label rc=$rc wall=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s" | tee -a "$out/times.txt"
  tail -3 "$out/$label.log"
}
run trust-gpu "" tests/test_trust.py tests/test_cheats.py -k gpu
run old-1 "$PWD/.oldplugin/plugin" "${subset[@]}" --speedgate-json "$out/old-1.json"
run new-1 "" "${subset[@]}" --speedgate-json "$out/new-1.json"
run old-2 "$PWD/.oldplugin/plugin" "${subset[@]}" --speedgate-json "$out/old-2.json"
run new-2 "" "${subset[@]}" --speedgate-json "$out/new-2.json"
