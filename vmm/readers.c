/*
 * A pinned reader's wait for an expert's copies on its own device stream rather than on
 * the host (mvm_expert_wait_on), and the same for a reader that reads the expert where its
 * copies land, the device pool's view of its slab, before the slab is mapped at the
 * expert's address (mvm_expert_wait_view). docs/architecture.md, "Readers may wait on the
 * device".
 */
#include "vmm/error.h"
#include "vmm/space_impl.h"

/* Whether every loading page of expert idx has its job ordered (lock held); MVM_ERR_CANCELLED
 * if a page is at home. */
static mvm_status loads_ordered(mvm_space *sp, uint32_t idx, bool *ordered)
{
    *ordered = true;
    for (uint32_t p = 0; p < sp->ppe; p++) {
        const struct page *pg = page_at(sp, idx, p);
        if (pg->state == MVM_PAGE_HOME)
            return mvm_fail(MVM_ERR_CANCELLED, "expert %u page %u is neither resident nor "
                            "loading: its load failed or was not asked for", idx, p);
        if (pg->state != MVM_PAGE_LOADING || pg->job->ordered)
            continue;
        if (pg->job->landed) /* copied but not mapped (its map ahead failed): it maps at the
                                last unpin, which this reader's pin holds off */
            return mvm_fail(MVM_ERR_UNSUPPORTED, "expert %u page %u landed unmapped: its "
                            "reader waits on the host", idx, p);
        *ordered = false;
    }
    return MVM_OK;
}

mvm_status mvm_expert_wait_on(mvm_space *sp, uint32_t l, uint32_t e, void *stream)
{
    uint32_t idx;
    mvm_status st = mvm_lock_expert(sp, l, e, &idx);
    if (st != MVM_OK)
        return st;
    mvm_backend *be = sp->be;
    bool ordered = false;
    if (!be->ops->stream_wait || sp->homes_mapped)
        st = mvm_fail(MVM_ERR_UNSUPPORTED, "the %s backend%s: readers wait for copies on the "
                      "host", be->name, sp->homes_mapped ? " with homes mapped" : "");
    else if (!sp->pins[idx])
        st = mvm_fail(MVM_ERR_INVALID, "mvm_expert_wait_on: expert (%u, %u) is not pinned",
                      l, e);
    const uint64_t spin_until = mvm_clock_ns() + sp->spin_ns;
    while (st == MVM_OK && (st = loads_ordered(sp, idx, &ordered)) == MVM_OK && !ordered)
        mvm_spin_then_wait(&sp->mu, &sp->moved, &sp->moved_seq, spin_until, NULL);
    const struct job *last = NULL;
    for (uint32_t p = 0; p < sp->ppe && st == MVM_OK; p++) {
        const struct page *pg = page_at(sp, idx, p);
        if (pg->state != MVM_PAGE_LOADING || pg->job == last)
            continue;
        last = pg->job;
        st = be->ops->stream_wait(be, last->fence, stream); /* NULL fence: landed already */
    }
    pthread_mutex_unlock(&sp->mu);
    return st;
}

/* Whether every loading page of expert idx has its copy queued (lock held), for a reader of
 * the pool's view: MVM_ERR_CANCELLED if a page is at home, the copy's failure if it failed
 * before it was queued. */
static mvm_status loads_queued(mvm_space *sp, uint32_t idx, bool *queued)
{
    *queued = true;
    for (uint32_t p = 0; p < sp->ppe; p++) {
        const struct page *pg = page_at(sp, idx, p);
        if (pg->state == MVM_PAGE_HOME)
            return mvm_fail(MVM_ERR_CANCELLED, "expert %u page %u is neither resident nor "
                            "loading: its load failed or was not asked for", idx, p);
        if (pg->state != MVM_PAGE_LOADING || pg->job->fence)
            continue;
        if (pg->job->landed && pg->job->copy_st != MVM_OK)
            return mvm_fail(pg->job->copy_st, "expert %u page %u: %s", idx, p, pg->job->why);
        *queued = *queued && pg->job->landed;
    }
    return MVM_OK;
}

/* The chunk page p of expert idx is in (resident) or being copied into (loading), -1 at
 * home (lock held): a job's runs are consecutive pages into consecutive chunks. */
static int64_t page_chunk(mvm_space *sp, uint32_t idx, uint32_t p)
{
    const struct page *pg = page_at(sp, idx, p);
    if (pg->state == MVM_PAGE_RESIDENT)
        return pg->chunk;
    if (pg->state != MVM_PAGE_LOADING)
        return -1;
    const struct job *j = pg->job;
    for (uint32_t r = 0; r < j->n_runs; r++) {
        const uint32_t first = j->pages[j->runs[r].at];
        if (p >= first && p < first + j->runs[r].n)
            return (int64_t)j->runs[r].slab + (p - first);
    }
    return -1;
}

mvm_status mvm_expert_wait_view(mvm_space *sp, uint32_t l, uint32_t e, void *stream,
                                uint64_t *addr)
{
    if (!addr)
        return mvm_fail(MVM_ERR_INVALID, "mvm_expert_wait_view: addr is NULL");
    uint32_t idx;
    mvm_status st = mvm_lock_expert(sp, l, e, &idx);
    if (st != MVM_OK)
        return st;
    mvm_backend *be = sp->be;
    bool queued = false;
    if (!be->ops->stream_wait || !be->ops->chunk_addr || sp->homes_mapped)
        st = mvm_fail(MVM_ERR_UNSUPPORTED, "the %s backend%s: no reading through the pool's "
                      "view", be->name, sp->homes_mapped ? " with homes mapped" : "");
    else if (!sp->pins[idx])
        st = mvm_fail(MVM_ERR_INVALID, "mvm_expert_wait_view: expert (%u, %u) is not pinned",
                      l, e);
    const uint64_t spin_until = mvm_clock_ns() + sp->spin_ns;
    while (st == MVM_OK && (st = loads_queued(sp, idx, &queued)) == MVM_OK && !queued)
        mvm_spin_then_wait(&sp->mu, &sp->moved, &sp->moved_seq, spin_until, NULL);
    const int64_t c0 = st == MVM_OK ? page_chunk(sp, idx, 0) : -1;
    for (uint32_t p = 0; st == MVM_OK && p < sp->ppe; p++)
        if (c0 < 0 || page_chunk(sp, idx, p) != c0 + p)
            st = mvm_fail(MVM_ERR_UNSUPPORTED, "expert (%u, %u) is not one run of chunks: "
                          "it is read at its address", l, e);
    const struct job *last = NULL;
    for (uint32_t p = 0; p < sp->ppe && st == MVM_OK; p++) {
        const struct page *pg = page_at(sp, idx, p);
        if (pg->state != MVM_PAGE_LOADING || pg->job == last)
            continue;
        last = pg->job;
        st = be->ops->stream_wait(be, last->fence, stream); /* NULL fence: landed already */
    }
    if (st == MVM_OK)
        *addr = be->ops->chunk_addr(be, sp->pool, (size_t)c0);
    pthread_mutex_unlock(&sp->mu);
    return st;
}
