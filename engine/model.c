/*
 * Loading a GGUF MoE model: architecture and hyper-parameters from the metadata, every
 * tensor checked for presence, shape and type before anything is computed, the experts
 * converted to the channel-major layout (kernels.h) into the homes of a moevm space.
 * Non-expert weights stay in the read-only file mapping.
 */
#include "engine/model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward.h"
#include "engine/pool.h"
#include "vmm/error.h"

/* The ggml type of each kernel type: the one table of the mapping, read both ways. */
static const enum mvm_ggml_type ggml_of[MVM_W_COUNT] = {
    [MVM_W_F32] = MVM_GGML_F32,       [MVM_W_F16] = MVM_GGML_F16,   [MVM_W_BF16] = MVM_GGML_BF16,
    [MVM_W_Q8_0] = MVM_GGML_Q8_0,     [MVM_W_Q4_0] = MVM_GGML_Q4_0, [MVM_W_Q4_1] = MVM_GGML_Q4_1,
    [MVM_W_Q5_0] = MVM_GGML_Q5_0,     [MVM_W_Q5_1] = MVM_GGML_Q5_1,
    [MVM_W_IQ4_NL] = MVM_GGML_IQ4_NL, [MVM_W_Q2_K] = MVM_GGML_Q2_K,
    [MVM_W_Q3_K] = MVM_GGML_Q3_K,     [MVM_W_Q4_K] = MVM_GGML_Q4_K,
    [MVM_W_Q5_K] = MVM_GGML_Q5_K,     [MVM_W_Q6_K] = MVM_GGML_Q6_K};

int mvm_wtype_from_ggml(enum mvm_ggml_type t)
{
    for (int w = 0; w < MVM_W_COUNT; w++)
        if (ggml_of[w] == t)
            return w;
    return -1;
}

enum mvm_ggml_type mvm_wtype_to_ggml(enum mvm_wtype t)
{
    return ggml_of[t];
}

/* Appends the names of the types in `set` (a bit per type) to buf, `sep`-separated. */
static void append_types(char *buf, size_t size, unsigned set, const char *sep)
{
    for (int t = 0, k = 0; t < MVM_W_COUNT; t++) {
        size_t n = strlen(buf);
        if (set & (1u << t))
            snprintf(buf + n, size - n, "%s%s", k++ ? sep : "",
                     mvm_k_wtype_name((enum mvm_wtype)t));
    }
}

const char *mvm_model_expert_types(const mvm_model *m, char *buf, size_t size)
{
    unsigned gate_up = 0, down = 0;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        gate_up |= 1u << m->layers[il].expert_fmt.gate_up;
        down |= 1u << m->layers[il].expert_fmt.down;
    }
    buf[0] = 0;
    append_types(buf, size, gate_up, "/");
    if (down != gate_up || (down & (down - 1))) {
        size_t n = strlen(buf);
        snprintf(buf + n, size - n, ", down ");
        append_types(buf, size, down, "/");
    }
    return buf;
}

/* Loading context: the file name prefixes every message. */
struct loader {
    const char *path;
    mvm_gguf *g;
    const mvm_arch *arch;
    mvm_status st;
};

static mvm_status fail(struct loader *ld, mvm_status s, const char *fmt, ...) MVM_PRINTF(3, 4);
static mvm_status fail(struct loader *ld, mvm_status s, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ld->st = mvm_fail(s, "%s: %s", ld->path, msg);
}

/* "{arch}.{suffix}" as a u32 (u32 != NULL) or an f32; absent keys leave the value alone
 * unless required. */
static mvm_status arch_key(struct loader *ld, const char *suffix, uint32_t *u32, float *f32,
                           int required)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch->name, suffix);
    if (mvm_gguf_find_key(ld->g, key) < 0)
        return required ? fail(ld, MVM_ERR_INVALID, "missing key '%s'", key) : MVM_OK;
    if ((u32 ? mvm_gguf_get_u32(ld->g, key, u32) : mvm_gguf_get_f32(ld->g, key, f32)) != MVM_OK)
        return fail(ld, MVM_ERR_INVALID, "%s", mvm_last_error());
    return MVM_OK;
}

