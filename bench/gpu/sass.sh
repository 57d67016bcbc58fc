#!/usr/bin/env bash
# A device kernel file's machine code for sm_90 (the H100/H200), without a GPU, and the order
# of each function's memory operations (bench/gpu/sass.py): whether a round of loads goes out
# together, or each waits behind a store the compiler could not tell apart from it.
#
#   bash bench/gpu/sass.sh kernels/cuda/ops.cu [FUNCTION...]     (the summary)
#   SASS_FULL=1 bash bench/gpu/sass.sh kernels/cuda/ops.cu       (the whole listing)
#
# The CUDA toolkit installed here has nvcc and ptxas but no disassembler; cuobjdump comes from
# Triton's wheel (one download of ~280 MB; it and the nvdisasm it runs kept in .sasstools/,
# git-ignored).
# typed.cu builds every weight type's kernels by default (its modules are one type each).
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:?"usage: bash bench/gpu/sass.sh FILE.cu [FUNCTION...]"}
shift
tools=.sasstools
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ ! -x $tools/cuobjdump || ! -x $tools/nvdisasm ]]; then
    echo "sass.sh: fetching cuobjdump from Triton's wheel (once)" >&2
    python3 -m pip download -q --no-deps --only-binary=:all: triton -d "$tmp" >&2
    mkdir -p "$tools"
    unzip -q -o -j "$tmp"/triton-*.whl 'triton/backends/nvidia/bin/cuobjdump' \
        'triton/backends/nvidia/bin/nvdisasm' -d "$tools"
fi
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$nvcc" -O3 -arch=sm_90 -I. -cubin "$src" -o "$tmp/k.cubin"
NVDISASM_PATH=$tools/nvdisasm "$tools/cuobjdump" -sass "$tmp/k.cubin" >"$tmp/k.sass"
if [[ -n ${SASS_FULL:-} ]]; then
    cat "$tmp/k.sass"
else
    python3 bench/gpu/sass.py "$tmp/k.sass" "$@"
fi
