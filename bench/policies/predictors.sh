#!/usr/bin/env bash
# The predictor comparison of docs/perf/policies.md ("Predictors on recorded traces"), in
# one call from the repository root:
#   bash bench/policies/predictors.sh [OUTDIR] [MOEVM]
#                                          (defaults docs/perf/policies, ./build/moevm)
# Synthetic traces carry no hidden states, so the papers' predictors (DALI's residual,
# PreScope's learned one, MoEpic's speculative gate) are compared on a random-weight
# Qwen3-MoE-shaped model that records its own traces: 20 sampled generations train
# `moevm train-predictor`, 5 others are replayed by `moevm sim` at a 40% budget (64 KiB
# pages, so that the model's 384 KiB experts can be split), with the predictors' copies
# as top-k (the default) and as MoEpic's window (--prefetch window); the learned one also
# fine-tuned online on the replayed routing (LLaPor's continual learning, learned{tune=N}).
# Writes OUTDIR/predictors.txt (with `RESULT bench=prefetch_window` lines); the model and traces stay in a temporary directory.
. "$(dirname "$0")/common.sh" "$@"

model=$tmp/model.gguf
"$moevm" mkmodel --preset tiny --arch qwen3moe --layers 8 --experts 32 --top-k 4 --embd 256 \
    --expert-ff 128 -o "$model" >/dev/null

words=(cache expert memory router prefetch layer copy host token request task number)
n_train=20 n_eval=5
# A merged trace: the first file's header, then every file's records with its own request
# id (each `moevm run` records req 0).
merge() {
    local dst=$1 i=0
    shift
    head -n 1 "$1" >"$dst"
    for f in "$@"; do
        tail -n +2 "$f" | sed "s/^{\"req\":0,/{\"req\":$i,/" >>"$dst"
        i=$((i + 1))
    done
}

n=$((n_train + n_eval))
for ((i = 0; i < n; i++)); do
    echo "recording generation $((i + 1)) of $n" >&2
    prompt="the ${words[i % 12]} and the ${words[(i * 5 + 3) % 12]}"
    "$moevm" run -m "$model" -p "$prompt" -n 400 --temp 0.8 --seed $((i + 1)) -t 2 \
        --trace-out "$tmp/t$i.jsonl" --trace-hidden >/dev/null
done
merge "$tmp/train.jsonl" $(for ((i = 0; i < n_train; i++)); do echo "$tmp/t$i.jsonl"; done)
merge "$tmp/eval.jsonl" $(for ((i = n_train; i < n; i++)); do echo "$tmp/t$i.jsonl"; done)

result() { # RESULT lines from a sim table: result MODE < table
    awk -v m=$1 '/^(evict|config)=/ { printf "RESULT bench=prefetch_window prefetch=%s policies=%s hit_pct=%s pf_precision=%s pf_recall=%s ms_per_token=%s\n", m, $1, $2, $5, $6, $8 }'
}
sim() {
    "$moevm" sim --trace "$tmp/eval.jsonl" --model "$model" --predictor "$tmp/p.bin" \
        --budget 40% --cost rtx3090 --page-size 64K "$@"
}
window_sets='evict=lru,predict=gate; evict=lru,predict=residual; evict=lru,predict=learned;
    config=fixedpoint{tau=64},evict=lcp,predict=gate'
{
    echo "# moevm train-predictor on $n_train generations"
    "$moevm" train-predictor --trace "$tmp/train.jsonl" --out "$tmp/p.bin"
    echo
    echo "# moevm sim on $n_eval other generations, budget 40%, rtx3090, 64 KiB pages"
    sim --compare 'evict=lru;
            evict=lru,predict=gate; evict=lru,predict=residual; evict=lru,predict=learned;
            evict=lru,predict=learned{tune=16}; evict=lru,predict=learned{tune=64};
            config=fixedpoint{tau=64},evict=lcp;
            config=fixedpoint{tau=64},evict=lcp,predict=gate;
            config=hot,assign=presched,predict=learned;
            config=hot,assign=presched,predict=residual' | tee "$tmp/top-k.txt"
    echo
    echo "# the same, MoEpic's prefetch window (--prefetch window): every expert ranked, most"
    echo "# likely first, into a free buffer of top_k experts' pages, cut when the layer routes"
    sim --prefetch window --compare "$window_sets" | tee "$tmp/window.txt"
    result top-k <"$tmp/top-k.txt"
    result window <"$tmp/window.txt"
} | sed "s|$tmp/||g" | tee "$out/predictors.txt"
