#!/usr/bin/env bash
# The distributed mode on one machine (docs/perf/distributed.md): the same request as one
# process and spread over 2 and 3 ranks under mpirun, and as two home servers' requests
# on 2 ranks (--homes 2: two streams at once), taking turns, three rounds. The
# ranks share this machine's cores (the threads are split between them) and talk through
# shared memory, so this measures the mode's own cost: the messages, the waits, the moves.
# usage: [MOEVM_BACKEND=cuda] bash bench/dist/run.sh [tokens] [model]
#        (default 32 tokens, build/bench-models/olmoe-4l-q4_K_M.gguf, made if missing)
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-32}
m=${2:-build/bench-models/olmoe-4l-q4_K_M.gguf}
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target moevm_cli >/dev/null
mkdir -p "$(dirname "$m")"
[ -f "$m" ] || ./build/moevm mkmodel --preset olmoe-1b-7b --type q4_K_M --layers 4 -o "$m" >&2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
# the CPU unless MOEVM_BACKEND says otherwise (cuda: every rank on a GPU, the machine's
# GPUs taken in turn)
export MOEVM_BACKEND=${MOEVM_BACKEND:-host}
cores=$(nproc)
run=(./build/moevm run -m "$m" -p "Once upon a time" -n "$n" --temp 0)

out_dir=$(mktemp -d)
trap 'rm -rf "$out_dir"' EXIT

# prints "decode tok/s | prefill tok/s | remote % | MiB out per token | waited s | moves";
# with several homes each home's figures, the decode and prefill rates summed (both
# streams run at once), remote % and traffic averaged, the leader's wait and moves
sum_homes() { awk -v h="$1" '{ s += $1 } END { printf (h > 1 ? "%.2f" : "%s"), (h > 1 ? s : $1) }'; }
measure() {
  local ranks=$1 period=$2 homes=$3 out
  local t=$((cores / ranks > 0 ? cores / ranks : 1))
  if [ "$ranks" = 1 ]; then
    out=$("${run[@]}" -t "$cores" 2>&1 >/dev/null)
  else
    rm -rf "$out_dir/r"
    mpirun --oversubscribe -n "$ranks" --output-filename "$out_dir/r" "${run[@]}" -t "$t" \
        --period "$period" --homes "$homes" >/dev/null 2>&1
    out=$(cat "$out_dir"/r/1/rank.*/stderr)
  fi
  local dec pre
  dec=$(sed -nE 's/.*decode [0-9]+ tokens ([0-9.]+) tok\/s.*/\1/p' <<<"$out" | sum_homes "$homes")
  pre=$(sed -nE 's/^prefill [0-9]+ tokens ([0-9.]+) tok\/s.*/\1/p' <<<"$out" | sum_homes "$homes")
  if [ "$ranks" = 1 ]; then
    echo "$dec | $pre | - | - | - | -"
    return
  fi
  sed -nE 's/.*remote [0-9]+ of [0-9]+ expert rows \(([0-9.]+)%\) in [0-9]+ requests, ([0-9.]+) MiB out.*waited ([0-9.]+) s \| ([0-9]+) placements, ([0-9]+) migrations moving ([0-9.]+) MiB/\1 \2 \3 \5 \6/p' \
      <<<"$out" | awk '{ p += $1; m += $2; if (NR == 1) { w = $3; g = $4; b = $5 } }
                      END { printf "%.1f %.4f %s %s %s\n", p / NR, m / NR, w, g, b }' | {
    read -r pct mib wait mig mmib
    echo "$dec | $pre | $pct | $(awk -v a="$mib" -v n="$n" 'BEGIN{printf "%.3f", a/n}') |" \
         "$wait | $mig ($mmib MiB)"
  }
}

echo "== $(date -u +%Y-%m-%d) $(uname -m), $cores cores; $m, $n tokens, greedy"
echo "| round | ranks | homes | period | decode tok/s | prefill tok/s | remote rows % |"\
     "MiB out / token | leader waited s | migrations |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for round in 1 2 3; do
  for cfg in "1 0 1" "2 0 1" "2 8 1" "3 0 1" "3 8 1" "2 0 2" "2 8 2"; do
    read -r ranks period homes <<<"$cfg"
    echo "| $round | $ranks | $homes | $period | $(measure "$ranks" "$period" "$homes") |"
  done
done
