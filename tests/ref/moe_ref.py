"""Reference forward pass of eight MoE architectures, in float64, over a whole sequence.

Written from the public model definitions (Hugging Face transformers: modeling_mixtral,
modeling_qwen2_moe, modeling_qwen3_moe, modeling_olmoe, modeling_deepseek_v2/v3,
modeling_glm4_moe, modeling_minimax_m2, modeling_gpt_oss) in llama.cpp's GGUF tensor names
and conventions, independently of the engine, so that the engine's logits can be checked
against it. Clarity over speed: the whole sequence is computed at once with a causal mask
(no KV cache), which is a different schedule from the engine's token-by-token decoding and
so also checks its cache.

    model = load_model("tiny.gguf")
    logits = forward(model, [5, 17, 42])            # (3, n_vocab): prediction after each
    trace = []; forward(model, tokens, trace=trace)  # + per-layer router probabilities

Per layer:  x += attn(rmsnorm(x) * attn_norm);  x += moe(rmsnorm(x) * ffn_norm)
            (glm4moe's and gpt-oss's ffn_norm is post_attention_norm; glm4moe's NextN
            blocks are not computed)
Output:     logits = output @ (rmsnorm(x) * output_norm)   (output tied to token_embd if absent)
"""

import dataclasses
import math

import numpy as np

import gguf_read


@dataclasses.dataclass(frozen=True)
class ArchRules:
    """What distinguishes the architectures (from their HF definitions / llama.cpp)."""
    rope_neox: bool   # RoPE pairs (i, i + n_rot/2) (HF rotate_half) vs adjacent (2i, 2i+1)
    norm_topk: bool   # renormalise the selected experts' probabilities to sum to 1
    qkv_bias: bool    # attn_{q,k,v}.bias
    qk_norm: str      # "" | "head": RMSNorm per head (Qwen3) | "full": over all of q / k (OLMoE)
    shared_expert: bool  # sigmoid-gated shared expert added to the MoE output (Qwen2-MoE)
    mla: bool = False    # DeepSeek-V2/V3: multi-head latent attention
    lead: bool = False   # DeepSeek's family (deepseek2, glm4moe): leading dense blocks,
                         # ungated shared experts
    routing: bool = False  # the routing from the metadata (DeepSeek's family, MiniMax-M2),
    gating: int = 1        # by default softmax (1) or sigmoid (2)
    glm: bool = False    # GLM-4.5: post_attention_norm before the FFN, QK norm only where
                         # the file has it, trailing NextN blocks not computed
    oai: bool = False    # gpt-oss: attention output, router and expert biases, a sink logit
                         # per head, post_attention_norm before the MoE, clamped SwiGLU


ARCHS = {
    # Mixtral, as llama.cpp stores it. HF uses rotate_half; llama.cpp's converter permutes
    # the rows of attn_q/attn_k so that adjacent-pair rotation (ROPE_TYPE_NORM) on the
    # permuted weights equals rotate_half on the original ones.
    "llama": ArchRules(rope_neox=False, norm_topk=True, qkv_bias=False, qk_norm="",
                       shared_expert=False),
    # Qwen1.5/2-MoE: q/k/v biases, norm_topk_prob = false, shared expert.
    "qwen2moe": ArchRules(rope_neox=True, norm_topk=False, qkv_bias=True, qk_norm="",
                          shared_expert=True),
    # Qwen3-MoE: per-head q/k RMSNorm before RoPE, norm_topk_prob = true (the released
    # checkpoints' config; llama.cpp hard-codes it).
    "qwen3moe": ArchRules(rope_neox=True, norm_topk=True, qkv_bias=False, qk_norm="head",
                          shared_expert=False),
    # OLMoE: q/k RMSNorm over the whole projected vector before RoPE, norm_topk_prob = false.
    "olmoe": ArchRules(rope_neox=True, norm_topk=False, qkv_bias=False, qk_norm="full",
                       shared_expert=False),
    # DeepSeek-V2/V3 as Hugging Face's DeepseekV2/V3 modules compute them (llama.cpp's
    # deepseek2): the rope part of q and k rotated on adjacent pairs (the HF code
    # de-interleaves before rotate_half); norm_topk from expert_weights_norm.
    "deepseek2": ArchRules(rope_neox=False, norm_topk=False, qkv_bias=False, qk_norm="",
                           shared_expert=False, mla=True, lead=True, routing=True),
    # GLM-4.5 as Hugging Face's Glm4Moe computes it: q/k/v biases, per-head QK norm
    # (use_qk_norm) before rotate_half on the first partial_rotary_factor of each head;
    # DeepSeek-V3's router (Glm4MoeTopkRouter); norm_topk from expert_weights_norm.
    "glm4moe": ArchRules(rope_neox=True, norm_topk=False, qkv_bias=True, qk_norm="head",
                         shared_expert=False, lead=True, glm=True, routing=True, gating=2),
    # MiniMax-M2 as Hugging Face's MiniMaxM2 computes it: RMSNorm over the flattened q and
    # k (use_qk_norm) before rotate_half on the first rotary_dim of each head; sigmoid
    # scores plus e_score_correction_bias to choose, the scores renormalised.
    "minimax-m2": ArchRules(rope_neox=True, norm_topk=True, qkv_bias=False, qk_norm="full",
                            shared_expert=False, routing=True, gating=2),
    # gpt-oss as Hugging Face's GptOss computes it (llama.cpp's openai-moe, LLM_ARCH_OPENAI_MOE):
    # q/k/v/o biases; each head's learned sink logit in its softmax; a sliding window on the
    # even blocks (HF's layer_types, llama.cpp's set_swa_pattern(2)); the top k of the biased
    # router logits, softmaxed (GptOssTopKRouter: the renormalised full softmax); experts
    # with biases and SwiGLU clamped (OAI_ALPHA, OAI_LIMIT: HF's constants, not in the GGUF).
    # Its YaRN is rope_frequencies', with the ramp's ends floored and ceiled as llama.cpp
    # does, where HF's config for gpt-oss says truncate: false (unrounded ends).
    "gpt-oss": ArchRules(rope_neox=True, norm_topk=True, qkv_bias=True, qk_norm="",
                         shared_expert=False, oai=True),
}
# gpt-oss's gated activation (GptOssExperts, ggml's swiglu_oai): the gate capped at the
# limit, the up product clipped to +-limit, g * sigmoid(alpha g) * (u + 1).
OAI_ALPHA, OAI_LIMIT = 1.702, 7.0


