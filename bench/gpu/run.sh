#!/usr/bin/env bash
# One call, from the repository root on a machine with an NVIDIA GPU:
#   bash bench/gpu/run.sh [vmm_costs options: --device N --reps N --only 1,2,3,4,5,6,7,8,9]
# Builds the vmm_costs target in build-gpu/, prints the GPU list and runs the benchmark.
# With $OUT set, the whole output is also written to $OUT/vmm_costs.txt.
# On a device machine, carry .gpudeps (bench/gpu/deps.sh fetch) in case its image lacks the
# build's libraries. Results go into docs/perf/vmm.md.
set -euo pipefail

cd "$(dirname "$0")/../.."

source bench/gpu/deps.sh || exit 1
log=$(moevm_out_log vmm_costs.txt)
{
    echo "== build"
    moevm_gpu_build vmm_costs
    echo "== nvidia-smi -L"
    nvidia-smi -L
    echo "== vmm_costs $*"
    bin=$(find build-gpu -type f -name vmm_costs -perm -u+x | head -n 1)
    if [[ -z "$bin" ]]; then
        echo "run.sh: the vmm_costs binary was not found under build-gpu/" >&2
        exit 1
    fi
    "$bin" "$@"
} 2>&1 | tee -a "$log"
