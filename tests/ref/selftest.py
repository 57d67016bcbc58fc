"""Self-test of the reference (gguf_read.py, moe_ref.py), with no engine involved.

    /usr/bin/python3 tests/ref/selftest.py        exit 0 pass, 1 fail, 77 no NumPy

Holds a small GGUF v2/v3 writer (with ggml's reference quantizers) to make files the
reader must read back exactly, and random tiny models of the architectures it writes itself
(BUILT) that the reference's vectorised forward pass must agree with a second, deliberately
naive token-by-token implementation on (scalar RoPE through complex rotation, per-head
loops, a KV cache, top-k by repeated maximum). Also checks the properties that pin the
conventions down: RoPE is the identity at position 0, earlier logits do not depend on later
tokens, llama.cpp's q/k row permutation turns NEOX RoPE into adjacent-pair RoPE, routing ties
go to the lower index, the top-k weights are renormalised exactly where the model says so,
and gpt-oss's sinks, sliding window and clamped SwiGLU do what their definitions say.

Finally prints, for information, what activation quantization (the Q8_0 path, emulated)
and a few deliberate bugs do to the logits of such models, to set beside check_forward.py's
tolerances (chosen from the engine's measured errors).
"""

import cmath
import os
import struct
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("skip: selftest: NumPy is not available")
    sys.exit(77)

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import gguf_read as gr
import moe_ref

# ---- a small GGUF writer ----------------------------------------------------------------

_FMT = {gr.T_UINT8: "<B", gr.T_INT8: "<b", gr.T_UINT16: "<H", gr.T_INT16: "<h",
        gr.T_UINT32: "<I", gr.T_INT32: "<i", gr.T_FLOAT32: "<f", gr.T_BOOL: "<?",
        gr.T_UINT64: "<Q", gr.T_INT64: "<q", gr.T_FLOAT64: "<d"}


def _enc_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _enc_value(vtype, value):
    """value of GGUF type vtype; an array is (element_type, [values])."""
    if vtype == gr.T_STRING:
        return _enc_str(value)
    if vtype == gr.T_ARRAY:
        etype, items = value
        return struct.pack("<IQ", etype, len(items)) + \
            b"".join(_enc_value(etype, v) for v in items)
    return struct.pack(_FMT[vtype], value)


