#!/usr/bin/env bash
# Perplexity, moevm's against llama.cpp's llama-perplexity on the same GGUF file, text,
# context and threads: the two estimates (their difference says whether the two engines
# compute the same model) and the time each took, rounds interleaved, each engine's best
# round kept, since this VM's speed drifts between minutes.
# The text is TEXT, or by default the GPL-3's (/usr/share/common-licenses/GPL-3: English
# prose that every Debian machine has, about 8,000 tokens); llama.cpp's usual one is
# wikitext-2's wiki.test.raw.
# Prints one line that docs/perf/cpu.md records:
#   RESULT bench=cpu_perplexity model=olmoe-16l type=q8_0 ctx=512 chunks=8 threads=2
#          moevm_ppl=.. llamacpp_ppl=.. rel_diff=.. moevm_tok_s=.. llamacpp_tok_s=.. ratio=..
# (tok/s: the tokens evaluated, chunks x ctx, over the wall time of the whole command.)
# With BASE=OTHER.gguf (the same model, better quantized), the KL divergence instead:
# llama-perplexity writes OTHER's log-probabilities (--kl-divergence-base), and both
# engines compare MODEL with them (--kl-divergence):
#   RESULT bench=cpu_kld model=.. type=.. base=q8_0 ... moevm_kld=.. llamacpp_kld=..
#          moevm_same_top=.. llamacpp_same_top=.. moevm_tok_s=.. llamacpp_tok_s=.. ratio=..
# FLAGS: more options both engines take in llama.cpp's spelling (the RoPE options,
# --override-kv), given to both: whether they compute the same model under them.
# usage: [TEXT=FILE] [BASE=OTHER.gguf] [FLAGS="..."] bash bench/cpu/perplexity.sh MODEL.gguf
#                                      [ctx (512)] [chunks (8)] [threads (2)] [rounds (2)]
# Needs llama.cpp's CPU build (bash bench/llamacpp/build.sh cpu, git-ignored in .llamacpp/).
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: bash bench/cpu/perplexity.sh MODEL.gguf [ctx] [chunks] [threads] [rounds]}
ctx=${2:-512}
chunks=${3:-8}
threads=${4:-2}
rounds=${5:-2}
text=${TEXT:-/usr/share/common-licenses/GPL-3}
me=bench/cpu/perplexity.sh tool=llama-perplexity
[ -f "$text" ] || { echo "$me: $text: no such file (set TEXT to a text file)" >&2; exit 1; }
# shellcheck source=bench/cpu/against_llamacpp.sh
. bench/cpu/against_llamacpp.sh
echo "== $model: perplexity of $text, -c $ctx, $chunks chunks, $threads threads, $rounds rounds${FLAGS:+, $FLAGS}"
read -r -a flags <<<"${FLAGS:-}"
now() { date +%s.%N; }
what=(-f "$text")
if [ -n "${BASE:-}" ]; then
    [ -f "$BASE" ] || die "$BASE: no such file"
    echo "== against $BASE's log-probabilities (llama-perplexity --kl-divergence-base)"
    "$bin/llama-perplexity" -m "$BASE" -f "$text" -c "$ctx" --chunks "$chunks" -t "$threads" \
        "${flags[@]}" --kl-divergence-base "$tmp/base.kld" >"$tmp/base.log" 2>&1 ||
        die "llama-perplexity --kl-divergence-base failed: $(tail -1 "$tmp/base.log")"
    what=(--kl-divergence-base "$tmp/base.kld" --kl-divergence)
fi
for r in $(seq "$rounds"); do
    echo "-- round $r/$rounds" >&2
    t=$(now)
    ./build/moevm perplexity -m "$model" "${what[@]}" -c "$ctx" --chunks "$chunks" \
        -t "$threads" "${flags[@]}" >"$tmp/moevm.$r" 2>&1 || die "moevm perplexity failed: $(tail -1 "$tmp/moevm.$r")"
    echo "moevm $(echo "$(now) - $t" | bc)" >>"$tmp/times"
    t=$(now)
    "$bin/llama-perplexity" -m "$model" "${what[@]}" -c "$ctx" --chunks "$chunks" \
        -t "$threads" "${flags[@]}" >"$tmp/llama.$r" 2>&1 || die "llama-perplexity failed: $(tail -1 "$tmp/llama.$r")"
    echo "llama $(echo "$(now) - $t" | bc)" >>"$tmp/times"
