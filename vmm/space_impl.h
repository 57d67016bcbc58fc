/*
 * The space's internal state, shared by space.c (layout, queries, pins), evict.c and
 * migrate.c (moves, queues, the migration worker). One mutex guards everything below it;
 * copies run outside it, on chunks owned by exactly one job.
 *
 * Page life cycle:  HOME --claim slab, queue job--> LOADING --copy, remap--> RESIDENT
 *                   LOADING --evict--> HOME (the job frees its slab when it comes back)
 *                   RESIDENT --evict--> HOME (remap to home or unmap, slab freed)
 * Pages move in runs: consecutive pages of one expert backed by one slab (vmm/slab.c), one
 * mapping at the expert's address. A run is loaded, cancelled and evicted whole.
 * A job whose expert is pinned when its copy lands waits on the deferred list: the remap
 * happens after the last unpin, so a reader never sees the backing change under it.
 */
#ifndef MVM_VMM_SPACE_IMPL_H
#define MVM_VMM_SPACE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "vmm/backend.h"
#include "vmm/spin.h"
#include "vmm/topo.h"

enum { PRIO_DEMAND = 0, PRIO_PREFETCH = 1 };

/* Jobs per worker batch (migrate.c): enough to keep a copy engine busy while the previous
 * remaps run, few enough that a newly queued on-demand job waits at most one batch. Also
 * the most jobs a request joins (request.c). */
#define MVM_MAX_BATCH 8

struct page {
    int32_t chunk;      /* the device chunk when RESIDENT, else -1 */
    uint8_t state;      /* mvm_page_state */
    uint8_t prefetched; /* queued at prefetch priority and not yet asked for on demand */
    struct job *job;    /* the job loading it when LOADING */
};

/* Pages [at, at + n) of a job, consecutive in the expert, backed by the slab at `slab`. */
struct job_run {
    uint32_t at, n, slab;
    bool done; /* its slab is no longer the job's: landed (the pages own it) or freed */
    bool freeing; /* cancelled while its copy ran: the slab is freed when the job lands
                     (counted in the space's n_freeing until then) */
};

struct job {
    struct job *prev, *next; /* in one of the space's lists */
    uint32_t expert;         /* flat expert index */
    uint32_t n;              /* pages in this job */
    uint32_t *pages;         /* page numbers within the expert, increasing */
    struct job_run *runs;
    uint32_t n_runs;
    int prio;
    bool started;
    bool hurried;            /* a started prefetch an on-demand request now waits on: its
                                pieces no longer let other demands overtake (migrate.c) */
    bool ordered;            /* a reader's stream may be ordered after it (mvm_expert_wait_on):
                                its copies are queued, behind `fence` (NULL once they have
                                landed), and every run it owns is mapped at its address */
    mvm_event *fence;
    bool landed;             /* its copies are done (it waits on the deferred list) */
    bool filled;             /* no copies: a reader wrote its slab (vmm/fill.c) */
    mvm_status copy_st;      /* how they went */
    char why[160];           /* its failure's message, for the moves waiting on it */
    mvm_move **waiters;
    uint32_t n_waiters, cap_waiters;
};

/* A slab (vmm/slab.c), at slabs[first chunk]: chunks [first, first + n) of one allocation. */
struct slab {
    uint32_t n;         /* chunks; 0: no slab starts at this chunk */
    int32_t expert;     /* the run's expert (flat index), -1 while free */
    uint32_t page;      /* the run's first page */
    uint32_t next_free; /* the next free slab of this length */
    bool mapped;        /* mapped at the run's address (a load maps it before its copy
                           lands where homes are unmapped: nothing reads there yet); in a
                           slot space set at its claim, with no driver call: its run is
                           read in the pool's view, where the slab is mapped for life */
    bool reserved;      /* set aside for a reader to fill (vmm/fill.c): claimed, no run */
};

/* A slab still mapped at the address of a run evicted from it (vmm/slab.c, "stale"). */
struct stale_map {
    uint64_t va, bytes;
    uint32_t slab;
};

