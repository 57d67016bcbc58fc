/*
 * Allocation, free, copy and memory-query hooks.
 *
 * - cuMemAlloc / cuMemAllocPitch of at least MOEVM_PRELOAD_MIN bytes become managed ranges
 *   (heap.c); smaller ones, and everything when the interposer is off, stay native.
 * - cuMemFree of a managed range drains the device first: cuMemFree synchronises, and
 *   callers rely on it.
 * - Stream-ordered allocations (cuMemAllocAsync) belong to the driver's pools and to CUDA
 *   graphs' memory nodes; they stay native and are counted.
 * - Legacy IPC cannot export VMM-mapped memory. The interposer cannot know at allocation
 *   time that a buffer will be shared, so cuIpcGetMemHandle on a managed range fails with
 *   CUDA_ERROR_NOT_SUPPORTED and a message saying how to keep that buffer native.
 * - Address queries (cuMemGetAddressRange, cuPointerGetAttribute[s]) of a pointer into a
 *   managed range describe that allocation as a cuMemAlloc block: its range, one buffer id,
 *   device memory of the managed device and context, whichever page backs the pointer.
 * - Host-to-device copies teach the objects (heap.c) and are held under the read lock, so a
 *   miss served by another thread cannot remap their destination mid-copy. The unified
 *   copies (cuMemcpy[Async]) are too when a side is managed, and teach an object when the
 *   source is host memory.
 * - Memory queries (driver and NVML) report the managed view: the device's memory plus
 *   MOEVM_OVERSUBSCRIBE, free counting what the managed space has left.
 */
#include <stdlib.h>
#include <string.h>

#include "interpose/preload.h"
#include "vmm/error.h"

#define NVML_SUCCESS_ 0

static bool on_managed_device(void)
{
    if (!mvm_interposer.space)
        return true; /* the space will be created on the current device */
    CUdevice dev;
    return mvm_real_fn.cuCtxGetDevice && mvm_real_fn.cuCtxGetDevice(&dev) == CUDA_SUCCESS &&
           dev == mvm_interposer.device;
}

static CUresult native_alloc(CUdeviceptr *p, size_t bytes)
{
    CUresult r = mvm_real_fn.cuMemAlloc_v2(p, bytes);
    if (r == CUDA_SUCCESS) {
        atomic_fetch_add(&mvm_interposer.native_allocs, 1);
        atomic_fetch_add(&mvm_interposer.native_bytes, bytes);
        if (!mvm_in_interposer && mvm_interposer_on())
            mvm_report_site_add(mvm_report_site(), bytes, false);
    }
    return r;
}

/* A managed allocation, or CUDA_ERROR_NOT_SUPPORTED when it should stay native. */
static CUresult managed_alloc(CUdeviceptr *p, size_t bytes)
{
    if (!mvm_interposer_on() || mvm_in_interposer || !p || bytes < mvm_interposer.min_bytes)
        return CUDA_ERROR_NOT_SUPPORTED;
    uint32_t site = mvm_report_site(); /* unwinding happens outside the lock */
    pthread_rwlock_wrlock(&mvm_interposer.lock);
    CUresult r = on_managed_device() ? mvm_heap_alloc(bytes, site, p)
                                     : CUDA_ERROR_NOT_SUPPORTED;
    pthread_rwlock_unlock(&mvm_interposer.lock);
    if (r == CUDA_SUCCESS) {
        mvm_report_site_add(site, bytes, true);
        MVM_PL_LOG(MVM_LOG_DEBUG, "managed allocation of %zu bytes at 0x%llx", bytes,
                   (unsigned long long)*p);
    }
    return r;
}

CUresult hk_cuMemAlloc_v2(CUdeviceptr *p, size_t bytes)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemAlloc_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = managed_alloc(p, bytes);
    return r == CUDA_ERROR_NOT_SUPPORTED ? native_alloc(p, bytes) : r;
}

CUresult hk_cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t width, size_t height,
                               unsigned int elem)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemAllocPitch_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    bool valid = pitch && width && height && (elem == 4 || elem == 8 || elem == 16);
    size_t row = (width + 511) / 512 * 512; /* the driver's pitch alignment */
    if (valid && height <= SIZE_MAX / row) {
        CUresult r = managed_alloc(p, row * height);
        if (r != CUDA_ERROR_NOT_SUPPORTED) {
            if (r == CUDA_SUCCESS)
                *pitch = row;
            return r;
        }
    }
    return mvm_real_fn.cuMemAllocPitch_v2(p, pitch, width, height, elem);
}

