/*
 * config "fixedpoint": MoEpic's cache configurator (§3.4, Algorithm 1). It watches every
 * layer's routing, keeps the statistics of §3.4.2, and every τ tokens searches per-layer
 * budgets V_i and split ratios θ_i that minimise the modelled exposed loading time Σ 𝒯^i
 * (Eqs. 5-11, in moepic_model.c): the "divide-and-conquer fixed-point iteration", which is a
 * hill climb moving ζ·V_e pages at a time to the layer that gains most from the layer that
 * loses least.
 *
 * Statistics, per layer i (§3.4.2). H(C) and PH(y, C) are needed for every cache size C, not
 * only the current one, and the paper does not say how they are measured; here the cache of
 * size C is taken to be the C experts of highest LCP priority P = μ·ρ^(ν/ω) (Eq. 4, the same
 * priority as evict "lcp": μ token-weighted activations, ν tokens since the last one on
 * v->tokens), so one rank per expert per step updates H(C) and PH(y, C) for every C at once.
 * Predictions are MoEpic's own speculative ones (Eq. 3): layer i+1's router applied to layer
 * i's MoE input, softmax, averaged over the step's tokens, made when layer i is observed and
 * scored when layer i+1 is. For a router that is not a softmax (policy/router.h), Eq. 3's
 * softmax is read as the scores the router ranks by: its sigmoid, plus its choose bias, the
 * experts outside a token's kept groups moved below the kept ones (in their order), averaged.
 * Without router weights or hidden states (a trace) there are no predictions: P = PH = 0 and
 * the model is cache only. Layer 0 is never predicted (the paper uses the previous token's
 * last layer, which the predict contract cannot carry), so its prefetch credit is 0.
 *
 * Times from the cost model: T_load^exp = t_load; T_comp^exp = mvm_cost_gpu at the layer's
 * mean tokens per activated expert; T_comp^att = attn_time × the mean tokens per step; K =
 * the mean experts activated per step (top_k at batch 1). T_comp^head is not in the cost
 * model, so T_wind^1 = T_comp^att of layer 0.
 *
 * Output and what the caller does with it. V_e = capacity_pages - buffer·pages_per_expert
 * (Eq. 8's U_b, the load buffer the paper sizes at K experts; the U_n of non-expert weights
 * is outside the expert budget already). The search is in pages: layer i caches C_i experts
 * with a prefix of p_i pages each, θ_i = p_i / pages_per_expert, and layer_pages[i] =
 * C_i·p_i (<= V_i; what V_i - C_i·p_i leaves over stays with the buffer). The caller keeps
 * in layer i the prefixes of its layer_pages[i] / (θ_i·pages_per_expert) experts of highest
 * LCP priority (Algorithm 1 line 10; evict "lcp" ranks the same way) and loads bottoms and
 * other experts through the buffer. A layer with no budget reports θ = 1 and 0 pages.
 *
 * Schedule and the paper's errors (Algorithm 1): before the first τ tokens, the paper's start:
 * uniform V_i = V_e/L and θ = 0.5 (rounded up to whole pages). Then the search runs at the
 * first configure on or after each multiple of τ of v->tokens, once anything has been observed
 * ("device idle" is the caller's choice of when to call), starting from the current budgets;
 * statistics accumulate over the whole run (Algorithm 1 never resets them). A change of
 * capacity_pages restarts from uniform budgets and searches at once if τ tokens have passed.
 * The "fixed-point iteration" is the pairwise transfer hill climb of Algorithm 1, probes
 * perturbing all layers at once as written; moves are step = max(1, round(ζ·V_e)) pages, with
 * the feasibility guards the paper lacks (moepic_model.h); Eq. 8's "U_e" for the buffer is
 * U_b; Eq. 10's P(y, C) is P(y). Counters are 32-bit: 4·10^9 steps per layer before they wrap.
 *
 * Parameters: tau (tokens, >= 1) 5000; zeta in (0, 1) 0.01; omega (> 0) 128; rho in (0, 1]
 * 0.25; buffer (whole experts, >= 0) top_k — all the paper's defaults (§4.1); theta in
 * (0, 1], default 0 (searched): a fixed split for every layer, with the start's uniform
 * budgets and no search, the configuration of the paper's θ sweep (its U-curve: θ near 0 is
 * "prefetch only", 1 "cache only").
 */
