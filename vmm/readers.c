/*
 * A pinned reader's wait for an expert's copies on its own device stream rather than on
 * the host (mvm_expert_wait_on), and the same for a reader that reads the expert where its
 * copies land, the device pool's view of its slab, before the slab is mapped at the
 * expert's address (mvm_expert_wait_view); where a resident expert is read
 * (mvm_expert_slot). docs/architecture.md, "Readers may wait on the device" and "Slots".
 */
#include "vmm/error.h"
#include "vmm/space_impl.h"

/* What a reader waits for of each loading page's job: its copy queued and its slab mapped
 * at the expert's address (the job ordered), or, reading in the pool's view, only queued. */
enum wait_for { WAIT_MAPPED, WAIT_QUEUED };

/* Whether every loading page of expert idx is as the reader needs (lock held):
 * MVM_ERR_CANCELLED if a page is at home; a landed job that is not (mapped: its map ahead
 * failed, it maps at the last unpin, which this reader's pin holds off; queued: its copy
 * failed) is an error. */
static mvm_status loads_ready(mvm_space *sp, uint32_t idx, enum wait_for w, bool *ready)
{
    *ready = true;
    for (uint32_t p = 0; p < sp->ppe; p++) {
        const struct page *pg = page_at(sp, idx, p);
        if (pg->state == MVM_PAGE_HOME)
            return mvm_fail(MVM_ERR_CANCELLED, "expert %u page %u is neither resident nor "
                            "loading: its load failed or was not asked for", idx, p);
        if (pg->state != MVM_PAGE_LOADING)
            continue;
        const struct job *j = pg->job;
        if (w == WAIT_MAPPED ? j->ordered : j->fence != NULL)
            continue;
        if (j->landed && w == WAIT_MAPPED)
            return mvm_fail(MVM_ERR_UNSUPPORTED, "expert %u page %u landed unmapped: its "
                            "reader waits on the host", idx, p);
        if (j->landed && j->copy_st != MVM_OK)
            return mvm_fail(j->copy_st, "expert %u page %u: %s", idx, p, j->why);
        *ready = *ready && j->landed;
    }
    return MVM_OK;
}

/* The checks and the wait both readers share (lock held): the space able to order a
 * stream (and, `w` queued, with a view to read in), the expert pinned, every loading page
 * as loads_ready wants. */
static mvm_status wait_loads(mvm_space *sp, uint32_t idx, uint32_t l, uint32_t e,
                             enum wait_for w, const char *who)
{
    const mvm_backend *be = sp->be;
    if (sp->slots && w == WAIT_MAPPED)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "%s: a slot space's experts are never mapped at "
                        "their addresses; read them where they land (mvm_expert_wait_view)",
                        who);
    if (!be->ops->stream_wait || sp->homes_mapped || (w == WAIT_QUEUED && !be->ops->chunk_addr))
        return mvm_fail(MVM_ERR_UNSUPPORTED, "the %s backend%s: %s", be->name,
                        sp->homes_mapped ? " with homes mapped" : "",
                        w == WAIT_QUEUED ? "no reading through the pool's view"
                                         : "readers wait for copies on the host");
    if (!sp->pins[idx])
        return mvm_fail(MVM_ERR_INVALID, "%s: expert (%u, %u) is not pinned", who, l, e);
    const uint64_t spin_until = mvm_clock_ns() + sp->spin_ns;
    bool ready = false;
    mvm_status st;
    while ((st = loads_ready(sp, idx, w, &ready)) == MVM_OK && !ready)
        mvm_spin_then_wait(&sp->mu, &sp->moved, &sp->moved_seq, spin_until, NULL);
    return st;
}

/* `stream` ordered after the fence of each loading page's job (lock held). */
static mvm_status order_stream(mvm_space *sp, uint32_t idx, void *stream)
{
    mvm_status st = MVM_OK;
    const struct job *last = NULL;
    for (uint32_t p = 0; p < sp->ppe && st == MVM_OK; p++) {
        const struct page *pg = page_at(sp, idx, p);
        if (pg->state != MVM_PAGE_LOADING || pg->job == last)
            continue;
        last = pg->job;
        st = sp->be->ops->stream_wait(sp->be, last->fence, stream); /* NULL: landed already */
    }
    return st;
}

mvm_status mvm_expert_wait_on(mvm_space *sp, uint32_t l, uint32_t e, void *stream)
{
    uint32_t idx;
    mvm_status st = mvm_lock_expert(sp, l, e, &idx);
    if (st != MVM_OK)
        return st;
    st = wait_loads(sp, idx, l, e, WAIT_MAPPED, "mvm_expert_wait_on");
    if (st == MVM_OK)
        st = order_stream(sp, idx, stream);
    pthread_mutex_unlock(&sp->mu);
    return st;
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
    st = wait_loads(sp, idx, l, e, WAIT_QUEUED, "mvm_expert_wait_view");
    const int64_t c0 = st == MVM_OK ? page_chunk(sp, idx, 0) : -1;
    for (uint32_t p = 0; st == MVM_OK && p < sp->ppe; p++)
        if (c0 < 0 || page_chunk(sp, idx, p) != c0 + p)
            st = mvm_fail(MVM_ERR_UNSUPPORTED, "expert (%u, %u) is not one run of chunks: "
                          "it is read at its address", l, e);
    if (st == MVM_OK)
        st = order_stream(sp, idx, stream);
    if (st == MVM_OK)
        *addr = sp->be->ops->chunk_addr(sp->be, sp->pool, (size_t)c0);
    pthread_mutex_unlock(&sp->mu);
    return st;
}

mvm_status mvm_expert_slot(const mvm_space *csp, uint32_t l, uint32_t e, uint64_t *addr)
{
    if (!addr)
        return mvm_fail(MVM_ERR_INVALID, "mvm_expert_slot: addr is NULL");
    *addr = 0;
    uint32_t idx;
    mvm_status st = mvm_lock_expert(csp, l, e, &idx);
    if (st != MVM_OK)
        return st;
    mvm_space *sp = (mvm_space *)csp;
    bool resident = true;
    for (uint32_t p = 0; p < sp->ppe && resident; p++)
        resident = page_at(sp, idx, p)->state == MVM_PAGE_RESIDENT;
    if (resident) /* a slot space's run is one slab: its first chunk's view has it all */
        *addr = sp->slots ? sp->be->ops->chunk_addr(sp->be, sp->pool,
                                                    (size_t)page_at(sp, idx, 0)->chunk)
                          : page_va(sp, idx, 0);
    pthread_mutex_unlock(&sp->mu);
    return MVM_OK;
}
