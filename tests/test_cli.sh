#!/usr/bin/env bash
# The `moevm` command: it runs, and bad input gets a one-line error naming what was wrong.
# usage: test_cli.sh path/to/moevm [path/to/fakecuda's libcuda.so.1 [the engine's kernels
#        as its plugin (FAKECUDA_KERNELS)]]
set -u
moevm=$1
fake_driver=${2:-}
fake_kernels=${3:-}
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# judge CODE PATTERN RC CMD...: whether a command that exited RC with $tmp/out as its output
# did what was wanted.
judge() {
    local code=$1 pattern=$2 rc=$3
    shift 3
    if [ "$rc" -eq "$code" ] && grep -Eq -- "$pattern" "$tmp/out"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: $* (exit $rc, wanted $code; output must match /$pattern/):" >&2
        sed 's/^/    /' "$tmp/out" >&2
    fi
}

# expect <exit code> <regex the output must match> -- command...
expect() {
    local code=$1 pattern=$2
    shift 3
    "$@" >"$tmp/out" 2>&1
    judge "$code" "$pattern" $? "$@"
}

# expect, for a calibration: a machine too busy to measure (calibrate says so and exits 1,
# as when a test beside it took the core for milliseconds) gets up to five tries a second
# apart, as the message advises (three back to back all met a busy machine once, under ASan
# with three heavy tests beside it: a page's copy timed at 3.6 ms, 384 pages' at 0.8);
# any other outcome is judged at once. A device line taken as flat is such
# a machine's too: the fake driver's emulated experts take 2.4x as long at two tokens as at
# one, so only a burst of other work can make them fall (a CI run under load timed 26 ms at
# one token and 17 at two, and calibrate kept the base's gpu_flops).
expect_measured() {
    local code=$1 pattern=$2 rc try
    shift 3
    for try in 1 2 3 4 5; do
        "$@" >"$tmp/out" 2>&1
        rc=$?
        grep -Eq 'busy to measure|flat: the times did not rise' "$tmp/out" || break
        sleep 1
    done
    judge "$code" "$pattern" "$rc" "$@"
}
# check and check_py, with expect: defined before any use (a call before its definition is only
# "command not found" on stderr, counted neither way).
py=${PYTHON:-python3}
# check_py LABEL FILE PROGRAM [ARG...]: the Python program (stdin: FILE) exits 0
# check LABEL CONDITION FILE...: CONDITION (shell text, evaluated here) counts as passed or
# failed; a failure is named, with the files shown indented (their first 300 columns).
check() {
    local label=$1 cond=$2
    shift 2
    if eval "$cond"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: $label:" >&2
        cut -c1-300 "$@" | sed 's/^/    /' >&2
    fi
}
check_py() {
    local label=$1 file=$2 prog=$3
    shift 3
    if "$py" -c "$prog" "$@" <"$file" 2>"$tmp/py.err"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: $label:" >&2
        sed 's/^/    /' "$tmp/py.err" "$file" >&2
    fi
}

export MOEVM_BACKEND=host
expect 0 '^moevm [0-9]+\.[0-9]+' -- "$moevm" --version
expect 0 'backend: +host' -- "$moevm" info
expect 0 'cpu: +(scalar|avx2|avx512|avx512vnni|neon|dotprod) kernels, the best this CPU has' -- \
    "$moevm" info
expect 0 'page size: +2048 KiB' -- "$moevm" info
expect 0 'budget: +auto = none on the host backend' -- "$moevm" info
expect 0 'memory: +[0-9]+\.[0-9] GiB available for the homes \(MemAvailable and free swap' -- "$moevm" info
expect 0 'budget: +25% of the experts' -- env MOEVM_GPU_BUDGET=25% "$moevm" info
expect 0 'budget: +8192 MiB' -- env MOEVM_GPU_BUDGET=8G "$moevm" info
# the CPU kernels in effect: MOEVM_CPU_SIMD's (scalar: every CPU has it), not the best
if ! "$moevm" info 2>&1 | grep -q '^cpu: *scalar kernels'; then
    expect 0 'cpu: +scalar kernels, as MOEVM_CPU_SIMD asks \(the best this CPU has: ' -- env MOEVM_CPU_SIMD=scalar "$moevm" info
fi
expect 0 'MOEVM_GPU_BUDGET' -- "$moevm" options
expect 0 '^\| `MOEVM_BACKEND` \|' -- "$moevm" options --markdown
expect 0 'verified [1-9][0-9]* expert reads' -- "$moevm" demo --tokens 16
expect 0 'token +16/16 +hit rate' -- env MOEVM_PAGE_SIZE=64K "$moevm" demo --tokens 16 --layers 2 --experts 8 --expert-size 256K --budget 1M
expect 2 'unknown command' -- "$moevm" frobnicate
expect 2 'usage' -- "$moevm"
expect 2 'not a positive number' -- "$moevm" demo --tokens abc
expect 2 'exceeds --experts' -- "$moevm" demo --topk 9 --experts 8
expect 2 'expected a size' -- "$moevm" demo --budget lots
expect 1 'smaller than one page' -- "$moevm" demo --budget 1K
expect 1 'MOEVM_GPU_BUDGET=12Q: not valid' -- env MOEVM_GPU_BUDGET=12Q "$moevm" info
expect 1 'MOEVM_BACKEND=gpu: not valid \(expected one of auto\|host\|cuda\)' -- env MOEVM_BACKEND=gpu "$moevm" info
expect 0 'MOEVM_GPU_BUGDET is not an option this program reads \(did you mean MOEVM_GPU_BUDGET\?\)' -- env MOEVM_GPU_BUGDET=1G "$moevm" info
# A build with the CUDA toolkit (which gives the fake driver) names the missing driver; one
# without it (the aarch64 cross build) says what the backend needs.
if [ -n "$fake_driver" ]; then
    expect 1 'no CUDA driver' -- \
        env MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY=/nonexistent/libcuda.so.1 "$moevm" info
else
    expect 1 'built without the CUDA toolkit' -- env MOEVM_BACKEND=cuda "$moevm" info
fi

# mkmodel and run: the main job, then every kind of bad input.
KV_TYPES="f16, f32, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 or iq4_nl" # the KV cache's, as refusals list them
m="$tmp/tiny.gguf"
expect 0 'mkmodel: tiny qwen3moe' -- "$moevm" mkmodel --arch qwen3moe -o "$m"
expect 0 'warning: 300 positions exceed the 256 the model was trained on' -- "$moevm" run -m "$m" -p "x" -n 2 --ctx 300
# The KV cache: F16 by default, in half the bytes of F32 on request, or Q8_0 in 34 bytes a
# block of 32 (17/32 of F16's), Q4_0 in 18 (9/32), Q5_1 in 24 (12/32), BF16 as F16; other
# types refused.
kv_mib() { "$moevm" run -m "$m" -p x -n 1 --ctx 8192 "$@" 2>&1 | sed -n 's/.*KV cache \([0-9.]*\) MiB (\([a-z0-9_]*\)).*/\1 \2/p'; }
read -r kv16 t16 <<<"$(kv_mib)"
read -r kv32 t32 <<<"$(MOEVM_KV_TYPE=f16 kv_mib --kv-type f32)"
read -r kv8 t8 <<<"$(kv_mib --kv-type q8_0)"
read -r kv4 t4 <<<"$(kv_mib -ctk q4_0 -ctv q4_0)"
read -r kv5 t5 <<<"$(kv_mib --kv-type q5_1)"
read -r kvb tb <<<"$(kv_mib --kv-type bf16)"
if [ "$t16" = f16 ] && [ "$t32" = f32 ] && [ "$t8" = q8_0 ] && [ "$t4" = q4_0 ] &&
    [ "$t5" = q5_1 ] && [ "$tb" = bf16 ] &&
    awk -v a="$kv16" -v b="$kv32" -v c="$kv8" -v d="$kv4" -v e="$kv5" -v f="$kvb" '
        function near(x, y) { return (x - y) * (x - y) < 0.01 }
        BEGIN { exit !(a > 0 && b == 2 * a && near(c, 17 / 32 * a) && near(d, 9 / 32 * a) &&
                       near(e, 12 / 32 * a) && f == a) }'; then
    pass=$((pass + 1))
else
    fail=$((fail + 1))
    echo "FAIL: KV cache at 8192 positions: '$kv16 $t16' by default, '$kv32 $t32' with --kv-type f32, '$kv8 $t8' with q8_0, '$kv4 $t4' q4_0, '$kv5 $t5' q5_1, '$kvb $tb' bf16" >&2
fi
expect 0 'KV cache [0-9.]+ MiB \(f32\)' -- env MOEVM_KV_TYPE=f32 "$moevm" run -m "$m" -p x -n 1
expect 0 'KV cache [0-9.]+ MiB \(q8_0\)' -- env MOEVM_KV_TYPE=q8_0 "$moevm" run -m "$m" -p x -n 1
expect 0 'KV cache [0-9.]+ MiB \(iq4_nl\)' -- env MOEVM_KV_TYPE=iq4_nl "$moevm" run -m "$m" -p x -n 1
expect 2 '^moevm run: --kv-type q4_K: expected '"$KV_TYPES"'$' -- "$moevm" run -m "$m" -p x --kv-type q4_K
expect 1 'MOEVM_KV_TYPE=q4_K: not valid \(expected one of f16\|f32\|bf16\|q8_0\|q4_0\|q4_1\|q5_0\|q5_1\|iq4_nl\)' -- env MOEVM_KV_TYPE=q4_K "$moevm" run -m "$m" -p x
# Q8_0 wants heads of whole blocks: the tiny llama's are 16 elements.
"$moevm" mkmodel --arch llama -o "$tmp/llama.gguf" >/dev/null
expect 1 'a q8_0 KV cache needs heads of whole blocks of 32 elements, at most 1024; this model.s are 16: use f16' -- "$moevm" run -m "$tmp/llama.gguf" -p x -n 1 --kv-type q8_0
expect 1 'a iq4_nl KV cache needs heads of whole blocks of 32 elements' -- "$moevm" run -m "$tmp/llama.gguf" -p x -n 1 --kv-type iq4_nl
expect 0 'KV cache [0-9.]+ MiB \(bf16\)' -- "$moevm" run -m "$tmp/llama.gguf" -p x -n 1 --kv-type bf16
"$moevm" mkmodel --arch qwen3moe --rope-scaling yarn:4:64 -o "$tmp/yarn.gguf" >/dev/null
expect 0 'vocab 512, RoPE YaRN x4; loaded' -- "$moevm" run -m "$tmp/yarn.gguf" -p "x" -n 2
# llama.cpp's RoPE options and --override-kv (tools/cli_meta.c): the plain file with the
# options is the YaRN file, its text the same; an expert count given, and bad ones refused.
rope=(--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 64)
expect 0 'vocab 512, RoPE YaRN x4; loaded' -- "$moevm" run -m "$m" -p "x" -n 2 "${rope[@]}"
"$moevm" run -m "$tmp/yarn.gguf" -p "Once upon a time" -n 24 --temp 0 --ignore-eos >"$tmp/r0.out" 2>/dev/null
"$moevm" run -m "$m" -p "Once upon a time" -n 24 --temp 0 --ignore-eos "${rope[@]}" >"$tmp/r1.out" 2>/dev/null
check 'run with the RoPE options: the YaRN file'"'"'s text' "[ -s '$tmp/r1.out' ] && cmp -s '$tmp/r0.out' '$tmp/r1.out'" "$tmp/r0.out" "$tmp/r1.out"
expect 0 '8 experts top-4' -- "$moevm" run -m "$m" -p "x" -n 2 --override-kv 'qwen3moe.expert_used_count=int:4,"general.name=str:a, b"'
expect 1 "^moevm run: loading the model: .*tiny.gguf: --override-kv qwen3moe.expert_used_count: the file's value is of type u32, not float$" -- "$moevm" run -m "$m" -p x --override-kv qwen3moe.expert_used_count=float:4
expect 1 'expert_used_count 9 is not in 1..8$' -- "$moevm" chat -m "$m" --override-kv qwen3moe.expert_used_count=int:9
expect 2 "^moevm serve: --override-kv 'k=int:1x': the value is not a 64-bit integer" -- "$moevm" serve -m "$m" --override-kv k=int:1x
expect 2 '^moevm perplexity: --rope-scaling ntk: expected none, linear or yarn$' -- "$moevm" perplexity -m "$m" --rope-scaling ntk
expect 2 '^moevm run: --yarn-attn-factor: not taken' -- "$moevm" run -m "$m" -p x --yarn-attn-factor 1
expect 2 '^moevm run: --yarn-ext-factor 2: expected a number in 0..1, or a negative one' -- "$moevm" run -m "$m" -p x --yarn-ext-factor 2
# llama.cpp's other flags (tools/cli_llama.c; tests/test_cli_llama.c has them all): a
# llama-server command line pasted whole runs, with a note for each flag moevm has no use
# for; one asking for what moevm does not have stops with the moevm way to say it
expect 0 "moevm serve: --jinja: llama.cpp's, accepted and ignored: moevm always renders" -- "$moevm" serve -m "$m" --jinja -cb --metrics -fa on -ub 512 -tb 2 --no-webui --numa distribute --help
expect 2 "^moevm chat: -md: llama.cpp's, not taken: moevm has no speculative decoding$" -- "$moevm" chat -m "$m" -md draft.gguf
expect 2 "^moevm run: unknown option --metrics" -- "$moevm" run -m "$m" -p x --metrics
# llama.cpp's escapes in run's prompt (and -f's text), unless --no-escape
expect 0 '"prompt":.*"a\\nb\\\\q"' -- "$moevm" run -m "$m" -p 'a\nb\q' -n 1 -o json
expect 0 '"prompt":.*"a\\\\nb"' -- "$moevm" run -m "$m" -p 'a\nb' -n 1 -o json --no-escape
# run -r (llama-completion's reverse prompt outside a conversation): the text stops where
# it ends in the string, here the last three bytes of the first 6 tokens' text
"$moevm" run -m "$m" -p "Once" -n 6 --temp 0 --ignore-eos -o json >"$tmp/r6.json" 2>/dev/null
"$moevm" run -m "$m" -p "Once" -n 40 --temp 0 --ignore-eos -o json >"$tmp/r40.json" 2>/dev/null
rev=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["text"][-3:], end="")' "$tmp/r6.json")
"$moevm" run -m "$m" -p "Once" -n 40 --temp 0 --ignore-eos -o json --no-escape -r "$rev" >"$tmp/rr.json" 2>/dev/null
check_py 'run -r: stopped at the reverse prompt' "$tmp/rr.json" '
import json, sys
r, six, whole = json.load(sys.stdin), json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
rev = six["text"][-3:]
assert r["stop"] == "reverse_prompt" and whole["text"].startswith(r["text"]), r
assert len(r["text"]) <= len(six["text"]) and rev in r["text"][-5:], (r["text"], six["text"])' "$tmp/r6.json" "$tmp/r40.json"
expect 2 '^moevm run: -r: an empty reverse prompt$' -- "$moevm" run -m "$m" -p x -r ''
# run -sp (control tokens as their texts) and --no-display-prompt (the text alone)
expect 0 '^<\|im_start\|>user hi' -- "$moevm" run -m "$m" -p '<|im_start|>user hi' -n 2 --temp 0 -sp
"$moevm" run -m "$m" -p "Once upon" -n 6 --temp 0 --ignore-eos --no-display-prompt >"$tmp/np.out" 2>/dev/null
"$moevm" run -m "$m" -p "Once upon" -n 6 --temp 0 --ignore-eos >"$tmp/wp.out" 2>/dev/null
check 'run --no-display-prompt: the text after the prompt' "[ \"Once upon\$(cat '$tmp/np.out')\" = \"\$(cat '$tmp/wp.out')\" ] && [ -s '$tmp/np.out' ]" "$tmp/np.out" "$tmp/wp.out"
# chat: llama-cli's -sys, the template's variables and source
printf 'Hi\n' | "$moevm" chat -m "$m" -n 2 -sys 'Be brief.' --reasoning off --verbose-prompt >/dev/null 2>"$tmp/t0.err"
check 'chat -sys --reasoning off: the system message, thinking off' "grep -q '^Be brief\.<|im_end|>' '$tmp/t0.err' && grep -q '^</think>' '$tmp/t0.err'" "$tmp/t0.err"
printf 'Hi\n' | "$moevm" chat -m "$m" -n 2 --chat-template '[{{ messages[0].content }}]' --verbose-prompt >/dev/null 2>"$tmp/t1.err"
check 'chat --chat-template SOURCE: that template' "grep -q '^prompt: \[Hi\]' '$tmp/t1.err'" "$tmp/t1.err"
expect 2 "^moevm chat: --chat-template llama3: one of llama.cpp's built-in formats" -- "$moevm" chat -m "$m" --chat-template llama3
expect 2 '^moevm serve: --reasoning maybe: expected on, off or auto$' -- "$moevm" serve -m "$m" --reasoning maybe
expect 2 '^moevm serve: --chat-template-kwargs: expected a JSON object' -- "$moevm" serve -m "$m" --chat-template-kwargs '[1]'
"$moevm" mkmodel --arch deepseek2 -o "$tmp/ds.gguf" >/dev/null
expect 0 '\(deepseek2\), 2 layers \(\+1 dense\), 8 experts top-2' -- "$moevm" run -m "$tmp/ds.gguf" -p "x" -n 4
# DeepSeek's vocabularies (pre-tokenizers deepseek-llm and deepseek-v3) add their BOS.
expect 0 'prefill 2 tokens' -- "$moevm" run -m "$tmp/ds.gguf" -p "x" -n 1
"$moevm" mkmodel --preset tiny-v3 --arch deepseek2 -o "$tmp/ds3.gguf" >/dev/null
expect 0 'prefill 2 tokens' -- "$moevm" run -m "$tmp/ds3.gguf" -p "x" -n 1
# Kimi K2's (pre-tokenizer kimi-k2) adds none.
"$moevm" mkmodel --preset tiny-k2 --arch deepseek2 -o "$tmp/k2.gguf" >/dev/null
expect 0 'prefill 1 token' -- "$moevm" run -m "$tmp/k2.gguf" -p "x" -n 1
# GLM-4.5's (pre-tokenizer glm4) adds none either; its NextN block is not a layer.
"$moevm" mkmodel --arch glm4moe -o "$tmp/glm.gguf" >/dev/null
expect 0 '\(glm4moe\), 2 layers \(\+1 dense, NextN not computed\), 8 experts top-2' -- "$moevm" run -m "$tmp/glm.gguf" -p "x" -n 4
expect 0 'prefill 1 token' -- "$moevm" run -m "$tmp/glm.gguf" -p "x" -n 1
# MiniMax-M2's (pre-tokenizer minimax-m2, o200k's regex) adds none either.
"$moevm" mkmodel --arch minimax-m2 -o "$tmp/mm2.gguf" >/dev/null
expect 0 '\(minimax-m2\), 2 layers, 8 experts top-2' -- "$moevm" run -m "$tmp/mm2.gguf" -p "x" -n 4
expect 0 'prefill 1 token' -- "$moevm" run -m "$tmp/mm2.gguf" -p "x" -n 1
# gpt-oss's (pre-tokenizer gpt-4o) neither; llama.cpp's MXFP4_MOE mix, experts MXFP4.
"$moevm" mkmodel --arch gpt-oss --type mxfp4 -o "$tmp/oss.gguf" >/dev/null
expect 0 '\(gpt-oss\), 3 layers, 8 experts top-2 of .* \(mxfp4\)' -- "$moevm" run -m "$tmp/oss.gguf" -p "x" -n 4
expect 0 'prefill 1 token' -- "$moevm" run -m "$tmp/oss.gguf" -p "x" -n 1
# tokenize: the ids and pieces (BOS by its name), or only the ids for run --tokens.
expect 0 "^ +[0-9]+ 'x'\$" -- "$moevm" tokenize -m "$tmp/ds3.gguf" -p "x"
expect 0 '^ +[0-9]+ <.*begin.*of.*sentence' -- "$moevm" tokenize -m "$tmp/ds3.gguf" -p "x"
expect 0 '^2 tokens for 1 bytes' -- "$moevm" tokenize -m "$tmp/ds3.gguf" -p "x"
expect 0 '^[0-9]+,[0-9]+$' -- "$moevm" tokenize -m "$tmp/ds3.gguf" -p "x" --ids
printf 'a\tb\377' >"$tmp/text"
expect 0 "'[\\]t'.*'[\\]xFF'" -- sh -c "'$moevm' tokenize -m '$tmp/ds3.gguf' -f - --no-bos <'$tmp/text' | tr '\n' ' '"
expect 2 'needs -m MODEL and one of -p TEXT or -f FILE' -- "$moevm" tokenize -m "$tmp/ds3.gguf"
expect 1 'nonexistent.gguf: cannot open' -- "$moevm" tokenize -m "$tmp/nonexistent.gguf" -p x
expect 1 'nonexistent.txt: cannot open' -- "$moevm" tokenize -m "$tmp/ds3.gguf" -f "$tmp/nonexistent.txt"
# grammars (llama.cpp's --grammar, --grammar-file, -j, -jf): run's text drawn at temperature
# 1 is a sentence of the grammar all the same, a JSON Schema's is JSON it validates, chat's
# replies each a sentence; a grammar or schema that does not parse, a file missing, or two
# of them, refused with one line before the model loads.
yes_no='root ::= ("yes" | "no") ", " [a-z]{2,8} "."'
for seed in 1 2 3; do
    "$moevm" run -m "$m" -p "Q:" -n 40 --temp 1 --top-k 0 -s $seed --grammar "$yes_no" >"$tmp/g.out" 2>/dev/null
    check "run --grammar (seed $seed): a sentence of it" "head -1 '$tmp/g.out' | grep -Eqx 'Q:(yes|no), [a-z]{2,8}\.'" "$tmp/g.out"
