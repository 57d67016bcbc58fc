/*
 * The host side of an MoE step (moe_step.h): routing, grouping and residency, shared by the
 * CPU and device forward passes so that both run the policy modules the same way.
 */
#include "engine/forward/moe_step.h"

#include <stdlib.h>
#include <string.h>

#include "policy/choose.h"
#include "policy/router.h"
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

/* With every expert read at its home nothing moves, so a module whose only effect is on
 * moves (or, beside a GPU, on where experts run) would be a choice silently ignored:
 * refused, naming it. */
static mvm_status check_at_home(mvm_moe *s)
{
    const struct { const char *role, *name, *idle, *what; } roles[] = {
        {"predict", mvm_prefetcher_name(s->prefetch), "none", "prefetch"},
        {"route", mvm_substitutor_name(s->subst), "none", "substitute"},
        {"config", mvm_resid_config_name(s->resid), "none", "divide"},
        {"assign", s->on_device ? mvm_resid_assign_name(s->resid) : "gpu", "gpu", "place"}};
    /* beside a GPU: --n-cpu-moe at least the layers */
    const char *why = s->on_device ? "with --n-cpu-moe at least the layers the CPU computes "
                                     "every expert at its home"
                                   : "on the host backend with no budget every expert is read "
                                     "at its home";
    const char *fix = s->on_device ? "keep fewer layers' experts on the CPU, or give a budget "
                                     "(--gpu-budget)"
                                   : "give a budget to emulate a device (--gpu-budget or "
                                     "MOEVM_GPU_BUDGET, e.g. 100%)";
    for (size_t i = 0; i < sizeof roles / sizeof *roles; i++)
        if (strcmp(roles[i].name, roles[i].idle) != 0)
            return mvm_fail(MVM_ERR_INVALID, "%s %s: %s and nothing moves, so there is nothing "
                            "to %s; %s", roles[i].role, roles[i].name, why, roles[i].what, fix);
    return MVM_OK;
}

static mvm_status create_policies(mvm_moe *s, const mvm_ctx_policies *policies)
{
    const mvm_hparams *hp = &s->m->hp;
    mvm_ctx_policies pol = policies ? *policies : (mvm_ctx_policies){{0}};
    pol.residency.top_k = hp->n_expert_used;
    pol.residency.n_embd = hp->n_embd;
    pol.residency.n_ff = hp->n_ff_exp;
    pol.residency.on_device = s->on_device;
    pol.residency.at_home = s->m->experts_at_home; /* beside a GPU too (cpu_moe) */
    int routers = 0;
    mvm_status st = wants_routers(&pol, &routers);
    if (st == MVM_OK)
        st = mvm_model_router_init(s->m, routers, &s->router);
    pol.residency.router = &s->router.r;
    if (st == MVM_OK)
        st = mvm_resid_create(s->m->space, &pol.residency, &s->resid);
    if (st == MVM_OK)
        st = mvm_prefetcher_create(s->m, s->resid, &s->router.r, &pol.prefetch,
                                   &s->prefetch);
    if (st == MVM_OK)
        st = mvm_substitutor_create(s->resid, &pol.routing, &s->subst);
    if (st == MVM_OK && pol.residency.at_home)
        st = check_at_home(s);
    s->wait = pol.wait_loads;
    s->route_override = pol.route_override;
    s->route_override_ctx = pol.route_override_ctx;
    /* Forecasts beyond the next layer only for a module that plans with them: "gpu" does
     * not, and a gate forecast costs a router pass per layer. */
    s->n_forecast = st == MVM_OK && strcmp(mvm_resid_assign_name(s->resid), "gpu") != 0 &&
                    strcmp(mvm_resid_assign_name(s->resid), "none") != 0 ? MVM_ASSIGN_AHEAD : 1;
    return st;
}

