/*
 * Kernel-launch hooks. Each launch's parameters are scanned for pointers into the managed
 * range; the objects they point into are made resident before the launch is queued (in
 * stream order: the launch is queued after the moves finished). Which parameters are
 * pointer-sized comes from cuFuncGetParamInfo, asked once per function and kept in a
 * lock-free table; a launch through the `extra` buffer form is scanned the same way, or
 * word by word when the driver cannot describe the parameters.
 *
 * Limits, by construction: a pointer the kernel reads from device memory (an array of
 * pointers) is not seen, and neither is an offset into a managed object passed as an
 * integer. Such pages are read from wherever they are (device or host home), which is
 * correct but not prefetched.
 */
#include <stdlib.h>
#include <string.h>

#include "interpose/preload.h"

#define MAX_PARAMS 256
#define MAX_OBJS 64
#define CACHE_SLOTS 4096

typedef struct pinfo {
    CUfunction f;
    bool known;                /* the driver described the parameters */
    uint32_t n_ptr;
    uint16_t index[MAX_PARAMS], offset[MAX_PARAMS]; /* the 8-byte parameters */
} pinfo;

static _Atomic(pinfo *) cache[CACHE_SLOTS];

static pinfo *describe(CUfunction f)
{
    pinfo *pi = calloc(1, sizeof *pi);
    if (!pi)
        return NULL;
    pi->f = f;
    if (!mvm_real_fn.cuFuncGetParamInfo)
        return pi;
    pi->known = true;
    for (size_t i = 0; i < MAX_PARAMS; i++) {
        size_t off = 0, size = 0;
        CUresult r = mvm_real_fn.cuFuncGetParamInfo(f, i, &off, &size);
        if (r != CUDA_SUCCESS) {
            /* "Invalid value" past the last parameter (at 0 for a kernel without any);
             * anything else: the driver cannot describe this function. */
            pi->known = r == CUDA_ERROR_INVALID_VALUE;
            break;
        }
        if (size == sizeof(uint64_t) && off <= UINT16_MAX) {
            pi->index[pi->n_ptr] = (uint16_t)i;
            pi->offset[pi->n_ptr++] = (uint16_t)off;
        }
    }
    return pi;
}

static pinfo *param_info(CUfunction f)
{
    size_t h = ((uintptr_t)f >> 4) * 0x9E3779B97F4A7C15ull % CACHE_SLOTS;
    for (size_t probe = 0; probe < CACHE_SLOTS; probe++) {
        _Atomic(pinfo *) *slot = &cache[(h + probe) % CACHE_SLOTS];
        pinfo *pi = atomic_load_explicit(slot, memory_order_acquire);
        if (pi && pi->f == f)
            return pi;
        if (pi)
            continue;
        pinfo *fresh = describe(f);
        if (!fresh)
            return NULL;
        pinfo *expected = NULL;
        if (atomic_compare_exchange_strong(slot, &expected, fresh))
            return fresh;
        free(fresh);
        if (expected->f == f)
            return expected;
    }
    return NULL; /* full: described again every time (correct, slower) */
}

typedef struct found {
    mvm_obj *obj[MAX_OBJS];
    uint32_t n;
} found;

static void add(found *fd, uint64_t v)
{
    if (!mvm_heap_contains(v))
        return;
    mvm_alloc *a = mvm_heap_find(v);
    if (!a)
        return;
    mvm_obj *o = mvm_heap_object(a, v);
    for (uint32_t i = 0; i < fd->n; i++)
        if (fd->obj[i] == o)
            return;
    if (fd->n < MAX_OBJS)
        fd->obj[fd->n++] = o;
}

/* The argument buffer of the `extra` launch form, or NULL. */
static const uint8_t *extra_buffer(void **extra, size_t *size)
{
    const uint8_t *buf = NULL;
    *size = 0;
    for (size_t i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END && i < 16; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
            memcpy(size, extra[i + 1], sizeof *size);
    }
    return *size ? buf : NULL;
}

