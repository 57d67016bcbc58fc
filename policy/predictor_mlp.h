/*
 * The learned predictor of predict "learned" (predict_learned.c): PreScope's LLaPor (§4.2),
 * one small network per target layer that predicts layer t's experts from layer t-1's hidden
 * state and routing. This header defines its file format (what `moevm train-predictor` writes
 * and the module reads), the forward pass, and the offline trainer. Everything here is pure
 * memory work: the caller reads and writes files.
 *
 * The model for target layer t (1 <= t < L), on one token of layer t-1 with hidden state h
 * [D], selected experts S and gate weights w:
 *     z  = proj · (h - mu)                      PCA to r dims, scaled to unit variance
 *     x  = concat(z, m)                         m[e] = w of e if e in S, else 0 (E dims)
 *     h1 = GELU(W1 x + b1)                      [H]
 *   middle group only ("gated", one residual block modulated by the hidden state):
 *     h1 = h1 + σ(Wg z + bg) ⊙ GELU(W4 GELU(W3 h1 + b3) + b4)
 *     logits = W2 h1 + b2,  p = σ(logits)       [E], one independent sigmoid per expert
 * Input and output groups are "shallow" (no residual block), as LLaPor prescribes against
 * over-fitting their noisier features; the groups and widths are the trainer's choice
 * (predictor_train.c) and recorded per layer in the file.
 *
 * The file: little-endian, no padding, u32 integers and IEEE-754 f32 reals:
 *     "MVMPRED1"                      8 bytes
 *     version                         u32, MVM_PREDICTOR_VERSION
 *     n_layers L, n_experts E, top_k K, n_embd D      u32 each; must match the model
 *     for each target layer t = 1 .. L-1:
 *         kind (0 shallow, 1 gated), rank r (1..D), hidden H (1..MVM_PREDICTOR_MAX_HIDDEN)
 *         mu[D]  proj[r][D]  W1[H][r+E]  b1[H]
 *         kind 1 only:  W3[H][H]  b3[H]  W4[H][H]  b4[H]  Wg[H][r]  bg[H]
 *         W2[E][H]  b2[E]
 *     and nothing after the last layer.
 * Matrices are row-major ([rows][cols]: the element (i, j) at i·cols + j). Every real must
 * be finite. There is no model for layer 0 (nothing precedes it).
 */
#ifndef MVM_POLICY_PREDICTOR_MLP_H
#define MVM_POLICY_PREDICTOR_MLP_H

#include <stddef.h>
#include <stdint.h>

#include "moevm/moevm.h"
#include "policy/policy.h"

#define MVM_PREDICTOR_MAGIC "MVMPRED1"
#define MVM_PREDICTOR_VERSION 1u
#define MVM_PREDICTOR_MAX_HIDDEN 4096u

enum { MVM_PREDICTOR_SHALLOW = 0, MVM_PREDICTOR_GATED = 1 };

typedef struct mvm_predictor mvm_predictor;

/* Parses a predictor file's bytes (copied: blob may go once this returns). With `expect`
 * non-NULL, its n_layers, n_experts, top_k and n_embd must be the file's. Every size,
 * count and value is checked; MVM_ERR_INVALID with a one-line "predictor: ..." message
 * (truncation, bad magic or version, shape, a non-finite weight, trailing bytes),
 * MVM_ERR_NOMEM. */
mvm_status mvm_predictor_parse(const void *blob, size_t size, const mvm_pshape *expect,
                               mvm_predictor **out);
/* NULL is a no-op. */
void mvm_predictor_free(mvm_predictor *p);

/* Floats of scratch one mvm_predictor_logits call needs. */
size_t mvm_predictor_work(const mvm_predictor *p);
/* The E logits of target layer t's experts for one token of layer t-1: h [D], experts and
 * weights [K] (ids outside 0..E-1 are left out of the features). Written into work and
 * returned; NULL when t has no model (t == 0 or t >= L). Top-k of the logits is top-k of p. */
const float *mvm_predictor_logits(const mvm_predictor *p, uint32_t t, const float *h,
                                  const int32_t *experts, const float *weights, float *work);

/* ---- offline training ------------------------------------------------------------------- */

/* Training data in a trace's layout (tools/trace.h): per token and layer, the MoE input
 * and the selected experts (best first) with their gate weights. */
