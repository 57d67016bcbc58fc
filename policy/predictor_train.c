/*
 * The learned predictor's offline trainer (mvm_predictor_train, predictor_mlp.h): PreScope's
 * LLaPor (§4.2), simplified where the paper is silent or the scale is different. Pure memory
 * work in plain C loops, allocation included (it is no per-token path); the caller reads the
 * trace and writes the file.
 *
 * - Layer groups (the paper gives no boundaries): the first and the last ceil(0.15·L) layers
 *   are the input and output groups, the rest the middle group; a target layer's group decides
 *   its model. Input and output groups: shallow (one GELU block and the head), PCA width
 *   ceil(rank/2); middle: one gated residual block, PCA width `rank` (the paper's 256 vs 512
 *   on d = 4096, kept as a 1:2 ratio). Default rank 32: on synthetic traces where few
 *   directions of the hidden state matter, a width near n_embd let the middle models learn the
 *   noise (held-out hit 0.85 at rank 64 vs 0.94 at 32, n_embd 64), and it keeps training to
 *   seconds.
 * - PCA: subspace (orthogonal) iteration on the centred hidden states of at most
 *   PCA_SAMPLES training tokens, evenly spaced, PCA_ITERS rounds; each direction is scaled to
 *   unit variance (whitened; small eigenvalues are floored at 1e-4 of the largest), so the
 *   MLP sees features of one scale whatever the model's hidden-state norms.
 * - Loss, input/output groups: L_bal + λ·L_focal (λ = 1, γ = 2 by default: the paper gives
 *   neither), with L_bal = (1/E) Σ_i ω_i·BCE(y_i, p_i), ω_i = (K/E) / max(f_i, K/(10·E)): an
 *   expert at the mean training frequency K/E weighs 1, a rarer one more, at most 10 (the
 *   paper leaves the normalisation open; an expert never selected would otherwise weigh
 *   infinitely); and L_focal = -(1/E) Σ_i (1 - p_t)^γ·log p_t. Middle group: plain BCE (the
 *   paper names no loss for it).
 * - AdamW: peak rate lr and weight decay wd for the input/output groups, 3·lr and 5·wd for the
 *   middle group (the paper: "higher learning rates and weight decay", no values; the ratios
 *   are a guess). Default lr 1e-2: a guess of 1e-3 left the shallow models far from converged
 *   after 20 epochs of a trace of a few thousand tokens (the paper trains on 65k); linear
 *   warm-up over min(5, max(1, epochs/6)) epochs, then cosine annealing to 0, the paper's
 *   schedule for the input/output groups (5 of 30 epochs), used for every group. Decay applies
 *   to every weight. Minibatches of `batch` tokens, reshuffled each epoch. Not implemented:
 *   dropout and the noise/masking augmentation (no rates are given; the narrow PCA was the
 *   regulariser that mattered in our tests).
 * - Held-out split: the trace's last `holdout` share of tokens (a tail, not a random sample:
 *   neighbouring tokens are alike, so a random split would flatter the predictor); PCA and
 *   the expert frequencies use the training tokens only. The held-out hit rates come from
 *   the same forward pass as predict "learned" (predictor_impl.h).
 * Deterministic: one splitmix64 stream from the seed, fixed loop orders, no threads.
 * predictor_tune.c fine-tunes online with the same loss, backward pass and AdamW
 * (predictor_impl.h, "training primitives").
 */
#include "policy/predictor_mlp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy/predictor_impl.h"
#include "vmm/error.h"

#define PCA_SAMPLES 1024u
#define PCA_ITERS 6

/* ---- training: set-up ------------------------------------------------------------------ */

void mvm_predictor_train_defaults(mvm_predictor_train_opts *o)
{
    *o = (mvm_predictor_train_opts){.rank = 32, .hidden = 64, .epochs = 20, .batch = 32,
                                    .lr = 1e-2, .weight_decay = 1e-2, .lambda = 1, .gamma = 2,
                                    .holdout = 0.1, .seed = 1};
}

uint64_t mvm_pred_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float uniform(uint64_t *s)
{
    return (float)((double)(mvm_pred_splitmix(s) >> 11) * 0x1p-52 - 1);
}

