#!/usr/bin/env bash
# MoEpic's U-curve (issue 53 item 7), in one call from the repository root:
#   bash bench/policies/theta.sh [OUTDIR] [MOEVM]   (defaults docs/perf/policies, ./build/moevm)
# For the Mixtral and Qwen3-30B-A3B shapes, on the 512-token traces run.sh uses (seed 3, the
# routing without context) and gap.sh uses (trace gen's defaults, with context), the
# modelled ms/token and hit rates of MoEpic's configurator with its split fixed at
# theta = 1/8 .. 1 (config fixedpoint{theta=X}: uniform budgets, no search), searched
# (theta free, tau 64 as in run.sh), LRU and LCP over one pool, LRU in uniform per-layer
# budgets, and Belady's bound, at budgets of 26% and 59%, cost rtx3090.
# Writes OUTDIR/theta.txt and prints `RESULT bench=moepic_theta ...` lines.
. "$(dirname "$0")/common.sh" "$@"

thetas="0.125 0.25 0.375 0.5 0.625 0.75 0.875 1"
# LRU and LCP over one pool, and LRU in per-layer uniform budgets: what separates the
# configurator from LRU (its eviction order, its partition, its split)
sets="evict=lru;evict=lcp;config=uniform,evict=lru;config=fixedpoint{tau=64},evict=lcp"
for t in $thetas; do sets="$sets;config=fixedpoint{tau=64,theta=$t},evict=lcp"; done

{
echo "== $(date -u +%Y-%m-%d), $(nproc) cores; $moevm sim --cost rtx3090, 512 tokens, seed 3"
for shape in mixtral-8x7b qwen3-30b-a3b; do
    for routing in plain context; do
        trace=$tmp/$shape-$routing.jsonl
        if [ $routing = plain ]; then
            "$moevm" trace gen --shape $shape --tokens 512 --seed 3 --skew 1 --reuse 0.3 \
                --drift 0 -o "$trace" >/dev/null
        else
            "$moevm" trace gen --shape $shape --tokens 512 --seed 3 -o "$trace" >/dev/null
        fi
        for budget in 26% 59%; do
            echo "== $shape, routing $routing, budget $budget"
            "$moevm" sim --trace "$trace" --cost rtx3090 --budget $budget --compare "$sets" |
                tee "$tmp/table"
            # one RESULT line per row (the columns of sim's table: hit %, part %, ms/token)
            awk -v s=$shape -v r=$routing -v b=$budget '
                $1 == "bound:" { sub(/^bound: /, ""); sub(/ \(offline\)/, "") }
                /^(evict|config)=/ {
                    printf "RESULT bench=moepic_theta shape=%s routing=%s budget=%s policies=%s hit_pct=%s split_pct=%s ms_per_token=%s\n", s, r, b, $1, $2, $3, $8
                }' "$tmp/table"
        done
    done
done
} | tee "$out/theta.txt"
