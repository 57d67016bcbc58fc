#!/usr/bin/env bash
# A short GPU lease's measurements in one device call, most needed first, from the
# repository root of a GPU machine (carry .gpudeps, .gpubin and .llamacpp/cuda.tar.xz:
# 64 MiB at most with the tree; `prebuilt.sh pack`, every target, is 3.4 MB):
#
#   bash bench/gpu/lease.sh                    LEASE_S=540 LEASE_STEPS="build kernels ..."
#
# Every step runs under its own time limit, cut to what is left of LEASE_S seconds (default
# 540: a 600 s call with room for the output to come back), so a slow step costs the steps
# after it their time and never the whole call's output. A step that is cut says so, and the
# steps after it still run if time is left. Steps, in this order (LEASE_STEPS picks):
#   build      build-gpu/: moevm, test_gpu, bench_gpu_experts, bench_gpu_prompt_experts,
#              bench_gpu_attention, vmm_costs
#              (~105 s there; a few seconds when .gpubin is carried, made from these sources
#              by bench/gpu/prebuilt.sh pack here, which this step unpacks: keep it in
#              LEASE_STEPS)
#   jit        the device kernels' first load (the driver compiling their PTX: the modules
#              of no weight type and Q8_0's with f32's, ~2.3 MB) and a second one from the
#              driver's JIT cache, emptied first: a tiny Q8_0 model's run, its load times;
#              `RESULT jit cold_s=.. warm_s=..` (docs/perf/engine.md, session 96)
#   kernels    test_gpu (the device kernels against the CPU's, every type),
#              bench_gpu_experts (GB/s of a decode step's expert kernels) and
#              bench_gpu_prompt_experts (a pp512 layer's experts: integer kernels, mmq;
#              its dense products: integer kernels, mmq, cuBLAS)
#   vmm        vmm_costs sections 3, 4, 5 and 9 (a kernel reading registered and HOST_NUMA
#              host memory in place; driver calls behind a running kernel: a remap,
#              pageable uploads; make-resident against the copy, in pages and in a slot
#              space; copy lanes), then section 5 again under each of VMM_VARIANTS
#              (VAR=value[,VAR=value] words, e.g. MOEVM_MOVE_SPIN=0)
#   text       tests/gpu/forward.sh steps 2, 2b and 2c: the same greedy text on the CPU and the
#              GPU, with decode routed on the device (graph, launches, the graph with
#              MOEVM_PDL=on) and by the host, and
#              with a long prompt's products on real cuBLAS (batched experts), on the kernels
#              and with its experts on the int8 tensor cores (MOEVM_MMQ=on)
#   full       bench/gpu/llamacpp.sh at budget 100 (OLMoE-1B-7B q8_0, the model's own
#              routing): moevm by default (a prompt's Q8_0 experts on the int8 tensor
#              cores, kernels/cuda/mmq.cu), with MOEVM_MMQ=off (on cuBLAS and the kernels)
#              and with MOEVM_MMQ=off,MOEVM_GEMM_ROWS=8 (more of them on cuBLAS), against
#              llama.cpp -ngl 99
#   ktrace     bench/gpu/ktrace.sh: each kernel's device time (CUPTI, graphs included) in
#              moevm's decode and prompt batch of OLMoE-1B-7B q8_0 (KTRACE_ENGINES="moevm
#              llama.cpp": llama.cpp's too; MODELS, BUDGET and KTRACE_ENV as ktrace.sh takes
#              them, e.g. a token read through at 25%)
#   offload    llamacpp.sh on Qwen3-30B-A3B's shape in q8_0, cut to its first 12 blocks (the
#              whole model's mkmodel and loads would take the lease), at budgets 25 and 100,
#              with the model's own routing and a replayed trace: by default, and at 25% in
#              a slot space (MOEVM_SLOTS=on: a move is its copy, no remap), alone and with
#              decode read through (MOEVM_BUDGET_ROUTING=read-through), and at 100% with a
#              decode graph's kernels by programmatic edges (MOEVM_PDL=on), against -ngl 99
#              --n-cpu-moe N; moevm and llama.cpp on the CPU alone (OFFLOAD_CPU=0: not).
#              Three variants and the CPU runs fill its 300 s; the others measured before
#              (docs/perf/offload.md: MOEVM_LOAD_WAIT=device-view and device-late,
#              MOEVM_ASSIGN_ARGS=zerocopy=1, MOEVM_PREDICT=residual, MOEVM_ASSIGN=greedy with
#              MOEVM_COST=calibrated, read-through with MOEVM_DEVICE_CPU=on) go in
#              OFFLOAD_VARIANTS
#   full_q4k   the full step's runs on OLMoE-1B-7B in Q4_K_M (the K-quant kernels), by
#              default (a prompt's experts on the int8 tensor cores since session 106
#              measured them) and with MOEVM_MMQ=off
#   profile    bench/gpu/profile.sh at budgets 100 and 25 (where the decode's time goes)
#   profile_pp the same for one prompt batch of 512 tokens at 100% (prefill's time)
#   forward    tests/ref/check_forward.py on the GPU (every architecture and type)
#   attention  bench_gpu_attention (split attention up to 131072 positions)
#   lab        bench/gpu/kernel_lab.cu: decode's Q8_0 kernels against variants of their
#              row loop (nvcc, about a minute to compile)
# FULL_VARIANTS, OFFLOAD_MODELS, OFFLOAD_BUDGETS, OFFLOAD_ROUTINGS (default "own replay"),
# OFFLOAD_VARIANTS, OFFLOAD_VARIANTS_100 (at budget 100) and OFFLOAD_CPU (0: no CPU-alone
# runs) change those two steps; LLAMACPP=0, MATCH_VRAM=1 and MATCH_VARIANTS pass to
# llamacpp.sh. The whole log goes to $OUT/lease.txt; the scripts run under it write no $OUT files of their own (a device
# call brings back at most 8).
# `grep -E '^(RESULT|== |step )'` reads it.
set -uo pipefail
cd "$(dirname "$0")/../.."

