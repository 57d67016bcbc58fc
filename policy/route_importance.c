/*
 * route "importance": SMoE's expert-cache router (§IV-B, Algorithm 1). Per token and layer,
 * with S_{k+1} the best score among the experts the router did not select:
 *
 *   top-score  selected, score >= T = (1+α)·S_{k+1}           always computed
 *   low-score  selected, score <  T                           kept when resident or in C,
 *                                                             else a miss
 *   substitute not selected, R = (1-α)·S_{k+1} <= score <= S_{k+1}, and resident or in C
 *
 * where C is the batch's top-score set (the top-score experts of every token of the step,
 * which are computed anyway). The misses are replaced 1:1 by the best substitutes, lowest
 * miss first; when there are fewer substitutes than misses the best misses stay (Algorithm
 * 1's "top |B_t|-|A_t| experts from B_t"). Each token keeps exactly top_k distinct experts.
 *
 * Readings where the paper is ambiguous: (1) the pseudo-code's E is O;
 * (2) low-score means selected (rank <= k), so the (k+1)-th expert is never low-score;
 * (3) the substitute band includes S_{k+1} itself, as the text's constraint says; (4) a
 * score exactly T is top-score; (5) only low-score experts that are missing are replaced,
 * as the prose says, not all of B_t; (6) C is built in a first pass over the whole batch;
 * (7) low-score experts in C are kept; (8) a substitute's weight is its own router
 * probability in the model's weight scale: w' = S[e']·w_e/S[e] for the replaced e, which
 * is exactly S[e'] for the un-normalised routers of the paper's models, with no
 * renormalisation of the row (none of those models renormalises); (9) "resident" means
 * fully resident now: a load still in flight is not a substitute.
 * A substituted row is re-sorted best first (by router score), as the contract asks;
 * untouched rows are left exactly as they came. α = 0 is the original model: nothing is
 * low-score, route returns at once. Without router scores (a trace of ids) nothing can be
 * banded, so nothing is substituted.
 *
 * Parameter: alpha in [0, 1], default 0.3: the middle of the values the paper deploys
 * (0.35, 0.3, 0.25 for its three models, §VI-B), below which it reports accuracy changes
 * within noise (Table IV).
 */
#include <stdlib.h>

#include "policy/modules.h"
#include "vmm/error.h"

typedef struct importance {
    uint32_t n_experts, top_k, pages;
    double alpha;
    uint8_t *in_c; /* [E] the step's batch top-score set C */
    uint32_t *miss; /* [K] one token's missing low-score slots, best first */
    int32_t *sub;  /* [K] its substitutes, best first */
} importance;

static void importance_destroy(void *self)
{
    importance *im = self;
    if (!im)
        return;
    free(im->in_c);
    free(im->miss);
    free(im->sub);
    free(im);
}

static mvm_status importance_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {"alpha", NULL};
    const mvm_pshape *sh = init->shape;
    double alpha;
    mvm_status st = mvm_pparams_check(&init->params, known, "route importance");
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "alpha", 0.3, &alpha);
    if (st != MVM_OK)
        return st;
    if (!(alpha >= 0 && alpha <= 1))
        return mvm_fail(MVM_ERR_INVALID, "route importance: alpha=%g is not in [0, 1]", alpha);
    importance *im = calloc(1, sizeof *im);
    if (!im)
        return mvm_fail(MVM_ERR_NOMEM, "route importance: out of memory");
    im->n_experts = sh->n_experts;
    im->top_k = sh->top_k;
    im->pages = sh->pages_per_expert;
    im->alpha = alpha;
    im->in_c = calloc(sh->n_experts, 1);
    im->miss = calloc(sh->top_k ? sh->top_k : 1, sizeof *im->miss);
    im->sub = calloc(sh->top_k ? sh->top_k : 1, sizeof *im->sub);
    if (!im->in_c || !im->miss || !im->sub) {
        importance_destroy(im);
        return mvm_fail(MVM_ERR_NOMEM, "route importance: out of memory");
    }
    *self = im;
    return MVM_OK;
}

static int in_row(const int32_t *row, uint32_t k, int32_t e)
{
    for (uint32_t j = 0; j < k; j++)
        if (row[j] == e)
            return 1;
    return 0;
}

/* S_{k+1}: the best score among the experts the router left out; -1 when it chose all. */
static float next_score(const importance *im, const float *s, const int32_t *row)
{
    float best = -1;
    for (uint32_t e = 0; e < im->n_experts; e++)
        if (!in_row(row, im->top_k, (int32_t)e) && s[e] > best)
            best = s[e];
    return best;
}

