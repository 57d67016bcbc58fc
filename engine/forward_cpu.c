/*
 * The CPU backend of the forward pass (forward_impl.h). One batch of n tokens goes through
 * every layer as
 *   attention:  x += Wo · attn(rope(norm_qk(Wq·h)), rope(norm_qk(Wk·h)), Wv·h),  h = rms(x)
 *   MoE:        x += Σ_selected w_e · expert_e(h) [+ sigmoid(g·h) · shared(h)],  h = rms(x)
 * with the architecture's variations (arch.c). Matrix products are split by rows across the
 * pool; attention by (token, head); the experts as experts_cpu.h says. Work is handed out
 * statically (unit u to thread u mod n), so a run is bitwise reproducible for a given
 * thread count: greedy decoding is deterministic, whatever the experts' residency.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dist.h"
#include "engine/experts_cpu.h"
#include "engine/forward_impl.h"
#include "vmm/error.h"

struct cpu_fwd {
    mvm_model *m;
    mvm_pool *pool;
    mvm_moe *moe;
    int nth;
    uint32_t n_ctx, n_batch, q_dim, kv_dim;
    float *kc, *vc;             /* [n_layer][n_ctx][kv_dim] */
    float *x, *xn, *q, *k, *v, *att, *tmp, *tmp2; /* [n_batch][...] */
    uint8_t *act;               /* [n_batch][act_stride]: the current matmul input */
    size_t act_stride;
    float *sh1, *sh3, *shg;     /* shared expert: [n_batch][n_ff_shexp] x2, [n_batch] */
    float *scratch;             /* [nth][n_ctx] attention scores */
    mvm_xcpu *experts;          /* the routed experts' threads */
};

static mvm_status cpu_create(mvm_ctx *ctx, void **state)
{
    const mvm_hparams *hp = &ctx->m->hp;
    struct cpu_fwd *c = calloc(1, sizeof *c);
    if (!c)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the inference context");
    *state = c;
    c->m = ctx->m;
    c->pool = ctx->pool;
    c->moe = ctx->moe;
    c->nth = mvm_pool_size(ctx->pool);
    c->n_ctx = ctx->n_ctx;
    c->n_batch = ctx->n_batch;
    c->q_dim = hp->n_head * hp->head_dim;
    c->kv_dim = hp->n_head_kv * hp->head_dim;
    size_t B = c->n_batch, D = hp->n_embd;
    size_t widest = D > c->q_dim ? D : c->q_dim;
    if (hp->n_ff_shexp > widest)
        widest = hp->n_ff_shexp;
    c->act_stride = MVM_ALIGN64(mvm_k_act_bytes(MVM_W_F32, widest));
    size_t kv = (size_t)hp->n_layer * c->n_ctx * c->kv_dim * sizeof(float);
    int ok = 1;
    c->kc = mvm_buf64(kv, &ok);
    c->vc = mvm_buf64(kv, &ok);
    c->x = mvm_buf64(B * D * 4, &ok);
    c->xn = mvm_buf64(B * D * 4, &ok);
    c->tmp = mvm_buf64(B * D * 4, &ok);
    c->tmp2 = mvm_buf64(B * D * 4, &ok);
    c->q = mvm_buf64(B * c->q_dim * 4, &ok);
    c->att = mvm_buf64(B * c->q_dim * 4, &ok);
    c->k = mvm_buf64(B * c->kv_dim * 4, &ok);
    c->v = mvm_buf64(B * c->kv_dim * 4, &ok);
    c->act = mvm_buf64(B * c->act_stride, &ok);
    c->scratch = mvm_buf64((size_t)c->nth * c->n_ctx * 4, &ok);
    if (hp->n_ff_shexp) {
        c->sh1 = mvm_buf64(B * hp->n_ff_shexp * 4, &ok);
        c->sh3 = mvm_buf64(B * hp->n_ff_shexp * 4, &ok);
        c->shg = mvm_buf64(B * 4, &ok);
    }
    if (!ok)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a context of %u positions (KV cache "
                        "%.1f MiB)", c->n_ctx, 2.0 * (double)kv / 1048576.0);
    return mvm_xcpu_create(c->m, c->pool, c->n_batch, &c->experts);
}

static void cpu_destroy(void *state)
{
    struct cpu_fwd *c = state;
    void *bufs[] = {c->kc, c->vc, c->x, c->xn, c->tmp, c->tmp2, c->q, c->att, c->k, c->v,
                    c->act, c->scratch, c->sh1, c->sh3, c->shg};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    mvm_xcpu_free(c->experts);
    free(c);
}

/* ---- matrix products ------------------------------------------------------------------- */

/* src rows (n of `cols` floats, stride `cols`) -> c->act in w's activation format. */
static void prepare(struct cpu_fwd *c, enum mvm_wtype t, const float *src, uint32_t n, uint32_t cols)
{
    for (uint32_t i = 0; i < n; i++)
        mvm_k_prepare_act(t, src + (size_t)i * cols, c->act + i * c->act_stride, cols);
}

