/* vmm_costs sections 5-9: moevm's space on the cuda backend against the bare driver
 * (vmm_costs.cu says what each measures). */
#include <cuda.h>
#include <cuda_runtime.h> /* only for <<<>>> launches and cudaGetLastError */

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vmm_costs.h"

/* ---------------------------------------------------------------------------------------- */
/* 5. End to end: mvm_make_resident of a whole expert versus the bare copy                    */
/* ---------------------------------------------------------------------------------------- */

static void check_residency(mvm_space *space, uint32_t e, int want_resident)
{
    mvm_residency r;
    MVM(mvm_expert_residency(space, 0, e, &r));
    uint32_t want = want_resident ? r.n_pages : 0;
    if (r.resident != want || r.loading != 0)
        die("expert %u: %u of %u pages resident, %u loading; expected %u resident", e,
            r.resident, r.n_pages, r.loading, want);
}

/* libmoevm may make its own context current on the calling thread; our streams and
 * allocations belong to the primary context, so take it back before using them. */
static void own_context(void) { CU(cuCtxSetCurrent(g_ctx)); }

/* The device bytes where the expert is read (its address, or a slot space's slot) must
 * equal its home. */
static void verify_expert(mvm_space *space, uint32_t e, size_t bytes, void *scratch)
{
    uint64_t at = 0;
    MVM(mvm_expert_slot(space, 0, e, &at));
    if (!at)
        die("expert %u is not resident where it should be", e);
    CUdeviceptr addr = (CUdeviceptr)at;
    own_context();
    CU(cuMemcpyDtoH(scratch, addr, bytes));
    if (memcmp(scratch, mvm_expert_home(space, 0, e), bytes) != 0)
        die("expert %u after mvm_make_resident: device bytes differ from the home", e);
}

/* A cuda space of one layer of `experts`, all of which fit in the budget. */
static mvm_space_desc one_layer(uint32_t experts, uint64_t expert_bytes)
{
    mvm_space_desc d;
    MVM(mvm_space_desc_init(&d));
    d.n_layers = 1;
    d.n_experts = experts;
    d.expert_bytes = expert_bytes;
    d.device_budget = experts * expert_bytes;
    d.backend = MVM_BACKEND_CUDA;
    d.device = g_ordinal;
    return d;
}

/* A one-layer space of `experts` experts of random bytes, all of which fit the budget; a
 * slot space (mvm_space_desc.slots) with `slots`. */
static mvm_space *filled_space(uint32_t experts, uint64_t expert_bytes, int slots)
{
    mvm_space_desc d = one_layer(experts, expert_bytes);
    d.slots = slots;
    mvm_space *space;
    MVM(mvm_space_create(&d, &space));
    for (uint32_t e = 0; e < experts; e++) {
        void *home = mvm_expert_home(space, 0, e);
        if (!home)
            die("mvm_expert_home(0, %u) returned NULL", e);
        fill_random(home, expert_bytes, 100 + e);
    }
    return space;
}

enum { BATCH = 8 }; /* experts asked for at once, as an engine step's misses */

/* The same bytes as a move's copy by cuMemcpyHtoDAsync alone, g_reps each: its home into
 * where it is resident (what the move's copy costs without moevm's path), and the two halves
 * of that against the bare copy: a cuMemHostAlloc buffer into where it is resident (the
 * destination's share) and its home into a cuMemAlloc buffer (the source's). On the H200 the
 * first ran 21-36 us above the bare copy at every size (docs/perf/vmm.md, session 106). */
typedef struct plain_copies {
    double *home_to_resident, *pinned_to_resident, *home_to_alloc;
    void *pinned;
    CUdeviceptr alloc;
} plain_copies;

static void time_plain_copies(mvm_space *space, uint32_t e, size_t bytes, plain_copies *pc,
                              int i)
{
    uint64_t at = 0;
    MVM(mvm_expert_slot(space, 0, e, &at));
    const void *home = mvm_expert_home(space, 0, e);
    own_context();
    pc->home_to_resident[i] = time_h2d_us((CUdeviceptr)at, home, bytes);
    pc->pinned_to_resident[i] = time_h2d_us((CUdeviceptr)at, pc->pinned, bytes);
    pc->home_to_alloc[i] = time_h2d_us(pc->alloc, home, bytes);
    CU(cuMemcpyHtoD((CUdeviceptr)at, home, bytes)); /* the expert's own bytes back */
}

