/*
 * libmoevm_preload.so: moevm's memory management under an unmodified CUDA program
 * (docs/interpose.md). Internal header shared by the interposer's files:
 *
 *   real.c     the real driver and NVML entry points; the dlsym and cuGetProcAddress hooks
 *              that hand the program our hooks, routed by the real function's address
 *   state.c    options, lazy initialisation after the real cuInit, fork and exit handling
 *   heap.c     managed allocations: ranges of one write-back moevm space, and the objects
 *              (extents) learned from host-to-device copies
 *   slice.c    expert slices: an extent cut at the stride its launches' pointers show, or
 *              into the experts its GGUF file declares
 *   gguf_src.c fused expert tensors recognised by the GGUF file their copy came from
 *              (gguf_scan.c reads the file's tensor infos)
 *   route.c    routed experts: the routing ids a kernel reads from device memory, read
 *              before it runs, so only the experts it uses of a fused tensor are loaded
 *   paging.c   demand paging: making a launch's objects resident, with the evict policy
 *   launch.c   the kernel-launch hooks: parameter scanning over a per-function cache
 *   launch_legacy.c  the pre-CUDA-4 launch API: shadowed parameter buffers, scanned alike
 *   graph.c    CUDA graphs: stream capture, and the objects of each instantiated graph
 *   memory.c   allocation, free, host-to-device copy and memory-query hooks (driver, NVML)
 *   devcopy.c  device-side copies and memsets: held off while a miss remaps pages
 *   report.c   call sites (libunwind), the MOEVM_REPORT JSON and the MOEVM_LOG summary
 *
 * Locking: `mvm_interposer.lock` is a read-write lock. Launches, graph launches, and copies and
 * memsets that touch managed memory hold it for reading while they are queued; anything
 * that changes residency or the allocation table holds it for writing, and drains the
 * device (cuCtxSynchronize) before it moves a page, so no queued kernel ever sees a page
 * change backing under it.
 */
#ifndef MVM_INTERPOSE_PRELOAD_H
#define MVM_INTERPOSE_PRELOAD_H

#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "moevm/moevm.h"
#include "policy/evict_driver.h"
#include "policy/policy.h"

/* ---- the hooked and the used driver entry points ---------------------------------------- */

typedef int nvmlReturn_t_;          /* NVML's types, ABI-compatible (nvml.h is not shipped) */
typedef struct nvmlDevice_st *nvmlDevice_t_;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t_;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t_;

/* X(field, exported symbol, return type, parameters): every symbol we export as a hook.
 * The real function of the same exact name is resolved from libcuda (or NVML). */
