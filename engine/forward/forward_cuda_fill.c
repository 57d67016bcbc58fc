/*
 * Read-through (MOEVM_BUDGET_ROUTING=read-through): a decode token routed on the device at a
 * budget reads each miss in place over the bus, as in-place does, and its kernels store what
 * they read into a slab set aside for it (kernels/cuda/expert.cu: the route kernel hands a
 * choice read at its home the pool's next slab, up1 and down1 copy the rows they read into
 * it), so that the expert lands after the token with no copy (vmm/fill.c): its bytes cross
 * the bus once, where in-place's read and admission's copy crossed it twice, and every miss
 * enters the cache, where in-place admits one a layer. Why: in the simulator, on 512 tokens
 * of trace gen routing of a 12-block Qwen3-30B-A3B at 25% with the H200's measured costs,
 * routed by the host 4.83 ms a token (83.8% hits), in place 4.27 (70.5%), read-through 2.97
 * (82.8%; docs/perf/engine.md, session 83).
 *
 * Between tokens, the device idle:
 * - the last token's claims come down with its stage (claims[0]: its choices read at their
 *   homes; claims[1 + i]: the expert that took pool slab i), and each slab taken lands its
 *   expert (mvm_resid_fill_land); a slab whose expert is no longer at home stays in the
 *   pool. Where no module evicts as it observes a step (no config module, no MoEpic
 *   window: fill.late), that is all of the token's host work before the next one is
 *   queued: its replay to the policies runs while the next computes (forward_cuda_route.c,
 *   land_early), from a copy of the table it ran with, with what the queued token reads
 *   kept from any victim and the loads it asks left for the next token's start; the pool's
 *   refill below keeps its experts from the victims, as the evict module has not seen them
 *   used yet. H200, session 84: the replay, pool and table were 688-741 us a token between
 *   tokens, the device idle (docs/perf/offload.md). Else the replay comes here, first.
 *   Then, either way:
 * - the pool is refilled to as many slabs as the last token missed (top_k at least, a
 *   quarter of the budget's experts at most: the simulator's rule, tools/sim.c), the evict
 *   module choosing the victims (mvm_resid_fill_reserve); a surplus is given back;
 * - the table of addresses (forward_cuda_route.c) gives an expert landed by a fill whose
 *   slab the worker has not mapped at its address yet that slab's address (mvm_fill_pending),
 *   and every home the MVM_G_ADDR_FILL mark; the token's replay places such an expert on the
 *   device (a hit) if it has landed by then, else at its home.
 * The pool's addresses and a zeroed claims[0] go up before the token; the graph's arguments
 * never change (n_pool is the pool's most slabs, the ones not set aside 0: nothing kept).
 * A host-routed batch gives the pool back first: its steps load on demand.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/forward/forward_cuda_impl.h"
#include "engine/forward/moe_step.h"
#include "engine/forward/prefetch.h"
#include "engine/forward/residency.h"
#include "vmm/error.h"

mvm_status mvm_cuda_fwd_fill_alloc(struct cuda_fwd *f, const mvm_space_info *info)
{
    const uint64_t n = (uint64_t)f->m->hp.n_layer * f->m->hp.n_expert;
    const uint32_t cap = info->device_pages / (info->pages_per_expert * 4);
    const char *why = n * info->pages_per_expert <= info->device_pages
                          ? "holds every expert: they are all loaded, then pinned"
                      : !cap ? "holds under four experts, none to set aside" : NULL;
    if (why) { /* (a pool would keep the first from ever being true) */
        mvm_log(MVM_LOG_INFO, "MOEVM_BUDGET_ROUTING=read-through: the budget (%u pages) %s: "
                "misses read in place only", info->device_pages, why);
        return MVM_OK;
    }
    f->fill.cap = cap;
    TRY(mvm_cuda_fwd_alloc(f, cap * sizeof(uint64_t), &f->fill.pool));
    TRY(mvm_cuda_fwd_alloc(f, (1 + (uint64_t)cap) * sizeof(uint32_t), &f->fill.claims));
    TRY(mvm_cuda_fwd_alloc(f, f->m->hp.n_expert_used * sizeof(uint64_t), &f->fill.wstore));
    TRY(mvm_gpu_host_alloc(f->g, cap * sizeof *f->fill.pool_host, (void **)&f->fill.pool_host));
    TRY(mvm_gpu_host_alloc(f->g, (1 + (size_t)cap) * sizeof *f->fill.claims_host,
                           (void **)&f->fill.claims_host));
    memset(f->fill.pool_host, 0, cap * sizeof *f->fill.pool_host);
    f->fill.fresh = malloc(n * sizeof *f->fill.fresh);
    f->fill.is_fresh = calloc(n, 1);
    f->fill.read_dev = calloc(n, 1);
    f->fill.ran_own = malloc(n);
    f->fill.ran_read_dev = malloc(n);
    f->fill.shield = malloc(n);
    if (!f->fill.fresh || !f->fill.is_fresh || !f->fill.read_dev || !f->fill.ran_own ||
        !f->fill.ran_read_dev || !f->fill.shield)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the read-through pool");
    f->fill.late = !mvm_resid_steps_evict(f->moe->resid) &&
                   !mvm_prefetcher_window(f->moe->prefetch);
    mvm_log(MVM_LOG_INFO, "MOEVM_BUDGET_ROUTING=read-through: a pool of %u slabs at most; "
            "a token's replay runs %s", cap,
            f->fill.late ? "while the next one computes"
                         : "before the next one is queued (a config module or MoEpic's "
                           "window evicts as it observes)");
    for (uint64_t x = 0; x < n; x++) /* every expert at home: the table, as sent up first */
        f->addr_host[x] = f->home_addr[x] |= MVM_G_ADDR_FILL;
    mvm_resid_set_read_through(f->moe->resid, 1);
    f->fill.on = 1;
    return MVM_OK;
}