struct mm_job {
    const mvm_weight *w;
    const void *act;
    size_t act_stride;
    uint32_t n_tok;
    float *y;
    size_t y_stride;
};

static void mm_run(void *p, int t, int nth)
{
    const struct mm_job *j = p;
    size_t r0, r1;
    mvm_pool_split(j->w->rows, t, nth, &r0, &r1);
    if (r0 == r1)
        return;
    if (j->n_tok == 1)
        mvm_k_matvec(j->w->type, j->w->data, j->w->row_bytes, j->w->cols, j->act, j->y, r0, r1);
    else
        mvm_k_matmul(j->w->type, j->w->data, j->w->row_bytes, j->w->cols, j->act, j->act_stride,
                     j->n_tok, j->y, j->y_stride, r0, r1);
}

/* y[i] = w · src[i] for n rows of w->cols floats; y rows are w->rows floats apart. */
static void matmul(struct cpu_fwd *c, const mvm_weight *w, const float *src, uint32_t n, float *y)
{
    prepare(c, w->type, src, n, w->cols);
    struct mm_job j = {w, c->act, c->act_stride, n, y, w->rows};
    mvm_pool_run(c->pool, mm_run, &j);
}

/* ---- attention ------------------------------------------------------------------------- */

static void qk_norm_rope(struct cpu_fwd *c, const mvm_layer *L, uint32_t n, uint32_t pos0)
{
    const mvm_hparams *hp = &c->m->hp;
    const mvm_arch *a = c->m->arch;
    for (uint32_t i = 0; i < n; i++) {
        float *q = c->q + (size_t)i * c->q_dim, *k = c->k + (size_t)i * c->kv_dim;
        if (a->qkv_bias) {
            for (uint32_t j = 0; j < c->q_dim; j++)
                q[j] += L->bq[j];
            for (uint32_t j = 0; j < c->kv_dim; j++) {
                k[j] += L->bk[j];
                c->v[(size_t)i * c->kv_dim + j] += L->bv[j];
            }
        }
        if (a->qk_norm == MVM_QK_NORM_HEAD) {
            for (uint32_t h = 0; h < hp->n_head; h++)
                mvm_k_rmsnorm(q + h * hp->head_dim, q + h * hp->head_dim, L->q_norm,
                              hp->head_dim, hp->rms_eps);
            for (uint32_t h = 0; h < hp->n_head_kv; h++)
                mvm_k_rmsnorm(k + h * hp->head_dim, k + h * hp->head_dim, L->k_norm,
                              hp->head_dim, hp->rms_eps);
        } else if (a->qk_norm == MVM_QK_NORM_FULL) {
            mvm_k_rmsnorm(q, q, L->q_norm, c->q_dim, hp->rms_eps);
            mvm_k_rmsnorm(k, k, L->k_norm, c->kv_dim, hp->rms_eps);
        }
        mvm_k_rope(q, hp->n_head, hp->head_dim, pos0 + i, &hp->rope);
        mvm_k_rope(k, hp->n_head_kv, hp->head_dim, pos0 + i, &hp->rope);
    }
}

struct attn_job {
    struct cpu_fwd *c;
    const float *kc, *vc; /* this layer's cache */
    uint32_t n, pos0;
};

static void attn_run(void *p, int t, int nth)
{
    const struct attn_job *j = p;
    struct cpu_fwd *c = j->c;
    const mvm_hparams *hp = &c->m->hp;
    uint32_t group = hp->n_head / hp->n_head_kv;
    float scale = 1.0f / sqrtf((float)hp->head_dim);
    size_t u0, u1;
    mvm_pool_split((size_t)j->n * hp->n_head, t, nth, &u0, &u1);
    for (size_t u = u0; u < u1; u++) {
        uint32_t i = (uint32_t)(u / hp->n_head), h = (uint32_t)(u % hp->n_head);
        size_t kvo = (size_t)(h / group) * hp->head_dim;
        mvm_k_attn_head(c->q + (size_t)i * c->q_dim + (size_t)h * hp->head_dim, j->kc + kvo,
                        j->vc + kvo, c->kv_dim, j->pos0 + i + 1, hp->head_dim, scale,
                        c->scratch + (size_t)t * c->n_ctx,
                        c->att + (size_t)i * c->q_dim + (size_t)h * hp->head_dim);
    }
}