done
printf '%s\n' "$yes_no" >"$tmp/yes_no.gbnf"
"$moevm" run -m "$m" -p "Q:" -n 40 --temp 1 --grammar-file "$tmp/yes_no.gbnf" >"$tmp/g.out" 2>/dev/null
check 'run --grammar-file' "head -1 '$tmp/g.out' | grep -Eqx 'Q:(yes|no), [a-z]{2,8}\.'" "$tmp/g.out"
schema='{"type":"object","properties":{"n":{"type":"integer"},"ok":{"type":"boolean"}},"required":["n","ok"]}'
"$moevm" run -m "$m" -p "J:" -n 200 --temp 1 -s 4 -j "$schema" -o json >"$tmp/g.json" 2>/dev/null
check_py 'run -j: JSON that the schema validates' "$tmp/g.json" '
import json, sys
o = json.loads(json.load(sys.stdin)["text"])
assert set(o) == {"n", "ok"} and type(o["n"]) is int and type(o["ok"]) is bool, o'
printf 'Hi\nAgain\n' | "$moevm" chat -m "$m" --temp 1 --grammar 'root ::= "ok" [!?]' >"$tmp/g.out" 2>/dev/null
check 'chat --grammar: each reply a sentence' "[ \"\$(grep -c '^ok[!?]\$' '$tmp/g.out')\" = 2 ]" "$tmp/g.out"
expect 2 "^moevm run: --grammar: grammar: line 1, column 10: undefined rule 'foo'$" -- "$moevm" run -m "$m" -p x --grammar 'root ::= foo'
expect 2 '^moevm run: --grammar: grammar: line 2, column 1: expecting a rule name$' -- "$moevm" run -m "$tmp/nonexistent.gguf" -p x --grammar "$(printf 'root ::= "a"\n=')"
expect 2 'moevm run: .*nonexistent.gbnf' -- "$moevm" run -m "$m" -p x --grammar-file "$tmp/nonexistent.gbnf"
expect 2 '^moevm run: --grammar and -j: give one grammar or one JSON schema$' -- "$moevm" run -m "$m" -p x --grammar 'root ::= "a"' -j '{}'
expect 2 '^moevm chat: -j: json_schema: ' -- "$moevm" chat -m "$m" -j '{"type": '
expect 2 '^moevm chat: -jf: json_schema: ' -- sh -c "echo '{\"type\": \"frobnicate\"}' >'$tmp/bad.json' && '$moevm' chat -m '$m' -jf '$tmp/bad.json'"
# llama.cpp's further sampling options (their numbers: test_sampler, ref_sampler): a greedy
# run's text changed by a frequency penalty that forbids repeats, the same text again from
# the same seed under Mirostat and DRY (chat too), and bad values refused with one line.
"$moevm" run -m "$m" -p "Once" -n 40 --temp 0 --ignore-eos >"$tmp/s0.out" 2>/dev/null
"$moevm" run -m "$m" -p "Once" -n 40 --temp 0 --ignore-eos --frequency-penalty 100 >"$tmp/s1.out" 2>/dev/null
check 'run --frequency-penalty 100: another greedy text' "[ -s '$tmp/s1.out' ] && ! cmp -s '$tmp/s0.out' '$tmp/s1.out'" "$tmp/s1.out"
for opts in "--mirostat 2 --mirostat-ent 3" "--dry-multiplier 0.8 --dry-sequence-breaker none" "--dry-multiplier 2 --dry-sequence-breaker x --dry-penalty-last-n -1 --typical 0.9 --xtc-probability 0.5 --top-nsigma 2 --dynatemp-range 0.5"; do
    # shellcheck disable=SC2086 # opts is a list of options
    "$moevm" run -m "$m" -p "Once" -n 30 --temp 1 -s 5 $opts >"$tmp/s2.out" 2>/dev/null
    # shellcheck disable=SC2086
    "$moevm" run -m "$m" -p "Once" -n 30 --temp 1 -s 5 $opts >"$tmp/s3.out" 2>/dev/null
    check "run $opts: the seed's text again" "[ -s '$tmp/s2.out' ] && cmp -s '$tmp/s2.out' '$tmp/s3.out'" "$tmp/s3.out"
done
printf 'Hi\n' | "$moevm" chat -m "$m" --temp 1 -n 8 --dry-multiplier 1 --presence-penalty 1 >"$tmp/s4.out" 2>/dev/null
check 'chat with DRY and a presence penalty: a reply' "[ -s '$tmp/s4.out' ]" "$tmp/s4.out"
"$moevm" run -m "$m" -p "Once" -n 30 --temp 5 --top-k 1 -s 5 --samplers 'top_k;temp' >"$tmp/s5.out" 2>/dev/null
"$moevm" run -m "$m" -p "Once" -n 30 --temp 0 >"$tmp/s6.out" 2>/dev/null
check 'run --samplers top_k;temp with top-k 1: the greedy text' "[ -s '$tmp/s5.out' ] && cmp -s '$tmp/s5.out' '$tmp/s6.out'" "$tmp/s5.out"
"$moevm" run -m "$m" -p "Once" -n 30 --temp 5 --top-k 1 -s 5 --sampling-seq t >"$tmp/s7.out" 2>/dev/null
check 'run --sampling-seq t (no top-k): not the greedy text' "[ -s '$tmp/s7.out' ] && ! cmp -s '$tmp/s7.out' '$tmp/s6.out'" "$tmp/s7.out"
expect 2 "^moevm run: --samplers top_k;foo: 'foo' is not a sampler" -- "$moevm" run -m "$m" -p x --samplers 'top_k;foo'
expect 2 "^moevm chat: --sampling-seq ki: the sampler 'i' is not supported by moevm$" -- "$moevm" chat -m "$m" --sampling-seq ki
# the reasoning budget (llama.cpp's --reasoning-budget): DeepSeek-R1's prompt opens the
# reasoning, which ends after 2 tokens with the message, on stderr; run has no chat's reasoning
printf 'Hi\n' | "$moevm" chat -m "$tmp/ds.gguf" --temp 0 -n 30 --reasoning-budget 2 --reasoning-budget-message ' Enough.' >"$tmp/s8.out" 2>"$tmp/s8.err"
check 'chat --reasoning-budget 2: the reasoning ends with the message' "grep -q ' Enough\.\$' '$tmp/s8.err' && [ -s '$tmp/s8.out' ]" "$tmp/s8.err"
expect 2 '^moevm run: --reasoning-budget applies to a chat' -- "$moevm" run -m "$m" -p x --reasoning-budget 0
expect 2 '^moevm run: --mirostat 3: expected an integer in 0..2$' -- "$moevm" run -m "$m" -p x --mirostat 3
expect 2 '^moevm run: --typical 2: expected a number in 0..1$' -- "$moevm" run -m "$m" -p x --typical 2
expect 2 '^moevm chat: --dry-sequence-breaker: an empty sequence breaker$' -- "$moevm" chat -m "$m" --dry-sequence-breaker ''
expect 2 '^moevm serve: --dry-base 0.5: expected a number in 1..1e\+06$' -- "$moevm" serve -m "$m" --dry-base 0.5
# perplexity (llama-perplexity's; tests/ref/check_perplexity.py checks its numbers): the
# running value a chunk and the estimate; the same whether the chunks go several a pass or
# one in passes; a text too short for two chunks, no text, a bad -c or a sampling flag
# refused with one line.
for i in $(seq 1 300); do echo "On day $i the ship sailed over the grey sea, and the crew sang."; done >"$tmp/ppl.txt"
expect 0 '^\[1\][0-9.]+,\[2\][0-9.]+,\[3\][0-9.]+,$' -- "$moevm" perplexity -m "$tmp/llama.gguf" -f "$tmp/ppl.txt" -c 32 --chunks 3 -t 2
"$moevm" perplexity -m "$tmp/llama.gguf" -f "$tmp/ppl.txt" -c 32 -b 128 --chunks 6 >"$tmp/ppl.a" 2>/dev/null
"$moevm" perplexity -m "$tmp/llama.gguf" -f "$tmp/ppl.txt" -c 32 -b 8 --chunks 6 >"$tmp/ppl.b" 2>/dev/null
check 'perplexity: -b 128 (4 chunks a pass) and -b 8 (a chunk in 4 passes) agree' \
    'grep -Eq "^Final estimate: PPL = [0-9.]+ \+/- [0-9.]+$" "$tmp/ppl.a" && cmp -s "$tmp/ppl.a" "$tmp/ppl.b"' \
    "$tmp/ppl.a" "$tmp/ppl.b"
expect 1 'ppl-short.txt: [0-9]+ tokens; a context of 512 \(-c\) needs at least 1024$' -- sh -c "head -c 300 '$tmp/ppl.txt' >'$tmp/ppl-short.txt' && '$moevm' perplexity -m '$tmp/llama.gguf' -f '$tmp/ppl-short.txt'"
expect 2 'perplexity: needs -f TEXT_FILE' -- "$moevm" perplexity -m "$tmp/llama.gguf"
expect 1 'nonexistent.txt: cannot open' -- "$moevm" perplexity -m "$tmp/llama.gguf" -f "$tmp/nonexistent.txt"
expect 2 'perplexity: -c 0' -- "$moevm" perplexity -m "$tmp/llama.gguf" -f "$tmp/ppl.txt" -c 0
expect 2 'perplexity: -c 2: a chunk.s second half scores nothing under 3 tokens$' -- "$moevm" perplexity -m "$tmp/llama.gguf" -f "$tmp/ppl.txt" -c 2
expect 2 'perplexity: .*--temp' -- "$moevm" perplexity -m "$tmp/llama.gguf" -f "$tmp/ppl.txt" --temp 0
# the KL divergence: a base file written, the model against it (nothing apart but the
# file's 16-bit rounding: KLD 0, the same top token but where two nearly tie); a base file missing, of another vocabulary, cut short, or
# not one; --kl-divergence without a base
expect 0 '^Final estimate' -- "$moevm" perplexity -m "$tmp/llama.gguf" -f "$tmp/ppl.txt" -c 32 --chunks 8 --kl-divergence-base "$tmp/base.kld"
expect 0 'Same top p: (99\.[0-9]+|100\.000) ' -- "$moevm" perplexity -m "$tmp/llama.gguf" --kl-divergence-base "$tmp/base.kld" --kl-divergence
expect 0 'Mean    KLD: +-?0.000000 ' -- "$moevm" perplexity -m "$tmp/llama.gguf" --kl-divergence-base "$tmp/base.kld" --kl-divergence
expect 0 'left unread: the base.s tokens are scored' -- "$moevm" perplexity -m "$tmp/llama.gguf" -f "$tmp/ppl.txt" --kl-divergence-base "$tmp/base.kld" --kl-divergence
expect 2 'kl-divergence needs --kl-divergence-base FILE' -- "$moevm" perplexity -m "$tmp/llama.gguf" --kl-divergence
expect 1 'base.none: cannot open it' -- "$moevm" perplexity -m "$tmp/llama.gguf" --kl-divergence-base "$tmp/base.none" --kl-divergence
expect 1 'ppl.txt: not a file of log-probabilities' -- "$moevm" perplexity -m "$tmp/llama.gguf" --kl-divergence-base "$tmp/ppl.txt" --kl-divergence
head -c 100000 "$tmp/base.kld" >"$tmp/base.cut"
expect 1 'base.cut: cut short: fewer rows than its chunks score$' -- "$moevm" perplexity -m "$tmp/llama.gguf" --kl-divergence-base "$tmp/base.cut" --kl-divergence
"$moevm" mkmodel --arch llama --vocab 600 -o "$tmp/llama600.gguf" >/dev/null
expect 1 'base.kld: a vocabulary of 512 tokens; the model.s has 600 \(another model.s base\)$' -- "$moevm" perplexity -m "$tmp/llama600.gguf" --kl-divergence-base "$tmp/base.kld" --kl-divergence
expect 1 'nodir/base.kld: cannot create it' -- "$moevm" perplexity -m "$tmp/llama.gguf" -f "$tmp/ppl.txt" -c 32 --kl-divergence-base "$tmp/nodir/base.kld"
# a device that fills up: the base file removed, not left cut short
if [ -w /dev/full ]; then
    ln -sf /dev/full "$tmp/full.kld"
    "$moevm" perplexity -m "$tmp/llama.gguf" -f "$tmp/ppl.txt" -c 32 --chunks 8 --kl-divergence-base "$tmp/full.kld" >/dev/null 2>"$tmp/full.err"
    full_rc=$?
    check 'perplexity: a base file on a full device: one line, exit 1, the file removed' \
        "[ $full_rc -eq 1 ] && [ \$(grep -c '^moevm perplexity' '$tmp/full.err') -eq 1 ] && grep -q 'full.kld: cannot write it: No space left on device' '$tmp/full.err' && [ ! -e '$tmp/full.kld' ]" \
        "$tmp/full.err"
