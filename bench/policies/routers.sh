#!/usr/bin/env bash
# The gate-based predictors on routers that do not choose by their logits' order
# (docs/perf/policies.md "Predictors on sigmoid and grouped routers"), in one call from the
# repository root:
#   bash bench/policies/routers.sh [OUTDIR] [MOEVM ...]
# OUTDIR defaults to docs/perf/policies; each MOEVM (default ./build/moevm) runs the same
# generations, so that two builds compare in one run (the routing, and so the token
# stream, is the model's: only the prefetches differ).
# Random-weight models of one shape (8 blocks, 32 experts, top-4, n_embd 256) with the
# routing rules of DeepSeek-V3 (sigmoid plus a choosing bias, 4 of 8 groups here 2 of 4),
# Kimi K2 and GLM-4.5 and MiniMax-M2 (sigmoid plus a bias), DeepSeek-V2 (softmax in
# groups), and Qwen3 (softmax, the control). Per model and build: 5 sampled generations of
# up to 300 tokens on the host backend at a 40% budget (64 KiB pages), with predict gate
# and residual, as `moevm run` counts them: the expert accesses and hits, the experts
# prefetched, the share of them that their layer's next step used (precision) and the
# share that had landed by then. Then `moevm sim` replays the first generation's trace
# with the last build's modules (hit rate, prefetch precision and recall, modelled time).
# Writes OUTDIR/routers.txt; models and traces stay in a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-docs/perf/policies}
shift || true
builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=(./build/moevm)
for b in "${builds[@]}"; do
    [ -x "$b" ] || { echo "no moevm at $b: build first (make build)" >&2; exit 1; }
done
moevm=${builds[-1]}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export MOEVM_PAGE_SIZE=64K

models=("tiny-v3 deepseek2" "tiny-k2 deepseek2" "tiny glm4moe" "tiny minimax-m2"
        "tiny-v2 deepseek2" "tiny qwen3moe")
shape=(--layers 8 --experts 32 --top-k 4 --embd 256 --expert-ff 128)
words=(cache expert memory router prefetch layer copy host token request task number)

# Sums `moevm run`'s counts over the generations: accesses hits prefetched used in_time.
counts='.*expert accesses ([0-9]+) \(hit ([0-9.]+)%.*predict [a-z]+: ([0-9]+) prefetched, '
counts+='([0-9]+) used, ([0-9]+) in time.*'
engine_counts() {
    local bin=$1 model=$2 predict=$3 acc=0 hit=0 pre=0 used=0 intime=0 line i
    for ((i = 0; i < 5; i++)); do
        line=$("$bin" run -m "$model" -p "the ${words[i]} and the ${words[i + 5]}" -n 300 \
            --temp 0.8 --seed $((i + 1)) -t 2 --gpu-budget 40% --predict "$predict" \
            2>&1 >/dev/null | tail -n 1)
        read -r a h p u t < <(sed -E "s/$counts/\\1 \\2 \\3 \\4 \\5/" <<<"$line")
        acc=$((acc + a))
        hit=$(awk -v x="$hit" -v a="$a" -v h="$h" 'BEGIN { printf "%.0f", x + a * h / 100 }')
        pre=$((pre + p)) used=$((used + u)) intime=$((intime + t))
    done
    echo "$acc $hit $pre $used $intime"
}

{
    echo "# moevm run: 5 generations per model, 40% budget, 64 KiB pages, host backend"
    printf "%-22s %-8s %-26s %8s %7s %10s %7s %9s\n" model predict build accesses "hit %" \
        prefetched "used %" "in time %"
    for spec in "${models[@]}"; do
        read -r preset arch <<<"$spec"
        model=$work/$preset-$arch.gguf
        "$moevm" mkmodel --preset "$preset" --arch "$arch" "${shape[@]}" -o "$model" \
            >/dev/null 2>&1
        for predict in gate residual; do
            for b in "${builds[@]}"; do
                echo "$preset $arch: predict $predict, $b" >&2
                read -r acc hit pre used intime < <(engine_counts "$b" "$model" "$predict")
                awk -v m="$preset $arch" -v p="$predict" -v b="$b" -v acc="$acc" -v hit="$hit" \
                    -v pre="$pre" -v used="$used" -v t="$intime" 'BEGIN {
                    printf "%-22s %-8s %-26s %8d %7.1f %10d %7.1f %9.1f\n", m, p, b, acc,
                        100 * hit / acc, pre, pre ? 100 * used / pre : 0,
                        pre ? 100 * t / pre : 0 }'
            done
        done
    done
    echo
    echo "# moevm sim ($moevm) on each model's first generation, rtx3090, 40%, 64 KiB pages"
    for spec in "${models[@]}"; do
        read -r preset arch <<<"$spec"
        model=$work/$preset-$arch.gguf
        "$moevm" run -m "$model" -p "the ${words[0]} and the ${words[5]}" -n 300 --temp 0.8 \
            --seed 1 -t 2 --trace-out "$work/t.jsonl" --trace-hidden >/dev/null 2>&1
        echo "## $preset $arch"
        "$moevm" sim --trace "$work/t.jsonl" --model "$model" --budget 40% --cost rtx3090 \
            --page-size 64K --compare 'evict=lru; evict=lru,predict=gate;
                evict=lru,predict=residual; config=fixedpoint{tau=64},evict=lcp;
                config=fixedpoint{tau=64},evict=lcp,predict=gate' | tail -n +2
    done
} | sed "s|$work/||g" | tee "$out/routers.txt"
