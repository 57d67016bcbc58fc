/*
 * The migration worker that executes the requests' jobs (request.c; the handles and jobs
 * themselves are move.c): it takes on-demand jobs before prefetch jobs, queues the copy of
 * each page from its home into its chunk outside the lock, and lands the jobs in the copy
 * stream's order as their copies complete, remapping the pages in place under the lock (or
 * leaving them for the last unpin while a reader pins them). Jobs asked for while copies
 * are in flight have theirs queued at once, behind them on the bus, not after they land.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vmm/error.h"
#include "vmm/space_impl.h"

/* How often the worker polls unpin events while any are pending. */
#define UNPIN_POLL_NS 100000

/* ---- the worker -------------------------------------------------------------------------- */

static bool owns(mvm_space *sp, struct job *j, uint32_t i)
{
    struct page *pg = page_at(sp, j->expert, j->pages[i]);
    return pg->state == MVM_PAGE_LOADING && pg->job == j;
}

/* A run is owned whole or not at all: cancelling a page cancels its run. */
static bool run_owned(mvm_space *sp, struct job *j, uint32_t r)
{
    return !j->runs[r].done && owns(sp, j, j->runs[r].at);
}

static uint64_t run_va(const mvm_space *sp, const struct job *j, uint32_t r)
{
    return page_va(sp, j->expert, j->pages[j->runs[r].at]);
}

/* Unmaps run r's slab from the run's address where it was mapped ahead of its copy. */
static void unmap_ahead(mvm_space *sp, struct job *j, uint32_t r)
{
    struct slab *s = &sp->slabs[j->runs[r].slab];
    uint64_t bytes = (uint64_t)j->runs[r].n * sp->page_size;
    if (!s->mapped || sp->slots) /* a slot space's never was */
        return;
    if (sp->be->ops->unmap(sp->be, run_va(sp, j, r), bytes, bytes) != MVM_OK)
        mvm_log(MVM_LOG_WARN, "unmapping a cancelled load: %s", mvm_last_error());
    s->mapped = false;
}

/* Returns run r's slab to the pool, once; mapped ahead of its copy, it is unmapped first. */
void mvm_run_release(mvm_space *sp, struct job *j, uint32_t r)
{
    struct job_run *run = &j->runs[r];
    if (run->done)
        return;
    unmap_ahead(sp, j, r);
    if (run->freeing)
        sp->n_freeing -= sp->slabs[run->slab].n;
    mvm_slab_release(sp, run->slab);
    run->done = true;
}

/* Run r's pages go back to their home state (cancelled, or a failed copy or remap). */
void mvm_run_abandon(mvm_space *sp, struct job *j, uint32_t r)
{
    for (uint32_t i = j->runs[r].at; i < j->runs[r].at + j->runs[r].n; i++) {
        if (!owns(sp, j, i))
            continue;
        struct page *pg = page_at(sp, j->expert, j->pages[i]);
        pg->state = MVM_PAGE_HOME;
        pg->job = NULL;
        pg->prefetched = 0;
        sp->n_loading--;
    }
}

/* Maps run r's slab at the run's address: one mapping. With `unlocked`, the driver's calls
 * run without the space's lock (premap_job says why that is safe); held on entry and return
 * either way. */
static mvm_status map_slab(mvm_space *sp, struct job *j, uint32_t r, bool replace,
                           bool unlocked)
{
    struct job_run *run = &j->runs[r];
    const uint64_t va = run_va(sp, j, r), bytes = (uint64_t)run->n * sp->page_size;
    /* an evicted run's mapping still there goes first (slab.c) */
    mvm_status st = unlocked ? mvm_stale_clear_unlocked(sp, va, bytes)
                             : mvm_stale_clear(sp, va, bytes, UINT32_MAX);
    if (st != MVM_OK)
        return st;
    if (unlocked)
        pthread_mutex_unlock(&sp->mu);
    const uint64_t start = mvm_clock_ns();
    st = sp->be->ops->map_chunks(sp->be, va, sp->pool, run->slab, run->n, replace);
    const uint64_t took = mvm_clock_ns() - start;
    if (unlocked)
        pthread_mutex_lock(&sp->mu);
    sp->stats.remap_ns += took;
    if (st == MVM_OK)
        sp->slabs[run->slab].mapped = true;
    return st;
}

