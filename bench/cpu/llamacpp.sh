#!/usr/bin/env bash
# moevm's CPU engine against llama.cpp's CPU build, side by side on the same files and
# threads, in one call (issue "Kernels at the hardware's limits", its CPU part):
#   - OLMoE-1B-7B's shape cut to a few layers, at Q8_0 (moevm mkmodel) and at Q4_K_M, or any
#     other type llama-quantize makes (q5_k_m, q6_k, iq4_xs, q4_0, mxfp4_moe, iq1_s .. iq3_s,
#     ...), made by llama.cpp's own llama-quantize from an F16 file (the files most people
#     download, with its mix of types: an IQ1_M file keeps attn_v in Q4_K and the output in
#     Q5_K); the lattice-grid types (iq1_s .. iq3_s) with an importance matrix, which it
#     requires for some of them, made once by llama-imatrix from the F16 file over this
#     repository's documentation (8 chunks of 256 tokens);
#   - prompt processing of 64 and 512 tokens and generation of 128, each engine at its
#     defaults but for the threads (both take a prompt 512 tokens a pass);
#   - rounds interleaved (llama.cpp, then moevm, REPS times), each test's best round kept,
#     since this VM's speed drifts between minutes.
#   - the memory's read bandwidth on the same threads before every round (bench_cpu_engine's
#     read, a few seconds), since a VM's can move by half between minutes: each tg128 row
#     also says what fraction of the decode bound (the best read over the bytes a token
#     reads) each engine reached, so a ratio near the bound reads as that, not as slow code.
# Prints a table and, per model and test, one line docs/perf/cpu.md records:
#   RESULT bench=cpu_vs_llamacpp model=olmoe-3l type=q4_k_m test=pp512 threads=2
#          moevm_tok_s=.. llamacpp_tok_s=.. ratio=.. read_gbs=MIN-MAX
#          file=llama-quantize (or mkmodel, llama-quantize+imatrix: who made the file)
#          [moevm_bound=.. llamacpp_bound=.. (tg128: fractions of the bound)]
#          simd=avx512vnni llama=cpu commit=f396cab  (on one line)
# Layers: 3 keeps the files small (OLMoE's F16 1.2 GiB), but leaves the output product, the
# same at any depth, a third of what a decode token reads (two thirds for Qwen3's shape), so
# decode compares mostly one large matrix; OLMoE's own 16 (F16 12.9 GiB, made once, about
# 10 minutes here) weighs the experts as the model does (docs/perf/cpu.md, session 114).
# usage: bash bench/cpu/llamacpp.sh [threads (2)] [rounds (3)] [layers (3)] [types ("q8_0 q4_k_m")]
#                                   [preset (olmoe-1b-7b; any of moevm mkmodel --list's)]
# (gpt-oss's files, for one: bash bench/cpu/llamacpp.sh 2 2 3 mxfp4_moe gpt-oss-20b)
# Needs llama.cpp's CPU build (bash bench/llamacpp/build.sh cpu, git-ignored in .llamacpp/).
# LLAMACPP_BUILD=cpu-avx2 runs llama.cpp's AVX2 build (bash bench/llamacpp/build.sh cpu-avx2)
# against moevm held to its AVX2 level (MOEVM_CPU_SIMD=avx2): an AVX-512 machine standing in
# for an AVX2 one (the files are made with the native build's tools either way).
# LLAMACPP_BUILD=cpu-avxvnni does the same with AVX-VNNI added on both sides (llama.cpp's
# GGML_AVX_VNNI, moevm's avxvnni level): an Intel client core from Alder Lake on. A
# MOEVM_CPU_SIMD set by the caller is kept (MOEVM_CPU_SIMD=avx2 LLAMACPP_BUILD=cpu-avxvnni:
# what moevm's AVX2 level did there). The RESULT lines say which: simd= (moevm's level),
# llama= (the build), commit= (moevm's).
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${1:-2}
rounds=${2:-3}
layers=${3:-3}
types=${4:-"q8_0 q4_k_m"}
preset=${5:-olmoe-1b-7b}
name=${preset/olmoe-1b-7b/olmoe}-${layers}l # the files' and the RESULT lines' model
bin=.llamacpp/build-cpu/bin # llama-quantize, llama-imatrix: the files
kind=${LLAMACPP_BUILD:-cpu}
bench_bin=.llamacpp/build-$kind/bin # llama-bench: the yardstick
case $kind in
cpu) ;;
cpu-avx2) export MOEVM_CPU_SIMD=${MOEVM_CPU_SIMD:-avx2} ;;
cpu-avxvnni) export MOEVM_CPU_SIMD=${MOEVM_CPU_SIMD:-avxvnni} ;;
*) echo "bench/cpu/llamacpp.sh: LLAMACPP_BUILD=$kind: cpu, cpu-avx2 or cpu-avxvnni" >&2; exit 2 ;;
esac
die() { echo "bench/cpu/llamacpp.sh: $*" >&2; exit 1; }

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target moevm_cli bench_cpu_engine >/dev/null
[ -x "$bin/llama-bench" ] && [ -x "$bin/llama-quantize" ] && [ -x "$bin/llama-imatrix" ] ||
    bash bench/llamacpp/build.sh cpu
