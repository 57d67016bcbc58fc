/*
 * moevm — a virtual expert address space for Mixture-of-Experts inference.
 *
 * Every expert (layer l, expert e) of a space has one fixed address for the life of the
 * space. The physical pages behind it are either a device chunk (fast; "resident") or the
 * expert's host home (the authoritative copy). Moving pages never changes the address, so a
 * caller that reads an expert that is not resident is slower, never wrong — on backends where
 * non-resident pages can be mapped to the host home (the host backend; CUDA with HOST_NUMA
 * VMM support). Where they cannot, non-resident pages are unmapped and the caller must make
 * an expert resident before any kernel reads it (mvm_space_info.home_mapped tells which).
 *
 * The space executes moves; it never decides what to move. Policies (policy/) decide.
 *
 * Thread safety: every function may be called from any thread. Errors are returned as
 * mvm_status codes; the message of the calling thread's last failure is mvm_last_error().
 * Full reference: docs/api.md.
 */
#ifndef MOEVM_MOEVM_H
#define MOEVM_MOEVM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MVM_VERSION_MAJOR 0
#define MVM_VERSION_MINOR 1
#define MVM_VERSION_PATCH 0

typedef enum mvm_status {
    MVM_OK = 0,
    MVM_ERR_INVALID,     /* a bad argument (zero size, NULL, unknown handle, double destroy) */
    MVM_ERR_RANGE,       /* layer, expert or page out of range */
    MVM_ERR_NOMEM,       /* host memory or address space exhausted */
    MVM_ERR_NOSPACE,     /* the device budget is full: evict something first */
    MVM_ERR_PINNED,      /* the pages are pinned; their backing cannot change now */
    MVM_ERR_BUSY,        /* mvm_move_test: not finished yet */
    MVM_ERR_CANCELLED,   /* a move was cancelled (its pages evicted, or the space destroyed) */
    MVM_ERR_TIMEOUT,     /* mvm_move_wait ran out of time */
    MVM_ERR_BACKEND,     /* the driver or the OS failed; the message names the call */
    MVM_ERR_UNSUPPORTED, /* the backend is not available on this machine or build */
    MVM_ERR_OPTION,      /* a malformed MOEVM_* value */
} mvm_status;

/* "MVM_ERR_NOSPACE" etc. Never NULL. */
const char *mvm_status_name(mvm_status s);
/* One line describing the calling thread's last failure ("" if none). Valid until the next
 * failing call on this thread. */
const char *mvm_last_error(void);
/* "0.1.0" */
const char *mvm_version(void);

/* MVM_OK when the cuda backend can open CUDA device `device`: a driver loads
 * (MOEVM_CUDA_LIBRARY), the device exists and supports virtual memory management. Takes
 * nothing of the device (no context); mvm_last_error() says why not. What
 * MVM_BACKEND_AUTO tries first. */
mvm_status mvm_cuda_probe(int device);

typedef enum mvm_backend_kind {
    MVM_BACKEND_AUTO = 0, /* cuda when a CUDA device is usable, else host */
    MVM_BACKEND_HOST,     /* Linux virtual memory: memfd chunks, mmap remaps, memcpy moves */
    MVM_BACKEND_CUDA,     /* the CUDA driver's virtual memory management API */
} mvm_backend_kind;

/* The default budget: on cuda, 90% of the device memory free at creation less
 * device_reserve; on host, all expert bytes. Either way capped at what the experts need. */
#define MVM_BUDGET_AUTO UINT64_MAX

