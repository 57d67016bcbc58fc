/*
 * evict "affinity": evict the expert whose router affinity, smoothed over the last few
 * tokens, is lowest. It is SMoE's score-based eviction (§IV-C, Eq. 3: rank by the
 * gate scores of every expert, active or not, over recent steps) read as an estimate: what
 * makes an expert likely to be selected again soon is its router logit, which follows the
 * slowly changing context (SMoE's Fig. 6: high-score experts, even inactive ones, are
 * reused within a few iterations). Each step's scores are one noisy look at those logits.
 *
 * Two changes from Eq. 3, both measured in docs/perf/policies.md:
 *  - the log of the score, not the score. A softmax score is exp(logit - normaliser), so its
 *    log is the logit up to a per-step constant that every expert of the layer shares; the
 *    plain mean of scores is ruled by the rare steps where an expert spikes, and ranks an
 *    expert selected once above one scored steadily just below the cut;
 *  - an exponential moving average instead of a window of n steps: each new look gets
 *    weight alpha, so older looks fade and no window of history is stored.
 *
 *   key[x] <- (1 - alpha) key[x] + alpha ln(max(score, 1e-30))   (the first look: its log)
 *
 * The victim has the lowest key; an expert never observed goes first; ties go to the first
 * candidate. Keys of different layers are on one scale: each is a log-probability of the
 * layer's own softmax, so a key says how likely the expert is to be picked by its layer.
 * Sigmoid routers (DeepSeek-V3, GLM-4.5) score each expert on its own; the log of a sigmoid
 * is as monotone in the logit. A batch step adds the mean of its tokens' logs. Without
 * router scores (a trace of ids and weights) a selected expert looks at ln(weight) and the
 * others at ln(1e-4), which makes the key a recency-weighted frequency (LRFU-like).
 *
 * Parameter: alpha in (0, 1], default 0.2: the Kalman gain of a latent logit that drifts
 * slowly (a context lasting tens of tokens) seen through per-token noise of a Gumbel's
 * spread (π²/6), docs/perf/policies.md; alpha = 1 keeps only the last step.
 */
#include <math.h>
#include <stdlib.h>

#include "policy/modules.h"
#include "policy/rank.h"
#include "vmm/error.h"

#define UNSEEN_LOOK -9.21f /* ln(1e-4): what an unselected expert shows without scores */

typedef struct affinity {
    uint32_t n_experts, top_k;
    float alpha;
    float *key;     /* [L*E] smoothed log-score; -INFINITY: never observed */
    float *look;    /* [E] a step's looks */
} affinity;

static void affinity_destroy(void *self)
{
    affinity *s = self;
    if (s)
        free(s->key), free(s->look);
    free(s);
}

static mvm_status affinity_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {"alpha", NULL};
    double alpha;
    mvm_status st = mvm_pparams_check(&init->params, known, "evict affinity");
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "alpha", 0.2, &alpha);
    if (st != MVM_OK)
        return st;
    if (!(alpha > 0 && alpha <= 1))
        return mvm_fail(MVM_ERR_INVALID, "evict affinity: alpha=%g is not in (0, 1]", alpha);
    const mvm_pshape *sh = init->shape;
    size_t n = (size_t)sh->n_layers * sh->n_experts;
    affinity *s = calloc(1, sizeof *s);
    if (!s || !(s->key = malloc((n ? n : 1) * sizeof *s->key)) ||
        !(s->look = malloc((sh->n_experts ? sh->n_experts : 1) * sizeof *s->look))) {
        affinity_destroy(s);
        return mvm_fail(MVM_ERR_NOMEM, "evict affinity: out of memory");
    }
    for (size_t x = 0; x < n; x++)
        s->key[x] = -INFINITY;
    s->n_experts = sh->n_experts;
    s->top_k = sh->top_k;
    s->alpha = (float)alpha;
    *self = s;
    return MVM_OK;
}

/* Every expert's look at this step: the mean over its tokens of the log of its score
 * (exported for evict_adaptive.c, whose three affinity candidates share one step's looks:
 * a 512-token prompt batch of OLMoE's shape is 32,768 logarithms each). Each expert's sum
 * runs over the tokens in order, as it always has. */
void mvm_affinity_looks(const mvm_pstep *step, uint32_t E, uint32_t K, float *out)
{
    for (uint32_t e = 0; e < E; e++)
        out[e] = 0;
    for (uint32_t t = 0; t < step->n_tok; t++)
        for (uint32_t e = 0; e < E; e++) {
            float p = 0;
            if (step->scores) {
                p = step->scores[(size_t)t * E + e];
            } else {
                for (uint32_t k = 0; k < K; k++)
                    if (step->experts[(size_t)t * K + k] == (int32_t)e)
                        p = step->weights ? step->weights[(size_t)t * K + k] : 1.0f / (float)K;
                if (!(p > 0))
                    p = expf(UNSEEN_LOOK);
            }
            out[e] += logf(fmaxf(p, 1e-30f));
        }
    for (uint32_t e = 0; e < E; e++)
        out[e] /= (float)step->n_tok;
}

static void affinity_observe(void *self, const mvm_pview *v, const mvm_pstep *step)
{
    affinity *s = self;
    (void)v;
    if (!step->n_tok)
        return;
    const float *look = step->looks;
    if (!look) {
        mvm_affinity_looks(step, s->n_experts, s->top_k, s->look);
        look = s->look;
    }
    float *key = s->key + (size_t)step->layer * s->n_experts;
    for (uint32_t e = 0; e < s->n_experts; e++)
        key[e] = isinf(key[e]) ? look[e] : (1 - s->alpha) * key[e] + s->alpha * look[e];
}

static uint32_t affinity_victim(void *self, const mvm_pview *v, uint32_t for_layer,
                                const uint32_t *cand, uint32_t n)
{
    const affinity *s = self;
    (void)v;
    (void)for_layer;
    return mvm_argmin_f32(s->key, cand, n);
}

const mvm_evict_ops mvm_evict_affinity = {
    .name = "affinity",
    .about = "lowest router affinity: the log of each expert's gate score, smoothed over "
             "recent steps (SMoE §IV-C Eq. 3 in the log domain, with decay)",
    .create = affinity_create,
    .destroy = affinity_destroy,
    .observe = affinity_observe,
    .victim = affinity_victim,
    .want = NULL,
    .steady = mvm_steady_until_observed,
};
