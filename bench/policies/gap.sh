#!/usr/bin/env bash
# How much of the hit-rate gap between LRU and Belady's offline optimum each eviction module
# closes (docs/perf/policies.md, "Eviction against the bound"), in one call from the
# repository root:
#   bash bench/policies/gap.sh [OUT.txt]        (default docs/perf/policies/gap.txt)
# MOEVM=path/to/moevm runs another build's CLI (default ./build/moevm).
# Part 1: every shape `moevm trace gen` knows, its default (published-statistics) routing,
# budgets 25% and 50%. Part 2: trace gen's other routing regimes on three shapes, where no
# module may lose to LRU. Each row also has the online bound: the same selections with the
# scores replaced by the generator's latent logits (--latent-scores), ranked by
# evict=affinity{alpha=1}: what a policy that knew the context exactly, but not the
# per-token draws, would hit. Prints a table and one RESULT line per row:
#   RESULT gap shape=S routing=R budget=B lru=H ... belady=H online=H closed_<m>=F
# where F = (hit_m - hit_lru) / (hit_belady - hit_lru); the table's last columns are the
# gap closed by affinity, by adaptive (its ghosts choosing between affinity and LRU) and by
# the online bound. Modelled, deterministic: one run.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-docs/perf/policies/gap.txt}
mkdir -p "$(dirname "$out")"
moevm=${MOEVM:-./build/moevm}
[ -x "$moevm" ] || { echo "build first: make build (or set MOEVM)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

modules="lru lfu reuse score affinity adaptive"
sets="evict=lru; evict=lfu; evict=reuse; evict=score; evict=affinity; evict=adaptive"

# hit % of the row whose label starts with $2 in sim output $1
. "$(dirname "$0")/hits.sh"

row() { # shape routing-label budget gen-args...
    local shape=$1 routing=$2 budget=$3
    shift 3
    $moevm trace gen --shape "$shape" --seed 3 "$@" -o "$tmp/t.jsonl" >/dev/null
    $moevm trace gen --shape "$shape" --seed 3 "$@" --latent-scores -o "$tmp/l.jsonl" >/dev/null
    $moevm sim --trace "$tmp/t.jsonl" --cost rtx3090 --budget "$budget%" --compare "$sets" \
        >"$tmp/s.txt"
    $moevm sim --trace "$tmp/l.jsonl" --cost rtx3090 --budget "$budget%" \
        --evict 'affinity{alpha=1}' >"$tmp/o.txt"
    local lru belady online line res
    lru=$(hit "$tmp/s.txt" "evict=lru ")
    belady=$(hit "$tmp/s.txt" "bound: evict=belady")
    online=$(hit "$tmp/o.txt" "default ")
    line=$(printf '%-18s %-22s %3s%%' "$shape" "$routing" "$budget")
    res="RESULT gap shape=$shape routing=$routing budget=$budget"
    local closed=""
    for m in $modules; do
        local h
        h=$(hit "$tmp/s.txt" "evict=$m ")
        line+=$(printf ' %6s' "$h")
        res+=" $m=$h"
        closed+=" closed_$m=$(closed "$h" "$lru" "$belady")"
    done
    line+=$(printf ' %6s %6s' "$online" "$belady")
    line+=$(awk -v h="$(hit "$tmp/s.txt" "evict=affinity ")" \
        -v d="$(hit "$tmp/s.txt" "evict=adaptive ")" -v o="$online" -v a="$lru" -v b="$belady" \
        'BEGIN { if (b > a) printf "   %5.0f%% %5.0f%% %5.0f%%", 100 * (h - a) / (b - a),
                 100 * (d - a) / (b - a), 100 * (o - a) / (b - a) }')
    echo "$line"
    echo "$res online=$online belady=$belady$closed"
}

{
    echo "# bash bench/policies/gap.sh  ($(date -u +%F), $(git rev-parse --short HEAD))"
    echo "# hit % per evict module; online: the latent-logit bound; belady: the offline bound;"
    echo "# closed: share of the LRU-to-belady gap closed by affinity, adaptive and the online bound"
    printf '%-18s %-22s %4s' shape routing budget
    for m in $modules; do printf ' %6s' "$m"; done
    printf ' %6s %6s   %6s %6s %6s\n' online belady affin. adapt. online
    shapes=$($moevm trace gen --help 2>&1 | sed -n 's/^  --shape *//p' | tr -d ',')
    for shape in $shapes; do
        for b in 25 50; do row "$shape" default "$b"; done
    done
    for shape in qwen3-30b-a3b mixtral-8x7b olmoe-1b-7b; do
        for b in 25 50; do
            row "$shape" "no-context" "$b" --drift 0 --skew 1 --reuse 0.3
            row "$shape" "sticky" "$b" --reuse 0.9
            row "$shape" "uniform" "$b" --skew 0 --drift 0
            row "$shape" "skewed" "$b" --skew 3
            row "$shape" "short-tasks" "$b" --shift-every 16
            row "$shape" "8-requests" "$b" --requests 8
            row "$shape" "layer-corr-1" "$b" --layer-corr 1
            row "$shape" "fast-context" "$b" --drift 4 --drift-tokens 8
        done
    done
} | tee "$tmp/all.txt"
grep -v '^RESULT' "$tmp/all.txt" >"$out"
grep '^RESULT' "$tmp/all.txt" >>"$out"
echo "wrote $out"
