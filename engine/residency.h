/*
 * The engine's use of the expert space: before an expert computes it is requested resident
 * (on-demand priority) and pinned; afterwards unpinned. When the device budget is full the
 * least recently used unpinned expert is evicted to make room — a baseline until the
 * policy modules (DESIGN.md §3) take over the `evict` role. When nothing can be evicted
 * (every resident expert is pinned by the current layer) the expert runs from where it is:
 * through its fixed address, which on the host backend and on HOST_NUMA devices reads the
 * host home. `moevm demo` and `moevm run` share this.
 */
#ifndef MVM_ENGINE_RESIDENCY_H
#define MVM_ENGINE_RESIDENCY_H

#include <stdint.h>

#include "moevm/moevm.h"

typedef struct mvm_resid mvm_resid;

typedef struct mvm_resid_stats {
    uint64_t accesses;   /* acquire calls */
    uint64_t bypassed;   /* acquires that found no room and ran from the home */
} mvm_resid_stats;

mvm_status mvm_resid_create(mvm_space *space, mvm_resid **out);
void mvm_resid_destroy(mvm_resid *r);
/* Requests (l, e) resident and pins it. wait = 1: returns once it is resident (a reader
 * that needs device memory); 0: returns at once, the copy proceeds behind the reader. */
mvm_status mvm_resid_acquire(mvm_resid *r, uint32_t layer, uint32_t expert, int wait);
mvm_status mvm_resid_release(mvm_resid *r, uint32_t layer, uint32_t expert);
void mvm_resid_get_stats(const mvm_resid *r, mvm_resid_stats *out);

#endif