/* Times g_reps moves in `space` (BATCH experts, none resident): one[i] a make-resident of
 * one expert, hit[i] the same call once it is resident, pc's copies (where pc is not NULL),
 * all[i] BATCH experts asked for at once (async) and all waited for, as an engine step or a
 * launch's misses do: the migration worker takes them as one batch and remaps each as its
 * copies land. Every move is checked for residency, and the experts' bytes are read back
 * from the device. */
static void time_moves(mvm_space *space, uint64_t expert_bytes, double *one, double *hit,
                       plain_copies *pc, double *all)
{
    void *scratch = xmalloc(expert_bytes);
    for (int i = -WARMUP; i < g_reps; i++) {
        uint32_t e = (uint32_t)(i + WARMUP) % BATCH;
        check_residency(space, e, 0);
        double t0 = now_us();
        MVM(mvm_make_resident(space, 0, e, MVM_ALL_PAGES));
        double t1 = now_us();
        MVM(mvm_make_resident(space, 0, e, MVM_ALL_PAGES));
        double t2 = now_us();
        check_residency(space, e, 1);
        verify_expert(space, e, expert_bytes, scratch);
        if (pc && i >= 0)
            time_plain_copies(space, e, expert_bytes, pc, i);
        MVM(mvm_evict(space, 0, e, 0));
        if (i >= 0) {
            one[i] = t1 - t0;
            hit[i] = t2 - t1;
        }
    }
    for (int i = -WARMUP; i < g_reps; i++) {
        mvm_move *moves[BATCH];
        double t0 = now_us();
        for (uint32_t e = 0; e < BATCH; e++)
            MVM(mvm_make_resident_async(space, 0, e, MVM_ALL_PAGES, &moves[e]));
        for (uint32_t e = 0; e < BATCH; e++) {
            MVM(mvm_move_wait(moves[e], -1));
            MVM(mvm_move_release(moves[e]));
        }
        double t1 = now_us();
        for (uint32_t e = 0; e < BATCH; e++) {
            check_residency(space, e, 1);
            if (i == g_reps - 1)
                verify_expert(space, e, expert_bytes, scratch);
            MVM(mvm_evict(space, 0, e, 0));
        }
        if (i >= 0)
            all[i] = t1 - t0;
    }
    free(scratch);
}

/* Wall time of one copy split into `lanes` stripes on as many streams, as the backend's
 * copy lanes split a load (vmm/cuda_lanes.c): enqueue them all, then wait for every one. */
static double time_split_h2d_us(CUdeviceptr dst, const char *src, size_t bytes,
                                const CUstream *streams, int lanes)
{
    double t0 = now_us();
    size_t stripe = bytes / (size_t)lanes;
    for (int k = 0; k < lanes; k++) {
        size_t off = (size_t)k * stripe, len = k + 1 == lanes ? bytes - off : stripe;
        CU(cuMemcpyHtoDAsync(dst + off, src + off, len, streams[k]));
    }
    for (int k = 0; k < lanes; k++)
        CU(cuStreamSynchronize(streams[k]));
    return now_us() - t0;
}

/* The bare copy of expert_bytes split over 1..lanes streams: g_reps times each, into bare[L]
 * (bare[L][i], L = 1..lanes). */
static void time_bare_copies(uint64_t expert_bytes, int lanes, double **bare)
{
    own_context();
    CUdeviceptr dst;
    void *pinned;
    CUstream streams[8];
    CU(cuMemAlloc(&dst, expert_bytes));
    CU(cuMemHostAlloc(&pinned, expert_bytes, 0));
    fill_random(pinned, expert_bytes, 7);
    for (int k = 0; k < lanes; k++)
        CU(cuStreamCreate(&streams[k], CU_STREAM_NON_BLOCKING));
    for (int L = 1; L <= lanes; L++)
        for (int i = -WARMUP; i < g_reps; i++) {
            double us = L == 1 ? time_h2d_us(dst, pinned, expert_bytes)
                               : time_split_h2d_us(dst, (const char *)pinned, expert_bytes,
                                                   streams, L);
            if (i >= 0)
                bare[L][i] = us;
        }
    for (int k = 0; k < lanes; k++)
        CU(cuStreamDestroy(streams[k]));
    CU(cuMemFreeHost(pinned));
    CU(cuMemFree(dst));
}