/* Read lock held: is va the start of a managed allocation? */
static bool is_managed(CUdeviceptr va)
{
    return mvm_heap_contains(va) && mvm_heap_find(va) != NULL;
}

static bool managed_now(CUdeviceptr va)
{
    if (!mvm_interposer_on())
        return false;
    pthread_rwlock_rdlock(&mvm_interposer.lock);
    bool m = is_managed(va);
    pthread_rwlock_unlock(&mvm_interposer.lock);
    return m;
}

CUresult hk_cuMemFree_v2(CUdeviceptr va)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemFree_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!managed_now(va))
        return mvm_real_fn.cuMemFree_v2(va);
    pthread_rwlock_wrlock(&mvm_interposer.lock);
    mvm_paging_drain();
    mvm_prefetch_settle_locked(); /* a pending page of the range is in no state to drop */
    CUresult r = mvm_heap_free(va);
    pthread_rwlock_unlock(&mvm_interposer.lock);
    return r;
}

static CUresult counted_async(CUresult r, size_t bytes)
{
    if (r == CUDA_SUCCESS) {
        atomic_fetch_add(&mvm_interposer.async_allocs, 1);
        atomic_fetch_add(&mvm_interposer.async_bytes, bytes);
    }
    return r;
}

CUresult hk_cuMemAllocAsync(CUdeviceptr *p, size_t bytes, CUstream s)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemAllocAsync)
        return CUDA_ERROR_NOT_SUPPORTED;
    return counted_async(mvm_real_fn.cuMemAllocAsync(p, bytes, s), bytes);
}

CUresult hk_cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t bytes, CUstream s)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemAllocAsync_ptsz)
        return CUDA_ERROR_NOT_SUPPORTED;
    return counted_async(mvm_real_fn.cuMemAllocAsync_ptsz(p, bytes, s), bytes);
}

CUresult hk_cuMemFreeAsync(CUdeviceptr va, CUstream s)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemFreeAsync)
        return CUDA_ERROR_NOT_SUPPORTED;
    return mvm_real_fn.cuMemFreeAsync(va, s);
}

CUresult hk_cuMemFreeAsync_ptsz(CUdeviceptr va, CUstream s)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemFreeAsync_ptsz)
        return CUDA_ERROR_NOT_SUPPORTED;
    return mvm_real_fn.cuMemFreeAsync_ptsz(va, s);
}

CUresult hk_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr va)
{
    if (!mvm_real_load() || !mvm_real_fn.cuIpcGetMemHandle)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!managed_now(va))
        return mvm_real_fn.cuIpcGetMemHandle(h, va);
    atomic_fetch_add(&mvm_interposer.ipc_refused, 1);
    MVM_PL_LOG(MVM_LOG_WARN, "cuIpcGetMemHandle on managed memory at 0x%llx: moevm-managed "
               "ranges cannot be shared by legacy IPC; raise MOEVM_PRELOAD_MIN above that "
               "buffer's size to keep it native", (unsigned long long)va);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- address queries --------------------------------------------------------------------- */

/* A managed allocation is one device block to the program, as a cuMemAlloc block would be.
 * The driver sees the space instead and describes what backs the page asked about: one
 * mapping (a page) or the whole reservation as the range, a buffer id per mapping that
 * changes when residency remaps the page, and, for a page at its host home, host memory
 * (Open MPI's VMM fix, open-mpi/ompi#12751: HOST_NUMA-backed cuMemCreate memory reads as
 * CU_MEMORYTYPE_HOST, and a library that believes it touches it from the CPU and faults).
 * So these attributes are answered here, as for a cuMemAlloc block; the others (IS_MANAGED,
 * MAPPED, IPC capability, handle types, access flags, ...) are the driver's, which already
 * describe a VMM allocation. */

typedef struct managed_block {
    CUdeviceptr base;
    size_t size;
    uint64_t id;
} managed_block;

