/*
 * Loading a GGUF MoE model: architecture and hyper-parameters from the metadata, every
 * tensor checked for presence, shape and type before anything is computed, the experts
 * converted to the channel-major layout (kernels.h) into the homes of a moevm space.
 * Non-expert weights stay in the read-only file mapping.
 */
#include "engine/model/model.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compute/pool.h"
#include "engine/model/model_load.h"
#include "vmm/error.h"

/* The ggml type of each kernel type: the one table of the mapping, read both ways. */
static const enum mvm_ggml_type ggml_of[MVM_W_COUNT] = {
    [MVM_W_F32] = MVM_GGML_F32,       [MVM_W_F16] = MVM_GGML_F16,   [MVM_W_BF16] = MVM_GGML_BF16,
    [MVM_W_Q8_0] = MVM_GGML_Q8_0,     [MVM_W_Q4_0] = MVM_GGML_Q4_0, [MVM_W_Q4_1] = MVM_GGML_Q4_1,
    [MVM_W_Q5_0] = MVM_GGML_Q5_0,     [MVM_W_Q5_1] = MVM_GGML_Q5_1,
    [MVM_W_IQ4_NL] = MVM_GGML_IQ4_NL, [MVM_W_Q2_K] = MVM_GGML_Q2_K,
    [MVM_W_Q3_K] = MVM_GGML_Q3_K,     [MVM_W_Q4_K] = MVM_GGML_Q4_K,
    [MVM_W_Q5_K] = MVM_GGML_Q5_K,     [MVM_W_Q6_K] = MVM_GGML_Q6_K,
    [MVM_W_IQ4_XS] = MVM_GGML_IQ4_XS, [MVM_W_MXFP4] = MVM_GGML_MXFP4,
    [MVM_W_IQ2_XXS] = MVM_GGML_IQ2_XXS, [MVM_W_IQ2_XS] = MVM_GGML_IQ2_XS,
    [MVM_W_IQ2_S] = MVM_GGML_IQ2_S,   [MVM_W_IQ3_XXS] = MVM_GGML_IQ3_XXS,
    [MVM_W_IQ3_S] = MVM_GGML_IQ3_S,   [MVM_W_IQ1_S] = MVM_GGML_IQ1_S,
    [MVM_W_IQ1_M] = MVM_GGML_IQ1_M};

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

const char *mvm_model_expert_types(const mvm_model *m, char *buf, size_t size)
{
    unsigned gate_up = 0, down = 0;
    uint32_t tiled = 0;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        gate_up |= 1u << m->layers[il].expert_fmt.gate_up;
        down |= 1u << m->layers[il].expert_fmt.down;
        tiled += m->layers[il].expert_fmt.tiles != 0;
    }
    buf[0] = 0;
    mvm_ld_append_types(buf, size, gate_up, "/");
    if (down != gate_up || (down & (down - 1))) {
        size_t n = strlen(buf);
        snprintf(buf + n, size - n, ", down ");
        mvm_ld_append_types(buf, size, down, "/");
    }
    size_t n = strlen(buf);
    if (tiled == m->hp.n_layer)
        snprintf(buf + n, size - n, ", tiled");
    else if (tiled)
        snprintf(buf + n, size - n, ", tiled in %u of %u layers", tiled, m->hp.n_layer);
    return buf;
}

