/*
 * A CUDA driver-API program for the interposer's tests (tests/test_preload.sh runs it under
 * LD_PRELOAD=libmoevm_preload.so against tests/fakecuda). It reaches the driver the three
 * ways real programs do, chosen by the first argument's suffix:
 *   link     calls the exported functions it was linked against (libcuda.so.1 = fakecuda)
 *   dlsym    dlopen("libcuda.so.1") + dlsym, as a program that loads the driver itself
 *   getproc  cuGetProcAddress_v2 (found by dlsym), as the CUDA runtime does since 11.3
 * and runs one scenario (the first argument's prefix):
 *   oversub     allocates 6x the device budget, fills every buffer, sums each with a fake
 *               kernel and reads it back: all correct, every kernel saw device memory;
 *               a kernel's writes survive the eviction of what it wrote
 *   unified     unified copies (cuMemcpy[Async]) from host memory teach objects, from
 *               device memory they do not; data survives both ways
 *   overbudget  a buffer larger than the budget: read partly from the host, correct, and
 *               once it fills the budget its launches no longer drain the device
 *   guarded     device-side copies and memsets (DtoH, DtoD, 2D, batched, memsets) issued by
 *               other threads while a miss is being served wait until it is done, then
 *               read and write the data correctly
 *   routing     hooked names resolve into the interposer, others into the driver, _ptsz
 *               variants to their own hooks; dlsym(RTLD_NEXT) works
 *   unmanaged   (run with a bad MOEVM_* value) allocations beyond the device fail natively,
 *               small ones work: the program runs, un-managed
 *   query       cuMemGetInfo, cuDeviceTotalMem and NVML report the managed view
 *   ipc         cuIpcGetMemHandle works on native memory, is refused on managed memory
 *   ranges      cuMemGetAddressRange and cuPointerGetAttribute[s] describe a managed
 *               allocation as one device block from any pointer into it (its range, one
 *               buffer id, the context, device memory even where a page is host-backed),
 *               before and after residency changes; native memory gets the driver's
 *               answer; a freed managed range is not found
 *   loop        twelve buffers, four fit, summed in order ten times: every sum right and
 *               read from device memory (test_preload.sh compares evict policies' hits)
 *   prefetch    the same walk with MOEVM_PRELOAD_PREFETCH=on, then a host copy, a memset
 *               and a device copy into buffers whose prefetch is under way, a free of one,
 *               and a walk backwards: every sum reads what was last written
 *   faults      each driver call the program or the interposer makes fails once, in turn,
 *               while kernels write and read buffers six times the budget: the program
 *               gets success or the driver's own error, and every buffer keeps its data
 *   experts     kernels and a graph handed one expert at a time of fused expert tensors
 *               twice the budget: with slices they read device memory only, without they
 *               read the host
 *   routed      llama.cpp's fused expert tensors, uploaded from the mapped GGUF file, and
 *               kernels handed their base that read the routing ids from device memory:
 *               with MOEVM_PRELOAD_ROUTING the interposer reads the ids first and only the
 *               routed experts move, every kernel reads device memory (run at 12M)
 *   fork        a child process runs hooks unmanaged, without deadlock
 *   graph       kernels captured into a graph while their objects are not resident: the
 *               capture stays valid; launching the graph (and one built by hand with a
 *               child graph, and both after their parameters change) finds every object
 *               in device memory
 *   graphcopy   a graph's memcpy and memset nodes make their buffers resident at its launch,
 *               also after cuGraphExecNodeSetParams and cuGraphExecMemcpyNodeSetParams
 *   kernels     a kernel whose pointers sit inside one struct parameter, a cooperative
 *               launch, one launched by its CUkernel handle (cuLibrary*, as the runtime
 *               loads code), and the deprecated forms (cuParamSet* then cuLaunch[Grid
 *               [Async]], and a multi-device cooperative list) find their objects in
 *               device memory
 *   runtime     every cuGetProcAddress request the toolkit's CUDA runtime makes (replayed
 *               through the interposer) gets the hook of the export the driver chose, or
 *               the driver's own pointer when that export is not hooked
 * Prints "ok <scenario>" and exits 0, or names the failed check and exits 1.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda.h"

#define MiB (1ull << 20)
/* Exported and never inlined: the report's call sites must name them (-rdynamic). */
#define SCENARIO __attribute__((noinline, visibility("default")))

static int failures;
#define EXPECT(cond)                                                                          \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "test_preload:%d: check failed: %s\n", __LINE__, #cond);          \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)
#define CU_OK(call) EXPECT((call) == CUDA_SUCCESS)

/* The driver entry points, however they were found. */
static struct {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*Memcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*MemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
    CUresult (*IpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamBeginCapture)(CUstream, CUstreamCaptureMode);
    CUresult (*StreamEndCapture)(CUstream, CUgraph *);
    CUresult (*GraphCreate)(CUgraph *, unsigned);
    CUresult (*GraphAddKernelNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                   const CUDA_KERNEL_NODE_PARAMS *);
    CUresult (*GraphAddChildGraphNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                       CUgraph);
    CUresult (*GraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*GraphLaunch)(CUgraphExec, CUstream);
    CUresult (*GraphExecUpdate)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo *);
    CUresult (*GraphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode,
                                             const CUDA_KERNEL_NODE_PARAMS *);
    CUresult (*GraphExecDestroy)(CUgraphExec);
    CUresult (*GraphDestroy)(CUgraph);
    CUresult (*LibraryLoadData)(CUlibrary *, const void *, CUjit_option *, void **, unsigned,
                                CUlibraryOption *, void **, unsigned);
    CUresult (*LibraryGetKernel)(CUkernel *, CUlibrary, const char *);
    CUresult (*MemsetD32)(CUdeviceptr, unsigned, size_t);
    CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*Memcpy2D)(const CUDA_MEMCPY2D *);
    CUresult (*MemcpyBatchAsync)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t,
                                 CUmemcpyAttributes *, size_t *, size_t, CUstream);
    CUresult (*CtxGetCurrent)(CUcontext *);
    /* the deprecated launch forms */
    CUresult (*FuncSetBlockShape)(CUfunction, int, int, int);
    CUresult (*ParamSetSize)(CUfunction, unsigned);
    CUresult (*ParamSeti)(CUfunction, int, unsigned);
    CUresult (*ParamSetf)(CUfunction, int, float);
    CUresult (*ParamSetv)(CUfunction, int, void *, unsigned);
    CUresult (*Launch)(CUfunction);
    CUresult (*LaunchGrid)(CUfunction, int, int);
    CUresult (*LaunchGridAsync)(CUfunction, int, int, CUstream);
    CUresult (*LaunchCooperativeKernelMultiDevice)(CUDA_LAUNCH_PARAMS *, unsigned, unsigned);
    CUresult (*LaunchCooperativeKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                        unsigned, unsigned, unsigned, CUstream, void **);
    CUresult (*GraphAddMemsetNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                   const CUDA_MEMSET_NODE_PARAMS *, CUcontext);
    CUresult (*GraphAddMemcpyNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                   const CUDA_MEMCPY3D *, CUcontext);
    CUresult (*GraphExecNodeSetParams)(CUgraphExec, CUgraphNode, CUgraphNodeParams *);
    CUresult (*GraphExecMemcpyNodeSetParams)(CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D *,
                                             CUcontext);
    CUresult (*MemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*PointerGetAttribute)(void *, CUpointer_attribute, CUdeviceptr);
    CUresult (*PointerGetAttributes)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
} cu;

