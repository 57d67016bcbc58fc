/*
 * The learned predictor's online fine-tuning (mvm_predictor_tune, predictor_mlp.h):
 * PreScope's LLaPor (§4.2) "can be embedded in the inference module to collect new samples
 * and perform online gradient updates"; the period, sample count and rate are not given
 * (predict_learned.c chooses them). It is the offline trainer's training (predictor_train.c,
 * whose loss, backward pass and AdamW it calls) on few samples: each target layer's last
 * `capacity` tokens, minibatches drawn at random, the same losses, decay and middle-group
 * factors, at a constant rate (a run has no end to anneal towards) with moments that carry
 * over between rounds. Every expert weighs 1 in L_bal: a ring of a few hundred tokens says
 * little about rare experts' frequencies. The PCA is not refitted: its directions come from
 * the offline profile's 1,024 tokens, and moving them would invalidate every weight behind
 * them. Pure memory work; everything is allocated by mvm_predictor_tuner_new.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy/predictor_impl.h"
#include "policy/predictor_mlp.h"

/* One target layer's samples, a ring, and its optimiser's state. */
typedef struct tune_layer {
    float *z;              /* [cap][r] PCA features of layer t-1's hidden states */
    int32_t *prev;         /* [cap][K] layer t-1's experts */
    float *w;              /* [cap][K] their gate weights */
    int32_t *next;         /* [cap][K] layer t's experts: the labels */
    uint32_t n, head;      /* samples held; the slot the next one takes */
    float *grad, *m1, *m2; /* the model's layout (only the trainable tail is used) */
    uint64_t step;
} tune_layer;

struct mvm_predictor_tuner {
    uint32_t L, cap, batch;
    tune_layer *t;         /* [L]; t[0] unused */
    float *work, *dlogit, *back, *centred, *omega;
    uint8_t *y;
    uint64_t rng;
};

void mvm_predictor_tuner_free(mvm_predictor_tuner *tu)
{
    if (!tu)
        return;
    for (uint32_t t = 1; tu->t && t < tu->L; t++) {
        tune_layer *tl = &tu->t[t];
        void *all[] = {tl->z, tl->prev, tl->w, tl->next, tl->grad, tl->m1, tl->m2};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
            free(all[i]);
    }
    void *all[] = {tu->t, tu->work, tu->dlogit, tu->back, tu->centred, tu->omega, tu->y, tu};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
}

mvm_predictor_tuner *mvm_predictor_tuner_new(const mvm_predictor *p, uint32_t capacity,
                                             uint32_t batch, uint64_t seed)
{
    if (!capacity || !batch || batch > capacity)
        return NULL;
    mvm_predictor_tuner *tu = calloc(1, sizeof *tu);
    if (!tu)
        return NULL;
    const uint32_t E = p->E, K = p->K;
    *tu = (mvm_predictor_tuner){.L = p->L, .cap = capacity, .batch = batch, .rng = seed};
    int ok = (tu->t = calloc(p->L, sizeof *tu->t)) != NULL;
    uint64_t work = 0, H = 0;
    for (uint32_t t = 1; ok && t < p->L; t++) {
        const mvm_pred_model *m = &p->m[t];
        tune_layer *tl = &tu->t[t];
        tl->z = malloc((size_t)capacity * m->r * sizeof *tl->z);
        tl->prev = malloc((size_t)capacity * K * sizeof *tl->prev);
        tl->w = malloc((size_t)capacity * K * sizeof *tl->w);
        tl->next = malloc((size_t)capacity * K * sizeof *tl->next);
        tl->grad = calloc((size_t)m->n, sizeof *tl->grad);
        tl->m1 = calloc((size_t)m->n, sizeof *tl->m1);
        tl->m2 = calloc((size_t)m->n, sizeof *tl->m2);
        ok = tl->z && tl->prev && tl->w && tl->next && tl->grad && tl->m1 && tl->m2;
        uint64_t f = mvm_pred_acts_floats(m->r, E, m->H);
        work = f > work ? f : work;
        H = m->H > H ? m->H : H;
    }
    ok = ok && (tu->work = calloc(work ? work : 1, sizeof *tu->work)) &&
         (tu->dlogit = calloc(E, sizeof *tu->dlogit)) &&
         (tu->back = calloc(3 * (H ? H : 1), sizeof *tu->back)) &&
         (tu->centred = calloc(p->D, sizeof *tu->centred)) &&
         (tu->omega = malloc(E * sizeof *tu->omega)) && (tu->y = calloc(E, 1));
    if (!ok) {
        mvm_predictor_tuner_free(tu);
        return NULL;
    }
    for (uint32_t e = 0; e < E; e++)
        tu->omega[e] = 1;
    return tu;
}

