/*
 * Kernel-launch hooks. Each launch's parameters are scanned for pointers into the managed
 * range; the objects they point into are made resident before the launch is queued (in
 * stream order: the launch is queued after the moves finished). The parameter layout comes
 * from cuFuncGetParamInfo, asked once per function and kept in a lock-free table: every
 * parameter of 8 bytes or more is read as 8-byte words, so pointers inside aggregates count
 * too (PyTorch passes its elementwise kernels' tensors as one Array<char *, N>, CUTLASS a
 * Params struct). A word that is not a pointer but happens to fall in the managed range
 * only makes an object resident needlessly. A launch through the `extra` buffer form is
 * scanned the same way, or word by word when the driver cannot describe the parameters.
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
#define CACHE_SLOTS 4096

/* A parameter that may hold pointers: 8 bytes or more (a pointer, or an aggregate that
 * can contain some), scanned as `words` 8-byte words from `offset`. Smaller ones (int,
 * float) cannot hold a device pointer. */
typedef struct pword {
    uint16_t index, offset, words;
} pword;

typedef struct pinfo {
    CUfunction f;
    bool known;                /* the driver described the parameters */
    uint32_t n;
    pword p[MAX_PARAMS];
} pinfo;

static _Atomic(pinfo *) cache[CACHE_SLOTS];

/* Parameter i of f, which is a CUfunction or (kernel) a CUkernel: the driver launches
 * either, and context-independent loading (cuLibrary*, used by the CUDA runtime) hands out
 * CUkernels, which only cuKernelGetParamInfo is documented to describe. */
static CUresult param_at(CUfunction f, bool kernel, size_t i, size_t *off, size_t *size)
{
    if (kernel)
        return mvm_real_fn.cuKernelGetParamInfo
                   ? mvm_real_fn.cuKernelGetParamInfo((CUkernel)f, i, off, size)
                   : CUDA_ERROR_NOT_SUPPORTED;
    return mvm_real_fn.cuFuncGetParamInfo ? mvm_real_fn.cuFuncGetParamInfo(f, i, off, size)
                                          : CUDA_ERROR_NOT_SUPPORTED;
}