typedef struct mvm_predictor_data {
    uint32_t n_layers, n_experts, top_k, n_embd, n_tokens;
    const float *hidden;     /* [n_tokens][n_layers][n_embd] */
    const int32_t *experts;  /* [n_tokens][n_layers][top_k] */
    const float *weights;    /* [n_tokens][n_layers][top_k] */
} mvm_predictor_data;

/* One target layer's result, held-out top-k hit rates: the share of the actually selected
 * experts that are in the predicted top-k, averaged over the held-out tokens (NaN with no
 * held-out tokens). */
typedef struct mvm_predictor_eval {
    uint32_t kind, rank;        /* the layer's group (MVM_PREDICTOR_*) and PCA width */
    uint32_t n_train, n_test;   /* tokens */
    double loss;                /* mean training loss over the last epoch */
    double hit;                 /* the model */
    double hit_prev;            /* baseline: layer t's experts = layer t-1's (same ids) */
    double hit_pop;             /* baseline: layer t's K most frequent experts in training */
} mvm_predictor_eval;

typedef struct mvm_predictor_train_opts {
    uint32_t rank;      /* PCA width of the middle group; input/output groups ceil(rank/2);
                           both at most n_embd */
    uint32_t hidden;    /* MLP width H */
    uint32_t epochs, batch;
    double lr;          /* AdamW peak rate of the input/output groups; middle: 3x */
    double weight_decay;/* input/output groups; middle: 5x */
    double lambda;      /* weight of the focal term (input/output groups) */
    double gamma;       /* focal focusing exponent */
    double holdout;     /* share of tokens held out for evaluation, the trace's tail, [0, 0.9] */
    uint64_t seed;
    /* Called after each target layer is trained (may be NULL): for progress output. */
    void (*progress)(void *ctx, uint32_t target, const mvm_predictor_eval *ev);
    void *ctx;
} mvm_predictor_train_opts;

/* rank 32, hidden 64, epochs 20, batch 32, lr 1e-2, weight_decay 1e-2, lambda 1, gamma 2,
 * holdout 0.1, seed 1, no progress callback. */
void mvm_predictor_train_defaults(mvm_predictor_train_opts *o);

/* Trains every target layer 1..L-1 and returns the predictor file's bytes in *blob
 * (malloc'd, the caller frees) and *size. eval: [n_layers] or NULL; eval[t] is target
 * layer t's result, eval[0] is zeroed. Deterministic for the same data and options.
 * MVM_ERR_INVALID (a one-line "train-predictor: ..." message) for data or options out of
 * range, or a layer whose training diverged; MVM_ERR_NOMEM. */
mvm_status mvm_predictor_train(const mvm_predictor_data *d, const mvm_predictor_train_opts *o,
                               mvm_predictor_eval *eval, void **blob, size_t *size);

/* ---- online fine-tuning ------------------------------------------------------------------ */

/* LLaPor's continual learning (§4.2: "collect new samples and perform online gradient
 * updates", period, sample count and rate not given): samples of each target layer as the
 * run routes, in a ring, and a few AdamW steps on random minibatches of them now and then.
 * Only the MLP is tuned; the PCA stays the offline one. */
typedef struct mvm_predictor_tuner mvm_predictor_tuner;

/* Room for `capacity` samples of every target layer of p, minibatches of `batch` (<=
 * capacity), draws from `seed`; NULL when out of memory. Allocates all it will use. */
mvm_predictor_tuner *mvm_predictor_tuner_new(const mvm_predictor *p, uint32_t capacity,
                                             uint32_t batch, uint64_t seed);
/* NULL is a no-op. */
void mvm_predictor_tuner_free(mvm_predictor_tuner *tu);
/* One sample of target layer t (1 <= t < L): layer t-1's hidden state h [D], its experts and
 * gate weights [K], and layer t's experts [K] (the labels; ids outside 0..E-1 are left out).
 * The oldest sample goes when the ring is full. */
void mvm_predictor_tuner_add(mvm_predictor_tuner *tu, const mvm_predictor *p, uint32_t t,
                             const float *h, const int32_t *prev, const float *w,
                             const int32_t *next);
/* `steps` AdamW steps at rate lr on every target layer holding at least `batch` samples,
 * each on `batch` of its samples drawn at random: the offline trainer's losses, decay and
 * middle-group factors, every expert weighing 1 and no schedule; the moments carry over
 * from one call to the next. A step whose gradient is not finite is skipped. */
void mvm_predictor_tune(mvm_predictor_tuner *tu, mvm_predictor *p, uint32_t steps, float lr);

#endif
