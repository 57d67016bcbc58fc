/*
 * The learned predictor (predictor_mlp.h): the model in memory, its file, and the forward
 * pass, which predict "learned" and the trainer (predictor_train.c, through predictor_impl.h)
 * both run. PreScope's LLaPor (§4.2); the readings of its silences are listed in
 * predictor_train.c, where the model is made. Two belong to the forward pass:
 * - Fusion (the paper does not give the operator): x = concat(PCA(h), weighted multi-hot of
 *   the previous layer's routing); W1 visits only the multi-hot's non-zero entries (K of E).
 * - GELU in its sigmoid form x·σ(1.702x), the approximation GELU's authors give (one exp,
 *   no erf: activations were a quarter of the training time).
 * Parsing validates everything before any use (sizes against the bytes left, every real
 * finite, nothing after the last layer) and copies the reals out: the caller's bytes may go.
 */
#include "policy/predictor_mlp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy/predictor_impl.h"
#include "vmm/error.h"

#define HEADER_BYTES 28u       /* magic, version, L, E, K, D */
#define LAYER_HEADER_BYTES 12u /* kind, rank, hidden */

/* Floats of m's layout (kind, r, H set) and, when `base` is not NULL, its tensors' places
 * in base. At most ~2^41 floats within the limits, so no overflow. */
uint64_t mvm_pred_layout(mvm_pred_model *m, float *base, uint32_t E, uint32_t D)
{
    uint64_t at = 0, r = m->r, H = m->H;
#define TAKE(field, count) (m->field = base ? base + at : NULL, at += (count))
    TAKE(mu, D);
    TAKE(proj, r * D);
    TAKE(w1, H * (r + E));
    TAKE(b1, H);
    if (m->kind == MVM_PREDICTOR_GATED) {
        TAKE(w3, H * H);
        TAKE(b3, H);
        TAKE(w4, H * H);
        TAKE(b4, H);
        TAKE(wg, H * r);
        TAKE(bg, H);
    }
    TAKE(w2, (uint64_t)E * H);
    TAKE(b2, E);
#undef TAKE
    return at;
}

/* Allocates m->p for m's layout and binds the tensors. -1 when out of memory. */
int mvm_pred_model_alloc(mvm_pred_model *m, uint32_t E, uint32_t D)
{
    m->n = mvm_pred_layout(m, NULL, E, D);
    if (m->n > SIZE_MAX / sizeof(float))
        return -1;
    m->p = calloc((size_t)m->n, sizeof(float));
    if (!m->p)
        return -1;
    mvm_pred_layout(m, m->p, E, D);
    return 0;
}

void mvm_predictor_free(mvm_predictor *p)
{
    if (!p)
        return;
    if (p->m)
        for (uint32_t t = 0; t < p->L; t++)
            free(p->m[t].p);
    free(p->m);
    free(p);
}

mvm_predictor *mvm_pred_new(uint32_t L, uint32_t E, uint32_t K, uint32_t D)
{
    mvm_predictor *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    *p = (mvm_predictor){.L = L, .E = E, .K = K, .D = D, .m = calloc(L, sizeof *p->m)};
    if (!p->m) {
        free(p);
        return NULL;
    }
    return p;
}

/* ---- the forward pass ------------------------------------------------------------------ */

uint64_t mvm_pred_acts_floats(uint32_t r, uint32_t E, uint32_t H)
{
    return (uint64_t)r + 2ull * E + 9ull * H;
}

void mvm_pred_acts_bind(mvm_pred_acts *a, float *w, uint32_t r, uint32_t E, uint32_t H)
{
    float **slot[] = {&a->d1, &a->h1, &a->d3, &a->u, &a->d4, &a->v, &a->ag, &a->g, &a->h2};
    a->x = w;
    w += r + E;
    for (size_t i = 0; i < sizeof slot / sizeof *slot; i++, w += H)
        *slot[i] = w;
    a->logit = w;
    a->n_hot = 0;
}