static mvm_status arch_u32(struct loader *ld, const char *suffix, uint32_t *v, int required)
{
    return arch_key(ld, suffix, v, NULL, required);
}

static mvm_status arch_f32(struct loader *ld, const char *suffix, float *v, int required)
{
    return arch_key(ld, suffix, NULL, v, required);
}

static const mvm_gguf_tensor *find(struct loader *ld, const char *name, int required)
{
    const mvm_gguf_tensor *t = mvm_gguf_find_tensor(ld->g, name);
    if (!t && required)
        fail(ld, MVM_ERR_INVALID, "missing tensor '%s'", name);
    return t;
}

static mvm_status check_shape(struct loader *ld, const mvm_gguf_tensor *t, uint32_t n_dims,
                              uint64_t ne0, uint64_t ne1, uint64_t ne2)
{
    uint64_t want[3] = {ne0, ne1, ne2};
    int ok = t->n_dims == n_dims;
    for (uint32_t i = 0; i < 3; i++)
        ok = ok && t->ne[i] == (i < n_dims ? want[i] : 1);
    if (ok)
        return MVM_OK;
    char have[96], exp[96];
    int h = snprintf(have, sizeof have, "[%llu", (unsigned long long)t->ne[0]);
    for (uint32_t i = 1; i < t->n_dims; i++)
        h += snprintf(have + h, sizeof have - (size_t)h, ", %llu", (unsigned long long)t->ne[i]);
    snprintf(have + h, sizeof have - (size_t)h, "]");
    if (n_dims == 1)
        snprintf(exp, sizeof exp, "[%llu]", (unsigned long long)ne0);
    else if (n_dims == 2)
        snprintf(exp, sizeof exp, "[%llu, %llu]", (unsigned long long)ne0, (unsigned long long)ne1);
    else
        snprintf(exp, sizeof exp, "[%llu, %llu, %llu]", (unsigned long long)ne0,
                 (unsigned long long)ne1, (unsigned long long)ne2);
    return fail(ld, MVM_ERR_INVALID, "tensor '%s' has shape %s, expected %s", t->name, have, exp);
}

/* The tensor's type as the kernels (both backends) know it. */
static mvm_status check_type(struct loader *ld, const mvm_gguf_tensor *t, int *wtype)
{
    *wtype = mvm_wtype_from_ggml(t->type);
    if (*wtype < 0) {
        char supported[160] = "";
        append_types(supported, sizeof supported, (1u << MVM_W_COUNT) - 1, ", ");
        return fail(ld, MVM_ERR_UNSUPPORTED, "tensor '%s' has type %s, which moevm cannot "
                    "compute yet (supported: %s)", t->name, mvm_ggml_type_name(t->type),
                    supported);
    }
    if (t->ne[0] % mvm_k_block_elems((enum mvm_wtype)*wtype))
        return fail(ld, MVM_ERR_INVALID, "tensor '%s': rows of %llu elements are not whole blocks",
                    t->name, (unsigned long long)t->ne[0]);
    return MVM_OK;
}

/* A vector of n floats; norms and biases must be F32 (as llama.cpp requires too). */
static const float *vec(struct loader *ld, const char *name, uint32_t n, int required)
{
    const mvm_gguf_tensor *t = find(ld, name, required);
    if (!t || check_shape(ld, t, 1, n, 1, 1) != MVM_OK)
        return NULL;
    if (t->type != MVM_GGML_F32) {
        fail(ld, MVM_ERR_UNSUPPORTED, "tensor '%s' has type %s; 1-D tensors must be f32",
             name, mvm_ggml_type_name(t->type));
        return NULL;
    }
    return t->data;
}

