/*
 * Tests of the fake CUDA driver (tests/fakecuda): the fake is what CI uses in place of the
 * real driver, so its semantics must be right before anything is tested against it.
 *
 * The fake is loaded with dlopen("libcuda.so.1") (LD_LIBRARY_PATH points to it) and reached
 * only through dlsym, as the CUDA backend does. Scenarios that need a different environment
 * (the fake reads it once) run in a re-executed copy of this program: `test_fakecuda NAME`.
 */
#define _GNU_SOURCE
#include <cuda.h>

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
    X(cuMemHostUnregister) X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuStreamSynchronize)      \
    X(cuMemcpyHtoDAsync_v2) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuEventCreate)             \
    X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize) X(cuEventDestroy_v2)
#define FK_FUNCS(X)                                                                            \
    X(fakecuda_calls) X(fakecuda_live_handles) X(fakecuda_mapped_bytes)                        \
    X(fakecuda_live_reservations) X(fakecuda_reset_counters) X(fakecuda_set_fail)              \
    X(fakecuda_stream_hold)

#define DECLARE(name) static __typeof__(name) *p_##name;
CU_FUNCS(DECLARE)
FK_FUNCS(DECLARE)

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
    CU_FUNCS(LOAD)
    FK_FUNCS(LOAD)
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
    CUresult rc;
    int done;
};

static void *wait_thread(void *arg)
{
    struct waiter *w = arg;
    p_cuCtxSetCurrent(g_ctx);
    w->rc = w->ev ? p_cuEventSynchronize(w->ev) : p_cuStreamSynchronize(w->stream);
    __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Starts a thread that waits for the event (or the stream), checks it is still waiting
 * while held, releases the stream and checks the wait ends. */
static void check_blocks_until_release(CUevent ev, CUstream stream, CUstream held, int line)
{
    struct waiter w = {ev, stream, CUDA_ERROR_UNKNOWN, 0};
    pthread_t t;
    pthread_create(&t, NULL, wait_thread, &w);
    sleep_ms(50);
    check(!__atomic_load_n(&w.done, __ATOMIC_SEQ_CST), "waiter blocks while held", line);
    p_fakecuda_stream_hold(held, 0);
    pthread_join(t, NULL);
    check(w.done && w.rc == CUDA_SUCCESS, "waiter returns once released", line);
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
    check_blocks_until_release(e, NULL, s, __LINE__);
    OK(p_cuEventQuery(e));
    p_fakecuda_stream_hold(s, 1);
    check_blocks_until_release(NULL, s, s, __LINE__);

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

    RC(p_cuStreamDestroy_v2(NULL), CUDA_ERROR_INVALID_HANDLE);
    OK(p_cuEventDestroy_v2(e3));
    RC(p_cuEventQuery(e3), CUDA_ERROR_INVALID_HANDLE);
    RC(p_cuEventDestroy_v2(e3), CUDA_ERROR_INVALID_HANDLE);
    OK(p_cuEventDestroy_v2(e));
    OK(p_cuEventDestroy_v2(before));
    OK(p_cuStreamDestroy_v2(s));
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
    } else if (strcmp(name, "bad_env") == 0) {
        RC(p_cuInit(0), CUDA_ERROR_INVALID_VALUE);
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
    t_proc_address();
    t_errors();
    t_threads_and_release();
    CHECK(p_fakecuda_live_handles() == 0);
    CHECK(p_fakecuda_live_reservations() == 0);
    CHECK(p_fakecuda_mapped_bytes() == 0);

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
