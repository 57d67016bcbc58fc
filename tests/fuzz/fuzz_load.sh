#!/usr/bin/env bash
# libFuzzer over the whole loader (tests/fuzz/fuzz_load.c: bytes -> model in an expert space
# -> tokenizer), longer than `make test`'s replay of its corpus can afford:
#
#   tests/fuzz/fuzz_load.sh <seconds> [builddir]
#
# Builds the target with clang, ASan, UBSan and libFuzzer's coverage over the whole tree in
# <builddir> (default build-fuzz; a few minutes the first time), writes the seed corpus
# (tests/fuzz/load_corpus.c) and fuzzes. New inputs collect in <builddir>/fuzz-load/corpus;
# a crash, leak or sanitizer report leaves its input in <builddir>/fuzz-load/artifacts/ and
# exits non-zero. Replay one with: <builddir>/tests/fuzz_load <file>.
set -eu
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 <seconds> [builddir]" >&2
    exit 2
fi
secs=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$root/build-fuzz}
command -v clang >/dev/null || { echo "fuzz_load.sh: clang not found" >&2; exit 1; }
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DMOEVM_SANITIZE=address,undefined,fuzzer-no-link >/dev/null
cmake --build "$build" -j"$(nproc)" --target fuzz_load load_corpus
out=$build/fuzz-load
mkdir -p "$out/corpus" "$out/artifacts"
# hwloc's PCI plugin leaks at exit from a module it has unloaded (tests/CMakeLists.txt).
export HWLOC_COMPONENTS=-pci
"$build/tests/load_corpus" "$out/seeds" 0 >/dev/null
"$build/tests/fuzz_load" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$out/artifacts/" \
    "$out/corpus" "$out/seeds"