typedef struct mvm_space_desc {
    uint32_t n_layers;           /* MoE layers */
    uint32_t n_experts;          /* experts per layer */
    uint64_t expert_bytes;       /* bytes of one expert's weights */
    uint64_t device_budget;      /* device bytes for expert pages, rounded down to whole
                                    pages and capped at what the experts need; 0 = use
                                    device_budget_frac; MVM_BUDGET_AUTO = see below */
    double device_budget_frac;   /* budget as a fraction (0, 1] of the pages all experts
                                    take (each whole pages; 1: every expert fits), used
                                    when device_budget is 0 */
    uint64_t device_reserve;     /* device bytes the caller needs beside the space (its
                                    other weights, KV cache, scratch): MVM_BUDGET_AUTO takes
                                    90% of the free memory less this. 0 by default */
    mvm_backend_kind backend;
    int device;                  /* CUDA device ordinal (cuda backend) */
    uint64_t page_size;          /* 0 = the backend's default (2 MiB; a slot space's: 64 KiB
                                    or more, an expert at most 64 pages); else a multiple of
                                    the backend's granularity (a slot space's may also
                                    divide it, in multiples of 4 KiB) */
    int write_back;              /* 0: expert weights, read-only through their device
                                    address; eviction just remaps to the home. 1: the device
                                    may write pages (general data, the interposer): eviction
                                    copies a resident page back to its home first */
    int clean_evict;             /* write_back spaces: skip the write-back of a page the
                                    device left as it was loaded (compared by a 128-bit
                                    digest computed on the device; cuda backend).
                                    MOEVM_CLEAN_EVICT, default 1 */
    int unmapped_homes;          /* 1: on a device that could map non-resident pages to
                                    their host homes (HOST_NUMA VMM), leave them unmapped:
                                    a load and an eviction each remap about half as much,
                                    but no kernel can read a non-resident expert in place.
                                    Backends whose addresses the CPU reads (host) keep their
                                    homes mapped. MOEVM_HOME_MAP=off, default 0 */
    int pack;                    /* 1: where the budget holds every expert (its bytes, or
                                    a fraction of 1), lay them back to back (expert i at
                                    base + i x its bytes rounded up to MVM_PACK_ALIGN) in
                                    memory mapped once, not in whole pages each: nothing
                                    moves then, so pages buy nothing,
                                    and the experts take their bytes (a 4.8 MiB expert took
                                    6 MiB of 2 MiB pages). The first request copies every
                                    expert up; evictions are refused. Not with write_back,
                                    nor where the CPU reads the experts' addresses (the host
                                    backend). 0 by default; the engine sets MOEVM_PACK's */
    int slots;                   /* 1: a resident expert is read where it lands, its slab in
                                    the device pool's view (mvm_expert_slot), and is never
                                    mapped at its own address: a move is its copy, with no
                                    cuMemMap, cuMemSetAccess or cuMemUnmap (each 25-120 us
                                    on an H200 while kernels run), and its pages need not be
                                    the device's 2 MiB granules (page_size), so an expert
                                    takes about its bytes, not whole granules (a 4.8 MiB one
                                    took 6). Whole experts only (a
                                    request or eviction of part of one is refused), the
                                    budget in whole experts (in whole granules, all one
                                    allocation), homes never mapped at the
                                    experts' addresses, which show nothing. Not with
                                    write_back, nor on a backend without a pool view the
                                    device reads (the host backend). A packed space (pack)
                                    moves nothing and ignores it. 0 by default; the engine
                                    sets MOEVM_SLOTS's */
    int small_pages;             /* 1: the host homes keep the kernel's base pages (4 KiB).
                                    0 (default): they are advised for transparent huge pages
                                    (madvise MADV_HUGEPAGE), which the kernel grants where its
                                    THP settings allow (the host backend's memfd:
                                    shmem_enabled at advise or always; the cuda backend's
                                    registered memory: enabled at madvise or always): the
                                    CPU then reads experts through 2 MiB pages, one TLB entry
                                    for 512 of 4 KiB (a 16-layer OLMoE decoded 3% faster,
                                    docs/engine.md); an expert's last page is then memory
                                    whole only where that wastes little (vmm/backend.h,
                                    mvm_host_huge_plan). MOEVM_HUGE_PAGES=off sets it */
} mvm_space_desc;

/* Where a packed space's experts start: a multiple of this many bytes (every load of a
 * kernel, 16 bytes at most, stays aligned). */
#define MVM_PACK_ALIGN 256u

