/*
 * The cuda backend: the space on the CUDA driver's virtual memory management API.
 *
 *   reserve      cuMemAddressReserve
 *   device pool  one cuMemCreate(DEVICE) handle per chunk, created once (creation is slow),
 *                all mapped permanently into a private "pool view" range: copies land there,
 *                so a chunk is complete before it ever appears at an expert address
 *   host homes   where the device supports HOST_NUMA VMM (attribute 141): one
 *                cuMemCreate(HOST_NUMA) handle per page on the GPU's node, mapped into a
 *                home view with CPU and device access; non-resident pages of the space map
 *                these same handles, so kernels can read any expert (over PCIe).
 *                Otherwise: mmap (advised for huge pages) + parallel first touch on the
 *                GPU's node + cuMemHostRegister, and non-resident pages stay unmapped. Either way a kernel can read a home in
 *                place (the home view's device access, or the registered memory's device
 *                pointer): home_device_addr.
 *   map          cuMemUnmap (if replacing) + cuMemMap + cuMemSetAccess; callers guarantee no
 *                kernel reads the page meanwhile (pins, unpin_after events)
 *   copy         cuMemcpyHtoDAsync on a dedicated non-blocking stream, or split across
 *                several (MOEVM_COPY_STREAMS, vmm/cuda_lanes.c) that join it before a fence;
 *                in write_back spaces a batch of copies is followed by one kernel that
 *                digests its chunks, so an eviction can tell whether the device changed
 *                them (vmm/cuda_digest.c)
 *
 * The driver is loaded with dlopen (MOEVM_CUDA_LIBRARY, default libcuda.so.1) so libmoevm
 * loads and runs on machines with no GPU; in CI that library is tests/fakecuda. The library
 * is never dlclose'd: unloading the driver under live threads is a known crash.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "vmm/backend_cuda.h"
#include "vmm/error.h"
#include "vmm/options.h"

/* n one-page handles, all mapped into a private range: the HOST_NUMA homes (the CPU writes
 * the weights through its view). One page a handle, so that any page can be mapped at its
 * expert's address on its own. */
struct handle_view {
    CUmemGenericAllocationHandle *h;
    size_t n, page;
    CUdeviceptr view;
};

struct mvm_home {
    bool vmm;              /* HOST_NUMA handles (else registered host memory) */
    struct handle_view hv; /* vmm */
    size_t n, page;
    void *host;
    bool registered;
    CUdeviceptr dev; /* where the device reads home page 0 in place (0: it cannot) */
};

/* The device pool: a view reserved for every chunk, and the slabs that back runs of it.
 * slab[k] is the handle of the slab that starts at chunk k (0 elsewhere). */
struct mvm_pool {
    CUdeviceptr view;
    size_t n, page;
    size_t gran; /* the device's granularity: a slab's memory and the view are whole
                    granules, whatever the chunks (a slot space's may be smaller) */
    CUmemGenericAllocationHandle *slab;
    cuda_digest *digest; /* clean states of the chunks (track_clean), or NULL */
};

struct mvm_event {
    CUevent ev;
    struct mvm_event *next; /* in c->events_free */
};

static cuda_backend *cb(mvm_backend *b) { return (cuda_backend *)b; }

mvm_status mvm_cu_fail(const struct cu_api *cu, CUresult r, const char *what)
{
    const char *name = NULL;
    if (!cu->GetErrorName || cu->GetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "unknown CUDA error";
    mvm_status st = r == CUDA_ERROR_OUT_OF_MEMORY ? MVM_ERR_NOMEM : MVM_ERR_BACKEND;
    return mvm_fail(st, "%s failed: %s (%d)", what, name, (int)r);
}

static mvm_status use_ctx(cuda_backend *c)
{
    CU(c, c->cu.CtxSetCurrent(c->ctx), "cuCtxSetCurrent");
    return MVM_OK;
}

/* Pinned physical memory at a location: the device, or a host NUMA node. */
static CUmemAllocationProp alloc_prop(CUmemLocationType type, int id)
{
    CUmemAllocationProp p = {0};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = type;
    p.location.id = id;
    return p;
}

static CUmemAllocationProp device_prop(cuda_backend *c)
{
    return alloc_prop(CU_MEM_LOCATION_TYPE_DEVICE, c->dev);
}

static CUmemAllocationProp host_numa_prop(cuda_backend *c)
{
    return alloc_prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, c->host_numa_id);
}