static pinfo *describe(CUfunction f)
{
    pinfo *pi = calloc(1, sizeof *pi);
    if (!pi)
        return NULL;
    pi->f = f;
    pi->known = true;
    bool kernel = false;
    for (size_t i = 0; i < MAX_PARAMS; i++) {
        size_t off = 0, size = 0;
        CUresult r = param_at(f, kernel, i, &off, &size);
        if (r != CUDA_SUCCESS && i == 0 && !kernel) {
            /* Not a CUfunction, or one without parameters: ask again as a CUkernel, and
             * keep the first answer if that fails too. */
            CUresult rk = param_at(f, true, i, &off, &size);
            if (rk == CUDA_SUCCESS)
                kernel = true;
            r = rk == CUDA_SUCCESS ? rk : r;
        }
        if (r != CUDA_SUCCESS) {
            /* "Invalid value" past the last parameter (at 0 for a kernel without any);
             * anything else: the driver cannot describe this function. */
            pi->known = r == CUDA_ERROR_INVALID_VALUE;
            break;
        }
        /* Kernel parameters end within 32 KiB (CUDA 12.1's limit), so uint16_t holds them. */
        if (size >= sizeof(uint64_t) && off + size <= UINT16_MAX)
            pi->p[pi->n++] = (pword){(uint16_t)i, (uint16_t)off,
                                     (uint16_t)(size / sizeof(uint64_t))};
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

/* The words of bytes[0, n*8), unaligned-safe; only values in the managed range go on. */
static void emit_words(const uint8_t *bytes, uint32_t n, mvm_emit_fn emit, void *ctx)
{
    for (uint32_t w = 0; w < n; w++) {
        uint64_t v;
        memcpy(&v, bytes + (size_t)w * sizeof v, sizeof v);
        if (mvm_heap_contains(v))
            emit(ctx, v);
    }
}

void mvm_scan_params(CUfunction f, void **params, void **extra, mvm_emit_fn emit, void *ctx)
{
    pinfo *pi = param_info(f);
    size_t size;
    const uint8_t *buf = extra_buffer(extra, &size);
    if (pi && pi->known && params) {
        for (uint32_t i = 0; i < pi->n; i++)
            if (params[pi->p[i].index])
                emit_words(params[pi->p[i].index], pi->p[i].words, emit, ctx);
    } else if (buf && pi && pi->known) {
        for (uint32_t i = 0; i < pi->n; i++) {
            size_t end = pi->p[i].offset + (size_t)pi->p[i].words * sizeof(uint64_t);
            if (end <= size)
                emit_words(buf + pi->p[i].offset, pi->p[i].words, emit, ctx);
        }
    } else if (buf) {
        emit_words(buf, (uint32_t)(size / sizeof(uint64_t)), emit, ctx);
    }
}

static void emit_object(void *set, uint64_t va)
{
    mvm_objset_add(set, va);
}

CUresult mvm_launch_finish(bool locked, CUresult r)
{
    if (locked)
        pthread_rwlock_unlock(&mvm_interposer.lock);
    return r;
}

bool mvm_launch_prepare(mvm_collect_fn collect, const void *what)
{
    if (!mvm_interposer_on())
        return false;
    pthread_rwlock_rdlock(&mvm_interposer.lock);
    mvm_objset set;
    mvm_objset_init(&set);
    if (mvm_interposer.space)
        collect(what, &set);
    if (set.n == 0) {
        pthread_rwlock_unlock(&mvm_interposer.lock);
        return false;
    }
    mvm_counts *c = mvm_counts_mine();
    mvm_count(&c->managed);
    if (mvm_paging_resident(set.obj, set.n)) {
        mvm_count(&c->hits);
    } else {
        if (!atomic_load_explicit(&mvm_interposer.captures, memory_order_acquire)) {
            pthread_rwlock_unlock(&mvm_interposer.lock);
            pthread_rwlock_wrlock(&mvm_interposer.lock);
        }
        /* While a stream is being captured, draining the device would break the capture
         * (and the captured launch does not run now): the pages are read where they are,
         * and a graph launch makes its objects resident. Under the write lock no capture
         * can begin (graph.c counts a capture under it, before starting it). */
        if (atomic_load_explicit(&mvm_interposer.captures, memory_order_acquire)) {
            mvm_count(&c->deferred);
        } else {
            /* Objects may have changed while no lock was held: collect again, once the
             * pointers taught their extents' slices (which changes objects too). */
            set.n = 0;
            if (mvm_interposer.slices) {
                set.learn = true;
                collect(what, &set);
                set.learn = false;
            }
            collect(what, &set);
            mvm_paging_serve(set.obj, set.n);
        }
    }
    if (!atomic_load_explicit(&mvm_interposer.captures, memory_order_acquire))
        mvm_prefetch_learn(set.obj, set.n); /* a captured launch does not run now */
    for (uint32_t i = 0; i < set.n; i++)
        atomic_fetch_add_explicit(&set.obj[i]->uses, 1, memory_order_relaxed);
    mvm_objset_free(&set);
    return true;
}

/* A _ptsz launch on stream 0 runs on the calling thread's per-thread stream. */
#define PTSZ(s) ((s) ? (s) : CU_STREAM_PER_THREAD)

typedef struct kernel_launch {
    CUfunction f;
    void **params, **extra;
    mvm_route *route;          /* the routing ids, read at most once for this launch */
} kernel_launch;

static void collect_kernel(const void *what, mvm_objset *set)
{
    const kernel_launch *k = what;
    if (mvm_interposer.routing && mvm_interposer.routed_extents && !set->learn)
        mvm_route_collect(k->route, k->f, k->params, k->extra, set);
    else
        mvm_scan_params(k->f, k->params, k->extra, emit_object, set);
}

bool mvm_launch_prepare_kernel(CUfunction f, void **params, void **extra, CUstream s)
{
    if (!mvm_interposer_on())
        return false;
    mvm_count(&mvm_counts_mine()->launches);
    mvm_route route;
    route.stream = s;
    route.read = false;
    route.n = 0;
    kernel_launch k = {f, params, extra, &route};
    return mvm_launch_prepare(collect_kernel, &k);
}

CUresult hk_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned shared, CUstream s, void **params,
                           void **extra)
{
    if (!mvm_real_load() || !mvm_real_fn.cuLaunchKernel)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = mvm_launch_prepare_kernel(f, params, extra, s);
    CUresult r = mvm_real_fn.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
    return mvm_launch_finish(locked, r);
}

CUresult hk_cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                CUstream s, void **params, void **extra)
{
    if (!mvm_real_load() || !mvm_real_fn.cuLaunchKernel_ptsz)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = mvm_launch_prepare_kernel(f, params, extra, PTSZ(s));
    CUresult r = mvm_real_fn.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shared, s, params,
                                                 extra);
    return mvm_launch_finish(locked, r);
}

