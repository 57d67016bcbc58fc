#!/usr/bin/env bash
# moevm's offloaded decode against llama.cpp's expert offload (-ngl 99 --n-cpu-moe N) on the
# same GPU and the same GGUF files, in one call from the repository root of a GPU machine:
#
#   MODELS="olmoe-1b-7b:q8_0 qwen3-30b-a3b:q8_0 qwen3-30b-a3b:q4_k_m" BUDGETS="10 25 50 100" \
#       bash bench/gpu/llamacpp.sh
#
# For each model (mkmodel preset:type[:layers], made here; random weights, real shapes, cut
# to its first layers blocks when given, e.g. qwen3-30b-a3b:q8_0:12) and budget
# (% of the experts' bytes; 0: every expert on the CPU, moevm's --n-cpu-moe 99 against
# llama.cpp's --n-cpu-moe at the layers):
#   - moevm bench -p 512 -n 128 on the GPU with that budget, with the model's own routing and
#     with a replayed realistic trace (moevm trace gen, published statistics: --routing);
#   - llama-bench -ngl 99 --n-cpu-moe N, N the layers whose experts stay on the CPU, chosen
#     so that the GPU holds the same share of the experts (N = layers * (100 - budget) / 100);
#   - once per model, moevm on the CPU alone (MOEVM_BACKEND=host) and llama.cpp on the CPU.
# The GPU memory of each run is the most nvidia-smi saw its process use (sampled every 0.2 s).
# One line per run that a script can read, and the whole log in $OUT/llamacpp.txt:
#   RESULT offload model=olmoe-1b-7b type=q8_0 budget=25 engine=moevm routing=replay
#          vram_mib=9120 pp512=812.4 tg128=95.1              (printed on one line)
# and, for moevm at a budget, where a host-routed decode token's host time went
# (MOEVM_LOG=info's line, forward_cuda_laps.c), in us a token:
#   RESULT decode_host model=.. budget=25 routing=replay tokens=.. queue_us=.. observe_us=..
#          device_us=.. policies_us=.. ask_us=.. copies_us=.. cpu_us=.. cpu_plan_us=.. cpu_scale=.. syncs=..
#          evict_us=.. remap_us=.. mib=.. accesses=.. hits=.. in_place=.. variant=..
# and the same of its prompt batches routed by the host, in us a batch (what of pp512 the
# device waits for the host; at 100% none in a packed space, where they route on the
# device):
#   RESULT prefill_host model=.. budget=100 routing=own batches=.. tokens=.. queue_us=.. ...
# and of those routed on the device (engine/forward/forward_cuda_prompt.c), in us a batch:
#   RESULT prefill_device model=.. budget=100 routing=own batches=.. tokens=.. queue_us=..
#          replay_us=.. wait_us=.. variant=..
# and, where the experts were packed (100%), the first request's upload of them all
# (vmm/upload.c's MOEVM_LOG=info line):
#   RESULT upload model=.. budget=100 routing=own experts=.. mib=.. ms=.. gbps=.. variant=..
# engine: moevm, moevm-cpu (budget "cpu") or llama.cpp; routing: own or replay. At budget
# 100 the lines carry bw_frac=: tg x the bytes a token reads (bench/gpu/active_bytes.py) /
# the GPU's read rate of its memory (vmm_costs section 3), the share of the bandwidth bound.
#
# llama.cpp: .llamacpp/cuda.tar.xz when carried (bench/llamacpp/build.sh cuda && pack, made
# where nvcc is, no GPU needed), else built here from a carried .llamacpp/src (a few minutes
# on 16 cores). REPS (default 3), PROMPT (512), GEN (128), THREADS (the machine's cores)
# change the runs; CPU_BASELINE=0 leaves out the CPU-alone runs; WORK (default
# /tmp/moevm-offload) keeps the models between calls. LLAMACPP=0 runs moevm alone (no
# llama.cpp carried: a run that reads moevm's own variants, not the ratios).
# ROUTINGS ("own replay") picks the routings; VARIANTS ("default") runs moevm once per
# variant, each a comma-separated list of MOEVM_* settings or "default", e.g.
#   VARIANTS="default MOEVM_HOME_MAP=on MOEVM_ASSIGN=greedy,MOEVM_COST=cost.json"
#   VARIANTS="default MOEVM_GEMM_ROWS=0" (prefill on the tensor cores, and on the kernels)
#   VARIANTS="default MOEVM_ASSIGN=greedy,MOEVM_COST=calibrated"
#   VARIANTS="default BIN=/tmp/moevm-base" (BIN=: another build of moevm, e.g. the commit
#                                           before a change, side by side in one call:
#                                           bench/gpu/prebuilt.sh base REV makes it)
# and the RESULT line ends in variant=...; VARIANTS_100 (default: VARIANTS) are those run at
# budget 100, where settings of the move path or the CPU/GPU split change nothing.
# MATCH_VRAM=1: at each budget strictly between 0 and 100, moevm once more (MATCH_VARIANTS,
# each routing) with its experts' budget cut by the GPU memory it took beyond llama.cpp's at
# that budget (its context and scratch are larger), so that both hold the same GPU memory:
# the line's variant=vram_matched, its vram_mib near llama.cpp's. MATCH_VARIANTS ("default")
# are the variants run so, each line's variant=vram_matched,<variant> but the default's. The budgets' share of the
# experts is the same for both; the memory is not, and "at the same GPU memory" is what a
# user with a given card compares.
# MOEVM_COST=calibrated stands for a cost file that
# `moevm calibrate` measures on this machine with the model, once a model (the greedy CPU/GPU
# split plans with the cost model: the h100 preset's CPU side is a 2-socket host's, and on a
# 16-vCPU VM it halved decode, docs/perf/offload.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/deps.sh || exit 1
source bench/gpu/llamacpp_lib.sh || exit 1
log=$(moevm_out_log llamacpp.txt)
models=${MODELS:-olmoe-1b-7b:q8_0}
budgets=${BUDGETS:-10 25 50 100}
routings=${ROUTINGS:-own replay}
variants=${VARIANTS:-default}
variants_100=${VARIANTS_100:-$variants} # at budget 100, where what a budget changes is moot
match_variants=${MATCH_VARIANTS:-default}
cpu_baseline=${CPU_BASELINE:-1}
reps=${REPS:-3} pp=${PROMPT:-512} tg=${GEN:-128} threads=${THREADS:-$(nproc)}
work=${WORK:-/tmp/moevm-offload}
mkdir -p "$work"

