#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, our yardstick, into the git-ignored .llamacpp/ folder.
#
#   bash bench/llamacpp/build.sh fetch        # here (needs PyPI): the source only
#   bash bench/llamacpp/build.sh cpu          # fetch if needed, build for this CPU
#   bash bench/llamacpp/build.sh cpu-avx2     # the same for an AVX2 CPU (no AVX-512, no VNNI)
#   bash bench/llamacpp/build.sh cpu-avxvnni  # the same with AVX-VNNI (Intel's client cores)
#   bash bench/llamacpp/build.sh cuda [ARCH]  # fetch if needed, build with CUDA (ARCH 90)
#   bash bench/llamacpp/build.sh pack         # .llamacpp/cuda.tar.xz from a cuda build
#
# The source comes from the llama-cpp-python source distribution on PyPI, which vendors
# llama.cpp; only the folders a build needs are kept (.llamacpp/src, about 40 MB). It is never
# committed. A GPU machine has no package registry: fetch here and carry .llamacpp/src, or
# build here with `cuda` (nvcc is enough, no GPU needed) and carry the packed build
# (`pack`; bench/gpu/llamacpp.sh unpacks it), which spares the device's minutes.
#
# `cpu` builds for this machine's CPU (GGML_NATIVE). `cuda` builds the CPU code for every
# x86-64 level (GGML_CPU_ALL_VARIANTS, loaded at run time by GGML_BACKEND_DL), so a build
# made here computes the CPU's share of an --n-cpu-moe run on the device machine with its
# best SIMD level, as a native build there would. LLAMACPP_CPU_LEVELS="x64 haswell zen4"
# builds only the levels named (on 2 cores the fourteen levels take as long as the CUDA code).
# `cpu-avx2` (.llamacpp/build-cpu-avx2) limits llama.cpp to what an AVX2 machine has (AVX2,
# FMA, F16C, BMI2: a Zen 3's, or Haswell's), so that an AVX-512 machine can stand in for one
# against moevm held to the same level (MOEVM_CPU_SIMD=avx2; bench/cpu/llamacpp.sh's
# LLAMACPP_BUILD=cpu-avx2 does both); its caches and memory stay the machine's own.
# `cpu-avxvnni` adds AVX-VNNI (vpdpbusd on 256-bit vectors) to that set: an Intel client core
# from Alder Lake on, which has no AVX-512 (against MOEVM_CPU_SIMD=avxvnni).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
top=${LLAMACPP_DIR:-$here/.llamacpp}
version=${LLAMACPP_PYPI_VERSION:-0.3.36}
jobs=${JOBS:-$(nproc)}

die() { echo "llamacpp/build.sh: $*" >&2; exit 1; }

fetch() {
    [ -f "$top/src/CMakeLists.txt" ] && return 0
    command -v pip >/dev/null || command -v pip3 >/dev/null || die "pip is needed to fetch the source"
    local tmp; tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    echo "fetching llama-cpp-python==$version (source distribution) from PyPI"
    python3 -m pip download --quiet --no-deps --no-binary :all: -d "$tmp" \
        "llama-cpp-python==$version" || die "pip download of llama-cpp-python==$version failed"
    tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
    local v="$tmp/llama_cpp_python-$version/vendor/llama.cpp"
    [ -f "$v/CMakeLists.txt" ] || die "no vendor/llama.cpp in the source distribution"
    mkdir -p "$top/src"
    # What a build of the library and llama-bench reads; docs, models and tests stay behind.
    (cd "$v" && tar -cf - CMakeLists.txt cmake common ggml include src tools vendor \
        licenses LICENSE) | tar -xf - -C "$top/src"
    echo "llama.cpp source in $top/src ($(du -sh "$top/src" | cut -f1))"
}

configure_build() {
    local kind=$1; shift
    local b="$top/build-$kind"
    cmake -S "$top/src" -B "$b" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DCMAKE_SKIP_BUILD_RPATH=OFF \
        -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON "$@" >"$b.configure.log" 2>&1 ||
        { tail -20 "$b.configure.log" >&2; die "cmake configure ($kind) failed: $b.configure.log"; }
    # llama-bench, llama-batched-bench (several sequences decoding together: what a server's
    # continuous batching is measured against), llama-quantize (the Q4_K_M files users
    # download are its output: bench/cpu/llamacpp.sh makes them), llama-completion (greedy
    # text, which bench/gpu/llamacpp_preload.sh compares with and without the interposer),
    # for the CPU llama-imatrix (llama-quantize makes the IQ1/IQ2 types only with an
    # importance matrix: bench/cpu/llamacpp.sh makes one) and llama-perplexity (`moevm
    # perplexity`'s yardstick: bench/cpu/perplexity.sh), and every backend module the loader
    # may pick.
    local tools="llama-bench llama-batched-bench llama-quantize llama-completion" targets
    [ "$kind" = cpu ] && tools+=" llama-imatrix llama-perplexity"
    targets=$(cmake --build "$b" --target help | sed -n 's/^\.\.\. \(ggml-[a-z0-9_-]*\).*/\1/p' |
        grep -E '^ggml-(cpu|cuda)' | grep -v -- '-feats$' | tr '\n' ' ')
    if [ -n "${LLAMACPP_CPU_LEVELS:-}" ]; then
        local t keep=""
        for t in $targets; do
            case " ${LLAMACPP_CPU_LEVELS} " in *" ${t#ggml-cpu-} "*) keep+="$t " ;; esac
            [[ $t == ggml-cpu-* ]] || keep+="$t "
        done
        targets=$keep
    fi
    echo "building $tools $targets($kind, $jobs jobs; log $b.build.log)"
    cmake --build "$b" -j "$jobs" --target $tools $targets >"$b.build.log" 2>&1 ||
        { tail -30 "$b.build.log" >&2; die "build ($kind) failed: $b.build.log"; }
    [ -x "$b/bin/llama-bench" ] || die "no $b/bin/llama-bench after the build"
    echo "built $b/bin/llama-bench"
}