[ -x "$bin/llama-imatrix" ] || die "no $bin/llama-imatrix after the llama.cpp build"
[ -x "$bench_bin/llama-bench" ] || bash bench/llamacpp/build.sh "$kind"
[ -x "$bench_bin/llama-bench" ] || die "no $bench_bin/llama-bench after the llama.cpp build"
simd=$(./build/moevm info 2>/dev/null | sed -n 's/^cpu: *\([a-z0-9]*\) kernels.*/\1/p')
[ -n "$simd" ] || die "moevm info names no SIMD level (MOEVM_CPU_SIMD=${MOEVM_CPU_SIMD:-})"
export LD_LIBRARY_PATH=$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit+=+dirty

mkdir -p build/bench-models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" build/bench-models/$name-f16.tmp.gguf' EXIT
f16=build/bench-models/$name-f16.tmp.gguf
f16() { # the F16 file llama-quantize starts from, made once a run
    [ -f "$f16" ] || ./build/moevm mkmodel --preset "$preset" --type f16 --layers "$layers" \
        -o "$f16" >&2
}
model() { # type -> path, made once
    local f=build/bench-models/$name-$1.gguf q=${1^^} imat=()
    case $1 in
    iq1_* | iq2_* | iq3_*) # named apart from the plain files moevm mkmodel made before
        f=build/bench-models/$name-$1-imatrix.gguf
        imat=(--imatrix "build/bench-models/$name-imatrix.gguf") ;;
    esac
    local by=llama-quantize
    [ ${#imat[@]} -eq 0 ] || by+=+imatrix
    [ "$1" != q8_0 ] || by=mkmodel
    echo "$by" >"$tmp/file-$1.txt"
    if [ -f "$f" ]; then
        :
    elif [ "$1" = q8_0 ]; then
        ./build/moevm mkmodel --preset "$preset" --type q8_0 --layers "$layers" -o "$f" >&2
    else # what users download: llama-quantize's output from an F16 file
        f16
        if [ ${#imat[@]} -gt 0 ] && [ ! -f "${imat[1]}" ]; then
            echo "-- llama-imatrix on $f16 (once)" >&2
            cat README.md docs/*.md >"$tmp/text.txt"
            "$bin/llama-imatrix" -m "$f16" -f "$tmp/text.txt" -o "${imat[1]}" -c 256 \
                --chunks 8 -t "$threads" >"$tmp/imatrix.log" 2>&1 ||
                { tail -5 "$tmp/imatrix.log" >&2; die "llama-imatrix on $f16 failed"; }
        fi
        echo "-- llama-quantize $q (once)" >&2
        "$bin/llama-quantize" "${imat[@]}" "$f16" "$f" "$q" "$threads" >/dev/null 2>&1 ||
            die "llama-quantize $f16 -> $q failed (a type llama-quantize --help lists?)"
    fi
    echo "$f"
}

echo "== $(date -u +%Y-%m-%d) $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== $threads threads, $rounds rounds, $preset's shape with $layers layers;" \
    "moevm $commit at its $simd level, llama.cpp's $kind build"
for t in $types; do
    m=$(model "$t")
    for r in $(seq "$rounds"); do
        echo "-- $t round $r/$rounds" >&2
        # the read bandwidth and the bytes a decode token reads (no tokens evaluated)
        ./build/bench_cpu_engine "$m" "$threads" 0 0 2>/dev/null |
            awk '/^read bw/ {bw = $3} /^active\/token/ {print bw, $2}' >>"$tmp/bw-$t.txt" ||
            die "bench_cpu_engine on $m failed"
        LD_LIBRARY_PATH=$bench_bin:$LD_LIBRARY_PATH \
            "$bench_bin/llama-bench" -m "$m" -p 64,512 -n 128 -r 1 -t "$threads" -o jsonl \
            2>/dev/null >>"$tmp/llama-$t.jsonl" || die "llama-bench on $m failed"
        for p in 64 512; do # one -p per run: moevm bench takes one prompt length
            ./build/moevm bench -m "$m" -p "$p" -n 0 -r 1 -t "$threads" -o jsonl \
                2>/dev/null >>"$tmp/moevm-$t.jsonl" || die "moevm bench on $m failed"
        done
        ./build/moevm bench -m "$m" -p 0 -n 128 -r 1 -t "$threads" -o jsonl 2>/dev/null \
            >>"$tmp/moevm-$t.jsonl" || die "moevm bench on $m failed"
    done
done
python3 - "$tmp" "$threads" "$name" "simd=$simd llama=$kind commit=$commit" $types <<'EOF'
import sys
sys.path.insert(0, "bench/cpu")
from jsonl_best import best
tmp, threads, name, build, types = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
print(f"| type | test | llama.cpp tok/s | moevm tok/s | moevm / llama.cpp |")
print(f"|---|---|---|---|---|")
results = []
for t in types:
    ll, mv = best(f"{tmp}/llama-{t}.jsonl"), best(f"{tmp}/moevm-{t}.jsonl")
    rounds = [line.split() for line in open(f"{tmp}/bw-{t}.txt") if line.strip()]
    bw = [float(r[0]) for r in rounds]  # GB/s
    active_mb = float(rounds[0][1])
    bound = max(bw) * 1e3 / active_mb  # tok/s at the best read of the run
    for test in ("pp64", "pp512", "tg128"):
        l, m = ll[test], mv[test]
        note = f" ({m / bound:.0%} / {l / bound:.0%} of the bound)" if test == "tg128" else ""
        print(f"| {t} | {test} | {l:.1f} | {m:.1f} | {m / l:.2f}x{note} |")
        line = (f"RESULT bench=cpu_vs_llamacpp model={name} type={t} test={test} "
                f"threads={threads} moevm_tok_s={m:.2f} llamacpp_tok_s={l:.2f} "
                f"ratio={m / l:.3f} read_gbs={min(bw):.1f}-{max(bw):.1f} "
                f"file={open(f'{tmp}/file-{t}.txt').read().strip()}")
        if test == "tg128":
            line += f" moevm_bound={m / bound:.3f} llamacpp_bound={l / bound:.3f}"
        results.append(f"{line} {build}")
    print(f"{t}: memory read {min(bw):.1f}-{max(bw):.1f} GB/s over the rounds, "
          f"{active_mb:.1f} MB a decode token: bound {bound:.1f} tok/s at the best read")
print("\n".join(results))
EOF