static CUmemAccessDesc device_rw(cuda_backend *c)
{
    CUmemAccessDesc d = {0};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = c->dev;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return d;
}

static void cuda_destroy(mvm_backend *b)
{
    cuda_backend *c = cb(b);
    if (c->copy_stream) {
        c->cu.CtxSetCurrent(c->ctx);
        mvm_cuda_lanes_close(c);
        c->cu.StreamDestroy(c->copy_stream);
    }
    for (mvm_event *e = c->events_free, *next; e; e = next) {
        next = e->next;
        c->cu.EventDestroy(e->ev);
        free(e);
    }
    pthread_mutex_destroy(&c->events_lock);
    if (c->ctx)
        c->cu.PrimaryCtxRelease(c->dev);
    free(c);
}

static mvm_status cuda_thread_init(mvm_backend *b) { return use_ctx(cb(b)); }

/* The driver reserves at power-of-two alignments only: pages of several granules
 * (MOEVM_PAGE_SIZE=6M) are aligned to the largest power of two that divides them. */
static size_t va_align(size_t page) { return page & (~page + 1); }

static mvm_status cuda_reserve(mvm_backend *b, size_t bytes, size_t align, uint64_t *va)
{
    cuda_backend *c = cb(b);
    CUdeviceptr p;
    CU(c, c->cu.MemAddressReserve(&p, bytes, va_align(align), 0, 0), "cuMemAddressReserve");
    *va = p;
    return MVM_OK;
}

static void cuda_unreserve(mvm_backend *b, uint64_t va, size_t bytes)
{
    cuda_backend *c = cb(b);
    CUresult r = c->cu.MemAddressFree(va, bytes);
    if (r != CUDA_SUCCESS)
        mvm_log(MVM_LOG_WARN, "%s", (mvm_cu_fail(&c->cu, r, "cuMemAddressFree"), mvm_last_error()));
}

/* Maps `n` handles, one page each, at consecutive pages from va, then grants access to the
 * whole run in one call (one call over a range is much cheaper than one per page). */
static mvm_status map_handles(cuda_backend *c, CUdeviceptr va, size_t page,
                              const CUmemGenericAllocationHandle *h, size_t n,
                              const CUmemAccessDesc *access, size_t n_access)
{
    CUresult r = CUDA_SUCCESS;
    size_t mapped = 0;
    while (mapped < n && (r = c->cu.MemMap(va + mapped * page, page, 0, h[mapped], 0)) ==
                             CUDA_SUCCESS)
        mapped++;
    if (r == CUDA_SUCCESS && (r = c->cu.MemSetAccess(va, n * page, access, n_access)) ==
                                 CUDA_SUCCESS)
        return MVM_OK;
    for (size_t i = 0; i < mapped; i++) /* leave the range as we found it */
        c->cu.MemUnmap(va + i * page, page);
    return mvm_cu_fail(&c->cu, r, mapped < n ? "cuMemMap" : "cuMemSetAccess");
}

static void unmap_pages(cuda_backend *c, CUdeviceptr va, size_t bytes, size_t page)
{
    for (size_t off = 0; off < bytes; off += page)
        c->cu.MemUnmap(va + off, page);
}

static void release_handles(cuda_backend *c, CUmemGenericAllocationHandle *h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        c->cu.MemRelease(h[i]);
}

/* Creates n one-page handles and maps them all into a fresh reservation; on failure
 * releases what it made. */
