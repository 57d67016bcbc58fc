/*
 * predict "oracle": the perfect predictor, the bound for gate, residual and learned. It
 * reads layer `target`'s actual selection for the current token from the routing still to
 * come (policy.h, mvm_pfuture), which only the simulator has: `moevm sim` runs it to show
 * what prefetching could gain with predictions that never miss. The engine and the
 * interposer cannot (create fails, naming why).
 *
 * The clock is the steps observed so far (the predict observe hook), so while the caller
 * assigns step p (token p / L at layer p % L, observed after) a prediction for layer
 * `target` of the same token is step p - layer + target. out[e] is 1 for the experts that
 * step selects and 0 for the others, the predict contract's token shares for one token
 * (predict_common.h). A route module that substitutes experts changes what is used, not
 * what the trace says: the oracle predicts the trace. Returns 0 (no prediction) when the
 * caller's step is not the one the clock expects (not replaying the future in order), when
 * target is not a later layer, or past the end of the future. No parameters.
 */
#include <stdlib.h>
#include <string.h>

#include "policy/modules.h"
#include "vmm/error.h"

typedef struct oracle {
    mvm_pshape shape;
    mvm_pfuture future;        /* the caller's arrays, alive as long as the module */
    uint64_t clock;            /* steps observed */
} oracle;

static void oracle_destroy(void *self) { free(self); }

static mvm_status oracle_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {NULL};
    mvm_status st = mvm_pparams_check(&init->params, known, "predict oracle");
    if (st != MVM_OK)
        return st;
    if (!init->future || !init->future->experts)
        return mvm_fail(MVM_ERR_INVALID,
                        "predict oracle: an offline bound that reads the routing still to "
                        "come; only `moevm sim` replays a known future (use it there)");
    oracle *o = calloc(1, sizeof *o);
    if (!o)
        return mvm_fail(MVM_ERR_NOMEM, "predict oracle: out of memory");
    o->shape = *init->shape;
    o->future = *init->future;
    *self = o;
    return MVM_OK;
}

static int oracle_predict(void *self, const mvm_pstep *step, uint32_t target, float *out)
{
    const oracle *o = self;
    const uint32_t L = o->shape.n_layers, E = o->shape.n_experts, K = o->shape.top_k;
    uint64_t tok = o->clock / L;
    if (o->clock % L != step->layer || target <= step->layer || target >= L ||
        tok >= o->future.n_tokens)
        return 0;
    const int32_t *sel = o->future.experts + (tok * L + target) * K;
    memset(out, 0, E * sizeof *out);
    for (uint32_t k = 0; k < K; k++)
        if (sel[k] >= 0 && (uint32_t)sel[k] < E)
            out[sel[k]] = 1.0f;
    return 1;
}

static void oracle_observe(void *self, const mvm_pstep *step)
{
    (void)step;
    ((oracle *)self)->clock++;
}

const mvm_predict_ops mvm_predict_oracle = {
    .name = "oracle",
    .about = "perfect prediction, read from the trace: moevm sim only, the bound for the "
             "other predictors",
    .create = oracle_create,
    .destroy = oracle_destroy,
    .predict = oracle_predict,
    .observe = oracle_observe,
};
