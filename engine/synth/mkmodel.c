/*
 * Writing synthetic models (mkmodel.h). Weights are uniform with the standard deviation
 * of the usual initialisations (1/sqrt(fan_in) for matrices), norms near 1 and biases
 * near 0, so activations stay in a realistic range through the layers. Every row is drawn
 * from its own generator seeded by (seed, tensor name, row): the file does not depend on
 * the order of generation, and any row can be recomputed alone.
 */
#include "engine/synth/mkmodel.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf_write.h"
#include "engine/model/model.h"
#include "engine/synth/vocab_build.h"
#include "vmm/error.h"

uint32_t mvm_spec_expert_ff(const mvm_model_spec *s)
{
    return s->n_ff_exp ? s->n_ff_exp : s->n_ff;
}

mvm_status mvm_spec_check(const mvm_model_spec *s)
{
    const mvm_arch *a = mvm_arch_find(s->arch);
    if (!a)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "architecture '%s' is not supported (supported: %s)",
                        s->arch, mvm_arch_names());
    if (!s->n_vocab || !s->n_embd || !s->n_layer || !s->n_head || !s->n_head_kv ||
        !s->head_dim || !s->n_ctx || !s->n_expert || !mvm_spec_expert_ff(s))
        return mvm_fail(MVM_ERR_INVALID, "every size must be at least 1");
    if (s->n_head % s->n_head_kv)
        return mvm_fail(MVM_ERR_INVALID, "%u heads are not a multiple of %u kv heads", s->n_head,
                        s->n_head_kv);
    if (s->head_dim % 2)
        return mvm_fail(MVM_ERR_INVALID, "head size %u is odd: RoPE rotates pairs", s->head_dim);
    if (!s->n_expert_used || s->n_expert_used > s->n_expert)
        return mvm_fail(MVM_ERR_INVALID, "top-k %u is not in 1..%u experts", s->n_expert_used,
                        s->n_expert);
    if (mvm_spec_expert_ff(s) % MVM_QBLOCK)
        return mvm_fail(MVM_ERR_INVALID, "expert size %u is not a multiple of %d",
                        mvm_spec_expert_ff(s), MVM_QBLOCK);
    if (a->shared_expert == 1 && !s->n_ff_shexp)
        return mvm_fail(MVM_ERR_INVALID, "%s needs a shared expert size", s->arch);
    int quant = mvm_k_block_elems(s->type) == MVM_QBLOCK;
    uint32_t rows_in[3] = {s->n_embd, s->n_head * s->head_dim, s->n_ff_shexp};
    for (int i = 0; quant && i < 3; i++)
        if (rows_in[i] % MVM_QBLOCK)
            return mvm_fail(MVM_ERR_INVALID, "%s needs rows in multiples of %d elements: "
                            "embedding %u, heads x head size %u, shared expert %u",
                            mvm_k_wtype_name(s->type), MVM_QBLOCK, s->n_embd,
                            s->n_head * s->head_dim, s->n_ff_shexp);
    int yarn = strcmp(s->rope_scaling, "yarn") == 0;
    if (s->rope_scaling[0] && !yarn && strcmp(s->rope_scaling, "linear") != 0)
        return mvm_fail(MVM_ERR_INVALID, "RoPE scaling '%s' is not linear or yarn",
                        s->rope_scaling);
    if (s->rope_scaling[0] && (!(s->rope_factor >= 1 && s->rope_factor <= 1024) ||
                               (yarn && s->rope_orig_ctx < 2)))
        return mvm_fail(MVM_ERR_INVALID, "RoPE scaling factor %g is not in 1..1024 or YaRN's "
                        "original context %u is below 2", s->rope_factor, s->rope_orig_ctx);
    if (a->deepseek && (!s->ds.kv_lora || !s->ds.v_dim || s->ds.n_rot % 2 ||
                        s->head_dim <= s->ds.n_rot || s->n_head_kv != s->n_head ||
                        s->ds.n_dense >= s->n_layer || (s->ds.n_dense && !s->n_ff)))
        return mvm_fail(MVM_ERR_INVALID, "deepseek2 shape: kv_lora %u, v_dim %u, rope %u of "
                        "head size %u, %u kv heads of %u, %u dense blocks of %u",
                        s->ds.kv_lora, s->ds.v_dim, s->ds.n_rot, s->head_dim, s->n_head_kv,
                        s->n_head, s->ds.n_dense, s->n_layer);
    if (!a->deepseek && (s->ds.n_rot % 2 || s->ds.n_rot > s->head_dim))
        return mvm_fail(MVM_ERR_INVALID, "rope on %u dims: not even or more than the head "
                        "size %u", s->ds.n_rot, s->head_dim);
    if (a->glm && (s->ds.n_dense >= s->n_layer || (s->ds.n_dense && !s->n_ff) ||
                   s->ds.n_nextn > 8))
        return mvm_fail(MVM_ERR_INVALID, "glm4moe shape: %u dense blocks of %u, %u NextN "
                        "blocks (at most 8)", s->ds.n_dense, s->n_layer, s->ds.n_nextn);
    if (a->oai && (!s->n_swa || s->n_swa > s->n_ctx))
        return mvm_fail(MVM_ERR_INVALID, "gpt-oss needs a sliding window of 1..%u positions, "
                        "not %u", s->n_ctx, s->n_swa);
    if (a->routing && s->ds.n_group > 1 &&
        (s->n_expert % s->ds.n_group || !s->ds.n_group_used || s->ds.n_group_used > s->ds.n_group))
        return mvm_fail(MVM_ERR_INVALID, "%u expert groups (%u used) do not divide %u experts",
                        s->ds.n_group, s->ds.n_group_used, s->n_expert);
    if (s->k_mix && s->type != MVM_W_Q4_K && s->type != MVM_W_Q5_K)
        return mvm_fail(MVM_ERR_INVALID, "the _M mix is for q4_K and q5_K, not %s",
                        mvm_k_wtype_name(s->type));
    return MVM_OK;
}