static mvm_status handle_view_create(cuda_backend *c, const CUmemAllocationProp *prop, size_t n,
                                     size_t page, const CUmemAccessDesc *access,
                                     size_t n_access, struct handle_view *hv)
{
    *hv = (struct handle_view){.n = n, .page = page};
    if (!(hv->h = calloc(n, sizeof *hv->h)))
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for %zu allocation handles", n);
    size_t made = 0;
    CUresult r = CUDA_SUCCESS;
    while (made < n && (r = c->cu.MemCreate(&hv->h[made], page, prop, 0)) == CUDA_SUCCESS)
        made++;
    mvm_status st = MVM_OK;
    if (made < n)
        st = mvm_cu_fail(&c->cu, r, prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                               ? "cuMemCreate (device chunk)"
                               : "cuMemCreate (HOST_NUMA home page)");
    else if ((r = c->cu.MemAddressReserve(&hv->view, n * page, va_align(page), 0, 0)) !=
             CUDA_SUCCESS)
        st = mvm_cu_fail(&c->cu, r, "cuMemAddressReserve (view)");
    else if ((st = map_handles(c, hv->view, page, hv->h, n, access, n_access)) != MVM_OK)
        c->cu.MemAddressFree(hv->view, n * page);
    if (st != MVM_OK) {
        release_handles(c, hv->h, made);
        free(hv->h);
        hv->h = NULL;
    }
    return st;
}

static void handle_view_destroy(cuda_backend *c, struct handle_view *hv)
{
    unmap_pages(c, hv->view, hv->n * hv->page, hv->page);
    c->cu.MemAddressFree(hv->view, hv->n * hv->page);
    release_handles(c, hv->h, hv->n);
    free(hv->h);
}

static mvm_status home_create_vmm(cuda_backend *c, mvm_home *h)
{
    CUmemAllocationProp prop = host_numa_prop(c);
    CUmemAccessDesc access[2] = {device_rw(c), device_rw(c)};
    access[1].location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA; /* the CPU writes the weights */
    access[1].location.id = c->host_numa_id;
    mvm_status st = handle_view_create(c, &prop, h->n, h->page, access, 2, &h->hv);
    if (st != MVM_OK)
        return st;
    /* Not zeroed: a home's bytes are unspecified until written, as cuMemCreate's are (the
     * engine writes each expert before its first move; under the interposer, as a device
     * allocation). A memset here committed every home page at creation (the interposer's
     * heap at its first allocation) and, under ThreadSanitizer, its shadow too. */
    h->host = (void *)(uintptr_t)h->hv.view;
    h->dev = h->hv.view; /* the view grants the device access too */
    return MVM_OK;
}

static mvm_status home_create_registered(cuda_backend *c, mvm_home *h, const mvm_topo *topo)
{
    size_t bytes = h->n * h->page;
    /* page-aligned, as mvm_expert_home promises (mmap alone aligns to 4 KiB only) */
    h->host = mvm_mmap_aligned(bytes, h->page, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS);
    if (h->host == MAP_FAILED)
        return mvm_fail(MVM_ERR_NOMEM, "mmap of %zu bytes for host homes failed", bytes);
    /* the CPU computes misses from them: huge pages where granted, before they are touched */
    c->base.home_page = mvm_advise_huge(&c->base, h->host, bytes, h->page, 0);
    /* Placement must precede registration: registered pages can no longer migrate. */
    if (topo)
        mvm_topo_place(topo, h->host, bytes, 0);
    CUresult r = c->cu.MemHostRegister(h->host, bytes,
                                       CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    h->registered = r == CUDA_SUCCESS;
    if (!h->registered) {
        mvm_cu_fail(&c->cu, r, "cuMemHostRegister");
        mvm_log(MVM_LOG_WARN, "%s; host homes stay pageable and copies will be slower",
                mvm_last_error());
        return MVM_OK;
    }
    /* The device's pointer to them (the host's own under unified addressing, but only this
     * one is promised). Without it nothing reads the homes in place; moves are unaffected. */
    if ((r = c->cu.MemHostGetDevicePointer(&h->dev, h->host, 0)) != CUDA_SUCCESS) {
        h->dev = 0;
        mvm_cu_fail(&c->cu, r, "cuMemHostGetDevicePointer");
        mvm_log(MVM_LOG_INFO, "%s; experts are not read in place from their homes",
                mvm_last_error());
    }
    return MVM_OK;
}

static mvm_status cuda_home_create(mvm_backend *b, size_t n_pages, size_t page_size,
                                   size_t item_pages, size_t item_used, const mvm_topo *topo,
                                   mvm_home **out, void **host)
{
    (void)item_pages, (void)item_used; /* pinned memory: every page is memory anyway */
    cuda_backend *c = cb(b);
    mvm_status st = mvm_topo_check_memory("the space's pinned host homes",
                                          (uint64_t)n_pages * page_size, 0);
    if (st == MVM_OK)
        st = use_ctx(c);
    if (st != MVM_OK)
        return st;
    mvm_home *h = calloc(1, sizeof *h);
    if (!h)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the host home");
    h->n = n_pages;
    h->page = page_size;
    h->vmm = b->home_mappable;
    if (c->host_numa_id < 0)
        c->host_numa_id = topo && topo->numa_node >= 0 ? topo->numa_node : 0;
    st = h->vmm ? home_create_vmm(c, h) : home_create_registered(c, h, topo);
    if (st != MVM_OK) {
        free(h);
        return st;
    }
    *out = h;
    *host = h->host;
    return MVM_OK;
}

static void cuda_home_destroy(mvm_backend *b, mvm_home *h)
{
    cuda_backend *c = cb(b);
    if (!h)
        return;
    if (h->vmm) {
        handle_view_destroy(c, &h->hv);
    } else {
        if (h->registered && use_ctx(c) == MVM_OK)
            c->cu.MemHostUnregister(h->host);
        munmap(h->host, h->n * h->page);
    }
    free(h);
}

static uint64_t cuda_home_device_addr(mvm_backend *b, mvm_home *h)
{
    (void)b;
    return h->dev;
}

static mvm_status cuda_map_home(mvm_backend *b, uint64_t va, mvm_home *h, size_t first,
                                size_t n_pages, bool replace)
{
    cuda_backend *c = cb(b);
    if (!h->vmm)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "host homes cannot be mapped on this device");
    if (replace)
        for (size_t i = 0; i < n_pages; i++)
            CU(c, c->cu.MemUnmap(va + i * h->page, h->page), "cuMemUnmap");
    CUmemAccessDesc access = device_rw(c);
    return map_handles(c, va, h->page, h->hv.h + first, n_pages, &access, 1);
}

