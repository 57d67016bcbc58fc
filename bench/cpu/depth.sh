#!/usr/bin/env bash
# Prefill and decode after a long context, moevm's CPU engine against llama.cpp's CPU build
# on the same file and threads, with each KV cache type both take (f16, and q8_0: moevm's
# --kv-type q8_0, llama.cpp's -ctk q8_0 -ctv q8_0, which needs its flash attention, so
# llama-bench runs with -fa 1 for every type):
#   - pp512 @ dD and tg32 @ dD (llama-bench's -d: D tokens in the cache first, untimed);
#   - rounds interleaved (each engine and type in turn, ROUNDS times), each row's best
#     round kept, since this VM's speed drifts between minutes.
# The file is one bench/cpu/llamacpp.sh made (build/bench-models/), or any GGUF.
# Prints a table and one line per engine's type and test that docs/perf/cpu.md records:
#   RESULT bench=cpu_depth model=olmoe-16l type=q8_0 test=tg32@d4096 threads=2 kv=q8_0
#          moevm_tok_s=.. llamacpp_tok_s=.. ratio=..  (on one line; llama.cpp's at that kv)
# usage: bash bench/cpu/depth.sh MODEL.gguf [depth (4096)] [rounds (2)] [threads (2)]
#                                [kv types ("f16 q8_0")]
# Needs llama.cpp's CPU build (bash bench/llamacpp/build.sh cpu, git-ignored in .llamacpp/).
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: bash bench/cpu/depth.sh MODEL.gguf [depth] [rounds] [threads] [kv types]}
depth=${2:-4096}
rounds=${3:-2}
threads=${4:-2}
kvs=${5:-"f16 q8_0"}
me=bench/cpu/depth.sh tool=llama-bench
# shellcheck source=bench/cpu/against_llamacpp.sh
. bench/cpu/against_llamacpp.sh
echo "== $model: pp512 and tg32 at depth $depth, $threads threads, $rounds rounds, KV $kvs"
for r in $(seq "$rounds"); do
    for kv in $kvs; do
        echo "-- round $r/$rounds, KV $kv" >&2
        ./build/moevm bench -m "$model" -p 512 -n 32 -d "$depth" -r 1 -t "$threads" \
            --kv-type "$kv" -o jsonl 2>/dev/null >>"$tmp/moevm-$kv.jsonl" ||
            die "moevm bench --kv-type $kv on $model failed"
        "$bin/llama-bench" -m "$model" -p 512 -n 32 -d "$depth" -r 1 -t "$threads" -fa 1 \
            -ctk "$kv" -ctv "$kv" -o jsonl 2>/dev/null >>"$tmp/llama-$kv.jsonl" ||
            die "llama-bench -ctk $kv on $model failed"
    done
done
python3 - "$tmp" "$threads" "$model" "$depth" $kvs <<'EOF'
import os, re, sys
sys.path.insert(0, "bench/cpu")
from jsonl_best import best
tmp, threads, model, depth, kvs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
# the RESULT lines' model and type from the file's name, as bench/cpu/llamacpp.sh names them
stem = os.path.basename(model).removesuffix(".gguf")
m = re.match(r"(.*?)-((?:q|iq|f|bf|mxfp)[0-9][0-9a-z_]*)(-imatrix)?$", stem)
name, wtype = (m.group(1), m.group(2)) if m else (stem, "unknown")
print("| KV | test | llama.cpp tok/s | moevm tok/s | moevm / llama.cpp |")
print("|---|---|---:|---:|---:|")
results = []
for kv in kvs:
    ll, mv = best(f"{tmp}/llama-{kv}.jsonl"), best(f"{tmp}/moevm-{kv}.jsonl")
    for test in ("pp512", "tg32"):
        l, v = ll[test], mv[test]
        print(f"| {kv} | {test} @ d{depth} | {l:.2f} | {v:.2f} | {v / l:.2f}x |")
        results.append(f"RESULT bench=cpu_depth model={name} type={wtype} test={test}@d{depth} "
                       f"threads={threads} kv={kv} moevm_tok_s={v:.2f} llamacpp_tok_s={l:.2f} "
                       f"ratio={v / l:.3f}")
print("\n".join(results))
EOF