void mvm_cuda_fwd_fill_free(struct cuda_fwd *f)
{
    if (f->g) {
        mvm_gpu_host_free(f->g, f->fill.pool_host);
        mvm_gpu_host_free(f->g, f->fill.claims_host);
    }
    free(f->fill.fresh);
    free(f->fill.is_fresh);
    free(f->fill.read_dev);
    free(f->fill.ran_own);
    free(f->fill.ran_read_dev);
    free(f->fill.shield);
}

mvm_status mvm_cuda_fwd_fill_land(struct cuda_fwd *f)
{
    if (!f->fill.owed)
        return MVM_OK;
    f->fill.owed = 0;
    const uint32_t E = f->m->hp.n_expert, n_total = f->m->hp.n_layer * E;
    const uint32_t wanted = f->fill.claims_host[0];
    const uint32_t taken = wanted < f->fill.n ? wanted : f->fill.n;
    mvm_status st = MVM_OK;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < f->fill.n; i++) {
        const uint32_t x = f->fill.claims_host[1 + i];
        mvm_status got = MVM_ERR_BUSY;
        if (i < taken && x >= n_total)
            got = mvm_fail(MVM_ERR_BACKEND, "the device's read-through gave slab %u to expert "
                           "%u of %u", i, x, n_total);
        else if (i < taken)
            got = mvm_resid_fill_land(f->moe->resid, x / E, x % E, f->fill.pool_host[i]);
        if (got == MVM_OK && !f->fill.is_fresh[x]) {
            f->fill.is_fresh[x] = 1;
            f->fill.fresh[f->fill.n_fresh++] = x;
        }
        if (got == MVM_ERR_BUSY) { /* not taken, or its expert is not at home any more */
            f->fill.pool_host[kept++] = f->fill.pool_host[i];
        } else if (got != MVM_OK) {
            (void)mvm_resid_fill_give_back(f->moe->resid, f->fill.pool_host[i]);
            st = st != MVM_OK ? st : got;
        }
    }
    f->fill.n = kept;
    f->fill.misses = wanted;
    return st;
}

/* The pool's slabs past the first `keep` given back, the last first; the first failure. */
static mvm_status trim_pool(struct cuda_fwd *f, uint32_t keep)
{
    mvm_status st = MVM_OK;
    while (f->fill.n > keep) {
        const uint64_t at = f->fill.pool_host[--f->fill.n];
        f->fill.pool_host[f->fill.n] = 0;
        const mvm_status got = mvm_resid_fill_give_back(f->moe->resid, at);
        st = st != MVM_OK ? st : got;
    }
    return st;
}

mvm_status mvm_cuda_fwd_fill_give_back(struct cuda_fwd *f)
{
    return trim_pool(f, 0);
}

mvm_status mvm_cuda_fwd_fill_pool(struct cuda_fwd *f)
{
    const uint32_t K = f->m->hp.n_expert_used;
    uint32_t want = f->fill.misses > K ? f->fill.misses : K;
    want = want < f->fill.cap ? want : f->fill.cap;
    TRY(trim_pool(f, want));
    while (f->fill.n < want) {
        uint64_t at = 0;
        const mvm_status st = mvm_resid_fill_reserve(f->moe->resid, &at);
        if (st == MVM_ERR_NOSPACE)
            break; /* nothing can go: fewer slabs, the rest read in place only */
        TRY(st);
        f->fill.pool_host[f->fill.n++] = at;
    }
    memset(f->fill.pool_host + f->fill.n, 0, (f->fill.cap - f->fill.n) * sizeof(uint64_t));
    f->fill.claims_host[0] = 0;
    TRY(mvm_gpu_upload(f->g, f->fill.pool, f->fill.pool_host,
                       f->fill.cap * sizeof *f->fill.pool_host));
    return mvm_gpu_upload(f->g, f->fill.claims, f->fill.claims_host, sizeof(uint32_t));
}

uint32_t mvm_cuda_fwd_fill_table(struct cuda_fwd *f)
{
    const uint32_t E = f->m->hp.n_expert;
    uint32_t changed = 0, kept = 0;
    memcpy(f->fill.read_dev, f->own, (size_t)f->m->hp.n_layer * E);
    for (uint32_t i = 0; i < f->fill.n_fresh; i++) {
        const uint32_t x = f->fill.fresh[i];
        uint64_t at = 0;
        if (!f->own[x] &&
            mvm_fill_pending(f->m->space, x / E, x % E, &at) == MVM_OK && at) {
            f->fill.fresh[kept++] = x; /* still mapping: read where it was written */
            f->fill.read_dev[x] = 1;
        } else {
            f->fill.is_fresh[x] = 0;
            at = f->own[x] ? mvm_cuda_fwd_own_addr(f, x) : f->home_addr[x];
        }
        changed += f->addr_host[x] != at;
        f->addr_host[x] = at;
    }
    f->fill.n_fresh = kept;
    return changed;
}
