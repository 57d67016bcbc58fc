#!/usr/bin/env bash
# The policy comparison of docs/perf/policies.md, in one call from the repository root:
#   bash bench/policies/run.sh [OUTDIR] [MOEVM]   (defaults docs/perf/policies, ./build/moevm)
# For three model shapes (Mixtral 8/top-2, Qwen3-30B-A3B 128/top-8, DeepSeek-V2-Lite
# 64/top-6; the latter's 2 shared experts are always resident and not routed, so they are
# outside the budget) it synthesises a 512-token trace (trace gen's routing without its
# context: skew 1, reuse 0.3, drift 0) and sweeps each paper's policy set over budgets of 10-75% of the expert bytes.
# Writes OUTDIR/<shape>.csv, .svg and .txt.
. "$(dirname "$0")/common.sh" "$@"

sets='evict=lru;
evict=lfu;
evict=reuse;
route=importance,evict=score,assign=twoptr;
evict=workload,assign=greedy;
config=hot,assign=presched;
config=fixedpoint{tau=64},evict=lcp'
sets=$(echo "$sets" | tr -d '\n')

for shape in mixtral-8x7b qwen3-30b-a3b deepseek-v2-lite; do
    trace=$out/$shape.jsonl
    # The routing of trace gen before its context (drift) was added: the tables in
    # docs/perf/policies.md were made with it; gap.sh measures on the current defaults.
    "$moevm" trace gen --shape $shape --tokens 512 --seed 3 --skew 1 --reuse 0.3 --drift 0 \
        -o "$trace" >/dev/null
    "$moevm" sim --trace "$trace" --cost rtx3090 --compare "$sets" \
        --sweep budget=10%..75% --steps 5 --out "$out/$shape" | tee "$out/$shape.txt"
    rm -f "$trace"
done