/* Bytes of n chunks rounded up to whole granules: what a slab allocates and maps (chunks of
 * a granule or more are whole granules already). */
static size_t granules(const mvm_pool *p, size_t n)
{
    return (n * p->page + p->gran - 1) / p->gran * p->gran;
}

static mvm_status cuda_pool_create(mvm_backend *b, size_t n_chunks, size_t page_size,
                                   mvm_pool **out)
{
    cuda_backend *c = cb(b);
    mvm_status st = use_ctx(c);
    if (st != MVM_OK)
        return st;
    size_t free_b = 0, total_b = 0;
    CU(c, c->cu.MemGetInfo(&free_b, &total_b), "cuMemGetInfo");
    if (n_chunks * page_size > free_b)
        return mvm_fail(MVM_ERR_NOSPACE, "device budget of %zu MiB exceeds the %zu MiB free on "
                        "the device (of %zu MiB)", n_chunks * page_size >> 20, free_b >> 20,
                        total_b >> 20);
    mvm_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->slab = calloc(n_chunks, sizeof *p->slab))) {
        free(p);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the device pool");
    }
    p->n = n_chunks;
    p->page = page_size;
    p->gran = b->granularity;
    const size_t align = va_align(page_size > p->gran ? page_size : p->gran);
    CUresult r = c->cu.MemAddressReserve(&p->view, granules(p, n_chunks), align, 0, 0);
    if (r != CUDA_SUCCESS) {
        free(p->slab);
        free(p);
        return mvm_cu_fail(&c->cu, r, "cuMemAddressReserve (pool view)");
    }
    if (b->track_clean && !(p->digest = mvm_cuda_digest_open(c, n_chunks, p->view, page_size)))
        b->track_clean = false;
    *out = p;
    return MVM_OK;
}

/* A slab the view cannot unmap stays whole (mapped, its handle kept), so the space can go
 * on using it; one the driver will not release once unmapped is lost to the device, and
 * said so. */