/* Maps run r at its address at landing (the homes' pages unmapped first where they are
 * mapped). On failure the address stays readable: the failed map left the range unmapped
 * (or, if unmapping a home is what failed, partly on its homes), and the homes are mapped
 * back where they can be. */
static mvm_status map_run(mvm_space *sp, struct job *j, uint32_t r, bool replace)
{
    mvm_backend *be = sp->be;
    struct job_run *run = &j->runs[r];
    uint64_t va = run_va(sp, j, r);
    mvm_status st = map_slab(sp, j, r, replace, false);
    if (st == MVM_OK)
        return MVM_OK;
    mvm_job_note_error(j);
    mvm_log(MVM_LOG_WARN, "remap of expert %u pages %u-%u failed: %s", j->expert,
            j->pages[run->at], j->pages[run->at] + run->n - 1, mvm_last_error());
    for (uint32_t i = 0; replace && i < run->n; i++) /* a page still mapped refuses: fine */
        if (be->ops->map_home(be, va + (uint64_t)i * sp->page_size, sp->home,
                              (size_t)j->expert * sp->ppe + j->pages[run->at + i], 1, false))
            mvm_log(MVM_LOG_DEBUG, "re-mapping a home: %s", mvm_last_error());
    return st;
}

/* Where homes are unmapped nothing may read a page before it is resident, so a run's slab
 * can be mapped at its address while its copy is on the bus: the remap's driver calls then
 * overlap the DMA instead of following it. A map that fails here is tried again at landing.
 * The driver's calls run without the lock: a map and its access grant take ~100 us while
 * kernels run (vmm_costs section 4 on an H200: 122 against 25 idle), and a decode step's
 * pins, requests and unpins waited for them. That is safe because only this thread maps at
 * an expert's address (evictions leave their unmaps to it: slab.c), a started job's slab is
 * freed only at its landing (this thread again), and a run cancelled meanwhile
 * (mvm_cancel_page, which found it not mapped yet) is unmapped here, as it would have been
 * there. Lock held on entry and on return. */
static void premap_job(mvm_space *sp, struct job *j)
{
    for (uint32_t r = 0; r < j->n_runs; r++) {
        const struct job_run *run = &j->runs[r];
        if (!run_owned(sp, j, r) || sp->slabs[run->slab].mapped)
            continue;
        if (map_slab(sp, j, r, false, true) != MVM_OK) {
            mvm_log(MVM_LOG_DEBUG, "mapping %u pages ahead of their copy: %s", run->n,
                    mvm_last_error());
            continue;
        }
        if (!run_owned(sp, j, r)) /* cancelled meanwhile */
            unmap_ahead(sp, j, r);
    }
}

/* Whether every run job j still owns is mapped at its address. */
static bool runs_mapped(mvm_space *sp, struct job *j)
{
    for (uint32_t r = 0; r < j->n_runs; r++)
        if (run_owned(sp, j, r) && !sp->slabs[j->runs[r].slab].mapped)
            return false;
    return true;
}

/* Where every run job j still owns is mapped ahead of its copy, a reader's stream may now
 * be ordered after the job's fence (kept until the job finishes) instead of its host
 * waiting for the landing (mvm_expert_wait_on). */
static void order_job(mvm_space *sp, struct job *j)
{
    if (!runs_mapped(sp, j))
        return;
    j->ordered = true;
    mvm_signal_moved(sp);
}

/* Makes every run the job still owns resident (mapping those not mapped yet); frees the
 * slabs of cancelled runs. */
