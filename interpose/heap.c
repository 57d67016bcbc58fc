/*
 * Managed allocations. All of them are page ranges of one moevm space, created at the first
 * managed allocation on the device whose context is current then:
 *
 *   one layer of N one-page "experts", N = (budget + MOEVM_OVERSUBSCRIBE) / page,
 *   device budget = MOEVM_GPU_BUDGET, write_back on (kernels write these pages).
 *
 * So every page has a pinned host home (mapped for the device where it is not resident:
 * the driver needs HOST_NUMA VMM, device attribute 141, or oversubscription is impossible)
 * and the budget's chunks are taken from the device at creation. Addresses never change:
 * residency only swaps what backs a page.
 *
 * Allocations are first-fit page ranges over a table sorted by address (a program keeps a
 * few hundred large allocations at most, and caching allocators reuse them). Objects, the
 * unit demand paging moves, are the extents host-to-device copies wrote (a tensor's
 * weights), or their slices (slice.c), else the whole allocation.
 */
#include <stdlib.h>
#include <string.h>

#include "interpose/preload.h"
#include "vmm/error.h"

void *mvm_grow_array(void *p, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    uint32_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *q = realloc(p, (size_t)n * elem);
    if (q)
        *cap = n;
    return q;
}

static uint64_t device_budget(void)
{
    size_t free = 0, total = 0;
    mvm_real_fn.cuMemGetInfo_v2(&free, &total);
    if (mvm_interposer.budget_bytes)
        return mvm_interposer.budget_bytes;
    if (mvm_interposer.budget_frac > 0)
        return (uint64_t)(mvm_interposer.budget_frac * (double)total);
    return free / 10 * 9;
}

static bool tables_alloc(void)
{
    size_t n = mvm_interposer.n_pages;
    mvm_interposer.resident = calloc(n, sizeof *mvm_interposer.resident);
    mvm_interposer.busy = calloc(n, 1);
    mvm_interposer.counts = calloc(n, sizeof *mvm_interposer.counts);
    mvm_interposer.used = calloc(n, sizeof *mvm_interposer.used);
    mvm_interposer.cand = calloc(n + 1, sizeof *mvm_interposer.cand);
    return mvm_interposer.resident && mvm_interposer.busy && mvm_interposer.counts &&
           mvm_interposer.used && mvm_interposer.cand;
}