/* Expert shapes come from the tensors; the metadata, where present, must agree. */
static mvm_status read_expert_shape(struct loader *ld, mvm_model *m)
{
    mvm_hparams *hp = &m->hp;
    char n[96];
    snprintf(n, sizeof n, "blk.%u.ffn_gate_exps.weight", hp->n_dense);
    const mvm_gguf_tensor *t = mvm_ld_find(ld, n, 1);
    if (!t)
        return ld->st;
    hp->n_ff_exp = (uint32_t)t->ne[1];
    uint32_t key_ff = 0;
    if (mvm_ld_u32(ld, ld->arch->expert_ff_key, &key_ff, 0))
        return ld->st;
    if (key_ff && key_ff != hp->n_ff_exp && ld->arch->expert_ff_key[0] == 'e')
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "%s.%s is %u but the experts have %u channels",
                           ld->arch->name, ld->arch->expert_ff_key, key_ff, hp->n_ff_exp);
    if (hp->n_ff_exp == 0 || hp->n_ff_exp % MVM_QBLOCK)
        return mvm_ld_fail(ld, MVM_ERR_UNSUPPORTED, "experts with %u channels: moevm needs a "
                           "multiple of %d (its channel-major layout groups channels by %d)",
                           hp->n_ff_exp, MVM_QBLOCK, MVM_QBLOCK);
    if (ld->arch->shared_expert == 1) {
        const mvm_gguf_tensor *s = mvm_ld_find(ld, "blk.0.ffn_gate_shexp.weight", 1);
        if (!s)
            return ld->st;
        hp->n_ff_shexp = (uint32_t)s->ne[1];
    }
    if (ld->arch->shared_expert == 2) /* expert_shared_count experts side by side */
        hp->n_ff_shexp *= hp->n_ff_exp;
    return MVM_OK;
}

static mvm_status bind_layer(struct loader *ld, mvm_model *m, uint32_t il)
{
    const mvm_hparams *hp = &m->hp;
    mvm_layer *L = &m->layers[il];
    const uint32_t blk = hp->n_dense + il;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%u.%s", blk, s), n)
    if (mvm_ld_bind_block(ld, hp, blk, L) ||
        mvm_ld_mat(ld, NAME("ffn_gate_inp.weight"), hp->n_embd, hp->n_expert, &L->router))
        return ld->st;
    if (ld->arch->routing && mvm_ld_find(ld, NAME("exp_probs_b.bias"), 0) &&
        !(L->expert_bias = mvm_ld_vec(ld, NAME("exp_probs_b.bias"), hp->n_expert, 1)))
        return ld->st;
    /* gpt-oss's biases; the experts' gate and up ones are checked here, packed later */
    if (ld->arch->oai &&
        (!(L->router_bias = mvm_ld_vec(ld, NAME("ffn_gate_inp.bias"), hp->n_expert, 1)) ||
         !mvm_ld_table(ld, NAME("ffn_gate_exps.bias"), hp->n_ff_exp, hp->n_expert, 1) ||
         !mvm_ld_table(ld, NAME("ffn_up_exps.bias"), hp->n_ff_exp, hp->n_expert, 1) ||
         !(L->down_bias = mvm_ld_table(ld, NAME("ffn_down_exps.bias"), hp->n_embd, hp->n_expert,
                                       1))))
        return ld->st;
    if (ld->arch->shared_expert == 1 &&
        !(L->shexp_gate = mvm_ld_vec(ld, NAME("ffn_gate_inp_shexp.weight"), hp->n_embd, 1)))
        return ld->st;
    if (hp->n_ff_shexp &&
        (mvm_ld_mat(ld, NAME("ffn_gate_shexp.weight"), hp->n_embd, hp->n_ff_shexp, &L->shexp_w1) ||
         mvm_ld_mat(ld, NAME("ffn_up_shexp.weight"), hp->n_embd, hp->n_ff_shexp, &L->shexp_w3) ||
         mvm_ld_mat(ld, NAME("ffn_down_shexp.weight"), hp->n_ff_shexp, hp->n_embd, &L->shexp_w2)))
        return ld->st;
    /* The three expert tensors, exact shapes; gate and up of one type (the layout packs
     * their rows together), down of its own. */
    static const char *const exps[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                        "ffn_down_exps.weight"};
    int wt[3];
    for (int i = 0; i < 3; i++) {
        const mvm_gguf_tensor *t = mvm_ld_find(ld, NAME(exps[i]), 1);
        if (!t || (i < 2 ? mvm_ld_shape(ld, t, 3, hp->n_embd, hp->n_ff_exp, hp->n_expert)
                         : mvm_ld_shape(ld, t, 3, hp->n_ff_exp, hp->n_embd, hp->n_expert)) ||
            mvm_ld_type(ld, t, &wt[i]))
            return ld->st;
    }
    if (wt[0] != wt[1])
        return mvm_ld_fail(ld, MVM_ERR_UNSUPPORTED, "blk.%u.ffn_gate_exps is %s but ffn_up_exps "
                           "is %s: moevm packs their rows together and needs one type for both",
                           il, mvm_k_wtype_name((enum mvm_wtype)wt[0]),
                           mvm_k_wtype_name((enum mvm_wtype)wt[1]));
    L->expert_fmt = (mvm_k_expert_fmt){(enum mvm_wtype)wt[0], (enum mvm_wtype)wt[2],
                                       ld->arch->oai ? MVM_GLU_OAI : MVM_GLU_SILU};
    L->expert_groups = hp->n_ff_exp / (uint32_t)mvm_k_expert_group_channels(L->expert_fmt);
#undef NAME
    return MVM_OK;
}