static mvm_status remap_job(mvm_space *sp, struct job *j)
{
    mvm_status result = MVM_OK;
    for (uint32_t r = 0; r < j->n_runs; r++) {
        struct job_run *run = &j->runs[r];
        if (run->done && !run->freeing) /* (a freeing run was released when it landed) */
            continue;
        if (!run_owned(sp, j, r)) {
            mvm_run_release(sp, j, r);
            if (result == MVM_OK)
                result = MVM_ERR_CANCELLED;
            continue;
        }
        mvm_status st = sp->slabs[run->slab].mapped ? MVM_OK : map_run(sp, j, r, sp->homes_mapped);
        if (st != MVM_OK) {
            mvm_run_abandon(sp, j, r);
            mvm_run_release(sp, j, r);
            result = st;
            continue;
        }
        for (uint32_t i = 0; i < run->n; i++) {
            uint32_t p = j->pages[run->at + i];
            struct page *pg = page_at(sp, j->expert, p);
            pg->state = MVM_PAGE_RESIDENT;
            pg->chunk = (int32_t)(run->slab + i);
            pg->job = NULL;
            if (!j->filled)
                sp->stats.bytes_moved += page_bytes(sp, p);
        }
        if (j->filled)
            sp->stats.pages_filled += run->n;
        sp->n_loading -= run->n;
        sp->n_resident += run->n;
        sp->stats.pages_loaded += run->n;
        run->done = true;
    }
    return result;
}

void mvm_cancel_page(mvm_space *sp, uint32_t expert, uint32_t page)
{
    struct job *j = page_at(sp, expert, page)->job;
    uint32_t r = 0;
    while (page >= j->pages[j->runs[r].at] + j->runs[r].n)
        r++;
    mvm_run_abandon(sp, j, r);
    if (j->started) {
        /* Its copy may be running (into the pool's own view): the slab is freed when the
         * job lands. Its mapping at the pages' address goes now, or a new load of them,
         * mapping there ahead of its own copy, would find it (and fail) until then. An
         * on-demand request that needs these chunks waits for them (request.c): the
         * eviction has returned, and its caller counts them free. A job that has landed
         * already (deferred behind a pin, then unpinned) writes nothing any more: its slab
         * goes now, or a request pinning the expert again would wait for a landing its own
         * pin defers. */
        unmap_ahead(sp, j, r);
        j->runs[r].freeing = true; /* (released at once or not: remap_job reads it as cancelled) */
        sp->n_freeing += sp->slabs[j->runs[r].slab].n;
        if (j->landed)
            mvm_run_release(sp, j, r);
        return;
    }
    mvm_run_release(sp, j, r);
    for (uint32_t k = 0; k < j->n_runs; k++)
        if (run_owned(sp, j, k))
            return;
    mvm_job_list_remove(j->prio == PRIO_DEMAND ? &sp->demand : &sp->prefetch, j);
    mvm_job_finish(j, MVM_ERR_CANCELLED);
}

/* Drops every run of a job that will not land: pages home, slabs back. */
static void drop_job(mvm_space *sp, struct job *j)
{
    for (uint32_t r = 0; r < j->n_runs; r++) {
        mvm_run_abandon(sp, j, r);
        mvm_run_release(sp, j, r);
    }
}

/* The job's copy fence, given back to the backend: no stream is ordered after it now. */
static void release_fence(mvm_space *sp, struct job *j)
{
    if (j->fence)
        sp->be->ops->event_destroy(sp->be, j->fence);
    j->fence = NULL;
}

/* A landed job (j->copy_st: how its copies went) made resident, or dropped if they failed. */
static void finish_landing(mvm_space *sp, struct job *j)
{
    release_fence(sp, j);
    mvm_status st = j->copy_st;
    if (st != MVM_OK)
        drop_job(sp, j);
    else
        st = remap_job(sp, j);
    sp->in_flight--;
    mvm_job_finish(j, st);
    mvm_signal_moved(sp);
}

/* After the copies of a batch: remap now, or defer while the expert is pinned (a pin
 * promises no change of backing until the last unpin). A failed job is dropped at once,
 * unless a reader's stream was ordered after it (mvm_expert_wait_on): its work may be
 * queued on the mapping, which stays until the readers unpin. */
