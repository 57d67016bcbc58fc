/*
 * Tests of the fake CUDA driver (tests/fakecuda): the fake is what CI uses in place of the
 * real driver, so its semantics must be right before anything is tested against it.
 *
 * The fake is loaded with dlopen("libcuda.so.1") (LD_LIBRARY_PATH points to it) and reached
 * only through dlsym, as the CUDA backend does. Scenarios that need a different environment
 * (the fake reads it once) run in a re-executed copy of this program: `test_fakecuda NAME`.
 * The fake NVML (libnvidia-ml.so.1, built next to it) is loaded and checked the same way.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cudaTypedefs.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda.h"

static int g_pass, g_fail;
static void *g_lib;

static void check(int ok, const char *what, int line)
{
    if (ok) g_pass++;
    else g_fail++, printf("FAIL line %d: %s\n", line, what);
}
#define CHECK(cond) check((cond) != 0, #cond, __LINE__)

static void check_rc(CUresult got, CUresult want, const char *what, int line)
{
    if (got == want) { g_pass++; return; }
    g_fail++;
    printf("FAIL line %d: %s returned %d, expected %d\n", line, what, (int)got, (int)want);
}
#define RC(call, want) check_rc((call), (want), #call, __LINE__)
#define OK(call) RC(call, CUDA_SUCCESS)

/* ---- the fake's functions, by their exported (versioned) names ---- */

#define CU_FUNCS(X)                                                                            \
    X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)      \
    X(cuDeviceGetAttribute) X(cuDeviceGetPCIBusId) X(cuDeviceTotalMem_v2)                      \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2) X(cuCtxSetCurrent)             \
    X(cuCtxGetCurrent) X(cuMemGetInfo_v2) X(cuGetErrorString) X(cuGetErrorName)                \
    X(cuGetProcAddress_v2) X(cuMemGetAllocationGranularity) X(cuMemAddressReserve)             \
    X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemSetAccess)           \
    X(cuMemUnmap) X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemHostRegister_v2)                     \
    X(cuMemHostAlloc) X(cuMemFreeHost)                                                         \
    X(cuMemHostUnregister) X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuStreamSynchronize)      \
    X(cuMemcpyHtoDAsync_v2) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuEventCreate)             \
    X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize) X(cuEventDestroy_v2)                \
    X(cuCtxSynchronize) X(cuCtxSynchronize_v2) X(cuMemAllocPitch_v2) X(cuMemAllocAsync)        \
    X(cuMemFreeAsync) X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoD_v2) X(cuMemsetD8_v2)              \
    X(cuIpcGetMemHandle) X(cuPointerGetAttribute) X(cuPointerGetAttributes)                    \
    X(cuMemGetAddressRange_v2) X(cuModuleLoadData) X(cuModuleUnload)                           \
    X(cuModuleGetFunction) X(cuFuncGetParamInfo) X(cuLaunchKernel) X(cuLaunchKernelEx)        \
    X(cuStreamBeginCapture_v2) X(cuStreamEndCapture) X(cuStreamIsCapturing) X(cuGraphCreate)   \
    X(cuGraphAddKernelNode_v2) X(cuGraphAddChildGraphNode) X(cuGraphGetNodes)                  \
    X(cuGraphNodeGetType) X(cuGraphKernelNodeGetParams_v2) X(cuGraphChildGraphNodeGetGraph)    \
    X(cuGraphInstantiateWithFlags) X(cuGraphExecUpdate_v2) X(cuGraphExecKernelNodeSetParams_v2) \
    X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuLibraryLoadData)             \
    X(cuLibraryUnload) X(cuLibraryGetKernel) X(cuKernelGetParamInfo) X(cuMemcpy)            \
    X(cuMemcpyAsync) X(cuMemcpyDtoDAsync_v2) X(cuMemcpy2D_v2) X(cuMemcpy2DAsync_v2)           \
    X(cuMemcpyBatchAsync_v2) X(cuMemsetD16_v2) X(cuMemsetD32_v2) X(cuMemsetD8Async)            \
    X(cuMemsetD16Async) X(cuMemsetD32Async) X(cuMemsetD2D8_v2) X(cuMemsetD2D16_v2)             \
    X(cuMemsetD2D32_v2) X(cuMemsetD2D8Async) X(cuMemsetD2D16Async) X(cuMemsetD2D32Async)     \
    X(cuLaunchCooperativeKernel) X(cuGraphAddMemcpyNode) X(cuGraphAddMemsetNode)               \
    X(cuGraphMemcpyNodeGetParams) X(cuGraphMemsetNodeGetParams) X(cuGraphExecNodeSetParams)    \
    X(cuGraphExecMemcpyNodeSetParams) X(cuGraphExecMemsetNodeSetParams) X(cuStreamWaitEvent)  \
    X(cuGraphAddDependencies_v2)
#define FK_FUNCS(X)                                                                            \
    X(fakecuda_calls) X(fakecuda_live_handles) X(fakecuda_mapped_bytes)                        \
    X(fakecuda_live_reservations) X(fakecuda_reset_counters) X(fakecuda_set_fail)              \
    X(fakecuda_stream_hold) X(fakecuda_kernel_bytes) X(fakecuda_getproc_request)               \
    X(fakecuda_set_cc_major)
/* Exports that cuda.h does not declare under these names (the per-thread variants exist only
 * in CUDA_API_PER_THREAD_DEFAULT_STREAM builds; cuGetProcAddress means _v2), with the type
 * of their twin. */
#define CU_TWINS(X)                                                                            \
    X(cuGetProcAddress, PFN_cuGetProcAddress_v11030)                                           \
    X(cuLaunchKernel_ptsz, __typeof__(cuLaunchKernel) *)                                       \
    X(cuLaunchKernelEx_ptsz, __typeof__(cuLaunchKernelEx) *)                                   \
    X(cuLaunchCooperativeKernel_ptsz, __typeof__(cuLaunchCooperativeKernel) *)                 \
    X(cuMemcpyHtoDAsync_v2_ptsz, __typeof__(cuMemcpyHtoDAsync_v2) *)                           \
    X(cuMemcpyHtoD_v2_ptds, __typeof__(cuMemcpyHtoD_v2) *)                                     \
    X(cuMemcpyDtoH_v2_ptds, __typeof__(cuMemcpyDtoH_v2) *)                                     \
    X(cuMemcpyDtoHAsync_v2_ptsz, __typeof__(cuMemcpyDtoHAsync_v2) *)                           \
    X(cuMemcpyDtoD_v2_ptds, __typeof__(cuMemcpyDtoD_v2) *)                                     \
    X(cuMemsetD8_v2_ptds, __typeof__(cuMemsetD8_v2) *)                                         \
    X(cuMemsetD32Async_ptsz, __typeof__(cuMemsetD32Async) *)                                   \
    X(cuMemcpy2D_v2_ptds, __typeof__(cuMemcpy2D_v2) *)                                         \
    X(cuMemcpyBatchAsync_v2_ptsz, __typeof__(cuMemcpyBatchAsync_v2) *)                         \
    X(cuMemAllocAsync_ptsz, __typeof__(cuMemAllocAsync) *)                                     \
    X(cuMemFreeAsync_ptsz, __typeof__(cuMemFreeAsync) *)                                       \
    X(cuStreamSynchronize_ptsz, __typeof__(cuStreamSynchronize) *)                             \
    X(cuEventRecord_ptsz, __typeof__(cuEventRecord) *)                                         \
    X(cuStreamWaitEvent_ptsz, __typeof__(cuStreamWaitEvent) *)                                 \
    DEPRECATED(X)
/* The deprecated launch forms, typed by hand: cuda.h's deprecation would make naming their
 * declarations a warning. */
#define DEPRECATED(X)                                                                          \
    X(cuFuncSetBlockShape, CUresult (*)(CUfunction, int, int, int))                           \
    X(cuParamSetSize, CUresult (*)(CUfunction, unsigned))                                      \
    X(cuParamSeti, CUresult (*)(CUfunction, int, unsigned))                                    \
    X(cuParamSetf, CUresult (*)(CUfunction, int, float))                                       \
    X(cuParamSetv, CUresult (*)(CUfunction, int, void *, unsigned))                            \
    X(cuLaunch, CUresult (*)(CUfunction))                                                      \
    X(cuLaunchGrid, CUresult (*)(CUfunction, int, int))                                        \
    X(cuLaunchGridAsync, CUresult (*)(CUfunction, int, int, CUstream))                         \
    X(cuLaunchCooperativeKernelMultiDevice, CUresult (*)(CUDA_LAUNCH_PARAMS *, unsigned, unsigned))

#define DECLARE(name) static __typeof__(name) *p_##name;
#define DECLARE_TWIN(name, type) static __typeof__(type) p_##name;
CU_FUNCS(DECLARE)
FK_FUNCS(DECLARE)
CU_TWINS(DECLARE_TWIN)

static void load(void)
{
    g_lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!g_lib) {
        printf("cannot load libcuda.so.1: %s\n0 passed, 1 failed\n", dlerror());
        exit(1);
    }
    int missing = 0;
#define LOAD(name)                                                                             \
    if (!(p_##name = (__typeof__(p_##name))dlsym(g_lib, #name)))                               \
        missing++, printf("missing symbol %s\n", #name);
#define LOAD_TWIN(name, type) /* not LOAD(name): that would expand cuGetProcAddress */       \
    if (!(p_##name = (type)dlsym(g_lib, #name))) missing++, printf("missing symbol %s\n", #name);
    CU_FUNCS(LOAD)
    FK_FUNCS(LOAD)
    CU_TWINS(LOAD_TWIN)
    if (missing || !p_fakecuda_calls) {
        printf("0 passed, 1 failed\n");
        exit(1);
    }
}

/* ---- helpers ---- */

/* Permissions of the host mapping that contains va, as /proc/self/maps shows them. */
static const char *perms(CUdeviceptr va)
{
    static char p[8];
    char line[512];
    FILE *f = fopen("/proc/self/maps", "r");
    strcpy(p, "none");
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char q[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, q) == 3 && va >= lo && va < hi) {
            strcpy(p, q);
            break;
        }
    }
    if (f) fclose(f);
    return p;
}

static unsigned char *host(CUdeviceptr va) { return (unsigned char *)(uintptr_t)va; }
static uint32_t *u32(CUdeviceptr va) { return (uint32_t *)(uintptr_t)va; }
/* What cuMemAlloc and cuMemCreate memory holds before anything writes it (fakecuda.c). */
#define STALE 0xffffffffu

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static CUmemAllocationProp prop_at(CUmemLocationType type, int id)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = type;
    p.location.id = id;
    return p;
}

static CUmemAccessDesc access_desc(CUmemLocationType type, int id, CUmemAccess_flags flags)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = type;
    d.location.id = id;
    d.flags = flags;
    return d;
}

static const size_t MiB = 1 << 20;
static size_t G;             /* granularity */
static size_t TOTAL;         /* device memory */
static CUcontext g_ctx;

static size_t free_mem(void)
{
    size_t f = 0, t = 0;
    OK(p_cuMemGetInfo_v2(&f, &t));
    return f;
}

/* ---- the scenarios of the default configuration ---- */