CUresult hk_cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                      unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                      CUstream s, void **params)
{
    if (!mvm_real_load() || !mvm_real_fn.cuLaunchCooperativeKernel)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = mvm_launch_prepare_kernel(f, params, NULL, s);
    CUresult r = mvm_real_fn.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared, s,
                                                       params);
    return mvm_launch_finish(locked, r);
}

CUresult hk_cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                           unsigned bx, unsigned by, unsigned bz,
                                           unsigned shared, CUstream s, void **params)
{
    if (!mvm_real_load() || !mvm_real_fn.cuLaunchCooperativeKernel_ptsz)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = mvm_launch_prepare_kernel(f, params, NULL, PTSZ(s));
    CUresult r = mvm_real_fn.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shared,
                                                            s, params);
    return mvm_launch_finish(locked, r);
}

CUresult hk_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                             void **extra)
{
    if (!mvm_real_load() || !mvm_real_fn.cuLaunchKernelEx)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = mvm_launch_prepare_kernel(f, params, extra, config ? config->hStream : NULL);
    return mvm_launch_finish(locked, mvm_real_fn.cuLaunchKernelEx(config, f, params, extra));
}

CUresult hk_cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                  void **extra)
{
    if (!mvm_real_load() || !mvm_real_fn.cuLaunchKernelEx_ptsz)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked =
        mvm_launch_prepare_kernel(f, params, extra, PTSZ(config ? config->hStream : NULL));
    return mvm_launch_finish(locked, mvm_real_fn.cuLaunchKernelEx_ptsz(config, f, params, extra));
}

/* Deprecated, and still exported: one cooperative kernel per device, queued as one launch.
 * Every entry's objects are made resident first (those on other devices are not managed and
 * so not found). */
typedef struct multi_launch {
    const CUDA_LAUNCH_PARAMS *list;
    unsigned n;
} multi_launch;

static void collect_multi(const void *what, mvm_objset *set)
{
    const multi_launch *m = what;
    for (unsigned i = 0; i < m->n; i++)
        mvm_scan_params(m->list[i].function, m->list[i].kernelParams, NULL, emit_object, set);
}

CUresult hk_cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int n,
                                                 unsigned int flags)
{
    if (!mvm_real_load() || !mvm_real_fn.cuLaunchCooperativeKernelMultiDevice)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = false;
    if (list && mvm_interposer_on()) {
        mvm_count(&mvm_counts_mine()->launches);
        multi_launch m = {list, n};
        locked = mvm_launch_prepare(collect_multi, &m);
    }
    return mvm_launch_finish(locked,
                             mvm_real_fn.cuLaunchCooperativeKernelMultiDevice(list, n, flags));
}
