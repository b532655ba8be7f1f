#!/usr/bin/env bash
# A hung GPU case in a user's project with no ini, under the user's pytest-timeout limit, stderr a pipe (issue 47):
# serially the run ends at the limit naming the case; under -n 1 the worker is replaced and the next case passes.
#   bash lab/device/hang_check.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT}
work=$out/hang
mkdir -p "$work"
source lab/device/lib.sh
install_deps
list_cards | tee "$work/cards.txt"
project=$(mktemp -d)
cat > "$project/test_hang.py" <<'PY'
import torch

x = torch.ones(1 << 20, device="cuda")

def reference():
    return x * 2

def hangs():
    torch.cuda._sleep(1 << 42)  # hours of spinning on the timed stream
    return x * 2

def fine():
    return x + x

def test_hangs(perf):
    perf.compare(reference, hangs)

def test_after(perf):
    perf.compare(reference, fine)
PY
for run in serial xdist; do
  extra=(); [[ $run == xdist ]] && extra=(-n 1)
  t0=$(date +%s)
  (cd "$project" && timeout -k 10 200 python3 -m pytest -p no:cacheprovider --timeout 40 "${extra[@]}" test_hang.py 2>&1 | cat > "$work/$run.log")
  echo "== $run: exit ${PIPESTATUS[0]}, $(( $(date +%s) - t0 )) s" | tee -a "$work/summary.txt"
  grep -E "ran past its deadline|passed|failed|crashed|replac|Timeout" "$work/$run.log" | cut -c1-220 | head -8 | tee -a "$work/summary.txt"
done