/* The managed allocation holding va, if any. */
static bool managed_block_of(CUdeviceptr va, managed_block *m)
{
    if (!mvm_interposer_on() || !mvm_heap_contains(va))
        return false;
    pthread_rwlock_rdlock(&mvm_interposer.lock);
    mvm_alloc *a = mvm_heap_find(va);
    if (a)
        *m = (managed_block){a->va, a->bytes, a->id};
    pthread_rwlock_unlock(&mvm_interposer.lock);
    return a != NULL;
}

CUresult hk_cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemGetAddressRange_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    managed_block m;
    if (!managed_block_of(dptr, &m))
        return mvm_interposer_on() && mvm_heap_contains(dptr)
                   ? CUDA_ERROR_NOT_FOUND /* in the space, in no allocation: freed */
                   : mvm_real_fn.cuMemGetAddressRange_v2(pbase, psize, dptr);
    if (pbase) /* both optional (cuda.h) */
        *pbase = m.base;
    if (psize)
        *psize = m.size;
    return CUDA_SUCCESS;
}

/* Answers attribute attr of ptr, in block m, into data (cuPointerGetAttribute's types).
 * Returns false for an attribute left to the driver; *r is the result otherwise. */
static bool block_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr,
                            const managed_block *m, CUresult *r)
{
    *r = CUDA_SUCCESS;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = mvm_interposer.ctx;
        return true;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = CU_MEMORYTYPE_DEVICE;
        return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = ptr;
        return true;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: /* device memory: the host cannot reach it */
        *r = CUDA_ERROR_INVALID_VALUE;
        return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = mvm_interposer.device;
        return true;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = m->id;
        return true;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr *)data = m->base;
        return true;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = m->size;
        return true;
    default:
        return false;
    }
}

CUresult hk_cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    if (!mvm_real_load() || !mvm_real_fn.cuPointerGetAttribute)
        return CUDA_ERROR_NOT_INITIALIZED;
    managed_block m;
    CUresult r;
    if (data && managed_block_of(ptr, &m) && block_attribute(data, attr, ptr, &m, &r))
        return r;
    return mvm_real_fn.cuPointerGetAttribute(data, attr, ptr);
}

/* The driver is asked only for the attributes not answered here, so its view of the page
 * cannot leak into (or fail) the answered ones. An attribute with no answer (HOST_POINTER)
 * reads as NULL, as this form reports any attribute a pointer lacks. */
CUresult hk_cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                   CUdeviceptr ptr)
{
    if (!mvm_real_load() || !mvm_real_fn.cuPointerGetAttributes)
        return CUDA_ERROR_NOT_INITIALIZED;
    managed_block m;
    if (!n || !attrs || !data || !managed_block_of(ptr, &m))
        return mvm_real_fn.cuPointerGetAttributes(n, attrs, data, ptr);
    CUpointer_attribute *rest = malloc(n * sizeof *rest);
    void **rest_data = malloc(n * sizeof *rest_data);
    CUresult r = rest && rest_data ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    unsigned k = 0;
    for (unsigned i = 0; i < n && r == CUDA_SUCCESS; i++) {
        CUresult ri;
        if (!data[i] || !block_attribute(data[i], attrs[i], ptr, &m, &ri)) {
            rest[k] = attrs[i];
            rest_data[k++] = data[i];
        } else if (ri != CUDA_SUCCESS) {
            *(void **)data[i] = NULL;
        }
    }
    if (r == CUDA_SUCCESS && k)
        r = mvm_real_fn.cuPointerGetAttributes(k, rest, rest_data, ptr);
    free(rest);
    free(rest_data);
    return r;
}

/* ---- host-to-device copies -------------------------------------------------------------- */

/* Learns the destination as an object (an extent: also one that covers its whole
 * allocation, which is then a tensor the program wrote, slices may cut), cut into its
 * experts when src is a fused expert tensor in a mapped GGUF file; returns with the read
 * lock held when dst is managed (the caller copies, then unlocks). */
