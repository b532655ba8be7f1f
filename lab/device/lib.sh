# Sourced by the device scripts of lab/device/: `step LABEL LIMIT COMMAND...` runs COMMAND under a time limit with
# its output in $work/LABEL.log, and appends its exit status, its seconds and what `show_step LABEL` prints (a
# script's own, or the log's last 40 lines) to $work/summary.txt; with $step_archive set, $work is packed there after
# every step, so that a call cut off at its limit still brings back what the earlier steps wrote.
step() {
  local label=$1 limit=$2; shift 2
  local t0
  t0=$(date +%s)
  timeout "$limit" "$@" > "$work/$label.log" 2>&1
  local rc=$?
  echo "== $label: exit $rc, $(( $(date +%s) - t0 )) s" | tee -a "$work/summary.txt"
  if declare -F show_step > /dev/null; then show_step "$label"; else tail -40 "$work/$label.log"; fi | cut -c1-300 | tee -a "$work/summary.txt"
  if [[ -n ${step_archive:-} ]]; then tar czf "$step_archive" -C "$work" .; fi
}