static mvm_status cuda_slab_destroy(mvm_backend *b, mvm_pool *p, size_t first, size_t n)
{
    cuda_backend *c = cb(b);
    CU(c, c->cu.MemUnmap(p->view + first * p->page, granules(p, n)), "cuMemUnmap (slab)");
    CUresult r = c->cu.MemRelease(p->slab[first]);
    if (r != CUDA_SUCCESS)
        mvm_log(MVM_LOG_WARN, "releasing a slab of %zu chunks: %s", n,
                (mvm_cu_fail(&c->cu, r, "cuMemRelease (slab)"), mvm_last_error()));
    p->slab[first] = 0;
    return MVM_OK;
}

static void cuda_pool_destroy(mvm_backend *b, mvm_pool *p)
{
    cuda_backend *c = cb(b);
    if (!p)
        return;
    if (c->marks_due == p->digest)
        c->marks_due = NULL;
    mvm_cuda_digest_close(c, p->digest);
    for (size_t k = 0; k < p->n; k++) /* the space destroys its slabs; this is a backstop */
        if (p->slab[k])
            mvm_log(MVM_LOG_WARN, "pool destroyed with a slab at chunk %zu", k);
    c->cu.MemAddressFree(p->view, granules(p, p->n));
    free(p->slab);
    free(p);
}

/* One cuMemCreate for the slab and one mapping of it in the view, where copies land. */
static mvm_status cuda_slab_create(mvm_backend *b, mvm_pool *p, size_t first, size_t n)
{
    cuda_backend *c = cb(b);
    mvm_status st = use_ctx(c);
    if (st != MVM_OK)
        return st;
    CUmemAllocationProp prop = device_prop(c);
    CUmemAccessDesc access = device_rw(c);
    CUmemGenericAllocationHandle h;
    CUresult r = c->cu.MemCreate(&h, granules(p, n), &prop, 0);
    if (r != CUDA_SUCCESS)
        return mvm_cu_fail(&c->cu, r, "cuMemCreate (device slab)");
    if ((st = map_handles(c, p->view + first * p->page, granules(p, n), &h, 1, &access, 1)) !=
        MVM_OK) {
        c->cu.MemRelease(h);
        return st;
    }
    p->slab[first] = h;
    return MVM_OK;
}

static mvm_status cuda_map_chunks(mvm_backend *b, uint64_t va, mvm_pool *p, size_t first,
                                  size_t n, bool replace)
{
    cuda_backend *c = cb(b);
    if (!p->slab[first])
        return mvm_fail(MVM_ERR_INVALID, "no slab starts at chunk %zu", first);
    if (replace) /* the homes: a mapping per page */
        for (size_t i = 0; i < n; i++)
            CU(c, c->cu.MemUnmap(va + i * p->page, p->page), "cuMemUnmap (home page)");
    CUmemAccessDesc access = device_rw(c);
    return map_handles(c, va, n * p->page, &p->slab[first], 1, &access, 1);
}

/* [va, va + bytes) is whole mappings of `piece` bytes. */
static mvm_status cuda_unmap(mvm_backend *b, uint64_t va, size_t bytes, size_t piece)
{
    cuda_backend *c = cb(b);
    for (size_t off = 0; off < bytes; off += piece)
        CU(c, c->cu.MemUnmap(va + off, piece), "cuMemUnmap");
    return MVM_OK;
}

/* The marks of the chunks just loaded go after their copies, in one launch, on the copy
 * stream once the lanes have joined it; the wait (or the fence) covers them, so each mark is
 * complete before its page is mapped for the program's kernels. A failed join leaves the
 * marks due: they go out at the next join that succeeds, after the loads they describe. */
static mvm_status close_loads(cuda_backend *c)
{
    mvm_status st = mvm_cuda_lanes_join(c);
    if (st != MVM_OK)
        return st;
    mvm_cuda_digest_flush(c, c->marks_due);
    c->marks_due = NULL;
    return MVM_OK;
}

static mvm_status cuda_copy_start(mvm_backend *b, mvm_pool *p, size_t chunk, const void *src,
                                  size_t len)
{
    cuda_backend *c = cb(b);
    if (p->digest) { /* the chunk is "changed" until its mark, queued by copy_wait */
        if (c->marks_due && c->marks_due != p->digest) {
            mvm_status st = close_loads(c);
            if (st != MVM_OK)
                return st;
        }
        c->marks_due = p->digest;
        for (size_t k = chunk; k < chunk + (len + p->page - 1) / p->page; k++)
            mvm_cuda_digest_loaded(p->digest, k);
    }
    return mvm_cuda_lanes_copy(c, p->view + chunk * p->page, src, len, p->page);
}