lease=${LEASE_S:-540}
all="build jit kernels vmm text full ktrace offload full_q4k profile profile_pp forward attention lab"
steps=" ${LEASE_STEPS:-$all} "
start=$SECONDS
log=/dev/null
if [[ -n ${OUT:-} ]]; then mkdir -p "$OUT" && log=$OUT/lease.txt && : >"$log"; fi
export -n OUT
work=/tmp/moevm-lease
mkdir -p "$work"

# step NAME LIMIT_S COMMAND...: runs COMMAND (a program, or a function of this script:
# they are exported) under min(LIMIT_S, what is left), in its own process group (timeout's),
# so that a cut step leaves nothing of its own running.
step() {
    local name=$1 limit=$2; shift 2
    [[ $steps == *" $name "* ]] || return 0
    local left=$((lease - (SECONDS - start)))
    if ((left < 10)); then
        echo "step $name: skipped, ${left}s left of the lease"
        return 0
    fi
    ((left < limit)) && limit=$left
    echo "step $name: begins at $((SECONDS - start))s, limit ${limit}s"
    local t0=$SECONDS rc=0
    timeout -k 5 "$limit" bash -c "$(printf '%q ' "$@")" || rc=$?
    case $rc in
    0) echo "step $name: done in $((SECONDS - t0))s" ;;
    124 | 137) echo "step $name: CUT at its limit of ${limit}s" ;;
    *) echo "step $name: FAILED (exit $rc) after $((SECONDS - t0))s" ;;
    esac
}

# The libcuda.so.1 that the loader would pick (the test programs take its path).
driver() { ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}'; }

kernels() {
    local d; d=$(driver)
    [[ -n $d ]] || { echo "lease.sh: no libcuda.so.1 in the loader's cache"; return 1; }
    echo "== test_gpu $d"
    build-gpu/tests/test_gpu "$d" || echo "test_gpu FAILED"
    echo "== bench_gpu_experts $d"
    build-gpu/tests/bench_gpu_experts "$d" 20
    echo "== bench_gpu_prompt_experts $d"
    build-gpu/tests/bench_gpu_prompt_experts "$d" 10
}

attention() { build-gpu/tests/bench_gpu_attention "$(driver)"; }

# The kernels' load time with the driver's JIT cache empty, then full (the steps after
# this one start from the full cache, as a user's second run): the modules of no weight
# type at open and Q8_0's at its first launch (engine/compute/gpu.c), summed over the run.
jit() {
    local m=$work/jit-tiny.gguf cold warm
    build-gpu/moevm mkmodel --preset tiny --arch qwen3moe --type q8_0 -o "$m" >/dev/null ||
        return 1
    rm -rf "${CUDA_CACHE_PATH:-$HOME/.nv/ComputeCache}"
    load_s() {
        MOEVM_LOG=info MOEVM_BACKEND=cuda build-gpu/moevm run -m "$m" -p x -n 1 2>&1 >/dev/null |
            sed -n 's/.*device kernels .* loaded in \([0-9.]*\) s.*/\1/p
                    s/.*the driver took \([0-9.]*\) s to compile.*/\1/p' |
            awk '{ s += $1 } END { if (NR) printf "%.2f\n", s }'
    }
    cold=$(load_s) && warm=$(load_s)
    echo "RESULT jit cold_s=${cold:-?} warm_s=${warm:-?}"
}