static void land_job(mvm_space *sp, struct job *j, mvm_status copy_st)
{
    j->copy_st = copy_st;
    j->landed = true;
    for (uint32_t r = 0; r < j->n_runs; r++)
        if (j->runs[r].freeing) /* nothing writes or reads them any more: free now, */
            mvm_run_release(sp, j, r); /* not after the pin the job may wait on below */
    if (sp->pins[j->expert] && (copy_st == MVM_OK || j->ordered)) {
        mvm_job_list_push(&sp->deferred, j);
        mvm_signal_moved(sp);
        return;
    }
    finish_landing(sp, j);
}

/* Whether landing job j calls no driver: its copies went and each run it still owns is
 * mapped at its address (mapped ahead of its copy). */
static bool lands_mapped(mvm_space *sp, struct job *j)
{
    return j->copy_st == MVM_OK && runs_mapped(sp, j);
}

void mvm_land_deferred_locked(mvm_space *sp, uint32_t idx)
{
    for (struct job *j = sp->deferred.head, *next; j; j = next) {
        next = j->next;
        if (j->expert == idx && lands_mapped(sp, j)) {
            mvm_job_list_remove(&sp->deferred, j);
            finish_landing(sp, j);
        }
    }
}

static void run_deferred(mvm_space *sp)
{
    for (struct job *j = sp->deferred.head, *next; j; j = next) {
        next = j->next;
        if (sp->pins[j->expert])
            continue;
        mvm_job_list_remove(&sp->deferred, j);
        finish_landing(sp, j);
    }
}


static void poll_unpins(mvm_space *sp)
{
    for (struct unpin_event **up = &sp->unpins; *up;) {
        struct unpin_event *u = *up;
        int done = sp->be->ops->event_done(sp->be, u->ev);
        if (done == 0) {
            up = &u->next;
            continue;
        }
        if (done < 0)
            mvm_log(MVM_LOG_WARN, "unpin event of expert %u failed (%s); unpinning anyway",
                    u->expert, mvm_last_error());
        *up = u->next;
        sp->be->ops->event_destroy(sp->be, u->ev);
        mvm_unpin_locked(sp, u->expert);
        free(u);
    }
}

/* On-demand jobs first; a prefetch job only when no on-demand job waits and, `prefetch`
 * false, none: nothing is in flight, so that the bus holds at most one prefetch ahead of
 * the next on-demand job (whose pieces it overtakes). */
static uint32_t take_batch(mvm_space *sp, struct job **batch, bool prefetch)
{
    uint32_t n = 0;
    while (n < MVM_MAX_BATCH && sp->demand.head) {
        batch[n] = sp->demand.head;
        mvm_job_list_remove(&sp->demand, batch[n++]);
    }
    if (n == 0 && prefetch && sp->prefetch.head) {
        batch[n] = sp->prefetch.head;
        mvm_job_list_remove(&sp->prefetch, batch[n++]);
    }
    for (uint32_t i = 0; i < n; i++)
        batch[i]->started = true;
    sp->in_flight += n;
    return n;
}

/* One run's bytes: consecutive chunks of one slab from consecutive home pages. */
struct copy {
    uint32_t chunk;
    const void *src;
    size_t len;
};

/* The copies of the runs each job of the batch still owns into *copies (grown as needed,
 * *cap entries), n_copies[k] of them for job k, in order. Under the lock. -1 when out of
 * memory: then every job of the batch has landed failed. */
