#!/usr/bin/env bash
# Does xdist's schedule change how long the compiled cases take under `-n 2` (issue 46, docs/results/suite-time.md)?
# The cases marked `compile` under `-n 2` on a host with two GPUs, empty caches, with one --maxschedchunk per call:
#   CHUNK=1 bash lab/device/schedule_check.sh OUT          one test sent at a time
#   CHUNK=100000 bash lab/device/schedule_check.sh OUT     xdist's default (a chunk as long as the collection)
# Chain the two calls on one warm machine, so that both schedules run on the same cards. The first call on a machine
# compiles a small function on each GPU first, so that neither schedule pays the machine's first import and compile.
# OUT: chunkCHUNK.log (pytest's output), chunkCHUNK.json (the --speedgate-json report: each test's seconds) and
# summary.txt (pytest's own time, each worker's tests and seconds).
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:?OUT}"
chunk=${CHUNK:?CHUNK: 1, or 100000 for xdist default}
if [[ ! -f /tmp/schedule_check.warm ]]; then
  for gpu in 0 1; do
    CUDA_VISIBLE_DEVICES=$gpu python3 -c "import torch; torch.compile(lambda x: x.relu() + 1)(torch.ones(8, device='cuda'))" &
  done
  wait
  touch /tmp/schedule_check.warm
fi
t0=$(date +%s)
env $(fresh) CUDA_VISIBLE_DEVICES=0,1 timeout -s INT -k 15 540 python3 -m pytest perftests -m compile -n 2 \
  --maxschedchunk "$chunk" -p no:cacheprovider -q -rs --speedgate-json "$work/chunk$chunk.json" \
  > "$work/chunk$chunk.log" 2>&1
echo "== --maxschedchunk $chunk: exit $?, $(($(date +%s) - t0)) s; $(tail -1 "$work/chunk$chunk.log")" | tee -a "$work/summary.txt"