static bool copy_prepare(CUdeviceptr dst, const void *src, size_t n)
{
    if (!mvm_interposer_on() || n == 0)
        return false;
    if (mvm_heap_contains(dst))
        mvm_prefetch_settle(); /* a prefetch copy must not read a home this one changes */
    pthread_rwlock_rdlock(&mvm_interposer.lock);
    mvm_alloc *a = mvm_heap_contains(dst) ? mvm_heap_find(dst) : NULL;
    if (!a) {
        pthread_rwlock_unlock(&mvm_interposer.lock);
        return false;
    }
    mvm_count(&mvm_counts_mine()->copies);
    mvm_obj *o = mvm_heap_extent(a, dst);
    if (o != &a->whole && o->va == dst && o->len == n)
        return true;
    pthread_rwlock_unlock(&mvm_interposer.lock);
    uint32_t used = 0;
    uint32_t experts = mvm_interposer.routing ? mvm_gguf_src_experts(src, n, &used) : 0;
    pthread_rwlock_wrlock(&mvm_interposer.lock); /* objects change: exclusive, briefly */
    a = mvm_heap_find(dst);
    if (a) {
        mvm_heap_learn(a, dst, n);
        o = mvm_heap_extent(a, dst);
        if (experts && o->va == dst && o->len == n)
            mvm_slice_declare(o, experts, used);
    }
    pthread_rwlock_unlock(&mvm_interposer.lock);
    pthread_rwlock_rdlock(&mvm_interposer.lock);
    return true;
}

static CUresult copy_finish(bool locked, CUresult r)
{
    if (locked)
        pthread_rwlock_unlock(&mvm_interposer.lock);
    return r;
}

CUresult hk_cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemcpyHtoD_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    bool locked = copy_prepare(dst, src, n);
    return copy_finish(locked, mvm_real_fn.cuMemcpyHtoD_v2(dst, src, n));
}

CUresult hk_cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemcpyHtoD_v2_ptds)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = copy_prepare(dst, src, n);
    return copy_finish(locked, mvm_real_fn.cuMemcpyHtoD_v2_ptds(dst, src, n));
}

CUresult hk_cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemcpyHtoDAsync_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    bool locked = copy_prepare(dst, src, n);
    return copy_finish(locked, mvm_real_fn.cuMemcpyHtoDAsync_v2(dst, src, n, s));
}

CUresult hk_cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemcpyHtoDAsync_v2_ptsz)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = copy_prepare(dst, src, n);
    return copy_finish(locked, mvm_real_fn.cuMemcpyHtoDAsync_v2_ptsz(dst, src, n, s));
}

/* ---- unified copies ---------------------------------------------------------------------- */

/* cuMemcpy and cuMemcpyAsync take any two addresses (the runtime may send cudaMemcpy* here
 * rather than to the HtoD entry points). One with a managed side is held under the read lock
 * like the HtoD copies; into managed memory from host memory, it teaches an object too. */

/* Host memory: pinned, or pageable (which the driver does not know: an error). */
static bool from_host(CUdeviceptr src)
{
    unsigned type = 0;
    if (mvm_heap_contains(src) || !mvm_real_fn.cuPointerGetAttribute)
        return false;
    return mvm_real_fn.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, src) !=
               CUDA_SUCCESS ||
           type == CU_MEMORYTYPE_HOST;
}

static bool unified_prepare(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    if (!mvm_interposer_on() || n == 0)
        return false;
    if (mvm_heap_contains(dst) && from_host(src))
        return copy_prepare(dst, (const void *)(uintptr_t)src, n);
    if (!mvm_heap_contains(dst) && !mvm_heap_contains(src))
        return false;
    mvm_prefetch_settle();
    mvm_count(&mvm_counts_mine()->copies);
    pthread_rwlock_rdlock(&mvm_interposer.lock);
    return true;
}

CUresult hk_cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemcpy)
        return CUDA_ERROR_NOT_INITIALIZED;
    bool locked = unified_prepare(dst, src, n);
    return copy_finish(locked, mvm_real_fn.cuMemcpy(dst, src, n));
}

CUresult hk_cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemcpy_ptds)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = unified_prepare(dst, src, n);
    return copy_finish(locked, mvm_real_fn.cuMemcpy_ptds(dst, src, n));
}

CUresult hk_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemcpyAsync)
        return CUDA_ERROR_NOT_INITIALIZED;
    bool locked = unified_prepare(dst, src, n);
    return copy_finish(locked, mvm_real_fn.cuMemcpyAsync(dst, src, n, s));
}

CUresult hk_cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemcpyAsync_ptsz)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = unified_prepare(dst, src, n);
    return copy_finish(locked, mvm_real_fn.cuMemcpyAsync_ptsz(dst, src, n, s));
}