static int list_copies(mvm_space *sp, struct job **batch, uint32_t n, struct copy **copies,
                       size_t *cap, uint32_t *n_copies)
{
    size_t want = 0;
    for (uint32_t k = 0; k < n; k++)
        want += batch[k]->n_runs;
    if (want > *cap) {
        struct copy *c = realloc(*copies, want * sizeof *c);
        if (!c) {
            for (uint32_t k = 0; k < n; k++) {
                snprintf(batch[k]->why, sizeof batch[k]->why,
                         "out of memory in the migration worker");
                land_job(sp, batch[k], MVM_ERR_NOMEM);
            }
            return -1;
        }
        *copies = c;
        *cap = want;
    }
    uint32_t nc = 0;
    for (uint32_t k = 0; k < n; k++) {
        struct job *j = batch[k];
        n_copies[k] = 0;
        for (uint32_t r = 0; r < j->n_runs; r++) {
            if (!run_owned(sp, j, r) || j->filled) /* a reader wrote it: no copy */
                continue;
            uint32_t first = j->pages[j->runs[r].at], last = first + j->runs[r].n - 1;
            (*copies)[nc++] = (struct copy){
                .chunk = j->runs[r].slab,
                .src = sp->home_host + j->expert * sp->home_stride +
                       (uint64_t)first * sp->page_size,
                .len = (size_t)(last - first) * sp->page_size + page_bytes(sp, last)};
            n_copies[k]++;
        }
    }
    return 0;
}

/* ---- jobs in flight ------------------------------------------------------------------ */

/* The jobs whose copies are queued, in the copy stream's order, each landing once its
 * fence is done: the worker queues the copies of jobs asked for meanwhile before it lands
 * the older ones, so neither the bus nor a step's later misses wait for the earlier ones
 * to land. Only the worker's thread touches it. */
#define FLIGHT_CAP (4 * MVM_MAX_BATCH)
/* How often a spinning worker asks the driver whether the oldest job's fence is done (a
 * request it sees at once): a landing is then late by up to this, and the driver's calls
 * on the other threads (a step's launches) meet fewer of its queries. */
#define FENCE_POLL_NS 5000

struct flight {
    struct job *job[FLIGHT_CAP];
    mvm_event *fence[FLIGHT_CAP]; /* the job's (it keeps it); NULL once its copies are done */
    mvm_status st[FLIGHT_CAP];    /* how its copies went */
    uint32_t head, n;
};

struct worker {
    mvm_space *sp;
    struct flight fl;
};

/* Whether the oldest job in flight has its copies done, waiting for them where `wait`
 * (without the lock). A failed fence fails the job; its chunks go back to the pool, so no
 * copy may still be landing: every started copy is waited for. */
static bool head_copied(struct worker *w, bool wait)
{
    mvm_backend *be = w->sp->be;
    struct flight *f = &w->fl;
    const uint32_t h = f->head;
    if (!f->fence[h])
        return true;
    mvm_status wst = MVM_OK;
    if (wait) {
        wst = be->ops->event_wait(be, f->fence[h]);
    } else {
        const int done = be->ops->event_done(be, f->fence[h]);
        if (done == 0)
            return false;
        wst = done < 0 ? MVM_ERR_BACKEND : MVM_OK;
    }
    if (wst != MVM_OK) {
        mvm_job_note_error(f->job[h]);
        be->ops->copy_wait(be);
        if (f->st[h] == MVM_OK)
            f->st[h] = wst;
    }
    f->fence[h] = NULL;
    return true;
}

/* Lands the oldest job in flight, its copies done (lock held). */
static void land_head(struct worker *w)
{
    struct flight *f = &w->fl;
    land_job(w->sp, f->job[f->head], f->st[f->head]);
    f->head = (f->head + 1) % FLIGHT_CAP;
    f->n--;
}

/* Lands the jobs in flight whose copies are done, oldest first (lock held). */
static void land_copied(struct worker *w)
{
    while (w->fl.n && head_copied(w, false))
        land_head(w);
}

/* Waits for the oldest job in flight's copies, without the lock: asleep in the fence where
 * the space does not spin; else looking at the fence while watching for new requests, and
 * returning false (not copied yet) at one, so the worker queues its copies first. */
static bool await_head(struct worker *w)
{
    mvm_space *sp = w->sp;
    if (!sp->spin_ns)
        return head_copied(w, true);
    const unsigned seen = atomic_load_explicit(&sp->work_seq, memory_order_acquire);
    while (!head_copied(w, false))
        if (mvm_spin_until(&sp->work_seq, seen, mvm_clock_ns() + FENCE_POLL_NS))
            return false;
    return true;
}

