/*
 * evict "workload": DALI's workload-aware cache replacement (§4.3, Eq. 12, Algorithm 2). Per
 * layer, the score of an expert is its workload, the number of tokens routed to it, summed
 * over a tumbling window of w_size steps (Eq. 12, no decay). At the end of each window the
 * u_size highest-scoring experts that are not resident become wanted (want() lists them until
 * they are) and the u_size lowest-scoring resident ones are marked to go: victim() picks them
 * before anything else. Then the window's scores reset.
 *
 * Readings where the paper is ambiguous: the evicted are the lowest-scoring (Algorithm 2 line
 * 11's TopK is a typo for BottomK); no s_in > s_out guard by default, as in the paper,
 * `guard=1` adds it; the window closes after w_size steps, (i+1) mod w_size == 0, not after
 * the first; a prefill step is one step whose workload counts all its tokens. A window swaps
 * min(u_size, resident, not resident) pairs, so the layer's cache keeps its size, as in DALI
 * where the per-layer cache is fixed (its initial contents are whatever the caller loaded
 * first). "Resident" means fully resident. For loads outside the plan (the caller's on-demand
 * misses, which DALI never caches) the victim is the candidate with the least workload over
 * the last closed window and the current one; scoping candidates to a layer's budget is the
 * caller's (config role). Ties go to the first candidate / the lower expert id.
 *
 * Parameters: w_size (steps), default 4; u_size (swaps per window per layer), default
 * E/8 clamped to [1, 8]: the paper's 1 for Mixtral (8 experts) and 8 for DeepSeek and
 * Qwen3 (64 and 128), proportional in between; guard (0 or 1), default 0.
 */
#include <math.h>
#include <stdlib.h>

#include "policy/modules.h"
#include "vmm/error.h"

enum { PLAN_NONE, PLAN_IN, PLAN_OUT };

typedef struct workload {
    uint32_t n_experts, pages, w_size, u_size, guard;
    uint32_t *cur;     /* [L*E] workload in the open window (Eq. 12's s) */
    uint32_t *prev;    /* [L*E] workload of the last closed window */
    uint32_t *steps;   /* [L] steps in the open window */
    uint8_t *plan;     /* [L*E] PLAN_IN / PLAN_OUT from the last closed window */
    uint32_t *wanted;  /* [L][u_size] PLAN_IN ids, best first */
    uint32_t *n_wanted; /* [L] */
} workload;

static void workload_destroy(void *self)
{
    workload *s = self;
    if (!s)
        return;
    free(s->cur);
    free(s->prev);
    free(s->steps);
    free(s->plan);
    free(s->wanted);
    free(s->n_wanted);
    free(s);
}

static mvm_status read_params(const mvm_pinit *init, double *w, double *u, double *g)
{
    static const char *const known[] = {"w_size", "u_size", "guard", NULL};
    uint32_t E = init->shape->n_experts;
    double u_def = E / 8 < 1 ? 1 : E / 8 > 8 ? 8 : E / 8;
    mvm_status st = mvm_pparams_check(&init->params, known, "evict workload");
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "w_size", 4, w);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "u_size", u_def, u);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "guard", 0, g);
    if (st != MVM_OK)
        return st;
    if (!(*w >= 1 && *w <= 1e9 && *w == floor(*w)))
        return mvm_fail(MVM_ERR_INVALID, "evict workload: w_size=%g is not a whole number >= 1",
                        *w);
    if (!(*u >= 1 && *u <= 1e9 && *u == floor(*u)))
        return mvm_fail(MVM_ERR_INVALID, "evict workload: u_size=%g is not a whole number >= 1",
                        *u);
    if (*g != 0 && *g != 1)
        return mvm_fail(MVM_ERR_INVALID, "evict workload: guard=%g is not 0 or 1", *g);
    return MVM_OK;
}

