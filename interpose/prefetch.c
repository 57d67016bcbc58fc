/*
 * Prefetch from the launch sequence (MOEVM_PRELOAD_PREFETCH). A decode loop launches the
 * same kernels over the same objects in the same order, token after token; this learns
 * that order and copies the pages the next launches will need while the current ones run,
 * so that a later launch waits for the remap, not for the copy.
 *
 * Learning: every managed launch (kernel or graph) is a key, the mix of the objects it
 * names; a table keeps, per key, the pages of those objects and the key that followed it
 * on the same thread last time. A wrong successor costs a wasted copy, never data.
 *
 * Planning, at a miss (the device drained, the write lock held, the launch's own pages
 * loaded): the successors are walked from the launch being served, their pages marked busy
 * so that no eviction takes them, until the window would not fit the budget. Pages neither
 * resident nor on their way are evicted for as needed (the evict module's victims among the
 * others) and asked for at prefetch priority, each pinned first. A pin keeps the space from
 * remapping a page (vmm/migrate.c defers the remap of a pinned expert's copy), so the bytes
 * cross PCIe while kernels run but the page keeps its home mapping: the interposer's rule
 * that backings change only with the device drained still holds.
 *
 * Resolving, whenever the device is drained next with the write lock held (the next miss,
 * a free of managed memory, the start of a stream capture): every pending page is unpinned
 * and its move waited for; it is then resident. A launch whose pages were all prefetched
 * still misses (its pages are not resident yet) but waits only for what is left of the
 * copies and the remaps, and the pages of the launches after it are resident.
 *
 * Writes: a pending page's copy reads its home while the program runs. Kernels that name a
 * pending page miss and resolve it before they run; a host-to-device, unified or device-side
 * copy or memset into managed memory resolves every pending page first (mvm_prefetch_settle:
 * a drain, coarse but never stale). What is not seen: a kernel writing a pending page through
 * a pointer it reads from device memory (docs/interpose.md, Limits), as for any miss.
 */
#include <stdlib.h>
#include <string.h>

#include "interpose/preload.h"
#include "vmm/error.h"

#define SEQ_SLOTS 4096u   /* launch keys remembered (a decode step has hundreds) */
#define SEQ_PROBE 8u      /* slots a key may sit from its home slot */
#define SEQ_RANGES 16u    /* page ranges kept per launch (its first objects) */
#define LOOKAHEAD 64u     /* launches walked ahead at most, looking for the next miss */

typedef struct seq_entry {
    uint64_t key, next; /* 0: none */
    uint32_t n;
    uint32_t first[SEQ_RANGES], end[SEQ_RANGES];
} seq_entry;

static seq_entry *seq;
static pthread_mutex_t seq_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread uint64_t t_prev; /* the key of this thread's last managed launch */

/* The pages asked for and not resolved yet (write lock); how many is also read without it
 * (mvm_prefetch_any). */
static uint8_t *pending;       /* [n_pages] */
static uint32_t *pend_page;    /* [n_pages] */
static mvm_move **pend_move;   /* [n_pages] */
static _Atomic uint32_t n_pend;

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The launch's key: the objects it names, in any order; never 0. */
static uint64_t key_of(mvm_obj *const *objs, uint32_t n)
{
    uint64_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        k ^= mix((uint64_t)(uintptr_t)objs[i]);
    return k ? k : 1;
}

/* The slot of key (seq_mu held): found, or (insert) an empty one or the home slot reused. */
static seq_entry *slot(uint64_t key, bool insert)
{
    uint32_t home = (uint32_t)(key % SEQ_SLOTS);
    for (uint32_t i = 0; i < SEQ_PROBE; i++) {
        seq_entry *e = &seq[(home + i) % SEQ_SLOTS];
        if (e->key == key)
            return e;
        if (!e->key && insert) {
            e->key = key;
            return e;
        }
    }
    if (!insert)
        return NULL;
    seq_entry *e = &seq[home];
    *e = (seq_entry){.key = key};
    return e;
}

void mvm_prefetch_learn(mvm_obj *const *objs, uint32_t n)
{
    if (!mvm_interposer.prefetch || n == 0)
        return;
    uint64_t key = key_of(objs, n);
    pthread_mutex_lock(&seq_mu);
    if (!seq)
        seq = calloc(SEQ_SLOTS, sizeof *seq);
    seq_entry *e = seq ? slot(key, true) : NULL;
    if (e) {
        e->n = 0;
        for (uint32_t i = 0; i < n && e->n < SEQ_RANGES; i++, e->n++)
            mvm_obj_pages(objs[i], &e->first[e->n], &e->end[e->n]);
        seq_entry *prev = t_prev && t_prev != key ? slot(t_prev, false) : NULL;
        if (prev)
            prev->next = key;
    }
    t_prev = key;
    pthread_mutex_unlock(&seq_mu);
}

static bool tables_ready(void)
{
    size_t n = mvm_interposer.n_pages;
    if (!pending) {
        pending = calloc(n, 1);
        pend_page = calloc(n, sizeof *pend_page);
        pend_move = calloc(n, sizeof *pend_move);
    }
    return pending && pend_page && pend_move;
}

/* Marks busy (into win[]) the pages of the launches that followed `key` last time, up to
 * and including the first of them that would miss, and lists that one's missing pages
 * (into want[]): what the next miss would load, loaded a step early, with victims chosen
 * among the pages none of those launches needs. Going further would move more than demand
 * paging does (a cyclic walk over more than the budget loads every page once a round
 * either way, and a deeper window only evicts what the policy meant to keep). Stops where
 * the window and the `held` pages would not fit the budget. */
