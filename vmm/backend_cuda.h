/*
 * The cuda backend's internals, shared by its files: the driver entry points it loads, its
 * state, and the clean-state digests of its pools (vmm/cuda_digest.c).
 */
#ifndef MVM_VMM_BACKEND_CUDA_H
#define MVM_VMM_BACKEND_CUDA_H

#include <cuda.h>
#include <pthread.h>

#include "vmm/backend.h"

/* Every driver entry point we use: field, exported symbol (the exact versioned name), and
 * parameters; all return CUresult. */
#define CU_API(X)                                                                                  \
    X(Init, "cuInit", (unsigned))                                                                  \
    X(DriverGetVersion, "cuDriverGetVersion", (int *))                                             \
    X(DeviceGetCount, "cuDeviceGetCount", (int *))                                                 \
    X(DeviceGet, "cuDeviceGet", (CUdevice *, int))                                                 \
    X(DeviceGetName, "cuDeviceGetName", (char *, int, CUdevice))                                   \
    X(DeviceGetAttribute, "cuDeviceGetAttribute",                                                  \
      (int *, CUdevice_attribute, CUdevice))                                                       \
    X(DeviceGetPCIBusId, "cuDeviceGetPCIBusId", (char *, int, CUdevice))                           \
    X(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext *, CUdevice))                       \
    X(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice))                               \
    X(CtxSetCurrent, "cuCtxSetCurrent", (CUcontext))                                               \
    X(MemGetInfo, "cuMemGetInfo_v2", (size_t *, size_t *))                                         \
    X(MemGetAllocationGranularity, "cuMemGetAllocationGranularity",                                \
      (size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags))                   \
    X(MemAddressReserve, "cuMemAddressReserve",                                                    \
      (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))                            \
    X(MemAddressFree, "cuMemAddressFree", (CUdeviceptr, size_t))                                   \
    X(MemCreate, "cuMemCreate",                                                                    \
      (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,                        \
       unsigned long long))                                                                        \
    X(MemRelease, "cuMemRelease", (CUmemGenericAllocationHandle))                                  \
    X(MemMap, "cuMemMap",                                                                          \
      (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,                                  \
       unsigned long long))                                                                        \
    X(MemUnmap, "cuMemUnmap", (CUdeviceptr, size_t))                                               \
    X(MemSetAccess, "cuMemSetAccess",                                                              \
      (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))                                      \
    X(MemHostRegister, "cuMemHostRegister_v2", (void *, size_t, unsigned))                         \
    X(MemHostUnregister, "cuMemHostUnregister", (void *))                                          \
    X(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", (CUdeviceptr *, void *, unsigned))  \
    X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2",                                                     \
      (CUdeviceptr, const void *, size_t, CUstream))                                               \
    X(MemcpyDtoH, "cuMemcpyDtoH_v2", (void *, CUdeviceptr, size_t))                                \
    X(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", (void *, CUdeviceptr, size_t, CUstream))            \
    X(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", (CUdeviceptr, CUdeviceptr, size_t, CUstream))       \
    X(Memcpy2DAsync, "cuMemcpy2DAsync_v2", (const CUDA_MEMCPY2D *, CUstream))                      \
    X(MemAlloc, "cuMemAlloc_v2", (CUdeviceptr *, size_t))                                          \
    X(MemFree, "cuMemFree_v2", (CUdeviceptr))                                                      \
    X(MemsetD8Async, "cuMemsetD8Async", (CUdeviceptr, unsigned char, size_t, CUstream))            \
    X(ModuleLoadData, "cuModuleLoadData", (CUmodule *, const void *))                              \
    X(ModuleUnload, "cuModuleUnload", (CUmodule))                                                  \
    X(ModuleGetFunction, "cuModuleGetFunction", (CUfunction *, CUmodule, const char *))            \
    X(LaunchKernel, "cuLaunchKernel",                                                              \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,           \
       CUstream, void **, void **))                                                                \
    X(StreamCreate, "cuStreamCreate", (CUstream *, unsigned))                                      \
    X(StreamDestroy, "cuStreamDestroy_v2", (CUstream))                                             \
    X(StreamSynchronize, "cuStreamSynchronize", (CUstream))                                        \
    X(StreamWaitEvent, "cuStreamWaitEvent", (CUstream, CUevent, unsigned))                         \
    X(EventCreate, "cuEventCreate", (CUevent *, unsigned))                                         \
    X(EventRecord, "cuEventRecord", (CUevent, CUstream))                                           \
    X(EventQuery, "cuEventQuery", (CUevent))                                                       \
    X(EventSynchronize, "cuEventSynchronize", (CUevent))                                           \
    X(EventDestroy, "cuEventDestroy_v2", (CUevent))                                                \
    X(EventElapsedTime, "cuEventElapsedTime_v2", (float *, CUevent, CUevent))                      \
    X(GetErrorName, "cuGetErrorName", (CUresult, const char **))