/* Weights are read in place as floats and halves: a file whose general.alignment lets a
 * tensor start off a 4-byte boundary is refused rather than read misaligned. */
static mvm_status check_alignment(struct loader *ld)
{
    for (uint64_t i = 0; i < mvm_gguf_n_tensors(ld->g); i++) {
        const mvm_gguf_tensor *t = mvm_gguf_tensor_at(ld->g, i);
        if ((uintptr_t)t->data % 4)
            return mvm_ld_fail(ld, MVM_ERR_UNSUPPORTED, "tensor '%s' starts at data offset "
                               "%llu, not a multiple of 4 (general.alignment %u): moevm reads "
                               "weights in place", t->name, (unsigned long long)t->offset,
                               mvm_gguf_alignment(ld->g));
    }
    return MVM_OK;
}

static mvm_status bind_tensors(struct loader *ld, mvm_model *m)
{
    if (check_alignment(ld))
        return ld->st;
    mvm_hparams *hp = &m->hp;
    const mvm_gguf_tensor *emb = mvm_ld_find(ld, "token_embd.weight", 1);
    if (!emb)
        return ld->st;
    if (emb->n_dims != 2 || emb->ne[0] != hp->n_embd || emb->ne[1] == 0 || emb->ne[1] > INT32_MAX)
        return mvm_ld_shape(ld, emb, 2, hp->n_embd, emb->ne[1] ? emb->ne[1] : 1, 1) ? ld->st
               : mvm_ld_fail(ld, MVM_ERR_INVALID, "token_embd.weight has %llu rows",
                             (unsigned long long)emb->ne[1]);
    hp->n_vocab = (uint32_t)emb->ne[1];
    uint32_t vocab_key = hp->n_vocab; /* optional; where set it must agree */
    if (mvm_ld_u32(ld, "vocab_size", &vocab_key, 0))
        return ld->st;
    if (vocab_key != hp->n_vocab)
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "%s.vocab_size is %u but token_embd.weight has "
                           "%u rows", ld->arch->name, vocab_key, hp->n_vocab);
    if (mvm_ld_mat(ld, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd) ||
        !(m->output_norm = mvm_ld_vec(ld, "output_norm.weight", hp->n_embd, 1)))
        return ld->st;
    /* Tied embeddings (no output.weight) as llama.cpp falls back to. */
    if (mvm_ld_find(ld, "output.weight", 0)) {
        if (mvm_ld_mat(ld, "output.weight", hp->n_embd, hp->n_vocab, &m->output))
            return ld->st;
    } else {
        m->output = m->tok_embd;
    }
    if (read_expert_shape(ld, m))
        return ld->st;
    if (!(m->layers = calloc(hp->n_layer, sizeof *m->layers)))
        return mvm_ld_fail(ld, MVM_ERR_NOMEM, "out of memory for %u layers", hp->n_layer);
    for (uint32_t il = 0; il < hp->n_layer; il++)
        if (bind_layer(ld, m, il))
            return ld->st;
    if (hp->n_dense && !(m->dense = calloc(hp->n_dense, sizeof *m->dense)))
        return mvm_ld_fail(ld, MVM_ERR_NOMEM, "out of memory for %u layers", hp->n_dense);
    for (uint32_t b = 0; b < hp->n_dense; b++)
        if (mvm_ld_bind_dense(ld, hp, b, &m->dense[b]))
            return ld->st;
    return MVM_OK;
}