void bench_make_resident(uint64_t expert_bytes, int slots)
{
    unsigned mib = (unsigned)(expert_bytes / MiB);
    mvm_space *space = filled_space(BATCH, expert_bytes, slots);
    mvm_space_info info;
    MVM(mvm_space_get_info(space, &info));
    if (mib == 2)
        printf("space: backend %s, device %s, page %llu KiB, home_mapped %d, slots %d, numa "
               "node %d\n\n", info.backend, info.device,
               (unsigned long long)(info.page_size / 1024), info.home_mapped, info.slots,
               info.numa_node);
    double *mr = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    double *hit = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    double *all = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    plain_copies pc = {(double *)xmalloc(sizeof(double) * (size_t)g_reps),
                       (double *)xmalloc(sizeof(double) * (size_t)g_reps),
                       (double *)xmalloc(sizeof(double) * (size_t)g_reps), NULL, 0};
    own_context();
    CU(cuMemHostAlloc(&pc.pinned, expert_bytes, 0));
    CU(cuMemAlloc(&pc.alloc, expert_bytes));
    fill_random(pc.pinned, expert_bytes, 9);
    double *bare[2] = {NULL, (double *)xmalloc(sizeof(double) * (size_t)g_reps)};
    time_moves(space, expert_bytes, mr, hit, &pc, all);
    MVM(mvm_space_destroy(space));
    own_context();
    CU(cuMemFreeHost(pc.pinned));
    CU(cuMemFree(pc.alloc));
    time_bare_copies(expert_bytes, 1, bare); /* the floor any make-resident is measured against */

    /* a slot space's rows are named apart (slots_make_resident_..., "... (slot space)") */
    char name[64], what[128];
#define ROW(base) (snprintf(name, sizeof name, "%s%s", slots ? "slots_" : "", base), name)
#define WHAT(text) (snprintf(what, sizeof what, "%s%s", text, slots ? " (slot space)" : ""), what)
    stats smr = summarize(mr, g_reps), sbare = summarize(bare[1], g_reps);
    add_sized_row(ROW("make_resident"), mib, "us", smr, WHAT("mvm_make_resident of an expert"));
    add_sized_row(ROW("bare_copy"), mib, "us", sbare, "cuMemcpyHtoDAsync + sync");
    add_sized_row(ROW("make_resident_hit"), mib, "us", summarize(hit, g_reps),
                  WHAT("mvm_make_resident when resident"));
    stats shome = summarize(pc.home_to_resident, g_reps);
    add_sized_row(ROW("copy_from_home"), mib, "us", shome,
                  WHAT("cuMemcpyHtoDAsync + sync of its home to where it is resident"));
    add_sized_row(ROW("make_resident_over_copy_from_home"), mib, "x",
                  single(smr.med / shome.med), WHAT("make_resident / that copy (moevm's path)"));
    add_sized_row(ROW("copy_pinned_to_resident"), mib, "us",
                  summarize(pc.pinned_to_resident, g_reps),
                  WHAT("the same from cuMemHostAlloc memory (the destination's share)"));
    add_sized_row(ROW("copy_home_to_alloc"), mib, "us", summarize(pc.home_to_alloc, g_reps),
                  WHAT("its home into cuMemAlloc memory (the source's share)"));

    add_sized_row(ROW("make_resident_over_copy"), mib, "x", single(smr.med / sbare.med),
                  WHAT("make_resident / bare copy (target <= 1.1 from 8 MiB)"));
    stats sall = summarize(all, g_reps);
    add_sized_row(ROW("make_resident_8_at_once"), mib, "us", sall,
                  WHAT("8 experts asked for at once (async), all waited for"));
    add_sized_row(ROW("make_resident_8_at_once_over_copies"), mib, "x",
                  single(sall.med / (BATCH * sbare.med)), WHAT("8 at once / 8 bare copies"));
#undef WHAT
#undef ROW
    free(all);
    free(mr);
    free(hit);
    free(pc.home_to_resident);
    free(pc.pinned_to_resident);
    free(pc.home_to_alloc);
    free(bare[1]);
}

