/*
 * A packed space (mvm_space_desc.pack; space_impl.h): where the budget holds every expert,
 * they lie back to back, each `stride` (its bytes rounded to MVM_PACK_ALIGN) after the one
 * before, in one slab of every chunk mapped at the space's base for its life. Nothing moves
 * in such a space, so it needs no slabs of its own per run, no pool view of its own and
 * no remaps: the homes are copied up once, at the first request, and every page then stays
 * resident (evictions are refused, evict.c).
 *
 * Why: a page holds one expert's bytes, so each expert took whole pages (Qwen3-30B-A3B's
 * 4.8 MiB Q8_0 expert three of 2 MiB, a fifth of them empty), and at a budget of every
 * expert that is memory llama.cpp's -ngl 99 does not take (docs/perf/offload.md, "The
 * pages an expert wastes at a budget").
 *
 * The copy: each expert straight from its home (pinned: the device reads it) to its place in
 * the slab, every copy queued before one wait, so the bus is busy from the first to the
 * last and the host only issues them; the bytes between experts get zeros. Not through a
 * staging buffer in the packed layout: that costs a host memcpy of every byte, and a
 * malloc'd one is pageable, which the driver copies from through its own pinned buffer at
 * a fraction of the link's rate.
 */
#include <stdio.h>

#include "vmm/error.h"
#include "vmm/space_impl.h"

mvm_status mvm_upload_init(mvm_space *sp)
{
    mvm_backend *be = sp->be;
    mvm_status st = be->ops->slab_create(be, sp->pool, 0, sp->n_chunks);
    if (st != MVM_OK)
        return st;
    st = be->ops->map_chunks(be, sp->base, sp->pool, 0, sp->n_chunks, false);
    if (st != MVM_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", mvm_last_error());
        (void)be->ops->slab_destroy(be, sp->pool, 0, sp->n_chunks);
        return mvm_fail(st, "%s", why);
    }
    sp->packed_mapped = true;
    return MVM_OK;
}

void mvm_upload_teardown(mvm_space *sp)
{
    mvm_backend *be = sp->be;
    if (!sp->packed_mapped) /* a create that failed before or in init */
        return;
    sp->packed_mapped = false;
    const uint64_t bytes = (uint64_t)sp->n_chunks * sp->page_size;
    if (be->ops->unmap(be, sp->base, bytes, bytes) != MVM_OK ||
        be->ops->slab_destroy(be, sp->pool, 0, sp->n_chunks) != MVM_OK)
        mvm_log(MVM_LOG_WARN, "teardown of a packed space: %s", mvm_last_error());
}

mvm_status mvm_upload_ask_locked(mvm_space *sp)
{
    const size_t n = (size_t)sp->n_total * sp->ppe;
    if (sp->upload || sp->pages[0].state == MVM_PAGE_RESIDENT)
        return MVM_OK; /* under way, or done: every page went at once */
    struct job *j = mvm_job_new(0, 1, PRIO_DEMAND); /* no prefetch cancel takes it */
    if (!j)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a packed space's upload");
    for (size_t i = 0; i < n; i++)
        sp->pages[i] = (struct page){.chunk = -1, .state = MVM_PAGE_LOADING, .job = j};
    sp->n_loading += (uint32_t)n;
    sp->upload = j;
    mvm_wake_worker(sp);
    return MVM_OK;
}

/* The gap after an expert, up to the next one's start: under MVM_PACK_ALIGN bytes. */
static const uint8_t zeros[MVM_PACK_ALIGN];

/* Zeros between the experts, then every expert's bytes up; the first failure. The zeros
 * go first: a copy from pageable memory (these zeros) waits for the copies queued before
 * it, which are then only the small ones before it, not the experts'. */
static mvm_status copy_all(mvm_space *sp)
{
    mvm_backend *be = sp->be;
    const uint64_t gap = sp->stride - sp->expert_bytes;
    mvm_status st = MVM_OK;
    for (uint32_t idx = 0; gap && idx < sp->n_total && st == MVM_OK; idx++)
        st = be->ops->copy_to(be, sp->pool, (uint64_t)idx * sp->stride + sp->expert_bytes,
                              zeros, gap);
    for (uint32_t idx = 0; idx < sp->n_total && st == MVM_OK; idx++)
        st = be->ops->copy_to(be, sp->pool, (uint64_t)idx * sp->stride,
                              sp->home_host + idx * sp->home_stride, sp->expert_bytes);
    if (st == MVM_OK)
        return be->ops->copy_wait(be);
    /* after a failure too, so that nothing is still landing; the error is the copy's */
    char why[256];
    snprintf(why, sizeof why, "%s", mvm_last_error());
    (void)be->ops->copy_wait(be);
    return mvm_fail(st, "%s", why);
}

/* The upload done (lock held): every page RESIDENT (st MVM_OK) or back HOME, the job's
 * moves settled. */
static void land(mvm_space *sp, struct job *j, mvm_status st)
{
    const size_t n = (size_t)sp->n_total * sp->ppe;
    for (size_t i = 0; i < n; i++) /* no chunk of their own: the one slab backs them all */
        sp->pages[i] = (struct page){.chunk = -1, .state = st == MVM_OK ? MVM_PAGE_RESIDENT
                                                                        : MVM_PAGE_HOME};
    sp->n_loading -= (uint32_t)n;
    if (st == MVM_OK) {
        sp->n_resident += (uint32_t)n;
        sp->stats.pages_loaded += n;
        sp->stats.bytes_moved += (uint64_t)sp->n_total * sp->expert_bytes;
    }
    sp->upload = NULL;
    j->landed = true;
    j->copy_st = st;
    if (st != MVM_OK) {
        mvm_job_note_error(j);
        mvm_log(MVM_LOG_WARN, "packed space: copying the experts up: %s", j->why);
    }
    mvm_job_finish(j, st);
    mvm_signal_moved(sp);
}

void mvm_upload_run(mvm_space *sp, mvm_status init_st, const char *init_why)
{
    struct job *j = sp->upload;
    j->started = true;
    pthread_mutex_unlock(&sp->mu);
    const uint64_t t0 = mvm_clock_ns();
    mvm_status st = init_st != MVM_OK ? mvm_fail(init_st, "%s", init_why) : copy_all(sp);
    if (st == MVM_OK) { /* the first request's wait, which a decode rate leaves out */
        const double s = (double)(mvm_clock_ns() - t0) * 1e-9;
        const double bytes = (double)sp->n_total * (double)sp->expert_bytes;
        mvm_log(MVM_LOG_INFO, "packed space: %u experts (%.1f MiB) copied up in %.1f ms "
                "(%.1f GB/s)", sp->n_total, bytes / (1u << 20), s * 1e3,
                s > 0 ? bytes / s * 1e-9 : 0.0);
    }
    pthread_mutex_lock(&sp->mu);
    land(sp, j, st);
}

void mvm_upload_cancel_locked(mvm_space *sp)
{
    if (sp->upload)
        land(sp, sp->upload, mvm_fail(MVM_ERR_CANCELLED, "the space was destroyed before its "
                                      "experts were copied up"));
}