fi
expect 0 'decode 8 tokens .* tok/s \| expert accesses [1-9]' -- "$moevm" run -m "$m" -p "Once upon a time" -n 8
expect 0 'Once upon a time' -- "$moevm" run -m "$m" -p "Once upon a time" -n 4 --temp 0
"$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 >"$tmp/a" 2>/dev/null
"$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 -t 1 --batch 1 >"$tmp/b" 2>/dev/null
if cmp -s "$tmp/a" "$tmp/b" && [ -s "$tmp/a" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: greedy output differs with threads/batch" >&2; fi
# The prompt from a file or standard input (one final newline dropped, as llama.cpp's -f),
# and llama.cpp's spellings: the same text as the long names give.
same_text() { # same_text LABEL FILE command...: the command's stdout is FILE's
    local label=$1 want=$2
    shift 2
    if "$@" 2>/dev/null | cmp -s - "$want" && [ -s "$want" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $label: not the same text" >&2; fi
}
echo "It was the best" >"$tmp/prompt.txt"
same_text '-f FILE' "$tmp/a" "$moevm" run -m "$m" -f "$tmp/prompt.txt" -n 12 --temp 0
same_text '-f - (stdin)' "$tmp/a" sh -c "echo 'It was the best' | '$moevm' run -m '$m' -f - --n-predict 12 --temp=0"
"$moevm" run -m "$m" -p "It was" -n 12 --seed 7 --ctx 64 --batch 4 --top-k 20 --min-p 0.01 >"$tmp/long" 2>"$tmp/long.err"
same_text '-c/-s/-b/--n-predict' "$tmp/long" "$moevm" run -m "$m" -p "It was" --n-predict 12 -s 7 -c 64 -b 4 --top-k=20 --min-p=0.01
same_text '--ctx-size=/--batch-size=' "$tmp/long" "$moevm" run -m "$m" --prompt="It was" -n12 --seed=7 --ctx-size=64 --batch-size=4 --top-k 20 --min-p 0.01
expect 0 'context: 64 positions, batches of 4' -- cat "$tmp/long.err"
# the repetition penalty: 1 is off; 1.5 changes this greedy text (its tokens repeat)
same_text '--repeat-penalty 1' "$tmp/a" "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --repeat-penalty 1
"$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --repeat-penalty 1.5 --repeat-last-n 64 >"$tmp/rp" 2>/dev/null
if [ -s "$tmp/rp" ] && ! cmp -s "$tmp/a" "$tmp/rp"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: --repeat-penalty 1.5 left the greedy text as it was" >&2; fi
same_text '--repeat-last-n 0' "$tmp/a" "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --repeat-penalty 1.5 --repeat-last-n 0
expect 2 'run: --repeat-penalty 0: expected a number' -- "$moevm" run -m "$m" -p x --repeat-penalty 0
# llama.cpp's GPU options: -ngl is accepted and said to mean nothing more, once; --n-cpu-moe
# is the budget of all but N MoE layers' experts (a third of a three-layer model's 24
# pages of 64 KiB is 8 of them), and not with --gpu-budget; N >= the layers (99, as
# llama.cpp users type it) keeps no expert on the GPU: one line says so, the CPU computes,
# reading every expert at its home, to the same text; a GPU backend asked for is refused.
expect 0 '^1$' -- sh -c "'$moevm' run -m '$m' -p x -n 1 -ngl 99 --n-gpu-layers=0 2>&1 >/dev/null | grep -c 'ngl: accepted and ignored'"
"$moevm" mkmodel --arch qwen3moe --layers 3 -o "$tmp/l3.gguf" >/dev/null
budget_line() { MOEVM_PAGE_SIZE=64K "$moevm" run -m "$tmp/l3.gguf" -p x -n 1 "$@" 2>&1 | grep -o 'budget [0-9]* pages of [0-9]* KiB'; }
if [ "$(budget_line --n-cpu-moe 1)" = "budget 16 pages of 64 KiB" ] && [ "$(budget_line --gpu-budget 1M)" = "$(budget_line --n-cpu-moe 1)" ] &&
   [ "$(budget_line -ncmoe 2)" = "$(budget_line --gpu-budget 512K)" ]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL: --n-cpu-moe's budget: '$(budget_line --n-cpu-moe 1)' for 1, '$(budget_line -ncmoe 2)' for 2" >&2
fi
expect 2 'run: give --gpu-budget or --n-cpu-moe, not both' -- "$moevm" run -m "$m" -p x --gpu-budget 50% --n-cpu-moe 1
expect 0 '^moevm run: --n-cpu-moe 2: the experts of all 2 MoE layers stay on the CPU, so no expert budget' -- "$moevm" run -m "$m" -p x -n 1 --n-cpu-moe 2
expect 0 'space: host backend, experts read at their homes \(no budget\)' -- env MOEVM_PAGE_SIZE=64K "$moevm" run -m "$m" -p x -n 1 -ncmoe 99
expect 1 'expert space: page size 8.0 TiB: each expert takes whole pages, and [0-9]+ x 8.0 TiB exceed the 64.0 TiB a space can address' -- env MOEVM_PAGE_SIZE=8T "$moevm" run -m "$m" -p x -n 1 --gpu-budget 50%
same_text '--n-cpu-moe 99' "$tmp/a" "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --n-cpu-moe 99 -ngl 99
# llama.cpp's other flags (tools/cli.c's llama_flags): --cpu-moe and -cmoe are --n-cpu-moe
# for every layer; -fa, --no-mmap and --mlock are accepted with a note (-fa's value
# checked); -ctk and -ctv set the KV cache's one type (keys and values alike, so the two
# must agree); -ot, -ts, -sm and -mg are refused, each with the moevm way to say it.
# Before, getopt read "-fa on" as -f a and "-ot x" as -o t.
same_text '--cpu-moe' "$tmp/a" "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --cpu-moe -fa on --no-mmap --mlock
expect 0 '^moevm run: --cpu-moe: the experts of all 2 MoE layers stay on the CPU' -- "$moevm" run -m "$m" -p x -n 1 -cmoe
expect 0 '^moevm run: -fa: llama.cpp.s, accepted and ignored: moevm picks its attention' -- "$moevm" run -m "$m" -p x -n 1 -fa auto
expect 2 '^moevm run: -fa yes: expected on, off or auto' -- "$moevm" run -m "$m" -p x -n 1 -fa yes
expect 2 '^moevm run: -ot: llama.cpp.s, not taken: moevm places the weights itself.*--cpu-moe' -- "$moevm" run -m "$m" -p x -ot 'ffn_.*_exps=CPU'
expect 0 '^moevm run: -ctk: llama.cpp.s, taken for keys and values alike \(moevm.s --kv-type\)' -- "$moevm" run -m "$m" -p x -n 1 -ctk q8_0 -ctv q8_0
expect 0 'KV cache [0-9.]+ MiB \(q8_0\)' -- "$moevm" run -m "$m" -p x -n 1 --cache-type-v q8_0
expect 2 '^moevm run: -ctv f16: moevm.s KV cache keeps keys and values in one type, and q8_0 was given before' -- "$moevm" run -m "$m" -p x -ctk q8_0 -ctv f16
expect 2 '^moevm chat: --cache-type-k q3_K: expected '"$KV_TYPES"'$' -- "$moevm" chat -m "$m" --cache-type-k q3_K
expect 2 '^moevm chat: -mg: llama.cpp.s, not taken: the GPU is chosen with MOEVM_DEVICE' -- "$moevm" chat -m "$m" -mg 1
expect 2 '^moevm bench: -ts: llama.cpp.s, not taken: moevm computes on one GPU a process' -- "$moevm" bench -m "$m" -ts 1,1
expect 0 '\| host \| 1 \| home \| own \| tg2 \| ' -- "$moevm" bench -m "$m" --n-prompt 0 --n-gen 2 --repetitions 1 --threads 1 --cpu-moe
expect 2 'run: give -p or -f, not both' -- "$moevm" run -m "$m" -p x -f "$tmp/prompt.txt"
expect 1 '^moevm run: .*nope.txt: cannot open it' -- "$moevm" run -m "$m" -f "$tmp/nope.txt"
# A K-quant mix (llama.cpp's Q4_K_M: Q6_K down in some layers) runs, on the host and below
# on the device.
"$moevm" mkmodel --type q4_K_M --embd 256 --expert-ff 256 -o "$tmp/k.gguf" >/dev/null
expect 0 'of 124.5 KiB \(q4_K, down q4_K/q6_K(, tiled)?\)' -- "$moevm" run -m "$tmp/k.gguf" -p "It was" -n 4
# The CPU's expert tiles (kernels/cpu/kernels.h): taken on a CPU with the VNNI or the AVX2
# kernels (Q4_K and Q6_K both have them), never with MOEVM_EXPERT_TILES=off; the same logits
# either way, bit for bit.
expect 0 'q4_K/q6_K\)' -- env MOEVM_EXPERT_TILES=off "$moevm" run -m "$tmp/k.gguf" \
    -p "It was the best" -n 6 --temp 0 --logits-out "$tmp/k_off.logits"
cpu=$("$moevm" info 2>&1 | sed -n 's/^cpu: *\([a-z0-9]*\) kernels.*/\1/p')
case $cpu in avx512vnni | avx2) tiled=', tiled\)' ;; *) tiled='q6_K\)' ;; esac
expect 0 "$tiled" -- "$moevm" run -m "$tmp/k.gguf" -p "It was the best" -n 6 --temp 0 \
    --logits-out "$tmp/k_on.logits"
same_text 'tiled and portable experts: the same logits' "$tmp/k_off.logits" cat "$tmp/k_on.logits"
expect 1 'MOEVM_EXPERT_TILES=yes: not valid \(expected one of auto\|off\|all\)' -- env MOEVM_EXPERT_TILES=yes "$moevm" run -m "$tmp/k.gguf" -p x -n 1
# Expert channels that are not whole super-blocks (Qwen2-MoE's 1408): the down experts fall
# back to q5_0, and to q8_0 where the mix asks for q6_K, as llama-quantize writes them.
"$moevm" mkmodel --arch qwen2moe --type q4_K_M --embd 256 --expert-ff 96 -o "$tmp/kq.gguf" >/dev/null
expect 0 '\(q4_K, down q8_0/q5_0\)' -- "$moevm" run -m "$tmp/kq.gguf" -p "It was" -n 4 \
    --logits-out "$tmp/kq_off.logits"
# MOEVM_EXPERT_TILES=all tiles Q8_0 too: the q8_0 layer's experts where the CPU has the
# kernels (the VNNI level; the q5_0 one's never), the same logits
if [ "$cpu" = avx512vnni ]; then tiled_kq='q5_0, tiled in 1 of 2 layers\)'; else tiled_kq='q5_0\)'; fi
expect 0 "\\(q4_K, down q8_0/$tiled_kq" -- env MOEVM_EXPERT_TILES=all "$moevm" run \
    -m "$tmp/kq.gguf" -p "It was" -n 4 --logits-out "$tmp/kq_all.logits"
same_text 'q8_0 tiles and portable experts: the same logits' "$tmp/kq_off.logits" cat "$tmp/kq_all.logits"
# IQ4_XS falls back to IQ4_NL there, as llama-quantize's does.
"$moevm" mkmodel --arch qwen2moe --type iq4_xs --embd 256 --expert-ff 96 -o "$tmp/xq.gguf" >/dev/null
expect 0 '\(iq4_xs, down iq4_nl\)' -- "$moevm" run -m "$tmp/xq.gguf" -p "It was" -n 4
# The lattice-grid types too; iq1_m is a type's own name, not q4_K_M-style mix syntax.
"$moevm" mkmodel --arch qwen2moe --type iq2_xxs --embd 256 --expert-ff 96 \
    -o "$tmp/i2.gguf" >/dev/null
expect 0 '\(iq2_xxs, down iq4_nl\)' -- "$moevm" run -m "$tmp/i2.gguf" -p "It was" -n 4
expect 0 'tiny llama, 2 layers .*iq1_m' -- "$moevm" mkmodel --type IQ1_M --embd 256 \
    --expert-ff 256 -o "$tmp/i1.gguf"
