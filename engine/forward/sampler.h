/*
 * Picking the next token from a row of logits: greedy, or sampling after top-k, top-p
 * (nucleus) and min-p filtering, in llama.cpp's default order — top-k, top-p and min-p
 * judge the untempered distribution, then the temperature reshapes what is left:
 *
 *   1. keep the top_k highest logits (0: all),
 *   2. keep the fewest highest whose probability sums to at least top_p (1: all),
 *   3. keep those with probability at least min_p times the highest (0: all),
 *   4. draw from softmax(logit / temperature) over what is left.
 *
 * temperature 0 is greedy: the highest logit, ties to the lowest id, whatever the other
 * parameters. Ties elsewhere also order by id, so a seed reproduces a run exactly. NaN
 * logits are never picked; a +inf logit wins outright.
 */
#ifndef MVM_ENGINE_FORWARD_SAMPLER_H
#define MVM_ENGINE_FORWARD_SAMPLER_H

#include <stdint.h>

#include "moevm/moevm.h"

typedef struct mvm_sampler_params {
    float temperature; /* >= 0; 0 = greedy */
    int32_t top_k;     /* >= 0; 0 = off */
    float top_p;       /* (0, 1]; 1 = off */
    float min_p;       /* [0, 1]; 0 = off */
    uint64_t seed;     /* the random stream (splitmix64) */
} mvm_sampler_params;

typedef struct mvm_sampler mvm_sampler;

/* Checks the parameters (MVM_ERR_INVALID with a message naming the bad one) and reserves
 * what sampling rows of up to n_vocab logits needs (MVM_ERR_NOMEM). */
mvm_status mvm_sampler_create(const mvm_sampler_params *p, uint32_t n_vocab,
                              mvm_sampler **out);
/* NULL is a no-op. */
void mvm_sampler_free(mvm_sampler *s);

/* The token picked from logits[0..n); -1 when n is 0 or over the n_vocab reserved, or no
 * logit is a number. Allocates nothing; the logits are left as they are. */
int32_t mvm_sampler_sample(mvm_sampler *s, float *logits, uint32_t n);

#endif