/* Fills *d with the defaults of the MOEVM_* options table, reading the environment
 * (MOEVM_GPU_BUDGET, MOEVM_BACKEND, MOEVM_DEVICE, MOEVM_PAGE_SIZE, MOEVM_CLEAN_EVICT,
 * MOEVM_HOME_MAP). The model shape fields are zeroed: the caller sets them. Fails with
 * MVM_ERR_OPTION on a malformed variable. */
mvm_status mvm_space_desc_init(mvm_space_desc *d);

typedef struct mvm_space mvm_space;
typedef struct mvm_move mvm_move;

mvm_status mvm_space_create(const mvm_space_desc *desc, mvm_space **out);
/* Cancels queued moves (their handles report MVM_ERR_CANCELLED), waits for the copies in
 * progress, unmaps everything. Destroying a space twice, or NULL, is MVM_ERR_INVALID. */
mvm_status mvm_space_destroy(mvm_space *space);

typedef struct mvm_space_info {
    char backend[16];          /* "host" or "cuda" */
    char device[128];          /* device name, or the host description */
    char pci_bus_id[32];       /* the GPU's PCI bus id ("0000:18:00.0"), "" on host */
    uint32_t n_layers, n_experts; /* as created */
    uint64_t expert_bytes;
    uint64_t page_size;
    uint64_t expert_stride;    /* distance between consecutive experts' addresses */
    uint32_t pages_per_expert;
    uint32_t device_pages;     /* capacity: the device budget in pages of experts (a packed
                                  space's: every expert's pages, all resident) */
    uint64_t device_free;      /* device memory free when the space was created (0 on host) */
    uint64_t base;             /* start of the reserved range */
    uint64_t reserved_bytes;
    int numa_node;             /* where the host homes live (-1 unknown) */
    int home_mapped;           /* 1: non-resident pages are backed by the host home and
                                  readable; 0: they are unmapped */
    int host_readable;         /* 1: expert addresses are readable by the CPU too */
    int clean_evict;           /* 1: evictions skip the write-back of unchanged pages
                                  (a write_back space with clean_evict, on a backend that
                                  can digest its pages) */
    uint32_t move_spin_us;     /* MOEVM_MOVE_SPIN in effect: how long the migration worker
                                  and the threads waiting for it spin before they sleep
                                  (0: at once; the worker then waits for a copy's fence
                                  asleep, else it polls the fence) */
    int home_readable;         /* 1: a kernel can read any expert's home in place, over the
                                  bus (mvm_expert_home_device), mapped or not */
    int packed;                /* 1: the experts lie back to back (mvm_space_desc.pack),
                                  expert_stride apart, and stay resident */
    uint64_t device_bytes;     /* the device memory the experts take: device_pages pages, a
                                  packed space's fewer, a slot space's pool in whole
                                  granules */
    int slots;                 /* 1: resident experts are read in the pool's view, never at
                                  their own addresses (mvm_space_desc.slots, mvm_expert_slot) */
    uint64_t home_page;        /* the pages the CPU reads the host homes in: a transparent
                                  huge page's size (2 MiB) where they were advised and the
                                  kernel's settings grant it (mvm_space_desc.small_pages),
                                  else the base page's (4 KiB); 0 where the driver allocates
                                  them (HOST_NUMA VMM) */
} mvm_space_info;

mvm_status mvm_space_get_info(const mvm_space *space, mvm_space_info *info);

/* The fixed address of expert (layer, expert): a device address on cuda, a host pointer on
 * the host backend. Read-only: write weights through the home. NULL if out of range. */
void *mvm_expert_addr(const mvm_space *space, uint32_t layer, uint32_t expert);
/* The expert's host home, writable by the CPU; page_size-aligned, expert_bytes long, its
 * bytes unspecified until written (as a device allocation's are).
 * Write the weights here before the first move of the expert. NULL if out of range. */
void *mvm_expert_home(const mvm_space *space, uint32_t layer, uint32_t expert);
/* Where a kernel on the space's device reads that home in place, over the bus (zero-copy),
 * whatever the expert's residency and whether homes are mapped at non-resident pages:
 * a device address on cuda (the registered homes' device pointer, or the HOST_NUMA home
 * view). NULL where the device cannot (the host backend; homes left pageable). */
