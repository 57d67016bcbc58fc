/*
 * evict "score": SMoE's score-based eviction (§IV-C, Eq. 3). The victim is the expert with the
 * lowest mean gate score over the last n decode steps, counting every expert's score, active
 * or not (inactive experts with high scores are the likely substitutes of route "importance").
 * The protection shield (an expert selected for the layer being computed is not evicted until
 * that computation ends) is the view's busy flag, which the caller sets for exactly that
 * window: candidates are not busy by contract, and victim() ranks a busy candidate last all
 * the same, so the shield holds whatever the caller passes and whenever it calls observe
 * (before or after the layer's loads).
 *
 * Readings where the paper is ambiguous: the window holds exactly n steps (Eq. 3 as printed
 * sums n+1 terms once j > n, an off-by-one), and fewer at the start (the mean is over the
 * steps seen); a batch step records the batch mean of each expert's score; the pool is global
 * ("m experts in total"): softmax probabilities are on one scale across layers, and the caller
 * decides which candidates compete; without router scores (a trace of ids and weights) a
 * selected expert's weight stands in for its score and the others score 0. Ties go to the
 * first candidate.
 *
 * Parameter: n (window in decode steps), default 3: the paper does not give n; its Fig. 6
 * observation is that a high-score expert is reused "in the next 3 iterations".
 */
#include <math.h>
#include <stdlib.h>

#include "policy/modules.h"
#include "vmm/error.h"

typedef struct score {
    uint32_t n_experts, top_k, window;
    float *hist;       /* [L][window][E] per-step batch-mean scores, a ring per layer */
    float *mean;       /* [L*E] mean over the ring's filled rows */
    uint32_t *pos;     /* [L] next ring row */
    uint32_t *filled;  /* [L] rows filled, <= window */
} score;

static void score_destroy(void *self)
{
    score *s = self;
    if (!s)
        return;
    free(s->hist);
    free(s->mean);
    free(s->pos);
    free(s->filled);
    free(s);
}

static mvm_status score_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {"n", NULL};
    double n;
    mvm_status st = mvm_pparams_check(&init->params, known, "evict score");
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "n", 3, &n);
    if (st != MVM_OK)
        return st;
    if (!(n >= 1 && n <= 4096 && n == floor(n)))
        return mvm_fail(MVM_ERR_INVALID, "evict score: n=%g is not a whole number in [1, 4096]",
                        n);
    const mvm_pshape *sh = init->shape;
    size_t L = sh->n_layers ? sh->n_layers : 1, E = sh->n_experts ? sh->n_experts : 1;
    score *s = calloc(1, sizeof *s);
    if (!s)
        return mvm_fail(MVM_ERR_NOMEM, "evict score: out of memory");
    s->n_experts = sh->n_experts;
    s->top_k = sh->top_k;
    s->window = (uint32_t)n;
    s->hist = calloc(L * s->window * E, sizeof *s->hist);
    s->mean = calloc(L * E, sizeof *s->mean);
    s->pos = calloc(L, sizeof *s->pos);
    s->filled = calloc(L, sizeof *s->filled);
    if (!s->hist || !s->mean || !s->pos || !s->filled) {
        score_destroy(s);
        return mvm_fail(MVM_ERR_NOMEM, "evict score: out of memory");
    }
    *self = s;
    return MVM_OK;
}

/* This step's batch-mean score of every expert of the layer into row[E]. */
static void step_scores(const score *s, const mvm_pstep *step, float *row)
{
    const uint32_t E = s->n_experts, K = s->top_k;
    for (uint32_t e = 0; e < E; e++)
        row[e] = 0;
    for (uint32_t t = 0; t < step->n_tok; t++) {
        if (step->scores) {
            for (uint32_t e = 0; e < E; e++)
                row[e] += step->scores[(size_t)t * E + e];
            continue;
        }
        for (uint32_t j = 0; j < K; j++) {
            int32_t e = step->experts[(size_t)t * K + j];
            if (e >= 0 && (uint32_t)e < E)
                row[e] += step->weights ? step->weights[(size_t)t * K + j] : 1.0f / (float)K;
        }
    }
    for (uint32_t e = 0; e < E; e++)
        row[e] /= (float)step->n_tok;
}

static void score_observe(void *self, const mvm_pview *v, const mvm_pstep *step)
{
    score *s = self;
    const uint32_t E = s->n_experts, l = step->layer;
    (void)v;
    if (step->n_tok == 0)
        return;
    float *ring = s->hist + (size_t)l * s->window * E;
    step_scores(s, step, ring + (size_t)s->pos[l] * E);
    s->pos[l] = (s->pos[l] + 1) % s->window;
    if (s->filled[l] < s->window)
        s->filled[l]++;
    float *mean = s->mean + (size_t)l * E;
    for (uint32_t e = 0; e < E; e++) {
        double sum = 0;
        for (uint32_t r = 0; r < s->filled[l]; r++)
            sum += ring[(size_t)r * E + e];
        mean[e] = (float)(sum / s->filled[l]);
    }
}

static uint32_t score_victim(void *self, const mvm_pview *v, uint32_t for_layer,
                             const uint32_t *cand, uint32_t n)
{
    const score *s = self;
    (void)for_layer;
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++) {
        int sh = v->busy[cand[i]] != 0, sb = v->busy[cand[best]] != 0;
        if (sh < sb || (sh == sb && s->mean[cand[i]] < s->mean[cand[best]]))
            best = i;
    }
    return best;
}

const mvm_evict_ops mvm_evict_score = {
    .name = "score",
    .about = "SMoE Eq. 3: lowest mean gate score over the last n steps, busy "
             "experts shielded; n=3 by default (paper: not given)",
    .create = score_create,
    .destroy = score_destroy,
    .observe = score_observe,
    .victim = score_victim,
    .want = NULL,
};
