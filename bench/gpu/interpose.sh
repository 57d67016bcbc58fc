#!/usr/bin/env bash
# The interposer under PyTorch on a GPU, in one call from the repository root:
#   bash bench/gpu/interpose.sh [BUDGET_MIB [interpose_torch.py options...]]
# The options (--layers, --experts, --hidden, --tokens, ...) go to every run; with
# --device cpu and a small model the whole script is a dry run on a machine without a GPU.
# On a device machine, carry .gpudeps (bench/gpu/deps.sh fetch) in case its image lacks the
# build's libraries. Builds libmoevm_preload.so (build-gpu/), then runs
# tests/gpu/interpose_torch.py:
#   1. unlimited       the MoE model on the GPU, no interposer (the reference)
#   2. moevm           the same under LD_PRELOAD with MOEVM_GPU_BUDGET below the model's size:
#                      outputs must equal the reference; again with MOEVM_PRELOAD_PREFETCH=on
#   3. offload         the usual alternative under the same GPU cap: Accelerate's
#                      dispatch_model (or the same by hand when accelerate is missing)
#   4. launches        a launch-heavy loop that fits, without and with the interposer,
#                      alternated three times (the best of each counts)
#   5. eager           steps 1 and 2 again with transformers' eager experts (each expert's
#                      GEMM gets a view into the layer's 3-D tensor), then the moevm run
#                      once more with MOEVM_PRELOAD_SLICES=off: what expert slices save
# Every step runs even when one before it failed (a GPU lease is too short to lose the rest),
# each under a time limit, and all of them within $INTERPOSE_SECONDS (default 540; not a
# MOEVM_ name, which moevm would warn of as an unknown option) of the
# start, so that one device call (10 minutes at most) returns the summary. What comes back
# is in $OUT (or /tmp/moevm-interpose): results.jsonl (one JSON line per step, with its exit
# status), report.json, report_prefetch.json, report_eager.json and
# report_eager_whole.json (the moevm runs' MOEVM_REPORTs) and log.txt (everything the steps
# printed). Exits non-zero when a step failed or the outputs differ. docs/perf/interpose.md
# holds the numbers.
set -uo pipefail
deadline=$((SECONDS + ${INTERPOSE_SECONDS:-540}))
cd "$(dirname "$0")/../.."
budget=${1:-512}
shift $(($# > 0))
extra=("$@")
out=${OUT:-/tmp/moevm-interpose}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$out"
results=$out/results.jsonl log=$out/log.txt
: >"$results"
: >"$log"
export PYTHONUNBUFFERED=1

source bench/gpu/deps.sh || exit 1
{
    moevm_gpu_build moevm_preload
} >>"$log" 2>&1 || { tail -n 30 "$log"; echo "interpose.sh: the build failed" >&2; exit 1; }
so=$PWD/build-gpu/libmoevm_preload.so
if ldd "$so" | grep -q 'not found'; then
    ldd "$so"
    echo "interpose.sh: $so has unresolved libraries" >&2
    exit 1
fi
py=tests/gpu/interpose_torch.py
nvidia-smi -L | tee -a "$log"
python3 -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])' \
    2>&1 | tee -a "$log"