void mvm_predictor_tuner_add(mvm_predictor_tuner *tu, const mvm_predictor *p, uint32_t t,
                             const float *h, const int32_t *prev, const float *w,
                             const int32_t *next)
{
    if (t == 0 || t >= tu->L)
        return;
    const mvm_pred_model *m = &p->m[t];
    const uint32_t K = p->K;
    tune_layer *tl = &tu->t[t];
    uint32_t i = tl->head;
    mvm_pred_project(m, p->D, h, tu->centred, tl->z + (size_t)i * m->r);
    memcpy(tl->prev + (size_t)i * K, prev, K * sizeof *prev);
    memcpy(tl->w + (size_t)i * K, w, K * sizeof *w);
    memcpy(tl->next + (size_t)i * K, next, K * sizeof *next);
    tl->head = (i + 1) % tu->cap;
    tl->n += tl->n < tu->cap;
}

/* The gradient of one minibatch of target layer t into tl->grad; 0 if it is not finite. */
static int tune_gradient(mvm_predictor_tuner *tu, const mvm_pred_model *m, tune_layer *tl,
                         const mvm_predictor_train_opts *o, uint32_t E, uint32_t K, uint32_t D)
{
    const int gated = m->kind == MVM_PREDICTOR_GATED;
    const float lambda = gated ? 0 : (float)o->lambda, gamma = (float)o->gamma;
    mvm_pred_model g = {.kind = m->kind, .r = m->r, .H = m->H};
    mvm_pred_layout(&g, tl->grad, E, D);
    const uint64_t off = (uint64_t)(m->w1 - m->p);
    memset(tl->grad + off, 0, (m->n - off) * sizeof *tl->grad);
    mvm_pred_acts a;
    mvm_pred_acts_bind(&a, tu->work, m->r, E, m->H);
    for (uint32_t b = 0; b < tu->batch; b++) {
        uint32_t j = (uint32_t)(mvm_pred_splitmix(&tu->rng) % tl->n);
        memcpy(a.x, tl->z + (size_t)j * m->r, m->r * sizeof *a.x);
        mvm_pred_fuse(&a, m->r, E, K, tl->prev + (size_t)j * K, tl->w + (size_t)j * K);
        mvm_pred_forward(m, E, &a, 1);
        memset(tu->y, 0, E);
        for (uint32_t k = 0; k < K; k++) {
            int32_t e = tl->next[(size_t)j * K + k];
            if (e >= 0 && (uint32_t)e < E)
                tu->y[e] = 1;
        }
        mvm_pred_token_loss(a.logit, tu->y, tu->omega, lambda, gamma, E, tu->dlogit);
        mvm_pred_backward(m, &g, &a, tu->dlogit, tu->back, E);
    }
    for (uint64_t i = off; i < m->n; i++)
        if (!isfinite(tl->grad[i]))
            return 0;
    return 1;
}

void mvm_predictor_tune(mvm_predictor_tuner *tu, mvm_predictor *p, uint32_t steps, float lr)
{
    mvm_predictor_train_opts o;
    mvm_predictor_train_defaults(&o);
    for (uint32_t t = 1; t < tu->L; t++) {
        mvm_pred_model *m = &p->m[t];
        tune_layer *tl = &tu->t[t];
        if (tl->n < tu->batch)
            continue;
        const int gated = m->kind == MVM_PREDICTOR_GATED;
        const float rate = lr * (gated ? 3 : 1), wd = (float)o.weight_decay * (gated ? 5 : 1);
        const uint64_t off = (uint64_t)(m->w1 - m->p);
        for (uint32_t s = 0; s < steps; s++) {
            if (!tune_gradient(tu, m, tl, &o, p->E, p->K, p->D))
                continue;
            tl->step++;
            mvm_pred_adamw(m->p + off, tl->grad + off, tl->m1 + off, tl->m2 + off, m->n - off,
                           rate, wd, 1.0f / (float)tu->batch, tl->step);
        }
    }
}
