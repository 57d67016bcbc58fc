#!/usr/bin/env bash
# What the interposer adds to a launch that needs no move, on tests/fakecuda (no GPU
# needed): bench/interpose/launch.c run three times each with and without LD_PRELOAD,
# interleaved, medians compared. Results go to docs/perf/interpose.md by hand.
# usage: bash bench/interpose/run.sh [launches]   (default 200000)
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${1:-200000}
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target bench_preload_launch moevm_preload fakecuda >/dev/null
fake=build/fakecuda
run() { # run native|preload
  local pre=()
  [ "$1" = preload ] && pre=(LD_PRELOAD="$PWD/build/libmoevm_preload.so")
  env LD_LIBRARY_PATH="$fake" MOEVM_CUDA_LIBRARY="$fake/libcuda.so.1" FAKECUDA_MEM=256M \
      MOEVM_GPU_BUDGET=64M "${pre[@]}" ./build/bench_preload_launch "$reps"
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for round in 1 2 3; do
  run native >>"$tmp/native"
  run preload >>"$tmp/preload"
done
echo "== $(date -u +%Y-%m-%d) $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
python3 - "$tmp/native" "$tmp/preload" <<'PY'
import statistics, sys
def load(path):
    d = {}
    for line in open(path):
        k, v = line.split()
        d.setdefault(k, []).append(float(v))
    return {k: statistics.median(v) for k, v in d.items()}
nat, pre = load(sys.argv[1]), load(sys.argv[2])
print(f"{'case':10} {'no preload':>12} {'preload':>12} {'added':>10}   (ns per launch, medians of 3)")
for k in nat:
    print(f"{k:10} {nat[k]:12.1f} {pre[k]:12.1f} {pre[k] - nat[k]:10.1f}")
PY
# The interposer's own part: its symbols' (and its read-write lock's) share of the samples
# of each preloaded case, setup (the kernel's page faults) left out, times the launch time.
command -v perf >/dev/null || { echo "(no perf: the interposer's own share not measured)"; exit 0; }
echo "interposer code per launch (perf, $((reps * 10)) launches per case):"
for c in ptr3 struct native graph64 dtoh dtoh_nat; do
  n=$((reps * 10))
  env LD_LIBRARY_PATH="$fake" MOEVM_CUDA_LIBRARY="$fake/libcuda.so.1" FAKECUDA_MEM=256M \
      MOEVM_GPU_BUDGET=64M LD_PRELOAD="$PWD/build/libmoevm_preload.so" \
      perf record -q -o "$tmp/perf.data" ./build/bench_preload_launch "$n" "$c" >"$tmp/one" 2>/dev/null
  perf report -i "$tmp/perf.data" --no-children --stdio --sort dso,sym 2>/dev/null |
    awk -v c="$c" -v t="$(cut -d' ' -f2 "$tmp/one")" '
      /^ *[0-9.]+%/ { v = $1; sub("%", "", v)
                      if ($0 ~ /kernel.kallsyms/) k += v
                      else if ($0 ~ /libmoevm_preload|pthread_rwlock/) m += v }
      END { printf "  %-8s %7.1f ns (%.1f%% of %.1f ns)\n", c, m / (100 - k) * t,
                   100 * m / (100 - k), t }'
done
