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

# install_deps: the Python packages the GPU machine lacks, from the carried .cutlass/ archive (tools/stage_cutlass.py)
# or .whl/, and this checkout (pip -e, offline); logs in $work; exits 3 naming the failure. On a warm machine it leaves
# what an earlier call installed as it is: a whole-suite run that outlives its call (fleet.sh's gate_suite) has those
# libraries mapped, and unpacking them again killed it (docs/results/gate-runs.md, 2026-11-26).
install_deps() {
  if [[ -d .cutlass ]]; then
    eval "$(python3 tools/stage_cutlass.py --install --target /tmp/site 2> "$work/install.log")" || { cat "$work/install.log"; exit 3; }
  elif [[ -d .whl ]]; then
    python3 -m pip install -q --no-index --no-deps .whl/*.whl > "$work/install.log" 2>&1 || { cat "$work/install.log"; exit 3; }
  fi
  python3 -c "import speedgate" 2>/dev/null || python3 -m pip install -q --no-deps --no-build-isolation -e . > "$work/pip.log" 2>&1 \
    || { cat "$work/pip.log"; exit 3; }
}

# begin_call OUT: the opening of a script whose logs go straight to OUT: $out and $work (both OUT), the packages
# installed, and the cards listed into $work/summary.txt.
begin_call() {
  out=${1:?OUT}
  work=$out
  mkdir -p "$work"
  install_deps
  list_cards | tee -a "$work/summary.txt"
}

# one_gpu_call OUT: begin_call for a script of one GPU (GPU 0) whose compiles start from empty Triton and inductor
# caches; pack_call [NAME...]: at its end, everything in $work packed into $work/all.tgz but summary.txt and the files
# named (a call brings back only a few files).
one_gpu_call() {
  export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$(mktemp -d) TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) CUDA_VISIBLE_DEVICES=0
  begin_call "$1"
}
pack_call() {
  local keep=(-name summary.txt) name
  for name in "$@"; do keep+=(-o -name "$name"); done
  tar czf /tmp/pack_call.tgz -C "$work" . && find "$work" -mindepth 1 ! \( "${keep[@]}" \) -delete \
    && mv /tmp/pack_call.tgz "$work/all.tgz"
}

# resume_state: for a script whose work outlives a call (steps in the background, calls chained on the warm
# machine): $state (.gpu-state/, git-ignored; the baseline files copied in on the first call) and $work (its logs),
# the packages installed, and this call's time and cards appended to $work/summary.txt.
resume_state() {
  state=.gpu-state
  mkdir -p "$state/baselines" "$state/logs"
  [[ -n $(ls "$state/baselines") ]] || cp baselines/*.json "$state/baselines/"
  work=$state/logs
  export PYTHONUNBUFFERED=1
  install_deps
  echo "call at $(date -u +%FT%TZ)" >> "$work/summary.txt"
  list_cards | tee -a "$work/summary.txt"
}

# keep_settings NAME...: the first call's value of each setting (or that it was unset) for every later call on the same
# state: a chained call that names none of them continues the work the first one started, and one that names a
# setting otherwise is told so and keeps the first's. (A chained call without BLESS once took suite_study.sh's
# default and blessed into the files while the study ran: docs/results/gate-study-h200.md, the twenty-third study.)
keep_settings() {
  local name file=$state/settings
  if [[ ! -f $file ]]; then
    for name in "$@"; do
      if [[ -v $name ]]; then printf '%s=%q\n' "$name" "${!name}"; else printf 'unset %s\n' "$name"; fi
    done > "$file"
    return
  fi
  local -A given=()
  for name in "$@"; do [[ -v $name ]] && given[$name]=${!name}; done
  source "$file"
  for name in "${!given[@]}"; do
    [[ -v $name && ${given[$name]} == "${!name}" ]] \
      || echo "$name=${given[$name]} ignored: the first call on this state set ${name}=${!name-(unset)}" \
      | tee -a "$work/summary.txt"
  done
}

# close_state ARCHIVE: the baseline files that changed, into $out/baselines; $state's logs (and its study/, if any)
# packed into $out/ARCHIVE; the summary printed.
close_state() {
  local file
  for file in "$state/baselines/"*.json; do
    cmp -s "$file" "baselines/$(basename "$file")" || { mkdir -p "$out/baselines" && cp "$file" "$out/baselines/"; }
  done
  tar czf "$out/$1" -C "$state" logs $([[ -d $state/study ]] && echo study)
  cat "$work/summary.txt"
}

# fresh: the environment of a process with empty Triton and inductor caches, as a fresh CI runner starts.
fresh() { echo "TRITON_CACHE_DIR=$(mktemp -d) TORCHINDUCTOR_CACHE_DIR=$(mktemp -d)"; }

# pair_run LABEL JSON [PYTEST ARGS...]: the two-GPU cases (perftests/test_nccl.py) against $state's 2x file, with
# empty caches, within the call's time ($deadline); the report in $work/JSON, the log in $work/pair.log, a line in the
# summary; $state/pair.done unless the time ran out.
pair_run() {
  local label=$1 json=$2 t0 rc
  shift 2
  t0=$(date +%s)
  env $(fresh) timeout -s INT -k 15 $(( $(left) - 20 )) python3 -m pytest perftests/test_nccl.py -p no:cacheprovider -q -rs \
    --baseline-dir "$state/baselines" --speedgate-json "$work/$json" "$@" > "$work/pair.log" 2>&1
  rc=$?
  echo "== $label: exit $rc, $(($(date +%s) - t0)) s; $(tail -1 "$work/pair.log")" >> "$work/summary.txt"
  (( rc == 124 || rc == 137 )) || touch "$state/pair.done"
}

# bless_pair: the two-GPU cases blessed with --speedgate-calibrate 2 into the 2x file, another pair's evidence.
bless_pair() { pair_run pair pair.json --update-baselines --speedgate-calibrate 2; }

# gate_pair: the two-GPU cases gated against the 2x file (a pair that gave it no evidence: false alarms are what it
# looks for).
gate_pair() { pair_run "pair gate" pair-gate.json; }

# list_cards: one line per GPU: its name, anonymized card id (speedgate's: 12 hex digits of the serial's SHA-256),
# the serial's last six characters, its SM clock and temperature now.
list_cards() {
  python3 - <<'PY'
import hashlib, pynvml
pynvml.nvmlInit()
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    s = pynvml.nvmlDeviceGetSerial(h)
    s = (s.decode() if isinstance(s, bytes) else s).strip()
    name = pynvml.nvmlDeviceGetName(h)
    clock = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    temp = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    print(f"GPU {i}: {name.decode() if isinstance(name, bytes) else name}, card {hashlib.sha256(s.encode()).hexdigest()[:12]}, "
          f"serial ending {s[-6:]}, SM {clock} MHz, {temp} C")
PY
}

# The formerly blind cases (issue 46): the heavy compute-bound pairs that lab/device/*.sh bless and study, with
# their -k; and `left`, the seconds before the script's $deadline.
heavy=(perftests/test_triton_matmul.py perftests/test_triton_attention.py perftests/test_triton_mlp.py
       perftests/test_cutlass_matmul.py perftests/test_compile_training.py -k "8192 or llm or training_step or fused_mlp")
# The launch-bound and compiled cases whose entries a calibration before the audit changed (rebless_study.sh).
rebless=(perftests/test_compile_regional.py perftests/test_compile_dynamic.py perftests/test_compile_training.py
         perftests/test_compile_ladder.py perftests/test_compile_modes.py perftests/test_cutlass_matmul.py
         perftests/test_triton_attention.py perftests/test_triton_matmul.py
         -k "regional or dynamic or training_step or 3-compile or 4-fp8 or reduce-overhead or mode and default or k_chunked or gluon and 8192-128-causal or bias_gelu and 4096")
# Every test with a vs_compile comparison (perftests/support/compiled.py): what a change of the compiled reference's
# OPTIONS re-blesses.
compiled_refs=(perftests/test_triton_attention.py perftests/test_triton_elementwise.py perftests/test_triton_l2.py
               perftests/test_triton_matmul.py perftests/test_triton_mlp.py perftests/test_triton_rowwise.py
               -k "not gluon and not fast_accum")
# The cases that hold an autotuner's picks from their entry's config (perftests/support/autotune_picks.py): what a file
# blessed before they were held needs a calibrating bless of (BLESS=held_picks bash lab/device/suite_study.sh).
held_picks=(perftests/test_compile_modes.py -k "test_compile_mode and max-autotune")
# The steady states timed as CUDA graph replays (docs/results/gate-study.md, section 8): what a file blessed while they
# were timed from an idle device needs a calibrating bless of (BLESS=steady_states STUDY=steady_states).
steady_states=(perftests/test_compile_regional.py perftests/test_compile_dynamic.py)
# The graph-break pairs, compiled with one config per pointwise kernel (perftests/test_compile_graph_breaks.py): what a
# file blessed while inductor autotuned them needs a calibrating bless of (BLESS=graph_breaks STUDY=graph_breaks).
graph_breaks=(perftests/test_compile_graph_breaks.py)
# The Gluon fp8 matmul, whose vs_triton reference holds the Triton kernel's blessed config (hold_blessed): what a
# file blessed before it was held needs a bless of, on one GPU (BLESS=gluon_fp8 BLESS_GPUS=0 STUDY=gluon_fp8).
gluon_fp8=(perftests/test_triton_matmul.py -k "fp8_matmul_gluon and not edge")
# Both at once, on one GPU, for a file blessed before either (BLESS=graph_breaks_and_gluon_fp8 BLESS_GPUS=0), then the
# whole suite's study against it.
graph_breaks_and_gluon_fp8=(perftests/test_compile_graph_breaks.py perftests/test_triton_matmul.py
                            -k "graph_break_fix or fp8_matmul_gluon and not edge")
# The H100 file's re-bless (BLESS=h100_rebless BLESS_GPUS=0): both of those and the held picks' case, whose
# compile_s_held_picks that file took from a compile that held no entry's picks (docs/results/gate-study-h200.md,
# "The twenty-first study").
h100_rebless=(perftests/test_compile_graph_breaks.py perftests/test_triton_matmul.py perftests/test_compile_modes.py
              -k "graph_break_fix or fp8_matmul_gluon and not edge or test_compile_mode and max-autotune")
# The compiled cases whose entries hold other picks (speedgate.picks): what a change of how a run is matched to a
# pick is studied on (STUDY=picked).
picked=(perftests/test_compile_modes.py perftests/test_compile_custom_op.py perftests/test_compile_ladder.py
        perftests/test_compile_training.py)
# The comparisons nearest their band's edge in the whole-suite studies (docs/results/gate-study-h200.md, the
# twenty-third study): the L2 case whose compiled reference reads by card, the fused MLP block, the training step and
# the graph-break pairs; a session's last minutes study them alone (STUDY=edges).
edges=(perftests/test_triton_l2.py perftests/test_triton_mlp.py perftests/test_compile_training.py
       perftests/test_compile_graph_breaks.py)
left() { echo $((deadline - $(date +%s))); }