#include <math.h>
#include <stdlib.h>

#include "policy/config_common.h"
#include "policy/modules.h"
#include "policy/moepic_model.h"
#include "policy/rank.h"
#include "policy/router.h"
#include "vmm/error.h"

typedef struct fixedpoint {
    mvm_config_last last;
    uint32_t L, E, K, ppe, n_embd;
    mvm_cost cost;
    const mvm_router *router;    /* model data, alive as long as the model (policy.h) */
    double tau, zeta, omega, rho, buffer;
    double theta;                /* a fixed split (0: searched) */
    /* LCP priority, Eq. 4, as a ranking key (see observe) */
    uint64_t *mu;                /* [L*E] token-weighted activations */
    double *lcp_key;             /* [L*E] log μ - ν-free decay; -inf never activated */
    /* statistics, §3.4.2 */
    uint32_t *hit_rank;          /* [L*E] */
    uint32_t *pred_act;          /* [L*E] */
    uint32_t *pred_rank;         /* [L*E*E] */
    double *steps, *tok, *act, *pairs, *predicted; /* [L] */
    float *pred;                 /* [L*E] pending prediction of each layer */
    uint8_t *pred_ready;         /* [L] */
    mvm_rank *order;             /* [E] */
    uint32_t *rank_of;           /* [E] expert -> its LCP rank this step */
    /* the model and the search */
    mvm_moepic_stats *stats;     /* [L] */
    mvm_moepic_split *split;     /* [L] */
    mvm_moepic_split *work;      /* [3L] */
    uint64_t *budget, *tmp;      /* [L] V_i in pages; probe scratch */
    double *scratch;             /* [E] */
    float *keys;                 /* [3E] a token's probabilities, keys and groups' keys */
    uint64_t capacity, epoch;    /* the capacity budgets were set for; last τ multiple run */
    int started, searched, observed;
} fixedpoint;

static void fixedpoint_destroy(void *self)
{
    fixedpoint *f = self;
    if (!f)
        return;
    mvm_config_last_free(&f->last);
    free(f->mu);
    free(f->lcp_key);
    free(f->hit_rank);
    free(f->pred_act);
    free(f->pred_rank);
    free(f->steps);
    free(f->tok);
    free(f->act);
    free(f->pairs);
    free(f->predicted);
    free(f->pred);
    free(f->pred_ready);
    free(f->order);
    free(f->rank_of);
    free(f->stats);
    free(f->split);
    free(f->work);
    free(f->budget);
    free(f->keys);
    free(f->tmp);
    free(f->scratch);
    free(f);
}

static mvm_status read_params(const mvm_pinit *init, fixedpoint *f, const char *me)
{
    static const char *const known[] = {"tau", "zeta", "omega", "rho", "buffer", "theta", NULL};
    const mvm_pparams *p = &init->params;
    mvm_status st = mvm_pparams_check(p, known, me);
    if (st == MVM_OK)
        st = mvm_pparam_double(p, "tau", 5000, &f->tau);
    if (st == MVM_OK)
        st = mvm_pparam_double(p, "zeta", 0.01, &f->zeta);
    if (st == MVM_OK)
        st = mvm_pparam_double(p, "omega", 128, &f->omega);
    if (st == MVM_OK)
        st = mvm_pparam_double(p, "rho", 0.25, &f->rho);
    if (st == MVM_OK)
        st = mvm_pparam_double(p, "buffer", init->shape->top_k, &f->buffer);
    if (st == MVM_OK)
        st = mvm_pparam_double(p, "theta", 0, &f->theta);
    if (st != MVM_OK)
        return st;
    if (!(f->tau >= 1 && f->tau == floor(f->tau) && f->tau < 1e15))
        return mvm_fail(MVM_ERR_INVALID, "%s: tau=%g is not a whole number of tokens", me, f->tau);
    if (!(f->zeta > 0 && f->zeta < 1))
        return mvm_fail(MVM_ERR_INVALID, "%s: zeta=%g is not in (0, 1)", me, f->zeta);
    if (!(f->omega > 0 && isfinite(f->omega)))
        return mvm_fail(MVM_ERR_INVALID, "%s: omega=%g is not a positive number", me, f->omega);
    if (!(f->rho > 0 && f->rho <= 1))
        return mvm_fail(MVM_ERR_INVALID, "%s: rho=%g is not in (0, 1]", me, f->rho);
    if (!(f->buffer >= 0 && f->buffer == floor(f->buffer) && f->buffer < 1e9))
        return mvm_fail(MVM_ERR_INVALID, "%s: buffer=%g is not a whole number of experts", me,
                        f->buffer);
    if (!(f->theta >= 0 && f->theta <= 1))
        return mvm_fail(MVM_ERR_INVALID, "%s: theta=%g is not in (0, 1] (or 0: searched)", me,
                        f->theta);
    return MVM_OK;
}

