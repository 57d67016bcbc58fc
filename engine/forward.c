/*
 * The CPU forward pass (forward.h). One batch of n tokens goes through every layer as
 *   attention:  x += Wo · attn(rope(norm_qk(Wq·h)), rope(norm_qk(Wk·h)), Wv·h),  h = rms(x)
 *   MoE:        x += Σ_selected w_e · expert_e(h) [+ sigmoid(g·h) · shared(h)],  h = rms(x)
 * with the architecture's variations (arch.c). Matrix products are split by rows across the
 * pool; attention by (token, head); the experts by (expert, channel-group range), handed
 * out dynamically because the number of tokens per expert varies, with per-thread output
 * rows reduced at the end so no two threads ever add into the same floats. Work is handed
 * out statically (unit u to thread u mod n), so a run is bitwise reproducible for a given
 * thread count: greedy decoding is deterministic, whatever the experts' residency.
 */
#include "engine/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/choose.h"
#include "vmm/error.h"

struct mvm_ctx {
    mvm_model *m;
    mvm_pool *pool;
    mvm_resid *resid;
    mvm_prefetcher *prefetch;
    mvm_substitutor *subst;
    float *router_table;        /* the routers as F32, when a predict or config module runs */
    const float **routers;      /* [n_layer] into router_table */
    int nth, wait_loads;
    uint32_t n_ctx, n_batch, n_past, q_dim, kv_dim, n_groups;
    float *kc, *vc;             /* [n_layer][n_ctx][kv_dim] */
    float *x, *xn, *q, *k, *v, *att, *tmp, *tmp2; /* [n_batch][...] */
    uint8_t *act;               /* [n_batch][act_stride]: the current matmul input */
    size_t act_stride;
    float *probs, *selw;        /* [n_batch][n_expert], [n_batch][K] */
    int *sel;                   /* [n_batch][K] */
    float *selw0;               /* [n_batch][K] the router's own choice, for observers */
    int *sel0;                  /* (sel and selw are what the route module made of it) */
    float *sh1, *sh3, *shg;     /* shared expert: [n_batch][n_ff_shexp] x2, [n_batch] */
    float *scratch;             /* [nth][n_ctx] attention scores */
    /* expert dispatch: rows = (token, selected expert) pairs grouped by expert */
    uint32_t *cnt, *off;        /* [n_expert] */
    uint32_t *row_tok;          /* [n_batch*K] */
    float *row_w;
    uint8_t *gact;              /* [n_batch*K][gact_stride] */
    size_t gact_stride;
    int32_t *active;            /* distinct experts of the current layer */
    uint32_t n_active, units_per_expert, groups_per_unit;
    float *tout;                /* [nth][n_batch*K][n_embd] */
    uint32_t *tstamp;           /* [nth][n_batch*K]: row valid in tout when == stamp */
    uint32_t stamp;
    mvm_route_fn obs;
    void *obs_ctx;
};

#define ALIGN64(n) (((n) + 63) & ~(size_t)63)

static void *buf(size_t n, int *ok)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0)
        *ok = 0;
    return p;
}

/* Whether a predict or config module runs (they may compute with the routers). */
static mvm_status wants_routers(const mvm_ctx_policies *p, int *yes)
{
    const void *predict = NULL, *config = NULL;
    const char *args;
    mvm_status st = mvm_engine_choose(MVM_ROLE_PREDICT, p->prefetch.predict,
                                      p->prefetch.predict_args, &predict, &args);
    if (st == MVM_OK)
        st = mvm_engine_choose(MVM_ROLE_CONFIG, p->residency.config,
                               p->residency.config_args, &config, &args);
    *yes = predict || config;
    return st;
}

