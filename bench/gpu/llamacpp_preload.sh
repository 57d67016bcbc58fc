#!/usr/bin/env bash
# llama.cpp's CUDA build, unmodified, under the interposer (docs/interpose.md), in one call
# from the repository root of a GPU machine:
#
#   MODELS="qwen3-30b-a3b:q8_0" BUDGETS="50" bash bench/gpu/llamacpp_preload.sh
#
# For each model (mkmodel preset:type, made here) and budget (% of the model file's bytes,
# MOEVM_GPU_BUDGET; the rest of the model is oversubscribed host memory):
#   - llama-completion -ngl 99, greedy, GEN_TOKENS (32) tokens: without the interposer (the
#     reference), then under it with llama.cpp's CUDA graphs on (its default: fused expert
#     tensors named whole) and off (GGML_CUDA_DISABLE_GRAPHS=1: routed experts read from the
#     ids, MOEVM_PRELOAD_ROUTING); the generated text must equal the reference's;
#   - llama-bench -ngl 99 -p 0 -n 128 under the interposer in both graph modes, and
#     llama-bench -ngl 99 --n-cpu-moe N without it, N the layers whose experts stay on the
#     CPU so that the GPU holds about the budget's share (N = layers * (100 - budget) / 100).
# The GPU memory of each run is the most nvidia-smi saw its process use. One line per run,
#   RESULT preload model=qwen3-30b-a3b type=q8_0 budget=50 engine=moevm-preload graphs=off
#          vram_mib=20480 tg128=35.2 same_tokens=yes routing_reads=6144 routing_ms=120.5
#          declared=144 routing_whole=0 experts_per_read=8.00 hit_rate=0.912 misses=512
#                                                            (printed on one line)
# (engine moevm-preload, or llama.cpp with n_cpu_moe=N), the MOEVM_REPORTs and the log in
# $OUT (or $WORK). REPS (3), GEN_TOKENS (32), THREADS (the machine's cores), WORK
# (/tmp/moevm-offload, shared with llamacpp.sh: the models are made once).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source bench/gpu/deps.sh || exit 1
source bench/gpu/llamacpp_lib.sh || exit 1
log=$(moevm_out_log llamacpp_preload.txt)
models=${MODELS:-olmoe-1b-7b:q8_0}
budgets=${BUDGETS:-50}
reps=${REPS:-3} gen=${GEN_TOKENS:-32} threads=${THREADS:-$(nproc)}
work=${WORK:-/tmp/moevm-offload}
out=${OUT:-$work}
mkdir -p "$work" "$out"
prompt="The experts of a mixture-of-experts model"

die() { echo "llamacpp_preload.sh: $*" >&2; exit 1; }

# The report's digest: "routing_reads=.. routing_ms=.. ... hit_rate=..". experts_per_read
# is what the ids reads named on average: the model's top-k when they read ggml's rows right
# (the reads that found none, routing_whole, left out).
digest() {
    python3 - "$1" <<'PYEOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print("report=missing"); sys.exit(0)
g = r["routing"]
found = g["reads"] - g["whole"]
print("routing_reads=%d routing_ms=%.1f declared=%d routing_whole=%d experts_per_read=%.2f "
      "hit_rate=%.3f misses=%d" %
      (g["reads"], g["ns"] / 1e6, g["declared"], g["whole"],
       g["experts"] / found if found else 0.0, r["launches"]["hit_rate"], r["moves"]["misses"]))
PYEOF
}

{
    moevm_gpu_build moevm_cli moevm_preload >"$work/build.txt" 2>&1 ||
        { tail -n 20 "$work/build.txt"; die "the moevm build failed"; }
    so=$PWD/build-gpu/libmoevm_preload.so
    lb=$(llama_tool llama-bench) && lc=$(llama_tool llama-completion) ||
        die "no llama-bench/llama-completion (carry .llamacpp/cuda.tar.xz or .llamacpp/src)"
    nvidia-smi -L
    for spec in $models; do
        IFS=: read -r name type <<<"$spec"
        model=$(llama_model "$spec") || die "mkmodel $spec"
        bytes=$(stat -c %s "$model")
        layers=$(model_layers "$name") || die "cannot read the layer count of $name"
        echo "== $spec: $(( bytes >> 20 )) MiB, $layers layers"
        complete=("$lc" -m "$model" -ngl 99 -p "$prompt" -n "$gen" --temp 0 --top-k 1 --seed 1
                  -no-cnv --no-display-prompt -t "$threads")
        "${complete[@]}" >"$work/ref.txt" 2>"$work/ref.err" ||
            { tail -n 5 "$work/ref.err"; die "the reference run failed"; }
        echo "reference: $(head -c 200 "$work/ref.txt")"
        for b in $budgets; do
            managed=(MOEVM_GPU_BUDGET=$(( bytes * b / 100 ))
                     MOEVM_OVERSUBSCRIBE=$(( bytes + (2 << 30) )) MOEVM_LOG=info)
            for graphs in on off; do
                genv=()
                [[ $graphs == off ]] && genv=(GGML_CUDA_DISABLE_GRAPHS=1)
                report=$out/report-$name-$type-$b-graphs-$graphs.json
                env "${managed[@]}" "${genv[@]}" MOEVM_REPORT="$report" LD_PRELOAD="$so" \
                    "${complete[@]}" >"$work/pre.txt" 2>"$work/pre.err"
                rc=$?
                same=no
                [[ $rc == 0 ]] && cmp -s "$work/ref.txt" "$work/pre.txt" && same=yes
                grep -h "preload:" "$work/pre.err" | tail -n 3
                echo "graphs $graphs: exit $rc, same tokens: $same"
                res=$(with_vram env "${managed[@]}" "${genv[@]}" MOEVM_REPORT="$report.bench" \
                      LD_PRELOAD="$so" "$lb" -m "$model" -ngl 99 -p 0 -n 128 -r "$reps" \
                      -t "$threads" -o md)
                echo "$res"
                echo "RESULT preload model=$name type=$type budget=$b engine=moevm-preload" \
                     "graphs=$graphs vram_mib=$(vram_of <<<"$res")" \
                     "$(llama_speeds <<<"$res")same_tokens=$same $(digest "$report.bench")"
            done
            ncmoe=$(( (layers * (100 - b) + 50) / 100 ))
            res=$(with_vram "$lb" -m "$model" -ngl 99 --n-cpu-moe "$ncmoe" -p 0 -n 128 \
                  -r "$reps" -t "$threads" -o md)
            echo "$res"
            vram=$(vram_of <<<"$res")
            echo "RESULT preload model=$name type=$type budget=$b engine=llama.cpp" \
                 "vram_mib=$vram $(llama_speeds <<<"$res")n_cpu_moe=$ncmoe"
        done
    done
} 2>&1 | tee -a "$log"