static void issue(struct worker *w, struct job **batch, uint32_t n, const struct copy *c,
                  const uint32_t *n_copies, mvm_status st, const char *why);

/* Between two pieces of prefetch j: the jobs in flight whose copies are done land, and an
 * on-demand batch queued meanwhile has its copies queued now, behind the pieces on the
 * bus, rather than after the whole prefetch — unless a demand waits on j itself (hurried),
 * which would then wait for the other's copy too. */
static void overtake(struct worker *w, const struct job *j)
{
    mvm_space *sp = w->sp;
    struct job *batch[MVM_MAX_BATCH];
    struct copy *copies = NULL;
    size_t cap = 0;
    uint32_t n_copies[MVM_MAX_BATCH];
    pthread_mutex_lock(&sp->mu);
    land_copied(w);
    const bool room = w->fl.n + MVM_MAX_BATCH < FLIGHT_CAP; /* j goes in after them */
    uint32_t n = room && sp->demand.head && !j->hurried ? take_batch(sp, batch, false) : 0;
    int ok = n && list_copies(sp, batch, n, &copies, &cap, n_copies) == 0;
    if (ok)
        sp->stats.overtakes++;
    pthread_mutex_unlock(&sp->mu);
    if (ok)
        issue(w, batch, n, copies, n_copies, MVM_OK, NULL);
    free(copies);
}

/* Prefetch j's copies, a piece (piece_pages) at a time with at most two pieces on the bus,
 * an on-demand batch asked for meanwhile overtaking between two (overtake). Returns with the
 * last piece started, not waited for: the job's fence follows, as for any job. */
static mvm_status copy_in_pieces(struct worker *w, const struct job *j, const struct copy *c,
                                 uint32_t n)
{
    mvm_space *sp = w->sp;
    mvm_backend *be = sp->be;
    const size_t piece = (size_t)sp->piece_pages * sp->page_size;
    mvm_event *prev = NULL;
    mvm_status st = MVM_OK;
    for (uint32_t i = 0; i < n && st == MVM_OK; i++)
        for (size_t off = 0; off < c[i].len && st == MVM_OK; off += piece) {
            size_t len = c[i].len - off < piece ? c[i].len - off : piece;
            st = be->ops->copy_start(be, sp->pool, (size_t)c[i].chunk + off / sp->page_size,
                                     (const uint8_t *)c[i].src + off, len);
            if (st != MVM_OK || (i + 1 == n && off + len == c[i].len))
                break; /* failed, or the last piece: the caller fences it */
            mvm_event *ev = NULL;
            st = be->ops->copy_fence(be, &ev);
            if (st == MVM_OK && prev)
                st = be->ops->event_wait(be, prev);
            if (prev)
                be->ops->event_destroy(be, prev);
            prev = ev;
            if (st == MVM_OK)
                overtake(w, j);
        }
    if (prev)
        be->ops->event_destroy(be, prev);
    return st;
}

/* Queues the copies of the pages each job of the batch still owns (n_copies[k] of them for
 * job k, in order in c), fences each job's and, where homes are unmapped, maps its slabs
 * at their addresses meanwhile; then the jobs join the flight, to land one by one as their
 * copies complete: job k is remapped while the copies of the jobs after it are still on the
 * bus. A remap is driver work on the CPU (on an H100, 71 us a 2 MiB page against 41 of
 * copy: docs/perf/vmm.md, section 7), so waiting for the whole batch before the first remap
 * added the two. Called without the lock (room for the batch in flight). After a failed
 * copy every job not yet copied fails with it, and nothing lands before every copy started
 * has (their chunks go back to the pool). `st` and `why`: the worker's own failure, which
 * fails the whole batch. */
