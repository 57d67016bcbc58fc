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
    return st == MVM_OK ? mvm_gpu_open(device, opened) : st;
}

/* The backend that computes where the space's experts are; *home_mapped: the space's. */
static mvm_status pick_backend(const mvm_model *m, const struct mvm_fwd_backend **be,
                               int *home_mapped)
{
    mvm_space_info info;
    mvm_status st = mvm_space_get_info(m->space, &info);
    if (st != MVM_OK)
        return st;
    *be = &mvm_fwd_cpu;
    *home_mapped = info.home_mapped;
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
    static const char *const choices[] = {"f16", "f32"}; /* MOEVM_KV_TYPE's, in order */
    if (!name) {
        mvm_option_value v;
        mvm_status st = mvm_option_read(&mvm_opt_kv_type, &v);
        if (st != MVM_OK)
            return st;
        name = choices[v.i];
    }
    if (!strcmp(name, "f16"))
        *out = MVM_W_F16;
    else if (!strcmp(name, "f32"))
        *out = MVM_W_F32;
    else
        return mvm_fail(MVM_ERR_INVALID, "KV cache type '%s': use f16 or f32", name);
    return MVM_OK;
}

mvm_status mvm_ctx_device_bytes(mvm_model *m, uint32_t n_ctx, uint32_t n_batch,
                                const char *kv_name, uint64_t *weights, uint64_t *rest)
{
    *weights = *rest = 0;
#ifdef MVM_ENGINE_PTX
    enum mvm_wtype kv = MVM_W_F16;
    mvm_kv_layout layout;
    mvm_status st = kv_type(kv_name, &kv);
    if (st == MVM_OK)
        st = mvm_kv_layout_make(m, n_ctx, n_batch, kv, &layout);
    if (st != MVM_OK)
        return st;
    st = mvm_cuda_fwd_context_bytes(m, n_ctx, n_batch, &layout, weights, rest);
    mvm_kv_layout_free(&layout);
    return st;
#else
    (void)m, (void)n_ctx, (void)n_batch, (void)kv_name;
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
    int home_mapped;
    enum mvm_wtype kv = MVM_W_F16;
    mvm_status st = kv_type(policies ? policies->kv_type : NULL, &kv);
    if (st == MVM_OK)
        st = pick_backend(m, &be, &home_mapped);
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
    if (st == MVM_OK && !(c->seq_past = calloc(n_seq, sizeof *c->seq_past)))
        st = mvm_fail(MVM_ERR_NOMEM, "out of memory for %u sequences", n_seq);
    if (st == MVM_OK)
        st = mvm_moe_create(m, n_batch, policies, be != &mvm_fwd_cpu, home_mapped, &c->moe);
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
    free(c->seq_past);
    free(c);
}

void mvm_ctx_set_route_observer(mvm_ctx *c, mvm_route_fn fn, void *fn_ctx)
{
    c->moe->obs = fn;
    c->moe->obs_ctx = fn_ctx;
}

const char *mvm_ctx_backend(const mvm_ctx *c) { return c->be->name; }

uint64_t mvm_ctx_kv_bytes(const mvm_ctx *c) { return c->kv.bytes; }
const char *mvm_ctx_kv_type(const mvm_ctx *c) { return mvm_k_wtype_name(c->kv.type); }

mvm_status mvm_ctx_time_expert(mvm_ctx *c, uint32_t layer, int32_t expert, const float *x,
                               uint32_t n, double *seconds)
{
    const mvm_hparams *hp = &c->m->hp;
    if (!c->be->time_expert)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "timing experts on the device: this context "
                        "computes on the %s", c->be->name);
    if (n == 0 || n > c->n_batch || layer >= hp->n_layer || expert < 0 ||
        (uint32_t)expert >= hp->n_expert)
        return mvm_fail(MVM_ERR_INVALID, "timing expert %d of layer %u for %u tokens: out of "
                        "range (%u layers, %u experts, batches of up to %u)", expert, layer, n,
                        hp->n_layer, hp->n_expert, c->n_batch);
    return c->be->time_expert(c, layer, expert, x, n, seconds);
}

mvm_status mvm_ctx_set_elsewhere(mvm_ctx *c, const mvm_elsewhere *e)
{
    if (c->be != &mvm_fwd_cpu)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "the distributed mode computes on the CPU; this "
                        "context computes on the %s (use MOEVM_BACKEND=host)", c->be->name);
    c->moe->elsewhere = e;
    c->moe->remote = e ? e->remote : NULL;
    mvm_resid_set_remote(c->moe->resid, c->moe->remote);
    return MVM_OK;
}

uint32_t mvm_ctx_n_past(const mvm_ctx *c) { return c->n_past; }
void mvm_ctx_reset(mvm_ctx *c) { c->n_past = 0; }
void mvm_ctx_truncate(mvm_ctx *c, uint32_t n) { c->n_past = n < c->n_past ? n : c->n_past; }
uint32_t mvm_ctx_n_seq(const mvm_ctx *c) { return c->kv.n_seq; }

uint32_t mvm_ctx_seq_n_past(const mvm_ctx *c, uint32_t s)
{
    return s == c->seq ? c->n_past : s < c->kv.n_seq ? c->seq_past[s] : 0;
}

mvm_status mvm_ctx_select_seq(mvm_ctx *c, uint32_t s)
{
    if (s >= c->kv.n_seq)
        return mvm_fail(MVM_ERR_RANGE, "sequence %u of a context of %u", s, c->kv.n_seq);
    c->seq_past[c->seq] = c->n_past;
    c->seq = s;
    c->n_past = c->seq_past[s];
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

const mvm_resid *mvm_ctx_residency(const mvm_ctx *c) { return c->moe->resid; }
const mvm_prefetcher *mvm_ctx_prefetcher(const mvm_ctx *c) { return c->moe->prefetch; }
const mvm_substitutor *mvm_ctx_substitutor(const mvm_ctx *c) { return c->moe->subst; }

mvm_status mvm_ctx_eval(mvm_ctx *c, const int32_t *tokens, uint32_t n, float *logits,
                        int all_logits)
{
    const mvm_hparams *hp = &c->m->hp;
    if (n == 0)
        return MVM_OK;
    if ((uint64_t)c->n_past + n > c->n_ctx)
        return mvm_fail(MVM_ERR_RANGE, "context full: %u positions used, %u more do not fit in "
                        "%u", c->n_past, n, c->n_ctx);
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= hp->n_vocab)
            return mvm_fail(MVM_ERR_INVALID, "token id %d is outside the vocabulary (0..%u)",
                            tokens[i], hp->n_vocab - 1);
    for (uint32_t done = 0; done < n;) {
        uint32_t nb = n - done < c->n_batch ? n - done : c->n_batch;
        int last = done + nb == n;
        float *lg = NULL;
        if (logits && all_logits)
            lg = logits + (size_t)done * hp->n_vocab;
        else if (logits && last)
            lg = logits;
        mvm_status st = c->be->eval(c, tokens + done, nb, lg, all_logits);
        const mvm_elsewhere *e = c->moe->elsewhere;
        if (st == MVM_OK && e)
            st = e->tokens(e->self, c->m, nb);
        if (st != MVM_OK)
            return st;
        c->n_past += nb;
        done += nb;
    }
    return MVM_OK;
}
