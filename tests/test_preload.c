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
 *   routing     hooked names resolve into the interposer, others into the driver, _ptsz
 *               variants to their own hooks; dlsym(RTLD_NEXT) works
 *   unmanaged   (run with a bad MOEVM_* value) allocations beyond the device fail natively,
 *               small ones work: the program runs, un-managed
 *   query       cuMemGetInfo, cuDeviceTotalMem and NVML report the managed view
 *   ipc         cuIpcGetMemHandle works on native memory, is refused on managed memory
 *   fork        a child process runs hooks unmanaged, without deadlock
 * Prints "ok <scenario>" and exits 0, or names the failed check and exits 1.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
    CUresult (*IpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
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
    BIND(MemGetInfo, cuMemGetInfo_v2);
    BIND(DeviceTotalMem, cuDeviceTotalMem_v2);
    BIND(ModuleLoadData, cuModuleLoadData);
    BIND(ModuleGetFunction, cuModuleGetFunction);
    BIND(LaunchKernel, cuLaunchKernel);
    BIND(IpcGetMemHandle, cuIpcGetMemHandle);
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

static uint64_t sum_kernel(CUfunction sum, CUdeviceptr out, CUdeviceptr in, uint64_t n)
{
    void *params[] = {&out, &in, &n};
    EXPECT(cu.LaunchKernel(sum, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) == CUDA_SUCCESS);
    uint64_t s = 0;
    CU_OK(cu.MemcpyDtoH(&s, out, sizeof s));
    return s;
}

/* Buffers of 8 MiB, 6x the budget (MOEVM_GPU_BUDGET=8M, MOEVM_OVERSUBSCRIBE=56M). */
SCENARIO void scenario_oversub(void)
{
    enum { N = 6 };
    const uint64_t bytes = 8 * MiB, n = bytes / 4;
    CUmodule mod;
    CUfunction sum, fill;
    CU_OK(cu.ModuleLoadData(&mod, "fakecuda"));
    CU_OK(cu.ModuleGetFunction(&sum, mod, "fk_sum_u32"));
    CU_OK(cu.ModuleGetFunction(&fill, mod, "fk_fill_u32"));
    CUdeviceptr buf[N], out;
    CU_OK(cu.MemAlloc(&out, 4096)); /* small: native */
    uint32_t *host = malloc(bytes);
    uint64_t expect[N];
    for (int b = 0; b < N; b++) {
        CU_OK(cu.MemAlloc(&buf[b], bytes));
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
    for (int b = 0; b < N; b++)
        CU_OK(cu.MemFree(buf[b]));
    CU_OK(cu.MemFree(out));
    free(host);
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
    /* The budget's 8 MiB left the driver's free memory; the managed space lost 24 MiB. */
    EXPECT(free0 - free1 == 24 * MiB);
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
    bind(how);
    start();
    if (strcmp(scenario, "oversub") == 0)
        scenario_oversub();
    else if (strcmp(scenario, "routing") == 0)
        scenario_routing(how);
    else if (strcmp(scenario, "unmanaged") == 0)
        scenario_unmanaged();
    else if (strcmp(scenario, "query") == 0)
        scenario_query();
    else if (strcmp(scenario, "ipc") == 0)
        scenario_ipc();
    else if (strcmp(scenario, "fork") == 0)
        scenario_fork();
    else {
        fprintf(stderr, "test_preload: unknown scenario %s\n", scenario);
        return 2;
    }
    if (failures)
        return 1;
    printf("ok %s\n", argv[1]);
    return 0;
}