failed=0
# step NAME LIMIT_S CMD...: runs CMD under the limit; its last stdout line (a JSON object)
# goes to results.jsonl with "step" and "rc" added; everything it prints goes to log.txt.
# Returns CMD's status (124 when it ran out of time, its own or the script's).
step() {
    local name=$1 limit=$2 left=$((deadline - SECONDS))
    shift 2
    echo "== $name: $*" >>"$log"
    local line rc=124
    ((left < limit)) && limit=$left
    : >"$scratch/$name.out"
    if ((limit > 0)); then
        timeout "$limit" "$@" >"$scratch/$name.out" 2>>"$log"
        rc=$?
    fi
    cat "$scratch/$name.out" >>"$log"
    line=$(tail -n 1 "$scratch/$name.out")
    [[ $line == \{* ]] || line='{}'
    python3 - "$name" "$rc" "$line" >>"$results" <<'PY'
import json, sys
name, rc, line = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(json.dumps({"step": name, "rc": rc, **json.loads(line)}))
PY
    tail -n 1 "$results"
    return "$rc"
}

moevm_env=(env MOEVM_GPU_BUDGET="${budget}M" MOEVM_OVERSUBSCRIBE=4G MOEVM_LOG=info
           LD_PRELOAD="$so")
step unlimited 300 python3 $py model "${extra[@]}" --out "$scratch/unlimited.npz" || failed=1
step moevm 420 "${moevm_env[@]}" MOEVM_REPORT="$out/report.json" \
    python3 $py model "${extra[@]}" --out "$scratch/moevm.npz" || failed=1
step compare 60 python3 $py compare "$scratch/unlimited.npz" "$scratch/moevm.npz" || failed=1
# Prefetch from the launch sequence (interpose/prefetch.c, off by default until measured).
step moevm_prefetch 420 "${moevm_env[@]}" MOEVM_PRELOAD_PREFETCH=on \
    MOEVM_REPORT="$out/report_prefetch.json" \
    python3 $py model "${extra[@]}" --out "$scratch/moevm_prefetch.npz" || failed=1
step compare_prefetch 60 python3 $py compare "$scratch/unlimited.npz" \
    "$scratch/moevm_prefetch.npz" || failed=1
step offload 420 python3 $py offload "${extra[@]}" --budget-mib "$budget" \
    --out "$scratch/offload.npz" || failed=1
# The baseline's outputs are recorded, not required: its fp16 path may differ in the last bits.
step compare_offload 60 python3 $py compare "$scratch/unlimited.npz" "$scratch/offload.npz"
for i in 1 2 3; do
    step "launches_native_$i" 120 python3 $py launches "${extra[@]}" || failed=1
    step "launches_moevm_$i" 120 env MOEVM_GPU_BUDGET=4G LD_PRELOAD="$so" \
        python3 $py launches "${extra[@]}" || failed=1
done
# transformers' eager experts hand each expert's GEMM a view into the layer's 3-D tensor:
# with slices (the default) only the routed experts move; without, whole layers do.
step unlimited_eager 300 python3 $py model "${extra[@]}" --experts-impl eager \
    --out "$scratch/unlimited_eager.npz" || failed=1
step moevm_eager 420 "${moevm_env[@]}" MOEVM_REPORT="$out/report_eager.json" \
    python3 $py model "${extra[@]}" --experts-impl eager --out "$scratch/moevm_eager.npz" ||
    failed=1
step compare_eager 60 python3 $py compare "$scratch/unlimited_eager.npz" \
    "$scratch/moevm_eager.npz" || failed=1
step moevm_eager_whole 420 "${moevm_env[@]}" MOEVM_PRELOAD_SLICES=off \
    MOEVM_REPORT="$out/report_eager_whole.json" python3 $py model "${extra[@]}" \
    --experts-impl eager --out "$scratch/moevm_eager_whole.npz" || failed=1
# The moevm run counts only if the interposer managed the model (it runs a program unmanaged,
# and says so, when it cannot: a bad value, no HOST_NUMA VMM): its report must show managed
# memory beyond the budget and misses. A dry run (--device cpu) makes no CUDA call at all.
dry=0
[[ " ${extra[*]} " == *" --device cpu "* ]] && dry=1
python3 - "$results" "$out" "$((budget << 20))" "$dry" <<'PY' | tee -a "$results"
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
best = lambda k: min((r["seconds"] for r in rows if r["step"].startswith(k) and "seconds" in r),
                     default=None)
n, m = best("launches_native"), best("launches_moevm")
tps = {r["step"]: r.get("tokens_per_s") for r in rows if "tokens_per_s" in r}
summary = {"step": "summary", "tokens_per_s": tps,
           "launch_overhead": m / n - 1 if n and m else None}
def digest(name):
    """The numbers of one moevm run's MOEVM_REPORT, and whether it was managed beyond the
    budget with misses; a string saying why when unreadable."""
    try:
        rep = json.load(open(os.path.join(sys.argv[2], name)))
        return {"hit_rate": rep["launches"]["hit_rate"],
                "bytes_in": rep["moves"]["bytes_in"],
                "misses": rep["moves"]["misses"],
                "bytes_written_back": rep["moves"]["bytes_written_back"],
                "pages_clean": rep["moves"]["pages_clean"],
                "clean_evict": rep["space"]["clean_evict"],
                "objects": rep["objects"],
                "wait_s": rep["wait_ns"] * 1e-9,
                "prefetch": {k: v for k, v in rep["moves"].items() if k.startswith("prefetch")},
                "managed_peak_bytes": rep["managed"]["peak_bytes"],
                "managed": (rep["managed"]["peak_bytes"] > int(sys.argv[3]) and
                            rep["moves"]["misses"] > 0)}
    except (OSError, KeyError, ValueError) as e:
        return "unreadable: %s" % e
for key, name in (("moevm_report", "report.json"), ("moevm_eager_report", "report_eager.json"),
                  ("moevm_eager_whole_report", "report_eager_whole.json"),
                  ("moevm_prefetch_report", "report_prefetch.json")):
    summary[key] = digest(name)
summary["managed"] = isinstance(summary["moevm_report"], dict) and \
    summary["moevm_report"]["managed"]
print(json.dumps(summary))
sys.exit(0 if summary["managed"] or sys.argv[4] == "1" else 1)
PY
rc=$?
if ((rc != 0)); then
    echo "interpose.sh: the moevm run was not managed beyond the budget (see log.txt)" >&2
    failed=1
fi
exit "$failed"
