#!/usr/bin/env bash
# The CPU engine benchmark of docs/perf/cpu.md in one call: builds, makes the two benchmark
# models once (OLMoE-1B-7B's shape cut to a few layers: 1.45 GiB at Q8_0, 1.7 GiB at F16),
# then runs the kernel benchmarks (an expert's batch by tokens per expert among them) and
# the engine benchmark (decode and prefill tokens/s next to the bandwidth bound measured in
# the same run) on each.
# usage: bash bench/cpu/run.sh [threads]   (default: the cores near the GPU, or all)
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${1:-}
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target moevm_cli bench_cpu_kernels bench_cpu_expert_tokens \
    bench_cpu_engine >/dev/null
mkdir -p build/bench-models
mk() { # name type layers
  local f=build/bench-models/$1.gguf
  [ -f "$f" ] || ./build/moevm mkmodel --preset olmoe-1b-7b --type "$2" --layers "$3" -o "$f" >&2
  echo "$f"
}
q8=$(mk olmoe-3l-q8_0 q8_0 3)
f16=$(mk olmoe-2l-f16 f16 2)
q4=$(mk olmoe-4l-q4_0 q4_0 4)
echo "== $(date -u +%Y-%m-%d) $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== kernels (one thread)"
./build/bench_cpu_kernels
echo "== an expert's batch by tokens per expert (one thread; prefill's experts get a few each)"
for f in q4_K q4_K+tiles q8_0; do ./build/bench_cpu_expert_tokens 3 "$f"; done
for m in "$q8" "$f16" "$q4"; do
  echo "== engine: $m"
  ./build/bench_cpu_engine "$m" "${threads:-0}" 64 128
done
