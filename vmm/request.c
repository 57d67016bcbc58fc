/*
 * Make-resident and prefetch requests: a request claims free chunks at once (so "no space"
 * is answered by the call, not later), marks the pages LOADING and queues one job for the
 * migration worker (migrate.c; the handles and jobs themselves are move.c). A request for
 * pages that an earlier job is already loading waits on that job instead of loading twice;
 * an on-demand request promotes a queued prefetch job to on-demand priority.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/error.h"
#include "vmm/space_impl.h"

/* What a request finds in the prefix it asks for. */
struct survey {
    uint32_t home, loading, resident;
    struct job *jobs[MVM_MAX_BATCH]; /* distinct jobs already loading pages of the prefix */
    uint32_t n_jobs;
    bool jobs_overflow;
};

static void survey_prefix(mvm_space *sp, uint32_t idx, uint32_t n, struct survey *s)
{
    memset(s, 0, sizeof *s);
    for (uint32_t p = 0; p < n; p++) {
        struct page *pg = page_at(sp, idx, p);
        if (pg->state == MVM_PAGE_HOME) {
            s->home++;
            continue;
        }
        if (pg->state == MVM_PAGE_RESIDENT) {
            s->resident++;
            continue;
        }
        s->loading++;
        bool seen = false;
        for (uint32_t k = 0; k < s->n_jobs && !seen; k++)
            seen = s->jobs[k] == pg->job;
        if (!seen && s->n_jobs < MVM_MAX_BATCH)
            s->jobs[s->n_jobs++] = pg->job;
        else if (!seen)
            s->jobs_overflow = true;
    }
}

/* Counts on-demand use of prefetched pages (prefetch precision) and clears the marks. */
static void note_demand(mvm_space *sp, uint32_t idx, uint32_t n)
{
    for (uint32_t p = 0; p < n; p++) {
        struct page *pg = page_at(sp, idx, p);
        if (pg->prefetched && pg->state != MVM_PAGE_HOME) {
            sp->stats.prefetch_used++;
            pg->prefetched = 0;
        }
    }
}

/* Claims slabs for pages [p, q) of the expert (all HOME) and adds them to j as runs. */
static mvm_status claim_pages(mvm_space *sp, struct job *j, uint32_t p, uint32_t q, int prio)
{
    while (p < q) {
        uint32_t first, got;
        mvm_status st = mvm_slab_claim(sp, q - p, &first, &got);
        if (st != MVM_OK)
            return st;
        sp->slabs[first].expert = (int32_t)j->expert;
        sp->slabs[first].page = p;
        j->runs[j->n_runs++] = (struct job_run){.at = j->n, .n = got, .slab = first};
        for (uint32_t i = 0; i < got; i++, p++) {
            struct page *pg = page_at(sp, j->expert, p);
            j->pages[j->n++] = p;
            pg->state = MVM_PAGE_LOADING;
            pg->job = j;
            pg->prefetched = prio == PRIO_PREFETCH;
            sp->n_loading++;
        }
    }
    return MVM_OK;
}

/* Queues a job loading every HOME page of the prefix: each stretch of consecutive HOME pages
 * is a run (split where the layer's experts were last cut, so that the next such eviction
 * drops a whole run), backed by a slab claimed now. */
static mvm_status queue_job(mvm_space *sp, uint32_t idx, uint32_t lo, uint32_t n,
                            uint32_t count, int prio, mvm_move *m)
{
    struct job *j = mvm_job_new(idx, count, prio);
    if (!j || (m && !mvm_job_add_waiter(j, m))) {
        if (j)
            mvm_job_free(j);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory queueing a move");
    }
    uint32_t cut = sp->cut[idx / sp->n_experts];
    mvm_status st = MVM_OK;
    for (uint32_t p = lo, q; p < n && st == MVM_OK; p = q) {
        q = p + 1;
        if (page_at(sp, idx, p)->state != MVM_PAGE_HOME)
            continue;
        while (q < n && q != cut && page_at(sp, idx, q)->state == MVM_PAGE_HOME)
            q++;
        st = claim_pages(sp, j, p, q, prio);
    }
    if (st != MVM_OK) { /* as it was: the pages home, the slabs free */
        for (uint32_t r = 0; r < j->n_runs; r++) {
            mvm_run_abandon(sp, j, r);
            mvm_run_release(sp, j, r);
        }
        j->n_waiters = 0; /* the move's reference is dropped by the caller's release */
        if (m) {
            pthread_mutex_lock(&m->mu);
            m->pending--;
            mvm_move_unref_locked(m);
        }
        mvm_job_free(j);
        return st;
    }
    if (prio == PRIO_PREFETCH)
        sp->stats.prefetch_pages += j->n;
    mvm_job_list_push(prio == PRIO_DEMAND ? &sp->demand : &sp->prefetch, j);
    mvm_wake_worker(sp);
    return MVM_OK;
}