mvm_status mvm_ctx_create(mvm_model *m, mvm_pool *pool, uint32_t n_ctx, uint32_t n_batch,
                          const mvm_ctx_policies *policies, mvm_ctx **out)
{
    *out = NULL;
    const mvm_hparams *hp = &m->hp;
    if (n_ctx == 0 || n_batch == 0 || n_batch > 4096)
        return mvm_fail(MVM_ERR_INVALID, "context of %u positions, batch of %u: need n_ctx >= "
                        "1 and 1 <= batch <= 4096", n_ctx, n_batch);
    mvm_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the inference context");
    c->m = m;
    c->pool = pool;
    c->nth = mvm_pool_size(pool);
    c->n_ctx = n_ctx;
    c->n_batch = n_batch;
    c->q_dim = hp->n_head * hp->head_dim;
    c->kv_dim = hp->n_head_kv * hp->head_dim;
    c->n_groups = hp->n_ff_exp / MVM_QBLOCK;
    size_t B = n_batch, K = hp->n_expert_used, E = hp->n_expert, D = hp->n_embd;
    size_t widest = D > c->q_dim ? D : c->q_dim;
    if (hp->n_ff_shexp > widest)
        widest = hp->n_ff_shexp;
    c->act_stride = ALIGN64(mvm_k_act_bytes(MVM_W_F32, widest));
    c->gact_stride = ALIGN64(mvm_k_act_bytes(m->expert_type, D));
    size_t kv = (size_t)hp->n_layer * n_ctx * c->kv_dim * sizeof(float);
    int ok = 1;
    c->kc = buf(kv, &ok);
    c->vc = buf(kv, &ok);
    c->x = buf(B * D * 4, &ok);
    c->xn = buf(B * D * 4, &ok);
    c->tmp = buf(B * D * 4, &ok);
    c->tmp2 = buf(B * D * 4, &ok);
    c->q = buf(B * c->q_dim * 4, &ok);
    c->att = buf(B * c->q_dim * 4, &ok);
    c->k = buf(B * c->kv_dim * 4, &ok);
    c->v = buf(B * c->kv_dim * 4, &ok);
    c->act = buf(B * c->act_stride, &ok);
    c->probs = buf(B * E * 4, &ok);
    c->selw = buf(B * K * 4, &ok);
    c->sel = buf(B * K * sizeof(int), &ok);
    c->selw0 = buf(B * K * 4, &ok);
    c->sel0 = buf(B * K * sizeof(int), &ok);
    c->scratch = buf((size_t)c->nth * n_ctx * 4, &ok);
    c->cnt = buf(E * 4, &ok);
    c->off = buf(E * 4, &ok);
    c->active = buf(E * sizeof(int), &ok);
    c->row_tok = buf(B * K * 4, &ok);
    c->row_w = buf(B * K * 4, &ok);
    c->gact = buf(B * K * c->gact_stride, &ok);
    c->tout = buf((size_t)c->nth * B * K * D * 4, &ok);
    c->tstamp = calloc((size_t)c->nth * B * K, sizeof *c->tstamp);
    if (hp->n_ff_shexp) {
        c->sh1 = buf(B * hp->n_ff_shexp * 4, &ok);
        c->sh3 = buf(B * hp->n_ff_shexp * 4, &ok);
        c->shg = buf(B * 4, &ok);
    }
    if (!ok || !c->tstamp) {
        mvm_ctx_free(c);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a context of %u positions (KV cache "
                        "%.1f MiB)", n_ctx, 2.0 * (double)kv / 1048576.0);
    }
    mvm_ctx_policies pol = policies ? *policies : (mvm_ctx_policies){{0}};
    pol.residency.top_k = hp->n_expert_used;
    pol.residency.n_embd = hp->n_embd;
    pol.residency.n_ff = hp->n_ff_exp;
    int routers = 0;
    mvm_status st = wants_routers(&pol, &routers);
    if (st == MVM_OK && routers)
        st = mvm_model_routers_f32(m, &c->router_table, &c->routers);
    pol.residency.routers = c->routers;
    if (st == MVM_OK)
        st = mvm_resid_create(m->space, &pol.residency, &c->resid);
    if (st == MVM_OK)
        st = mvm_prefetcher_create(m, c->resid, c->routers, &pol.prefetch, &c->prefetch);
    if (st == MVM_OK)
        st = mvm_substitutor_create(c->resid, &pol.routing, &c->subst);
    c->wait_loads = pol.wait_loads != 0;
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
    mvm_substitutor_destroy(c->subst);
    mvm_prefetcher_destroy(c->prefetch);
    mvm_resid_destroy(c->resid);
    free(c->router_table);
    free((void *)c->routers);
    void *bufs[] = {c->kc, c->vc, c->x, c->xn, c->tmp, c->tmp2, c->q, c->att, c->k, c->v,
                    c->act, c->probs, c->selw, c->sel, c->selw0, c->sel0, c->scratch, c->cnt,
                    c->off, c->active, c->row_tok, c->row_w, c->gact, c->tout, c->tstamp, c->sh1,
                    c->sh3, c->shg};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    free(c);
}

