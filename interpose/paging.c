/*
 * Demand paging at kernel launch. A launch whose objects are all resident costs a few
 * cached lookups (mvm_paging_resident: one generation compare per object). Otherwise the
 * launching thread, holding the write lock:
 *
 *   1. drains the device (cuCtxSynchronize), so no queued kernel or copy uses a page whose
 *      backing is about to change (a remap is unmap + map on the device). Nothing narrower
 *      is safe: a kernel may reach managed memory through pointers kept in device memory
 *      (the pointer arrays of batched GEMMs), which no launch scan sees;
 *   2. tells the evict policy what the launches since the last miss used (per page, the
 *      number of launches: one observation per miss, not per launch, keeps launches cheap;
 *      the policy's clock is therefore "misses", and within that window all uses tie);
 *   3. evicts the policy's victims among resident pages this launch does not need, in one
 *      call: each is written back to its home first (the space is write_back) unless its
 *      digest shows the device left it as loaded;
 *   4. queues every missing page at once and waits for all of them.
 * An object larger than the whole budget is loaded as far as chunks allow; the rest is read
 * from its host home through the mapping, which is correct, only slower. Once a launch's
 * pages fill the whole budget, its later misses move nothing and skip the drain
 * (`overflows` in the report).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "interpose/preload.h"
#include "vmm/error.h"

uint64_t mvm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void mvm_obj_pages(const mvm_obj *o, uint32_t *first, uint32_t *end)
{
    *first = mvm_page_of(o->va);
    *end = mvm_page_of(o->va + (o->len ? o->len : 1) - 1) + 1;
}

void mvm_objset_init(mvm_objset *s)
{
    s->obj = s->inline_obj;
    s->n = 0;
    s->learn = false;
    s->cap = sizeof s->inline_obj / sizeof *s->inline_obj;
}

void mvm_objset_free(mvm_objset *s)
{
    if (s->obj != s->inline_obj)
        free(s->obj);
    mvm_objset_init(s);
}

/* Room for `need` objects. */
static bool objset_reserve(mvm_objset *s, uint32_t need)
{
    if (need <= s->cap)
        return true;
    uint32_t cap = s->cap * 2;
    while (cap < need)
        cap *= 2;
    mvm_obj **o = malloc((size_t)cap * sizeof *o);
    if (!o)
        return false;
    memcpy(o, s->obj, (size_t)s->n * sizeof *o);
    if (s->obj != s->inline_obj)
        free(s->obj);
    s->obj = o;
    s->cap = cap;
    return true;
}

/* Pointers into one object come in runs (a tensor and its offsets, a graph's kernels on
 * the same weights): checking the last few entries removes most repeats cheaply, and
 * small sets are checked whole. mvm_paging_serve and the use counts tolerate the rare
 * repeat that is left (a page is claimed once; a use is counted twice). */
void mvm_objset_add_obj(mvm_objset *s, mvm_obj *o)
{
    uint32_t from = s->n > 32 ? s->n - 32 : 0;
    for (uint32_t i = from; i < s->n; i++)
        if (s->obj[i] == o)
            return;
    if (objset_reserve(s, s->n + 1))
        s->obj[s->n++] = o;
}

void mvm_objset_add(mvm_objset *s, uint64_t va)
{
    mvm_alloc *a = mvm_heap_find(va);
    if (!a)
        return;
    if (s->learn) {
        mvm_obj *e = mvm_heap_extent(a, va);
        if (e != &a->whole)
            mvm_slice_learn(e, va);
        return;
    }
    mvm_objset_add_obj(s, mvm_heap_object(a, va));
}

bool mvm_objset_append(mvm_objset *s, mvm_obj *const *objs, uint32_t n)
{
    if (!objset_reserve(s, s->n + n))
        return false;
    memcpy(s->obj + s->n, objs, (size_t)n * sizeof *objs);
    s->n += n;
    return true;
}

