#!/usr/bin/env bash
# The interposer under PyTorch on a GPU, in one call from the repository root:
#   bash bench/gpu/interpose.sh [BUDGET_MIB]
# Builds libmoevm_preload.so (build-gpu/), then runs tests/gpu/interpose_torch.py:
#   1. unlimited       the MoE model on the GPU, no interposer (the reference)
#   2. moevm           the same under LD_PRELOAD with MOEVM_GPU_BUDGET below the model's size:
#                      outputs must equal the reference
#   3. offload         the usual alternative under the same GPU cap: Accelerate's
#                      dispatch_model (or the same by hand when accelerate is missing)
#   4. launches        a launch-heavy loop that fits, without and with the interposer
# Results (JSON lines, the moevm report) go to $OUT when set; docs/perf/interpose.md holds
# the numbers.
set -euo pipefail
cd "$(dirname "$0")/../.."
budget=${1:-512}
out=${OUT:-/tmp/moevm-interpose}
mkdir -p "$out"

cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DMOEVM_TESTS=OFF >/dev/null
cmake --build build-gpu -j16 --target moevm_preload >/dev/null
so=$PWD/build-gpu/libmoevm_preload.so
py=tests/gpu/interpose_torch.py
nvidia-smi -L | tee "$out/gpu.txt"

python3 $py model --out "$out/unlimited.npz" | tee "$out/unlimited.json"
MOEVM_GPU_BUDGET=${budget}M MOEVM_OVERSUBSCRIBE=8G MOEVM_LOG=info \
    MOEVM_REPORT="$out/report.json" LD_PRELOAD=$so \
    python3 $py model --out "$out/moevm.npz" | tee "$out/moevm.json"
python3 $py compare "$out/unlimited.npz" "$out/moevm.npz" | tee "$out/compare.json"
python3 $py offload --budget-mib "$budget" --out "$out/offload.npz" | tee "$out/offload.json"
python3 $py compare "$out/unlimited.npz" "$out/offload.npz" | tee "$out/compare_offload.json" ||
    echo "(the offload baseline's outputs differ from the unlimited run's)"
python3 $py launches --out "$out/launches_native.json"
LD_PRELOAD=$so MOEVM_GPU_BUDGET=4G python3 $py launches --out "$out/launches_moevm.json"
python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
n, m = (json.load(open(f"{d}/launches_{k}.json")) for k in ("native", "moevm"))
print(json.dumps({"launch_overhead": m["seconds"] / n["seconds"] - 1,
                  "us_per_launch_native": n["us_per_launch"],
                  "us_per_launch_moevm": m["us_per_launch"]}))
PY