void bench_copy_lanes(uint64_t expert_bytes)
{
    enum { MAX_LANES = 4 };
    unsigned mib = (unsigned)(expert_bytes / MiB);
    double *bare[MAX_LANES + 1] = {NULL};
    double *one = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    double *hit = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    double *all = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    for (int L = 1; L <= MAX_LANES; L++)
        bare[L] = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    time_bare_copies(expert_bytes, MAX_LANES, bare);
    double bare1 = summarize(bare[1], g_reps).med, one1 = 0, all1 = 0;
    for (int L = 1; L <= MAX_LANES; L++) {
        char lanes[4];
        snprintf(lanes, sizeof lanes, "%d", L);
        if (setenv("MOEVM_COPY_STREAMS", lanes, 1) != 0)
            die("setenv MOEVM_COPY_STREAMS failed");
        mvm_space *space = filled_space(BATCH, expert_bytes, 0);
        time_moves(space, expert_bytes, one, hit, NULL, all);
        MVM(mvm_space_destroy(space));
        stats sb = summarize(bare[L], g_reps), so = summarize(one, g_reps);
        stats sa = summarize(all, g_reps);
        if (L == 1)
            one1 = so.med, all1 = sa.med;
        char name[64];
        snprintf(name, sizeof name, "lanes%d_bare_copy_%uMiB", L, mib);
        add_row(name, "us", sb, "bare copy in %d stripe(s) on as many streams, %u MiB", L, mib);
        snprintf(name, sizeof name, "lanes%d_bare_over_one_stream_%uMiB", L, mib);
        add_row(name, "x", single(sb.med / bare1), "that / one stream");
        snprintf(name, sizeof name, "lanes%d_make_resident_%uMiB", L, mib);
        add_row(name, "us", so, "make_resident, MOEVM_COPY_STREAMS=%d", L);
        snprintf(name, sizeof name, "lanes%d_make_resident_over_one_%uMiB", L, mib);
        add_row(name, "x", single(so.med / one1), "that / MOEVM_COPY_STREAMS=1");
        snprintf(name, sizeof name, "lanes%d_8_at_once_over_one_%uMiB", L, mib);
        add_row(name, "x", single(sa.med / all1), "8 at once / MOEVM_COPY_STREAMS=1 (%.0f us)",
                sa.med);
    }
    unsetenv("MOEVM_COPY_STREAMS");
    for (int L = 1; L <= MAX_LANES; L++)
        free(bare[L]);
    free(one);
    free(hit);
    free(all);
}

/* The times of one pass of section 6. */
struct load_evict {
    stats load, evict;
};

/* One timed pass of section 6: each repetition times making an expert resident (with
 * clean_evict, its pages' digests are taken then), lets the device write it or not, and
 * times mvm_evict; then checks that the home holds what the device held (the digest kernel
 * is right: a skipped write-back lost nothing) and that the counters say which path ran. */
static load_evict time_evictions(uint64_t expert_bytes, int clean_evict, int written)
{
    enum { EXPERTS = 4 };
    mvm_space_desc d = one_layer(EXPERTS, expert_bytes);
    d.write_back = 1;
    d.clean_evict = clean_evict;
    mvm_space *space;
    MVM(mvm_space_create(&d, &space));
    mvm_space_info info;
    MVM(mvm_space_get_info(space, &info));
    if (info.clean_evict != clean_evict)
        die("clean_evict %d asked, the space has %d (MOEVM_LOG=debug says why)", clean_evict,
            info.clean_evict);
    for (uint32_t e = 0; e < EXPERTS; e++)
        fill_random(mvm_expert_home(space, 0, e), expert_bytes, 200 + e);
    void *device_bytes = xmalloc(expert_bytes);
    double *t = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    double *tl = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    for (int i = -WARMUP; i < g_reps; i++) {
        uint32_t e = (uint32_t)(i + WARMUP) % EXPERTS;
        double l0 = now_us();
        MVM(mvm_make_resident(space, 0, e, MVM_ALL_PAGES));
        double l1 = now_us();
        CUdeviceptr addr = (CUdeviceptr)mvm_expert_addr(space, 0, e);
        own_context();
        if (written)
            CU(cuMemsetD32Async(addr + expert_bytes / 2, 0x5eed0000u + (unsigned)i, 1, g_stream));
        CU(cuStreamSynchronize(g_stream));
        CU(cuMemcpyDtoH(device_bytes, addr, expert_bytes));
        mvm_stats before, after;
        MVM(mvm_space_get_stats(space, &before));
        double t0 = now_us();
        MVM(mvm_evict(space, 0, e, 0));
        double t1 = now_us();
        MVM(mvm_space_get_stats(space, &after));
        if (memcmp(device_bytes, mvm_expert_home(space, 0, e), expert_bytes) != 0)
            die("evicted expert %u (clean_evict %d, written %d): the home differs from what "
                "the device held", e, clean_evict, written);
        uint64_t pages = (expert_bytes + info.page_size - 1) / info.page_size;
        uint64_t clean = after.pages_clean - before.pages_clean;
        uint64_t want = clean_evict ? pages - (uint64_t)written : 0;
        if (clean != want)
            die("evicted expert %u (clean_evict %d, written %d): %llu pages skipped as "
                "unchanged, expected %llu", e, clean_evict, written,
                (unsigned long long)clean, (unsigned long long)want);
        if (i >= 0)
            t[i] = t1 - t0, tl[i] = l1 - l0;
    }
    MVM(mvm_space_destroy(space));
    own_context();
    load_evict r = {summarize(tl, g_reps), summarize(t, g_reps)};
    free(t);
    free(tl);
    free(device_bytes);
    return r;
}

