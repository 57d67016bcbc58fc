#!/usr/bin/env bash
# MOEVM_HOME_MAP=on against off on a GPU with HOST_NUMA VMM, in one call from the repository
# root:  bash bench/gpu/home_map.sh [preset:layers:type (default gpt-oss-20b:3:mxfp4)]
#   1. vmm_costs section 5 (mvm_make_resident of an expert vs the bare copy) under each;
#   2. `moevm run` of a real-shaped model (random weights, made here) at 50% and 25% of its
#      experts' bytes, on and off alternated twice: decode speed, and the greedy text, which
#      must not depend on the setting.
# With $OUT set, the output is also written to $OUT/home_map.txt. Results: docs/perf/vmm.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
spec=${1:-gpt-oss-20b:3:mxfp4}
source bench/gpu/deps.sh || exit 1
log=$(moevm_out_log home_map.txt)
work=${TMPDIR:-/tmp}/moevm-home-map
mkdir -p "$work"
{
    moevm_gpu_build vmm_costs moevm_cli >"$work/build.txt" 2>&1 ||
        { tail -n 20 "$work/build.txt"; echo "home_map.sh: the build failed" >&2; exit 1; }
    for h in on off; do
        echo "== 1. vmm_costs section 5, MOEVM_HOME_MAP=$h"
        MOEVM_HOME_MAP=$h timeout 120 build-gpu/bench/gpu/vmm_costs --only 5 --reps 20 |
            grep '^RESULT make_resident'
    done
    IFS=: read -r name layers type <<<"$spec"
    model=$work/$name-$layers-$type.gguf
    [[ -f "$model" ]] || build-gpu/moevm mkmodel --preset "$name" --layers "$layers" \
        --type "$type" -o "$model" >/dev/null
    echo "== 2. moevm run, $spec"
    for round in 1 2; do
        for budget in 50% 25%; do
            for h in on off; do
                MOEVM_HOME_MAP=$h MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=$budget timeout 120 \
                    build-gpu/moevm run -m "$model" -p "The history of the" -n 64 --temp 0 \
                    --batch 32 >"$work/text" 2>"$work/err"
                echo "-- round $round budget $budget MOEVM_HOME_MAP=$h text $(md5sum <"$work/text" | cut -c1-8)"
                tail -n 1 "$work/err" | cut -c1-240
            done
        done
    done
} 2>&1 | tee -a "$log"
