#!/usr/bin/env bash
# Where Belady's advantage over the online eviction modules lies: how many tokens ahead an
# eviction would have to see the routing to close how much of the LRU-to-Belady gap
# (docs/perf/policies.md, "How far ahead the bound looks"). One call, from the repository
# root:
#   bash bench/policies/foresight.sh [OUTDIR] [MOEVM]
#                                          (defaults docs/perf/policies, ./build/moevm)
# The traces are gap.sh's part 1 (trace gen's default routing, seed 3, 512 tokens); cost
# rtx3090, budgets 25% and 50%, hit rates. `belady{ahead=T}` reads the routing only to the
# end of the token T after the current one and ranks what it cannot see by `affinity`: T = 0
# is the rest of the current token, the most a predictor from the current hidden state could
# know. Writes OUTDIR/foresight.txt: a table and one RESULT line per row,
#   RESULT foresight shape=S budget=B lru=.. affinity=.. ahead0=.. ahead1=.. ahead4=..
#     ahead16=.. belady=.. closed_ahead0=..   (closed: share of the LRU-to-belady gap)
. "$(dirname "$0")/common.sh" "$@"

aheads="0 1 4 16"
sets="evict=lru; evict=affinity"
for a in $aheads; do sets+="; evict=belady{ahead=$a}"; done

. "$(dirname "$0")/hits.sh"

row() { # shape budget
    local shape=$1 budget=$2
    $moevm sim --trace "$tmp/$shape.jsonl" --cost rtx3090 --budget "$budget%" \
        --compare "$sets" >"$tmp/s.txt"
    local lru affinity belady line res
    lru=$(hit "$tmp/s.txt" "evict=lru ")
    affinity=$(hit "$tmp/s.txt" "evict=affinity ")
    belady=$(hit "$tmp/s.txt" "bound: evict=belady")
    line=$(printf '%-18s %3s%% %6s %6s' "$shape" "$budget" "$lru" "$affinity")
    res="RESULT foresight shape=$shape budget=$budget lru=$lru affinity=$affinity"
    local closed=""
    for a in $aheads; do
        local h
        h=$(hit "$tmp/s.txt" "evict=belady{ahead=$a} ")
        line+=$(printf ' %6s' "$h")
        res+=" ahead$a=$h"
        closed+=" closed_ahead$a=$(closed "$h" "$lru" "$belady")"
    done
    line+=$(printf ' %6s' "$belady")
    echo "$line"
    echo "$res belady=$belady$closed"
}

{
    echo "# bash bench/policies/foresight.sh  ($(date -u +%F), $(git rev-parse --short HEAD))"
    echo "# hit %; aheadT: belady{ahead=T}, the routing seen to the end of the token T after"
    echo "# the current one, affinity beyond; belady: the whole future"
    printf '%-18s %4s %6s %6s' shape budget lru affin.
    for a in $aheads; do printf ' %6s' "ahead$a"; done
    printf ' %6s\n' belady
    shapes=$($moevm trace gen --help 2>&1 | sed -n 's/^  --shape *//p' | tr -d ',')
    for shape in $shapes; do
        $moevm trace gen --shape "$shape" --seed 3 -o "$tmp/$shape.jsonl" >/dev/null
        for b in 25 50; do row "$shape" "$b"; done
    done
} | tee "$tmp/all.txt"
grep -v '^RESULT' "$tmp/all.txt" >"$out/foresight.txt"
grep '^RESULT' "$tmp/all.txt" >>"$out/foresight.txt"
echo "wrote $out/foresight.txt"