void mvm_ctx_set_route_observer(mvm_ctx *c, mvm_route_fn fn, void *fn_ctx)
{
    c->obs = fn;
    c->obs_ctx = fn_ctx;
}

uint32_t mvm_ctx_n_past(const mvm_ctx *c) { return c->n_past; }
void mvm_ctx_reset(mvm_ctx *c) { c->n_past = 0; }
const mvm_resid *mvm_ctx_residency(const mvm_ctx *c) { return c->resid; }
const mvm_prefetcher *mvm_ctx_prefetcher(const mvm_ctx *c) { return c->prefetch; }
const mvm_substitutor *mvm_ctx_substitutor(const mvm_ctx *c) { return c->subst; }

/* ---- matrix products ------------------------------------------------------------------- */

/* src rows (n of `cols` floats, stride `cols`) -> c->act in w's activation format. */
static void prepare(mvm_ctx *c, enum mvm_wtype t, const float *src, uint32_t n, uint32_t cols)
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
static void matmul(mvm_ctx *c, const mvm_weight *w, const float *src, uint32_t n, float *y)
{
    prepare(c, w->type, src, n, w->cols);
    struct mm_job j = {w, c->act, c->act_stride, n, y, w->rows};
    mvm_pool_run(c->pool, mm_run, &j);
}

/* ---- attention ------------------------------------------------------------------------- */

static void qk_norm_rope(mvm_ctx *c, const mvm_layer *L, uint32_t n, uint32_t pos0)
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
        mvm_k_rope(q, hp->n_head, hp->head_dim, hp->n_rot, pos0 + i, hp->rope_base, a->rope_neox);
        mvm_k_rope(k, hp->n_head_kv, hp->head_dim, hp->n_rot, pos0 + i, hp->rope_base,
                   a->rope_neox);
    }
}

struct attn_job {
    mvm_ctx *c;
    const float *kc, *vc; /* this layer's cache */
    uint32_t n, pos0;
};