struct pack_job {
    mvm_model *m;
    uint32_t layer;
    const uint8_t *held;             /* the layer's row of the mask, or NULL */
    const uint8_t *gate, *up, *down; /* the layer's expert tensors */
    size_t gate_stride, down_stride; /* bytes per expert */
    const float *gate_b, *up_b;      /* MVM_GLU_OAI: their biases, [n_expert][n_ff_exp] */
};

static void pack_experts(void *ctx, int t, int nth)
{
    struct pack_job *j = ctx;
    const mvm_hparams *hp = &j->m->hp;
    size_t e0, e1;
    mvm_pool_split(hp->n_expert, t, nth, &e0, &e1);
    const mvm_k_expert_fmt f = j->m->layers[j->layer].expert_fmt;
    for (size_t e = e0; e < e1; e++) {
        if (j->held && !j->held[e])
            continue;
        void *home = mvm_expert_home(j->m->space, j->layer, (uint32_t)e);
        mvm_k_expert_pack(f, j->gate + e * j->gate_stride, j->up + e * j->gate_stride,
                          j->down + e * j->down_stride, hp->n_embd, hp->n_ff_exp, home);
        if (f.glu == MVM_GLU_OAI)
            mvm_k_expert_pack_bias(f, j->gate_b + e * hp->n_ff_exp, j->up_b + e * hp->n_ff_exp,
                                   hp->n_embd, hp->n_ff_exp, home);
    }
}

const mvm_option_desc mvm_opt_expert_tiles = {
    "MOEVM_EXPERT_TILES", MVM_OPT_CHOICE, "auto", "auto|off|all",
    "engine: auto stores the K-quant and IQ4_XS experts (Q2_K .. Q6_K, IQ4_XS files) in "
    "the CPU's tiles of 16 rows where only the CPU computes them (a host space, "
    "an AVX-512 VNNI CPU; on AVX2 alone the Q4_K_M, Q5_K_M and Q6_K experts); all the Q8_0 "
    "experts too (prefill 16-18% faster, decode 0-12% slower on a Zen 4, docs/perf/cpu.md); "
    "off keeps the layout the GPU kernels read"};

/* Each layer's experts tiled where mvm_opt_expert_tiles allows, the space is the host's (a
 * cuda space's homes are copied to the device, whose kernels read the portable layout),
 * the experts stay in this process (the distributed mode's share, `held`, moves between
 * ranks byte for byte, and theirs may lack the kernels), and the CPU's level has the
 * kernels for the types. */
static mvm_status choose_tiles(mvm_model *m, mvm_space *space, const uint8_t *held)
{
    mvm_space_info info;
    mvm_option_value v;
    mvm_status st = mvm_space_get_info(space, &info);
    if (st == MVM_OK)
        st = mvm_option_read(&mvm_opt_expert_tiles, &v);
    if (st != MVM_OK)
        return st;
    const int want = v.i != 1 /* "auto|off|all" */ && !held && strcmp(info.backend, "host") == 0;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        mvm_k_expert_fmt *f = &m->layers[il].expert_fmt;
        /* Q8_0's only where asked (all): they decode slower than its untiled kernels */
        const int q8 = f->gate_up == MVM_W_Q8_0 || f->down == MVM_W_Q8_0;
        f->tiles = want && (v.i == 2 || !q8) && mvm_k_expert_tiles_ok(*f);
    }
    return MVM_OK;
}

/* The pool's threads moved to the cores near the space's GPU, where its homes are: the
 * front ends make the pool before the space, from a topology without a GPU (every core,
 * of every node). The CPU's experts (--n-cpu-moe, the assign module's share) read those
 * homes. Where the space's migration worker spins (a budget, MOEVM_MOVE_SPIN), a pool of
 * one thread per core leaves it a core: a worker that shared one with a computing thread
 * would hold up the whole parallel region, or be held up itself for a scheduler tick. Not
 * where the experts stay at their homes (--n-cpu-moe 99: nothing moves, the CPU computes
 * them all). */