done
python3 - "$tmp" "$model" "$ctx" "$chunks" "$threads" "${BASE:-}" <<'EOF'
import glob, os, re, sys
tmp, model, ctx, chunks, threads, base = sys.argv[1:]
def name_type(path):
    stem = os.path.basename(path).removesuffix(".gguf")
    m = re.match(r"(.*?)-((?:q|iq|f|bf|mxfp)[0-9][0-9a-z_]*)(-imatrix)?$", stem)
    return (m.group(1), m.group(2)) if m else (stem, "unknown")
name, wtype = name_type(model)
best = {}
for line in open(f"{tmp}/times"):
    engine, secs = line.split()
    best[engine] = min(best.get(engine, 1e30), float(secs))
tokens = int(chunks) * int(ctx)
mv, ll = tokens / best["moevm"], tokens / best["llama"]
if base:
    def stat(engine, pattern):
        text = open(sorted(glob.glob(f"{tmp}/{engine}.*"))[0]).read()
        m = re.search(pattern, text)
        if not m:
            sys.exit(f"no '{pattern}' in {engine}'s output")
        return float(m.group(1))
    kld = {e: stat(e, r"Mean +KLD: +([-0-9.]+)") for e in ("moevm", "llama")}
    top = {e: stat(e, r"Same top p: +([0-9.]+)") for e in ("moevm", "llama")}
    print("| | mean KLD | same top p | s | tokens/s |\n|---|---:|---:|---:|---:|")
    print(f"| llama.cpp | {kld['llama']:.6f} | {top['llama']:.3f}% | {best['llama']:.1f} | {ll:.1f} |")
    print(f"| moevm | {kld['moevm']:.6f} | {top['moevm']:.3f}% | {best['moevm']:.1f} | {mv:.1f} |")
    print(f"RESULT bench=cpu_kld model={name} type={wtype} base={name_type(base)[1]} ctx={ctx} "
          f"chunks={chunks} threads={threads} moevm_kld={kld['moevm']:.6f} "
          f"llamacpp_kld={kld['llama']:.6f} moevm_same_top={top['moevm']:.3f} "
          f"llamacpp_same_top={top['llama']:.3f} moevm_tok_s={mv:.1f} llamacpp_tok_s={ll:.1f} "
          f"ratio={mv / ll:.3f}")
    sys.exit(0)
def estimate(engine):
    found = set()
    for f in glob.glob(f"{tmp}/{engine}.*"):
        m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", open(f).read())
        if not m:
            sys.exit(f"no estimate in {f}")
        found.add((float(m.group(1)), float(m.group(2))))
    return sorted(found)[0]  # the same every round (its threads' sums in a fixed order)
(mp, me), (lp, le) = estimate("moevm"), estimate("llama")
print(f"| | PPL | +/- | s | tokens/s |\n|---|---:|---:|---:|---:|")
print(f"| llama.cpp | {lp:.4f} | {le:.5f} | {best['llama']:.1f} | {ll:.1f} |")
print(f"| moevm | {mp:.4f} | {me:.5f} | {best['moevm']:.1f} | {mv:.1f} |")
print(f"RESULT bench=cpu_perplexity model={name} type={wtype} ctx={ctx} chunks={chunks} "
      f"threads={threads} moevm_ppl={mp:.4f} llamacpp_ppl={lp:.4f} "
      f"rel_diff={(mp - lp) / lp:+.2e} moevm_tok_s={mv:.1f} llamacpp_tok_s={ll:.1f} "
      f"ratio={mv / ll:.3f}")
EOF
