/*
 * predict "speculative": SMoE's top-score expert prefetching (§IV-C, Fig. 7). Once
 * the step of layer l has computed its shared experts and the routed experts that were
 * resident, the engine runs the rest of a forward pass speculatively: that partial hidden
 * state through layer l+1's attention (against its KV cache, whose rows for these positions
 * the real pass writes again) and layer l+1's FFN norm (forward_cpu.c). The result is
 * step->next_hidden; this module puts it through layer l+1's router and forecasts each
 * token's *top-score* experts there: those the router selects with a probability of at
 * least (1+α)·S_{k+1}, S_{k+1} being the best probability it did not select. These are the
 * experts SMoE's expert-cache router (route "importance") always computes, so they are
 * worth a copy; the low-score ones may be substituted and are not prefetched (§IV-C,
 * criterion C4). out[e] = the share of the step's tokens for which e is such an expert.
 *
 * Readings where the paper is silent: the rule for "predicted top-score" is the router's
 * own rule (route_importance.c) applied to the predicted probabilities, with the same α
 * (default 0.3, the middle of the paper's 0.25-0.35); the selection is the model's own
 * choice rule (policy/router.h: softmax or sigmoid, choose bias, groups); at most top_k
 * experts are prefetched, best first (the engine's prefetcher), as SMoE bounds prefetching
 * by the time to layer l+1's experts; a batch takes its tokens' shares (the paper is
 * batch 1). Only layer l+1 can be predicted: the pass goes one attention ahead. Without
 * next_hidden (the simulator, which has no attention to run; the device pass, which does
 * not run the speculative pass yet) the module cannot predict and nothing is prefetched.
 *
 * Parameter: alpha in [0, 1], default 0.3.
 */
#include <stdlib.h>

#include "policy/modules.h"
#include "policy/predict_common.h"
#include "vmm/error.h"

typedef struct speculative {
    mvm_pshape shape;
    const mvm_router *router;   /* the caller's, alive as long as the module */
    double alpha;
    float *logits;              /* [4E] scratch: logits, probabilities, mvm_router_pick's */
} speculative;

static void spec_destroy(void *self)
{
    speculative *s = self;
    if (!s)
        return;
    free(s->logits);
    free(s);
}

static mvm_status spec_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {"alpha", NULL};
    const char *me = "predict speculative";
    *self = NULL;
    double alpha = 0.3;
    mvm_status st = mvm_pparams_check(&init->params, known, me);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "alpha", 0.3, &alpha);
    if (st == MVM_OK && !(alpha >= 0 && alpha <= 1))
        st = mvm_fail(MVM_ERR_INVALID, "%s: alpha=%g is not in [0, 1]", me, alpha);
    if (st == MVM_OK)
        st = mvm_predict_check_shape(init->shape, me);
    if (st != MVM_OK)
        return st;
    if (!init->router || !init->router->weights)
        return mvm_fail(MVM_ERR_INVALID, "%s: needs the model's router weights (give a GGUF "
                        "model)", me);
    speculative *s = calloc(1, sizeof *s);
    if (!s)
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    s->shape = *init->shape;
    s->router = init->router;
    s->alpha = alpha;
    s->logits = calloc(4 * (size_t)s->shape.n_experts, sizeof *s->logits);
    if (!s->logits) {
        spec_destroy(s);
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    }
    *self = s;
    return MVM_OK;
}

/* One token's top-score experts at layer l from its hidden state h: each adds 1 to out. */
static void token_top_score(speculative *s, uint32_t l, const float *h, float *out)
{
    const uint32_t E = s->shape.n_experts, K = s->shape.top_k;
    float *logits = s->logits, *p = logits + E, *scratch = logits + 2 * E;
    const float *bias = mvm_predict_logit_bias(s->router, l);
    uint32_t idx[MVM_PREDICT_MAX_K];
    mvm_predict_matvec(s->router->weights[l], E, s->shape.n_embd, h, logits);
    for (uint32_t e = 0; e < E; e++)
        p[e] = logits[e] += bias ? bias[e] : 0;
    mvm_router_probs(s->router, p, E);
    uint32_t got = mvm_router_pick(s->router, l, logits, E, K, idx, scratch);
    float next = 0; /* S_{k+1}: the best probability not selected */
    for (uint32_t e = 0; e < E; e++) {
        int sel = 0;
        for (uint32_t j = 0; j < got && !sel; j++)
            sel = idx[j] == e;
        if (!sel && p[e] > next)
            next = p[e];
    }
    const float top = (float)((1 + s->alpha) * next);
    for (uint32_t j = 0; j < got; j++)
        if (p[idx[j]] >= top)
            out[idx[j]] += 1;
}

static int spec_predict(void *self, const mvm_pstep *step, uint32_t target, float *out)
{
    speculative *s = self;
    const mvm_pshape *sh = &s->shape;
    if (!step->next_hidden || !step->n_tok || target != step->layer + 1 ||
        target >= sh->n_layers || !s->router->weights[target])
        return 0;
    for (uint32_t e = 0; e < sh->n_experts; e++)
        out[e] = 0;
    for (uint32_t t = 0; t < step->n_tok; t++)
        token_top_score(s, target, step->next_hidden + (uint64_t)t * sh->n_embd, out);
    for (uint32_t e = 0; e < sh->n_experts; e++)
        out[e] /= (float)step->n_tok; /* whole counts first: exactly count / n_tok */
    return 1;
}

const mvm_predict_ops mvm_predict_speculative = {
    .name = "speculative",
    .about = "SMoE §IV-C: the partial hidden state (shared and resident experts) through the "
             "next layer's attention and router; its top-score experts (p >= (1+alpha) "
             "S_{k+1})",
    .create = spec_create,
    .destroy = spec_destroy,
    .predict = spec_predict,
    .observe = NULL,
    .speculative = 1,
};
