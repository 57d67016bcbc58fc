/*
 * The forward pass's front (forward.h): the context, its policy modules (moe_step.c), the
 * checks of every call and the split into batches; the backend computes each batch.
 */
#include "engine/forward/forward_impl.h"

#include <stdlib.h>
#include <string.h>

#include "engine/compute/gpu.h"
#include "engine/forward/engine_options.h"
#include "kernels/cpu/kernels.h"
#include "policy/choose.h"
#include "vmm/error.h"
#include "vmm/options.h"

int mvm_ctx_device_available(void)
{
#ifdef MVM_ENGINE_PTX
    return 1;
#else
    return 0;
#endif
}

mvm_status mvm_ctx_device_usable(int device, mvm_gpu **opened)
{
    *opened = NULL;
    if (!mvm_ctx_device_available())
        return mvm_fail(MVM_ERR_UNSUPPORTED, "this moevm was built without nvcc: it has no "
                        "device kernels");
    mvm_status st = mvm_cuda_probe(device);
    unsigned flags;
    mvm_ctx_gpu_flags(&flags); /* a bad value: the forward pass's error, flags 0 here */
    return st == MVM_OK ? mvm_gpu_open(device, flags, opened) : st;
}

mvm_status mvm_ctx_gpu_flags(unsigned *flags)
{
    mvm_option_value pdl;
    mvm_status st = mvm_option_read(&mvm_opt_pdl, &pdl);
    *flags = st == MVM_OK && pdl.i == 1 ? MVM_GPU_PDL : 0;
    return st;
}

/* The backend that computes where the space's experts are; *home_mapped, *home_readable:
 * the space's (mvm_space_info). */
static mvm_status pick_backend(const mvm_model *m, const struct mvm_fwd_backend **be,
                               int *home_mapped, int *home_readable)
{
    mvm_space_info info;
    mvm_status st = mvm_space_get_info(m->space, &info);
    if (st != MVM_OK)
        return st;
    *be = &mvm_fwd_cpu;
    *home_mapped = info.home_mapped;
    *home_readable = info.home_readable;
    if (strcmp(info.backend, "cuda") != 0)
        return MVM_OK;
#ifdef MVM_ENGINE_PTX
    *be = &mvm_fwd_cuda;
    return MVM_OK;
#else
    return mvm_fail(MVM_ERR_UNSUPPORTED, "the experts are on a GPU (cuda backend) but this "
                    "moevm was built without nvcc: it has no device kernels (rebuild with nvcc "
                    "on PATH, or use MOEVM_BACKEND=host)");
#endif
}

/* The KV cache's element type: `name`, else MOEVM_KV_TYPE's. */
static mvm_status kv_type(const char *name, enum mvm_wtype *out)
{
    static const char *const choices[MVM_KV_N_TYPES] = MVM_KV_TYPES; /* MOEVM_KV_TYPE's */
    if (!name) {
        mvm_option_value v;
        mvm_status st = mvm_option_read(&mvm_opt_kv_type, &v);
        if (st != MVM_OK)
            return st;
        name = choices[v.i];
    }
    return mvm_kv_type_parse(name, out);
}

/* Whether the predict module `predict` (as mvm_ctx_device_bytes takes it) is SMoE's
 * speculative one, whose pass a context makes room for. */
static mvm_status predict_speculates(const char *predict, int *yes)
{
    *yes = 0;
    char *buf = predict ? strdup(predict) : NULL;
    const char *name, *params;
    const void *ops;
    if (predict && !buf)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory");
    mvm_status st = mvm_engine_choose_spec(MVM_ROLE_PREDICT, buf, &name, &params, &ops);
    *yes = st == MVM_OK && ops && ((const mvm_predict_ops *)ops)->speculative;
    free(buf);
    return st;
}

mvm_status mvm_ctx_device_bytes(mvm_model *m, uint32_t n_ctx, uint32_t n_batch,
                                const char *kv_name, const char *predict, uint64_t *weights,
                                uint64_t *rest)
{
    *weights = *rest = 0;
#ifdef MVM_ENGINE_PTX
    enum mvm_wtype kv = MVM_W_F16;
    mvm_kv_layout layout;
    int speculates = 0;
    mvm_status st = kv_type(kv_name, &kv);
    if (st == MVM_OK)
        st = predict_speculates(predict, &speculates);
    if (st == MVM_OK)
        st = mvm_kv_layout_make(m, n_ctx, n_batch, kv, &layout);
    if (st != MVM_OK)
        return st;
    st = mvm_cuda_fwd_context_bytes(m, n_ctx, n_batch, &layout, speculates, weights, rest);
    mvm_kv_layout_free(&layout);
    return st;
#else
    (void)m, (void)n_ctx, (void)n_batch, (void)kv_name, (void)predict;
    return mvm_fail(MVM_ERR_UNSUPPORTED, "this moevm was built without nvcc: it has no device "
                    "forward pass to size");
#endif
}

