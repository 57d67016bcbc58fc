"""The engine's logits against the independent NumPy reference (moe_ref.py).

    /usr/bin/python3 tests/ref/check_forward.py --moevm build/moevm --workdir DIR [--types T,..]

The engine computes where its environment puts the experts (MOEVM_BACKEND): CTest runs this
twice, on the CPU and on the device forward pass over tests/fakecuda with the kernels
emulated (ref_forward_cuda), every architecture, type and variant both times.

KV cache (--kv-types): every case runs with an F32 cache, whose comparisons are the sharp
ones below, and the architectures at KV16_TYPES again with an F16 cache (the engine's
default) and, where asked (the CPU backend's), a Q8_0 cache, and F32 weights on two
architectures with each of the other types llama.cpp's -ctk takes (KV_MORE: BF16, Q4_0,
Q4_1, Q5_0, Q5_1, IQ4_NL), against a reference that rounds its keys and values as the
engine stores them (moe_ref Config.kv), with the wider tolerances KV_F16_TOL, KV_Q8_TOL
and KV_MORE_TOL say why. A block type's cache needs heads of whole blocks of 32: the tiny
models whose heads are 16 (and deepseek2's latent row of 48) are refused, as test_cli
checks, and left out here.

For each architecture (llama = Mixtral, qwen2moe, qwen3moe, olmoe, deepseek2, glm4moe,
minimax-m2, gpt-oss) and weight type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl,
q2_K, q3_K, q4_K_M, iq4_xs, and mxfp4: llama.cpp's MXFP4_MOE, the experts MXFP4 and the rest
Q8_0; the lattice-grid types iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s and iq1_m on two
architectures each, GRID_TYPE_ARCHS),
and for the VARIANTS (RoPE scaling, deepseek2's other kinds, GLM-4.5-Air) at f32 and q8_0: `moevm mkmodel
--preset tiny` writes a model, `moevm run` prefills
three random prompts (1, 5 and 12 tokens) and greedily generates 4 tokens, writing every
evaluated position's logits (--logits-out); the reference recomputes the logits of the same
fed token sequence in float64 from the file's exactly dequantized weights, and each row's
relative error ||engine - ref||_2 / ||ref||_2 must be within the type's tolerance.

Quantized weights (all but the float types): the engine, as ggml does, quantizes each
product's input activations to Q8_0 blocks (Q8_K for the K-quants). That costs up to ~3e-2 relative error against the exact
reference, and, now and then, it moves a token's router past a top-k boundary: a different
expert, and an error as large as a real bug's. So for these types two comparisons:
  exact     against the exact reference, on the rows before the first position whose
            routing (any layer) the activation rounding changes;
  emulated  against the reference with ggml's Q8_0 activation rounding emulated
            (moe_ref Config.act_quant), on every row: same routing as the engine.
The rows the exact comparison leaves out are counted in the output.

Greedy tokens: each generated token must be the argmax of the engine's previous row, and
the reference's argmax wherever the reference's top-2 margin is clear: more than 10 times
the tolerated RMS error of one logit (tol x ||row||_2 / sqrt(n_vocab)).

Sensitivity: the same comparison against deliberately wrong references (RoPE pairing
swapped, top-k renormalisation flipped, experts shifted by one) must fail by a wide margin,
so a pass here means something (every architecture and variant, the SENSITIVITY_TYPES).
It is a property of the reference and the tolerance: logits that pass the comparison differ
from a wrong reference by its distance from the right one give or take the tolerance (the
triangle inequality), so the device and distributed runs (--no-sensitivity) leave it to the
CPU run, whose time it was most of.

Exit status: 0 pass, 1 any failure (with the reason), 77 NumPy not importable (skipped).
"""

import argparse
import os
import re
import shlex
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("skip: check_forward: NumPy is not importable")
    sys.exit(77)

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_read  # noqa: E402
import moe_ref  # noqa: E402

ARCHS = ("llama", "qwen2moe", "qwen3moe", "olmoe", "deepseek2", "glm4moe", "minimax-m2",
         "gpt-oss")