static void t_before_init(void)
{
    int n, v;
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp prop = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    RC(p_cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    RC(p_cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_ERROR_NOT_INITIALIZED);
    RC(p_cuCtxSetCurrent(NULL), CUDA_ERROR_NOT_INITIALIZED);
    CUmodule m;
    RC(p_cuModuleLoadData(&m, "image"), CUDA_ERROR_NOT_INITIALIZED);
    RC(p_cuLaunchKernel_ptsz(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
       CUDA_ERROR_NOT_INITIALIZED);
    OK(p_cuDriverGetVersion(&v)); /* allowed before cuInit, as in the real driver */
    CHECK(v == 13000);
    RC(p_cuInit(1), CUDA_ERROR_INVALID_VALUE);
    OK(p_cuInit(0));
}

static void t_device(void)
{
    int n = -1, v = -1;
    CUdevice d;
    char buf[64];
    OK(p_cuDeviceGetCount(&n));
    CHECK(n == 1);
    OK(p_cuDeviceGet(&d, 0));
    CHECK(d == 0);
    RC(p_cuDeviceGet(&d, 1), CUDA_ERROR_INVALID_DEVICE);
    OK(p_cuDeviceGetName(buf, sizeof buf, 0));
    CHECK(strcmp(buf, "fakecuda device 0") == 0);
    OK(p_cuDeviceGetPCIBusId(buf, sizeof buf, 0));
    CHECK(strcmp(buf, "0000:fe:00.0") == 0);
    RC(p_cuDeviceGetName(buf, sizeof buf, 3), CUDA_ERROR_INVALID_DEVICE);
    struct { CUdevice_attribute a; int want; } attrs[] = {
        {CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
        {CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0},
        {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
        {CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0},
        {CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0xfe},
        {CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0},
        {CU_DEVICE_ATTRIBUTE_MAX_PITCH, 0}, /* unknown to the fake: 0 and success */
    };
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        OK(p_cuDeviceGetAttribute(&v, attrs[i].a, 0));
        if (v != attrs[i].want) printf("  attribute %d = %d\n", (int)attrs[i].a, v);
        CHECK(v == attrs[i].want);
    }
    OK(p_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    CHECK(v > 0);
    OK(p_cuDeviceTotalMem_v2(&TOTAL, 0));
    CHECK(TOTAL == 1024 * MiB);
}

static void t_context(void)
{
    CUstream s;
    CUcontext cur = (CUcontext)1;
    size_t f, t;
    OK(p_cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
    RC(p_cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
    RC(p_cuMemGetInfo_v2(&f, &t), CUDA_ERROR_INVALID_CONTEXT);
    RC(p_cuCtxSetCurrent((CUcontext)&f), CUDA_ERROR_INVALID_CONTEXT);
    CUmodule m;
    RC(p_cuModuleLoadData(&m, "image"), CUDA_ERROR_INVALID_CONTEXT);
    RC(p_cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    OK(p_cuDevicePrimaryCtxRetain(&g_ctx, 0));
    OK(p_cuCtxSetCurrent(g_ctx));
    OK(p_cuCtxGetCurrent(&cur));
    CHECK(cur == g_ctx);
    OK(p_cuMemGetInfo_v2(&f, &t));
    CHECK(f == TOTAL && t == TOTAL);
}

static void t_vmm(void)
{
    CUmemAllocationProp prop = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemAccessDesc rw = access_desc(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUmemAccessDesc ro = access_desc(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    CUmemAccessDesc hn = access_desc(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUdeviceptr base, other;
    CUmemGenericAllocationHandle h1, h2;
    CUstream s;

    OK(p_cuMemGetAllocationGranularity(&G, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(G == 2 * MiB);
    RC(p_cuMemAddressReserve(&other, G + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    OK(p_cuMemAddressReserve(&other, 2 * G, 16 * G, 0, 0));
    CHECK(other % (16 * G) == 0);
    OK(p_cuMemAddressReserve(&base, 8 * G, 0, 0, 0));
    CHECK(base % G == 0);
    CHECK(p_fakecuda_live_reservations() == 2);
    OK(p_cuMemAddressFree(other, 2 * G));
    CHECK(strcmp(perms(base), "---p") == 0);

    OK(p_cuMemCreate(&h1, 2 * G, &prop, 0));
    OK(p_cuMemCreate(&h2, G, &prop, 0));
    RC(p_cuMemCreate(&h2, G + 4096, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(p_fakecuda_live_handles() == 2);
    CHECK(free_mem() == TOTAL - 3 * G);

    /* Mapping rules. */
    OK(p_cuMemMap(base, 2 * G, 0, h1, 0));
    CHECK(p_fakecuda_mapped_bytes() == 2 * G);
    RC(p_cuMemMap(base + G, G, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);        /* over a mapping */
    RC(p_cuMemMap(base + 2 * G, G, G, h1, 0), CUDA_ERROR_INVALID_VALUE);    /* offset != 0 */
    RC(p_cuMemMap(base + 2 * G + 4096, G, 0, h2, 0), CUDA_ERROR_INVALID_VALUE); /* misaligned */
    RC(p_cuMemMap(base + 2 * G, 2 * G, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);    /* > handle */
    RC(p_cuMemMap(base + 8 * G, G, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);    /* not reserved */
    RC(p_cuMemMap(base + 2 * G, G, 0, 12345, 0), CUDA_ERROR_INVALID_VALUE); /* bad handle */
    OK(p_cuMemMap(base + 2 * G, G, 0, h2, 0));
    CHECK(p_fakecuda_mapped_bytes() == 3 * G);
    CHECK(strcmp(perms(base), "---s") == 0); /* mapped, but not accessible yet */

    /* Access: nothing until cuMemSetAccess; one call may span several mappings. */
    unsigned char buf[64], back[64];
    for (int i = 0; i < 64; i++) buf[i] = (unsigned char)(i * 7 + 1);
    RC(p_cuMemcpyHtoD_v2(base, buf, 64), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemSetAccess(base, 4 * G, &rw, 1), CUDA_ERROR_INVALID_VALUE); /* 4th page unmapped */
    RC(p_cuMemSetAccess(base, 3 * G, &hn, 1), CUDA_ERROR_INVALID_VALUE); /* host on device mem */
    RC(p_cuMemSetAccess(base + 4096, G, &rw, 1), CUDA_ERROR_INVALID_VALUE);
    OK(p_cuMemSetAccess(base, 3 * G, &rw, 1));
    CHECK(strcmp(perms(base), "rw-s") == 0);
    CHECK(strcmp(perms(base + 2 * G), "rw-s") == 0);

    /* Through the address, and through the copy functions. */
    memset(host(base), 0x5a, 3 * G);
    OK(p_cuMemcpyDtoH_v2(back, base + 3 * G - 64, 64));
    CHECK(back[0] == 0x5a && back[63] == 0x5a);
    OK(p_cuMemcpyHtoD_v2(base + 2 * G - 32, buf, 64)); /* across the two mappings */
    CHECK(memcmp(host(base + 2 * G - 32), buf, 64) == 0);
    OK(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(p_cuMemcpyHtoDAsync_v2(base + G, buf, 64, s));
    OK(p_cuStreamSynchronize(s));
    CHECK(memcmp(host(base + G), buf, 64) == 0);
    OK(p_cuMemcpyHtoDAsync_v2(base, buf, 0, s)); /* empty copies succeed */
    RC(p_cuMemcpyHtoDAsync_v2(base, buf, 64, (CUstream)&buf), CUDA_ERROR_INVALID_HANDLE);
    RC(p_cuMemcpyHtoD_v2(base + 3 * G, buf, 64), CUDA_ERROR_INVALID_VALUE);      /* unmapped */
    RC(p_cuMemcpyHtoD_v2(base + 3 * G - 32, buf, 64), CUDA_ERROR_INVALID_VALUE); /* straddles */
    RC(p_cuMemcpyDtoH_v2(back, base + 8 * G, 64), CUDA_ERROR_INVALID_VALUE);     /* nowhere */

    /* Read-only: the page is r--, copies into it fail, copies out work. A sub-range of a
     * mapping can change access; unmapping still needs the whole mapping. */
    OK(p_cuMemSetAccess(base + G, G, &ro, 1));
    CHECK(strcmp(perms(base), "rw-s") == 0);
    CHECK(strcmp(perms(base + G), "r--s") == 0);
    RC(p_cuMemcpyHtoDAsync_v2(base + G, buf, 64, s), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemcpyHtoD_v2(base + G - 32, buf, 64), CUDA_ERROR_INVALID_VALUE); /* half read-only */
    OK(p_cuMemcpyDtoH_v2(back, base + G, 64));
    CHECK(memcmp(back, buf, 64) == 0);
    RC(p_cuMemUnmap(base, G), CUDA_ERROR_INVALID_VALUE);     /* half of h1's mapping */
    RC(p_cuMemUnmap(base + G, 2 * G), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemAddressFree(base, 8 * G), CUDA_ERROR_INVALID_VALUE); /* still mapped */

    /* Release while mapped: the memory lives on until unmapped. */
    OK(p_cuMemRelease(h1));
    RC(p_cuMemRelease(h1), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemMap(base + 4 * G, G, 0, h1, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(p_fakecuda_live_handles() == 2);
    CHECK(host(base)[100] == 0x5a);
    CHECK(free_mem() == TOTAL - 3 * G);
    OK(p_cuMemUnmap(base, 2 * G));
    CHECK(p_fakecuda_live_handles() == 1);
    CHECK(free_mem() == TOTAL - G);
    CHECK(strcmp(perms(base), "---p") == 0);
    RC(p_cuMemUnmap(base, 2 * G), CUDA_ERROR_INVALID_VALUE); /* nothing mapped there */

    /* A new mapping starts inaccessible again. */
    OK(p_cuMemUnmap(base + 2 * G, G));
    OK(p_cuMemMap(base, G, 0, h2, 0));
    CHECK(strcmp(perms(base), "---s") == 0);
    OK(p_cuMemSetAccess(base, G, &rw, 1));
    CHECK(host(base)[100] == 0x5a); /* same physical memory as before */
    OK(p_cuMemUnmap(base, G));
    OK(p_cuMemRelease(h2));
    RC(p_cuMemAddressFree(base, 4 * G), CUDA_ERROR_INVALID_VALUE); /* wrong size */
    OK(p_cuMemAddressFree(base, 8 * G));
    OK(p_cuStreamDestroy_v2(s));
    CHECK(p_fakecuda_live_handles() == 0);
    CHECK(p_fakecuda_live_reservations() == 0);
    CHECK(p_fakecuda_mapped_bytes() == 0);
    CHECK(free_mem() == TOTAL);
}

static void t_host_numa(void)
{
    CUmemAllocationProp hp = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
    CUmemAccessDesc acc[2] = {
        access_desc(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
        access_desc(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
    };
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    size_t g = 0;
    OK(p_cuMemGetAllocationGranularity(&g, &hp, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    CHECK(g == G);
    OK(p_cuMemCreate(&h, G, &hp, 0));
    CHECK(free_mem() == TOTAL); /* host memory is not device memory */
    OK(p_cuMemAddressReserve(&va, G, 0, 0, 0));
    OK(p_cuMemMap(va, G, 0, h, 0));
    OK(p_cuMemSetAccess(va, G, acc, 2));
    host(va)[G - 1] = 3;
    CHECK(host(va)[G - 1] == 3);
    /* Host memory on no device, as the real driver describes HOST_NUMA-backed VMM memory
     * (open-mpi/ompi#12751); the id is still the allocation's. */
    unsigned type = 0;
    unsigned long long id = 0;
    int ord = 7;
    OK(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 5));
    OK(p_cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, va + 5));
    CHECK(type == CU_MEMORYTYPE_HOST && id == h);
    RC(p_cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va),
       CUDA_ERROR_INVALID_VALUE);
    OK(p_cuMemUnmap(va, G));
    OK(p_cuMemAddressFree(va, G));
    OK(p_cuMemRelease(h));

    CUmemAllocationProp bad = prop_at(CU_MEM_LOCATION_TYPE_HOST, 0);
    RC(p_cuMemCreate(&h, G, &bad, 0), CUDA_ERROR_INVALID_VALUE);
    bad = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0);
    RC(p_cuMemCreate(&h, G, &bad, 0), CUDA_ERROR_INVALID_VALUE);
    bad = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA, 4095);
    RC(p_cuMemCreate(&h, G, &bad, 0), CUDA_ERROR_INVALID_VALUE);
    bad = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 1);
    RC(p_cuMemCreate(&h, G, &bad, 0), CUDA_ERROR_INVALID_DEVICE);
    CHECK(p_fakecuda_live_handles() == 0);
}

static void t_memory_limits(void)
{
    CUmemAllocationProp prop = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemGenericAllocationHandle all, h;
    CUdeviceptr d;
    unsigned char buf[16] = "0123456789abcde", back[16];
    RC(p_cuMemCreate(&h, TOTAL + G, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    OK(p_cuMemCreate(&all, TOTAL - G, &prop, 0));
    OK(p_cuMemCreate(&h, G, &prop, 0));
    CHECK(free_mem() == 0);
    CUmemGenericAllocationHandle h3;
    RC(p_cuMemCreate(&h3, G, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    RC(p_cuMemAlloc_v2(&d, 1), CUDA_ERROR_OUT_OF_MEMORY);
    OK(p_cuMemRelease(all));
    OK(p_cuMemRelease(h));

    /* Plain allocations count against the device too, and are copy targets. */
    OK(p_cuMemAlloc_v2(&d, MiB));
    CHECK(free_mem() == TOTAL - MiB);
    OK(p_cuMemcpyHtoD_v2(d + 100, buf, 16));
    OK(p_cuMemcpyDtoH_v2(back, d + 100, 16));
    CHECK(memcmp(buf, back, 16) == 0);
    RC(p_cuMemcpyHtoD_v2(d + MiB - 8, buf, 16), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemFree_v2(d + 100), CUDA_ERROR_INVALID_VALUE);
    OK(p_cuMemFree_v2(d));
    RC(p_cuMemFree_v2(d), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemAlloc_v2(&d, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(free_mem() == TOTAL);
}

static void t_host_register(void)
{
    char *buf = malloc(4 * 4096);
    RC(p_cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    OK(p_cuMemHostRegister_v2(buf, 4 * 4096, CU_MEMHOSTREGISTER_PORTABLE));
    RC(p_cuMemHostRegister_v2(buf + 4096, 4096, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    RC(p_cuMemHostUnregister(buf + 4096), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    OK(p_cuMemHostUnregister(buf));
    RC(p_cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    free(buf);

    /* Pinned memory the driver allocates: registered, writable, freed once. */
    void *pinned = NULL;
    OK(p_cuMemHostAlloc(&pinned, 3 * 4096, CU_MEMHOSTALLOC_PORTABLE));
    CHECK(pinned != NULL && (uintptr_t)pinned % 4096 == 0);
    memset(pinned, 0x5a, 3 * 4096);
    RC(p_cuMemHostRegister_v2((char *)pinned + 4096, 4096, 0),
       CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    RC(p_cuMemHostAlloc(&pinned, 0, 0), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemHostAlloc(&pinned, 4096, 0x80), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemFreeHost((char *)pinned + 4096), CUDA_ERROR_INVALID_VALUE);
    OK(p_cuMemFreeHost(pinned));
    RC(p_cuMemFreeHost(pinned), CUDA_ERROR_INVALID_VALUE);
}

static void t_fault_injection(void)
{
    CUmemAllocationProp prop = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemAccessDesc rw = access_desc(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUmemGenericAllocationHandle h[4];
    CUdeviceptr va, d;
    CUstream s[3];

    p_fakecuda_reset_counters();
    CHECK(p_fakecuda_calls("cuMemCreate") == 0);
    CHECK(p_fakecuda_set_fail("cuMemCreate:3") == 0);
    OK(p_cuMemCreate(&h[0], G, &prop, 0));
    OK(p_cuMemCreate(&h[1], G, &prop, 0));
    RC(p_cuMemCreate(&h[2], G, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    OK(p_cuMemCreate(&h[3], G, &prop, 0));
    CHECK(p_fakecuda_live_handles() == 3); /* the failed call had no effect */
    CHECK(p_fakecuda_calls("cuMemCreate") == 4);
    CHECK(free_mem() == TOTAL - 3 * G);

    CHECK(p_fakecuda_set_fail("cuMemMap:1:CUDA_ERROR_UNKNOWN,cuMemSetAccess:2:201") == 0);
    OK(p_cuMemAddressReserve(&va, 2 * G, 0, 0, 0));
    RC(p_cuMemMap(va, G, 0, h[0], 0), CUDA_ERROR_UNKNOWN);
    CHECK(p_fakecuda_mapped_bytes() == 0);
    OK(p_cuMemMap(va, G, 0, h[0], 0));
    OK(p_cuMemSetAccess(va, G, &rw, 1));
    RC(p_cuMemSetAccess(va, G, &rw, 1), CUDA_ERROR_INVALID_CONTEXT); /* numeric 201 */
    OK(p_cuMemUnmap(va, G));
    OK(p_cuMemAddressFree(va, 2 * G));

    CHECK(p_fakecuda_set_fail("cuStreamCreate:2+") == 0); /* the 2nd and all later */
    OK(p_cuStreamCreate(&s[0], 0));
    RC(p_cuStreamCreate(&s[1], 0), CUDA_ERROR_UNKNOWN);
    RC(p_cuStreamCreate(&s[2], 0), CUDA_ERROR_UNKNOWN);
    CHECK(p_fakecuda_set_fail("cuMemAlloc_v2:1+") == 0); /* versioned names are accepted */
    RC(p_cuMemAlloc_v2(&d, MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(p_fakecuda_calls("cuMemAlloc") == 1 && p_fakecuda_calls("cuMemAlloc_v2") == 1);

    CHECK(p_fakecuda_set_fail("cuNoSuchThing:1") == -1);
    CHECK(p_fakecuda_set_fail("cuMemCreate:0") == -1);
    CHECK(p_fakecuda_set_fail("cuMemCreate") == -1);
    CHECK(p_fakecuda_set_fail("cuMemCreate:1:CUDA_ERROR_NOPE") == -1);
    RC(p_cuMemAlloc_v2(&d, MiB), CUDA_ERROR_OUT_OF_MEMORY); /* a bad spec changed nothing */
    CHECK(p_fakecuda_set_fail(NULL) == 0);
    OK(p_cuMemAlloc_v2(&d, MiB));
    OK(p_cuMemFree_v2(d));
    OK(p_cuStreamCreate(&s[1], 0));
    OK(p_cuStreamDestroy_v2(s[0]));
    OK(p_cuStreamDestroy_v2(s[1]));
    for (int i = 0; i < 4; i++)
        if (i != 2) OK(p_cuMemRelease(h[i]));
    CHECK(p_fakecuda_calls("cuNoSuchThing") == 0);
    p_fakecuda_reset_counters();
    CHECK(p_fakecuda_calls("cuMemCreate") == 0);
}

struct waiter {
    CUevent ev;
    CUstream stream;
    int whole_ctx; /* cuCtxSynchronize */
    CUresult rc;
    int done;
};

static void *wait_thread(void *arg)
{
    struct waiter *w = arg;
    p_cuCtxSetCurrent(g_ctx);
    w->rc = w->whole_ctx ? p_cuCtxSynchronize()
            : w->ev      ? p_cuEventSynchronize(w->ev)
                         : p_cuStreamSynchronize(w->stream);
    __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Starts a thread that waits for the event (or the stream, or the whole context), checks it
 * is still waiting while held, releases the stream and checks the wait ends. */
static void check_blocks_until_release(struct waiter w, CUstream held, int line)
{
    pthread_t t;
    w.rc = CUDA_ERROR_UNKNOWN;
    pthread_create(&t, NULL, wait_thread, &w);
    sleep_ms(50);
    check(!__atomic_load_n(&w.done, __ATOMIC_SEQ_CST), "waiter blocks while held", line);
    p_fakecuda_stream_hold(held, 0);
    pthread_join(t, NULL);
    check(w.done && w.rc == CUDA_SUCCESS, "waiter returns once released", line);
}

/* cuStreamWaitEvent: stream s's later work waits for what the event waits for. A wait on a
 * completed or never-recorded event holds nothing; one on a pending event holds s's events
 * and synchronisations until the held stream is released, and not after. */
static void t_stream_waits(CUstream s)
{
    CUstream lane, other;
    CUevent done, after, unused;
    OK(p_cuStreamCreate(&lane, CU_STREAM_NON_BLOCKING));
    OK(p_cuStreamCreate(&other, 0));
    OK(p_cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
    OK(p_cuEventCreate(&after, CU_EVENT_DISABLE_TIMING));
    OK(p_cuEventCreate(&unused, 0));
    OK(p_cuStreamWaitEvent(s, unused, 0)); /* never recorded: no wait */
    OK(p_cuEventRecord(after, s));
    OK(p_cuEventQuery(after));
    RC(p_cuStreamWaitEvent(s, done, 4), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuStreamWaitEvent(s, NULL, 0), CUDA_ERROR_INVALID_HANDLE);

    p_fakecuda_stream_hold(lane, 1);
    OK(p_cuEventRecord(done, lane));
    OK(p_cuStreamWaitEvent(s, done, 0));
    OK(p_cuEventRecord(after, s));
    RC(p_cuEventQuery(after), CUDA_ERROR_NOT_READY);
    OK(p_cuEventRecord(unused, other)); /* a stream that did not wait runs on */
    OK(p_cuEventQuery(unused));
    check_blocks_until_release((struct waiter){.stream = s}, lane, __LINE__);
    OK(p_cuEventQuery(after));
    OK(p_cuEventRecord(after, s)); /* the wait is over: no new hold */
    OK(p_cuEventQuery(after));

    /* The stream waited on goes away while held: the waiter is released with it. */
    p_fakecuda_stream_hold(lane, 1);
    OK(p_cuEventRecord(done, lane));
    OK(p_cuStreamWaitEvent(other, done, 0));
    OK(p_cuStreamDestroy_v2(lane));
    OK(p_cuEventRecord(after, other));
    RC(p_cuEventQuery(after), CUDA_ERROR_NOT_READY);
    p_fakecuda_stream_hold(lane, 0);
    OK(p_cuEventQuery(after));
    OK(p_cuStreamSynchronize(other));
    OK(p_cuStreamWaitEvent_ptsz(NULL, done, 0));
    OK(p_cuEventDestroy_v2(done));
    OK(p_cuEventDestroy_v2(after));
    OK(p_cuEventDestroy_v2(unused));
    OK(p_cuStreamDestroy_v2(other));
}

static void t_streams_events(void)
{
    CUstream s, s2;
    CUevent before, e, e3;
    OK(p_cuStreamCreate(&s, 0));
    RC(p_cuStreamCreate(&s2, 7), CUDA_ERROR_INVALID_VALUE);
    OK(p_cuEventCreate(&before, CU_EVENT_DISABLE_TIMING));
    OK(p_cuEventCreate(&e, 0));
    OK(p_cuEventQuery(e)); /* never recorded: complete */
    OK(p_cuEventRecord(before, s));
    OK(p_cuEventQuery(before));

    p_fakecuda_stream_hold(s, 1);
    OK(p_cuEventRecord(e, s));
    RC(p_cuEventQuery(e), CUDA_ERROR_NOT_READY);
    RC(p_cuEventQuery(e), CUDA_ERROR_NOT_READY);
    OK(p_cuEventQuery(before)); /* recorded before the hold */
    check_blocks_until_release((struct waiter){.ev = e}, s, __LINE__);
    OK(p_cuEventQuery(e));
    p_fakecuda_stream_hold(s, 1);
    check_blocks_until_release((struct waiter){.stream = s}, s, __LINE__);
    p_fakecuda_stream_hold(s, 1);
    check_blocks_until_release((struct waiter){.whole_ctx = 1}, s, __LINE__);

    /* The default stream, named NULL or CU_STREAM_LEGACY. */
    p_fakecuda_stream_hold(NULL, 1);
    OK(p_cuEventRecord(e, CU_STREAM_LEGACY));
    RC(p_cuEventQuery(e), CUDA_ERROR_NOT_READY);
    OK(p_cuEventRecord(before, s)); /* other streams are unaffected */
    OK(p_cuEventQuery(before));
    p_fakecuda_stream_hold(NULL, 0);
    OK(p_cuEventQuery(e));

    /* A held stream that is destroyed: its handle is dead, its work still pending. */
    OK(p_cuStreamCreate(&s2, 0));
    OK(p_cuEventCreate(&e3, 0));
    p_fakecuda_stream_hold(s2, 1);
    OK(p_cuEventRecord(e3, s2));
    OK(p_cuStreamDestroy_v2(s2));
    RC(p_cuEventRecord(e3, s2), CUDA_ERROR_INVALID_HANDLE);
    RC(p_cuStreamDestroy_v2(s2), CUDA_ERROR_INVALID_HANDLE);
    RC(p_cuEventQuery(e3), CUDA_ERROR_NOT_READY);
    p_fakecuda_stream_hold(s2, 0);
    OK(p_cuEventQuery(e3));

    t_stream_waits(s);

    RC(p_cuStreamDestroy_v2(NULL), CUDA_ERROR_INVALID_HANDLE);
    OK(p_cuEventDestroy_v2(e3));
    RC(p_cuEventQuery(e3), CUDA_ERROR_INVALID_HANDLE);
    RC(p_cuEventDestroy_v2(e3), CUDA_ERROR_INVALID_HANDLE);
    OK(p_cuEventDestroy_v2(e));
    OK(p_cuEventDestroy_v2(before));
    OK(p_cuStreamDestroy_v2(s));
}

/* ---- memory functions beyond the basics ---- */

static void t_memory_extras(void)
{
    CUdeviceptr d, e, va;
    size_t pitch = 0;
    CUstream s;
    unsigned char buf[256], back[256];
    for (int i = 0; i < 256; i++) buf[i] = (unsigned char)(i ^ 0xa5);

    /* Pitch: rows padded to a multiple of 512 bytes; 4-, 8- or 16-byte elements only. */
    struct { size_t width, height; unsigned elem; size_t pitch; } pitches[] = {
        {100, 10, 4, 512}, {512, 3, 8, 512}, {513, 2, 16, 1024}, {1, 1, 4, 512},
    };
    for (size_t i = 0; i < sizeof pitches / sizeof pitches[0]; i++) {
        OK(p_cuMemAllocPitch_v2(&d, &pitch, pitches[i].width, pitches[i].height,
                                pitches[i].elem));
        CHECK(pitch == pitches[i].pitch);
        CHECK(free_mem() == TOTAL - pitch * pitches[i].height);
        OK(p_cuMemFree_v2(d));
    }
    RC(p_cuMemAllocPitch_v2(&d, &pitch, 100, 10, 2), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemAllocPitch_v2(&d, &pitch, 100, 10, 32), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemAllocPitch_v2(&d, &pitch, 0, 10, 4), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemAllocPitch_v2(&d, NULL, 100, 10, 4), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemAllocPitch_v2(&d, &pitch, TOTAL, 2, 4), CUDA_ERROR_OUT_OF_MEMORY);

    /* Stream-ordered allocation: immediate here, but the stream must exist. */
    OK(p_cuStreamCreate(&s, 0));
    OK(p_cuMemAllocAsync(&d, MiB, s));
    OK(p_cuMemAllocAsync_ptsz(&e, MiB, NULL));
    CHECK(free_mem() == TOTAL - 2 * MiB);
    RC(p_cuMemAllocAsync(&va, MiB, (CUstream)buf), CUDA_ERROR_INVALID_HANDLE);
    RC(p_cuMemAllocAsync(&va, 0, s), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemFreeAsync(d, (CUstream)buf), CUDA_ERROR_INVALID_HANDLE);
    /* Of two blocks, one is not directly followed by the other: past its end is nothing. */
    CUdeviceptr top = e + MiB == d ? d : e;

    /* memset, device-to-device and device-to-host copies. */
    OK(p_cuMemsetD8_v2(d, 0x3c, MiB));
    CHECK(host(d)[0] == 0x3c && host(d)[MiB - 1] == 0x3c);
    OK(p_cuMemsetD8_v2_ptds(d + 10, 0x00, 5));
    CHECK(host(d)[9] == 0x3c && host(d)[10] == 0 && host(d)[14] == 0 && host(d)[15] == 0x3c);
    OK(p_cuMemsetD8_v2(top + MiB - 4, 0x3c, 4));
    RC(p_cuMemsetD8_v2(top + MiB - 4, 1, 8), CUDA_ERROR_INVALID_VALUE); /* past the end */
    CHECK(host(top)[MiB - 4] == 0x3c);
    OK(p_cuMemcpyHtoD_v2(d + 1000, buf, 256));
    OK(p_cuMemcpyDtoD_v2(e + 7, d + 1000, 256));
    CHECK(memcmp(host(e + 7), buf, 256) == 0);
    OK(p_cuMemcpyDtoD_v2_ptds(d + 1100, d + 1000, 256)); /* overlapping: as memmove */
    CHECK(memcmp(host(d + 1100), buf, 256) == 0);
    RC(p_cuMemcpyDtoD_v2(top + MiB - 100, d, 256), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemcpyDtoD_v2((CUdeviceptr)(uintptr_t)back, d, 256), CUDA_ERROR_INVALID_VALUE);
    memset(back, 0, sizeof back);
    OK(p_cuMemcpyDtoHAsync_v2(back, e + 7, 256, s));
    CHECK(memcmp(back, buf, 256) == 0);
    memset(back, 0, sizeof back);
    OK(p_cuMemcpyDtoHAsync_v2_ptsz(back, d + 1100, 256, NULL));
    CHECK(memcmp(back, buf, 256) == 0);
    RC(p_cuMemcpyDtoHAsync_v2(back, e + 7, 256, (CUstream)buf), CUDA_ERROR_INVALID_HANDLE);
    RC(p_cuMemcpyDtoHAsync_v2(NULL, e + 7, 256, s), CUDA_ERROR_INVALID_VALUE);

    /* IPC handles of cuMemAlloc memory hold its base and size. */
    CUipcMemHandle ipc;
    uint64_t word[2];
    memset(&ipc, 0x77, sizeof ipc);
    OK(p_cuIpcGetMemHandle(&ipc, d));
    memcpy(word, ipc.reserved, sizeof word);
    CHECK(word[0] == d && word[1] == MiB);
    int zeros = 1;
    for (size_t i = sizeof word; i < sizeof ipc.reserved; i++) zeros &= ipc.reserved[i] == 0;
    CHECK(zeros);
    RC(p_cuIpcGetMemHandle(&ipc, d + 64), CUDA_ERROR_INVALID_VALUE); /* not the base */
    RC(p_cuIpcGetMemHandle(NULL, d), CUDA_ERROR_INVALID_VALUE);

    /* Pointer ranges: the cuMemAlloc block, or the reservation of mapped VMM memory. */
    CUdeviceptr start = 0;
    size_t size = 0;
    OK(p_cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, e + 12345));
    OK(p_cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, e + 12345));
    CHECK(start == e && size == MiB);
    RC(p_cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, top + MiB),
       CUDA_ERROR_INVALID_VALUE);
    /* A cuMemAlloc block: device memory of the current context and device, and a buffer id
     * of its own. Attributes not modelled say so. */
    int ord = -1;
    CUcontext owner = NULL, cur = NULL;
    unsigned long long id_d = 0, id_e = 0;
    OK(p_cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, e + 5));
    OK(p_cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, e + 5));
    OK(p_cuCtxGetCurrent(&cur));
    OK(p_cuPointerGetAttribute(&id_d, CU_POINTER_ATTRIBUTE_BUFFER_ID, d));
    OK(p_cuPointerGetAttribute(&id_e, CU_POINTER_ATTRIBUTE_BUFFER_ID, e + MiB - 1));
    CHECK(ord == 0 && owner == cur && id_d && id_e && id_d != id_e);
    RC(p_cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_IS_MANAGED, e),
       CUDA_ERROR_NOT_SUPPORTED);

    CUmemAllocationProp prop = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemAccessDesc rw = access_desc(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUmemGenericAllocationHandle h;
    OK(p_cuMemAddressReserve(&va, 4 * G, 0, 0, 0));
    OK(p_cuMemCreate(&h, G, &prop, 0));
    OK(p_cuMemMap(va + G, G, 0, h, 0));
    OK(p_cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + G + 5));
    OK(p_cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + 2 * G - 1));
    CHECK(start == va && size == 4 * G);
    RC(p_cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va), /* not mapped */
       CUDA_ERROR_INVALID_VALUE);
    /* Mapped VMM memory: the physical allocation's id, the device it is on, no context. */
    unsigned long long id_vmm = 0;
    OK(p_cuPointerGetAttribute(&id_vmm, CU_POINTER_ATTRIBUTE_BUFFER_ID, va + G + 9));
    OK(p_cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va + G));
    CHECK(id_vmm == h && ord == 0);
    RC(p_cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, va + G),
       CUDA_ERROR_INVALID_VALUE);

    /* cuMemGetAddressRange: the cuMemAlloc block, or the one cuMemMap call's segment (not the
     * reservation); either output optional; nothing there: NOT_FOUND. */
    start = 0, size = 0;
    OK(p_cuMemGetAddressRange_v2(&start, &size, e + 12345));
    CHECK(start == e && size == MiB);
    OK(p_cuMemGetAddressRange_v2(&start, NULL, va + 2 * G - 1));
    OK(p_cuMemGetAddressRange_v2(NULL, &size, va + G));
    CHECK(start == va + G && size == G);
    RC(p_cuMemGetAddressRange_v2(&start, &size, va), CUDA_ERROR_NOT_FOUND);
    RC(p_cuMemGetAddressRange_v2(&start, &size, top + MiB), CUDA_ERROR_NOT_FOUND);

    /* cuPointerGetAttributes: several at once; an unknown pointer reads as zeros, no error. */
    {
        CUpointer_attribute at[3] = {CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                     CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                     CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
        unsigned ty = 99;
        start = 1, size = 1;
        void *out[3] = {&size, &ty, &start};
        OK(p_cuPointerGetAttributes(3, at, out, e + 5));
        CHECK(size == MiB && ty == CU_MEMORYTYPE_DEVICE && start == e);
        OK(p_cuPointerGetAttributes(3, at, out, va + 8));
        CHECK(size == 0 && ty == 0 && start == 0);
        RC(p_cuPointerGetAttributes(0, at, out, e), CUDA_ERROR_INVALID_VALUE);
        at[1] = CU_POINTER_ATTRIBUTE_IS_MANAGED;
        RC(p_cuPointerGetAttributes(3, at, out, e), CUDA_ERROR_NOT_SUPPORTED);
    }
    RC(p_cuIpcGetMemHandle(&ipc, va + G), CUDA_ERROR_INVALID_VALUE); /* VMM memory */
    OK(p_cuMemSetAccess(va + G, G, &rw, 1));
    OK(p_cuMemsetD8_v2(va + G, 0x42, G));
    CHECK(host(va + G)[G - 1] == 0x42);
    RC(p_cuMemsetD8_v2(va + G - 1, 0x42, 2), CUDA_ERROR_INVALID_VALUE);

    /* Memory types: device, registered host, and pageable host (unknown to the driver). */
    static unsigned char pinned[4096], pageable[4096];
    unsigned type = 0;
    OK(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, e + 7));
    CHECK(type == CU_MEMORYTYPE_DEVICE);
    OK(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + G + 7));
    CHECK(type == CU_MEMORYTYPE_DEVICE);
    OK(p_cuMemHostRegister_v2(pinned, sizeof pinned, 0));
    OK(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)pinned));
    CHECK(type == CU_MEMORYTYPE_HOST);
    OK(p_cuMemHostUnregister(pinned));
    RC(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)pageable),
       CUDA_ERROR_INVALID_VALUE);

    /* Unified copies: each side's kind told by its address. */
    for (size_t i = 0; i < sizeof pageable; i++) pageable[i] = (unsigned char)(i * 13 + 5);
    OK(p_cuMemcpy(va + G + 64, (CUdeviceptr)pageable, sizeof pageable));          /* to device */
    CHECK(memcmp(host(va + G + 64), pageable, sizeof pageable) == 0);
    OK(p_cuMemcpy(e, va + G + 64, sizeof pageable));                            /* device-device */
    OK(p_cuMemcpyAsync((CUdeviceptr)pinned, e, sizeof pinned, NULL));            /* to host */
    OK(p_cuCtxSynchronize());
    CHECK(memcmp(pinned, pageable, sizeof pinned) == 0);
    RC(p_cuMemcpy(va, (CUdeviceptr)pageable, 64), CUDA_ERROR_INVALID_VALUE);    /* unmapped */
    RC(p_cuMemcpyAsync(va + G, e, 64, (CUstream)&type), CUDA_ERROR_INVALID_HANDLE);
    OK(p_cuMemUnmap(va + G, G));
    OK(p_cuMemAddressFree(va, 4 * G));
    OK(p_cuMemRelease(h));

    /* Context synchronization (its blocking on held streams: t_streams_events). */
    OK(p_cuCtxSynchronize());
    OK(p_cuCtxSynchronize_v2(NULL));
    OK(p_cuCtxSynchronize_v2(g_ctx));
    RC(p_cuCtxSynchronize_v2((CUcontext)buf), CUDA_ERROR_INVALID_CONTEXT);

    OK(p_cuMemFreeAsync(d, s));
    OK(p_cuMemFreeAsync_ptsz(e, NULL));
    RC(p_cuMemFreeAsync(e, s), CUDA_ERROR_INVALID_VALUE);
    OK(p_cuStreamDestroy_v2(s));
    CHECK(free_mem() == TOTAL);
}

/* The other copies and memsets: stream-ordered device-to-device, 2D, batched; memsets of
 * 16- and 32-bit elements, 2D, stream-ordered. Each either does all its work or fails
 * having written nothing. */
static void t_copies_memsets(void)
{
    CUdeviceptr d, e;
    CUstream s;
    OK(p_cuMemAlloc_v2(&d, MiB));
    OK(p_cuMemAlloc_v2(&e, MiB));
    CUdeviceptr top = e + MiB == d ? d : e; /* nothing follows its end */
    OK(p_cuStreamCreate(&s, 0));

    /* Memsets: elements little-endian, aligned, within mapped memory. */
    OK(p_cuMemsetD8_v2(d, 0xee, 4096));
    OK(p_cuMemsetD16_v2(d + 2, 0xa1b2, 3));
    CHECK(host(d)[1] == 0xee && host(d)[2] == 0xb2 && host(d)[3] == 0xa1 && host(d)[7] == 0xa1 &&
          host(d)[8] == 0xee);
    OK(p_cuMemsetD32_v2(d + 16, 0x01020304u, 2));
    CHECK(u32(d + 16)[0] == 0x01020304u && u32(d + 16)[1] == 0x01020304u && host(d)[24] == 0xee);
    RC(p_cuMemsetD32_v2(d + 2, 1, 1), CUDA_ERROR_INVALID_VALUE);   /* misaligned */
    RC(p_cuMemsetD16_v2(d + 1, 1, 1), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemsetD32_v2(top + MiB - 4, 7, 2), CUDA_ERROR_INVALID_VALUE); /* past the end */
    CHECK(u32(top + MiB - 4)[0] != 7);
    OK(p_cuMemsetD8Async(d + 30, 0x11, 2, s));
    OK(p_cuMemsetD16Async(d + 32, 0x2222, 1, NULL));
    OK(p_cuMemsetD32Async(d + 36, 0x33333333u, 1, s));
    OK(p_cuMemsetD32Async_ptsz(d + 40, 0x44444444u, 1, NULL));
    CHECK(host(d)[30] == 0x11 && host(d)[33] == 0x22 && host(d)[39] == 0x33 && host(d)[43] == 0x44);
    RC(p_cuMemsetD32Async(d, 1, 1, (CUstream)&s), CUDA_ERROR_INVALID_HANDLE);
    CHECK(host(d)[0] == 0xee);

    /* 2D memsets: `h` rows of `w` elements, `pitch` bytes apart; the gaps keep their bytes. */
    OK(p_cuMemsetD2D8_v2(d + 100, 16, 0x55, 4, 3));
    CHECK(host(d)[100] == 0x55 && host(d)[103] == 0x55 && host(d)[104] == 0xee &&
          host(d)[132] == 0x55 && host(d)[136] == 0xee);
    OK(p_cuMemsetD2D16_v2(d + 200, 8, 0x6666, 2, 2));
    CHECK(host(d)[203] == 0x66 && host(d)[204] == 0xee && host(d)[208] == 0x66);
    OK(p_cuMemsetD2D32_v2(d + 300, 12, 0x77777777u, 2, 2));
    CHECK(host(d)[307] == 0x77 && host(d)[308] == 0xee && host(d)[312] == 0x77);
    OK(p_cuMemsetD2D8Async(d + 400, 4, 0x88, 2, 2, s));
    OK(p_cuMemsetD2D16Async(d + 410, 4, 0x9999, 1, 2, s));
    OK(p_cuMemsetD2D32Async(d + 420, 8, 0xaaaaaaaau, 1, 2, s));
    CHECK(host(d)[405] == 0x88 && host(d)[415] == 0x99 && host(d)[431] == 0xaa);
    RC(p_cuMemsetD2D8_v2(d, 2, 1, 4, 2), CUDA_ERROR_INVALID_VALUE); /* pitch < width */
    RC(p_cuMemsetD2D8_v2(top + MiB - 64, 64, 9, 8, 2), CUDA_ERROR_INVALID_VALUE);
    CHECK(host(top + MiB - 64)[0] != 9); /* the first row, valid, was not written either */

    /* Device-to-device, stream-ordered. */
    OK(p_cuMemsetD8_v2(e, 0x5a, 256));
    OK(p_cuMemcpyDtoDAsync_v2(d + 4096, e, 256, s));
    CHECK(host(d)[4096] == 0x5a && host(d)[4096 + 255] == 0x5a);
    RC(p_cuMemcpyDtoDAsync_v2(d, e, 16, (CUstream)&s), CUDA_ERROR_INVALID_HANDLE);
    RC(p_cuMemcpyDtoDAsync_v2(top + MiB - 8, e, 16, s), CUDA_ERROR_INVALID_VALUE);

    /* 2D copies: a 3x5 block out of a 16-byte-pitch host image into device rows of 8. */
    unsigned char img[64], out[64];
    for (int i = 0; i < 64; i++) img[i] = (unsigned char)(i * 7 + 1);
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = img;
    c.srcXInBytes = 2;
    c.srcY = 1;
    c.srcPitch = 16;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = e + 1000;
    c.dstPitch = 8;
    c.WidthInBytes = 5;
    c.Height = 3;
    OK(p_cuMemsetD8_v2(e + 1000, 0x3b, 24));
    OK(p_cuMemcpy2D_v2(&c));
    for (int r = 0; r < 3; r++) /* each row's 5 bytes, the 3 after them untouched */
        CHECK(memcmp(host(e + 1000 + 8 * r), img + 16 * (r + 1) + 2, 5) == 0 &&
              host(e + 1000 + 8 * r)[5] == 0x3b && host(e + 1000 + 8 * r)[7] == 0x3b);
    /* back, through unified addresses, into a tight host buffer */
    memset(out, 0, sizeof out);
    CUDA_MEMCPY2D b;
    memset(&b, 0, sizeof b);
    b.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    b.srcDevice = e + 1000;
    b.srcPitch = 8;
    b.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    b.dstDevice = (CUdeviceptr)(uintptr_t)out;
    b.dstPitch = 5;
    b.WidthInBytes = 5;
    b.Height = 3;
    OK(p_cuMemcpy2DAsync_v2(&b, s));
    for (int r = 0; r < 3; r++) CHECK(memcmp(out + 5 * r, img + 16 * (r + 1) + 2, 5) == 0);
    memset(out, 0, sizeof out);
    OK(p_cuMemcpy2D_v2_ptds(&b));
    CHECK(memcmp(out + 10, img + 50, 5) == 0);
    c.dstPitch = 4; /* < width */
    RC(p_cuMemcpy2D_v2(&c), CUDA_ERROR_INVALID_VALUE);
    c.dstPitch = 8;
    c.dstDevice = top + MiB - 12; /* the second row would run past the end */
    memset(host(top + MiB - 12), 0, 12);
    RC(p_cuMemcpy2D_v2(&c), CUDA_ERROR_INVALID_VALUE);
    CHECK(host(top + MiB - 12)[0] == 0);
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    RC(p_cuMemcpy2D_v2(&c), CUDA_ERROR_NOT_SUPPORTED);
    RC(p_cuMemcpy2D_v2(NULL), CUDA_ERROR_INVALID_VALUE);

    /* Batches: each copy's sides told by their addresses. */
    unsigned char src2[32];
    memset(src2, 0xc3, sizeof src2);
    memset(out, 0, sizeof out);
    CUdeviceptr dsts[2] = {d + 8192, (CUdeviceptr)(uintptr_t)out};
    CUdeviceptr srcs[2] = {(CUdeviceptr)(uintptr_t)src2, e};
    size_t sizes[2] = {32, 16}, attr_idx[1] = {0};
    CUmemcpyAttributes attrs[1];
    memset(attrs, 0, sizeof attrs);
    attrs[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    OK(p_cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 2, attrs, attr_idx, 1, s));
    CHECK(host(d + 8192)[31] == 0xc3 && out[0] == 0x5a && out[15] == 0x5a && out[16] == 0);
    OK(p_cuMemcpyBatchAsync_v2_ptsz(dsts, srcs, sizes, 1, attrs, attr_idx, 1, NULL));
    RC(p_cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 0, attrs, attr_idx, 1, s),
       CUDA_ERROR_INVALID_VALUE);
    RC(p_cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 2, NULL, attr_idx, 1, s),
       CUDA_ERROR_INVALID_VALUE);
    CHECK(p_fakecuda_calls("cuMemcpyBatchAsync_v2") >= 5);

    OK(p_cuStreamDestroy_v2(s));
    OK(p_cuMemFree_v2(d));
    OK(p_cuMemFree_v2(e));
}

/* Memcpy and memset nodes: read back as added, run in order at launch, changed through
 * their own setters and the generic one; a graph of other node types cannot update them. */
static void t_graph_copies(void)
{
    CUdeviceptr a, b;
    CUstream s;
    OK(p_cuMemAlloc_v2(&a, 4096));
    OK(p_cuMemAlloc_v2(&b, 4096));
    OK(p_cuStreamCreate(&s, 0));
    CUgraph g, other;
    CUgraphNode n_set, n_copy;
    CUDA_MEMSET_NODE_PARAMS set = {.dst = a, .value = 0x7e, .elementSize = 1, .width = 256,
                                   .height = 1};
    CUDA_MEMCPY3D copy;
    memset(&copy, 0, sizeof copy);
    copy.srcMemoryType = copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = a;
    copy.dstDevice = b + 100;
    copy.WidthInBytes = 64;
    copy.Height = copy.Depth = 1;
    OK(p_cuGraphCreate(&g, 0));
    OK(p_cuGraphAddMemsetNode(&n_set, g, NULL, 0, &set, g_ctx));
    OK(p_cuGraphAddMemcpyNode(&n_copy, g, &n_set, 1, &copy, g_ctx));
    CUDA_MEMSET_NODE_PARAMS set_back;
    CUDA_MEMCPY3D copy_back;
    OK(p_cuGraphMemsetNodeGetParams(n_set, &set_back));
    OK(p_cuGraphMemcpyNodeGetParams(n_copy, &copy_back));
    CHECK(set_back.dst == a && set_back.width == 256 && copy_back.dstDevice == b + 100);
    RC(p_cuGraphMemsetNodeGetParams(n_copy, &set_back), CUDA_ERROR_INVALID_VALUE);
    CUgraphNodeType type;
    OK(p_cuGraphNodeGetType(n_copy, &type));
    CHECK(type == CU_GRAPH_NODE_TYPE_MEMCPY);
    set.elementSize = 3;
    RC(p_cuGraphAddMemsetNode(&n_set, g, NULL, 0, &set, g_ctx), CUDA_ERROR_INVALID_VALUE);
    set.elementSize = 1;
    copy.Depth = 2;
    RC(p_cuGraphAddMemcpyNode(&n_copy, g, NULL, 0, &copy, g_ctx), CUDA_ERROR_NOT_SUPPORTED);
    copy.Depth = 1;

    CUgraphExec e;
    OK(p_cuGraphInstantiateWithFlags(&e, g, 0));
    OK(p_cuMemsetD8_v2(a, 0, 4096));
    OK(p_cuMemsetD8_v2(b, 0, 4096));
    OK(p_cuGraphLaunch(e, s));
    CHECK(host(a)[255] == 0x7e && host(a)[256] == 0);
    CHECK(host(b)[100] == 0x7e && host(b)[163] == 0x7e && host(b)[164] == 0 && host(b)[99] == 0);

    /* The memset, through the generic setter: 32-bit elements into b; the copy from b. */
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEMSET;
    p.memset = (CUDA_MEMSET_NODE_PARAMS_v2){.dst = b, .value = 0x01020304u, .elementSize = 4,
                                            .width = 4, .height = 1};
    OK(p_cuGraphExecNodeSetParams(e, n_set, &p));
    copy.srcDevice = b;
    copy.dstDevice = a + 1000;
    copy.WidthInBytes = 16;
    OK(p_cuGraphExecMemcpyNodeSetParams(e, n_copy, &copy, g_ctx));
    OK(p_cuGraphLaunch(e, s));
    CHECK(u32(a + 1000)[0] == 0x01020304u && u32(a + 1000)[3] == 0x01020304u &&
          host(a)[1016] == 0);
    p.type = CU_GRAPH_NODE_TYPE_MEMCPY; /* the wrong kind for that node */
    RC(p_cuGraphExecNodeSetParams(e, n_set, &p), CUDA_ERROR_INVALID_VALUE);
    set.dst = b + 2;
    set.elementSize = 2;
    set.width = 1;
    OK(p_cuGraphExecMemsetNodeSetParams(e, n_set, &set, g_ctx));
    OK(p_cuGraphLaunch(e, s));
    CHECK(host(b)[1] == 0x03 && host(b)[2] == 0x7e && host(b)[3] == 0 && host(b)[4] == 0x04);
    /* Run time failures: a copy past the end of its memory fails the launch. */
    copy.dstDevice = b + 4090;
    OK(p_cuGraphExecMemcpyNodeSetParams(e, n_copy, &copy, g_ctx));
    CUdeviceptr top = a > b ? a : b;
    if (top == b) RC(p_cuGraphLaunch(e, s), CUDA_ERROR_INVALID_VALUE);

    /* Update: only from a graph of the same node types. */
    CUgraphNode n_other;
    CUgraphExecUpdateResultInfo info;
    OK(p_cuGraphCreate(&other, 0));
    OK(p_cuGraphAddMemcpyNode(&n_other, other, NULL, 0, &copy, g_ctx));
    OK(p_cuGraphAddMemsetNode(&n_other, other, NULL, 0, &set, g_ctx));
    RC(p_cuGraphExecUpdate_v2(e, other, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    OK(p_cuGraphExecDestroy(e));
    OK(p_cuGraphDestroy(other));
    OK(p_cuGraphDestroy(g));
    OK(p_cuStreamDestroy_v2(s));
    OK(p_cuMemFree_v2(a));
    OK(p_cuMemFree_v2(b));
}

/* ---- fake kernels ---- */

static CUmodule g_mod;
static CUfunction k_fill, k_sum, k_copy, k_scale;

/* The pre-CUDA-4 launch of f(p0, p1, p2): the block shape and each parameter set first, at
 * nvcc's offsets (0, 8, 16), the padding after a narrow p1 left as it was. */
static CUresult launch_legacy(CUfunction f, uint64_t p0, uint64_t p1, int narrow, uint64_t p2)
{
    CUresult rc = p_cuFuncSetBlockShape(f, 256, 1, 1);
    if (!rc) rc = p_cuParamSetSize(f, 24);
    if (!rc) rc = p_cuParamSetv(f, 0, &p0, sizeof p0);
    if (!rc) rc = narrow ? p_cuParamSeti(f, 8, (uint32_t)p1) : p_cuParamSetv(f, 8, &p1, sizeof p1);
    if (!rc) rc = p_cuParamSetv(f, 16, &p2, sizeof p2);
    return rc ? rc : p_cuLaunchGridAsync(f, 8, 1, NULL);
}

/* Launches f(p0, p1, p2), p1 4 bytes wide if `narrow` (uint32_t, or float bits) else 8, in
 * one of LAUNCH_FORMS ways: 0 kernelParams; 1 an extra buffer laid out by hand as nvcc does
 * (offsets 0, 8, 16; padding after a narrow p1 holds garbage); 2 cuLaunchKernelEx;
 * 3 cuLaunchKernel_ptsz with an extra buffer; 4 cuLaunchCooperativeKernel; 5 its _ptsz;
 * 6 the pre-CUDA-4 API; 7 cuLaunchCooperativeKernelMultiDevice with one entry. */
enum { LAUNCH_FORMS = 8 };
static CUresult launch(CUfunction f, int form, uint64_t p0, uint64_t p1, int narrow, uint64_t p2)
{
    uint32_t p1n = (uint32_t)p1;
    void *params[3] = {&p0, narrow ? (void *)&p1n : (void *)&p1, &p2};
    unsigned char buf[24];
    size_t size = sizeof buf;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    CUlaunchConfig cfg = {.gridDimX = 8, .gridDimY = 1, .gridDimZ = 1,
                          .blockDimX = 256, .blockDimY = 1, .blockDimZ = 1};
    memset(buf, 0xee, sizeof buf);
    memcpy(buf, &p0, 8);
    if (narrow) memcpy(buf + 8, &p1n, 4);
    else memcpy(buf + 8, &p1, 8);
    memcpy(buf + 16, &p2, 8);
    switch (form) {
    case 0: return p_cuLaunchKernel(f, 8, 1, 1, 256, 1, 1, 0, NULL, params, NULL);
    case 1: return p_cuLaunchKernel(f, 8, 1, 1, 256, 1, 1, 0, NULL, NULL, extra);
    case 2: return p_cuLaunchKernelEx(&cfg, f, params, NULL);
    case 3: return p_cuLaunchKernel_ptsz(f, 8, 1, 1, 256, 1, 1, 0, NULL, NULL, extra);
    case 4: return p_cuLaunchCooperativeKernel(f, 8, 1, 1, 256, 1, 1, 0, NULL, params);
    case 5: return p_cuLaunchCooperativeKernel_ptsz(f, 8, 1, 1, 256, 1, 1, 0, NULL, params);
    case 6: return launch_legacy(f, p0, p1, narrow, p2);
    default: {
        CUDA_LAUNCH_PARAMS one = {.function = f, .gridDimX = 8, .gridDimY = 1, .gridDimZ = 1,
                                  .blockDimX = 256, .blockDimY = 1, .blockDimZ = 1,
                                  .kernelParams = params};
        return p_cuLaunchCooperativeKernelMultiDevice(&one, 1, 0);
    }
    }
}

static uint32_t f32_bits(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}


static void t_modules(void)
{
    CUmodule m;
    CUfunction f, *fs[] = {&k_fill, &k_sum, &k_copy, &k_scale};
    const char *names[] = {"fk_fill_u32", "fk_sum_u32", "fk_copy", "fk_scale_f32"};
    /* nvcc's layout: each parameter at an offset aligned to its size. */
    const size_t sizes[4][3] = {{8, 4, 8}, {8, 8, 8}, {8, 8, 8}, {8, 4, 8}};
    size_t off, size;
    RC(p_cuModuleLoadData(&m, NULL), CUDA_ERROR_INVALID_VALUE);
    OK(p_cuModuleLoadData(&g_mod, "any image will do"));
    for (int i = 0; i < 4; i++) {
        OK(p_cuModuleGetFunction(fs[i], g_mod, names[i]));
        for (size_t j = 0; j < 3; j++) {
            off = size = 99;
            OK(p_cuFuncGetParamInfo(*fs[i], j, &off, &size));
            CHECK(off == 8 * j && size == sizes[i][j]);
        }
        RC(p_cuFuncGetParamInfo(*fs[i], 3, &off, &size), CUDA_ERROR_INVALID_VALUE);
    }
    OK(p_cuFuncGetParamInfo(k_scale, 1, &off, NULL)); /* the size is optional */
    CHECK(off == 8);
    RC(p_cuFuncGetParamInfo(k_scale, 1, NULL, &size), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuModuleGetFunction(&f, g_mod, "fk_nothing"), CUDA_ERROR_NOT_FOUND);
    RC(p_cuModuleGetFunction(&f, (CUmodule)&f, "fk_copy"), CUDA_ERROR_INVALID_HANDLE);
    RC(p_cuModuleGetFunction(NULL, g_mod, "fk_copy"), CUDA_ERROR_INVALID_VALUE);

    /* A second module has its own functions, gone when it is unloaded. */
    OK(p_cuModuleLoadData(&m, "another"));
    OK(p_cuModuleGetFunction(&f, m, "fk_copy"));
    CHECK(f != k_copy);
    OK(p_cuModuleUnload(m));
    RC(p_cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
    RC(p_cuFuncGetParamInfo(f, 0, &off, NULL), CUDA_ERROR_INVALID_HANDLE);
    RC(launch(f, 0, 0, 0, 0, 0), CUDA_ERROR_INVALID_HANDLE);
    OK(p_cuFuncGetParamInfo(k_copy, 2, &off, &size)); /* the first module is unaffected */
}

/* PTX that the driver's compiler would refuse (griddepcontrol below sm_90, a target newer
 * than the device), and programmatic edges: between kernels only, from their programmatic
 * or launch-order port, and (stricter than the driver: a race) only into a kernel whose PTX
 * waits for its predecessor. */
static void t_graph_edges(void)
{
#define KERNELS(wait)                                                                        \
    ".entry fk_copy(\n)\n{\n\t.reg .b32 %r<2>;\n" wait "\tret;\n}\n"                            \
    ".entry fk_fill_u32(\n)\n{\n" wait "\tret;\n}\n"
#define WAIT "\tgriddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;\n"
    static const char plain[] = "//\n.version 9.0\n.target sm_75\n" KERNELS("");
    static const char waits[] = "//\n.version 9.0\n.target sm_90\n" KERNELS(WAIT);
    static const char low[] = "//\n.version 9.0\n.target sm_75\n" KERNELS(WAIT);
#undef KERNELS
#undef WAIT
    CUmodule mp, mw, m;
    CUfunction cp, fp, cw, fw;
    RC(p_cuModuleLoadData(&m, low), CUDA_ERROR_INVALID_PTX);
    p_fakecuda_set_cc_major(8);
    RC(p_cuModuleLoadData(&m, waits), CUDA_ERROR_NO_BINARY_FOR_GPU);
    p_fakecuda_set_cc_major(9);
    OK(p_cuModuleLoadData(&mp, plain));
    OK(p_cuModuleLoadData(&mw, waits));
    OK(p_cuModuleGetFunction(&cp, mp, "fk_copy"));
    OK(p_cuModuleGetFunction(&fp, mp, "fk_fill_u32"));
    OK(p_cuModuleGetFunction(&cw, mw, "fk_copy"));
    OK(p_cuModuleGetFunction(&fw, mw, "fk_fill_u32"));

    CUgraph g, other;
    CUgraphNode n[5], stray;
    OK(p_cuGraphCreate(&g, 0));
    OK(p_cuGraphCreate(&other, 0));
    const CUfunction fn[4] = {cp, fp, cw, fw};
    uint64_t zero = 0; /* the nodes are never launched */
    void *args[] = {&zero, &zero, &zero};
    for (int i = 0; i < 4; i++) {
        CUDA_KERNEL_NODE_PARAMS kp = {.func = fn[i], .gridDimX = 1, .gridDimY = 1,
                                      .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1,
                                      .blockDimZ = 1, .kernelParams = args};
        OK(p_cuGraphAddKernelNode_v2(&n[i], g, NULL, 0, &kp));
        if (i == 0)
            OK(p_cuGraphAddKernelNode_v2(&stray, other, NULL, 0, &kp));
    }
    const CUgraphEdgeData pdl = {.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC,
                                 .type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC};
    const CUgraphEdgeData order = {.from_port = CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER,
                                   .type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC};
    const CUgraphEdgeData full_port = {.from_port = CU_GRAPH_KERNEL_NODE_PORT_DEFAULT,
                                       .type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC};
    const CUgraphEdgeData to_port = {.to_port = 1};
    const CUgraphEdgeData port_only = {.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC};
    /* into a kernel that waits: taken, from either port; default edges anywhere */
    OK(p_cuGraphAddDependencies_v2(g, &n[2], &n[3], &pdl, 1));
    OK(p_cuGraphAddDependencies_v2(g, &n[0], &n[2], &order, 1));
    OK(p_cuGraphAddDependencies_v2(g, &n[0], &n[1], NULL, 1));
    OK(p_cuGraphAddDependencies_v2(g, (CUgraphNode[]){n[1], n[2]}, (CUgraphNode[]){n[2], n[3]},
                                   (CUgraphEdgeData[]){{0}, pdl}, 2));
    /* into a kernel that does not, or malformed */
    RC(p_cuGraphAddDependencies_v2(g, &n[2], &n[1], &pdl, 1), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuGraphAddDependencies_v2(g, &n[2], &n[3], &full_port, 1), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuGraphAddDependencies_v2(g, &n[2], &n[3], &to_port, 1), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuGraphAddDependencies_v2(g, &n[2], &n[3], &port_only, 1), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuGraphAddDependencies_v2(g, &stray, &n[3], &pdl, 1), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuGraphAddDependencies_v2(g, &n[3], &n[3], NULL, 1), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuGraphAddDependencies_v2(g, NULL, NULL, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    OK(p_cuGraphDestroy(other));
    OK(p_cuGraphDestroy(g));
    OK(p_cuModuleUnload(mp));
    OK(p_cuModuleUnload(mw));
}

/* Libraries: their CUkernels launch like functions; only cuKernelGetParamInfo describes
 * them, and module and library handles do not mix. */
static void t_libraries(void)
{
    CUlibrary lib;
    CUkernel k;
    CUfunction f;
    CUdeviceptr a;
    size_t off = 99, size = 99;
    RC(p_cuLibraryLoadData(&lib, NULL, NULL, NULL, 0, NULL, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    OK(p_cuLibraryLoadData(&lib, "image", NULL, NULL, 0, NULL, NULL, 0));
    OK(p_cuLibraryGetKernel(&k, lib, "fk_fill_u32"));
    RC(p_cuLibraryGetKernel(&k, lib, "fk_nothing"), CUDA_ERROR_NOT_FOUND);
    RC(p_cuModuleGetFunction(&f, (CUmodule)lib, "fk_fill_u32"), CUDA_ERROR_INVALID_HANDLE);
    RC(p_cuLibraryGetKernel(&k, (CUlibrary)g_mod, "fk_fill_u32"), CUDA_ERROR_INVALID_HANDLE);
    OK(p_cuLibraryGetKernel(&k, lib, "fk_fill_u32"));
    RC(p_cuFuncGetParamInfo((CUfunction)k, 0, &off, &size), CUDA_ERROR_INVALID_HANDLE);
    OK(p_cuKernelGetParamInfo(k, 1, &off, &size));
    CHECK(off == 8 && size == 4);
    RC(p_cuKernelGetParamInfo(k, 3, &off, &size), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuKernelGetParamInfo((CUkernel)k_fill, 0, &off, &size), CUDA_ERROR_INVALID_HANDLE);
    OK(p_cuMemAlloc_v2(&a, 64));
    OK(launch((CUfunction)k, 0, a, 0x5eed, 1, 16));
    CHECK(u32(a)[15] == 0x5eed);
    RC(p_cuLibraryUnload((CUlibrary)g_mod), CUDA_ERROR_INVALID_HANDLE);
    OK(p_cuLibraryUnload(lib));
    RC(launch((CUfunction)k, 0, a, 1, 1, 16), CUDA_ERROR_INVALID_HANDLE);
    OK(p_cuMemFree_v2(a));
}

/* A struct parameter (fk_copy_args), and graphs: capture, what breaks a capture, reading
 * nodes back, child graphs, instantiating, launching, changing and updating. */
static void t_graphs(void)
{
    const size_t N = 4096;
    CUdeviceptr a, b;
    CUfunction copy_args;
    size_t off = 99, size = 99;
    OK(p_cuMemAlloc_v2(&a, N));
    OK(p_cuMemAlloc_v2(&b, N));
    OK(p_cuModuleGetFunction(&copy_args, g_mod, "fk_copy_args"));
    OK(p_cuFuncGetParamInfo(copy_args, 0, &off, &size));
    CHECK(off == 0 && size == 24);
    RC(p_cuFuncGetParamInfo(copy_args, 1, &off, &size), CUDA_ERROR_INVALID_VALUE);
    struct { CUdeviceptr dst, src; uint64_t bytes; } ca = {b, a, 64};
    void *ca_args[] = {&ca};
    OK(p_cuMemsetD8_v2(a, 0x3c, N));
    OK(p_cuMemsetD8_v2(b, 0, N));
    OK(p_cuLaunchKernel(copy_args, 1, 1, 1, 1, 1, 1, 0, NULL, ca_args, NULL));
    CHECK(host(b)[63] == 0x3c && host(b)[64] == 0);
    /* The same through `extra`: the buffer is the struct's 24 bytes, not its alignment's 8. */
    size_t ca_size = sizeof ca, eight = 8;
    void *ca_extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &ca, CU_LAUNCH_PARAM_BUFFER_SIZE,
                        &ca_size, CU_LAUNCH_PARAM_END};
    void *ca_short[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &ca, CU_LAUNCH_PARAM_BUFFER_SIZE, &eight,
                        CU_LAUNCH_PARAM_END};
    ca.bytes = 65;
    RC(p_cuLaunchKernel(copy_args, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, ca_short),
       CUDA_ERROR_INVALID_VALUE);
    CHECK(host(b)[64] == 0);
    OK(p_cuLaunchKernel(copy_args, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, ca_extra));
    CHECK(host(b)[64] == 0x3c && host(b)[65] == 0);
    ca.bytes = 64;
    OK(p_cuMemsetD8_v2(b, 0, N));

    /* A capture: the launch becomes a node; syncing the stream invalidates the capture. */
    CUstream s;
    CUgraph g = NULL, g2;
    CUstreamCaptureStatus st;
    OK(p_cuStreamCreate(&s, 0));
    RC(p_cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
       CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    OK(p_cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    RC(p_cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
    OK(p_cuStreamIsCapturing(s, &st));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    ca.bytes = 128;
    OK(p_cuLaunchKernel(copy_args, 1, 1, 1, 1, 1, 1, 0, s, ca_args, NULL));
    CHECK(host(b)[64] == 0); /* captured, not run */
    RC(p_cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    OK(p_cuStreamIsCapturing(s, &st));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    RC(p_cuLaunchKernel(copy_args, 1, 1, 1, 1, 1, 1, 0, s, ca_args, NULL),
       CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    RC(p_cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(g == NULL);
    RC(p_cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
    /* Syncing the context breaks a global capture, not a relaxed one. */
    OK(p_cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    RC(p_cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    RC(p_cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    OK(p_cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(p_cuCtxSynchronize());
    OK(p_cuLaunchKernel(copy_args, 1, 1, 1, 1, 1, 1, 0, s, ca_args, NULL));
    OK(p_cuStreamEndCapture(s, &g));
    OK(p_cuStreamIsCapturing(s, &st));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);

    /* The node reads back as launched; a child graph is copied in. */
    CUgraphNode nodes[4], child_node, added;
    CUgraphNodeType type;
    CUDA_KERNEL_NODE_PARAMS kp;
    size_t n = 4;
    OK(p_cuGraphGetNodes(g, nodes, &n));
    CHECK(n == 1);
    OK(p_cuGraphNodeGetType(nodes[0], &type));
    CHECK(type == CU_GRAPH_NODE_TYPE_KERNEL);
    OK(p_cuGraphKernelNodeGetParams_v2(nodes[0], &kp));
    CHECK(kp.func == copy_args && kp.kernelParams && kp.extra == NULL &&
          memcmp(kp.kernelParams[0], &ca, sizeof ca) == 0);
    OK(p_cuGraphCreate(&g2, 0));
    OK(p_cuGraphAddChildGraphNode(&child_node, g2, NULL, 0, g));
    ca.dst = b + 1024;
    kp.kernelParams = ca_args;
    OK(p_cuGraphAddKernelNode_v2(&added, g2, NULL, 0, &kp));
    CUgraph copy = NULL;
    OK(p_cuGraphChildGraphNodeGetGraph(child_node, &copy));
    CHECK(copy && copy != g);
    n = 4;
    OK(p_cuGraphGetNodes(copy, nodes, &n));
    CHECK(n == 1);
    OK(p_cuGraphNodeGetType(child_node, &type));
    CHECK(type == CU_GRAPH_NODE_TYPE_GRAPH);

    /* Launching runs the flattened nodes; a changed node runs with its new parameters. */
    CUgraphExec e;
    CUgraphExecUpdateResultInfo info;
    OK(p_cuGraphInstantiateWithFlags(&e, g2, 0));
    OK(p_cuMemsetD8_v2(b, 0, N));
    OK(p_cuGraphLaunch(e, s));
    CHECK(host(b)[127] == 0x3c && host(b)[128] == 0);            /* the child's copy */
    CHECK(host(b)[1024 + 127] == 0x3c && host(b)[1024 + 128] == 0); /* the added node */
    ca.bytes = 16;
    OK(p_cuGraphExecKernelNodeSetParams_v2(e, added, &kp));
    OK(p_cuMemsetD8_v2(b, 0, N));
    OK(p_cuGraphLaunch(e, s));
    CHECK(host(b)[1024 + 15] == 0x3c && host(b)[1024 + 16] == 0);
    RC(p_cuGraphExecUpdate_v2(e, g, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
    OK(p_cuGraphExecDestroy(e));
    OK(p_cuGraphInstantiateWithFlags(&e, g, 0));
    OK(p_cuGraphExecUpdate_v2(e, copy, &info)); /* the same kernel */
    OK(p_cuGraphExecDestroy(e));
    RC(p_cuGraphExecDestroy(e), CUDA_ERROR_INVALID_VALUE);
    OK(p_cuGraphDestroy(g2));
    OK(p_cuGraphDestroy(g));
    RC(p_cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
    OK(p_cuStreamDestroy_v2(s));
    OK(p_cuMemFree_v2(a));
    OK(p_cuMemFree_v2(b));
}

/* Hand-worked results on cuMemAlloc memory, every way of launching, and every way a launch
 * can be refused, none of which touches memory. */
static void t_kernels_devmem(void)
{
    const size_t N = 64 * 1024;
    CUdeviceptr a, b, out;
    size_t sz;
    OK(p_cuMemAlloc_v2(&a, N)); /* first: mmap puts later blocks below it, not after it */
    OK(p_cuMemAlloc_v2(&b, N));
    OK(p_cuMemAlloc_v2(&out, 8));
    RC(p_cuPointerGetAttribute(&sz, CU_POINTER_ATTRIBUTE_RANGE_SIZE, a + N),
       CUDA_ERROR_INVALID_VALUE); /* so past its end is no device memory */
    OK(p_cuMemsetD8_v2(a, 0x11, N));
    OK(p_cuMemsetD8_v2(out, 0xff, 8));

    for (int form = 0; form < LAUNCH_FORMS; form++) {
        uint32_t v = 0xdeadbee0u + (uint32_t)form;
        OK(launch(k_fill, form, a, v, 1, 1000));
        CHECK(u32(a)[0] == v && u32(a)[999] == v && u32(a)[1000] == 0x11111111u);
    }
    uint32_t seq[1000];
    for (uint32_t i = 0; i < 1000; i++) seq[i] = i;
    OK(p_cuMemcpyHtoD_v2(a, seq, sizeof seq));
    for (int form = 0; form < LAUNCH_FORMS; form++) {
        uint64_t sum = 0;
        OK(p_cuMemsetD8_v2(out, 0xff, 8));
        OK(launch(k_sum, form, out, a, 0, 1000));
        OK(p_cuMemcpyDtoH_v2(&sum, out, 8));
        CHECK(sum == 499500); /* 0 + 1 + ... + 999 = 999 * 1000 / 2 */
        OK(launch(k_sum, form, out, a + 4 * 999, 0, 1));
        OK(p_cuMemcpyDtoH_v2(&sum, out, 8));
        CHECK(sum == 999);
        OK(launch(k_sum, form, out, 0, 0, 0)); /* nothing to read: the empty sum */
        OK(p_cuMemcpyDtoH_v2(&sum, out, 8));
        CHECK(sum == 0);
    }
    OK(launch(k_fill, 0, a + 4000, 0xffffffffu, 1, 4)); /* sums beyond 32 bits */
    OK(launch(k_sum, 1, out, a + 4000, 0, 4));
    CHECK(*(uint64_t *)(uintptr_t)out == 4 * 0xffffffffull);
    for (int form = 0; form < LAUNCH_FORMS; form++) {
        OK(p_cuMemsetD8_v2(b, 0, N));
        OK(launch(k_copy, form, b + 3, a + 1, 0, 3999)); /* bytes: no alignment needed */
        CHECK(memcmp(host(b + 3), host(a + 1), 3999) == 0 && host(b)[3 + 3999] == 0);
    }
    float x[4] = {1.5f, -2.0f, 0.25f, 3.0f};
    OK(p_cuMemcpyHtoD_v2(b, x, sizeof x));
    OK(launch(k_scale, 0, b, f32_bits(2.0f), 1, 4));
    OK(launch(k_scale, 3, b, f32_bits(-0.5f), 1, 3)); /* the last one stays 6 */
    OK(p_cuMemcpyDtoH_v2(x, b, sizeof x));
    CHECK(x[0] == -1.5f && x[1] == 2.0f && x[2] == -0.25f && x[3] == 6.0f);

    /* Refused launches leave memory as it was. */
    unsigned char before[4096];
    memcpy(before, host(a + N - sizeof before), sizeof before);
    uint64_t p0 = a, p2 = 4;
    uint32_t p1 = 7;
    void *params[3] = {&p0, &p1, &p2}, *holey[3] = {&p0, NULL, &p2};
    unsigned char buf[24] = {0};
    size_t size = 24, small = 20;
    void *no_ptr[] = {CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    void *bad_size[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &small,
                        CU_LAUNCH_PARAM_END};
    void *bad_key[] = {(void *)(uintptr_t)7, buf, CU_LAUNCH_PARAM_END};
    void *good[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                    NULL}; /* NULL ends the list too */
    CUstream s;
    OK(p_cuStreamCreate(&s, 0));
    RC(launch(k_fill, 0, a + N - 8, 1, 1, 4), CUDA_ERROR_ILLEGAL_ADDRESS); /* 8 bytes past */
    RC(launch(k_fill, 1, a + N, 1, 1, 1), CUDA_ERROR_ILLEGAL_ADDRESS);
    RC(launch(k_fill, 2, a + N - 4, 1, 1, 1ull << 62), CUDA_ERROR_ILLEGAL_ADDRESS); /* wraps */
    RC(launch(k_sum, 0, a + N - 8, a + N - 4, 0, 2), CUDA_ERROR_ILLEGAL_ADDRESS); /* reads past */
    RC(launch(k_copy, 3, a + N - 100, a, 0, 101), CUDA_ERROR_ILLEGAL_ADDRESS);
    RC(launch(k_copy, 3, a + N - 100, (CUdeviceptr)(uintptr_t)before, 0, 10),
       CUDA_ERROR_ILLEGAL_ADDRESS); /* host memory is not device memory */
    RC(launch(k_fill, 0, a + N - 6, 1, 1, 1), CUDA_ERROR_MISALIGNED_ADDRESS);
    RC(launch(k_sum, 0, a + N - 12, a, 0, 1), CUDA_ERROR_MISALIGNED_ADDRESS);
    RC(p_cuLaunchKernel(k_fill, 1, 1, 1, 32, 1, 1, 0, NULL, params, good),
       CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchKernel(k_fill, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchKernel(k_fill, 1, 1, 1, 32, 1, 1, 0, NULL, holey, NULL), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchKernel(k_fill, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, no_ptr),
       CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchKernel(k_fill, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, bad_size),
       CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchKernel(k_fill, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, bad_key),
       CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchKernel(k_fill, 0, 1, 1, 32, 1, 1, 0, NULL, params, NULL),
       CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchKernel(k_fill, 1, 1, 1, 1025, 1, 1, 0, NULL, params, NULL),
       CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchKernel(k_fill, 1, 1, 1, 32, 32, 2, 0, NULL, params, NULL),
       CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchKernel(k_fill, 1, 1, 1, 1, 1, 65, 0, NULL, params, NULL),
       CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchKernel(k_fill, 1, 65536, 1, 32, 1, 1, 0, NULL, params, NULL),
       CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchKernel(k_fill, 1, 1, 1, 32, 1, 1, 64 << 10, NULL, params, NULL),
       CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchKernel(k_fill, 1, 1, 1, 32, 1, 1, 0, (CUstream)buf, params, NULL),
       CUDA_ERROR_INVALID_HANDLE);
    RC(p_cuLaunchKernel((CUfunction)buf, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL),
       CUDA_ERROR_INVALID_HANDLE);
    CUlaunchConfig cfg = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
                          .blockDimY = 1, .blockDimZ = 1, .hStream = s, .numAttrs = 1};
    RC(p_cuLaunchKernelEx(&cfg, k_fill, params, NULL), CUDA_ERROR_INVALID_VALUE); /* no attrs */
    RC(p_cuLaunchKernelEx_ptsz(NULL, k_fill, params, NULL), CUDA_ERROR_INVALID_VALUE);
    /* The deprecated forms: parameters past the buffer, a size not the kernel's, a block
     * shape or grid of zero, and a multi-device list whose second entry is bad, none of
     * whose kernels may run. */
    RC(p_cuParamSetv(k_fill, 4092, &p0, 8), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuParamSetf(k_fill, -1, 1.0f), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuParamSetSize(k_fill, 4096), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuParamSetv((CUfunction)buf, 0, &p0, 8), CUDA_ERROR_INVALID_HANDLE);
    RC(p_cuFuncSetBlockShape(k_fill, 0, 1, 1), CUDA_ERROR_INVALID_VALUE);
    OK(p_cuParamSetv(k_fill, 0, &p0, 8));
    OK(p_cuParamSeti(k_fill, 8, p1));
    OK(p_cuParamSetv(k_fill, 16, &p2, 8));
    OK(p_cuParamSetSize(k_fill, 20));
    RC(p_cuLaunch(k_fill), CUDA_ERROR_INVALID_VALUE);
    OK(p_cuParamSetSize(k_fill, 24));
    RC(p_cuLaunchGrid(k_fill, 0, 1), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchGridAsync(k_fill, 1, 1, (CUstream)buf), CUDA_ERROR_INVALID_HANDLE);
    CUDA_LAUNCH_PARAMS two[2] = {
        {.function = k_fill, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
         .blockDimY = 1, .blockDimZ = 1, .hStream = s, .kernelParams = params},
        {.function = k_fill, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
         .blockDimY = 1, .blockDimZ = 1, .hStream = s, .kernelParams = holey}};
    RC(p_cuLaunchCooperativeKernelMultiDevice(two, 2, 0), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchCooperativeKernelMultiDevice(two, 1, 4), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuLaunchCooperativeKernelMultiDevice(NULL, 1, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(memcmp(before, host(a + N - sizeof before), sizeof before) == 0);
    /* ... and their good launches run: the last set of parameters, every entry of a list. */
    OK(p_cuLaunch(k_fill));
    CHECK(u32(a)[0] == 7 && u32(a)[3] == 7 && u32(a)[4] != 7);
    two[1].kernelParams = params;
    p1 = 9;
    OK(p_cuLaunchCooperativeKernelMultiDevice(two, 2, 0));
    CHECK(u32(a)[0] == 9 && u32(a)[3] == 9);
    p1 = 7;
    /* The same launches, well-formed, on a stream; both ways of passing work. */
    p0 = a + N - 16;
    memcpy(buf, &p0, 8), memcpy(buf + 8, &p1, 4), memcpy(buf + 16, &p2, 8);
    OK(p_cuLaunchKernel(k_fill, 1, 1, 1, 32, 1, 1, 0, s, NULL, good));
    CHECK(u32(a + N - 16)[0] == 7 && u32(a + N - 16)[3] == 7);
    p1 = 8;
    cfg.numAttrs = 0;
    OK(p_cuLaunchKernelEx_ptsz(&cfg, k_fill, params, NULL));
    CHECK(u32(a + N - 16)[0] == 8 && u32(a + N - 16)[3] == 8);

    /* Counters: calls by base name, and bytes of successful launches only. */
    p_fakecuda_reset_counters();
    CHECK(p_fakecuda_kernel_bytes(0) == 0 && p_fakecuda_kernel_bytes(1) == 0);
    OK(launch(k_fill, 0, a, 5, 1, 100));      /* writes 400 bytes */
    OK(launch(k_sum, 3, out, a, 0, 100));     /* writes 8, reads 400 */
    OK(launch(k_copy, 2, b, a, 0, 1000));     /* writes 1000, reads 1000 */
    OK(launch(k_scale, 1, b, f32_bits(1.0f), 1, 10)); /* reads and writes the same 40 */
    RC(launch(k_fill, 0, a + N, 5, 1, 100), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(p_fakecuda_kernel_bytes(0) == 400 + 408 + 2000 + 40);
    CHECK(p_fakecuda_kernel_bytes(1) == 0);
    CHECK(p_fakecuda_calls("cuLaunchKernel") == 4 && p_fakecuda_calls("cuLaunchKernelEx") == 1);
    CHECK(*(uint64_t *)(uintptr_t)out == 500);

    /* Injected failures: nothing runs. */
    CHECK(p_fakecuda_set_fail("cuLaunchKernel:1,cuLaunchKernelEx:1:CUDA_ERROR_LAUNCH_FAILED") == 0);
    RC(launch(k_fill, 3, a, 6, 1, 100), CUDA_ERROR_UNKNOWN); /* _ptsz counts as the base */
    RC(launch(k_fill, 2, a, 6, 1, 100), CUDA_ERROR_LAUNCH_FAILED);
    CHECK(u32(a)[0] == 5 && p_fakecuda_kernel_bytes(0) == 2848);
    OK(launch(k_fill, 0, a, 6, 1, 100));
    CHECK(u32(a)[99] == 6);
    CHECK(p_fakecuda_set_fail(NULL) == 0);

    OK(p_cuStreamDestroy_v2(s));
    OK(p_cuMemFree_v2(a));
    OK(p_cuMemFree_v2(b));
    OK(p_cuMemFree_v2(out));
    RC(launch(k_fill, 0, a, 6, 1, 1), CUDA_ERROR_ILLEGAL_ADDRESS); /* freed */
}

/* On VMM mappings: [0,G) DEVICE, [G,2G) HOST_NUMA, [2G,3G) unmapped, [3G,4G) DEVICE with
 * its access changed along the way. Bytes are counted by what backs them. */
static void t_kernels_vmm(void)
{
    CUmemAllocationProp dp = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemAllocationProp hp = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
    CUmemAccessDesc rw = access_desc(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUmemAccessDesc ro = access_desc(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    CUmemGenericAllocationHandle hd, hh, hr;
    CUdeviceptr va, out;
    uint64_t sum;
    OK(p_cuMemAddressReserve(&va, 4 * G, 0, 0, 0));
    OK(p_cuMemCreate(&hd, G, &dp, 0));
    OK(p_cuMemCreate(&hh, G, &hp, 0));
    OK(p_cuMemCreate(&hr, G, &dp, 0));
    OK(p_cuMemMap(va, G, 0, hd, 0));
    OK(p_cuMemMap(va + G, G, 0, hh, 0));
    OK(p_cuMemMap(va + 3 * G, G, 0, hr, 0));
    OK(p_cuMemAlloc_v2(&out, 8));

    /* Mapped but no access yet: PROT_NONE, and an illegal address for kernels. */
    RC(launch(k_fill, 0, va, 1, 1, 1), CUDA_ERROR_ILLEGAL_ADDRESS);
    OK(p_cuMemSetAccess(va, 2 * G, &rw, 1));
    OK(p_cuMemSetAccess(va + 3 * G, G, &rw, 1));
    p_fakecuda_reset_counters();

    /* 2048 words across the DEVICE/HOST_NUMA boundary: 4096 bytes on each side. */
    OK(launch(k_fill, 1, va + G - 4096, 9, 1, 2048));
    /* past what was written, the allocation's 0xff bytes: cuMemCreate's memory is not zeroed */
    CHECK(u32(va + G - 4096)[0] == 9 && u32(va + G)[1023] == 9 && u32(va + G)[1024] == STALE);
    CHECK(p_fakecuda_kernel_bytes(0) == 4096 && p_fakecuda_kernel_bytes(1) == 4096);
    OK(launch(k_sum, 0, out, va + G - 4096, 0, 2048)); /* + 8 + 4096 device, 4096 host */
    OK(p_cuMemcpyDtoH_v2(&sum, out, 8));
    CHECK(sum == 2048 * 9);
    CHECK(p_fakecuda_kernel_bytes(0) == 8200 && p_fakecuda_kernel_bytes(1) == 8192);
    float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    memcpy(host(va + G + 8192), x, sizeof x);
    OK(launch(k_scale, 2, va + G + 8192, f32_bits(-0.5f), 1, 4)); /* 16 host bytes */
    memcpy(x, host(va + G + 8192), sizeof x);
    CHECK(x[0] == -0.5f && x[1] == -1.0f && x[2] == -1.5f && x[3] == -2.0f);
    OK(launch(k_copy, 3, va + 3 * G, va + G, 0, 8192)); /* 8192 device, 8192 host */
    CHECK(u32(va + 3 * G)[1023] == 9 && u32(va + 3 * G)[1024] == STALE);
    CHECK(p_fakecuda_kernel_bytes(0) == 16392 && p_fakecuda_kernel_bytes(1) == 16400);

    /* Unmapped, and read-only, memory; all refused before anything is touched. */
    RC(launch(k_fill, 0, va + 2 * G, 1, 1, 1), CUDA_ERROR_ILLEGAL_ADDRESS);
    RC(launch(k_fill, 0, va + 2 * G - 8, 1, 1, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
    RC(launch(k_copy, 1, va, va + 2 * G - 16, 0, 32), CUDA_ERROR_ILLEGAL_ADDRESS);
    OK(p_cuMemSetAccess(va + 3 * G, G, &ro, 1));
    RC(launch(k_fill, 0, va + 3 * G, 1, 1, 1), CUDA_ERROR_ILLEGAL_ADDRESS);
    RC(launch(k_scale, 0, va + 3 * G, f32_bits(2.0f), 1, 1), CUDA_ERROR_ILLEGAL_ADDRESS);
    RC(launch(k_sum, 0, va + 3 * G, va, 0, 1), CUDA_ERROR_ILLEGAL_ADDRESS); /* out read-only */
    OK(launch(k_sum, 1, out, va + 3 * G, 0, 1024)); /* reading is allowed */
    OK(p_cuMemcpyDtoH_v2(&sum, out, 8));
    CHECK(sum == 1024 * 9);
    CHECK(u32(va + 2 * G - 8)[0] == STALE && u32(va)[0] == STALE);
    CHECK(p_fakecuda_kernel_bytes(0) == 16392 + 8 + 4096 && p_fakecuda_kernel_bytes(1) == 16400);

    OK(p_cuMemFree_v2(out));
    OK(p_cuMemUnmap(va, G));
    OK(p_cuMemUnmap(va + G, G));
    OK(p_cuMemUnmap(va + 3 * G, G));
    OK(p_cuMemAddressFree(va, 4 * G));
    OK(p_cuMemRelease(hd));
    OK(p_cuMemRelease(hh));
    OK(p_cuMemRelease(hr));
    RC(launch(k_fill, 0, va, 1, 1, 1), CUDA_ERROR_ILLEGAL_ADDRESS); /* the reservation is gone */
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(uint64_t n) /* 0..n-1, xorshift64* */
{
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return (g_rng * 0x2545f4914f6cdd1dull >> 11) % n;
}

/* Random fills, sums and copies on two 64 KiB buffers (cuMemAlloc memory, and the last
 * 64 KiB of a DEVICE mapping followed by unmapped reservation) against a host model; a
 * fifth of the ranges run past a buffer's end and must be refused, changing nothing.
 * The kernel byte counter must equal the bytes of the accepted ranges. */
static void t_kernels_random(void)
{
    enum { N = 64 * 1024 };
    static unsigned char model[2][N];
    CUmemAllocationProp dp = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemAccessDesc rw = access_desc(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va, buf[2], out;
    OK(p_cuMemAddressReserve(&va, 2 * G, 0, 0, 0));
    OK(p_cuMemCreate(&h, G, &dp, 0));
    OK(p_cuMemMap(va, G, 0, h, 0));
    OK(p_cuMemSetAccess(va, G, &rw, 1));
    OK(p_cuMemAlloc_v2(&buf[0], N));
    OK(p_cuMemAlloc_v2(&out, 8));
    buf[1] = va + G - N;
    for (int b = 0; b < 2; b++) {
        for (size_t i = 0; i < N; i++) model[b][i] = (unsigned char)rnd(256);
        memcpy(host(buf[b]), model[b], N);
    }
    /* Overruns only where the page after a buffer is no device memory: always so for the
     * reservation, and so for the cuMemAlloc block unless mmap placed one just after it. */
    int guarded[2];
    for (int b = 0; b < 2; b++) {
        size_t sz;
        guarded[b] = p_cuPointerGetAttribute(&sz, CU_POINTER_ATTRIBUTE_RANGE_SIZE, buf[b] + N) ==
                     CUDA_ERROR_INVALID_VALUE;
    }
    CHECK(guarded[1]);
    p_fakecuda_reset_counters();
    unsigned long long bytes = 0;
    int refused = 0, same = 1;
    for (int it = 0; it < 400; it++) {
        int op = (int)rnd(3), form = (int)rnd(4), db = (int)rnd(2), sb = (int)rnd(2);
        int over = rnd(5) == 0;
        size_t doff, soff, n, nbytes;
        CUresult rc;
        if (op == 0) { /* fill: 4-byte words */
            over &= guarded[db];
            doff = 4 * rnd(N / 4 + 1);
            n = (N - doff) / 4;
            n = over ? n + 1 + rnd(8) : rnd(n + 1);
            uint32_t v = (uint32_t)rnd(1ull << 32);
            rc = launch(k_fill, form, buf[db] + doff, v, 1, n);
            nbytes = 4 * n;
            if (!over)
                for (size_t i = 0; i < n; i++) memcpy(&model[db][doff + 4 * i], &v, 4);
        } else if (op == 1) { /* sum into `out` */
            over &= guarded[sb];
            soff = 4 * rnd(N / 4 + 1);
            n = (N - soff) / 4;
            n = over ? n + 1 + rnd(8) : rnd(n + 1);
            rc = launch(k_sum, form, out, buf[sb] + soff, 0, n);
            nbytes = 8 + 4 * n;
            uint64_t want = 0, got;
            for (size_t i = 0; !over && i < n; i++) {
                uint32_t w;
                memcpy(&w, &model[sb][soff + 4 * i], 4);
                want += w;
            }
            memcpy(&got, host(out), 8);
            if (!over && rc == CUDA_SUCCESS && got != want) same = 0;
        } else { /* copy: any bytes, overlapping when in the same buffer */
            over &= guarded[db] && guarded[sb];
            doff = rnd(N + 1), soff = rnd(N + 1);
            n = N - (doff > soff ? doff : soff);
            n = over ? n + 1 + rnd(8) : rnd(n + 1);
            rc = launch(k_copy, form, buf[db] + doff, buf[sb] + soff, 0, n);
            nbytes = 2 * n;
            if (!over) memmove(&model[db][doff], &model[sb][soff], n);
        }
        if (rc != (over ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS)) {
            printf("  iteration %d: op %d over %d returned %d\n", it, op, over, (int)rc);
            same = 0;
        }
        refused += over;
        if (!over) bytes += nbytes;
        for (int b = 0; b < 2; b++) same &= memcmp(host(buf[b]), model[b], N) == 0;
    }
    CHECK(same);
    CHECK(refused > 20); /* the refusals were exercised */
    CHECK(p_fakecuda_kernel_bytes(0) == bytes && p_fakecuda_kernel_bytes(1) == 0);
    OK(p_cuMemFree_v2(buf[0]));
    OK(p_cuMemFree_v2(out));
    OK(p_cuMemUnmap(va, G));
    OK(p_cuMemAddressFree(va, 2 * G));
    OK(p_cuMemRelease(h));
}

/* ---- the fake NVML ---- */

/* nvml.h's ABI, written out independently of fakenvml.c. */
typedef struct { unsigned long long total, free, used; } nvml_memory;
typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} nvml_memory_v2;
_Static_assert(sizeof(nvml_memory_v2) == 40, "nvmlMemory_v2_t");
#define NVML_MEMORY_V2 0x02000028u /* NVML_STRUCT_VERSION(Memory, 2): 40 | 2 << 24 */

/* Checks the fake NVML: `devices` devices of `mem` bytes; init fails when `bad_env`. */
static void check_nvml(unsigned devices, unsigned long long mem, int bad_env)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL);
    if (!lib) return;
    int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    int (*shutdown)(void) = (int (*)(void))dlsym(lib, "nvmlShutdown");
    int (*count)(unsigned *) = (int (*)(unsigned *))dlsym(lib, "nvmlDeviceGetCount_v2");
    int (*handle)(unsigned, void **) =
        (int (*)(unsigned, void **))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    int (*info)(void *, nvml_memory *) =
        (int (*)(void *, nvml_memory *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
    int (*info2)(void *, nvml_memory_v2 *) =
        (int (*)(void *, nvml_memory_v2 *))dlsym(lib, "nvmlDeviceGetMemoryInfo_v2");
    const char *(*error)(int) = (const char *(*)(int))dlsym(lib, "nvmlErrorString");
    CHECK(init && shutdown && count && handle && info && info2 && error);
    if (!(init && shutdown && count && handle && info && info2 && error)) return;
    unsigned n = 99;
    void *dev = NULL;
    CHECK(count(&n) == 1); /* NVML_ERROR_UNINITIALIZED */
    if (bad_env) {
        CHECK(init() == 999); /* NVML_ERROR_UNKNOWN */
        return;
    }
    CHECK(init() == 0 && init() == 0); /* reference-counted */
    CHECK(count(&n) == 0 && n == devices);
    for (unsigned i = 0; i < devices; i++) {
        nvml_memory m = {1, 2, 3};
        nvml_memory_v2 m2 = {NVML_MEMORY_V2, 1, 2, 3, 4};
        CHECK(handle(i, &dev) == 0 && dev != NULL);
        CHECK(info(dev, &m) == 0);
        CHECK(m.total == mem && m.free == mem && m.used == 0);
        CHECK(info2(dev, &m2) == 0);
        CHECK(m2.version == NVML_MEMORY_V2 && m2.total == mem && m2.free == mem &&
              m2.used == 0 && m2.reserved == 0);
        m2.version = 1;
        CHECK(info2(dev, &m2) == 25); /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
        CHECK(info(dev, NULL) == 2);  /* NVML_ERROR_INVALID_ARGUMENT */
    }
    CHECK(handle(devices, &dev) == 2);
    CHECK(info(&n, &(nvml_memory){0, 0, 0}) == 2); /* not a device handle */
    CHECK(strcmp(error(0), "Success") == 0 && strcmp(error(2), "Invalid Argument") == 0);
    CHECK(shutdown() == 0 && count(&n) == 0); /* still initialized once */
    CHECK(shutdown() == 0 && count(&n) == 1 && shutdown() == 1);
}

static void t_proc_address(void)
{
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    OK(p_cuGetProcAddress_v2("cuMemcpyHtoDAsync", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    CHECK(fn == (void *)p_cuMemcpyHtoDAsync_v2);
    CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS);
    OK(p_cuGetProcAddress_v2("cuInit", &fn, 12000, 0, NULL));
    CHECK(fn == (void *)p_cuInit);
    OK(p_cuGetProcAddress_v2("cuGetProcAddress", &fn, 13000, 0, &st));
    CHECK(fn == (void *)p_cuGetProcAddress_v2);
    RC(p_cuGetProcAddress_v2("cuNonsenseFunction", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
    CHECK(fn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    RC(p_cuGetProcAddress_v2("fakecuda_calls", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
    RC(p_cuGetProcAddress_v2("cuserid", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND); /* libc's */
    RC(p_cuGetProcAddress_v2("cuInit", &fn, 99000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    /* Only the versioned names are exported, so a dlsym of a legacy name cannot succeed. */
    CHECK(dlsym(g_lib, "cuMemcpyHtoDAsync") == NULL);

    /* Base names map to the exports a caller of that version gets; with the per-thread flag,
     * to the _ptsz/_ptds variant where the real library has one, else the legacy one. */
    const cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    const cuuint64_t legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    struct {
        const char *name;
        cuuint64_t flags;
        int version;
        void *want;
    } cases[] = {
        {"cuLaunchKernel", 0, 13000, (void *)p_cuLaunchKernel},
        {"cuLaunchKernel", legacy, 13000, (void *)p_cuLaunchKernel},
        {"cuLaunchKernel", pt, 13000, (void *)p_cuLaunchKernel_ptsz},
        {"cuLaunchKernelEx", pt, 12000, (void *)p_cuLaunchKernelEx_ptsz},
        {"cuLaunchKernelEx", 0, 11060, (void *)p_cuLaunchKernelEx},
        {"cuMemcpyHtoDAsync", pt, 13000, (void *)p_cuMemcpyHtoDAsync_v2_ptsz},
        {"cuMemcpyHtoD", pt, 13000, (void *)p_cuMemcpyHtoD_v2_ptds},
        {"cuMemcpyDtoH", pt, 13000, (void *)p_cuMemcpyDtoH_v2_ptds},
        {"cuMemcpyDtoHAsync", 0, 13000, (void *)p_cuMemcpyDtoHAsync_v2},
        {"cuMemcpyDtoHAsync", pt, 13000, (void *)p_cuMemcpyDtoHAsync_v2_ptsz},
        {"cuMemcpyDtoD", 0, 13000, (void *)p_cuMemcpyDtoD_v2},
        {"cuMemcpyDtoD", pt, 13000, (void *)p_cuMemcpyDtoD_v2_ptds},
        {"cuMemsetD8", 0, 13000, (void *)p_cuMemsetD8_v2},
        {"cuMemsetD8", pt, 13000, (void *)p_cuMemsetD8_v2_ptds},
        {"cuMemAllocAsync", pt, 13000, (void *)p_cuMemAllocAsync_ptsz},
        {"cuMemFreeAsync", 0, 13000, (void *)p_cuMemFreeAsync},
        {"cuMemFreeAsync", pt, 13000, (void *)p_cuMemFreeAsync_ptsz},
        {"cuStreamSynchronize", pt, 13000, (void *)p_cuStreamSynchronize_ptsz},
        {"cuEventRecord", pt, 13000, (void *)p_cuEventRecord_ptsz},
        {"cuMemAlloc", pt, 13000, (void *)p_cuMemAlloc_v2}, /* no per-thread variant */
        {"cuMemAllocPitch", 0, 13000, (void *)p_cuMemAllocPitch_v2},
        {"cuCtxSynchronize", 0, 13000, (void *)p_cuCtxSynchronize_v2}, /* CUDA 13: _v2(ctx) */
        {"cuCtxSynchronize", 0, 12080, (void *)p_cuCtxSynchronize},
        {"cuGetProcAddress", 0, 12000, (void *)p_cuGetProcAddress_v2},
        {"cuGetProcAddress", 0, 11080, (void *)p_cuGetProcAddress},
        {"cuFuncGetParamInfo", 0, 12040, (void *)p_cuFuncGetParamInfo},
        {"cuModuleLoadData", 0, 13000, (void *)p_cuModuleLoadData},
        {"cuModuleUnload", 0, 13000, (void *)p_cuModuleUnload},
        {"cuModuleGetFunction", 0, 13000, (void *)p_cuModuleGetFunction},
        {"cuIpcGetMemHandle", 0, 13000, (void *)p_cuIpcGetMemHandle},
        {"cuPointerGetAttribute", 0, 13000, (void *)p_cuPointerGetAttribute},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fn = NULL;
        OK(p_cuGetProcAddress_v2(cases[i].name, &fn, cases[i].version, cases[i].flags, &st));
        if (fn != cases[i].want) printf("  %s (flags %d, version %d)\n", cases[i].name,
                                        (int)cases[i].flags, cases[i].version);
        CHECK(fn == cases[i].want && st == CU_GET_PROC_ADDRESS_SUCCESS);
        fn = NULL; /* the CUDA 11.3 entry point answers the same */
        OK(p_cuGetProcAddress(cases[i].name, &fn, cases[i].version, cases[i].flags));
        CHECK(fn == cases[i].want);
    }
    /* Too new for the caller: found, but not for that version. */
    RC(p_cuGetProcAddress_v2("cuFuncGetParamInfo", &fn, 12030, 0, &st), CUDA_ERROR_NOT_FOUND);
    CHECK(fn == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    RC(p_cuGetProcAddress_v2("cuMemAllocAsync", &fn, 11010, pt, &st), CUDA_ERROR_NOT_FOUND);
    CHECK(fn == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    RC(p_cuGetProcAddress("cuNonsenseFunction", &fn, 13000, 0), CUDA_ERROR_NOT_FOUND);
    RC(p_cuGetProcAddress("cuInit", &fn, 13000, 1u << 5), CUDA_ERROR_INVALID_VALUE);

    /* The request log: each valid request in order, with the fake's answer (NULL when it
     * found nothing); malformed ones are not logged. */
    const char *sym = NULL;
    int ver = 0;
    unsigned long long fl = 0;
    void *ans = (void *)1;
    size_t n0 = p_fakecuda_getproc_request(0, &sym, &ver, &fl, &ans);
    OK(p_cuGetProcAddress_v2("cuLaunchKernel", &fn, 12000, pt, &st));
    RC(p_cuGetProcAddress_v2("cuInit", &fn, 99000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    RC(p_cuGetProcAddress("cuNonsenseFunction", &fn, 11080, 0), CUDA_ERROR_NOT_FOUND);
    CHECK(p_fakecuda_getproc_request(n0, &sym, &ver, &fl, &ans) == n0 + 2);
    CHECK(strcmp(sym, "cuLaunchKernel") == 0 && ver == 12000 && fl == pt &&
          ans == (void *)p_cuLaunchKernel_ptsz);
    CHECK(p_fakecuda_getproc_request(n0 + 1, &sym, &ver, &fl, &ans) == n0 + 2);
    CHECK(strcmp(sym, "cuNonsenseFunction") == 0 && ver == 11080 && fl == 0 && ans == NULL);
    sym = "untouched";
    CHECK(p_fakecuda_getproc_request(n0 + 2, &sym, &ver, &fl, &ans) == n0 + 2);
    CHECK(strcmp(sym, "untouched") == 0);

    /* The per-thread variants count as their base function. */
    p_fakecuda_reset_counters();
    OK(p_cuStreamSynchronize_ptsz(NULL));
    OK(p_cuStreamSynchronize(NULL));
    CHECK(p_fakecuda_calls("cuStreamSynchronize") == 2);
    CHECK(p_fakecuda_calls("cuStreamSynchronize_ptsz") == 2);
    CHECK(p_fakecuda_calls("cuGetProcAddress") == 0);
}

static void t_errors(void)
{
    const char *s = NULL;
    OK(p_cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
    CHECK(s && strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
    OK(p_cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
    CHECK(s && strcmp(s, "out of memory") == 0);
    CUresult codes[] = {CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_INITIALIZED,
                        CUDA_ERROR_NO_DEVICE, CUDA_ERROR_INVALID_DEVICE,
                        CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_CONTEXT_IS_DESTROYED,
                        CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_NOT_FOUND, CUDA_ERROR_NOT_READY,
                        CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                        CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, CUDA_ERROR_NOT_SUPPORTED,
                        CUDA_ERROR_UNKNOWN};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        s = NULL;
        OK(p_cuGetErrorName(codes[i], &s));
        CHECK(s && strncmp(s, "CUDA_", 5) == 0);
        s = NULL;
        OK(p_cuGetErrorString(codes[i], &s));
        CHECK(s && *s);
    }
    RC(p_cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    CHECK(s == NULL);
}

static void *no_ctx_thread(void *arg)
{
    CUresult *rc = arg;
    CUcontext cur = (CUcontext)1;
    unsigned char b[4] = {0};
    rc[0] = p_cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)b, b, 4);
    rc[1] = p_cuCtxGetCurrent(&cur);
    rc[2] = cur == NULL ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
    return NULL;
}

static void t_threads_and_release(void)
{
    CUresult rc[3];
    pthread_t t;
    pthread_create(&t, NULL, no_ctx_thread, rc);
    pthread_join(t, NULL);
    CHECK(rc[0] == CUDA_ERROR_INVALID_CONTEXT); /* the context is per thread */
    CHECK(rc[1] == CUDA_SUCCESS && rc[2] == CUDA_SUCCESS);

    /* The last release destroys the primary context with its streams and cuMemAlloc memory. */
    CUstream s;
    CUdeviceptr d;
    CUcontext again;
    OK(p_cuStreamCreate(&s, 0));
    OK(p_cuMemAlloc_v2(&d, MiB));
    OK(p_cuDevicePrimaryCtxRetain(&again, 0));
    CHECK(again == g_ctx);
    OK(p_cuDevicePrimaryCtxRelease_v2(0));
    OK(p_cuStreamSynchronize(s)); /* still retained once */
    OK(p_cuDevicePrimaryCtxRelease_v2(0));
    RC(p_cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
    RC(p_cuStreamSynchronize(s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    OK(p_cuDevicePrimaryCtxRetain(&again, 0));
    RC(p_cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
    CUfunction f;
    RC(p_cuModuleGetFunction(&f, g_mod, "fk_copy"), CUDA_ERROR_INVALID_HANDLE); /* unloaded */
    RC(launch(k_copy, 0, d, d, 0, 0), CUDA_ERROR_INVALID_HANDLE);
    CHECK(free_mem() == TOTAL);
    OK(p_cuCtxSetCurrent(NULL));
    RC(p_cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
    OK(p_cuDevicePrimaryCtxRelease_v2(0));
}

/* ---- scenarios with another environment, each in a child process ---- */

static void child_main(const char *name)
{
    CUmemAllocationProp dev0 = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemAllocationProp hostn = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    CUcontext ctx;
    int v = -1;
    load();
    if (strcmp(name, "no_device") == 0) {
        RC(p_cuInit(0), CUDA_ERROR_NO_DEVICE);
        RC(p_cuDeviceGetCount(&v), CUDA_ERROR_NOT_INITIALIZED);
        check_nvml(0, 0, 0);
    } else if (strcmp(name, "bad_env") == 0) {
        RC(p_cuInit(0), CUDA_ERROR_INVALID_VALUE);
        check_nvml(0, 0, 1);
    } else if (strcmp(name, "host_numa_off") == 0) {
        OK(p_cuInit(0));
        OK(p_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
        CHECK(v == 0);
        RC(p_cuMemCreate(&h, 2 * MiB, &hostn, 0), CUDA_ERROR_NOT_SUPPORTED);
        OK(p_cuMemCreate(&h, 2 * MiB, &dev0, 0));
        OK(p_cuMemRelease(h));
    } else if (strcmp(name, "env_faults") == 0) {
        /* FAKECUDA_FAIL=cuMemCreate:2, FAKECUDA_FAIL_FROM=cuMemAddressReserve:2:... */
        OK(p_cuInit(0));
        OK(p_cuMemCreate(&h, 2 * MiB, &dev0, 0));
        OK(p_cuMemRelease(h));
        RC(p_cuMemCreate(&h, 2 * MiB, &dev0, 0), CUDA_ERROR_OUT_OF_MEMORY);
        OK(p_cuMemCreate(&h, 2 * MiB, &dev0, 0));
        OK(p_cuMemRelease(h));
        OK(p_cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0));
        OK(p_cuMemAddressFree(va, 2 * MiB));
        RC(p_cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0), CUDA_ERROR_UNKNOWN);
        RC(p_cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0), CUDA_ERROR_UNKNOWN);
        CHECK(p_fakecuda_live_reservations() == 0);
    } else if (strcmp(name, "config") == 0) {
        /* FAKECUDA_DEVICES=2 FAKECUDA_MEM=64M FAKECUDA_GRANULARITY=64K
         * FAKECUDA_COPY_DELAY_US=30000 */
        char bus[32];
        size_t g = 0, f = 0, t = 0;
        CUmemAllocationProp dev1 = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 1);
        CUmemAccessDesc rw = access_desc(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
        OK(p_cuInit(0));
        OK(p_cuDeviceGetCount(&v));
        CHECK(v == 2);
        OK(p_cuDeviceGetPCIBusId(bus, sizeof bus, 1));
        CHECK(strcmp(bus, "0000:fe:01.0") == 0);
        OK(p_cuMemGetAllocationGranularity(&g, &dev1, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        CHECK(g == 64 * 1024);
        RC(p_cuMemCreate(&h, 64 * MiB + g, &dev1, 0), CUDA_ERROR_OUT_OF_MEMORY);
        OK(p_cuMemCreate(&h, 64 * MiB, &dev1, 0));
        OK(p_cuDevicePrimaryCtxRetain(&ctx, 0));
        OK(p_cuCtxSetCurrent(ctx));
        OK(p_cuMemGetInfo_v2(&f, &t));
        CHECK(t == 64 * MiB && f == t); /* device 0 is untouched */
        OK(p_cuMemRelease(h));
        unsigned char b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        OK(p_cuMemCreate(&h, g, &dev0, 0));
        OK(p_cuMemAddressReserve(&va, g, 0, 0, 0));
        OK(p_cuMemMap(va, g, 0, h, 0));
        OK(p_cuMemSetAccess(va, g, &rw, 1));
        double t0 = now_ms();
        OK(p_cuMemcpyHtoD_v2(va, b, 8));
        CHECK(now_ms() - t0 >= 29.0); /* the delay is a lower bound, not a speed claim */
        CHECK(host(va)[7] == 8);
        OK(p_cuMemUnmap(va, g));
        OK(p_cuMemAddressFree(va, g));
        OK(p_cuMemRelease(h));
        check_nvml(2, 64 * MiB, 0);
    } else {
        printf("unknown scenario %s\n", name);
        g_fail++;
    }
    printf("  [%s] %d passed, %d failed\n", name, g_pass, g_fail);
    exit(g_fail ? 1 : 0);
}

static void run_child(const char *name, const char *const *env)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        for (; *env; env += 2) setenv(env[0], env[1], 1);
        execl("/proc/self/exe", "test_fakecuda", name, (char *)NULL);
        perror("execl");
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    int ok = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok) g_pass++;
    else g_fail++, printf("FAIL child scenario %s (status %d)\n", name, status);
}

static const char *const fk_vars[] = {
    "FAKECUDA_DEVICES", "FAKECUDA_MEM", "FAKECUDA_GRANULARITY", "FAKECUDA_HOST_NUMA",
    "FAKECUDA_NO_DEVICE", "FAKECUDA_COPY_DELAY_US", "FAKECUDA_FAIL", "FAKECUDA_FAIL_FROM",
};

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* keep what was printed if a check crashes */
    if (argc > 1) child_main(argv[1]); /* run_child set its environment */
    /* The default configuration, whatever the caller's environment. */
    for (size_t i = 0; i < sizeof fk_vars / sizeof fk_vars[0]; i++) unsetenv(fk_vars[i]);

    load();
    t_before_init();
    t_device();
    t_context();
    t_vmm();
    t_host_numa();
    t_memory_limits();
    t_host_register();
    t_fault_injection();
    t_streams_events();
    t_memory_extras();
    t_copies_memsets();
    t_modules();
    t_kernels_devmem();
    t_kernels_vmm();
    t_kernels_random();
    t_libraries();
    t_graphs();
    t_graph_copies();
    t_graph_edges();
    t_proc_address();
    t_errors();
    t_threads_and_release();
    CHECK(p_fakecuda_live_handles() == 0);
    CHECK(p_fakecuda_live_reservations() == 0);
    CHECK(p_fakecuda_mapped_bytes() == 0);
    check_nvml(1, 1ull << 30, 0);

    run_child("no_device", (const char *const[]){"FAKECUDA_NO_DEVICE", "1", NULL});
    run_child("bad_env", (const char *const[]){"FAKECUDA_MEM", "12Q", NULL});
    run_child("host_numa_off", (const char *const[]){"FAKECUDA_HOST_NUMA", "0", NULL});
    run_child("env_faults",
              (const char *const[]){"FAKECUDA_FAIL", "cuMemCreate:2", "FAKECUDA_FAIL_FROM",
                                    "cuMemAddressReserve:2:CUDA_ERROR_UNKNOWN", NULL});
    run_child("config",
              (const char *const[]){"FAKECUDA_DEVICES", "2", "FAKECUDA_MEM", "64M",
                                    "FAKECUDA_GRANULARITY", "64K", "FAKECUDA_COPY_DELAY_US",
                                    "30000", NULL});

    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
