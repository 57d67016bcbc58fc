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
 * Cost: a ghost's misses of a step scan the ghost's members once for candidates (a list in
 * id order: the flags of every expert were scanned before, 1,536 for Qwen3-30B-A3B's 12
 * blocks, where a quarter are members) and ask its module for each victim, as the real
 * eviction does: about five times one module's work. On that shape's trace at 25% the
 * list cut the module's instructions a layer step by a fifth (callgrind, session 84).
 * The ghosts of modules whose ranking is a key that only their layer's steps change (LRU
 * and affinity: mvm_evict_ops.key) scan no list: each layer's least member is kept between
 * steps, so a victim reads the layers' least and the step's own layer, the same victim as
 * the module's victim() over the candidates. On the whole Qwen3-30B-A3B (48 layers) at
 * 25% that cut observing from 24-25 us a layer step to 15-17 (bench_resid_step, session
 * 109); `reuse`, whose ranking moves with the clock, still scans. The
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

typedef struct ghost {
    void *self;       /* the candidate module: its ghost's victims, the real ones when leading */
    uint8_t *in;      /* [L*E] 1: in the ghost cache */
    uint32_t *member; /* [size] its experts in id order: the candidates without a scan of
                         every expert (a quarter of 1,536 for Qwen3-30B-A3B at 25%) */
    uint32_t size;    /* experts in it */
    double hits;      /* decayed */
    /* With a keyed module (mvm_evict_ops.key): each layer's member of least key, the first
     * of equals (UINT32_MAX: none), made again where stale (its layer observed, or a member
     * taken out, since) */
    uint32_t *least; /* [L] */
    uint8_t *stale;  /* [L] */
} ghost;

typedef struct adaptive {
    uint32_t n_layers, n_experts, top_k, n_total, leader;
    float *looks;   /* [E] a step's looks, for its three affinity candidates at once */
    double decay;   /* per layer step */
    uint32_t *cand; /* [L*E] a ghost's eviction candidates */
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
        free(a->g[i].least);
        free(a->g[i].stale);
    }
    free(a->cand);
    free(a->looks);
    free(a);
}