#define MVM_CU_HOOKS(X)                                                                       \
    X(cuInit, "cuInit", CUresult, (unsigned int))                                              \
    X(cuGetProcAddress_v1, "cuGetProcAddress", CUresult,                                          \
      (const char *, void **, int, cuuint64_t))                                                \
    X(cuGetProcAddress_v2, "cuGetProcAddress_v2", CUresult,                                    \
      (const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))              \
    X(cuMemAlloc_v2, "cuMemAlloc_v2", CUresult, (CUdeviceptr *, size_t))                       \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch_v2", CUresult,                                      \
      (CUdeviceptr *, size_t *, size_t, size_t, unsigned int))                                 \
    X(cuMemFree_v2, "cuMemFree_v2", CUresult, (CUdeviceptr))                                   \
    X(cuMemAllocAsync, "cuMemAllocAsync", CUresult, (CUdeviceptr *, size_t, CUstream))         \
    X(cuMemAllocAsync_ptsz, "cuMemAllocAsync_ptsz", CUresult,                                  \
      (CUdeviceptr *, size_t, CUstream))                                                       \
    X(cuMemFreeAsync, "cuMemFreeAsync", CUresult, (CUdeviceptr, CUstream))                     \
    X(cuMemFreeAsync_ptsz, "cuMemFreeAsync_ptsz", CUresult, (CUdeviceptr, CUstream))           \
    X(cuMemGetInfo_v2, "cuMemGetInfo_v2", CUresult, (size_t *, size_t *))                      \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem_v2", CUresult, (size_t *, CUdevice))              \
    X(cuIpcGetMemHandle, "cuIpcGetMemHandle", CUresult, (CUipcMemHandle *, CUdeviceptr))       \
    X(cuMemGetAddressRange_v2, "cuMemGetAddressRange_v2", CUresult,                            \
      (CUdeviceptr *, size_t *, CUdeviceptr))                                                  \
    X(cuPointerGetAttribute, "cuPointerGetAttribute", CUresult,                                \
      (void *, CUpointer_attribute, CUdeviceptr))                                              \
    X(cuPointerGetAttributes, "cuPointerGetAttributes", CUresult,                              \
      (unsigned int, CUpointer_attribute *, void **, CUdeviceptr))                             \
    X(cuMemcpyHtoD_v2, "cuMemcpyHtoD_v2", CUresult, (CUdeviceptr, const void *, size_t))       \
    X(cuMemcpyHtoD_v2_ptds, "cuMemcpyHtoD_v2_ptds", CUresult,                                  \
      (CUdeviceptr, const void *, size_t))                                                     \
    X(cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync_v2", CUresult,                                  \
      (CUdeviceptr, const void *, size_t, CUstream))                                           \
    X(cuMemcpyHtoDAsync_v2_ptsz, "cuMemcpyHtoDAsync_v2_ptsz", CUresult,                        \
      (CUdeviceptr, const void *, size_t, CUstream))                                           \
    X(cuMemcpy, "cuMemcpy", CUresult, (CUdeviceptr, CUdeviceptr, size_t))                      \
    X(cuMemcpy_ptds, "cuMemcpy_ptds", CUresult, (CUdeviceptr, CUdeviceptr, size_t))            \
    X(cuMemcpyAsync, "cuMemcpyAsync", CUresult, (CUdeviceptr, CUdeviceptr, size_t, CUstream))  \
    X(cuMemcpyAsync_ptsz, "cuMemcpyAsync_ptsz", CUresult,                                      \
      (CUdeviceptr, CUdeviceptr, size_t, CUstream))                                            \
    X(cuLaunchKernel, "cuLaunchKernel", CUresult,                                              \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,       \
       CUstream, void **, void **))                                                            \
    X(cuLaunchKernel_ptsz, "cuLaunchKernel_ptsz", CUresult,                                    \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,       \
       CUstream, void **, void **))                                                            \
    X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", CUresult,                        \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,       \
       CUstream, void **))                                                                     \
    X(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel_ptsz", CUresult,              \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,       \
       CUstream, void **))                                                                     \
    X(cuLaunchKernelEx, "cuLaunchKernelEx", CUresult,                                          \
      (const CUlaunchConfig *, CUfunction, void **, void **))                                  \
    X(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx_ptsz", CUresult,                                \
      (const CUlaunchConfig *, CUfunction, void **, void **))                                  \
    X(cuLaunchCooperativeKernelMultiDevice, "cuLaunchCooperativeKernelMultiDevice", CUresult,  \
      (CUDA_LAUNCH_PARAMS *, unsigned int, unsigned int))                                      \
    /* the pre-CUDA-4 launch API (launch_legacy.c) */                                          \
    X(cuParamSetSize, "cuParamSetSize", CUresult, (CUfunction, unsigned int))                  \
    X(cuParamSeti, "cuParamSeti", CUresult, (CUfunction, int, unsigned int))                   \
    X(cuParamSetf, "cuParamSetf", CUresult, (CUfunction, int, float))                          \
    X(cuParamSetv, "cuParamSetv", CUresult, (CUfunction, int, void *, unsigned int))           \
    X(cuLaunch, "cuLaunch", CUresult, (CUfunction))                                            \
    X(cuLaunchGrid, "cuLaunchGrid", CUresult, (CUfunction, int, int))                          \
    X(cuLaunchGridAsync, "cuLaunchGridAsync", CUresult, (CUfunction, int, int, CUstream))      \
    X(cuStreamBeginCapture_v2, "cuStreamBeginCapture_v2", CUresult,                            \
      (CUstream, CUstreamCaptureMode))                                                         \
    X(cuStreamBeginCapture_v2_ptsz, "cuStreamBeginCapture_v2_ptsz", CUresult,                  \
      (CUstream, CUstreamCaptureMode))                                                         \
    X(cuStreamBeginCaptureToGraph, "cuStreamBeginCaptureToGraph", CUresult,                    \
      (CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,                \
       CUstreamCaptureMode))                                                                   \
    X(cuStreamEndCapture, "cuStreamEndCapture", CUresult, (CUstream, CUgraph *))               \
    X(cuStreamEndCapture_ptsz, "cuStreamEndCapture_ptsz", CUresult, (CUstream, CUgraph *))     \
    X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", CUresult,                    \
      (CUgraphExec *, CUgraph, unsigned long long))                                            \
    X(cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams", CUresult,                  \
      (CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *))                               \
    X(cuGraphInstantiateWithParams_ptsz, "cuGraphInstantiateWithParams_ptsz", CUresult,        \
      (CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *))                               \
    X(cuGraphExecUpdate_v2, "cuGraphExecUpdate_v2", CUresult,                                  \
      (CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo *))                                   \
    X(cuGraphExecKernelNodeSetParams_v2, "cuGraphExecKernelNodeSetParams_v2", CUresult,        \
      (CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *))                             \
    X(cuGraphExecMemcpyNodeSetParams, "cuGraphExecMemcpyNodeSetParams", CUresult,              \
      (CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D *, CUcontext))                            \
    X(cuGraphExecMemsetNodeSetParams, "cuGraphExecMemsetNodeSetParams", CUresult,              \
      (CUgraphExec, CUgraphNode, const CUDA_MEMSET_NODE_PARAMS *, CUcontext))                  \
    X(cuGraphExecNodeSetParams, "cuGraphExecNodeSetParams", CUresult,                          \
      (CUgraphExec, CUgraphNode, CUgraphNodeParams *))                                         \
    X(cuGraphExecDestroy, "cuGraphExecDestroy", CUresult, (CUgraphExec))                       \
    X(cuGraphLaunch, "cuGraphLaunch", CUresult, (CUgraphExec, CUstream))                       \
    X(cuGraphLaunch_ptsz, "cuGraphLaunch_ptsz", CUresult, (CUgraphExec, CUstream))

