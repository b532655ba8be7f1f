#!/usr/bin/env bash
# The whole suite's gate study on a host with two GPUs (issue 46): `python -m speedgate study` over `perftests -n 2`
# (one xdist worker per GPU; on a host with one GPU, serially), a clean run, then every optimized side slowed by each
# of SLOWDOWNS (default 0.05,0.10; SLOWDOWNS= , empty: the clean run alone).
# On a host with one GPU a whole-suite run takes most of a call: a session's device time holds the clean run and one
# slowed run, not two (docs/results/suite-time.md, the twenty-second study's section).
# The study runs in the background (setsid), so it outlives a call: chain calls of this script on the warm machine
# until summary.txt says "study: done". The first call may bless a selection first, on both GPUs at once with
# --speedgate-calibrate 2, into the file the study then gates against: BLESS names lib.sh's selection (heavy, rebless,
# compiled_refs, held_picks, steady_states, graph_breaks, gluon_fp8, graph_breaks_and_gluon_fp8, h100_rebless) or
# none; left unset, heavy on H200s and none elsewhere. STUDY names the selection studied (one of lib.sh's; default
# all: perftests).
# BLESS_GPUS (default every GPU): the GPUs the bless runs on; one (BLESS_GPUS=0) where its tests record an autotuner's
# config, so that two processes do not race two configs into one entry at once. PAIR=1: once the study is done, the
# two-GPU cases (perftests/test_nccl.py) are blessed with --speedgate-calibrate 2 into the 2x file, another pair's
# evidence; PAIR=gate: they are gated against it instead (a pair that gave it no evidence).
#   bash lab/device/suite_study.sh OUT      state in .gpu-state/ (git-ignored); OUT/study.tgz: the study's folder
#                                           (reports, logs, study.md) and the logs; OUT/baselines: files that changed
# Once the study is done, the clean runs' kernel facts each file's entries lack (races, shares) are recorded into the
# files, no speedup (--facts-only), so OUT/baselines brings them back completed. A latency case of lab.drift_probe's
# that the clean run did not pass at its first measurement (lab/probe_followups.py) is probed on the same card right
# after that run, before the slowed ones (study_chain.sh; PROBE_ROUNDS rounds, 600).
# DEADLINE (s, default 570): when this call stops waiting and packs what there is. The first call's BLESS, BLESS_GPUS,
# STUDY, SLOWDOWNS and PAIR hold for every chained call (lib.sh's keep_settings). KIND (H100 or H200): the GPU the
# study is for; on another, nothing starts and the script exits 4 (a machine that asked for one kind can get another).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT}
if [[ -n ${KIND:-} ]]; then
  got=$(python3 -c "import torch; print(torch.cuda.get_device_name(0))" 2>&1)
  [[ $got == *"$KIND"* ]] || { echo "suite_study: KIND=$KIND, but GPU 0 is $got: nothing started"; exit 4; }
fi
start=$(date +%s)
deadline=$((start + ${DEADLINE:-570}))
source lab/device/lib.sh
resume_state
keep_settings BLESS BLESS_GPUS STUDY SLOWDOWNS PAIR
bless=${BLESS:-$(python3 -c "import torch; print('heavy' if 'H200' in torch.cuda.get_device_name(0) else 'none')")}
# On a host with one GPU (nvidia-h100-x1), the bless runs on it alone and the study runs serially.
gpus=$(python3 -c "import torch; print(min(torch.cuda.device_count(), 2))")
if (( gpus >= 2 )); then parallel=(-n 2); visible=0,1; else parallel=(); visible=0; fi
if [[ ! -f $state/blessed && $bless != none ]]; then
  declare -n selection=$bless
  for gpu in ${BLESS_GPUS:-$(seq 0 $((gpus - 1)))}; do
    ( t0=$(date +%s)
      env $(fresh) CUDA_VISIBLE_DEVICES=$gpu \
        timeout -s INT -k 15 "$(left)" python3 -m pytest "${selection[@]}" -p no:cacheprovider -q -rs \
        --baseline-dir "$state/baselines" --update-baselines --speedgate-calibrate 2 \
        --speedgate-json "$work/bless-gpu$gpu.json" > "$work/bless-gpu$gpu.log" 2>&1
      echo "== bless ($bless) on GPU $gpu: exit $?, $(($(date +%s) - t0)) s; $(tail -1 "$work/bless-gpu$gpu.log")" >> "$work/summary.txt" ) &
  done
  wait
  touch "$state/blessed"
fi
all=(perftests)
declare -n studied=${STUDY:-all}
if [[ ! -f $state/study.pid ]]; then
  # The host's CPU once a second (host_sampler.sh) and each test's start and end (clock_plugin.py), in logs/, until
  # the study ends: what the host did while a compile was timed.
  setsid bash lab/device/host_sampler.sh "$work/host.tsv" "$state/study.rc" < /dev/null > /dev/null 2>&1 &
  # Each card's facts beside its timings (lab/card_layout_probe.py: VBIOS, board part, GPC layout by cluster
  # occupancy), for the kernels whose time splits the cards of a kind into groups (the H200 study page).
  for ((gpu = 0; gpu < gpus; gpu++)); do
    CUDA_VISIBLE_DEVICES=$gpu python3 -m lab.card_layout_probe "$work/card-gpu$gpu.json" 2>&1 | tail -1 | cut -c1-300 \
      | sed "s/^/== card facts, GPU $gpu: /" >> "$work/summary.txt"
  done
  # The clean run, the drift probe of a latency case it did not pass at once, then the slowed runs (study_chain.sh).
  CUDA_VISIBLE_DEVICES=$visible SPEEDGATE_LAB_CLOCK=$PWD/$work/clock.tsv PYTHONPATH=$PWD/lab/device:${PYTHONPATH:-} \
    setsid bash lab/device/study_chain.sh "$state" "${SLOWDOWNS-0.05,0.10}" "${studied[@]}" "${parallel[@]}" \
    < /dev/null > /dev/null 2>&1 &
  echo $! > "$state/study.pid"
  echo "== study: started at $(date -u +%T)" >> "$work/summary.txt"
fi
while [[ ! -f $state/study.rc ]] && (( $(left) > 15 )); do sleep 5; done
if [[ -f $state/study.rc ]]; then
  grep -q "study: done" "$work/summary.txt" || { echo "== study: done, exit $(cat "$state/study.rc")" >> "$work/summary.txt"
    tail -4 "$work/study.log" >> "$work/summary.txt"
    # The clean runs' kernel facts the file's entries lack (races, shares), no speedup: OUT/baselines brings the file
    # back completed (python -m speedgate evidence --facts-only), for a commit of its own.
    for file in "$state/baselines/"*.json; do
      python3 -m speedgate evidence "$file" "$state/study/"clean*.json --facts-only 2>&1 \
        | grep -E "facts recorded|read;" | sed "s|^|== facts ($(basename "$file")): |" >> "$work/summary.txt"
    done; }
else
  echo "== study: still running at $(date -u +%T): $(ls "$state/study" 2>/dev/null | tr '\n' ' ')" >> "$work/summary.txt"
fi
if [[ ${PAIR:-0} != 0 && -f $state/study.rc && ! -f $state/pair.done ]] && (( $(left) > 200 )); then
  if [[ $PAIR == gate ]]; then gate_pair; else bless_pair; fi
fi
close_state study.tgz