/* A matrix of `rows` rows of `cols` elements (ggml ne = [cols, rows]). */
static mvm_status mat(struct loader *ld, const char *name, uint32_t cols, uint32_t rows,
                      mvm_weight *w)
{
    const mvm_gguf_tensor *t = find(ld, name, 1);
    int wt;
    if (!t || check_shape(ld, t, 2, cols, rows, 1) || check_type(ld, t, &wt))
        return ld->st;
    *w = (mvm_weight){.type = (enum mvm_wtype)wt, .data = t->data, .rows = rows, .cols = cols,
                      .row_bytes = mvm_k_row_bytes((enum mvm_wtype)wt, cols)};
    return MVM_OK;
}

/*
 * The rotary embedding: freq_base, rope.dimension_count and the context extension as
 * llama.cpp reads them. rope.scaling.type is none, linear or yarn (linear when only a factor
 * is given, as llama.cpp defaults; longrope and others are refused); the factor comes from
 * rope.scaling.factor or the older rope.scale_linear. YaRN's original context defaults to
 * context_length, its betas to 32 and 1, its ext_factor to 1. Magnitude: attn_factor (1),
 * times yarn_attn_factor where a file has it (our reading: both scale the rotated dims, as
 * each does in llama.cpp, which never meets both in one file), times 1 + 0.1 ln(factor)
 * under YaRN, as ggml's rope_yarn and Hugging Face's get_mscale apply it.
 */
static mvm_status read_rope(struct loader *ld, const mvm_arch *arch, mvm_hparams *hp)
{
    mvm_rope *r = &hp->rope;
    *r = (mvm_rope){.n_rot = hp->head_dim, .neox = (uint32_t)arch->rope_neox, .base = 10000.0f,
                    .freq_scale = 1.0f, .mscale = 1.0f};
    float factor = 0, attn = 1, yarn_attn = 1, beta_fast = 32, beta_slow = 1, ext = 1;
    uint32_t orig_ctx = hp->n_ctx_train;
    if (arch_f32(ld, "rope.freq_base", &r->base, 0) ||
        arch_u32(ld, "rope.dimension_count", &r->n_rot, 0) ||
        arch_f32(ld, "rope.scale_linear", &factor, 0) ||
        arch_f32(ld, "rope.scaling.factor", &factor, 0) ||
        arch_f32(ld, "rope.scaling.attn_factor", &attn, 0) ||
        arch_u32(ld, "rope.scaling.original_context_length", &orig_ctx, 0) ||
        arch_f32(ld, "rope.scaling.yarn_ext_factor", &ext, 0) ||
        arch_f32(ld, "rope.scaling.yarn_attn_factor", &yarn_attn, 0) ||
        arch_f32(ld, "rope.scaling.yarn_beta_fast", &beta_fast, 0) ||
        arch_f32(ld, "rope.scaling.yarn_beta_slow", &beta_slow, 0))
        return ld->st;
    if (r->n_rot == 0 || r->n_rot % 2 || r->n_rot > hp->head_dim)
        return fail(ld, MVM_ERR_INVALID, "rope.dimension_count %u is not an even number up to "
                    "the head size %u", r->n_rot, hp->head_dim);
    if (!(r->base > 1) || !(r->base < 1e30f))
        return fail(ld, MVM_ERR_INVALID, "rope.freq_base %g out of range", r->base);
    char key[128], type[16] = "linear";
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch->name);
    mvm_gguf_str str;
    if (mvm_gguf_find_key(ld->g, key) >= 0 &&
        (mvm_gguf_get_str(ld->g, key, &str) != MVM_OK ||
         mvm_gguf_str_copy(str, type, sizeof type) != MVM_OK))
        return fail(ld, MVM_ERR_INVALID, "%s: not a short string", key);
    int yarn = strcmp(type, "yarn") == 0;
    if (strcmp(type, "none") != 0 && strcmp(type, "linear") != 0 && !yarn)
        return fail(ld, MVM_ERR_UNSUPPORTED, "%s '%s': moevm computes none, linear and yarn",
                    key, type);
    if (factor == 0 || strcmp(type, "none") == 0)
        return MVM_OK; /* llama.cpp: no factor (or 0) is no scaling; YaRN's ramp would blend
                          equal angles and its magnitude be 1 */
    if (!(factor > 0 && factor < 1e6f) || (yarn && factor < 1))
        return fail(ld, MVM_ERR_INVALID, "rope.scaling.factor %g out of range (%s)", factor,
                    yarn ? "YaRN needs 1 or more" : "must be positive");
    if (!(attn > 0 && attn < 1e3f) || !(yarn_attn > 0 && yarn_attn < 1e3f))
        return fail(ld, MVM_ERR_INVALID, "rope.scaling attention factor %g / %g out of range",
                    attn, yarn_attn);
    if (!yarn) {
        r->freq_scale = 1.0f / factor;
        r->mscale = attn;
        return MVM_OK;
    }
    if (orig_ctx < 2 || !(beta_fast > 0 && beta_fast < 1e6f) ||
        !(beta_slow > 0 && beta_slow < 1e6f) || !(ext >= 0 && ext <= 1))
        return fail(ld, MVM_ERR_INVALID, "YaRN parameters out of range: original_context_length "
                    "%u, yarn_beta_fast %g, yarn_beta_slow %g, yarn_ext_factor %g", orig_ctx,
                    beta_fast, beta_slow, ext);
    mvm_k_rope_yarn(r, factor, orig_ctx, beta_fast, beta_slow, ext, attn * yarn_attn);
    return MVM_OK;
}

