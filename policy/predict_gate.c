/*
 * predict "gate": the gate-based predictor, the baseline both PreScope (Fig. 6 "gate-based":
 * apply the next layer's gate to the current gate input) and DALI (§4.2, the scheme its
 * residual refines) compare with. Adjacent layers' gate inputs are close (the residual stream
 * changes little per layer), so layer `target`'s router applied to layer l's MoE input routes
 * nearly as layer `target` will.
 *
 * predict(step, target, out): for each of the step's tokens, layer target's router
 * (init->router, policy.h: its F32 weights, plus its logit bias where it has one: gpt-oss) on
 * the token's hidden state (step->hidden, the layer's MoE input), its top_k chosen as the
 * model chooses (policy/router.h: by sigmoid plus a choose bias, within groups, where the
 * model does); out[e] = the share of the n_tok tokens that picked e (predict_common.h:
 * per-token top-k then count). Any later layer may be the target; the farther, the less alike
 * the gate inputs. The papers' models (Mixtral, Qwen, DeepSeek-V2-Lite) choose by softmax;
 * choosing by the router's own rule is the reading that extends the scheme to the others.
 *
 * rank(step, target, out): the same router's probabilities, averaged over the tokens: MoEpic's
 * speculative prediction (Eq. 3), the order its prefetch window takes every expert in.
 *
 * Returns 0, out untouched, when it cannot predict: no hidden state in the step (a
 * synthetic trace), no tokens, target not in (step->layer, n_layers), or no router for
 * that layer (weights[target] NULL). Without routers at all (no init->router weights)
 * create fails: the module has nothing to predict with. No parameters.
 */
#include <stdlib.h>

#include "policy/modules.h"
#include "policy/predict_common.h"
#include "vmm/error.h"

typedef struct gate {
    mvm_pshape shape;
    const mvm_router *router;    /* the caller's, alive as long as the module */
    float *logits;               /* [3E] scratch: the logits, then mvm_router_pick's */
} gate;

static void gate_destroy(void *self)
{
    gate *g = self;
    if (!g)
        return;
    free(g->logits);
    free(g);
}

static mvm_status gate_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {NULL};
    const char *me = "predict gate";
    *self = NULL;
    mvm_status st = mvm_pparams_check(&init->params, known, me);
    if (st == MVM_OK)
        st = mvm_predict_check_shape(init->shape, me);
    if (st != MVM_OK)
        return st;
    if (!init->router || !init->router->weights)
        return mvm_fail(MVM_ERR_INVALID,
                        "predict gate: needs the model's router weights (give a GGUF model)");
    gate *g = calloc(1, sizeof *g);
    if (!g)
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    g->shape = *init->shape;
    g->router = init->router;
    g->logits = calloc(3 * (size_t)g->shape.n_experts, sizeof *g->logits);
    if (!g->logits) {
        gate_destroy(g);
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    }
    *self = g;
    return MVM_OK;
}

static int gate_can(const gate *g, const mvm_pstep *step, uint32_t target)
{
    return step->hidden && step->n_tok && target > step->layer && target < g->shape.n_layers &&
           g->router->weights[target];
}

static int gate_predict(void *self, const mvm_pstep *step, uint32_t target, float *out)
{
    gate *g = self;
    const mvm_pshape *sh = &g->shape;
    if (!gate_can(g, step, target))
        return 0;
    mvm_predict_route(g->router, target, sh, step->hidden, step->n_tok,
                      mvm_predict_logit_bias(g->router, target), g->logits,
                      g->logits + sh->n_experts, out);
    return 1;
}

static int gate_rank(void *self, const mvm_pstep *step, uint32_t target, float *out)
{
    gate *g = self;
    const mvm_pshape *sh = &g->shape;
    if (!gate_can(g, step, target))
        return 0;
    mvm_predict_rank_route(g->router, target, sh, step->hidden, step->n_tok,
                           mvm_predict_logit_bias(g->router, target), g->logits,
                           g->logits + sh->n_experts, out);
    return 1;
}

const mvm_predict_ops mvm_predict_gate = {
    .name = "gate",
    .about = "gate-based (PreScope Fig. 6 baseline, DALI §4.2 without residual): layer "
             "target's router on layer l's hidden state, per-token top-k, token shares",
    .create = gate_create,
    .destroy = gate_destroy,
    .predict = gate_predict,
    .rank = gate_rank,
    .observe = NULL,
};
