#!/usr/bin/env bash
# Builds the libFuzzer targets with ASan and UBSan — fuzz_gguf (the GGUF reader, and the
# interposer's scan of the same bytes against it),
# fuzz_inputs (cost files, routing traces, predictor files, module parameters, option
# values, pre-tokenizer texts, chat templates, grammars, JSON Schemas) and fuzz_serve (`moevm serve`'s request
# bodies and its answers) — writes their seed corpora, and fuzzes each for a third of
# <seconds>. Exit 0 and
# "1 passed, 0 failed" when nothing crashed; exit 1 and "0 passed, 1 failed" on a crash,
# leak, sanitizer report or build failure (the input that crashed is kept under
# <outdir>/<target>/artifacts/); exit 77 (CTest's skip code) when clang or libFuzzer is
# missing. The corpora grow in <outdir>/<target>/corpus across runs. CC overrides the
# compiler (default clang).
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
    echo "skip: run_fuzz: $1"
    echo "0 passed, 0 failed"
    exit 77
}
fail() {
    echo "run_fuzz: $1"
    echo "0 passed, 1 failed"
    exit 1
}

mkdir -p "$out" || fail "cannot create $out"
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

# -O1 runs the targets some 2.4 times as fast as -O0, but takes three times as long to
# compile (fuzz_inputs: 21 CPU-seconds against 6): a smoke run of a few seconds a target
# (the suite's) reaches the same coverage at -O0 (2,780 edges in 5 s against 2,721) and
# spends its time fuzzing rather than compiling; a real run takes -O1.
opt=-O1
[ "$secs" -ge 60 ] 2>/dev/null || opt=-O0
flags=(-std=c11 -g "$opt" -Wall -Wextra -Werror -D_GNU_SOURCE= -I"$root/include" -I"$root"
       -fno-sanitize-recover=all)
reader=("$root/engine/gguf/gguf.c" "$root/engine/gguf/gguf_get.c" "$root/engine/gguf/gguf_split.c" "$root/engine/gguf/ggml_types.c" "$root/vmm/error.c" "$root/vmm/options.c" "$root/vmm/file_replace.c")
mkdir -p "$out/gguf/seeds" "$out/inputs/seeds" "$out/serve/seeds"
"$cc" "${flags[@]}" -fsanitize=fuzzer,address,undefined "$root/tests/fuzz/fuzz_gguf.c" \
    "$root/interpose/gguf_scan.c" "${reader[@]}" -lm -lpthread -o "$out/fuzz_gguf" ||
    fail "building fuzz_gguf failed"
"$cc" "${flags[@]}" -fsanitize=address,undefined "$root/tests/fuzz/gguf_seeds.c" \
    "$root/engine/gguf/gguf_write.c" "${reader[@]}" -lm -lpthread -o "$out/gguf_seeds" ||
    fail "building gguf_seeds failed"
"$out/gguf_seeds" "$out/gguf/seeds" || fail "gguf_seeds failed"

