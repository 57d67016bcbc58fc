/*
 * What the predict modules (predict_gate.c, predict_residual.c, predict_learned.c) and the
 * learned predictor (predictor_mlp.c, predictor_train.c) share: a matrix-vector product,
 * and the per-token top-k count that turns one token's expert scores into the caller's
 * shares.
 *
 * The predict contract (policy.h, read the same way by all three modules): out[e] in [0, 1]
 * is the predicted share of the step's n_tok tokens that will select expert e at layer
 * `target`, so Σ_e out[e] = top_k. It is PreScope's unstated step from probabilities to token
 * counts read as "per-token top-k, then count", which is also DALI's "count the number of
 * tokens routed to each expert" (§4.2): the same scale for every module, and the one assign
 * "presched" reads (its n_tok·top_k best entries).
 */
#ifndef MVM_POLICY_PREDICT_COMMON_H
#define MVM_POLICY_PREDICT_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "policy/policy.h"
#include "policy/router.h"
#include "vmm/error.h"

/* The dot product of a[n] and b[n], in eight interleaved partial sums: one running sum is
 * bound by the adder's latency, eight keep it busy (and let the compiler use vectors). The
 * order is fixed, so the result is the same on every run. */
static inline float mvm_predict_dot(const float *a, const float *b, uint32_t n)
{
    float p[8] = {0};
    size_t j = 0; /* size_t: the compiler sees contiguous loads (no 32-bit wrap-around) */
    for (; j + 8 <= n; j += 8)
        for (size_t k = 0; k < 8; k++)
            p[k] += a[j + k] * b[j + k];
    float s = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
    for (; j < n; j++)
        s += a[j] * b[j];
    return s;
}

/* y[rows] = W[rows][cols] · x[cols]. */
static inline void mvm_predict_matvec(const float *w, uint32_t rows, uint32_t cols,
                                      const float *x, float *y)
{
    for (uint32_t i = 0; i < rows; i++)
        y[i] = mvm_predict_dot(w + (uint64_t)i * cols, x, cols);
}

/* Writes the indices of the k largest v[0..n) into idx[0..k), best first, ties to the lower
 * index; entries that are NaN are never picked. Returns how many were picked (k unless NaNs
 * leave fewer). O(n·k) and no scratch: pass j takes the best entry strictly after pass
 * j-1's in the order (value descending, index ascending). */
static inline uint32_t mvm_predict_topk(const float *v, uint32_t n, uint32_t k, uint32_t *idx)
{
    uint32_t got = 0;
    for (; got < k; got++) {
        uint32_t best = UINT32_MAX;
        for (uint32_t e = 0; e < n; e++) {
            if (v[e] != v[e])
                continue;
            if (got) {
                float pv = v[idx[got - 1]];
                if (!(v[e] < pv || (v[e] == pv && e > idx[got - 1])))
                    continue; /* already picked, or better than a pick */
            }
            if (best == UINT32_MAX || v[e] > v[best])
                best = e;
        }
        if (best == UINT32_MAX)
            break;
        idx[got] = best;
    }
    return got;
}

/* A prefetch order from forecast or ranking v[0..n): its `depth` best entries into
 * idx, best first (mvm_predict_topk's order), up to the first that is not above `above` (0
 * for token shares, where 0 means unused; -INFINITY for a ranking). Returns how many. */
static inline uint32_t mvm_predict_order(const float *v, uint32_t n, uint32_t depth, float above,
                                         uint32_t *idx)
{
    uint32_t got = mvm_predict_topk(v, n, depth, idx), k = 0;
    while (k < got && v[idx[k]] > above)
        k++;
    return k;
}

/* The largest top_k the predict modules take (create checks it): a vote's picks live on the
 * stack. Real models route to 8 or fewer. */
#define MVM_PREDICT_MAX_K 64