static mvm_status check_data(const mvm_predictor_data *d, const mvm_predictor_train_opts *o)
{
    const char *me = "train-predictor";
    if (d->n_layers < 2 || d->n_layers > MVM_PRED_MAX_LAYERS || !d->n_experts ||
        d->n_experts > MVM_PRED_MAX_EXPERTS || !d->top_k || d->top_k > d->n_experts ||
        d->top_k > MVM_PREDICT_MAX_K || !d->n_embd || d->n_embd > MVM_PRED_MAX_EMBD)
        return mvm_fail(MVM_ERR_INVALID,
                        "%s: shape L=%u E=%u top_k=%u n_embd=%u: needs L >= 2 (a layer to "
                        "predict from) and top_k <= min(E, %d)", me, d->n_layers, d->n_experts,
                        d->top_k, d->n_embd, MVM_PREDICT_MAX_K);
    if (!d->hidden || !d->experts || !d->weights)
        return mvm_fail(MVM_ERR_INVALID, "%s: the data lacks hidden states, experts or weights",
                        me);
    if (!o->rank || !o->hidden || o->hidden > MVM_PREDICTOR_MAX_HIDDEN || !o->epochs || !o->batch ||
        !(o->lr > 0 && o->lr <= 1) || !(o->weight_decay >= 0 && o->weight_decay <= 1) ||
        !(o->lambda >= 0 && o->lambda <= 1e3) || !(o->gamma >= 0 && o->gamma <= 10) ||
        !(o->holdout >= 0 && o->holdout <= 0.9))
        return mvm_fail(MVM_ERR_INVALID,
                        "%s: options out of range (rank >= 1, hidden 1..%u, epochs and batch >= "
                        "1, lr in (0, 1], weight_decay in [0, 1], lambda in [0, 1000], gamma "
                        "in [0, 10], holdout in [0, 0.9])", me, MVM_PREDICTOR_MAX_HIDDEN);
    uint32_t n_test = (uint32_t)(o->holdout * d->n_tokens);
    if (d->n_tokens - n_test < 2)
        return mvm_fail(MVM_ERR_INVALID, "%s: %u tokens leave fewer than 2 to train on", me,
                        d->n_tokens);
    const uint64_t rows = (uint64_t)d->n_tokens * d->n_layers;
    for (uint64_t i = 0; i < rows * d->top_k; i++) {
        int32_t e = d->experts[i];
        if (e < 0 || (uint32_t)e >= d->n_experts || !isfinite(d->weights[i]))
            return mvm_fail(MVM_ERR_INVALID,
                            "%s: token %llu layer %llu: expert %d or its weight out of range", me,
                            (unsigned long long)(i / d->top_k / d->n_layers),
                            (unsigned long long)(i / d->top_k % d->n_layers), (int)e);
    }
    for (uint64_t i = 0; i < rows * d->n_embd; i++)
        if (!isfinite(d->hidden[i]))
            return mvm_fail(MVM_ERR_INVALID, "%s: token %llu layer %llu: hidden state not finite",
                            me, (unsigned long long)(i / d->n_embd / d->n_layers),
                            (unsigned long long)(i / d->n_embd % d->n_layers));
    return MVM_OK;
}

static const float *hidden_of(const mvm_predictor_data *d, uint32_t tok, uint32_t l)
{
    return d->hidden + ((uint64_t)tok * d->n_layers + l) * d->n_embd;
}

static const int32_t *experts_of(const mvm_predictor_data *d, uint32_t tok, uint32_t l)
{
    return d->experts + ((uint64_t)tok * d->n_layers + l) * d->top_k;
}

static const float *weights_of(const mvm_predictor_data *d, uint32_t tok, uint32_t l)
{
    return d->weights + ((uint64_t)tok * d->n_layers + l) * d->top_k;
}

/* ---- training: PCA --------------------------------------------------------------------- */

static double norm(const float *v, uint32_t n)
{
    double s = 0;
    for (uint32_t i = 0; i < n; i++)
        s += (double)v[i] * v[i];
    return sqrt(s);
}

/* Orthonormalises the r rows of q[r][D] (modified Gram-Schmidt, sums in double). A row that
 * (nearly) lies in the span of the rows before it, or is zero, is replaced by a random one
 * and done again: the data may have fewer than r directions. */