@dataclasses.dataclass(frozen=True)
class Config:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int
    rope_base: float
    # Context extension as Hugging Face's rope_scaling: () none, ("linear", factor) or
    # ("yarn", factor, original_max_position_embeddings) with beta_fast 32, beta_slow 1.
    rope_scaling: tuple
    eps: float
    n_expert: int
    n_expert_used: int
    rules: ArchRules
    # deepseek2: n_dense leading dense blocks; MLA with a q_lora bottleneck (0: none), a
    # kv_lora latent, nope + n_rot query/key and v_dim value dims per head; the scores
    # scaled by kq_scale; routing by sigmoid or softmax, in n_group groups (0: none) of
    # which n_group_used are kept, ranked by their best expert (group_max: DeepSeek-V2's
    # group_limited_greedy, which comes with softmax) or their two best (V3's noaux_tc,
    # with sigmoid); weights times expert_scale.
    n_dense: int = 0
    q_lora: int = 0
    kv_lora: int = 0
    nope: int = 0
    v_dim: int = 0
    kq_scale: float = 0.0
    sigmoid_gate: bool = False
    n_group: int = 0
    n_group_used: int = 0
    group_max: bool = False
    expert_scale: float = 1.0
    # glm4moe: the NextN blocks after the n_layer computed ones (in the file, not computed)
    n_nextn: int = 0
    # gpt-oss: the sliding window of its even blocks, in positions (0: none)
    n_swa: int = 0
    # Emulate the engine's (ggml's) CPU path for quantized weights: the input of each such
    # product is quantized first, to Q8_0 for the 32-element Q types and to Q8_K for the
    # K-quants. Off for the reference; on to follow the engine's routing where activation
    # rounding moves a token across a top-k boundary, and to calibrate tolerances.
    act_quant: bool = False
    # The engine's KV cache type (MOEVM_KV_TYPE): "f32"; "f16" (its default) or "bf16", keys
    # and values (MLA: the normed latent and the rotated k_pe, one row) rounded to it as they
    # are stored, from the F32 the engine computes them in; or "q8_0", "q4_0", "q4_1",
    # "q5_0", "q5_1", "iq4_nl", each row quantized by blocks of 32 (kv_round; llama.cpp's
    # -ctk q8_0 and the rest).
    kv: str = "f32"


def kv_round(cfg, x):
    """x (..., row elements) as the engine's KV cache keeps it (Config.kv)."""
    if cfg.kv == "f16":
        return x.astype(np.float32).astype(np.float16).astype(np.float64)
    if cfg.kv == "bf16":
        u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32)  # nearest even
        return u.view(np.float32).astype(np.float64)
    if cfg.kv == "q8_0":
        return q8_0_roundtrip(x)
    return x if cfg.kv == "f32" else q45_roundtrip(cfg.kv, x)


# IQ4_NL's quant values (ggml-common.h's kvalues_iq4nl).
IQ4_NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89,
                          113], dtype=np.float32)


