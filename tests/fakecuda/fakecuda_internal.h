/*
 * fakecuda_internal.h: what fakecuda.c (driver state, memory, streams) shares with
 * fake_kernels.c (modules, functions, launches), fake_graphs.c (capture, graphs),
 * fake_copies.c (copies, memsets) and fake_cublas.c (the few cuBLAS calls the engine makes),
 * and nothing else includes.
 *
 * The split keeps each file readable; together they are one library. Everything declared here has
 * hidden visibility, so the library still exports only the cu* API and the fakecuda_*
 * functions of fakecuda.h.
 */
#ifndef FAKECUDA_INTERNAL_H
#define FAKECUDA_INTERNAL_H

#include <cuda.h>

#include <stddef.h>
#include <stdint.h>

/* ---- function table: call counters and fault injection are keyed by base name ---- */

#define FK_FUNCS(X)                                                                            \
    X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)      \
    X(cuDeviceGetAttribute) X(cuDeviceGetPCIBusId) X(cuDeviceTotalMem)                         \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)                \
    X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize) X(cuMemGetInfo) X(cuGetErrorString)                 \
    X(cuGetErrorName) X(cuGetProcAddress) X(cuMemGetAllocationGranularity)                     \
    X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease) X(cuMemMap)      \
    X(cuMemSetAccess) X(cuMemUnmap) X(cuMemAlloc) X(cuMemAllocPitch) X(cuMemAllocAsync)        \
    X(cuMemFree) X(cuMemFreeAsync) X(cuMemHostRegister) X(cuMemHostUnregister)                 \
    X(cuMemHostGetDevicePointer)                                                               \
    X(cuMemHostAlloc) X(cuMemFreeHost)                                                        \
    X(cuIpcGetMemHandle) X(cuPointerGetAttribute) X(cuPointerGetAttributes)                   \
    X(cuMemGetAddressRange) X(cuStreamCreate) X(cuStreamDestroy)                               \
    X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuMemcpyHtoDAsync) X(cuMemcpyHtoD)           \
    X(cuMemcpyDtoH)                                                                            \
    X(cuMemcpyDtoHAsync) X(cuMemcpyDtoD) X(cuMemcpyDtoDAsync) X(cuMemcpy) X(cuMemcpyAsync)     \
    X(cuMemcpy2D) X(cuMemcpy2DAsync) X(cuMemcpyBatchAsync)                                     \
    X(cuMemsetD8) X(cuMemsetD16) X(cuMemsetD32) X(cuMemsetD8Async) X(cuMemsetD16Async)         \
    X(cuMemsetD32Async) X(cuMemsetD2D8) X(cuMemsetD2D16) X(cuMemsetD2D32) X(cuMemsetD2D8Async) \
    X(cuMemsetD2D16Async) X(cuMemsetD2D32Async)                                                \
    X(cuEventCreate) X(cuEventRecord) X(cuEventElapsedTime)                                    \
    X(cuEventQuery) X(cuEventSynchronize) X(cuEventDestroy) X(cuModuleLoadData)                \
    X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncGetParamInfo) X(cuLaunchKernel) X(cuLaunchCooperativeKernel)           \
    X(cuLaunchKernelEx) X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuStreamIsCapturing)   \
    X(cuGraphCreate) X(cuGraphAddKernelNode) X(cuGraphAddChildGraphNode) X(cuGraphGetNodes)    \
    X(cuGraphNodeGetType) X(cuGraphKernelNodeGetParams) X(cuGraphChildGraphNodeGetGraph)       \
    X(cuGraphInstantiateWithFlags) X(cuGraphInstantiateWithParams) X(cuGraphExecUpdate)        \
    X(cuGraphExecKernelNodeSetParams) X(cuGraphAddMemcpyNode) X(cuGraphAddMemsetNode)          \
    X(cuGraphMemcpyNodeGetParams) X(cuGraphMemsetNodeGetParams) X(cuGraphExecNodeSetParams)    \
    X(cuGraphExecMemcpyNodeSetParams) X(cuGraphExecMemsetNodeSetParams) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy) \
    X(cuGraphAddDependencies)                                                                  \
    X(cuLibraryLoadData) X(cuLibraryUnload) X(cuLibraryGetKernel) X(cuKernelGetParamInfo)     \
    X(cuFuncSetBlockShape) X(cuParamSetSize) X(cuParamSetv) X(cuLaunchGridAsync)               \
    X(cuLaunchCooperativeKernelMultiDevice)                                                    \
    X(cublasCreate) X(cublasDestroy) X(cublasSetStream) X(cublasSetWorkspace) X(cublasGemmEx)      \
    X(cublasGemmBatchedEx)