static void *lookup(const char *how, void *lib, const char *name, const char *linked_name,
                    void *linked)
{
    (void)linked_name;
    if (strcmp(how, "link") == 0)
        return linked;
    if (strcmp(how, "dlsym") == 0)
        return dlsym(lib, name);
    static CUresult (*gpa)(const char *, void **, int, cuuint64_t,
                           CUdriverProcAddressQueryResult *);
    if (!gpa)
        *(void **)&gpa = dlsym(lib, "cuGetProcAddress_v2");
    void *p = NULL;
    CUdriverProcAddressQueryResult q;
    /* cuGetProcAddress takes base names ("cuMemAlloc"); strip a _v2 suffix. */
    char base[64];
    snprintf(base, sizeof base, "%s", name);
    char *v = strstr(base, "_v2");
    if (v)
        *v = '\0';
    if (!gpa || gpa(base, &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS)
        return NULL;
    return p;
}

#define BIND(field, sym) *(void **)&cu.field = lookup(how, lib, #sym, #sym, (void *)sym)

static void bind(const char *how)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    EXPECT(lib != NULL);
    BIND(Init, cuInit);
    BIND(DeviceGet, cuDeviceGet);
    BIND(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
    BIND(CtxSetCurrent, cuCtxSetCurrent);
    BIND(MemAlloc, cuMemAlloc_v2);
    BIND(MemFree, cuMemFree_v2);
    BIND(MemcpyHtoD, cuMemcpyHtoD_v2);
    BIND(MemcpyDtoH, cuMemcpyDtoH_v2);
    BIND(Memcpy, cuMemcpy);
    BIND(MemcpyAsync, cuMemcpyAsync);
    BIND(MemGetInfo, cuMemGetInfo_v2);
    BIND(DeviceTotalMem, cuDeviceTotalMem_v2);
    BIND(ModuleLoadData, cuModuleLoadData);
    BIND(ModuleGetFunction, cuModuleGetFunction);
    BIND(LaunchKernel, cuLaunchKernel);
    BIND(IpcGetMemHandle, cuIpcGetMemHandle);
    BIND(StreamCreate, cuStreamCreate);
    BIND(StreamBeginCapture, cuStreamBeginCapture_v2);
    BIND(StreamEndCapture, cuStreamEndCapture);
    BIND(GraphCreate, cuGraphCreate);
    BIND(GraphAddKernelNode, cuGraphAddKernelNode_v2);
    BIND(GraphAddChildGraphNode, cuGraphAddChildGraphNode);
    BIND(GraphInstantiate, cuGraphInstantiateWithFlags);
    BIND(GraphLaunch, cuGraphLaunch);
    BIND(GraphExecUpdate, cuGraphExecUpdate_v2);
    BIND(GraphExecKernelNodeSetParams, cuGraphExecKernelNodeSetParams_v2);
    BIND(GraphExecDestroy, cuGraphExecDestroy);
    BIND(GraphDestroy, cuGraphDestroy);
    BIND(LibraryLoadData, cuLibraryLoadData);
    BIND(LibraryGetKernel, cuLibraryGetKernel);
    BIND(MemsetD32, cuMemsetD32_v2);
    BIND(MemsetD8Async, cuMemsetD8Async);
    BIND(MemcpyDtoDAsync, cuMemcpyDtoDAsync_v2);
    BIND(Memcpy2D, cuMemcpy2D_v2);
    BIND(MemcpyBatchAsync, cuMemcpyBatchAsync_v2);
    BIND(CtxGetCurrent, cuCtxGetCurrent);
    BIND(LaunchCooperativeKernel, cuLaunchCooperativeKernel);
    BIND(GraphAddMemsetNode, cuGraphAddMemsetNode);
    BIND(GraphAddMemcpyNode, cuGraphAddMemcpyNode);
    BIND(GraphExecNodeSetParams, cuGraphExecNodeSetParams);
    BIND(GraphExecMemcpyNodeSetParams, cuGraphExecMemcpyNodeSetParams);
    BIND(MemGetAddressRange, cuMemGetAddressRange_v2);
    BIND(PointerGetAttribute, cuPointerGetAttribute);
    BIND(PointerGetAttributes, cuPointerGetAttributes);
    /* Deprecated in cuda.h: naming them is the point here. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    BIND(FuncSetBlockShape, cuFuncSetBlockShape);
    BIND(ParamSetSize, cuParamSetSize);
    BIND(ParamSeti, cuParamSeti);
    BIND(ParamSetf, cuParamSetf);
    BIND(ParamSetv, cuParamSetv);
    BIND(Launch, cuLaunch);
    BIND(LaunchGrid, cuLaunchGrid);
    BIND(LaunchGridAsync, cuLaunchGridAsync);
    BIND(LaunchCooperativeKernelMultiDevice, cuLaunchCooperativeKernelMultiDevice);
#pragma GCC diagnostic pop
    void **f = (void **)&cu;
    for (size_t i = 0; i < sizeof cu / sizeof(void *); i++)
        if (!f[i]) {
            fprintf(stderr, "test_preload: entry point %zu not found (%s)\n", i, how);
            exit(1);
        }
}

static void start(void)
{
    CUdevice dev;
    CUcontext ctx;
    CU_OK(cu.Init(0));
    CU_OK(cu.DeviceGet(&dev, 0));
    CU_OK(cu.DevicePrimaryCtxRetain(&ctx, dev));
    CU_OK(cu.CtxSetCurrent(ctx));
}

static const char *lib_of(void *fn)
{
    Dl_info info;
    if (!fn || !dladdr(fn, &info) || !info.dli_fname)
        return "?";
    const char *s = strrchr(info.dli_fname, '/');
    return s ? s + 1 : info.dli_fname;
}

/* A kernel of fakecuda's module. */
static CUfunction fake_kernel(const char *name)
{
    CUmodule mod;
    CUfunction f = NULL;
    CU_OK(cu.ModuleLoadData(&mod, "fakecuda"));
    CU_OK(cu.ModuleGetFunction(&f, mod, name));
    return f;
}

static uint64_t sum_kernel(CUfunction sum, CUdeviceptr out, CUdeviceptr in, uint64_t n)
{
    void *params[] = {&out, &in, &n};
    EXPECT(cu.LaunchKernel(sum, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) == CUDA_SUCCESS);
    uint64_t s = 0;
    CU_OK(cu.MemcpyDtoH(&s, out, sizeof s));
    return s;
}

/* A managed allocation made by a static function: not in the program's dynamic symbols
 * (whatever ENABLE_EXPORTS exports), so the report must name it from the symbol table. */
static __attribute__((noinline)) void alloc_from_static_helper(CUdeviceptr *p, size_t bytes)
{
    CU_OK(cu.MemAlloc(p, bytes));
    __asm__ volatile("" ::: "memory"); /* not a tail call: this frame stays on the stack */
}

/* Buffers of 8 MiB, 6x the budget (MOEVM_GPU_BUDGET=8M, MOEVM_OVERSUBSCRIBE=56M). */
SCENARIO void scenario_oversub(void)
{
    enum { N = 6 };
    const uint64_t bytes = 8 * MiB, n = bytes / 4;
    CUfunction sum = fake_kernel("fk_sum_u32"), fill = fake_kernel("fk_fill_u32");
    CUdeviceptr buf[N], out;
    CU_OK(cu.MemAlloc(&out, 4096)); /* small: native */
    uint32_t *host = malloc(bytes);
    uint64_t expect[N];
    for (int b = 0; b < N; b++) {
        alloc_from_static_helper(&buf[b], bytes);
        expect[b] = 0;
        for (uint64_t i = 0; i < n; i++) {
            host[i] = (uint32_t)(i * 2654435761u + (uint32_t)b * 977u);
            expect[b] += host[i];
        }
        CU_OK(cu.MemcpyHtoD(buf[b], host, bytes));
    }
    fakecuda_reset_counters();
    for (int round = 0; round < 2; round++)
        for (int b = 0; b < N; b++) {
            EXPECT(sum_kernel(sum, out, buf[b], n) == expect[b]);
            if (round == 1) /* again at once: resident, a hit */
                EXPECT(sum_kernel(sum, out, buf[b], n) == expect[b]);
        }
    EXPECT(fakecuda_kernel_bytes(1) == 0);           /* no kernel read host-backed pages */
    EXPECT(fakecuda_kernel_bytes(0) >= 18 * bytes);  /* ... and all of them read the device */
    for (int b = 0; b < N; b++) { /* read back through whatever backs the pages now */
        CU_OK(cu.MemcpyDtoH(host, buf[b], bytes));
        uint64_t s = 0;
        for (uint64_t i = 0; i < n; i++)
            s += host[i];
        EXPECT(s == expect[b]);
    }
    /* A kernel writes buffer 0 on the device; the others then push it out: its new
     * contents must have been written back. */
    uint32_t value = 0xC0FFEEu;
    void *fp[] = {&buf[0], &value, (void *)&n};
    CU_OK(cu.LaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, fp, NULL));
    for (int b = 1; b < N; b++)
        EXPECT(sum_kernel(sum, out, buf[b], n) == expect[b]);
    EXPECT(sum_kernel(sum, out, buf[0], n) == (uint64_t)value * n);
    CU_OK(cu.MemcpyDtoH(host, buf[0], bytes));
    EXPECT(host[0] == value && host[n - 1] == value);
    /* Freed while resident: its pages are dropped, not written back, and the next miss
     * loads into their chunks without evicting anything (the report checks both). */
    CU_OK(cu.MemFree(buf[0]));
    EXPECT(sum_kernel(sum, out, buf[1], n) == expect[1]);
    for (int b = 1; b < N; b++)
        CU_OK(cu.MemFree(buf[b]));
    CU_OK(cu.MemFree(out));
    free(host);
}

/* The sum of 2 MiB of words from a seed, into host[]. */
static uint64_t fill_words(uint32_t *host, uint32_t seed)
{
    uint64_t total = 0;
    for (uint64_t i = 0; i < 2 * MiB / 4; i++) {
        host[i] = (uint32_t)(i * 2246822519u + seed * 3266489917u);
        total += host[i];
    }
    return total;
}

/* Twelve 2 MiB managed buffers filled from their seeds, their sums, and a small native
 * buffer for the sums' results: a program's layers, walked token after token. */
enum { WALK_N = 12 };
typedef struct walk {
    CUfunction sum;
    CUdeviceptr buf[WALK_N], out;
    uint64_t expect[WALK_N];
    uint32_t *host; /* 2 MiB of scratch */
} walk;

static void walk_open(walk *w)
{
    w->sum = fake_kernel("fk_sum_u32");
    w->host = malloc(2 * MiB);
    CU_OK(cu.MemAlloc(&w->out, 4096));
    for (int b = 0; b < WALK_N; b++) {
        CU_OK(cu.MemAlloc(&w->buf[b], 2 * MiB));
        w->expect[b] = fill_words(w->host, (uint32_t)b);
        CU_OK(cu.MemcpyHtoD(w->buf[b], w->host, 2 * MiB));
    }
}

/* Sums buffer b, which must hold what w->expect says. */
static void walk_sum(walk *w, int b)
{
    EXPECT(sum_kernel(w->sum, w->out, w->buf[b], 2 * MiB / 4) == w->expect[b]);
}

static void walk_passes(walk *w, int passes)
{
    for (int pass = 0; pass < passes; pass++)
        for (int b = 0; b < WALK_N; b++)
            walk_sum(w, b);
}

/* Checks that every sum read device memory, and frees what is left (freed buffers are 0). */
static void walk_close(walk *w)
{
    EXPECT(fakecuda_kernel_bytes(1) == 0);
    for (int b = 0; b < WALK_N; b++)
        if (w->buf[b])
            CU_OK(cu.MemFree(w->buf[b]));
    CU_OK(cu.MemFree(w->out));
    free(w->host);
}

/* Twelve 2 MiB buffers walked in order ten times, as a program walks its layers at every
 * token, with room for four: each sum must read device memory and be right. How many of
 * these launches hit depends on the evict policy (test_preload.sh compares them). */
SCENARIO void scenario_loop(void)
{
    walk w;
    walk_open(&w);
    fakecuda_reset_counters();
    walk_passes(&w, 10);
    walk_close(&w);
}

/* The driver failing under the program, one call at a time: each of the calls the program
 * and the interposer make (a page-in's map, access grant, copy and fence, an eviction's
 * write-back and unmap, the program's own launch and copies) fails once, at its first,
 * second or third occurrence, while a kernel fills one buffer and another sums a second;
 * then every launch, every device-to-host copy and every page-in copy fails for a step.
 * A call of the program's returns success or the driver's error (CUDA_ERROR_ECC_UNCORRECTABLE
 * here, which nothing else returns), never another; a launch that succeeded did its work,
 * one that failed did none; a failure of the interposer's own moves is absorbed (the kernel
 * reads the pages where they are). After each step, with the driver well again, every buffer
 * reads back as the steps that succeeded left it. */
SCENARIO void scenario_faults(void)
{
    enum { N = 6, FILL = 1, SUM = 2, READ = 4 };
    static const char *const calls[] = {
        "cuMemMap",      "cuMemSetAccess",     "cuMemUnmap",          "cuMemcpyHtoDAsync",
        "cuMemcpyDtoH",  "cuMemcpyDtoHAsync",  "cuEventRecord",       "cuEventSynchronize",
        "cuStreamSynchronize", "cuLaunchKernel",
    };
    /* Then every call of a kind from now on, so that the program's own fail for sure. */
    static const struct { const char *call; int must_fail; } from_now[] = {
        {"cuLaunchKernel", FILL | SUM}, {"cuMemcpyDtoH", READ}, {"cuMemcpyHtoDAsync", 0},
    };
    const int n_calls = sizeof calls / sizeof calls[0];
    const int n_steps = 3 * n_calls + (int)(sizeof from_now / sizeof from_now[0]);
    const CUresult injected = CUDA_ERROR_ECC_UNCORRECTABLE;
    const uint64_t bytes = 8 * MiB, n = bytes / 4;
    CUfunction sum = fake_kernel("fk_sum_u32"), fill = fake_kernel("fk_fill_u32");
    CUdeviceptr buf[N], out;
    uint32_t value[N]; /* every word of buffer b holds value[b] */
    uint32_t *host = malloc(bytes);
    CU_OK(cu.MemAlloc(&out, 4096));
    for (int b = 0; b < N; b++) {
        CU_OK(cu.MemAlloc(&buf[b], bytes));
        value[b] = 0x1000u + (uint32_t)b;
        for (uint64_t i = 0; i < n; i++)
            host[i] = value[b];
        CU_OK(cu.MemcpyHtoD(buf[b], host, bytes));
    }
    for (int step = 0; step < n_steps; step++) {
        char spec[64];
        int must_fail = 0;
        if (step < 3 * n_calls) {
            snprintf(spec, sizeof spec, "%s:%d:%d", calls[step / 3], step % 3 + 1, (int)injected);
        } else {
            int f = step - 3 * n_calls;
            snprintf(spec, sizeof spec, "%s:1+:%d", from_now[f].call, (int)injected);
            must_fail = from_now[f].must_fail;
        }
        int w = step % N, r = (step + 3) % N;
        uint32_t v = 0xA0000000u + (uint32_t)step;
        uint64_t got = 0;
        void *fp[] = {&buf[w], &v, (void *)&n};
        void *sp[] = {&out, &buf[r], (void *)&n};
        const char *call = step < 3 * n_calls ? calls[step / 3] : NULL;
        unsigned long calls_before = call ? fakecuda_calls(call) : 0;
        fakecuda_set_fail(spec);
        CUresult r_fill = cu.LaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, fp, NULL);
        CUresult r_sum = cu.LaunchKernel(sum, 1, 1, 1, 1, 1, 1, 0, NULL, sp, NULL);
        CUresult r_read =
            r_sum == CUDA_SUCCESS ? cu.MemcpyDtoH(&got, out, sizeof got) : CUDA_SUCCESS;
        fakecuda_set_fail("");
        if (call && step % 3 == 0 && fakecuda_calls(call) == calls_before)
            fprintf(stderr, "test_preload: %s is never called: the step tests nothing\n", call),
                failures++;
        int failed = (r_fill != CUDA_SUCCESS) * FILL | (r_sum != CUDA_SUCCESS) * SUM |
                     (r_read != CUDA_SUCCESS) * READ;
        if ((r_fill != CUDA_SUCCESS && r_fill != injected) ||
            (r_sum != CUDA_SUCCESS && r_sum != injected) ||
            (r_read != CUDA_SUCCESS && r_read != injected) || (failed & must_fail) != must_fail)
            fprintf(stderr, "test_preload: %s: fill %d, sum %d, read %d\n", spec, (int)r_fill,
                    (int)r_sum, (int)r_read),
                failures++;
        if (r_fill == CUDA_SUCCESS)
            value[w] = v;
        if (!(failed & (SUM | READ)) && got != (uint64_t)value[r] * n)
            fprintf(stderr, "test_preload: %s: the sum of buffer %d is wrong\n", spec, r),
                failures++;
        for (int b = 0; b < N; b++) { /* the driver is well: everything reads right */
            CU_OK(cu.MemcpyDtoH(host, buf[b], bytes));
            if (host[0] != value[b] || host[n / 2] != value[b] || host[n - 1] != value[b])
                fprintf(stderr, "test_preload: after %s buffer %d does not hold its data\n",
                        spec, b),
                    failures++;
        }
    }
    for (int b = 0; b < N; b++) {
        EXPECT(sum_kernel(sum, out, buf[b], n) == (uint64_t)value[b] * n);
        CU_OK(cu.MemFree(buf[b]));
    }
    CU_OK(cu.MemFree(out));
    free(host);
}