/* out = GELU(pre) in the sigmoid form x·σ(1.702x) (see the top); when training, pre
 * becomes the derivative σ(1.702x)·(1 + 1.702x·(1 - σ(1.702x))). */
static void gelu(float *pre, float *out, uint32_t n, int train)
{
    for (uint32_t i = 0; i < n; i++) {
        float x = pre[i], c = mvm_pred_sigmoid(1.702f * x);
        out[i] = x * c;
        if (train)
            pre[i] = c * (1 + 1.702f * x * (1 - c));
    }
}

/* z[r] = proj · (h - mu); c: [D] scratch. */
void mvm_pred_project(const mvm_pred_model *m, uint32_t D, const float *h, float *c, float *z)
{
    for (uint32_t i = 0; i < D; i++)
        c[i] = h[i] - m->mu[i];
    mvm_predict_matvec(m->proj, m->r, D, c, z);
}

/* a->x = concat(z, weighted multi-hot of the experts); x's first r floats hold z already. */
void mvm_pred_fuse(mvm_pred_acts *a, uint32_t r, uint32_t E, uint32_t K, const int32_t *ex,
                   const float *w)
{
    float *m = a->x + r;
    memset(m, 0, E * sizeof *m);
    a->n_hot = 0;
    for (uint32_t j = 0; j < K; j++) {
        if (ex[j] < 0 || (uint32_t)ex[j] >= E)
            continue;
        uint32_t e = (uint32_t)ex[j], seen = 0;
        for (uint32_t h = 0; h < a->n_hot; h++)
            seen |= a->hot[h] == e;
        if (!seen)
            a->hot[a->n_hot++] = e;
        m[e] += w[j];
    }
}

/* y = W x + b. */
static void dense(const float *w, const float *b, uint32_t rows, uint32_t cols, const float *x,
                  float *y)
{
    mvm_predict_matvec(w, rows, cols, x, y);
    for (uint32_t i = 0; i < rows; i++)
        y[i] += b[i];
}

/* a->x set (by fuse): every activation, to the logits. */
void mvm_pred_forward(const mvm_pred_model *m, uint32_t E, mvm_pred_acts *a, int train)
{
    const uint32_t H = m->H, r = m->r, X = r + E;
    for (uint32_t i = 0; i < H; i++) { /* W1 x + b1 over z and the hot entries */
        const float *w = m->w1 + (uint64_t)i * X;
        float s = mvm_predict_dot(w, a->x, r);
        for (uint32_t h = 0; h < a->n_hot; h++)
            s += w[r + a->hot[h]] * a->x[r + a->hot[h]];
        a->d1[i] = s + m->b1[i];
    }
    gelu(a->d1, a->h1, H, train);
    const float *top = a->h1;
    if (m->kind == MVM_PREDICTOR_GATED) {
        dense(m->w3, m->b3, H, H, a->h1, a->d3);
        gelu(a->d3, a->u, H, train);
        dense(m->w4, m->b4, H, H, a->u, a->d4);
        gelu(a->d4, a->v, H, train);
        dense(m->wg, m->bg, H, r, a->x, a->ag);
        for (uint32_t i = 0; i < H; i++) {
            a->g[i] = mvm_pred_sigmoid(a->ag[i]);
            a->h2[i] = a->h1[i] + a->g[i] * a->v[i];
        }
        top = a->h2;
    }
    dense(m->w2, m->b2, E, H, top, a->logit);
}

/* The activations, then the centred hidden state. */
size_t mvm_predictor_work(const mvm_predictor *p)
{
    uint64_t most = 0;
    for (uint32_t t = 1; t < p->L; t++) {
        uint64_t n = mvm_pred_acts_floats(p->m[t].r, p->E, p->m[t].H);
        most = n > most ? n : most;
    }
    return (size_t)(most + p->D);
}