struct job_list {
    struct job *head, *tail;
    uint32_t n;
};

struct unpin_event {
    struct unpin_event *next;
    uint32_t expert;
    mvm_event *ev;
};

/* Lives as long as the space or any move made from it, whichever is longer, so a move
 * waited on after its space is gone can still account its wait. */
struct space_shared {
    atomic_int refs;
    atomic_uint_fast64_t wait_ns;
};

struct mvm_move {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;        /* the user's (until released) + one per job it waits on */
    int pending;     /* jobs not finished */
    atomic_uint settled; /* bumped as each job settles, for a waiter's spin (vmm/spin.h) */
    uint64_t spin_ns;    /* the space's spin_ns */
    mvm_status result;
    char why[160];   /* the first failed job's message */
    struct space_shared *shared;
};

struct mvm_space {
    pthread_mutex_t mu;
    pthread_cond_t work; /* wakes the worker */
    pthread_cond_t moved; /* a job became ordered, landed or failed (mvm_expert_wait_on) */
    mvm_backend *be;
    mvm_topo topo;

    uint32_t n_layers, n_experts, n_total; /* n_total = n_layers * n_experts */
    uint64_t expert_bytes, page_size, stride;
    uint64_t home_stride; /* ppe pages: the homes' (stride is the same, unless packed) */
    /* Packed (mvm_space_desc.pack, the budget holding every expert): the experts `stride`
     * (their bytes, rounded to MVM_PACK_ALIGN) apart in one slab of every chunk mapped at
     * base once; an expert's pages are its bytes page by page from its address. The first
     * request makes `upload`, a job of every page that the worker copies up (upload.c);
     * once it lands every page stays resident. */
    bool packed;
    bool packed_mapped; /* its slab made and mapped (teardown undoes what init did) */
    /* A slot space (mvm_space_desc.slots): runs are whole experts read in the pool's view
     * (mvm_expert_slot), never mapped at the experts' addresses, so no move or eviction calls
     * the driver's map, access or unmap; the budget is whole experts (n_chunks a multiple of
     * ppe, every slab one expert's) and homes are never mapped at the experts' addresses. */
    bool slots;
    bool pool_backed; /* a slot space's pool: one allocation of every chunk (slab.c) */
    struct job *upload;
    uint32_t ppe; /* pages per expert */
    uint64_t base, reserved;

    mvm_home *home;
    uint8_t *home_host;
    uint64_t home_dev;      /* where the device reads home_host in place (0: it cannot) */
    bool homes_mapped; /* every non-resident page is mapped to its home */
    uint32_t piece_pages; /* a prefetch copies this many pages at a time (MOEVM_COPY_PIECE) */
    bool write_back;   /* eviction copies pages back first (mvm_space_desc.write_back) */
    mvm_pool *pool;
    uint32_t n_chunks, n_free;   /* n_free: chunks no run owns */
    uint32_t n_reserved;         /* chunks of slabs set aside for readers (vmm/fill.c) */
    struct slab *slabs;          /* [n_chunks], by first chunk */
    uint32_t *chunk_slab;        /* [n_chunks] the first chunk of its slab, or UINT32_MAX */
    uint32_t *free_slabs;        /* [ppe + 1] free slabs by length, linked by next_free */
    uint32_t *cut;               /* [n_layers] where the layer's last partial eviction cut
                                    its experts (0: none): loads split their runs there */
    struct stale_map *stale;     /* evicted runs' mappings left for the worker to unmap */
    uint32_t n_stale, cap_stale;

    struct page *pages;  /* n_total * ppe */
    uint32_t *pins;      /* per expert */
    struct job_list demand, prefetch, deferred;
    struct unpin_event *unpins;

    pthread_t worker;
    bool worker_running, stopping;
    /* MOEVM_MOVE_SPIN: how long the worker, idle after a batch, and a thread waiting for the
     * worker spin before they sleep; the counts change (under mu) with each signal of work
     * and of moved, for the spins to watch (vmm/spin.h) */
    uint64_t spin_ns;
    atomic_uint work_seq, moved_seq;

