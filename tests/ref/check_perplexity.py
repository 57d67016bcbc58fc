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

The KL divergence (--kl-divergence-base, --kl-divergence): the base file moevm writes for
the llama model is llama.cpp's (header, the chunks' tokens, a row of 16-bit log-probabilities
per scored position), each row within a quantization step of the reference's float64
log-softmax; and a second model (another seed, the same vocabulary) compared with that
base gives the mean KL divergence and the same-top-token share that the reference
computes from the decoded base and its own logits, to 1e-4.

Exit status: 0 pass, 1 any failure (with the reason), 77 NumPy not importable (skipped).
"""

import argparse
import os
import re
import struct
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
KLD_CHUNKS = 10  # 110 positions: llama.cpp's summary wants 100 at least


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


def log_softmax(row):
    top = row.max()
    return row - (top + np.log(np.exp(row - top).sum()))


def chunk_logits(model, tokens, bos, chunks):
    """Each chunk's logits (BOS first where the vocabulary adds one), its scored rows."""
    first = N_CTX // 2
    for c in range(min(chunks, len(tokens) // N_CTX)):
        chunk = list(tokens[c * N_CTX:(c + 1) * N_CTX])
        if bos is not None:
            chunk[0] = bos
        logits = moe_ref.forward(model, chunk)
        for pos in range(first, N_CTX - 1):
            yield logits[pos]


def read_base(path, n_vocab):
    """llama.cpp's file: (n_ctx, n_vocab, n_chunk), tokens, rows of decoded log-probs."""
    data = open(path, "rb").read()
    assert data[:8] == b"_logits_", data[:8]
    n_ctx, vocab, n_chunk = struct.unpack_from("<3i", data, 8)
    tokens = list(struct.unpack_from(f"<{n_ctx * n_chunk}i", data, 20))
    nv = 2 * ((vocab + 1) // 2) + 4
    at, rows = 20 + 4 * n_ctx * n_chunk, []
    while at < len(data):
        scale, min_lp = struct.unpack_from("<2f", data, at)
        q = np.frombuffer(data, dtype="<u2", count=n_vocab, offset=at + 8).astype(np.float64)
        rows.append((scale * q + min_lp, scale))
        at += 2 * nv
    return (n_ctx, vocab, n_chunk), tokens, rows


def check_kld(moevm, workdir, path, model, tokens, bos, text):
    """The base file of `path` against the reference, and another seed's model against it.
    Failures as strings; the number of checks passed."""
    failures, passed = [], 0
    base = os.path.join(workdir, "base.kld")
    subprocess.run([moevm, "perplexity", "-m", path, "-f", text, "-c", str(N_CTX), "--chunks",
                    str(KLD_CHUNKS), "--kv-type", "f32", "-t", "2", "--kl-divergence-base",
                    base], check=True, capture_output=True)
    V = model.cfg.n_vocab
    head, got_tokens, rows = read_base(base, V)
    ref_rows = list(chunk_logits(model, tokens, bos, KLD_CHUNKS))
    if head != (N_CTX, V, KLD_CHUNKS) or got_tokens != tokens[:N_CTX * KLD_CHUNKS] or \
            len(rows) != len(ref_rows):
        failures.append(f"base file: header {head}, {len(rows)} rows for {len(ref_rows)}")
        return failures, passed
    worst = 0.0
    for (lp, scale), ref in zip(rows, ref_rows):
        want = log_softmax(ref)
        kept = want > lp.min() + scale  # above the floor the file clamps to
        worst = max(worst, float(np.abs(lp[kept] - want[kept]).max() / scale))
    if worst > 0.6:  # half a step, and the engine's float against float64 (1e-5: 0.04 step)
        failures.append(f"base rows off the reference by {worst:.2f} quantization steps")
    else:
        passed += 1
    other = os.path.join(workdir, "ppl-llama-seed7.gguf")
    subprocess.run([moevm, "mkmodel", "--preset", "tiny", "--arch", "llama", "--type", "f32",
                    "--seed", "7", "-o", other], check=True, capture_output=True)
    out = subprocess.run([moevm, "perplexity", "-m", other, "--kl-divergence-base", base,
                          "--kl-divergence", "--kv-type", "f32", "-t", "2"],
                         capture_output=True, text=True, check=True).stdout
    kld = float(re.search(r"Mean    KLD: +([-0-9.]+)", out).group(1))
    top = float(re.search(r"Same top p: +([0-9.]+)", out).group(1))
    ref_kld, ref_top = [], 0
    for (lp, scale), row in zip(rows, chunk_logits(moe_ref.load_model(other), tokens, bos,
                                                   KLD_CHUNKS)):
        mine = log_softmax(row)
        live = lp > -16
        ref_kld.append(float((np.exp(lp[live]) * (lp[live] - mine[live])).sum()))
        ref_top += int(np.argmax(row) == np.argmax(lp))
    ref_kld, ref_top = float(np.mean(ref_kld)), 100.0 * ref_top / len(rows)
    print(f"KLD of another seed against the base: {kld} (reference {ref_kld:.6f}), same top "
          f"{top}% (reference {ref_top:.3f}%)")
    if abs(kld - ref_kld) > max(1e-6, TOL * ref_kld) or abs(top - ref_top) > 1e-3:
        failures.append(f"KLD {kld} / top {top}% against {ref_kld} / {ref_top}%")
    else:
        passed += 1
    # the model against its own base: nothing but the file's rounding apart (which may
    # make a near tie at the top a tie, broken to the lower id)
    out = subprocess.run([moevm, "perplexity", "-m", path, "--kl-divergence-base", base,
                          "--kl-divergence", "--kv-type", "f32", "-t", "2"],
                         capture_output=True, text=True, check=True).stdout
    kld = float(re.search(r"Mean    KLD: +([-0-9.]+)", out).group(1))
    top = float(re.search(r"Same top p: +([0-9.]+)", out).group(1))
    if abs(kld) > 1e-5 or top < 99.0:
        failures.append(f"the model against its own base: KLD {kld}, same top {top}%")
    else:
        passed += 1
    return failures, passed


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
        if arch == "llama":
            f, n = check_kld(args.moevm, args.workdir, path, model, tokens, bos, text)
            failures += f
            passed += n
    for f in failures:
        print("FAIL:", f)
    print(f"{passed} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