const float *mvm_predictor_logits(const mvm_predictor *p, uint32_t t, const float *h,
                                  const int32_t *experts, const float *weights, float *work)
{
    if (t == 0 || t >= p->L)
        return NULL;
    const mvm_pred_model *m = &p->m[t];
    mvm_pred_acts a;
    mvm_pred_acts_bind(&a, work, m->r, p->E, m->H);
    mvm_pred_project(m, p->D, h, work + mvm_pred_acts_floats(m->r, p->E, m->H), a.x);
    mvm_pred_fuse(&a, m->r, p->E, p->K, experts, weights);
    mvm_pred_forward(m, p->E, &a, 0);
    return a.logit;
}

/* ---- the file -------------------------------------------------------------------------- */

static uint32_t get_u32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void put_u32(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
    b[2] = (uint8_t)(v >> 16);
    b[3] = (uint8_t)(v >> 24);
}

/* One layer's header and reals at b[*at..size); advances *at. */
static mvm_status parse_layer(const mvm_predictor *p, uint32_t t, const uint8_t *b,
                              size_t size, size_t *at)
{
    mvm_pred_model *m = &p->m[t];
    if (size - *at < LAYER_HEADER_BYTES)
        return mvm_fail(MVM_ERR_INVALID,
                        "predictor: truncated: layer %u's header at byte %zu needs %u bytes, "
                        "%zu left", t, *at, LAYER_HEADER_BYTES, size - *at);
    m->kind = get_u32(b + *at);
    m->r = get_u32(b + *at + 4);
    m->H = get_u32(b + *at + 8);
    if (m->kind != MVM_PREDICTOR_SHALLOW && m->kind != MVM_PREDICTOR_GATED)
        return mvm_fail(MVM_ERR_INVALID, "predictor: layer %u: kind %u is not 0 or 1", t,
                        m->kind);
    if (m->r < 1 || m->r > p->D)
        return mvm_fail(MVM_ERR_INVALID, "predictor: layer %u: rank %u is not in 1..%u", t,
                        m->r, p->D);
    if (m->H < 1 || m->H > MVM_PREDICTOR_MAX_HIDDEN)
        return mvm_fail(MVM_ERR_INVALID, "predictor: layer %u: hidden %u is not in 1..%u", t,
                        m->H, MVM_PREDICTOR_MAX_HIDDEN);
    *at += LAYER_HEADER_BYTES;
    uint64_t n = mvm_pred_layout(m, NULL, p->E, p->D);
    if ((size - *at) / 4 < n)
        return mvm_fail(MVM_ERR_INVALID,
                        "predictor: truncated: layer %u's weights at byte %zu need %llu bytes, "
                        "%zu left", t, *at, (unsigned long long)n * 4, size - *at);
    if (mvm_pred_model_alloc(m, p->E, p->D) != 0)
        return mvm_fail(MVM_ERR_NOMEM, "predictor: out of memory for layer %u", t);
    for (uint64_t i = 0; i < n; i++, *at += 4) {
        uint32_t bits = get_u32(b + *at);
        memcpy(&m->p[i], &bits, sizeof bits);
        if (!isfinite(m->p[i]))
            return mvm_fail(MVM_ERR_INVALID,
                            "predictor: layer %u: weight %llu (byte %zu) is not finite", t,
                            (unsigned long long)i, *at);
    }
    return MVM_OK;
}

