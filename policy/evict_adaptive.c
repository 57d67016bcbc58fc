/*
 * evict "adaptive": several candidate modules each run a ghost cache of the real one's
 * size over the same accesses, and the candidate whose ghost has had the most hits lately
 * picks the real victims. It follows ACME (Ari, Amer, Gramacy, Miller, Brandt, Long,
 * "ACME: Adaptive Caching Using Multiple Experts", WDAS 2002): a pool of replacement
 * policies, each simulated on a virtual cache, the real cache steered by how well each has
 * done recently; the ghost (shadow) caches are ARC's idea (Megiddo and Modha, FAST 2003),
 * kept whole here rather than as lists of recent victims.
 *
 * Why: no one module wins on every routing (docs/perf/policies.md, "Eviction against the
 * bound"). `affinity` at α = 0.2 is the best online module where a drifting context makes
 * experts recur (trace gen's defaults), but where the last step's selection is what
 * predicts the next (a strong carry-over, a short context, no context, uniform popularity,
 * few experts) its average smooths that away and LRU wins by up to 19 points; and where
 * weights larger than the budget are walked in a loop (the interposer's case) both miss
 * every time and `reuse` keeps part of the loop. Which regime a run is in shows in the
 * ghosts' hits within a few dozen tokens.
 *
 * The candidates (`candidates` below): affinity at α = 0.2, 0.5 and 1 (slow to fast: 1 is
 * the last step's scores alone), LRU and reuse. Their rankings do not depend on what is
 * resident (they read only their own history and the view's clock), so one instance of
 * each serves both its ghost and, while it leads, the real cache: the keys are the
 * modules' own code, not copies.
 *
 * A ghost cache holds whole experts, floor(capacity_pages / pages_per_expert) of them, read
 * from the view at each step (so it follows a budget that changes). At each observed layer
 * step, before the candidates observe it (as the real loads of the step were chosen with
 * what they knew before it): each of the step's experts already in a ghost is a hit for
 * that ghost; each other one is inserted, the candidate's own victim leaving first when the
 * ghost is full, chosen among the ghost's experts that the step does not use (the real
 * cache's shield). Per-layer budgets of a config module and MoEpic's split are not
 * modelled: a ghost is one global cache of whole experts, as the default is.
 *
 * "Lately": each ghost's hits decay by e^(-1/(window · n_layers)) a layer step, so a hit
 * counts about `window` tokens. After each step the leader is the ghost with the most
 * decayed hits, the current leader kept on a tie (so equal ghosts do not make it flap),
 * else the first in candidate order; the first leader is affinity at 0.2. ACME weighs its
 * experts by a learning rule and can mix their choices; here one leader takes all, which
 * is what the ghosts' hit counts compare.
 *
 * Parameter: window (tokens), default 32: half the default context's time constant, so a
 * change of regime (a task shift, a new request) shows within it, and long enough that one
 * token's draws do not decide. Measured over gap.sh's 72 cells, 128 does as well (-0.3 to
 * +0.7 points), 8 worse on Mixtral (down to -0.8); none falls below LRU.
 * Cost: a ghost asks its module for each victim, as the real eviction does, but not among
 * all its experts: each candidate module says for how long its choice among a layer's
 * experts stands (mvm_evict_ops.steady), so each layer's victim is kept until then (for
 * lru and affinity, until the layer is observed again), and a victim is the module's
 * choice among the layers' victims and the step's own layer's, the same expert as its
 * victim() over every candidate. Each layer's members are kept apart, in id order. On
 * the whole Qwen3-30B-A3B (48 layers, 6,144 experts) at 25%, observing a layer step took
 * 24-25 us when every ghost scanned its ~1,500 experts for candidates and each victim,
 * 10.5-12.5 us this way (bench_resid_step, session 109). The
 * three affinity candidates read one step's looks, taken once here (mvm_pstep.looks): a
 * prompt batch is a logarithm per token and expert, and observing a 512-token batch of
 * OLMoE-1B-7B's shape took ~600 us a layer on the development VM before, ~220 after.
 */
#include "policy/evict_adaptive.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy/modules.h"
#include "vmm/error.h"

