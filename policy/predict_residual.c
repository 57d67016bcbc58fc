/*
 * predict "residual": DALI's residual-based prefetching (§4.2, Eqs. 10-11). The gate-based
 * prediction (predict_gate.c) applies layer l+1's router to layer l's gate input h_l; but the
 * gate input of l+1 is h_{l+1} = h_l + (what layer l adds to the residual stream), and that
 * update has a large mean component shared by all tokens. DALI adds it back (Eq. 10):
 *     h~ = h_l + res_l,   predicted experts of l+1 = TopK(router_{l+1}(h~)),
 * with res_l the mean of h_{l+1} - h_l over calibration tokens (Eq. 11). For a target
 * further ahead the residuals of every layer in between add up:
 *     h~ = h_l + res_l + res_{l+1} + ... + res_{target-1}.
 * out[e] is then, as in gate, the share of the step's tokens whose top_k holds e
 * (predict_common.h), chosen as the model chooses (policy/router.h); rank, the router's
 * probabilities on h~ averaged (gate's rank on the corrected state). Returns 0 exactly
 * when gate would (no hidden state, no tokens, target not in (step->layer, n_layers), no
 * router for it); create fails without routers.
 *
 * Reading of the calibration: DALI calibrates offline on 1K Wikitext sequences and freezes
 * res_l. A module sees no calibration set, so it calibrates online from the run itself:
 * observe() keeps the last step's hidden rows, and when the next step is layer l+1 for the
 * same tokens (same n_tok, right after layer l's step: the caller observes each batch's
 * layers in order), every token adds h_{l+1} - h_l to a running mean of layer l (Eq. 11
 * over the tokens seen so far, kept updating: drift is followed, the mean stays exact).
 * A step without hidden states, or one that does not follow its predecessor that way,
 * starts a new pairing. Until layer l has `warmup` samples (tokens), res_l counts as 0, so
 * the module predicts as gate does while the mean is still noise.
 *
 * Batches: the row buffer is allocated at create for max_tokens rows; a larger batch pairs
 * only its first max_tokens tokens (a sample of the batch: the mean is over tokens, and
 * token order within a batch carries no bias the module knows of). Nothing is allocated
 * after create.
 *
 * Parameters: warmup (tokens, whole, >= 0), default 16; max_tokens (rows kept per step,
 * whole, 1..65536), default 64. Neither is from the paper, which calibrates offline.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy/modules.h"
#include "policy/predict_common.h"
#include "vmm/error.h"

typedef struct residual {
    mvm_pshape shape;
    const mvm_router *router;
    double warmup;
    uint32_t max_tokens;
    double *mean;        /* [L][n_embd] running mean of h_{l+1} - h_l */
    uint64_t *n;         /* [L] tokens in each mean */
    float *prev;         /* [max_tokens][n_embd] the last step's first rows */
    uint32_t prev_layer, prev_tok;
    int have_prev;
    float *offset;       /* [n_embd] scratch: the summed residuals */
    float *bias;         /* [E] scratch: router · offset + the router's bias */
    float *logits;       /* [3E] scratch: the logits, then mvm_router_pick's */
} residual;

static void residual_destroy(void *self)
{
    residual *r = self;
    if (!r)
        return;
    free(r->mean);
    free(r->n);
    free(r->prev);
    free(r->offset);
    free(r->bias);
    free(r->logits);
    free(r);
}

static mvm_status residual_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {"warmup", "max_tokens", NULL};
    const char *me = "predict residual";
    double warmup, max_tokens;
    *self = NULL;
    mvm_status st = mvm_pparams_check(&init->params, known, me);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "warmup", 16, &warmup);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "max_tokens", 64, &max_tokens);
    if (st == MVM_OK)
        st = mvm_predict_check_shape(init->shape, me);
    if (st != MVM_OK)
        return st;
    if (!(warmup >= 0 && warmup <= 1e15 && warmup == floor(warmup)))
        return mvm_fail(MVM_ERR_INVALID, "%s: warmup=%g is not a whole number >= 0", me,
                        warmup);
    if (!(max_tokens >= 1 && max_tokens <= 65536 && max_tokens == floor(max_tokens)))
        return mvm_fail(MVM_ERR_INVALID, "%s: max_tokens=%g is not a whole number in [1, 65536]",
                        me, max_tokens);
    if (!init->router || !init->router->weights)
        return mvm_fail(MVM_ERR_INVALID,
                        "%s: needs the model's router weights (give a GGUF model)", me);
    const mvm_pshape *sh = init->shape;
    residual *r = calloc(1, sizeof *r);
    if (!r)
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    r->shape = *sh;
    r->router = init->router;
    r->warmup = warmup;
    r->max_tokens = (uint32_t)max_tokens;
    r->mean = calloc((size_t)sh->n_layers * sh->n_embd, sizeof *r->mean);
    r->n = calloc(sh->n_layers, sizeof *r->n);
    r->prev = calloc((size_t)r->max_tokens * sh->n_embd, sizeof *r->prev);
    r->offset = calloc(sh->n_embd, sizeof *r->offset);
    r->bias = calloc(sh->n_experts, sizeof *r->bias);
    r->logits = calloc(3 * (size_t)sh->n_experts, sizeof *r->logits);
    if (!r->mean || !r->n || !r->prev || !r->offset || !r->bias || !r->logits) {
        residual_destroy(r);
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    }
    *self = r;
    return MVM_OK;
}