def q45_roundtrip(kv, x):
    """x quantized along its last axis by blocks of 32 to kv and back, as the engine's
    cache stores it (kernels/cpu/convert.c), all in F32 as there: Q4_0 and Q5_0 as ggml's
    quantize_row_q4_0_ref / _q5_0_ref (d = the value of largest magnitude, the first on
    ties, over -8 or -16; q = min(15 or 31, trunc(x / d + 8.5 or 16.5))); Q4_1 and Q5_1 as
    _q4_1_ref / _q5_1_ref (m = min, d = (max - min) / 15 or 31, q = min(15 or 31,
    trunc((x - m) / d + 0.5))); IQ4_NL with d = that value over -127 rounded to F16 and
    each element the table entry nearest x / d (the lower on ties). d and m stored as
    F16."""
    shape = x.shape
    b = x.astype(np.float32).reshape(-1, 32)
    big = b[np.arange(len(b)), np.argmax(np.abs(b), axis=1)]   # signed, the first on ties

    def inverse(d):
        return np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)[:, None]

    def f16(v):
        return v.astype(np.float16).astype(np.float64)[:, None]

    if kv == "iq4_nl":
        d = (big / np.float32(-127)).astype(np.float16).astype(np.float32)
        v = (b * inverse(d)).astype(np.float32)
        q = np.argmin(np.abs(v[:, :, None] - IQ4_NL_VALUES), axis=2)
        return (d.astype(np.float64)[:, None] * IQ4_NL_VALUES[q]).reshape(shape)
    max_q = 31 if kv.startswith("q5") else 15
    if kv in ("q4_0", "q5_0"):
        bias = np.float32(16 if kv == "q5_0" else 8)
        d = (big / -bias).astype(np.float32)
        v = (b * inverse(d)).astype(np.float32)
        q = np.minimum(max_q, np.trunc((v + (bias + np.float32(0.5))).astype(np.float32)))
        return (f16(d) * (q - bias)).reshape(shape)
    if kv in ("q4_1", "q5_1"):
        lo, hi = b.min(axis=1), b.max(axis=1)
        d = ((hi - lo) / np.float32(max_q)).astype(np.float32)
        v = ((b - lo[:, None]).astype(np.float32) * inverse(d)).astype(np.float32)
        q = np.minimum(max_q, np.trunc((v + np.float32(0.5)).astype(np.float32)))
        return (f16(d) * q + f16(lo)).reshape(shape)
    raise ValueError(f"KV cache type {kv}")


class Model:
    """Config + float64 weights (dequantized exactly) + each tensor's ggml type + the
    file's metadata."""

    def __init__(self, cfg, w, wtypes, meta=None):
        self.cfg, self.w, self.wtypes, self.meta = cfg, w, wtypes, meta or {}

    def replace(self, **changes):
        """The same weights under a changed Config: Config or ArchRules fields by name."""
        rule_fields = {f.name for f in dataclasses.fields(ArchRules)}
        rules = {k: changes.pop(k) for k in list(changes) if k in rule_fields}
        cfg = dataclasses.replace(self.cfg, **changes)
        if rules:
            cfg = dataclasses.replace(cfg, rules=dataclasses.replace(cfg.rules, **rules))
        return Model(cfg, self.w, self.wtypes, self.meta)

    def linear(self, name, x, expert=None):
        """x (T, n_in) @ W.T for the tensor `name` (expert slice `expert` of a 3-D one);
        a 1-D weight (n_in,) gives (T,)."""
        W = self.w[name] if expert is None else self.w[name][expert]
        if self.cfg.act_quant and self.wtypes[name] in (gguf_read.GGML_Q8_0, gguf_read.GGML_IQ4_NL,
                                                        gguf_read.GGML_MXFP4) + gguf_read.Q45:
            x = q8_0_roundtrip(x)
        elif self.cfg.act_quant and self.wtypes[name] in gguf_read.Q8_K_ACT:
            x = q8_k_roundtrip(x)
        y = x @ W.reshape(-1, W.shape[-1]).T
        return y if W.ndim > 1 else y[:, 0]


def _key(meta, name, default=None):
    if name in meta:
        return meta[name]
    if default is None:
        raise KeyError(f"GGUF key {name!r} is missing")
    return default


def _expected_lead(cfg, names, w):
    """The tensors of DeepSeek's family; which of the optional ones a file has decides its
    variant: deepseek2's q bottleneck, its older attn_kv_b or newer attn_k_b/attn_v_b;
    glm4moe's QK norms (GLM-4.5-Air has none); shared experts and the choosing bias; and
    glm4moe's NextN blocks, each with its own head."""
    if cfg.rules.mla:
        q = ["attn_q_a", "attn_q_a_norm", "attn_q_b"] if cfg.q_lora else ["attn_q"]
        kv = ["attn_kv_b"] if "blk.0.attn_kv_b.weight" in w else ["attn_k_b", "attn_v_b"]
        attn = ["ffn_norm", "attn_kv_a_mqa", "attn_kv_a_norm", "attn_output"] + q + kv
    else:
        attn = ["attn_q", "attn_k", "attn_v", "attn_output", "post_attention_norm"]
        if "blk.0.attn_q_norm.weight" in w:
            attn += ["attn_q_norm", "attn_k_norm"]
    for il in range(cfg.n_layer + cfg.n_nextn):
        per = ["attn_norm"] + attn
        if il < cfg.n_dense:
            per += ["ffn_gate", "ffn_up", "ffn_down"]
        else:
            per += ["ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"]
            if f"blk.{il}.ffn_gate_shexp.weight" in w:
                per += ["ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"]
            if f"blk.{il}.exp_probs_b.bias" in w:
                names.add(f"blk.{il}.exp_probs_b.bias")
        if il >= cfg.n_layer:
            per += ["nextn.eh_proj", "nextn.enorm", "nextn.hnorm", "nextn.shared_head_norm"]
        names |= {f"blk.{il}.{n}.weight" for n in per}
        if cfg.rules.qkv_bias:
            names |= {f"blk.{il}.attn_{n}.bias" for n in "qkv"}
    return names