# A CPU that lists AMX may still not run llama.cpp's AMX kernels: on a 2-core VM of this
# project its native build died of an invalid opcode (tileloadd, tile configuration lost) in
# ggml_backend_amx_mul_mat at the first prompt batch, while a small program using the same
# instructions ran. So the native build is tried on a batch (one layer of OLMoE's shape at
# Q8_0, made by moevm mkmodel), and rebuilt with the same features but AMX if it crashes.
amx_runs() {
    grep -qw amx_tile /proc/cpuinfo || return 0
    local moevm="$here/build/moevm" b="$top/build-cpu/bin" d rc
    if [ ! -x "$moevm" ]; then
        echo "llamacpp/build.sh: the CPU lists AMX; build moevm (build/moevm)" \
             "to check that llama.cpp's AMX kernels run" >&2
        return 0
    fi
    d=$(mktemp -d)
    "$moevm" mkmodel --preset olmoe-1b-7b --type q8_0 --layers 1 -o "$d/m.gguf" >/dev/null 2>&1 ||
        { rm -rf "$d"; die "moevm mkmodel for the AMX check failed"; }
    rc=0
    LD_LIBRARY_PATH="$b" "$b/llama-bench" -m "$d/m.gguf" -p 64 -n 0 -r 1 -t 1 >/dev/null 2>&1 ||
        rc=$?
    rm -rf "$d"
    [ "$rc" -lt 128 ] # killed by a signal: SIGILL or SIGSEGV
}

# GGML_NATIVE's features named one by one, AMX left out.
flags_without_amx() {
    local f out=-DGGML_NATIVE=OFF
    f=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
    has() { [[ $f == *" $1 "* ]]; }
    has avx && out+=" -DGGML_AVX=ON"
    has avx2 && out+=" -DGGML_AVX2=ON"
    has fma && out+=" -DGGML_FMA=ON"
    has f16c && out+=" -DGGML_F16C=ON"
    has bmi2 && out+=" -DGGML_BMI2=ON"
    has avx_vnni && out+=" -DGGML_AVX_VNNI=ON"
    has avx512f && has avx512bw && has avx512dq && has avx512vl && out+=" -DGGML_AVX512=ON"
    has avx512vbmi && out+=" -DGGML_AVX512_VBMI=ON"
    has avx512_vnni && out+=" -DGGML_AVX512_VNNI=ON"
    has avx512_bf16 && out+=" -DGGML_AVX512_BF16=ON"
    echo "$out"
}

case "${1:-}" in
fetch) fetch ;;
cpu)
    fetch
    configure_build cpu -DGGML_NATIVE=ON
    if ! amx_runs; then
        echo "llama.cpp's AMX kernels crash on this machine: rebuilding for its CPU without AMX"
        configure_build cpu $(flags_without_amx)
    fi ;;
cpu-avx2)
    fetch
    configure_build cpu-avx2 -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
        -DGGML_F16C=ON -DGGML_BMI2=ON ;;
cpu-avxvnni)
    fetch
    configure_build cpu-avxvnni -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
        -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=ON ;;
cuda)
    fetch
    command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || die "nvcc not found"
    export PATH=$PATH:/usr/local/cuda/bin
    configure_build cuda -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF -DGGML_CPU_ALL_VARIANTS=ON \
        -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${2:-90}" \
        -DGGML_CUDA_FA_ALL_QUANTS=OFF -DGGML_CUDA_NCCL=OFF
    ;;
pack)
    b="$top/build-cuda/bin"
    [ -x "$b/llama-bench" ] || die "no cuda build in $top/build-cuda (run: $0 cuda)"
    (cd "$b" && strip --strip-unneeded ./*.so* llama-bench llama-completion 2>/dev/null || true)
    tar -C "$top/build-cuda" -cJf "$top/cuda.tar.xz" bin
    echo "$top/cuda.tar.xz ($(du -h "$top/cuda.tar.xz" | cut -f1)): carry .llamacpp/cuda.tar.xz"
    ;;
*) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 2 ;; # the header
esac