/* Free to compute: on the device already, or computed for another token anyway. */
static int free_expert(const importance *im, const mvm_pview *v, uint32_t layer, int32_t e)
{
    return im->in_c[e] || v->resident[(size_t)layer * im->n_experts + (uint32_t)e] >= im->pages;
}

/* Pass 1: C, the top-score experts of every token in the step. */
static void top_score_set(importance *im, const mvm_pstep *step)
{
    const uint32_t E = im->n_experts, K = im->top_k;
    for (uint32_t e = 0; e < E; e++)
        im->in_c[e] = 0;
    for (uint32_t t = 0; t < step->n_tok; t++) {
        const float *s = step->scores + (size_t)t * E;
        const int32_t *row = step->experts + (size_t)t * K;
        float top = (float)((1 + im->alpha) * next_score(im, s, row));
        for (uint32_t j = 0; j < K; j++)
            if (row[j] >= 0 && (uint32_t)row[j] < E && s[row[j]] >= top)
                im->in_c[row[j]] = 1;
    }
}

/* The best unselected expert in [lo, hi] that is free, not among sub[0..n). */
static int32_t best_substitute(const importance *im, const mvm_pview *v, uint32_t layer,
                               const float *s, const int32_t *row, uint32_t n, float lo,
                               float hi)
{
    int32_t best = -1;
    for (uint32_t u = 0; u < im->n_experts; u++) {
        int32_t e = (int32_t)u;
        if (s[e] < lo || s[e] > hi || (best >= 0 && s[e] <= s[best]))
            continue;
        if (in_row(row, im->top_k, e) || in_row(im->sub, n, e) || !free_expert(im, v, layer, e))
            continue;
        best = e;
    }
    return best;
}

/* Best first by router score, weights moving with their experts (insertion sort: k is small). */
static void sort_row(const float *s, int32_t *row, float *w, uint32_t k)
{
    for (uint32_t i = 1; i < k; i++)
        for (uint32_t j = i; j > 0 && s[row[j]] > s[row[j - 1]]; j--) {
            int32_t e = row[j];
            row[j] = row[j - 1];
            row[j - 1] = e;
            if (w) {
                float x = w[j];
                w[j] = w[j - 1];
                w[j - 1] = x;
            }
        }
}

/* Pass 2 for one token: returns the number of substitutions. */
static uint32_t route_token(importance *im, const mvm_pview *v, uint32_t layer, const float *s,
                            int32_t *row, float *w)
{
    const uint32_t K = im->top_k, E = im->n_experts;
    float s1 = next_score(im, s, row);
    if (s1 < 0)
        return 0;
    float low = (float)((1 - im->alpha) * s1);
    uint32_t n_miss = 0;
    for (uint32_t j = 0; j < K; j++) { /* top-score experts are in C, so free */
        int32_t e = row[j];
        if (e < 0 || (uint32_t)e >= E || free_expert(im, v, layer, e))
            continue;
        uint32_t i = n_miss++; /* insert slot j, misses kept best first */
        for (; i > 0 && s[row[im->miss[i - 1]]] < s[e]; i--)
            im->miss[i] = im->miss[i - 1];
        im->miss[i] = j;
    }
    uint32_t n_sub = 0;
    while (n_sub < n_miss) {
        int32_t e = best_substitute(im, v, layer, s, row, n_sub, low, s1);
        if (e < 0)
            break;
        im->sub[n_sub++] = e;
    }
    /* The worst n_sub misses give way; the best substitute replaces the best of those. */
    for (uint32_t i = 0; i < n_sub; i++) {
        uint32_t j = im->miss[n_miss - n_sub + i];
        int32_t old = row[j], e = im->sub[i];
        row[j] = e;
        if (w)
            w[j] = s[old] > 0 ? s[e] * (w[j] / s[old]) : s[e];
    }
    if (n_sub)
        sort_row(s, row, w, K);
    return n_sub;
}

static uint32_t importance_route(void *self, const mvm_pview *v, mvm_pstep *step)
{
    importance *im = self;
    if (im->alpha == 0 || !step->scores || im->n_experts <= im->top_k)
        return 0;
    top_score_set(im, step);
    uint32_t n = 0;
    for (uint32_t t = 0; t < step->n_tok; t++)
        n += route_token(im, v, step->layer, step->scores + (size_t)t * im->n_experts,
                         step->experts + (size_t)t * im->top_k,
                         step->weights ? step->weights + (size_t)t * im->top_k : NULL);
    return n;
}

const mvm_route_ops mvm_route_importance = {
    .name = "importance",
    .about = "SMoE Alg. 1: missing low-score experts swapped for resident or "
             "batch top-score ones scoring within alpha of S_{k+1}; own router weight",
    .create = importance_create,
    .destroy = importance_destroy,
    .route = importance_route,
};