def expected_tensors(cfg, n_layer, w=()):
    """The exact tensor set of an architecture (output.weight optional: tied)."""
    r = cfg.rules
    names = {"token_embd.weight", "output_norm.weight"}
    if r.lead:
        return _expected_lead(cfg, names, w)
    per_layer = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                 "post_attention_norm" if r.oai else "ffn_norm",
                 "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"]
    if r.oai:
        per_layer += ["attn_sinks"]
    if r.qk_norm:
        per_layer += ["attn_q_norm", "attn_k_norm"]
    if r.shared_expert:
        per_layer += ["ffn_gate_inp_shexp", "ffn_gate_shexp", "ffn_up_shexp",
                      "ffn_down_shexp"]
    for il in range(n_layer):
        names |= {f"blk.{il}.{n}.weight" for n in per_layer}
        if r.qkv_bias:
            names |= {f"blk.{il}.attn_{n}.bias" for n in "qkv"}
        if r.oai:
            names |= {f"blk.{il}.{n}.bias" for n in ("attn_output", "ffn_gate_inp",
                                                      "ffn_gate_exps", "ffn_up_exps",
                                                      "ffn_down_exps")}
        if r.routing and f"blk.{il}.exp_probs_b.bias" in w:
            names.add(f"blk.{il}.exp_probs_b.bias")
    return names


def _rope_scaling(meta, arch):
    """The rope.scaling.* keys moevm mkmodel writes, as a Config.rope_scaling; a file with
    any other is refused, so that the reference never silently ignores one."""
    keys = {k[len(arch) + 1:] for k in meta if k.startswith(f"{arch}.rope.scal")}
    kind = meta.get(f"{arch}.rope.scaling.type", "linear" if keys else "none")
    known = {"none": {"scaling.type"},
             "linear": {"scaling.type", "scaling.factor"},
             "yarn": {"scaling.type", "scaling.factor", "scaling.original_context_length",
                      "scaling.yarn_log_multiplier"}}
    if kind not in known or not keys <= {"rope." + k for k in known[kind]}:
        raise ValueError(f"rope scaling {kind!r} with keys {sorted(keys)}: not modelled")
    if kind == "none":
        return ()
    factor = float(meta[f"{arch}.rope.scaling.factor"])
    if kind == "linear":
        return ("linear", factor)
    return ("yarn", factor, meta[f"{arch}.rope.scaling.original_context_length"])


def _routing_config(cfg, meta):
    """The routing keys of DeepSeek's family and MiniMax-M2 (llama.cpp's names): softmax or
    sigmoid (the architecture's default where the file has no expert_gating_func) in groups
    ranked by their best expert with softmax, their best two with sigmoid; renormalised as
    expert_weights_norm says (else the architecture's way); and the family's leading dense
    blocks, with glm4moe's NextN blocks counted out."""
    a = cfg.arch + "."
    gating = meta.get(a + "expert_gating_func", 0) or cfg.rules.gating
    n_nextn = meta.get(a + "nextn_predict_layers", 0) if cfg.rules.glm else 0
    rules = dataclasses.replace(cfg.rules, norm_topk=bool(meta.get(a + "expert_weights_norm",
                                                                   cfg.rules.norm_topk)))
    return dataclasses.replace(
        cfg, rules=rules, n_layer=cfg.n_layer - n_nextn, n_nextn=n_nextn,
        n_dense=meta.get(a + "leading_dense_block_count", 0) if cfg.rules.lead else 0,
        sigmoid_gate=gating == 2,
        n_group=meta.get(a + "expert_group_count", 0),
        n_group_used=meta.get(a + "expert_group_used_count", 0),
        group_max=gating != 2,
        expert_scale=float(meta.get(a + "expert_weights_scale", 1.0)))