mvm_status mvm_ctx_create(mvm_model *m, mvm_pool *pool, uint32_t n_ctx, uint32_t n_batch,
                          const mvm_ctx_policies *policies, mvm_ctx **out)
{
    *out = NULL;
    if (n_ctx == 0 || n_batch == 0 || n_batch > 4096)
        return mvm_fail(MVM_ERR_INVALID, "context of %u positions, batch of %u: need n_ctx >= "
                        "1 and 1 <= batch <= 4096", n_ctx, n_batch);
    const struct mvm_fwd_backend *be;
    int home_mapped, home_readable;
    enum mvm_wtype kv = MVM_W_F16;
    mvm_status st = kv_type(policies ? policies->kv_type : NULL, &kv);
    if (st == MVM_OK)
        st = pick_backend(m, &be, &home_mapped, &home_readable);
    if (st != MVM_OK)
        return st;
    mvm_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the inference context");
    *c = (mvm_ctx){.m = m, .pool = pool, .n_ctx = n_ctx, .n_batch = n_batch, .be = be};
    st = mvm_kv_layout_make(m, n_ctx, n_batch, kv, &c->kv);
    const uint32_t n_seq = policies && policies->n_seq ? policies->n_seq : 1;
    if (st == MVM_OK && n_seq > 1)
        st = mvm_kv_layout_seqs(&c->kv, n_seq);
    if (st == MVM_OK && !((c->n_past = calloc(n_seq, sizeof *c->n_past)) &&
                          (c->n_new = calloc(n_seq, sizeof *c->n_new)) &&
                          (c->b_tok = malloc(n_batch * sizeof *c->b_tok)) &&
                          (c->b_pos = malloc(n_batch * sizeof *c->b_pos)) &&
                          (c->b_seq = malloc(n_batch * sizeof *c->b_seq)) &&
                          (c->b_out = malloc(n_batch * sizeof *c->b_out)) &&
                          (c->b_in = malloc(n_batch * sizeof *c->b_in))))
        st = mvm_fail(MVM_ERR_NOMEM, "out of memory for %u sequences", n_seq);
    if (st == MVM_OK)
        st = mvm_moe_create(m, n_batch, policies, be != &mvm_fwd_cpu, home_mapped,
                            home_readable, &c->moe);
    if (st == MVM_OK)
        st = be->create(c, &c->state);
    if (st != MVM_OK) {
        mvm_ctx_free(c);
        return st;
    }
    *out = c;
    return MVM_OK;
}

void mvm_ctx_free(mvm_ctx *c)
{
    if (!c)
        return;
    if (c->state)
        c->be->destroy(c->state);
    mvm_moe_free(c->moe);
    mvm_kv_layout_free(&c->kv);
    free(c->n_past), free(c->n_new);
    free(c->b_tok), free(c->b_pos), free(c->b_seq), free(c->b_out), free(c->b_in);
    free(c);
}

/* mvm_ctx_settle for the readers, whose type says they change nothing: the policies' state
 * they show is what it would have been without the deferral (the backend keeps a failure
 * for the next evaluation). */
static mvm_status settle(const mvm_ctx *c)
{
    return c->be->settle ? c->be->settle(c) : MVM_OK;
}

mvm_status mvm_ctx_settle(mvm_ctx *c) { return settle(c); }

void mvm_ctx_set_route_observer(mvm_ctx *c, mvm_route_fn fn, void *fn_ctx)
{
    (void)settle(c); /* the old observer sees the steps owed to it */
    c->moe->obs = fn;
    c->moe->obs_ctx = fn_ctx;
}

const char *mvm_ctx_backend(const mvm_ctx *c) { return c->be->name; }

uint64_t mvm_ctx_kv_bytes(const mvm_ctx *c) { return c->kv.bytes; }
const char *mvm_ctx_kv_type(const mvm_ctx *c) { return mvm_k_wtype_name(c->kv.type); }