    mvm_stats stats; /* counters; gauges are filled in by mvm_space_get_stats */
    uint32_t n_resident, n_loading, n_pinned, in_flight;
    uint32_t n_freeing; /* chunks of runs evicted while their copy ran, back when it lands */
    struct space_shared *shared;
};

/* Wakes the migration worker (lock held), spinning or asleep. */
static inline void mvm_wake_worker(mvm_space *sp)
{
    atomic_fetch_add_explicit(&sp->work_seq, 1, memory_order_release);
    pthread_cond_signal(&sp->work);
}

/* Tells the threads waiting on moved (lock held) that a job became ordered, landed or
 * failed. */
static inline void mvm_signal_moved(mvm_space *sp)
{
    atomic_fetch_add_explicit(&sp->moved_seq, 1, memory_order_release);
    pthread_cond_broadcast(&sp->moved);
}

/* Condition variables here time out on CLOCK_MONOTONIC: wall-clock jumps must not stretch
 * or cut a wait. */
static inline void cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

static inline struct page *page_at(mvm_space *sp, uint32_t expert, uint32_t page)
{
    return &sp->pages[(size_t)expert * sp->ppe + page];
}

static inline uint64_t page_va(const mvm_space *sp, uint32_t expert, uint32_t page)
{
    return sp->base + expert * sp->stride + (uint64_t)page * sp->page_size;
}

/* Bytes of the expert's weights in `page` (the last page may be partly used). */
static inline uint64_t page_bytes(const mvm_space *sp, uint32_t page)
{
    uint64_t off = (uint64_t)page * sp->page_size;
    uint64_t left = sp->expert_bytes - off;
    return left < sp->page_size ? left : sp->page_size;
}

/* migrate.c */
mvm_status mvm_migrate_start(mvm_space *sp);
/* Run r of job j: its slab back to the pool, once (unmapped first where it was mapped ahead
 * of its copy); its pages back to their home state (cancelled, or a failed copy or remap).
 * Lock held. request.c takes them back from a job it cannot queue whole. */
void mvm_run_release(mvm_space *sp, struct job *j, uint32_t r);
void mvm_run_abandon(mvm_space *sp, struct job *j, uint32_t r);
/* Stops the worker and cancels every queued or deferred job (their moves report
 * MVM_ERR_CANCELLED). Called by destroy without the lock held. */
void mvm_migrate_stop(mvm_space *sp);

/* move.c: handles and jobs. job_new: a job for n pages of an expert, no run yet (NULL when
 * out of memory). A new handle holds one reference (its caller's) and one on the
 * space's shared state; unref_locked drops one with m->mu held, and releases the lock (or
 * frees the handle). add_waiter makes job j settle m too. finish settles the job's handles
 * with st (and the job's reason) and frees it, off every list; note_error keeps the
 * thread's last error as the job's reason unless it has one. */
void mvm_shared_release(struct space_shared *s);
mvm_move *mvm_move_new(mvm_space *sp);
void mvm_move_unref_locked(mvm_move *m);
bool mvm_job_add_waiter(struct job *j, mvm_move *m);
void mvm_job_list_push(struct job_list *l, struct job *j);
void mvm_job_list_remove(struct job_list *l, struct job *j);
struct job *mvm_job_new(uint32_t expert, uint32_t n, int prio);
void mvm_job_free(struct job *j);
void mvm_job_finish(struct job *j, mvm_status st);
void mvm_job_note_error(struct job *j);
/* Evict of a LOADING page (lock held): the page goes back to HOME at once; a job not yet
 * started frees its chunk now, and finishes (CANCELLED) if it has no page left. */
void mvm_cancel_page(mvm_space *sp, uint32_t expert, uint32_t page);

/* slab.c: an evicted run's mapping left in place, where homes are unmapped (nothing reads a
 * non-resident page there), for the worker to unmap when it has nothing to copy: the
 * evicting thread, often a step about to load, skips the unmap. false: not kept (out of
 * memory for the list), unmap it now. */