def _mla_config(cfg, meta):
    """deepseek2's attention keys: per-head sizes in key/value_length_mla where a file has
    them (llama.cpp's newer converter), else in key/value_length; the scores' scale is
    Hugging Face's softmax_scale, q_head_dim^-0.5 times YaRN's mscale squared,
    mscale = 1 + yarn_log_multiplier (0.1 x mscale_all_dim) x ln(factor)."""
    a = "deepseek2."
    mla = a + "attention.key_length_mla" in meta
    head_dim = meta[a + ("attention.key_length_mla" if mla else "attention.key_length")]
    v_dim = meta[a + ("attention.value_length_mla" if mla else "attention.value_length")]
    n_rot = meta[a + "rope.dimension_count"]
    factor = cfg.rope_scaling[1] if cfg.rope_scaling else 1.0
    mscale = 1 + meta.get(a + "rope.scaling.yarn_log_multiplier", 0.0) * math.log(factor)
    return dataclasses.replace(
        cfg, head_dim=head_dim, n_rot=n_rot, v_dim=v_dim, nope=head_dim - n_rot,
        q_lora=meta.get(a + "attention.q_lora_rank", 0),
        kv_lora=meta[a + "attention.kv_lora_rank"],
        kq_scale=mscale * mscale / math.sqrt(head_dim))


