/*
 * A fixed pool of worker threads for the forward pass. mvm_pool_run(fn) runs fn on every
 * thread — the caller is thread 0 — and returns when all have finished, so a parallel
 * region is one call. A decode step makes hundreds of these calls, so workers spin on an
 * atomic generation counter before sleeping (up to 2 ms where each thread has a core of its
 * own: pool.c says why): a wake-up through a condition variable alone costs tens of
 * microseconds. Workers are pinned one per core within the cores the topology module
 * picked (every core, or those near the GPU: mvm_pool_move), and the thread that runs the
 * pool to the first of them at its first run (not when the pool is made: threads made
 * meanwhile, such as the space's migration worker, keep their creator's affinity).
 */
#ifndef MVM_ENGINE_COMPUTE_POOL_H
#define MVM_ENGINE_COMPUTE_POOL_H

#include "moevm/moevm.h"
#include "vmm/topo.h"

typedef struct mvm_pool mvm_pool;
typedef void (*mvm_pool_fn)(void *ctx, int thread, int n_threads);

/* The most threads a pool takes: more than any machine's cores, so that a typo (an
 * extra zero) is an error rather than a million threads. */
#define MVM_POOL_MAX_THREADS 1024

/* n_threads in 1..MVM_POOL_MAX_THREADS (the caller counts as one), or 0 with a topo: one
 * per core of it. topo may be NULL: no pinning; the pool keeps a copy. */
mvm_status mvm_pool_create(int n_threads, const mvm_topo *topo, mvm_pool **out);
/* Moves a pinned pool to topo's cores (the space's, near its GPU, once the space is known:
 * the pool is made before it), restarting its workers there: as many as before when it was
 * made with a count, else one per core of topo but `spare` of them (at least one thread),
 * left to threads that spin beside the pool's (the space's migration worker). Nothing when
 * the cores and the count stay, or for a pool made without a topo. Not during a run. */
mvm_status mvm_pool_move(mvm_pool *p, const mvm_topo *topo, int spare);
void mvm_pool_destroy(mvm_pool *p);
int mvm_pool_size(const mvm_pool *p);
/* The cores the pool is pinned to; NULL for a pool made without a topo. */
const mvm_topo *mvm_pool_topo(const mvm_pool *p);
/* Runs fn(ctx, t, n) for t in [0, n) concurrently; not reentrant. */
void mvm_pool_run(mvm_pool *p, mvm_pool_fn fn, void *ctx);

/* [*begin, *end) of n items for thread t of nth, in contiguous balanced slices. */
void mvm_pool_split(size_t n, int t, int nth, size_t *begin, size_t *end);

/* Items shared out with stealing, for work whose threads may not finish together (a core
 * slower, or busy elsewhere for a while): before mvm_pool_run, mvm_pool_share(p, n, starts)
 * (n below 2^32) gives thread t the slice [starts[t], starts[t + 1]) of the items (the last
 * to n; starts NULL: mvm_pool_split's slices); in the run, each thread calls mvm_pool_take
 * until it returns 0, getting up to `chunk` items at a time, first from the front of its
 * own slice, then from the backs of the others'. Every item is taken once. */
void mvm_pool_share(mvm_pool *p, size_t n, const size_t *starts);
int mvm_pool_take(mvm_pool *p, int t, size_t chunk, size_t *begin, size_t *end);

#endif