die() { echo "llamacpp.sh: $*" >&2; exit 1; }

# moevm bench's table rows -> "pp512=.. tg128=.." for the routing asked, then each test's
# share of time waiting for copies ("pp512_wait=0.123 tg128_wait=..").
moevm_speeds() {
    awk -F'|' -v r="$1" '$8 ~ " "r" " { gsub(/ /, "", $9); split($10, v, " "); printf "%s=%s ", $9, v[1];
                                          w = $13; gsub(/[ %]/, "", w);
                                          if (w != "-") waits = waits sprintf("%s_wait=%.3f ", $9, w / 100) }
                         END { printf "%s", waits }'
}

result() { echo "RESULT offload model=$1 type=$2 budget=$3 engine=$4 routing=$5 vram_mib=$6 $7"; }

# moevm bench of the model under way ($model, its $trace) with the settings in env, by BIN,
# with ROUTING's routing and the budget's arguments; its output, then "VRAM_MIB n".
moevm_bench() {
    local bin=$1 routing=$2
    shift 2
    local extra=()
    [[ $routing == replay ]] && extra=(--routing "$trace")
    with_vram env "${env[@]}" "$bin" bench -m "$model" -p "$pp" -n "$tg" -r "$reps" \
        -t "$threads" "$@" "${extra[@]}"
}