static void orthonormalise(float *q, uint32_t r, uint32_t D, uint64_t *rng)
{
    for (uint32_t k = 0; k < r; k++) {
        float *row = q + (uint64_t)k * D;
        for (;;) {
            double before = norm(row, D);
            for (uint32_t j = 0; j < k; j++) {
                const float *prev = q + (uint64_t)j * D;
                double dot = 0;
                for (uint32_t i = 0; i < D; i++)
                    dot += (double)row[i] * prev[i];
                for (uint32_t i = 0; i < D; i++)
                    row[i] -= (float)dot * prev[i];
            }
            double after = norm(row, D);
            if (after > 0 && after > 1e-4 * before) {
                for (uint32_t i = 0; i < D; i++)
                    row[i] = (float)(row[i] / after);
                break;
            }
            for (uint32_t i = 0; i < D; i++)
                row[i] = uniform(rng);
        }
    }
}

/* t[s][r] = X[s][D] · q^T, q [r][D]. */
static void scores(const float *x, uint32_t s, uint32_t D, const float *q, uint32_t r, float *t)
{
    for (uint64_t a = 0; a < s; a++)
        for (uint32_t k = 0; k < r; k++)
            t[a * r + k] = mvm_predict_dot(x + a * D, q + (uint64_t)k * D, D);
}

/* m->mu and m->proj from layer l's hidden states of training tokens [0, n_train). */
static mvm_status pca(const mvm_predictor_data *d, uint32_t l, uint32_t n_train, mvm_pred_model *m,
                      uint64_t *rng)
{
    const uint32_t D = d->n_embd, r = m->r, s = n_train < PCA_SAMPLES ? n_train : PCA_SAMPLES;
    float *x = malloc((size_t)s * D * sizeof *x), *q = malloc((size_t)r * D * sizeof *q),
          *t = malloc((size_t)s * r * sizeof *t);
    double *mu = calloc(D, sizeof *mu), *var = calloc(r, sizeof *var);
    if (!x || !mu || !q || !t || !var) {
        free(x), free(mu), free(q), free(t), free(var);
        return mvm_fail(MVM_ERR_NOMEM, "train-predictor: out of memory for the PCA of layer %u",
                        l);
    }
    for (uint32_t a = 0; a < s; a++) {
        const float *h = hidden_of(d, (uint32_t)((uint64_t)a * n_train / s), l);
        memcpy(x + (uint64_t)a * D, h, D * sizeof *x);
        for (uint32_t i = 0; i < D; i++)
            mu[i] += h[i];
    }
    for (uint32_t i = 0; i < D; i++)
        m->mu[i] = (float)(mu[i] / s);
    for (uint64_t a = 0; a < s; a++)
        for (uint32_t i = 0; i < D; i++)
            x[a * D + i] -= m->mu[i];
    for (uint64_t i = 0; i < (uint64_t)r * D; i++)
        q[i] = uniform(rng);
    orthonormalise(q, r, D, rng);
    for (int it = 0; it < PCA_ITERS; it++) {
        scores(x, s, D, q, r, t); /* then q = t^T X: the covariance applied to q */
        memset(q, 0, (size_t)r * D * sizeof *q);
        for (uint64_t a = 0; a < s; a++)
            for (uint32_t k = 0; k < r; k++) {
                float c = t[a * r + k], *qk = q + (uint64_t)k * D;
                const float *xa = x + a * D;
                for (uint32_t i = 0; i < D; i++)
                    qk[i] += c * xa[i];
            }
        orthonormalise(q, r, D, rng);
    }
    scores(x, s, D, q, r, t);
    double top = 0;
    for (uint32_t k = 0; k < r; k++) {
        for (uint32_t a = 0; a < s; a++)
            var[k] += (double)t[(uint64_t)a * r + k] * t[(uint64_t)a * r + k] / s;
        top = var[k] > top ? var[k] : top;
    }
    for (uint32_t k = 0; k < r; k++) {
        double v = var[k] > 1e-4 * top ? var[k] : 1e-4 * top;
        double scale = v > 0 ? 1 / sqrt(v) : 1;
        for (uint32_t i = 0; i < D; i++)
            m->proj[(uint64_t)k * D + i] = (float)(q[(uint64_t)k * D + i] * scale);
    }
    free(x), free(mu), free(q), free(t), free(var);
    return MVM_OK;
}

/* ---- training: the MLP ----------------------------------------------------------------- */

static void glorot(float *w, uint32_t rows, uint32_t cols, uint64_t *rng)
{
    float a = sqrtf(6.0f / (float)(rows + cols));
    for (uint64_t i = 0; i < (uint64_t)rows * cols; i++)
        w[i] = a * uniform(rng);
}