static mvm_status cuda_copy_to(mvm_backend *b, mvm_pool *p, uint64_t offset, const void *src,
                               size_t len)
{
    cuda_backend *c = cb(b);
    if (p->digest)
        return mvm_fail(MVM_ERR_INVALID, "a copy into a pool that tracks clean chunks must "
                        "start at a chunk (copy_start)");
    return mvm_cuda_lanes_copy(c, p->view + offset, src, len, p->page);
}

/* After a failed join the lanes are waited for one by one, so that nothing is still landing
 * when the caller gives the chunks back. */
static mvm_status cuda_copy_wait(mvm_backend *b)
{
    cuda_backend *c = cb(b);
    mvm_status st = close_loads(c);
    mvm_status lanes = mvm_cuda_lanes_sync(c);
    CU(c, c->cu.StreamSynchronize(c->copy_stream), "cuStreamSynchronize (copy stream)");
    return st != MVM_OK ? st : lanes;
}

/* An event recorded on stream: one given back before (cuda_event_destroy), else a new one. */
static mvm_status record_event(cuda_backend *c, CUstream stream, const char *what,
                               mvm_event **out)
{
    pthread_mutex_lock(&c->events_lock);
    mvm_event *e = c->events_free;
    if (e)
        c->events_free = e->next;
    pthread_mutex_unlock(&c->events_lock);
    const char *call = "cuEventRecord";
    CUresult r = CUDA_SUCCESS;
    if (!e) {
        if (!(e = malloc(sizeof *e)))
            return mvm_fail(MVM_ERR_NOMEM, "out of memory for an event");
        call = "cuEventCreate";
        r = c->cu.EventCreate(&e->ev, CU_EVENT_DISABLE_TIMING);
        call = r == CUDA_SUCCESS ? "cuEventRecord" : call;
    }
    if (r == CUDA_SUCCESS && (r = c->cu.EventRecord(e->ev, stream)) != CUDA_SUCCESS)
        c->cu.EventDestroy(e->ev);
    if (r != CUDA_SUCCESS) {
        free(e);
        char named[64];
        snprintf(named, sizeof named, "%s (%s)", call, what);
        return mvm_cu_fail(&c->cu, r, named);
    }
    *out = e;
    return MVM_OK;
}

static mvm_status cuda_copy_fence(mvm_backend *b, mvm_event **out)
{
    cuda_backend *c = cb(b);
    mvm_status st = close_loads(c);
    return st != MVM_OK ? st : record_event(c, c->copy_stream, "copy fence", out);
}

/* Synchronous: the page is about to be remapped to its home, so the bytes must be there. */
static mvm_status cuda_copy_back(mvm_backend *b, mvm_pool *p, size_t chunk, void *dst,
                                 size_t len)
{
    cuda_backend *c = cb(b);
    mvm_status st = use_ctx(c);
    if (st != MVM_OK)
        return st;
    CU(c, c->cu.MemcpyDtoH(dst, p->view + chunk * p->page, len), "cuMemcpyDtoH (write-back)");
    return MVM_OK;
}

static int cuda_unchanged(mvm_backend *b, mvm_pool *p, const size_t *chunks, size_t n,
                          bool *same)
{
    cuda_backend *c = cb(b);
    memset(same, 0, n * sizeof *same);
    if (!p->digest)
        return 0;
    if (use_ctx(c) != MVM_OK)
        return -1;
    return mvm_cuda_digest_unchanged(c, p->digest, chunks, n, same);
}

static mvm_status cuda_event_record(mvm_backend *b, void *stream, mvm_event **out)
{
    cuda_backend *c = cb(b);
    mvm_status st = use_ctx(c);
    return st != MVM_OK ? st
                        : record_event(c, (CUstream)stream, "unpin_after", out);
}

