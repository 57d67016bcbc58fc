#!/usr/bin/env bash
# What llama.cpp's sampler chain costs a token: decode tok/s of `moevm run` and of
# llama.cpp's llama-completion (its CPU build: bench/llamacpp/build.sh cpu) with the same
# options (both take llama.cpp's spellings) on a model with Qwen3's vocabulary (151,936
# tokens) and little else, so that sampling is a visible part of a token's time. The cases:
#   default   --temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05 (llama.cpp's defaults)
#   penalties the default and --repeat-penalty 1.1 --frequency-penalty 0.5
#             --presence-penalty 0.5 over --repeat-last-n 256
#   dry       the default and --dry-multiplier 0.8 (its default breakers, last 64 tokens)
#   typical   --top-k 0 --typical 0.9: the whole vocabulary sorted by typicality each token
#   xtc       the default and --xtc-probability 0.5 --xtc-threshold 0.1
#   sigma     --top-k 0 --top-nsigma 1.5: the whole vocabulary's deviation each token
#   dynatemp  the default and --dynatemp-range 0.5
#   mirostat  --mirostat 2: the whole vocabulary sorted each token
# --ignore-eos: every reply the same length. Rounds interleaved, each engine's best kept
# (this VM's speed drifts). One line a case:
#   RESULT bench=cpu_sampling model=qwen3-vocab case=C threads=2 moevm_tok_s=..
#          [llamacpp_tok_s=.. ratio=..] cost=.. (moevm's, against default)
# usage: bash bench/cpu/sampling.sh [tokens (256)] [threads (2)] [rounds (3)]
set -euo pipefail
prompt="Once upon a time"
# shellcheck source=bench/cpu/vocab_bench.sh
. "$(dirname "$0")/vocab_bench.sh"

default=(--temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05)
base=0
for c in default penalties dry typical xtc sigma dynatemp mirostat; do
    case $c in
        default) opt=("${default[@]}") ;;
        penalties) opt=("${default[@]}" --repeat-penalty 1.1 --frequency-penalty 0.5
                        --presence-penalty 0.5 --repeat-last-n 256) ;;
        dry) opt=("${default[@]}" --dry-multiplier 0.8) ;;
        typical) opt=(--temp 0.8 --top-k 0 --top-p 1 --min-p 0 --typical 0.9) ;;
        xtc) opt=("${default[@]}" --xtc-probability 0.5 --xtc-threshold 0.1) ;;
        sigma) opt=(--temp 0.8 --top-k 0 --top-p 1 --min-p 0 --top-nsigma 1.5) ;;
        dynatemp) opt=("${default[@]}" --dynatemp-range 0.5) ;;
        mirostat) opt=(--temp 0.8 --mirostat 2) ;;
    esac
    m=() l=()
    for r in $(seq "$rounds"); do
        m+=("$(moevm_rate --ignore-eos -s "$r" "${opt[@]}")")
        [ $have_llama = 1 ] && l+=("$(llama_rate --ignore-eos -s "$r" "${opt[@]}")")
    done
    mb=$(python3 -c "print(round($(best "${m[@]}"), 1))")
    [ "$c" = default ] && base=$mb
    line="RESULT bench=cpu_sampling model=qwen3-vocab case=$c threads=$threads moevm_tok_s=$mb"
    if [ $have_llama = 1 ]; then
        lb=$(best "${l[@]}")
        line+=" llamacpp_tok_s=$lb ratio=$(python3 -c "print(round($mb / $lb, 3) if $lb else 0)")"
    fi
    echo "$line cost=$(python3 -c "print(round($base / $mb, 3) if $mb else 0)")"
done