/* Device-side copies and memsets (devcopy.c): passed through, but held under the read lock
 * when they touch managed memory, so that a miss served by another thread cannot remap
 * their pages while they are being queued. X(field, symbol, parameters, arguments, touches:
 * whether this call reaches managed memory); MVM_TWIN(X, ...) is a function and its
 * per-thread-stream twin (the same parameters, the symbol with `twin` appended). */
#define MVM_TWIN(X, f, twin, params, args, touches)                                          \
    X(f, #f, params, args, touches) X(f##twin, #f #twin, params, args, touches)
#define MVM_BATCH_PARAMS                                                                      \
    CUdeviceptr *d, CUdeviceptr *s, size_t *n, size_t k, CUmemcpyAttributes *a, size_t *ai,  \
        size_t na
#define MVM_BATCH_TOUCHES mvm_touches_list(d, k) || mvm_touches_list(s, k)
#define MVM_CU_GUARDED(X)                                                                     \
    MVM_TWIN(X, cuMemcpyDtoH_v2, _ptds, (void *d, CUdeviceptr s, size_t n), (d, s, n),        \
             MVM_IN(s))                                                                       \
    MVM_TWIN(X, cuMemcpyDtoHAsync_v2, _ptsz, (void *d, CUdeviceptr s, size_t n, CUstream st), \
             (d, s, n, st), MVM_IN(s))                                                        \
    MVM_TWIN(X, cuMemcpyDtoD_v2, _ptds, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n),  \
             MVM_IN(d) || MVM_IN(s))                                                          \
    MVM_TWIN(X, cuMemcpyDtoDAsync_v2, _ptsz,                                                  \
             (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st),            \
             MVM_IN(d) || MVM_IN(s))                                                          \
    MVM_TWIN(X, cuMemcpyDtoA_v2, _ptds, (CUarray d, size_t o, CUdeviceptr s, size_t n),       \
             (d, o, s, n), MVM_IN(s))                                                         \
    MVM_TWIN(X, cuMemcpyAtoD_v2, _ptds, (CUdeviceptr d, CUarray s, size_t o, size_t n),       \
             (d, s, o, n), MVM_IN(d))                                                         \
    MVM_TWIN(X, cuMemcpyPeer, _ptds,                                                          \
             (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n),            \
             (d, dc, s, sc, n), MVM_IN(d) || MVM_IN(s))                                       \
    MVM_TWIN(X, cuMemcpyPeerAsync, _ptsz,                                                     \
             (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st),\
             (d, dc, s, sc, n, st), MVM_IN(d) || MVM_IN(s))                                   \
    MVM_TWIN(X, cuMemcpy2D_v2, _ptds, (const CUDA_MEMCPY2D *p), (p), mvm_touches_2d(p))       \
    MVM_TWIN(X, cuMemcpy2DUnaligned_v2, _ptds, (const CUDA_MEMCPY2D *p), (p),                 \
             mvm_touches_2d(p))                                                               \
    MVM_TWIN(X, cuMemcpy2DAsync_v2, _ptsz, (const CUDA_MEMCPY2D *p, CUstream st), (p, st),    \
             mvm_touches_2d(p))                                                               \
    MVM_TWIN(X, cuMemcpy3D_v2, _ptds, (const CUDA_MEMCPY3D *p), (p), mvm_touches_3d(p))       \
    MVM_TWIN(X, cuMemcpy3DAsync_v2, _ptsz, (const CUDA_MEMCPY3D *p, CUstream st), (p, st),    \
             mvm_touches_3d(p))                                                               \
    MVM_TWIN(X, cuMemcpy3DPeer, _ptds, (const CUDA_MEMCPY3D_PEER *p), (p),                    \
             mvm_touches_3d_peer(p))                                                          \
    MVM_TWIN(X, cuMemcpy3DPeerAsync, _ptsz, (const CUDA_MEMCPY3D_PEER *p, CUstream st),       \
             (p, st), mvm_touches_3d_peer(p))                                                 \
    /* the batches: CUDA 12.8's ABI (cuda.h renames the base names to the _v2 ones) */        \
    X(cuMemcpyBatchAsync_v1, "cuMemcpyBatchAsync", (MVM_BATCH_PARAMS, size_t *f, CUstream st),\
      (d, s, n, k, a, ai, na, f, st), MVM_BATCH_TOUCHES)                                      \
    X(cuMemcpyBatchAsync_v1_ptsz, "cuMemcpyBatchAsync_ptsz",                                  \
      (MVM_BATCH_PARAMS, size_t *f, CUstream st), (d, s, n, k, a, ai, na, f, st),             \
      MVM_BATCH_TOUCHES)                                                                      \
    MVM_TWIN(X, cuMemcpyBatchAsync_v2, _ptsz, (MVM_BATCH_PARAMS, CUstream st),                \
             (d, s, n, k, a, ai, na, st), MVM_BATCH_TOUCHES)                                  \
    X(cuMemcpy3DBatchAsync_v1, "cuMemcpy3DBatchAsync",                                        \
      (size_t k, CUDA_MEMCPY3D_BATCH_OP *o, size_t *f, unsigned long long fl, CUstream st),   \
      (k, o, f, fl, st), mvm_touches_ops(o, k))                                               \
    X(cuMemcpy3DBatchAsync_v1_ptsz, "cuMemcpy3DBatchAsync_ptsz",                              \
      (size_t k, CUDA_MEMCPY3D_BATCH_OP *o, size_t *f, unsigned long long fl, CUstream st),   \
      (k, o, f, fl, st), mvm_touches_ops(o, k))                                               \
    MVM_TWIN(X, cuMemcpy3DBatchAsync_v2, _ptsz,                                               \
             (size_t k, CUDA_MEMCPY3D_BATCH_OP *o, unsigned long long fl, CUstream st),       \
             (k, o, fl, st), mvm_touches_ops(o, k))                                           \
    MVM_MEMSETS(X, 8, unsigned char)                                                          \
    MVM_MEMSETS(X, 16, unsigned short)                                                        \
    MVM_MEMSETS(X, 32, unsigned int)