static mvm_status fixedpoint_create(const mvm_pinit *init, void **self)
{
    const char *me = "config fixedpoint";
    const mvm_pshape *sh = init->shape;
    *self = NULL;
    if (!sh->n_experts || !sh->pages_per_expert || !sh->top_k)
        return mvm_fail(MVM_ERR_INVALID, "%s: a shape needs experts, top_k and pages", me);
    fixedpoint *f = calloc(1, sizeof *f);
    if (!f)
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    mvm_status st = read_params(init, f, me);
    if (st == MVM_OK)
        st = mvm_config_last_init(&f->last, sh->n_layers, me);
    if (st != MVM_OK) {
        free(f);
        return st;
    }
    const size_t L = sh->n_layers, E = sh->n_experts;
    f->L = sh->n_layers;
    f->E = sh->n_experts;
    f->K = sh->top_k;
    f->ppe = sh->pages_per_expert;
    f->n_embd = sh->n_embd;
    f->cost = *init->cost;
    f->router = init->router && init->router->weights ? init->router : NULL;
    f->mu = calloc(L * E, sizeof *f->mu);
    f->lcp_key = malloc(L * E * sizeof *f->lcp_key);
    f->hit_rank = calloc(L * E, sizeof *f->hit_rank);
    f->pred_act = calloc(L * E, sizeof *f->pred_act);
    f->pred_rank = calloc(L * E * E, sizeof *f->pred_rank);
    f->steps = calloc(L, sizeof *f->steps);
    f->tok = calloc(L, sizeof *f->tok);
    f->act = calloc(L, sizeof *f->act);
    f->pairs = calloc(L, sizeof *f->pairs);
    f->predicted = calloc(L, sizeof *f->predicted);
    f->pred = calloc(L * E, sizeof *f->pred);
    f->pred_ready = calloc(L, sizeof *f->pred_ready);
    f->order = calloc(E, sizeof *f->order);
    f->rank_of = calloc(E, sizeof *f->rank_of);
    f->stats = calloc(L, sizeof *f->stats);
    f->split = calloc(L, sizeof *f->split);
    f->work = calloc(3 * L, sizeof *f->work);
    f->budget = calloc(L, sizeof *f->budget);
    f->tmp = calloc(L, sizeof *f->tmp);
    f->scratch = calloc(E, sizeof *f->scratch);
    f->keys = calloc(3 * E, sizeof *f->keys);
    if (!f->mu || !f->lcp_key || !f->hit_rank || !f->pred_act || !f->pred_rank || !f->steps ||
        !f->tok || !f->act || !f->pairs || !f->predicted || !f->pred || !f->pred_ready ||
        !f->order || !f->rank_of || !f->stats || !f->split || !f->work || !f->budget ||
        !f->tmp || !f->scratch || !f->keys) {
        fixedpoint_destroy(f);
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    }
    for (size_t x = 0; x < L * E; x++)
        f->lcp_key[x] = -INFINITY;
    *self = f;
    return MVM_OK;
}

/* Eq. 3: layer `next`'s router (and its logit bias: gpt-oss) on this layer's MoE input,
 * softmax per token, averaged; other routers by their keys (mvm_router_rank_key). */