void bench_clean_evict(uint64_t expert_bytes)
{
    unsigned mib = (unsigned)(expert_bytes / MiB);
    load_evict off = time_evictions(expert_bytes, 0, 0);
    load_evict same = time_evictions(expert_bytes, 1, 0);
    load_evict written = time_evictions(expert_bytes, 1, 1);
    const struct {
        const char *name;
        stats s;
        const char *about;
    } times[] = {
        {"evict_copy_back", off.evict, "mvm_evict, clean_evict off: every page copied home"},
        {"evict_unchanged", same.evict, "mvm_evict, device left it as loaded: digests only"},
        {"evict_one_page_written", written.evict,
         "mvm_evict, one page written: digests + that page"},
        {"load_unmarked", off.load, "mvm_make_resident, clean_evict off: copies only"},
        {"load_marked", same.load, "mvm_make_resident, clean_evict on: copies + one digest launch"},
    };
    for (size_t i = 0; i < sizeof times / sizeof times[0]; i++)
        add_sized_row(times[i].name, mib, "us", times[i].s, times[i].about);
    add_sized_row("evict_unchanged_over_copy", mib, "x", single(same.evict.med / off.evict.med),
                  "unchanged / copy back (what a clean eviction saves)");
    add_sized_row("load_marked_over_unmarked", mib, "x", single(same.load.med / off.load.med),
                  "what taking the digests adds to a load (target <= 1.05)");
}

/* ---------------------------------------------------------------------------------------- */
/* 7. Where a make-resident's time goes: the cuda backend's steps for 64 pages of 2 MiB       */
/* ---------------------------------------------------------------------------------------- */

/* n one-page handles of a kind, each mapped at its page of a view (as vmm/backend_cuda.c
 * lays out the device pool and the HOST_NUMA homes). */
typedef struct page_set {
    CUmemGenericAllocationHandle *h;
    CUdeviceptr view;
    size_t n, page;
} page_set;

static page_set page_set_create(const CUmemAllocationProp *prop, size_t n, size_t page)
{
    page_set s = {(CUmemGenericAllocationHandle *)xmalloc(n * sizeof(CUmemGenericAllocationHandle)),
                  0, n, page};
    /* Homes are written by the CPU through their view: grant their node access too. */
    CUmemAccessDesc acc[2] = {device_rw(), device_rw()};
    acc[1].location = prop->location;
    int n_acc = prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ? 2 : 1;
    CU(cuMemAddressReserve(&s.view, n * page, page, 0, 0));
    for (size_t i = 0; i < n; i++) {
        CU(cuMemCreate(&s.h[i], page, prop, 0));
        CU(cuMemMap(s.view + i * page, page, 0, s.h[i], 0));
    }
    CU(cuMemSetAccess(s.view, n * page, acc, n_acc));
    return s;
}

static void page_set_destroy(page_set *s)
{
    for (size_t i = 0; i < s->n; i++) {
        CU(cuMemUnmap(s->view + i * s->page, s->page));
        CU(cuMemRelease(s->h[i]));
    }
    CU(cuMemAddressFree(s->view, s->n * s->page));
    free(s->h);
}