struct cu_api {
#define X(field, sym, params) CUresult(*field) params;
    CU_API(X)
#undef X
};

/* The clean-state digests of a pool's chunks (vmm/cuda_digest.c): what lets a write_back
 * space skip the write-back of a page the device did not change. */
typedef struct cuda_digest cuda_digest;

/* PreScope's AsyncIO (vmm/cuda_lanes.c): the streams a load's bytes are split across. */
#define MVM_COPY_LANES_MAX 8
struct copy_lanes {
    unsigned n;                      /* 1: every load goes on the copy stream */
    unsigned next;                   /* the lane the next stripe goes on */
    unsigned used;                   /* bit i: lane i has loads since the last join */
    CUstream s[MVM_COPY_LANES_MAX];  /* n > 1: the lanes (the copy stream is none of them) */
    CUevent end[MVM_COPY_LANES_MAX]; /* recorded on lane i at a join */
};

typedef struct cuda_backend {
    mvm_backend base; /* first: the space sees only this */
    struct cu_api cu;
    CUdevice dev;
    CUcontext ctx;
    CUstream copy_stream; /* the loads' stream; with several lanes, where they join */
    struct copy_lanes lanes;
    int host_numa_id;  /* location id for HOST_NUMA homes */
    cuda_digest *marks_due; /* the pool digests whose loads await their marks (copy_wait) */
    pthread_mutex_t events_lock; /* events given back, kept for the next ones (record_event): */
    struct mvm_event *events_free; /* a move's fence created and destroyed each time cost two
                                      driver calls a move (FAKECUDA_CALLS) */
} cuda_backend;

/* NULL where the device cannot run the digest kernel (the reason logged at debug level):
 * evictions then always write back. Chunk k is at view + k * page. */
cuda_digest *mvm_cuda_digest_open(cuda_backend *c, size_t n_chunks, CUdeviceptr view,
                                  size_t page);
void mvm_cuda_digest_close(cuda_backend *c, cuda_digest *d);
/* A load into chunk was queued on the copy stream: its mark is due at the next flush, and
 * until then it counts as changed. Migration worker only, like the loads. */
void mvm_cuda_digest_loaded(cuda_digest *d, size_t chunk);
/* Queues on the copy stream, after the loads queued there, one kernel that marks every chunk
 * loaded since the last flush. The caller then waits for the stream before the chunks are
 * mapped where the program's kernels could write them. */
void mvm_cuda_digest_flush(cuda_backend *c, cuda_digest *d);
/* same[i]: chunk chunks[i] has the mark of its last load; false where it changed or has no
 * mark. Queues every check, then waits once. Returns 0, or -1 when a driver call failed
 * (the thread's error says which; same[] all false). Under the space's lock. */
int mvm_cuda_digest_unchanged(cuda_backend *c, cuda_digest *d, const size_t *chunks, size_t n,
                              bool *same);

/* The lanes of MOEVM_COPY_STREAMS, made on the open device's context; 1 makes none. */
mvm_status mvm_cuda_lanes_open(cuda_backend *c);
void mvm_cuda_lanes_close(cuda_backend *c);
/* Starts copying len bytes from src to dst, a whole number of `page`s apart from the last
 * one, split at page boundaries across the lanes. */
mvm_status mvm_cuda_lanes_copy(cuda_backend *c, CUdeviceptr dst, const void *src, size_t len,
                               size_t page);
/* What goes on the copy stream from now on comes after every load started so far. */
mvm_status mvm_cuda_lanes_join(cuda_backend *c);
/* Returns once every lane's work has finished, whatever a failed join left unordered. */
mvm_status mvm_cuda_lanes_sync(cuda_backend *c);

/* Loads the driver (MOEVM_CUDA_LIBRARY) and every entry point of CU_API; the engine's
 * device code (engine/compute/gpu.c) shares it. */
mvm_status mvm_cu_load(struct cu_api *cu);

/* cuInit, then device `ordinal` if it exists (MVM_ERR_RANGE naming how many do); the
 * engine's device code shares this too. */
mvm_status mvm_cu_device(struct cu_api *cu, int ordinal, CUdevice *out);

/* Records the failure of a driver call as the thread's error; returns its status. */
mvm_status mvm_cu_fail(const struct cu_api *cu, CUresult r, const char *what);

/* Returns the failure of a driver call; c is anything with the table as its `cu`. */
#define CU(c, call, what)                                                                          \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return mvm_cu_fail(&(c)->cu, r_, (what));                                              \
    } while (0)

#endif
