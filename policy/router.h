/*
 * A model's routing rule (mvm_router, policy.h) as code: one token's choosing key from its
 * probabilities, and its top_k from its logits. The engine routes with it
 * (engine/forward/moe_step.c) and the gate-based predictors recompute routings with it, so that a
 * prediction chooses as the model will. That matters for the routers that do not choose by
 * their logits' order: DeepSeek-V3's, Kimi K2's, GLM-4.5's and MiniMax-M2's add a bias to
 * their sigmoid scores to choose, and DeepSeek's choose within groups.
 *
 * Groups: a group's key is its best expert's under softmax (DeepSeek-V2 and V2.5's
 * group_limited_greedy), the sum of its best two under sigmoid (V3's noaux_tc). llama.cpp's
 * build_moe_ffn sums the best two for both: for V2 this follows DeepSeek's code instead, as
 * the GGUF file does not say which (the router does). Ties go to the lower index and NaN
 * ranks lowest, as in the engine's top-k.
 */
#ifndef MVM_POLICY_ROUTER_H
#define MVM_POLICY_ROUTER_H

#include <stdint.h>

#include "policy/policy.h"

/* Whether layer l chooses by a key other than its probabilities (a choose bias or groups):
 * otherwise the top_k of its logits is its choice. */
static inline int mvm_router_keyed(const mvm_router *r, uint32_t l)
{
    return (r->choose_bias && r->choose_bias[l]) || r->n_group > 1;
}

/* x[E], a token's logits, to its probabilities in place: softmax, or sigmoid. */
void mvm_router_probs(const mvm_router *r, float *x, uint32_t E);

/* key[E]: a token's probabilities p[E] plus layer l's choose bias; with groups, the experts
 * outside the n_group_used best groups at -inf. group: [n_group] scratch. */
void mvm_router_key(const mvm_router *r, uint32_t l, const float *p, uint32_t E, float *key,
                    float *group);

/* The same key as a ranking of every expert: those outside the kept groups moved below
 * every kept one, in their own order (p + bias), rather than to -inf. fixedpoint's
 * speculation averages it over tokens. */
void mvm_router_rank_key(const mvm_router *r, uint32_t l, const float *p, uint32_t E,
                         float *key, float *group);

/* A token's top k (<= E) experts at layer l from its logits x[E] (overwritten), best first
 * into idx; returns how many (fewer than k only where NaN leaves too few). scratch: [2E]. */
uint32_t mvm_router_pick(const mvm_router *r, uint32_t l, float *x, uint32_t E, uint32_t k,
                         uint32_t *idx, float *scratch);

#endif