/* Points every page of the expert range at `to`'s handles, page by page: unmap, map and
 * grant access, as a load (to = pool) or an eviction (to = homes) does. */
static double remap_all_us(CUdeviceptr expert, const page_set *to)
{
    CUmemAccessDesc acc = device_rw();
    double t0 = now_us();
    for (size_t i = 0; i < to->n; i++) {
        CUdeviceptr va = expert + i * to->page;
        CU(cuMemUnmap(va, to->page));
        CU(cuMemMap(va, to->page, 0, to->h[i], 0));
        CU(cuMemSetAccess(va, to->page, &acc, 1));
    }
    return now_us() - t0;
}

/* One copy per page, all queued on the stream, then one wait. */
static double copy_pages_us(CUdeviceptr dst, const void *src, size_t n, size_t page)
{
    double t0 = now_us();
    for (size_t i = 0; i < n; i++)
        CU(cuMemcpyHtoDAsync(dst + i * page, (const char *)src + i * page, page, g_stream));
    CU(cuStreamSynchronize(g_stream));
    return now_us() - t0;
}

void bench_make_resident_steps(void)
{
    int supported = 0, numa_id = -1;
    CU(cuDeviceGetAttribute(&supported,
                            CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, g_dev));
    CU(cuDeviceGetAttribute(&numa_id, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, g_dev));
    if (!supported) {
        printf("HOST_NUMA VMM is not supported on this device: skipped.\n\n");
        return;
    }
    enum { PAGES = 64 };
    CUmemAllocationProp dprop = device_prop(), hprop = device_prop();
    hprop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    hprop.location.id = numa_id < 0 ? 0 : numa_id;
    size_t page = round_up(round_up(2 * MiB, granularity(&hprop)), granularity(&dprop));
    size_t bytes = PAGES * page;
    page_set pool = page_set_create(&dprop, PAGES, page);
    page_set home = page_set_create(&hprop, PAGES, page);
    fill_random((void *)(uintptr_t)home.view, bytes, 11); /* the CPU writes homes through the view */

    /* The expert's range starts on its homes, as a non-resident expert does. */
    CUdeviceptr expert;
    CUmemAccessDesc acc = device_rw();
    CU(cuMemAddressReserve(&expert, bytes, page, 0, 0));
    for (size_t i = 0; i < PAGES; i++)
        CU(cuMemMap(expert + i * page, page, 0, home.h[i], 0));
    CU(cuMemSetAccess(expert, bytes, &acc, 1));

    void *pinned;
    CU(cuMemHostAlloc(&pinned, bytes, 0));
    fill_random(pinned, bytes, 12);

    double *t[7];
    for (int k = 0; k < 7; k++)
        t[k] = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    for (int i = -WARMUP; i < g_reps; i++) {
        double v[7];
        v[0] = copy_pages_us(pool.view, (const void *)(uintptr_t)home.view, PAGES, page);
        v[1] = copy_pages_us(pool.view, pinned, PAGES, page);
        v[2] = copy_pages_us(pool.view, pinned, 1, bytes);
        v[3] = remap_all_us(expert, &pool); /* a load: homes -> pool */
        v[4] = remap_all_us(expert, &home); /* an eviction: pool -> homes */
        /* A load whose remaps run while its copies do: the driver's VMM calls and the DMA
         * overlap only if the driver lets them. */
        double t0 = now_us();
        for (size_t p = 0; p < PAGES; p++)
            CU(cuMemcpyHtoDAsync(pool.view + p * page,
                                 (const char *)(uintptr_t)home.view + p * page, page, g_stream));
        double queued = now_us();
        remap_all_us(expert, &pool);
        CU(cuStreamSynchronize(g_stream));
        v[5] = now_us() - t0;
        v[6] = queued - t0;
        remap_all_us(expert, &home);
        if (i >= 0)
            for (int k = 0; k < 7; k++)
                t[k][i] = v[k];
    }
    own_context();
    static const struct {
        const char *name, *what;
    } rows[7] = {
        {"copy_64_pages_from_homes", "64 copies of a page, HOST_NUMA homes -> pool view"},
        {"copy_64_pages_from_pinned", "64 copies of a page, cuMemHostAlloc -> pool view"},
        {"copy_one_from_pinned", "one copy of all 64 pages, cuMemHostAlloc -> pool view"},
        {"remap_64_pages_load", "64 x (unmap home, map pool handle, set access): a load"},
        {"remap_64_pages_evict", "64 x (unmap pool, map home handle, set access): an evict"},
        {"copy_and_remap_overlapped", "64 copies from homes queued, then the load's remaps, then wait"},
        {"copy_queue_64", "queueing the 64 copies alone (host time)"},
    };
    for (int k = 0; k < 7; k++)
        add_row(rows[k].name, "us", summarize(t[k], g_reps), "%s (%zu MiB)", rows[k].what,
                (size_t)(bytes / MiB));
    double copy = summarize(t[0], g_reps).med, remap = summarize(t[3], g_reps).med;
    add_row("overlap_saving", "x", single((copy + remap) / summarize(t[5], g_reps).med),
            "(copies + load remaps) / the two overlapped: 2 = full overlap, 1 = none");

    for (int k = 0; k < 7; k++)
        free(t[k]);
    CU(cuMemFreeHost(pinned));
    for (size_t i = 0; i < PAGES; i++)
        CU(cuMemUnmap(expert + i * page, page));
    CU(cuMemAddressFree(expert, bytes));
    page_set_destroy(&home);
    page_set_destroy(&pool);
}

