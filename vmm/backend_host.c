/*
 * The host backend: the space's semantics on Linux virtual memory, so the whole system runs
 * and is tested on machines with no GPU. It is a real implementation, not a mock:
 *   reserve      mmap(PROT_NONE, MAP_NORESERVE)
 *   host homes   one memfd, mapped read-write once for the CPU (the home address); the
 *                tails of the experts' last pages are never touched: holes, no memory.
 *                Advised for transparent huge pages (mvm_space_desc.small_pages;
 *                mvm_host_huge_plan says which pages): where shmem_enabled allows, the
 *                CPU reads them in 2 MiB pages
 *   device pool  one memfd of n_chunks pages, mapped read-write once (the copy target);
 *                a slab's pages are punched out of it when the slab goes
 *   map          mmap(MAP_FIXED | MAP_SHARED) of the memfd's pages at the expert address,
 *                read-only (weights change only through the home); a run of chunks is
 *                contiguous in the memfd, so one call
 *   copy         memcpy on the migration worker
 * Replacing a mapping with MAP_FIXED is one atomic step under the kernel's mmap lock, so a
 * thread reading an expert while it moves sees the old or the new page, never a hole.
 * Each page whose backing differs from its neighbour's is its own VMA; vm.max_map_count
 * (65530 by default) bounds resident pages to roughly 30000.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vmm/backend.h"
#include "vmm/error.h"

/* A memfd and its read-write view: the host homes, and the device pool (whose view is where
 * copies land). */
struct region {
    int fd;
    void *view;
    size_t bytes, page_size;
};

struct mvm_home {
    struct region r;
};

struct mvm_pool {
    struct region r;
};

static mvm_status os_fail(const char *call, size_t bytes)
{
    int e = errno;
    if (e == ENOMEM)
        return mvm_fail(MVM_ERR_NOMEM,
                        "%s of %zu bytes failed: %s (out of memory or vm.max_map_count reached)",
                        call, bytes, strerror(e));
    return mvm_fail(MVM_ERR_BACKEND, "%s of %zu bytes failed: %s", call, bytes, strerror(e));
}

static void host_destroy(mvm_backend *b) { free(b); }

static mvm_status host_thread_init(mvm_backend *b)
{
    (void)b;
    return MVM_OK;
}

static mvm_status host_reserve(mvm_backend *b, size_t bytes, size_t align, uint64_t *va)
{
    (void)b;
    void *p = mvm_mmap_aligned(bytes, align, PROT_NONE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
    if (p == MAP_FAILED)
        return os_fail("mmap (reserve)", bytes + align);
    *va = (uintptr_t)p;
    return MVM_OK;
}

static void host_unreserve(mvm_backend *b, uint64_t va, size_t bytes)
{
    (void)b;
    munmap((void *)(uintptr_t)va, bytes);
}

static mvm_status region_create(const char *name, size_t bytes, size_t page_size,
                                struct region *r)
{
    r->bytes = bytes;
    r->page_size = page_size;
    r->fd = memfd_create(name, MFD_CLOEXEC);
    if (r->fd < 0)
        return os_fail("memfd_create", bytes);
    /* The view starts on a page boundary (mvm_expert_home promises it): the memfd is mapped
     * over an aligned reservation. */
    void *at = MAP_FAILED;
    if (ftruncate(r->fd, (off_t)bytes) != 0 ||
        (at = mvm_mmap_aligned(bytes, page_size, PROT_NONE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)) == MAP_FAILED ||
        (r->view = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, r->fd, 0)) ==
            MAP_FAILED) {
        mvm_status st = os_fail("ftruncate/mmap of a memfd", bytes);
        if (at != MAP_FAILED)
            munmap(at, bytes);
        close(r->fd);
        return st;
    }
    return MVM_OK;
}

mvm_huge_plan mvm_host_huge_plan(size_t huge, size_t n_items, size_t used, uint64_t avail)
{
    if (!huge || used == 0)
        return MVM_HUGE_NONE;
    uint64_t bytes = (uint64_t)n_items * used;
    uint64_t tails = (uint64_t)n_items * ((used + huge - 1) / huge * huge - used);
    if (tails <= bytes / 8 && bytes + tails <= avail)
        return MVM_HUGE_VIEW;
    return n_items <= MVM_HUGE_ITEMS_MAX && used >= huge ? MVM_HUGE_ITEMS : MVM_HUGE_NONE;
}

static void region_destroy(struct region *r)
{
    munmap(r->view, r->bytes);
    close(r->fd);
}