mvm_status mvm_moe_create(mvm_model *m, uint32_t n_batch, const mvm_ctx_policies *policies,
                          int on_device, int home_mapped, int home_readable, mvm_moe **out)
{
    *out = NULL;
    mvm_moe *s = calloc(1, sizeof *s);
    if (!s)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the MoE step");
    s->m = m;
    s->n_batch = n_batch;
    s->on_device = on_device;
    s->rounds = on_device && !home_mapped;
    s->zerocopy = on_device && (home_mapped || home_readable);
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
    s->cpu = malloc(E * sizeof *s->cpu);
    s->where = malloc(E);
    s->landed = malloc(E);
    s->row_tok = malloc(B * K * sizeof *s->row_tok);
    s->tok_rows = malloc(B * K * sizeof *s->tok_rows);
    s->row_w = malloc(B * K * sizeof *s->row_w);
    s->choose = malloc(2 * E * sizeof *s->choose);
    mvm_status st = MVM_OK;
    if (!s->probs || !s->sel || !s->selw || !s->sel0 || !s->selw0 || !s->cnt || !s->off ||
        !s->active || !s->todo || !s->cpu || !s->where || !s->landed || !s->row_tok ||
        !s->tok_rows ||
        !s->row_w || !s->choose)
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
    mvm_model_router_free(&s->router);
    void *bufs[] = {s->probs, s->sel, s->selw, s->sel0, s->selw0, s->cnt, s->off, s->active,
                    s->todo, s->cpu, s->where, s->landed, s->row_tok, s->tok_rows, s->row_w,
                    s->choose};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    free(s);
}

/* One token's router logits p -> probabilities, in place. */
static void token_probs(mvm_moe *s, float *p)
{
    const mvm_hparams *hp = &s->m->hp;
    if (hp->sigmoid_gate)
        mvm_router_probs(&s->router.r, p, hp->n_expert);
    else
        mvm_k_softmax(p, hp->n_expert); /* the forward pass's softmax: the weights' numbers */
}

/* One token's router logits p -> probabilities (in place), its experts and their weights. */
static void route_token(mvm_moe *s, float *p, int *sel, float *w)
{
    const mvm_hparams *hp = &s->m->hp;
    const uint32_t E = hp->n_expert, K = hp->n_expert_used;
    token_probs(s, p);
    const float *key = p;
    if (mvm_router_keyed(&s->router.r, s->step.layer)) { /* the weights stay the probabilities */
        mvm_router_key(&s->router.r, s->step.layer, p, E, s->choose, s->choose + E);
        key = s->choose;
    }
    mvm_k_topk(key, E, K, sel);
    float sum = 0;
    for (uint32_t k = 0; k < K; k++)
        sum += w[k] = p[sel[k]];
    if (hp->norm_topk)
        for (uint32_t k = 0; k < K; k++)
            w[k] /= sum;
    for (uint32_t k = 0; hp->expert_scale != 1.0f && k < K; k++)
        w[k] *= hp->expert_scale;
}

/* Every token's top-k (given: the device's, [n][K] with their weights; else the host's),
 * then what the route module makes of them, shown to the observer. */