expect 0 'of .* KiB \(iq1_m\)' -- "$moevm" run -m "$tmp/i1.gguf" -p "It was" -n 4
# Where no driver loads, auto computes on the CPU. On a GPU machine (here the fake driver)
# auto computes on the device, as MOEVM_BACKEND=cuda does (here its kernels emulated by
# the plugin), to the same greedy text, also in rounds without HOST_NUMA; a device whose
# kernels do not load is one line.
expect 0 'space: host backend' -- env MOEVM_BACKEND=auto MOEVM_CUDA_LIBRARY=/nonexistent/libcuda.so.1 "$moevm" run -m "$m" -p "x" -n 2
if [ -n "$fake_driver" ]; then
    # a device where the kernels do not load (the fake without its plugin): the CPU
    expect 0 'space: host backend' -- env MOEVM_BACKEND=auto MOEVM_CUDA_LIBRARY="$fake_driver" "$moevm" run -m "$m" -p "x" -n 2
    if [ -n "$fake_kernels" ]; then
        expect 0 'space: cuda backend.*computing on' -- env MOEVM_BACKEND=auto MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$m" -p "x" -n 2
        expect 0 'space: cuda backend.*computing on' -- env MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$m" -p "x" -n 2
        gpu_env="MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY=$fake_driver FAKECUDA_KERNELS=$fake_kernels"
        expect 1 'a q4_0 KV cache is read by the CPU backend only; the GPU.s attention reads f16, f32 or q8_0' -- env $gpu_env "$moevm" run -m "$m" -p x -n 1 -ctk q4_0 -ctv q4_0
        # a Q8_0 cache on the device: the CPU's greedy text (the same blocks); test_forward_gpu
        # has the refusals of latent rows in Q8_0 (a latent of whole blocks) on the device
        "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --kv-type q8_0 >"$tmp/kq.cpu" 2>/dev/null
        env $gpu_env "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 -ctk q8_0 -ctv q8_0 >"$tmp/kq.gpu" 2>/dev/null
        if cmp -s "$tmp/kq.cpu" "$tmp/kq.gpu" && [ -s "$tmp/kq.cpu" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: greedy output over a q8_0 KV cache differs on the device" >&2; fi
        # the spin in effect is said at info (auto: 0 on 2 CPUs, 2000 us from 4 on the cuda backend)
        expect 0 'backend cuda, moves spin 250 us before sleeping' -- env MOEVM_LOG=info MOEVM_MOVE_SPIN=250 MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$m" -p "x" -n 2 --gpu-budget 50%
        # the kernels' load times at info, those of no weight type at open and each type's
        # at its first launch (f32's module is q8_0's too); a slow one (the driver compiling their PTX at a first run:
        # six modules of 0.9 s here) is said by default, with the cache that spares later
        # runs
        expect 0 'device kernels of no weight type loaded in [0-9.]+ s' -- env MOEVM_LOG=info $gpu_env "$moevm" run -m "$m" -p "x" -n 1
        expect 0 'device kernels of weight type f32 and q8_0 loaded in [0-9.]+ s' -- env MOEVM_LOG=info $gpu_env "$moevm" run -m "$m" -p "x" -n 1
        expect 0 'the driver took [5-9]\.[0-9] s to compile the device kernels of no weight type for this GPU .*CUDA_CACHE_PATH' -- env FAKECUDA_MODULE_DELAY_MS=900 $gpu_env "$moevm" run -m "$m" -p "x" -n 1
        expect 1 'MOEVM_MOVE_SPIN=fast: not valid \(expected an integer in 0..100000, or auto\)' -- env MOEVM_MOVE_SPIN=fast "$moevm" run -m "$m" -p "x" -n 2
        env MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 >"$tmp/c" 2>/dev/null
        if cmp -s "$tmp/a" "$tmp/c"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: greedy output differs on the device" >&2; fi
        # perplexity on the device (two chunks a pass, half the experts resident): the CPU's
        # estimate, to the kernels' rounding
        "$moevm" perplexity -m "$m" -f "$tmp/ppl.txt" -c 16 -b 32 --chunks 4 >"$tmp/ppl.cpu" 2>/dev/null
        env $gpu_env "$moevm" perplexity -m "$m" -f "$tmp/ppl.txt" -c 16 -b 32 --chunks 4 --gpu-budget 50% >"$tmp/ppl.gpu" 2>/dev/null
        check_py 'perplexity on the device against the CPU' "$tmp/ppl.gpu" '
import re, sys
est = lambda text: float(re.search(r"PPL = ([0-9.]+) ", text).group(1))
cpu, gpu = est(open(sys.argv[1]).read()), est(sys.stdin.read())
sys.exit(0 if abs(gpu - cpu) <= 1e-3 * cpu else f"{gpu} against {cpu}")' "$tmp/ppl.cpu"
        # decode routed on the device: the log says how many tokens, and where the host's
        # time a token went (what the device may wait for between tokens); copies in order
        # (MOEVM_DETERMINISTIC), so that the token from which every expert is resident does
        # not hang on the worker's share of a loaded CI machine (7 tokens in one run); packed
        # (the budget holds them all: MOEVM_PACK) they are all resident from the first
        expect 0 'decode: 1[012] tokens routed on the device; CUDA graphs: 1 built [(]0 programmatic edges[)], [0-9]+ kernel nodes updated; host time a token: [0-9]+ us queueing, [0-9]+ us replaying the policies [(]the token before: while the device computes, or at a budget before this one is queued[)], [0-9]+ us waiting for the logits, [0-9]+ us between tokens' -- env MOEVM_DETERMINISTIC=on MOEVM_LOG=info MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0
        # MOEVM_PDL=on on the fake's compute capability 9.0: the graph's kernels follow each
        # other by programmatic edges (the fake refuses one into a kernel whose PTX does not
        # wait: ptx_pdl.c), and the text is the same
        expect 0 'CUDA graphs: 1 built [(][1-9][0-9]* programmatic edges[)]' -- env MOEVM_PDL=on MOEVM_DETERMINISTIC=on MOEVM_LOG=info MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0
        env MOEVM_PDL=on MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 >"$tmp/c" 2>/dev/null
        if cmp -s "$tmp/a" "$tmp/c"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: greedy output differs with MOEVM_PDL=on" >&2; fi
        # at a budget the host routes each step: where a token's host time goes, a sync a
        # layer and one for the logits (2 layers), and the space's share; deterministic, as
        # a copy still in flight can split a step into two rounds, a sync more (seen once in
        # CI's ASan build, under load: docs/perf/tests.md, session 114)
        expect 0 'decode: 1[012] tokens routed by the host; host time a token: [0-9]+ us queueing kernels and copies, [0-9]+ us observing the step before, [0-9]+ us waiting for the device, [0-9]+ us routing and the policies, [0-9]+ us asking for residency, [0-9]+ us waiting for copies, [0-9]+ us the CPU.s experts [(]the cost model: 0 us, its CPU times now scaled by 1.00[)] [(]3.0 syncs[)]; the space a token: [0-9]+ us evicting on this thread [(]in the asking and the policies[)], [0-9]+ us of the migration worker.s mappings, [0-9.]+ MiB copied; expert accesses a token: [0-9.]+, [0-9.]+ hits, 0.0 read in place' -- env MOEVM_LOG=info MOEVM_DETERMINISTIC=on MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --gpu-budget 50%
        # the same run's prompt, one batch of its tokens, split apart (and the fields the
        # GPU scripts read from it)
        if grep -Eq 'prompt: 1 batches of [0-9]+\.0 tokens routed by the host; host time a batch: [0-9]+ us queueing kernels and copies, .* [(]3\.0 syncs[)]; the space a batch: .*; expert accesses a batch: [1-9]' "$tmp/out" &&
           [[ $(source "$(dirname "$0")/../bench/gpu/llamacpp_lib.sh" && prefill_laps "$tmp/out") =~ ^batches=1\ tokens=[0-9]+\.0\ queue_us=[0-9]+\ .*\ syncs=3\.0\ .*\ in_place=0\.0$ ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: the prompt's laps" >&2; grep prompt: "$tmp/out" >&2; fi
        # a prompt in batches of 4 at 100%: the first waits for the packed space's upload of
        # every expert, and all route on the device (forward_cuda_prompt.c); the same text as
        # routed by the host, their host time said at info (and the fields the GPU scripts
        # read from it)
        env MOEVM_LOG=info MOEVM_DETERMINISTIC=on $gpu_env "$moevm" run -m "$m" -p "It was the best of times, it was the worst of times" -n 4 --temp 0 --batch 4 >"$tmp/pd" 2>"$tmp/pd.err"
        env MOEVM_PROMPT_ROUTING=host MOEVM_DETERMINISTIC=on $gpu_env "$moevm" run -m "$m" -p "It was the best of times, it was the worst of times" -n 4 --temp 0 --batch 4 >"$tmp/ph" 2>/dev/null
        if [[ -s $tmp/pd ]] && cmp -s "$tmp/pd" "$tmp/ph" &&
           [[ $(source "$(dirname "$0")/../bench/gpu/llamacpp_lib.sh" && prefill_routed "$tmp/pd.err") =~ ^batches=[1-9][0-9]*\ tokens=4\.0\ queue_us=[0-9]+\ replay_us=[0-9]+\ wait_us=[0-9]+$ ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: a prompt routed on the device" >&2; grep prompt: "$tmp/pd.err" >&2; fi
        # at a budget routed on the device (MOEVM_BUDGET_ROUTING=in-place): the same text, and
        # its accesses' split said at info; with an assign module that may put experts on the
        # CPU, host routing, saying why
        env MOEVM_LOG=info MOEVM_BUDGET_ROUTING=in-place MOEVM_DETERMINISTIC=on $gpu_env "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --gpu-budget 50% >"$tmp/br" 2>"$tmp/br.err"
        if cmp -s "$tmp/a" "$tmp/br" && grep -Eq 'decode: 1[012] tokens routed on the device' "$tmp/br.err" &&
           grep -Eq 'decode at a budget routed on the device: [0-9]+ expert accesses, [1-9][0-9]* hits, [1-9][0-9]* read in place, 0 on the CPU, [0-9]+ admitted' "$tmp/br.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: MOEVM_BUDGET_ROUTING=in-place" >&2; cat "$tmp/br.err" >&2; fi
        # read-through: the same text, the misses kept as read (none admitted)
        env MOEVM_LOG=info MOEVM_BUDGET_ROUTING=read-through MOEVM_DETERMINISTIC=on $gpu_env "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --gpu-budget 50% >"$tmp/br" 2>"$tmp/br.err"
        if cmp -s "$tmp/a" "$tmp/br" && grep -Eq 'decode at a budget routed on the device: [0-9]+ expert accesses, [1-9][0-9]* hits, [1-9][0-9]* read in place, 0 on the CPU, 0 admitted, [0-9]+ prefetched, [1-9][0-9]* kept as read [(]read-through[)]' "$tmp/br.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: MOEVM_BUDGET_ROUTING=read-through" >&2; cat "$tmp/br.err" >&2; fi
        # its replays run while the next token computes, unless a module evicts as it observes
        if grep -q "read-through: a pool of [0-9]* slabs at most; a token's replay runs while the next one computes" "$tmp/br.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: read-through's late replay" >&2; fi
        expect 0 "read-through: a pool of [0-9]+ slabs at most; a token's replay runs before the next one is queued [(]a config module" -- env MOEVM_LOG=info MOEVM_BUDGET_ROUTING=read-through MOEVM_CONFIG=fixedpoint $gpu_env "$moevm" run -m "$m" -p "x" -n 3 --gpu-budget 50%
        # and the RESULT decode_device fields the GPU scripts read from it
        routed=$(source "$(dirname "$0")/../bench/gpu/llamacpp_lib.sh" && decode_routed "$tmp/br.err")
        if [[ $routed =~ ^tokens=[0-9]+\ queue_us=.*\ kept=[1-9][0-9]*\ slab_reads=[0-9]+\ before_us=[0-9]+\ replay_us=[0-9]+\ pool_us=[0-9]+$ ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: decode_routed: $routed" >&2; fi
        expect 0 'MOEVM_BUDGET_ROUTING=read-through: the budget [(]16 pages[)] holds every expert: they are all loaded, then pinned: misses read in place only' -- env MOEVM_LOG=info MOEVM_BUDGET_ROUTING=read-through $gpu_env "$moevm" run -m "$m" -p "x" -n 2 --gpu-budget 100%
        expect 0 'MOEVM_BUDGET_ROUTING=in-place: decode routed by the host, as the assign module is not gpu' -- env MOEVM_LOG=info MOEVM_BUDGET_ROUTING=in-place MOEVM_ASSIGN=greedy $gpu_env "$moevm" run -m "$m" -p "x" -n 2 --gpu-budget 50%
        # the CPU's share beside a token routed on the device (MOEVM_DEVICE_CPU), with a cost
        # model whose CPU wins: the same text, misses on the CPU; without budget routing, a
        # warning that it takes none
        echo '{"cpu_mem_bw": 1000, "cpu_flops": 100000, "cpu_setup": 1, "zerocopy_bw": 0.01}' >"$tmp/cpu-wins.json"
        env MOEVM_LOG=info MOEVM_BUDGET_ROUTING=read-through MOEVM_DEVICE_CPU=on MOEVM_COST="$tmp/cpu-wins.json" MOEVM_DETERMINISTIC=on $gpu_env "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --gpu-budget 50% >"$tmp/dc" 2>"$tmp/dc.err"
        if cmp -s "$tmp/a" "$tmp/dc" && grep -Eq 'decode at a budget routed on the device: [0-9]+ expert accesses, [0-9]+ hits, 0 read in place, [1-9][0-9]* on the CPU' "$tmp/dc.err" &&
           grep -Eq 'MOEVM_DEVICE_CPU: [0-9]+ tokens, [1-9][0-9]* experts on the CPU' "$tmp/dc.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: MOEVM_DEVICE_CPU=on" >&2; cat "$tmp/dc.err" >&2; fi
        expect 0 'MOEVM_DEVICE_CPU=on: no decode is routed on the device at a budget' -- env MOEVM_DEVICE_CPU=on $gpu_env "$moevm" run -m "$m" -p "x" -n 2 --gpu-budget 50%
        # --n-cpu-moe on a GPU: 1 of the 2 layers, half the experts' pages on the device, to
        # the same text; 99, none there: the CPU computes every expert at its home, the GPU
        # the rest (llama.cpp's -ngl 99 --cpu-moe), to the same text, nothing moved
        gpu="MOEVM_BACKEND=auto MOEVM_CUDA_LIBRARY=$fake_driver FAKECUDA_KERNELS=$fake_kernels"
        env $gpu "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --n-cpu-moe 1 >"$tmp/cm1" 2>"$tmp/cm1.err"
        if cmp -s "$tmp/a" "$tmp/cm1" && grep -q 'space: cuda backend, budget 8 pages of 2048 KiB' "$tmp/cm1.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: --n-cpu-moe 1 on the device" >&2; cat "$tmp/cm1.err" >&2; fi
        env $gpu "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --n-cpu-moe 99 >"$tmp/cm99" 2>"$tmp/cm99.err"
        if cmp -s "$tmp/a" "$tmp/cm99" && grep -Eq 'space: cuda backend, every expert computed on [0-9]+ CPU threads at its home; computing on fakecuda' "$tmp/cm99.err" &&
           grep -Eq 'expert accesses [1-9][0-9]*, all read at their homes$' "$tmp/cm99.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: --n-cpu-moe 99 on the device" >&2; cat "$tmp/cm99.err" >&2; fi
        # and with MOEVM_DEVICE_CPU=on, decode routed on the device, every choice the CPU's
        env $gpu MOEVM_DEVICE_CPU=on MOEVM_LOG=info "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --n-cpu-moe 99 >"$tmp/cm99d" 2>"$tmp/cm99d.err"
        if cmp -s "$tmp/a" "$tmp/cm99d" && grep -Eq 'decode: 1[012] tokens routed on the device' "$tmp/cm99d.err" &&
           grep -Eq 'MOEVM_DEVICE_CPU: 1[012] tokens, [1-9][0-9]* experts on the CPU' "$tmp/cm99d.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: --n-cpu-moe 99 with MOEVM_DEVICE_CPU=on" >&2; cat "$tmp/cm99d.err" >&2; fi
        expect 1 'assign greedy: with --n-cpu-moe at least the layers the CPU computes every expert at its home and nothing moves, so there is nothing to place' -- env $gpu "$moevm" run -m "$m" -p x -n 2 --n-cpu-moe 99 --assign greedy
        # The K-quant mixes, the Qwen2-MoE fallbacks among them (IQ4_XS's too), and gpt-oss
        # (windows, sinks, biases, MXFP4 experts; a run longer than its window) on the
        # device: the CPU's text.
        for km in k kq xq oss; do
            "$moevm" run -m "$tmp/$km.gguf" -p "It was" -n 6 --temp 0 >"$tmp/$km.host" 2>/dev/null
            env MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$tmp/$km.gguf" -p "It was" -n 6 --temp 0 >"$tmp/$km.cuda" 2>/dev/null
            if cmp -s "$tmp/$km.host" "$tmp/$km.cuda" && [ -s "$tmp/$km.host" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: greedy output of $km.gguf differs on the device" >&2; fi
        done
        # A device smaller than the experts, whose 8 MiB output matrix and context the old
        # automatic budget (90% of the free memory) left no room for: the budget now leaves
        # it (with the tensor-core path's scratch, 19 MiB), the experts overflow it (9 of
        # their 32 pages), and the text is the CPU's; a
        # budget that leaves no room for the context says so, and a context larger than
        # the device is refused at load.
        "$moevm" mkmodel --arch qwen3moe --embd 256 --expert-ff 512 --experts 16 --layers 2 --vocab 8192 -o "$tmp/gv.gguf" >/dev/null
        "$moevm" run -m "$tmp/gv.gguf" -p "It was the best" -n 12 --temp 0 >"$tmp/gv.host" 2>/dev/null
        small_gpu="MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY=$fake_driver FAKECUDA_KERNELS=$fake_kernels FAKECUDA_MEM=40M"
        env $small_gpu "$moevm" run -m "$tmp/gv.gguf" -p "It was the best" -n 12 --temp 0 >"$tmp/gv.cuda" 2>"$tmp/gv.err"
        if cmp -s "$tmp/gv.host" "$tmp/gv.cuda" && [ -s "$tmp/gv.host" ] && grep -Eq 'budget ([5-9]|1[0-9]|2[0-9]) pages of 2048 KiB \(auto: [1-9][0-9]* MiB of the device kept for the context\)' "$tmp/gv.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: an automatic budget on a device smaller than the experts" >&2; cat "$tmp/gv.err" >&2; fi
        expect 1 'device context of [0-9]+ positions .*OUT_OF_MEMORY.*the experts. budget holds 36 MiB' -- env $small_gpu "$moevm" run -m "$tmp/gv.gguf" -p "It was the best" -n 12 --temp 0 --gpu-budget 36M
        expect 1 'the device has 40.0 MiB free and .* needed beside the expert space' -- env $small_gpu "$moevm" run -m "$tmp/gv.gguf" -p "x" -n 2 --ctx 100000
        # ... unless the GPU was auto's choice: then the CPU computes, with a warning.
        env ${small_gpu/MOEVM_BACKEND=cuda/MOEVM_BACKEND=auto} "$moevm" run -m "$tmp/gv.gguf" -p "It was the best" -n 12 --temp 0 --ctx 100000 >"$tmp/gv.auto" 2>"$tmp/gv.auto.err"
        if cmp -s "$tmp/gv.host" "$tmp/gv.auto" && grep -q 'computing on the CPU: the GPU cannot take this model: .*the device has 40.0 MiB free' "$tmp/gv.auto.err" && grep -q 'space: host backend' "$tmp/gv.auto.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: auto on a GPU too small for the context" >&2; cat "$tmp/gv.auto.err" >&2; fi
        # Without HOST_NUMA VMM, a budget below a step's experts: the steps run in rounds.
        env FAKECUDA_HOST_NUMA=0 FAKECUDA_GRANULARITY=4096 MOEVM_PAGE_SIZE=4K MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --gpu-budget 10% >"$tmp/d" 2>"$tmp/d.err"
        if cmp -s "$tmp/a" "$tmp/d" && grep -Eq '\(hit [0-9.]+%, [1-9][0-9]* extra rounds' "$tmp/d.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: the device without HOST_NUMA, in rounds" >&2; cat "$tmp/d.err" >&2; fi
        # The assign module runs some experts on the CPU threads beside the GPU: same text.
        env FAKECUDA_GRANULARITY=4096 MOEVM_PAGE_SIZE=4K MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --gpu-budget 30% --assign greedy >"$tmp/g" 2>"$tmp/g.err"
        if cmp -s "$tmp/a" "$tmp/g" && grep -Eq 'assign greedy: [1-9][0-9]* on CPU' "$tmp/g.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: --assign greedy on the device" >&2; cat "$tmp/g.err" >&2; fi
        # MOEVM_GPU_PROFILE: the same text, and a table of where the device pass's time went.
        env MOEVM_GPU_PROFILE=on FAKECUDA_GRANULARITY=4096 MOEVM_PAGE_SIZE=4K MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --gpu-budget 30% --assign greedy >"$tmp/p" 2>"$tmp/p.err"
        if cmp -s "$tmp/a" "$tmp/p" && grep -Eq '^gpu profile: [0-9.]+ ms from the first operation to the last sync, the device busy [0-9.]+ ms \([0-9]+%\); [1-9][0-9]* syncs' "$tmp/p.err" &&
           grep -Eq '^  mvm_g_expert_up +[1-9][0-9]* +[0-9.]+ +[0-9.]+ +[0-9.]+%$' "$tmp/p.err" && grep -Eq '^  copy device -> host +[1-9][0-9]* ' "$tmp/p.err" &&
           ! grep -q 'gpu profile' "$tmp/g.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: MOEVM_GPU_PROFILE=on" >&2; cat "$tmp/p.err" >&2; fi
        # Experts read in place: at their homes' device addresses with the homes unmapped
        # (the default), the same text; refused, saying why, where the driver gives the
        # pinned homes no device address.
        env FAKECUDA_GRANULARITY=4096 MOEVM_PAGE_SIZE=4K MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --gpu-budget 30% --assign 'gpu{zerocopy=1}' >"$tmp/z" 2>"$tmp/z.err"
        if cmp -s "$tmp/a" "$tmp/z"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: gpu{zerocopy=1} with the homes unmapped" >&2; cat "$tmp/z.err" >&2; fi
        expect 1 'assign gpu zerocopy=1 reads experts in place at their host homes, which this device cannot read: the driver gave them no device address' -- env FAKECUDA_FAIL=cuMemHostGetDevicePointer:1 FAKECUDA_GRANULARITY=4096 MOEVM_PAGE_SIZE=4K MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$m" -p "It was" -n 4 --gpu-budget 30% --assign 'gpu{zerocopy=1}'
        expect 0 'prefill' -- env MOEVM_HOME_MAP=on FAKECUDA_GRANULARITY=4096 MOEVM_PAGE_SIZE=4K MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" FAKECUDA_KERNELS="$fake_kernels" "$moevm" run -m "$m" -p "It was" -n 4 --gpu-budget 30% --assign 'gpu{zerocopy=1}'
        # The cost model steers the assign module: a CPU too slow to matter, then one that
        # beats any copy. calibrate on a device backend measures the copies too.
        dev="env FAKECUDA_GRANULARITY=4096 MOEVM_PAGE_SIZE=4K MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY=$fake_driver FAKECUDA_KERNELS=$fake_kernels"
        echo '{"name": "slow cpu", "cpu_flops": 0.001, "cpu_mem_bw": 0.001}' >"$tmp/slow.json"
        echo '{"name": "fast cpu", "cpu_flops": 1e9, "cpu_mem_bw": 1e9, "cpu_setup": 0.001, "pcie_bw": 0.001}' >"$tmp/fast.json"
        # SMoE's speculative pass on the device: the same text, forecasts named.
        $dev "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --gpu-budget 30% --predict 'speculative{alpha=0.1}' >"$tmp/ds" 2>"$tmp/ds.err"
        if cmp -s "$tmp/a" "$tmp/ds" && grep -Eq 'predict speculative: [0-9]+ prefetched, [0-9]+ used, [0-9]+ in time(, [0-9]+ cut at the router)?, [0-9]+% of [1-9][0-9]* named used' "$tmp/ds.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: --predict speculative on the device" >&2; cat "$tmp/ds.err" >&2; fi
        expect 0 'assign greedy: 0 on CPU' -- $dev "$moevm" run -m "$m" -p "It was" -n 8 --gpu-budget 30% --assign greedy --cost "$tmp/slow.json"
        # A device whose routing answers an expert that does not exist: a clear error (copies in
        # order, so that every expert is resident, and routed there, within the 6 tokens), in
        # decode (the prompt routed by the host), and in the prompt (its batch waits for the
        # packed space's upload of every expert, then routes on the device)
        expect 1 "decode: layer 0: the device's routing chose expert ([0-9]+) of \\1$" -- $dev MOEVM_DETERMINISTIC=on MOEVM_PROMPT_ROUTING=host FAKECUDA_ROUTE_BAD=1 "$moevm" run -m "$m" -p "It was" -n 6 --gpu-budget 100%
        expect 1 "prefill: layer 0: the device's routing chose expert ([0-9]+) of \\1 for the prompt's token 0$" -- $dev FAKECUDA_ROUTE_BAD=1 "$moevm" run -m "$m" -p "It was the best of times" -n 6 --gpu-budget 100%
        # A cost file is this machine's: no note that a preset plans (the next run has one).
        if grep -q '^note: assign' "$tmp/out"; then fail=$((fail + 1)); echo "FAIL: a preset's note with --cost FILE" >&2; else pass=$((pass + 1)); fi
        expect 0 "^note: assign greedy plans with the h100 preset's costs, not this machine's \(\`moevm calibrate" -- $dev "$moevm" run -m "$m" -p "It was" -n 2 --gpu-budget 30% --assign greedy --cost h100
        expect 0 'assign greedy: [1-9][0-9]* on CPU' -- $dev MOEVM_COST="$tmp/fast.json" "$moevm" run -m "$m" -p "It was" -n 8 --gpu-budget 30% --assign greedy
        # Experts of 1.5 MiB (384 pages of 4 KiB): a whole expert's copy must clearly outlast one
        # page's, which a move of the tiny model's 12 pages (one copy, one mapping) does not do
        # even on an idle machine (a third of its calibrations said the machine was too busy).
        # Their products, emulated, take 10 ms a token, so two token counts: the device's
        # line rises 2.4x from one to two. One calibration is judged for the copies, the
        # device's experts and the decode token timed with every expert resident (the
        # attention's time a layer is what the cost model's experts leave of it: on the fake's
        # emulated kernels, whose experts are slow, maybe nothing; test_calibrate checks the
        # arithmetic); a budget that cannot hold them all leaves it the base's, and says why.
        "$moevm" mkmodel --preset tiny --arch qwen3moe --expert-ff 2048 -o "$tmp/wide.gguf" >/dev/null
        expect_measured 0 'pcie_bw .* measured' -- $dev "$moevm" calibrate -m "$tmp/wide.gguf" -t 1 --time 0.01 --tokens 2 -o "$tmp/dev.json"
        judge 0 'gpu_flops .* GFLOP/s +measured' 0 "the same calibration's device experts"
        judge 0 '^(token: [0-9.]+ us, every expert resident; attention and the rest [0-9.]+ us a layer|attention: not measured: a decode token \([0-9.]+ us\) took no longer)' 0 "the same calibration's decode token"
        expect_measured 0 'attention: not measured \(the device budget holds [0-9]+ of the [0-9]+ pages the experts take' -- $dev "$moevm" calibrate -m "$tmp/wide.gguf" -t 1 --time 0.01 --tokens 2 --gpu-budget 50%
        expect 1 '^moevm run: the inference context: CUDA device 0 for the forward pass: cuModuleGetFunction \(mvm_g_' -- env MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY="$fake_driver" "$moevm" run -m "$m" -p "x" -n 2
    fi
fi
expect 1 'assign greedy: the assign role places experts between the GPU and the CPU, and this run computes on the CPU only' -- "$moevm" run -m "$m" -p "x" -n 2 --assign greedy
expect 1 'assign gpu\{x=1\}: the assign role places experts between the GPU and the CPU' -- "$moevm" run -m "$m" -p "x" -n 2 --assign 'gpu{x=1}'
expect 1 'MOEVM_ASSIGN=dali: no such assign policy \(available: gpu, twoptr, greedy, presched\)' -- env MOEVM_ASSIGN=dali "$moevm" run -m "$m" -p "x" -n 2
# A percentage is of the experts' pages, each expert whole ones: 30% of the 16 experts of
# 48 KiB in pages of 64 KiB is 4 pages (of their bytes it would be 3); 100% holds them all,
# and with pages of 2 MiB (one an expert) 5% is less than a page.
expect 0 'budget 4 pages of 64 KiB' -- env MOEVM_PAGE_SIZE=64K "$moevm" run -m "$m" -p "x" -n 2 --gpu-budget 30%
expect 0 'budget 16 pages of 2048 KiB' -- "$moevm" run -m "$m" -p "x" -n 2 --gpu-budget 100%
expect 1 'device budget .* is smaller than one page' -- "$moevm" run -m "$m" -p "x" -n 2 --gpu-budget 5%
# No budget on the host backend: the CPU reads the experts at their homes, nothing moves, the
# same text as through a budget; the modules that would only decide moves are refused.
expect 0 'space: host backend, experts read at their homes \(no budget\)' -- "$moevm" run -m "$m" -p "x" -n 2
expect 0 'expert accesses [1-9][0-9]*, all read at their homes$' -- "$moevm" run -m "$m" -p "x" -n 2 --gpu-budget auto
"$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --gpu-budget 30% >"$tmp/emulated" 2>/dev/null
if cmp -s "$tmp/a" "$tmp/emulated" && [ -s "$tmp/a" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: greedy output differs at home and through a budget" >&2; fi
expect 1 'predict gate: on the host backend with no budget .* nothing to prefetch; give a budget' -- "$moevm" run -m "$m" -p "x" --predict gate
expect 1 'MOEVM_PREDICT_ARGS=abc: predict none takes no parameters' -- env MOEVM_PREDICT_ARGS=abc "$moevm" run -m "$m" -p "x" -n 1
expect 1 'config none\{x=1\}: none takes no parameters' -- "$moevm" run -m "$m" -p "x" -n 1 --config 'none{x=1}'
expect 1 'route importance: on the host backend with no budget .* nothing to substitute' -- env MOEVM_ROUTE=importance "$moevm" run -m "$m" -p "x"
expect 1 'config hot: on the host backend with no budget .* nothing to divide' -- "$moevm" run -m "$m" -p "x" --config hot

# bench: a row per thread count, budget and test, each with its figures; then bad input.
"$moevm" bench -m "$m" -p 8 -n 4 -r 2 -t 1,2 --gpu-budget 50%,100% >"$tmp/bench" 2>"$tmp/bench.err"
row='^\| qwen3moe \| f32 \| 0\.00 \| host \| [12] \| 0\.0[0-9] \| own \| (pp8|tg4) \| [0-9.]+ \+- [0-9.]+ \| [0-9.]+% \| [0-9.]+ \| [0-9.]+% \| f16 \|$'
if [ "$(grep -Ec "$row" "$tmp/bench")" -eq 8 ] && [ "$(wc -l <"$tmp/bench")" -eq 10 ] &&
   [ "$(grep -Ec '\| 1 \| 0\.03 \| own \| pp8 ' "$tmp/bench")" -eq 1 ] &&
   [ "$(grep -Ec '\| 2 \| 0\.03 \| own \| tg4 ' "$tmp/bench")" -eq 1 ]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1))
    echo "FAIL: moevm bench's table (8 rows of 1-2 threads x 50%-100% x pp8/tg4):" >&2
    sed 's/^/    /' "$tmp/bench" "$tmp/bench.err" >&2
fi
# the GPU scripts' reading of it (bench/gpu/llamacpp_lib.sh): the first row's budget in MiB
# (this table's, and a GPU's of 2.5 GiB after the header), and MATCH_VRAM's budget at
# llama.cpp's memory (none when moevm's extra is all of it, or a figure is missing)
matched=$(source "$(dirname "$0")/../bench/gpu/llamacpp_lib.sh" &&
          b=$(moevm_budget_mib <"$tmp/bench") && [ "$b" -ge 1 ] &&
          printf '| arch | experts | experts GiB | backend | threads | budget GiB |\n|---|\n| qwen3moe | q8_0 | 8.01 | cuda | 16 | 2.50 | own | tg128 |\n' | moevm_budget_mib &&
          matched_budget_mib 100 300 250 && ! matched_budget_mib 100 300 200 &&
          ! matched_budget_mib "" 300 250)
if [ "$(echo "$matched" | tr '\n' ' ')" = "2560 50 " ]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1))
    echo "FAIL: moevm_budget_mib / matched_budget_mib: $matched" >&2
fi
expect 0 '\| tg4 \| ' -- "$moevm" bench -m "$m" -p 0 -n 4 -r 1
expect 0 '\| host \| 2 \| home \| own \| tg4 \| [0-9.]+ \+- [0-9.]+ \| - \| 0\.00 \| - \| f16 \|$' -- "$moevm" bench -m "$m" -p 0 -n 4 -r 1 -t 2
expect 0 '\| host \| 2 \| home \| own \| tg4 \| .* \| q8_0 \|$' -- "$moevm" bench -m "$m" -p 0 -n 4 -r 1 -t 2 -ctk q8_0 -ctv q8_0
expect 2 '^moevm bench: -ctv: a list of 1, after one of 2: moevm.s KV cache keeps keys and values in one type' -- "$moevm" bench -m "$m" -ctk f16,q8_0 -ctv q8_0
expect 2 '^moevm bench: -ctv q8_0: moevm.s KV cache keeps keys and values in one type, and f16 was given before' -- "$moevm" bench -m "$m" -ctk f16,q8_0 -ctv q8_0,f16
expect 2 '^moevm bench: --kv-type q2_K: expected '"$KV_TYPES"'$' -- "$moevm" bench -m "$m" --kv-type f16,q2_K
# llama-bench's spellings; --n-cpu-moe 1 of 2 layers is the 50% budget, 0.02 GiB
expect 0 '\| host \| 1 \| 0\.02 \| own \| tg4 \| ' -- "$moevm" bench -m "$m" --n-prompt 0 --n-gen=4 --repetitions 1 --threads 1 -b 8 --n-cpu-moe 1 -ngl 99
expect 2 'bench: give --gpu-budget or --n-cpu-moe, not both' -- "$moevm" bench -m "$m" --gpu-budget 50% --n-cpu-moe 1
"$moevm" bench -m "$m" -p 0 -n 2 -r 1 -t 1 --n-cpu-moe 1,99 >"$tmp/bench.cm" 2>"$tmp/bench.cm.err"
if grep -Eq '\| host \| 1 \| 0\.02 \| own \| tg2 \| ' "$tmp/bench.cm" && grep -Eq '\| host \| 1 \| home \| own \| tg2 \| ' "$tmp/bench.cm" &&
   grep -q 'bench: --n-cpu-moe 99: the experts of all 2 MoE layers stay on the CPU' "$tmp/bench.cm.err"; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL: bench --n-cpu-moe 1,99: half the experts, then none on the GPU" >&2; sed 's/^/    /' "$tmp/bench.cm" "$tmp/bench.cm.err" >&2
fi
# --routing replays a trace's choices (its rows say so); a trace of another shape is refused,
# naming both. (Whether the replayed experts are the ones that run: test_engine.)
{
    echo '{"format":"moevm-trace","version":1,"model":"hand","arch":"qwen3moe","n_layers":2,"n_experts":8,"top_k":2,"expert_bytes":49152,"n_embd":64,"n_ff_exp":64,"scores":"softmax","weights_renormalised":true}'
    for t in $(seq 0 31); do for l in 0 1; do
        echo "{\"req\":0,\"tok\":$t,\"layer\":$l,\"scores\":[0.4,0.3,0.05,0.05,0.05,0.05,0.05,0.05],\"experts\":[0,1],\"weights\":[0.57142857,0.42857143]}"
    done; done
} >"$tmp/two.jsonl"
expect 0 '\| 0\.01 \| replay \| tg8 \| [0-9.]+ \+- [0-9.]+ \| [0-9.]+% \| [0-9.]+ \| [0-9.]+% \| f16 \|$' -- "$moevm" bench -m "$m" -p 0 -n 8 -r 2 --gpu-budget 25% --routing "$tmp/two.jsonl"
"$moevm" trace gen --shape 3,8,2 --tokens 8 -o "$tmp/three.jsonl" >/dev/null
expect 2 'routing .*three.jsonl: the trace routes 3 layers of 8 experts, top 2 \(8 tokens\); the model has 2 MoE layers of 8 experts, top 2' -- "$moevm" bench -m "$m" -n 2 -r 1 --routing "$tmp/three.jsonl"
expect 1 'bench: --routing: .*nope.jsonl' -- "$moevm" bench -m "$m" -n 2 -r 1 --routing "$tmp/nope.jsonl"
expect 2 '-r 0: expected an integer in 1\.\.1000' -- "$moevm" bench -m "$m" -r 0
expect 2 '-t 0: expected an integer' -- "$moevm" bench -m "$m" -t 1,0
expect 2 '-p 0 and -n 0 leave nothing to measure' -- "$moevm" bench -m "$m" -p 0 -n 0
expect 2 '-p 0 and -n 0 leave nothing to measure' -- "$moevm" bench -m "$m" -p 0,0 -n 0
expect 2 '^moevm bench: -p x: expected an integer in 0\.\.65536' -- "$moevm" bench -m "$m" -p 4,x
# -p and -n lists, as llama-bench's: a test for each nonzero value, the prompts first, in order
"$moevm" bench -m "$m" -p 8,0,4 -n 2,3 -r 1 -t 1 -o csv >"$tmp/bench.pn" 2>"$tmp/bench.pn.err"
if [ "$(grep -Eo '"(pp|tg)[0-9]+"' "$tmp/bench.pn" | tr '\n' ' ')" = '"pp8" "pp4" "tg2" "tg3" ' ]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL: bench -p 8,0,4 -n 2,3: wanted pp8, pp4, tg2, tg3" >&2
    sed 's/^/    /' "$tmp/bench.pn" "$tmp/bench.pn.err" >&2
fi
expect 2 '^moevm bench: --gpu-budget 12Q: expected a size' -- "$moevm" bench -m "$m" --gpu-budget 50%,12Q -r 1
expect 2 '^moevm bench: -t 1,,2: an empty item in the list' -- "$moevm" bench -m "$m" -t 1,,2
expect 2 '^moevm bench: --gpu-budget 50%,: an empty item in the list' -- "$moevm" bench -m "$m" --gpu-budget 50%,
expect 2 '^moevm bench: --gpu-budget 0: expected a size above 0' -- "$moevm" bench -m "$m" --gpu-budget 0
# a budget the model cannot take: its error alone, no table's header before it; JSON stays JSON
"$moevm" bench -m "$m" -n 2 -r 1 --gpu-budget 1K >"$tmp/bench.bad" 2>&1
rc=$?
"$moevm" bench -m "$m" -n 2 -r 1 --gpu-budget 1K -o json 2>/dev/null >>"$tmp/bench.bad"
if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/bench.bad")" -eq 2 ] && [ "$(tail -n 1 "$tmp/bench.bad")" = "[]" ] &&
   grep -Eq '^moevm bench: loading the model: .*smaller than one page' "$tmp/bench.bad"; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL: bench --gpu-budget 1K: wanted its error alone (exit 1), and [] with -o json" >&2
    sed 's/^/    /' "$tmp/bench.bad" >&2
fi
expect 1 'MOEVM_GPU_BUDGET=0: not valid \(expected a size above 0' -- env MOEVM_GPU_BUDGET=0 "$moevm" run -m "$m" -p x -n 1
expect 1 'MOEVM_EVICT=: not valid \(expected a value, not an empty one; unset it for the default, auto\)' -- env MOEVM_EVICT= "$moevm" run -m "$m" -p x -n 1
expect 2 '-m MODEL.gguf is required' -- "$moevm" bench -p 8
expect 2 '--kv-type f8: expected '"$KV_TYPES"'$' -- "$moevm" bench -m "$m" --kv-type f8
expect 1 'loading the model: .*trunc.gguf' -- "$moevm" bench -m "$tmp/trunc.gguf" -r 1
# The evict module: chosen by flag or option, named in the statistics; mistakes are errors.
expect 0 'evict lfu: [0-9]+ out' -- env MOEVM_PAGE_SIZE=64K "$moevm" run -m "$m" -p "x" -n 8 --gpu-budget 40% --evict 'lfu{period=8}'
expect 0 'evict lcp: ' -- env MOEVM_PAGE_SIZE=64K MOEVM_EVICT=lcp "$moevm" run -m "$m" -p "x" -n 2 --gpu-budget 50%
expect 0 'evict adaptive: ' -- "$moevm" run -m "$m" -p "x" -n 2 --gpu-budget 100%
expect 1 '--evict: clairvoyant: no such evict policy \(available: lru' -- "$moevm" run -m "$m" -p "x" --evict clairvoyant
expect 1 'MOEVM_EVICT=clairvoyant: no such evict policy' -- env MOEVM_EVICT=clairvoyant "$moevm" run -m "$m" -p "x"
# The offline bounds need a trace's future: the engine refuses them, naming where they run.
expect 1 'evict belady: an offline bound .*only `moevm sim`' -- "$moevm" run -m "$m" -p "x" --evict belady
expect 1 'predict oracle: an offline bound .*only `moevm sim`' -- env MOEVM_PREDICT=oracle "$moevm" run -m "$m" -p "x"
expect 1 "the inference context: evict lfu: unknown parameter 'x'" -- "$moevm" run -m "$m" -p "x" --evict 'lfu{x=1}'
expect 2 '--evict lfu\{x: expected NAME or NAME\{k=v' -- "$moevm" run -m "$m" -p "x" --evict 'lfu{x'
# The route module: the exact model by default; SMoE's substitution by flag or option.
# The statistics line names the modules in use only: evict wherever there is a budget, the
# others when chosen.
expect 0 'expert accesses [0-9]+ \(hit [0-9.]+%[^;]*; evict adaptive: [0-9]+ out\) \| moved' -- "$moevm" run -m "$m" -p "x" -n 2 --gpu-budget 100%
expect 0 'route importance: [1-9][0-9]* substituted' -- env MOEVM_PAGE_SIZE=64K "$moevm" run -m "$m" -p "Once upon a time" -n 16 --gpu-budget 30% --route 'importance{alpha=1}'
expect 0 'route importance: [0-9]+ substituted' -- env MOEVM_PAGE_SIZE=64K MOEVM_ROUTE=importance MOEVM_ROUTE_ARGS=alpha=0.5 "$moevm" run -m "$m" -p "x" -n 4 --gpu-budget 30%
expect 1 '--route: smoe: no such route policy \(available: none, importance' -- "$moevm" run -m "$m" -p "x" --route smoe
expect 1 'MOEVM_ROUTE=smoe: no such route policy' -- env MOEVM_ROUTE=smoe "$moevm" run -m "$m" -p "x"
expect 1 'route importance: alpha=2 is not in \[0, 1\]' -- "$moevm" run -m "$m" -p "x" --route 'importance{alpha=2}'
expect 1 "route none: unknown parameter 'alpha'" -- "$moevm" run -m "$m" -p "x" --route 'none{alpha=1}'
# The config module: one budget by default; per-layer budgets and MoEpic's splits on request.
expect 0 'config fixedpoint: [1-9][0-9]* changes, [1-9][0-9]* split' -- env MOEVM_PAGE_SIZE=4K "$moevm" run -m "$m" -p "Once upon a time" -n 24 --gpu-budget 40% --evict lcp --config 'fixedpoint{tau=4}'
expect 0 'config hot: [0-9]+ changes' -- env MOEVM_PAGE_SIZE=64K MOEVM_CONFIG=hot MOEVM_CONFIG_ARGS=profile=4 "$moevm" run -m "$m" -p "x" -n 8 --gpu-budget 50%
expect 1 '--config: moepic: no such config policy \(available: none, ' -- "$moevm" run -m "$m" -p "x" --config moepic
expect 1 'MOEVM_CONFIG=moepic: no such config policy' -- env MOEVM_CONFIG=moepic "$moevm" run -m "$m" -p "x"
expect 1 "config fixedpoint: unknown parameter 'x'" -- "$moevm" run -m "$m" -p "x" --config 'fixedpoint{x=1}'
# A substituted row records what ran beside the router's choice; the simulator reads it.
expect 0 '"ran":\[[0-9]+,[0-9]+\],"ran_weights":\[' -- sh -c "MOEVM_PAGE_SIZE=64K \"$moevm\" run -m \"$m\" -p 'Once upon a time there' -n 24 --gpu-budget 30% --route 'importance{alpha=1}' --trace-out \"$tmp/r.jsonl\" >/dev/null 2>&1 && cat \"$tmp/r.jsonl\""
expect 0 'importance +[0-9.]+' -- "$moevm" sim --trace "$tmp/r.jsonl" --budget 30% --compare 'route=importance'
expect 0 'predict gate: [1-9][0-9]* prefetched' -- env MOEVM_PAGE_SIZE=64K "$moevm" run -m "$m" -p "Once upon a time" -n 8 --gpu-budget 60% --predict gate
expect 0 '; evict adaptive: [0-9]+ out; predict gate: [0-9]+ prefetched, [0-9]+ used, [0-9]+ in time(, [0-9]+ cut at the router)?(, [0-9]+% of [0-9]+ named used)?\) \| moved' -- env MOEVM_PAGE_SIZE=64K MOEVM_PREDICT=gate "$moevm" run -m "$m" -p "x" -n 4 --gpu-budget 60%
# MoEpic's window: the same text as top-k; its copies go to the buffer MoEpic's configurator
# leaves (in order, so that the counts do not depend on the machine's speed)
for mode in top-k window; do
    MOEVM_PAGE_SIZE=64K MOEVM_PREFETCH=$mode MOEVM_DETERMINISTIC=on "$moevm" run -m "$m" -p "Once upon a time" -n 12 --temp 0 --gpu-budget 60% --predict gate --evict lcp --config 'fixedpoint{tau=4}' -o json >"$tmp/$mode.json" 2>/dev/null
done
if python3 -c 'import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); m=b["memory"]; sys.exit(not (a["tokens"] == b["tokens"] and m["prefetched"] > 0 and 0 <= m["prefetches_cut"] <= m["prefetched"]))' "$tmp/top-k.json" "$tmp/window.json"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: MOEVM_PREFETCH=window" >&2; cat "$tmp/window.json" >&2; fi
expect 1 'MOEVM_PREFETCH=all: not valid \(expected one of top-k\|window\)' -- env MOEVM_PREFETCH=all "$moevm" run -m "$m" -p "x" -n 1 --gpu-budget 40% --predict gate
# SMoE's speculative prefetch: the same text as without a predictor, forecasts named
MOEVM_PAGE_SIZE=64K "$moevm" run -m "$m" -p "Once upon a time" -n 12 --temp 0 --gpu-budget 40% >"$tmp/nospec" 2>/dev/null
MOEVM_PAGE_SIZE=64K "$moevm" run -m "$m" -p "Once upon a time" -n 12 --temp 0 --gpu-budget 40% --predict 'speculative{alpha=0.1}' >"$tmp/spec" 2>"$tmp/spec.err"
if cmp -s "$tmp/nospec" "$tmp/spec" && grep -Eq 'predict speculative: [0-9]+ prefetched, [0-9]+ used, [0-9]+ in time(, [0-9]+ cut at the router)?, [0-9]+% of [1-9][0-9]* named used' "$tmp/spec.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: --predict speculative" >&2; cat "$tmp/spec.err" >&2; fi
expect 1 'predict speculative: alpha=2 is not in \[0, 1\]' -- "$moevm" run -m "$m" -p "x" --gpu-budget 40% --predict 'speculative{alpha=2}'
expect 0 'predict residual: ' -- env MOEVM_PAGE_SIZE=64K MOEVM_PREDICT=residual "$moevm" run -m "$m" -p "x" -n 2 --gpu-budget 50%
expect 1 '--predict: clairvoyant: no such predict policy \(available: none, gate' -- "$moevm" run -m "$m" -p "x" --predict clairvoyant
expect 1 'MOEVM_PREDICT=clairvoyant: no such predict policy' -- env MOEVM_PREDICT=clairvoyant "$moevm" run -m "$m" -p "x"
expect 1 'predict learned: no predictor weights' -- "$moevm" run -m "$m" -p "x" --predict learned
expect 1 '--predictor: .*nope.bin: cannot open' -- "$moevm" run -m "$m" -p "x" --predict learned --predictor "$tmp/nope.bin"
expect 1 "predict gate: unknown parameter 'depth'" -- "$moevm" run -m "$m" -p "x" --predict 'gate{depth=2}'
expect 0 'on host; evict score' -- "$moevm" demo --tokens 8 --evict score
expect 1 '--evict: nope: no such evict policy' -- "$moevm" demo --evict nope
expect 0 'tiny llama, 2 layers .*q8_0' -- "$moevm" mkmodel --arch llama --type q8_0 -o "$tmp/q8.gguf"
expect 0 'mixtral-8x7b +llama' -- "$moevm" mkmodel --list
expect 2 '-m MODEL.gguf is required' -- "$moevm" run -p hi
expect 2 'unknown option --tempo' -- "$moevm" run -m "$m" --tempo 1
# Every command walks its options alike (tools/cli.c's mvm_cli_next, getopt_long over the
# command's table): a missing value, an unknown flag (also a switch at the end of the line,
# and a prefix of a name), --help after a value, a switch among valued options, --flag=value,
# a switch given a value, a stray argument, "--" ending the options.
expect 2 'run: unknown option --frobnicate \(see --help\)' -- "$moevm" run -m "$m" -p x --frobnicate
expect 2 'run: unknown option --tem \(see --help\)' -- "$moevm" run -m "$m" -p x --tem 0
expect 2 'run: --trace-hidden takes no value \(see --help\)' -- "$moevm" run -m "$m" -p x --trace-out "$tmp/x.jsonl" --trace-hidden=1
expect 2 "run: unexpected argument 'stray' \\(see --help\\)" -- "$moevm" run -m "$m" stray -p x
expect 2 "run: unexpected argument '-n' \\(see --help\\)" -- "$moevm" run -m "$m" -p x -- -n 2
expect 0 'context: 64 positions' -- "$moevm" run -m "$m" -p x -n 2 --ctx=64
expect 2 'run: --ctx abc: expected an integer' -- "$moevm" run -m "$m" -p x --ctx=abc
expect 2 'tokenize: --ids takes no value' -- "$moevm" tokenize -m "$m" -p x --ids=1
expect 2 'sim: unknown option --zerocopyy' -- "$moevm" sim --budget 1G --zerocopyy
expect 2 "trace stats: unexpected argument 'b'" -- "$moevm" trace stats a b
expect 0 'usage: moevm info' -- "$moevm" info --help
expect 2 "info: unexpected argument 'x'" -- "$moevm" info x
expect 2 'run: -m needs a value \(see --help\)' -- "$moevm" run --trace-hidden -m
expect 2 'demo: unknown option --foo \(see --help\)' -- "$moevm" demo --foo 3
expect 2 'demo: --seed x: expected an integer' -- "$moevm" demo --seed x
expect 2 'mkmodel: --preset needs a value' -- "$moevm" mkmodel --list --preset
expect 2 'trace gen: --tokens needs a value' -- "$moevm" trace gen --shape olmoe-1b-7b --tokens
expect 2 'trace gen: unknown option --bad' -- "$moevm" trace gen --bad 1
expect 2 'train-predictor: unknown option --depth' -- "$moevm" train-predictor --depth 2
expect 2 'calibrate: --time needs a value' -- "$moevm" calibrate -m "$m" --time
expect 2 'sim: --trace needs a value \(see --servers --help\)' -- "$moevm" sim --servers 2 --trace
expect 0 'usage: moevm train-predictor' -- "$moevm" train-predictor --out x --help
expect 0 'usage: moevm sim' -- "$moevm" sim --zerocopy --budget 1G --help
# every column of sim's tables is explained in its --help
for col in 'hit %' 'part %' 'moved GB' pf-pr pf-rc 'cpu %' ms/token attn gpu stall cpu-w; do
    expect 0 "^  $col +[a-z]" -- "$moevm" sim --help
done
for col in 'local %' ms/token migrations 'migrated GB'; do
    expect 0 "^  $col +[a-z]" -- "$moevm" sim --servers 2 --help
done
expect 2 '^moevm trace stats: FILE.jsonl is required \(see --help\)$' -- "$moevm" trace stats
expect 2 '--temp -1: expected a number' -- "$moevm" run -m "$m" --temp -1
expect 2 '--tokens 1,x: expected comma-separated' -- "$moevm" run -m "$m" --tokens 1,x
expect 1 'token id 99999 is outside the vocabulary' -- "$moevm" run -m "$m" --tokens 1,99999 -n 1
expect 2 '--ctx 3 is less than the prompt' -- "$moevm" run -m "$m" --tokens 1,2,3 -n 4 --ctx 3
expect 2 'give -p or --tokens, not both' -- "$moevm" run -m "$m" -p a --tokens 1
expect 1 'nonexistent.gguf' -- "$moevm" run -m "$tmp/nonexistent.gguf" -p hi
head -c 5000 "$m" >"$tmp/trunc.gguf"
expect 1 'loading the model: .*trunc.gguf' -- "$moevm" run -m "$tmp/trunc.gguf" -p hi
printf 'not a gguf file at all' >"$tmp/junk.gguf"
expect 1 'junk.gguf' -- "$moevm" run -m "$tmp/junk.gguf" -p hi
expect 1 'MOEVM_CPU_SIMD=avx3: not valid' -- env MOEVM_CPU_SIMD=avx3 "$moevm" run -m "$m" -p hi
expect 1 '^moevm run: environment: MOEVM_THREADS=1000000: not valid \(expected an integer in 0\.\.1024\)$' -- env MOEVM_THREADS=1000000 "$moevm" run -m "$m" -p hi
expect 2 '^moevm run: -t 2000: expected an integer in 1..1024$' -- "$moevm" run -m "$m" -p hi -t 2000
expect 0 'scalar kernels' -- env MOEVM_CPU_SIMD=scalar "$moevm" run -m "$m" -p hi -n 2
# The VNNI level where the CPU has it, else a one-line error naming the best level it has.
# The binary's own detection decides, not /proc/cpuinfo (under qemu-user that is the host's).
if "$moevm" info 2>&1 | grep -q 'cpu: *avx512vnni kernels'; then
    expect 0 'avx512vnni kernels' -- env MOEVM_CPU_SIMD=avx512vnni "$moevm" run -m "$m" -p hi -n 2
else
    expect 1 'MOEVM_CPU_SIMD=avx512vnni: this CPU does not support it \(best: ' -- \
        env MOEVM_CPU_SIMD=avx512vnni "$moevm" run -m "$m" -p hi -n 2
fi
# The same for ARM's levels: a CPU with SDOT (qemu-user's default) runs the level without it.
if "$moevm" info 2>&1 | grep -q 'cpu: *dotprod kernels'; then
    expect 0 'neon kernels' -- env MOEVM_CPU_SIMD=neon "$moevm" run -m "$m" -p hi -n 2
else
    expect 1 'MOEVM_CPU_SIMD=dotprod: this CPU does not support it \(best: ' -- \
        env MOEVM_CPU_SIMD=dotprod "$moevm" run -m "$m" -p hi -n 2
fi
expect 2 'no preset .huge.' -- "$moevm" mkmodel --preset huge
expect 2 '--arch gpt5: not supported' -- "$moevm" mkmodel --arch gpt5
expect 2 '--type iq2_k: expected' -- "$moevm" mkmodel --type iq2_k
expect 2 '--type iq1_m_M: expected' -- "$moevm" mkmodel --type iq1_m_M
expect 2 '--type q6_K_M: expected' -- "$moevm" mkmodel --type q6_K_M
expect 1 'top-k 9 is not in 1..8' -- "$moevm" mkmodel --top-k 9 -o "$tmp/x.gguf"
expect 2 '--rope-scaling yarn:4: expected linear:FACTOR or yarn:FACTOR:ORIG_CTX' -- "$moevm" mkmodel --rope-scaling yarn:4 -o "$tmp/x.gguf"
expect 1 'RoPE scaling factor 0.5 is not in 1..1024' -- "$moevm" mkmodel --rope-scaling linear:0.5 -o "$tmp/x.gguf"
expect 1 'q4_0 needs rows in multiples of 32' -- "$moevm" mkmodel --type q4_0 --embd 48 -o "$tmp/x.gguf"
expect 2 '--layers 0: expected an integer' -- "$moevm" mkmodel --layers 0
if [ ! -e "$tmp/x.gguf" ] && [ ! -e "$tmp/x.gguf.tmp" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: a refused mkmodel left a file" >&2; fi
expect 0 '"experts":\[' -- sh -c "\"$moevm\" run -m \"$m\" --tokens 1,2,3 -n 2 --trace-out \"$tmp/t.jsonl\" >/dev/null 2>&1 && head -2 \"$tmp/t.jsonl\""
expect 1 'cannot create' -- "$moevm" run -m "$m" -p hi --trace-out /nonexistent/dir/t.jsonl
printf 'hello\0world' >"$tmp/nul.txt"
expect 1 'run: .*nul.txt: a NUL byte at offset 5: expected text' -- "$moevm" run -m "$m" -f "$tmp/nul.txt" -n 2
expect 1 'tokenize: .*nul.txt: a NUL byte at offset 5' -- "$moevm" tokenize -m "$m" -f "$tmp/nul.txt"
expect 1 'run: .*: cannot read it: Is a directory' -- "$moevm" run -m "$m" -f "$tmp" -n 2
# output that does not reach its file is a failure, not a silent success
if [ -w /dev/full ]; then
    expect 1 'run: writing standard output failed' -- sh -c "\"$moevm\" run -m \"$m\" -p hi -n 2 >/dev/full"
    expect 1 'run: writing standard output failed' -- sh -c "\"$moevm\" run -m \"$m\" -p hi -n 2 -o json >/dev/full"
    expect 1 'run: --logits-out /dev/full: write failed: No space left on device' -- "$moevm" run -m "$m" -p hi -n 2 --logits-out /dev/full
fi

# traces and the simulator
expect 0 'olmoe-1b-7b \(16 layers, 64 experts, top-8\)' -- "$moevm" trace gen --shape olmoe-1b-7b --tokens 24 -o "$tmp/g.jsonl"
expect 0 'olmoe-1b-7b \(4 layers, 64 experts, top-8\)' -- "$moevm" trace gen --shape olmoe-1b-7b --layers 4 --tokens 24 -o "$tmp/g4.jsonl"
expect 2 'trace gen: --layers: shape .4,16,2. names its layers itself' -- "$moevm" trace gen --shape 4,16,2 --layers 2 -o "$tmp/x.jsonl"
expect 0 'top-1/8' -- "$moevm" trace stats "$tmp/g.jsonl"
expect 0 'evict=lcp +[0-9.]+' -- "$moevm" sim --trace "$tmp/g.jsonl" --budget 20% --compare 'evict=lru; evict=lcp'
expect 0 'default +[0-9.]+' -- "$moevm" sim --trace "$tmp/t.jsonl" --budget 50% --page-size 64K
expect 2 '^moevm sim: --page-size 3: expected a multiple of 4K up to 1G' -- "$moevm" sim --trace "$tmp/t.jsonl" --budget 50% --page-size 3
expect 0 'wrote .*sw.csv' -- "$moevm" sim --trace "$tmp/g.jsonl" --sweep budget=10%..50% --steps 3 --out "$tmp/sw"
if grep -q '<svg' "$tmp/sw.svg" 2>/dev/null && [ "$(wc -l <"$tmp/sw.csv")" -eq 7 ] && grep -q '^"bound: evict=belady' "$tmp/sw.csv"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: sweep files" >&2; fi
# --alpha-for: the chosen alpha, replayed, meets a target halfway between alpha 0 and 1
expect 0 'alpha 0.000 is the smallest that meets 1e\+06' -- "$moevm" sim --trace "$tmp/g.jsonl" --budget 20% --alpha-for 1e6
lo=$(awk '$1 == "1.000" {print $2}' "$tmp/out") hi=$(awk '$1 == "0.000" {print $2}' "$tmp/out")
target=$(awk -v a="$lo" -v b="$hi" 'BEGIN {printf "%.3f", (a + b) / 2}')
expect 0 'use: --route' -- "$moevm" sim --trace "$tmp/g.jsonl" --budget 20% --alpha-for "$target"
chosen=$(sed -n "s/^use: --route 'importance{\(alpha=[0-9.]*\)}'$/\1/p" "$tmp/out")
ms=$("$moevm" sim --trace "$tmp/g.jsonl" --budget 20% --route "importance{$chosen}" | awk '$1 == "default" {print $8}')
if awk -v m="$ms" -v t="$target" -v c="${chosen#alpha=}" 'BEGIN {exit !(c > 0 && c < 1 && m <= t * 1.02)}'; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL: --alpha-for $target chose '$chosen', which runs at '$ms' ms/token" >&2
fi
expect 1 'unreachable' -- "$moevm" sim --trace "$tmp/g.jsonl" --budget 20% --alpha-for 1e-3
expect 2 'leave --route out' -- "$moevm" sim --trace "$tmp/g.jsonl" --alpha-for 5 --route none
expect 2 'leave out --compare' -- "$moevm" sim --trace "$tmp/g.jsonl" --alpha-for 5 --compare 'evict=lru'
expect 2 'alpha-degree 9' -- "$moevm" sim --trace "$tmp/g.jsonl" --alpha-for 5 --alpha-degree 9
# calibrate: a cost file that run and sim take; what it cannot measure is the base's.
expect_measured 0 'cpu_flops .* GFLOP/s +measured' -- "$moevm" calibrate -m "$m" -t 1 --time 0.01 --base a100 --name "test box" -o "$tmp/cal.json"
expect 0 '"name": "test box"' -- cat "$tmp/cal.json"
expect 0 '"gpu_mem_bw": 2039,' -- cat "$tmp/cal.json"
expect 0 'cost model test box' -- "$moevm" run -m "$m" -p "x" -n 2 --cost "$tmp/cal.json"
expect 0 'cost test box' -- env MOEVM_COST="$tmp/cal.json" "$moevm" sim --trace "$tmp/g.jsonl" --budget 30%
expect_measured 0 '^\{' -- sh -c "\"$moevm\" calibrate -m \"$m\" -t 1 --time 0.01 2>\"$tmp/cal.err\" || { cat \"$tmp/cal.err\"; exit 1; }"
expect 2 '-m MODEL.gguf is required' -- "$moevm" calibrate
expect 2 '--tokens 1: ' -- "$moevm" calibrate -m "$m" --tokens 1
expect 2 '--name: 1 to 63 characters' -- "$moevm" calibrate -m "$m" --name ""
expect 1 '^moevm calibrate: --base tpu: neither a preset' -- "$moevm" calibrate -m "$m" --base tpu
expect 1 'loading the model: ' -- "$moevm" calibrate -m "$tmp/none.gguf"
expect 1 'calibrate: MOEVM_COST=/nonexistent: neither a preset' -- env MOEVM_COST=/nonexistent "$moevm" calibrate -m "$m"
expect 1 "^moevm run: --cost $tmp/r.jsonl: line 1: not valid JSON|^moevm run: --cost $tmp/r.jsonl: " -- "$moevm" run -m "$m" -p "x" --cost "$tmp/r.jsonl"
expect 1 'no evict policy .clairvoyant.' -- "$moevm" sim --trace "$tmp/g.jsonl" --evict clairvoyant
# every table ends with the offline bound, which hits at least as often as LRU
expect 0 'bound: evict=belady \(offline\) +[0-9.]+' -- "$moevm" sim --trace "$tmp/g.jsonl" --budget 20%
# a partial oracle (belady{ahead=T}) is not the bound: the table still ends with it
expect 0 'bound: evict=belady \(offline\) +[0-9.]+' -- "$moevm" sim --trace "$tmp/g.jsonl" --budget 20% --compare 'evict=belady{ahead=0}'
expect 1 'evict belady: ahead=1.5 is not a whole number' -- "$moevm" sim --trace "$tmp/g.jsonl" --evict 'belady{ahead=1.5}'
expect 1 'lru' -- "$moevm" sim --trace "$tmp/g.jsonl" --evict 'lru{window=3}'
expect 2 'give --trace FILE' -- "$moevm" sim --budget 10%
expect 2 'not both' -- "$moevm" sim --trace "$tmp/g.jsonl" --model-shape mixtral-8x7b
expect 0 'default +[0-9.]+' -- "$moevm" sim --model-shape 4,16,2 --budget 30%
expect 0 'budget 384 of 384 pages' -- "$moevm" sim --model-shape 4,16,2 --budget 100T
expect 0 'more than every expert takes .*simulating 100%' -- "$moevm" sim --model-shape 4,16,2 --budget 100T
expect 1 'model-shape' -- "$moevm" sim --model-shape gpt-5
expect 2 "'route' .*expected role=policy|expected role=policy" -- "$moevm" sim --trace "$tmp/g.jsonl" --compare 'routing=none'
expect 1 'cost' -- "$moevm" sim --trace "$tmp/g.jsonl" --cost tpu-v9
head -c 300 "$tmp/g.jsonl" >"$tmp/cut.jsonl"
expect 1 'cut.jsonl:[0-9]+' -- "$moevm" sim --trace "$tmp/cut.jsonl"
expect 2 'skew' -- "$moevm" trace gen --shape olmoe-1b-7b --skew -1 -o "$tmp/x.jsonl"
expect 2 '--drift 9: .*0' -- "$moevm" trace gen --shape olmoe-1b-7b --drift 9 -o "$tmp/x.jsonl"
expect 2 '--drift-tokens 0' -- "$moevm" trace gen --shape olmoe-1b-7b --drift-tokens 0 -o "$tmp/x.jsonl"
expect 0 'reuse-8' -- sh -c "\"$moevm\" trace gen --shape 4,16,2 --tokens 40 --latent-scores -o \"$tmp/lat.jsonl\" >/dev/null && \"$moevm\" trace stats \"$tmp/lat.jsonl\""

# predictors: hidden states, routers, a trained file
expect 2 'needs --trace-out' -- "$moevm" run -m "$m" -p hi --trace-hidden
expect 0 '"hidden":\[' -- sh -c "\"$moevm\" run -m \"$m\" -p 'a b c d e f g h' -n 40 --temp 1 --trace-out \"$tmp/h.jsonl\" --trace-hidden >/dev/null 2>&1 && sed -n 2p \"$tmp/h.jsonl\""
expect 0 'predict=residual +[0-9.]+' -- "$moevm" sim --trace "$tmp/h.jsonl" --model "$m" --budget 40% --compare 'predict=gate; predict=residual'
expect 1 "router weights" -- "$moevm" sim --trace "$tmp/h.jsonl" --predict gate
expect 0 'predict=gate +[0-9.]+' -- "$moevm" sim --trace "$tmp/h.jsonl" --model "$m" --budget 40% --prefetch window --compare 'predict=gate'
expect 2 '^moevm sim: --prefetch all: expected top-k or window$' -- "$moevm" sim --trace "$tmp/h.jsonl" --prefetch all
expect 2 '^moevm sim: --budget-routing device: expected host, in-place, read-through or read-ahead$' -- "$moevm" sim --trace "$tmp/h.jsonl" --budget-routing device
expect 2 '^moevm sim: --device-cpu goes with a --budget-routing on the device' -- "$moevm" sim --trace "$tmp/h.jsonl" --device-cpu
expect 2 '^moevm sim: --admit all: expected on, off or steps$' -- "$moevm" sim --trace "$tmp/h.jsonl" --admit all
expect 0 'evict=lru +[0-9.]+' -- "$moevm" sim --trace "$tmp/h.jsonl" --budget 40% --budget-routing in-place --admit steps --compare 'evict=lru'
expect 0 'evict=lru +[0-9.]+' -- "$moevm" sim --trace "$tmp/h.jsonl" --budget 40% --budget-routing read-through --compare 'evict=lru'
expect 0 'predict=oracle +[0-9.]+' -- "$moevm" sim --trace "$tmp/h.jsonl" --budget 40% --budget-routing read-ahead --device-cpu --compare 'predict=oracle'
expect 1 "predict speculative: it forecasts from a pass through the next layer's attention, which a trace cannot replay" -- "$moevm" sim --trace "$tmp/h.jsonl" --model "$m" --predict speculative
# DeepSeek-V3's kind: sigmoid scores, and MoE layer 0 is the file's blk.1 (after a dense one).
expect 0 '"scores":"sigmoid"' -- sh -c "\"$moevm\" run -m \"$tmp/ds3.gguf\" -p 'a b c' -n 12 --trace-out \"$tmp/h3.jsonl\" --trace-hidden >/dev/null 2>&1 && head -n 1 \"$tmp/h3.jsonl\""
expect 0 'predict=gate +[0-9.]+' -- "$moevm" sim --trace "$tmp/h3.jsonl" --model "$tmp/ds3.gguf" --compare 'predict=gate'
# --model alone: a synthetic trace of the model's shape, its expert bytes from the file
"$moevm" mkmodel --arch qwen3moe --layers 3 --experts 6 --top-k 3 --embd 256 --expert-ff 512 \
    -o "$tmp/shape.gguf" >/dev/null
expect 0 '512 tokens, 3 layers x 6 experts \(top-3\) of 1\.5 MiB' -- "$moevm" sim --model "$tmp/shape.gguf" --budget 50%
head -c 1000 "$m" >"$tmp/cut.gguf"
expect 1 '^moevm sim: --model: .*cut.gguf: ' -- "$moevm" sim --model "$tmp/cut.gguf"
expect 1 'has no hidden states' -- "$moevm" train-predictor --trace "$tmp/t.jsonl" --out "$tmp/p.bin"
expect 0 'held-out' -- "$moevm" train-predictor --trace "$tmp/h.jsonl" --out "$tmp/p.bin"
expect 0 'predict learned: [1-9][0-9]* prefetched' -- env MOEVM_PAGE_SIZE=64K "$moevm" run -m "$m" -p "Once upon a time" -n 8 --gpu-budget 50% --predict learned --predictor "$tmp/p.bin"
expect 0 'predict=learned +[0-9.]+' -- "$moevm" sim --trace "$tmp/h.jsonl" --predictor "$tmp/p.bin" --compare 'predict=learned'
# LLaPor's online fine-tuning, in the engine and the simulator
expect 0 'predict learned: [1-9][0-9]* prefetched' -- env MOEVM_PAGE_SIZE=64K "$moevm" run -m "$m" -p "Once upon a time" -n 8 --gpu-budget 50% --predict 'learned{tune=2,batch=4}' --predictor "$tmp/p.bin"
expect 0 'predict=learned\{tune=8\} +[0-9.]+' -- "$moevm" sim --trace "$tmp/h.jsonl" --predictor "$tmp/p.bin" --compare 'predict=learned; predict=learned{tune=8}'
expect 1 "predict learned: batch=64 is not a whole number in \[1, 32\]" -- "$moevm" sim --trace "$tmp/h.jsonl" --predictor "$tmp/p.bin" --predict 'learned{tune=8,samples=32,batch=64}'
head -c 100 "$tmp/p.bin" >"$tmp/cut.bin"
expect 1 'predictor' -- "$moevm" sim --trace "$tmp/h.jsonl" --predictor "$tmp/cut.bin" --predict learned
expect 1 '^moevm sim: --model: .*the trace has 16 x 64, 2048 wide \(is this the model that recorded it\?\)' -- "$moevm" sim --trace "$tmp/g.jsonl" --model "$m" --predict gate
# PreScope's hot table from a profiling run's trace: held from the start, in the engine and
# the simulator; a profile of another shape, or for no module that reads one, is refused.
expect 0 'config hot: 0 changes, 0 split, [1-9][0-9]* held' -- env MOEVM_PAGE_SIZE=64K "$moevm" run -m "$m" -p "Once upon a time" -n 8 --gpu-budget 50% --config hot --hot-profile "$tmp/h.jsonl"
expect 0 '"held":[[:space:]]*[1-9]' -- env MOEVM_PAGE_SIZE=64K "$moevm" run -m "$m" -p "Once upon a time" -n 4 --gpu-budget 50% --config hot --hot-profile "$tmp/h.jsonl" -o json
expect 0 'config=hot +[0-9.]+' -- "$moevm" sim --trace "$tmp/h.jsonl" --hot-profile "$tmp/h.jsonl" --budget 40% --compare 'evict=lru; config=hot'
expect 1 'config hot: the profile has 16 layers of 64 experts, the model' -- "$moevm" run -m "$m" -p "x" -n 2 --gpu-budget 50% --config hot --hot-profile "$tmp/g.jsonl"
expect 1 'a hot-expert profile was given, but config none does not read one' -- "$moevm" run -m "$m" -p "x" -n 2 --gpu-budget 50% --hot-profile "$tmp/h.jsonl"
expect 1 '^moevm run: --hot-profile: .*nope.jsonl: ' -- "$moevm" run -m "$m" -p "x" --config hot --hot-profile "$tmp/nope.jsonl"
expect 2 '^moevm sim: --hot-profile: no policy set has config hot' -- "$moevm" sim --trace "$tmp/h.jsonl" --hot-profile "$tmp/h.jsonl"
expect 1 '^moevm sim: --hot-profile: .*cut.bin' -- "$moevm" sim --trace "$tmp/h.jsonl" --hot-profile "$tmp/cut.bin" --config hot

# several servers
expect 0 'prism +[0-9.]+' -- "$moevm" sim --trace "$tmp/g.jsonl" --servers 2
expect 0 'servers of [0-9.]+ GB expert memory on 4 GPUs \([0-9]+ experts' -- "$moevm" sim --trace "$tmp/g.jsonl" --servers 2 --gpus 4
expect 2 'sim: --gpus 0: ' -- "$moevm" sim --trace "$tmp/g.jsonl" --servers 2 --gpus 0
expect 2 '--servers 1' -- "$moevm" sim --trace "$tmp/g.jsonl" --servers 1
expect 1 'every expert must be on some server' -- "$moevm" sim --trace "$tmp/g.jsonl" --servers 2 --server-mem 10%
expect 2 '^moevm sim: --server-mem 10%,,10%: an empty item in the list' -- "$moevm" sim --trace "$tmp/g.jsonl" --servers 2 --server-mem 10%,,10%
expect 2 'does not apply with --servers' -- "$moevm" sim --trace "$tmp/g.jsonl" --servers 2 --evict lru

# Output for scripts (docs/engine.md): run -o json, one object on stdout with the text, the
# counts (as many tokens as -n asked, --ignore-eos masking end-of-text), the timings and the
# memory manager's counters and modules; bench -o csv/json, one record per row with every
# column; a format neither knows is one line and exit 2.
"$moevm" run -m "$m" -p "It was the best" -n 12 --ignore-eos -o json >"$tmp/run.json" 2>"$tmp/run.err"
check_py 'run -o json' "$tmp/run.json" '
import json, sys
d = json.load(sys.stdin)
assert d["prompt"].startswith("It was the best") and isinstance(d["text"], str), d["prompt"]
assert d["n_generated"] == 12 == len(d["tokens"]) == d["decode"]["tokens"], d["n_generated"]
assert d["n_prompt"] == d["prefill"]["tokens"] > 0 and d["interrupted"] is False
assert d["stop"] == "n_predict" and d["arch"] == "qwen3moe"
assert d["prefill"]["tokens_per_second"] > 0 and d["decode"]["seconds"] > 0
m = d["memory"]
assert m["experts_at_home"] is True and m["hit_rate"] is None and m["modules"] == {}
assert m["accesses"] > 0 and m["bytes_moved"] == 0 and m["budget_bytes"] == 0'
if grep -q '^prefill\|expert accesses' "$tmp/run.err"; then fail=$((fail + 1)); echo "FAIL: run -o json also wrote the statistics line" >&2; else pass=$((pass + 1)); fi
# the same greedy tokens as the text mode, and a budget's counters and modules
MOEVM_PAGE_SIZE=64K "$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 --gpu-budget 60% --predict gate --output-format=json >"$tmp/run2.json" 2>/dev/null
"$moevm" run -m "$m" -p "It was the best" -n 12 --temp 0 -o text >"$tmp/run2.txt" 2>/dev/null
check_py 'run -o json with a budget' "$tmp/run2.json" '
import json, sys
d = json.load(sys.stdin)
m = d["memory"]
assert m["modules"] == {"evict": "adaptive", "predict": "gate"}, m["modules"]
assert m["hits"] + m["misses"] == m["accesses"] > 0 and 0 <= m["hit_rate"] <= 1
assert m["budget_bytes"] == 9 * 65536 and m["page_size"] == 65536 and m["prefetched"] > 0
assert 0 <= m["forecast_used"] <= m["forecast_named"] and m["forecast_named"] > 0
def valid(b):  # each byte that does not begin a valid character: U+FFFD, as run -o json
    out, i = [], 0
    while i < len(b):
        for k in (1, 2, 3, 4):
            try:
                out.append(b[i:i + k].decode("utf-8"))
                i += k
                break
            except UnicodeDecodeError:
                pass
        else:
            out.append("\ufffd")
            i += 1
    return "".join(out)
text = valid(open(sys.argv[1], "rb").read())
assert text == d["prompt"] + d["text"] + "\n", (text, d["prompt"], d["text"])
assert d["n_generated"] == len(d["tokens"]) <= 12' "$tmp/run2.txt"
if cmp -s "$tmp/a" "$tmp/run2.txt"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: -o text is not the default's text" >&2; fi
expect 2 '^moevm run: -o xml: expected text or json$' -- "$moevm" run -m "$m" -p x -o xml
if [ "$(wc -l <"$tmp/out")" -eq 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: run -o xml: more than one line" >&2; fi
# A model whose vocabulary cannot be read (here its pre-tokenizer unknown) runs on token ids
# alone and prints ids; a text prompt needs the vocabulary.
"$py" -c 'import sys; b = open(sys.argv[1], "rb").read(); i = b.index(b"qwen2", b.index(b"tokenizer.ggml.pre")); open(sys.argv[2], "wb").write(b[:i] + b"qwenX" + b[i + 5:])' "$m" "$tmp/novocab.gguf"
expect 0 '^ 1 5 9( [0-9]+){4}$' -- "$moevm" run -m "$tmp/novocab.gguf" --tokens 1,5,9 -n 4 --temp 0 --ignore-eos
expect 1 "^moevm run: .*novocab.gguf: tokenizer: tokenizer.ggml.pre 'qwenX' is not supported" -- "$moevm" run -m "$tmp/novocab.gguf" -p x -n 2
"$moevm" bench -m "$m" -p 8 -n 4 -r 2 -t 1 --gpu-budget 50%,100% -o csv >"$tmp/bench.csv" 2>/dev/null
check_py 'bench -o csv' "$tmp/bench.csv" '
import csv, sys
rows = list(csv.reader(sys.stdin))
head = rows[0]
assert head == ["model_filename", "arch", "experts_type", "experts_gib", "backend", "n_threads",
                "budget_gib", "routing", "type_k", "type_v", "test", "n_prompt", "n_gen", "n_depth",
                "repetitions", "avg_ts", "stddev_ts", "hit_rate", "mib_moved_per_token", "load_wait"], head
rows = [dict(zip(head, r)) for r in rows[1:]]
assert [r["test"] for r in rows] == ["pp8", "tg4", "pp8", "tg4"], rows
for r in rows:
    for k in ("experts_gib", "n_threads", "budget_gib", "n_prompt", "n_gen", "n_depth", "repetitions",
              "avg_ts", "stddev_ts", "hit_rate", "mib_moved_per_token", "load_wait"):
        float(r[k])
    assert r["arch"] == "qwen3moe" and r["n_threads"] == "1" and float(r["avg_ts"]) > 0
    assert r["type_k"] == r["type_v"] == "f16"
    assert 0 <= float(r["hit_rate"]) <= 1 and r["repetitions"] == "2"
    assert 0 <= float(r["load_wait"]) <= 1
assert (rows[0]["n_prompt"], rows[0]["n_gen"], rows[1]["n_prompt"], rows[1]["n_gen"]) == ("8", "0", "0", "4")
assert float(rows[0]["budget_gib"]) < float(rows[2]["budget_gib"])'
# a list of cache types, each in turn (llama-bench's -ctk/-ctv lists, the same list here)
"$moevm" bench -m "$m" -p 4 -n 2 -r 1 -t 1 -ctk f16,q8_0 -ctv f16,q8_0 -o csv >"$tmp/bench.kv" 2>/dev/null
check_py 'bench -ctk f16,q8_0' "$tmp/bench.kv" '
import csv, sys
rows = list(csv.DictReader(sys.stdin))
assert [(r["type_k"], r["type_v"], r["test"]) for r in rows] == [
    ("f16", "f16", "pp4"), ("f16", "f16", "tg2"), ("q8_0", "q8_0", "pp4"), ("q8_0", "q8_0", "tg2")], rows'
# -d, llama-bench's depth: each test at each depth, in that order, named as llama-bench names it
"$moevm" bench -m "$m" -p 4 -n 2 -d 0,6 -r 1 -t 1 -o csv >"$tmp/bench.d" 2>"$tmp/bench.d.err"
check_py 'bench -d 0,6' "$tmp/bench.d" '
import csv, sys
rows = list(csv.DictReader(sys.stdin))
assert [(r["test"], r["n_depth"]) for r in rows] == [("pp4", "0"), ("pp4 @ d6", "6"),
                                                      ("tg2", "0"), ("tg2 @ d6", "6")], rows
assert all(float(r["avg_ts"]) > 0 for r in rows)'
expect 0 '\| tg2 @ d5 \| [0-9.]+ \+- ' -- "$moevm" bench -m "$m" -p 0 -n 2 -d 5 -r 1 -t 1
expect 2 '^moevm bench: -d -1: expected an integer' -- "$moevm" bench -m "$m" -d -1
# a depth past the model's training context (tiny's 256) is warned of, as run warns; a depth of
# more than one chunk (4096 tokens a call, cmd_bench.c) fills the cache in several. (Not under
# ThreadSanitizer: there the 4100 tokens of one thread take 105 s, two thirds of this script,
# against 4 s plain and 10 s under ASan, which run it.)
if [ -z "${TSAN_OPTIONS:-}" ]; then
    expect 0 'warning: the deepest test reaches 4102 positions, past the 256 the model was trained on' \
        -- "$moevm" bench -m "$m" -p 0 -n 2 -d 4100 -r 1 -t 1
    if grep -Eq '\| tg2 @ d4100 \| [0-9.]+ \+- ' "$tmp/out"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: bench -d 4100's row" >&2; cat "$tmp/out" >&2; fi
fi
"$moevm" bench -m "$m" -p 0 -n 4 -r 3 -t 1,2 --output json >"$tmp/bench.json" 2>/dev/null
check_py 'bench -o json' "$tmp/bench.json" '
import json, sys
rows = json.load(sys.stdin)
assert [(r["n_threads"], r["test"]) for r in rows] == [(1, "tg4"), (2, "tg4")], rows
for r in rows:
    assert r["budget_gib"] is None and r["hit_rate"] is None  # read at their homes
    assert r["load_wait"] is None
    assert len(r["samples_ts"]) == r["repetitions"] == 3 and r["avg_ts"] > 0
    assert abs(sum(r["samples_ts"]) / 3 - r["avg_ts"]) <= 1e-6 * r["avg_ts"]'
expect 0 '^\{"model_filename":.*"test":"tg2"' -- "$moevm" bench -m "$m" -p 0 -n 2 -r 1 -o jsonl
expect 2 '^moevm bench: -o xml: expected text, csv, json, jsonl or md$' -- "$moevm" bench -m "$m" -o xml
# Ctrl-C stops a run's generation: the report still comes, the exit code is 130
ctrl_c() { # ctrl_c OUT ERR PAUSE run-args...: a long run signalled PAUSE s into its prompt
    local out=$1 err=$2 pause=$3
    shift 3
    "$moevm" run -m "$m" "$@" >"$out" 2>"$err" &
    local pid=$!
    for _ in $(seq 600); do grep -aqs '^context:' "$err" && break; sleep 0.05; done
    sleep "$pause"
    kill -INT "$pid"
    for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid"
}
generating=(-p "Once upon" -n 59000 -c 60000 --ignore-eos)
ctrl_c "$tmp/int.txt" "$tmp/int.err" 0.3 "${generating[@]}"
rc=$?
check "Ctrl-C in run (exit $rc)" '[ "$rc" -eq 130 ] &&
    grep -q "^moevm run: interrupted: [0-9]* of 59000 tokens generated$" "$tmp/int.err" &&
    grep -q "^prefill [0-9]* tokens .* | decode [0-9]* tokens .* | expert accesses" "$tmp/int.err"' \
    "$tmp/int.err"
ctrl_c "$tmp/int.json" "$tmp/int.err" 0.3 "${generating[@]}" -o json
rc=$?
check_py "Ctrl-C in run -o json (exit $rc)" "$tmp/int.json" '
import json, sys
d = json.load(sys.stdin)
assert d["interrupted"] is True and d["stop"] == "interrupted"
assert 0 < d["n_generated"] == len(d["tokens"]) < 59000
assert sys.argv[1] == "130", sys.argv[1]' "$rc"
# ... and a long prompt's evaluation (12002 tokens a batch of one at a time: seconds), between
# two batches, signalled as it begins: the report says how far it got
printf 'the sea and the ship %.0s' $(seq 1500) >"$tmp/long.txt"
prompting=(-f "$tmp/long.txt" -n 4 -b 1 -t 1)
ctrl_c "$tmp/intp.txt" "$tmp/intp.err" 0 "${prompting[@]}"
rc=$?
check "Ctrl-C in run's prompt (exit $rc)" '[ "$rc" -eq 130 ] &&
    grep -q "^moevm run: interrupted: [0-9]* of the prompt.s 12002 tokens evaluated, none generated$" "$tmp/intp.err" &&
    grep -Eq "^prefill [0-9]+ tokens .* \| decode 0 tokens" "$tmp/intp.err" &&
    ! grep -q "^prefill 12002 tokens" "$tmp/intp.err"' "$tmp/intp.err"
ctrl_c "$tmp/intp.json" "$tmp/intp.err" 0 "${prompting[@]}" -o json
rc=$?
check_py "Ctrl-C in run's prompt, -o json (exit $rc)" "$tmp/intp.json" '
import json, sys
d = json.load(sys.stdin)
assert d["interrupted"] is True and d["stop"] == "interrupted" and d["n_generated"] == 0
assert d["prefill"]["tokens"] < d["n_prompt"] == 12002, (d["prefill"], d["n_prompt"])
assert sys.argv[1] == "130", sys.argv[1]' "$rc"

# chat (docs/chat.md): every architecture's tiny model converses from piped turns, the second
# turn reusing the first's cache; the template renders the system message and the history;
# a message longer than the context is refused and the chat goes on; Ctrl-C stops a reply
for arch in llama qwen2moe qwen3moe olmoe deepseek2 glm4moe minimax-m2 gpt-oss; do
    [ -f "$tmp/chat-$arch.gguf" ] || "$moevm" mkmodel --arch "$arch" -o "$tmp/chat-$arch.gguf" >/dev/null
    expect 0 'replies [1-9][0-9]* tokens.* \(.* [1-9][0-9]* more reused from the cache\)|more reused from the cache\) \| replies [1-9]' -- \
        sh -c "printf 'Hello there\nAnd then?\n' | \"$moevm\" chat -m \"$tmp/chat-$arch.gguf\" --temp 0 -n 6 -t 2"
done
cat >"$tmp/plain.jinja" <<'TEMPLATE'
{%- for m in messages %}[{{ m.role }}] {{ m.content }}
{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}
TEMPLATE
expect 0 'prompt: \[system\] Be brief\.' -- sh -c "printf 'hi\n' | \"$moevm\" chat -m \"$m\" --system 'Be brief.' --chat-template-file \"$tmp/plain.jinja\" --verbose-prompt --temp 0 -n 3"
expect 0 'prompt: \[system\] S.*\[user\] one.*\[assistant\] .*\[user\] two' -- sh -c "printf 'one\ntwo\n' | \"$moevm\" chat -m \"$m\" --system S --chat-template-file \"$tmp/plain.jinja\" --verbose-prompt --temp 0 -n 3 2>&1 | LC_ALL=C tr -c '\\040-\\176' ' '"
expect 0 'prompt: <\|start\|>system<\|message\|>.*<\|start\|>developer<\|message\|># Instructions.*Be brief\.<\|end\|><\|start\|>user<\|message\|>hi<\|end\|><\|start\|>assistant' -- sh -c "printf 'hi\\n' | \"$moevm\" chat -m \"$tmp/chat-gpt-oss.gguf\" --system 'Be brief.' --verbose-prompt --temp 0 -n 2 2>&1 | LC_ALL=C tr -c '\\040-\\176' ' '"
expect 0 'the message takes [0-9]+ tokens with the template, the context holds 24' -- sh -c "printf '%s\nshort\n' \"\$(printf 'word %.0s' \$(seq 60))\" | \"$moevm\" chat -m \"$m\" -c 24 --temp 0 -n 2"
printf '{%% if %%}' >"$tmp/bad.jinja"
expect 1 'moevm chat: .*bad.jinja: .*template line 1' -- sh -c "printf 'hi\n' | \"$moevm\" chat -m \"$m\" --chat-template-file \"$tmp/bad.jinja\""
# a chat that cannot start says why in one line, with no statistics of a conversation after it
printf 'hi\n' | "$moevm" chat -m "$m" --chat-template-file "$tmp/none.jinja" >"$tmp/chat.bad" 2>&1
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/chat.bad")" -eq 1 ] && grep -q 'none.jinja: cannot open it' "$tmp/chat.bad"; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL: chat --chat-template-file missing: wanted one line, exit 2 (exit $rc)" >&2
    sed 's/^/    /' "$tmp/chat.bad" >&2
fi
expect 2 'moevm chat: -m MODEL.gguf is required' -- "$moevm" chat
expect 2 'unknown option --frob' -- "$moevm" chat -m "$m" --frob
expect 0 'usage: moevm chat' -- "$moevm" chat --help
expect 0 'usage: moevm serve' -- "$moevm" serve --help
expect 2 'moevm serve: --port 70000: expected an integer' -- "$moevm" serve -m "$m" --port 70000
expect 2 'moevm serve: --host nowhere: expected an IPv4 address' -- "$moevm" serve -m "$m" --host nowhere
expect 2 '^moevm serve: --alias: expected a name, not an empty one' -- "$moevm" serve -m "$m" --alias ""
# llama.cpp's GPU options, as run takes them (the server's: test_serve.py)
expect 0 '^model: .*expert budget 16\.0 MiB' -- sh -c "printf 'hi\n' | \"$moevm\" chat -m \"$m\" --n-cpu-moe 1 -ngl 99 --temp 0 -n 2"
expect 0 '^moevm chat: --n-cpu-moe 99: the experts of all 2 MoE layers stay on the CPU' -- sh -c "printf 'hi\n' | \"$moevm\" chat -m \"$m\" -ncmoe 99 --temp 0 -n 2"
expect 0 '^model: .*experts read at their homes' -- sh -c "printf 'hi\n' | \"$moevm\" chat -m \"$m\" --n-cpu-moe=99 --temp 0 -n 2"
expect 2 '^moevm chat: give --gpu-budget or --n-cpu-moe, not both' -- "$moevm" chat -m "$m" --gpu-budget 50% --n-cpu-moe 1
expect 2 '^moevm serve: give --gpu-budget or --n-cpu-moe, not both' -- "$moevm" serve -m "$m" -ncmoe 1 --gpu-budget 1G
expect 2 '^moevm serve: --n-cpu-moe x: expected an integer' -- "$moevm" serve -m "$m" --n-cpu-moe x
for cmd in chat serve; do
    expect 0 '^  --n-cpu-moe, -ncmoe N +llama.cpp.s' -- "$moevm" $cmd --help
    expect 0 '^  -ngl, --n-gpu-layers N +llama.cpp.s' -- "$moevm" $cmd --help
done
# Ctrl-C mid-reply: the reply stops, the chat reads on (to the end of input) and exits 0
( { printf 'Hello\n'; sleep 20; } | "$moevm" chat -m "$m" -c 60000 -n 59000 --ignore-eos --temp 0 --verbose-prompt >"$tmp/int.out" 2>&1 ) &
chat_pid=$!
# SIGINT once the reply has begun (its prompt printed), however slow the load on a busy machine
for _ in $(seq 150); do grep -aq '^prompt:' "$tmp/int.out" && break; sleep 0.1; done
sleep 0.3
pkill -INT -f "chat -m $m -c 60000 -n 59000" 2>/dev/null
pkill -f "sleep 20" 2>/dev/null # end of input: the chat exits after the stopped reply
wait "$chat_pid"
rc=$?
check "Ctrl-C in a reply (exit $rc)" '[ "$rc" -eq 0 ] && grep -aq "\[stopped\]" "$tmp/int.out" &&
    grep -aq "replies [0-9]* tokens" "$tmp/int.out"' "$tmp/int.out"
# Ctrl-C while a long message is being read (12000 tokens a batch of one at a time): that
# turn is dropped, the cache back where it began, and the chat goes on to the next line,
# whose prompt holds the conversation without it
{ cat "$tmp/long.txt"; printf '\nhi\n'; } >"$tmp/turns.txt"
"$moevm" chat -m "$m" -c 16384 -b 1 -t 1 --temp 0 -n 3 --verbose-prompt <"$tmp/turns.txt" >"$tmp/intc.out" 2>"$tmp/intc.err" &
chat_pid=$!
for _ in $(seq 600); do grep -aqs '^prompt:' "$tmp/intc.err" && break; sleep 0.05; done
kill -INT "$chat_pid"
wait "$chat_pid"
rc=$?
last_prompt=$(tr '\n' ' ' <"$tmp/intc.err" | sed 's/.*prompt://')
check "Ctrl-C while a message is read (exit $rc)" '[ "$rc" -eq 0 ] &&
    grep -aq "^moevm chat: interrupted while reading the message: it is dropped$" "$tmp/intc.err" &&
    [ "$(grep -ac "^prompt:" "$tmp/intc.err")" -eq 2 ] &&
    [[ $last_prompt == *user*hi* && $last_prompt != *ship* ]] &&
    ! grep -aq "\[stopped\]" "$tmp/intc.out" && grep -aq "replies [0-9]* tokens" "$tmp/intc.err"' \
    "$tmp/intc.err" "$tmp/intc.out"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