static mvm_status read_hparams(struct loader *ld, mvm_hparams *hp)
{
    *hp = (mvm_hparams){0};
    uint32_t key_len = 0, val_len = 0;
    if (arch_u32(ld, "embedding_length", &hp->n_embd, 1) ||
        arch_u32(ld, "block_count", &hp->n_layer, 1) ||
        arch_u32(ld, "context_length", &hp->n_ctx_train, 1) ||
        arch_u32(ld, "attention.head_count", &hp->n_head, 1) ||
        arch_u32(ld, "expert_count", &hp->n_expert, 0) ||
        arch_u32(ld, "expert_used_count", &hp->n_expert_used, 0) ||
        arch_u32(ld, "attention.key_length", &key_len, 0) ||
        arch_u32(ld, "attention.value_length", &val_len, 0) ||
        arch_f32(ld, "attention.layer_norm_rms_epsilon", &hp->rms_eps, 1))
        return ld->st;
    hp->n_head_kv = hp->n_head;
    if (arch_u32(ld, "attention.head_count_kv", &hp->n_head_kv, 0))
        return ld->st;
    if (hp->n_expert == 0)
        return fail(ld, MVM_ERR_UNSUPPORTED, "'%s' model without experts (%s.expert_count is "
                    "missing or 0): moevm runs mixture-of-experts models", ld->arch->name,
                    ld->arch->name);
    if (hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert)
        return fail(ld, MVM_ERR_INVALID, "%s.expert_used_count %u is not in 1..%u",
                    ld->arch->name, hp->n_expert_used, hp->n_expert);
    if (hp->n_embd == 0 || hp->n_layer == 0 || hp->n_head == 0 || hp->n_head_kv == 0 ||
        hp->n_head % hp->n_head_kv)
        return fail(ld, MVM_ERR_INVALID, "bad shape: embedding_length %u, block_count %u, "
                    "head_count %u, head_count_kv %u", hp->n_embd, hp->n_layer, hp->n_head,
                    hp->n_head_kv);
    hp->head_dim = key_len ? key_len : hp->n_embd / hp->n_head;
    if (!key_len && hp->n_embd % hp->n_head)
        return fail(ld, MVM_ERR_INVALID, "embedding_length %u is not a multiple of head_count "
                    "%u and attention.key_length is not set", hp->n_embd, hp->n_head);
    if (val_len && val_len != hp->head_dim)
        return fail(ld, MVM_ERR_UNSUPPORTED, "attention.value_length %u differs from key_length "
                    "%u", val_len, hp->head_dim);
    if (!(hp->rms_eps > 0 && hp->rms_eps < 1))
        return fail(ld, MVM_ERR_INVALID, "layer_norm_rms_epsilon %g out of range", hp->rms_eps);
    return read_rope(ld, ld->arch, hp);
}