def write_gguf(path, kvs, tensors, version=3, alignment=32):
    """kvs: [(key, vtype, value)]; tensors: [(name, ggml_type, ne, raw bytes)]."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)))
    for key, vtype, value in kvs:
        out += _enc_str(key) + struct.pack("<I", vtype) + _enc_value(vtype, value)
    offset, blobs = 0, []
    for name, ggml_type, ne, raw in tensors:
        out += _enc_str(name) + struct.pack("<I", len(ne)) + \
            struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", ggml_type, offset)
        blobs.append((offset, raw))
        offset = (offset + len(raw) + alignment - 1) // alignment * alignment
    data_start = (len(out) + alignment - 1) // alignment * alignment
    out += bytes(data_start - len(out))
    for off, raw in blobs:
        out += bytes(data_start + off - len(out)) + raw
    with open(path, "wb") as f:
        f.write(out)


# ---- ggml's reference quantizers (quantize_row_*_ref), vectorised ------------------------

def to_bf16_bits(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # nearest even


def quantize(ggml_type, x):
    """float array -> raw bytes of ggml_type (flat, blocks along the flat order)."""
    x = np.asarray(x, dtype=np.float32).reshape(-1)
    if ggml_type == gr.GGML_F32:
        return x.tobytes()
    if ggml_type == gr.GGML_F16:
        return x.astype(np.float16).tobytes()
    if ggml_type == gr.GGML_BF16:
        return to_bf16_bits(x).tobytes()
    b = x.reshape(-1, 32)
    if ggml_type == gr.GGML_Q8_0:
        d = np.max(np.abs(b), axis=1) / np.float32(127)
        inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
        v = (b * inv[:, None]).astype(np.float64)
        q = np.where(v >= 0, np.floor(v + 0.5), np.ceil(v - 0.5)).astype(np.int8)  # roundf
        blocks = np.concatenate([d.astype(np.float16)[:, None].view(np.uint8),
                                 q.view(np.uint8)], axis=1)
        return blocks.tobytes()
    if ggml_type == gr.GGML_Q4_0:
        # d = (the value of largest magnitude, sign kept) / -8; q = min(15, trunc(x/d + 8.5))
        m = b[np.arange(len(b)), np.argmax(np.abs(b), axis=1)]
        d = m / np.float32(-8)
        inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
        q = np.minimum(15, np.trunc(b * inv[:, None] + np.float32(8.5))).astype(np.uint8)
        qs = q[:, :16] | (q[:, 16:] << 4)
        blocks = np.concatenate([d.astype(np.float16)[:, None].view(np.uint8), qs], axis=1)
        return blocks.tobytes()
    if ggml_type == gr.GGML_MXFP4:
        # e = floor(log2(amax)) - 2 + 127 (0 for an all-zero block), d = 2^(e - 128); each
        # element the table entry v of least |v d - x| in F32, the first on ties
        amax = np.max(np.abs(b), axis=1)
        e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) + 125, 0)
        e = np.clip(e, 0, 255).astype(np.uint8)
        d = np.ldexp(np.float32(1), e.astype(np.int32) - 128)
        err = np.abs(gr.MXFP4_VALUES.astype(np.float32) * d[:, None, None] - b[:, :, None])
        q = np.argmin(err, axis=2).astype(np.uint8)
        return np.concatenate([e[:, None], q[:, :16] | (q[:, 16:] << 4)], axis=1).tobytes()
    raise ValueError(ggml_type)


# ---- random tiny models ------------------------------------------------------------------

TINY = dict(n_vocab=96, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, head_dim=16,
            n_expert=8, n_expert_used=2, n_ff=32, n_ff_shexp=64)
# gpt-oss's heads do not tile n_embd (64 heads of 64 for 2880 in gpt-oss-20b), and its window
# is shorter than the test sequences, so that the sliding mask matters.
TINY_OAI = dict(TINY, n_head=6, sliding_window=3)
TYPES = {"f32": gr.GGML_F32, "f16": gr.GGML_F16, "bf16": gr.GGML_BF16,
         "q8_0": gr.GGML_Q8_0, "q4_0": gr.GGML_Q4_0, "mxfp4": gr.GGML_MXFP4}


def tiny(arch):
    return TINY_OAI if moe_ref.ARCHS[arch].oai else TINY


def random_weights(arch, seed, d=None):
    """{name: float32 array in NumPy order}. Projections have std 1/sqrt(fan_in), so
    activations stay O(1) and attention scores are O(1): neither uniform nor one-hot,
    which keeps RoPE and the routing visible in the logits."""
    rng = np.random.default_rng(seed)
    r = moe_ref.ARCHS[arch]
    d = d or tiny(arch)
    E, D, F, hd = d["n_expert"], d["n_embd"], d["n_ff"], d["head_dim"]
    nq, nkv = d["n_head"] * hd, d["n_head_kv"] * hd

    def mat(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    def bias(*shape):
        return (0.5 * rng.standard_normal(shape)).astype(np.float32)

    ffn_norm = "post_attention_norm" if r.oai else "ffn_norm"
    w = {"token_embd.weight": rng.standard_normal((d["n_vocab"], D)).astype(np.float32),
         "output_norm.weight": norm(D), "output.weight": mat(d["n_vocab"], D)}
    for il in range(d["n_layer"]):
        p = f"blk.{il}."
        w.update({p + "attn_norm.weight": norm(D), p + "attn_q.weight": mat(nq, D),
                  p + "attn_k.weight": mat(nkv, D), p + "attn_v.weight": mat(nkv, D),
                  p + "attn_output.weight": mat(D, nq), p + ffn_norm + ".weight": norm(D),
                  p + "ffn_gate_inp.weight": mat(E, D), p + "ffn_gate_exps.weight": mat(E, F, D),
                  p + "ffn_up_exps.weight": mat(E, F, D), p + "ffn_down_exps.weight": mat(E, D, F)})
        if r.qkv_bias:
            for n, size in (("q", nq), ("k", nkv), ("v", nkv)):
                w[p + f"attn_{n}.bias"] = bias(size)
        if r.qk_norm:
            size_q, size_k = (hd, hd) if r.qk_norm == "head" else (nq, nkv)
            w[p + "attn_q_norm.weight"], w[p + "attn_k_norm.weight"] = norm(size_q), norm(size_k)
        if r.shared_expert:
            Fs = d["n_ff_shexp"]
            w.update({p + "ffn_gate_inp_shexp.weight": mat(D),
                      p + "ffn_gate_shexp.weight": mat(Fs, D),
                      p + "ffn_up_shexp.weight": mat(Fs, D),
                      p + "ffn_down_shexp.weight": mat(D, Fs)})
        if r.oai:
            w.update({p + "attn_output.bias": bias(D),
                      p + "attn_sinks.weight": rng.standard_normal(d["n_head"]).astype(np.float32),
                      p + "ffn_gate_inp.bias": bias(E), p + "ffn_gate_exps.bias": bias(E, F),
                      p + "ffn_up_exps.bias": bias(E, F), p + "ffn_down_exps.bias": bias(E, D)})
    return w


def write_model(path, arch, w, wtype="f32", d=None, version=3, alignment=32, extra=()):
    """GGUF of llama.cpp's layout; matrices in wtype, norms, biases and sinks F32; extra:
    more metadata, (key, value type, value)."""
    d = d or tiny(arch)
    kvs = [("general.architecture", gr.T_STRING, arch),
           ("general.alignment", gr.T_UINT32, alignment),
           (f"{arch}.block_count", gr.T_UINT32, d["n_layer"]),
           (f"{arch}.embedding_length", gr.T_UINT32, d["n_embd"]),
           (f"{arch}.attention.head_count", gr.T_UINT32, d["n_head"]),
           (f"{arch}.attention.head_count_kv", gr.T_UINT32, d["n_head_kv"]),
           (f"{arch}.attention.key_length", gr.T_UINT32, d["head_dim"]),
           (f"{arch}.attention.layer_norm_rms_epsilon", gr.T_FLOAT32, 1e-6),
           (f"{arch}.rope.freq_base", gr.T_FLOAT32, 10000.0),
           (f"{arch}.expert_count", gr.T_UINT32, d["n_expert"]),
           (f"{arch}.expert_used_count", gr.T_UINT32, d["n_expert_used"])]
    if moe_ref.ARCHS[arch].oai:
        kvs.append((f"{arch}.attention.sliding_window", gr.T_UINT32, d["sliding_window"]))
    kvs += extra
    tensors = []
    for name, a in w.items():
        t = TYPES[wtype] if a.ndim >= 2 and not name.endswith(".bias") else gr.GGML_F32
        tensors.append((name, t, list(reversed(a.shape)), quantize(t, a)))
    write_gguf(path, kvs, tensors, version=version, alignment=alignment)


# ---- a second, naive implementation -------------------------------------------------------

def naive_forward(model, tokens, routing=None, kv="f32"):
    """Token by token with a KV cache (kv: "f32"; "f16", of IEEE halves, numpy's, rounded
    from F32; "q8_0", each head's blocks of 32 through quantize() and gguf_read's
    dequantizer), one head and one expert at a time; routing as moe_ref.forward's."""
    cfg, w, r = model.cfg, model.w, model.cfg.rules
    hd, group = cfg.head_dim, cfg.n_head // cfg.n_head_kv

    def norm(v, g):
        return v / np.sqrt(np.dot(v, v) / v.size + cfg.eps) * g

    def rot(v, pos):
        v = v.copy()
        for i in range(cfg.n_rot // 2):
            a, b = (i, i + cfg.n_rot // 2) if r.rope_neox else (2 * i, 2 * i + 1)
            z = complex(v[a], v[b]) * cmath.exp(1j * pos * cfg.rope_base ** (-2 * i / cfg.n_rot))
            v[a], v[b] = z.real, z.imag
        return v

    def store(t):
        if kv == "q8_0":
            return gr.dequantize(gr.GGML_Q8_0, np.frombuffer(quantize(gr.GGML_Q8_0, t), np.uint8),
                                 t.size)
        return t.astype(np.float32).astype(np.float16).astype(np.float64) if kv == "f16" else t

    def ffn(g, u, dn, h):
        a, b = g @ h, u @ h
        return dn @ (a / (1 + np.exp(-a)) * b)

    def oai_ffn(p, e, h):   # gpt-oss's expert: biases, the gate capped at 7, the up clipped
        a = np.minimum(w[p + "ffn_gate_exps.weight"][e] @ h + w[p + "ffn_gate_exps.bias"][e], 7)
        b = np.clip(w[p + "ffn_up_exps.weight"][e] @ h + w[p + "ffn_up_exps.bias"][e], -7, 7)
        return w[p + "ffn_down_exps.weight"][e] @ (a / (1 + np.exp(-1.702 * a)) * (b + 1)) + \
            w[p + "ffn_down_exps.bias"][e]

    cache = [([], []) for _ in range(cfg.n_layer)]
    rows = []
    for pos, tok in enumerate(tokens):
        x = w["token_embd.weight"][tok].copy()
        for il in range(cfg.n_layer):
            p = f"blk.{il}."
            h = norm(x, w[p + "attn_norm.weight"])
            q, k, v = (w[p + f"attn_{n}.weight"] @ h for n in "qkv")
            if r.qkv_bias:
                q, k, v = (t + w[p + f"attn_{n}.bias"] for t, n in ((q, "q"), (k, "k"), (v, "v")))
            if r.qk_norm == "full":
                q, k = norm(q, w[p + "attn_q_norm.weight"]), norm(k, w[p + "attn_k_norm.weight"])
            qh = [q[i * hd:(i + 1) * hd] for i in range(cfg.n_head)]
            kh = [k[i * hd:(i + 1) * hd] for i in range(cfg.n_head_kv)]
            vh = [v[i * hd:(i + 1) * hd] for i in range(cfg.n_head_kv)]
            if r.qk_norm == "head":
                qh = [norm(t, w[p + "attn_q_norm.weight"]) for t in qh]
                kh = [norm(t, w[p + "attn_k_norm.weight"]) for t in kh]
            kc, vc = cache[il]
            kc.append([store(rot(t, pos)) for t in kh])
            vc.append([store(t) for t in vh])
            # gpt-oss's even blocks see the last sliding_window positions, its heads a sink
            js = range(max(0, pos + 1 - cfg.n_swa) if r.oai and il % 2 == 0 else 0, pos + 1)
            heads = []
            for i in range(cfg.n_head):
                qi = rot(qh[i], pos)
                s = np.array([qi @ kc[j][i // group] for j in js]) / np.sqrt(hd)
                sink = w[p + "attn_sinks.weight"][i] if r.oai else -np.inf
                top = max(s.max(), sink)
                e = np.exp(s - top)
                z = e.sum() + np.exp(sink - top)
                heads.append(sum(e[n] / z * vc[j][i // group] for n, j in enumerate(js)))
            x = x + w[p + "attn_output.weight"] @ np.concatenate(heads)
            if r.oai:
                x = x + w[p + "attn_output.bias"]

            h = norm(x, w[p + ("post_attention_norm" if r.oai else "ffn_norm") + ".weight"])
            lg = w[p + "ffn_gate_inp.weight"] @ h
            if r.oai:
                lg = lg + w[p + "ffn_gate_inp.bias"]
            pr = np.exp(lg - lg.max())
            pr /= pr.sum()
            key = lg if r.oai else pr
            chosen = []
            for _ in range(cfg.n_expert_used):
                best = max((e for e in range(cfg.n_expert) if e not in chosen),
                           key=lambda e: (key[e], -e))
                chosen.append(best)
            if r.oai:   # GptOssTopKRouter: a softmax over the chosen logits
                ws = np.exp(lg[chosen] - lg[chosen[0]])
                ws /= ws.sum()
            else:
                ws = np.array([pr[e] for e in chosen])
                if r.norm_topk:
                    ws /= ws.sum()
            if routing and (pos, il) in routing:
                chosen, ws = routing[(pos, il)]
            if r.oai:
                y = sum(ws[j] * oai_ffn(p, e, h) for j, e in enumerate(chosen))
            else:
                y = sum(ws[j] * ffn(w[p + "ffn_gate_exps.weight"][e],
                                    w[p + "ffn_up_exps.weight"][e],
                                    w[p + "ffn_down_exps.weight"][e], h)
                        for j, e in enumerate(chosen))
            if r.shared_expert:
                g = 1 / (1 + np.exp(-(w[p + "ffn_gate_inp_shexp.weight"] @ h)))
                y = y + g * ffn(w[p + "ffn_gate_shexp.weight"], w[p + "ffn_up_shexp.weight"],
                                w[p + "ffn_down_shexp.weight"], h)
            x = x + y
        rows.append(w["output.weight"] @ norm(x, w["output_norm.weight"]))
    return np.array(rows)


# ---- the checks -------------------------------------------------------------------------

def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def test_metadata_roundtrip(tmp):
    kvs = [("u8", gr.T_UINT8, 200), ("i8", gr.T_INT8, -100), ("u16", gr.T_UINT16, 60000),
           ("i16", gr.T_INT16, -30000), ("u32", gr.T_UINT32, 4000000000),
           ("i32", gr.T_INT32, -2000000000), ("f32", gr.T_FLOAT32, 1.5),
           ("bool", gr.T_BOOL, True), ("str", gr.T_STRING, "héllo"),
           ("u64", gr.T_UINT64, 2 ** 63 + 5), ("i64", gr.T_INT64, -2 ** 62),
           ("f64", gr.T_FLOAT64, 0.1),
           ("arr_i32", gr.T_ARRAY, (gr.T_INT32, [1, -2, 3])),
           ("arr_bool", gr.T_ARRAY, (gr.T_BOOL, [True, False])),
           ("arr_str", gr.T_ARRAY, (gr.T_STRING, ["a", "", "xyz"])),
           ("arr_arr", gr.T_ARRAY, (gr.T_ARRAY, [(gr.T_UINT8, [1, 2]), (gr.T_STRING, ["q"])])),
           ("general.alignment", gr.T_UINT32, 64)]
    t = np.arange(96, dtype=np.float32).reshape(4, 3, 8)  # ne = [8, 3, 4]
    for version in (2, 3):
        path = os.path.join(tmp, f"meta{version}.gguf")
        write_gguf(path, kvs, [("small", gr.GGML_F32, [3], np.ones(3, np.float32).tobytes()),
                               ("t3", gr.GGML_F32, [8, 3, 4], t.tobytes())],
                   version=version, alignment=64)
        f = gr.GGUFFile(path)
        want = {k: v for k, _, v in kvs}
        want.update(arr_i32=[1, -2, 3], arr_bool=[True, False], arr_str=["a", "", "xyz"],
                    arr_arr=[[1, 2], ["q"]], f32=1.5)
        assert f.version == version and f.metadata == want, f.metadata
        assert f.data_offset % 64 == 0 and f.tensors["t3"].offset % 64 == 0
        assert f.tensors["t3"].shape == (4, 3, 8)
        assert np.array_equal(f.tensor("t3"), t) and np.array_equal(f.tensor("small"), np.ones(3))


def test_dequantize_hand_blocks():
    # Q8_0: d = 0.5, qs = -16..15  ->  x = 0.5 * q
    q8 = np.float16(0.5).tobytes() + np.arange(-16, 16, dtype=np.int8).tobytes()
    assert np.array_equal(gr.dequantize(gr.GGML_Q8_0, np.frombuffer(q8, np.uint8), 32),
                          0.5 * np.arange(-16, 16))
    # Q4_0: d = 2, qs[j] = j | (15 - j) << 4: element j = 2 (j - 8), element j + 16 = 2 (7 - j)
    j = np.arange(16)
    q4 = np.float16(2.0).tobytes() + (j | (15 - j) << 4).astype(np.uint8).tobytes()
    assert np.array_equal(gr.dequantize(gr.GGML_Q4_0, np.frombuffer(q4, np.uint8), 32),
                          np.concatenate([2.0 * (j - 8), 2.0 * (7 - j)]))
    # The same nibbles in Q4_1 (d = 0.5, m = -3), Q5_0 (d = 2, fifth bit on even elements)
    # and Q5_1 (d = 0.25, m = 1, fifth bit on elements 16..31); qh is a little-endian u32.
    nib = [e if e < 16 else 31 - e for e in range(32)]          # the nibble of element e
    q41 = np.float16(0.5).tobytes() + np.float16(-3).tobytes() + q4[2:]
    assert np.array_equal(gr.dequantize(gr.GGML_Q4_1, np.frombuffer(q41, np.uint8), 32),
                          [0.5 * q - 3 for q in nib])
    q50 = np.float16(2.0).tobytes() + (0x55555555).to_bytes(4, "little") + q4[2:]
    assert np.array_equal(gr.dequantize(gr.GGML_Q5_0, np.frombuffer(q50, np.uint8), 32),
                          [2.0 * (q + 16 * (e % 2 == 0) - 16) for e, q in enumerate(nib)])
    q51 = (np.float16(0.25).tobytes() + np.float16(1).tobytes()
           + (0xFFFF0000).to_bytes(4, "little") + q4[2:])
    assert np.array_equal(gr.dequantize(gr.GGML_Q5_1, np.frombuffer(q51, np.uint8), 32),
                          [0.25 * (q + 16 * (e >= 16)) + 1 for e, q in enumerate(nib)])
    # IQ4_NL with the same nibbles: d = 0.5 times the table entry of each
    iq4 = np.float16(0.5).tobytes() + q4[2:]
    assert np.array_equal(gr.dequantize(gr.GGML_IQ4_NL, np.frombuffer(iq4, np.uint8), 32),
                          [0.5 * gr.IQ4_NL_VALUES[q] for q in nib])
    # IQ4_XS: a super-block of 8 sub-blocks with those nibbles, d = 0.5, and 6-bit scales ls
    # (x = d (ls - 32) table[q]) packed as ggml does: low nibbles two to a byte of
    # scales_l[4], the top two bits of sub-block i at bits 2i of the u16 scales_h
    ls = [0, 31, 32, 33, 63, 1, 40, 20]
    scales_l = bytes((ls[2 * k] & 15) | (ls[2 * k + 1] & 15) << 4 for k in range(4))
    scales_h = sum((v >> 4) << (2 * i) for i, v in enumerate(ls))
    xs = np.float16(0.5).tobytes() + scales_h.to_bytes(2, "little") + scales_l + q4[2:] * 8
    assert np.array_equal(gr.dequantize(gr.GGML_IQ4_XS, np.frombuffer(xs, np.uint8), 256),
                          [0.5 * (v - 32) * gr.IQ4_NL_VALUES[q] for v in ls for q in nib])
    # MXFP4 with the same nibbles, a block of e = 130 then one of e = 0: 2^(e - 128) times
    # ggml's kvalues_mxfp4 (E2M1 doubled), 4 and 2^-128 (subnormal in F32)
    kv = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]
    mx = bytes([130]) + q4[2:] + bytes([0]) + q4[2:]
    assert np.array_equal(gr.dequantize(gr.GGML_MXFP4, np.frombuffer(mx, np.uint8), 64),
                          [4.0 * kv[q] for q in nib] + [2.0 ** -128 * kv[q] for q in nib])
    # BF16 1.0, -3.0, 2^-10; F16 1.0, -2.0, 65504
    bf = np.array([0x3F80, 0xC040, 0x3A80], np.uint16).view(np.uint8)
    assert np.array_equal(gr.dequantize(gr.GGML_BF16, bf, 3), [1.0, -3.0, 2.0 ** -10])
    f16 = np.array([0x3C00, 0xC000, 0x7BFF], np.uint16).view(np.uint8)
    assert np.array_equal(gr.dequantize(gr.GGML_F16, f16, 3), [1.0, -2.0, 65504.0])


def test_iq_hand_blocks():
    # IQ2_XXS, d = 1: chunk 0's groups take grid entries 1, 0, 0, 0 (iq2xxs_grid[1] is
    # 0x080808080808082b: element 0 is 43, the rest 8), group 0's 7 stored sign bits are 1
    # (element 0 negative, so the parity bit 7 is set too), ls = 3: x = (3 + 0.5) / 4 * ±g.
    # The other chunks are zero: entry 0, no signs, ls = 0, x = 8 / 8 = 1.
    a = 1 | 3 << 28
    chunk0 = bytes([1, 0, 0, 0]) + a.to_bytes(4, "little")
    blk = np.float16(1.0).tobytes() + chunk0 + bytes(8 * 7)
    want = [-0.875 * 43] + [0.875 * 8] * 6 + [-0.875 * 8] + [0.875 * 8] * 24 + [1.0] * 224
    assert np.array_equal(gr.dequantize(16, np.frombuffer(blk, np.uint8), 256), want)
    # IQ1_S, d = 2: chunk 0's qh = ls 5 (bits 12..14) with the delta negative (bit 15) and
    # index bits 8..10 of group 1 = 1, so group 1 is entry 256; the others entry 0, all -1
    # (iq1s_grid[0] = 0xffffffffffffffff): x = 2 (2·5 + 1) (g - 1/8) in chunk 0, 2 (g + 1/8)
    # elsewhere.
    g256 = gr.iq_dequant.grids()["iq1s"][256]
    qh = [5 << 12 | 0x8000 | 1 << 3] + [0] * 7
    blk = (np.float16(2.0).tobytes() + bytes(32) +
           np.array(qh, "<u2").tobytes())
    want = ([22 * (-1 - 0.125)] * 8 + [22 * (v - 0.125) for v in g256] +
            [22 * (-1 - 0.125)] * 16 + [2 * (-1 + 0.125)] * 224)
    assert np.array_equal(gr.dequantize(19, np.frombuffer(blk, np.uint8), 256), want)


def test_iq_matches_gguf():
    """iq_dequant.py against llama.cpp's own Python (the gguf package), where it is
    installed: random blocks of every lattice-grid type with sane scales."""
    try:
        from gguf import quants, GGMLQuantizationType
    except ImportError:
        print("      (the gguf package is not installed: iq_dequant.py not compared with it)")
        return
    rng = np.random.default_rng(5)
    for t, (name, size) in gr.iq_dequant.TYPES.items():
        raw = rng.integers(0, 256, size=(32, size), dtype=np.uint8)
        d = (rng.random(32) + 0.1).astype("<f2").view("<u2").astype(np.int64)
        if name == "IQ1_M":  # d is the top nibbles of the four scale words
            sc = raw[:, 48:56].copy().view("<u2").astype(np.int64)
            sc = (sc & 0x0FFF) | ((d[:, None] >> (4 * np.arange(4))) & 15) << 12
            raw[:, 48:56] = sc.astype("<u2").view(np.uint8)
        else:
            raw[:, 0:2] = d.astype("<u2").view(np.uint8).reshape(32, 2)
        ours = gr.dequantize(t, raw.reshape(-1), 32 * 256)
        theirs = quants.dequantize(raw.reshape(-1), GGMLQuantizationType[name])
        assert np.array_equal(ours, theirs.astype(np.float64).reshape(-1)), name


def test_quantizer_roundtrip():
    x = np.random.default_rng(1).standard_normal(32 * 64).astype(np.float32)
    x[:32] = 0.0  # an all-zero block: d = 0, no division by zero
    for name, t in TYPES.items():
        y = gr.dequantize(t, np.frombuffer(quantize(t, x), np.uint8), x.size)
        b, yb = x.reshape(-1, 32).astype(np.float64), y.reshape(-1, 32)
        amax = np.abs(b).max(axis=1, keepdims=True)
        bound = {"f32": 0 * amax, "f16": amax * 2.0 ** -11, "bf16": amax * 2.0 ** -8,
                 "q8_0": amax / 127 * 0.57, "q4_0": amax / 8 * 1.01,
                 # (12 d = 1.5 x 2^floor(log2 amax): larger values clip, by up to amax / 2)
                 "mxfp4": amax / 2}[name]
        assert np.all(np.abs(yb - b) <= bound + 1e-12), name
    # the reader dequantizes exactly what the block holds; quantization itself is lossy
    assert np.array_equal(moe_ref.q8_0_roundtrip(x),
                          gr.dequantize(gr.GGML_Q8_0, np.frombuffer(quantize(gr.GGML_Q8_0, x),
                                                                    np.uint8), x.size))


def test_reader_rejects(tmp):
    good = os.path.join(tmp, "good.gguf")
    write_gguf(good, [("k", gr.T_UINT32, 1)],
               [("t", gr.GGML_F32, [4], np.zeros(4, np.float32).tobytes())])
    raw = open(good, "rb").read()
    bad_cases = {
        "magic": b"GGUX" + raw[4:],
        "version1": raw[:4] + struct.pack("<I", 1) + raw[8:],
        "truncated_kv": raw[:30],
        "truncated_data": raw[:-4],
        "bad_type": raw.replace(struct.pack("<I", gr.GGML_F32) + struct.pack("<Q", 0),
                                struct.pack("<I", 99) + struct.pack("<Q", 0)),
    }
    for what, data in bad_cases.items():
        path = os.path.join(tmp, f"bad_{what}.gguf")
        with open(path, "wb") as f:
            f.write(data)
        try:
            gr.GGUFFile(path)
        except gr.GGUFError:
            continue
        raise AssertionError(f"reader accepted a file with a bad {what}")


# The architectures whose files this script writes itself (the classic tensor set, gpt-oss's
# with its biases and sinks, and softmax routing); deepseek2's, glm4moe's and minimax-m2's are
# written by moevm mkmodel and checked against the engine by check_forward.
BUILT = [a for a, r in moe_ref.ARCHS.items() if not r.routing]


def _model(tmp, arch, seed=7, wtype="f32", w=None):
    path = os.path.join(tmp, f"{arch}-{wtype}-{seed}.gguf")
    write_model(path, arch, random_weights(arch, seed) if w is None else w, wtype)
    return moe_ref.load_model(path)


def test_forward_matches_naive(tmp):
    tokens = [3, 50, 7, 7, 91, 12, 40]
    for arch in BUILT:
        m = _model(tmp, arch)
        err = rel(moe_ref.forward(m, tokens), naive_forward(m, tokens))
        assert err < 1e-12, (arch, err)


def test_kv_rounded(tmp):
    """Config.kv: the whole-sequence reference equals a cache of halves, or of Q8_0 blocks
    (on heads of 32, whole blocks, as the engine requires), token by token, and differs
    from the F32 cache's logits by the rounding only."""
    tokens = [3, 50, 7, 7, 91, 12, 40]
    for arch in BUILT:
        d = dict(tiny(arch), head_dim=32)
        path = os.path.join(tmp, f"{arch}-hd32.gguf")
        write_model(path, arch, random_weights(arch, 7, d), d=d)
        for kv, m, most in (("f16", _model(tmp, arch), 1e-2),
                            ("q8_0", moe_ref.load_model(path), 1e-1)):
            got = moe_ref.forward(m.replace(kv=kv), tokens)
            assert rel(got, naive_forward(m, tokens, kv=kv)) < 1e-12, (arch, kv)
            assert 1e-6 < rel(got, moe_ref.forward(m, tokens)) < most, (arch, kv)


def test_file_types(tmp):
    """Each weight type reads back as the dequantized weights it was written as."""
    w = random_weights("qwen2moe", 3)
    for name, t in TYPES.items():
        m = _model(tmp, "qwen2moe", 3, name, w)
        a = m.w["blk.1.ffn_down_exps.weight"]
        want = gr.dequantize(t, np.frombuffer(quantize(t, w["blk.1.ffn_down_exps.weight"]),
                                              np.uint8), a.size).reshape(a.shape)
        assert a.shape == (8, 64, 32) and np.array_equal(a, want), name
        assert m.w["output_norm.weight"].dtype == np.float64


def test_rope_properties():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 3, 16))
    for neox in (False, True):
        assert np.array_equal(moe_ref.rope(x[:1], np.zeros(1), 16, 10000.0, neox), x[:1])
        y = moe_ref.rope(x, np.arange(5.0), 16, 10000.0, neox)
        assert np.allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1))
        # q·k after rotation depends only on the distance of the positions
        q, k = x[0, 0], x[1, 0]
        d1 = moe_ref.rope(np.array([[q], [k]]), np.array([5.0, 2.0]), 16, 1e4, neox)
        d2 = moe_ref.rope(np.array([[q], [k]]), np.array([9.0, 6.0]), 16, 1e4, neox)
        assert np.isclose(d1[0, 0] @ d1[1, 0], d2[0, 0] @ d2[1, 0])
        # partial rotation leaves the dims past n_rot alone
        y = moe_ref.rope(x, np.arange(5.0), 8, 10000.0, neox)
        assert np.array_equal(y[..., 8:], x[..., 8:])


def test_rope_scaling():
    """Linear divides every frequency; YaRN keeps the fast pairs' (from a 4096-token context,
    n_rot 16: pairs 0..2), divides the slow ones' (6 and 7), blends those between in order,
    and scales the lengths by 0.1 ln(factor) + 1; a factor of 1 changes nothing."""
    plain, _ = moe_ref.rope_frequencies(16, 1e4)
    lin, m = moe_ref.rope_frequencies(16, 1e4, ("linear", 4.0))
    assert np.allclose(lin, plain / 4) and m == 1
    yarn, m = moe_ref.rope_frequencies(16, 1e4, ("yarn", 4.0, 4096))
    assert np.array_equal(yarn[:3], plain[:3]) and np.allclose(yarn[6:], plain[6:] / 4)
    w = (yarn[3:6] - plain[3:6] / 4) / (plain[3:6] - plain[3:6] / 4)   # the original's share
    assert np.all((w > 0) & (w < 1)) and np.all(np.diff(w) < 0)
    assert np.isclose(m, 1 + 0.1 * np.log(4))
    one, m = moe_ref.rope_frequencies(16, 1e4, ("yarn", 1.0, 4096))
    assert np.allclose(one, plain) and m == 1
    x = np.random.default_rng(3).standard_normal((5, 2, 16))
    y = moe_ref.rope(x, np.arange(5.0), 16, 1e4, True, ("yarn", 4.0, 4096))
    assert np.allclose(np.linalg.norm(y, axis=-1), (1 + 0.1 * np.log(4)) *
                       np.linalg.norm(x, axis=-1))


def test_llama_permutation(tmp):
    """llama.cpp's convert_hf_to_gguf permutes the HF attn_q/attn_k rows so that its
    adjacent-pair RoPE equals HF's rotate_half: a model with HF rows under NEOX RoPE and
    the same model with permuted rows under adjacent-pair RoPE give the same logits."""
    def permute(wt, n_head):
        return wt.reshape(n_head, 2, wt.shape[0] // n_head // 2, *wt.shape[1:]) \
                 .swapaxes(1, 2).reshape(wt.shape)

    hf = random_weights("llama", 11)
    gg = dict(hf)
    for il in range(TINY["n_layer"]):
        gg[f"blk.{il}.attn_q.weight"] = permute(hf[f"blk.{il}.attn_q.weight"], TINY["n_head"])
        gg[f"blk.{il}.attn_k.weight"] = permute(hf[f"blk.{il}.attn_k.weight"], TINY["n_head_kv"])
    tokens = [4, 9, 33, 60, 2, 71]
    a = moe_ref.forward(_model(tmp, "llama", 11, w=hf).replace(rope_neox=True), tokens)
    b = moe_ref.forward(_model(tmp, "llama", 12, w=gg), tokens)
    assert rel(b, a) < 1e-12
    # and the two modes differ on the same weights, so the test can tell them apart
    c = moe_ref.forward(_model(tmp, "llama", 11, w=hf), tokens)
    assert rel(c, a) > 1e-2


def test_causal(tmp):
    tokens = [5, 17, 42, 8, 64, 3, 30]
    for arch in BUILT:
        m = _model(tmp, arch, 21)
        full = moe_ref.forward(m, tokens)
        for n in (1, 4):
            assert rel(moe_ref.forward(m, tokens[:n]), full[:n]) < 1e-13, (arch, n)


def test_routing(tmp):
    tokens = [10, 20, 30]
    for arch in BUILT:
        m = _model(tmp, arch, 5)
        trace = []
        moe_ref.forward(m, tokens, trace=trace)
        assert len(trace) == TINY["n_layer"]
        for t in trace:
            top = np.sort(t["probs"], axis=1)[:, ::-1][:, :2]
            got = np.take_along_axis(t["probs"], t["selected"], axis=1)
            assert np.array_equal(got, top)
            want = top / top.sum(axis=1, keepdims=True) if m.cfg.rules.norm_topk else top
            assert np.allclose(t["weights"], want), arch
        # a zero router gives equal probabilities: the ties go to experts 0, 1
        w = dict(m.w)
        for name in [n for n in w if ".ffn_gate_inp." in n]:   # (gpt-oss's bias too)
            w[name] = np.zeros_like(w[name])
        trace = []
        moe_ref.forward(moe_ref.Model(m.cfg, w, m.wtypes), tokens, trace=trace)
        assert all(np.array_equal(t["selected"], [[0, 1]] * 3) for t in trace)


def test_routing_override(tmp):
    """Overridden rows (an engine's substitutions) run exactly the experts and weights
    given, in both implementations; earlier positions are untouched, later ones change."""
    tokens = [10, 20, 30, 40, 50]
    routing = {(2, 0): (np.array([7, 3]), np.array([0.7, 0.2])),
               (3, 1): (np.array([5, 6]), np.array([0.4, 0.45]))}
    for arch in BUILT:
        m = _model(tmp, arch, 9)
        got = moe_ref.forward(m, tokens, routing=routing)
        assert rel(got, naive_forward(m, tokens, routing)) < 1e-12, arch
        plain = moe_ref.forward(m, tokens)
        assert rel(got[:2], plain[:2]) < 1e-13, arch
        assert rel(got[2:], plain[2:]) > 1e-3, arch


def test_load_rejects_wrong_tensors(tmp):
    w = random_weights("qwen3moe", 1)
    del w["blk.1.attn_k_norm.weight"]
    w["blk.0.attn_q.bias"] = np.zeros(64, np.float32)
    path = os.path.join(tmp, "wrong.gguf")
    write_model(path, "qwen3moe", w)
    try:
        moe_ref.load_model(path)
    except ValueError as e:
        assert "blk.1.attn_k_norm.weight" in str(e) and "blk.0.attn_q.bias" in str(e)
        return
    raise AssertionError("load_model accepted a model with missing and extra tensors")


def test_oai_file(tmp):
    """A gpt-oss file with the keys llama.cpp's converter writes (gpt-oss's YaRN: factor 32
    over 4096 positions; no rope.dimension_count) loads with them; one with ffn_norm in place
    of post_attention_norm, or without a sink or a bias, is refused."""
    a = "gpt-oss."
    extra = [(a + "context_length", gr.T_UINT32, 131072),
             (a + "feed_forward_length", gr.T_UINT32, TINY["n_ff"]),
             (a + "expert_feed_forward_length", gr.T_UINT32, TINY["n_ff"]),
             (a + "attention.value_length", gr.T_UINT32, TINY["head_dim"]),
             (a + "rope.scaling.type", gr.T_STRING, "yarn"),
             (a + "rope.scaling.factor", gr.T_FLOAT32, 32.0),
             (a + "rope.scaling.original_context_length", gr.T_UINT32, 4096)]
    w = random_weights("gpt-oss", 2)
    path = os.path.join(tmp, "oai.gguf")
    write_model(path, "gpt-oss", w, extra=extra)
    cfg = moe_ref.load_model(path).cfg
    assert cfg.rope_scaling == ("yarn", 32.0, 4096) and cfg.n_swa == 3, cfg
    assert (cfg.n_head, cfg.head_dim, cfg.n_rot) == (6, 16, 16), cfg
    w["blk.0.ffn_norm.weight"] = w.pop("blk.0.post_attention_norm.weight")
    del w["blk.1.attn_sinks.weight"], w["blk.1.ffn_down_exps.bias"]
    write_model(path, "gpt-oss", w)
    try:
        moe_ref.load_model(path)
    except ValueError as e:
        assert all(n in str(e) for n in ("blk.0.post_attention_norm.weight",
                                         "blk.0.ffn_norm.weight", "blk.1.attn_sinks.weight",
                                         "blk.1.ffn_down_exps.bias")), e
        return
    raise AssertionError("load_model accepted a gpt-oss model with wrong tensors")


def test_oai_sinks(tmp):
    """On gpt-oss's odd (unwindowed) block, sinks of -1e30 give the plain softmax's
    attention; sinks of 50 take all but ~e^-48 of each softmax, leaving the output bias."""
    m = _model(tmp, "gpt-oss", 31)
    h, pos = np.random.default_rng(4).standard_normal((6, TINY["n_embd"])), np.arange(6.0)
    bias = m.w["blk.1.attn_output.bias"]

    def with_sinks(value):
        w = dict(m.w)
        w["blk.1.attn_sinks.weight"] = np.full(m.cfg.n_head, value)
        return moe_ref.attention(moe_ref.Model(m.cfg, w, m.wtypes), 1, h, pos) - bias

    plain = moe_ref.attention(m.replace(oai=False), 1, h, pos)
    assert rel(with_sinks(-1e30), plain) < 1e-14
    assert np.linalg.norm(with_sinks(50.0)) < 1e-12 * np.linalg.norm(plain)


def test_oai_window(tmp):
    """gpt-oss's even blocks see the last sliding_window (3) positions, its odd ones all:
    changing the input row at position 1 leaves block 0's outputs at 0 and 4.. exactly as
    they were, and changes every later output of block 1."""
    m = _model(tmp, "gpt-oss", 32)
    h, pos = np.random.default_rng(5).standard_normal((7, TINY["n_embd"])), np.arange(7.0)
    h2 = h.copy()
    h2[1] += 1.0
    a, b = moe_ref.attention(m, 0, h, pos), moe_ref.attention(m, 0, h2, pos)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[4:], b[4:])
    assert np.all(np.abs(a[1:4] - b[1:4]).max(axis=1) > 1e-6)
    a, b = moe_ref.attention(m, 1, h, pos), moe_ref.attention(m, 1, h2, pos)
    assert np.array_equal(a[0], b[0]) and np.all(np.abs(a[1:] - b[1:]).max(axis=1) > 1e-6)


def test_oai_clamp(tmp):
    """gpt-oss's SwiGLU with its gate and up products zeroed, on their biases alone: a gate
    of 30 gives 7's logits, up values of +-30 those of +-7; a gate of -30 is not raised to
    -7, and a gate or up of 6.5 differs from 7."""
    m = _model(tmp, "gpt-oss", 33)
    tokens = [5, 17, 42, 8, 64, 3]

    def logits(gate, up):
        w = dict(m.w)
        for il in range(TINY["n_layer"]):
            for n, value in (("gate", gate), ("up", up)):
                k = f"blk.{il}.ffn_{n}_exps."
                w[k + "weight"] = np.zeros_like(w[k + "weight"])
                w[k + "bias"] = np.full_like(w[k + "bias"], value)
        return moe_ref.forward(moe_ref.Model(m.cfg, w, m.wtypes), tokens)

    seven = logits(7.0, 7.0)
    assert np.array_equal(logits(30.0, 7.0), seven) and np.array_equal(logits(7.0, 30.0), seven)
    assert np.array_equal(logits(7.0, -30.0), logits(7.0, -7.0))
    assert rel(logits(-30.0, 7.0), logits(-7.0, 7.0)) > 1e-9
    assert rel(logits(6.5, 7.0), seven) > 1e-3 and rel(logits(7.0, 6.5), seven) > 1e-3


def test_mxfp4_activations(tmp):
    """Under act_quant, MXFP4 weights take Q8_0 activations (ggml's vec_dot_type for them),
    and a gpt-oss expert's mixing weight scales its intermediate activations before they are
    rounded, its down bias apart and unrounded."""
    m = _model(tmp, "gpt-oss", 6, "mxfp4").replace(act_quant=True)
    rng = np.random.default_rng(6)
    h, scale = rng.standard_normal((4, TINY["n_embd"])), np.array([0.1, 0.3, 0.7, 1.0])
    q8, p, e = moe_ref.q8_0_roundtrip, "blk.0.", 3
    wt = {n: m.w[p + f"ffn_{n}_exps.weight"][e] for n in ("gate", "up", "down")}
    b = {n: m.w[p + f"ffn_{n}_exps.bias"][e] for n in ("gate", "up", "down")}
    g = np.minimum(q8(h) @ wt["gate"].T + b["gate"], 7)
    u = np.clip(q8(h) @ wt["up"].T + b["up"], -7, 7)
    a = scale[:, None] * g / (1 + np.exp(-1.702 * g)) * (u + 1)
    want = q8(a) @ wt["down"].T + scale[:, None] * b["down"]
    assert rel(moe_ref.oai_expert(m, p, h, e, scale), want) < 1e-15


def calibration(tmp):
    """Informational: on random tiny models, the max row relative error against the exact
    reference of (a) ggml's Q8_0 activation rounding (emulated) for Q8_0/Q4_0 weights (and
    gpt-oss's MXFP4), on the rows before its first change of routing, and (b) deliberate
    bugs."""
    rng = np.random.default_rng(1234)
    prompts = [rng.integers(3, TINY["n_vocab"], size=n + 4).tolist() for n in (1, 5, 12)]
    print("calibration (max over rows of ||a-b||/||b||):")
    for arch in BUILT:
        w = random_weights(arch, 99)
        oai = moe_ref.ARCHS[arch].oai
        for wtype in ("q8_0", "q4_0") + (("mxfp4",) if oai else ()):
            m = _model(tmp, arch, 99, wtype, w)
            err, changed = 0.0, 0
            for seq in prompts:
                ta, tb = [], []
                ref = moe_ref.forward(m, seq, trace=ta)
                emu = moe_ref.forward(m.replace(act_quant=True), seq, trace=tb)
                diff = [np.any(np.sort(a["selected"], 1) != np.sort(b["selected"], 1), 1)
                        for a, b in zip(ta, tb)]
                stable = min([int(np.argmax(d)) for d in diff if d.any()] + [len(seq)])
                changed += stable < len(seq)
                if stable:
                    err = max(err, max(rel(emu[i], ref[i]) for i in range(stable)))
            print(f"  {arch:9s} {wtype:5s} activation Q8_0 {err:.2e} on routing-stable rows; "
                  f"routing changed in {changed}/{len(prompts)} sequences")
        m = _model(tmp, arch, 99, "f32", w)
        seq = prompts[2]
        ref = moe_ref.forward(m, seq)
        rolled = dict(m.w)
        for k in [k for k in m.w if "_exps." in k]:   # (with gpt-oss's biases)
            rolled[k] = np.roll(m.w[k], -1, axis=0)
        bugs = {"rope pairing swapped": m.replace(rope_neox=not m.cfg.rules.rope_neox),
                "renormalisation flipped": m.replace(norm_topk=not m.cfg.rules.norm_topk),
                "experts shifted by one": moe_ref.Model(m.cfg, rolled, m.wtypes)}
        if oai:
            sinkless = {k: np.full_like(a, -np.inf) if k.endswith(".attn_sinks.weight") else a
                        for k, a in m.w.items()}
            bugs.update({"sinks dropped": moe_ref.Model(m.cfg, sinkless, m.wtypes),
                         "window ignored": m.replace(n_swa=0)})
        print(f"  {arch:9s} bugs: " + ", ".join(
            f"{k} {max(rel(moe_ref.forward(b, seq)[i], ref[i]) for i in range(len(seq))):.2e}"
            for k, b in bugs.items()))


def main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in tests:
            try:
                fn(tmp) if fn.__code__.co_argcount else fn()
                print(f"ok    {name}")
            except Exception as e:  # report every failing check, not only the first
                failed += 1
                print(f"FAIL  {name}: {type(e).__name__}: {e}")
        calibration(tmp)
    print(f"selftest: {len(tests) - failed}/{len(tests)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