static mvm_status create_ghosts(adaptive *a, const mvm_pinit *init)
{
    size_t n = a->n_total ? a->n_total : 1;
    if (!(a->cand = malloc(n * sizeof *a->cand)) ||
        !(a->looks = malloc((a->n_experts ? a->n_experts : 1) * sizeof *a->looks)))
        return mvm_fail(MVM_ERR_NOMEM, "evict adaptive: out of memory");
    for (uint32_t i = 0; i < N_GHOSTS; i++) {
        mvm_pinit sub = *init;
        sub.params.text = candidates[i].params;
        mvm_status st = candidates[i].ops->create(&sub, &a->g[i].self);
        if (st != MVM_OK)
            return st;
        if (!(a->g[i].in = calloc(n, 1)) || !(a->g[i].member = malloc(n * sizeof(uint32_t))))
            return mvm_fail(MVM_ERR_NOMEM, "evict adaptive: out of memory");
        if (!candidates[i].ops->key)
            continue;
        const size_t L = a->n_layers ? a->n_layers : 1;
        if (!(a->g[i].least = malloc(L * sizeof(uint32_t))) || !(a->g[i].stale = malloc(L)))
            return mvm_fail(MVM_ERR_NOMEM, "evict adaptive: out of memory");
        memset(a->g[i].stale, 1, L);
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

/* Where x is, or goes, in g's members (the first member not below it). */
static uint32_t member_at(const ghost *g, uint32_t x)
{
    uint32_t lo = 0, hi = g->size;
    while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (g->member[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* (Into the step's own layer only, whose least is found afresh until the step is observed,
 * and then made again: keyed_victim.) */
static void ghost_insert(ghost *g, uint32_t x)
{
    const uint32_t at = member_at(g, x);
    memmove(g->member + at + 1, g->member + at, (size_t)(g->size - at) * sizeof *g->member);
    g->member[at] = x;
    g->in[x] = 1;
    g->size++;
}

static void ghost_remove(const adaptive *a, ghost *g, uint32_t x)
{
    const uint32_t at = member_at(g, x);
    memmove(g->member + at, g->member + at + 1, (size_t)(g->size - at - 1) * sizeof *g->member);
    g->in[x] = 0;
    g->size--;
    if (g->stale)
        g->stale[x / a->n_experts] = 1;
}

/* Ghost i's member of layer l of least key, the first of equals, leaving out the experts
 * that `step` uses if it is a step of l; UINT32_MAX for none. A layer's members are one run
 * of the id-ordered list. */
static uint32_t layer_least(const adaptive *a, uint32_t i, uint32_t l, const mvm_pstep *step)
{
    const ghost *g = &a->g[i];
    const mvm_evict_ops *ops = candidates[i].ops;
    const uint32_t lo = l * a->n_experts;
    const uint32_t *used = step && step->layer == l ? step->counts : NULL;
    uint32_t best = UINT32_MAX;
    double least = 0;
    for (uint32_t j = member_at(g, lo); j < g->size && g->member[j] - lo < a->n_experts; j++) {
        const uint32_t x = g->member[j];
        if (used && used[x - lo])
            continue;
        const double k = ops->key(g->self, x);
        if (best == UINT32_MAX || k < least)
            best = x, least = k;
    }
    return best;
}

/* Keyed ghost i's victim for `step`, the one its module's victim() would pick among the
 * ghost's candidates (ghost_candidates), the first of equals in id order: the least of the
 * layers' least, each kept between steps but for the step's own layer, whose candidates
 * leave out what it uses. About L + 2 E / 4 keys read a victim at a quarter's budget, where
 * the scan of the candidates read a quarter of L * E (Qwen3-30B-A3B: ~110 against 1,536).
 * UINT32_MAX for none. */
static uint32_t keyed_victim(adaptive *a, uint32_t i, const mvm_pstep *step)
{
    ghost *g = &a->g[i];
    uint32_t best = UINT32_MAX;
    double least = 0;
    for (uint32_t l = 0; l < a->n_layers; l++) {
        if (l != step->layer && g->stale[l]) {
            g->least[l] = layer_least(a, i, l, NULL);
            g->stale[l] = 0;
        }
        const uint32_t x = l == step->layer ? layer_least(a, i, l, step) : g->least[l];
        if (x == UINT32_MAX)
            continue;
        const double k = candidates[i].ops->key(g->self, x);
        if (best == UINT32_MAX || k < least)
            best = x, least = k;
    }
    return best;
}

/* Ghost i's candidates for this step into a->cand: its experts that the step does not use
 * (its shield, as in the real cache), in id order as the real candidates come. Their
 * number. */
static uint32_t ghost_candidates(adaptive *a, uint32_t i, const mvm_pstep *step)
{
    const ghost *g = &a->g[i];
    const uint32_t lo = step->layer * a->n_experts;
    uint32_t n = 0;
    for (uint32_t j = 0; j < g->size; j++) {
        const uint32_t x = g->member[j];
        if (!(x - lo < a->n_experts && step->counts[x - lo]))
            a->cand[n++] = x;
    }
    return n;
}

/* Candidate i's victims out of ghost i until `room` more experts fit in `cap`, or no
 * candidate is left. *n: the candidates left in a->cand, collected at the first need
 * (UINT32_MAX: not yet), so a step with several misses scans the ghost once. */
static void ghost_fit(adaptive *a, uint32_t i, const mvm_pview *v, const mvm_pstep *step,
                      uint64_t cap, uint32_t room, uint32_t *n)
{
    ghost *g = &a->g[i];
    while (g->size + room > cap) {
        if (g->least) {
            const uint32_t x = keyed_victim(a, i, step);
            if (x == UINT32_MAX)
                return;
            ghost_remove(a, g, x);
            continue;
        }
        if (*n == UINT32_MAX)
            *n = ghost_candidates(a, i, step);
        if (*n == 0)
            return;
        uint32_t k = candidates[i].ops->victim(g->self, v, step->layer, a->cand, *n);
        k = k < *n ? k : 0;
        ghost_remove(a, g, a->cand[k]);
        memmove(a->cand + k, a->cand + k + 1, (size_t)(*n - k - 1) * sizeof *a->cand);
        (*n)--;
    }
}

/* The step's accesses through ghost i, at `cap` experts (a budget that shrank first takes
 * its toll): its hits. */
static uint32_t ghost_step(adaptive *a, uint32_t i, const mvm_pview *v, const mvm_pstep *step,
                           uint64_t cap)
{
    ghost *g = &a->g[i];
    const uint32_t base = step->layer * a->n_experts;
    uint32_t hits = 0, n = UINT32_MAX;
    ghost_fit(a, i, v, step, cap, 0, &n);
    for (uint32_t e = 0; e < a->n_experts; e++) {
        if (!step->counts[e])
            continue;
        if (g->in[base + e]) {
            hits++;
            continue;
        }
        ghost_fit(a, i, v, step, cap, 1, &n);
        if (g->size < cap)
            ghost_insert(g, base + e);
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
        if (a->g[i].stale) /* the layer's keys have changed */
            a->g[i].stale[step->layer] = 1;
    }
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