bool mvm_paging_resident(mvm_obj *const *objs, uint32_t n)
{
    uint64_t g = atomic_load_explicit(&mvm_interposer.gen, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++) {
        if (atomic_load_explicit(&objs[i]->ok_gen, memory_order_relaxed) == g)
            continue;
        uint32_t p, end;
        mvm_obj_pages(objs[i], &p, &end);
        for (; p < end; p++)
            if (!mvm_interposer.resident[p])
                return false;
        atomic_store_explicit(&objs[i]->ok_gen, g, memory_order_relaxed);
    }
    return true;
}

void mvm_paging_drain(void)
{
    if (mvm_real_fn.cuCtxSynchronize)
        mvm_real_fn.cuCtxSynchronize();
    mvm_interposer.drains++;
}

static mvm_pview view(void)
{
    mvm_stats s;
    mvm_space_get_stats(mvm_interposer.space, &s);
    return (mvm_pview){.shape = &mvm_interposer.shape, .resident = mvm_interposer.resident,
                       .busy = mvm_interposer.busy, .capacity_pages = mvm_interposer.device_pages,
                       .used_pages = s.resident_pages + s.loading_pages,
                       .tokens = mvm_interposer.misses, .now = (double)mvm_now_ns() * 1e-9};
}

/* Adds o's uses since the last miss to its pages' counts, and resets them. */
static void count_uses(mvm_obj *o, uint32_t *n_used)
{
    uint64_t u = atomic_exchange_explicit(&o->uses, 0, memory_order_relaxed);
    if (!u)
        return;
    uint32_t p, end;
    mvm_obj_pages(o, &p, &end);
    for (; p < end; p++) {
        if (!mvm_interposer.counts[p])
            mvm_interposer.used[(*n_used)++] = (int32_t)p;
        mvm_interposer.counts[p] += (uint32_t)(u < UINT32_MAX / 2 ? u : UINT32_MAX / 2);
    }
}

/* The uses of every object since the last miss, as one policy step over pages. */
static void observe(void)
{
    uint32_t n_used = 0;
    for (uint32_t i = 0; i < mvm_interposer.n_allocs; i++) {
        mvm_alloc *a = mvm_interposer.allocs[i];
        count_uses(&a->whole, &n_used);
        for (uint32_t k = 0; k < a->n_ext; k++) {
            count_uses(&a->ext[k], &n_used);
            for (uint32_t j = 0; j < a->ext[k].n_slices; j++)
                count_uses(&a->ext[k].slice[j], &n_used);
        }
    }
    if (n_used) {
        mvm_pstep step = {.layer = 0, .n_tok = n_used, .experts = mvm_interposer.used,
                          .counts = mvm_interposer.counts};
        mvm_pview v = view();
        mvm_interposer.evict->observe(mvm_interposer.evict_self, &v, &step);
    }
    for (uint32_t i = 0; i < n_used; i++)
        mvm_interposer.counts[mvm_interposer.used[i]] = 0;
}

/* Evicts up to `room` pages, the policy's choice among resident pages not busy. The
 * victims go in one call, so the space checks them all for changes with one wait; a page
 * that failed to go is replaced by the next choice. */
void mvm_paging_make_room(uint32_t room)
{
    uint32_t *victims = malloc(((size_t)room + 1) * sizeof *victims);
    if (!victims)
        return;
    mvm_evict_collect(&mvm_interposer.victims, 0, mvm_interposer.n_pages, UINT32_MAX, NULL, NULL);
    mvm_pview v = view();
    while (room && mvm_interposer.victims.n_cand) {
        uint32_t n_victims = 0;
        while (n_victims < room &&
               mvm_evict_pick(&mvm_interposer.victims, &v, 0, &victims[n_victims]))
            n_victims++;
        if (mvm_evict_many(mvm_interposer.space, 0, victims, n_victims) != MVM_OK)
            MVM_PL_LOG(MVM_LOG_WARN, "evicting %u pages: %s", n_victims, mvm_last_error());
        for (uint32_t k = 0; k < n_victims; k++) {
            uint32_t p = victims[k];
            mvm_page_state st = MVM_PAGE_RESIDENT;
            mvm_page_get_state(mvm_interposer.space, 0, p, 0, &st);
            if (st == MVM_PAGE_RESIDENT)
                continue; /* still there: nothing lost, another victim makes the room */
            mvm_interposer.resident[p] = 0;
            mvm_interposer.pages_out++;
            atomic_fetch_add_explicit(&mvm_interposer.gen, 1, memory_order_relaxed);
            room--;
        }
    }
    free(victims);
}