static int cuda_event_done(mvm_backend *b, mvm_event *e)
{
    cuda_backend *c = cb(b);
    CUresult r = c->cu.EventQuery(e->ev);
    if (r == CUDA_SUCCESS)
        return 1;
    if (r == CUDA_ERROR_NOT_READY)
        return 0;
    mvm_cu_fail(&c->cu, r, "cuEventQuery");
    return -1;
}

static mvm_status cuda_event_wait(mvm_backend *b, mvm_event *e)
{
    cuda_backend *c = cb(b);
    if (e)
        CU(c, c->cu.EventSynchronize(e->ev), "cuEventSynchronize (copy fence)");
    return MVM_OK;
}

static mvm_status cuda_stream_wait(mvm_backend *b, mvm_event *e, void *stream)
{
    cuda_backend *c = cb(b);
    mvm_status st = e ? use_ctx(c) : MVM_OK;
    if (st != MVM_OK)
        return st;
    if (e)
        CU(c, c->cu.StreamWaitEvent((CUstream)stream, e->ev, 0),
           "cuStreamWaitEvent (a reader's stream after a copy fence)");
    return MVM_OK;
}

/* Kept for the next record_event: the event's last record is done or no longer waited for,
 * and recording it again replaces it. */
static void cuda_event_destroy(mvm_backend *b, mvm_event *e)
{
    if (!e)
        return;
    cuda_backend *c = cb(b);
    pthread_mutex_lock(&c->events_lock);
    e->next = c->events_free;
    c->events_free = e;
    pthread_mutex_unlock(&c->events_lock);
}

static uint64_t cuda_chunk_addr(mvm_backend *b, mvm_pool *p, size_t chunk)
{
    (void)b;
    return p->view + chunk * p->page;
}

static const mvm_backend_ops cuda_ops = {
    .destroy = cuda_destroy,
    .thread_init = cuda_thread_init,
    .reserve = cuda_reserve,
    .unreserve = cuda_unreserve,
    .home_create = cuda_home_create,
    .home_destroy = cuda_home_destroy,
    .home_device_addr = cuda_home_device_addr,
    .map_home = cuda_map_home,
    .pool_create = cuda_pool_create,
    .pool_destroy = cuda_pool_destroy,
    .slab_create = cuda_slab_create,
    .slab_destroy = cuda_slab_destroy,
    .map_chunks = cuda_map_chunks,
    .unmap = cuda_unmap,
    .copy_start = cuda_copy_start,
    .copy_to = cuda_copy_to,
    .copy_wait = cuda_copy_wait,
    .copy_fence = cuda_copy_fence,
    .copy_back = cuda_copy_back,
    .unchanged = cuda_unchanged,
    .event_record = cuda_event_record,
    .event_done = cuda_event_done,
    .event_wait = cuda_event_wait,
    .stream_wait = cuda_stream_wait,
    .event_destroy = cuda_event_destroy,
    .chunk_addr = cuda_chunk_addr,
};

mvm_status mvm_cu_load(struct cu_api *cu)
{
    mvm_option_value lib;
    mvm_status st = mvm_option_read(&mvm_opt_cuda_library, &lib);
    if (st != MVM_OK)
        return st;
    void *h = dlopen(lib.s, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "no CUDA driver: %s", dlerror());
#define X(field, sym, params)                                                                   \
    if (!(cu->field = (CUresult(*) params)dlsym(h, sym)))                                       \
        return mvm_fail(MVM_ERR_UNSUPPORTED, "%s lacks %s (driver too old for CUDA VMM?)",      \
                        lib.s, sym);
    CU_API(X)
#undef X
    return MVM_OK;
}

mvm_status mvm_cu_device(struct cu_api *cu, int ordinal, CUdevice *out)
{
    int count = 0;
    CUresult r = cu->Init(0);
    if (r != CUDA_SUCCESS)
        return mvm_cu_fail(cu, r, "cuInit");
    if ((r = cu->DeviceGetCount(&count)) != CUDA_SUCCESS)
        return mvm_cu_fail(cu, r, "cuDeviceGetCount");
    if (ordinal < 0 || ordinal >= count)
        return mvm_fail(MVM_ERR_RANGE, "CUDA device %d requested, %d present", ordinal, count);
    r = cu->DeviceGet(out, ordinal);
    return r == CUDA_SUCCESS ? MVM_OK : mvm_cu_fail(cu, r, "cuDeviceGet");
}