mvm_status mvm_ctx_time_experts(mvm_ctx *c, uint32_t layer, const int32_t *experts,
                                uint32_t k, const float *x, uint32_t n, double *seconds)
{
    const mvm_hparams *hp = &c->m->hp;
    if (!c->be->time_experts)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "timing experts on the device: this context "
                        "computes on the %s", c->be->name);
    if (n == 0 || n > c->n_batch || layer >= hp->n_layer || k == 0 || k > hp->n_expert_used)
        return mvm_fail(MVM_ERR_INVALID, "timing %u experts of layer %u for %u tokens: out of "
                        "range (%u layers, up to %u experts, batches of up to %u)", k, layer, n,
                        hp->n_layer, hp->n_expert_used, c->n_batch);
    for (uint32_t j = 0; j < k; j++) {
        int twice = 0;
        for (uint32_t i = 0; i < j; i++)
            twice |= experts[i] == experts[j];
        if (experts[j] < 0 || (uint32_t)experts[j] >= hp->n_expert || twice)
            return mvm_fail(MVM_ERR_INVALID, "timing experts of layer %u: expert %d is %s",
                            layer, experts[j], twice ? "named twice" : "out of range");
    }
    mvm_status st = settle(c);
    return st != MVM_OK ? st : c->be->time_experts(c, layer, experts, k, x, n, seconds);
}

mvm_status mvm_ctx_set_elsewhere(mvm_ctx *c, const mvm_elsewhere *e)
{
    mvm_status st = settle(c);
    if (st != MVM_OK)
        return st;
    c->moe->elsewhere = e && e->send ? e : NULL;
    c->moe->remote = e ? e->remote : NULL;
    mvm_resid_set_remote(c->moe->resid, c->moe->remote);
    return MVM_OK;
}

bool mvm_ctx_serves_rows(const mvm_ctx *c) { return c->be->expert_rows != NULL; }

mvm_status mvm_ctx_expert_rows(mvm_ctx *c, const mvm_expert_rows *r, float *out)
{
    if (!c->be->expert_rows)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "computing another rank's rows in a context: "
                        "this one computes on the %s", c->be->name);
    if (r->n_tok == 0 || r->n_tok > c->n_batch || r->layer >= c->m->hp.n_layer)
        return mvm_fail(MVM_ERR_INVALID, "rows of %u tokens of layer %u: the context takes "
                        "batches of up to %u, %u layers", r->n_tok, r->layer, c->n_batch,
                        c->m->hp.n_layer);
    mvm_status st = settle(c);
    return st != MVM_OK ? st : c->be->expert_rows(c, r, out);
}

uint32_t mvm_ctx_n_past(const mvm_ctx *c) { return c->n_past[c->seq]; }
void mvm_ctx_reset(mvm_ctx *c) { c->n_past[c->seq] = 0; }
uint32_t mvm_ctx_n_seq(const mvm_ctx *c) { return c->kv.n_seq; }

void mvm_ctx_truncate(mvm_ctx *c, uint32_t n)
{
    uint32_t *past = &c->n_past[c->seq];
    if (n >= *past)
        return;
    /* A windowed block's ring (kv_cache.h: R = w + n_batch rows) holds the last R
     * positions written. The window the next position reads, [n - w + 1, n), is still
     * there only when no more than n_batch positions past n were written; else those rows
     * hold later positions, and the sequence must be read anew. */
    int ring = 0;
    for (uint32_t b = 0; b < c->kv.n_blocks; b++)
        ring |= c->kv.blocks[b].ring != 0;
    *past = ring && *past - n > c->n_batch ? 0 : n;
}

uint32_t mvm_ctx_seq_n_past(const mvm_ctx *c, uint32_t s)
{
    return s < c->kv.n_seq ? c->n_past[s] : 0;
}

mvm_status mvm_ctx_select_seq(mvm_ctx *c, uint32_t s)
{
    if (s >= c->kv.n_seq)
        return mvm_fail(MVM_ERR_RANGE, "sequence %u of a context of %u", s, c->kv.n_seq);
    c->seq = s;
    mvm_kv_layout_select(&c->kv, s);
    return MVM_OK;
}

void mvm_embed_tokens(const mvm_model *m, const int32_t *tokens, uint32_t n, float *out)
{
    const mvm_weight *w = &m->tok_embd;
    uint32_t D = m->hp.n_embd;
    for (uint32_t i = 0; i < n; i++)
        mvm_k_dequantize(w->type, (const uint8_t *)w->data + (size_t)tokens[i] * w->row_bytes,
                         out + (size_t)i * D, D);
}

const mvm_resid *mvm_ctx_residency(const mvm_ctx *c)
{
    (void)settle(c);
    return c->moe->resid;
}

const mvm_prefetcher *mvm_ctx_prefetcher(const mvm_ctx *c)
{
    (void)settle(c);
    return c->moe->prefetch;
}

const mvm_substitutor *mvm_ctx_substitutor(const mvm_ctx *c)
{
    (void)settle(c);
    return c->moe->subst;
}

/* ---- evaluation ------------------------------------------------------------------------ */

