/* Cross-layer prefetching by the predict module (prefetch.h). */
#include "engine/forward/prefetch.h"

#include <math.h>
#include <stdlib.h>

#include "policy/choose.h"
#include "vmm/error.h"

struct mvm_prefetcher {
    mvm_resid *resid;
    const mvm_predict_ops *ops;
    void *self;
    uint32_t n_layers, n_experts, depth;
    float *ahead;               /* [MVM_ASSIGN_AHEAD][E] the module's forecasts */
    uint32_t n_ahead;           /* of them, made for the step of layer `for_layer` */
    uint32_t for_layer;
    uint32_t *named;            /* [depth] the experts the last forecast named, best first */
    uint32_t n_named, named_layer; /* their number, and the layer they are of */
    mvm_prefetch_stats stats;
};

mvm_status mvm_prefetcher_create(const mvm_model *m, mvm_resid *resid, const mvm_router *router,
                                 const mvm_prefetch_params *p, mvm_prefetcher **out)
{
    *out = NULL;
    const void *ops = NULL;
    const char *args = NULL;
    mvm_status st = mvm_engine_choose(MVM_ROLE_PREDICT, p->predict, p->predict_args, &ops, &args);
    if (st != MVM_OK || !ops)
        return st;
    mvm_prefetcher *f = calloc(1, sizeof *f);
    if (!f)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the prefetcher");
    f->resid = resid;
    f->n_layers = m->hp.n_layer;
    f->n_experts = m->hp.n_expert;
    f->depth = m->hp.n_expert_used;
    f->ahead = calloc((size_t)MVM_ASSIGN_AHEAD * f->n_experts, sizeof *f->ahead);
    f->named = calloc(f->depth, sizeof *f->named);
    if (!f->ahead || !f->named)
        st = mvm_fail(MVM_ERR_NOMEM, "out of memory for the prefetcher");
    mvm_pinit in;
    mvm_resid_pinit(resid, &in);
    in.params.text = args;
    in.router = router;
    in.predictor = p->predictor;
    in.predictor_size = p->predictor_size;
    if (st == MVM_OK && (st = ((const mvm_predict_ops *)ops)->create(&in, &f->self)) == MVM_OK)
        f->ops = ops;
    if (st != MVM_OK) {
        mvm_prefetcher_destroy(f);
        return st;
    }
    *out = f;
    return MVM_OK;
}

void mvm_prefetcher_destroy(mvm_prefetcher *p)
{
    if (!p)
        return;
    if (p->ops)
        p->ops->destroy(p->self);
    free(p->ahead);
    free(p->named);
    free(p);
}

const char *mvm_prefetcher_name(const mvm_prefetcher *p)
{
    return p ? p->ops->name : "none";
}

uint32_t mvm_prefetcher_predict(mvm_prefetcher *p, const mvm_pstep *step, uint32_t max_ahead,
                                const float **ahead)
{
    *ahead = NULL;
    if (!p)
        return 0;
    if (max_ahead > MVM_ASSIGN_AHEAD)
        max_ahead = MVM_ASSIGN_AHEAD;
    uint32_t n = 0;
    float *out = p->ahead;
    while (n < max_ahead && step->layer + 1 + n < p->n_layers &&
           p->ops->predict(p->self, step, step->layer + 1 + n, out + (size_t)n * p->n_experts))
        n++;
    p->n_ahead = n;
    p->for_layer = step->layer;
    *ahead = n ? p->ahead : NULL;
    return n;
}

/* Once the layer the last forecast named experts of has routed (step): how many it used.
 * At that step's start, before its own forecast replaces them, or at its end. */
static void score_named(mvm_prefetcher *p, const mvm_pstep *step)
{
    if (step->layer != p->named_layer)
        return;
    for (uint32_t i = 0; i < p->n_named; i++)
        p->stats.named_used += step->counts[p->named[i]] > 0;
    p->n_named = 0;
}

mvm_status mvm_prefetcher_ahead(mvm_prefetcher *p, const mvm_pstep *step)
{
    if (!p)
        return MVM_OK;
    score_named(p, step);
    const float *forecast;
    if (!(p->n_ahead && p->for_layer == step->layer) &&
        !mvm_prefetcher_predict(p, step, 1, &forecast))
        return MVM_OK;
    p->n_ahead = 0; /* used up: the next step predicts afresh */
    p->named_layer = step->layer + 1;
    /* The `depth` most likely, best first (ties to the lower id), never a zero forecast. */
    for (p->n_named = 0; p->n_named < p->depth; p->n_named++) {
        uint32_t best = 0;
        for (uint32_t e = 1; e < p->n_experts; e++)
            if (p->ahead[e] > p->ahead[best])
                best = e;
        if (!(p->ahead[best] > 0))
            break;
        p->ahead[best] = -INFINITY;
        p->named[p->n_named] = best;
    }
    p->stats.forecasts++;
    p->stats.named += p->n_named;
    for (uint32_t i = 0; i < p->n_named; i++) {
        mvm_status st = mvm_resid_prefetch(p->resid, p->named_layer, p->named[i]);
        if (st == MVM_ERR_NOSPACE) /* nothing can make room: the rest would not fit either */
            break;
        if (st != MVM_OK)
            return st;
    }
    return MVM_OK;
}

void mvm_prefetcher_observe(mvm_prefetcher *p, const mvm_pstep *step)
{
    if (!p)
        return;
    score_named(p, step);
    if (p->ops->observe)
        p->ops->observe(p->self, step);
}

int mvm_prefetcher_speculative(const mvm_prefetcher *p)
{
    return p && p->ops->speculative;
}

void mvm_prefetcher_get_stats(const mvm_prefetcher *p, mvm_prefetch_stats *out)
{
    *out = p ? p->stats : (mvm_prefetch_stats){0};
}
