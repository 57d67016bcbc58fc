#!/usr/bin/env bash
# PreScope's static hot-expert table (issue 53 items 3 and 7), in one call from the
# repository root:
#   bash bench/policies/hot.sh [OUTDIR] [MOEVM]   (defaults docs/perf/policies, ./build/moevm)
# For the DeepSeek-V2-Lite and Qwen3-30B-A3B shapes, 1,024-token traces (seed 3) split in
# two: the first 512 tokens are the profiling run (--hot-profile), the last 512 are
# simulated. Three kinds of routing:
#   stationary  each layer's popularity alone (no context, no carry-over, no layer
#               correlation, no task shift): PreScope's premise, a profile that describes
#               the run
#   context     trace gen's defaults (the drifting context that makes selections recur over
#               the next tokens) without task shifts: one workload, profiled
#   shifts      trace gen's defaults, a new task every 256 tokens: the profile's tasks are
#               not the run's
# Sets: LRU; config hot as it was before the table was held (no offline profile and the
# default profile of 65,536 tokens, so per-layer budgets filled by LRU); the held table from
# the profile; each with assign=presched (PreScope's scheduler); and Belady's bound. Budgets
# 10%, 26% and 50%, cost rtx3090.
# Writes OUTDIR/hot.txt and prints `RESULT bench=hot_table ...` lines.
. "$(dirname "$0")/common.sh" "$@"

# one RESULT line per row of a sim table (hit %, ms/token)
results() {
    awk -v s=$1 -v r=$2 -v b=$3 -v p=$4 '
        $1 == "bound:" { sub(/^bound: /, ""); sub(/ \(offline\)/, "") }
        /^(evict|config)=/ {
            printf "RESULT bench=hot_table shape=%s routing=%s budget=%s profile=%s policies=%s hit_pct=%s cpu_pct=%s ms_per_token=%s\n", s, r, b, p, $1, $2, $7, $8
        }' "$5"
}

{
echo "== $(date -u +%Y-%m-%d), $(nproc) cores; $moevm sim --cost rtx3090; 1024-token traces, seed 3: tokens 0-511 profile, 512-1023 simulated"
for shape in deepseek-v2-lite qwen3-30b-a3b; do
    for routing in stationary context shifts; do
        trace=$tmp/$shape-$routing.jsonl
        case $routing in
        stationary) opts="--drift 0 --reuse 0 --layer-corr 0 --shift-every 0" ;;
        context) opts="--shift-every 0" ;;
        shifts) opts="" ;;
        esac
        # shellcheck disable=SC2086
        "$moevm" trace gen --shape $shape --tokens 1024 --seed 3 $opts -o "$trace" >/dev/null
        layers=$(head -n 1 "$trace" | sed 's/.*"n_layers":\([0-9]*\).*/\1/')
        head -n $((1 + 512 * layers)) "$trace" >"$tmp/profile.jsonl"
        { head -n 1 "$trace"; tail -n +$((2 + 512 * layers)) "$trace"; } >"$tmp/run.jsonl"
        for budget in 10% 26% 50%; do
            echo "== $shape, routing $routing, budget $budget"
            "$moevm" sim --trace "$tmp/run.jsonl" --cost rtx3090 --budget $budget \
                --compare 'evict=lru; config=hot; evict=lru,assign=presched; config=hot,assign=presched' |
                tee "$tmp/online"
            results $shape $routing $budget none "$tmp/online"
            echo "-- the table held from the profile (--hot-profile: tokens 0-511)"
            "$moevm" sim --trace "$tmp/run.jsonl" --cost rtx3090 --budget $budget \
                --hot-profile "$tmp/profile.jsonl" \
                --compare 'config=hot; config=hot,assign=presched' | tail -n +3 | tee "$tmp/held"
            results $shape $routing $budget tokens0-511 "$tmp/held"
        done
    done
done
} | tee "$out/hot.txt"
