/*
 * The device pool's slabs: which chunks have memory, in which physical allocation, and which
 * run of an expert's pages each allocation backs.
 *
 * Why slabs: the CUDA driver maps a physical allocation from its start only (cuMemMap's
 * offset must be 0), and what a remap costs is per mapping, not per byte (cuMemSetAccess 25
 * us for a 2 MiB mapping, 42 for 32 MiB: docs/perf/vmm.md, section 1). With a handle per
 * page, an expert of N pages cost N maps and N access grants to load and N unmaps to evict.
 * A slab is one allocation for one run of consecutive pages of one expert, so a move is one
 * cuMemMap and one cuMemSetAccess, and an eviction one cuMemUnmap, whatever the expert's size.
 *
 * The chunk numbers stay (the pool view, the copies, the write-back digests are per chunk);
 * a slab is a run of them, [first, first + n), owned whole by one run of one expert or free.
 * Slabs are made once and reused: the pool starts as slabs of a whole expert each (the move
 * every policy makes), plus one of the remainder. A run of another length (MoEpic's split
 * prefix, the rest of a split expert, the interposer's pages are whole experts already) takes
 * a free slab of exactly its length, else a new one made where chunks have no memory, else
 * free slabs of other lengths are destroyed to make room; when the chunks without an owner
 * are too scattered for one slab, a run is backed by several (each its own mapping).
 * Everything here runs with the space lock held.
 */
#include <stdlib.h>

#include "vmm/error.h"
#include "vmm/space_impl.h"

#define NO_SLAB UINT32_MAX

static mvm_status unmap_stale(mvm_space *sp, uint32_t i, bool drop);

static void free_push(mvm_space *sp, uint32_t first)
{
    struct slab *s = &sp->slabs[first];
    s->expert = -1;
    s->mapped = false;
    s->next_free = sp->free_slabs[s->n];
    sp->free_slabs[s->n] = first;
}

static void free_remove(mvm_space *sp, uint32_t first)
{
    for (uint32_t *k = &sp->free_slabs[sp->slabs[first].n]; *k != NO_SLAB;
         k = &sp->slabs[*k].next_free)
        if (*k == first) {
            *k = sp->slabs[first].next_free;
            return;
        }
}

/* Memory for chunks [first, first + n) as one allocation (a slot space's slabs: a share of
 * the pool's one allocation, made with it); the slab starts free. */
static mvm_status slab_make(mvm_space *sp, uint32_t first, uint32_t n)
{
    mvm_status st = sp->slots ? MVM_OK : sp->be->ops->slab_create(sp->be, sp->pool, first, n);
    if (st != MVM_OK)
        return st;
    sp->slabs[first] = (struct slab){.n = n, .expert = -1};
    for (uint32_t k = first; k < first + n; k++)
        sp->chunk_slab[k] = first;
    free_push(sp, first);
    return MVM_OK;
}

/* A free slab's memory goes back to the device (once no evicted run's address maps it
 * still); its chunks have none until a new slab. One the backend cannot take apart stays a
 * free slab. */
static mvm_status slab_unmake(mvm_space *sp, uint32_t first)
{
    uint32_t n = sp->slabs[first].n;
    mvm_status st = mvm_stale_clear(sp, 0, 0, first);
    if (st == MVM_OK && !sp->slots)
        st = sp->be->ops->slab_destroy(sp->be, sp->pool, first, n);
    if (st != MVM_OK)
        return st;
    free_remove(sp, first);
    for (uint32_t k = first; k < first + n; k++)
        sp->chunk_slab[k] = NO_SLAB;
    sp->slabs[first].n = 0;
    return MVM_OK;
}

mvm_status mvm_slabs_init(mvm_space *sp)
{
    sp->slabs = calloc(sp->n_chunks, sizeof *sp->slabs);
    sp->chunk_slab = malloc(sp->n_chunks * sizeof *sp->chunk_slab);
    sp->free_slabs = malloc((sp->ppe + 1) * sizeof *sp->free_slabs);
    if (!sp->slabs || !sp->chunk_slab || !sp->free_slabs)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the slab table of %u chunks",
                        sp->n_chunks);
    for (uint32_t k = 0; k < sp->n_chunks; k++)
        sp->chunk_slab[k] = NO_SLAB;
    for (uint32_t n = 0; n <= sp->ppe; n++)
        sp->free_slabs[n] = NO_SLAB;
    /* A slot space's pool is one allocation (its chunks may be under the device's
     * granularity, which an allocation is made of), shared out as slabs of whole experts */
    mvm_status st;
    if (sp->slots && (st = sp->be->ops->slab_create(sp->be, sp->pool, 0, sp->n_chunks)))
        return st;
    sp->pool_backed = sp->slots;
    /* Whole experts, then the remainder: the device memory of the whole budget is taken
     * now, so a budget the device cannot hold fails here, not in the middle of a run. */
    for (uint32_t first = 0; first < sp->n_chunks; first += sp->ppe) {
        uint32_t n = sp->n_chunks - first < sp->ppe ? sp->n_chunks - first : sp->ppe;
        st = slab_make(sp, first, n);
        if (st != MVM_OK)
            return st;
    }
    return MVM_OK;
}