/* Glorot-uniform weights, zero biases (m->p is zeroed by mvm_pred_model_alloc). */
static void init_weights(mvm_pred_model *m, uint32_t E, uint64_t *rng)
{
    glorot(m->w1, m->H, m->r + E, rng);
    if (m->kind == MVM_PREDICTOR_GATED) {
        glorot(m->w3, m->H, m->H, rng);
        glorot(m->w4, m->H, m->H, rng);
        glorot(m->wg, m->H, m->r, rng);
    }
    glorot(m->w2, E, m->H, rng);
}

/* log σ(b), stable. */
static float log_sigmoid(float b) { return b >= 0 ? -log1pf(expf(-b)) : b - log1pf(expf(b)); }

/* One token's loss, the mean over experts of ω_e·BCE + λ·focal, and its gradient in the
 * logits into dlogit[E]. With b = ±logit (the sign of the label), p_t = σ(b), q = 1 - p_t:
 *     BCE = -log p_t,  d/dlogit = p - y;
 *     focal = -q^γ·log p_t,  d/db = γ·q^γ·p_t·log p_t - q^(γ+1),  d/dlogit = ±d/db. */
double mvm_pred_token_loss(const float *logit, const uint8_t *y, const float *omega, float lambda,
                         float gamma, uint32_t E, float *dlogit)
{
    double loss = 0;
    for (uint32_t e = 0; e < E; e++) {
        float b = y[e] ? logit[e] : -logit[e];
        float pt = mvm_pred_sigmoid(b), q = mvm_pred_sigmoid(-b), logpt = log_sigmoid(b);
        float l = -omega[e] * logpt, g = omega[e] * (mvm_pred_sigmoid(logit[e]) - (float)y[e]);
        if (lambda > 0) {
            float qg = powf(q, gamma), db = gamma * qg * pt * logpt - qg * q;
            l -= lambda * qg * logpt;
            g += lambda * (y[e] ? db : -db);
        }
        loss += l;
        dlogit[e] = g / (float)E;
    }
    return loss / E;
}

/* y[n] += c·x[n], unrolled by 8 so that -O2's straight-line vectoriser packs it. */
static void axpy(float *restrict y, float c, const float *restrict x, uint32_t n)
{
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (size_t k = 0; k < 8; k++)
            y[j + k] += c * x[j + k];
    for (; j < n; j++)
        y[j] += c * x[j];
}

/* Adds one token's gradient (dlogit, the activations a of its training forward pass) into
 * g, a model of m's layout over the gradient buffer. back: [3H] scratch. */
void mvm_pred_backward(const mvm_pred_model *m, const mvm_pred_model *g, const mvm_pred_acts *a,
                     const float *dlogit, float *back, uint32_t E)
{
    const uint32_t H = m->H, r = m->r, X = r + E;
    const int gated = m->kind == MVM_PREDICTOR_GATED;
    const float *top = gated ? a->h2 : a->h1;
    float *dtop = back, *dv = back + H, *du = back + 2 * H;
    memset(dtop, 0, H * sizeof *dtop);
    for (uint32_t e = 0; e < E; e++) { /* logits = W2 top + b2 */
        g->b2[e] += dlogit[e];
        axpy(g->w2 + (uint64_t)e * H, dlogit[e], top, H);
        axpy(dtop, dlogit[e], m->w2 + (uint64_t)e * H, H);
    }
    if (gated) { /* h2 = h1 + σ(ag) ⊙ GELU(a4), a4 = W4 u + b4, u = GELU(W3 h1 + b3) */
        memset(du, 0, H * sizeof *du);
        for (uint32_t i = 0; i < H; i++) {
            float dag = dtop[i] * a->v[i] * a->g[i] * (1 - a->g[i]);
            g->bg[i] += dag;
            axpy(g->wg + (uint64_t)i * r, dag, a->x, r);
            dv[i] = dtop[i] * a->g[i] * a->d4[i];
        }
        for (uint32_t i = 0; i < H; i++) {
            g->b4[i] += dv[i];
            axpy(g->w4 + (uint64_t)i * H, dv[i], a->u, H);
            axpy(du, dv[i], m->w4 + (uint64_t)i * H, H);
        }
        for (uint32_t j = 0; j < H; j++) { /* dh1: the residual path's plus the block's */
            float d = du[j] * a->d3[j];
            g->b3[j] += d;
            axpy(g->w3 + (uint64_t)j * H, d, a->h1, H);
            axpy(dtop, d, m->w3 + (uint64_t)j * H, H);
        }
    }
    for (uint32_t i = 0; i < H; i++) { /* h1 = GELU(W1 x + b1): z and the hot entries */
        float d = dtop[i] * a->d1[i], *gw = g->w1 + (uint64_t)i * X;
        g->b1[i] += d;
        axpy(gw, d, a->x, r);
        for (uint32_t h = 0; h < a->n_hot; h++)
            gw[r + a->hot[h]] += d * a->x[r + a->hot[h]];
    }
}

