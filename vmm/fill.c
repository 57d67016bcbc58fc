/*
 * Loads by the reader (mvm_fill_reserve, mvm_fill_land, mvm_fill_return; docs/architecture.md,
 * "Loads by the reader"). A kernel reading a non-resident expert in place, over the bus, can
 * store what it reads into device memory set aside for it; the expert then lands without a
 * copy of its own, its bytes having crossed the bus once, for the reader, where a read in
 * place and a load crossed it twice.
 *
 * The memory set aside is a slab of a whole expert's chunks, claimed from the free ones (it
 * counts against the budget from then on) and shown to the reader at its address in the
 * pool's view, where copies land too. Landing gives it to an expert at home: its pages turn
 * LOADING in a job with no copy (job.filled), which the migration worker maps at the
 * expert's address as it would a copy's (premapped where homes are unmapped, else at its
 * landing; deferred while the expert is pinned), and its move completes then. Until it does,
 * the expert is read where it was written, at the view's address. A slab not filled goes
 * back to the free ones.
 *
 * Only where the pool has a view the device reads (cuda), one slab holds a whole expert, and
 * evictions need no write-back (a write_back space keeps digests of what its copies loaded).
 */
#include "vmm/error.h"
#include "vmm/registry.h"
#include "vmm/space_impl.h"

static mvm_status check_space(const mvm_space *sp, const char *who)
{
    if (!sp || !mvm_registry_contains(sp))
        return mvm_fail(MVM_ERR_INVALID, "%s: %p is not a live space", who, (void *)sp);
    if (!sp->be->ops->chunk_addr || sp->write_back || sp->packed)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "%s: the %s backend%s cannot load by the reader",
                        who, sp->be->name,
                        sp->write_back ? " in a write-back space"
                        : sp->packed   ? " in a packed space (every expert stays resident)"
                                       : "");
    return MVM_OK;
}

/* The first chunk of the slab set aside at `addr` (lock held), or UINT32_MAX. */
static uint32_t reserved_at(mvm_space *sp, uint64_t addr)
{
    const uint64_t view = sp->be->ops->chunk_addr(sp->be, sp->pool, 0);
    if (addr < view || (addr - view) % sp->page_size)
        return UINT32_MAX;
    const uint64_t k = (addr - view) / sp->page_size;
    return k < sp->n_chunks && sp->slabs[k].n && sp->slabs[k].reserved ? (uint32_t)k
                                                                        : UINT32_MAX;
}

mvm_status mvm_fill_reserve(mvm_space *sp, uint64_t *addr)
{
    mvm_status st = check_space(sp, "mvm_fill_reserve");
    if (st != MVM_OK)
        return st;
    if (!addr)
        return mvm_fail(MVM_ERR_INVALID, "mvm_fill_reserve: addr is NULL");
    pthread_mutex_lock(&sp->mu);
    uint32_t first = 0, got = 0;
    if (sp->n_free < sp->ppe)
        st = mvm_fail(MVM_ERR_NOSPACE, "device budget full: a slab for a whole expert needs %u "
                      "pages, %u of %u are free; evict first", sp->ppe, sp->n_free,
                      sp->n_chunks);
    else if ((st = mvm_slab_claim(sp, sp->ppe, &first, &got)) == MVM_OK && got < sp->ppe) {
        mvm_slab_release(sp, first);
        st = mvm_fail(MVM_ERR_NOSPACE, "no %u free chunks in a row for a whole expert (%u "
                      "free, scattered)", sp->ppe, sp->n_free);
    }
    if (st == MVM_OK) {
        sp->slabs[first].reserved = true;
        sp->n_reserved += sp->ppe;
        *addr = sp->be->ops->chunk_addr(sp->be, sp->pool, first);
    }
    pthread_mutex_unlock(&sp->mu);
    return st;
}