static mvm_status host_home_create(mvm_backend *b, size_t n_pages, size_t page_size,
                                   size_t item_pages, size_t item_used, const mvm_topo *topo,
                                   mvm_home **out, void **host)
{
    /* Huge pages: on a 16-layer OLMoE-1B-7B (3.4 GiB of Q4_K experts) the CPU decoded 3%
     * faster with them, the median of 12 alternated pairs (docs/perf/cpu.md): 512 times
     * fewer TLB misses, and the hardware prefetchers, which stop at a page's end, run on
     * for 2 MiB. */
    size_t n_items = n_pages / item_pages, item_bytes = item_pages * page_size;
    size_t huge = mvm_huge_page_for(b, page_size, 1);
    mvm_huge_plan plan = mvm_host_huge_plan(huge, n_items, item_used,
                                            mvm_topo_memory_available(1));
    /* Homes are memory the kernel cannot page out to a file: more than there is would end
     * in the OOM killer midway through the load, so say it now. Advised as a whole, an
     * item's last page is memory whole. */
    size_t used = plan == MVM_HUGE_VIEW ? (item_used + huge - 1) / huge * huge : item_used;
    mvm_status st = mvm_topo_check_memory("the space's host homes", (uint64_t)n_items * used, 1);
    if (st != MVM_OK)
        return st;
    mvm_home *h = calloc(1, sizeof *h);
    if (!h)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the host home");
    st = region_create("moevm-home", n_pages * page_size, page_size, &h->r);
    if (st != MVM_OK) {
        free(h);
        return st;
    }
    if (plan == MVM_HUGE_VIEW)
        mvm_madvise_huge(h->r.view, n_pages * page_size);
    for (size_t i = 0; plan == MVM_HUGE_ITEMS && i < n_items; i++)
        mvm_madvise_huge((char *)h->r.view + i * item_bytes, item_used / huge * huge);
    b->home_page = plan != MVM_HUGE_NONE ? huge : (size_t)sysconf(_SC_PAGESIZE);
    mvm_log(MVM_LOG_INFO, "host homes in %zu KiB pages (%s)", b->home_page >> 10,
            plan == MVM_HUGE_VIEW    ? "transparent huge pages"
            : plan == MVM_HUGE_ITEMS ? "transparent huge pages, each expert's last page in base ones"
            : !b->huge_homes         ? "MOEVM_HUGE_PAGES=off"
            : !mvm_topo_huge_page(1) ? "transparent huge pages for shared memory are off: "
                                       "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
            : !huge                  ? "the space's pages are not whole huge pages"
                                     : "huge pages would hold the experts' tails, and they are "
                                       "too many or too small to keep their tails apart");
    /* Homes are written once at load, then only read: place them near the GPU's node now,
     * the items' used bytes only (the memfd's untouched pages are holes: no memory). No
     * pinning here — nothing DMAs from a host-backend home. */
    if (topo)
        mvm_topo_place_items(topo, h->r.view, n_pages / item_pages, item_pages * page_size,
                             item_used, 0);
    *out = h;
    *host = h->r.view;
    return MVM_OK;
}

static void host_home_destroy(mvm_backend *b, mvm_home *h)
{
    (void)b;
    if (h)
        region_destroy(&h->r);
    free(h);
}

static mvm_status host_pool_create(mvm_backend *b, size_t n_chunks, size_t page_size,
                                   mvm_pool **out)
{
    mvm_pool *p = calloc(1, sizeof *p);
    if (!p)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the device pool");
    /* the pool emulates device memory, whose chunks are whole memory anyway */
    mvm_status st = region_create("moevm-pool", n_chunks * page_size, page_size, &p->r);
    if (st != MVM_OK) {
        free(p);
        return st;
    }
    mvm_advise_huge(b, p->r.view, n_chunks * page_size, page_size, 1);
    *out = p;
    return MVM_OK;
}

static void host_pool_destroy(mvm_backend *b, mvm_pool *p)
{
    (void)b;
    if (p)
        region_destroy(&p->r);
    free(p);
}

/* Read-only unless the space is write_back: expert weights are written through homes. */
static mvm_status map_fd(const mvm_backend *b, uint64_t va, size_t bytes, int fd, size_t offset)
{
    int prot = b->writable ? PROT_READ | PROT_WRITE : PROT_READ;
    void *p = mmap((void *)(uintptr_t)va, bytes, prot, MAP_FIXED | MAP_SHARED, fd, (off_t)offset);
    return p == MAP_FAILED ? os_fail("mmap (MAP_FIXED remap)", bytes) : MVM_OK;
}

static mvm_status host_map_home(mvm_backend *b, uint64_t va, mvm_home *h, size_t first,
                                size_t n_pages, bool replace)
{
    (void)b, (void)replace;
    return map_fd(b, va, n_pages * h->r.page_size, h->r.fd, first * h->r.page_size);
}