/* AdamW (β 0.9, 0.999, ε 1e-8) on n floats; grad is a sum over `scale`^-1 tokens. */
void mvm_pred_adamw(float *p, const float *grad, float *m1, float *m2, uint64_t n, float lr,
                  float wd, float scale, uint64_t step)
{
    const float b1 = 0.9f, b2 = 0.999f;
    const float c1 = 1 - powf(b1, (float)step), c2 = 1 - powf(b2, (float)step);
    for (uint64_t i = 0; i < n; i++) {
        float gi = grad[i] * scale;
        m1[i] = b1 * m1[i] + (1 - b1) * gi;
        m2[i] = b2 * m2[i] + (1 - b2) * gi * gi;
        p[i] -= lr * ((m1[i] / c1) / (sqrtf(m2[i] / c2) + 1e-8f) + wd * p[i]);
    }
}

/* Linear warm-up, then cosine annealing to 0. */
static float schedule(float peak, uint64_t step, uint64_t warm, uint64_t total)
{
    if (step < warm)
        return peak * (float)(step + 1) / (float)warm;
    double f = total > warm ? (double)(step - warm) / (double)(total - warm) : 1;
    return (float)(peak * 0.5 * (1 + cos(3.14159265358979323846 * f)));
}

/* a->x of token tok for model m: its PCA features (from z) and layer l's routing. */
static void features(const mvm_predictor_data *d, const mvm_pred_model *m, const float *z,
                     uint32_t tok, uint32_t l, mvm_pred_acts *a)
{
    memcpy(a->x, z + (uint64_t)tok * m->r, m->r * sizeof *a->x);
    mvm_pred_fuse(a, m->r, d->n_experts, d->top_k, experts_of(d, tok, l), weights_of(d, tok, l));
}

/* Scratch of one layer's training. */
typedef struct lbuf {
    float *z;                /* [n_tokens][r] PCA features of every token */
    float *centred;          /* [n_embd] scratch */
    float *freq, *omega;     /* [E] training frequency of layer t's experts; loss weights */
    uint8_t *y;              /* [E] labels */
    float *work, *dlogit, *back;
    float *grad, *m1, *m2;   /* the model's layout (only the trainable tail is used) */
    uint32_t *order;         /* [n_train] */
} lbuf;

static void lbuf_free(lbuf *b)
{
    void *all[] = {b->z,      b->centred, b->freq, b->omega, b->y,  b->work,
                   b->dlogit, b->back,    b->grad, b->m1,    b->m2, b->order};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
}

static int lbuf_alloc(lbuf *b, const mvm_predictor_data *d, const mvm_pred_model *m,
                      uint32_t n_train)
{
    const uint32_t E = d->n_experts;
    *b = (lbuf){0};
    b->z = malloc((size_t)d->n_tokens * m->r * sizeof *b->z);
    b->centred = malloc((size_t)d->n_embd * sizeof *b->centred);
    b->freq = calloc(E, sizeof *b->freq);
    b->omega = calloc(E, sizeof *b->omega);
    b->y = calloc(E, 1);
    b->work = calloc((size_t)mvm_pred_acts_floats(m->r, E, m->H), sizeof *b->work);
    b->dlogit = calloc(E, sizeof *b->dlogit);
    b->back = calloc(3 * (size_t)m->H, sizeof *b->back);
    b->grad = calloc((size_t)m->n, sizeof *b->grad);
    b->m1 = calloc((size_t)m->n, sizeof *b->m1);
    b->m2 = calloc((size_t)m->n, sizeof *b->m2);
    b->order = malloc((size_t)n_train * sizeof *b->order);
    return b->z && b->centred && b->freq && b->omega && b->y && b->work && b->dlogit && b->back &&
                   b->grad && b->m1 && b->m2 && b->order
               ? 0
               : -1;
}

