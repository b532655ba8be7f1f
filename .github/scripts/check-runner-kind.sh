#!/usr/bin/env bash
# The runner-kind check of gpu-gate.yml and bless.yml: fails, naming both keys, when the runner's GPU is not of the
# kind its job is for ($KIND, the job's hardware key). A runner labelled with one kind but holding another GPU would
# judge or bless its own GPU's file under the other kind's name. The key is speedgate's own (the first visible GPU's,
# as a run computes it); SPEEDGATE_HARDWARE_KEY would override a run's, so a different one set on the runner fails too.
set -euo pipefail
: "${KIND:?KIND must name the hardware key of the job}"
found=$(python -c "from speedgate.hardware import detect; print(detect().key)")
if [ "$found" != "$KIND" ]; then
  echo "::error::this runner is labelled $KIND, but its GPU's hardware key is $found: its run would use baselines/$found.json, not baselines/$KIND.json; fix the runner's labels"
  exit 1
fi
if [ -n "${SPEEDGATE_HARDWARE_KEY:-}" ] && [ "$SPEEDGATE_HARDWARE_KEY" != "$KIND" ]; then
  echo "::error::this runner is labelled $KIND and its GPU's hardware key is $found, but it sets SPEEDGATE_HARDWARE_KEY=$SPEEDGATE_HARDWARE_KEY, which the run would use instead; unset it on the runner"
  exit 1
fi
echo "runner kind: $found"