/* Expert shapes come from the tensors; the metadata, where present, must agree. */
static mvm_status read_expert_shape(struct loader *ld, mvm_model *m)
{
    mvm_hparams *hp = &m->hp;
    const mvm_gguf_tensor *t = find(ld, "blk.0.ffn_gate_exps.weight", 1);
    if (!t)
        return ld->st;
    hp->n_ff_exp = (uint32_t)t->ne[1];
    uint32_t key_ff = 0;
    if (arch_u32(ld, ld->arch->expert_ff_key, &key_ff, 0))
        return ld->st;
    if (key_ff && key_ff != hp->n_ff_exp && ld->arch->expert_ff_key[0] == 'e')
        return fail(ld, MVM_ERR_INVALID, "%s.%s is %u but the experts have %u channels",
                    ld->arch->name, ld->arch->expert_ff_key, key_ff, hp->n_ff_exp);
    if (hp->n_ff_exp == 0 || hp->n_ff_exp % MVM_QBLOCK)
        return fail(ld, MVM_ERR_UNSUPPORTED, "experts with %u channels: moevm needs a multiple "
                    "of %d (its channel-major layout groups channels by %d)", hp->n_ff_exp,
                    MVM_QBLOCK, MVM_QBLOCK);
    if (ld->arch->shared_expert) {
        const mvm_gguf_tensor *s = find(ld, "blk.0.ffn_gate_shexp.weight", 1);
        if (!s)
            return ld->st;
        hp->n_ff_shexp = (uint32_t)s->ne[1];
    }
    return MVM_OK;
}