static void attn_run(void *p, int t, int nth)
{
    const struct attn_job *j = p;
    mvm_ctx *c = j->c;
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

static void attention(mvm_ctx *c, uint32_t il, uint32_t n, uint32_t pos0)
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

/* The router's top-k of every token, then what the route module makes of them. */
static void route(mvm_ctx *c, uint32_t pos0, mvm_pstep *step)
{
    const mvm_hparams *hp = &c->m->hp;
    uint32_t E = hp->n_expert, K = hp->n_expert_used, n = step->n_tok;
    matmul(c, &c->m->layers[step->layer].router, c->xn, n, c->probs);
    for (uint32_t i = 0; i < n; i++) {
        float *p = c->probs + (size_t)i * E, *w = c->selw + (size_t)i * K;
        int *s = c->sel + (size_t)i * K;
        mvm_k_softmax(p, E);
        mvm_k_topk(p, E, K, s);
        float sum = 0;
        for (uint32_t k = 0; k < K; k++)
            sum += w[k] = p[s[k]];
        if (c->m->arch->norm_topk)
            for (uint32_t k = 0; k < K; k++)
                w[k] /= sum;
    }
    size_t nk = (size_t)n * K;
    if (c->obs && c->subst) {
        memcpy(c->sel0, c->sel, nk * sizeof *c->sel);
        memcpy(c->selw0, c->selw, nk * sizeof *c->selw);
    }
    uint32_t changed = mvm_substitutor_route(c->subst, step);
    for (uint32_t i = 0; i < n && c->obs; i++) {
        const int *s = c->sel + (size_t)i * K, *s0 = changed ? c->sel0 + (size_t)i * K : s;
        const float *w = c->selw + (size_t)i * K, *w0 = changed ? c->selw0 + (size_t)i * K : w;
        int same = memcmp(s, s0, K * sizeof *s) == 0;
        mvm_route_record r = {.pos = pos0 + i, .layer = step->layer, .n_expert = E, .k = K,
                              .n_embd = hp->n_embd, .probs = c->probs + (size_t)i * E,
                              .selected = s0, .weights = w0, .ran = same ? NULL : s,
                              .ran_weights = same ? NULL : w,
                              .hidden = c->xn + (size_t)i * hp->n_embd};
        c->obs(c->obs_ctx, &r);
    }
}

/* Groups the (token, expert) pairs by expert: rows off[e] .. off[e]+cnt[e]. */
static void dispatch(mvm_ctx *c, uint32_t n)
{
    const mvm_hparams *hp = &c->m->hp;
    uint32_t E = hp->n_expert, K = hp->n_expert_used;
    memset(c->cnt, 0, E * sizeof *c->cnt);
    for (uint32_t r = 0; r < n * K; r++)
        c->cnt[c->sel[r]]++;
    c->n_active = 0;
    for (uint32_t e = 0, o = 0; e < E; e++) {
        c->off[e] = o;
        o += c->cnt[e];
        if (c->cnt[e])
            c->active[c->n_active++] = (int32_t)e;
    }
    /* The activations once in the experts' format, then copied to their rows. */
    prepare(c, c->m->expert_type, c->xn, n, hp->n_embd);
    size_t ab = mvm_k_act_bytes(c->m->expert_type, hp->n_embd);
    memset(c->cnt, 0, E * sizeof *c->cnt);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < K; k++) {
            uint32_t e = (uint32_t)c->sel[i * K + k], r = c->off[e] + c->cnt[e]++;
            c->row_tok[r] = i;
            c->row_w[r] = c->selw[i * K + k];
            memcpy(c->gact + r * c->gact_stride, c->act + i * c->act_stride, ab);
        }
    /* Work units: each active expert's groups in equal ranges, about 8 units per thread
     * in all, interleaved over threads so experts with many tokens spread over all. */
    uint32_t want = (uint32_t)c->nth * 8 / c->n_active + 1;
    c->units_per_expert = want < c->n_groups ? want : c->n_groups;
    c->groups_per_unit = (c->n_groups + c->units_per_expert - 1) / c->units_per_expert;
    c->units_per_expert = (c->n_groups + c->groups_per_unit - 1) / c->groups_per_unit;
}

struct moe_job {
    mvm_ctx *c;
    uint32_t layer;
};

static void experts_run(void *p, int t, int nth)
{
    const struct moe_job *j = p;
    mvm_ctx *c = j->c;
    const mvm_hparams *hp = &c->m->hp;
    size_t rows = (size_t)c->n_batch * hp->n_expert_used;
    float *tout = c->tout + (size_t)t * rows * hp->n_embd;
    uint32_t *stamp = c->tstamp + (size_t)t * rows;
    uint32_t n_units = c->n_active * c->units_per_expert;
    for (uint32_t u = (uint32_t)t; u < n_units; u += (uint32_t)nth) {
        uint32_t e = (uint32_t)c->active[u / c->units_per_expert];
        uint32_t g0 = (u % c->units_per_expert) * c->groups_per_unit;
        uint32_t g1 = g0 + c->groups_per_unit < c->n_groups ? g0 + c->groups_per_unit : c->n_groups;
        uint32_t r0 = c->off[e], nr = c->cnt[e];
        for (uint32_t r = r0; r < r0 + nr; r++)
            if (stamp[r] != c->stamp) {
                stamp[r] = c->stamp;
                memset(tout + (size_t)r * hp->n_embd, 0, hp->n_embd * sizeof(float));
            }
        const void *w = mvm_expert_addr(c->m->space, j->layer, e);
        if (nr == 1)
            mvm_k_expert_ffn(c->m->expert_type, w, hp->n_embd, c->gact + r0 * c->gact_stride,
                             c->row_w[r0], tout + (size_t)r0 * hp->n_embd, g0, g1);
        else
            mvm_k_expert_ffn_batch(c->m->expert_type, w, hp->n_embd,
                                   c->gact + r0 * c->gact_stride, c->gact_stride, c->row_w + r0,
                                   nr, tout + (size_t)r0 * hp->n_embd, hp->n_embd, g0, g1);
    }
}