def load_model(path):
    f = gguf_read.GGUFFile(path)
    meta = f.metadata
    arch = _key(meta, "general.architecture")
    if arch not in ARCHS:
        raise ValueError(f"{path}: architecture {arch!r} is not one of {sorted(ARCHS)}")
    n_embd = _key(meta, f"{arch}.embedding_length")
    n_head = _key(meta, f"{arch}.attention.head_count")
    # (gpt-oss's heads do not tile n_embd: no default)
    head_dim = _key(meta, f"{arch}.attention.key_length",
                    None if ARCHS[arch].oai else n_embd // n_head)
    cfg = Config(
        arch=arch,
        n_vocab=f.tensors["token_embd.weight"].shape[0],
        n_embd=n_embd,
        n_layer=_key(meta, f"{arch}.block_count"),
        n_head=n_head,
        n_head_kv=_key(meta, f"{arch}.attention.head_count_kv", n_head),
        head_dim=head_dim,
        n_rot=_key(meta, f"{arch}.rope.dimension_count", head_dim),
        rope_base=float(_key(meta, f"{arch}.rope.freq_base", 10000.0)),
        rope_scaling=_rope_scaling(meta, arch),
        eps=float(_key(meta, f"{arch}.attention.layer_norm_rms_epsilon")),
        n_expert=_key(meta, f"{arch}.expert_count"),
        n_expert_used=_key(meta, f"{arch}.expert_used_count"),
        rules=ARCHS[arch],
    )
    if cfg.rules.routing:
        cfg = _routing_config(cfg, meta)
    if cfg.rules.mla:
        cfg = _mla_config(cfg, meta)
    if cfg.rules.oai:
        cfg = dataclasses.replace(cfg, n_swa=_key(meta, f"{arch}.attention.sliding_window"))
    if cfg.n_head % cfg.n_head_kv or cfg.n_rot % 2 or cfg.n_rot > cfg.head_dim or \
            not 0 < cfg.n_expert_used <= cfg.n_expert:
        raise ValueError(f"{path}: inconsistent hyper-parameters {cfg}")

    want = expected_tensors(cfg, cfg.n_layer, f.tensors)
    have = set(f.tensors) - {"output.weight"}
    if want != have:
        raise ValueError(f"{path}: tensors for {arch}: missing {sorted(want - have)}, "
                         f"unexpected {sorted(have - want)}")

    w = {name: f.tensor(name) for name in f.tensors}
    wtypes = {name: t.ggml_type for name, t in f.tensors.items()}
    if "output.weight" not in w:
        w["output.weight"] = w["token_embd.weight"]
        wtypes["output.weight"] = wtypes["token_embd.weight"]
    return Model(cfg, w, wtypes, meta)


# ---- the building blocks --------------------------------------------------------------

def rmsnorm(x, weight, eps):
    """Over the last axis: x / sqrt(mean(x^2) + eps) * weight."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope_frequencies(n_rot, base, scaling=()):
    """Each pair's angle per position, and the factor on cos and sin, as Hugging Face's
    _compute_default/linear/yarn_parameters compute them: linear divides every frequency
    by the factor; YaRN blends the divided and the original frequencies along a ramp
    between the pairs that turn beta_fast = 32 and beta_slow = 1 times in the original
    context (floored, ceiled, clamped), and scales by 0.1 ln(factor) + 1."""
    half = n_rot // 2
    freq = base ** (-2.0 * np.arange(half) / n_rot)
    if not scaling:
        return freq, 1.0
    if scaling[0] == "linear":
        return freq / scaling[1], 1.0
    _, factor, orig = scaling

    def corr(turns):
        return n_rot * math.log(orig / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(corr(32)), 0), min(math.ceil(corr(1)), n_rot - 1)
    if low == high:
        high += 0.001
    extrap_w = 1 - np.clip((np.arange(half) - low) / (high - low), 0, 1)
    return freq / factor * (1 - extrap_w) + freq * extrap_w, 0.1 * math.log(factor) + 1


def rope(x, pos, n_rot, base, neox, scaling=(), unit=False):
    """Rotate the first n_rot dims of each head of x (T, n_heads, head_dim) at positions
    pos (T,): pair i turns by pos * base^(-2i/n_rot) (with the context extension
    `scaling`, rope_frequencies; unit: without its magnitude, as DeepSeek's attention
    moves it to the scores). neox: pairs (i, i + n_rot/2); otherwise adjacent pairs
    (2i, 2i + 1)."""
    half = n_rot // 2
    freq, mscale = rope_frequencies(n_rot, base, scaling)
    mscale = 1.0 if unit else mscale
    theta = pos[:, None] * freq   # (T, half)
    cos, sin = mscale * np.cos(theta)[:, None, :], mscale * np.sin(theta)[:, None, :]
    i0 = np.arange(half) if neox else np.arange(0, n_rot, 2)
    i1 = i0 + half if neox else i0 + 1
    x0, x1 = x[..., i0], x[..., i1]
    out = x.copy()
    out[..., i0] = x0 * cos - x1 * sin
    out[..., i1] = x0 * sin + x1 * cos
    return out


def q8_0_roundtrip(x):
    """x quantized to Q8_0 along its last axis and back, as ggml's quantize_row_q8_0
    (reference rounding) does to activations: per block of 32, d = amax/127 in F32,
    q = round(x/d) half away from zero, stored d rounded to F16."""
    shape = x.shape
    b = x.astype(np.float32).reshape(-1, 32)
    d = np.max(np.abs(b), axis=1, keepdims=True) / np.float32(127)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    v = (b * inv).astype(np.float64)
    q = np.where(v >= 0, np.floor(v + 0.5), np.ceil(v - 0.5))
    return (d.astype(np.float16).astype(np.float64) * q).reshape(shape)


def q8_k_roundtrip(x):
    """x quantized to Q8_K along its last axis and back, as ggml's quantize_row_q8_K_ref
    does to the K-quants' activations: per block of 256 in F32, iscale = -127 / (the value
    of largest magnitude, the first on ties), q = min(127, round-half-even(iscale * x)),
    d = 1 / iscale; an all-zero block stays zero."""
    shape = x.shape
    b = x.astype(np.float32).reshape(-1, 256)
    mx = np.take_along_axis(b, np.argmax(np.abs(b), axis=1)[:, None], axis=1)   # (nb, 1)
    safe = np.where(mx == 0, np.float32(1), mx)
    iscale = (np.float32(-127) / safe).astype(np.float32)
    q = np.minimum(np.rint((iscale * b).astype(np.float32)), 127).astype(np.float64)
    d = (np.float32(1) / iscale).astype(np.float64)
    return np.where(mx == 0, 0.0, d * q).reshape(shape)


# ---- the layers ----------------------------------------------------------------------

def mla_attention(model, il, h, pos):
    """DeepSeek's multi-head latent attention as Hugging Face's DeepseekV2Attention computes
    it: keys and values decompressed from the latent per head (the engine keeps the latent
    and turns the queries instead; the two are equal by associativity)."""
    cfg, w, p = model.cfg, model.w, f"blk.{il}."
    T, H, R, nope, rot, vd = h.shape[0], cfg.n_head, cfg.kv_lora, cfg.nope, cfg.n_rot, cfg.v_dim
    if cfg.q_lora:
        q = model.linear(p + "attn_q_b.weight", rmsnorm(model.linear(p + "attn_q_a.weight", h),
                                                        w[p + "attn_q_a_norm.weight"], cfg.eps))
    else:
        q = model.linear(p + "attn_q.weight", h)
    q = q.reshape(T, H, nope + rot)
    kv = model.linear(p + "attn_kv_a_mqa.weight", h)
    c = rmsnorm(kv[:, :R], w[p + "attn_kv_a_norm.weight"], cfg.eps)
    neox = cfg.rules.rope_neox
    k_pe = rope(kv[:, None, R:], pos, rot, cfg.rope_base, neox, cfg.rope_scaling, unit=True)
    row = kv_round(cfg, np.concatenate([c, k_pe[:, 0]], axis=-1))  # one cache row, [c, k_pe]
    c, k_pe = row[:, :R], row[:, None, R:]
    q_pe = rope(q[..., nope:], pos, rot, cfg.rope_base, neox, cfg.rope_scaling, unit=True)
    if p + "attn_kv_b.weight" in w:
        kvb = w[p + "attn_kv_b.weight"].reshape(H, nope + vd, R)
        wk, wv = kvb[:, :nope], kvb[:, nope:]
    else:   # attn_k_b is stored (H, R, nope): the transposed heads
        wk, wv = np.swapaxes(w[p + "attn_k_b.weight"], 1, 2), w[p + "attn_v_b.weight"]
    k = np.concatenate([np.einsum("hnr,tr->thn", wk, c), np.repeat(k_pe, H, axis=1)], axis=-1)
    v = np.einsum("hvr,tr->thv", wv, c)
    qf = np.concatenate([q[..., :nope], q_pe], axis=-1)
    scores = np.einsum("thd,shd->hts", qf, k) * cfg.kq_scale
    scores[:, np.triu(np.ones((T, T), dtype=bool), 1)] = -np.inf
    out = np.einsum("hts,shd->thd", softmax(scores), v).reshape(T, H * vd)
    return model.linear(p + "attn_output.weight", out)


def attention(model, il, h, pos):
    """Multi-head attention (GQA) of block il over the rows h (T, n_embd) at positions pos;
    gpt-oss's: a window of n_swa positions on its even blocks (a key at p is seen from t
    while t - p < n_swa, as llama.cpp's LLAMA_SWA_TYPE_STANDARD and HF's sliding mask), and
    each head's sink s_h: a logit with no value in each softmax, weights e^x / (sum e^x +
    e^s_h) (HF's eager_attention_forward for GptOss)."""
    if model.cfg.rules.mla:
        return mla_attention(model, il, h, pos)
    cfg, w, p = model.cfg, model.w, f"blk.{il}."
    T, hd = h.shape[0], cfg.head_dim
    q = model.linear(p + "attn_q.weight", h)
    k = model.linear(p + "attn_k.weight", h)
    v = model.linear(p + "attn_v.weight", h)
    if cfg.rules.qkv_bias:
        q, k, v = q + w[p + "attn_q.bias"], k + w[p + "attn_k.bias"], v + w[p + "attn_v.bias"]
    if cfg.rules.qk_norm == "full":
        q = rmsnorm(q, w[p + "attn_q_norm.weight"], cfg.eps)
        k = rmsnorm(k, w[p + "attn_k_norm.weight"], cfg.eps)
    q = q.reshape(T, cfg.n_head, hd)
    k = k.reshape(T, cfg.n_head_kv, hd)
    v = v.reshape(T, cfg.n_head_kv, hd)
    if cfg.rules.qk_norm == "head" and p + "attn_q_norm.weight" in w:   # (glm4moe: optional)
        q = rmsnorm(q, w[p + "attn_q_norm.weight"], cfg.eps)
        k = rmsnorm(k, w[p + "attn_k_norm.weight"], cfg.eps)
    q = rope(q, pos, cfg.n_rot, cfg.rope_base, cfg.rules.rope_neox, cfg.rope_scaling)
    k = rope(k, pos, cfg.n_rot, cfg.rope_base, cfg.rules.rope_neox, cfg.rope_scaling)
    k, v = kv_round(cfg, k), kv_round(cfg, v)

    # GQA: query head i reads kv head i // (n_head / n_kv); repeat makes that layout.
    group = cfg.n_head // cfg.n_head_kv
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)
    hidden = np.triu(np.ones((T, T), dtype=bool), 1)              # s > t is the future
    if cfg.n_swa and il % 2 == 0:                                   # gpt-oss's window
        hidden |= pos[:, None] - pos[None, :] >= cfg.n_swa
    scores[:, hidden] = -np.inf
    if cfg.rules.oai:
        sinks = np.broadcast_to(w[p + "attn_sinks.weight"][:, None, None], (cfg.n_head, T, 1))
        probs = softmax(np.concatenate([scores, sinks], axis=-1))[..., :-1]
    else:
        probs = softmax(scores)
    out = np.einsum("hts,shd->thd", probs, v).reshape(T, cfg.n_head * hd)
    out = model.linear(p + "attn_output.weight", out)
    return out + w[p + "attn_output.bias"] if cfg.rules.oai else out