static CUresult give_up(const char *why)
{
    MVM_PL_LOG(MVM_LOG_WARN, "no managed space (%s); allocations stay native", why);
    mvm_interposer.broken = true;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* Write lock held. */
static CUresult space_create(void)
{
    if (mvm_interposer.space)
        return CUDA_SUCCESS;
    if (mvm_interposer.broken)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUdevice dev = 0;
    CUcontext ctx = NULL;
    if (!mvm_real_fn.cuCtxGetDevice || mvm_real_fn.cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
        !mvm_real_fn.cuCtxGetCurrent || mvm_real_fn.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
        return give_up("no current context");
    uint64_t page = mvm_interposer.page_size, budget = device_budget() / page * page;
    if (budget < page)
        return give_up("the device budget is smaller than one page");
    uint64_t pages = (budget + mvm_interposer.oversub_bytes) / page;
    if (pages > UINT32_MAX / 4)
        return give_up("MOEVM_GPU_BUDGET + MOEVM_OVERSUBSCRIBE is too large");

    mvm_space_desc d;
    mvm_status st = mvm_space_desc_init(&d);
    d.n_layers = 1;
    d.n_experts = (uint32_t)pages;
    d.expert_bytes = page;
    d.page_size = page;
    d.device_budget = budget;
    d.backend = MVM_BACKEND_CUDA;
    d.device = dev;
    d.write_back = 1;
    d.clean_evict = mvm_interposer.clean_evict;
    /* A program may read any of its pointers in place, resident or not: the homes must stay
     * mapped whatever MOEVM_HOME_MAP says (an option for programs that make every expert
     * resident before reading it, as the engine does). */
    d.unmapped_homes = 0;
    mvm_space *sp = NULL;
    /* The cuda backend looks up the driver with dlsym: it must get the real functions. */
    mvm_in_interposer++;
    if (st == MVM_OK)
        st = mvm_space_create(&d, &sp);
    mvm_in_interposer--;
    if (st != MVM_OK)
        return give_up(mvm_last_error());
    mvm_space_info info;
    mvm_space_get_info(sp, &info);
    if (!info.home_mapped) {
        mvm_space_destroy(sp);
        return give_up("the device cannot map host memory (HOST_NUMA VMM, attribute 141)");
    }
    mvm_interposer.n_pages = (uint32_t)pages;
    mvm_interposer.device_pages = info.device_pages;
    mvm_interposer.base = info.base;
    mvm_interposer.capacity_bytes = pages * page;
    mvm_interposer.device = dev;
    mvm_interposer.ctx = ctx;
    mvm_interposer.shape = (mvm_pshape){.n_layers = 1, .n_experts = (uint32_t)pages, .top_k = 1,
                                .pages_per_expert = 1, .expert_bytes = page};
    const mvm_evict_ops *ev = mvm_policy_find(MVM_ROLE_EVICT, mvm_interposer.evict_name);
    mvm_pinit in = {.shape = &mvm_interposer.shape, .cost = &mvm_interposer.cost,
                    .params = {mvm_interposer.evict_args}};
    if (!tables_alloc() || ev->create(&in, &mvm_interposer.evict_self) != MVM_OK) {
        mvm_space_destroy(sp);
        return give_up(mvm_last_error());
    }
    mvm_interposer.evict = ev;
    mvm_interposer.victims = (mvm_evict_driver){
        .ops = ev, .self = mvm_interposer.evict_self, .resident = mvm_interposer.resident,
        .busy = mvm_interposer.busy, .cand = mvm_interposer.cand};
    atomic_store(&mvm_interposer.gen, 1);
    mvm_interposer.layout = 1;
    mvm_interposer.space = sp;
    MVM_PL_LOG(MVM_LOG_INFO, "managed space on device %d: %u pages of %llu KiB, %u on the "
               "device, evict %s", dev, mvm_interposer.n_pages, (unsigned long long)(page >> 10),
               mvm_interposer.device_pages, mvm_interposer.evict_name);
    return CUDA_SUCCESS;
}

/* First fit: the lowest gap of n free pages between allocations. */
static int64_t find_gap(uint32_t n)
{
    uint64_t prev_end = 0;
    for (uint32_t i = 0; i < mvm_interposer.n_allocs; i++) {
        const mvm_alloc *a = mvm_interposer.allocs[i];
        if (a->first_page - prev_end >= n)
            return (int64_t)prev_end;
        prev_end = (uint64_t)a->first_page + a->n_pages;
    }
    return mvm_interposer.n_pages - prev_end >= n ? (int64_t)prev_end : -1;
}

CUresult mvm_heap_alloc(uint64_t bytes, uint32_t site, CUdeviceptr *out)
{
    CUresult r = space_create();
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t page = mvm_interposer.page_size, n = (bytes + page - 1) / page;
    int64_t first = n <= mvm_interposer.n_pages ? find_gap((uint32_t)n) : -1;
    if (first < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    mvm_alloc *a = calloc(1, sizeof *a);
    mvm_alloc **t = mvm_grow_array(mvm_interposer.allocs, &mvm_interposer.cap_allocs,
                                   mvm_interposer.n_allocs + 1, sizeof *t);
    if (!a || !t) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    mvm_interposer.allocs = t;
    a->first_page = (uint32_t)first;
    a->n_pages = (uint32_t)n;
    a->va = mvm_interposer.base + (uint64_t)first * page;
    a->bytes = bytes;
    a->site = site;
    a->whole.va = a->va;
    a->whole.len = bytes;
    uint32_t at = 0;
    while (at < mvm_interposer.n_allocs && t[at]->va < a->va)
        at++;
    memmove(t + at + 1, t + at, (mvm_interposer.n_allocs - at) * sizeof *t);
    t[at] = a;
    mvm_interposer.n_allocs++;
    mvm_interposer.layout++;
    mvm_interposer.alloc_pages += a->n_pages;
    mvm_interposer.managed_allocs++;
    /* The driver numbers its own buffers from 1 up; the top bit keeps these apart. */
    a->id = 1ull << 63 | mvm_interposer.managed_allocs;
    mvm_interposer.managed_bytes += bytes;
    uint64_t live = (uint64_t)mvm_interposer.alloc_pages * page;
    if (live > mvm_interposer.peak_managed_bytes)
        mvm_interposer.peak_managed_bytes = live;
    *out = a->va;
    return CUDA_SUCCESS;
}

static int64_t index_of(uint64_t va)
{
    uint32_t lo = 0, hi = mvm_interposer.n_allocs; /* the last allocation starting at or below va */
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (mvm_interposer.allocs[mid]->va <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (int64_t)lo - 1;
}

mvm_alloc *mvm_heap_find(uint64_t va)
{
    int64_t i = index_of(va);
    if (i < 0)
        return NULL;
    mvm_alloc *a = mvm_interposer.allocs[i];
    return va - a->va < (uint64_t)a->n_pages * mvm_interposer.page_size ? a : NULL;
}

CUresult mvm_heap_free(uint64_t va)
{
    int64_t i = index_of(va);
    if (i < 0 || mvm_interposer.allocs[i]->va != va)
        return CUDA_ERROR_INVALID_VALUE;
    mvm_alloc *a = mvm_interposer.allocs[i];
    /* Its device-resident pages are dropped without a write-back (their contents are dead),
     * so their chunks are free for the next miss. Uses not yet observed go with the
     * objects. The caller drained the device: no kernel still reads these pages. */
    for (uint32_t p = a->first_page; p < a->first_page + a->n_pages; p++) {
        if (!mvm_interposer.resident[p])
            continue;
        if (mvm_discard(mvm_interposer.space, 0, p, 0) != MVM_OK) {
            MVM_PL_LOG(MVM_LOG_WARN, "dropping freed page %u failed: %s", p, mvm_last_error());
            continue; /* still resident: the policy evicts it later, with a write-back */
        }
        mvm_interposer.resident[p] = 0; /* no live object covers p: the generation stays */
        mvm_interposer.pages_out++;
    }
    mvm_report_site_free(a->site, a->bytes);
    mvm_interposer.alloc_pages -= a->n_pages;
    memmove(mvm_interposer.allocs + i, mvm_interposer.allocs + i + 1,
            (mvm_interposer.n_allocs - (uint32_t)i - 1) * sizeof *mvm_interposer.allocs);
    mvm_interposer.n_allocs--;
    mvm_interposer.layout++;
    for (uint32_t k = 0; k < a->n_ext; k++)
        mvm_slice_drop(&a->ext[k]);
    free(a->ext);
    free(a);
    return CUDA_SUCCESS;
}

mvm_obj *mvm_heap_extent(mvm_alloc *a, uint64_t va)
{
    uint32_t lo = 0, hi = a->n_ext;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (a->ext[mid].va <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0 && va - a->ext[lo - 1].va < a->ext[lo - 1].len)
        return &a->ext[lo - 1];
    return &a->whole;
}

mvm_obj *mvm_heap_object(mvm_alloc *a, uint64_t va)
{
    return mvm_slice_of(mvm_heap_extent(a, va), va);
}

/* The latest copy defines the object: extents it overlaps are replaced by it. */
void mvm_heap_learn(mvm_alloc *a, uint64_t va, uint64_t len)
{
    uint64_t end = a->va + (uint64_t)a->n_pages * mvm_interposer.page_size;
    if (va + len > end || va + len < va)
        len = end - va;
    mvm_obj *o = mvm_heap_extent(a, va);
    if (o != &a->whole && o->va == va && o->len == len)
        return;
    mvm_obj *t = mvm_grow_array(a->ext, &a->cap_ext, a->n_ext + 1, sizeof *t);
    if (!t)
        return; /* the copy still happens; this object is just not learned */
    a->ext = t;
    uint32_t keep = 0, at = 0;
    for (uint32_t i = 0; i < a->n_ext; i++) {
        bool overlaps = t[i].va < va + len && va < t[i].va + t[i].len;
        if (overlaps) {
            mvm_slice_drop(&t[i]);
            continue;
        }
        if (t[i].va < va)
            at = keep + 1;
        t[keep++] = t[i];
    }
    memmove(t + at + 1, t + at, (keep - at) * sizeof *t);
    t[at] = (mvm_obj){.va = va, .len = len};
    a->n_ext = keep + 1;
    mvm_interposer.layout++;
}