/* Queues every missing page of needed[0..n), then waits for all. */
static void load(const uint32_t *needed, uint32_t n)
{
    mvm_move **moves = malloc((size_t)n * sizeof *moves);
    uint32_t *pages = malloc((size_t)n * sizeof *pages), n_moves = 0;
    for (uint32_t i = 0; moves && pages && i < n; i++) {
        uint32_t p = needed[i];
        if (mvm_interposer.resident[p])
            continue;
        mvm_status st =
            mvm_make_resident_async(mvm_interposer.space, 0, p, MVM_ALL_PAGES, &moves[n_moves]);
        if (st == MVM_ERR_NOSPACE)
            break; /* larger than the budget: the rest stays at home */
        if (st != MVM_OK) {
            MVM_PL_LOG(MVM_LOG_WARN, "loading page %u failed: %s", p, mvm_last_error());
            continue;
        }
        pages[n_moves++] = p;
    }
    for (uint32_t i = 0; i < n_moves; i++) {
        if (mvm_move_wait(moves[i], -1) == MVM_OK) {
            mvm_interposer.resident[pages[i]] = 1;
            mvm_interposer.pages_in++;
        } else {
            MVM_PL_LOG(MVM_LOG_WARN, "loading page %u failed: %s", pages[i], mvm_last_error());
        }
        mvm_move_release(moves[i]);
    }
    free(moves);
    free(pages);
}

/* The pages prefetched so far (prefetch.c) land now, with the device drained: those this
 * launch needs count as the prefetch's hits. */
static bool resolve_prefetches(mvm_obj *const *objs, uint32_t n)
{
    if (!mvm_prefetch_any())
        return false;
    mvm_paging_drain();
    mvm_interposer.prefetch_useful += mvm_prefetch_pending_of(objs, n);
    mvm_prefetch_resolve();
    return true;
}

void mvm_paging_serve(mvm_obj *const *objs, uint32_t n)
{
    uint64_t t0 = mvm_now_ns();
    uint32_t *needed = malloc((size_t)mvm_interposer.n_pages * sizeof *needed);
    uint32_t n_needed = 0, missing = 0;
    if (!needed)
        return;
    bool drained = resolve_prefetches(objs, n);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t p, end;
        mvm_obj_pages(objs[i], &p, &end);
        for (; p < end; p++)
            if (!mvm_interposer.busy[p]) {
                mvm_interposer.busy[p] = 1;
                needed[n_needed++] = p;
                missing += !mvm_interposer.resident[p];
            }
    }
    mvm_stats s = {0};
    if (missing)
        mvm_space_get_stats(mvm_interposer.space, &s);
    /* With no free chunk and every resident page one this launch needs, its objects exceed
     * the budget and already hold all of it: nothing can move, so no drain either (a graph
     * or kernel larger than the budget would otherwise stall the device at every launch). */
    bool stuck = missing && s.free_pages == 0 && s.resident_pages <= n_needed - missing;
    if (stuck)
        mvm_interposer.overflows++;
    if (missing && !stuck) {
        mvm_paging_drain();
        observe();
        if (missing > s.free_pages)
            mvm_paging_make_room(missing - s.free_pages);
        load(needed, n_needed);
        mvm_interposer.misses++;
        mvm_interposer.wait_ns += mvm_now_ns() - t0;
        MVM_PL_LOG(MVM_LOG_DEBUG, "miss: %u of %u pages loaded in %.3f ms", missing, n_needed,
                   (double)(mvm_now_ns() - t0) * 1e-6);
        drained = true;
    } else if (drained) { /* its pages were all on their way: the wait for their landing */
        mvm_interposer.misses++;
        mvm_interposer.wait_ns += mvm_now_ns() - t0;
    }
    if (drained)
        mvm_prefetch_plan(objs, n, n_needed);
    for (uint32_t i = 0; i < n_needed; i++)
        mvm_interposer.busy[needed[i]] = 0;
    free(needed);
}