lab() {
    local nvcc; nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    "$nvcc" -O3 -arch=sm_90 -I. bench/gpu/kernel_lab.cu -o "$work/kernel_lab" && "$work/kernel_lab"
}

vmm() {
    local bin v; bin=$(find build-gpu -type f -name vmm_costs -perm -u+x | head -n 1)
    [[ -n $bin ]] || { echo "lease.sh: no vmm_costs under build-gpu/"; return 1; }
    "$bin" --only 3,4,5,9 --reps 20
    for v in ${VMM_VARIANTS:-}; do # section 5 again under each, e.g. MOEVM_MOVE_SPIN=0
        echo "== vmm_costs section 5 with ${v//,/ }"
        env ${v//,/ } "$bin" --only 5 --reps 20
    done
}

forward() {
    MOEVM_BACKEND=cuda python3 tests/ref/check_forward.py --moevm build-gpu/moevm \
        --workdir "$work/ref"
}

export -f driver jit kernels attention vmm forward lab
export work

{
    source bench/gpu/deps.sh || exit 1
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    echo "moevm $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null ||
        echo ' + changes'), $(nproc) CPUs"
    # the targets of the steps asked for, so that a carried build of fewer still serves
    targets=moevm_cli
    [[ $steps == *" kernels "* ]] && targets+=" test_gpu bench_gpu_experts bench_gpu_prompt_experts"
    [[ $steps == *" attention "* ]] && targets+=" bench_gpu_attention"
    [[ $steps =~ \ (vmm|full|offload|full_q4k)\  ]] && targets+=" vmm_costs"
    [[ $steps == *" ktrace "* ]] && targets+=" moevm_ktrace"
    step build 240 bash -c 'source bench/gpu/deps.sh && moevm_gpu_build '"$targets"' \
        >'"$work"'/build.txt 2>&1 || { tail -n 30 '"$work"'/build.txt; exit 1; }
        grep "^deps.sh:" '"$work"'/build.txt || true'
    [[ -x build-gpu/moevm ]] || { echo "lease.sh: no build-gpu/moevm, nothing to run"; exit 1; }
    if [[ -f .gpubin/moevm-base.xz ]]; then # prebuilt.sh base: for variants BIN=/tmp/moevm-base
        xz -dc .gpubin/moevm-base.xz >/tmp/moevm-base && chmod +x /tmp/moevm-base &&
            echo "lease.sh: /tmp/moevm-base unpacked (variants BIN=/tmp/moevm-base)"
    fi
    step jit 90 jit
    step kernels 90 kernels
    step vmm 60 vmm
    step text 80 env FORWARD_STEPS="2 2b 2c" bash tests/gpu/forward.sh
    step full 150 env MODELS=olmoe-1b-7b:q8_0 BUDGETS=100 ROUTINGS=own REPS=2 CPU_BASELINE=0 \
        VARIANTS="${FULL_VARIANTS:-default MOEVM_MMQ=off MOEVM_MMQ=off,MOEVM_GEMM_ROWS=8}" \
            bash bench/gpu/llamacpp.sh
    step ktrace 90 env ENGINES="${KTRACE_ENGINES:-moevm}" bash bench/gpu/ktrace.sh
    step offload 300 env MODELS="${OFFLOAD_MODELS:-qwen3-30b-a3b:q8_0:12}" \
        BUDGETS="${OFFLOAD_BUDGETS:-25 100}" ROUTINGS="${OFFLOAD_ROUTINGS:-own replay}" REPS=2 \
        VARIANTS="${OFFLOAD_VARIANTS:-default MOEVM_SLOTS=on \
MOEVM_SLOTS=on,MOEVM_BUDGET_ROUTING=read-through}" \
        VARIANTS_100="${OFFLOAD_VARIANTS_100:-default MOEVM_PDL=on}" \
        CPU_BASELINE="${OFFLOAD_CPU:-1}" bash bench/gpu/llamacpp.sh
    step full_q4k 150 env MODELS=olmoe-1b-7b:q4_k_m BUDGETS=100 ROUTINGS=own REPS=2 \
        CPU_BASELINE=0 VARIANTS="default MOEVM_MMQ=off" bash bench/gpu/llamacpp.sh
    step profile 40 env MODELS=olmoe-1b-7b:q8_0 BUDGETS="100 25" bash bench/gpu/profile.sh
    step profile_pp 30 env MODELS=olmoe-1b-7b:q8_0 BUDGETS=100 PROMPT=512 \
        bash bench/gpu/profile.sh
    step forward 240 forward
    step attention 60 attention
    step lab 120 lab
    echo "lease.sh: $((SECONDS - start))s of ${lease}s"
} 2>&1 | tee -a "$log"