static void speculate(fixedpoint *f, const mvm_pstep *step, uint32_t next, float *out)
{
    const mvm_router *r = f->router;
    const float *R = r->weights[next];
    const float *b = r->logit_bias ? r->logit_bias[next] : NULL;
    const int softmax = !r->sigmoid && !mvm_router_keyed(r, next);
    double *logit = f->scratch;
    float *p = f->keys;
    for (uint32_t e = 0; e < f->E; e++)
        out[e] = 0;
    for (uint32_t t = 0; t < step->n_tok; t++) {
        const float *h = step->hidden + (size_t)t * f->n_embd;
        double top = -INFINITY, sum = 0;
        for (uint32_t e = 0; e < f->E; e++) {
            double z = b ? b[e] : 0;
            for (uint32_t d = 0; d < f->n_embd; d++)
                z += (double)R[(size_t)e * f->n_embd + d] * h[d];
            logit[e] = z;
            top = fmax(top, z);
        }
        if (softmax) {
            for (uint32_t e = 0; e < f->E; e++)
                sum += logit[e] = exp(logit[e] - top);
            for (uint32_t e = 0; e < f->E; e++)
                out[e] += (float)(logit[e] / sum / step->n_tok);
            continue;
        }
        for (uint32_t e = 0; e < f->E; e++)
            p[e] = (float)logit[e];
        mvm_router_probs(r, p, f->E);
        const float *key = p;
        if (mvm_router_keyed(r, next)) {
            mvm_router_rank_key(r, next, p, f->E, p + f->E, p + 2 * f->E);
            key = p + f->E;
        }
        for (uint32_t e = 0; e < f->E; e++)
            out[e] += key[e] / (float)step->n_tok;
    }
}

static void fixedpoint_observe(void *self, const mvm_pview *v, const mvm_pstep *step)
{
    fixedpoint *f = self;
    const uint32_t i = step->layer, E = f->E;
    const size_t base = (size_t)i * E;

    /* The cache as LCP would hold it before this step: every expert's priority rank. With
     * ν = tokens - seen, log P = (log μ - seen·ln ρ/ω) + tokens·ln ρ/ω, and the last term is
     * the same for every expert, so the order is that of the bracket, which changes only
     * when the expert is activated. */
    for (uint32_t e = 0; e < E; e++)
        f->order[e] = (mvm_rank){.key = f->lcp_key[base + e], .id = e};
    mvm_rank_sort(f->order, E);
    for (uint32_t r = 0; r < E; r++)
        f->rank_of[f->order[r].id] = r;

    f->observed = 1;
    f->steps[i]++;
    f->tok[i] += step->n_tok;
    for (uint32_t e = 0; e < E; e++)
        if (step->counts[e]) {
            f->hit_rank[base + f->rank_of[e]]++;
            f->act[i]++;
            f->pairs[i] += step->counts[e];
        }
    if (f->pred_ready[i]) { /* score the prediction made at layer i-1 */
        for (uint32_t e = 0; e < E; e++)
            f->order[e] = (mvm_rank){.key = f->pred[base + e], .id = e};
        mvm_rank_sort(f->order, E);
        for (uint32_t y = 0; y < E; y++) {
            uint32_t e = f->order[y].id;
            f->pred_act[base + y] += step->counts[e] > 0;
            f->pred_rank[(base + y) * E + f->rank_of[e]]++;
        }
        f->predicted[i]++;
        f->pred_ready[i] = 0;
    }
    for (uint32_t e = 0; e < E; e++)
        if (step->counts[e]) {
            f->mu[base + e] += step->counts[e];
            f->lcp_key[base + e] = log((double)f->mu[base + e]) -
                                   (double)v->tokens * log(f->rho) / f->omega;
        }
    if (i + 1 < f->L && f->router && f->router->weights[i + 1] && step->hidden && step->n_tok) {
        speculate(f, step, i + 1, f->pred + base + E);
        f->pred_ready[i + 1] = 1;
    }
}