static mvm_status pool_near_gpu(mvm_pool *pool, const mvm_space *space, int at_home)
{
    mvm_space_info info;
    mvm_topo near;
    mvm_status st = mvm_space_get_info(space, &info);
    if (st != MVM_OK || !info.pci_bus_id[0])
        return st;
    if ((st = mvm_space_topo(space, &near)) != MVM_OK)
        return st;
    const mvm_topo *now = mvm_pool_topo(pool);
    if (!near.gpu_found && !now)
        return MVM_OK;
    if (!near.gpu_found) /* the GPU's cores unknown: the pool's stay */
        near = *now;
    return mvm_pool_move(pool, &near, info.move_spin_us && !at_home ? 1 : 0);
}

mvm_status mvm_model_load_experts(mvm_model *m, mvm_space *space, mvm_pool *pool,
                                  const uint8_t *held, mvm_progress_fn progress, void *pctx)
{
    m->space = space;
    const mvm_hparams *hp = &m->hp;
    mvm_status st = choose_tiles(m, space, held);
    if (st == MVM_OK)
        st = pool_near_gpu(pool, space, m->experts_at_home);
    if (st != MVM_OK)
        return st;
    /* every tensor was found and checked by open_model: nothing below fails */
    struct loader ld_ = {.path = m->path, .g = m->gguf, .arch = m->arch}, *ld = &ld_;
    uint64_t total = m->expert_bytes * hp->n_expert * hp->n_layer;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        char n[96];
        struct pack_job j = {.m = m, .layer = il,
                             .held = held ? held + (size_t)il * hp->n_expert : NULL};
        const uint32_t blk = hp->n_dense + il;
        snprintf(n, sizeof n, "blk.%u.ffn_gate_exps.weight", blk);
        j.gate = mvm_ld_find(ld, n, 1)->data;
        snprintf(n, sizeof n, "blk.%u.ffn_up_exps.weight", blk);
        j.up = mvm_ld_find(ld, n, 1)->data;
        snprintf(n, sizeof n, "blk.%u.ffn_down_exps.weight", blk);
        j.down = mvm_ld_find(ld, n, 1)->data;
        if (ld->arch->oai) { /* bound and checked by bind_layer */
            snprintf(n, sizeof n, "blk.%u.ffn_gate_exps.bias", blk);
            j.gate_b = mvm_ld_find(ld, n, 1)->data;
            snprintf(n, sizeof n, "blk.%u.ffn_up_exps.bias", blk);
            j.up_b = mvm_ld_find(ld, n, 1)->data;
        }
        const mvm_k_expert_fmt f = m->layers[il].expert_fmt;
        j.gate_stride = mvm_k_row_bytes(f.gate_up, hp->n_embd) * hp->n_ff_exp;
        j.down_stride = mvm_k_row_bytes(f.down, hp->n_ff_exp) * hp->n_embd;
        mvm_pool_run(pool, pack_experts, &j);
        /* The file's copy is read no more: its pages leave the process (their cache stays
         * the kernel's to keep or drop). */
        mvm_gguf_release(ld->g, j.gate, j.gate_stride * hp->n_expert);
        mvm_gguf_release(ld->g, j.up, j.gate_stride * hp->n_expert);
        mvm_gguf_release(ld->g, j.down, j.down_stride * hp->n_expert);
        if (progress)
            progress(pctx, m->expert_bytes * hp->n_expert * (il + 1), total);
    }
    return MVM_OK;
}

/* Everything but the experts' conversion: the architecture, the hyper-parameters, every
 * tensor checked and bound, the name, and expert_bytes. On failure *out is NULL. */