static mvm_status workload_create(const mvm_pinit *init, void **self)
{
    double w, u, g;
    mvm_status st = read_params(init, &w, &u, &g);
    if (st != MVM_OK)
        return st;
    const mvm_pshape *sh = init->shape;
    size_t L = sh->n_layers ? sh->n_layers : 1, E = sh->n_experts ? sh->n_experts : 1;
    workload *s = calloc(1, sizeof *s);
    if (!s)
        return mvm_fail(MVM_ERR_NOMEM, "evict workload: out of memory");
    s->n_experts = sh->n_experts;
    s->pages = sh->pages_per_expert;
    s->w_size = (uint32_t)w;
    s->u_size = u < (double)E ? (uint32_t)u : (uint32_t)E; /* more swaps cannot happen */
    s->guard = (uint32_t)g;
    s->cur = calloc(L * E, sizeof *s->cur);
    s->prev = calloc(L * E, sizeof *s->prev);
    s->steps = calloc(L, sizeof *s->steps);
    s->plan = calloc(L * E, 1);
    s->wanted = calloc(L * s->u_size, sizeof *s->wanted);
    s->n_wanted = calloc(L, sizeof *s->n_wanted);
    if (!s->cur || !s->prev || !s->steps || !s->plan || !s->wanted || !s->n_wanted) {
        workload_destroy(s);
        return mvm_fail(MVM_ERR_NOMEM, "evict workload: out of memory");
    }
    *self = s;
    return MVM_OK;
}

static int resident(const workload *s, const mvm_pview *v, size_t x)
{
    return v->resident[x] >= s->pages;
}

/* The unplanned expert of layer `base` with residency `res` and the highest (hi = 1) or
 * lowest (hi = 0) score; -1 when none is left. */
static int32_t pick(const workload *s, const mvm_pview *v, size_t base, int res, int hi)
{
    int32_t best = -1;
    for (uint32_t e = 0; e < s->n_experts; e++) {
        size_t x = base + e;
        if (s->plan[x] != PLAN_NONE || resident(s, v, x) != res)
            continue;
        if (best < 0 || (hi ? s->cur[x] > s->cur[base + (uint32_t)best]
                            : s->cur[x] < s->cur[base + (uint32_t)best]))
            best = (int32_t)e;
    }
    return best;
}

/* Algorithm 2 lines 10-14 for one layer: plan the window's swaps. */
static void close_window(workload *s, const mvm_pview *v, uint32_t l)
{
    const size_t base = (size_t)l * s->n_experts;
    for (uint32_t e = 0; e < s->n_experts; e++)
        s->plan[base + e] = PLAN_NONE;
    uint32_t *wanted = s->wanted + (size_t)l * s->u_size, n = 0;
    while (n < s->u_size) {
        int32_t in = pick(s, v, base, 0, 1), out = pick(s, v, base, 1, 0);
        if (in < 0 || out < 0 || (s->guard && s->cur[base + in] <= s->cur[base + out]))
            break;
        s->plan[base + in] = PLAN_IN;
        s->plan[base + out] = PLAN_OUT;
        wanted[n++] = (uint32_t)(base + in);
    }
    s->n_wanted[l] = n;
    for (uint32_t e = 0; e < s->n_experts; e++) {
        s->prev[base + e] = s->cur[base + e];
        s->cur[base + e] = 0;
    }
    s->steps[l] = 0;
}

static void workload_observe(void *self, const mvm_pview *v, const mvm_pstep *step)
{
    workload *s = self;
    uint32_t *cur = s->cur + (size_t)step->layer * s->n_experts;
    for (uint32_t e = 0; e < s->n_experts; e++)
        cur[e] += step->counts[e];
    if (++s->steps[step->layer] == s->w_size)
        close_window(s, v, step->layer);
}

static uint32_t workload_victim(void *self, const mvm_pview *v, uint32_t for_layer,
                                const uint32_t *cand, uint32_t n)
{
    const workload *s = self;
    (void)v;
    (void)for_layer;
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++) {
        uint32_t x = cand[i], b = cand[best];
        int out_x = s->plan[x] == PLAN_OUT, out_b = s->plan[b] == PLAN_OUT;
        if (out_x > out_b ||
            (out_x == out_b && s->prev[x] + s->cur[x] < s->prev[b] + s->cur[b]))
            best = i;
    }
    return best;
}

static uint32_t workload_want(void *self, const mvm_pview *v, uint32_t layer, uint32_t *out,
                              uint32_t cap)
{
    const workload *s = self;
    const uint32_t *wanted = s->wanted + (size_t)layer * s->u_size;
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_wanted[layer] && n < cap; i++)
        if (!resident(s, v, wanted[i]))
            out[n++] = wanted[i];
    return n;
}

const mvm_evict_ops mvm_evict_workload = {
    .name = "workload",
    .about = "DALI Alg. 2: every w_size steps per layer, swap the u_size busiest "
             "non-resident experts for the u_size idlest resident ones (token counts)",
    .create = workload_create,
    .destroy = workload_destroy,
    .observe = workload_observe,
    .victim = workload_victim,
    .want = workload_want,
};
