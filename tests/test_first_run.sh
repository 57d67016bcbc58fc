#!/usr/bin/env bash
# A first run that looks like it works: `moevm run` and `moevm chat` on realistic presets
# print a visible reply. Their vocabularies used to be ~97% padding tokens that decode to
# nothing, so the reply was empty. The presets keep their real vocabularies (Qwen3-30B-A3B's
# byte-level BPE of 151936 tokens, Mixtral's SentencePiece of 32000) and are shrunk by the
# size flags to one small layer, so that each runs in a fraction of a second.
# usage: test_first_run.sh MOEVM
set -u
moevm=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

# letters FILE: how many ASCII letters FILE holds
letters() { LC_ALL=C tr -cd 'A-Za-z' <"$1" | wc -c; }

for preset in qwen3-30b-a3b mixtral-8x7b; do
    m="$tmp/$preset.gguf"
    if ! "$moevm" mkmodel --preset "$preset" --layers 1 --experts 8 --embd 256 --expert-ff 256 \
            -o "$m" >/dev/null 2>"$tmp/mk.err"; then
        bad "$preset: mkmodel failed: $(tail -1 "$tmp/mk.err")"
        continue
    fi
    # run prints the prompt, then the reply: sampled and greedy, both must show words
    for args in "" "--temp 0"; do
        # shellcheck disable=SC2086 # $args is a list of options
        if ! "$moevm" run -m "$m" -p "Once upon a time" -n 16 $args >"$tmp/out" 2>"$tmp/err"; then
            bad "$preset: run $args failed: $(tail -1 "$tmp/err")"
            continue
        fi
        sed 's/^ *Once upon a time//' "$tmp/out" >"$tmp/reply"
        if [ "$(letters "$tmp/reply")" -ge 16 ]; then ok; else bad "$preset: run $args replied '$(cat "$tmp/reply")'"; fi
    done
    if grep -q 'vocab \(151936\|32000\)' "$tmp/err"; then ok; else bad "$preset: not the preset's vocabulary: $(grep '^model:' "$tmp/err")"; fi
    # chat: one turn from standard input, in the family's template; the reply is text
    if printf 'Hello there\n' | "$moevm" chat -m "$m" -n 16 >"$tmp/reply" 2>"$tmp/err" &&
        [ "$(letters "$tmp/reply")" -ge 16 ]; then
        ok
    else
        bad "$preset: chat replied '$(cat "$tmp/reply")': $(tail -1 "$tmp/err")"
    fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