/* The backend's evaluation of batch b; then the ranks that compute experts elsewhere are told
 * of its tokens. */
static mvm_status eval_backend(mvm_ctx *c, const mvm_fwd_batch *b, float *logits)
{
    mvm_status st = c->be->eval(c, b, b->n_out ? logits : NULL);
    const mvm_elsewhere *e = c->moe->elsewhere;
    if (st == MVM_OK && e)
        st = e->tokens(e->self, c->m, b->n);
    return st;
}

/* Evaluates t[0..n) (n <= n_batch, checked) at the positions that follow each sequence's
 * cached ones, which advance (the caller takes them back on failure). logits: n_vocab floats
 * for each token that wants them, or NULL. */
static mvm_status eval_chunk(mvm_ctx *c, const mvm_engine_token *t, uint32_t n, float *logits)
{
    uint32_t n_out = 0;
    for (uint32_t i = 0; i < n; i++) {
        c->b_tok[i] = t[i].id;
        c->b_seq[i] = t[i].seq;
        c->b_pos[i] = c->n_past[t[i].seq]++;
        if (t[i].logits && logits)
            c->b_out[n_out++] = i;
    }
    return eval_backend(c, &(mvm_fwd_batch){c->b_tok, c->b_pos, c->b_seq, c->b_out, n, n_out},
                        logits);
}

static mvm_status check_id(const mvm_ctx *c, int32_t id)
{
    const uint32_t n_vocab = c->m->hp.n_vocab;
    if (id < 0 || (uint32_t)id >= n_vocab)
        return mvm_fail(MVM_ERR_INVALID, "token id %d is outside the vocabulary (0..%u)", id,
                        n_vocab - 1);
    return MVM_OK;
}

mvm_status mvm_ctx_eval(mvm_ctx *c, const int32_t *tokens, uint32_t n, float *logits,
                        int all_logits)
{
    const uint32_t before = c->n_past[c->seq];
    if (n == 0)
        return MVM_OK;
    if ((uint64_t)before + n > c->n_ctx)
        return mvm_fail(MVM_ERR_RANGE, "context full: %u positions used, %u more do not fit in "
                        "%u", before, n, c->n_ctx);
    for (uint32_t i = 0; i < n; i++)
        if (check_id(c, tokens[i]) != MVM_OK)
            return MVM_ERR_INVALID;
    for (uint32_t done = 0; done < n;) {
        const uint32_t nb = n - done < c->n_batch ? n - done : c->n_batch;
        for (uint32_t i = 0; i < nb; i++)
            c->b_in[i] = (mvm_engine_token){tokens[done + i], c->seq,
                                            all_logits || done + i == n - 1};
        float *lg = logits && all_logits ? logits + (size_t)done * c->m->hp.n_vocab : logits;
        mvm_status st = eval_chunk(c, c->b_in, nb, lg);
        if (st != MVM_OK) {
            c->n_past[c->seq] = before;
            return st;
        }
        done += nb;
    }
    return MVM_OK;
}

mvm_status mvm_ctx_eval_batch(mvm_ctx *c, const mvm_engine_token *t, uint32_t n, float *logits)
{
    const uint32_t n_vocab = c->m->hp.n_vocab;
    memset(c->n_new, 0, c->kv.n_seq * sizeof *c->n_new);
    for (uint32_t i = 0; i < n; i++) {
        if (check_id(c, t[i].id) != MVM_OK)
            return MVM_ERR_INVALID;
        if (t[i].seq >= c->kv.n_seq)
            return mvm_fail(MVM_ERR_RANGE, "token %u of the batch: sequence %u of a context "
                            "of %u", i, t[i].seq, c->kv.n_seq);
        c->n_new[t[i].seq]++;
    }
    for (uint32_t s = 0; s < c->kv.n_seq; s++)
        if ((uint64_t)c->n_past[s] + c->n_new[s] > c->n_ctx)
            return mvm_fail(MVM_ERR_RANGE, "context full: sequence %u has %u positions, %u "
                            "more do not fit in %u", s, c->n_past[s], c->n_new[s], c->n_ctx);
    size_t rows = 0;
    for (uint32_t done = 0; done < n;) {
        const uint32_t nb = n - done < c->n_batch ? n - done : c->n_batch;
        mvm_status st = eval_chunk(c, t + done, nb, logits ? logits + rows * n_vocab : NULL);
        if (st != MVM_OK) { /* every sequence as it was */
            for (uint32_t i = 0; i < done + nb; i++)
                c->n_past[t[i].seq]--;
            return st;
        }
        for (uint32_t i = done; i < done + nb; i++)
            rows += t[i].logits != 0;
        done += nb;
    }
    return MVM_OK;
}
