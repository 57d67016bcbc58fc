#!/usr/bin/env bash
# Builds the GGUF reader's libFuzzer target with ASan and UBSan, writes a seed corpus with
# gguf_seeds, and fuzzes for <seconds>. Exit 0 and "1 passed, 0 failed" when nothing
# crashed; exit 1 and "0 passed, 1 failed" on a crash, leak, sanitizer report or build
# failure (the input that crashed is kept under <outdir>/artifacts/); exit 77 (CTest's
# skip code) when clang or libFuzzer is missing. The corpus grows in <outdir>/corpus
# across runs. CC overrides the compiler (default clang).
#
#   tests/fuzz/run_fuzz.sh <seconds> <outdir>
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 <seconds> <outdir>" >&2
    exit 2
fi
secs=$1
out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
cc=${CC:-clang}

skip() {
    echo "run_fuzz: $1; skipping"
    echo "0 passed, 0 failed"
    exit 77
}
fail() {
    echo "run_fuzz: $1"
    echo "0 passed, 1 failed"
    exit 1
}

mkdir -p "$out/corpus" "$out/seeds" "$out/artifacts" || fail "cannot create $out"
command -v "$cc" >/dev/null 2>&1 || skip "$cc not found"
# A trivial target tells a missing libFuzzer runtime apart from an error in our code.
cat >"$out/probe.c" <<'EOF'
int LLVMFuzzerTestOneInput(const unsigned char *data, unsigned long size);
int LLVMFuzzerTestOneInput(const unsigned char *data, unsigned long size)
{
    (void)data;
    (void)size;
    return 0;
}
EOF
"$cc" -fsanitize=fuzzer,address,undefined "$out/probe.c" -o "$out/probe" 2>"$out/probe.log" ||
    skip "$cc cannot link -fsanitize=fuzzer,address,undefined (see $out/probe.log)"

flags=(-std=c11 -g -O1 -Wall -Wextra -Werror -D_GNU_SOURCE= -I"$root/include" -I"$root"
       -fno-sanitize-recover=all)
reader=("$root/engine/gguf.c" "$root/engine/gguf_get.c" "$root/engine/ggml_types.c" "$root/vmm/error.c" "$root/vmm/options.c")
"$cc" "${flags[@]}" -fsanitize=fuzzer,address,undefined "$root/tests/fuzz/fuzz_gguf.c" \
    "${reader[@]}" -lm -lpthread -o "$out/fuzz_gguf" || fail "building fuzz_gguf failed"
"$cc" "${flags[@]}" -fsanitize=address,undefined "$root/tests/fuzz/gguf_seeds.c" \
    "$root/engine/gguf_write.c" "${reader[@]}" -lm -lpthread -o "$out/gguf_seeds" ||
    fail "building gguf_seeds failed"
"$out/gguf_seeds" "$out/seeds" || fail "gguf_seeds failed"

# New inputs go to the first directory (corpus); the seeds are read only.
"$out/fuzz_gguf" -max_total_time="$secs" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/" "$out/corpus" "$out/seeds" 2>&1 | tee "$out/fuzz.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || fail "fuzz_gguf exited with $rc; crashing input in $out/artifacts/"
echo "1 passed, 0 failed"
