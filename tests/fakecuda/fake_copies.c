/*
 * fake_copies.c: the copies and memsets of fakecuda (libcuda.so.1).
 *
 *   - Linear copies of every direction (HtoD, DtoH, DtoD, and the unified cuMemcpy, whose
 *     sides are told by their addresses), 2D copies (host, device and unified sides; CUDA
 *     arrays are not modelled: CUDA_ERROR_NOT_SUPPORTED) and cuMemcpyBatchAsync_v2 (unified
 *     sides; the attributes are checked for presence only).
 *   - Memsets of 8, 16 and 32-bit elements, linear and 2D, synchronous and stream-ordered.
 * A device side must be mapped and accessible to the current device (read-write for a
 * destination), or the call fails with CUDA_ERROR_INVALID_VALUE and writes nothing. Every
 * copy runs inside the call; stream-ordered ones check their stream first. A copy with a
 * non-zero size first sleeps for the configured copy delay, outside the library's lock, so
 * tests can hold a copy in flight while other threads run.
 *
 * Each function is exported with its per-thread-default-stream twin (_ptds or _ptsz), as
 * the real library does: the same body under its own address.
 */
#include <cuda.h>

#include <stdint.h>
#include <string.h>

#include "fakecuda_internal.h"

/* One side of a copy: its first byte, the distance between rows, and whether it is device
 * memory (1), host memory (0), or told by its address (-1). */
typedef struct side {
    uintptr_t at;
    size_t pitch;
    int dev;
} side;

static int side_ok(const side *s, size_t width, size_t height, unsigned need)
{
    int dev = s->dev < 0 ? fk_unified_is_device(s->at) : s->dev;
    for (size_t r = 0; r < height; r++)
        if (dev ? !fk_device_range(s->at + r * s->pitch, width, need, NULL) : s->at == 0)
            return 0;
    return 1;
}

/* Copies `height` rows of `width` bytes, under the lock; checks everything before writing
 * anything. */
static CUresult rows_locked(side dst, side src, size_t width, size_t height)
{
    if (height > 1 && (dst.pitch < width || src.pitch < width)) return CUDA_ERROR_INVALID_VALUE;
    if (width && height &&
        (!side_ok(&dst, width, height, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) ||
         !side_ok(&src, width, height, CU_MEM_ACCESS_FLAGS_PROT_READ)))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t r = 0; width && r < height; r++) /* under the lock: nothing unmaps */
        memmove((void *)(dst.at + r * dst.pitch), (const void *)(src.at + r * src.pitch), width);
    return CUDA_SUCCESS;
}

static CUresult copy_rows(enum fk_fn fn, side dst, side src, size_t width, size_t height,
                          CUstream s)
{
    if (width && height)
        fk_copy_delay();
    CUresult rc = fk_enter(fn, 1);
    if (!rc) rc = fk_need_ctx();
    if (!rc && !fk_stream_ok(s)) rc = CUDA_ERROR_INVALID_HANDLE;
    if (!rc) rc = rows_locked(dst, src, width, height);
    return fk_leave(rc);
}

static CUresult copy(enum fk_fn fn, uintptr_t dst, int dst_dev, uintptr_t src, int src_dev,
                     size_t n, CUstream s)
{
    return copy_rows(fn, (side){dst, n, dst_dev}, (side){src, n, src_dev}, n, 1, s);
}

/* A 2D copy's side as a `side`: 0 with *out set, or the error for an unusable one. */
static CUresult side_2d(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x,
                        size_t y, size_t pitch, side *out)
{
    switch (type) {
    case CU_MEMORYTYPE_HOST: *out = (side){(uintptr_t)host, pitch, 0}; break;
    case CU_MEMORYTYPE_DEVICE: *out = (side){(uintptr_t)dev, pitch, 1}; break;
    case CU_MEMORYTYPE_UNIFIED: *out = (side){(uintptr_t)dev, pitch, -1}; break;
    case CU_MEMORYTYPE_ARRAY: return CUDA_ERROR_NOT_SUPPORTED;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    out->at += y * pitch + x;
    return CUDA_SUCCESS;
}

static CUresult copy_2d(enum fk_fn fn, const CUDA_MEMCPY2D *p, CUstream s)
{
    side dst, src;
    CUresult rc = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (!rc) rc = side_2d(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY,
                          p->dstPitch, &dst);
    if (!rc) rc = side_2d(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY,
                          p->srcPitch, &src);
    if (rc) { /* still counted, and subject to the usual entry rules */
        CUresult entry = fk_enter(fn, 1);
        return fk_leave(entry ? entry : rc);
    }
    return copy_rows(fn, dst, src, p->WidthInBytes, p->Height, s);
}

static CUresult copy_batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                           CUmemcpyAttributes *attrs, size_t *attr_idx, size_t n_attrs,
                           CUstream s)
{
    if (!dsts || !srcs || !sizes || !count || !attrs || !attr_idx || !n_attrs) {
        CUresult entry = fk_enter(FN_cuMemcpyBatchAsync, 1);
        return fk_leave(entry ? entry : CUDA_ERROR_INVALID_VALUE);
    }
    for (size_t i = 0; i < count; i++) {
        CUresult rc = copy(FN_cuMemcpyBatchAsync, dsts[i], -1, srcs[i], -1, sizes[i], s);
        if (rc) return rc;
    }
    return CUDA_SUCCESS;
}

