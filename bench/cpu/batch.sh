#!/usr/bin/env bash
# Continuous batching on the CPU against llama.cpp, in one call: S sequences decoding
# together, moevm's batched pass (bench_cpu_batch: against the same sequences one by one, in
# the same run) and llama.cpp's llama-batched-bench on the same file and threads, for each S,
# one after the other, each its best of three. Prints RESULT lines (docs/perf/cpu.md records them):
#   RESULT bench=cpu_batch ...          moevm batched against one by one
#   RESULT bench=cpu_batch_vs_llamacpp  moevm batched against llama.cpp at the same S
# usage: bash bench/cpu/batch.sh [threads (2)] [sequences ("1 4 8")] [decode steps (16)]
# llama.cpp: bash bench/llamacpp/build.sh cpu first (without it only moevm's figures).
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${1:-2}
seqs=${2:-"1 4 8"}
steps=${3:-16}
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target moevm_cli bench_cpu_batch >/dev/null
mkdir -p build/bench-models
model=build/bench-models/olmoe-3l-q8_0.gguf
[ -f "$model" ] || ./build/moevm mkmodel --preset olmoe-1b-7b --type q8_0 --layers 3 -o "$model" >&2
llama=.llamacpp/build-cpu/bin/llama-batched-bench
echo "== $(date -u +%Y-%m-%d) $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== $model, $threads threads, $steps decode steps"
for s in $seqs; do
  out=$(./build/bench_cpu_batch "$model" "$threads" "$s" "$steps")
  echo "$out" | grep -E "^best|^RESULT"
  ours=$(echo "$out" | sed -n 's/^RESULT.* batched_tok_s=\([0-9.]*\).*/\1/p')
  [ -x "$llama" ] || continue
  # S_TG: the aggregate decode tokens/s of s sequences after prompts of 16 (the best of 3)
  best=0
  for r in 1 2 3; do
    tg=$(LD_LIBRARY_PATH=$(dirname "$llama") "$llama" -m "$model" -c $((s * (16 + steps) + 64)) \
         -b 256 -ub 256 -npp 16 -ntg "$steps" -npl "$s" -t "$threads" 2>/dev/null |
         awk -F'|' '/^\| +16 \|/ {gsub(/ /, "", $9); print $9}')
    best=$(python3 -c "print(max($best, ${tg:-0}))")
  done
  python3 -c "o, l = $ours, $best; print(f'llama.cpp {l:.2f} tok/s at {$s} sequences; moevm batched {o:.2f}: {o / l:.2f}x'); print(f'RESULT bench=cpu_batch_vs_llamacpp sequences={$s} threads=$threads moevm_tok_s={o:.2f} llamacpp_tok_s={l:.2f} ratio={o / l:.3f}')"
done
