#!/usr/bin/env bash
# The blind cases' first look (issue 46), on one GPU: codegen facts as speedgate reads them, the heavy pairs in ms and
# in SM cycles (lab/cycles_probe.py), the training step's host share (lab/host_bound_probe.py) in two processes.
#   bash lab/device/blind_probe.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT}
work=$out/blind
mkdir -p "$work"
source lab/device/lib.sh
step_archive=$out/blind.tgz
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc TORCHINDUCTOR_CACHE_DIR=/tmp/ic
install_deps
list_cards | tee -a "$work/summary.txt"
step codegen 120 python3 -m lab.codegen_check
step cycles 300 python3 -m lab.cycles_probe "$work" --batches ${BATCHES:-6}
step host1 150 python3 -m lab.host_bound_probe "$work/h1" --rounds 30
step host2 150 python3 -m lab.host_bound_probe "$work/h2" --rounds 30 --batch 32
cat "$work/summary.txt"