/* Fills `height` rows of `width` elements of `elem` bytes with `value` (under the lock). */
static CUresult fill(uintptr_t va, size_t pitch, unsigned elem, unsigned value, size_t width,
                     size_t height, CUstream s)
{
    size_t bytes = width * elem;
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!fk_stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
    if ((height > 1 && pitch < bytes) || va % elem || (height > 1 && pitch % elem))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t r = 0; bytes && r < height; r++)
        if (!fk_device_range(va + r * pitch, bytes, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, NULL))
            return CUDA_ERROR_INVALID_VALUE;
    for (size_t r = 0; r < height; r++)
        for (size_t i = 0; i < width; i++)
            memcpy((void *)(va + r * pitch + i * elem), &value, elem); /* little-endian */
    return CUDA_SUCCESS;
}

/* ---- graph nodes (fake_graphs.c), under the lock ---- */

CUresult fk_copy_3d(const CUDA_MEMCPY3D *p)
{
    side dst, src;
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (p->Depth != 1 || p->srcZ || p->dstZ || p->srcLOD || p->dstLOD)
        return CUDA_ERROR_NOT_SUPPORTED; /* one layer only */
    CUresult rc = side_2d(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY,
                          p->dstPitch, &dst);
    if (!rc) rc = side_2d(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY,
                          p->srcPitch, &src);
    return rc ? rc : rows_locked(dst, src, p->WidthInBytes, p->Height);
}

CUresult fk_memset_node(const CUDA_MEMSET_NODE_PARAMS *p)
{
    if (!p || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4))
        return CUDA_ERROR_INVALID_VALUE;
    return fill(p->dst, p->pitch, p->elementSize, p->value, p->width, p->height, NULL);
}

/* ---- the exports: each function and its twin share a body ---- */

/* Defines `name` and `name##twin` (declared with name's type, which checks its signature:
 * cuda.h declares the twins only for per-thread-default-stream builds). */
#define FK_TWIN(name, twin, params, body)                                                      \
    __typeof__(name) name##twin;                                                               \
    CUresult CUDAAPI name params body                                                          \
    CUresult CUDAAPI name##twin params body

FK_TWIN(cuMemcpyHtoD_v2, _ptds, (CUdeviceptr dst, const void *src, size_t n),
        { return copy(FN_cuMemcpyHtoD, (uintptr_t)dst, 1, (uintptr_t)src, 0, n, NULL); })
FK_TWIN(cuMemcpyHtoDAsync_v2, _ptsz, (CUdeviceptr dst, const void *src, size_t n, CUstream s),
        { return copy(FN_cuMemcpyHtoDAsync, (uintptr_t)dst, 1, (uintptr_t)src, 0, n, s); })
FK_TWIN(cuMemcpyDtoH_v2, _ptds, (void *dst, CUdeviceptr src, size_t n),
        { return copy(FN_cuMemcpyDtoH, (uintptr_t)dst, 0, (uintptr_t)src, 1, n, NULL); })
FK_TWIN(cuMemcpyDtoHAsync_v2, _ptsz, (void *dst, CUdeviceptr src, size_t n, CUstream s),
        { return copy(FN_cuMemcpyDtoHAsync, (uintptr_t)dst, 0, (uintptr_t)src, 1, n, s); })
FK_TWIN(cuMemcpyDtoD_v2, _ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n),
        { return copy(FN_cuMemcpyDtoD, dst, 1, src, 1, n, NULL); })
FK_TWIN(cuMemcpyDtoDAsync_v2, _ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s),
        { return copy(FN_cuMemcpyDtoDAsync, dst, 1, src, 1, n, s); })
FK_TWIN(cuMemcpy, _ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n),
        { return copy(FN_cuMemcpy, dst, -1, src, -1, n, NULL); })
FK_TWIN(cuMemcpyAsync, _ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s),
        { return copy(FN_cuMemcpyAsync, dst, -1, src, -1, n, s); })
FK_TWIN(cuMemcpy2D_v2, _ptds, (const CUDA_MEMCPY2D *p), { return copy_2d(FN_cuMemcpy2D, p, NULL); })
FK_TWIN(cuMemcpy2DAsync_v2, _ptsz, (const CUDA_MEMCPY2D *p, CUstream s),
        { return copy_2d(FN_cuMemcpy2DAsync, p, s); })
FK_TWIN(cuMemcpyBatchAsync_v2, _ptsz,
        (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
         CUmemcpyAttributes *attrs, size_t *attr_idx, size_t n_attrs, CUstream s),
        { return copy_batch(dsts, srcs, sizes, count, attrs, attr_idx, n_attrs, s); })

/* The memsets of one element size: linear and 2D, synchronous and stream-ordered. */
#define FK_MEMSETS(bits, type)                                                                 \
    FK_TWIN(cuMemsetD##bits##_v2, _ptds, (CUdeviceptr d, type v, size_t n),                    \
            FK_CALL(cuMemsetD##bits, 1, fill(d, 0, sizeof(type), v, n, 1, NULL)))              \
    FK_TWIN(cuMemsetD##bits##Async, _ptsz, (CUdeviceptr d, type v, size_t n, CUstream s),      \
            FK_CALL(cuMemsetD##bits##Async, 1, fill(d, 0, sizeof(type), v, n, 1, s)))          \
    FK_TWIN(cuMemsetD2D##bits##_v2, _ptds,                                                     \
            (CUdeviceptr d, size_t pitch, type v, size_t w, size_t h),                         \
            FK_CALL(cuMemsetD2D##bits, 1, fill(d, pitch, sizeof(type), v, w, h, NULL)))        \
    FK_TWIN(cuMemsetD2D##bits##Async, _ptsz,                                                   \
            (CUdeviceptr d, size_t pitch, type v, size_t w, size_t h, CUstream s),             \
            FK_CALL(cuMemsetD2D##bits##Async, 1, fill(d, pitch, sizeof(type), v, w, h, s)))
FK_MEMSETS(8, unsigned char)
FK_MEMSETS(16, unsigned short)
FK_MEMSETS(32, unsigned int)