/* Three fused expert tensors of eight 2 MiB experts (16 MiB, twice the budget), each written
 * by one copy, as transformers keeps a layer's experts (gate_up_proj[E][2I][H]). Kernels are
 * handed one expert's address at a time. With slices (MOEVM_PRELOAD_SLICES, on by default)
 * only the experts launched move: expert 4 cuts the first tensor into halves and loads the
 * upper one (where expert 6 then hits), expert 1 cuts it into experts, and then forty
 * "tokens" of two experts each must all read device memory. The second tensor is cut into
 * halves by expert 4, then a pointer 4 KiB into expert 1, in the half not resident, makes
 * it whole for good (a pointer into a resident slice teaches nothing). A graph captured over
 * two experts of the third cuts it at its launch. A fourth tensor of four 3 MiB experts is
 * cut into slices that share their boundary pages. Without slices every tensor stays one
 * object larger than the budget and kernels read the host. Every sum is right in both
 * cases (test_preload.sh checks the report's objects). */
enum { N_EXPERTS = 8 };
static const uint64_t expert_bytes = 2 * MiB;

static uint32_t fused_word(int tensor, int expert, uint64_t i)
{
    return (uint32_t)(i * 2654435761u + (uint32_t)expert * 40503u + (uint32_t)tensor);
}

/* The sum of expert e (of `bytes`) of tensor w, from word `from` on. */
static uint64_t expert_sum(CUfunction sum, CUdeviceptr out, CUdeviceptr w, uint64_t bytes,
                           int e, uint64_t from)
{
    return sum_kernel(sum, out, w + (CUdeviceptr)e * bytes + from * 4, bytes / 4 - from);
}

static uint64_t expected_sum(int tensor, int e, uint64_t bytes, uint64_t from)
{
    uint64_t s = 0;
    for (uint64_t i = from; i < bytes / 4; i++)
        s += fused_word(tensor, e, i);
    return s;
}

/* A fused tensor of n_experts experts of `bytes` each, written by one copy. */
static CUdeviceptr fused_tensor(int tensor, int n_experts, uint64_t bytes)
{
    CUdeviceptr w;
    uint32_t *host = malloc(n_experts * bytes);
    CU_OK(cu.MemAlloc(&w, n_experts * bytes));
    for (int e = 0; e < n_experts; e++)
        for (uint64_t i = 0; i < bytes / 4; i++)
            host[e * (bytes / 4) + i] = fused_word(tensor, e, i);
    CU_OK(cu.MemcpyHtoD(w, host, n_experts * bytes));
    free(host);
    return w;
}