/* |pred[0..n) ∩ actual[0..K)| / K. */
static double overlap(const uint32_t *pred, uint32_t n, const int32_t *actual, uint32_t K)
{
    uint32_t hits = 0;
    for (uint32_t j = 0; j < K; j++)
        for (uint32_t i = 0; i < n; i++)
            hits += pred[i] == (uint32_t)actual[j];
    return (double)hits / K;
}

/* Held-out hit rates of the model and of the two baselines over tokens [n_train, n). */
static void evaluate(const mvm_predictor_data *d, const mvm_pred_model *m, uint32_t t,
                     uint32_t n_train, lbuf *b, mvm_predictor_eval *ev)
{
    const uint32_t E = d->n_experts, K = d->top_k, n_test = d->n_tokens - n_train;
    uint32_t pop[MVM_PREDICT_MAX_K], pick[MVM_PREDICT_MAX_K], prev[MVM_PREDICT_MAX_K];
    mvm_pred_acts a;
    mvm_pred_acts_bind(&a, b->work, m->r, E, m->H);
    uint32_t n_pop = mvm_predict_topk(b->freq, E, K, pop);
    double hit = 0, hit_prev = 0, hit_pop = 0;
    for (uint32_t tok = n_train; tok < d->n_tokens; tok++) {
        const int32_t *actual = experts_of(d, tok, t), *before = experts_of(d, tok, t - 1);
        features(d, m, b->z, tok, t - 1, &a);
        mvm_pred_forward(m, E, &a, 0);
        hit += overlap(pick, mvm_predict_topk(a.logit, E, K, pick), actual, K);
        for (uint32_t j = 0; j < K; j++)
            prev[j] = (uint32_t)before[j];
        hit_prev += overlap(prev, K, actual, K);
        hit_pop += overlap(pop, n_pop, actual, K);
    }
    ev->hit = n_test ? hit / n_test : NAN;
    ev->hit_prev = n_test ? hit_prev / n_test : NAN;
    ev->hit_pop = n_test ? hit_pop / n_test : NAN;
}

/* Trains target layer t's model m (kind, r, H set and allocated) and evaluates it. */
static mvm_status train_layer(const mvm_predictor_data *d, const mvm_predictor_train_opts *o,
                              uint32_t t, uint32_t n_train, mvm_pred_model *m, uint64_t *rng,
                              mvm_predictor_eval *ev)
{
    const uint32_t E = d->n_experts, K = d->top_k, l = t - 1;
    const int gated = m->kind == MVM_PREDICTOR_GATED;
    lbuf b;
    if (lbuf_alloc(&b, d, m, n_train) != 0) {
        lbuf_free(&b);
        return mvm_fail(MVM_ERR_NOMEM, "train-predictor: out of memory for layer %u", t);
    }
    mvm_status st = pca(d, l, n_train, m, rng);
    if (st != MVM_OK) {
        lbuf_free(&b);
        return st;
    }
    for (uint32_t tok = 0; tok < d->n_tokens; tok++) {
        float *z = b.z + (uint64_t)tok * m->r;
        mvm_pred_project(m, d->n_embd, hidden_of(d, tok, l), b.centred, z);
    }
    for (uint32_t tok = 0; tok < n_train; tok++)
        for (uint32_t j = 0; j < K; j++)
            b.freq[experts_of(d, tok, t)[j]] += 1.0f / (float)n_train;
    const float mean_f = (float)K / (float)E;
    for (uint32_t e = 0; e < E; e++)
        b.omega[e] = gated ? 1 : mean_f / fmaxf(b.freq[e], mean_f / 10);
    const float lambda = gated ? 0 : (float)o->lambda, gamma = (float)o->gamma;
    const float lr = (float)o->lr * (gated ? 3 : 1), wd = (float)o->weight_decay * (gated ? 5 : 1);
    init_weights(m, E, rng);

    mvm_pred_model g = {.kind = m->kind, .r = m->r, .H = m->H};
    mvm_pred_layout(&g, b.grad, E, d->n_embd);
    const uint64_t off = (uint64_t)(m->w1 - m->p), nt = m->n - off;
    const uint32_t batch = o->batch < n_train ? o->batch : n_train;
    const uint64_t per_epoch = ((uint64_t)n_train + batch - 1) / batch;
    const uint64_t total = per_epoch * o->epochs;
    const uint32_t warm_epochs = o->epochs / 6 < 1 ? 1 : o->epochs / 6 > 5 ? 5 : o->epochs / 6;
    mvm_pred_acts a;
    mvm_pred_acts_bind(&a, b.work, m->r, E, m->H);
    for (uint32_t i = 0; i < n_train; i++)
        b.order[i] = i;
    uint64_t step = 0;
    for (uint32_t ep = 0; ep < o->epochs; ep++) {
        double loss = 0;
        for (uint32_t i = n_train - 1; i > 0; i--) { /* Fisher-Yates */
            uint32_t j = (uint32_t)(mvm_pred_splitmix(rng) % (i + 1)), tmp = b.order[i];
            b.order[i] = b.order[j];
            b.order[j] = tmp;
        }
        for (uint64_t b0 = 0; b0 < n_train; b0 += batch) {
            uint32_t bn = n_train - b0 < batch ? (uint32_t)(n_train - b0) : batch;
            memset(b.grad + off, 0, nt * sizeof *b.grad);
            for (uint32_t i = 0; i < bn; i++) {
                uint32_t tok = b.order[b0 + i];
                const int32_t *next = experts_of(d, tok, t);
                features(d, m, b.z, tok, l, &a);
                mvm_pred_forward(m, E, &a, 1);
                memset(b.y, 0, E);
                for (uint32_t j = 0; j < K; j++)
                    b.y[next[j]] = 1;
                loss += mvm_pred_token_loss(a.logit, b.y, b.omega, lambda, gamma, E, b.dlogit);
                mvm_pred_backward(m, &g, &a, b.dlogit, b.back, E);
            }
            float rate = schedule(lr, step, per_epoch * warm_epochs, total);
            step++;
            mvm_pred_adamw(m->p + off, b.grad + off, b.m1 + off, b.m2 + off, nt, rate, wd,
                  1.0f / (float)bn, step);
        }
        ev->loss = loss / n_train;
    }
    for (uint64_t i = off; i < m->n && st == MVM_OK; i++)
        if (!isfinite(m->p[i]))
            st = mvm_fail(MVM_ERR_INVALID,
                          "train-predictor: layer %u diverged (a weight is not finite); try a "
                          "lower lr", t);
    if (st == MVM_OK)
        evaluate(d, m, t, n_train, &b, ev);
    lbuf_free(&b);
    return st;
}

