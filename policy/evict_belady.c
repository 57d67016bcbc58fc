/*
 * evict "belady": the offline optimum, an upper bound for the online modules. It evicts the
 * candidate whose next use lies furthest in the future (Belady's MIN, 1966), read from the
 * routing still to come (policy.h, mvm_pfuture), which only the simulator has: it is how
 * `moevm sim` shows how far a policy is from the best any eviction could do. The engine and
 * the interposer cannot run it (create fails, naming why).
 *
 * What it bounds: the hits of demand loads of whole experts, with the accesses fixed by the
 * trace. MIN is optimal for one access at a time and equal sizes; a step's top_k experts
 * are all busy while it runs, so none is a candidate and MIN stays optimal for the step
 * read as k consecutive accesses. It is not a bound when other modules change what is
 * accessed or when (route substitutions), or load ahead of use (prefetches, DALI's wishes,
 * which can beat it), and with MoEpic's split (a page prefix) sizes differ and MIN is a
 * heuristic.
 *
 * The step clock: the steps observed so far, so during step p's loads it is p (the step's
 * own experts are busy) and after its observation p + 1; either way a candidate's next use
 * is its first use at or after the clock. An expert never used again goes first; among
 * those, and among equal next uses, the first candidate.
 *
 * Parameter `ahead=T` (default: the whole future) makes it a partial oracle, to measure how
 * much of MIN's advantage lies how far ahead: it reads the routing only to the end of
 * token t + T, t the token of the clock's step (T = 0: the rest of the current token, what
 * a perfect predictor of the later layers from the current hidden state could know at
 * best). Candidates it cannot see a use of go first, ranked by `affinity` (evict_affinity.c,
 * alpha 0.2: the best online module here, docs/perf/policies.md), so the column is
 * "affinity plus T tokens of foresight"; only when every candidate has a use within sight
 * does the furthest go.
 */
#include <math.h>
#include <stdlib.h>

#include "policy/modules.h"
#include "vmm/error.h"

typedef struct belady {
    uint32_t n_layers, n_experts;
    uint64_t n_steps, clock;   /* steps in the future; steps observed */
    uint64_t *first;           /* [L*E + 1] expert x's uses are uses[first[x] .. first[x+1]) */
    uint64_t *uses;            /* the step of every selection, ascending per expert */
    uint64_t *cursor;          /* [L*E] x's first use not yet passed by the clock */
    /* ahead=T only (affinity NULL without): the future read to the end of token
     * clock/L + ahead, affinity ranking what lies beyond */
    uint64_t ahead;
    void *affinity;
    uint32_t *blind;           /* [L*E] scratch: the candidates without a use in sight */
    uint32_t *blind_at;        /* [L*E] scratch: their indices in cand */
} belady;

static void belady_destroy(void *self)
{
    belady *b = self;
    if (b) {
        free(b->first);
        free(b->uses);
        free(b->cursor);
        free(b->blind);
        free(b->blind_at);
        if (b->affinity)
            mvm_evict_affinity.destroy(b->affinity);
    }
    free(b);
}

/* Counts per expert, prefix sums, then the steps in order (a counting sort): O(selections).
 * A selection out of range is skipped (the caller's trace is checked; this is defence). */
static void index_future(belady *b, const mvm_pfuture *f, uint32_t top_k)
{
    const uint32_t E = b->n_experts, L = b->n_layers;
    for (uint64_t p = 0; p < b->n_steps; p++)
        for (uint32_t k = 0; k < top_k; k++) {
            int32_t e = f->experts[p * top_k + k];
            if (e >= 0 && (uint32_t)e < E)
                b->first[(p % L) * E + (uint32_t)e + 1]++;
        }
    for (size_t x = 0; x < (size_t)L * E; x++)
        b->first[x + 1] += b->first[x];
    for (size_t x = 0; x < (size_t)L * E; x++)
        b->cursor[x] = b->first[x];
    for (uint64_t p = 0; p < b->n_steps; p++)
        for (uint32_t k = 0; k < top_k; k++) {
            int32_t e = f->experts[p * top_k + k];
            if (e >= 0 && (uint32_t)e < E)
                b->uses[b->cursor[(p % L) * E + (uint32_t)e]++] = p;
        }
    for (size_t x = 0; x < (size_t)L * E; x++)
        b->cursor[x] = b->first[x];
}