/* Section 8: an on-demand load asked for while a prefetch of another expert is on the bus.
 * With the prefetch one piece (MOEVM_COPY_PIECE=0) it waits for the rest of the prefetch;
 * in pieces (the default, 4 MiB) it overtakes after at most two of them (docs/architecture.md,
 * "On-demand loads overtake prefetches"). Times the make-resident, and the prefetch's own
 * time to land, which the pieces lengthen by one event wait each. */
#define OVERTAKE_DELAY_US 200.0 /* the worker's wake-up, far below a 32 MiB copy (~600 us) */

void bench_overtake(uint64_t expert_bytes)
{
    unsigned mib = (unsigned)(expert_bytes / MiB);
    static const char *const pieces[2] = {"0", "4M"};
    for (int k = 0; k < 2; k++) {
        setenv("MOEVM_COPY_PIECE", pieces[k], 1);
        mvm_space_desc d = one_layer(2, expert_bytes);
        mvm_space *space;
        MVM(mvm_space_create(&d, &space));
        for (uint32_t e = 0; e < 2; e++)
            fill_random(mvm_expert_home(space, 0, e), expert_bytes, 200 + e);
        void *scratch = xmalloc(expert_bytes);
        double *demand = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
        double *pf = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
        for (int i = -WARMUP; i < g_reps; i++) {
            mvm_move *m;
            double tp = now_us();
            MVM(mvm_prefetch(space, 0, 0, MVM_ALL_PAGES, &m));
            /* Asked at once, the demand would overtake a prefetch the worker has not begun
             * (2026-11-24: both timings were one copy): wait until its copy is on the bus. */
            while (now_us() - tp < OVERTAKE_DELAY_US)
                ;
            double t0 = now_us();
            MVM(mvm_make_resident(space, 0, 1, MVM_ALL_PAGES));
            double t1 = now_us();
            MVM(mvm_move_wait(m, -1));
            double t2 = now_us();
            MVM(mvm_move_release(m));
            for (uint32_t e = 0; e < 2; e++) {
                check_residency(space, e, 1);
                if (i == g_reps - 1)
                    verify_expert(space, e, expert_bytes, scratch);
                MVM(mvm_evict(space, 0, e, 0));
            }
            if (i >= 0) {
                demand[i] = t1 - t0;
                pf[i] = t2 - tp;
            }
        }
        MVM(mvm_space_destroy(space));
        own_context();
        add_sized_row(k ? "demand_behind_prefetch_pieces" : "demand_behind_prefetch_whole", mib,
                      "us", summarize(demand, g_reps),
                      k ? "make_resident asked 200 us into a prefetch in 4 MiB pieces"
                        : "make_resident asked 200 us into a prefetch in one piece");
        add_sized_row(k ? "prefetch_pieces" : "prefetch_whole", mib, "us",
                      summarize(pf, g_reps), "the prefetch until it landed");
        free(demand);
        free(pf);
        free(scratch);
    }
    unsetenv("MOEVM_COPY_PIECE");
}
