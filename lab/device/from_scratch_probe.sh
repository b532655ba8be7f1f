#!/usr/bin/env bash
# Does timing a compile from empty caches (perftests.support.compile_time.from_scratch) change the speed of the code
# it compiles? The ladder's compiled rungs read 3-4% slower in whole-suite gate runs on four fresh cards (2026-11-26)
# than blessed before from_scratch existed. Gate runs of the ladder's rungs 2 and 3, each a fresh process with
# empty cache folders of its own, under each variant of lab/from_scratch_variants.py, and once after the custom-op
# file (whose compiled reference is inductor's deterministic mode), as in a whole-suite run.
#   bash lab/device/from_scratch_probe.sh OUT          (writes OUT/probe.tgz and prints the rung-3 lines)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT}
work=$(mktemp -d)
source lab/device/lib.sh
install_deps
list_cards | tee "$work/summary.txt"
export PYTHONUNBUFFERED=1
step_archive=$out/probe.tgz  # lib.sh's step packs $work there after each process
show_step() { grep -E "ladder_rung\[(3-compile|2-sdpa)\]::vs_(sdpa|fp32_manual|tf32)  " "$work/$1.log"; }
run() {  # run LABEL VARIANT [pytest args]: one gate process with empty cache folders of its own
  local label=$1 variant=$2 caches; shift 2
  caches=$(mktemp -d)
  step "$label" 300 env SPEEDGATE_FROM_SCRATCH="$variant" TORCHINDUCTOR_CACHE_DIR="$caches/inductor" \
    TRITON_CACHE_DIR="$caches/triton" python3 -m pytest -p no:cacheprovider -p lab.from_scratch_variants -q "$@" \
    --speedgate-json "$work/$label.json"
}
ladder=(perftests/test_compile_ladder.py -k "2-sdpa or 3-compile")
run suite-1 "" "${ladder[@]}"
run off-1 off "${ladder[@]}"
run suite-2 "" "${ladder[@]}"
run off-2 off "${ladder[@]}"
run keep_dir-1 keep_dir "${ladder[@]}"
run after-custom-op "" perftests/test_compile_custom_op.py perftests/test_compile_ladder.py -k "triton_op or 2-sdpa or 3-compile"