TYPES = {"f32": gguf_read.GGML_F32, "f16": gguf_read.GGML_F16, "bf16": gguf_read.GGML_BF16,
         "q8_0": gguf_read.GGML_Q8_0, "q4_0": gguf_read.GGML_Q4_0,
         "q4_1": gguf_read.GGML_Q4_1, "q5_0": gguf_read.GGML_Q5_0,
         "q5_1": gguf_read.GGML_Q5_1, "iq4_nl": gguf_read.GGML_IQ4_NL,
         "q2_K": gguf_read.GGML_Q2_K, "q3_K": gguf_read.GGML_Q3_K, "q4_K_M": gguf_read.GGML_Q4_K,
         "iq4_xs": gguf_read.GGML_IQ4_XS, "mxfp4": gguf_read.GGML_MXFP4,
         "iq2_xxs": 16, "iq2_xs": 17, "iq2_s": 22, "iq3_xxs": 18, "iq3_s": 21, "iq1_s": 19,
         "iq1_m": 29}
# The lattice-grid types share one chunk decoder in the engine and differ in their bit
# layouts, which one model each would cover: each runs on two architectures (every
# architecture twice over the seven), not all eight, to keep the test's time.
GRID_TYPE_ARCHS = {"iq2_xxs": ("llama", "qwen2moe"), "iq2_xs": ("qwen3moe", "gpt-oss"),
                   "iq2_s": ("olmoe", "deepseek2"), "iq3_xxs": ("glm4moe", "llama"),
                   "iq3_s": ("minimax-m2", "qwen3moe"), "iq1_s": ("deepseek2", "gpt-oss"),
                   "iq1_m": ("glm4moe", "minimax-m2")}
QUANTIZED = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "q2_K", "q3_K", "q4_K_M",
             "iq4_xs", "mxfp4", *GRID_TYPE_ARCHS)
# The K-quants need rows of whole 256-element super-blocks: the tiny shape widened to 256
# (its 64-wide attention output then falls back to Q5_0 as llama-quantize's does, and
# Q4_K_M puts Q6_K on layer 1's attn_v and ffn_down_exps: mixed expert types, as in
# llama.cpp's files). The Qwen MoE architectures get 96 expert channels, as Qwen1.5/2-MoE's
# 1408 not whole super-blocks: their down matrices fall back to Q5_0 (Q8_0 where Q6_K),
# under Q4_K gate and up.
# Q2_K, Q3_K, IQ4_XS and the grid types likewise, their fallback being IQ4_NL.
SUPER_BLOCK_TYPES = ("q2_K", "q3_K", "q4_K_M", "iq4_xs", *GRID_TYPE_ARCHS)
MKMODEL_ARGS = {t: ["--embd", "256", "--expert-ff", "256"] for t in SUPER_BLOCK_TYPES}
MKMODEL_ARCH_ARGS = {(arch, t): ["--expert-ff", "96"]
                     for arch in ("qwen2moe", "qwen3moe") for t in SUPER_BLOCK_TYPES}

# Max relative row error: (exact comparison, emulated comparison), with an F32 KV cache.
# Measured on the tiny presets (2 or 3 blocks, 64 wide, 8 experts, top-2): float types
# <= 1.6e-6 (F32 arithmetic: the reference has the engine's exact weights), and the two
# comparisons are one. Quantized types: exact <= 6.3e-2 on routing-stable rows (Q8_0
# or Q8_K activation rounding; 6.3e-2 is gpt-oss's IQ4_XS model, the others <= 5.7e-2);
# emulated ~6e-8, except where F32 and F64 round an activation to different sides of a
# Q8_0 step (seen up to 2.7e-2, Q3_K). The deliberate bugs below cost
# >= 0.18 (renormalisation flipped; RoPE pairing swapped >= 0.88, experts shifted >= 0.99).
TOL = {"f32": (1e-4, 1e-4), "f16": (1e-4, 1e-4), "bf16": (1e-4, 1e-4),
       "q8_0": (7e-2, 3e-2), "q4_0": (7e-2, 3e-2), "q4_1": (7e-2, 3e-2), "q5_0": (7e-2, 3e-2),
       "q5_1": (7e-2, 3e-2), "iq4_nl": (7e-2, 3e-2), "q2_K": (7e-2, 3e-2), "q3_K": (7e-2, 3e-2),
       "q4_K_M": (7e-2, 3e-2), "iq4_xs": (7e-2, 3e-2), "mxfp4": (7e-2, 3e-2),
       **{t: (7e-2, 3e-2) for t in GRID_TYPE_ARCHS}}
