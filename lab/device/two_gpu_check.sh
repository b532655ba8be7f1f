#!/usr/bin/env bash
# On a host with 2 GPUs (the device tool's nvidia-h100-x2 or nvidia-h200-x2), in one call: the cards (anonymized ids)
# and their link, the NVSHMEM probe (lab/nvshmem_probe.py: does this stack run a Triton kernel issuing NVSHMEM puts,
# and how fast against a copy-engine copy), the quantized all-reduce's stages with --profile (lab/allreduce_breakdown.py,
# traces of each piece count), and test_nccl.py blessed with --speedgate-calibrate 2 into the 2-GPU key's file, then
# gated in a second process. jsonschema comes from the carried .cutlass/ archive (tools/stage_cutlass.py), or .whl/.
# Writes OUT/two_gpu.tgz (logs, JSON, traces), OUT/baselines/ (the files after the bless) and prints a summary.
#
#   bash lab/device/two_gpu_check.sh OUT [steps...]     # steps: probe breakdown nccl cutlass_edge (default: the first three)
# cutlass_edge: the CUTLASS kernels' edge-shape checks on GPU 0 (needs the DSL, so .cutlass/ carried).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT}
shift
steps=${*:-probe breakdown nccl}
work=$(mktemp -d)
export PYTHONUNBUFFERED=1
step_archive="$out/two_gpu.tgz"
source lab/device/lib.sh
install_deps
list_cards | tee "$work/summary.txt"
nvidia-smi topo -m > "$work/topo.txt" 2>&1; head -4 "$work/topo.txt" | tee -a "$work/summary.txt"
for s in $steps; do
  case $s in
    cutlass_edge) step cutlass_edge 90 env CUDA_VISIBLE_DEVICES=0 python3 -m pytest -p no:cacheprovider -q -rs \
        perftests/test_cutlass_matmul.py -k "edge_shapes or fp8_reference" ;;
    probe) step nvshmem_probe 120 python3 lab/nvshmem_probe.py --json "$work/nvshmem.json" --source "$work" ;;
    breakdown) step breakdown 150 python3 lab/allreduce_breakdown.py --mb 256 --pieces 1 2 4 --graph --profile "$work/traces" \
        --json "$work/breakdown.json" ;;
    nccl)
      step nccl_bless 200 python3 -m pytest -p no:cacheprovider -q -rs perftests/test_nccl.py --update-baselines \
        --speedgate-calibrate 2 --speedgate-json "$work/nccl_bless.json"
      mkdir -p "$out/baselines" && cp baselines/*.json "$out/baselines/"
      step nccl_gate 150 python3 -m pytest -p no:cacheprovider -q -rs perftests/test_nccl.py --speedgate-json "$work/nccl_gate.json" ;;
    *) echo "unknown step $s (probe, breakdown, nccl, cutlass_edge)"; exit 2 ;;
  esac
done
echo "== summary"; grep -E "^== |GPU [0-9]|verdict|stopped at|all [0-9]+ steps|passed|failed|regressed|improved|\| quantized|\| nccl" "$work/summary.txt" | cut -c1-240