static mvm_status host_slab_create(mvm_backend *b, mvm_pool *p, size_t first, size_t n)
{
    (void)b, (void)p, (void)first, (void)n; /* memfd pages come with their first touch */
    return MVM_OK;
}

/* The slab's memory goes back to the kernel (a hole in the memfd), as cuMemRelease would. */
static mvm_status host_slab_destroy(mvm_backend *b, mvm_pool *p, size_t first, size_t n)
{
    (void)b;
    if (fallocate(p->r.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  (off_t)(first * p->r.page_size), (off_t)(n * p->r.page_size)) != 0)
        mvm_log(MVM_LOG_DEBUG, "punching out a slab of %zu pages: %s", n, strerror(errno));
    return MVM_OK; /* the pages keep their memory, reused by the next slab: nothing lost */
}

static mvm_status host_map_chunks(mvm_backend *b, uint64_t va, mvm_pool *p, size_t first,
                                  size_t n, bool replace)
{
    (void)b, (void)replace;
    return map_fd(b, va, n * p->r.page_size, p->r.fd, first * p->r.page_size);
}

static mvm_status host_unmap(mvm_backend *b, uint64_t va, size_t bytes, size_t piece)
{
    (void)b, (void)piece; /* one mmap covers any number of mappings */
    void *p = mmap((void *)(uintptr_t)va, bytes, PROT_NONE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? os_fail("mmap (unmap to PROT_NONE)", bytes) : MVM_OK;
}

static mvm_status host_copy_start(mvm_backend *b, mvm_pool *p, size_t chunk, const void *src,
                                  size_t len)
{
    (void)b;
    memcpy((char *)p->r.view + chunk * p->r.page_size, src, len);
    return MVM_OK;
}

static mvm_status host_copy_wait(mvm_backend *b)
{
    (void)b;
    return MVM_OK;
}

static mvm_status host_copy_back(mvm_backend *b, mvm_pool *p, size_t chunk, void *dst,
                                 size_t len)
{
    (void)b;
    memcpy(dst, (char *)p->r.view + chunk * p->r.page_size, len);
    return MVM_OK;
}

/* The host has no asynchronous readers: work "on a stream" is done when it is queued, so an
 * event is complete when recorded (represented by NULL). */
static mvm_status host_event_record(mvm_backend *b, void *stream, mvm_event **ev)
{
    (void)b, (void)stream;
    *ev = NULL;
    return MVM_OK;
}

static int host_event_done(mvm_backend *b, mvm_event *ev)
{
    (void)b, (void)ev;
    return 1;
}

static mvm_status host_copy_fence(mvm_backend *b, mvm_event **ev)
{
    return host_event_record(b, NULL, ev); /* host copies land before copy_start returns */
}

static mvm_status host_event_wait(mvm_backend *b, mvm_event *ev)
{
    (void)b, (void)ev;
    return MVM_OK;
}

static void host_event_destroy(mvm_backend *b, mvm_event *ev) { (void)b, (void)ev; }

static const mvm_backend_ops host_ops = {
    .destroy = host_destroy,
    .thread_init = host_thread_init,
    .reserve = host_reserve,
    .unreserve = host_unreserve,
    .home_create = host_home_create,
    .home_destroy = host_home_destroy,
    .map_home = host_map_home,
    .pool_create = host_pool_create,
    .pool_destroy = host_pool_destroy,
    .slab_create = host_slab_create,
    .slab_destroy = host_slab_destroy,
    .map_chunks = host_map_chunks,
    .unmap = host_unmap,
    .copy_start = host_copy_start,
    .copy_wait = host_copy_wait,
    .copy_fence = host_copy_fence,
    .copy_back = host_copy_back,
    .event_record = host_event_record,
    .event_done = host_event_done,
    .event_wait = host_event_wait,
    .event_destroy = host_event_destroy,
};

mvm_status mvm_backend_host_open(mvm_backend **out)
{
    mvm_backend *b = calloc(1, sizeof *b);
    if (!b)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory opening the host backend");
    b->ops = &host_ops;
    strcpy(b->name, "host");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(b->device, sizeof b->device, "host memory (Linux virtual memory, %ld cores)", cores);
    b->granularity = (size_t)sysconf(_SC_PAGESIZE);
    /* The same page size as the CUDA backend, so page counts (and the policies' view of
     * partial residency) are identical on both. */
    b->default_page_size = 2u << 20;
    b->home_mappable = true;
    b->atomic_remap = true;
    b->host_readable = true;
    b->numa_node = -1;
    *out = b;
    return MVM_OK;
}
