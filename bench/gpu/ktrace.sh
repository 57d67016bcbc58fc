#!/usr/bin/env bash
# Each kernel's device time, graphs included, in moevm's and llama.cpp's decode and prompt
# batch on the same GGUF, in one call from the repository root of a GPU machine (carry
# .gpudeps and .llamacpp/cuda.tar.xz):
#
#   MODELS="olmoe-1b-7b:q8_0" bash bench/gpu/ktrace.sh
#
# The lent machines have no Nsight Systems, and MOEVM_GPU_PROFILE (profile.sh) times every
# operation between events, so it runs decode launch by launch and cannot see into a
# graph. bench/gpu/ktrace.c, preloaded, records every kernel through CUPTI. For each model
# (mkmodel preset:type[:layers], every expert resident): moevm bench and llama-bench -ngl 99,
# -p 0 -n GEN and -p PROMPT -n 0, one repetition each, and the tracer's table (share of
# kernel time, total, calls, average µs, name; the first line says how busy the device was
# from its first kernel to its last). GEN (64), PROMPT (512), KTRACE_ROWS (20), ENGINES
# ("moevm llama.cpp"), WORK (/tmp/moevm-offload, shared with llamacpp.sh). BUDGET (100):
# moevm's --gpu-budget in percent (below 100 moevm alone: llama.cpp's offload is
# llamacpp.sh's), and KTRACE_ENV, VAR=value words for moevm's environment, e.g. where a
# token routed on the device at a budget spends its device time:
#
#   MODELS=qwen3-30b-a3b:q8_0:12 BUDGET=25 KTRACE_ENV=MOEVM_BUDGET_ROUTING=read-through \
#       bash bench/gpu/ktrace.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/deps.sh || exit 1
work=${WORK:-/tmp/moevm-offload}
mkdir -p "$work"
source bench/gpu/llamacpp_lib.sh
models=${MODELS:-olmoe-1b-7b:q8_0}
gen=${GEN:-64} prompt=${PROMPT:-512} engines=${ENGINES:-moevm llama.cpp} budget=${BUDGET:-100}
read -ra moevm_env <<<"${KTRACE_ENV:-}"
if [[ $budget != 100 && $engines == *llama.cpp* ]]; then
    echo "ktrace.sh: at a budget of $budget% moevm alone (llama.cpp's offload: llamacpp.sh)"
    engines=moevm
fi
export KTRACE_ROWS=${KTRACE_ROWS:-20}

die() { echo "ktrace.sh: $*" >&2; exit 1; }

moevm_gpu_build moevm_cli moevm_ktrace >"$work/build.txt" 2>&1 ||
    { tail -n 20 "$work/build.txt"; die "the build failed"; }
tracer=$(find build-gpu -name libmoevm_ktrace.so | head -n 1)
[[ -n $tracer ]] || die "no libmoevm_ktrace.so (CUDA's CUPTI not found by CMake?)"
cupti=$(ldd "$tracer" | awk '/libcupti/ { print $3 }')
[[ -n $cupti && $cupti != "not" ]] ||
    die "the tracer finds no libcupti: $(ldd "$tracer" | grep cupti)"
lb=
[[ $engines == *llama.cpp* ]] && { lb=$(llama_tool llama-bench) || die "no llama-bench"; }
for spec in $models; do
    model=$(llama_model "$spec") || die "mkmodel $spec"
    for run in "tg -p 0 -n $gen" "pp -p $prompt -n 0"; do
        set -- $run
        test=$1; shift
        for engine in $engines; do
            echo "== $spec $test, $engine: $* -r 1, budget $budget% ${moevm_env[*]}"
            if [[ $engine == moevm ]]; then
                cmd=(env MOEVM_BACKEND=cuda "${moevm_env[@]}" build-gpu/moevm bench -m "$model"
                     "$@" -r 1 -t "$(nproc)" --gpu-budget "$budget%")
            else
                cmd=("$lb" -m "$model" "$@" -r 1 -ngl 99 -t "$(nproc)")
            fi
            LD_PRELOAD=$tracer "${cmd[@]}" >"$work/ktrace.out" 2>"$work/ktrace.err" ||
                { tail -n 5 "$work/ktrace.err"; continue; }
            grep -E '(pp|tg)[0-9]+ *\|' "$work/ktrace.out" | tail -n 1
            grep '^ktrace:' "$work/ktrace.err"
        done
    done
done