cjson=$(pkg-config --cflags --libs libcjson 2>/dev/null || echo -lcjson)
# shellcheck disable=SC2086 # cjson is a list of flags
"$cc" "${flags[@]}" -fsanitize=fuzzer,address,undefined "$root/tests/fuzz/fuzz_inputs.c" \
    "$root"/policy/*.c "$root/tools/trace.c" "$root/tools/sim.c" "$root/tools/kl_divergence.c" \
    "$root/vmm/error.c" "$root/vmm/options.c" "$root/vmm/file_replace.c" "$root/engine/tokenizer/tok_pretok.c" "$root/engine/tokenizer/tok_regex.c" \
    "$root/engine/tokenizer/tok_unicode.c" "$root"/engine/chat/jinja*.c \
    "$root/engine/grammar/gbnf.c" "$root/engine/grammar/stacks.c" "$root/engine/grammar/grammar.c" \
    "$root/engine/grammar/grammar_lazy.c" \
    "$root"/engine/grammar/json_schema*.c $cjson -lm -lpthread \
    -o "$out/fuzz_inputs" ||
    fail "building fuzz_inputs failed"
# shellcheck disable=SC2086
"$cc" "${flags[@]}" -fsanitize=fuzzer,address,undefined "$root/tests/fuzz/fuzz_serve.c" \
    "$root/tools/serve_api.c" "$root/tools/serve_llama.c" "$root/tools/serve_logprobs.c" \
    "$root/tools/serve_req.c" "$root/tools/serve_grammar.c" "$root/tools/serve_tools.c" \
    "$root/tools/serve_bias.c" "$root/tools/serve_sampling.c" "$root/tools/sampler_order.c" \
    "$root/tools/serve_anthropic.c" "$root/tools/serve_responses.c" \
    "$root/tools/cli_think.c" "$root/engine/chat/think_budget.c" \
    "$root"/engine/forward/sampler*.c \
    "$root/tools/cli_utf8.c" "$root"/engine/grammar/*.c "$root"/engine/chat/chat_reply*.c \
    "$root/engine/chat/json_prefix.c" \
    "$root/vmm/error.c" "$root/vmm/options.c" "$root/vmm/file_replace.c" $cjson -lm -lpthread \
    -o "$out/fuzz_serve" ||
    fail "building fuzz_serve failed"
# Seeds: the first byte picks the parser (fuzz_inputs.c); for fuzz_serve, the route (bits
# 0-1: completions, chat, llama.cpp's /completion, its /infill) and how many of the last
# bytes are the reply's text (bits 2-7).
seed() { printf "\\$(printf %o "$1")" >"$out/inputs/seeds/$2"; cat >>"$out/inputs/seeds/$2"; }
serve_seed() { printf "\\$(printf %o "$1")" >"$out/serve/seeds/$2"; cat >>"$out/serve/seeds/$2"; }
for f in "$root"/bench/costs/*.json; do seed 0 "cost-$(basename "$f")" <"$f"; done
seed 1 trace.jsonl <<'TRACE'
{"format":"moevm-trace","version":1,"model":"m","arch":"a","n_layers":2,"n_experts":4,"top_k":2,"expert_bytes":4194304,"n_embd":64,"n_ff_exp":64,"scores":"softmax","weights_renormalised":true}
{"req":0,"tok":0,"layer":0,"scores":[0.1,0.1,0.5,0.3],"experts":[2,3],"weights":[0.6,0.4]}
{"req":0,"tok":0,"layer":1,"scores":[0.6,0.2,0.1,0.1],"experts":[0,1],"weights":[0.75,0.25]}
{"req":0,"tok":1,"layer":0,"scores":[0.9,0.02,0.05,0.03],"experts":[0,2],"weights":[0.95,0.05]}
{"req":0,"tok":1,"layer":1,"scores":[0.4,0.1,0.2,0.3],"experts":[0,3],"weights":[0.6,0.4]}
TRACE
# A predictor of 2 layers, 2 experts, top-1, width 2: layer 1 shallow, rank 1, hidden 1.
python3 -c 'import struct,sys; f=lambda *v: struct.pack("<%df" % len(v), *v)
sys.stdout.buffer.write(b"MVMPRED1" + struct.pack("<5I", 1, 2, 2, 1, 2) +
    struct.pack("<3I", 0, 1, 1) + f(0.1, -0.2) + f(0.5, 0.5) + f(1, 0.5, -0.5) + f(0.1) +
    f(1, -1) + f(0, 0.2))' | seed 2 predictor.bin ||
    fail "writing the predictor seed failed"
printf 'alpha=0.5,window=8' | seed 3 params
printf '25%%' | seed 4 budget
printf '1.5GiB' | seed 4 size
# Pre-tokenizer texts: the byte after the selector picks the pre-tokenizer (enum tok_pre).
for pre in 0 1 2 3 4 5 6; do
    printf "\\$(printf %o $pre)Hello, world's 1234567!\n\n  \xe4\xb8\xad\xe6\x96\x87 caf\xc3\xa9 ~~\xff" |
        seed 5 "pretok-$pre"
done

# A base model's log-probabilities (llama.cpp's --kl-divergence-base file): 2 chunks of 3
# tokens, a vocabulary of 5, a row a scored position (one a chunk).
python3 -c 'import struct,sys
row = struct.pack("<2f", 16 / 65535, -17.6) + struct.pack("<6H", 65535, 100, 0, 7, 9, 0)
sys.stdout.buffer.write(b"_logits_" + struct.pack("<3i", 3, 5, 2) +
    struct.pack("<6i", 1, 2, 3, 4, 0, 1) + row + row)' | seed 7 kld-base ||
    fail "writing the KLD base seed failed"

# Grammars (llama.cpp's examples' constructs) with a text after 0xFF; JSON Schemas.
printf 'root ::= obj\nobj ::= "{" ws (str ":" ws val ("," ws str ":" ws val)*)? "}"\nval ::= obj | str | [0-9]{1,3} | ("true" | "false")\nstr ::= "\\"" [^"\\\\\\x00-\\x1f]* "\\""\nws ::= [ \\t\\n]{0,4} # spaces\n\377{"a": {"b": true}, "c": 12}' |
    seed 8 grammar-json
printf 'root ::= ("\\u00e9" | [^a-c] | .)+ "\\U0001F600"?\n\377\xc3\xa9x\xf0\x9f\x98' | seed 8 grammar-utf8
# lazy (odd lengths; the second starts quiet): a trigger in the quiet block, the sentence
# after one outside it
printf 'root ::= ("{" | "<t>") [a-z]* "}"\n\377ab<q>{x</q>c<t{ab}' | seed 8 grammar-lazy
printf 'root ::= "<t>" [0-9]+\n\377<t>x</q><t>1' | seed 8 grammar-lazy-quiet
printf '%s' '{"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}, "s": {"type": "string", "maxLength": 4}, "e": {"enum": ["a", 1, null]}, "l": {"type": "array", "items": {"$ref": "#/$defs/x"}, "minItems": 1}}, "required": ["n"], "$defs": {"x": {"anyOf": [{"type": "boolean"}, {"type": "number"}]}}}' |
    seed 9 schema

# Chat templates (the presets', engine/synth/templates), and a few constructs on their own.
for f in "$root"/engine/synth/templates/*.jinja; do seed 6 "chat-$(basename "$f")" <"$f"; done
printf '%s' "{% macro m(a, b=1) %}{{ a ~ b }}{% endmacro %}{% for x in messages|selectattr('role', 'eq', 'user') if x.content %}{{ m(x.content|upper, loop.index) }}{% else %}{{ raise_exception('none') }}{% endfor %}{{ tools|tojson(indent=2) }}" |
    seed 6 chat-constructs
printf '%s' "{{ raise_exception('') }}" | seed 6 chat-raise-empty # once crashed the target
printf '%s' "{{ [1]|select|list }}" | seed 6 chat-select-bare # once NULL + 0 (clang's UBSan)

# Requests as clients send them: every sampling field, stops, a stream; text parts, a null
# content, template arguments; a reply with a character cut short.
printf '%s' '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "seed": 3, "stop": ["\n", "."], "stream": true, "repeat_penalty": 1.1, "ignore_eos": false}' |
    serve_seed 0 completions
printf '%s' '{"prompt": "x", "logprobs": 3}a\xe2\x82b' | serve_seed 16 completions-logprobs
printf '%s' '{"prompt": ["x", [5, "y"], "z"], "logprobs": 1}ab' | serve_seed 8 completions-several
printf '%s' '{"prompt": "x", "n": 2, "dry_multiplier": 0.8, "dry_penalty_last_n": -1, "dry_sequence_breakers": ["ab", "\n", "c"], "frequency_penalty": 0.5, "typical_p": 0.9, "mirostat": 0, "xtc_probability": 0.3, "min_keep": 2, "samplers": ["top_k", "temp", "Typ-P"], "t_max_predict_ms": 5, "post_sampling_probs": true, "n_probs": 2}ab' |
    serve_seed 4 completions-sampling
printf '%s' '{"messages": [{"role": "user", "content": "x"}], "reasoning_budget_tokens": 3, "reasoning_budget_message": "Done.", "reasoning_effort": "none"}ab' |
    serve_seed 5 chat-reasoning-budget
printf '%s' '{"input_prefix": "def f(", "input_suffix": ")\n", "input_extra": [{"filename": "a.py", "text": "x = 1"}, {"text": "y"}], "prompt": "a", "n_predict": 4}' |
    serve_seed 3 infill
printf '%s' '{"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 2}ab' | serve_seed 9 chat-logprobs
printf '%s' '{"prompt": ["a"], "n": 1, "max_completion_tokens": 3}hello' | serve_seed 20 completions-reply
printf '%s' '{"prompt": "x", "grammar": "root ::= [a-z]+ \"!\"", "n_predict": 4}' | serve_seed 2 completion-grammar
printf '%s' '{"messages": [{"role": "user", "content": "x"}], "n": 2, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}}' | serve_seed 1 chat-json-schema
printf '%s' '{"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi \u00e9"}, {"type": "text", "text": "!"}]}], "max_tokens": 4, "stop": "x", "n": 3, "chat_template_kwargs": {"enable_thinking": false}}' |
    serve_seed 1 chat
printf '{"messages": [{"role": "user", "content": null}], "stream": false}a\xc3' | serve_seed 13 chat-reply
# chats with tools; replies (the last 55 and 58 bytes) with reasoning and calls, read in
# the syntax the input's length picks
printf '%s' '{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}], "tool_choice": "required", "parallel_tool_calls": true}' | serve_seed 1 chat-tools
printf '%s' '{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]}<think>r</think>c<tool_call>{"name":"f","arguments":{}}' | serve_seed 221 chat-tool-reply
printf '%s' '{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}], "reasoning_format": "auto"}<|start|>assistant to=functions.f<|channel|>x<|message|>{}' | serve_seed 233 chat-harmony-reply
# a held call cut off by the reply's end: its arguments streamed in pieces, kept as far as
# they go
printf '%s' '{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}], "tool_choice": "required"}' |
    cat - <(printf '<tool_call>\n{"name": "f", "arguments": {"q": "a long text cut') |
    serve_seed 245 chat-tool-cut
# Anthropic's Messages (checked on the chat route too: fuzz_serve.c's check_anthropic),
# with every kind of block and a reply of reasoning, text and a call
printf '%s' '{"model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "s"}], "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}, {"type": "text", "text": "a"}, {"type": "tool_use", "id": "u", "name": "f", "input": {"a": 1}}]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u", "content": [{"type": "text", "text": "r"}]}]}], "tools": [{"name": "f", "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}], "tool_choice": {"type": "auto"}, "stop_sequences": ["z"], "thinking": {"type": "enabled", "budget_tokens": 5}, "stream": true}<think>r</think>c<tool_call>{"name":"f","arguments":{}}' | serve_seed 221 anthropic-messages
# OpenAI's Responses (fuzz_serve.c's check_responses), every kind of input item
printf '%s' '{"model": "m", "instructions": "s", "input": [{"role": "user", "content": "x"}, {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "t"}]}, {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}, {"type": "function_call_output", "call_id": "c", "output": "o"}, {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]}], "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}], "tool_choice": {"type": "function", "name": "f"}, "max_output_tokens": 9, "reasoning": {"effort": "low"}, "stream": true}<think>r</think>c<tool_call>{"name":"f","arguments":{}}' | serve_seed 221 responses
# logit_bias in OpenAI's shape and llama.cpp's
printf '%s' '{"prompt": "x", "logit_bias": {"5": 1.5, "ab": false, "-1": 2}, "n": 2}' |
    serve_seed 0 completion-bias
printf '%s' '{"prompt": "x", "logit_bias": [[3, -2], ["a", false], [1.5, 1]]}' | serve_seed 2 llama-bias
# llama.cpp's /completion (and its body to /tokenize, /detokenize, /apply-template)
printf '%s' '{"prompt": [5, "Once", 7], "n_predict": 3, "id_slot": 1, "cache_prompt": false, "return_tokens": true, "repeat_last_n": -1, "stop": ["a", "b", "c", "d", "e"], "n_probs": 3}' |
    serve_seed 2 llama-completion
printf '%s' '{"content": "hi", "with_pieces": true, "add_special": true, "tokens": [1, 2, 300], "messages": [{"role": "user", "content": "x"}], "prompt": "x"}hel\xe2' |
    serve_seed 18 llama-utilities

third=$(( (secs + 2) / 3 ))
for target in gguf inputs serve; do
    mkdir -p "$out/$target/corpus" "$out/$target/artifacts"
    # New inputs go to the first directory (corpus); the seeds are read only.
    "$out/fuzz_$target" -max_total_time="$third" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$out/$target/artifacts/" "$out/$target/corpus" "$out/$target/seeds" \
        2>&1 | tee "$out/$target.log"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || fail "fuzz_$target exited with $rc; crashing input in $out/$target/artifacts/"
done
echo "1 passed, 0 failed"