def swiglu_ffn(model, gate, up, down, h, expert=None, scale=None):
    """down @ (silu(gate @ h) * (up @ h)) [* scale per row, applied to the intermediate]."""
    a = silu(model.linear(gate, h, expert)) * model.linear(up, h, expert)
    if scale is not None:
        a = a * scale[:, None]
    return model.linear(down, a, expert)


def oai_expert(model, p, h, e, scale):
    """gpt-oss's expert e of block p on the rows h, times each row's mixing weight scale:
    SwiGLU clamped as OAI_ALPHA, OAI_LIMIT say, with biases. The weight scales the
    intermediate activations before the down product, and the down bias apart in F32, as
    moevm's expert kernel does (ggml scales the biased output: the same but where act_quant
    rounds the down product's input)."""
    w = model.w
    g = model.linear(p + "ffn_gate_exps.weight", h, e) + w[p + "ffn_gate_exps.bias"][e]
    u = model.linear(p + "ffn_up_exps.weight", h, e) + w[p + "ffn_up_exps.bias"][e]
    g, u = np.minimum(g, OAI_LIMIT), np.clip(u, -OAI_LIMIT, OAI_LIMIT)
    a = g / (1.0 + np.exp(-OAI_ALPHA * g)) * (u + 1.0) * scale[:, None]
    return model.linear(p + "ffn_down_exps.weight", a, e) + \
        scale[:, None] * w[p + "ffn_down_exps.bias"][e]