SCENARIO void scenario_experts(void)
{
    enum { TOKENS = 40 };
    const char *env = getenv("MOEVM_PRELOAD_SLICES");
    bool slices = !env || strcmp(env, "off") != 0;
    CUfunction sum = fake_kernel("fk_sum_u32");
    CUdeviceptr w[3], out;
    uint64_t expect[3][N_EXPERTS];
    CU_OK(cu.MemAlloc(&out, 4096));
    for (int t = 0; t < 3; t++) {
        w[t] = fused_tensor(t, N_EXPERTS, expert_bytes);
        for (int e = 0; e < N_EXPERTS; e++)
            expect[t][e] = expected_sum(t, e, expert_bytes, 0);
    }

    fakecuda_reset_counters();
    static const int learn[] = {4, 6, 1};
    for (int k = 0; k < 3; k++)
        EXPECT(expert_sum(sum, out, w[0], expert_bytes, learn[k], 0) == expect[0][learn[k]]);
    uint32_t rng = 12345;
    for (int tok = 0; tok < TOKENS; tok++) {
        rng = rng * 1103515245u + 12345u;
        int a = (int)(rng >> 16) % N_EXPERTS;
        int b = (a + 1 + (int)(rng >> 8) % (N_EXPERTS - 1)) % N_EXPERTS;
        EXPECT(expert_sum(sum, out, w[0], expert_bytes, a, 0) == expect[0][a]);
        EXPECT(expert_sum(sum, out, w[0], expert_bytes, b, 0) == expect[0][b]);
    }
    EXPECT(slices ? fakecuda_kernel_bytes(1) == 0 : fakecuda_kernel_bytes(1) > 0);

    EXPECT(expert_sum(sum, out, w[1], expert_bytes, 4, 0) == expect[1][4]);
    EXPECT(expert_sum(sum, out, w[1], expert_bytes, 1, 1024) ==
           expected_sum(1, 1, expert_bytes, 1024));

    CUstream s;
    CU_OK(cu.StreamCreate(&s, 0));
    CUgraph g = NULL;
    CUgraphExec x = NULL;
    CU_OK(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    static const int graph_experts[] = {3, 6};
    CUdeviceptr slot[2] = {out + 8, out + 16}, in[2];
    uint64_t n = expert_bytes / 4;
    void *args[2][3];
    for (int k = 0; k < 2; k++) {
        in[k] = w[2] + (CUdeviceptr)graph_experts[k] * expert_bytes;
        args[k][0] = &slot[k], args[k][1] = &in[k], args[k][2] = &n;
        CU_OK(cu.LaunchKernel(sum, 1, 1, 1, 1, 1, 1, 0, s, args[k], NULL));
    }
    CU_OK(cu.StreamEndCapture(s, &g));
    CU_OK(cu.GraphInstantiate(&x, g, 0));
    fakecuda_reset_counters();
    CU_OK(cu.GraphLaunch(x, s));
    EXPECT(slices ? fakecuda_kernel_bytes(1) == 0 : fakecuda_kernel_bytes(1) > 0);
    for (int k = 0; k < 2; k++) {
        uint64_t got = 0;
        CU_OK(cu.MemcpyDtoH(&got, slot[k], sizeof got));
        EXPECT(got == expect[2][graph_experts[k]]);
    }
    CU_OK(cu.GraphExecDestroy(x));
    CU_OK(cu.GraphDestroy(g));

    /* Four 3 MiB experts: slices that are no whole number of pages share their boundary
     * pages, and each kernel still finds its expert's pages on the device. */
    const uint64_t odd = 3 * MiB;
    CUdeviceptr w3 = fused_tensor(3, 4, odd);
    fakecuda_reset_counters();
    static const int odd_order[] = {1, 2, 3, 0, 2};
    for (int k = 0; k < 5; k++)
        EXPECT(expert_sum(sum, out, w3, odd, odd_order[k], 0) ==
               expected_sum(3, odd_order[k], odd, 0));
    EXPECT(slices ? fakecuda_kernel_bytes(1) == 0 : fakecuda_kernel_bytes(1) > 0);
    CU_OK(cu.MemFree(out));
    /* the tensors stay allocated: the report counts their objects at exit */
}

/* ---- routed experts: llama.cpp's fused tensors, uploaded from the mapped GGUF file ---- */

/* A GGUF v3 file of F32 tensors (names, shapes) whose words are fused_word(tensor index,
 * row-major word index / words per expert of ne[0]*ne[1], ...), written by hand: the
 * interposer's scan (interpose/gguf_scan.c) must read what ggml's layout puts there. */
typedef struct gtensor {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[3];
} gtensor;

static uint64_t gtensor_bytes(const gtensor *t)
{
    uint64_t n = 4;
    for (uint32_t d = 0; d < t->n_dims; d++)
        n *= t->ne[d];
    return n;
}

static void put(FILE *f, const void *p, size_t n)
{
    EXPECT(fwrite(p, 1, n, f) == n);
}

static void put_str(FILE *f, const char *s)
{
    uint64_t n = strlen(s);
    put(f, &n, 8);
    put(f, s, n);
}

/* Writes the file; data_at[i] is tensor i's file offset. used: qwen3moe.expert_used_count,
 * the experts a token routes to (0: no such key). */
static void write_gguf(const char *path, const gtensor *t, int n, uint32_t used,
                       uint64_t *data_at)
{
    FILE *f = fopen(path, "wb");
    EXPECT(f != NULL);
    if (!f)
        return;
    uint32_t version = 3, u32 = 4 /* type u32 */, str = 8, align = 32;
    uint64_t n_tensors = (uint64_t)n, n_kv = used ? 3 : 2, off = 0;
    put(f, "GGUF", 4), put(f, &version, 4), put(f, &n_tensors, 8), put(f, &n_kv, 8);
    put_str(f, "general.architecture"), put(f, &str, 4), put_str(f, "qwen3moe");
    put_str(f, "general.alignment"), put(f, &u32, 4), put(f, &align, 4);
    if (used)
        put_str(f, "qwen3moe.expert_used_count"), put(f, &u32, 4), put(f, &used, 4);
    for (int i = 0; i < n; i++) {
        uint32_t f32 = 0;
        put_str(f, t[i].name), put(f, &t[i].n_dims, 4), put(f, t[i].ne, 8 * t[i].n_dims);
        put(f, &f32, 4), put(f, &off, 8);
        data_at[i] = off;
        off += (gtensor_bytes(&t[i]) + align - 1) / align * align;
    }
    uint64_t data = ((uint64_t)ftell(f) + align - 1) / align * align;
    for (int i = 0; i < n; i++) {
        data_at[i] += data;
        fseek(f, (long)data_at[i], SEEK_SET);
        uint64_t per = t[i].n_dims == 3 ? t[i].ne[0] * t[i].ne[1] : gtensor_bytes(&t[i]) / 4;
        uint32_t *v = malloc(per * 4);
        for (uint64_t e = 0; v && e < gtensor_bytes(&t[i]) / 4 / per; e++) {
            for (uint64_t w = 0; w < per; w++)
                v[w] = fused_word(i, (int)e, w);
            put(f, v, per * 4);
        }
        free(v);
    }
    EXPECT(fclose(f) == 0);
}

/* A GGUF file of tensors t[0, n) written to a temporary path, mapped, and each tensor
 * uploaded into its own allocation w[i] by one copy from the mapping, as llama.cpp loads. */
typedef struct mapped_gguf {
    char path[40];
    uint8_t *map;
    size_t bytes;
    uint64_t at[4];
} mapped_gguf;

static void upload_gguf(mapped_gguf *m, const gtensor *t, int n, uint32_t used,
                        CUdeviceptr *w)
{
    snprintf(m->path, sizeof m->path, "/tmp/test_preload_routed_XXXXXX");
    int fd = mkstemp(m->path);
    EXPECT(fd >= 0);
    close(fd);
    write_gguf(m->path, t, n, used, m->at);
    FILE *f = fopen(m->path, "rb");
    EXPECT(f != NULL);
    fseek(f, 0, SEEK_END);
    m->bytes = (size_t)ftell(f);
    m->map = mmap(NULL, m->bytes, PROT_READ, MAP_PRIVATE, fileno(f), 0);
    fclose(f);
    EXPECT(m->map != MAP_FAILED);
    for (int i = 0; i < n; i++) {
        CU_OK(cu.MemAlloc(&w[i], gtensor_bytes(&t[i])));
        CU_OK(cu.MemcpyHtoD(w[i], m->map + m->at[i], gtensor_bytes(&t[i])));
    }
}

static void unmap_gguf(mapped_gguf *m)
{
    munmap(m->map, m->bytes);
    unlink(m->path);
}

/* Writes one token's ids row into `ids` (device memory, through a kernel as the router's
 * top-k would): the row's 16 words, e[0, k) first. */
static void write_ids_row(CUfunction copy, CUdeviceptr ids, CUdeviceptr staging,
                          const int32_t row[16])
{
    uint64_t bytes = 16 * sizeof *row;
    CU_OK(cu.MemcpyHtoD(staging, row, bytes));
    void *copy_params[] = {&ids, &staging, &bytes};
    CU_OK(cu.LaunchKernel(copy, 1, 1, 1, 1, 1, 1, 0, NULL, copy_params, NULL));
}

/* fk_routed_sum over the k experts whose ids the kernel reads from `ids` (device memory),
 * into the next 64 bytes of `out` not written yet (its bytes before the launch are whatever
 * the buffer held, as an output's in llama.cpp's compute buffer); checked against the
 * expected sums of tensor `tensor`. */
static void routed_sums(CUfunction routed, CUdeviceptr out, CUdeviceptr w, CUdeviceptr ids,
                        const int32_t *expert, uint32_t k, uint64_t bytes, int tensor,
                        CUstream s)
{
    static uint32_t slot;
    CUdeviceptr dst = out + 64 * (slot++ % 1024);
    void *params[] = {&w, &ids, &dst, &k, &bytes};
    EXPECT(cu.LaunchKernel(routed, 1, k, 1, 1, 1, 1, 0, s, params, NULL) == CUDA_SUCCESS);
    uint64_t got[8] = {0};
    CU_OK(cu.MemcpyDtoH(got, dst, k * sizeof *got));
    for (uint32_t j = 0; j < k; j++)
        EXPECT(got[j] == expected_sum(tensor, expert[j], bytes, 0));
}

/* llama.cpp's decode under MOEVM_GPU_BUDGET=12M: two fused expert tensors of 16 experts
 * (1 MiB experts, half a page, and 1.5 MiB ones), 16 and 24 MiB, and a 2 MiB attention
 * weight, each uploaded by one copy from the mapped GGUF file, which says a token routes to
 * K = 2 experts. Every "token" a kernel writes a row of 16 expert ids into a managed buffer
 * as llama.cpp's top-k leaves it (the argsort of all 16 experts, the token's two first), and
 * routed kernels handed each tensor's base read the first two on the device. With
 * MOEVM_PRELOAD_ROUTING on (the default) the interposer reads the ids first and loads only
 * those experts, so every kernel reads device memory; off, each tensor is one object larger
 * than the budget and kernels read the host. The interposer's reads failing (the tensor is
 * named whole), a capture of a routed launch (no ids read: the capture must stay valid), a
 * batch's two rows, a file that gives no top-k (the ids then a leading run: two ids, then words that are no
 * ids) and a copy of the same bytes from ordinary memory (not a file: not cut) follow.
 * Every kernel writes its sums where an earlier layer's ids lie (ggml's allocator reuses
 * bytes so), after its ids in its parameters: those must not be read as the launch's.
 * test_preload.sh checks the report's counts. */
SCENARIO void scenario_routed(void)
{
    enum { TOKENS = 30, K = 2, E = 16 };
    const char *env = getenv("MOEVM_PRELOAD_ROUTING");
    bool routing = !env || strcmp(env, "off") != 0;
    static const gtensor t[] = {
        {"blk.0.ffn_up_exps.weight", 3, {512, 512, E}},
        {"blk.0.ffn_down_exps.weight", 3, {768, 512, E}},
        {"blk.0.attn_q.weight", 2, {1024, 512, 1}},
    };
    mapped_gguf file;
    CUdeviceptr w[3];
    upload_gguf(&file, t, 3, K, w);
    const uint64_t up = gtensor_bytes(&t[0]) / E, down = gtensor_bytes(&t[1]) / E;

    CUfunction routed = fake_kernel("fk_routed_sum"), copy = fake_kernel("fk_copy");
    CUfunction fill = fake_kernel("fk_fill_u32"), sum = fake_kernel("fk_sum_u32");
    CUdeviceptr ids, staging, out;
    CU_OK(cu.MemAlloc(&ids, 2 * MiB)); /* managed, as llama.cpp's compute buffer */
    CU_OK(cu.MemAlloc(&staging, 64));  /* native */
    CU_OK(cu.MemAlloc(&out, 2 * MiB)); /* managed too */
    uint32_t not_ids = 0xbf800000u;    /* -1.0f, as an activation */
    uint64_t n_words = 2 * MiB / 4;
    void *fill_params[] = {&ids, &not_ids, &n_words};
    CU_OK(cu.LaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, fill_params, NULL));
    /* The outputs' bytes hold an earlier layer's ids, as the compute buffer's reused bytes
     * may: rows that start with experts 5 and 6. The kernel takes its ids before its output
     * (as ggml's kernels do), and those are the launch's. */
    int32_t *stale = malloc(64 * 1024);
    for (int j = 0; stale && j < 16 * 1024; j++)
        stale[j] = (5 + j) % E;
    CU_OK(cu.MemcpyHtoD(out, stale, 64 * 1024));
    free(stale);
    /* An input the program copies from the host into the bytes the ids reuse later, as
     * ggml's allocator does in llama.cpp's compute buffer: no pointer is ruled out by it. */
    uint32_t input[1024];
    for (int i = 0; i < 1024; i++)
        input[i] = not_ids;
    CU_OK(cu.MemcpyHtoD(ids, input, sizeof input));
    EXPECT(sum_kernel(sum, out, w[2], gtensor_bytes(&t[2]) / 4) ==
           expected_sum(2, 0, gtensor_bytes(&t[2]), 0));

    fakecuda_reset_counters();
    uint32_t rng = 777;
    int32_t row[E];
    for (int tok = 0; tok < TOKENS; tok++) {
        rng = rng * 1103515245u + 12345u;
        for (int j = 0; j < E; j++) /* a rotation of all experts: an argsort's row */
            row[j] = (int32_t)(((rng >> 16) + (uint32_t)j * ((rng >> 8) % 2 ? 1 : 15)) % E);
        write_ids_row(copy, ids, staging, row);
        routed_sums(routed, out, w[0], ids, row, K, up, 0, NULL);
        routed_sums(routed, out, w[1], ids, row, K, down, 1, NULL);
    }
    EXPECT(routing ? fakecuda_kernel_bytes(1) == 0 : fakecuda_kernel_bytes(1) > 0);

    /* The interposer's own reads failing, its stream sync and then its copy of the ids: the
     * launch names the tensor whole, and the kernel still reads the right experts. */
    static const char *const fault[] = {"cuStreamSynchronize:1", "cuMemcpyDtoH:1"};
    for (int i = 0; routing && i < 2; i++) {
        row[0] = 3, row[1] = 12 + i;
        write_ids_row(copy, ids, staging, row);
        unsigned long syncs = fakecuda_calls("cuStreamSynchronize");
        EXPECT(fakecuda_set_fail(fault[i]) == 0);
        routed_sums(routed, out, w[0], ids, row, K, up, 0, NULL);
        fakecuda_set_fail("");
        EXPECT(fakecuda_calls("cuStreamSynchronize") > syncs);
    }

    /* Captured: the ids are not read (a sync would invalidate the capture); the graph's
     * launch names the tensor whole, and its kernel reads the right experts. */
    CUstream s;
    CUgraph g = NULL;
    CUgraphExec x = NULL;
    CU_OK(cu.StreamCreate(&s, 0));
    CU_OK(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    uint32_t k = K;
    uint64_t bytes = up;
    void *params[] = {&w[0], &ids, &out, &k, &bytes};
    CU_OK(cu.LaunchKernel(routed, 1, k, 1, 1, 1, 1, 0, s, params, NULL));
    CU_OK(cu.StreamEndCapture(s, &g));
    CU_OK(cu.GraphInstantiate(&x, g, 0));
    CU_OK(cu.GraphLaunch(x, s));
    int32_t last[K];
    CU_OK(cu.MemcpyDtoH(last, ids, sizeof last));
    uint64_t got[K];
    CU_OK(cu.MemcpyDtoH(got, out, sizeof got));
    for (int j = 0; j < K; j++)
        EXPECT(got[j] == expected_sum(0, last[j], up, 0));
    CU_OK(cu.GraphExecDestroy(x));
    CU_OK(cu.GraphDestroy(g));

    /* A batch of two tokens: two rows of 16, each naming its two first experts; the kernel
     * reads the first token's, and the interposer names all four (the report counts them). */
    int32_t rows[2 * E];
    for (int j = 0; j < 2 * E; j++)
        rows[j] = (int32_t)((j % E + (j < E ? 4 : 9)) % E);
    write_ids_row(copy, ids, staging, rows);
    write_ids_row(copy, ids + E * sizeof *rows, staging, rows + E);
    routed_sums(routed, out, w[0], ids, rows, K, up, 0, NULL);

    /* A file that does not say how many experts a token routes to: the ids are each
     * pointer's leading run of values below 16, here the two a token's row starts with. */
    mapped_gguf other;
    CUdeviceptr w_other;
    upload_gguf(&other, t, 1, 0, &w_other);
    fakecuda_reset_counters();
    for (int tok = 0; tok < 4; tok++) {
        for (int j = 0; j < E; j++)
            row[j] = (int32_t)not_ids;
        row[0] = 2 * tok, row[1] = 2 * tok + 9;
        write_ids_row(copy, ids, staging, row);
        routed_sums(routed, out, w_other, ids, row, K, up, 0, NULL);
    }
    EXPECT(routing ? fakecuda_kernel_bytes(1) == 0 : fakecuda_kernel_bytes(1) > 0);
    CU_OK(cu.MemFree(w_other)); /* room under MOEVM_OVERSUBSCRIBE for the copy below */
    unmap_gguf(&other);

    /* The same bytes from ordinary memory name no file: that tensor is not cut. */
    uint8_t *plain = malloc(gtensor_bytes(&t[0]));
    memcpy(plain, file.map + file.at[0], gtensor_bytes(&t[0]));
    CUdeviceptr copy_of_up;
    CU_OK(cu.MemAlloc(&copy_of_up, gtensor_bytes(&t[0])));
    CU_OK(cu.MemcpyHtoD(copy_of_up, plain, gtensor_bytes(&t[0])));
    free(plain);
    unmap_gguf(&file);
    /* the tensors stay allocated: the report counts their objects at exit */
}

/* A 12 MiB buffer, larger than the 8 MiB budget (four 2 MiB pages of its six fit), and a
 * 2 MiB one. */
SCENARIO void scenario_overbudget(void)
{
    const uint64_t big_n = 12 * MiB / 4, small_n = 2 * MiB / 4;
    CUfunction sum = fake_kernel("fk_sum_u32");
    CUdeviceptr big, small, out;
    CU_OK(cu.MemAlloc(&out, 4096)); /* small: native */
    CU_OK(cu.MemAlloc(&big, 12 * MiB));
    CU_OK(cu.MemAlloc(&small, 2 * MiB));
    uint32_t *host = malloc(12 * MiB);
    uint64_t expect_big = 0, expect_small = 0;
    for (uint64_t i = 0; i < big_n; i++)
        expect_big += host[i] = (uint32_t)(i * 2246822519u + 3);
    CU_OK(cu.MemcpyHtoD(big, host, 12 * MiB));
    for (uint64_t i = 0; i < small_n; i++)
        expect_small += host[i] = (uint32_t)(i * 3266489917u + 5);
    CU_OK(cu.MemcpyHtoD(small, host, 2 * MiB));
    free(host);

    /* The first launch fills the budget; the rest of the buffer is read from the host. The
     * device bytes count the 8-byte sum written to `out` too. */
    fakecuda_reset_counters();
    EXPECT(sum_kernel(sum, out, big, big_n) == expect_big);
    EXPECT(fakecuda_calls("cuCtxSynchronize") == 1);
    EXPECT(fakecuda_kernel_bytes(0) == 8 * MiB + 8 && fakecuda_kernel_bytes(1) == 4 * MiB);
    /* Later ones can move nothing: they must not drain the device. */
    fakecuda_reset_counters();
    for (int i = 0; i < 3; i++)
        EXPECT(sum_kernel(sum, out, big, big_n) == expect_big);
    EXPECT(fakecuda_calls("cuCtxSynchronize") == 0);
    EXPECT(fakecuda_kernel_bytes(0) == 3 * (8 * MiB + 8));
    EXPECT(fakecuda_kernel_bytes(1) == 3 * 4 * MiB);
    /* Another object: a page of the big buffer makes room for it (one drain)... */
    fakecuda_reset_counters();
    EXPECT(sum_kernel(sum, out, small, small_n) == expect_small);
    EXPECT(fakecuda_calls("cuCtxSynchronize") == 1 && fakecuda_kernel_bytes(1) == 0);
    /* ...and the big buffer takes the page back (one drain), filling the budget again. */
    fakecuda_reset_counters();
    EXPECT(sum_kernel(sum, out, big, big_n) == expect_big);
    EXPECT(fakecuda_calls("cuCtxSynchronize") == 1);
    EXPECT(fakecuda_kernel_bytes(0) == 8 * MiB + 8 && fakecuda_kernel_bytes(1) == 4 * MiB);
    CU_OK(cu.MemFree(big));
    CU_OK(cu.MemFree(small));
    CU_OK(cu.MemFree(out));
}

/* An 8 MiB buffer (the whole budget) written in two halves by unified copies (cuMemcpy,
 * cuMemcpyAsync) from host memory: each half is an object of its own. */
SCENARIO void scenario_unified(void)
{
    const uint64_t half = 4 * MiB, half_n = half / 4;
    CUfunction sum = fake_kernel("fk_sum_u32");
    CUdeviceptr buf, other, out;
    CU_OK(cu.MemAlloc(&out, 4096)); /* small: native */
    CU_OK(cu.MemAlloc(&buf, 2 * half));
    CU_OK(cu.MemAlloc(&other, 2 * half));
    uint32_t *host = malloc(2 * half);
    uint64_t expect[2] = {0, 0};
    for (uint64_t i = 0; i < 2 * half_n; i++)
        expect[i >= half_n] += host[i] = (uint32_t)(i * 2654435761u + 11);
    CU_OK(cu.Memcpy(buf, (CUdeviceptr)host, half));
    CU_OK(cu.MemcpyAsync(buf + half, (CUdeviceptr)(host + half_n), half, NULL));

    /* Each half is made resident by its own miss (one object would have been one). */
    fakecuda_reset_counters();
    EXPECT(sum_kernel(sum, out, buf, half_n) == expect[0]);
    EXPECT(fakecuda_calls("cuCtxSynchronize") == 1);
    EXPECT(sum_kernel(sum, out, buf + half, half_n) == expect[1]);
    EXPECT(fakecuda_calls("cuCtxSynchronize") == 2);
    EXPECT(fakecuda_kernel_bytes(1) == 0);

    /* A copy from device memory teaches nothing: 8 bytes through native memory and back
     * leave the second half one object, so after it was pushed out, its next launch
     * brings all of it back. */
    CU_OK(cu.Memcpy(out + 64, buf + half, 8));
    CU_OK(cu.Memcpy(buf + half, out + 64, 8));
    memset(host, 0, 2 * half);
    CU_OK(cu.MemcpyHtoD(other, host, 2 * half));
    EXPECT(sum_kernel(sum, out, other, 2 * half_n) == 0);
    fakecuda_reset_counters();
    EXPECT(sum_kernel(sum, out, buf + half, half_n) == expect[1]);
    EXPECT(fakecuda_kernel_bytes(1) == 0);

    /* And back to the host through a unified copy. */
    CU_OK(cu.Memcpy((CUdeviceptr)host, buf, 2 * half));
    uint64_t got[2] = {0, 0};
    for (uint64_t i = 0; i < 2 * half_n; i++)
        got[i >= half_n] += host[i];
    EXPECT(got[0] == expect[0] && got[1] == expect[1]);
    free(host);
    CU_OK(cu.MemFree(buf));
    CU_OK(cu.MemFree(other));
    CU_OK(cu.MemFree(out));
}

/* ---- copies and memsets from other threads while a miss is served ------------------- */

typedef struct guarded_op {
    pthread_t thread;
    CUcontext ctx;
    int which;
    CUdeviceptr a, b, native;
    void *host;
    atomic_int done;
    CUresult rc;
} guarded_op;

enum { GUARDED_OPS = 6 };
static const uint32_t B_WORD = 0x0B0B0B0Bu;

/* Each op touches its own part of A (read) or B (written), so all may run in any order. */
static void *guarded_run(void *arg)
{
    guarded_op *op = arg;
    CUresult r = cu.CtxSetCurrent(op->ctx);
    if (r == CUDA_SUCCESS)
        switch (op->which) {
        case 0: r = cu.MemsetD32(op->b, B_WORD, MiB / 4); break;
        case 1: r = cu.MemsetD8Async(op->b + MiB, 0x5c, MiB, NULL); break;
        case 2: r = cu.MemcpyDtoDAsync(op->b + 2 * MiB, op->native, 4096, NULL); break;
        case 3: { /* 4 rows of 64 bytes of a host image into B's fourth MiB, 128 apart */
            CUDA_MEMCPY2D c;
            memset(&c, 0, sizeof c);
            c.srcMemoryType = CU_MEMORYTYPE_HOST;
            c.srcHost = op->host;
            c.srcPitch = 64;
            c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
            c.dstDevice = op->b + 3 * MiB;
            c.dstPitch = 128;
            c.WidthInBytes = 64;
            c.Height = 4;
            r = cu.Memcpy2D(&c);
            break;
        }
        case 4: { /* A's first 4 KiB to the host, as a batch of one */
            CUdeviceptr dst = (CUdeviceptr)op->host, src = op->a;
            size_t size = 4096, idx = 0;
            CUmemcpyAttributes attr;
            memset(&attr, 0, sizeof attr);
            attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
            r = cu.MemcpyBatchAsync(&dst, &src, &size, 1, &attr, &idx, 1, NULL);
            break;
        }
        default: r = cu.MemcpyDtoH(op->host, op->a + 4 * MiB, 4096); break;
        }
    op->rc = r;
    atomic_store(&op->done, 1);
    return NULL;
}

typedef struct launcher {
    CUcontext ctx;
    CUfunction sum;
    CUdeviceptr out, in;
    uint64_t n, got;
} launcher;

static void *launcher_run(void *arg)
{
    launcher *l = arg;
    if (cu.CtxSetCurrent(l->ctx) == CUDA_SUCCESS) {
        void *params[] = {&l->out, &l->in, &l->n};
        if (cu.LaunchKernel(l->sum, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) == CUDA_SUCCESS)
            cu.MemcpyDtoH(&l->got, l->out, sizeof l->got);
    }
    return NULL;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Prefetch from the launch sequence (MOEVM_PRELOAD_PREFETCH=on; test_preload.sh reads the
 * report). Twelve 2 MiB buffers walked in order with room for four: once the order is
 * learned, each launch's buffer is being copied while the launch before it runs. Between
 * two launches the program then writes the buffer whose copy is under way (from the host,
 * with a memset, with a device-side copy) and frees one: each write must be what the next
 * sum reads, not the bytes the copy took before it. Last, the buffers are walked backwards,
 * against the learned order. The pauses let the worker copy the old bytes first. */
SCENARIO void scenario_prefetch(void)
{
    const uint64_t n = 2 * MiB / 4;
    walk w;
    walk_open(&w);
    walk_passes(&w, 4);
    walk_sum(&w, 3);
    sleep_ms(30);
    w.expect[4] = fill_words(w.host, 99);
    CU_OK(cu.MemcpyHtoD(w.buf[4], w.host, 2 * MiB));
    walk_sum(&w, 4);
    walk_sum(&w, 5);
    sleep_ms(30);
    CU_OK(cu.MemsetD32(w.buf[6], 7, n));
    w.expect[6] = 7 * n;
    walk_sum(&w, 6);
    walk_sum(&w, 7);
    sleep_ms(30);
    CU_OK(cu.MemcpyDtoDAsync(w.buf[8], w.buf[0], 2 * MiB, NULL));
    w.expect[8] = w.expect[0];
    walk_sum(&w, 8);
    walk_sum(&w, 9);
    sleep_ms(30);
    CU_OK(cu.MemFree(w.buf[10]));
    w.buf[10] = 0;
    walk_sum(&w, 11);
    for (int b = WALK_N - 1; b >= 0; b--)
        if (w.buf[b])
            walk_sum(&w, b);
    walk_close(&w);
}

/* A (8 MiB: the whole budget) and B (4 MiB) are managed; B is resident. A launch on A, from
 * another thread, must evict B and load A; a held stream keeps it in its drain, holding the
 * interposer's write lock. Copies and memsets of A and B from six more threads must wait
 * for it (a copy queued between the drain and the remap could read a page half-moved, or
 * write a home about to be replaced), then complete correctly. */
SCENARIO void scenario_guarded(void)
{
    const uint64_t a_n = 8 * MiB / 4, b_n = 4 * MiB / 4;
    CUfunction sum = fake_kernel("fk_sum_u32");
    CUdeviceptr a, b, native, out;
    CUstream held;
    CUcontext ctx;
    CU_OK(cu.CtxGetCurrent(&ctx));
    CU_OK(cu.StreamCreate(&held, 0));
    CU_OK(cu.MemAlloc(&out, 4096)); /* small: native */
    CU_OK(cu.MemAlloc(&native, 4096));
    CU_OK(cu.MemAlloc(&a, 8 * MiB));
    CU_OK(cu.MemAlloc(&b, 4 * MiB));
    uint32_t *host = malloc(8 * MiB);
    uint64_t expect_a = 0;
    for (uint64_t i = 0; i < a_n; i++)
        expect_a += host[i] = (uint32_t)(i * 2654435761u + 17);
    CU_OK(cu.MemcpyHtoD(a, host, 8 * MiB));
    uint32_t *pattern_a = malloc(8 * MiB);
    memcpy(pattern_a, host, 8 * MiB);
    for (uint64_t i = 0; i < b_n; i++)
        host[i] = (uint32_t)(i * 40503u + 29);
    CU_OK(cu.MemcpyHtoD(b, host, 4 * MiB));
    unsigned char native_bytes[4096], image[256];
    for (int i = 0; i < 4096; i++)
        native_bytes[i] = (unsigned char)(i * 31 + 7);
    for (int i = 0; i < 256; i++)
        image[i] = (unsigned char)(i * 17 + 3);
    CU_OK(cu.MemcpyHtoD(native, native_bytes, sizeof native_bytes));
    uint64_t expect_b = 0;
    for (uint64_t i = 0; i < b_n; i++)
        expect_b += host[i];
    EXPECT(sum_kernel(sum, out, b, b_n) == expect_b); /* B resident */

    fakecuda_stream_hold(held, 1);
    fakecuda_reset_counters();
    launcher l = {ctx, sum, out, a, a_n, 0};
    pthread_t lt;
    EXPECT(pthread_create(&lt, NULL, launcher_run, &l) == 0);
    for (int i = 0; i < 5000 && fakecuda_calls("cuCtxSynchronize") == 0; i++)
        sleep_ms(1);
    EXPECT(fakecuda_calls("cuCtxSynchronize") == 1); /* the miss is in its drain */

    static guarded_op ops[GUARDED_OPS];
    static unsigned char batch_out[4096], dtoh_out[4096];
    void *hosts[GUARDED_OPS] = {NULL, NULL, NULL, image, batch_out, dtoh_out};
    for (int i = 0; i < GUARDED_OPS; i++) {
        ops[i] = (guarded_op){.ctx = ctx, .which = i, .a = a, .b = b, .native = native,
                              .host = hosts[i], .rc = CUDA_ERROR_UNKNOWN};
        EXPECT(pthread_create(&ops[i].thread, NULL, guarded_run, &ops[i]) == 0);
    }
    sleep_ms(200);
    for (int i = 0; i < GUARDED_OPS; i++)
        if (atomic_load(&ops[i].done)) {
            fprintf(stderr, "test_preload: op %d ran while a miss was being served\n", i);
            failures++;
        }
    fakecuda_stream_hold(held, 0);
    pthread_join(lt, NULL);
    for (int i = 0; i < GUARDED_OPS; i++) {
        pthread_join(ops[i].thread, NULL);
        EXPECT(ops[i].rc == CUDA_SUCCESS);
    }
    EXPECT(l.got == expect_a);
    EXPECT(memcmp(batch_out, pattern_a, 4096) == 0);
    EXPECT(memcmp(dtoh_out, pattern_a + a_n / 2, 4096) == 0);

    /* B as the six writers left it, read back after it was written back home. */
    uint32_t *back = (uint32_t *)host;
    CU_OK(cu.MemcpyDtoH(back, b, 4 * MiB));
    unsigned char *bytes = (unsigned char *)back;
    EXPECT(back[0] == B_WORD && back[MiB / 4 - 1] == B_WORD);
    EXPECT(bytes[MiB] == 0x5c && bytes[2 * MiB - 1] == 0x5c);
    EXPECT(memcmp(bytes + 2 * MiB, native_bytes, 4096) == 0);
    EXPECT(back[(2 * MiB + 4096) / 4] == (uint32_t)((2 * MiB + 4096) / 4 * 40503u + 29));
    for (int r = 0; r < 4; r++)
        EXPECT(memcmp(bytes + 3 * MiB + 128 * r, image + 64 * r, 64) == 0 &&
               back[(3 * MiB + 128 * r + 64) / 4] ==
                   (uint32_t)((3 * MiB + 128 * r + 64) / 4 * 40503u + 29));
    free(pattern_a);
    free(host);
    CU_OK(cu.MemFree(a));
    CU_OK(cu.MemFree(b));
    CU_OK(cu.MemFree(native));
    CU_OK(cu.MemFree(out));
}

/* Managed buffers of 2 MiB (one page each; the budget holds four), filled with a pattern
 * whose sum is known, and an 8 MiB one that takes the whole budget. */
enum { N_SMALL = 4 };
typedef struct graph_bufs {
    CUfunction sum, copy_args;
    CUdeviceptr small[N_SMALL], big, out;
    uint64_t expect[N_SMALL];
} graph_bufs;

/* small[k] filled with its pattern. */
static void small_fill(graph_bufs *b, int k, uint32_t *host)
{
    const uint64_t n = 2 * MiB / 4;
    b->expect[k] = 0;
    for (uint64_t i = 0; i < n; i++) {
        host[i] = (uint32_t)(i * 40503u + (uint32_t)k * 7919u + 1);
        b->expect[k] += host[i];
    }
    CU_OK(cu.MemcpyHtoD(b->small[k], host, 2 * MiB));
}

static void bufs_make(graph_bufs *b)
{
    b->sum = fake_kernel("fk_sum_u32");
    b->copy_args = fake_kernel("fk_copy_args");
    uint32_t *host = malloc(8 * MiB);
    for (int k = 0; k < N_SMALL; k++) {
        CU_OK(cu.MemAlloc(&b->small[k], 2 * MiB));
        small_fill(b, k, host);
    }
    memset(host, 0, 8 * MiB);
    CU_OK(cu.MemAlloc(&b->big, 8 * MiB));
    CU_OK(cu.MemcpyHtoD(b->big, host, 8 * MiB));
    CU_OK(cu.MemAlloc(&b->out, 4096)); /* small: native */
    free(host);
}

/* The big buffer takes the whole budget: every small one goes back to the host. */
static void bufs_push_out(graph_bufs *b)
{
    EXPECT(sum_kernel(b->sum, b->out + 2048, b->big, 8 * MiB / 4) == 0);
    fakecuda_reset_counters();
}

/* Poisons out[0..4) (the sums' slots). */
static void out_poison(graph_bufs *b)
{
    uint64_t poison[N_SMALL];
    memset(poison, 0xA5, sizeof poison);
    CU_OK(cu.MemcpyHtoD(b->out, poison, sizeof poison));
}

static uint64_t out_read(graph_bufs *b, int slot)
{
    uint64_t v = 0;
    CU_OK(cu.MemcpyDtoH(&v, b->out + (CUdeviceptr)slot * 8, sizeof v));
    return v;
}

static void bufs_free(graph_bufs *b)
{
    for (int k = 0; k < N_SMALL; k++)
        CU_OK(cu.MemFree(b->small[k]));
    CU_OK(cu.MemFree(b->big));
    CU_OK(cu.MemFree(b->out));
}

/* Kernel-node parameters of a sum of small[k] into out slot `slot`; the values live in v. */
typedef struct sum_node {
    CUdeviceptr out, in;
    uint64_t n;
    void *args[3];
    CUDA_KERNEL_NODE_PARAMS p;
} sum_node;

static CUDA_KERNEL_NODE_PARAMS *sum_params(sum_node *v, graph_bufs *b, int slot, int k)
{
    v->out = b->out + (CUdeviceptr)slot * 8;
    v->in = b->small[k];
    v->n = 2 * MiB / 4;
    v->args[0] = &v->out, v->args[1] = &v->in, v->args[2] = &v->n;
    v->p = (CUDA_KERNEL_NODE_PARAMS){.func = b->sum, .gridDimX = 1, .gridDimY = 1,
                                     .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1,
                                     .blockDimZ = 1, .kernelParams = v->args};
    return &v->p;
}

/* Captures sums of small[k0] and small[k1] into slots 0 and 1 on stream s. */
static CUgraph capture_sums(graph_bufs *b, CUstream s, int k0, int k1)
{
    CUgraph g = NULL;
    CU_OK(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    for (int slot = 0; slot < 2; slot++) {
        sum_node v;
        sum_params(&v, b, slot, slot ? k1 : k0);
        CU_OK(cu.LaunchKernel(b->sum, 1, 1, 1, 1, 1, 1, 0, s, v.args, NULL));
    }
    /* Had the interposer drained the device for the (missing) objects, the capture would
     * be invalidated and this would fail. */
    CU_OK(cu.StreamEndCapture(s, &g));
    return g;
}

/* Launches e; every kernel must have read device memory only. */
static void launch_resident(CUgraphExec e, CUstream s)
{
    CU_OK(cu.GraphLaunch(e, s));
    EXPECT(fakecuda_kernel_bytes(1) == 0);
    EXPECT(fakecuda_kernel_bytes(0) > 0);
}

SCENARIO void scenario_graph(void)
{
    graph_bufs b;
    bufs_make(&b);
    CUstream s;
    CU_OK(cu.StreamCreate(&s, 0));

    /* Captured while not resident: nothing runs, the capture survives. */
    bufs_push_out(&b);
    out_poison(&b);
    CUgraph g1 = capture_sums(&b, s, 0, 1);
    EXPECT(out_read(&b, 0) == 0xA5A5A5A5A5A5A5A5ull);
    CUgraphExec e1 = NULL, e2 = NULL;
    CU_OK(cu.GraphInstantiate(&e1, g1, 0));
    bufs_push_out(&b);
    launch_resident(e1, s);
    EXPECT(out_read(&b, 0) == b.expect[0] && out_read(&b, 1) == b.expect[1]);

    /* Built by hand: a kernel node and a child graph with another. */
    CUgraph g2, child;
    CUgraphNode n_c, n_d, n_child;
    sum_node vc, vd;
    CU_OK(cu.GraphCreate(&g2, 0));
    CU_OK(cu.GraphCreate(&child, 0));
    CU_OK(cu.GraphAddKernelNode(&n_d, child, NULL, 0, sum_params(&vd, &b, 3, 3)));
    CU_OK(cu.GraphAddKernelNode(&n_c, g2, NULL, 0, sum_params(&vc, &b, 2, 2)));
    CU_OK(cu.GraphAddChildGraphNode(&n_child, g2, NULL, 0, child));
    CU_OK(cu.GraphInstantiate(&e2, g2, 0));
    bufs_push_out(&b);
    out_poison(&b);
    launch_resident(e2, s);
    EXPECT(out_read(&b, 2) == b.expect[2] && out_read(&b, 3) == b.expect[3]);

    /* One node now sums small[0]: its new object must be made resident. */
    CU_OK(cu.GraphExecKernelNodeSetParams(e2, n_c, sum_params(&vc, &b, 2, 0)));
    bufs_push_out(&b);
    out_poison(&b);
    launch_resident(e2, s);
    EXPECT(out_read(&b, 2) == b.expect[0] && out_read(&b, 3) == b.expect[3]);

    /* e1 updated from a new capture over other buffers. */
    CUgraph g3 = capture_sums(&b, s, 2, 3);
    CUgraphExecUpdateResultInfo info;
    CU_OK(cu.GraphExecUpdate(e1, g3, &info));
    bufs_push_out(&b);
    out_poison(&b);
    launch_resident(e1, s);
    EXPECT(out_read(&b, 0) == b.expect[2] && out_read(&b, 1) == b.expect[3]);

    /* small[0] freed and allocated again at the same address (first fit), then filled: the
     * objects e2 found at its earlier launches are gone, and its launch must follow. */
    CUdeviceptr old0 = b.small[0];
    CU_OK(cu.MemFree(b.small[0]));
    CU_OK(cu.MemAlloc(&b.small[0], 2 * MiB));
    EXPECT(b.small[0] == old0);
    uint32_t *host = malloc(2 * MiB);
    small_fill(&b, 0, host);
    free(host);
    bufs_push_out(&b);
    out_poison(&b);
    launch_resident(e2, s);
    EXPECT(out_read(&b, 2) == b.expect[0] && out_read(&b, 3) == b.expect[3]);

    CU_OK(cu.GraphExecDestroy(e1));
    CU_OK(cu.GraphExecDestroy(e2));
    CU_OK(cu.GraphDestroy(g1));
    CU_OK(cu.GraphDestroy(g2));
    CU_OK(cu.GraphDestroy(g3));
    CU_OK(cu.GraphDestroy(child));
    bufs_free(&b);
}

/* After a graph launch: the sum of buffer `in` needs no move (the launch made its object
 * resident) and equals `expect`. */
static void expect_resident_sum(graph_bufs *b, CUdeviceptr in, uint64_t expect)
{
    fakecuda_reset_counters();
    EXPECT(sum_kernel(b->sum, b->out + 1024, in, 2 * MiB / 4) == expect);
    EXPECT(fakecuda_calls("cuCtxSynchronize") == 0 && fakecuda_kernel_bytes(1) == 0);
}

static CUDA_MEMCPY3D device_copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = src;
    c.dstDevice = dst;
    c.WidthInBytes = bytes;
    c.Height = c.Depth = 1;
    return c;
}

/* A graph of a memset node, a memcpy node and a kernel node: launched while their buffers
 * are on the host, it makes all of them resident (the sums after it move nothing), and so
 * again after each node is pointed elsewhere by cuGraphExecNodeSetParams and
 * cuGraphExecMemcpyNodeSetParams. */
SCENARIO void scenario_graphcopy(void)
{
    const uint64_t n = 2 * MiB / 4, ones = n * 0x01010101ull;
    graph_bufs b;
    bufs_make(&b);
    CUstream s;
    CUcontext ctx;
    CU_OK(cu.StreamCreate(&s, 0));
    CU_OK(cu.CtxGetCurrent(&ctx));
    CUgraph g;
    CUgraphNode n_set, n_copy, n_sum;
    CUgraphExec e = NULL;
    CUDA_MEMSET_NODE_PARAMS set = {.dst = b.small[0], .value = 0x01010101u, .elementSize = 4,
                                   .width = n, .height = 1};
    CUDA_MEMCPY3D copy = device_copy(b.small[2], b.small[1], 2 * MiB);
    sum_node v;
    CU_OK(cu.GraphCreate(&g, 0));
    CU_OK(cu.GraphAddMemsetNode(&n_set, g, NULL, 0, &set, ctx));
    CU_OK(cu.GraphAddMemcpyNode(&n_copy, g, &n_set, 1, &copy, ctx));
    CU_OK(cu.GraphAddKernelNode(&n_sum, g, &n_copy, 1, sum_params(&v, &b, 0, 3)));
    CU_OK(cu.GraphInstantiate(&e, g, 0));
    bufs_push_out(&b);
    out_poison(&b);
    CU_OK(cu.GraphLaunch(e, s));
    EXPECT(out_read(&b, 0) == b.expect[3]);
    expect_resident_sum(&b, b.small[0], ones);       /* the memset's destination */
    expect_resident_sum(&b, b.small[2], b.expect[1]); /* the copy's destination... */
    expect_resident_sum(&b, b.small[1], b.expect[1]); /* ...and source */

    /* The memset now fills small[3] (generic setter), the kernel sums small[2]. */
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEMSET;
    p.memset = (CUDA_MEMSET_NODE_PARAMS_v2){.dst = b.small[3], .value = 0x01010101u,
                                            .elementSize = 4, .width = n, .height = 1};
    CU_OK(cu.GraphExecNodeSetParams(e, n_set, &p));
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_KERNEL;
    const CUDA_KERNEL_NODE_PARAMS *k = sum_params(&v, &b, 1, 2);
    p.kernel = (CUDA_KERNEL_NODE_PARAMS_v3){.func = k->func, .gridDimX = 1, .gridDimY = 1,
                                            .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1,
                                            .blockDimZ = 1, .kernelParams = k->kernelParams};
    CU_OK(cu.GraphExecNodeSetParams(e, n_sum, &p));
    /* ...and the copy goes from small[0] to small[1]. */
    copy = device_copy(b.small[1], b.small[0], 2 * MiB);
    CU_OK(cu.GraphExecMemcpyNodeSetParams(e, n_copy, &copy, ctx));
    bufs_push_out(&b);
    out_poison(&b);
    CU_OK(cu.GraphLaunch(e, s));
    EXPECT(out_read(&b, 1) == b.expect[1]); /* small[2] held small[1]'s pattern */
    expect_resident_sum(&b, b.small[3], ones);
    expect_resident_sum(&b, b.small[1], ones);
    expect_resident_sum(&b, b.small[0], ones);
    expect_resident_sum(&b, b.small[2], b.expect[1]);

    CU_OK(cu.GraphExecDestroy(e));
    CU_OK(cu.GraphDestroy(g));
    bufs_free(&b);
}

SCENARIO void scenario_kernels(void)
{
    graph_bufs b;
    bufs_make(&b);
    struct { CUdeviceptr dst, src; uint64_t bytes; } a = {b.small[1], b.small[0], 2 * MiB};
    void *args[] = {&a};
    bufs_push_out(&b);
    CU_OK(cu.LaunchKernel(b.copy_args, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    EXPECT(fakecuda_kernel_bytes(1) == 0);       /* both found in device memory */
    EXPECT(fakecuda_kernel_bytes(0) == 4 * MiB);
    EXPECT(sum_kernel(b.sum, b.out, b.small[1], 2 * MiB / 4) == b.expect[0]);

    /* A cooperative launch is a launch too. */
    bufs_push_out(&b);
    uint64_t n3 = 2 * MiB / 4;
    void *sp[] = {&b.out, &b.small[3], &n3};
    CU_OK(cu.LaunchCooperativeKernel(b.sum, 1, 1, 1, 1, 1, 1, 0, NULL, sp));
    EXPECT(fakecuda_kernel_bytes(1) == 0 && fakecuda_kernel_bytes(0) == 2 * MiB + 8);
    uint64_t got = 0;
    CU_OK(cu.MemcpyDtoH(&got, b.out, sizeof got));
    EXPECT(got == b.expect[3]);

    /* The pre-CUDA-4 API: parameters written one by one into the driver's buffer, where
     * the interposer cannot read them, then launched with no parameters named. */
    bufs_push_out(&b);
    CU_OK(cu.FuncSetBlockShape(b.sum, 1, 1, 1));
    CU_OK(cu.ParamSetv(b.sum, 0, &b.out, sizeof b.out));
    CU_OK(cu.ParamSetv(b.sum, 8, &b.small[0], sizeof b.small[0]));
    CU_OK(cu.ParamSetv(b.sum, 16, &n3, sizeof n3));
    CU_OK(cu.ParamSetSize(b.sum, 24));
    CU_OK(cu.LaunchGridAsync(b.sum, 1, 1, NULL));
    EXPECT(fakecuda_kernel_bytes(1) == 0 && fakecuda_kernel_bytes(0) == 2 * MiB + 8);
    CU_OK(cu.MemcpyDtoH(&got, b.out, sizeof got));
    EXPECT(got == b.expect[0]);
    /* A later write replaces the pointer; the count, as two 4-byte halves. */
    bufs_push_out(&b);
    CU_OK(cu.ParamSetv(b.sum, 8, &b.small[2], sizeof b.small[2]));
    CU_OK(cu.ParamSeti(b.sum, 16, (unsigned)n3));
    CU_OK(cu.ParamSeti(b.sum, 20, 0));
    CU_OK(cu.Launch(b.sum));
    EXPECT(fakecuda_kernel_bytes(1) == 0 && fakecuda_kernel_bytes(0) == 2 * MiB + 8);
    CU_OK(cu.MemcpyDtoH(&got, b.out, sizeof got));
    EXPECT(got == b.expect[2]);
    /* A float parameter between two others (x *= 1 leaves the buffer as it was). */
    bufs_push_out(&b);
    CUfunction scale = fake_kernel("fk_scale_f32");
    CU_OK(cu.FuncSetBlockShape(scale, 32, 1, 1));
    CU_OK(cu.ParamSetv(scale, 0, &b.small[3], sizeof b.small[3]));
    CU_OK(cu.ParamSetf(scale, 8, 1.0f));
    CU_OK(cu.ParamSetv(scale, 16, &n3, sizeof n3));
    CU_OK(cu.ParamSetSize(scale, 24));
    CU_OK(cu.LaunchGrid(scale, 2, 1));
    EXPECT(fakecuda_kernel_bytes(1) == 0 && fakecuda_kernel_bytes(0) == 2 * MiB);

    /* cuLaunchCooperativeKernelMultiDevice: the second entry names the managed buffer. */
    bufs_push_out(&b);
    uint64_t none = 0;
    CUdeviceptr slot1 = b.out + 8;
    void *p0[] = {&slot1, &b.out, &none}, *p1[] = {&b.out, &b.small[2], &n3};
    CUDA_LAUNCH_PARAMS list[2] = {
        {.function = b.sum, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1,
         .blockDimY = 1, .blockDimZ = 1, .kernelParams = p0},
        {.function = b.sum, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1,
         .blockDimY = 1, .blockDimZ = 1, .kernelParams = p1}};
    CU_OK(cu.LaunchCooperativeKernelMultiDevice(list, 2, 0));
    EXPECT(fakecuda_kernel_bytes(1) == 0 && fakecuda_kernel_bytes(0) == 2 * MiB + 16);
    CU_OK(cu.MemcpyDtoH(&got, b.out, sizeof got));
    EXPECT(got == b.expect[2]);

    CUlibrary lib;
    CUkernel sum;
    CU_OK(cu.LibraryLoadData(&lib, "fakecuda", NULL, NULL, 0, NULL, NULL, 0));
    CU_OK(cu.LibraryGetKernel(&sum, lib, "fk_sum_u32"));
    bufs_push_out(&b);
    EXPECT(sum_kernel((CUfunction)sum, b.out, b.small[2], 2 * MiB / 4) == b.expect[2]);
    EXPECT(fakecuda_kernel_bytes(1) == 0);
    bufs_free(&b);
}

SCENARIO void scenario_routing(const char *how)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    EXPECT(strcmp(lib_of((void *)cu.MemAlloc), "libmoevm_preload.so") == 0);
    EXPECT(strcmp(lib_of((void *)cu.LaunchKernel), "libmoevm_preload.so") == 0);
    EXPECT(strcmp(lib_of((void *)cu.DeviceGet), "libcuda.so.1") == 0);     /* not hooked */
    EXPECT(strcmp(lib_of((void *)cu.ModuleLoadData), "libcuda.so.1") == 0);
    void *next = dlsym(RTLD_NEXT, "cuMemAlloc_v2");
    EXPECT(strcmp(lib_of(next), "libmoevm_preload.so") == 0);
    EXPECT(dlsym(RTLD_NEXT, "no_such_symbol_anywhere") == NULL);
    EXPECT(dlsym(lib, "cudnnCreate") == NULL); /* not ours, not there */
    if (strcmp(how, "getproc") == 0) {
        CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
        *(void **)&gpa = dlsym(lib, "cuGetProcAddress_v2");
        void *p = NULL;
        CUdriverProcAddressQueryResult q;
        CU_OK(gpa("cuLaunchKernel", &p, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q));
        Dl_info info;
        EXPECT(dladdr(p, &info) && info.dli_sname &&
               strcmp(info.dli_sname, "cuLaunchKernel_ptsz") == 0);
        CU_OK(gpa("cuGetProcAddress", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
        EXPECT(strcmp(lib_of(p), "libmoevm_preload.so") == 0);
    }
}

/* What the CUDA runtime asks for: the toolkit's libcudart ($CUDART_LIBRARY) initialises
 * against the fake, under the interposer, asking cuGetProcAddress for some 440 entry points
 * at the versions and flags it was built for (its initialisation then stops at what the fake
 * lacks; that does not matter here). Each request is asked again through the interposer: a
 * hooked export must come back as the hook of exactly the export the driver chose
 * (cuMemAlloc at 3020 is cuMemAlloc_v2; flags 2 pick the per-thread variants), any other as
 * the driver's own pointer. */
SCENARIO void scenario_runtime(void)
{
    const char *path = getenv("CUDART_LIBRARY");
    void *rt = path && *path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    int (*device_count)(int *) = NULL;
    if (rt)
        *(void **)&device_count = dlsym(rt, "cudaGetDeviceCount");
    if (!device_count) {
        fprintf(stderr, "test_preload: no CUDA runtime (CUDART_LIBRARY=%s): %s\n",
                path ? path : "", dlerror());
        failures++;
        return;
    }
    const char *sym;
    int version, n = 0;
    unsigned long long flags;
    void *fn, *lib = dlopen("libcuda.so.1", RTLD_NOW);
    size_t first = fakecuda_getproc_request(0, &sym, &version, &flags, &fn);
    (void)device_count(&n);
    size_t last = fakecuda_getproc_request(0, &sym, &version, &flags, &fn);
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
    *(void **)&gpa = dlsym(lib, "cuGetProcAddress_v2");
    EXPECT(last - first >= 300 && strcmp(lib_of((void *)gpa), "libmoevm_preload.so") == 0);
    size_t hooked = 0, per_thread = 0;
    for (size_t i = first; i < last; i++) {
        fakecuda_getproc_request(i, &sym, &version, &flags, &fn);
        void *p = NULL;
        CUdriverProcAddressQueryResult q;
        CUresult r = gpa(sym, &p, version, flags, &q);
        Dl_info info;
        void *want = fn;
        if (fn && dladdr(fn, &info) && info.dli_sname) {
            void *hook = dlsym(RTLD_DEFAULT, info.dli_sname);
            if (strcmp(lib_of(hook), "libmoevm_preload.so") == 0) {
                want = hook;
                hooked++;
                per_thread += flags != 0;
            }
        }
        if (p != want || (r == CUDA_SUCCESS) != (fn != NULL)) {
            fprintf(stderr, "test_preload: %s (version %d, flags %llu): got %s, want %s\n",
                    sym, version, flags, lib_of(p), want ? lib_of(want) : "none");
            failures++;
        }
    }
    /* CUDA 13.0's runtime: 440 requests, 65 answered by hooks, 23 of them per-thread. */
    EXPECT(hooked >= 40 && per_thread >= 10);
    printf("runtime: %zu requests, %zu answered by hooks (%zu per-thread)\n", last - first,
           hooked, per_thread);
}

SCENARIO void scenario_unmanaged(void)
{
    CUdeviceptr big, small;
    EXPECT(cu.MemAlloc(&big, 64 * MiB) == CUDA_ERROR_OUT_OF_MEMORY); /* more than the GPU */
    CU_OK(cu.MemAlloc(&small, 4 * MiB));
    uint32_t v = 7, r = 0;
    CU_OK(cu.MemcpyHtoD(small, &v, 4));
    CU_OK(cu.MemcpyDtoH(&r, small, 4));
    EXPECT(r == 7);
    CU_OK(cu.MemFree(small));
}

SCENARIO void scenario_query(void)
{
    size_t free0, total, dev_total;
    CU_OK(cu.MemGetInfo(&free0, &total));
    CU_OK(cu.DeviceTotalMem(&dev_total, 0));
    EXPECT(total == (32 + 56) * MiB && dev_total == total);
    CU_OK(cu.MemGetInfo(NULL, &total)); /* NULL-safe */
    CUdeviceptr a;
    CU_OK(cu.MemAlloc(&a, 24 * MiB));
    size_t free1;
    CU_OK(cu.MemGetInfo(&free1, NULL));
    /* The budget's 8 MiB left the driver's free memory; the managed space lost 24 MiB. The
     * driver also lost the space's page digests (16 bytes a page, vmm/cuda_digest.c). */
    EXPECT(free0 - free1 >= 24 * MiB && free0 - free1 <= 24 * MiB + 1024);
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (nvml) {
        int (*init)(void), (*by_index)(unsigned, void **), (*info)(void *, unsigned long long *);
        *(void **)&init = dlsym(nvml, "nvmlInit_v2");
        *(void **)&by_index = dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2");
        *(void **)&info = dlsym(nvml, "nvmlDeviceGetMemoryInfo");
        void *h = NULL;
        unsigned long long m[3] = {0}; /* total, free, used */
        EXPECT(init && by_index && info && init() == 0 && by_index(0, &h) == 0 &&
               info(h, m) == 0);
        EXPECT(m[0] == (32 + 56) * MiB && m[1] == 32 * MiB + 56 * MiB + 8 * MiB - 24 * MiB);
    } else {
        fprintf(stderr, "test_preload: no libnvidia-ml.so.1: NVML not checked\n");
        failures++;
    }
    CU_OK(cu.MemFree(a));
}

/* The range of a pointer into [base, base + size), by every address query, and that it is
 * device memory of the current context and device 0. Returns its buffer id. */
static unsigned long long expect_block(CUdeviceptr p, CUdeviceptr base, size_t size)
{
    CUdeviceptr b = 0, b2 = 0;
    size_t n = 0, n2 = 0;
    unsigned type = 0;
    CU_OK(cu.MemGetAddressRange(&b, &n, p));
    EXPECT(b == base && n == size);
    CU_OK(cu.PointerGetAttribute(&b2, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p));
    CU_OK(cu.PointerGetAttribute(&n2, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p));
    EXPECT(b2 == base && n2 == size);
    CU_OK(cu.PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
    EXPECT(type == CU_MEMORYTYPE_DEVICE);
    CUcontext ctx = NULL, cur = NULL;
    int ordinal = -1;
    unsigned long long id = 0, id2 = 0;
    CUpointer_attribute attrs[6] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                    CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                    CU_POINTER_ATTRIBUTE_CONTEXT,
                                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    CU_POINTER_ATTRIBUTE_BUFFER_ID};
    b2 = n2 = 0;
    type = 0;
    void *data[6] = {&type, &b2, &n2, &ctx, &ordinal, &id};
    CU_OK(cu.PointerGetAttributes(6, attrs, data, p));
    CU_OK(cu.CtxGetCurrent(&cur));
    EXPECT(type == CU_MEMORYTYPE_DEVICE && b2 == base && n2 == size && ctx == cur &&
           ordinal == 0 && id != 0);
    CU_OK(cu.PointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
    EXPECT(id2 == id);
    return id;
}

/* Six 2 MiB pages against the 8 MiB budget: pages 4 and 5 stay host-backed whatever a
 * launch makes resident, and the driver describes those as host memory. */
SCENARIO void scenario_ranges(void)
{
    CUdeviceptr native, a, b, out;
    CU_OK(cu.MemAlloc(&native, 4096));
    CU_OK(cu.MemAlloc(&out, 4096));
    CU_OK(cu.MemAlloc(&a, 12 * MiB));
    CU_OK(cu.MemAlloc(&b, 3 * MiB + 100));
    unsigned long long id = expect_block(a, a, 12 * MiB);
    EXPECT(expect_block(a + 11 * MiB + 3, a, 12 * MiB) == id); /* a host-backed page */
    unsigned long long id_b = expect_block(b + 3 * MiB, b, 3 * MiB + 100);
    unsigned long long id_native = expect_block(native + 100, native, 4096); /* the driver's */
    EXPECT(id_b != id && id_native != id && id_native != id_b);
    /* Managed memory is device memory: it has a device pointer (itself) and no host one. */
    CUdeviceptr dp = 0;
    void *hp = &dp;
    CU_OK(cu.PointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, a + 77));
    EXPECT(dp == a + 77);
    EXPECT(cu.PointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, a + 77) ==
           CUDA_ERROR_INVALID_VALUE);
    CUpointer_attribute ha = CU_POINTER_ATTRIBUTE_HOST_POINTER;
    void *hdata[1] = {&hp};
    CU_OK(cu.PointerGetAttributes(1, &ha, hdata, a + 77));
    EXPECT(hp == NULL);
    /* Residency changes what backs the pages, not what the program is told. */
    uint64_t words = 12 * MiB / 4;
    (void)sum_kernel(fake_kernel("fk_sum_u32"), out, a, words); /* makes pages 0-3 resident */
    EXPECT(expect_block(a + MiB, a, 12 * MiB) == id);
    CUdeviceptr base = 0;
    size_t size = 0;
    CU_OK(cu.MemGetAddressRange(&base, NULL, a + 1)); /* either output may be NULL */
    CU_OK(cu.MemGetAddressRange(NULL, &size, a + 1));
    EXPECT(base == a && size == 12 * MiB);
    CU_OK(cu.MemFree(a));
    EXPECT(cu.MemGetAddressRange(&base, &size, a + 1) == CUDA_ERROR_NOT_FOUND);
    /* A new allocation at the same address is a new buffer. */
    CUdeviceptr again;
    CU_OK(cu.MemAlloc(&again, 12 * MiB));
    EXPECT(again != a || expect_block(again, again, 12 * MiB) != id);
    CU_OK(cu.MemFree(again));
    CU_OK(cu.MemFree(b));
    CU_OK(cu.MemFree(out));
    CU_OK(cu.MemFree(native));
}

SCENARIO void scenario_ipc(void)
{
    CUdeviceptr native, managed;
    CUipcMemHandle h;
    CU_OK(cu.MemAlloc(&native, 4096));
    CU_OK(cu.MemAlloc(&managed, 8 * MiB));
    CU_OK(cu.IpcGetMemHandle(&h, native));
    EXPECT(cu.IpcGetMemHandle(&h, managed) == CUDA_ERROR_NOT_SUPPORTED);
    CU_OK(cu.MemFree(native));
    CU_OK(cu.MemFree(managed));
}

SCENARIO void scenario_fork(void)
{
    CUdeviceptr a;
    CU_OK(cu.MemAlloc(&a, 8 * MiB));
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    int (*init)(void) = NULL, (*by_index)(unsigned, void **) = NULL;
    int (*info)(void *, unsigned long long *) = NULL;
    if (nvml) {
        *(void **)&init = dlsym(nvml, "nvmlInit_v2");
        *(void **)&by_index = dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2");
        *(void **)&info = dlsym(nvml, "nvmlDeviceGetMemoryInfo");
    }
    EXPECT(init && by_index && info);
    pid_t pid = fork();
    if (pid == 0) {
        /* A CUDA context does not survive fork, so the child must not call the driver (the
         * parent's worker thread may hold its locks). NVML it may: through our hook, which
         * passes it through unmanaged, the plain device view. */
        void *h = NULL;
        unsigned long long m[3] = {0};
        int ok = init && init() == 0 && by_index(0, &h) == 0 && info(h, m) == 0 &&
                 m[0] == 32 * MiB;
        _exit(ok ? 0 : 3);
    }
    int status = 0;
    EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0);
    CU_OK(cu.MemFree(a));
}

int main(int argc, char **argv)
{
    const char *dot = argc == 2 ? strchr(argv[1], '.') : NULL;
    if (!dot) {
        fprintf(stderr, "usage: test_preload SCENARIO.{link|dlsym|getproc}\n");
        return 2;
    }
    char scenario[32];
    snprintf(scenario, sizeof scenario, "%.*s", (int)(dot - argv[1]), argv[1]);
    const char *how = dot + 1;
    if (strcmp(scenario, "nocuda") == 0) { /* a process that never initialises CUDA */
        printf("ok %s\n", argv[1]);
        return 0;
    }
    bind(how);
    start();
    if (strcmp(scenario, "oversub") == 0)
        scenario_oversub();
    else if (strcmp(scenario, "overbudget") == 0)
        scenario_overbudget();
    else if (strcmp(scenario, "unified") == 0)
        scenario_unified();
    else if (strcmp(scenario, "guarded") == 0)
        scenario_guarded();
    else if (strcmp(scenario, "routing") == 0)
        scenario_routing(how);
    else if (strcmp(scenario, "unmanaged") == 0)
        scenario_unmanaged();
    else if (strcmp(scenario, "query") == 0)
        scenario_query();
    else if (strcmp(scenario, "ipc") == 0)
        scenario_ipc();
    else if (strcmp(scenario, "ranges") == 0)
        scenario_ranges();
    else if (strcmp(scenario, "loop") == 0)
        scenario_loop();
    else if (strcmp(scenario, "prefetch") == 0)
        scenario_prefetch();
    else if (strcmp(scenario, "faults") == 0)
        scenario_faults();
    else if (strcmp(scenario, "experts") == 0)
        scenario_experts();
    else if (strcmp(scenario, "routed") == 0)
        scenario_routed();
    else if (strcmp(scenario, "fork") == 0)
        scenario_fork();
    else if (strcmp(scenario, "graph") == 0)
        scenario_graph();
    else if (strcmp(scenario, "kernels") == 0)
        scenario_kernels();
    else if (strcmp(scenario, "graphcopy") == 0)
        scenario_graphcopy();
    else if (strcmp(scenario, "runtime") == 0)
        scenario_runtime();
    else {
        fprintf(stderr, "test_preload: unknown scenario %s\n", scenario);
        return 2;
    }
    if (failures)
        return 1;
    printf("ok %s\n", argv[1]);
    return 0;
}
