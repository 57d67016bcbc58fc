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
 * model was trained on) or no tokens.
 *
 * Online fine-tuning (§4.2, "LLaPor can be embedded in the inference module to collect new
 * samples and perform online gradient updates"; period, sample count and rate not given),
 * off by default: with tune=N, observe keeps each target layer's last `samples` tokens (layer
 * t-1's hidden state and routing, and the experts layer t then chose: at most PENDING tokens
 * of each step) and, after every N tokens, runs `steps` AdamW steps of `batch` samples at
 * rate `lr` on each target layer (predictor_train.c, mvm_predictor_tune). A round costs
 * about steps · batch · 3 forward passes of each layer's model, on the thread that observes.
 * Parameters: tune (tokens between rounds, 0 = never; default 0), samples (default 256),
 * steps (default 4), batch (default 32, at most samples), lr (default 3e-3, a third of the
 * offline peak: in tests/test_policy_predict.c test_learned_tuning it learns a changed rule
 * within 600 tokens and keeps an unchanged one; 1e-3 was half as quick).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy/modules.h"
#include "policy/predict_common.h"
#include "policy/predictor_mlp.h"
#include "vmm/error.h"

/* Tokens of one step that become samples for the fine-tuning (a prefill batch gives the
 * first ones): the rest would only overwrite them in the ring. */
#define PENDING 16u

typedef struct learned {
    mvm_pshape shape;
    mvm_predictor *model;
    float *work;                 /* mvm_predictor_work floats */
    mvm_predictor_tuner *tuner;  /* NULL: no fine-tuning */
    uint32_t tune, steps;        /* tokens between rounds; AdamW steps a round */
    float lr;
    double tokens, next_round;   /* tokens observed (at the last layer); when to tune next */
    /* the last observed layer's first PENDING tokens, the features of the next layer's
     * samples */
    uint32_t pend_layer, pend_n; /* UINT32_MAX: none */
    float *pend_hidden;          /* [PENDING][D] */
    int32_t *pend_experts;       /* [PENDING][K] */
    float *pend_weights;         /* [PENDING][K] */
} learned;

static void learned_destroy(void *self)
{
    learned *s = self;
    if (!s)
        return;
    mvm_predictor_free(s->model);
    mvm_predictor_tuner_free(s->tuner);
    free(s->work);
    free(s->pend_hidden);
    free(s->pend_experts);
    free(s->pend_weights);
    free(s);
}

static mvm_status learned_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {"tune", "samples", "steps", "batch", "lr", NULL};
    const char *me = "predict learned";
    double tune, samples, steps, batch, lr;
    *self = NULL;
    mvm_status st = mvm_pparams_check(&init->params, known, me);
    if (st == MVM_OK)
        st = mvm_predict_check_shape(init->shape, me);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "tune", 0, &tune);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "samples", 256, &samples);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "steps", 4, &steps);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "batch", 32, &batch);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "lr", 3e-3, &lr);
    if (st != MVM_OK)
        return st;
    const struct { const char *name; double v, lo, hi; } whole[] = {
        {"tune", tune, 0, 1e9}, {"samples", samples, 1, 65536}, {"steps", steps, 1, 1e6},
        {"batch", batch, 1, samples}};
    for (size_t i = 0; i < sizeof whole / sizeof *whole; i++)
        if (!(whole[i].v >= whole[i].lo && whole[i].v <= whole[i].hi &&
              whole[i].v == floor(whole[i].v)))
            return mvm_fail(MVM_ERR_INVALID, "%s: %s=%g is not a whole number in [%g, %g]", me,
                            whole[i].name, whole[i].v, whole[i].lo, whole[i].hi);
    if (!(lr > 0 && lr <= 1))
        return mvm_fail(MVM_ERR_INVALID, "%s: lr=%g is not in (0, 1]", me, lr);
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
    s->tune = (uint32_t)tune;
    s->steps = (uint32_t)steps;
    s->lr = (float)lr;
    s->next_round = tune;
    s->pend_layer = UINT32_MAX;
    const mvm_pshape *sh = init->shape;
    int ok = s->work != NULL;
    if (ok && s->tune)
        ok = (s->tuner = mvm_predictor_tuner_new(s->model, (uint32_t)samples, (uint32_t)batch,
                                                 1)) &&
             (s->pend_hidden = malloc((size_t)PENDING * sh->n_embd * sizeof *s->pend_hidden)) &&
             (s->pend_experts = malloc((size_t)PENDING * sh->top_k * sizeof *s->pend_experts)) &&
             (s->pend_weights = malloc((size_t)PENDING * sh->top_k * sizeof *s->pend_weights));
    if (!ok) {
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

/* The fine-tuning's samples: the last layer's pending tokens with this step's experts as
 * their labels; this step's first tokens become the pending ones; a round after every
 * `tune` tokens, once a token has passed the last layer. */
static void learned_observe(void *self, const mvm_pstep *step)
{
    learned *s = self;
    const uint32_t K = s->shape.top_k, D = s->shape.n_embd, l = step->layer;
    if (!s->tuner)
        return;
    uint32_t n = step->n_tok < PENDING ? step->n_tok : PENDING;
    if (l > 0 && s->pend_layer == l - 1 && s->pend_n == n)
        for (uint32_t i = 0; i < n; i++)
            mvm_predictor_tuner_add(s->tuner, s->model, l, s->pend_hidden + (size_t)i * D,
                                    s->pend_experts + (size_t)i * K,
                                    s->pend_weights + (size_t)i * K, step->experts + (size_t)i * K);
    s->pend_layer = UINT32_MAX;
    if (step->hidden && step->weights && n && l + 1 < s->shape.n_layers) {
        memcpy(s->pend_hidden, step->hidden, (size_t)n * D * sizeof *s->pend_hidden);
        memcpy(s->pend_experts, step->experts, (size_t)n * K * sizeof *s->pend_experts);
        memcpy(s->pend_weights, step->weights, (size_t)n * K * sizeof *s->pend_weights);
        s->pend_layer = l;
        s->pend_n = n;
    }
    if (l + 1 == s->shape.n_layers && (s->tokens += step->n_tok) >= s->next_round) {
        mvm_predictor_tune(s->tuner, s->model, s->steps, s->lr);
        s->next_round = s->tokens + s->tune;
    }
}

const mvm_predict_ops mvm_predict_learned = {
    .name = "learned",
    .about = "PreScope LLaPor (§4.2): per-layer PCA + MLP (gated residual block in "
             "the middle group) from `moevm train-predictor`, layer l+1 only, token shares",
    .create = learned_create,
    .destroy = learned_destroy,
    .predict = learned_predict,
    .rank = learned_rank,
    .observe = learned_observe,
};