/* The model's inputs from the statistics so far. */
static mvm_moepic_model build_model(fixedpoint *f)
{
    for (uint32_t i = 0; i < f->L; i++) {
        const size_t base = (size_t)i * f->E;
        double per_expert = f->act[i] > 0 ? f->pairs[i] / f->act[i] : 1;
        f->stats[i] = (mvm_moepic_stats){
            .hit_rank = f->hit_rank + base,
            .pred_act = f->pred_act + base,
            .pred_rank = f->pred_rank + base * f->E,
            .activated = f->act[i],
            .predicted = f->predicted[i],
            .k = f->steps[i] > 0 ? f->act[i] / f->steps[i] : f->K,
            .t_exp = mvm_cost_gpu(&f->cost, (uint32_t)fmax(1, round(per_expert))),
            .t_att = f->cost.m.attn_time * (f->steps[i] > 0 ? f->tok[i] / f->steps[i] : 1),
        };
    }
    return (mvm_moepic_model){.n_layers = f->L,
                              .n_experts = f->E,
                              .pages_per_expert = f->ppe,
                              .t_load = f->cost.t_load,
                              .t_head = 0,
                              .layer = f->stats,
                              .scratch = f->scratch};
}

static uint64_t expert_budget(const fixedpoint *f, uint64_t capacity)
{
    uint64_t buffer = (uint64_t)f->buffer * f->ppe;
    return capacity > buffer ? capacity - buffer : 0;
}

/* Algorithm 1 line 4: uniform budgets, θ = 0.5 on whole pages (the parameter's θ instead,
 * rounded to whole pages, at least one). */
static void start(fixedpoint *f, uint64_t *layer_pages, float *theta)
{
    uint32_t p = f->ppe > 1 ? (f->ppe + 1) / 2 : 1;
    if (f->theta > 0)
        p = (uint32_t)fmax(1, round(f->theta * f->ppe));
    for (uint32_t i = 0; i < f->L; i++) {
        uint64_t c = f->budget[i] / p < f->E ? f->budget[i] / p : f->E;
        layer_pages[i] = c * p;
        theta[i] = c ? (float)p / (float)f->ppe : 1.0f;
    }
}

static void search(fixedpoint *f, uint64_t *layer_pages, float *theta)
{
    uint64_t step = (uint64_t)fmax(1, round(f->zeta * (double)expert_budget(f, f->capacity)));
    mvm_moepic_model md = build_model(f);
    mvm_moepic_allocate(&md, step, f->budget, f->split, f->work, f->tmp);
    for (uint32_t i = 0; i < f->L; i++) {
        layer_pages[i] = (uint64_t)f->split[i].cached * f->split[i].prefix;
        theta[i] = f->split[i].cached ? (float)f->split[i].prefix / (float)f->ppe : 1.0f;
    }
}

static int fixedpoint_configure(void *self, const mvm_pview *v, uint64_t *layer_pages,
                                float *theta)
{
    fixedpoint *f = self;
    uint64_t epoch = v->tokens / (uint64_t)f->tau;
    if (!f->started || v->capacity_pages != f->capacity) {
        f->started = 1;
        f->searched = 0;
        f->capacity = v->capacity_pages;
        for (uint32_t i = 0; i < f->L; i++)
            f->budget[i] = expert_budget(f, f->capacity) / f->L;
        f->epoch = 0;
    }
    if (epoch > f->epoch && f->observed && f->theta == 0) {
        f->epoch = epoch;
        f->searched = 1;
        search(f, layer_pages, theta);
    } else if (!f->searched) {
        start(f, layer_pages, theta);
    } else {
        mvm_config_last_copy(&f->last, layer_pages, theta);
        return 0;
    }
    return mvm_config_last_update(&f->last, layer_pages, theta);
}

const mvm_config_ops mvm_config_fixedpoint = {
    .name = "fixedpoint",
    .about = "MoEpic configurator: per-layer budget and split theta by Algorithm 1's hill "
             "climb over the exposed-time model (Eqs. 5-11), every tau tokens",
    .create = fixedpoint_create,
    .destroy = fixedpoint_destroy,
    .observe = fixedpoint_observe,
    .configure = fixedpoint_configure,
};