{
    moevm_gpu_build moevm_cli vmm_costs >"$work/build.txt" 2>&1 ||
        { tail -n 20 "$work/build.txt"; die "the moevm build failed"; }
    lb=
    if [[ ${LLAMACPP:-1} != 0 ]]; then
        lb=$(llama_tool llama-bench) ||
            die "no llama-bench (carry .llamacpp/cuda.tar.xz or .llamacpp/src, or LLAMACPP=0)"
    fi
    nvidia-smi -L
    hbm=$(hbm_read_gbs)
    echo "== the GPU reads its memory at ${hbm:-(not measured)} GB/s (vmm_costs section 3)"
    echo "== llama.cpp ${lb:+$($lb --version 2>&1 | tail -n 1)}${lb:-left out (LLAMACPP=0)};" \
         "$threads threads; -p $pp -n $tg -r $reps"
    for spec in $models; do
        IFS=: read -r name type cut <<<"$spec"
        model=$(llama_model "$spec") || die "mkmodel $spec"
        trace=$work/$name${cut:+-${cut}L}.jsonl
        build-gpu/moevm trace gen --shape "$name" ${cut:+--layers "$cut"} --tokens 4096 \
            -o "$trace" >"$work/trace.txt" || die "trace gen $name"
        layers=$(model_layers "$name" "$cut") || die "cannot read the layer count of $name"
        name=$name${cut:+-${cut}L} # the RESULT lines' model: qwen3-30b-a3b-12L, cut to 12
        active=$(${MOEVM_PYTHON:-python3} bench/gpu/active_bytes.py "$model") || active=
        echo "== a decode token reads ${active:-?} bytes of weights"
        echo "== $spec: $layers layers, $(du -h "$model" | cut -f1)"

        if [[ $cpu_baseline == 1 ]]; then
            out=$(MOEVM_BACKEND=host with_vram build-gpu/moevm bench -m "$model" -p "$pp" \
                  -n "$tg" -r "$reps" -t "$threads")
            echo "$out"
            result "$name" "$type" cpu moevm-cpu own "$(echo "$out" | vram_of)" \
                "$(echo "$out" | moevm_speeds own)"
            if [[ -n $lb ]]; then
                out=$(with_vram "$lb" -m "$model" -ngl 0 -p "$pp" -n "$tg" -r "$reps" \
                      -t "$threads" -o md)
                echo "$out"
                result "$name" "$type" cpu llama.cpp own \
                    "$(echo "$out" | vram_of)" "$(echo "$out" | llama_speeds)"
            fi
        fi

        cost=$work/cost-$name.json
        if [[ $variants == *MOEVM_COST=calibrated* ]]; then
            # every expert fits, so that a decode token (attn_time) is measured too
            MOEVM_BACKEND=cuda build-gpu/moevm calibrate -m "$model" -o "$cost" -t "$threads" \
                --gpu-budget 100% --time 0.1 >"$work/calibrate.txt" 2>&1 ||
                { tail -n 5 "$work/calibrate.txt"; die "calibrate $spec"; }
            grep -v '^$' "$work/calibrate.txt" | tail -n 20
        fi

        for b in $budgets; do
            own_vram='' own_budget='' # moevm's default run, for MATCH_VRAM
            for routing in $routings; do
                for variant in $([[ $b == 100 ]] && echo "$variants_100" || echo "$variants"); do
                    # info: decode's host time a token, where it routes on the device
                    env=(MOEVM_BACKEND=cuda MOEVM_LOG=info)
                    [[ $variant != default ]] && env+=(${variant//,/ })
                    env=("${env[@]/#MOEVM_COST=calibrated/MOEVM_COST=$cost}")
                    bin=build-gpu/moevm # BIN=PATH in a variant: another build of moevm
                    for i in "${!env[@]}"; do
                        [[ ${env[i]} == BIN=* ]] && bin=${env[i]#BIN=} && unset 'env[i]'
                    done
                    echo "-- ${env[*]} $bin"
                    share=(--gpu-budget "$b%") # 0: every expert on the CPU, the rest on the GPU
                    [[ $b == 0 ]] && share=(--n-cpu-moe 99)
                    out=$(moevm_bench "$bin" "$routing" "${share[@]}")
                    echo "$out"
                    speeds=$(echo "$out" | moevm_speeds "$routing")
                    [[ $b == 100 ]] && speeds+=$(bw_frac "$speeds" "$active" "$hbm")
                    vram=$(echo "$out" | vram_of)
                    result "$name" "$type" "$b" moevm "$routing" "$vram" "${speeds}variant=$variant"
                    if [[ $variant == default && -z $own_vram ]]; then
                        own_vram=$vram own_budget=$(echo "$out" | moevm_budget_mib)
                    fi
                    laps=$(decode_laps "$work/run.err")
                    [[ -n $laps ]] && echo "RESULT decode_host model=$name type=$type" \
                        "budget=$b routing=$routing $laps variant=$variant"
                    laps=$(prefill_laps "$work/run.err")
                    [[ -n $laps ]] && echo "RESULT prefill_host model=$name type=$type" \
                        "budget=$b routing=$routing $laps variant=$variant"
                    laps=$(prefill_routed "$work/run.err")
                    [[ -n $laps ]] && echo "RESULT prefill_device model=$name type=$type" \
                        "budget=$b routing=$routing $laps variant=$variant"
                    laps=$(decode_routed "$work/run.err")
                    [[ -n $laps ]] && echo "RESULT decode_device model=$name type=$type" \
                        "budget=$b routing=$routing $laps variant=$variant"
                    laps=$(packed_upload "$work/run.err")
                    [[ -n $laps ]] && echo "RESULT upload model=$name type=$type" \
                        "budget=$b routing=$routing $laps variant=$variant"
                done
            done
            [[ -n $lb ]] || continue
            ncmoe=$(( (layers * (100 - b) + 50) / 100 ))
            out=$(with_vram "$lb" -m "$model" -ngl 99 --n-cpu-moe "$ncmoe" -p "$pp" -n "$tg" \
                  -r "$reps" -t "$threads" -o md)
            echo "$out"
            speeds=$(echo "$out" | llama_speeds)
            [[ $b == 100 ]] && speeds+=$(bw_frac "$speeds" "$active" "$hbm")
            llama_vram=$(echo "$out" | vram_of)
            result "$name" "$type" "$b" llama.cpp own "$llama_vram" "${speeds}n_cpu_moe=$ncmoe"
            [[ ${MATCH_VRAM:-0} == 1 && $b -gt 0 && $b -lt 100 ]] || continue
            if ! matched=$(matched_budget_mib "$own_budget" "$own_vram" "$llama_vram"); then
                echo "-- MATCH_VRAM: no budget left at $b% (moevm ${own_vram:-?} MiB with" \
                     "${own_budget:-?} MiB of experts, llama.cpp ${llama_vram:-?} MiB)"
                continue
            fi
            echo "-- MATCH_VRAM: ${matched} MiB of experts (${own_budget} less" \
                 "$((own_vram - llama_vram)) MiB that moevm took beyond llama.cpp's)"
            for variant in $match_variants; do
                env=(MOEVM_BACKEND=cuda MOEVM_LOG=info)
                label=vram_matched
                [[ $variant != default ]] && env+=(${variant//,/ }) && label+=",$variant"
                for routing in $routings; do
                    out=$(moevm_bench build-gpu/moevm "$routing" --gpu-budget "${matched}M")
                    echo "$out"
                    result "$name" "$type" "$b" moevm "$routing" \
                        "$(echo "$out" | vram_of)" \
                        "$(echo "$out" | moevm_speeds "$routing")variant=$label"
                done
            done
        done
    done
} 2>&1 | tee -a "$log"