static mvm_status bind_layer(struct loader *ld, mvm_model *m, uint32_t il)
{
    const mvm_hparams *hp = &m->hp;
    mvm_layer *L = &m->layers[il];
    uint32_t q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%u.%s", il, s), n)
    if (!(L->attn_norm = vec(ld, NAME("attn_norm.weight"), hp->n_embd, 1)) ||
        !(L->ffn_norm = vec(ld, NAME("ffn_norm.weight"), hp->n_embd, 1)) ||
        mat(ld, NAME("attn_q.weight"), hp->n_embd, q_dim, &L->wq) ||
        mat(ld, NAME("attn_k.weight"), hp->n_embd, kv_dim, &L->wk) ||
        mat(ld, NAME("attn_v.weight"), hp->n_embd, kv_dim, &L->wv) ||
        mat(ld, NAME("attn_output.weight"), q_dim, hp->n_embd, &L->wo) ||
        mat(ld, NAME("ffn_gate_inp.weight"), hp->n_embd, hp->n_expert, &L->router))
        return ld->st;
    if (ld->arch->qkv_bias &&
        (!(L->bq = vec(ld, NAME("attn_q.bias"), q_dim, 1)) ||
         !(L->bk = vec(ld, NAME("attn_k.bias"), kv_dim, 1)) ||
         !(L->bv = vec(ld, NAME("attn_v.bias"), kv_dim, 1))))
        return ld->st;
    uint32_t qn = ld->arch->qk_norm == MVM_QK_NORM_HEAD ? hp->head_dim : q_dim;
    uint32_t kn = ld->arch->qk_norm == MVM_QK_NORM_HEAD ? hp->head_dim : kv_dim;
    if (ld->arch->qk_norm != MVM_QK_NORM_NONE &&
        (!(L->q_norm = vec(ld, NAME("attn_q_norm.weight"), qn, 1)) ||
         !(L->k_norm = vec(ld, NAME("attn_k_norm.weight"), kn, 1))))
        return ld->st;
    if (ld->arch->shared_expert &&
        (!(L->shexp_gate = vec(ld, NAME("ffn_gate_inp_shexp.weight"), hp->n_embd, 1)) ||
         mat(ld, NAME("ffn_gate_shexp.weight"), hp->n_embd, hp->n_ff_shexp, &L->shexp_w1) ||
         mat(ld, NAME("ffn_up_shexp.weight"), hp->n_embd, hp->n_ff_shexp, &L->shexp_w3) ||
         mat(ld, NAME("ffn_down_shexp.weight"), hp->n_ff_shexp, hp->n_embd, &L->shexp_w2)))
        return ld->st;
    /* The three expert tensors, exact shapes; gate and up of one type (the layout packs
     * their rows together), down of its own. */
    static const char *const exps[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                        "ffn_down_exps.weight"};
    int wt[3];
    for (int i = 0; i < 3; i++) {
        const mvm_gguf_tensor *t = find(ld, NAME(exps[i]), 1);
        if (!t || (i < 2 ? check_shape(ld, t, 3, hp->n_embd, hp->n_ff_exp, hp->n_expert)
                         : check_shape(ld, t, 3, hp->n_ff_exp, hp->n_embd, hp->n_expert)) ||
            check_type(ld, t, &wt[i]))
            return ld->st;
    }
    if (wt[0] != wt[1])
        return fail(ld, MVM_ERR_UNSUPPORTED, "blk.%u.ffn_gate_exps is %s but ffn_up_exps is %s: "
                    "moevm packs their rows together and needs one type for both", il,
                    mvm_k_wtype_name((enum mvm_wtype)wt[0]),
                    mvm_k_wtype_name((enum mvm_wtype)wt[1]));
    L->expert_fmt = (mvm_k_expert_fmt){(enum mvm_wtype)wt[0], (enum mvm_wtype)wt[2]};
    L->expert_groups = hp->n_ff_exp / (uint32_t)mvm_k_expert_group_channels(L->expert_fmt);
#undef NAME
    return MVM_OK;
}

static mvm_status bind_tensors(struct loader *ld, mvm_model *m)
{
    mvm_hparams *hp = &m->hp;
    const mvm_gguf_tensor *emb = find(ld, "token_embd.weight", 1);
    if (!emb)
        return ld->st;
    if (emb->n_dims != 2 || emb->ne[0] != hp->n_embd || emb->ne[1] == 0 || emb->ne[1] > INT32_MAX)
        return check_shape(ld, emb, 2, hp->n_embd, emb->ne[1] ? emb->ne[1] : 1, 1) ? ld->st
               : fail(ld, MVM_ERR_INVALID, "token_embd.weight has %llu rows",
                      (unsigned long long)emb->ne[1]);
    hp->n_vocab = (uint32_t)emb->ne[1];
    if (mat(ld, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd) ||
        !(m->output_norm = vec(ld, "output_norm.weight", hp->n_embd, 1)))
        return ld->st;
    /* Tied embeddings (no output.weight) as llama.cpp falls back to. */
    if (find(ld, "output.weight", 0)) {
        if (mat(ld, "output.weight", hp->n_embd, hp->n_vocab, &m->output))
            return ld->st;
    } else {
        m->output = m->tok_embd;
    }
    if (read_expert_shape(ld, m))
        return ld->st;
    if (!(m->layers = calloc(hp->n_layer, sizeof *m->layers)))
        return fail(ld, MVM_ERR_NOMEM, "out of memory for %u layers", hp->n_layer);
    for (uint32_t il = 0; il < hp->n_layer; il++)
        if (bind_layer(ld, m, il))
            return ld->st;
    return MVM_OK;
}