static const struct {
    const mvm_evict_ops *ops;
    const char *params;
} candidates[] = {
    {&mvm_evict_affinity, "alpha=0.2"},
    {&mvm_evict_affinity, "alpha=0.5"},
    {&mvm_evict_affinity, "alpha=1"},
    {&mvm_evict_lru, ""},
    {&mvm_evict_reuse, ""},
};
#define N_GHOSTS (sizeof candidates / sizeof *candidates)

/* A ghost cache, and each layer's victim in it kept for as long as its module says the
 * choice stands (mvm_evict_ops.steady, which every candidate has). */
typedef struct ghost {
    void *self;       /* the candidate module: its ghost's victims, the real ones when leading */
    uint8_t *in;      /* [L*E] 1: in the ghost cache */
    uint32_t *member; /* [L*E] layer l's experts at [l*E, l*E + count[l]), in id order */
    uint32_t *count;  /* [L] */
    uint32_t size;    /* experts in it */
    double hits;      /* decayed */
    uint32_t *least;  /* [L] layer l's victim (UINT32_MAX: none), chosen when the module had
                         observed since[l] steps, standing steady[l] more unless stale[l]
                         (the layer observed, or a member taken out, since) */
    uint64_t *since;  /* [L] */
    uint64_t *steady; /* [L] */
    uint8_t *stale;   /* [L] */
} ghost;

typedef struct adaptive {
    uint32_t n_layers, n_experts, top_k, n_total, leader;
    float *looks;   /* [E] a step's looks, for its three affinity candidates at once */
    double decay;   /* per layer step */
    uint64_t steps; /* layer steps observed */
    uint32_t *cand; /* [E] the step's layer's candidates in a ghost */
    uint32_t *layer_victims; /* [L] a ghost's victims of each layer */
    ghost g[N_GHOSTS];
} adaptive;

static void adaptive_destroy(void *self)
{
    adaptive *a = self;
    if (!a)
        return;
    for (uint32_t i = 0; i < N_GHOSTS; i++) {
        if (a->g[i].self)
            candidates[i].ops->destroy(a->g[i].self);
        free(a->g[i].in);
        free(a->g[i].member);
        free(a->g[i].count);
        free(a->g[i].least);
        free(a->g[i].since);
        free(a->g[i].steady);
        free(a->g[i].stale);
    }
    free(a->cand);
    free(a->layer_victims);
    free(a->looks);
    free(a);
}

static mvm_status create_ghosts(adaptive *a, const mvm_pinit *init)
{
    const size_t n = a->n_total ? a->n_total : 1, L = a->n_layers ? a->n_layers : 1,
                 E = a->n_experts ? a->n_experts : 1;
    if (!(a->cand = malloc(E * sizeof *a->cand)) ||
        !(a->layer_victims = malloc(L * sizeof *a->layer_victims)) ||
        !(a->looks = malloc(E * sizeof *a->looks)))
        return mvm_fail(MVM_ERR_NOMEM, "evict adaptive: out of memory");
    for (uint32_t i = 0; i < N_GHOSTS; i++) {
        mvm_pinit sub = *init;
        sub.params.text = candidates[i].params;
        mvm_status st = candidates[i].ops->create(&sub, &a->g[i].self);
        if (st != MVM_OK)
            return st;
        ghost *g = &a->g[i];
        if (!(g->in = calloc(n, 1)) || !(g->member = malloc(n * sizeof *g->member)) ||
            !(g->count = calloc(L, sizeof *g->count)) ||
            !(g->least = malloc(L * sizeof *g->least)) ||
            !(g->since = malloc(L * sizeof *g->since)) ||
            !(g->steady = malloc(L * sizeof *g->steady)) || !(g->stale = malloc(L)))
            return mvm_fail(MVM_ERR_NOMEM, "evict adaptive: out of memory");
        memset(g->stale, 1, L);
    }
    return MVM_OK;
}