static mvm_status request(mvm_space *sp, uint32_t l, uint32_t e, uint32_t n_pages, int prio,
                          bool sync, mvm_move **out)
{
    if (out)
        *out = NULL;
    uint32_t idx;
    mvm_status st = mvm_lock_expert(sp, l, e, &idx);
    if (st != MVM_OK)
        return st;
    if (n_pages != MVM_ALL_PAGES && n_pages > sp->ppe) {
        pthread_mutex_unlock(&sp->mu);
        return mvm_fail(MVM_ERR_RANGE, "%u pages asked for: experts have %u", n_pages, sp->ppe);
    }
    uint32_t n = n_pages == MVM_ALL_PAGES ? sp->ppe : n_pages;
    if (sp->slots && n < sp->ppe) {
        pthread_mutex_unlock(&sp->mu);
        return mvm_slots_refuse_part(sp, l, e, n);
    }
    if (sp->packed && (st = mvm_upload_ask_locked(sp)) != MVM_OK) {
        pthread_mutex_unlock(&sp->mu);
        return st;
    }
    struct survey s;
    survey_prefix(sp, idx, n, &s);
    /* An eviction of pages whose copy was on the bus returned at once, their chunks back
     * when the copy lands (migrate.c, mvm_cancel_page): a load that needs them waits for
     * that copy, not fails for a budget its caller has just made room in. A prefetch does
     * not wait: it is dropped for want of room, as ever. */
    while (prio == PRIO_DEMAND && s.home > sp->n_free && s.home <= sp->n_free + sp->n_freeing) {
        pthread_cond_wait(&sp->moved, &sp->mu);
        survey_prefix(sp, idx, n, &s);
    }
    if (sync && sp->pins[idx] && s.resident < n)
        st = mvm_fail(MVM_ERR_PINNED, "expert (%u, %u) is pinned: its pages cannot move until "
                      "it is unpinned (use mvm_make_resident_async)", l, e);
    else if (s.home > sp->n_free)
        st = mvm_fail(MVM_ERR_NOSPACE, "device budget full: expert (%u, %u) needs %u more "
                      "pages, %u of %u are free (%u experts pinned); evict first", l, e, s.home,
                      sp->n_free, sp->n_chunks, sp->n_pinned);
    else if (s.jobs_overflow)
        st = mvm_fail(MVM_ERR_BUSY, "expert (%u, %u) has more than %d moves in progress", l, e,
                      MVM_MAX_BATCH);
    if (st != MVM_OK) {
        pthread_mutex_unlock(&sp->mu);
        return st;
    }
    if (prio == PRIO_DEMAND) {
        if (s.resident == n)
            sp->stats.hits++;
        else
            sp->stats.misses++;
        note_demand(sp, idx, n);
    } else if (s.home) {
        sp->stats.prefetches++;
    }

    mvm_move *m = NULL;
    if ((out || sync) && !(m = mvm_move_new(sp))) {
        pthread_mutex_unlock(&sp->mu);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a move handle");
    }
    if (s.home)
        st = queue_job(sp, idx, 0, n, s.home, prio, m);
    for (uint32_t k = 0; st == MVM_OK && k < s.n_jobs; k++) {
        struct job *j = s.jobs[k];
        if (prio == PRIO_DEMAND && j->prio == PRIO_PREFETCH && !j->started) {
            mvm_job_list_remove(&sp->prefetch, j);
            j->prio = PRIO_DEMAND;
            mvm_job_list_push(&sp->demand, j);
        } else if (prio == PRIO_DEMAND && j->prio == PRIO_PREFETCH) {
            j->hurried = true; /* on the bus already: it stops yielding (overtake) */
        }
        if (m && !mvm_job_add_waiter(j, m))
            st = mvm_fail(MVM_ERR_NOMEM, "out of memory queueing a move");
    }
    pthread_mutex_unlock(&sp->mu);

    if (sync) {
        mvm_status rc = st == MVM_OK ? mvm_move_wait(m, -1) : st;
        mvm_move_release(m);
        return rc;
    }
    if (st != MVM_OK) {
        if (m)
            mvm_move_release(m);
        return st;
    }
    if (out)
        *out = m;
    return MVM_OK;
}

mvm_status mvm_make_resident(mvm_space *sp, uint32_t l, uint32_t e, uint32_t n_pages)
{
    return request(sp, l, e, n_pages, PRIO_DEMAND, true, NULL);
}

mvm_status mvm_make_resident_async(mvm_space *sp, uint32_t l, uint32_t e, uint32_t n_pages,
                                   mvm_move **move)
{
    return request(sp, l, e, n_pages, PRIO_DEMAND, false, move);
}

mvm_status mvm_prefetch(mvm_space *sp, uint32_t l, uint32_t e, uint32_t n_pages, mvm_move **move)
{
    return request(sp, l, e, n_pages, PRIO_PREFETCH, false, move);
}

mvm_status mvm_reload_locked(mvm_space *sp, uint32_t idx, uint32_t lo, uint32_t hi,
                             mvm_move **out)
{
    mvm_move *m = mvm_move_new(sp);
    if (!m)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a move handle");
    mvm_status st = queue_job(sp, idx, lo, hi, hi - lo, PRIO_DEMAND, m);
    if (st != MVM_OK) {
        mvm_move_release(m);
        return st;
    }
    *out = m;
    return MVM_OK;
}