struct pack_job {
    mvm_model *m;
    uint32_t layer;
    const uint8_t *held;             /* the layer's row of the mask, or NULL */
    const uint8_t *gate, *up, *down; /* the layer's expert tensors */
    size_t gate_stride, down_stride; /* bytes per expert */
};

static void pack_experts(void *ctx, int t, int nth)
{
    struct pack_job *j = ctx;
    const mvm_hparams *hp = &j->m->hp;
    size_t e0, e1;
    mvm_pool_split(hp->n_expert, t, nth, &e0, &e1);
    const mvm_k_expert_fmt f = j->m->layers[j->layer].expert_fmt;
    for (size_t e = e0; e < e1; e++)
        if (!j->held || j->held[e])
            mvm_k_expert_pack(f, j->gate + e * j->gate_stride, j->up + e * j->gate_stride,
                              j->down + e * j->down_stride, hp->n_embd, hp->n_ff_exp,
                              mvm_expert_home(j->m->space, j->layer, (uint32_t)e));
}

static mvm_status load_experts(struct loader *ld, mvm_model *m, mvm_space_desc *desc,
                               mvm_pool *pool, const uint8_t *held, mvm_progress_fn progress,
                               void *pctx)
{
    const mvm_hparams *hp = &m->hp;
    desc->n_layers = hp->n_layer;
    desc->n_experts = hp->n_expert;
    desc->expert_bytes = m->expert_bytes;
    /* auto would pick cuda wherever a driver works; the device forward pass has yet to
     * run on a real GPU (docs/engine.md), so a GPU is used only when asked for. */
    if (desc->backend == MVM_BACKEND_AUTO)
        desc->backend = MVM_BACKEND_HOST;
    if (desc->backend == MVM_BACKEND_CUDA && !mvm_ctx_device_available())
        return fail(ld, MVM_ERR_UNSUPPORTED, "expert space: MOEVM_BACKEND=cuda, but this moevm "
                    "was built without nvcc, so it has no device kernels to compute the experts "
                    "(rebuild with nvcc on PATH, or use MOEVM_BACKEND=host)");
    m->device = desc->device;
    mvm_status st = mvm_space_create(desc, &m->space);
    if (st != MVM_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", mvm_last_error());
        return fail(ld, st, "expert space: %s", why);
    }
    uint64_t total = m->expert_bytes * hp->n_expert * hp->n_layer;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        char n[96];
        struct pack_job j = {.m = m, .layer = il,
                             .held = held ? held + (size_t)il * hp->n_expert : NULL};
        snprintf(n, sizeof n, "blk.%u.ffn_gate_exps.weight", il);
        j.gate = find(ld, n, 1)->data;
        snprintf(n, sizeof n, "blk.%u.ffn_up_exps.weight", il);
        j.up = find(ld, n, 1)->data;
        snprintf(n, sizeof n, "blk.%u.ffn_down_exps.weight", il);
        j.down = find(ld, n, 1)->data;
        const mvm_k_expert_fmt f = m->layers[il].expert_fmt;
        j.gate_stride = mvm_k_row_bytes(f.gate_up, hp->n_embd) * hp->n_ff_exp;
        j.down_stride = mvm_k_row_bytes(f.down, hp->n_ff_exp) * hp->n_embd;
        mvm_pool_run(pool, pack_experts, &j);
        if (progress)
            progress(pctx, m->expert_bytes * hp->n_expert * (il + 1), total);
    }
    return MVM_OK;
}

/* Everything but the experts' conversion: the architecture, the hyper-parameters, every
 * tensor checked and bound, the name, and expert_bytes. On failure *out is NULL. */