static int attribute(cuda_backend *c, CUdevice_attribute a)
{
    int v = 0;
    return c->cu.DeviceGetAttribute(&v, a, c->dev) == CUDA_SUCCESS ? v : 0;
}

static size_t lcm(size_t a, size_t b)
{
    size_t x = a, y = b;
    while (y) {
        size_t t = x % y;
        x = y;
        y = t;
    }
    return a / x * b;
}

/* The driver works and device `ordinal` exists and supports VMM: what a space needs before
 * it takes anything of the device. */
static mvm_status find_device(cuda_backend *c, int ordinal)
{
    mvm_status st = mvm_cu_device(&c->cu, ordinal, &c->dev);
    if (st != MVM_OK)
        return st;
    if (!attribute(c, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED))
        return mvm_fail(MVM_ERR_UNSUPPORTED, "CUDA device %d does not support virtual memory "
                        "management", ordinal);
    return MVM_OK;
}

mvm_status mvm_cuda_probe(int device)
{
    cuda_backend c = {0};
    mvm_status st = mvm_cu_load(&c.cu);
    return st != MVM_OK ? st : find_device(&c, device);
}

/* Device, attributes, granularity, context and copy stream. */
static mvm_status open_device(cuda_backend *c, int ordinal)
{
    mvm_backend *b = &c->base;
    int version = 0;
    mvm_status found = find_device(c, ordinal);
    if (found != MVM_OK)
        return found;
    b->home_mappable = attribute(c, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
    int numa = -1;
    c->host_numa_id = c->cu.DeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, c->dev) ==
                                  CUDA_SUCCESS && numa >= 0 ? numa : -1;
    b->numa_node = c->host_numa_id;

    CUmemAllocationProp prop = device_prop(c);
    size_t gran = 0;
    CU(c, c->cu.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
       "cuMemGetAllocationGranularity");
    if (b->home_mappable) {
        size_t host_gran = 0;
        prop = host_numa_prop(c);
        prop.location.id = c->host_numa_id >= 0 ? c->host_numa_id : 0;
        CU(c, c->cu.MemGetAllocationGranularity(&host_gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           "cuMemGetAllocationGranularity (HOST_NUMA)");
        gran = lcm(gran, host_gran);
    }
    b->granularity = gran;
    b->default_page_size = gran >= (2u << 20) ? gran : (2u << 20) / gran * gran;

    char name[96] = "";
    c->cu.DeviceGetName(name, sizeof name, c->dev);
    c->cu.DriverGetVersion(&version);
    snprintf(b->device, sizeof b->device, "%s (driver %d.%d, HOST_NUMA VMM %s)", name,
             version / 1000, version % 1000 / 10, b->home_mappable ? "yes" : "no");
    c->cu.DeviceGetPCIBusId(b->pci_bus_id, sizeof b->pci_bus_id, c->dev);

    CU(c, c->cu.PrimaryCtxRetain(&c->ctx, c->dev), "cuDevicePrimaryCtxRetain");
    mvm_status st = use_ctx(c);
    if (st != MVM_OK)
        return st;
    size_t free_b = 0, total_b = 0;
    CU(c, c->cu.MemGetInfo(&free_b, &total_b), "cuMemGetInfo");
    b->device_free = free_b;
    CU(c, c->cu.StreamCreate(&c->copy_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    return mvm_cuda_lanes_open(c);
}

mvm_status mvm_backend_cuda_open(int device, mvm_backend **out)
{
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory opening the cuda backend");
    c->base.ops = &cuda_ops;
    strcpy(c->base.name, "cuda");
    c->host_numa_id = -1;
    pthread_mutex_init(&c->events_lock, NULL);
    mvm_status st = mvm_cu_load(&c->cu);
    if (st == MVM_OK)
        st = open_device(c, device);
    if (st != MVM_OK) {
        if (c->cu.CtxSetCurrent) /* partly opened: release what we took */
            cuda_destroy(&c->base);
        else
            free(c);
        return st;
    }
    c->base.host_readable = false;
    *out = &c->base;
    return MVM_OK;
}