def choose(cfg, probs, bias):
    """The experts' ranking keys: the probabilities, plus DeepSeek-V3's bias, set to -inf
    outside the n_group_used groups of the best scores: a group's best expert (V2's
    group_limited_greedy) or its best two summed (V3's noaux_tc)."""
    key = probs + (bias if bias is not None else 0.0)
    if cfg.n_group > 1:
        T, G = key.shape[0], cfg.n_expert // cfg.n_group
        groups = key.reshape(T, cfg.n_group, G)
        if cfg.group_max:
            score = groups.max(axis=2)                                        # (T, n_group)
        else:
            score = np.sort(groups, axis=2)[:, :, -2:].sum(axis=2)
        kept = np.argsort(-score, axis=1, kind="stable")[:, :cfg.n_group_used]
        mask = np.ones((T, cfg.n_group), dtype=bool)
        np.put_along_axis(mask, kept, False, axis=1)
        key = np.where(np.repeat(mask, G, axis=1), -np.inf, key)
    return key


def moe(model, il, h, trace, routing=None, moe_layer=None):
    """The MoE block il; moe_layer: its index among the MoE blocks (the engine's layer)."""
    cfg, p = model.cfg, f"blk.{il}."
    moe_layer = il if moe_layer is None else moe_layer
    logits = model.linear(p + "ffn_gate_inp.weight", h)                 # (T, n_expert)
    if cfg.rules.oai:
        logits = logits + model.w[p + "ffn_gate_inp.bias"]
    probs = 1.0 / (1.0 + np.exp(-logits)) if cfg.sigmoid_gate else softmax(logits)
    # gpt-oss ranks the logits: the probabilities' order, but where those underflow
    key = logits if cfg.rules.oai else choose(cfg, probs, model.w.get(p + "exp_probs_b.bias"))
    # Top-k, largest first; a stable sort of -key puts ties at the lower index.
    sel = np.argsort(-key, axis=1, kind="stable")[:, :cfg.n_expert_used]
    weights = np.take_along_axis(probs, sel, axis=1)
    if cfg.rules.norm_topk:
        weights = weights / weights.sum(axis=1, keepdims=True)
    weights = weights * cfg.expert_scale
    for (t, layer), (experts, w) in (routing or {}).items():
        if layer == moe_layer:
            sel[t], weights[t] = experts, w

    # The mixing weight scales the expert's intermediate activations, before the down
    # product: the same by linearity, except where that input is quantized (act_quant),
    # and there it is what moevm's expert kernel does (ggml scales the expert's output).
    out = np.zeros_like(h)
    for e in range(cfg.n_expert):
        rows, slot = np.nonzero(sel == e)
        if rows.size and cfg.rules.oai:
            out[rows] += oai_expert(model, p, h[rows], e, weights[rows, slot])
        elif rows.size:
            out[rows] += swiglu_ffn(model, p + "ffn_gate_exps.weight", p + "ffn_up_exps.weight",
                                    p + "ffn_down_exps.weight", h[rows], expert=e,
                                    scale=weights[rows, slot])
    if p + "ffn_gate_shexp.weight" in model.w:   # gated in Qwen2-MoE, not in DeepSeek
        gate = 1.0 / (1.0 + np.exp(-model.linear(p + "ffn_gate_inp_shexp.weight", h))) \
            if cfg.rules.shared_expert else np.ones(h.shape[0])
        out += gate[:, None] * swiglu_ffn(model, p + "ffn_gate_shexp.weight",
                                          p + "ffn_up_shexp.weight",
                                          p + "ffn_down_shexp.weight", h)
    if trace is not None:
        trace.append({"probs": probs, "selected": sel, "weights": weights})
    return out


def forward(model, tokens, trace=None, routing=None):
    """Logits (len(tokens), n_vocab) for every position of the token sequence; row t is
    the prediction after tokens[0..t]. If trace is a list, one dict per layer is appended:
    probs (T, n_expert) router softmax, selected (T, k) experts largest first, weights
    (T, k) their mixing weights. routing: {(position, layer): (experts, weights)} rows that
    run those k experts with those weights instead of the router's choice (an engine's
    expert substitution); the trace then shows them as selected."""
    cfg, w = model.cfg, model.w
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.ndim != 1 or tokens.size == 0 or tokens.min() < 0 or \
            tokens.max() >= cfg.n_vocab:
        raise ValueError(f"tokens must be a non-empty list of ids in [0, {cfg.n_vocab})")
    pos = np.arange(tokens.size, dtype=np.float64)
    x = w["token_embd.weight"][tokens]
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        x = x + attention(model, il, rmsnorm(x, w[p + "attn_norm.weight"], cfg.eps), pos)
        ffn_norm = "post_attention_norm" if cfg.rules.glm or cfg.rules.oai else "ffn_norm"
        h = rmsnorm(x, w[p + ffn_norm + ".weight"], cfg.eps)
        if il < cfg.n_dense:   # DeepSeek's and GLM's leading dense blocks
            x = x + swiglu_ffn(model, p + "ffn_gate.weight", p + "ffn_up.weight",
                               p + "ffn_down.weight", h)
        else:
            x = x + moe(model, il, h, trace, routing, il - cfg.n_dense)
    return model.linear("output.weight", rmsnorm(x, w["output_norm.weight"], cfg.eps))
