#!/usr/bin/env bash
# What expert slices save, on tests/fakecuda (no GPU needed): bench/interpose/experts.c (an
# MoE decode loop with fused expert tensors, transformers' eager experts) under the
# interposer with MOEVM_PRELOAD_SLICES on and off, for uniform and skewed routing and two
# budgets. Data moved and hits are exact counts from MOEVM_REPORT; the seconds are the fake
# driver's (CPU memcpy), a ratio at most. Results go to docs/perf/interpose.md by hand.
# usage: bash bench/interpose/experts.sh [tokens]   (default 32)
set -euo pipefail
cd "$(dirname "$0")/../.."
tokens=${1:-32}
layers=8 experts=8 mib=4 top_k=2 reuse=30
total=$((layers * experts * mib))
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target bench_preload_experts moevm_preload fakecuda >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== $(date -u +%Y-%m-%d) $(uname -m), $(nproc) cores; $layers layers x $experts experts" \
     "x $mib MiB ($total MiB), top-$top_k, $tokens tokens, reuse $reuse%"
printf '%-6s %-8s %-7s %10s %8s %9s %10s %8s\n' skew budget slices "MiB/token" misses \
       "hit rate" "host MiB" seconds
for skew in 0 1; do
    for budget in $((total / 4)) $((total / 2)); do
        for slices in on off; do
            env LD_LIBRARY_PATH=build/fakecuda MOEVM_CUDA_LIBRARY=build/fakecuda/libcuda.so.1 \
                FAKECUDA_MEM=$((budget + 64))M MOEVM_GPU_BUDGET=${budget}M \
                MOEVM_OVERSUBSCRIBE=${total}M MOEVM_PRELOAD_SLICES=$slices \
                MOEVM_REPORT="$tmp/report.json" LD_PRELOAD="$PWD/build/libmoevm_preload.so" \
                ./build/bench_preload_experts $layers $experts $mib $top_k "$tokens" $reuse 1 \
                "$skew" >"$tmp/run.json"
            python3 - "$tmp/run.json" "$tmp/report.json" "$skew" "${budget}M" "$slices" <<'PY'
import json, sys
run, rep = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
t = run["tokens"]
print("%-6s %-8s %-7s %10.1f %8d %8.1f%% %10.1f %8.2f" % (
    sys.argv[3], sys.argv[4], sys.argv[5], rep["moves"]["bytes_in"] / t / 2**20,
    rep["moves"]["misses"], 100 * rep["launches"]["hit_rate"], run["host_bytes"] / 2**20,
    run["seconds"]))
PY
        done
    done
done
