#!/usr/bin/env bash
# Where SMoE's gain comes from (issue 53 item 7), in one call from the repository root:
#   bash bench/policies/smoe.sh [OUTDIR] [MOEVM]  (defaults docs/perf/policies, ./build/moevm)
# On run.sh's 512-token traces (seed 3, routing without context) of the Mixtral,
# Qwen3-30B-A3B and DeepSeek-V2-Lite shapes, at budgets of 10% and 42%, cost rtx3090, SMoE's
# set taken apart: LRU alone; the two-pointer CPU/GPU assignment (Alg. 2) with LRU and with
# SMoE's score eviction (Eq. 3); the whole set (+ importance substitution, Alg. 1, its
# default alpha) and with alpha = 0 (no substitution); substitution and score eviction
# without the assignment.
# Writes OUTDIR/smoe.txt and prints `RESULT bench=smoe_parts ...` lines.
. "$(dirname "$0")/common.sh" "$@"

sets='evict=lru; evict=lru,assign=twoptr; evict=score,assign=twoptr;'
sets="$sets route=importance,evict=score,assign=twoptr;"
sets="$sets route=importance{alpha=0},evict=score,assign=twoptr; route=importance,evict=score"
{
echo "== $(date -u +%Y-%m-%d), $(nproc) cores; $moevm sim --cost rtx3090, 512 tokens, seed 3, skew 1, reuse 0.3, drift 0"
for shape in mixtral-8x7b qwen3-30b-a3b deepseek-v2-lite; do
    trace=$tmp/$shape.jsonl
    "$moevm" trace gen --shape $shape --tokens 512 --seed 3 --skew 1 --reuse 0.3 --drift 0 \
        -o "$trace" >/dev/null
    for budget in 10% 42%; do
        echo "== $shape, budget $budget"
        "$moevm" sim --trace "$trace" --cost rtx3090 --budget $budget --compare "$sets" |
            tee "$tmp/table"
        awk -v s=$shape -v b=$budget '
            /^(evict|route)=/ {
                printf "RESULT bench=smoe_parts shape=%s budget=%s policies=%s hit_pct=%s cpu_pct=%s ms_per_token=%s\n", s, b, $1, $2, $7, $8
            }' "$tmp/table"
    done
done
} | tee "$out/smoe.txt"