/* MVM_ERR_INVALID, naming module `me`, unless the shape is one a predictor can serve. */
static inline mvm_status mvm_predict_check_shape(const mvm_pshape *sh, const char *me)
{
    if (!sh->n_layers || !sh->n_experts || !sh->n_embd || !sh->top_k ||
        sh->top_k > sh->n_experts || sh->top_k > MVM_PREDICT_MAX_K)
        return mvm_fail(MVM_ERR_INVALID,
                        "%s: shape L=%u E=%u top_k=%u n_embd=%u: needs every size >= 1 and "
                        "top_k <= min(E, %d)",
                        me, sh->n_layers, sh->n_experts, sh->top_k, sh->n_embd,
                        MVM_PREDICT_MAX_K);
    return MVM_OK;
}

/* Adds `share` to out[e] for each of the k best experts of v[0..n) (one token's vote);
 * k <= MVM_PREDICT_MAX_K. */
static inline void mvm_predict_vote(const float *v, uint32_t n, uint32_t k, float share,
                                    float *out)
{
    uint32_t idx[MVM_PREDICT_MAX_K];
    uint32_t got = mvm_predict_topk(v, n, k < MVM_PREDICT_MAX_K ? k : MVM_PREDICT_MAX_K, idx);
    for (uint32_t j = 0; j < got; j++)
        out[idx[j]] += share;
}

/* Layer l's logit bias (mvm_router.logit_bias), or NULL. */
static inline const float *mvm_predict_logit_bias(const mvm_router *r, uint32_t l)
{
    return r->logit_bias ? r->logit_bias[l] : NULL;
}

/* The gate-based prediction (gate and residual): every token of hidden[n_tok][n_embd]
 * through layer l's router, its logits plus bias[E] (the router's own logit bias, and
 * W·offset, the residual's correction; NULL for none), then its top_k as the model
 * chooses (router.h); out[E] = the share of tokens that picked each expert.
 * logits: [E] and scratch: [2E] floats. */
static inline void mvm_predict_route(const mvm_router *r, uint32_t l, const mvm_pshape *sh,
                                     const float *hidden, uint32_t n_tok, const float *bias,
                                     float *logits, float *scratch, float *out)
{
    const uint32_t E = sh->n_experts, D = sh->n_embd;
    uint32_t idx[MVM_PREDICT_MAX_K];
    for (uint32_t e = 0; e < E; e++)
        out[e] = 0;
    for (uint32_t t = 0; t < n_tok; t++) {
        mvm_predict_matvec(r->weights[l], E, D, hidden + (uint64_t)t * D, logits);
        if (bias)
            for (uint32_t e = 0; e < E; e++)
                logits[e] += bias[e];
        uint32_t got = mvm_router_pick(r, l, logits, E, sh->top_k, idx, scratch);
        for (uint32_t j = 0; j < got; j++)
            out[idx[j]] += 1;
    }
    for (uint32_t e = 0; e < E; e++)
        out[e] /= (float)n_tok; /* whole counts first: exactly count / n_tok */
}

/* The ranking mvm_predict_route's routing comes from (the predict ops' rank): each token's
 * router probabilities, MoEpic's Eq. 3 (for a router that chooses by a key, the key as a
 * ranking: router.h), averaged over the tokens into out[E]. logits: [E] and scratch: [2E]
 * floats. */
static inline void mvm_predict_rank_route(const mvm_router *r, uint32_t l, const mvm_pshape *sh,
                                          const float *hidden, uint32_t n_tok,
                                          const float *bias, float *logits, float *scratch,
                                          float *out)
{
    const uint32_t E = sh->n_experts, D = sh->n_embd;
    for (uint32_t e = 0; e < E; e++)
        out[e] = 0;
    for (uint32_t t = 0; t < n_tok; t++) {
        mvm_predict_matvec(r->weights[l], E, D, hidden + (uint64_t)t * D, logits);
        for (uint32_t e = 0; bias && e < E; e++)
            logits[e] += bias[e];
        mvm_router_probs(r, logits, E);
        const float *key = logits;
        if (mvm_router_keyed(r, l)) {
            mvm_router_rank_key(r, l, logits, E, scratch, scratch + E);
            key = scratch;
        }
        for (uint32_t e = 0; e < E; e++)
            out[e] += key[e] / (float)n_tok;
    }
}

#endif