void *mvm_expert_home_device(const mvm_space *space, uint32_t layer, uint32_t expert);

typedef enum mvm_page_state {
    MVM_PAGE_HOME = 0,    /* backed by the host home (or unmapped where homes cannot map) */
    MVM_PAGE_LOADING,     /* a copy into a device chunk is queued or in flight */
    MVM_PAGE_RESIDENT,    /* backed by a device chunk */
} mvm_page_state;

typedef struct mvm_residency {
    uint32_t n_pages;        /* pages of this expert */
    uint32_t resident;       /* pages backed by device chunks */
    uint32_t resident_prefix;/* length of the resident prefix (pages 0..k-1 all resident) */
    uint32_t loading;        /* pages with a copy queued or in flight */
    uint32_t pins;           /* pin count of the expert */
} mvm_residency;

mvm_status mvm_expert_residency(const mvm_space *space, uint32_t layer, uint32_t expert,
                                mvm_residency *out);
mvm_status mvm_page_get_state(const mvm_space *space, uint32_t layer, uint32_t expert,
                              uint32_t page, mvm_page_state *out);

/* n_pages for the functions below: the prefix of the expert's pages to act on. */
#define MVM_ALL_PAGES UINT32_MAX

/* Makes pages [0, n_pages) resident and returns when they are (on-demand priority).
 * Fails with MVM_ERR_NOSPACE when the budget lacks free chunks, MVM_ERR_PINNED when pages
 * must move while the expert is pinned (it would wait on the caller itself). */
mvm_status mvm_make_resident(mvm_space *space, uint32_t layer, uint32_t expert,
                             uint32_t n_pages);
/* The same, asynchronously. Free chunks are claimed at once (so MVM_ERR_NOSPACE comes
 * from this call, not later). *move (may be NULL for fire-and-forget) completes when the
 * prefix is resident; release it with mvm_move_release. A move for an expert that is
 * pinned completes once the expert is unpinned. */
mvm_status mvm_make_resident_async(mvm_space *space, uint32_t layer, uint32_t expert,
                                   uint32_t n_pages, mvm_move **move);
/* Like mvm_make_resident_async at prefetch priority: on-demand moves queued later still run
 * first, and an on-demand request for a page a prefetch is loading promotes that prefetch. */
mvm_status mvm_prefetch(mvm_space *space, uint32_t layer, uint32_t expert, uint32_t n_pages,
                        mvm_move **move);
/* Takes back the expert's prefetches whose copies have not started (MoEpic's prefetch
 * window closing at the router): their pages stay home, their moves complete with
 * MVM_ERR_CANCELLED. A copy already running lands, and a prefetch an on-demand request
 * promoted is not a prefetch any more. *n_pages (may be NULL): the pages taken back. */
mvm_status mvm_prefetch_cancel(mvm_space *space, uint32_t layer, uint32_t expert,
                               uint32_t *n_pages);

/* timeout_ns < 0: wait forever. Returns the move's result, or MVM_ERR_TIMEOUT. */
mvm_status mvm_move_wait(mvm_move *move, int64_t timeout_ns);
/* MVM_ERR_BUSY while in progress, else the move's result. */
mvm_status mvm_move_test(mvm_move *move);
/* Releasing a move does not cancel it. Releasing twice is MVM_ERR_INVALID. */
mvm_status mvm_move_release(mvm_move *move);

/* Evicts pages [keep_pages, n_pages): they go back to the host home and their chunks to the
 * pool. keep_pages = 0 evicts the whole expert. Pages still loading are cancelled (with the
 * rest of the move's run). Where keep_pages cuts a resident run (pages moved together share
 * one device mapping), the kept pages are loaded again before this returns; the cut is
 * remembered for the layer, so later moves split there. Fails with MVM_ERR_PINNED, changing
 * nothing, if the expert is pinned, and with MVM_ERR_INVALID in a packed space
 * (mvm_space_desc.pack), whose experts stay. */
