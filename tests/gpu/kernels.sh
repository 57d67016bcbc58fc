#!/usr/bin/env bash
# One call, from the repository root on a machine with an NVIDIA GPU:
#   bash tests/gpu/kernels.sh
# Builds test_gpu and the kernels' benchmarks in build-gpu/ and runs test_gpu
# against the real driver: the engine's device kernels (kernels/cuda), JIT-compiled from
# their PTX by the driver, launched through engine/compute/gpu.c and checked against the CPU
# kernels in every weight type; then bench_gpu_attention times the split attention on real
# shapes up to 131072 positions (KV GB/s against the GPU's bandwidth), and bench_gpu_experts
# the decode step's expert and matrix kernels on OLMoE, Qwen3-30B-A3B and Mixtral shapes in
# Q8_0 and Q4_K_M's types (GB/s of weights read; `RESULT gpu_kernel` lines on stderr), and
# bench_gpu_prompt_experts a pp512 layer's Q8_0 experts by the integer kernels and the int8
# tensor cores' (`RESULT gpu_prompt_kernel`).
# Results into docs/perf/engine.md. CI checks the same code paths with the kernels emulated;
# only this shows the PTX right on a GPU. With $OUT set, the output is also written to
# $OUT/gpu_kernels.txt.
set -euo pipefail

cd "$(dirname "$0")/../.."

source bench/gpu/deps.sh || exit 1
log=$(moevm_out_log gpu_kernels.txt)
{
    moevm_gpu_build test_gpu bench_gpu_attention bench_gpu_experts bench_gpu_prompt_experts
    nvidia-smi -L
    driver=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
    if [[ -z "$driver" ]]; then
        echo "kernels.sh: no libcuda.so.1 in the loader's cache" >&2
        exit 1
    fi
    echo "== test_gpu $driver"
    build-gpu/tests/test_gpu "$driver"
    echo "== bench_gpu_attention $driver"
    build-gpu/tests/bench_gpu_attention "$driver"
    echo "== bench_gpu_experts $driver"
    build-gpu/tests/bench_gpu_experts "$driver"
    echo "== bench_gpu_prompt_experts $driver"
    build-gpu/tests/bench_gpu_prompt_experts "$driver"
} 2>&1 | tee -a "$log"