/* ---- memory queries --------------------------------------------------------------------- */

/* Bytes the managed space can still hand out (all of MOEVM_OVERSUBSCRIBE before the space
 * exists: the budget is then still free device memory). */
static uint64_t managed_free(void)
{
    pthread_rwlock_rdlock(&mvm_interposer.lock);
    uint64_t f = mvm_interposer.space
                     ? mvm_interposer.capacity_bytes -
                           (uint64_t)mvm_interposer.alloc_pages * mvm_interposer.page_size
                     : mvm_interposer.oversub_bytes;
    pthread_rwlock_unlock(&mvm_interposer.lock);
    return f;
}

CUresult hk_cuMemGetInfo_v2(size_t *free_out, size_t *total_out)
{
    if (!mvm_real_load() || !mvm_real_fn.cuMemGetInfo_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    size_t f = 0, t = 0;
    CUresult r = mvm_real_fn.cuMemGetInfo_v2(&f, &t);
    if (r == CUDA_SUCCESS && mvm_interposer_on() && !mvm_in_interposer && on_managed_device()) {
        f += managed_free();
        t += mvm_interposer.oversub_bytes;
    }
    if (r == CUDA_SUCCESS && free_out) /* NULL-safe: some callers pass one pointer only */
        *free_out = f;
    if (r == CUDA_SUCCESS && total_out)
        *total_out = t;
    return r;
}

CUresult hk_cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    if (!mvm_real_load() || !mvm_real_fn.cuDeviceTotalMem_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = mvm_real_fn.cuDeviceTotalMem_v2(bytes, dev);
    if (r == CUDA_SUCCESS && bytes && mvm_interposer_on() && !mvm_in_interposer &&
        (!mvm_interposer.space || dev == mvm_interposer.device))
        *bytes += mvm_interposer.oversub_bytes;
    return r;
}

/* Is NVML's device the managed one? By PCI bus id when the space exists, else by index;
 * when NVML cannot tell, yes (a one-GPU process). */
static bool nvml_managed(nvmlDevice_t_ dev)
{
    nvmlDevice_t_ h;
    if (mvm_interposer.space && mvm_real_fn.nvmlDeviceGetHandleByPciBusId_v2) {
        mvm_space_info info;
        mvm_space_get_info(mvm_interposer.space, &info);
        if (mvm_real_fn.nvmlDeviceGetHandleByPciBusId_v2(info.pci_bus_id, &h) == NVML_SUCCESS_)
            return h == dev;
    }
    if (mvm_real_fn.nvmlDeviceGetHandleByIndex_v2 &&
        mvm_real_fn.nvmlDeviceGetHandleByIndex_v2((unsigned)mvm_interposer.device, &h) ==
            NVML_SUCCESS_)
        return h == dev;
    return true;
}

nvmlReturn_t_ hk_nvmlDeviceGetMemoryInfo(nvmlDevice_t_ dev, nvmlMemory_t_ *m)
{
    mvm_real_load_nvml();
    if (!mvm_real_fn.nvmlDeviceGetMemoryInfo)
        return 3; /* NVML_ERROR_NOT_SUPPORTED */
    nvmlReturn_t_ r = mvm_real_fn.nvmlDeviceGetMemoryInfo(dev, m);
    if (r == NVML_SUCCESS_ && m && mvm_interposer_on() && nvml_managed(dev)) {
        m->total += mvm_interposer.oversub_bytes;
        m->free += managed_free();
        m->used = m->total > m->free ? m->total - m->free : 0;
    }
    return r;
}

nvmlReturn_t_ hk_nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t_ dev, nvmlMemory_v2_t_ *m)
{
    mvm_real_load_nvml();
    if (!mvm_real_fn.nvmlDeviceGetMemoryInfo_v2)
        return 3;
    nvmlReturn_t_ r = mvm_real_fn.nvmlDeviceGetMemoryInfo_v2(dev, m);
    if (r == NVML_SUCCESS_ && m && mvm_interposer_on() && nvml_managed(dev)) {
        m->total += mvm_interposer.oversub_bytes;
        m->free += managed_free();
        uint64_t taken = m->free + m->reserved;
        m->used = m->total > taken ? m->total - taken : 0;
    }
    return r;
}
