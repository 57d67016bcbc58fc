/*
 * What the interposer adds to a launch that needs no move (docs/perf/interpose.md), on
 * tests/fakecuda: bench/interpose/run.sh runs this with and without
 * LD_PRELOAD=libmoevm_preload.so and takes the difference.
 *
 * The driver is reached as a program that loads it itself would (dlopen + dlsym, so under
 * the interposer the hooks). Launches of trivial kernels (nothing to read) on:
 *   ptr3     fk_sum_u32(out, in, 0): three 8-byte parameters, `in` a resident managed buffer
 *   struct   fk_copy_args({dst, src, 0}): one 24-byte parameter holding two pointers
 *   native   the same ptr3 launch on a small (unmanaged) buffer
 *   graph64  cuGraphLaunch of a 64-node graph of ptr3 kernels over 8 managed buffers
 * and, for the copies the interposer holds off during misses (interpose/devcopy.c):
 *   dtoh     an 8-byte cuMemcpyDtoH from a resident managed buffer (takes the read lock)
 *   dtoh_nat the same from the small unmanaged buffer (a range compare only)
 * Prints one line per case: "case ns_per_call" (usage: bench_preload_launch [REPS [CASE]]).
 * The fake's own launch (a mutex, a few list walks) costs far less than a real GPU launch
 * (2-5 us), so the difference, not the ratio, is the number that carries over; and the
 * fake's range checks walk lists that the managed space's mappings lengthen, which the
 * difference also includes (run.sh separates the two with perf where it can).
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MiB (1ull << 20)

static struct {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamBeginCapture)(CUstream, CUstreamCaptureMode);
    CUresult (*StreamEndCapture)(CUstream, CUgraph *);
    CUresult (*GraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*GraphLaunch)(CUgraphExec, CUstream);
} cu;

static void must(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "bench_preload_launch: %s failed (%d)\n", what, (int)r);
        exit(1);
    }
}

static void bind(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "bench_preload_launch: cannot load libcuda.so.1 (tests/fakecuda)\n");
        exit(1);
    }
    static const char *const names[] = {
        "cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent",
        "cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuModuleLoadData",
        "cuModuleGetFunction", "cuLaunchKernel", "cuStreamCreate", "cuStreamBeginCapture_v2",
        "cuStreamEndCapture", "cuGraphInstantiateWithFlags", "cuGraphLaunch"};
    void **slot = (void **)&cu;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!(slot[i] = dlsym(lib, names[i]))) {
            fprintf(stderr, "bench_preload_launch: %s missing\n", names[i]);
            exit(1);
        }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static CUfunction sum, copy_args;
static CUdeviceptr out;

static void launch_sum(CUdeviceptr in, CUstream s)
{
    uint64_t n = 0;
    void *p[] = {&out, &in, &n};
    must(cu.LaunchKernel(sum, 1, 1, 1, 1, 1, 1, 0, s, p, NULL), "cuLaunchKernel");
}

/* Nanoseconds per call of fn(arg), over `reps` calls after a warm-up. */
static double per_call(void (*fn)(void *), void *arg, long reps)
{
    for (long i = 0; i < reps / 10; i++)
        fn(arg);
    double t0 = now_s();
    for (long i = 0; i < reps; i++)
        fn(arg);
    return (now_s() - t0) * 1e9 / (double)reps;
}

static void case_ptr(void *in) { launch_sum(*(CUdeviceptr *)in, NULL); }

static void case_struct(void *in)
{
    struct { CUdeviceptr dst, src; uint64_t bytes; } a = {*(CUdeviceptr *)in,
                                                          *(CUdeviceptr *)in + 4096, 0};
    void *p[] = {&a};
    must(cu.LaunchKernel(copy_args, 1, 1, 1, 1, 1, 1, 0, NULL, p, NULL), "cuLaunchKernel");
}

static void case_graph(void *e) { must(cu.GraphLaunch(*(CUgraphExec *)e, NULL), "cuGraphLaunch"); }

static void case_dtoh(void *from)
{
    uint64_t v;
    must(cu.MemcpyDtoH(&v, *(CUdeviceptr *)from, sizeof v), "cuMemcpyDtoH");
}

int main(int argc, char **argv)
{
    long reps = argc > 1 ? atol(argv[1]) : 200000;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    bind();
    must(cu.Init(0), "cuInit");
    must(cu.DeviceGet(&dev, 0), "cuDeviceGet");
    must(cu.DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    must(cu.CtxSetCurrent(ctx), "cuCtxSetCurrent");
    must(cu.ModuleLoadData(&mod, "fakecuda"), "cuModuleLoadData");
    must(cu.ModuleGetFunction(&sum, mod, "fk_sum_u32"), "cuModuleGetFunction");
    must(cu.ModuleGetFunction(&copy_args, mod, "fk_copy_args"), "cuModuleGetFunction");

    CUdeviceptr big[8], small;
    uint32_t *zero = calloc(1, 2 * MiB);
    must(cu.MemAlloc(&out, 4096), "cuMemAlloc");
    must(cu.MemAlloc(&small, 4096), "cuMemAlloc");
    for (int i = 0; i < 8; i++) { /* managed under the interposer (>= MOEVM_PRELOAD_MIN) */
        must(cu.MemAlloc(&big[i], 2 * MiB), "cuMemAlloc");
        must(cu.MemcpyHtoD(big[i], zero, 2 * MiB), "cuMemcpyHtoD");
    }
    free(zero);
    CUstream s;
    CUgraph g;
    CUgraphExec e;
    must(cu.StreamCreate(&s, 0), "cuStreamCreate");
    for (int i = 0; i < 8; i++)
        launch_sum(big[i], NULL); /* resident before the capture */
    must(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    for (int i = 0; i < 64; i++)
        launch_sum(big[i % 8], s);
    must(cu.StreamEndCapture(s, &g), "cuStreamEndCapture");
    must(cu.GraphInstantiate(&e, g, 0), "cuGraphInstantiate");

    const char *only = argc > 2 ? argv[2] : NULL; /* one case, e.g. under perf */
    if (!only || !strcmp(only, "ptr3"))
        printf("ptr3 %.1f\n", per_call(case_ptr, &big[0], reps));
    if (!only || !strcmp(only, "struct"))
        printf("struct %.1f\n", per_call(case_struct, &big[1], reps));
    if (!only || !strcmp(only, "native"))
        printf("native %.1f\n", per_call(case_ptr, &small, reps));
    if (!only || !strcmp(only, "graph64"))
        printf("graph64 %.1f\n", per_call(case_graph, &e, reps / 64));
    if (!only || !strcmp(only, "dtoh"))
        printf("dtoh %.1f\n", per_call(case_dtoh, &big[2], reps));
    if (!only || !strcmp(only, "dtoh_nat"))
        printf("dtoh_nat %.1f\n", per_call(case_dtoh, &small, reps));
    return 0;
}