# The engine's KV cache is checked in F32 with every weight type and variant (the sharp
# comparisons above), and in F16 (its default) with these: the cache's type is independent of
# the weights'; one quantized type shows the two roundings together.
KV16_TYPES = ("f32", "f16", "q8_0")
# With an F16 KV cache the reference rounds its keys and values as the engine stores them
# (moe_ref.kv_round), but from F64 where the engine rounds its F32: where the two fall on
# either side of an F16 rounding step an element moves by an F16 ulp (2^-11), which the tiny
# models carry to ~1e-4 of their logits. Measured on both backends, float types: median
# 3e-6, max 1.7e-4 (against a reference that does not round: up to 1.4e-3, and a greedy
# token changed), so their tolerance is KV_F16_TOL; Q8_0 stays within its own (exact 4.1e-2,
# emulated 1.2e-2).
KV_F16_TOL = 4e-4
# How a case's name says its cache, and the architectures whose tiny heads (32) are whole
# Q8_0 blocks.
KV_TAG = {"f32": "", "f16": "/kv16", "q8_0": "/kv8", "bf16": "/kvbf16", "q4_0": "/kvq4_0",
          "q4_1": "/kvq4_1", "q5_0": "/kvq5_0", "q5_1": "/kvq5_1", "iq4_nl": "/kviq4_nl"}
KV_Q8_ARCHS = ("qwen3moe", "minimax-m2", "glm4moe", "gpt-oss")
# The other types llama.cpp's -ctk takes, each with F32 weights (their roundings alone) on one
# of two of those architectures: Qwen3's grouped heads with their norms, or gpt-oss's sinks
# and windowed blocks (a ring of rows); each kind of block (with a min or not, a fifth bit or
# not, a table) on both.
KV_MORE = {"bf16": "qwen3moe", "q4_0": "gpt-oss", "q4_1": "qwen3moe", "q5_0": "gpt-oss",
           "q5_1": "gpt-oss", "iq4_nl": "qwen3moe"}
# With a Q8_0 KV cache the same holds for a step of 1/127 of a block's largest element:
# an element whose F32 (the engine) and F64 (the reference) values fall on either side of a
# rounding boundary moves by that step. Measured on the CPU (2026-12-01, the four
# architectures whose heads are whole blocks, 3 prompts each): float weights 6.9e-7 (no
# element fell on a boundary; one that does costs about 1e-3 on these models); Q8_0 weights
# exact 7.3e-2 (the activations' rounding and the cache's together), emulated 1.8e-2.
KV_Q8_TOL = {"f32": (3e-3, 3e-3), "f16": (3e-3, 3e-3), "q8_0": (1e-1, 3e-2)}
# The 4- and 5-bit types' steps are larger (1/15 to 1/31 of a block's range) and rarely
# straddled, but one that is moves an element by that whole step: measured (2026-12-02, the
# CPU, F32 weights, each type on both architectures) 2e-7 to 8e-7 in 29 of the 30 prompt runs
# at the AVX-512 level, 2.2e-2 in gpt-oss's Q4_1 12-token prompt (its first generated row; the
# reference's keys put an element 3e-5 of a step from a rounding boundary), and at the AVX2
# and scalar levels, whose sums differ, up to 2.2e-2 and 4.3e-4. BF16's flips move an element by 2^-8: 1.3e-3. The sensitivity margin
# (4 x 3e-2) stays under every deliberate bug's distance (0.26 and more).
KV_MORE_TOL = (3e-2, 3e-2)


def tolerances(wtype, kv_type):
    """(exact, emulated) tolerances of wtype's comparisons with that KV cache type."""
    if kv_type in KV_MORE:
        return KV_MORE_TOL
    if kv_type == "q8_0":
        return KV_Q8_TOL[wtype]
    if kv_type == "f16" and wtype not in QUANTIZED:
        return KV_F16_TOL, KV_F16_TOL
    return TOL[wtype]


