/*
 * predict "learned": PreScope's LLaPor (§4.2), a small learned model per target layer that
 * predicts layer t's experts from layer t-1's hidden state and routing (the selected experts
 * and their gate weights). The model, its file and its trainer are predictor_mlp.h's; the
 * weights come from `moevm train-predictor` through init->predictor (the caller reads the
 * file: policy code does no I/O). The file's shape (L, E, top_k, n_embd) must be the model's,
 * or create fails naming both.
 *
 * predict(step, target, out): each of the step's tokens through target's model, its top_k
 * experts by predicted probability; out[e] = the share of the n_tok tokens that picked e. That
 * reads PreScope's step from probabilities to token counts as "per-token top-k, then count"
 * (predict_common.h), the same scale as gate and residual; the mean of the sigmoid
 * probabilities would be the other reading, but the trainer's inverse-frequency weights
 * (predictor_train.c) leave them uncalibrated as shares, while their per-token order is what
 * the loss trains. rank(step, target, out): the model's scores themselves, averaged over
 * the tokens: that order is the one the loss trains, and MoEpic's window takes it.
 *
 * LLaPor predicts one layer ahead ("while layer l executes, the predictor for l+1 is fed
 * layer-l features"), so only target = step->layer + 1 is served. Returns 0, out untouched,
 * otherwise, and when the step has no hidden state or no gate weights (the features the
 * model was trained on) or no tokens. No parameters.
 */
#include <stdlib.h>
#include <string.h>

#include "policy/modules.h"
#include "policy/predict_common.h"
#include "policy/predictor_mlp.h"
#include "vmm/error.h"

typedef struct learned {
    mvm_pshape shape;
    mvm_predictor *model;
    float *work; /* mvm_predictor_work floats */
} learned;

static void learned_destroy(void *self)
{
    learned *s = self;
    if (!s)
        return;
    mvm_predictor_free(s->model);
    free(s->work);
    free(s);
}

static mvm_status learned_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {NULL};
    const char *me = "predict learned";
    *self = NULL;
    mvm_status st = mvm_pparams_check(&init->params, known, me);
    if (st == MVM_OK)
        st = mvm_predict_check_shape(init->shape, me);
    if (st != MVM_OK)
        return st;
    if (!init->predictor)
        return mvm_fail(MVM_ERR_INVALID,
                        "predict learned: no predictor weights (train one with `moevm "
                        "train-predictor`, pass --predictor FILE)");
    learned *s = calloc(1, sizeof *s);
    if (!s)
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    s->shape = *init->shape;
    st = mvm_predictor_parse(init->predictor, init->predictor_size, init->shape, &s->model);
    if (st != MVM_OK) {
        learned_destroy(s);
        return st;
    }
    s->work = calloc(mvm_predictor_work(s->model), sizeof *s->work);
    if (!s->work) {
        learned_destroy(s);
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    }
    *self = s;
    return MVM_OK;
}

/* Each of the step's tokens through target's model: its top_k's token shares (vote), or
 * every expert's score averaged over the tokens (the ranking of MoEpic's window). */
static int learned_run(learned *s, const mvm_pstep *step, uint32_t target, int vote, float *out)
{
    const uint32_t E = s->shape.n_experts, K = s->shape.top_k, D = s->shape.n_embd;
    if (!step->hidden || !step->weights || !step->n_tok || target != step->layer + 1 ||
        target >= s->shape.n_layers)
        return 0;
    memset(out, 0, E * sizeof *out);
    for (uint32_t t = 0; t < step->n_tok; t++) {
        const float *logits = mvm_predictor_logits(
            s->model, target, step->hidden + (size_t)t * D, step->experts + (size_t)t * K,
            step->weights + (size_t)t * K, s->work);
        if (vote)
            mvm_predict_vote(logits, E, K, 1, out);
        for (uint32_t e = 0; !vote && e < E; e++)
            out[e] += logits[e];
    }
    for (uint32_t e = 0; e < E; e++)
        out[e] /= (float)step->n_tok;
    return 1;
}

static int learned_predict(void *self, const mvm_pstep *step, uint32_t target, float *out)
{
    return learned_run(self, step, target, 1, out);
}

static int learned_rank(void *self, const mvm_pstep *step, uint32_t target, float *out)
{
    return learned_run(self, step, target, 0, out);
}

const mvm_predict_ops mvm_predict_learned = {
    .name = "learned",
    .about = "PreScope LLaPor (§4.2): per-layer PCA + MLP (gated residual block in "
             "the middle group) from `moevm train-predictor`, layer l+1 only, token shares",
    .create = learned_create,
    .destroy = learned_destroy,
    .predict = learned_predict,
    .rank = learned_rank,
    .observe = NULL,
};