mvm_status mvm_predictor_parse(const void *blob, size_t size, const mvm_pshape *expect,
                               mvm_predictor **out)
{
    const uint8_t *b = blob;
    *out = NULL;
    if (!b || size < HEADER_BYTES)
        return mvm_fail(MVM_ERR_INVALID,
                        "predictor: truncated: %zu bytes, the header alone is %u", b ? size : 0,
                        HEADER_BYTES);
    if (memcmp(b, MVM_PREDICTOR_MAGIC, 8) != 0)
        return mvm_fail(MVM_ERR_INVALID, "predictor: no \"" MVM_PREDICTOR_MAGIC
                        "\" magic: not a `moevm train-predictor` file");
    uint32_t version = get_u32(b + 8), L = get_u32(b + 12), E = get_u32(b + 16),
             K = get_u32(b + 20), D = get_u32(b + 24);
    if (version != MVM_PREDICTOR_VERSION)
        return mvm_fail(MVM_ERR_INVALID, "predictor: version %u (this build reads %u)", version,
                        MVM_PREDICTOR_VERSION);
    if (L < 2 || L > MVM_PRED_MAX_LAYERS || E < 1 || E > MVM_PRED_MAX_EXPERTS || K < 1 || K > E ||
        D < 1 || D > MVM_PRED_MAX_EMBD)
        return mvm_fail(MVM_ERR_INVALID,
                        "predictor: shape L=%u E=%u top_k=%u n_embd=%u is out of range", L, E,
                        K, D);
    if (expect && (expect->n_layers != L || expect->n_experts != E || expect->top_k != K ||
                   expect->n_embd != D))
        return mvm_fail(MVM_ERR_INVALID,
                        "predictor: trained for L=%u E=%u top_k=%u n_embd=%u, but the model has "
                        "L=%u E=%u top_k=%u n_embd=%u", L, E, K, D, expect->n_layers,
                        expect->n_experts, expect->top_k, expect->n_embd);
    if ((size - HEADER_BYTES) / LAYER_HEADER_BYTES < L - 1) /* before allocating L models */
        return mvm_fail(MVM_ERR_INVALID,
                        "predictor: truncated: %zu bytes cannot hold %u layer headers", size,
                        L - 1);
    mvm_predictor *p = mvm_pred_new(L, E, K, D);
    if (!p)
        return mvm_fail(MVM_ERR_NOMEM, "predictor: out of memory");
    size_t at = HEADER_BYTES;
    mvm_status st = MVM_OK;
    for (uint32_t t = 1; t < L && st == MVM_OK; t++)
        st = parse_layer(p, t, b, size, &at);
    if (st == MVM_OK && at != size)
        st = mvm_fail(MVM_ERR_INVALID, "predictor: %zu bytes after the last layer", size - at);
    if (st != MVM_OK) {
        mvm_predictor_free(p);
        return st;
    }
    *out = p;
    return MVM_OK;
}

mvm_status mvm_pred_serialize(const mvm_predictor *p, void **blob, size_t *size)
{
    uint64_t bytes = HEADER_BYTES;
    for (uint32_t t = 1; t < p->L; t++)
        bytes += LAYER_HEADER_BYTES + 4 * p->m[t].n;
    uint8_t *b = bytes <= SIZE_MAX ? malloc((size_t)bytes) : NULL;
    if (!b)
        return mvm_fail(MVM_ERR_NOMEM, "train-predictor: out of memory for the file (%llu bytes)",
                        (unsigned long long)bytes);
    memcpy(b, MVM_PREDICTOR_MAGIC, 8);
    const uint32_t head[] = {MVM_PREDICTOR_VERSION, p->L, p->E, p->K, p->D};
    size_t at = 8;
    for (size_t i = 0; i < 5; i++, at += 4)
        put_u32(b + at, head[i]);
    for (uint32_t t = 1; t < p->L; t++) {
        const mvm_pred_model *m = &p->m[t];
        put_u32(b + at, m->kind);
        put_u32(b + at + 4, m->r);
        put_u32(b + at + 8, m->H);
        at += LAYER_HEADER_BYTES;
        for (uint64_t i = 0; i < m->n; i++, at += 4) {
            uint32_t bits;
            memcpy(&bits, &m->p[i], sizeof bits);
            put_u32(b + at, bits);
        }
    }
    *blob = b;
    *size = (size_t)bytes;
    return MVM_OK;
}
