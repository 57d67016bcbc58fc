/*
 * The loop every front end runs to make room with an evict module, written once: the engine
 * (engine/forward/residency.c), the simulator (tools/sim.c) and the interposer
 * (interpose/paging.c) each keep a mirror of what is resident (pages per item: an expert, or
 * one of the interposer's pages) and of what the current step uses; they collect the
 * candidates here, ask the module for its victim, take it out of the list, and evict it
 * their own way (a space call, or the simulator's bookkeeping). A victim that cannot go now
 * is simply not asked for again: the next pick chooses among the rest.
 */
#ifndef MVM_POLICY_EVICT_DRIVER_H
#define MVM_POLICY_EVICT_DRIVER_H

#include <stdbool.h>
#include <stdint.h>

#include "policy/policy.h"

typedef struct mvm_evict_driver {
    const mvm_evict_ops *ops;
    void *self;
    const uint32_t *resident; /* [items] pages resident (the module's view's array) */
    const uint64_t *resident_bits; /* [(items + 63) / 64] bit x set where resident[x] is not 0,
                                      kept by the front end, so that a collection visits the
                                      resident items only; NULL: every item's count is read */
    const uint8_t *busy;      /* [items] used by the current step: never a candidate */
    const uint8_t *held;      /* [items] held by the config module: never a candidate; NULL:
                                 none */
    uint32_t *cand;           /* [items + 1] the candidates, in item order (one entry more:
                                 admission appends the newcomer) */
    uint32_t n_cand;
} mvm_evict_driver;

/* A front end's resident_bits, item x's bit: set where it has pages. */
static inline void mvm_evict_mark(uint64_t *bits, uint32_t x, uint32_t pages)
{
    const uint64_t bit = 1ull << (x % 64);
    bits[x / 64] = pages ? bits[x / 64] | bit : bits[x / 64] & ~bit;
}

/* The candidates: the items of [lo, hi) that are resident, not busy and not held, but `except`
 * (UINT32_MAX: none), and for which usable(ctx, x) holds (usable NULL: all). Their number. */
uint32_t mvm_evict_collect(mvm_evict_driver *d, uint32_t lo, uint32_t hi, uint32_t except,
                           bool (*usable)(void *ctx, uint32_t x), void *ctx);
/* The module's victim among the candidates for room `layer` needs, in *x, taken out of the
 * list (the others keep their order); false when none is left. */
bool mvm_evict_pick(mvm_evict_driver *d, const mvm_pview *v, uint32_t layer, uint32_t *x);
/* policy/admit.h's rule for x (needing `need` more pages) against the candidates, collected
 * without x. */
bool mvm_evict_admit(mvm_evict_driver *d, const mvm_pview *v, uint32_t x, uint32_t need);

#endif