mvm_status mvm_evict(mvm_space *space, uint32_t layer, uint32_t expert, uint32_t keep_pages);
/* mvm_evict(space, layer, e, 0) for each e of experts[0..n) (repeats allowed), with the
 * write_back checks of all their pages made at once: one wait for the device, not one per
 * page. A pinned expert is skipped with MVM_ERR_PINNED, the others are still evicted; the
 * first failure is returned. An expert out of range fails the call before anything moves. */
mvm_status mvm_evict_many(mvm_space *space, uint32_t layer, const uint32_t *experts,
                          uint32_t n);
/* Like mvm_evict, for pages whose contents are no longer needed (the memory was freed):
 * nothing is copied home, even in a write_back space, so the home keeps what it held
 * before. Counted in pages_evicted and pages_discarded. */
mvm_status mvm_discard(mvm_space *space, uint32_t layer, uint32_t expert,
                       uint32_t keep_pages);

/* Pins the expert: its pages keep their backing (no evict, no remap) until unpinned. A pin
 * marks "a reader is using this"; pins nest. */
mvm_status mvm_pin(mvm_space *space, uint32_t layer, uint32_t expert);
mvm_status mvm_unpin(mvm_space *space, uint32_t layer, uint32_t expert);
/* Unpins once the work queued so far on `stream` (a CUstream on cuda; ignored on host,
 * where it unpins at once) has finished: the last reader's event. */
mvm_status mvm_unpin_after(mvm_space *space, uint32_t layer, uint32_t expert, void *stream);
/* For a reader that has pinned the expert while pages of it are loading: orders `stream` (a
 * CUstream) after their copies, on the device, instead of waiting on the host for them to
 * land. Returns once each loading page's copy is queued and its device memory mapped at the
 * expert's address (the migration worker's start, not the copy's end); work queued on
 * `stream` afterwards reads the copied bytes. The pages stay LOADING until the last unpin
 * (a pin keeps the backing), then land at once, with no driver call. A copy that fails after the stream was
 * ordered keeps its mapping until that unpin, then the move reports the failure: the
 * caller waits for its move after its work, as for any reader, to learn it. Fails with
 * MVM_ERR_INVALID if the expert is not pinned, MVM_ERR_CANCELLED if a page is neither
 * resident nor loading (its load failed or was never asked: the move says why), and
 * MVM_ERR_UNSUPPORTED where readers must wait on the host: the host backend, or homes
 * mapped at non-resident pages (the address shows the home until the copy lands). */
mvm_status mvm_expert_wait_on(mvm_space *space, uint32_t layer, uint32_t expert, void *stream);
/* The same for a reader that can read the expert at any device address (the engine's
 * kernels, MOEVM_LOAD_WAIT=device-view): returns once each loading page's copy is queued,
 * not mapped, and gives in *addr where the expert's bytes are, the device pool's own view
 * of its slab, where the copies land; the migration worker maps the slab at the expert's
 * address meanwhile, for every other reader, and the expert keeps that address. The map
 * (~120 us while kernels run on an H200) so leaves the reader's path. MVM_ERR_UNSUPPORTED
 * also where the expert's pages are not one run of consecutive chunks (a split run or
 * scattered slabs: mvm_expert_wait_on and the expert's address serve it) or the backend
 * has no view. */
mvm_status mvm_expert_wait_view(mvm_space *space, uint32_t layer, uint32_t expert, void *stream,
                                uint64_t *addr);
/* Where the device reads expert (layer, expert) now, in *addr: a slot space's
 * (mvm_space_desc.slots) resident expert in its slab in the device pool's view, any other
 * space's at its own address (mvm_expert_addr); 0 while any page of it is not resident
 * (home, or loading: mvm_expert_wait_view gives where a load lands). The address holds as
 * long as the expert stays resident: the caller pins it, or otherwise keeps evictions
 * away, for as long as its kernels read there. */
mvm_status mvm_expert_slot(const mvm_space *space, uint32_t layer, uint32_t expert,
                           uint64_t *addr);

