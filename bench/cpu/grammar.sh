#!/usr/bin/env bash
# What sampling under a grammar costs: decode tok/s of `moevm run` without a grammar, with
# llama.cpp's JSON grammar (grammars/json.gbnf's rules) and with a JSON Schema, at
# temperature 0 (the model's best token mostly fits) and 1 (most draws do not fit: the
# vocabulary is filtered and the draw made again), on a model with Qwen3's vocabulary
# (151,936 tokens: the filter's work grows with it) and little else, so that sampling is a
# visible part of a token's time. With llama.cpp's CPU build (bench/llamacpp/build.sh cpu)
# the same with llama-completion (its decode rate with its sampling time, which its eval
# time line leaves out: bench/cpu/completion_rate.py). Rounds interleaved, each
# engine's best kept (this VM's speed drifts). One line a case:
#   RESULT bench=cpu_grammar model=qwen3-vocab temp=T grammar=none|json|schema threads=2
#          moevm_tok_s=.. [llamacpp_tok_s=.. ratio=..] cost=.. (moevm's, against none)
# Under a grammar a reply ends where the model ends it (a JSON text closed): the rates are
# over the tokens made. --ignore-eos only without one: llama.cpp's sampler aborts
# ("Unexpected empty grammar stack") when a grammar is finished and the end is masked.
# usage: bash bench/cpu/grammar.sh [tokens (256)] [threads (2)] [rounds (3)]
set -euo pipefail
prompt="Data:"
# shellcheck source=bench/cpu/vocab_bench.sh
. "$(dirname "$0")/vocab_bench.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
json='root ::= object
value ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}'
schema='{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["name","age","tags"]}}'
printf '%s\n' "$json" >"$tmp/json.gbnf"
printf '%s\n' "$schema" >"$tmp/schema.json"
for temp in 0 1; do
    base=0
    for g in none json schema; do
        case $g in
            none) opt=(--ignore-eos) ;; # (under a grammar llama.cpp aborts at its end then)
            json) opt=(--grammar-file "$tmp/json.gbnf") ;;
            schema) opt=(-jf "$tmp/schema.json") ;;
        esac
        m=() l=()
        for r in $(seq "$rounds"); do
            m+=("$(moevm_rate --temp "$temp" -s "$r" "${opt[@]}")")
            [ $have_llama = 1 ] && l+=("$(llama_rate --temp "$temp" -s "$r" "${opt[@]}")")
        done
        mb=$(best "${m[@]}")
        mb=$(python3 -c "print(round($mb, 1))")
        [ "$g" = none ] && base=$mb
        line="RESULT bench=cpu_grammar model=qwen3-vocab temp=$temp grammar=$g threads=$threads moevm_tok_s=$mb"
        if [ $have_llama = 1 ]; then
            lb=$(best "${l[@]}")
            line+=" llamacpp_tok_s=$lb ratio=$(python3 -c "print(round($mb / $lb, 3) if $lb else 0)")"
        fi
        echo "$line cost=$(python3 -c "print(round($base / $mb, 3) if $mb else 0)")"
    done
done
