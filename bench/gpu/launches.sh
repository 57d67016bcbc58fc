#!/usr/bin/env bash
# The interposer's cost on a launch-heavy workload that fits on the GPU, in one call from the
# repository root on a machine with an NVIDIA GPU:
#   bash bench/gpu/launches.sh [ROUNDS (default 10)]
# Runs tests/gpu/interpose_torch.py's `launches` mode (20,000 tiny in-place adds, each
# process timing its best of several passes) without and with libmoevm_preload.so,
# alternated ROUNDS times: a run-to-run spread far above the 2% target makes a few rounds
# say little, so the medians and the minima of each side are both reported. With $OUT set,
# the output is also written to $OUT/launches.txt. Results go into docs/perf/interpose.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-10}
source bench/gpu/deps.sh || exit 1
log=$(moevm_out_log launches.txt)
{
    moevm_gpu_build moevm_preload >/dev/null || { echo "launches.sh: the build failed" >&2; exit 1; }
    so=$PWD/build-gpu/libmoevm_preload.so
    py=tests/gpu/interpose_torch.py
    for i in $(seq "$rounds"); do
        python3 $py launches | sed "s/^/native $i /"
        MOEVM_GPU_BUDGET=4G LD_PRELOAD=$so python3 $py launches | sed "s/^/moevm $i /"
    done | tee "${TMPDIR:-/tmp}/moevm-launches.txt"
    python3 - "${TMPDIR:-/tmp}/moevm-launches.txt" <<'PY'
import json, statistics, sys
us = {"native": [], "moevm": []}
for line in open(sys.argv[1]):
    side, _, js = line.split(" ", 2)
    us[side].append(json.loads(js)["us_per_launch"])
n, m = us["native"], us["moevm"]
if not n or not m:
    sys.exit("launches.sh: a side produced no timing")
print(json.dumps({"rounds": len(n),
                  "native_us": {"min": min(n), "median": statistics.median(n)},
                  "moevm_us": {"min": min(m), "median": statistics.median(m)},
                  "overhead_min": min(m) / min(n) - 1,
                  "overhead_median": statistics.median(m) / statistics.median(n) - 1}))
PY
} 2>&1 | tee -a "$log"