/* Loads by the reader. A kernel reading a non-resident expert in place (its home's device
 * address) can store what it reads into a slab set aside for it; the expert then lands with
 * no copy, its bytes having crossed the bus once. Only on cuda, in spaces without write_back
 * (else MVM_ERR_UNSUPPORTED).
 * reserve: sets aside a slab of a whole expert's pages from the free ones (they count
 *   against the budget from now on) and gives in *addr the device address where a kernel
 *   writes the expert's bytes, laid out as at its own address. MVM_ERR_NOSPACE when fewer
 *   than a whole expert's pages are free, or not in a row.
 * land: expert (layer, expert), all its pages at home, takes the slab at addr, which holds
 *   its bytes (the work writing them finished, or ordered before every later reader): its
 *   pages are LOADING until the migration worker has mapped the slab at the expert's
 *   address (deferred while it is pinned), then RESIDENT; *move (may be NULL) completes
 *   then. Meanwhile the expert is read at addr. MVM_ERR_BUSY, nothing changed, if a page is
 *   not at home; MVM_ERR_INVALID if addr is not a slab set aside.
 * return: gives back a slab set aside that was not filled.
 * pending: *addr = where a landed expert's bytes are read until its move completes (the
 *   slab's address given to land), or 0 when it is not landing from a fill (resident: read
 *   it at its own address; at home, loading by a copy, or its fill's map failed). */
mvm_status mvm_fill_reserve(mvm_space *space, uint64_t *addr);
mvm_status mvm_fill_pending(const mvm_space *space, uint32_t layer, uint32_t expert,
                            uint64_t *addr);
mvm_status mvm_fill_land(mvm_space *space, uint32_t layer, uint32_t expert, uint64_t addr,
                         mvm_move **move);
mvm_status mvm_fill_return(mvm_space *space, uint64_t addr);

typedef struct mvm_stats {
    uint64_t hits;             /* on-demand requests whose pages were all resident */
    uint64_t misses;           /* on-demand requests that needed at least one page moved */
    uint64_t prefetches;       /* prefetch requests that queued at least one page */
    uint64_t pages_loaded;     /* pages copied into device chunks */
    uint64_t pages_evicted;
    uint64_t pages_discarded;  /* of those, dropped by mvm_discard without a write-back */
    uint64_t bytes_moved;      /* host-to-device bytes copied */
    uint64_t bytes_written_back; /* device-to-host bytes copied by write_back evictions */
    uint64_t pages_clean;      /* write_back evictions that copied nothing: the page was
                                  as loaded (mvm_space_desc.clean_evict) */
    uint64_t pages_filled;     /* of pages_loaded, those a reader wrote (mvm_fill_land): no
                                  copy, not in bytes_moved */
    uint64_t prefetch_pages;   /* pages loaded at prefetch priority */
    uint64_t prefetch_used;    /* of those, pages later asked for on demand before eviction */
    uint64_t overtakes;        /* on-demand batches copied between two pieces of a prefetch
                                  (MOEVM_COPY_PIECE) instead of after it */
    uint64_t wait_ns;          /* time callers spent blocked waiting for moves */
    uint64_t evict_ns;         /* time evictions took on their callers' threads: the
                                  write-backs, unmaps and homes mapped back (mvm_evict, and
                                  the evictions a request makes for room) */
    uint64_t remap_ns;         /* time the loads' mappings took (map and access grant,
                                  homes unmapped first where mapped) and, where homes are
                                  unmapped, the evicted runs' unmaps left to the migration
                                  worker (its thread, mostly) */
    uint32_t moves_queued;     /* move jobs not yet started */
    uint32_t moves_in_flight;  /* move jobs being copied or waiting for a remap */
    uint32_t moves_deferred;   /* of those, jobs landed while their expert was pinned: the
                                  remap waits for its last unpin */
    uint32_t resident_pages;
    uint32_t loading_pages;
    uint32_t free_pages;       /* unclaimed device chunks */
    uint32_t reserved_pages;   /* chunks set aside for readers to fill (mvm_fill_reserve) */
    uint32_t pinned_experts;
} mvm_stats;

mvm_status mvm_space_get_stats(const mvm_space *space, mvm_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* MOEVM_MOEVM_H */
