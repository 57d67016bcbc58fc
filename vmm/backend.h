/*
 * The physical side of a space, behind one small vtable: reserving a virtual range, the host
 * homes, the pool of device chunks, mapping either at a page of the range, and copying a
 * home page into a chunk. The space (vmm/space.c) owns all bookkeeping and invariants; a
 * backend only executes. Two implementations: backend_host.c (Linux virtual memory) and
 * backend_cuda.c (the CUDA driver's VMM API, loaded with dlopen).
 *
 * Threading: reserve/home/pool/map/unmap may be called from any thread with the space lock
 * held; copy_start/copy_wait only from the space's migration worker, which calls
 * thread_init first.
 */
#ifndef MVM_VMM_BACKEND_H
#define MVM_VMM_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moevm/moevm.h"
#include "vmm/topo.h"

typedef struct mvm_backend mvm_backend;
typedef struct mvm_home mvm_home;   /* all host homes of one space */
typedef struct mvm_pool mvm_pool;   /* the device chunks of one space */
typedef struct mvm_event mvm_event; /* a point in a caller's stream (unpin_after) */

typedef struct mvm_backend_ops {
    void (*destroy)(mvm_backend *b);
    /* Makes the backend's context current on the calling thread (worker start). */
    mvm_status (*thread_init)(mvm_backend *b);

    mvm_status (*reserve)(mvm_backend *b, size_t bytes, size_t align, uint64_t *va);
    void (*unreserve)(mvm_backend *b, uint64_t va, size_t bytes);

    /* n_pages pages of page_size bytes of zeroed host memory, placed on topo's NUMA node
     * and touched there. *host is where the CPU reads and writes them. They hold items
     * (experts) of item_pages pages each, of which only the first item_used bytes are
     * read or written: a backend may leave the rest without memory. */
    mvm_status (*home_create)(mvm_backend *b, size_t n_pages, size_t page_size,
                              size_t item_pages, size_t item_used, const mvm_topo *topo,
                              mvm_home **home, void **host);
    void (*home_destroy)(mvm_backend *b, mvm_home *home);
    /* Optional (NULL: none): the device address of home page 0 (the pages follow it in
     * order) at which a kernel reads the homes in place, over the bus, whatever is mapped at
     * the experts' own addresses; 0 where the device cannot. */
    uint64_t (*home_device_addr)(mvm_backend *b, mvm_home *home);
    /* Backs [va, va + n_pages*page_size) by home pages [first, first + n_pages). Only when
     * b->home_mappable. `replace`: something is mapped there now (the host backend swaps
     * mappings atomically, so readers never see a hole; cuda must unmap first). */
    mvm_status (*map_home)(mvm_backend *b, uint64_t va, mvm_home *home, size_t first,
                           size_t n_pages, bool replace);

    /* The device pool: chunk numbers [0, n_chunks), a chunk page_size bytes, and the view
     * where chunk k appears at a fixed address (copies land there). No memory yet: that
     * comes in slabs. */
    mvm_status (*pool_create)(mvm_backend *b, size_t n_chunks, size_t page_size, mvm_pool **pool);
    void (*pool_destroy)(mvm_backend *b, mvm_pool *pool);
    /* Memory for chunks [first, first + n) as one physical allocation (one cuMemCreate), shown
     * in the pool view; slab_destroy gives it back, or fails with the slab as it was. The
     * space keeps slabs disjoint. */
    mvm_status (*slab_create)(mvm_backend *b, mvm_pool *pool, size_t first, size_t n);
    mvm_status (*slab_destroy)(mvm_backend *b, mvm_pool *pool, size_t first, size_t n);
    /* Backs [va, va + n*page_size) by chunks [first, first + n): `first` starts a slab and n
     * is at most its length, so this is one mapping (one cuMemMap and one cuMemSetAccess: the
     * driver maps a handle from its start only). `replace`: the pages are mapped to their
     * homes now, one mapping each (cuda unmaps those first; the host backend swaps mappings
     * atomically, so readers never see a hole). A failed map_home or map_chunks leaves its
     * range unmapped, or, if unmapping what was there is what failed, as it was. */
    mvm_status (*map_chunks)(mvm_backend *b, uint64_t va, mvm_pool *pool, size_t first,
                             size_t n, bool replace);
    /* Leaves [va, va + bytes) reserved but unbacked; the range is whole mappings of `piece`
     * bytes each (the page size for homes, a run's bytes for map_chunks). */
    mvm_status (*unmap)(mvm_backend *b, uint64_t va, size_t bytes, size_t piece);

    /* Starts copying len bytes from src (host memory of a home) into the chunks from `chunk`
     * on (consecutive chunks of one slab: contiguous in the pool view). */
    mvm_status (*copy_start)(mvm_backend *b, mvm_pool *pool, size_t chunk, const void *src,
                             size_t len);
    /* Optional (NULL: none; a packed space needs it, upload.c): starts copying len bytes
     * from src (host memory the device reads: a home) to byte `offset` of the pool view,
     * where the chunks are one slab. Not for pools that track clean states (their marks are
     * a chunk's, of a copy that starts there). */
    mvm_status (*copy_to)(mvm_backend *b, mvm_pool *pool, uint64_t offset, const void *src,
                          size_t len);
    /* Waits until every copy started so far has landed. */
    mvm_status (*copy_wait)(mvm_backend *b);
    /* An event done once every copy started so far has landed (in pools that track clean
     * states, with its chunk's digest taken): lets the worker remap what landed while later
     * copies are still under way. *ev may be NULL: done already. */
    mvm_status (*copy_fence)(mvm_backend *b, mvm_event **ev);
    /* Copies len bytes of chunk into dst (host memory of a home) and returns when they have
     * landed: the write-back of a page the device may have written (write_back spaces). */
    mvm_status (*copy_back)(mvm_backend *b, mvm_pool *pool, size_t chunk, void *dst,
                            size_t len);
    /* Optional (NULL: never known). same[i]: chunks[i] still holds exactly what its last
     * copy_start put there (only pools created while track_clean was set know); false when
     * it changed or that is unknown. Returns 0, or negative when asking failed. */
    int (*unchanged)(mvm_backend *b, mvm_pool *pool, const size_t *chunks, size_t n,
                     bool *same);

    /* Records the current end of `stream`'s work. */
    mvm_status (*event_record)(mvm_backend *b, void *stream, mvm_event **ev);
    /* 1: the work before the event finished; 0: not yet; negative: the event failed. */
    int (*event_done)(mvm_backend *b, mvm_event *ev);
    /* Returns once the work before the event finished (NULL: at once). */
    mvm_status (*event_wait)(mvm_backend *b, mvm_event *ev);
    /* Optional (NULL: readers wait on the host): `stream`'s later work waits, on the device,
     * for the work before the event. */
    mvm_status (*stream_wait)(mvm_backend *b, mvm_event *ev, void *stream);
    void (*event_destroy)(mvm_backend *b, mvm_event *ev);
    /* Optional (NULL: none): the device address of chunk `chunk` in the pool's own view,
     * where its copies land, mapped for the slab's life (mvm_expert_wait_view). */
    uint64_t (*chunk_addr)(mvm_backend *b, mvm_pool *pool, size_t chunk);
} mvm_backend_ops;