mvm_status mvm_fill_return(mvm_space *sp, uint64_t addr)
{
    mvm_status st = check_space(sp, "mvm_fill_return");
    if (st != MVM_OK)
        return st;
    pthread_mutex_lock(&sp->mu);
    const uint32_t first = reserved_at(sp, addr);
    if (first == UINT32_MAX) {
        st = mvm_fail(MVM_ERR_INVALID, "mvm_fill_return: 0x%llx is not a slab set aside",
                      (unsigned long long)addr);
    } else {
        sp->slabs[first].reserved = false;
        sp->n_reserved -= sp->ppe;
        mvm_slab_release(sp, first);
    }
    pthread_mutex_unlock(&sp->mu);
    return st;
}

/* The expert's pages LOADING in a job with no copy, backed by the slab at `first` (lock
 * held, the expert at home); queued for the worker at on-demand priority. */
static mvm_status queue_filled(mvm_space *sp, uint32_t idx, uint32_t first, mvm_move *m)
{
    struct job *j = mvm_job_new(idx, sp->ppe, PRIO_DEMAND);
    if (!j || (m && !mvm_job_add_waiter(j, m))) {
        if (j)
            mvm_job_free(j);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory landing a filled expert");
    }
    j->filled = true;
    j->runs[j->n_runs++] = (struct job_run){.at = 0, .n = sp->ppe, .slab = first};
    sp->slabs[first].reserved = false;
    sp->slabs[first].expert = (int32_t)idx;
    sp->slabs[first].page = 0;
    sp->n_reserved -= sp->ppe;
    for (uint32_t p = 0; p < sp->ppe; p++) {
        struct page *pg = page_at(sp, idx, p);
        j->pages[j->n++] = p;
        pg->state = MVM_PAGE_LOADING;
        pg->job = j;
        pg->prefetched = 0;
    }
    sp->n_loading += sp->ppe;
    mvm_job_list_push(&sp->demand, j);
    mvm_wake_worker(sp);
    return MVM_OK;
}

mvm_status mvm_fill_pending(const mvm_space *csp, uint32_t l, uint32_t e, uint64_t *addr)
{
    mvm_space *sp = (mvm_space *)csp;
    if (!addr)
        return mvm_fail(MVM_ERR_INVALID, "mvm_fill_pending: addr is NULL");
    *addr = 0;
    mvm_status st = check_space(sp, "mvm_fill_pending");
    uint32_t idx;
    if (st != MVM_OK || (st = mvm_lock_expert(sp, l, e, &idx)) != MVM_OK)
        return st;
    const struct page *pg = page_at(sp, idx, 0);
    if (pg->state == MVM_PAGE_LOADING && pg->job->filled)
        *addr = sp->be->ops->chunk_addr(sp->be, sp->pool, pg->job->runs[0].slab);
    pthread_mutex_unlock(&sp->mu);
    return MVM_OK;
}

mvm_status mvm_fill_land(mvm_space *sp, uint32_t l, uint32_t e, uint64_t addr,
                         mvm_move **move)
{
    if (move)
        *move = NULL;
    mvm_status st = check_space(sp, "mvm_fill_land");
    uint32_t idx;
    if (st != MVM_OK || (st = mvm_lock_expert(sp, l, e, &idx)) != MVM_OK)
        return st;
    const uint32_t first = reserved_at(sp, addr);
    uint32_t home = 0;
    for (uint32_t p = 0; p < sp->ppe; p++)
        home += page_at(sp, idx, p)->state == MVM_PAGE_HOME;
    mvm_move *m = NULL;
    if (first == UINT32_MAX)
        st = mvm_fail(MVM_ERR_INVALID, "mvm_fill_land: 0x%llx is not a slab set aside",
                      (unsigned long long)addr);
    else if (home < sp->ppe)
        st = mvm_fail(MVM_ERR_BUSY, "mvm_fill_land: expert (%u, %u) is not at home (%u of its "
                      "%u pages resident or loading); return the slab", l, e, sp->ppe - home,
                      sp->ppe);
    else if (move && !(m = mvm_move_new(sp)))
        st = mvm_fail(MVM_ERR_NOMEM, "out of memory for a move handle");
    if (st == MVM_OK)
        st = queue_filled(sp, idx, first, m);
    pthread_mutex_unlock(&sp->mu);
    if (st != MVM_OK && m)
        mvm_move_release(m);
    else if (move)
        *move = m;
    return st;
}