mvm_status mvm_predictor_train(const mvm_predictor_data *d, const mvm_predictor_train_opts *o,
                               mvm_predictor_eval *eval, void **blob, size_t *size)
{
    *blob = NULL;
    *size = 0;
    mvm_status st = check_data(d, o);
    if (st != MVM_OK)
        return st;
    const uint32_t L = d->n_layers, D = d->n_embd;
    const uint32_t n_train = d->n_tokens - (uint32_t)(o->holdout * d->n_tokens);
    const uint32_t group = (15 * L + 99) / 100; /* ceil(0.15·L) layers at each end */
    if (eval)
        memset(eval, 0, L * sizeof *eval);
    mvm_predictor *p = mvm_pred_new(L, d->n_experts, d->top_k, D);
    if (!p)
        return mvm_fail(MVM_ERR_NOMEM, "train-predictor: out of memory");
    uint64_t rng = o->seed;
    for (uint32_t t = 1; t < L && st == MVM_OK; t++) {
        mvm_pred_model *m = &p->m[t];
        int middle = t >= group && t < L - group;
        uint32_t r = middle ? o->rank : o->rank / 2 + o->rank % 2;
        m->kind = middle ? MVM_PREDICTOR_GATED : MVM_PREDICTOR_SHALLOW;
        m->r = r < D ? r : D;
        m->H = o->hidden;
        if (mvm_pred_model_alloc(m, d->n_experts, D) != 0) {
            st = mvm_fail(MVM_ERR_NOMEM, "train-predictor: out of memory for layer %u", t);
            break;
        }
        mvm_predictor_eval ev = {.kind = m->kind, .rank = m->r, .n_train = n_train,
                                 .n_test = d->n_tokens - n_train};
        st = train_layer(d, o, t, n_train, m, &rng, &ev);
        if (st != MVM_OK)
            break;
        if (eval)
            eval[t] = ev;
        if (o->progress)
            o->progress(o->ctx, t, &ev);
    }
    if (st == MVM_OK)
        st = mvm_pred_serialize(p, blob, size);
    mvm_predictor_free(p);
    return st;
}
