/* The forward pass's thread pool (see pool.h). */
#include "engine/compute/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "vmm/error.h"
#include "vmm/spin.h"

/* Waiting: first PAUSE_ROUNDS pauses (tens of microseconds: the gap between the parallel
 * regions of one decode step), then sched_yield()s, and then, for workers, sleep on the
 * condition variable. A wake-up from there cost a run 18-30 us on the development VM (2
 * threads; bench/cpu/pool_wake.c), which a decode on the GPU with experts on the CPU
 * (--n-cpu-moe, the assign module's share) paid at every MoE layer, its CPU steps a layer's
 * device work apart (100-500 us), and a CPU decode at every token (the sampler's and the
 * output's time between them). Where each thread has a core of its own, the yields go on
 * until SPIN_NS have passed: 2 ms cover those gaps, and an idle pool still sleeps as soon
 * as that. Where threads share cores (more threads than the cores picked, or none picked),
 * only YIELD_ROUNDS: a thread that yields does not reliably give its core to the one it
 * waits for (a run took 49 us with both on one core and a long spin), so it soon sleeps. */
#define PAUSE_ROUNDS 1000
#define YIELD_ROUNDS 200
#define SPIN_NS 2000000u

/* One round of waiting (*round 0 and *since unset at the start of a wait); returns 0 once
 * the spinning is over: after spin_ns of yields, or YIELD_ROUNDS of them (spin_ns 0). */
static int backoff(uint64_t spin_ns, int *round, uint64_t *since)
{
    if (*round < PAUSE_ROUNDS) {
        mvm_cpu_relax();
    } else if (spin_ns) {
        const uint64_t t = mvm_clock_ns();
        if (*round == PAUSE_ROUNDS)
            *since = t;
        else if (t - *since > spin_ns)
            return 0;
        sched_yield();
    } else if (*round < PAUSE_ROUNDS + YIELD_ROUNDS) {
        sched_yield();
    } else {
        return 0;
    }
    (*round)++;
    return 1;
}

struct worker {
    mvm_pool *pool;
    pthread_t thread;
    int index;
    unsigned seen;              /* the generation it started after */
};

/* A thread's slice of a shared run (mvm_pool_share): the next item its owner takes in the
 * low 32 bits, the end (where others take from) in the high; a line each, as owners take
 * from theirs all along. */
struct slice {
    _Alignas(64) _Atomic uint64_t range;
};

struct mvm_pool {
    int n;
    struct worker *workers;     /* n - 1 of them: the caller is thread 0 */
    struct slice *slices;       /* [MVM_POOL_MAX_THREADS] of a shared run */
    mvm_pool_fn fn;
    void *ctx;
    atomic_uint generation;     /* bumped by each run (and by destroy) */
    atomic_int pending;         /* workers still running the current generation */
    atomic_int stop;
    pthread_mutex_t lock;       /* guards sleeping on `wake` */
    pthread_cond_t wake;
    int sleepers;
    mvm_topo topo;              /* a copy: the workers pin themselves after create returns */
    int pinned;                 /* a topology was given */
    int per_core;               /* made with n_threads 0: one thread per core of topo */
    pthread_t caller;           /* the thread pinned as thread 0, once caller_pinned */
    int caller_pinned;
    uint64_t spin_ns;           /* backoff's: SPIN_NS where each thread has a core */
};

static void pin_worker(const mvm_topo *topo, int index)
{
    if (!topo || topo->n_cores <= 0)
        return;
    /* The index-th core of the chosen set, wrapping when there are more threads. */
    int want = index % topo->n_cores, seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &topo->cores))
            continue;
        if (seen++ == want) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            pthread_setaffinity_np(pthread_self(), sizeof one, &one);
            return;
        }
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    mvm_pool *p = w->pool;
    pin_worker(p->pinned ? &p->topo : NULL, w->index);
    unsigned seen = w->seen;
    for (;;) {
        unsigned gen;
        int round = 0;
        uint64_t since = 0;
        while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
            if (backoff(p->spin_ns, &round, &since))
                continue;
            pthread_mutex_lock(&p->lock);
            p->sleepers++;
            while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen)
                pthread_cond_wait(&p->wake, &p->lock);
            p->sleepers--;
            pthread_mutex_unlock(&p->lock);
        }
        seen = gen;
        if (atomic_load(&p->stop))
            return NULL;
        p->fn(p->ctx, w->index, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

/* Thread 0 is whichever thread runs the pool, pinned to the first core at its first run,
 * not when the pool is made: a thread inherits its creator's affinity, and the threads made
 * after the pool by the thread that made it would share that one core with thread 0. The
 * engine makes its pool before its space, whose migration worker and the CUDA driver's own
 * threads then all ran on thread 0's core, and whose spin (MOEVM_MOVE_SPIN=auto) counted one
 * CPU and never spun (tests/test_engine.c, test_pool_affinity). */
static void pin_caller(mvm_pool *p)
{
    if (!p->pinned || (p->caller_pinned && pthread_equal(p->caller, pthread_self())))
        return;
    pin_worker(&p->topo, 0);
    p->caller = pthread_self();
    p->caller_pinned = 1;
}

static void publish(mvm_pool *p)
{
    /* The increment under the lock pairs with the sleepers' re-check under it, so a worker
     * going to sleep either sees the new generation or is woken by the broadcast. */
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    if (p->sleepers)
        pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
}

/* Workers 1..n-1, pinned to p->topo's cores (when pinned), each waiting for the next
 * generation from the one now. On failure the pool keeps the workers that started. */
static mvm_status start_workers(mvm_pool *p, int n_threads)
{
    p->n = n_threads;
    p->spin_ns = p->pinned && p->topo.n_cores >= n_threads ? SPIN_NS : 0;
    p->caller_pinned = 0; /* pinned again, to the cores now, at the next run */
    const unsigned gen = atomic_load(&p->generation);
    for (int i = 1; i < n_threads; i++) {
        struct worker *w = &p->workers[i];
        w->pool = p;
        w->index = i;
        w->seen = gen;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            p->n = i; /* join only those that started */
            return mvm_fail(MVM_ERR_NOMEM, "cannot start thread %d of %d", i, n_threads);
        }
    }
    return MVM_OK;
}