/* `##` keeps cuda.h's renaming macros (cuMemAlloc -> cuMemAlloc_v2) from expanding. */
#define FK_ENUM(name) FN_##name,
enum fk_fn { FK_FUNCS(FK_ENUM) FN_COUNT };

/* The body of an exported function: counts the call, applies the "cuInit first" rule
 * (need_init) and fault injection, then evaluates `body` under the lock. */
#define FK_CALL(fn, need_init, body)                                                           \
    {                                                                                          \
        CUresult rc_ = fk_enter(FN_##fn, need_init);                                           \
        return fk_leave(rc_ ? rc_ : (body));                                                   \
    }

#pragma GCC visibility push(hidden)

/* Takes the library lock (always: fk_leave releases it), counts the call, then applies the
 * "cuInit first" rule and fault injection. */
CUresult fk_enter(enum fk_fn fn, int need_init);
CUresult fk_leave(CUresult rc);
/* The lock alone, for the fakecuda_* inspection functions. */
void fk_lock(void);
void fk_unlock(void);

/* Under the lock. A current, live context: CUDA_SUCCESS, else the driver's error. */
CUresult fk_need_ctx(void);
CUcontext fk_current_ctx(void);
/* Is `s` a live stream (NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are the default)? */
int fk_stream_ok(CUstream s);
/* Is [va, va+n) all memory the current device may access with `need` (a
 * CU_MEM_ACCESS_FLAGS_PROT_* value)? If so and host_numa_bytes is not NULL, stores how many
 * of its bytes are backed by HOST_NUMA allocations (the rest are device memory). */
int fk_device_range(uintptr_t va, size_t n, unsigned need, size_t *host_numa_bytes);

/* Whether a unified address is device memory (a cuMemAlloc range or a reservation). Under
 * the lock. */
int fk_unified_is_device(uintptr_t va);
/* Waits while copies are held (fakecuda_hold_copies), then sleeps for the configured copy
 * delay (FAKECUDA_COPY_DELAY_US); called without the lock. */
void fk_copy_delay(void);
/* Sleeps for the configured module load delay (FAKECUDA_MODULE_DELAY_MS): a driver
 * compiling a module's PTX. Under the lock, as a load holds it. */
void fk_module_delay(void);

/* fake_kernels.c, under the lock: zero the kernel byte counters (fakecuda_reset_counters),
 * and unload the modules of a primary context that is being destroyed. */
void fk_kernels_reset_counters(void);
void fk_kernels_drop_ctx(CUcontext ctx);

/* Kernels' parameters, packed in their layout (at most FK_MAX_PARAMS of them). */
#define FK_MAX_PARAMS 5
#define FK_PARAM_BYTES 248 /* the engine's largest argument struct (kernels.h), with room */
/* Checks a launch of f in the current context as cuLaunchKernel does (handle, shape,
 * parameters) and packs its parameters into raw. */
CUresult fk_kernel_check(CUfunction f, const unsigned grid[3], const unsigned block[3],
                         unsigned shared, void **params, void **extra,
                         unsigned char raw[FK_PARAM_BYTES]);
/* f's parameter count and offsets (0 for an unknown function). */
unsigned fk_kernel_layout(CUfunction f, size_t off[FK_MAX_PARAMS]);
/* Whether f's module is PTX whose every kernel executes griddepcontrol.wait (what a kernel
 * needs after a programmatic edge: fake_graphs.c). */
int fk_kernel_waits(CUfunction f);
/* The compute capability's major number the devices report (fakecuda_set_cc_major). */
int fk_cc_major(void);
/* Runs f on packed parameters in the launch's shape, checking the memory it touches. */
CUresult fk_kernel_run(CUfunction f, const unsigned grid[3], const unsigned block[3],
                       const unsigned char *raw);

/* fake_copies.c, under the lock: a graph's memcpy node (one layer: Depth 1, no CUDA arrays:
 * CUDA_ERROR_NOT_SUPPORTED otherwise) and memset node, run. */
CUresult fk_copy_3d(const CUDA_MEMCPY3D *p);
CUresult fk_memset_node(const CUDA_MEMSET_NODE_PARAMS *p);

/* fake_graphs.c, under the lock. *g: the graph stream s is capturing into, or NULL; an error
 * when that capture was invalidated. */
CUresult fk_capture_graph(CUstream s, struct CUgraph_st **g);
/* Appends a kernel node to a capture's graph. */
CUresult fk_graph_add_kernel(struct CUgraph_st *g, CUfunction f, const unsigned grid[3],
                             const unsigned block[3], unsigned shared, const unsigned char *raw);
/* A synchronisation a capture forbids: of stream s (being captured), or of the context
 * (s == NULL) while a global-mode capture, or the caller's thread-local one, is under way.
 * Invalidates those captures and returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; else 0. */
CUresult fk_capture_sync_conflict(CUstream s);

#pragma GCC visibility pop

#endif