static void issue(struct worker *w, struct job **batch, uint32_t n, const struct copy *c,
                  const uint32_t *n_copies, mvm_status st, const char *why)
{
    mvm_space *sp = w->sp;
    mvm_backend *be = sp->be;
    mvm_event *fence[MVM_MAX_BATCH] = {0};
    mvm_status job_st[MVM_MAX_BATCH];
    bool started = false;
    for (uint32_t k = 0; k < n; c += n_copies[k], k++) {
        if (st == MVM_OK && n_copies[k]) {
            started = true;
            if (batch[k]->prio == PRIO_PREFETCH)
                st = copy_in_pieces(w, batch[k], c, n_copies[k]);
            else
                for (uint32_t i = 0; i < n_copies[k] && st == MVM_OK; i++)
                    st = be->ops->copy_start(be, sp->pool, (size_t)c[i].chunk, c[i].src,
                                             c[i].len);
        }
        if (st == MVM_OK)
            st = be->ops->copy_fence(be, &fence[k]);
        if (st == MVM_OK) {
            pthread_mutex_lock(&sp->mu);
            batch[k]->fence = fence[k]; /* the job's from now on (release_fence) */
            mvm_signal_moved(sp); /* a reader of the pool's view may go on (readers.c) */
            if (!sp->homes_mapped) {
                premap_job(sp, batch[k]);
                order_job(sp, batch[k]);
            }
            pthread_mutex_unlock(&sp->mu);
        }
        if (st != MVM_OK && !why) { /* this job's copy failed */
            mvm_job_note_error(batch[k]);
            why = batch[k]->why;
        } else if (st != MVM_OK) {
            snprintf(batch[k]->why, sizeof batch[k]->why, "not copied: %.140s", why);
        }
        job_st[k] = st;
    }
    if (st != MVM_OK && started) {
        mvm_status wst = be->ops->copy_wait(be);
        if (wst != MVM_OK)
            mvm_log(MVM_LOG_WARN, "waiting for copies after a failed one: %s", mvm_last_error());
    }
    struct flight *f = &w->fl;
    for (uint32_t k = 0; k < n; k++) {
        const uint32_t at = (f->head + f->n++) % FLIGHT_CAP;
        f->job[at] = batch[k];
        f->fence[at] = st == MVM_OK ? fence[k] : NULL; /* after a failure: all waited for */
        f->st[at] = job_st[k];
    }
}

/* The worker's thread set up for the backend (the device's context current); on failure
 * the reason, for the moves that then fail, in why. */
static mvm_status worker_init(mvm_space *sp, char *why, size_t cap)
{
    mvm_status st = sp->be->ops->thread_init(sp->be);
    if (st != MVM_OK) {
        snprintf(why, cap, "migration worker: %s", mvm_last_error());
        mvm_log(MVM_LOG_WARN, "%s", why);
    }
    return st;
}

/* The worker idle (lock held): spins without the lock for new work until spin_ns after its
 * last batch (busy_at), an unpin poll's interval at most while unpins wait. Returns false,
 * not having spun, once that time has passed: then it sleeps. */
static bool spin_idle(mvm_space *sp, uint64_t busy_at)
{
    const uint64_t now = mvm_clock_ns();
    uint64_t until = busy_at + sp->spin_ns;
    if (!sp->spin_ns || until <= now)
        return false;
    if (sp->unpins && until > now + UNPIN_POLL_NS)
        until = now + UNPIN_POLL_NS;
    const unsigned seen = atomic_load_explicit(&sp->work_seq, memory_order_acquire);
    pthread_mutex_unlock(&sp->mu);
    mvm_spin_until(&sp->work_seq, seen, until);
    pthread_mutex_lock(&sp->mu);
    return true;
}

/* Idle (lock held, nothing to copy or land): an eviction's unmap, else a spin or a sleep
 * until work comes. *unmap_failed: one failed, not tried again until a batch. */
static void idle(mvm_space *sp, uint64_t busy_at, bool *unmap_failed)
{
    if (sp->n_stale && !*unmap_failed) {
        *unmap_failed = mvm_stale_unmap_one(sp) != MVM_OK;
        return;
    }
    if (spin_idle(sp, busy_at))
        return;
    if (!sp->unpins) {
        pthread_cond_wait(&sp->work, &sp->mu);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += UNPIN_POLL_NS;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&sp->work, &sp->mu, &ts);
}