static void stop_workers(mvm_pool *p)
{
    atomic_store(&p->stop, 1);
    publish(p);
    for (int i = 1; i < p->n; i++)
        pthread_join(p->workers[i].thread, NULL);
    atomic_store(&p->stop, 0);
}

/* n_threads 0: one per core of topo (a cpu_set_t holds no more than the pool's most). */
static int threads_for(int n_threads, const mvm_topo *topo)
{
    int n = n_threads ? n_threads : topo && topo->n_cores > 0 ? topo->n_cores : 1;
    return n < MVM_POOL_MAX_THREADS ? n : MVM_POOL_MAX_THREADS;
}

mvm_status mvm_pool_create(int n_threads, const mvm_topo *topo, mvm_pool **out)
{
    *out = NULL;
    if (n_threads < 0 || n_threads > MVM_POOL_MAX_THREADS || (!n_threads && !topo))
        return mvm_fail(MVM_ERR_INVALID, "thread count %d is not in 1..%d", n_threads,
                        MVM_POOL_MAX_THREADS);
    mvm_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->workers = calloc(MVM_POOL_MAX_THREADS, sizeof *p->workers)) ||
        !(p->slices = aligned_alloc(64, MVM_POOL_MAX_THREADS * sizeof *p->slices))) {
        if (p)
            free(p->workers);
        free(p);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a pool of %d threads", n_threads);
    }
    if ((p->pinned = topo != NULL))
        p->topo = *topo;
    p->per_core = n_threads == 0;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    mvm_status st = start_workers(p, threads_for(n_threads, topo));
    if (st != MVM_OK) {
        mvm_pool_destroy(p);
        return st;
    }
    *out = p;
    return MVM_OK;
}

mvm_status mvm_pool_move(mvm_pool *p, const mvm_topo *topo, int spare)
{
    if (!p->pinned || !topo || topo->n_cores <= 0)
        return MVM_OK;
    const int n = !p->per_core ? p->n
                  : threads_for(topo->n_cores > spare ? topo->n_cores - spare : 1, topo);
    if (n == p->n && CPU_EQUAL(&topo->cores, &p->topo.cores))
        return MVM_OK;
    stop_workers(p);
    p->topo = *topo;
    return start_workers(p, n);
}

void mvm_pool_destroy(mvm_pool *p)
{
    if (!p)
        return;
    stop_workers(p);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p->workers);
    free(p->slices);
    free(p);
}

int mvm_pool_size(const mvm_pool *p)
{
    return p->n;
}

const mvm_topo *mvm_pool_topo(const mvm_pool *p)
{
    return p->pinned ? &p->topo : NULL;
}

void mvm_pool_run(mvm_pool *p, mvm_pool_fn fn, void *ctx)
{
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pin_caller(p);
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    publish(p);
    fn(ctx, 0, p->n);
    int round = 0;
    uint64_t since = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0)
        if (!backoff(p->spin_ns, &round, &since))
            sched_yield();
}

static uint64_t pack(size_t next, size_t end)
{
    return (uint64_t)next | (uint64_t)end << 32;
}

void mvm_pool_share(mvm_pool *p, size_t n, const size_t *starts)
{
    for (int t = 0; t < p->n; t++) {
        size_t b, e;
        if (starts) {
            b = starts[t];
            e = t + 1 < p->n ? starts[t + 1] : n;
        } else {
            mvm_pool_split(n, t, p->n, &b, &e);
        }
        atomic_store_explicit(&p->slices[t].range, pack(b, e), memory_order_relaxed);
    }
}

int mvm_pool_take(mvm_pool *p, int t, size_t chunk, size_t *begin, size_t *end)
{
    /* Its own slice from the front: the items it reads follow one another, so its weight
     * stream (and the prefetches ahead of it) runs on from chunk to chunk. */
    _Atomic uint64_t *own = &p->slices[t].range;
    uint64_t v = atomic_load_explicit(own, memory_order_relaxed);
    for (;;) {
        const size_t next = (uint32_t)v, last = (size_t)(v >> 32);
        if (next >= last)
            break;
        const size_t to = last - next > chunk ? next + chunk : last;
        if (atomic_compare_exchange_weak_explicit(own, &v, pack(to, last), memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *begin = next;
            *end = to;
            return 1;
        }
    }
    /* Then the others' from their backs, the next thread's first: a chunk at a time, so
     * that an owner still at work keeps most of its own. */
    for (int k = 1; k < p->n; k++) {
        _Atomic uint64_t *r = &p->slices[(t + k) % p->n].range;
        v = atomic_load_explicit(r, memory_order_relaxed);
        for (;;) {
            const size_t next = (uint32_t)v, last = (size_t)(v >> 32);
            if (next >= last)
                break;
            const size_t from = last - next > chunk ? last - chunk : next;
            if (atomic_compare_exchange_weak_explicit(r, &v, pack(next, from),
                                                      memory_order_relaxed,
                                                      memory_order_relaxed)) {
                *begin = from;
                *end = last;
                return 1;
            }
        }
    }
    return 0;
}

void mvm_pool_split(size_t n, int t, int nth, size_t *begin, size_t *end)
{
    *begin = n * (size_t)t / (size_t)nth;
    *end = n * (size_t)(t + 1) / (size_t)nth;
}