static mvm_status open_model(const char *path, struct loader *ld, mvm_model **out)
{
    *out = NULL;
    mvm_model *m = calloc(1, sizeof *m);
    if (!m)
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", path);
    *ld = (struct loader){.path = path};
    mvm_status st = mvm_gguf_open(path, &m->gguf);
    if (st != MVM_OK) {
        free(m);
        return st;
    }
    ld->g = m->gguf;
    mvm_gguf_str s;
    char arch[64];
    if (mvm_gguf_get_str(ld->g, "general.architecture", &s) != MVM_OK) {
        st = fail(ld, MVM_ERR_INVALID, "%s", mvm_last_error());
    } else if (mvm_gguf_str_copy(s, arch, sizeof arch) != MVM_OK ||
               !(ld->arch = m->arch = mvm_arch_find(arch))) {
        st = fail(ld, MVM_ERR_UNSUPPORTED, "architecture '%.*s' is not supported (supported: %s)",
                  (int)(s.len < 60 ? s.len : 60), s.ptr, mvm_arch_names());
    } else if (!(st = read_hparams(ld, &m->hp)) && !(st = bind_tensors(ld, m))) {
        const char *base = strrchr(path, '/');
        snprintf(m->name, sizeof m->name, "%s", base ? base + 1 : path);
        char name[sizeof m->name];
        if (mvm_gguf_get_str(ld->g, "general.name", &s) == MVM_OK &&
            mvm_gguf_str_copy(s, name, sizeof name) == MVM_OK && name[0])
            memcpy(m->name, name, sizeof name);
        for (uint32_t il = 0; il < m->hp.n_layer; il++) {
            const uint64_t b = mvm_layer_expert_bytes(&m->layers[il], m->hp.n_embd);
            m->expert_bytes = b > m->expert_bytes ? b : m->expert_bytes;
        }
    }
    if (st != MVM_OK) {
        mvm_model_free(m);
        return st;
    }
    *out = m;
    return MVM_OK;
}

mvm_status mvm_model_probe(const char *path, mvm_model **out)
{
    struct loader ld;
    return open_model(path, &ld, out);
}

mvm_status mvm_model_load(const char *path, mvm_space_desc *desc, mvm_pool *pool,
                          mvm_progress_fn progress, void *progress_ctx, mvm_model **out)
{
    return mvm_model_load_held(path, desc, pool, NULL, progress, progress_ctx, out);
}

mvm_status mvm_model_load_held(const char *path, mvm_space_desc *desc, mvm_pool *pool,
                               const uint8_t *held, mvm_progress_fn progress,
                               void *progress_ctx, mvm_model **out)
{
    struct loader ld;
    mvm_model *m;
    mvm_status st = open_model(path, &ld, &m);
    if (st == MVM_OK &&
        (st = load_experts(&ld, m, desc, pool, held, progress, progress_ctx)) != MVM_OK)
        mvm_model_free(m);
    *out = st == MVM_OK ? m : NULL;
    return st;
}

void mvm_model_free(mvm_model *m)
{
    if (!m)
        return;
    if (m->space)
        mvm_space_destroy(m->space);
    free(m->layers);
    mvm_gguf_close(m->gguf);
    free(m);
}

mvm_status mvm_model_routers_f32(const mvm_model *m, float **table, const float ***rows)
{
    size_t L = m->hp.n_layer, E = m->hp.n_expert, D = m->hp.n_embd;
    *table = malloc(L * E * D * sizeof **table);
    *rows = calloc(L, sizeof **rows);
    if (!*table || !*rows) {
        free(*table);
        free((void *)*rows);
        *table = NULL;
        *rows = NULL;
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for F32 copies of the routers");
    }
    for (size_t l = 0; l < L; l++) {
        const mvm_weight *w = &m->layers[l].router;
        float *dst = *table + l * E * D;
        for (size_t e = 0; e < E; e++)
            mvm_k_dequantize(w->type, (const uint8_t *)w->data + e * w->row_bytes, dst + e * D,
                             D);
        (*rows)[l] = dst;
    }
    return MVM_OK;
}
