#!/usr/bin/env bash
# Where test_compile_mode[max-autotune]'s compile spends its time, sampled by py-spy (carried in .pyspy/, git-ignored):
# the compile in a bare fresh process, then the test after test_compile_mode[default] in one pytest process (where
# its GEMM autotuning took 20x longer: docs/results/suite-time.md). Writes OUT/spy-*.txt (py-spy raw, all threads
# and idle samples), the logs and the compile times per test. Usage: bash lab/device/max_autotune_spy.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?OUT}
work=$OUT; source lab/device/lib.sh; install_deps; list_cards | tee $OUT/cards.txt
python3 - > /tmp/ma.py <<'PY'
from lab.fresh_process_probe import MAX_AUTOTUNE; print(MAX_AUTOTUNE)
PY
export PYTHONPATH=$PWD
timeout 150 .pyspy/py-spy record -r 40 -f raw --threads --idle -o $OUT/spy-fresh.txt -- python3 /tmp/ma.py perftests.models.transformer:compile_time_builder > $OUT/fresh.log 2>&1; echo "fresh rc $?"
mkdir -p /tmp/bl; LAB_COMPILE_TIMES=$OUT/ct.txt timeout 400 .pyspy/py-spy record -r 40 -f raw --threads --idle -o $OUT/spy-after-default.txt -- python3 -m pytest -p no:cacheprovider -p lab.fresh_process_probe -q perftests/test_compile_modes.py -k "test_compile_mode and (default or max-autotune)" --baseline-dir /tmp/bl > $OUT/pytest.log 2>&1; echo "pytest rc $?"
tail -3 $OUT/pytest.log; grep -E "addmm_template_autotuning" $OUT/ct.txt $OUT/fresh.log