void mvm_slabs_destroy(mvm_space *sp)
{
    while (sp->n_stale)
        (void)unmap_stale(sp, sp->n_stale - 1, true);
    free(sp->stale);
    sp->stale = NULL, sp->n_stale = sp->cap_stale = 0;
    if (!sp->slabs || !sp->pool)
        return;
    for (uint32_t k = 0; k < sp->n_chunks; k++)
        if (sp->slabs[k].n) {
            if (sp->slabs[k].expert >= 0) /* teardown after a failure: owned, not free */
                free_push(sp, k);
            if (slab_unmake(sp, k) != MVM_OK) /* nothing more to try: say what is lost */
                mvm_log(MVM_LOG_WARN, "a slab of %u chunks is left mapped: %s", sp->slabs[k].n,
                        mvm_last_error());
        }
    if (sp->pool_backed && sp->be->ops->slab_destroy(sp->be, sp->pool, 0, sp->n_chunks))
        mvm_log(MVM_LOG_WARN, "the slot space's pool is left mapped: %s", mvm_last_error());
    sp->pool_backed = false;
}

/* The longest run of chunks without memory: its start in *at. */
static uint32_t longest_hole(const mvm_space *sp, uint32_t *at)
{
    uint32_t best = 0, run = 0;
    for (uint32_t k = 0; k < sp->n_chunks; k++) {
        run = sp->chunk_slab[k] == NO_SLAB ? run + 1 : 0;
        if (run > best) {
            best = run;
            *at = k + 1 - run;
        }
    }
    return best;
}

/* A hole of at least n chunks, the first that fits; NO_SLAB if none. */
static uint32_t find_hole(const mvm_space *sp, uint32_t n)
{
    uint32_t run = 0;
    for (uint32_t k = 0; k < sp->n_chunks; k++) {
        run = sp->chunk_slab[k] == NO_SLAB ? run + 1 : 0;
        if (run == n)
            return k + 1 - n;
    }
    return NO_SLAB;
}

/* Any free slab, the longest first (its memory makes the largest hole). */
static uint32_t longest_free(const mvm_space *sp, uint32_t at_most)
{
    for (uint32_t n = at_most; n > 0; n--)
        if (sp->free_slabs[n] != NO_SLAB)
            return sp->free_slabs[n];
    return NO_SLAB;
}

mvm_status mvm_slab_claim(mvm_space *sp, uint32_t want, uint32_t *first, uint32_t *got)
{
    uint32_t k = sp->free_slabs[want];
    if (k == NO_SLAB && (k = find_hole(sp, want)) != NO_SLAB) {
        mvm_status st = slab_make(sp, k, want);
        if (st != MVM_OK)
            return st;
    }
    /* Room for a slab of this length: destroy free slabs of other lengths, each making a
     * hole, until one fits. */
    while (k == NO_SLAB) {
        uint32_t victim = longest_free(sp, sp->ppe);
        if (victim == NO_SLAB)
            break;
        mvm_status st = slab_unmake(sp, victim);
        if (st == MVM_OK && (k = find_hole(sp, want)) != NO_SLAB)
            st = slab_make(sp, k, want);
        if (st != MVM_OK)
            return st;
    }
    if (k == NO_SLAB) { /* scattered: the longest hole left backs part of the run */
        uint32_t at = 0, n = longest_hole(sp, &at);
        if (n == 0)
            return mvm_fail(MVM_ERR_NOSPACE, "no free chunk for a slab (%u free)", sp->n_free);
        mvm_status st = slab_make(sp, at, n);
        if (st != MVM_OK)
            return st;
        k = at;
    }
    free_remove(sp, k);
    sp->slabs[k].expert = 0; /* owned; the caller names the run */
    sp->slabs[k].mapped = sp->slots; /* read in the view: nothing to map (space_impl.h) */
    sp->slabs[k].next_free = 0;
    sp->n_free -= sp->slabs[k].n;
    *first = k;
    *got = sp->slabs[k].n;
    return MVM_OK;
}