/* llama.cpp's use_more_bits(layer, n_layer): the first and last eighth, every third between. */
static int more_bits(uint32_t layer, uint32_t n_layer)
{
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

/* The type of a matrix with rows of `cols` elements: the spec's, except
 *  - with k_mix (Q4_K_M, Q5_K_M): Q6_K where `raise` (output.weight, and attn_v and the down
 *    matrices in more_bits layers);
 *  - MXFP4 is llama-quantize's MXFP4_MOE: only the routed experts, the rest Q8_0;
 *  - a K type falls back where the rows are not whole 256-element super-blocks, as
 *    llama-quantize does: Q2_K, Q3_K, IQ4_XS and the IQ1/IQ2/IQ3 types to IQ4_NL, Q4_K to
 *    Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, and F16 where the rows are not even whole 32-element
 *    blocks. */
static enum mvm_wtype tensor_type(const mvm_model_spec *s, uint64_t cols, int raise,
                                  int expert)
{
    enum mvm_wtype t = s->k_mix && raise ? MVM_W_Q6_K : s->type;
    if (t == MVM_W_MXFP4 && !expert)
        t = MVM_W_Q8_0;
    if (cols % mvm_k_block_elems(t))
        t = cols % MVM_QBLOCK ? MVM_W_F16
            : t == MVM_W_Q4_K ? MVM_W_Q5_0
            : t == MVM_W_Q5_K ? MVM_W_Q5_1
            : t == MVM_W_Q6_K ? MVM_W_Q8_0
                              : MVM_W_IQ4_NL; /* Q2_K, Q3_K, IQ4_XS and the grid types */
    return t;
}

/* ---- the tensor list -------------------------------------------------------------------- */

enum init { INIT_MATRIX, INIT_NORM, INIT_BIAS, INIT_EMBED, INIT_ROUTER };

struct tensor {
    char name[64];
    uint32_t n_dims;
    uint64_t ne[3];
    enum mvm_wtype type;
    enum init init;
};

struct plan {
    const mvm_model_spec *s;
    struct tensor *t;
    uint32_t n, cap;
    uint64_t done, total;
    mvm_mkmodel_progress progress;
    void *progress_ctx;
    uint64_t last_report;
    mvm_pool *pool;
    float *rowf;      /* one row of floats per thread */
    uint8_t *block;   /* BLOCK_BYTES of rows in the tensor's type */
    size_t widest;
    /* the block being generated */
    const struct tensor *cur;
    uint64_t row0, n_rows;
};

/* Rows are generated in parallel a block at a time, then written in order. */
#define BLOCK_BYTES ((size_t)8 << 20)

static int add(struct plan *p, enum init init, enum mvm_wtype type, uint32_t n_dims, uint64_t a,
               uint64_t b, uint64_t c, const char *fmt, int layer)
{
    if (p->n == p->cap) {
        uint32_t cap = p->cap ? p->cap * 2 : 64;
        struct tensor *t = realloc(p->t, cap * sizeof *t);
        if (!t)
            return -1;
        p->t = t;
        p->cap = cap;
    }
    struct tensor *t = &p->t[p->n++];
    snprintf(t->name, sizeof t->name, fmt, layer);
    t->n_dims = n_dims;
    t->ne[0] = a;
    t->ne[1] = b;
    t->ne[2] = c;
    /* the _M mix's Q6_K matrices: attn_v and the down ones in use_more_bits layers */
    int raise = strcmp(fmt, "output.weight") == 0 ||
                ((strstr(fmt, "attn_v.") || strstr(fmt, "ffn_down_")) &&
                 more_bits((uint32_t)layer, p->s->n_layer));
    /* (a type other than the spec's, as the router's F32, is kept) */
    const int expert = strstr(fmt, "_exps.weight") != NULL;
    t->type = n_dims == 1 ? MVM_W_F32 : type != p->s->type ? type
                                                           : tensor_type(p->s, a, raise, expert);
    t->init = init;
    return 0;
}

/* deepseek2's blocks (llama.cpp's tensor names; `r` carries the earlier adds' result).
 * attn_k_b and attn_v_b are kept in F16 when the spec quantizes: their products would
 * otherwise round the query to Q8_0 where the older attn_kv_b's decompression rounds the
 * latent, and the reference could follow only one of them. */
static int plan_deepseek(struct plan *p, int r)
{
    const mvm_model_spec *s = p->s;
    uint64_t D = s->n_embd, H = s->n_head, hd = s->head_dim, R = s->ds.kv_lora;
    uint64_t rot = s->ds.n_rot, V = s->ds.v_dim, nope = hd - rot, E = s->n_expert;
    uint64_t F = s->n_ff_exp, S = (uint64_t)s->ds.n_shared * F;
    enum mvm_wtype t = s->type, tb = mvm_k_block_elems(t) == 1 ? t : MVM_W_F16;
    for (uint32_t l = 0; l < s->n_layer && r == 0; l++) {
        int il = (int)l;
        r |= add(p, INIT_NORM, t, 1, D, 1, 1, "blk.%d.attn_norm.weight", il);
        if (s->ds.q_lora) {
            r |= add(p, INIT_MATRIX, t, 2, D, s->ds.q_lora, 1, "blk.%d.attn_q_a.weight", il);
            r |= add(p, INIT_NORM, t, 1, s->ds.q_lora, 1, 1, "blk.%d.attn_q_a_norm.weight", il);
            r |= add(p, INIT_MATRIX, t, 2, s->ds.q_lora, H * hd, 1, "blk.%d.attn_q_b.weight", il);
        } else {
            r |= add(p, INIT_MATRIX, t, 2, D, H * hd, 1, "blk.%d.attn_q.weight", il);
        }
        r |= add(p, INIT_MATRIX, t, 2, D, R + rot, 1, "blk.%d.attn_kv_a_mqa.weight", il);
        r |= add(p, INIT_NORM, t, 1, R, 1, 1, "blk.%d.attn_kv_a_norm.weight", il);
        if (s->ds.kv_b) {
            r |= add(p, INIT_MATRIX, t, 2, R, H * (nope + V), 1, "blk.%d.attn_kv_b.weight", il);
        } else {
            r |= add(p, INIT_MATRIX, tb, 3, nope, R, H, "blk.%d.attn_k_b.weight", il);
            r |= add(p, INIT_MATRIX, tb, 3, R, V, H, "blk.%d.attn_v_b.weight", il);
        }
        r |= add(p, INIT_MATRIX, t, 2, H * V, D, 1, "blk.%d.attn_output.weight", il);
        r |= add(p, INIT_NORM, t, 1, D, 1, 1, "blk.%d.ffn_norm.weight", il);
        if (l < s->ds.n_dense) {
            r |= add(p, INIT_MATRIX, t, 2, D, s->n_ff, 1, "blk.%d.ffn_gate.weight", il);
            r |= add(p, INIT_MATRIX, t, 2, D, s->n_ff, 1, "blk.%d.ffn_up.weight", il);
            r |= add(p, INIT_MATRIX, t, 2, s->n_ff, D, 1, "blk.%d.ffn_down.weight", il);
            continue;
        }
        r |= add(p, INIT_ROUTER, MVM_W_F32, 2, D, E, 1, "blk.%d.ffn_gate_inp.weight", il);
        if (s->ds.bias)
            r |= add(p, INIT_BIAS, t, 1, E, 1, 1, "blk.%d.exp_probs_b.bias", il);
        r |= add(p, INIT_MATRIX, t, 3, D, F, E, "blk.%d.ffn_gate_exps.weight", il);
        r |= add(p, INIT_MATRIX, t, 3, D, F, E, "blk.%d.ffn_up_exps.weight", il);
        r |= add(p, INIT_MATRIX, t, 3, F, D, E, "blk.%d.ffn_down_exps.weight", il);
        if (S) {
            r |= add(p, INIT_MATRIX, t, 2, D, S, 1, "blk.%d.ffn_gate_shexp.weight", il);
            r |= add(p, INIT_MATRIX, t, 2, D, S, 1, "blk.%d.ffn_up_shexp.weight", il);
            r |= add(p, INIT_MATRIX, t, 2, S, D, 1, "blk.%d.ffn_down_shexp.weight", il);
        }
    }
    return r ? -1 : 0;
}

static int plan_tensors(struct plan *p)
{
    const mvm_model_spec *s = p->s;
    const mvm_arch *a = mvm_arch_find(s->arch);
    uint64_t D = s->n_embd, Q = (uint64_t)s->n_head * s->head_dim;
    uint64_t KV = (uint64_t)s->n_head_kv * s->head_dim, F = mvm_spec_expert_ff(s);
    uint64_t E = s->n_expert, V = s->n_vocab;
    enum mvm_wtype t = s->type;
    int r = add(p, INIT_EMBED, t, 2, D, V, 1, "token_embd.weight", 0) |
            add(p, INIT_NORM, t, 1, D, 1, 1, "output_norm.weight", 0) |
            add(p, INIT_MATRIX, t, 2, D, V, 1, "output.weight", 0);
    if (a->deepseek)
        return plan_deepseek(p, r);
    /* glm4moe's NextN blocks follow the others, each a whole MoE block plus its own head */
    const uint32_t blocks = s->n_layer + (a->glm ? s->ds.n_nextn : 0);
    for (uint32_t l = 0; l < blocks && r == 0; l++) {
        int il = (int)l;
        r |= add(p, INIT_NORM, t, 1, D, 1, 1, "blk.%d.attn_norm.weight", il);
        r |= add(p, INIT_MATRIX, t, 2, D, Q, 1, "blk.%d.attn_q.weight", il);
        r |= add(p, INIT_MATRIX, t, 2, D, KV, 1, "blk.%d.attn_k.weight", il);
        r |= add(p, INIT_MATRIX, t, 2, D, KV, 1, "blk.%d.attn_v.weight", il);
        r |= add(p, INIT_MATRIX, t, 2, Q, D, 1, "blk.%d.attn_output.weight", il);
        if (a->qkv_bias) {
            r |= add(p, INIT_BIAS, t, 1, Q, 1, 1, "blk.%d.attn_q.bias", il);
            r |= add(p, INIT_BIAS, t, 1, KV, 1, 1, "blk.%d.attn_k.bias", il);
            r |= add(p, INIT_BIAS, t, 1, KV, 1, 1, "blk.%d.attn_v.bias", il);
        }
        if (a->oai) { /* the sinks near 1, on the scale of the scores, so that they matter */
            r |= add(p, INIT_BIAS, t, 1, D, 1, 1, "blk.%d.attn_output.bias", il);
            r |= add(p, INIT_NORM, t, 1, s->n_head, 1, 1, "blk.%d.attn_sinks.weight", il);
        }
        if (a->qk_norm != MVM_QK_NORM_NONE && (!a->glm || s->ds.qk_norm)) {
            int head = a->qk_norm == MVM_QK_NORM_HEAD;
            r |= add(p, INIT_NORM, t, 1, head ? s->head_dim : Q, 1, 1, "blk.%d.attn_q_norm.weight", il);
            r |= add(p, INIT_NORM, t, 1, head ? s->head_dim : KV, 1, 1, "blk.%d.attn_k_norm.weight", il);
        }
        r |= add(p, INIT_NORM, t, 1, D, 1, 1, a->post_norm ? "blk.%d.post_attention_norm.weight"
                                                          : "blk.%d.ffn_norm.weight", il);
        if (a->lead && l < s->ds.n_dense) {
            r |= add(p, INIT_MATRIX, t, 2, D, s->n_ff, 1, "blk.%d.ffn_gate.weight", il);
            r |= add(p, INIT_MATRIX, t, 2, D, s->n_ff, 1, "blk.%d.ffn_up.weight", il);
            r |= add(p, INIT_MATRIX, t, 2, s->n_ff, D, 1, "blk.%d.ffn_down.weight", il);
            continue;
        }
        /* The router stays f32, as llama.cpp's quantizer keeps ffn_gate_inp. */
        r |= add(p, INIT_ROUTER, MVM_W_F32, 2, D, E, 1, "blk.%d.ffn_gate_inp.weight", il);
        if (a->routing && s->ds.bias)
            r |= add(p, INIT_BIAS, t, 1, E, 1, 1, "blk.%d.exp_probs_b.bias", il);
        r |= add(p, INIT_MATRIX, t, 3, D, F, E, "blk.%d.ffn_gate_exps.weight", il);
        r |= add(p, INIT_MATRIX, t, 3, D, F, E, "blk.%d.ffn_up_exps.weight", il);
        r |= add(p, INIT_MATRIX, t, 3, F, D, E, "blk.%d.ffn_down_exps.weight", il);
        if (a->oai) { /* gpt-oss's biases, f32 as llama.cpp's converter writes them */
            /* the router's bias as wide as its logits, so that it changes the choice */
            r |= add(p, INIT_ROUTER, MVM_W_F32, 1, E, 1, 1, "blk.%d.ffn_gate_inp.bias", il);
            r |= add(p, INIT_BIAS, MVM_W_F32, 2, F, E, 1, "blk.%d.ffn_gate_exps.bias", il);
            r |= add(p, INIT_BIAS, MVM_W_F32, 2, F, E, 1, "blk.%d.ffn_up_exps.bias", il);
            r |= add(p, INIT_BIAS, MVM_W_F32, 2, D, E, 1, "blk.%d.ffn_down_exps.bias", il);
        }
        uint64_t S = a->shared_expert == 1 ? s->n_ff_shexp : (uint64_t)s->ds.n_shared * F;
        if (a->shared_expert == 1)
            r |= add(p, INIT_ROUTER, t, 1, D, 1, 1, "blk.%d.ffn_gate_inp_shexp.weight", il);
        if (a->shared_expert && S) {
            r |= add(p, INIT_MATRIX, t, 2, D, S, 1, "blk.%d.ffn_gate_shexp.weight", il);
            r |= add(p, INIT_MATRIX, t, 2, D, S, 1, "blk.%d.ffn_up_shexp.weight", il);
            r |= add(p, INIT_MATRIX, t, 2, S, D, 1, "blk.%d.ffn_down_shexp.weight", il);
        }
        if (l >= s->n_layer) { /* the NextN head (llama.cpp's names; embed_tokens and
                                  shared_head_head are optional there, and left out) */
            r |= add(p, INIT_MATRIX, t, 2, 2 * D, D, 1, "blk.%d.nextn.eh_proj.weight", il);
            r |= add(p, INIT_NORM, t, 1, D, 1, 1, "blk.%d.nextn.enorm.weight", il);
            r |= add(p, INIT_NORM, t, 1, D, 1, 1, "blk.%d.nextn.hnorm.weight", il);
            r |= add(p, INIT_NORM, t, 1, D, 1, 1, "blk.%d.nextn.shared_head_norm.weight", il);
        }
    }
    return r ? -1 : 0;
}

static uint64_t tensor_bytes(const struct tensor *t)
{
    return (uint64_t)mvm_k_row_bytes(t->type, t->ne[0]) * t->ne[1] * t->ne[2];
}

void mvm_spec_bytes(const mvm_model_spec *s, uint64_t *total, uint64_t *experts)
{
    struct plan p = {.s = s};
    *total = *experts = 0;
    if (mvm_spec_check(s) != MVM_OK || plan_tensors(&p) != 0) {
        free(p.t);
        return;
    }
    for (uint32_t i = 0; i < p.n; i++) {
        *total += tensor_bytes(&p.t[i]);
        if (strstr(p.t[i].name, "_exps."))
            *experts += tensor_bytes(&p.t[i]);
    }
    free(p.t);
}

/* ---- weights ---------------------------------------------------------------------------- */

static uint64_t mix(uint64_t z)
{
    /* splitmix64's finaliser: a well-distributed 64-bit hash */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t hash_name(const char *s, uint64_t seed)
{
    uint64_t h = mix(seed + 0x9E3779B97F4A7C15ull);
    for (; *s; s++)
        h = mix(h ^ (unsigned char)*s);
    return h;
}

/* One row of floats, uniform in [-1, 1) scaled per the tensor's initialisation. */
static void draw_row(const struct plan *p, const struct tensor *t, uint64_t row, float *out)
{
    uint64_t n = t->ne[0], state = mix(hash_name(t->name, p->s->seed) ^ (row * 0xD1B54A32D192ED03ull));
    float scale, bias = 0;
    switch (t->init) {
    case INIT_NORM: scale = 0.2f, bias = 1.0f; break;   /* near 1, not exactly: tests see it */
    case INIT_BIAS: scale = 0.1f; break;
    case INIT_EMBED: scale = 1.0f; break;
    case INIT_ROUTER: scale = 3.0f * sqrtf(3.0f / (float)n); break; /* distinct top-k margins */
    default: scale = sqrtf(3.0f / (float)n); break;                /* std 1/sqrt(fan_in) */
    }
    for (uint64_t i = 0; i < n; i++) {
        state += 0x9E3779B97F4A7C15ull;
        uint64_t z = mix(state);
        out[i] = bias + scale * ((float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
}

static void gen_rows(void *ctx, int t, int nth)
{
    struct plan *p = ctx;
    size_t rb = mvm_k_row_bytes(p->cur->type, p->cur->ne[0]), r0, r1;
    float *rowf = p->rowf + (size_t)t * p->widest;
    mvm_pool_split(p->n_rows, t, nth, &r0, &r1);
    for (size_t r = r0; r < r1; r++) {
        draw_row(p, p->cur, p->row0 + r, rowf);
        mvm_k_quantize(p->cur->type, rowf, p->block + r * rb, p->cur->ne[0]);
    }
}

static mvm_status write_tensor(void *ctx, uint64_t index, FILE *f)
{
    struct plan *p = ctx;
    const struct tensor *t = &p->t[index];
    size_t rb = mvm_k_row_bytes(t->type, t->ne[0]);
    uint64_t rows = t->ne[1] * t->ne[2], per_block = BLOCK_BYTES / rb ? BLOCK_BYTES / rb : 1;
    p->cur = t;
    for (uint64_t r = 0; r < rows; r += per_block) {
        p->row0 = r;
        p->n_rows = rows - r < per_block ? rows - r : per_block;
        mvm_pool_run(p->pool, gen_rows, p);
        size_t bytes = p->n_rows * rb;
        if (fwrite(p->block, 1, bytes, f) != bytes)
            return mvm_fail(MVM_ERR_BACKEND, "writing tensor '%s': %s", t->name, strerror(errno));
        p->done += bytes;
        if (p->progress && p->done - p->last_report >= (64u << 20)) {
            p->last_report = p->done;
            p->progress(p->progress_ctx, p->done, p->total);
        }
    }
    return MVM_OK;
}

/* ---- metadata --------------------------------------------------------------------------- */

/* The routing keys of deepseek2's family and minimax-m2 (and the family's blocks), as
 * llama.cpp's converter writes them. */
static mvm_status write_routing_keys(mvm_gguf_writer *w, const mvm_model_spec *s)
{
    char k[96];
    mvm_status st = MVM_OK;
#define U32(suffix, v) (snprintf(k, sizeof k, "%s." suffix, s->arch), \
                        st = st ? st : mvm_gguf_writer_set_u32(w, k, (v)))
    if (mvm_arch_find(s->arch)->lead) {
        U32("leading_dense_block_count", s->ds.n_dense);
        U32("expert_shared_count", s->ds.n_shared);
    }
    snprintf(k, sizeof k, "%s.expert_weights_scale", s->arch);
    st = st ? st : mvm_gguf_writer_set_f32(w, k, s->ds.scale);
    U32("expert_gating_func", s->ds.sigmoid ? 2 : 1);
    snprintf(k, sizeof k, "%s.expert_weights_norm", s->arch);
    st = st ? st : mvm_gguf_writer_set_bool(w, k, s->ds.norm);
    if (s->ds.n_group > 1) {
        U32("expert_group_count", s->ds.n_group);
        U32("expert_group_used_count", s->ds.n_group_used);
    }
#undef U32
    return st;
}

/* deepseek2's attention keys as llama.cpp's converter writes them: with attn_k_b/attn_v_b
 * the absorbed view in key_length/value_length and the per-head sizes in *_mla. */
static mvm_status write_mla_keys(mvm_gguf_writer *w, const mvm_model_spec *s)
{
    char k[96];
    mvm_status st = MVM_OK;
#define U32(suffix, v) (snprintf(k, sizeof k, "deepseek2." suffix), \
                        st = st ? st : mvm_gguf_writer_set_u32(w, k, (v)))
    if (s->ds.q_lora)
        U32("attention.q_lora_rank", s->ds.q_lora);
    U32("attention.kv_lora_rank", s->ds.kv_lora);
    U32("attention.key_length", s->ds.kv_b ? s->head_dim : s->ds.kv_lora + s->ds.n_rot);
    U32("attention.value_length", s->ds.kv_b ? s->ds.v_dim : s->ds.kv_lora);
    if (!s->ds.kv_b) {
        U32("attention.key_length_mla", s->head_dim);
        U32("attention.value_length_mla", s->ds.v_dim);
    }
    U32("rope.dimension_count", s->ds.n_rot);
    if (s->rope_scaling[0] && s->ds.yarn_log_mul != 0)
        st = st ? st : mvm_gguf_writer_set_f32(w, "deepseek2.rope.scaling.yarn_log_multiplier",
                                               s->ds.yarn_log_mul);
#undef U32
    return st;
}

static mvm_status set_keys(const mvm_model_spec *s, mvm_gguf_writer *w)
{
    const mvm_arch *a = mvm_arch_find(s->arch);
    /* llama.cpp's llama_ftype numbers */
    static const uint32_t ftype[MVM_W_COUNT] = {
        [MVM_W_F32] = 0,  [MVM_W_F16] = 1,  [MVM_W_BF16] = 32, [MVM_W_Q8_0] = 7,
        [MVM_W_Q4_0] = 2, [MVM_W_Q4_1] = 3, [MVM_W_Q5_0] = 8,  [MVM_W_Q5_1] = 9,
        [MVM_W_IQ4_NL] = 25, [MVM_W_Q2_K] = 10, [MVM_W_Q3_K] = 11, /* Q3_K_S */
        [MVM_W_Q4_K] = 14, [MVM_W_Q5_K] = 16, [MVM_W_Q6_K] = 18, [MVM_W_IQ4_XS] = 30,
        [MVM_W_MXFP4] = 38, [MVM_W_IQ2_XXS] = 19, [MVM_W_IQ2_XS] = 20, [MVM_W_IQ2_S] = 28,
        [MVM_W_IQ3_XXS] = 23, [MVM_W_IQ3_S] = 26, [MVM_W_IQ1_S] = 24, [MVM_W_IQ1_M] = 31};
    char k[96];
    mvm_status st = MVM_OK;
#define U32(suffix, v) (snprintf(k, sizeof k, "%s." suffix, s->arch), \
                        st = st ? st : mvm_gguf_writer_set_u32(w, k, (v)))
#define F32(suffix, v) (snprintf(k, sizeof k, "%s." suffix, s->arch), \
                        st = st ? st : mvm_gguf_writer_set_f32(w, k, (v)))
    st = mvm_gguf_writer_set_str(w, "general.architecture", s->arch);
    st = st ? st : mvm_gguf_writer_set_str(w, "general.name", s->name);
    /* Q4_K_S 14 -> Q4_K_M 15, Q5_K_S 16 -> Q5_K_M 17 */
    st = st ? st : mvm_gguf_writer_set_u32(w, "general.file_type", ftype[s->type] + !!s->k_mix);
    if (s->type >= MVM_W_Q8_0)
        st = st ? st : mvm_gguf_writer_set_u32(w, "general.quantization_version", 2);
    U32("vocab_size", s->n_vocab);
    U32("context_length", s->n_ctx);
    U32("embedding_length", s->n_embd);
    U32("block_count", s->n_layer + (a->glm ? s->ds.n_nextn : 0));
    U32("feed_forward_length", s->n_ff);
    U32("attention.head_count", s->n_head);
    U32("attention.head_count_kv", s->n_head_kv);
    if (a->routing)
        st = st ? st : write_routing_keys(w, s);
    if (a->glm && s->ds.n_nextn)
        U32("nextn_predict_layers", s->ds.n_nextn);
    if (a->deepseek) {
        st = st ? st : write_mla_keys(w, s);
    } else {
        U32("attention.key_length", s->head_dim);
        U32("attention.value_length", s->head_dim);
        U32("rope.dimension_count", s->ds.n_rot ? s->ds.n_rot : s->head_dim);
    }
    F32("rope.freq_base", s->rope_base);
    F32("attention.layer_norm_rms_epsilon", s->rms_eps);
    if (s->rope_scaling[0]) {
        snprintf(k, sizeof k, "%s.rope.scaling.type", s->arch);
        st = st ? st : mvm_gguf_writer_set_str(w, k, s->rope_scaling);
        F32("rope.scaling.factor", s->rope_factor);
        if (s->rope_orig_ctx)
            U32("rope.scaling.original_context_length", s->rope_orig_ctx);
    }
    U32("expert_count", s->n_expert);
    U32("expert_used_count", s->n_expert_used);
    if (a->oai)
        U32("attention.sliding_window", s->n_swa);
    if (strcmp(a->expert_ff_key, "expert_feed_forward_length") == 0)
        U32("expert_feed_forward_length", s->n_ff_exp);
    if (a->shared_expert == 1)
        U32("expert_shared_feed_forward_length", s->n_ff_shexp);
#undef U32
#undef F32
    return st;
}

/* The vocabulary a model of this kind ships with: DeepSeek-V3 (the sigmoid router) has
 * its own pre-tokenizer, V2 and V2-Lite DeepSeek-LLM's, Kimi K2 (V3's shape) its own. */
static enum mvm_vocab_style vocab_style(const mvm_model_spec *s)
{
    if (strcmp(s->arch, "llama") == 0)
        return MVM_VOCAB_LLAMA;
    if (strcmp(s->arch, "glm4moe") == 0)
        return MVM_VOCAB_GLM4;
    if (strcmp(s->arch, "minimax-m2") == 0)
        return MVM_VOCAB_MINIMAX;
    if (strcmp(s->arch, "gpt-oss") == 0)
        return MVM_VOCAB_GPTOSS;
    if (strcmp(s->arch, "deepseek2") == 0)
        return s->ds.kimi ? MVM_VOCAB_KIMI : s->ds.sigmoid ? MVM_VOCAB_DEEPSEEK3
                                                             : MVM_VOCAB_DEEPSEEK;
    return strcmp(s->arch, "olmoe") == 0 ? MVM_VOCAB_OLMO : MVM_VOCAB_QWEN2;
}

mvm_status mvm_spec_vocab(const mvm_model_spec *s, mvm_vocab *out)
{
    return mvm_vocab_build(vocab_style(s), s->n_vocab, out);
}

mvm_status mvm_mkmodel_write(const mvm_model_spec *s, const char *path, mvm_pool *pool,
                             mvm_mkmodel_progress progress, void *progress_ctx)
{
    mvm_status st = mvm_spec_check(s);
    if (st != MVM_OK)
        return st;
    struct plan p = {.s = s, .progress = progress, .progress_ctx = progress_ctx, .pool = pool};
    mvm_gguf_writer *w = NULL;
    mvm_vocab vocab;
    int have_vocab = 0;
    if (plan_tensors(&p) != 0) {
        st = mvm_fail(MVM_ERR_NOMEM, "out of memory planning the tensors");
        goto out;
    }
    uint64_t widest = 0;
    for (uint32_t i = 0; i < p.n; i++) {
        p.total += tensor_bytes(&p.t[i]);
        widest = p.t[i].ne[0] > widest ? p.t[i].ne[0] : widest;
    }
    p.widest = widest;
    p.rowf = malloc(widest * sizeof(float) * (size_t)mvm_pool_size(pool));
    p.block = malloc(BLOCK_BYTES > widest * 4 ? BLOCK_BYTES : widest * 4);
    if (!p.rowf || !p.block) {
        st = mvm_fail(MVM_ERR_NOMEM, "out of memory for a row of %llu elements",
                      (unsigned long long)widest);
        goto out;
    }
    if ((st = mvm_gguf_writer_new(&w)) || (st = set_keys(s, w)) ||
        (st = mvm_spec_vocab(s, &vocab)))
        goto out;
    have_vocab = 1;
    if ((st = mvm_vocab_write(&vocab, w)))
        goto out;
    const char *chat = mvm_chat_template_for(s);
    if (chat && (st = mvm_gguf_writer_set_str(w, "tokenizer.chat_template", chat)))
        goto out;
    mvm_gguf_writer_set_data_fn(w, write_tensor, &p);
    for (uint32_t i = 0; i < p.n && st == MVM_OK; i++) {
        const struct tensor *t = &p.t[i];
        st = mvm_gguf_writer_add_tensor(w, t->name, mvm_wtype_to_ggml(t->type), t->n_dims, t->ne,
                                        NULL, tensor_bytes(t));
    }
    if (st == MVM_OK)
        st = mvm_gguf_writer_write(w, path);
    if (st == MVM_OK && progress)
        progress(progress_ctx, p.total, p.total);
out:
    if (have_vocab)
        mvm_vocab_free(&vocab);
    mvm_gguf_writer_free(w);
    free(p.rowf);
    free(p.block);
    free(p.t);
    return st;
}
