/*
 * What evict "adaptive" (evict_adaptive.c) runs inside: its ghost caches and which one
 * leads, for the tests and for anyone asking why it chose as it did. Read-only views; the
 * module behaves the same whether or not anyone calls them.
 */
#ifndef MVM_POLICY_EVICT_ADAPTIVE_H
#define MVM_POLICY_EVICT_ADAPTIVE_H

#include <stdint.h>

#include "policy/policy.h"

typedef struct mvm_adaptive_ghost {
    const char *module, *params; /* the candidate module and its parameters */
    const uint8_t *in;           /* [L*E] 1: in this ghost cache */
    uint32_t size;               /* experts in it */
    double hits;                 /* its hits, decayed over the window */
} mvm_adaptive_ghost;

/* The number of ghosts of an evict "adaptive" instance; with out non-NULL, they are written
 * to out[0 ..) in the order of the module's candidates. */
uint32_t mvm_evict_adaptive_ghosts(const void *self, mvm_adaptive_ghost *out);
/* The index of the ghost whose module picks the real victims now. */
uint32_t mvm_evict_adaptive_leader(const void *self);

#endif