struct reduce_job {
    mvm_ctx *c;
    uint32_t n;
};

/* x[token] += the rows' partial outputs of every thread; split by columns. */
static void reduce_run(void *p, int t, int nth)
{
    const struct reduce_job *j = p;
    mvm_ctx *c = j->c;
    const mvm_hparams *hp = &c->m->hp;
    size_t d0, d1, rows = (size_t)c->n_batch * hp->n_expert_used;
    mvm_pool_split(hp->n_embd, t, nth, &d0, &d1);
    for (uint32_t r = 0; r < j->n * hp->n_expert_used; r++) {
        float *x = c->x + (size_t)c->row_tok[r] * hp->n_embd;
        for (int s = 0; s < c->nth; s++) {
            if (c->tstamp[(size_t)s * rows + r] != c->stamp)
                continue;
            const float *o = c->tout + ((size_t)s * rows + r) * hp->n_embd;
            for (size_t d = d0; d < d1; d++)
                x[d] += o[d];
        }
    }
}

static void shared_expert(mvm_ctx *c, const mvm_layer *L, uint32_t n)
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

static mvm_status moe(mvm_ctx *c, uint32_t il, uint32_t n, uint32_t pos0)
{
    const mvm_hparams *hp = &c->m->hp;
    const mvm_layer *L = &c->m->layers[il];
    for (uint32_t i = 0; i < n; i++)
        mvm_k_rmsnorm(c->xn + (size_t)i * hp->n_embd, c->x + (size_t)i * hp->n_embd,
                      L->ffn_norm, hp->n_embd, hp->rms_eps);
    mvm_pstep step = {.layer = il, .n_tok = n, .scores = c->probs, .experts = c->sel,
                      .weights = c->selw, .hidden = c->xn, .counts = c->cnt};
    route(c, pos0, &step);
    dispatch(c, n);
    mvm_status st = mvm_resid_begin(c->resid, il, c->active, c->n_active, c->wait_loads);
    if (st != MVM_OK)
        return st;
    /* The next layer's copies overlap this layer's compute; a failed one ends the pass
     * after this step, which must still run and end (its experts are pinned). */
    mvm_status ahead = mvm_prefetcher_ahead(c->prefetch, &step);
    c->stamp++;
    struct moe_job j = {c, il};
    mvm_pool_run(c->pool, experts_run, &j);
    struct reduce_job r = {c, n};
    mvm_pool_run(c->pool, reduce_run, &r);
    st = mvm_resid_end(c->resid, &step, c->active, c->n_active, il + 1 == hp->n_layer);
    mvm_prefetcher_observe(c->prefetch, &step);
    if (st == MVM_OK)
        st = ahead;
    if (st == MVM_OK && hp->n_ff_shexp)
        shared_expert(c, L, n);
    return st;
}

/* ---- the whole pass -------------------------------------------------------------------- */

static mvm_status eval_batch(mvm_ctx *c, const int32_t *tokens, uint32_t n, float *logits,
                             int all_logits)
{
    const mvm_model *m = c->m;
    const mvm_hparams *hp = &m->hp;
    uint32_t pos0 = c->n_past;
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
    c->n_past += n;
    if (!logits)
        return MVM_OK;
    uint32_t first = all_logits ? 0 : n - 1, nl = n - first;
    for (uint32_t i = first; i < n; i++)
        mvm_k_rmsnorm(c->xn + (size_t)(i - first) * hp->n_embd, c->x + (size_t)i * hp->n_embd,
                      m->output_norm, hp->n_embd, hp->rms_eps);
    matmul(c, &m->output, c->xn, nl, logits);
    return MVM_OK;
}

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
        mvm_status st = eval_batch(c, tokens + done, nb, lg, all_logits);
        if (st != MVM_OK)
            return st;
        done += nb;
    }
    return MVM_OK;
}