/* The four memsets of one element size, each with its twin. */
#define MVM_MEMSETS(X, bits, type)                                                            \
    MVM_TWIN(X, cuMemsetD##bits##_v2, _ptds, (CUdeviceptr d, type v, size_t n), (d, v, n),    \
             MVM_IN(d))                                                                       \
    MVM_TWIN(X, cuMemsetD##bits##Async, _ptsz, (CUdeviceptr d, type v, size_t n, CUstream st),\
             (d, v, n, st), MVM_IN(d))                                                        \
    MVM_TWIN(X, cuMemsetD2D##bits##_v2, _ptds,                                                \
             (CUdeviceptr d, size_t pitch, type v, size_t w, size_t h), (d, pitch, v, w, h),  \
             MVM_IN(d))                                                                       \
    MVM_TWIN(X, cuMemsetD2D##bits##Async, _ptsz,                                              \
             (CUdeviceptr d, size_t pitch, type v, size_t w, size_t h, CUstream st),          \
             (d, pitch, v, w, h, st), MVM_IN(d))

#define MVM_NVML_HOOKS(X)                                                                     \
    X(nvmlDeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo", nvmlReturn_t_,                       \
      (nvmlDevice_t_, nvmlMemory_t_ *))                                                        \
    X(nvmlDeviceGetMemoryInfo_v2, "nvmlDeviceGetMemoryInfo_v2", nvmlReturn_t_,                 \
      (nvmlDevice_t_, nvmlMemory_v2_t_ *))

/* Driver functions we call but do not hook (resolved from libcuda; NULL when missing). */
#define MVM_CU_USED(X)                                                                        \
    X(cuCtxSynchronize, "cuCtxSynchronize", CUresult, (void))                                  \
    X(cuStreamSynchronize, "cuStreamSynchronize", CUresult, (CUstream))                        \
    X(cuFuncGetParamInfo, "cuFuncGetParamInfo", CUresult,                                      \
      (CUfunction, size_t, size_t *, size_t *))                                                \
    X(cuKernelGetParamInfo, "cuKernelGetParamInfo", CUresult,                                  \
      (CUkernel, size_t, size_t *, size_t *))                                                  \
    X(cuCtxGetDevice, "cuCtxGetDevice", CUresult, (CUdevice *))                                \
    X(cuCtxGetCurrent, "cuCtxGetCurrent", CUresult, (CUcontext *))                             \
    X(cuGraphGetNodes, "cuGraphGetNodes", CUresult, (CUgraph, CUgraphNode *, size_t *))        \
    X(cuGraphNodeGetType, "cuGraphNodeGetType", CUresult, (CUgraphNode, CUgraphNodeType *))    \
    X(cuGraphKernelNodeGetParams_v2, "cuGraphKernelNodeGetParams_v2", CUresult,                \
      (CUgraphNode, CUDA_KERNEL_NODE_PARAMS *))                                                \
    X(cuGraphChildGraphNodeGetGraph, "cuGraphChildGraphNodeGetGraph", CUresult,                \
      (CUgraphNode, CUgraph *))                                                                \
    X(cuGraphMemcpyNodeGetParams, "cuGraphMemcpyNodeGetParams", CUresult,                      \
      (CUgraphNode, CUDA_MEMCPY3D *))                                                          \
    X(cuGraphMemsetNodeGetParams, "cuGraphMemsetNodeGetParams", CUresult,                      \
      (CUgraphNode, CUDA_MEMSET_NODE_PARAMS *))
#define MVM_NVML_USED(X)                                                                      \
    X(nvmlDeviceGetHandleByPciBusId_v2, "nvmlDeviceGetHandleByPciBusId_v2", nvmlReturn_t_,     \
      (const char *, nvmlDevice_t_ *))                                                         \
    X(nvmlDeviceGetHandleByIndex_v2, "nvmlDeviceGetHandleByIndex_v2", nvmlReturn_t_,           \
      (unsigned int, nvmlDevice_t_ *))

#define MVM_REAL_FIELD(field, sym, ret, params) ret(*field) params;
#define MVM_GUARDED_FIELD(field, sym, params, args, touches) CUresult (*field) params;
typedef struct mvm_real {
    MVM_CU_HOOKS(MVM_REAL_FIELD)
    MVM_NVML_HOOKS(MVM_REAL_FIELD)
    MVM_CU_USED(MVM_REAL_FIELD)
    MVM_NVML_USED(MVM_REAL_FIELD)
    MVM_CU_GUARDED(MVM_GUARDED_FIELD)
} mvm_real;
#undef MVM_REAL_FIELD

/* The hooks, exported under the exact driver names (asm labels: cuda.h's renaming macros
 * such as cuLaunchKernel -> cuLaunchKernel_ptsz never touch a string). */
#define MVM_HOOK_DECL(field, sym, ret, params)                                                \
    ret hk_##field params __asm__(sym) __attribute__((visibility("default")));
#define MVM_GUARDED_DECL(field, sym, params, args, touches)                                    \
    MVM_HOOK_DECL(field, sym, CUresult, params)
MVM_CU_HOOKS(MVM_HOOK_DECL)
MVM_NVML_HOOKS(MVM_HOOK_DECL)
MVM_CU_GUARDED(MVM_GUARDED_DECL)
#undef MVM_GUARDED_DECL
#undef MVM_HOOK_DECL

/* real.c. The real entry points; fields stay NULL where the library lacks them. Loading is
 * idempotent and cheap after the first success; 0 when libcuda is not loaded yet. */
extern mvm_real mvm_real_fn;
int mvm_real_load(void);
int mvm_real_load_nvml(void);  /* the same for NVML, loaded by programs independently */
/* The hook for the real function at `fn`, or NULL if `fn` is not one we hook. */
void *mvm_hook_for(void *fn);

/* The calling thread is inside the interposer (or moevm under it): dlsym passes through. */
extern _Thread_local int mvm_in_interposer;

/* ---- managed memory (heap.c) ------------------------------------------------------------- */

/* A unit of residency: a learned extent, one of its slices, or a whole allocation.
 * Residency is checked in O(1) on the launch path: ok_gen is the residency generation at
 * which all its pages were last seen resident. */
typedef struct mvm_obj {
    uint64_t va, len;
    _Atomic uint64_t ok_gen;
    _Atomic uint64_t uses;     /* launches that referenced it since the last miss */
    /* an extent cut into slices (slice.c): slice[i] is [va + i*stride, +stride) */
    struct mvm_obj *slice;     /* n_slices of them, or NULL: the extent is one unit */
    uint64_t stride;
    uint32_t n_slices;
    uint32_t experts;          /* a fused expert tensor of its GGUF file (gguf_src.c): cut
                                  into these experts; a pointer to its base is routed */
    uint32_t used;             /* the experts a token routes to, as the file says; 0: not
                                  given (route.c then reads the ids without knowing it) */
    bool flat;                 /* launches pointed inside it off every page-sized stride */
} mvm_obj;

typedef struct mvm_alloc {
    uint64_t va, bytes;        /* as the program asked (bytes rounded up to pages) */
    uint32_t first_page, n_pages;
    uint32_t site;             /* report.c's call-site index */
    uint64_t id;               /* its buffer id, never reused (memory.c) */
    mvm_obj whole;
    mvm_obj *ext;              /* extents from host-to-device copies, sorted by va */
    uint32_t n_ext, cap_ext;
} mvm_alloc;

typedef struct mvm_preload {
    pthread_rwlock_t lock;
    bool active;               /* options read and valid: manage allocations */
    bool broken;               /* the space could not be created: everything native */
    /* options */
    uint64_t min_bytes, budget_bytes, oversub_bytes, page_size;
    double budget_frac;        /* MOEVM_GPU_BUDGET as a percentage of device memory */
    int device;
    char evict_name[32], evict_args[128], report_path[1024];
    char report_skip[256]; /* MOEVM_REPORT_SKIP: name prefixes, comma-separated */
    bool clean_evict;          /* MOEVM_CLEAN_EVICT: unchanged pages are not written back */
    bool slices;               /* MOEVM_PRELOAD_SLICES: extents are cut into slices */
    bool prefetch;             /* MOEVM_PRELOAD_PREFETCH: prefetch from the launch sequence */
    bool routing;              /* MOEVM_PRELOAD_ROUTING: GGUF experts, routing ids read */
    /* the space and its bookkeeping (created at the first managed allocation) */
    mvm_space *_Atomic space;  /* published last: base, capacity and device are set then */
    uint64_t base, capacity_bytes;
    CUcontext ctx;             /* current at creation: the context of every managed block */
    uint32_t n_pages, device_pages, alloc_pages;
    mvm_alloc **allocs;        /* sorted by va */
    uint32_t n_allocs, cap_allocs;
    uint32_t *resident;        /* [n_pages] 1: device-resident (the evict policy's view) */
    uint8_t *busy;             /* [n_pages] needed by the launch being served */
    uint32_t *counts;          /* [n_pages] uses since the last miss, for the policy */
    int32_t *used;             /* [n_pages] pages used since the last miss */
    uint32_t *cand;            /* [n_pages + 1] eviction candidates */
    const mvm_evict_ops *evict;
    void *evict_self;
    mvm_evict_driver victims;  /* the evict module over resident, busy and cand */
    mvm_pshape shape;
    mvm_cost cost;
    _Atomic uint64_t gen;      /* bumped whenever a page leaves the device */
    uint64_t layout;           /* bumped (write lock) whenever allocations or objects change:
                                  an mvm_obj pointer found at one layout is valid while it
                                  lasts (graph.c caches graphs' objects by it); from 1 */
    _Atomic uint32_t captures; /* streams being captured into graphs (graph.c) */
    /* counters for the report */
    _Atomic uint64_t graphs_scanned, graph_kernel_nodes, graph_copy_nodes;
    uint64_t misses, pages_in, pages_out, wait_ns, drains;
    uint64_t overflows;        /* misses with nothing to move: the budget holds only them */
    uint64_t prefetch_pages;   /* pages asked for ahead of their launch (prefetch.c) */
    uint64_t prefetch_useful;  /* of those, pages the launch that resolved them needed */
    uint64_t prefetch_failed;  /* asked for and refused, or failed to land */
    uint64_t prefetch_settles; /* resolved early for a copy, a free or a capture */
    uint64_t routed_extents;   /* extents cut into the experts of their GGUF file */
    /* kernel launches that read their routing ids (route.c), the experts they found, reads
     * that found none (the whole tensor was used), and the time the reads took */
    _Atomic uint64_t routed_reads, routed_experts, routed_whole, routing_ns;
    uint64_t managed_allocs, managed_bytes, peak_managed_bytes;
    _Atomic uint64_t native_allocs, native_bytes, async_allocs, async_bytes, ipc_refused;
} mvm_preload;

extern mvm_preload mvm_interposer;

/* Launch counters, one block per thread: the launch path adds to its own block without a
 * locked instruction (one writer; relaxed atomics keep the exit-time reader race-free). */
typedef struct mvm_counts {
    _Atomic uint64_t launches, managed, hits, graph_launches, deferred;
    _Atomic uint64_t copies;   /* copies and memsets that touched managed memory */
    struct mvm_counts *next;
} mvm_counts;
/* The calling thread's block (report.c). */
mvm_counts *mvm_counts_mine(void);
static inline void mvm_count(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* state.c: true once the options are read and valid (initialising on the first call after
 * a successful cuInit). */
bool mvm_interposer_on(void);
void mvm_interposer_init_after_cuinit(void);

/* heap.c (write lock held unless noted) */
/* p (an array of `elem`-byte items, *cap of them) grown to hold at least `need`, doubling:
 * the array to use from now on, or NULL (p and *cap unchanged) when out of memory. */
void *mvm_grow_array(void *p, uint32_t *cap, uint32_t need, size_t elem);
CUresult mvm_heap_alloc(uint64_t bytes, uint32_t site, CUdeviceptr *out);
/* CUDA_ERROR_INVALID_VALUE when va is not the start of a managed allocation. */
CUresult mvm_heap_free(uint64_t va);
/* The allocation containing va, or NULL (read lock enough). */
mvm_alloc *mvm_heap_find(uint64_t va);
/* The extent va points into, else the whole allocation (read lock enough). */
mvm_obj *mvm_heap_extent(mvm_alloc *a, uint64_t va);
/* The object va points into: the slice of its extent, else the extent, else the whole
 * allocation (read lock enough). */
mvm_obj *mvm_heap_object(mvm_alloc *a, uint64_t va);
/* Records [va, va+len) as an object of a (a host-to-device copy's destination). */
void mvm_heap_learn(mvm_alloc *a, uint64_t va, uint64_t len);
static inline bool mvm_heap_contains(uint64_t va)
{
    return mvm_interposer.space && va - mvm_interposer.base < mvm_interposer.capacity_bytes;
}
/* A side of a 2D/3D copy (or a graph's memcpy node) that is managed memory: device memory
 * or a unified address in the space. */
static inline bool mvm_copy_side_managed(CUmemorytype type, uint64_t va)
{
    return (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED) &&
           mvm_heap_contains(va);
}
static inline uint32_t mvm_page_of(uint64_t va)
{
    return (uint32_t)((va - mvm_interposer.base) / mvm_interposer.page_size);
}

/* slice.c (write lock held) */
/* A launch pointed at va inside extent o: learns o's stride, cutting o into slices or
 * making it flat. Changes the layout when the slices change. */
void mvm_slice_learn(mvm_obj *o, uint64_t va);
/* Frees o's slices (o is being dropped or moved out of use). */
void mvm_slice_drop(mvm_obj *o);
/* Cuts o into `experts` equal slices, as its GGUF file declares (gguf_src.c): exact, so no
 * launch pointer refines or flattens them; a slice may be smaller than a page (neighbours
 * then share their boundary pages). `used`: the experts a token routes to (0: unknown). */
void mvm_slice_declare(mvm_obj *o, uint32_t experts, uint32_t used);
/* The slice of o that va (inside o) points into, or o itself (read lock enough). The base
 * of a declared extent names all of it: kernels handed the base of a fused tensor find
 * their experts through routing ids (route.c resolves those for kernel launches). */
static inline mvm_obj *mvm_slice_of(mvm_obj *o, uint64_t va)
{
    if (!o->slice || (o->experts && va == o->va))
        return o;
    uint64_t i = (va - o->va) / o->stride;
    return &o->slice[i < o->n_slices ? i : o->n_slices - 1];
}

/* paging.c */
/* The objects a launch uses, resolved from the pointer values its parameters hold, each
 * once. Kernels name a handful (kept inline); a graph may name thousands. */
typedef struct mvm_objset {
    mvm_obj **obj;
    uint32_t n, cap;
    bool learn;                /* the pointers teach slices (write lock); nothing is added */
    mvm_obj *inline_obj[32];
} mvm_objset;
void mvm_objset_init(mvm_objset *s);
/* Adds the object va points into, if it is in a managed allocation (read lock). An object
 * that cannot be added (out of memory) is skipped: its pages are read where they are. In a
 * learning set, va teaches its extent's slices instead (mvm_slice_learn). */
void mvm_objset_add(mvm_objset *s, uint64_t va);
/* Adds o, found already (read lock), unless one of the last few entries is o. */
void mvm_objset_add_obj(mvm_objset *s, mvm_obj *o);
/* Appends objs[0..n) as they are; false (the set unchanged) when out of memory. */
bool mvm_objset_append(mvm_objset *s, mvm_obj *const *objs, uint32_t n);
void mvm_objset_free(mvm_objset *s);
/* All pages of objs[0..n) verified resident at the current generation (read lock). */
bool mvm_paging_resident(mvm_obj *const *objs, uint32_t n);
/* Makes objs resident before a launch (write lock held): drains the device, evicts with the
 * policy, loads. Objects larger than the whole budget stay partly at home (still correct:
 * home pages are mapped). */
void mvm_paging_serve(mvm_obj *const *objs, uint32_t n);
/* CLOCK_MONOTONIC in nanoseconds: the time waited and spent reading routing ids. */
uint64_t mvm_now_ns(void);
/* Drains the device (write lock held), counting it. */
void mvm_paging_drain(void);
/* Evicts up to `room` resident pages, the evict module's choice among those not busy
 * (write lock held, device drained). */
void mvm_paging_make_room(uint32_t room);
/* The space pages [*first, *end) object o covers. */
void mvm_obj_pages(const mvm_obj *o, uint32_t *first, uint32_t *end);

/* prefetch.c: prefetch from the launch sequence (MOEVM_PRELOAD_PREFETCH) */
/* Records a managed launch's objects and which launch came before it on this thread (read
 * or write lock held; no-op when the option is off). */
void mvm_prefetch_learn(mvm_obj *const *objs, uint32_t n);
/* After serving the launch of objs (write lock, device drained, `held` pages busy): asks for
 * the pages of the launches that followed it last time, as far as the budget allows. */
void mvm_prefetch_plan(mvm_obj *const *objs, uint32_t n, uint32_t held);
/* Whether pages are asked for and not resolved (any thread, no lock). */
bool mvm_prefetch_any(void);
/* How many pages of objs[0..n) are asked for and not resolved (write lock). */
uint32_t mvm_prefetch_pending_of(mvm_obj *const *objs, uint32_t n);
/* Lands every pending page (write lock held, device drained). */
void mvm_prefetch_resolve(void);
/* Drains and resolves if any page is pending (write lock held). */
void mvm_prefetch_settle_locked(void);
/* The same from a hook that holds no lock, before it touches managed memory. */
void mvm_prefetch_settle(void);
/* In a forked child: the parent's pending moves and sequence are not the child's. */
void mvm_prefetch_forget(void);

/* gguf_src.c: the experts of the fused expert tensor that [src, src + n) holds exactly, when
 * src lies in a mapped GGUF file; 0 otherwise (any thread, no lock; reads /proc/self/maps
 * and the file's header the first time a mapping is seen). *used: the experts a token
 * routes to, from the file's `<arch>.expert_used_count` (0: not given, or not below the
 * tensor's experts). */
uint32_t mvm_gguf_src_experts(const void *src, uint64_t n, uint32_t *used);

/* route.c: a kernel launch's objects when routing is on. A pointer to the base of a declared
 * extent (a fused expert tensor) names only the experts the launch's routing ids list: the
 * ids are read once per launch from the kernel's other pointers into managed memory that
 * kernels wrote, after the launch's stream has finished what came before. */
#define MVM_ROUTE_MAX_EXPERTS 1024
typedef struct mvm_route {
    CUstream stream;           /* the launch's stream: the ids are final once it is idle */
    bool read;                 /* the ids were read for this launch */
    uint32_t n;                /* distinct experts they named */
    uint16_t expert[MVM_ROUTE_MAX_EXPERTS];
} mvm_route;
void mvm_route_collect(mvm_route *r, CUfunction f, void **params, void **extra,
                       mvm_objset *set);

/* launch.c */
/* Calls emit(ctx, v) for every 8-byte word v of a launch's parameters that lies in the
 * managed range: pointer parameters, and pointers inside aggregate ones (a PyTorch
 * Array<char *, N>, a CUTLASS Params struct). Read lock held. */
typedef void (*mvm_emit_fn)(void *ctx, uint64_t va);
void mvm_scan_params(CUfunction f, void **params, void **extra, mvm_emit_fn emit, void *ctx);
/* Before a launch: `collect` fills the set with the objects it will use (called under the
 * read lock, and again under the write lock when a miss is served, first with a learning
 * set when slices are on, which a collector that learns nothing ignores). Returns with the lock
 * held when the launch touches managed memory (release it with mvm_launch_finish after the
 * launch is queued), false with no lock held otherwise. */
typedef void (*mvm_collect_fn)(const void *what, mvm_objset *set);
bool mvm_launch_prepare(mvm_collect_fn collect, const void *what);
CUresult mvm_launch_finish(bool locked, CUresult r);
/* mvm_launch_prepare for one kernel launch with these parameters on stream s, counted as a
 * launch. */
bool mvm_launch_prepare_kernel(CUfunction f, void **params, void **extra, CUstream s);

/* report.c */
void mvm_report_prime(void);
uint32_t mvm_report_site(void);  /* the caller's call site (outside the interposer) */
void mvm_report_site_add(uint32_t site, uint64_t bytes, bool managed);
void mvm_report_site_free(uint32_t site, uint64_t bytes);
void mvm_report_at_exit(void);

#define MVM_PL_LOG(level, ...) mvm_log(level, "preload: " __VA_ARGS__)

#endif