static mvm_status adaptive_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {"window", NULL};
    double window;
    mvm_status st = mvm_pparams_check(&init->params, known, "evict adaptive");
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "window", 32, &window);
    if (st != MVM_OK)
        return st;
    if (!(window >= 1 && window <= 1e9))
        return mvm_fail(MVM_ERR_INVALID, "evict adaptive: window=%g is not in [1, 1e9] tokens",
                        window);
    const mvm_pshape *sh = init->shape;
    adaptive *a = calloc(1, sizeof *a);
    if (!a)
        return mvm_fail(MVM_ERR_NOMEM, "evict adaptive: out of memory");
    a->n_layers = sh->n_layers;
    a->n_experts = sh->n_experts;
    a->top_k = sh->top_k;
    a->n_total = sh->n_layers * sh->n_experts;
    a->decay = exp(-1 / (window * (sh->n_layers ? sh->n_layers : 1)));
    st = create_ghosts(a, init);
    if (st != MVM_OK) {
        adaptive_destroy(a);
        return st;
    }
    *self = a;
    return MVM_OK;
}

/* Where x is, or goes, among its layer's members (the first not below it). */
static uint32_t *member_at(const adaptive *a, const ghost *g, uint32_t x)
{
    const uint32_t l = x / a->n_experts;
    uint32_t *run = g->member + (size_t)l * a->n_experts, lo = 0, hi = g->count[l];
    while (lo < hi) { /* (one layer of the interposer's pages may hold thousands) */
        const uint32_t mid = lo + (hi - lo) / 2;
        if (run[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return run + lo;
}

/* (Into the step's own layer only, whose victim is chosen afresh until the step is
 * observed, and then made again: ghost_victim.) */
static void ghost_insert(const adaptive *a, ghost *g, uint32_t x)
{
    const uint32_t l = x / a->n_experts;
    uint32_t *at = member_at(a, g, x), *end = g->member + (size_t)l * a->n_experts + g->count[l];
    memmove(at + 1, at, (size_t)(end - at) * sizeof *at);
    *at = x;
    g->count[l]++;
    g->in[x] = 1;
    g->size++;
}

static void ghost_remove(const adaptive *a, ghost *g, uint32_t x)
{
    const uint32_t l = x / a->n_experts;
    uint32_t *at = member_at(a, g, x), *end = g->member + (size_t)l * a->n_experts + g->count[l];
    memmove(at, at + 1, (size_t)(end - at - 1) * sizeof *at);
    g->count[l]--;
    g->in[x] = 0;
    g->size--;
    g->stale[l] = 1;
}

/* Candidate i's victim among cand[0..n) (n >= 1), as an expert; a module's out-of-range
 * answer is the first, as mvm_evict_pick takes it. */
static uint32_t victim_of(const adaptive *a, uint32_t i, const mvm_pview *v, uint32_t layer,
                          const uint32_t *cand, uint32_t n)
{
    const uint32_t k = candidates[i].ops->victim(a->g[i].self, v, layer, cand, n);
    return cand[k < n ? k : 0];
}

/* Ghost i's victim of layer l, other than the step's: kept while it stands. */
static uint32_t kept_victim(adaptive *a, uint32_t i, const mvm_pview *v, uint32_t l)
{
    ghost *g = &a->g[i];
    if (g->stale[l] || a->steps - g->since[l] >= g->steady[l]) {
        const uint32_t *run = g->member + (size_t)l * a->n_experts, n = g->count[l];
        g->least[l] = UINT32_MAX;
        g->steady[l] = UINT64_MAX; /* empty until a step of l puts one in */
        if (n) {
            g->least[l] = victim_of(a, i, v, l, run, n);
            g->steady[l] = candidates[i].ops->steady(g->self, run, n);
        }
        g->since[l] = a->steps;
        g->stale[l] = 0;
    }
    return g->least[l];
}

/* Ghost i's victim for `step`, among its experts that the step does not use (its shield, as
 * in the real cache), as its module's victim() would pick it among all of them in id order
 * (the real candidates' order): the module's choice among the layers' victims, the step's
 * own layer's chosen afresh. The same, as the module's order does not depend on what else
 * is offered; and at a quarter's budget about L + 2 E / 4 experts looked at, where all the
 * candidates were a quarter of L * E (Qwen3-30B-A3B: ~110 against 1,536). UINT32_MAX for
 * none. */
static uint32_t ghost_victim(adaptive *a, uint32_t i, const mvm_pview *v, const mvm_pstep *step)
{
    const ghost *g = &a->g[i];
    uint32_t n = 0;
    for (uint32_t l = 0; l < a->n_layers; l++) {
        uint32_t x = UINT32_MAX;
        if (l != step->layer) {
            x = kept_victim(a, i, v, l);
        } else {
            const uint32_t *run = g->member + (size_t)l * a->n_experts;
            uint32_t nc = 0;
            for (uint32_t j = 0; j < g->count[l]; j++)
                if (!step->counts[run[j] - l * a->n_experts])
                    a->cand[nc++] = run[j];
            if (nc)
                x = victim_of(a, i, v, l, a->cand, nc);
        }
        if (x != UINT32_MAX)
            a->layer_victims[n++] = x;
    }
    return n ? victim_of(a, i, v, step->layer, a->layer_victims, n) : UINT32_MAX;
}

/* Candidate i's victims out of ghost i until `room` more experts fit in `cap`, or no
 * candidate is left. */
static void ghost_fit(adaptive *a, uint32_t i, const mvm_pview *v, const mvm_pstep *step,
                      uint64_t cap, uint32_t room)
{
    ghost *g = &a->g[i];
    while (g->size + room > cap) {
        const uint32_t x = ghost_victim(a, i, v, step);
        if (x == UINT32_MAX)
            return;
        ghost_remove(a, g, x);
    }
}

/* The step's accesses through ghost i, at `cap` experts (a budget that shrank first takes
 * its toll): its hits. */
static uint32_t ghost_step(adaptive *a, uint32_t i, const mvm_pview *v, const mvm_pstep *step,
                           uint64_t cap)
{
    ghost *g = &a->g[i];
    const uint32_t base = step->layer * a->n_experts;
    uint32_t hits = 0;
    ghost_fit(a, i, v, step, cap, 0);
    for (uint32_t e = 0; e < a->n_experts; e++) {
        if (!step->counts[e])
            continue;
        if (g->in[base + e]) {
            hits++;
            continue;
        }
        ghost_fit(a, i, v, step, cap, 1);
        if (g->size < cap)
            ghost_insert(a, g, base + e);
    }
    return hits;
}

static void adaptive_observe(void *self, const mvm_pview *v, const mvm_pstep *step)
{
    adaptive *a = self;
    const uint32_t ppe = v->shape->pages_per_expert ? v->shape->pages_per_expert : 1;
    const uint64_t cap = v->capacity_pages / ppe;
    mvm_pstep seen = *step; /* the affinity candidates' looks, taken once */
    if (!seen.looks && seen.n_tok) {
        mvm_affinity_looks(step, a->n_experts, a->top_k, a->looks);
        seen.looks = a->looks;
    }
    for (uint32_t i = 0; i < N_GHOSTS; i++) {
        a->g[i].hits = a->g[i].hits * a->decay + ghost_step(a, i, v, step, cap);
        candidates[i].ops->observe(a->g[i].self, v, &seen);
        a->g[i].stale[step->layer] = 1; /* what the layer's victim stood on has changed */
    }
    a->steps++;
    for (uint32_t i = 0; i < N_GHOSTS; i++)
        if (a->g[i].hits > a->g[a->leader].hits)
            a->leader = i;
}

static uint32_t adaptive_victim(void *self, const mvm_pview *v, uint32_t for_layer,
                                const uint32_t *cand, uint32_t n)
{
    const adaptive *a = self;
    return candidates[a->leader].ops->victim(a->g[a->leader].self, v, for_layer, cand, n);
}

uint32_t mvm_evict_adaptive_ghosts(const void *self, mvm_adaptive_ghost *out)
{
    const adaptive *a = self;
    for (uint32_t i = 0; out && i < N_GHOSTS; i++)
        out[i] = (mvm_adaptive_ghost){.module = candidates[i].ops->name,
                                      .params = candidates[i].params, .in = a->g[i].in,
                                      .size = a->g[i].size, .hits = a->g[i].hits};
    return N_GHOSTS;
}

uint32_t mvm_evict_adaptive_leader(const void *self)
{
    return ((const adaptive *)self)->leader;
}

const mvm_evict_ops mvm_evict_adaptive = {
    .name = "adaptive",
    .about = "ghost caches of affinity (alpha 0.2, 0.5, 1), LRU and reuse; the one with the "
             "most hits over the last window=32 tokens picks the victims (ACME)",
    .create = adaptive_create,
    .destroy = adaptive_destroy,
    .observe = adaptive_observe,
    .victim = adaptive_victim,
    .want = NULL,
};
