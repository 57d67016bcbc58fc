#!/usr/bin/env bash
# The engine's route, evict, predict and config modules on a real-size model (docs/perf/cpu.md, "Policy
# modules in the engine"): `moevm run` at a 30% budget, each module set three times, then
# `moevm sim` on a trace the engine recorded, for the same modules. The runs are repeatable
# (MOEVM_DETERMINISTIC=on: every copy lands before the next residency decision), so the three
# hit rates agree and only the speeds vary.
# usage: bash bench/cpu/policies.sh [tokens]   (default 32)
set -euo pipefail
cd "$(dirname "$0")/../.."
export MOEVM_DETERMINISTIC=on
n=${1:-32}
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target moevm_cli >/dev/null
m=build/bench-models/olmoe-3l-q8_0.gguf
mkdir -p build/bench-models
[ -f "$m" ] || ./build/moevm mkmodel --preset olmoe-1b-7b --type q8_0 --layers 3 -o "$m" >&2
echo "== $(date -u +%Y-%m-%d) $(uname -m), $(nproc) cores; $m, budget 30%, $n tokens"
echo "| evict | predict | route | config | hit % (3 runs) | partial % | prefetched | used |"\
     "in time | substituted | split | moved MiB | decode tok/s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
# `moevm run -o json`'s report (docs/engine.md) -> "hit" or the rest of a row's cells
cells() {
  python3 -c 'import json, sys
d = json.load(sys.stdin); m = d["memory"]; acc = m["accesses"] or 1
if sys.argv[1] == "hit":
    print("%.1f" % (100 * m["hits"] / acc))
else:
    print("%.1f | %d | %d | %d | %d | %d | %.1f | %.2f" % (100 * m["partial_hits"] / acc,
          m["prefetched"], m["prefetch_used"], m["prefetch_in_time"], m["substituted"],
          m["splits"], m["bytes_moved"] / 1048576, d["decode"]["tokens_per_second"]))' "$1"
}
for set in "lru none none none" "reuse none none none" "lcp none none none" \
           "lru gate none none" "lru residual none none" "lru none importance{alpha=0.3} none" \
           "lru none importance{alpha=1} none" "lfu none none hot" "lcp none none fixedpoint"; do
  read -r ev pr ro cf <<<"$set"
  hits=() last=""
  for _ in 1 2 3; do
    last=$(./build/moevm run -m "$m" -p "Once upon a time" -n "$n" --temp 0 --gpu-budget 30% \
           --evict "$ev" --predict "$pr" --route "$ro" --config "$cf" -o json 2>/dev/null)
    hits+=("$(cells hit <<<"$last")")
  done
  echo "| $ev | $pr | $ro | $cf | ${hits[*]} | $(cells rest <<<"$last") |"
done
t=build/bench-models/policies-trace.jsonl
./build/moevm run -m "$m" -p "Once upon a time" -n "$n" --temp 0 --gpu-budget 30% \
    --trace-out "$t" --trace-hidden >/dev/null 2>&1
echo "== moevm sim on the engine's trace (same budget, 2 MiB pages)"
sets='evict=lru; evict=reuse; evict=lcp; evict=lru,predict=gate; evict=lru,predict=residual'
sets+='; evict=lru,route=importance{alpha=0.3}; evict=lru,route=importance{alpha=1}'
sets+='; evict=lfu,config=hot; evict=lcp,config=fixedpoint'
./build/moevm sim --trace "$t" --model "$m" --budget 30% --compare "$sets"