static mvm_status belady_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {"ahead", NULL};
    double ahead = INFINITY; /* the whole future */
    mvm_status st = mvm_pparams_check(&init->params, known, "evict belady");
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "ahead", INFINITY, &ahead);
    if (st != MVM_OK)
        return st;
    if (ahead != INFINITY && !(ahead >= 0 && ahead <= 1e9 && ahead == floor(ahead)))
        return mvm_fail(MVM_ERR_INVALID,
                        "evict belady: ahead=%g is not a whole number of tokens >= 0", ahead);
    const mvm_pfuture *f = init->future;
    if (!f || !f->experts)
        return mvm_fail(MVM_ERR_INVALID,
                        "evict belady: an offline bound that reads the routing still to come; "
                        "only `moevm sim` replays a known future (use it there)");
    const mvm_pshape *sh = init->shape;
    belady *b = calloc(1, sizeof *b);
    size_t n = (size_t)sh->n_layers * sh->n_experts;
    uint64_t steps = (uint64_t)f->n_tokens * sh->n_layers, selections = steps * sh->top_k;
    if (!b || !(b->first = calloc(n + 1, sizeof *b->first)) ||
        !(b->cursor = calloc(n ? n : 1, sizeof *b->cursor)) ||
        !(b->uses = malloc((selections ? selections : 1) * sizeof *b->uses))) {
        belady_destroy(b);
        return mvm_fail(MVM_ERR_NOMEM, "evict belady: out of memory for the future's index");
    }
    b->n_layers = sh->n_layers;
    b->n_experts = sh->n_experts;
    b->n_steps = steps;
    index_future(b, f, sh->top_k);
    if (ahead != INFINITY) {
        mvm_pinit sub = *init;
        sub.params.text = "";
        b->ahead = (uint64_t)ahead;
        if (!(b->blind = malloc((n ? n : 1) * sizeof *b->blind)) ||
            !(b->blind_at = malloc((n ? n : 1) * sizeof *b->blind_at))) {
            belady_destroy(b);
            return mvm_fail(MVM_ERR_NOMEM, "evict belady: out of memory");
        }
        st = mvm_evict_affinity.create(&sub, &b->affinity);
        if (st != MVM_OK) {
            belady_destroy(b);
            return st;
        }
    }
    *self = b;
    return MVM_OK;
}

static void belady_observe(void *self, const mvm_pview *v, const mvm_pstep *step)
{
    belady *b = self;
    if (b->affinity)
        mvm_evict_affinity.observe(b->affinity, v, step);
    b->clock++;
}

/* x's next use at or after the clock; UINT64_MAX when none is left. */
static uint64_t next_use(belady *b, uint32_t x)
{
    uint64_t *c = &b->cursor[x];
    while (*c < b->first[x + 1] && b->uses[*c] < b->clock)
        (*c)++;
    return *c < b->first[x + 1] ? b->uses[*c] : UINT64_MAX;
}

static uint32_t belady_victim(void *self, const mvm_pview *v, uint32_t for_layer,
                              const uint32_t *cand, uint32_t n)
{
    belady *b = self;
    if (b->affinity) {
        /* the first step past sight: token clock/L + ahead's end */
        const uint64_t sight = (b->clock / b->n_layers + b->ahead + 1) * b->n_layers;
        uint32_t n_blind = 0, best = 0;
        uint64_t furthest = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t u = next_use(b, cand[i]);
            if (u >= sight) {
                b->blind_at[n_blind] = i;
                b->blind[n_blind++] = cand[i];
            } else if (u > furthest) {
                best = i;
                furthest = u;
            }
        }
        if (!n_blind)
            return best;
        return b->blind_at[mvm_evict_affinity.victim(b->affinity, v, for_layer, b->blind,
                                                     n_blind)];
    }
    uint32_t best = 0;
    uint64_t furthest = next_use(b, cand[0]);
    for (uint32_t i = 1; i < n && furthest != UINT64_MAX; i++) {
        uint64_t u = next_use(b, cand[i]);
        if (u > furthest) {
            best = i;
            furthest = u;
        }
    }
    return best;
}

const mvm_evict_ops mvm_evict_belady = {
    .name = "belady",
    .about = "offline optimum (Belady's MIN): furthest next use, read from the trace; "
             "moevm sim only, the bound the others are measured against; ahead=T: the "
             "trace read only T tokens past the current one, affinity beyond",
    .create = belady_create,
    .destroy = belady_destroy,
    .observe = belady_observe,
    .victim = belady_victim,
    .want = NULL,
};