static void attention(struct cpu_fwd *c, uint32_t il, uint32_t n, uint32_t pos0)
{
    const mvm_hparams *hp = &c->m->hp;
    const mvm_layer *L = &c->m->layers[il];
    for (uint32_t i = 0; i < n; i++)
        mvm_k_rmsnorm(c->xn + (size_t)i * hp->n_embd, c->x + (size_t)i * hp->n_embd,
                      L->attn_norm, hp->n_embd, hp->rms_eps);
    matmul(c, &L->wq, c->xn, n, c->q);
    matmul(c, &L->wk, c->xn, n, c->k);
    matmul(c, &L->wv, c->xn, n, c->v);
    qk_norm_rope(c, L, n, pos0);
    size_t layer_off = (size_t)il * c->n_ctx * c->kv_dim;
    memcpy(c->kc + layer_off + (size_t)pos0 * c->kv_dim, c->k, (size_t)n * c->kv_dim * 4);
    memcpy(c->vc + layer_off + (size_t)pos0 * c->kv_dim, c->v, (size_t)n * c->kv_dim * 4);
    struct attn_job j = {c, c->kc + layer_off, c->vc + layer_off, n, pos0};
    mvm_pool_run(c->pool, attn_run, &j);
    matmul(c, &L->wo, c->att, n, c->tmp);
    for (size_t i = 0; i < (size_t)n * hp->n_embd; i++)
        c->x[i] += c->tmp[i];
}

/* ---- mixture of experts ---------------------------------------------------------------- */

static void shared_expert(struct cpu_fwd *c, const mvm_layer *L, uint32_t n)
{
    const mvm_hparams *hp = &c->m->hp;
    uint32_t F = hp->n_ff_shexp;
    for (uint32_t i = 0; i < n; i++) {
        const float *h = c->xn + (size_t)i * hp->n_embd;
        float g = 0;
        for (uint32_t d = 0; d < hp->n_embd; d++)
            g += L->shexp_gate[d] * h[d];
        c->shg[i] = 1.0f / (1.0f + expf(-g));
    }
    matmul(c, &L->shexp_w1, c->xn, n, c->sh1);
    matmul(c, &L->shexp_w3, c->xn, n, c->sh3);
    for (uint32_t i = 0; i < n; i++)
        mvm_k_swiglu(c->sh1 + (size_t)i * F, c->sh3 + (size_t)i * F, F);
    matmul(c, &L->shexp_w2, c->sh1, n, c->tmp2);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t d = 0; d < hp->n_embd; d++)
            c->x[(size_t)i * hp->n_embd + d] += c->shg[i] * c->tmp2[(size_t)i * hp->n_embd + d];
}

static mvm_status moe(struct cpu_fwd *c, uint32_t il, uint32_t n, uint32_t pos0)
{
    const mvm_hparams *hp = &c->m->hp;
    const mvm_layer *L = &c->m->layers[il];
    for (uint32_t i = 0; i < n; i++)
        mvm_k_rmsnorm(c->xn + (size_t)i * hp->n_embd, c->x + (size_t)i * hp->n_embd,
                      L->ffn_norm, hp->n_embd, hp->rms_eps);
    matmul(c, &L->router, c->xn, n, c->moe->probs);
    mvm_moe_route(c->moe, il, pos0, n, c->xn);
    mvm_status st = mvm_moe_begin(c->moe);
    if (st != MVM_OK)
        return st;
    if (c->moe->dist) /* the other ranks' experts run there meanwhile */
        st = mvm_dist_send(c->moe->dist, c->moe, c->xn, n);
    mvm_xcpu_run(c->experts, c->moe, c->xn, n, c->moe->active, c->moe->n_active, 0);
    mvm_xcpu_add(c->experts, c->moe, c->x, n);
    if (c->moe->dist && st == MVM_OK)
        st = mvm_dist_gather(c->moe->dist, c->moe, c->x, n);
    mvm_status end = mvm_moe_end(c->moe);
    st = st != MVM_OK ? st : end;
    if (st == MVM_OK && hp->n_ff_shexp)
        shared_expert(c, L, n);
    return st;
}

/* ---- the whole pass -------------------------------------------------------------------- */

static mvm_status cpu_eval(mvm_ctx *ctx, const int32_t *tokens, uint32_t n, float *logits,
                           int all_logits)
{
    struct cpu_fwd *c = ctx->state;
    const mvm_model *m = c->m;
    const mvm_hparams *hp = &m->hp;
    uint32_t pos0 = ctx->n_past;
    for (uint32_t i = 0; i < n; i++)
        mvm_k_dequantize(m->tok_embd.type,
                         (const uint8_t *)m->tok_embd.data + (size_t)tokens[i] * m->tok_embd.row_bytes,
                         c->x + (size_t)i * hp->n_embd, hp->n_embd);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        attention(c, il, n, pos0);
        mvm_status st = moe(c, il, n, pos0);
        if (st != MVM_OK)
            return st;
    }
    if (!logits)
        return MVM_OK;
    uint32_t first = all_logits ? 0 : n - 1, nl = n - first;
    for (uint32_t i = first; i < n; i++)
        mvm_k_rmsnorm(c->xn + (size_t)(i - first) * hp->n_embd, c->x + (size_t)i * hp->n_embd,
                      m->output_norm, hp->n_embd, hp->rms_eps);
    matmul(c, &m->output, c->xn, nl, logits);
    return MVM_OK;
}

const struct mvm_fwd_backend mvm_fwd_cpu = {"cpu", cpu_create, cpu_destroy, cpu_eval, NULL};
