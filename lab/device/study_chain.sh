#!/usr/bin/env bash
# What suite_study.sh runs in the background (setsid), so that it outlives a call: the study's clean run, then on the
# same card the drift probe of every latency case that run did not pass at its first measurement
# (lab/probe_followups.py), then the slowed runs, which reuse the clean run's report (`python -m speedgate study`
# keeps the runs whose report exists). The probe comes before the slowed runs so that it sees the card in the state
# the case slid in, and so that a study the device time cuts off has probed it already (the twenty-second H200 study
# was cut off in its +10% run, and its training step had slid in the clean one: docs/results/gate-study-h200.md).
# Its exit status (the last study's) goes to STATE/study.rc.
#   bash lab/device/study_chain.sh STATE SLOWDOWNS PYTEST ARGS...    (STATE: suite_study.sh's .gpu-state)
#   PROBE_ROUNDS: the probe's rounds (600); PROBE_LIMIT: its seconds at most (300)
state=${1:?STATE}; slowdowns=${2?SLOWDOWNS}
shift 2
logs=$state/logs
study() {
  python3 -m speedgate study "$state/study" --runs 1 --slowdowns "$1" -- "${@:2}" -p clock_plugin -rs \
    --baseline-dir "$state/baselines" >> "$logs/study.log" 2>&1
}
study "" "$@"
rc=$?
for case in $(python3 -m lab.probe_followups "$state/study"/clean*.json 2>> "$logs/study.log"); do
  timeout -k 15 "${PROBE_LIMIT:-300}" python3 -m lab.drift_probe "$logs" --case "$case" --rounds "${PROBE_ROUNDS:-600}" \
    --window 50 > "$logs/probe-$case.log" 2>&1
  echo "== probe ($case, after its clean run did not pass at once): exit $?; $(tail -3 "$logs/probe-$case.log" | tr '\n' ' ')" \
    >> "$logs/summary.txt"
done
if [[ -n $slowdowns ]]; then
  study "$slowdowns" "$@"
  rc=$?
fi
echo "$rc" > "$state/study.rc"