SENSITIVITY_MARGIN = 4.0   # a deliberate bug must exceed the (emulated) tolerance this much
# A wrong reference's distance from the right one is the architecture's (what the bug
# changes), the tolerance the type family's: the float types share one, the quantized types
# another. So the sensitivity runs for a type of each family and kind of expert storage
# (block, K-quant mix, MXFP4 experts, lattice grid), every architecture and variant: it was
# most of this check's time with all 21.
SENSITIVITY_TYPES = ("f32", "q8_0", "q4_K_M", "mxfp4", "iq2_xxs", "iq3_s")
# The reference's argmax is checked where its top-2 margin exceeds this many times the
# tolerated RMS per-logit error, tol x ||row|| / sqrt(n_vocab).
GREEDY_MARGIN = 10.0

# Variants of an architecture's tiny model, checked for VARIANT_TYPES only: the context
# extensions (a YaRN ramp from pair 5 to 12 of qwen3moe's 16; linear on llama's NORM pairs),
# DeepSeek-V3's routing, Kimi K2's (one group, x2.827, its own vocabulary), DeepSeek-V2's
# (softmax in groups ranked by their best expert) and GLM-4.5-Air (no QK norm).
VARIANTS = {"+yarn": ("qwen3moe", ["--rope-scaling", "yarn:4:4096"]),
            "+linear": ("llama", ["--rope-scaling", "linear:4"]),
            "+v3": ("deepseek2", ["--preset", "tiny-v3", "--rope-scaling", "yarn:4:4096"]),
            "+k2": ("deepseek2", ["--preset", "tiny-k2"]),
            "+v2": ("deepseek2", ["--preset", "tiny-v2"]),
            "+air": ("glm4moe", ["--preset", "tiny-air"])}
VARIANT_TYPES = ("f32", "q8_0")

MODEL_SEED = 7
PROMPT_SEED = 20240607
PROMPT_LENGTHS = (1, 5, 12)
# The longest prompt runs in batches of 2 in a context of 64 positions: prefill split into
# batches, and gpt-oss's windowed blocks keeping a ring of 5 + 2 rows, written twice
# (engine/forward/kv_cache.h), which its 16 positions go round more than twice. The shorter ones run
# in one batch with every position kept (a ring would not be smaller).
LONG_ARGS = ("--ctx", "64", "--batch", "2")
N_GEN = 4
TIMEOUT_S = 300


class Failure(Exception):
    pass


def run(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise Failure(f"timed out after {TIMEOUT_S} s: {' '.join(cmd)}")
    if p.returncode != 0:
        # bytes: generated text from random weights need not be valid UTF-8
        tail = (p.stdout + p.stderr).decode("utf-8", "replace").strip().splitlines()[-8:]
        raise Failure(f"exit status {p.returncode}: {' '.join(cmd)}\n    " + "\n    ".join(tail))
    return p


def read_logits(path, n_vocab):
    """The --logits-out file: 16-byte header {b"MVML", u32 version 1, u32 n_vocab,
    u32 n_rows}, then n_rows x {i32 token, i32 pos, f32 logits[n_vocab]}, little-endian."""
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size < 16 or bytes(raw[:4]) != b"MVML":
        raise Failure(f"{path}: not a logits file (magic {bytes(raw[:4])!r})")
    version, nv, n_rows = raw[4:16].view("<u4")
    if version != 1 or nv != n_vocab:
        raise Failure(f"{path}: version {version}, n_vocab {nv} (want 1, {n_vocab})")
    rec = np.dtype([("token", "<i4"), ("pos", "<i4"), ("logits", "<f4", (n_vocab,))])
    if raw.size != 16 + n_rows * rec.itemsize:
        raise Failure(f"{path}: {raw.size} bytes, want {16 + n_rows * rec.itemsize} for "
                      f"{n_rows} rows")
    return raw[16:].view(rec)


def row_errors(a, b):
    return np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)


def first_routing_change(ta, tb, n):
    """First position whose set of selected experts differs in any layer (n if none)."""
    pos = [np.flatnonzero(np.any(np.sort(a["selected"], 1) != np.sort(b["selected"], 1), 1))
           for a, b in zip(ta, tb)]
    return min([int(p[0]) for p in pos if p.size] + [n])


def model_file(workdir, arch, wtype, variant=""):
    return os.path.join(workdir, f"{arch}{variant}-{wtype}.gguf")