/* ---- stale mappings ----------------------------------------------------------------------
 * An eviction where homes are unmapped leaves its run's mapping in place: nothing reads a
 * page that is not resident there, and a slab may be mapped at several addresses at once
 * (the pool view is one), so its chunks are free for the next load at once. The unmap
 * (17 us on an H100, 123 while a kernel runs: docs/perf/vmm.md) then leaves the evicting
 * thread, most often a decode step making room for its misses before their copies can be
 * queued, for the worker's idle time (the eviction wakes it); a map at that address, or the
 * slab's destruction, unmaps it first. The list holds at most one entry an evicted run's
 * address. */

bool mvm_stale_keep(mvm_space *sp, uint64_t va, uint64_t bytes, uint32_t slab)
{
    if (sp->n_stale == sp->cap_stale) {
        uint32_t cap = sp->cap_stale ? 2 * sp->cap_stale : 64;
        struct stale_map *s = realloc(sp->stale, cap * sizeof *s);
        if (!s)
            return false;
        sp->stale = s, sp->cap_stale = cap;
    }
    sp->stale[sp->n_stale++] = (struct stale_map){va, bytes, slab};
    return true;
}

/* The driver's unmap of m, its time in *took, a failure logged. */
static mvm_status unmap_mapping(mvm_space *sp, const struct stale_map *m, uint64_t *took)
{
    const uint64_t start = mvm_clock_ns();
    mvm_status st = sp->be->ops->unmap(sp->be, m->va, m->bytes, m->bytes);
    *took = mvm_clock_ns() - start;
    if (st != MVM_OK)
        mvm_log(MVM_LOG_WARN, "unmapping an evicted run: %s", mvm_last_error());
    return st;
}

/* Unmaps entry i and drops it (the last entry takes its place); a failed one stays, to be
 * tried again, unless `drop` (teardown: nothing more to try, said in the log). */
static mvm_status unmap_stale(mvm_space *sp, uint32_t i, bool drop)
{
    uint64_t took;
    mvm_status st = unmap_mapping(sp, &sp->stale[i], &took);
    sp->stats.remap_ns += took;
    if (st == MVM_OK || drop)
        sp->stale[i] = sp->stale[--sp->n_stale];
    return st;
}

mvm_status mvm_stale_clear(mvm_space *sp, uint64_t va, uint64_t bytes, uint32_t slab)
{
    mvm_status st = MVM_OK;
    for (uint32_t i = sp->n_stale; i-- > 0;) {
        const struct stale_map *m = &sp->stale[i];
        if (m->slab != slab && !(m->va < va + bytes && va < m->va + m->bytes))
            continue;
        mvm_status got = unmap_stale(sp, i, false);
        st = st != MVM_OK ? st : got;
    }
    return st;
}

/* The worker's unmap of m, an entry already taken off the list, without the lock: nothing
 * else maps at an expert's address but this thread (the worker) and evictions where homes
 * are mapped (none here); a slab destroyed meanwhile is freed by the driver once this unmap
 * is done. A failed one goes back on the list, to be tried again later. */
static mvm_status unmap_taken(mvm_space *sp, const struct stale_map m)
{
    pthread_mutex_unlock(&sp->mu);
    uint64_t took;
    mvm_status st = unmap_mapping(sp, &m, &took);
    pthread_mutex_lock(&sp->mu);
    sp->stats.remap_ns += took;
    if (st != MVM_OK && !mvm_stale_keep(sp, m.va, m.bytes, m.slab))
        mvm_log(MVM_LOG_WARN, "an evicted run's mapping is left: out of memory");
    return st;
}

mvm_status mvm_stale_unmap_one(mvm_space *sp)
{
    return sp->n_stale ? unmap_taken(sp, sp->stale[--sp->n_stale]) : MVM_OK;
}

mvm_status mvm_stale_clear_unlocked(mvm_space *sp, uint64_t va, uint64_t bytes)
{
    for (uint32_t i = sp->n_stale; i-- > 0;) {
        const struct stale_map m = sp->stale[i];
        if (!(m.va < va + bytes && va < m.va + m.bytes))
            continue;
        sp->stale[i] = sp->stale[--sp->n_stale];
        mvm_status st = unmap_taken(sp, m);
        if (st != MVM_OK)
            return st;
        i = sp->n_stale; /* the list may have changed meanwhile: look again */
    }
    return MVM_OK;
}

void mvm_slab_release(mvm_space *sp, uint32_t first)
{
    sp->n_free += sp->slabs[first].n;
    free_push(sp, first);
}
