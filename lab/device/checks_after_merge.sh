#!/usr/bin/env bash
# On an H100 (the device tool), after the restructure, trust, guest and inputs merges: the hang drill in a project
# with no ini (speedgate's own deadline), the GPU trust and cheat tests, the lab's GPU tests (every lab fp8 Gluon form
# at the edge shapes), and the compiler suite on its new inputs= sets gated against the committed file. Writes
# OUT/checks.tgz (logs and JSON reports) and prints a summary. Usage: bash lab/device/checks_after_merge.sh OUT
set -uo pipefail
out=${1:?OUT}
work=$(mktemp -d)
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/lib.sh"
show_step() { grep -E "ended and named|passed|failed|error|regressed|improved|not gated" "$work/$1.log" | tail -6; }
python3 -c "import pynvml, hashlib; pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0); s = pynvml.nvmlDeviceGetSerial(h); s = s.decode() if isinstance(s, bytes) else s; print('card', hashlib.sha256(s.strip().encode()).hexdigest()[:12], 'serial ending', s.strip()[-6:])" | tee "$work/summary.txt"
step hang 240 env PYTHON=python3 bash tests/gpu/hang_case/run.sh 30
step trust 150 python3 -m pytest -p no:cacheprovider -q tests/test_trust.py tests/test_cheats.py -k gpu
step lab 150 python3 -m pytest -p no:cacheprovider -q lab/tests -rs
step compile 330 python3 -m pytest -p no:cacheprovider -q -rs perftests/test_compile_modes.py perftests/test_compile_ladder.py \
  perftests/test_compile_training.py perftests/test_compile_regional.py perftests/test_compile_dynamic.py \
  perftests/test_compile_graph_breaks.py perftests/test_compile_custom_op.py -k "not cold_and_warm" \
  --speedgate-json "$work/compile.json"
tar czf "$out/checks.tgz" -C "$work" .
cat "$work/summary.txt"