def make_model(moevm, workdir, arch, wtype, variant=""):
    path = model_file(workdir, arch, wtype, variant)
    run([moevm, "mkmodel", "--preset", "tiny", "--arch", arch, "--type", wtype,
         "--seed", str(MODEL_SEED), "-o", path] + MKMODEL_ARGS.get(wtype, [])
        + MKMODEL_ARCH_ARGS.get((arch, wtype), []) + VARIANTS.get(variant, ("", []))[1])
    model = moe_ref.load_model(path)
    if model.cfg.arch != arch:
        raise Failure(f"{path}: general.architecture is {model.cfg.arch!r}, not {arch!r}")
    # mkmodel must have honoured --type where it matters most: the experts.
    got = model.wtypes[f"blk.{model.cfg.n_dense}.ffn_gate_exps.weight"]
    if got != TYPES[wtype]:
        raise Failure(f"{path}: expert weights are ggml type {got}, not {wtype}")
    return model


class Compare:
    """The reference side of one (model, fed sequence) comparison."""

    def __init__(self, model, wtype, tokens):
        self.tol_exact, self.tol = tolerances(wtype, model.cfg.kv)
        self.quantized = wtype in QUANTIZED
        trace_exact, trace_emu = [], []
        self.exact = moe_ref.forward(model, tokens, trace=trace_exact)
        if self.quantized:
            self.emu = moe_ref.forward(model.replace(act_quant=True), tokens, trace=trace_emu)
            self.stable = first_routing_change(trace_exact, trace_emu, len(tokens))
        else:
            self.emu, self.stable = self.exact, len(tokens)

    def errors(self, logits):
        """Row errors: (exact, over the routing-stable rows; emulated, over all rows); the
        same numbers twice for float types."""
        return (row_errors(logits[:self.stable], self.exact[:self.stable]),
                row_errors(logits, self.emu))


# The texts engine/tokenizer/tokenizer.c ends a generation at besides the file's EOS (llama.cpp's).
EOG_TEXTS = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
             "<|eom_id|>", "<|return|>", "<|call|>", "<EOT>", "<|fim_pad|>", "<fim-pad>",
             "<PAD>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<|file_sep|>"}


def end_ids(meta):
    """The token ids a generation stops at: EOS, EOT, EOM and the EOG_TEXTS."""
    texts = meta.get("tokenizer.ggml.tokens", [])
    ids = {i for i, s in enumerate(texts) if s in EOG_TEXTS}
    if "<|return|>" in texts and "<|end|>" in texts:   # gpt-oss: <|end|> ends a message only
        ids.discard(texts.index("<|end|>"))
    return ids | {meta[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                    "tokenizer.ggml.eom_token_id") if k in meta}


