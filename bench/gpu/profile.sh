#!/usr/bin/env bash
# Where the GPU decode's time goes (MOEVM_GPU_PROFILE=on, engine/compute/gpu_profile.h), in
# one call from the repository root of a GPU machine:
#
#   MODELS="olmoe-1b-7b:q8_0 olmoe-1b-7b:q4_k_m" BUDGETS="100 25" bash bench/gpu/profile.sh
#
# For each model (mkmodel preset:type, made here) and budget (% of the experts' bytes):
# moevm bench -p 0 -n GEN -r 1 on the GPU with the profile on, the table of its timed
# repetition (per kernel and copy kind: calls, total, average, share of the device's busy
# time) and one line a script can read:
#   RESULT gpu_profile model=olmoe-1b-7b type=q8_0 budget=100 tg=187.3 wall_ms=700.1
#          busy_ms=250.2 busy_frac=0.357 syncs=2048 host_wait_ms=180.4   (one line)
# busy_frac well below 1 says the decode is bound by the host (routing, launches, round
# trips), not by its kernels; the rows say which kernels to make faster first. Timing
# every operation between events costs a little: compare tg with an unprofiled run.
# PROMPT=512 profiles one prompt batch of 512 tokens (-p 512 -n 0; the line says pp=) in
# place of the decode. GEN (default 64), THREADS (the machine's cores), WORK
# (/tmp/moevm-offload: models are kept between calls, shared with llamacpp.sh); the whole
# log in $OUT/profile.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/deps.sh || exit 1
log=$(moevm_out_log profile.txt)
models=${MODELS:-olmoe-1b-7b:q8_0}
budgets=${BUDGETS:-100 25}
tg=${GEN:-64} pp=${PROMPT:-0} threads=${THREADS:-$(nproc)}
run=(-p 0 -n "$tg") test=tg # decode; with PROMPT, one prompt batch of that many tokens
if ((pp > 0)); then run=(-p "$pp" -n 0) test=pp; fi
work=${WORK:-/tmp/moevm-offload}
mkdir -p "$work"

die() { echo "profile.sh: $*" >&2; exit 1; }

{
    moevm_gpu_build moevm_cli >"$work/build.txt" 2>&1 ||
        { tail -n 20 "$work/build.txt"; die "the moevm build failed"; }
    nvidia-smi -L
    for spec in $models; do
        IFS=: read -r name type <<<"$spec"
        model=$work/$name-$type.gguf
        [[ -f $model ]] || build-gpu/moevm mkmodel --preset "$name" --type "$type" -o "$model" \
            >"$work/mkmodel.txt" 2>&1 || { tail -n 3 "$work/mkmodel.txt"; die "mkmodel $spec"; }
        for b in $budgets; do
            echo "== $spec at $b%: moevm bench ${run[*]} -r 1 -t $threads, MOEVM_GPU_PROFILE=on"
            out=$(MOEVM_BACKEND=cuda MOEVM_GPU_PROFILE=on build-gpu/moevm bench -m "$model" \
                  "${run[@]}" -r 1 -t "$threads" --gpu-budget "$b%" 2>"$work/profile.err")
            rc=$?
            echo "$out"
            # the warm-up's table, then the timed repetition's: the last one
            table=$(awk '/^gpu profile:/ { t = "" } /^gpu profile:|^  / { t = t $0 "\n" }
                         END { printf "%s", t }' "$work/profile.err")
            echo "$table"
            [[ $rc -eq 0 && -n $table ]] || { tail -n 5 "$work/profile.err"; continue; }
            speed=$(echo "$out" |
                    awk -F'|' -v t="$test" '$9 ~ t { split($10, v, " "); print v[1] }')
            echo "$table" | head -n 1 | sed -E 's/^gpu profile: ([0-9.]+) ms .* busy ([0-9.]+) ms \(([0-9]+)%\); ([0-9]+) syncs, the host waited ([0-9.]+) ms.*/\1 \2 \4 \5/' |
                while read -r wall busy syncs wait; do
                    frac=$(awk -v b="$busy" -v w="$wall" 'BEGIN { printf "%.3f", (w > 0 ? b / w : 0) }')
                    echo "RESULT gpu_profile model=$name type=$type budget=$b $test=$speed" \
                         "wall_ms=$wall busy_ms=$busy busy_frac=$frac syncs=$syncs host_wait_ms=$wait"
                done
        done
    done
} 2>&1 | tee -a "$log"