static void plan_window(uint64_t key, uint32_t held, uint32_t *win, uint32_t *n_win,
                        uint32_t *want, uint32_t *n_want)
{
    uint8_t *busy = mvm_interposer.busy;
    pthread_mutex_lock(&seq_mu);
    seq_entry *e = seq ? slot(key, false) : NULL;
    for (uint32_t d = 0; e && e->next && e->next != key && d < LOOKAHEAD && !*n_want; d++) {
        e = slot(e->next, false);
        if (!e)
            break;
        uint32_t add = 0;
        for (uint32_t r = 0; r < e->n; r++)
            for (uint32_t p = e->first[r]; p < e->end[r] && p < mvm_interposer.n_pages; p++)
                add += !busy[p];
        if (held + *n_win + add > mvm_interposer.device_pages)
            break; /* this launch's pages would push out the window's */
        for (uint32_t r = 0; r < e->n; r++)
            for (uint32_t p = e->first[r]; p < e->end[r] && p < mvm_interposer.n_pages; p++) {
                if (busy[p])
                    continue;
                busy[p] = 1;
                win[(*n_win)++] = p;
                if (!mvm_interposer.resident[p] && !pending[p])
                    want[(*n_want)++] = p;
            }
    }
    pthread_mutex_unlock(&seq_mu);
}

/* Asks for page p, pinned so that it lands without a remap; false when the space had no
 * room or refused. */
static bool ask(uint32_t p)
{
    mvm_space *sp = mvm_interposer.space;
    mvm_move *mv = NULL;
    if (mvm_pin(sp, 0, p) != MVM_OK)
        return false;
    mvm_status st = mvm_prefetch(sp, 0, p, MVM_ALL_PAGES, &mv);
    if (st != MVM_OK) {
        if (st != MVM_ERR_NOSPACE)
            MVM_PL_LOG(MVM_LOG_WARN, "prefetching page %u: %s", p, mvm_last_error());
        mvm_unpin(sp, 0, p);
        mvm_interposer.prefetch_failed++;
        return false;
    }
    uint32_t i = atomic_load_explicit(&n_pend, memory_order_relaxed);
    pending[p] = 1;
    pend_page[i] = p;
    pend_move[i] = mv;
    atomic_store_explicit(&n_pend, i + 1, memory_order_release);
    mvm_interposer.prefetch_pages++;
    return true;
}

void mvm_prefetch_plan(mvm_obj *const *objs, uint32_t n, uint32_t held)
{
    if (!mvm_interposer.prefetch || !n ||
        atomic_load_explicit(&mvm_interposer.captures, memory_order_acquire) || !tables_ready())
        return;
    uint32_t *win = malloc((size_t)mvm_interposer.n_pages * 2 * sizeof *win);
    if (!win)
        return;
    uint32_t *want = win + mvm_interposer.n_pages, n_win = 0, n_want = 0;
    plan_window(key_of(objs, n), held, win, &n_win, want, &n_want);
    if (n_want) {
        mvm_stats s = {0};
        mvm_space_get_stats(mvm_interposer.space, &s);
        if (n_want > s.free_pages)
            mvm_paging_make_room(n_want - (uint32_t)s.free_pages);
        for (uint32_t i = 0; i < n_want && ask(want[i]); i++)
            ;
    }
    for (uint32_t i = 0; i < n_win; i++)
        mvm_interposer.busy[win[i]] = 0;
    free(win);
}

uint32_t mvm_prefetch_pending_of(mvm_obj *const *objs, uint32_t n)
{
    uint32_t c = 0;
    for (uint32_t i = 0; pending && i < n; i++) {
        uint32_t p, end;
        mvm_obj_pages(objs[i], &p, &end);
        for (; p < end; p++)
            c += pending[p];
    }
    return c;
}

void mvm_prefetch_resolve(void)
{
    mvm_space *sp = mvm_interposer.space;
    const uint32_t n = atomic_load_explicit(&n_pend, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t p = pend_page[i];
        mvm_unpin(sp, 0, p); /* the worker may now remap it: nothing runs */
        if (mvm_move_wait(pend_move[i], -1) == MVM_OK) {
            mvm_interposer.resident[p] = 1;
            mvm_interposer.pages_in++;
        } else {
            MVM_PL_LOG(MVM_LOG_WARN, "prefetch of page %u failed: %s; it stays home", p,
                       mvm_last_error());
            mvm_interposer.prefetch_failed++;
        }
        mvm_move_release(pend_move[i]);
        pending[p] = 0;
    }
    atomic_store_explicit(&n_pend, 0, memory_order_release);
}

bool mvm_prefetch_any(void)
{
    return atomic_load_explicit(&n_pend, memory_order_acquire) != 0;
}

void mvm_prefetch_settle_locked(void)
{
    if (!mvm_prefetch_any())
        return;
    mvm_paging_drain();
    mvm_prefetch_resolve();
    mvm_interposer.prefetch_settles++;
}

void mvm_prefetch_settle(void)
{
    if (!mvm_prefetch_any())
        return;
    pthread_rwlock_wrlock(&mvm_interposer.lock);
    mvm_prefetch_settle_locked();
    pthread_rwlock_unlock(&mvm_interposer.lock);
}

void mvm_prefetch_forget(void)
{
    atomic_store(&n_pend, 0);
    pending = NULL;
    pend_page = NULL;
    pend_move = NULL;
    seq = NULL;
    t_prev = 0;
    pthread_mutex_init(&seq_mu, NULL);
}
