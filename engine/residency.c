/* Expert residency for the engine: on-demand requests, pins, LRU eviction (residency.h). */
#include "engine/residency.h"

#include <stdlib.h>

#include "vmm/error.h"

struct mvm_resid {
    mvm_space *space;
    uint32_t n_experts, n_total;
    uint64_t clock;
    uint64_t *last_use;   /* per expert: clock of its last acquire */
    uint32_t *cached;     /* experts requested resident and not evicted since */
    uint8_t *is_cached;
    uint32_t n_cached;
    mvm_resid_stats stats;
};

mvm_status mvm_resid_create(mvm_space *space, mvm_resid **out)
{
    *out = NULL;
    mvm_space_info info;
    mvm_status st = mvm_space_get_info(space, &info);
    if (st != MVM_OK)
        return st;
    mvm_resid *r = calloc(1, sizeof *r);
    if (!r)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the residency table");
    r->space = space;
    r->n_experts = info.n_experts;
    r->n_total = info.n_layers * info.n_experts;
    r->last_use = calloc(r->n_total, sizeof *r->last_use);
    r->cached = calloc(r->n_total, sizeof *r->cached);
    r->is_cached = calloc(r->n_total, 1);
    if (!r->last_use || !r->cached || !r->is_cached) {
        mvm_resid_destroy(r);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the residency table");
    }
    *out = r;
    return MVM_OK;
}

void mvm_resid_destroy(mvm_resid *r)
{
    if (!r)
        return;
    free(r->last_use);
    free(r->cached);
    free(r->is_cached);
    free(r);
}

/* Evicts the least recently used unpinned cached expert; MVM_ERR_NOSPACE if none. */
static mvm_status evict_lru(mvm_resid *r)
{
    for (;;) {
        int64_t best = -1;
        for (uint32_t i = 0; i < r->n_cached; i++) {
            mvm_residency res;
            uint32_t x = r->cached[i];
            if (mvm_expert_residency(r->space, x / r->n_experts, x % r->n_experts, &res) == MVM_OK &&
                !res.pins && (best < 0 || r->last_use[x] < r->last_use[r->cached[best]]))
                best = i;
        }
        if (best < 0)
            return MVM_ERR_NOSPACE;
        uint32_t x = r->cached[best];
        r->cached[best] = r->cached[--r->n_cached];
        r->is_cached[x] = 0;
        mvm_status st = mvm_evict(r->space, x / r->n_experts, x % r->n_experts, 0);
        if (st != MVM_ERR_PINNED) /* pinned in between by another reader: try the next */
            return st;
    }
}

mvm_status mvm_resid_acquire(mvm_resid *r, uint32_t layer, uint32_t expert, int wait)
{
    uint32_t x = layer * r->n_experts + expert;
    r->stats.accesses++;
    r->last_use[x] = ++r->clock;
    mvm_status st;
    mvm_move *move = NULL;
    while ((st = mvm_make_resident_async(r->space, layer, expert, MVM_ALL_PAGES,
                                         wait ? &move : NULL)) == MVM_ERR_NOSPACE)
        if (evict_lru(r) != MVM_OK)
            break;
    if (st == MVM_ERR_NOSPACE) {
        r->stats.bypassed++;
        if (wait)
            return mvm_fail(MVM_ERR_NOSPACE, "device budget too small for the experts one "
                            "layer uses at once");
    } else if (st != MVM_OK) {
        return st;
    } else if (!r->is_cached[x]) {
        r->is_cached[x] = 1;
        r->cached[r->n_cached++] = x;
    }
    if (move) {
        st = mvm_move_wait(move, -1);
        mvm_move_release(move);
        if (st != MVM_OK)
            return st;
    }
    return mvm_pin(r->space, layer, expert);
}

mvm_status mvm_resid_release(mvm_resid *r, uint32_t layer, uint32_t expert)
{
    return mvm_unpin(r->space, layer, expert);
}

void mvm_resid_get_stats(const mvm_resid *r, mvm_resid_stats *out)
{
    *out = r->stats;
}