/* The worker: queues the copies of what is asked for as it comes (room in flight), lands
 * the oldest job in flight once its copies are done, and when it has neither, idles. On
 * stopping, what is in flight lands first. */
static void *worker_main(void *arg)
{
    struct worker w = {.sp = arg};
    mvm_space *sp = w.sp;
    char init_why[160] = "";
    mvm_status init_st = worker_init(sp, init_why, sizeof init_why);
    struct copy *copies = NULL;
    size_t cap = 0;
    bool unmap_failed = false;
    uint64_t busy_at = 0; /* when the worker last queued or landed */
    pthread_mutex_lock(&sp->mu);
    while (!sp->stopping || w.fl.n) {
        poll_unpins(sp);
        run_deferred(sp);
        if (sp->upload && !sp->upload->started && !sp->stopping) { /* a packed space's */
            if (init_st != MVM_OK)
                init_st = worker_init(sp, init_why, sizeof init_why);
            mvm_upload_run(sp, init_st, init_why);
            busy_at = mvm_clock_ns();
            continue;
        }
        struct job *batch[MVM_MAX_BATCH];
        const bool room = !sp->stopping && w.fl.n + MVM_MAX_BATCH <= FLIGHT_CAP;
        uint32_t n = room ? take_batch(sp, batch, w.fl.n == 0) : 0, n_copies[MVM_MAX_BATCH];
        if (n) {
            unmap_failed = false;
            if (list_copies(sp, batch, n, &copies, &cap, n_copies) != 0)
                continue;
            pthread_mutex_unlock(&sp->mu);
            if (init_st != MVM_OK) /* a passing driver failure must not fail every later move */
                init_st = worker_init(sp, init_why, sizeof init_why);
            issue(&w, batch, n, copies, n_copies, init_st, init_st ? init_why : NULL);
            pthread_mutex_lock(&sp->mu);
            busy_at = mvm_clock_ns();
        } else if (w.fl.n) {
            pthread_mutex_unlock(&sp->mu);
            const bool copied = await_head(&w);
            pthread_mutex_lock(&sp->mu);
            if (copied) {
                land_head(&w);
                busy_at = mvm_clock_ns();
            }
        } else {
            idle(sp, busy_at, &unmap_failed);
        }
    }
    pthread_mutex_unlock(&sp->mu);
    free(copies);
    return NULL;
}

mvm_status mvm_migrate_start(mvm_space *sp)
{
    int rc = pthread_create(&sp->worker, NULL, worker_main, sp);
    if (rc != 0)
        return mvm_fail(MVM_ERR_NOMEM, "cannot start the migration worker: %s", strerror(rc));
    sp->worker_running = true;
    return MVM_OK;
}

static void cancel_list(mvm_space *sp, struct job_list *l, bool in_flight)
{
    while (l->head) {
        struct job *j = l->head;
        mvm_job_list_remove(l, j);
        release_fence(sp, j);
        drop_job(sp, j);
        if (in_flight)
            sp->in_flight--;
        mvm_job_finish(j, MVM_ERR_CANCELLED);
    }
}

void mvm_migrate_stop(mvm_space *sp)
{
    if (!sp->worker_running)
        return;
    pthread_mutex_lock(&sp->mu);
    sp->stopping = true;
    mvm_wake_worker(sp);
    pthread_mutex_unlock(&sp->mu);
    pthread_join(sp->worker, NULL); /* the batch in progress lands first */
    sp->worker_running = false;
    pthread_mutex_lock(&sp->mu);
    cancel_list(sp, &sp->demand, false);
    cancel_list(sp, &sp->prefetch, false);
    cancel_list(sp, &sp->deferred, true);
    mvm_upload_cancel_locked(sp);
    mvm_signal_moved(sp);
    pthread_mutex_unlock(&sp->mu);
}