bool mvm_stale_keep(mvm_space *sp, uint64_t va, uint64_t bytes, uint32_t slab);
/* Unmaps the stale mappings overlapping [va, va + bytes) (before a map there; bytes 0:
 * none) and those of slab `slab` (before it is destroyed; UINT32_MAX: none). Returns the
 * first failure; a failed entry stays, to be tried again (the map, or the destruction, does
 * not happen meanwhile). */
mvm_status mvm_stale_clear(mvm_space *sp, uint64_t va, uint64_t bytes, uint32_t slab);
/* Unmaps one stale mapping, if any: the worker's, in its idle time, the lock held on entry
 * and on return but not during the driver's call. A failed one stays in the list. */
mvm_status mvm_stale_unmap_one(mvm_space *sp);
/* mvm_stale_clear's for an address range, by the worker before it maps there: the lock held
 * on entry and on return but not during the driver's calls. */
mvm_status mvm_stale_clear_unlocked(mvm_space *sp, uint64_t va, uint64_t bytes);

/* Lands, lock held, the deferred jobs of expert idx (its last pin just went) whose landing
 * calls no driver (mapped ahead of their copies): its next reader finds it resident, and the
 * space's in-flight count is right at once; the others wait for the worker. */
void mvm_land_deferred_locked(mvm_space *sp, uint32_t idx);

/* Queues the HOME pages of [lo, hi) of the expert (all HOME, and that many chunks free) at
 * on-demand priority, with the lock held; *out is a move to wait for and release. */
mvm_status mvm_reload_locked(mvm_space *sp, uint32_t idx, uint32_t lo, uint32_t hi,
                             mvm_move **out);

/* upload.c, a packed space's (the `packed` fields above). init makes its memory, one slab
 * of every chunk mapped at base; teardown unmaps and frees it. ask_locked makes the upload
 * job, every page LOADING under it, unless it is under way or done (lock held). run is the
 * worker's (lock held on entry and on return, not during the copies): the homes copied up
 * through a staging buffer, then every page RESIDENT, or back HOME with the job failed
 * (init_st/init_why: the worker's own failure). cancel_locked fails a job not yet run. */
mvm_status mvm_upload_init(mvm_space *sp);
void mvm_upload_teardown(mvm_space *sp);
mvm_status mvm_upload_ask_locked(mvm_space *sp);
void mvm_upload_run(mvm_space *sp, mvm_status init_st, const char *init_why);
void mvm_upload_cancel_locked(mvm_space *sp);

/* space.c: validates a handle and an expert (flat index in *idx); on success the space's
 * lock is held. */
mvm_status mvm_lock_expert(const mvm_space *sp, uint32_t layer, uint32_t expert, uint32_t *idx);

/* evict.c: the error for a request or eviction of part of an expert (n of its pages) in a
 * slot space, which moves whole experts only. */
mvm_status mvm_slots_refuse_part(const mvm_space *sp, uint32_t l, uint32_t e, uint32_t n);

/* space.c, with the lock held */
void mvm_unpin_locked(mvm_space *sp, uint32_t expert);

/* slab.c, with the lock held. init makes the pool's first slabs (whole experts). claim
 * takes a free slab of `want` chunks, making room if needed; where the free chunks are too
 * scattered for one, a shorter one (*got < want): the caller claims again for the rest.
 * The caller has checked that want <= n_free. */
mvm_status mvm_slabs_init(mvm_space *sp);
void mvm_slabs_destroy(mvm_space *sp);
mvm_status mvm_slab_claim(mvm_space *sp, uint32_t want, uint32_t *first, uint32_t *got);
void mvm_slab_release(mvm_space *sp, uint32_t first);

/* The slab a claimed chunk belongs to: the run of a RESIDENT or LOADING page. */
static inline struct slab *slab_of(mvm_space *sp, int32_t chunk, uint32_t *first)
{
    *first = sp->chunk_slab[chunk];
    return &sp->slabs[*first];
}

#endif