/* Read lock held. */
static void scan(CUfunction f, void **params, void **extra, found *fd)
{
    fd->n = 0;
    pinfo *pi = param_info(f);
    size_t size;
    const uint8_t *buf = extra_buffer(extra, &size);
    uint64_t v;
    if (pi && pi->known && params) {
        for (uint32_t i = 0; i < pi->n_ptr; i++) {
            memcpy(&v, params[pi->index[i]], sizeof v);
            add(fd, v);
        }
    } else if (buf && pi && pi->known) {
        for (uint32_t i = 0; i < pi->n_ptr; i++)
            if (pi->offset[i] + sizeof v <= size) {
                memcpy(&v, buf + pi->offset[i], sizeof v);
                add(fd, v);
            }
    } else if (buf) {
        for (size_t off = 0; off + sizeof v <= size; off += sizeof v) {
            memcpy(&v, buf + off, sizeof v);
            add(fd, v);
        }
    }
}

/* Before a launch: returns with the lock held (read, or write after serving a miss) when
 * the launch touches managed memory; false with no lock held otherwise. */
static bool prepare(CUfunction f, void **params, void **extra)
{
    atomic_fetch_add_explicit(&mvm_pl.launches, 1, memory_order_relaxed);
    if (!mvm_pl_on())
        return false;
    pthread_rwlock_rdlock(&mvm_pl.lock);
    found fd;
    if (mvm_pl.space)
        scan(f, params, extra, &fd);
    if (!mvm_pl.space || fd.n == 0) {
        pthread_rwlock_unlock(&mvm_pl.lock);
        return false;
    }
    atomic_fetch_add_explicit(&mvm_pl.launches_managed, 1, memory_order_relaxed);
    if (mvm_paging_resident(fd.obj, fd.n)) {
        atomic_fetch_add_explicit(&mvm_pl.launch_hits, 1, memory_order_relaxed);
    } else {
        /* Objects may change while no lock is held: scan again under the write lock. */
        pthread_rwlock_unlock(&mvm_pl.lock);
        pthread_rwlock_wrlock(&mvm_pl.lock);
        scan(f, params, extra, &fd);
        mvm_paging_serve(fd.obj, fd.n);
    }
    for (uint32_t i = 0; i < fd.n; i++)
        atomic_fetch_add_explicit(&fd.obj[i]->uses, 1, memory_order_relaxed);
    return true;
}

static CUresult finish(bool locked, CUresult r)
{
    if (locked)
        pthread_rwlock_unlock(&mvm_pl.lock);
    return r;
}

CUresult hk_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned shared, CUstream s, void **params,
                           void **extra)
{
    if (!mvm_real_load() || !mvm_real_fn.cuLaunchKernel)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = prepare(f, params, extra);
    return finish(locked, mvm_real_fn.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s,
                                                     params, extra));
}

CUresult hk_cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                CUstream s, void **params, void **extra)
{
    if (!mvm_real_load() || !mvm_real_fn.cuLaunchKernel_ptsz)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = prepare(f, params, extra);
    return finish(locked, mvm_real_fn.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shared, s,
                                                          params, extra));
}

CUresult hk_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                             void **extra)
{
    if (!mvm_real_load() || !mvm_real_fn.cuLaunchKernelEx)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = prepare(f, params, extra);
    return finish(locked, mvm_real_fn.cuLaunchKernelEx(config, f, params, extra));
}

CUresult hk_cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                  void **extra)
{
    if (!mvm_real_load() || !mvm_real_fn.cuLaunchKernelEx_ptsz)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = prepare(f, params, extra);
    return finish(locked, mvm_real_fn.cuLaunchKernelEx_ptsz(config, f, params, extra));
}

/* A graph's kernels are not scanned (their parameters live in the graph); the read lock
 * only keeps a miss being served from remapping pages under the graph's queueing. */
static bool graph_prepare(void)
{
    atomic_fetch_add_explicit(&mvm_pl.graph_launches, 1, memory_order_relaxed);
    if (!mvm_pl_on())
        return false;
    pthread_rwlock_rdlock(&mvm_pl.lock);
    return true;
}

CUresult hk_cuGraphLaunch(CUgraphExec g, CUstream s)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGraphLaunch)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = graph_prepare();
    return finish(locked, mvm_real_fn.cuGraphLaunch(g, s));
}

CUresult hk_cuGraphLaunch_ptsz(CUgraphExec g, CUstream s)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGraphLaunch_ptsz)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = graph_prepare();
    return finish(locked, mvm_real_fn.cuGraphLaunch_ptsz(g, s));
}
