/*
 * The host side of an MoE step (moe_step.h): routing, grouping and residency, shared by the
 * CPU and device forward passes so that both run the policy modules the same way.
 */
#include "engine/moe_step.h"

#include <stdlib.h>
#include <string.h>

#include "engine/choose.h"
#include "vmm/error.h"

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

static mvm_status create_policies(mvm_moe *s, const mvm_ctx_policies *policies)
{
    const mvm_hparams *hp = &s->m->hp;
    mvm_ctx_policies pol = policies ? *policies : (mvm_ctx_policies){{0}};
    pol.residency.top_k = hp->n_expert_used;
    pol.residency.n_embd = hp->n_embd;
    pol.residency.n_ff = hp->n_ff_exp;
    int routers = 0;
    mvm_status st = wants_routers(&pol, &routers);
    if (st == MVM_OK && routers)
        st = mvm_model_routers_f32(s->m, &s->router_table, &s->routers);
    pol.residency.routers = s->routers;
    if (st == MVM_OK)
        st = mvm_resid_create(s->m->space, &pol.residency, &s->resid);
    if (st == MVM_OK)
        st = mvm_prefetcher_create(s->m, s->resid, s->routers, &pol.prefetch, &s->prefetch);
    if (st == MVM_OK)
        st = mvm_substitutor_create(s->resid, &pol.routing, &s->subst);
    s->wait = pol.wait_loads;
    return st;
}

mvm_status mvm_moe_create(mvm_model *m, uint32_t n_batch, const mvm_ctx_policies *policies,
                          int device_reader, mvm_moe **out)
{
    *out = NULL;
    mvm_moe *s = calloc(1, sizeof *s);
    if (!s)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the MoE step");
    s->m = m;
    s->n_batch = n_batch;
    s->rounds = device_reader;
    size_t B = n_batch, K = m->hp.n_expert_used, E = m->hp.n_expert;
    s->probs = malloc(B * E * sizeof *s->probs);
    s->sel = malloc(B * K * sizeof *s->sel);
    s->selw = malloc(B * K * sizeof *s->selw);
    s->sel0 = malloc(B * K * sizeof *s->sel0);
    s->selw0 = malloc(B * K * sizeof *s->selw0);
    s->cnt = malloc(E * sizeof *s->cnt);
    s->off = malloc(E * sizeof *s->off);
    s->active = malloc(E * sizeof *s->active);
    s->todo = malloc(E * sizeof *s->todo);
    s->row_tok = malloc(B * K * sizeof *s->row_tok);
    s->tok_rows = malloc(B * K * sizeof *s->tok_rows);
    s->row_w = malloc(B * K * sizeof *s->row_w);
    mvm_status st = MVM_OK;
    if (!s->probs || !s->sel || !s->selw || !s->sel0 || !s->selw0 || !s->cnt || !s->off ||
        !s->active || !s->todo || !s->row_tok || !s->tok_rows || !s->row_w)
        st = mvm_fail(MVM_ERR_NOMEM, "out of memory for the MoE step of %u tokens", n_batch);
    if (st == MVM_OK)
        st = create_policies(s, policies);
    if (st != MVM_OK) {
        mvm_moe_free(s);
        return st;
    }
    *out = s;
    return MVM_OK;
}

void mvm_moe_free(mvm_moe *s)
{
    if (!s)
        return;
    mvm_substitutor_destroy(s->subst);
    mvm_prefetcher_destroy(s->prefetch);
    mvm_resid_destroy(s->resid);
    free(s->router_table);
    free((void *)s->routers);
    void *bufs[] = {s->probs, s->sel, s->selw, s->sel0, s->selw0, s->cnt, s->off, s->active,
                    s->todo, s->row_tok, s->tok_rows, s->row_w};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    free(s);
}