static void route(mvm_moe *s, const uint32_t *pos, const int32_t *given, const float *given_w)
{
    const mvm_hparams *hp = &s->m->hp;
    uint32_t E = hp->n_expert, K = hp->n_expert_used, n = s->step.n_tok;
    for (uint32_t i = 0; i < n; i++) {
        if (given) { /* the probabilities are the host's (the observer's); no top-k to take */
            token_probs(s, s->probs + (size_t)i * E);
            memcpy(s->sel + (size_t)i * K, given + (size_t)i * K, K * sizeof *s->sel);
            memcpy(s->selw + (size_t)i * K, given_w + (size_t)i * K, K * sizeof *s->selw);
        } else {
            route_token(s, s->probs + (size_t)i * E, s->sel + (size_t)i * K,
                        s->selw + (size_t)i * K);
        }
        if (s->route_override)
            s->route_override(s->route_override_ctx, s->step.layer, pos ? pos[i] : i,
                              s->sel + (size_t)i * K, s->selw + (size_t)i * K);
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
        mvm_route_record r = {.pos = pos ? pos[i] : i, .layer = s->step.layer, .n_expert = E, .k = K,
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
    s->n_remote = 0;
    if (s->remote) { /* a stable split: those held here first */
        const uint8_t *far = s->remote + (size_t)s->step.layer * E;
        uint32_t n_local = 0;
        for (uint32_t i = 0; i < s->n_active; i++)
            if (far[s->active[i]])
                s->todo[s->n_remote++] = s->active[i];
            else
                s->active[n_local++] = s->active[i];
        memcpy(s->active + n_local, s->todo, s->n_remote * sizeof *s->todo);
        s->n_active = n_local;
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

void mvm_moe_route(mvm_moe *s, uint32_t layer, const uint32_t *pos, uint32_t n,
                   const float *hidden)
{
    mvm_moe_route_as(s, layer, pos, n, hidden, NULL, NULL);
}

void mvm_moe_route_as(mvm_moe *s, uint32_t layer, const uint32_t *pos, uint32_t n,
                      const float *hidden, const int32_t *sel, const float *w)
{
    s->step = (mvm_pstep){.layer = layer, .n_tok = n, .scores = s->probs, .experts = s->sel,
                          .weights = s->selw, .hidden = hidden, .counts = s->cnt};
    s->serving = 0;
    route(s, pos, sel, w);
    group(s);
}

int mvm_moe_routes_alone(const mvm_moe *s)
{
    return !s->elsewhere && !s->remote && !mvm_prefetcher_speculative(s->prefetch);
}

int mvm_moe_override(const mvm_moe *s, uint32_t layer, uint32_t pos, int *sel, float *w)
{
    if (!s->route_override)
        return 0;
    for (uint32_t k = 0; k < s->m->hp.n_expert_used; k++)
        sel[k] = -1, w[k] = 0; /* the router's choice is not known yet */
    s->route_override(s->route_override_ctx, layer, pos, sel, w);
    return 1;
}

int mvm_moe_overridden(const mvm_moe *s) { return s->route_override != NULL; }

mvm_status mvm_moe_take_rows(mvm_moe *s, uint32_t layer, uint32_t n, const float *hidden,
                             const int32_t *experts, uint32_t n_exp, const uint32_t *cnt,
                             const uint32_t *off, const uint32_t *row_tok, const float *row_w)
{
    const uint32_t E = s->m->hp.n_expert, K = s->m->hp.n_expert_used;
    s->step = (mvm_pstep){.layer = layer, .n_tok = n, .experts = s->sel, .weights = s->selw,
                          .hidden = hidden, .counts = s->cnt};
    s->serving = 1;
    s->n_remote = 0;
    memset(s->cnt, 0, E * sizeof *s->cnt);
    for (uint32_t i = 0; i < n_exp; i++)
        s->cnt[experts[i]] = cnt[experts[i]];
    s->n_active = 0;
    for (uint32_t e = 0, o = 0; e < E; e++) { /* regrouped in expert order */
        s->off[e] = o;
        for (uint32_t j = 0; j < s->cnt[e]; j++, o++) {
            s->row_tok[o] = row_tok[off[e] + j];
            s->row_w[o] = row_w[off[e] + j];
        }
        if (s->cnt[e])
            s->active[s->n_active++] = (int32_t)e;
    }
    for (uint32_t r = 0; r < n * K; r++) {
        s->sel[r] = -1;
        s->selw[r] = 0;
        s->tok_rows[r] = MVM_MOE_NO_ROW;
    }
    for (uint32_t i = 0; i < s->n_active; i++) {
        uint32_t e = (uint32_t)s->active[i];
        for (uint32_t r = s->off[e]; r < s->off[e] + s->cnt[e]; r++) {
            uint32_t t = s->row_tok[r], k = 0;
            while (k < K && s->sel[t * K + k] >= 0)
                k++;
            if (k == K)
                return mvm_fail(MVM_ERR_INVALID, "more than %u rows of token %u in a step of "
                                "layer %u", K, t, layer);
            s->sel[t * K + k] = (int32_t)e;
            s->selw[t * K + k] = s->row_w[r];
            s->tok_rows[t * K + k] = r;
        }
    }
    return MVM_OK;
}

/* The predictor of this step: none for one served to another rank (mvm_moe_take_rows),
 * whose tokens are another request stream's, at one layer only. */
static mvm_prefetcher *forecaster(const mvm_moe *s)
{
    return s->serving ? NULL : s->prefetch;
}

/* Once the step's experts are all pinned: the assign module's plan, or without one the
 * predictor's copies for the next layer, as the simulator does. They overlap the step's
 * compute and take no room it needs. */
static void start_ahead(mvm_moe *s)
{
    /* a speculative module's forecast waits for the backend's pass (mvm_moe_speculate) */
    s->ahead = s->n_plan || mvm_moe_speculates(s) ? MVM_OK
                                                  : mvm_prefetcher_ahead(forecaster(s), &s->step);
    mvm_status st = MVM_OK;
    for (uint32_t i = 0; i < s->n_plan && st == MVM_OK && s->ahead == MVM_OK; i++) {
        uint32_t E = s->m->hp.n_expert;
        st = mvm_resid_prefetch_planned(s->resid, s->plan[i] / E, s->plan[i] % E);
        if (st != MVM_ERR_NOSPACE) /* no room is not an error: the plan waits */
            s->ahead = st;
    }
}

/* Asks for the next round of a step in rounds and pins its landed part (the last round
 * starts the copies ahead: queued behind the round's, at prefetch priority, and in room
 * the step no longer needs). */
static mvm_status begin_round(mvm_moe *s)
{
    /* the first round begins with the experts read at their homes (place): nothing to load,
     * they are ready at once */
    const uint32_t home = s->n_run ? 0 : s->n_home;
    s->round = s->todo + s->n_run;
    s->round_home = home;
    mvm_status st = mvm_resid_begin_round(s->resid, s->step.layer, s->todo + s->n_run + home,
                                          s->n_todo - s->n_run - home, &s->n_round, &s->n_ready);
    s->n_round += home;
    s->n_ready += home;
    if (st == MVM_OK && s->n_run + s->n_round == s->n_todo)
        start_ahead(s);
    s->begun = st == MVM_OK;
    return st;
}

/* Where the step's experts run: todo[0..n_todo) on the GPU (those read from their homes
 * first, n_home of them, then those to load or resident), cpu[0..n_cpu) on the CPU. A
 * device that cannot read the homes runs on the CPU what the module would read there. */
/* A step the device routed at a budget (mvm_moe.replay_own): each expert where it ran, by
 * the device's kernels or the CPU's threads. One read resident that something has evicted
 * since (its kernels ran before) is placed at its home, so that the replay asks for no load
 * (the residency holds the replay's own loads back until its end: mvm_resid_defer_loads). */
static void replay_places(mvm_moe *s)
{
    for (uint32_t i = 0; i < s->n_active; i++) {
        const uint32_t e = (uint32_t)s->active[i];
        s->where[e] = s->replay_own[e] == 2 ? MVM_RUN_CPU
                      : s->replay_own[e] && mvm_resid_landed(s->resid, s->step.layer, e)
                          ? MVM_RUN_GPU
                          : MVM_RUN_ZEROCOPY;
    }
}

static void place(mvm_moe *s)
{
    s->n_todo = s->n_cpu = s->n_home = 0;
    s->n_plan = 0;
    if (!s->on_device) {
        memcpy(s->todo, s->active, s->n_active * sizeof *s->todo);
        s->n_todo = s->n_active;
        return;
    }
    if (s->m->experts_at_home) { /* beside a GPU (cpu_moe): every expert on the CPU */
        memcpy(s->cpu, s->active, s->n_active * sizeof *s->cpu);
        s->n_cpu = s->n_active;
        return;
    }
    if (s->replay_own) /* where the device read them: nothing to plan */
        replay_places(s);
    else {
        const float *ahead;
        uint32_t n_ahead =
            mvm_prefetcher_predict(forecaster(s), &s->step, s->n_forecast, &ahead);
        s->n_plan = mvm_resid_assign(s->resid, &s->step, ahead, n_ahead, s->where, &s->plan);
    }
    for (uint32_t i = 0; i < s->n_active; i++) {
        int32_t e = s->active[i];
        if (s->where[e] == MVM_RUN_ZEROCOPY && !s->zerocopy)
            s->where[e] = MVM_RUN_CPU;
        if (s->where[e] == MVM_RUN_ZEROCOPY)
            s->todo[s->n_home++] = e;
    }
    s->n_todo = s->n_home;
    for (uint32_t i = 0; i < s->n_active; i++) {
        int32_t e = s->active[i];
        if (s->where[e] == MVM_RUN_CPU)
            s->cpu[s->n_cpu++] = e;
        else if (s->where[e] != MVM_RUN_ZEROCOPY)
            s->todo[s->n_todo++] = e;
    }
}

/* s->landed: which of the step's experts are resident, whole and landed, before it moves
 * any (SMoE's "experts in GPU memory", whose outputs its speculative pass reads). */
static void note_landed(mvm_moe *s)
{
    const uint32_t E = s->m->hp.n_expert, layer = s->step.layer;
    const mvm_pview *v = mvm_resid_landed_view(s->resid, layer);
    memset(s->landed, 0, E);
    for (uint32_t i = 0; i < s->n_active; i++) {
        uint32_t e = (uint32_t)s->active[i];
        s->landed[e] = v->resident[(size_t)layer * E + e] >= v->shape->pages_per_expert;
    }
}

mvm_status mvm_moe_begin(mvm_moe *s)
{
    s->n_run = 0;
    s->ahead = MVM_OK;
    if (mvm_moe_speculates(s))
        note_landed(s);
    mvm_prefetcher_cut(forecaster(s), &s->step);
    uint32_t layer = s->step.layer;
    place(s);
    const int missed = s->replay_own != NULL; /* read at home when it ran */
    mvm_status st = mvm_resid_begin_home(s->resid, layer, s->cpu, s->n_cpu, 0, missed);
    if (st == MVM_OK &&
        (st = mvm_resid_begin_home(s->resid, layer, s->todo, s->n_home, 1, missed)) != MVM_OK)
        mvm_resid_release(s->resid, layer, s->cpu, s->n_cpu);
    if (st != MVM_OK)
        return st;
    if (s->rounds)
        st = begin_round(s);
    else if ((st = mvm_resid_begin(s->resid, layer, s->todo + s->n_home, s->n_todo - s->n_home,
                                   s->wait)) == MVM_OK) {
        s->round = s->todo;
        s->round_home = s->n_home;
        s->n_round = s->n_ready = s->n_todo;
        start_ahead(s);
    }
    s->begun = st == MVM_OK;
    if (st != MVM_OK) {
        mvm_resid_release(s->resid, layer, s->cpu, s->n_cpu);
        mvm_resid_release(s->resid, layer, s->todo, s->n_home);
    }
    return st;
}

int mvm_moe_speculates(const mvm_moe *s)
{
    return mvm_prefetcher_speculative(forecaster(s)) && s->step.layer + 1 < s->m->hp.n_layer;
}

void mvm_moe_speculate(mvm_moe *s, const float *next_hidden)
{
    s->step.next_hidden = next_hidden;
    s->ahead = mvm_prefetcher_ahead(s->prefetch, &s->step);
    s->step.next_hidden = NULL;
}

mvm_status mvm_moe_hold(mvm_moe *s)
{
    if (s->n_ready == s->n_round)
        return MVM_OK;
    mvm_status st = mvm_resid_hold_round(s->resid, s->step.layer, s->round + s->round_home,
                                         s->n_ready - s->round_home,
                                         s->n_round - s->round_home);
    s->n_ready = s->n_round;
    return st;
}

mvm_status mvm_moe_next_round(mvm_moe *s)
{
    s->n_run += s->n_round;
    if (s->n_run == s->n_todo) {
        s->n_round = s->n_ready = 0; /* the last round stays pinned until the step ends */
        return MVM_OK;
    }
    mvm_resid_release(s->resid, s->step.layer, s->round, s->n_round);
    mvm_status st = begin_round(s);
    if (st != MVM_OK) /* nothing of the step stays pinned or shielded */
        mvm_resid_release(s->resid, s->step.layer, s->cpu, s->n_cpu);
    return st;
}

mvm_status mvm_moe_replay(mvm_moe *s)
{
    mvm_status st = mvm_moe_begin(s);
    while (st == MVM_OK && s->n_round) {
        st = mvm_moe_hold(s);
        st = st == MVM_OK ? mvm_moe_next_round(s) : st;
    }
    mvm_status ended = mvm_moe_end(s);
    return st != MVM_OK ? st : ended;
}

void mvm_moe_observe(mvm_moe *s)
{
    if (s->begun)
        mvm_resid_observe(s->resid, &s->step);
}

mvm_status mvm_moe_end(mvm_moe *s)
{
    if (!s->begun)
        return MVM_OK; /* its begin or a round failed: nothing to report or unpin */
    s->begun = 0;
    uint32_t layer = s->step.layer;
    mvm_status st = mvm_resid_end(s->resid, &s->step, s->active, s->n_active,
                                  layer + 1 == s->m->hp.n_layer);
    mvm_prefetcher_observe(forecaster(s), &s->step);
    return st == MVM_OK ? s->ahead : st;
}