def check_prompt(moevm, model, model_path, wtype, workdir, prompt, tag, launcher=(),
                 run_args=()):
    """Runs the engine on one prompt; returns (line, problems, worst errors, records)."""
    out = os.path.join(workdir, f"{tag}.bin")
    p = run([*launcher, moevm, "run", "-m", model_path, "--tokens",
             ",".join(map(str, prompt)), "-n", str(N_GEN), "--temp", "0", "--logits-out", out,
             *run_args])
    rec = read_logits(out, model.cfg.n_vocab)
    L, problems = len(prompt), []
    if launcher:  # a distributed run must have sent some experts' rows to other ranks
        m = re.search(r"distributed: .* remote (\d+) of (\d+) expert rows",
                      p.stderr.decode("utf-8", "replace"))
        if not m or int(m.group(1)) == 0:
            problems.append("no expert rows were computed on another rank: " +
                            (m.group(0) if m else "no 'distributed:' line on stderr"))

    # Rows: the prompt, then each generated token fed back; positions 0, 1, 2, ... Fewer
    # only where generation stopped at end-of-text (not fed back), which is then the argmax
    # of the last row.
    stopped = len(rec) and int(rec["logits"][-1].argmax()) in end_ids(model.meta)
    if not (len(rec) == L + N_GEN or (L <= len(rec) < L + N_GEN and stopped)):
        raise Failure(f"{len(rec)} rows, want {L + N_GEN} (prompt + generated)"
                      + ("" if stopped else ", and the last row does not end the text"))
    if not np.array_equal(rec["pos"], np.arange(len(rec))):
        raise Failure(f"positions {rec['pos'].tolist()}, want 0..{len(rec) - 1}")
    if not np.array_equal(rec["token"][:L], prompt):
        raise Failure(f"fed tokens {rec['token'][:L].tolist()} != prompt {prompt}")
    tokens = rec["token"].tolist()
    logits = rec["logits"].astype(np.float64)
    if not np.all(np.isfinite(logits)):
        raise Failure("non-finite logits")

    ref = Compare(model, wtype, tokens)
    rows_exact, rows_emu = ref.errors(logits)
    if launcher:
        # The leader adds each rank's partial sum of its experts' outputs, so the logits
        # differ from one process's in the last bits, in a way that follows the placement
        # (which follows the measured links: it changes from run to run). Where the two
        # references already route differently, a near tie, that can pick the other expert
        # (seen once in CI: glm4moe q8_0, error 0.9 from row 10, its first unstable row). So
        # a departure that begins at or after that row ends the emulated comparison there,
        # as the exact one ends; one that begins before it still fails.
        bad = np.flatnonzero(~(rows_emu <= ref.tol))
        if bad.size and bad[0] >= ref.stable:
            rows_emu = rows_emu[:bad[0]]
    e_exact = float(rows_exact.max()) if rows_exact.size else 0.0
    e_emu = float(rows_emu.max()) if rows_emu.size else 0.0
    checks = [("exact", rows_exact, ref.tol_exact)] + \
        ([("emulated", rows_emu, ref.tol)] if ref.quantized else [])
    for name, rows, tol in checks:
        if rows.size and not rows.max() <= tol:  # (NaN fails too)
            problems.append(f"{name} error {rows.max():.2e} > {tol:.0e} at row "
                            f"{int(np.argmax(rows))}")

    # Greedy decoding: token i+1 fed is the argmax of row i, for the generated ones.
    checked = 0
    for i in range(L - 1, len(rec) - 1):
        nxt = tokens[i + 1]
        if logits[i, nxt] != logits[i].max():
            problems.append(f"generated token {nxt} at row {i + 1} is not the argmax "
                            f"({int(logits[i].argmax())}) of the engine's row {i}")
        if i >= len(rows_emu):  # past a distributed run's near tie (above)
            continue
        top2 = np.sort(ref.emu[i])[-2:]
        rms_tol = ref.tol * np.linalg.norm(ref.emu[i]) / np.sqrt(model.cfg.n_vocab)
        if top2[1] - top2[0] > GREEDY_MARGIN * rms_tol:
            checked += 1
            if nxt != int(ref.emu[i].argmax()):
                problems.append(f"generated token {nxt} at row {i + 1}, the reference's "
                                f"clear argmax is {int(ref.emu[i].argmax())}")
    n_gen = len(rec) - L

    line = f"prompt {L:2d}: rows {len(rec):2d}  "
    if ref.quantized:
        line += (f"max rel err exact {e_exact:.2e} (tol {ref.tol_exact:.0e}; "
                 f"{ref.stable}/{len(rec)} rows routing-stable), emulated {e_emu:.2e} "
                 f"(tol {ref.tol:.0e}; median {np.median(rows_emu) if rows_emu.size else 0:.0e}; "
                 f"{len(rows_emu)} rows)")
    else:
        line += f"max rel err {e_emu:.2e} (tol {ref.tol:.0e})"
    line += f"  greedy: {checked}/{n_gen} checked vs reference"
    return line, problems, (e_exact, e_emu), (tokens, logits)


def shifted_experts(model):
    """The model with every layer's expert e taking expert e+1's weights."""
    w = dict(model.w)
    for il in range(model.cfg.n_dense, model.cfg.n_layer):
        for n in ("gate", "up", "down"):
            k = f"blk.{il}.ffn_{n}_exps.weight"
            w[k] = np.roll(model.w[k], -1, axis=0)
    return moe_ref.Model(model.cfg, w, model.wtypes, model.meta)


def without(model, *suffixes):
    """The model without the tensors whose names end in one of `suffixes`."""
    return moe_ref.Model(model.cfg, {k: v for k, v in model.w.items()
                                     if not k.endswith(suffixes)}, model.wtypes, model.meta)


def filled(model, value, *suffixes):
    """The model with the tensors whose names end in one of `suffixes` set to `value`."""
    w = {k: np.full_like(v, value) if k.endswith(suffixes) else v for k, v in model.w.items()}
    return moe_ref.Model(model.cfg, w, model.wtypes, model.meta)