struct mvm_backend {
    const mvm_backend_ops *ops;
    char name[16];           /* "host", "cuda" */
    char device[128];        /* human-readable device description */
    char pci_bus_id[32];     /* "0000:18:00.0", or "" without a GPU */
    size_t granularity;      /* page sizes must be multiples of this */
    size_t default_page_size;
    bool home_mappable;      /* non-resident pages can be backed by their host home */
    bool atomic_remap;       /* a map over a mapped range replaces it in one step (host), so
                                an eviction maps the homes without unmapping first */
    bool host_readable;      /* expert addresses are CPU-readable */
    bool writable;           /* set by the space: addresses are mapped read-write */
    bool track_clean;        /* set by the space: pools record what each load put in a
                                chunk, so `unchanged` can answer; cleared by pool_create
                                where the backend cannot */
    bool huge_homes;         /* set by the space: advise the host homes for transparent huge
                                pages (mvm_space_desc.small_pages) */
    size_t home_page;        /* set by home_create: the pages the CPU reads the homes in
                                (mvm_space_info.home_page) */
    int numa_node;           /* NUMA node nearest the device (-1 unknown) */
    uint64_t device_free;    /* free device memory at open (0 on host: no device) */
};

/* Opens the requested backend (AUTO: cuda if a device is usable, else host). */
mvm_status mvm_backend_open(mvm_backend_kind kind, int device, mvm_backend **out);
/* An anonymous mapping of `bytes` starting on an `align` boundary (a multiple of the
 * system page), MAP_FAILED with errno on failure; munmap(p, bytes) frees it. */
void *mvm_mmap_aligned(size_t bytes, size_t align, int prot, int flags);
/* The transparent huge page size for memory in pages of `page` bytes (0: none): the space
 * asks for them (b->huge_homes), the kernel grants them to this kind of memory (a memfd's:
 * shared; else anonymous; mvm_topo_huge_page), and they tile `page`, so no huge page spans
 * two of its pages' owners. */
size_t mvm_huge_page_for(const mvm_backend *b, size_t page, int shared);
/* madvise(MADV_HUGEPAGE) of [p, p + len), before any of it is touched (the advice applies
 * to the faults that follow); 0 where the kernel refused, said at debug level. */
int mvm_madvise_huge(void *p, size_t len);
/* Advises [p, p + len), untouched memory in pages of `page` bytes, as a whole where
 * mvm_huge_page_for allows. Returns the page size the CPU will read it in: the huge
 * page's where advised, else the base page's. */
size_t mvm_advise_huge(const mvm_backend *b, void *p, size_t len, size_t page, int shared);

mvm_status mvm_backend_host_open(mvm_backend **out);

/* How the host backend's homes take transparent huge pages of `huge` bytes (0: none) for
 * n_items items with `used` bytes each, `avail` bytes of memory left (backend_host.c):
 *   VIEW   the whole view advised, one mapping; each item's last page is then memory whole,
 *          tail and all, so only where that wastes at most an eighth of the items' bytes
 *          (a 3.9 MiB OLMoE-1B-7B Q4_K expert: 2.6%; a 6.4 MiB Q8_0 one would waste 25%)
 *          and fits in `avail`;
 *   ITEMS  else each item's wholly used pages, its tail left in base pages: two mappings an
 *          item, so only up to MVM_HUGE_ITEMS_MAX items, beside vm.max_map_count (65530 by
 *          default), which a budget's remaps also spend;
 *   NONE   base pages. */
typedef enum mvm_huge_plan { MVM_HUGE_NONE, MVM_HUGE_VIEW, MVM_HUGE_ITEMS } mvm_huge_plan;
#define MVM_HUGE_ITEMS_MAX 8192
mvm_huge_plan mvm_host_huge_plan(size_t huge, size_t n_items, size_t used, uint64_t avail);
mvm_status mvm_backend_cuda_open(int device, mvm_backend **out);

#endif
