/*
 * Inside the learned predictor: what predictor_mlp.c (the model, its file, the forward pass)
 * and predictor_train.c (the offline trainer) share. Not for the modules: they use
 * predictor_mlp.h. The trainer runs the same forward pass as inference, so the hit rates it
 * reports are what predict "learned" will do with the file it writes, bit for bit.
 */
#ifndef MVM_POLICY_PREDICTOR_IMPL_H
#define MVM_POLICY_PREDICTOR_IMPL_H

#include <math.h>
#include <stdint.h>

#include "policy/predict_common.h"
#include "policy/predictor_mlp.h"

/* Shape limits of the file (and of training data): with them no size computation overflows
 * 64 bits. */
#define MVM_PRED_MAX_LAYERS 65536u
#define MVM_PRED_MAX_EXPERTS 65536u
#define MVM_PRED_MAX_EMBD (1u << 20)

/* One target layer's model. p holds mu, proj, then the MLP (the trainable tail, from w1),
 * in the file's order; the tensor pointers point into it (w3..bg NULL when shallow). */
typedef struct mvm_pred_model {
    uint32_t kind, r, H;
    uint64_t n; /* floats in p */
    float *p;
    float *mu, *proj, *w1, *b1, *w3, *b3, *w4, *b4, *wg, *bg, *w2, *b2;
} mvm_pred_model;

struct mvm_predictor {
    uint32_t L, E, K, D;
    mvm_pred_model *m; /* [L]; m[0] unused */
};

/* One token's activations, in a work buffer. d1, d3, d4 hold the pre-activations of the
 * three GELUs, replaced by the GELU's derivative there when training (all backward needs).
 * hot: the multi-hot's non-zero entries (at most K), so W1 costs H·(r + K), not H·(r + E). */
typedef struct mvm_pred_acts {
    float *x, *d1, *h1, *d3, *u, *d4, *v, *ag, *g, *h2, *logit;
    uint32_t hot[MVM_PREDICT_MAX_K], n_hot;
} mvm_pred_acts;

static inline float mvm_pred_sigmoid(float x)
{
    if (x >= 0)
        return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

/* A predictor of this shape with L zeroed models, or NULL when out of memory. */
mvm_predictor *mvm_pred_new(uint32_t L, uint32_t E, uint32_t K, uint32_t D);
/* Floats of m's layout (kind, r, H set); with base not NULL, binds m's tensors into it. */
uint64_t mvm_pred_layout(mvm_pred_model *m, float *base, uint32_t E, uint32_t D);
/* Allocates m->p (zeroed) for m's layout and binds the tensors. -1 when out of memory. */
int mvm_pred_model_alloc(mvm_pred_model *m, uint32_t E, uint32_t D);

/* Floats of one token's activations; binds a into work. */
uint64_t mvm_pred_acts_floats(uint32_t r, uint32_t E, uint32_t H);
void mvm_pred_acts_bind(mvm_pred_acts *a, float *work, uint32_t r, uint32_t E, uint32_t H);
/* z[r] = proj · (h - mu); c: [D] scratch. */
void mvm_pred_project(const mvm_pred_model *m, uint32_t D, const float *h, float *c, float *z);
/* a->x = concat(z, weighted multi-hot of the experts); a->x's first r floats hold z. */
void mvm_pred_fuse(mvm_pred_acts *a, uint32_t r, uint32_t E, uint32_t K, const int32_t *ex,
                   const float *w);
/* From a->x to a->logit; train: keep the GELU derivatives (see mvm_pred_acts). */
void mvm_pred_forward(const mvm_pred_model *m, uint32_t E, mvm_pred_acts *a, int train);

/* ---- training primitives (predictor_train.c), shared with the online tuner ---- */

/* splitmix64: the next of the stream in *s. */
uint64_t mvm_pred_splitmix(uint64_t *s);
/* One token's loss, the mean over experts of ω_e·BCE + λ·focal (γ), and its gradient in
 * the logits into dlogit[E]; y[E] the labels. */
double mvm_pred_token_loss(const float *logit, const uint8_t *y, const float *omega,
                           float lambda, float gamma, uint32_t E, float *dlogit);
/* Adds one token's gradient (dlogit, the activations a of its training forward pass) into
 * g, a model of m's layout over the gradient buffer. back: [3H] scratch. */
void mvm_pred_backward(const mvm_pred_model *m, const mvm_pred_model *g, const mvm_pred_acts *a,
                       const float *dlogit, float *back, uint32_t E);
/* AdamW (β 0.9, 0.999, ε 1e-8) on n floats; grad is a sum over `scale`^-1 tokens; step
 * from 1. */
void mvm_pred_adamw(float *p, const float *grad, float *m1, float *m2, uint64_t n, float lr,
                    float wd, float scale, uint64_t step);

/* The file's bytes (malloc'd) of p, every target layer trained. MVM_ERR_NOMEM. */
mvm_status mvm_pred_serialize(const mvm_predictor *p, void **blob, size_t *size);

#endif