/* Every token's top-k, then what the route module makes of them, shown to the observer. */
static void route(mvm_moe *s, uint32_t pos0)
{
    const mvm_hparams *hp = &s->m->hp;
    uint32_t E = hp->n_expert, K = hp->n_expert_used, n = s->step.n_tok;
    for (uint32_t i = 0; i < n; i++) {
        float *p = s->probs + (size_t)i * E, *w = s->selw + (size_t)i * K;
        int *sel = s->sel + (size_t)i * K;
        mvm_k_softmax(p, E);
        mvm_k_topk(p, E, K, sel);
        float sum = 0;
        for (uint32_t k = 0; k < K; k++)
            sum += w[k] = p[sel[k]];
        if (s->m->arch->norm_topk)
            for (uint32_t k = 0; k < K; k++)
                w[k] /= sum;
    }
    size_t nk = (size_t)n * K;
    if (s->obs && s->subst) {
        memcpy(s->sel0, s->sel, nk * sizeof *s->sel);
        memcpy(s->selw0, s->selw, nk * sizeof *s->selw);
    }
    uint32_t changed = mvm_substitutor_route(s->subst, &s->step);
    for (uint32_t i = 0; i < n && s->obs; i++) {
        const int *sel = s->sel + (size_t)i * K, *s0 = changed ? s->sel0 + (size_t)i * K : sel;
        const float *w = s->selw + (size_t)i * K, *w0 = changed ? s->selw0 + (size_t)i * K : w;
        int same = memcmp(sel, s0, K * sizeof *sel) == 0;
        mvm_route_record r = {.pos = pos0 + i, .layer = s->step.layer, .n_expert = E, .k = K,
                              .n_embd = hp->n_embd, .probs = s->probs + (size_t)i * E,
                              .selected = s0, .weights = w0, .ran = same ? NULL : sel,
                              .ran_weights = same ? NULL : w,
                              .hidden = s->step.hidden + (size_t)i * hp->n_embd};
        s->obs(s->obs_ctx, &r);
    }
}

/* Groups the (token, expert) pairs by expert. */
static void group(mvm_moe *s)
{
    const mvm_hparams *hp = &s->m->hp;
    uint32_t E = hp->n_expert, K = hp->n_expert_used, n = s->step.n_tok;
    memset(s->cnt, 0, E * sizeof *s->cnt);
    for (uint32_t r = 0; r < n * K; r++)
        s->cnt[s->sel[r]]++;
    s->n_active = 0;
    for (uint32_t e = 0, o = 0; e < E; e++) {
        s->off[e] = o;
        o += s->cnt[e];
        if (s->cnt[e])
            s->active[s->n_active++] = (int32_t)e;
    }
    memset(s->cnt, 0, E * sizeof *s->cnt); /* counts again as the rows are placed */
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < K; k++) {
            uint32_t e = (uint32_t)s->sel[i * K + k], r = s->off[e] + s->cnt[e]++;
            s->row_tok[r] = i;
            s->row_w[r] = s->selw[i * K + k];
            s->tok_rows[i * K + k] = r;
        }
}

void mvm_moe_route(mvm_moe *s, uint32_t layer, uint32_t pos0, uint32_t n,
                   const float *hidden)
{
    s->step = (mvm_pstep){.layer = layer, .n_tok = n, .scores = s->probs, .experts = s->sel,
                          .weights = s->selw, .hidden = hidden, .counts = s->cnt};
    route(s, pos0);
    group(s);
}

/* Pins the next round of a step in rounds; once it is the last, the predictor's copies for
 * the next layer may start: they then overlap this round's compute and take no room an
 * earlier round needs. */
static mvm_status begin_round(mvm_moe *s)
{
    s->round = s->todo + s->n_run;
    mvm_status st = mvm_resid_begin_round(s->resid, s->step.layer, s->todo + s->n_run,
                                          s->n_active - s->n_run, &s->n_round);
    if (st == MVM_OK && s->n_run + s->n_round == s->n_active)
        s->ahead = mvm_prefetcher_ahead(s->prefetch, &s->step);
    s->begun = st == MVM_OK;
    return st;
}

mvm_status mvm_moe_begin(mvm_moe *s)
{
    s->n_run = 0;
    s->ahead = MVM_OK;
    if (s->rounds) {
        memcpy(s->todo, s->active, s->n_active * sizeof *s->todo);
        return begin_round(s);
    }
    s->round = s->active;
    s->n_round = s->n_active;
    mvm_status st = mvm_resid_begin(s->resid, s->step.layer, s->active, s->n_active, s->wait);
    /* The next layer's copies overlap this layer's compute; a failed one ends the pass
     * after this step, which must still run and end (its experts are pinned). */
    if (st == MVM_OK)
        s->ahead = mvm_prefetcher_ahead(s->prefetch, &s->step);
    s->begun = st == MVM_OK;
    return st;
}

mvm_status mvm_moe_next_round(mvm_moe *s)
{
    s->n_run += s->n_round;
    if (s->n_run == s->n_active) {
        s->n_round = 0; /* the last round stays pinned until the step ends */
        return MVM_OK;
    }
    mvm_resid_release(s->resid, s->step.layer, s->round, s->n_round);
    return begin_round(s);
}

mvm_status mvm_moe_end(mvm_moe *s)
{
    if (!s->begun)
        return MVM_OK; /* its begin or a round failed: nothing to report or unpin */
    s->begun = 0;
    uint32_t layer = s->step.layer;
    mvm_status st = mvm_resid_end(s->resid, &s->step, s->active, s->n_active,
                                  layer + 1 == s->m->hp.n_layer);
    mvm_prefetcher_observe(s->prefetch, &s->step);
    return st == MVM_OK ? s->ahead : st;
}
