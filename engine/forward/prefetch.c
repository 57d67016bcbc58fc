/* Cross-layer prefetching by the predict module (prefetch.h). */
#include "engine/forward/prefetch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/engine_options.h"
#include "policy/choose.h"
#include "policy/predict_common.h"
#include "vmm/error.h"

struct mvm_prefetcher {
    mvm_resid *resid;
    const mvm_predict_ops *ops;
    void *self;
    uint32_t n_layers, n_experts, top_k;
    int window;                 /* MoEpic's window (MOEVM_PREFETCH=window) */
    uint64_t buffer;            /* its pages: top_k experts' (MoEpic's U_b = K) */
    float *ahead;               /* [MVM_ASSIGN_AHEAD][E] the module's forecasts */
    uint32_t n_ahead;           /* of them, made for the step of layer `for_layer` */
    uint32_t for_layer;
    uint32_t *named;            /* [top_k] the experts the last forecast named, best first */
    uint32_t n_named, named_layer; /* their number, and the layer they are of */
    float *rank;                /* [E] the window's ranking of that layer's experts */
    uint32_t *order;            /* [E] the experts asked for, in order: named, or the window's */
    uint32_t n_order;
    mvm_prefetch_stats stats;
};

mvm_status mvm_prefetcher_create(const mvm_model *m, mvm_resid *resid, const mvm_router *router,
                                 const mvm_prefetch_params *p, mvm_prefetcher **out)
{
    *out = NULL;
    const void *ops = NULL;
    const char *args = NULL;
    mvm_option_value mode;
    mvm_status st = mvm_engine_choose(MVM_ROLE_PREDICT, p->predict, p->predict_args, &ops, &args);
    if (st == MVM_OK)
        st = mvm_option_read(&mvm_opt_prefetch, &mode);
    if (st != MVM_OK || !ops)
        return st;
    mvm_prefetcher *f = calloc(1, sizeof *f);
    if (!f)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the prefetcher");
    f->resid = resid;
    f->n_layers = m->hp.n_layer;
    f->n_experts = m->hp.n_expert;
    f->top_k = m->hp.n_expert_used;
    f->window = mode.i == 1;
    f->ahead = calloc((size_t)MVM_ASSIGN_AHEAD * f->n_experts, sizeof *f->ahead);
    f->named = calloc(f->top_k, sizeof *f->named);
    f->rank = calloc(f->n_experts, sizeof *f->rank);
    f->order = calloc(f->n_experts, sizeof *f->order);
    if (!f->ahead || !f->named || !f->rank || !f->order)
        st = mvm_fail(MVM_ERR_NOMEM, "out of memory for the prefetcher");
    mvm_pinit in;
    mvm_resid_pinit(resid, &in);
    f->buffer = (uint64_t)f->top_k * in.shape->pages_per_expert;
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
    free(p->rank);
    free(p->order);
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

void mvm_prefetcher_cut(mvm_prefetcher *p, const mvm_pstep *step)
{
    if (!p || step->layer != p->named_layer)
        return;
    for (uint32_t i = 0; i < p->n_order; i++)
        if (!step->counts[p->order[i]])
            (void)mvm_resid_cancel_prefetch(p->resid, step->layer, p->order[i]);
    p->n_order = 0; /* used up: a later step of this layer (the next token's) cuts only the
                       copies a forecast made for it */
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
    const uint32_t E = p->n_experts;
    /* The window ranks every expert where the module can (else by the forecast's shares),
     * asks for them in that order while the buffer holds their missing pages, and the copy
     * engine takes them until the layer routes. */
    int ranked = p->window && p->ops->rank && p->ops->rank(p->self, step, p->named_layer, p->rank);
    p->n_named = mvm_predict_order(p->ahead, E, p->top_k, 0, p->named);
    p->n_order = p->window ? mvm_predict_order(ranked ? p->rank : p->ahead, E, E,
                                               ranked ? -INFINITY : 0, p->order)
                           : p->n_named;
    if (!p->window)
        memcpy(p->order, p->named, p->n_named * sizeof *p->order);
    p->stats.forecasts++;
    p->stats.named += p->n_named;
    uint64_t room = p->buffer;
    for (uint32_t i = 0; i < p->n_order; i++) {
        uint32_t need = mvm_resid_missing(p->resid, p->named_layer, p->order[i]);
        if (p->window && need > room) {
            p->n_order = i; /* the buffer is full: the rest are not asked for */
            break;
        }
        if (p->window)
            room -= need;
        mvm_status st = p->window ? mvm_resid_prefetch_window(p->resid, p->named_layer, p->order[i])
                                  : mvm_resid_prefetch(p->resid, p->named_layer, p->order[i]);
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

int mvm_prefetcher_window(const mvm_prefetcher *p)
{
    return p && p->window;
}

void mvm_prefetcher_get_stats(const mvm_prefetcher *p, mvm_prefetch_stats *out)
{
    *out = p ? p->stats : (mvm_prefetch_stats){0};
}