def sensitivity(model, wtype, seqs):
    """Max row error of the engine, over the prompts' (tokens, logits), against deliberately
    wrong references: each must be far outside the tolerance, or the comparison above could
    not have caught that bug. All prompts count: a routing rule can decide few rows."""
    r = model.cfg.rules
    bugs = {"rope pairing swapped": model.replace(rope_neox=not r.rope_neox),
            "renormalisation flipped": model.replace(norm_topk=not r.norm_topk),
            "experts shifted by one": shifted_experts(model)}
    if model.cfg.rope_scaling:
        bugs["rope scaling ignored"] = model.replace(rope_scaling=())
    if model.cfg.sigmoid_gate:
        bugs["sigmoid as softmax"] = model.replace(sigmoid_gate=False)
    if model.cfg.n_group > 1:
        bugs["expert groups ignored"] = model.replace(n_group=0)
        bugs["group ranking swapped"] = model.replace(group_max=not model.cfg.group_max)
    if any(k.endswith("exp_probs_b.bias") for k in model.w):
        bugs["expert bias ignored"] = without(model, "exp_probs_b.bias")
    if model.cfg.n_rot < model.cfg.head_dim and not r.mla:
        bugs["rope on the whole head"] = model.replace(n_rot=model.cfg.head_dim)
    if r.qk_norm and "blk.0.attn_q_norm.weight" in model.w:
        bugs["QK norm ignored"] = model.replace(qk_norm="")
    if model.cfg.n_nextn:
        bugs["NextN block computed"] = model.replace(n_layer=model.cfg.n_layer +
                                                     model.cfg.n_nextn)
    if r.oai:
        bugs["window ignored"] = model.replace(n_swa=0)
        bugs["sinks ignored"] = filled(model, -np.inf, "attn_sinks.weight")
        bugs["output bias ignored"] = filled(model, 0.0, "attn_output.bias")
        bugs["router bias ignored"] = filled(model, 0.0, "ffn_gate_inp.bias")
        bugs["expert biases ignored"] = filled(model, 0.0, "_exps.bias")
    results = {}
    for name, bad in bugs.items():
        if wtype in QUANTIZED:
            bad = bad.replace(act_quant=True)
        results[name] = max(float(row_errors(logits, moe_ref.forward(bad, tokens)).max())
                            for tokens, logits in seqs)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moevm", required=True, help="the moevm executable")
    ap.add_argument("--workdir", required=True, help="directory for models and logits")
    ap.add_argument("--types", default=",".join(TYPES),
                    help="weight types to check, comma-separated (default: all)")
    ap.add_argument("--arches", default=",".join(ARCHS),
                    help="architectures to check (with their variants), comma-separated "
                         "(default: all)")
    ap.add_argument("--launcher", default="",
                    help="a command line that runs `moevm run` (e.g. 'mpirun -n 3'): the "
                         "engine distributed over its ranks")
    ap.add_argument("--run-args", default="", help="more options for `moevm run`")
    ap.add_argument("--no-sensitivity", action="store_true",
                    help="skip the deliberately wrong references (see Sensitivity above): "
                         "for a second backend whose logits this run holds to the same "
                         "tolerance of the same reference as the CPU run that checks them")
    ap.add_argument("--kv-types", default="f32,f16",
                    help="the engine's KV cache types to check: f32 with every weight type, "
                         "f16 and q8_0 with KV16_TYPES among them, the KV_MORE types with "
                         "f32 (default: f32,f16)")
    args = ap.parse_args()
    launcher, run_args = shlex.split(args.launcher), shlex.split(args.run_args)
    kv_types = args.kv_types.split(",")
    if not kv_types or not set(kv_types) <= set(KV_TAG):
        ap.error(f"--kv-types {args.kv_types}: of {', '.join(KV_TAG)}")
    moevm = os.path.abspath(args.moevm)
    os.makedirs(args.workdir, exist_ok=True)
    types = args.types.split(",")
    unknown = [t for t in types if t not in TYPES]
    if unknown:
        ap.error(f"--types: {', '.join(unknown)}: not one of {', '.join(TYPES)}")
    arches = args.arches.split(",")
    unknown = [a for a in arches if a not in ARCHS]
    if unknown:
        ap.error(f"--arches: {', '.join(unknown)}: not one of {', '.join(ARCHS)}")

    failures, worst = [], {}   # by type (and type/kv16): [exact, emulated]
    n_cases = 0
    # The variants exercise RoPE and attention, which the distributed mode computes on rank 0
    # as it does alone.
    cases = [(arch, "", wtype, "f32") for arch in arches for wtype in types
             if arch in GRID_TYPE_ARCHS.get(wtype, ARCHS)]
    cases += [(VARIANTS[v][0], v, wtype, "f32") for v in VARIANTS for wtype in types
              if wtype in VARIANT_TYPES and not launcher and VARIANTS[v][0] in arches]
    cases = [c for c in cases if "f32" in kv_types]
    cases += [(arch, "", wtype, kv) for kv in ("f16", "q8_0") for arch in arches
              for wtype in types if wtype in KV16_TYPES and kv in kv_types
              and (kv != "q8_0" or arch in KV_Q8_ARCHS)]
    cases += [(arch, "", "f32", kv) for kv, arch in KV_MORE.items()
              if "f32" in types and kv in kv_types and arch in arches]
    for arch, variant, wtype, kv in cases:
        name = arch + variant + KV_TAG[kv]
        try:
            if kv == "f32" or "f32" not in kv_types:
                model = make_model(moevm, args.workdir, arch, wtype, variant)
            else:  # made for the f32 case
                model = moe_ref.load_model(model_file(args.workdir, arch, wtype, variant))
            model = model.replace(kv=kv)
        except (Failure, gguf_read.GGUFError, ValueError, KeyError) as e:
            failures.append(f"{name} {wtype}: mkmodel: {e}")
            print(f"FAIL {name} {wtype}: mkmodel: {e}")
            continue
        rng = np.random.default_rng(PROMPT_SEED)
        seqs = []
        for L in PROMPT_LENGTHS:
            n_cases += 1
            prompt = rng.integers(3, model.cfg.n_vocab, size=L).tolist()
            tag = f"{name.replace('/', '-')}-{wtype}-p{L}"
            try:
                path = model_file(args.workdir, arch, wtype, variant)
                extra = LONG_ARGS if L == max(PROMPT_LENGTHS) else ()
                line, problems, errs, seq = check_prompt(
                    moevm, model, path, wtype, args.workdir, prompt, tag, launcher,
                    (*run_args, *extra, "--kv-type", kv))
            except (Failure, ValueError) as e:  # ValueError: the reference refused the tokens
                failures.append(f"{tag}: {e}")
                print(f"FAIL {tag}: {e}")
                continue
            key = wtype + KV_TAG[kv]
            worst[key] = [max(a, b) for a, b in zip(worst.get(key, (0.0, 0.0)), errs)]
            print(("FAIL " if problems else "ok   ") + f"{name:9s} {wtype:6s} " + line)
            for p in problems:
                print(f"       {p}")
                failures.append(f"{tag}: {p}")
            seqs.append(seq)
        if seqs and not args.no_sensitivity and wtype in SENSITIVITY_TYPES:
            sens = sensitivity(model, wtype, seqs)
            tol = tolerances(wtype, kv)[1]
            weak = {k: v for k, v in sens.items() if not v >= SENSITIVITY_MARGIN * tol}
            print(("FAIL " if weak else "ok   ") +
                  f"{name:9s} {wtype:5s} sensitivity: " +
                  ", ".join(f"{k} {v:.2e}" for k, v in sens.items()))
            for k, v in weak.items():
                failures.append(f"{name} {wtype}: a reference with the {k} differs "
                                f"from the engine by only {v:.2e} (< {SENSITIVITY_MARGIN:g} x "
                                f"tol {tol:.0e}): the comparison cannot catch that bug, "
                                f"or the engine has it")

    print("worst max rel err by type: " + ", ".join(
        f"{t} {w[1]:.2e}" if t.split("/")[0] not in QUANTIZED
        else f"{t} exact {w[0]:.2e} emulated {w[1]:.2e}"
        for t, w in worst.items()))
    if failures:
        print(f"check_forward: FAILED: {len(failures)} problem(s) in {n_cases} prompt runs:")
        for f in failures:
            print(f"  {f}")
        return 1
    print(f"check_forward: PASS: {len(cases)} models ({len(arches)} architectures, "
          f"{len(types)} types, variants; KV cache {' and '.join(kv_types)}) x "
          f"{len(PROMPT_LENGTHS)} prompts against the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