static mvm_status open_model(const char *path, const mvm_model_meta *meta, struct loader *ld,
                             mvm_model **out)
{
    *out = NULL;
    mvm_model *m = calloc(1, sizeof *m);
    if (!m)
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", path);
    *ld = (struct loader){.path = path, .probe = ld->probe};
    mvm_status st = mvm_gguf_open(path, &m->gguf);
    if (st != MVM_OK) {
        free(m);
        return st;
    }
    ld->g = m->gguf;
    if (!(m->path = strdup(path))) {
        mvm_model_free(m);
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", path);
    }
    if ((st = mvm_ld_meta_kv(ld, meta)) != MVM_OK) { /* before anything reads the file */
        mvm_model_free(m);
        return st;
    }
    mvm_gguf_str s;
    char arch[64];
    if (mvm_gguf_get_str(ld->g, "general.architecture", &s) != MVM_OK) {
        st = mvm_ld_fail(ld, MVM_ERR_INVALID, "%s", mvm_last_error());
    } else if (mvm_gguf_str_copy(s, arch, sizeof arch) != MVM_OK ||
               !(ld->arch = m->arch = mvm_arch_find(arch))) {
        st = mvm_ld_fail(ld, MVM_ERR_UNSUPPORTED, "architecture '%.*s' is not supported "
                         "(supported: %s)", (int)(s.len < 60 ? s.len : 60), s.ptr,
                         mvm_arch_names());
    } else if (!(st = mvm_ld_meta_rope(ld, meta)) && !(st = mvm_ld_hparams(ld, &m->hp)) &&
               !(st = bind_tensors(ld, m))) {
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
    struct loader ld = {.probe = 1};
    return open_model(path, NULL, &ld, out);
}

mvm_status mvm_model_open(const char *path, mvm_model **out)
{
    return mvm_model_open_meta(path, NULL, out);
}

mvm_status mvm_model_open_meta(const char *path, const mvm_model_meta *meta, mvm_model **out)
{
    struct loader ld = {0};
    return open_model(path, meta, &ld, out);
}

void mvm_model_free(mvm_model *m)
{
    if (!m)
        return;
    if (m->space)
        mvm_space_destroy(m->space);
    for (uint32_t il = 0; m->layers && il < m->hp.n_layer; il++)
        free(m->layers[il].owned);
    for (uint32_t b = 0; m->dense && b < m->hp.n_dense; b++)
        free(m->dense[b].owned);
    free(m->layers);
    free(m->dense);
    mvm_gguf_close(m->gguf);
    free(m->path);
    free(m);
}

void mvm_model_router_free(mvm_model_router *mr)
{
    free(mr->table);
    free((void *)mr->r.weights);
    free((void *)mr->r.logit_bias);
    free((void *)mr->r.choose_bias);
    *mr = (mvm_model_router){0};
}

/* [n_layer] of the layers' router biases (choose 0) or exp_probs_b (choose 1) into *out;
 * NULL when no layer has one. */
static mvm_status layer_biases(const mvm_model *m, int choose, const float *const **out)
{
    int any = 0;
    for (uint32_t l = 0; l < m->hp.n_layer; l++)
        any |= (choose ? m->layers[l].expert_bias : m->layers[l].router_bias) != NULL;
    const float **rows = any ? calloc(m->hp.n_layer, sizeof *rows) : NULL;
    if (any && !rows)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the routers' biases");
    for (uint32_t l = 0; rows && l < m->hp.n_layer; l++)
        rows[l] = choose ? m->layers[l].expert_bias : m->layers[l].router_bias;
    *out = rows;
    return MVM_OK;
}

/* Every layer's router dequantized into one table. */
static mvm_status router_rows(const mvm_model *m, mvm_model_router *mr)
{
    size_t L = m->hp.n_layer, E = m->hp.n_expert, D = m->hp.n_embd;
    const float **rows = calloc(L, sizeof *rows);
    mr->r.weights = rows;
    mr->table = malloc(L * E * D * sizeof *mr->table);
    if (!mr->table || !rows)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for F32 copies of the routers");
    for (size_t l = 0; l < L; l++) {
        const mvm_weight *w = &m->layers[l].router;
        float *dst = mr->table + l * E * D;
        for (size_t e = 0; e < E; e++)
            mvm_k_dequantize(w->type, (const uint8_t *)w->data + e * w->row_bytes, dst + e * D,
                             D);
        rows[l] = dst;
    }
    return MVM_OK;
}

mvm_status mvm_model_router_init(const mvm_model *m, int weights, mvm_model_router *out)
{
    *out = (mvm_model_router){.r = {.sigmoid = m->hp.sigmoid_gate, .n_group = m->hp.n_group,
                                    .n_group_used = m->hp.n_group_used}};
    mvm_status st = weights ? router_rows(m, out) : MVM_OK;
    if (st == MVM_OK)
        st = layer_biases(m, 0, &out->r.logit_bias);
    if (st == MVM_OK)
        st = layer_biases(m, 1, &out->r.choose_bias);
    if (st != MVM_OK)
        mvm_model_router_free(out);
    return st;
}
