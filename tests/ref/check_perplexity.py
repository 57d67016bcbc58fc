"""`moevm perplexity` against llama-perplexity's algorithm over the NumPy reference.

    /usr/bin/python3 tests/ref/check_perplexity.py --moevm build/moevm --workdir DIR

For a vocabulary that adds a BOS (the tiny llama: each chunk's first token becomes the BOS)
and one that adds none (qwen3moe), with F32 weights and an F32 KV cache: `moevm perplexity`
on a text, in -c 24 chunks, three of them a pass (-b 72) and one chunk in four passes
(-b 6); the reference takes the same tokens (`moevm tokenize --ids`, whose tokenizer has
its own tests), cuts them as llama-perplexity does, computes each chunk's logits in
float64 (moe_ref.forward) and scores the second half of each chunk; the running values,
the estimate and its error must agree to 1e-4, relatively (they do to 1e-6). Sensitivity:
the same reference scoring every position after the first, or leaving the first token as
it is, or scoring the wrong token, must miss by more than that.

Exit status: 0 pass, 1 any failure (with the reason), 77 NumPy not importable (skipped).
"""

import argparse
import os
import re
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("skip: check_perplexity: NumPy is not importable")
    sys.exit(77)

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_ref  # noqa: E402

N_CTX, CHUNKS, TOL = 24, 5, 1e-4


def reference(model, tokens, bos, first=N_CTX // 2, replace_first=True, shift=1):
    """llama-perplexity's estimate over tokens: the running PPL a chunk, the PPL and its
    error. first, replace_first and shift are the knobs the sensitivity checks turn."""
    nll = nll2 = 0.0
    count, running = 0, []
    for c in range(min(CHUNKS, len(tokens) // N_CTX)):
        chunk = list(tokens[c * N_CTX:(c + 1) * N_CTX])
        if bos is not None and replace_first:
            chunk[0] = bos
        logits = moe_ref.forward(model, chunk)
        for pos in range(first, N_CTX - 1):
            row = logits[pos]
            top = row.max()
            lse = top + np.log(np.exp(row - top).sum())
            v = lse - row[chunk[min(pos + shift, N_CTX - 1)]]
            nll, nll2, count = nll + v, nll2 + v * v, count + 1
        running.append(np.exp(nll / count))
    mean = nll / count
    ppl = np.exp(mean)
    return running, ppl, np.sqrt((nll2 / count - mean * mean) / (count - 1)) * ppl


def engine(moevm, model, text, batch):
    out = subprocess.run([moevm, "perplexity", "-m", model, "-f", text, "-c", str(N_CTX),
                          "-b", str(batch), "--chunks", str(CHUNKS), "--kv-type", "f32",
                          "-t", "2"], capture_output=True, text=True, check=True).stdout
    running = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", out)]
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    return running, float(m.group(1)), float(m.group(2))


def close(a, b):
    return abs(a - b) <= TOL * abs(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moevm", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    text = os.path.join(args.workdir, "text.txt")
    with open(text, "w") as f:
        for i in range(80):
            f.write(f"On day {i} the ship sailed over the grey sea, and the crew sang "
                    f"{'softly' if i % 3 else 'loudly'} of home.\n")
    failures, passed = [], 0
    for arch in ("llama", "qwen3moe"):
        path = os.path.join(args.workdir, f"ppl-{arch}.gguf")
        subprocess.run([args.moevm, "mkmodel", "--preset", "tiny", "--arch", arch, "--type",
                        "f32", "-o", path], check=True, capture_output=True)
        ids = subprocess.run([args.moevm, "tokenize", "-m", path, "-f", text, "--ids"],
                             capture_output=True, text=True, check=True).stdout
        tokens = [int(t) for t in ids.strip().split(",")]
        bos_ids = subprocess.run([args.moevm, "tokenize", "-m", path, "-p", "", "--ids"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        bos = int(bos_ids) if bos_ids else None
        if (bos is not None) != (arch == "llama"):
            failures.append(f"{arch}: the vocabulary's BOS is {bos}: the case is not tested")
        model = moe_ref.load_model(path)
        running, ppl, err = reference(model, tokens, bos)
        for batch in (3 * N_CTX, N_CTX // 4):
            got_running, got_ppl, got_err = engine(args.moevm, path, text, batch)
            ok = (len(got_running) == len(running) and
                  all(close(a, b) for a, b in zip(got_running, running)) and
                  close(got_ppl, ppl) and close(got_err, err))
            print(f"{arch} -b {batch}: PPL {got_ppl} +/- {got_err}, reference {ppl:.4f} "
                  f"+/- {err:.5f}: {'ok' if ok else 'FAIL'}")
            if ok:
                passed += 1
            else:
                failures.append(f"{arch} -b {batch}: {got_running} against {running}")
        # each of these mistakes must fall outside the tolerance, or the comparison above
        # could not catch it (a random model's tokens are all about as surprising, so the
        # margins are small, but they are many times the engine's error)
        wrong = {"every position scored": dict(first=1),
                 "the wrong token scored": dict(shift=0)}
        if bos is not None:
            wrong["the first token kept"] = dict(replace_first=False)
        for what, knobs in wrong.items():
            w_ppl = reference(model, tokens, bos, **knobs)[1]
            if close(w_ppl, ppl):
                failures.append(f"{arch}: the reference with {what} is as close: {w_ppl}")
            else:
                passed += 1
    for f in failures:
        print("FAIL:", f)
    print(f"{passed} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
