# Sourced by bench/cpu/grammar.sh and sampling.sh, which time sampling: their arguments
# (tokens, threads, rounds), the model (a Q8_0 Qwen3 shape of 2 layers with Qwen3's whole
# 151,936-token vocabulary and little else, so that sampling is a visible part of a token),
# and the two engines' decode rates on a prompt ($prompt), each with extra options:
# moevm's (run -o json's) and llama-completion's with its sampling time counted
# (bench/cpu/completion_rate.py: its eval time line leaves sampling out).
cd "$(dirname "$0")/../.."
n=${1:-256}
threads=${2:-2}
rounds=${3:-3}
moevm=${MOEVM:-build/moevm}
bin=.llamacpp/build-cpu/bin
dir=build/bench-models
model=$dir/qwen3-vocab.gguf
mkdir -p "$dir"
[ -x "$moevm" ] || { echo "$0: $moevm: build moevm first" >&2; exit 1; }
[ -f "$model" ] || "$moevm" mkmodel --preset qwen3-30b-a3b --layers 2 --experts 8 --top-k 2 \
    --embd 512 --expert-ff 128 --type q8_0 -o "$model" >/dev/null
have_llama=0
[ -x "$bin/llama-completion" ] && have_llama=1
echo "== $model: $n tokens, $threads threads, $rounds rounds; llama.cpp: $([ $have_llama = 1 ] && echo "$bin" || echo "not built")"

moevm_rate() {
    "$moevm" run -m "$model" -p "$prompt" -n "$n" -t "$threads" -o json "$@" 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["decode"]["tokens_per_second"])'
}
llama_rate() {
    "$bin/llama-completion" -m "$model" -p "$prompt" -n "$n" -t "$threads" -no-cnv \
        "$@" </dev/null 2>&1 | python3 bench/cpu/completion_rate.py
}
best() { python3 -c 'import sys; v=[float(x) for x in sys.argv[1:] if x]; print(max(v) if v else 0)' "$@"; }
