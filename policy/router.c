/* The routing rule (router.h). */
#include "policy/router.h"

#include <math.h>

#include "policy/predict_common.h"

void mvm_router_probs(const mvm_router *r, float *x, uint32_t E)
{
    if (r->sigmoid) {
        for (uint32_t e = 0; e < E; e++)
            x[e] = 1.0f / (1.0f + expf(-x[e]));
        return;
    }
    float top = -INFINITY;
    for (uint32_t e = 0; e < E; e++)
        top = x[e] > top ? x[e] : top;
    double sum = 0;
    for (uint32_t e = 0; e < E; e++)
        sum += x[e] = expf(x[e] - top);
    for (uint32_t e = 0; e < E; e++)
        x[e] = (float)(x[e] / sum);
}

/* Expert e's probability plus its choose bias (b NULL: none). */
static float biased(const float *p, const float *b, uint32_t e)
{
    return p[e] + (b ? b[e] : 0.0f);
}

/* NaN ranks lowest. */
static float rank_key(float v)
{
    return isnan(v) ? -INFINITY : v;
}

/* Group g's key: its best expert's, plus its second best's under sigmoid. */
static float group_key(const mvm_router *r, const float *key, uint32_t G)
{
    float best = -INFINITY, second = -INFINITY;
    for (uint32_t e = 0; e < G; e++) {
        float v = rank_key(key[e]);
        if (v > best) {
            second = best;
            best = v;
        } else if (v > second) {
            second = v;
        }
    }
    float k = r->sigmoid ? best + second : best;
    return isnan(k) ? -INFINITY : k; /* -inf + inf */
}

void mvm_router_key(const mvm_router *r, uint32_t l, const float *p, uint32_t E, float *key,
                    float *group)
{
    const float *b = r->choose_bias ? r->choose_bias[l] : NULL;
    for (uint32_t e = 0; e < E; e++)
        key[e] = biased(p, b, e);
    if (r->n_group <= 1)
        return;
    const uint32_t n = r->n_group, G = E / n;
    for (uint32_t g = 0; g < n; g++)
        group[g] = group_key(r, key + (uint64_t)g * G, G);
    /* A group is kept when fewer than n_group_used rank ahead of it: groups are few (8 in
     * DeepSeek-V3), so counting beats a sort. */
    for (uint32_t g = 0; g < n; g++) {
        uint32_t ahead = 0;
        for (uint32_t h = 0; h < n; h++)
            ahead += group[h] > group[g] || (group[h] == group[g] && h < g);
        for (uint32_t e = 0; ahead >= r->n_group_used && e < G; e++)
            key[(uint64_t)g * G + e] = -INFINITY;
    }
}

void mvm_router_rank_key(const mvm_router *r, uint32_t l, const float *p, uint32_t E,
                         float *key, float *group)
{
    mvm_router_key(r, l, p, E, key, group);
    if (r->n_group <= 1)
        return;
    const float *b = r->choose_bias ? r->choose_bias[l] : NULL;
    float lo = INFINITY, top = -INFINITY; /* the lowest kept key, the highest of all */
    for (uint32_t e = 0; e < E; e++) {
        top = biased(p, b, e) > top ? biased(p, b, e) : top;
        lo = key[e] > -INFINITY && key[e] < lo ? key[e] : lo;
    }
    for (uint32_t e = 0; e < E; e++)
        if (key[e] == -INFINITY)
            key[e] = biased(p, b, e) - (top - lo) - 1;
}

uint32_t mvm_router_pick(const mvm_router *r, uint32_t l, float *x, uint32_t E, uint32_t k,
                         uint32_t *idx, float *scratch)
{
    if (!mvm_router_keyed(r, l)) /* softmax and sigmoid keep the logits' order */
        return mvm_predict_topk(x, E, k, idx);
    mvm_router_probs(r, x, E);
    mvm_router_key(r, l, x, E, scratch, scratch + E);
    return mvm_predict_topk(scratch, E, k, idx);
}