/* Eq. 11, online: h_{l+1} - h_l of each paired token into layer l's running mean. */
static void residual_observe(void *self, const mvm_pstep *step)
{
    residual *r = self;
    const uint32_t D = r->shape.n_embd, l = step->layer;
    if (!step->hidden || !step->n_tok || l >= r->shape.n_layers) {
        r->have_prev = 0;
        return;
    }
    uint32_t rows = step->n_tok < r->max_tokens ? step->n_tok : r->max_tokens;
    if (r->have_prev && l == r->prev_layer + 1 && step->n_tok == r->prev_tok) {
        double *mean = r->mean + (size_t)r->prev_layer * D;
        for (uint32_t t = 0; t < rows; t++) {
            const float *h = step->hidden + (size_t)t * D, *p = r->prev + (size_t)t * D;
            double inv = 1.0 / (double)++r->n[r->prev_layer];
            for (uint32_t i = 0; i < D; i++)
                mean[i] += ((double)h[i] - (double)p[i] - mean[i]) * inv;
        }
    }
    memcpy(r->prev, step->hidden, (size_t)rows * D * sizeof *r->prev);
    r->prev_layer = l;
    r->prev_tok = step->n_tok;
    r->have_prev = 1;
}

/* The logit bias of layer target's router on h + the mean residuals from step->layer to
 * target (router · offset plus the router's own bias); NULL for none. */
static const float *residual_bias(residual *r, const mvm_pstep *step, uint32_t target)
{
    const mvm_pshape *sh = &r->shape;
    const uint32_t D = sh->n_embd, E = sh->n_experts;
    int any = 0;
    memset(r->offset, 0, D * sizeof *r->offset);
    for (uint32_t l = step->layer; l < target; l++) {
        if ((double)r->n[l] < r->warmup || r->n[l] == 0)
            continue; /* not calibrated yet: 0, as gate */
        const double *mean = r->mean + (size_t)l * D;
        for (uint32_t i = 0; i < D; i++)
            r->offset[i] += (float)mean[i];
        any = 1;
    }
    /* router · (h + offset) + b = router · h + (router · offset + b): the second term once
     * per step. */
    const float *b = mvm_predict_logit_bias(r->router, target);
    if (!any)
        return b;
    mvm_predict_matvec(r->router->weights[target], E, D, r->offset, r->bias);
    for (uint32_t e = 0; b && e < E; e++)
        r->bias[e] += b[e];
    return r->bias;
}

static int residual_can(const residual *r, const mvm_pstep *step, uint32_t target)
{
    return step->hidden && step->n_tok && target > step->layer && target < r->shape.n_layers &&
           r->router->weights[target];
}

static int residual_predict(void *self, const mvm_pstep *step, uint32_t target, float *out)
{
    residual *r = self;
    if (!residual_can(r, step, target))
        return 0;
    mvm_predict_route(r->router, target, &r->shape, step->hidden, step->n_tok,
                      residual_bias(r, step, target), r->logits,
                      r->logits + r->shape.n_experts, out);
    return 1;
}

/* predict's router probabilities, averaged: the order of MoEpic's window. */
static int residual_rank(void *self, const mvm_pstep *step, uint32_t target, float *out)
{
    residual *r = self;
    if (!residual_can(r, step, target))
        return 0;
    mvm_predict_rank_route(r->router, target, &r->shape, step->hidden, step->n_tok,
                           residual_bias(r, step, target), r->logits,
                           r->logits + r->shape.n_experts, out);
    return 1;
}

const mvm_predict_ops mvm_predict_residual = {
    .name = "residual",
    .about = "DALI residual prefetching (Eqs. 10-11): router of target on h + the "
             "mean residuals in between, calibrated online (gate until `warmup` tokens)",
    .create = residual_create,
    .destroy = residual_destroy,
    .predict = residual_predict,
    .rank = residual_rank,
    .observe = residual_observe,
};
