/*
 * vmm_costs — what only a GPU can tell us about the costs behind moevm's design.
 *
 *   1. latency of cuMemCreate / cuMemMap / cuMemSetAccess / cuMemUnmap / cuMemRelease at
 *      2, 32 and 256 MiB per handle, and cuMemSetAccess over 16 x 2 MiB mappings in one call
 *      versus 16 calls (the pool and remap design of DESIGN.md §2 depends on these);
 *   2. host-to-device copy bandwidth from pinned and from pageable memory;
 *   3. HOST_NUMA VMM support, and a kernel's read bandwidth from a HOST_NUMA mapping
 *      (zero-copy over PCIe: what reading a non-resident expert costs) versus device memory;
 *   4. whether remapping an unrelated page waits for a kernel running on another stream;
 *   5. end to end: mvm_make_resident of a whole expert versus the bare cuMemcpyHtoDAsync;
 *   6. eviction from a write_back space (the interposer's): a page the device left as it was
 *      loaded skips the copy home (vmm/digest.cu decides), against clean_evict off, and what
 *      the digests taken at load add to it; each eviction's home is checked against what
 *      the device held;
 *   7. where a make-resident's time goes: the cuda backend's steps for 64 pages of 2 MiB
 *      (per-page copies from the HOST_NUMA homes and from pinned memory, the load's and the
 *      eviction's remaps), and whether the remaps overlap the copies' DMA.
 *
 * Output: per section, a markdown table and one machine-readable line per result:
 *   RESULT <name> <value> <unit>
 * Every CUDA call is checked; a failure exits with one line naming the call.
 *
 * Usage: vmm_costs [--device N] [--reps N] [--only 1,2,3,4,5,6,7]
 * Build and run: bash bench/gpu/run.sh (docs/perf/vmm.md).
 */
#include <cuda.h>
#include <cuda_runtime.h> /* only for <<<>>> launches and cudaGetLastError */

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moevm/moevm.h"

#define MiB (1024ull * 1024ull)

/* ---------------------------------------------------------------------------------------- */
/* Failing loudly                                                                            */
/* ---------------------------------------------------------------------------------------- */

static void die(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "vmm_costs: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1);
}

static void cu_check(CUresult r, const char *call, int line)
{
    if (r == CUDA_SUCCESS)
        return;
    const char *name = NULL, *text = NULL;
    cuGetErrorName(r, &name);
    cuGetErrorString(r, &text);
    die("%s failed: %s (%s) [vmm_costs.cu:%d]", call, name ? name : "?", text ? text : "?",
        line);
}
#define CU(call) cu_check((call), #call, __LINE__)

/* A <<<>>> launch reports a bad configuration only through the runtime's last error. */
static void launch_check(const char *kernel, int line)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        die("launch of %s failed: %s (%s) [vmm_costs.cu:%d]", kernel, cudaGetErrorName(e),
            cudaGetErrorString(e), line);
}
#define LAUNCHED(kernel) launch_check(kernel, __LINE__)

static void mvm_check(mvm_status s, const char *call, int line)
{
    if (s != MVM_OK)
        die("%s failed: %s: %s [vmm_costs.cu:%d]", call, mvm_status_name(s), mvm_last_error(),
            line);
}
#define MVM(call) mvm_check((call), #call, __LINE__)

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        die("malloc(%zu) failed", n);
    return p;
}

/* ---------------------------------------------------------------------------------------- */
/* Globals, time, statistics                                                                 */
/* ---------------------------------------------------------------------------------------- */

static CUdevice g_dev;
static CUcontext g_ctx;   /* the device's primary context */
static int g_ordinal;
static int g_sms;
static int g_reps = 30;  /* timed repetitions per latency measurement (>= 20) */
static const int WARMUP = 3;
static CUstream g_stream; /* the benchmark's own non-blocking stream */

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

typedef struct stats {
    double med, min, max;
    int n;
} stats;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place. */
static stats summarize(double *v, int n)
{
    stats s = {0, 0, 0, n};
    if (n <= 0)
        return s;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    s.min = v[0];
    s.max = v[n - 1];
    s.med = (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return s;
}

static stats single(double v)
{
    stats s = {v, v, v, 1};
    return s;
}

/* Bytes per microsecond -> GB/s (1e9 bytes). */
static double gbps(size_t bytes, double us) { return (double)bytes / (us * 1e3); }

/* ---------------------------------------------------------------------------------------- */
/* Results: one markdown table per section, then its RESULT lines                            */
/* ---------------------------------------------------------------------------------------- */

typedef struct row {
    char name[80];  /* machine name: no spaces */
    char what[112]; /* human description */
    stats s;
    const char *unit;
} row;

static row g_rows[64];
static int g_nrows;

static void add_row(const char *name, const char *unit, stats s, const char *what_fmt, ...)
{
    if (g_nrows == (int)(sizeof g_rows / sizeof g_rows[0]))
        die("too many result rows in one section");
    row *r = &g_rows[g_nrows++];
    snprintf(r->name, sizeof r->name, "%s", name);
    va_list ap;
    va_start(ap, what_fmt);
    vsnprintf(r->what, sizeof r->what, what_fmt, ap);
    va_end(ap);
    r->s = s;
    r->unit = unit;
}

/* A row of a per-size result: named "<base>_<mib>MiB", described as "<what>, <mib> MiB". */
static void add_sized_row(const char *base, unsigned mib, const char *unit, stats s,
                          const char *what)
{
    char name[80];
    snprintf(name, sizeof name, "%s_%uMiB", base, mib);
    add_row(name, unit, s, "%s, %u MiB", what, mib);
}

static void fmt_value(char *buf, size_t n, double v)
{
    double a = v < 0 ? -v : v;
    snprintf(buf, n, a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : a >= 1 ? "%.2f" : "%.3f", v);
}

static void section_begin(const char *title)
{
    g_nrows = 0;
    printf("\n## %s\n\n", title);
    fflush(stdout);
}

static void section_end(void)
{
    if (g_nrows) {
        printf("| measurement | median | min | max | unit | n |\n");
        printf("|---|---:|---:|---:|---|---:|\n");
        for (int i = 0; i < g_nrows; i++) {
            const row *r = &g_rows[i];
            char med[32], mn[32], mx[32];
            fmt_value(med, sizeof med, r->s.med);
            fmt_value(mn, sizeof mn, r->s.min);
            fmt_value(mx, sizeof mx, r->s.max);
            printf("| %s | %s | %s | %s | %s | %d |\n", r->what, med, mn, mx, r->unit, r->s.n);
        }
        printf("\n");
        for (int i = 0; i < g_nrows; i++)
            printf("RESULT %s %.3f %s\n", g_rows[i].name, g_rows[i].s.med, g_rows[i].unit);
    }
    g_nrows = 0;
    fflush(stdout);
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels                                                                                   */
/* ---------------------------------------------------------------------------------------- */

/* Sums every 32-bit word of p (mod 2^64) so the caller can check that all bytes were read. */
__global__ void read_sum_kernel(const uint4 *__restrict__ p, size_t n16, unsigned long long *out)
{
    uint64_t acc = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
        uint4 v = p[i];
        acc += (uint64_t)v.x + v.y + v.z + v.w;
    }
    for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0)
        atomicAdd(out, (unsigned long long)acc);
}

/* Reads one word per 64 KiB so the GPU has translated (and cached in its TLBs) a mapping
 * before we unmap it: moevm only remaps pages that some kernel has read. */
__global__ void touch_kernel(const uint32_t *p, size_t words, size_t step, unsigned long long *sink)
{
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * step;
    if (i < words && p[i] == 0x9e3779b9u)
        atomicAdd(sink, 1ull);
}

__device__ static uint64_t globaltimer_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Keeps every SM busy reading p for spin_ns, after telling the host it has started. */
__global__ void spin_read_kernel(const uint4 *__restrict__ p, size_t n16, uint64_t spin_ns,
                                 volatile unsigned *started, unsigned long long *sink)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        *started = 1;
        __threadfence_system();
    }
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t acc = 0;
    uint64_t t0 = globaltimer_ns();
    while (globaltimer_ns() - t0 < spin_ns) {
        for (int k = 0; k < 32; k++) {
            uint4 v = p[i];
            acc += v.x ^ v.w;
            i += stride;
            if (i >= n16)
                i -= n16;
        }
    }
    if (acc == 0x12345678u) /* keeps the loads alive */
        atomicAdd(sink, 1ull);
}

/* ---------------------------------------------------------------------------------------- */
/* VMM helpers                                                                               */
/* ---------------------------------------------------------------------------------------- */

static CUmemAllocationProp device_prop(void)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = (int)g_dev;
    return p;
}

static CUmemAccessDesc device_rw(void)
{
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = (int)g_dev;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return a;
}

static size_t granularity(const CUmemAllocationProp *p)
{
    size_t g = 0;
    CU(cuMemGetAllocationGranularity(&g, p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    return g;
}

static size_t round_up(size_t x, size_t g) { return (x + g - 1) / g * g; }

/* One handle mapped at its own reserved range with device read/write access. */
typedef struct vmm_buf {
    CUdeviceptr va;
    size_t bytes;
    CUmemGenericAllocationHandle h;
} vmm_buf;

static vmm_buf vmm_buf_create(const CUmemAllocationProp *prop, size_t bytes)
{
    vmm_buf b;
    CUmemAccessDesc acc = device_rw();
    b.bytes = bytes;
    CU(cuMemAddressReserve(&b.va, bytes, 0, 0, 0));
    CU(cuMemCreate(&b.h, bytes, prop, 0));
    CU(cuMemMap(b.va, bytes, 0, b.h, 0));
    CU(cuMemSetAccess(b.va, bytes, &acc, 1));
    return b;
}

static void vmm_buf_destroy(vmm_buf *b)
{
    CU(cuMemUnmap(b->va, b->bytes));
    CU(cuMemRelease(b->h));
    CU(cuMemAddressFree(b->va, b->bytes));
}

static unsigned long long *g_sink; /* device scratch word for kernels' side effects */

static void touch(CUdeviceptr va, size_t bytes, CUstream s)
{
    size_t step = 64 * 1024 / 4, words = bytes / 4;
    size_t threads = (words + step - 1) / step;
    touch_kernel<<<(unsigned)((threads + 255) / 256), 256, 0, s>>>(
        (const uint32_t *)va, words, step, g_sink);
    LAUNCHED("touch_kernel");
}

/* Random bytes (xorshift64*), so that a read of zeros or stale data cannot pass a check. */
static void fill_random(void *p, size_t bytes, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1, *w = (uint64_t *)p;
    for (size_t i = 0; i < bytes / 8; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        w[i] = x * 0x2545f4914f6cdd1dull;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* 1. Per-call VMM latency                                                                   */
/* ---------------------------------------------------------------------------------------- */

static void bench_call_latency(size_t bytes)
{
    CUmemAllocationProp prop = device_prop();
    CUmemAccessDesc acc = device_rw();
    if (bytes % granularity(&prop))
        die("%zu bytes is not a multiple of the device granularity", bytes);

    CUdeviceptr va;
    CU(cuMemAddressReserve(&va, bytes, 0, 0, 0));
    double *t[5];
    for (int k = 0; k < 5; k++)
        t[k] = (double *)xmalloc(sizeof(double) * (size_t)g_reps);

    for (int i = -WARMUP; i < g_reps; i++) {
        CUmemGenericAllocationHandle h;
        double t0 = now_us();
        CU(cuMemCreate(&h, bytes, &prop, 0));
        double t1 = now_us();
        CU(cuMemMap(va, bytes, 0, h, 0));
        double t2 = now_us();
        CU(cuMemSetAccess(va, bytes, &acc, 1));
        double t3 = now_us();
        touch(va, bytes, g_stream); /* untimed: realistic unmap of a page the GPU has used */
        CU(cuStreamSynchronize(g_stream));
        double t4 = now_us();
        CU(cuMemUnmap(va, bytes));
        double t5 = now_us();
        CU(cuMemRelease(h));
        double t6 = now_us();
        if (i >= 0) {
            t[0][i] = t1 - t0;
            t[1][i] = t2 - t1;
            t[2][i] = t3 - t2;
            t[3][i] = t5 - t4;
            t[4][i] = t6 - t5;
        }
    }
    CU(cuMemAddressFree(va, bytes));

    static const char *calls[5] = {"cuMemCreate", "cuMemMap", "cuMemSetAccess", "cuMemUnmap",
                                   "cuMemRelease"};
    unsigned mib = (unsigned)(bytes / MiB);
    for (int k = 0; k < 5; k++) {
        char name[80];
        snprintf(name, sizeof name, "%s_%uMiB", calls[k], mib);
        add_row(name, "us", summarize(t[k], g_reps), "%s, %u MiB handle", calls[k], mib);
        free(t[k]);
    }
}

/* cuMemSetAccess over 16 separate 2 MiB mappings: one call over the whole range versus one
 * call per mapping. The answer decides whether moevm batches access changes per expert. */
static void bench_set_access_batch(void)
{
    enum { K = 16 };
    const size_t page = 2 * MiB;
    CUmemAllocationProp prop = device_prop();
    CUmemAccessDesc acc = device_rw();
    if (page % granularity(&prop))
        die("2 MiB is not a multiple of the device granularity");

    CUmemGenericAllocationHandle h[K];
    CUdeviceptr va;
    CU(cuMemAddressReserve(&va, K * page, 0, 0, 0));
    for (int j = 0; j < K; j++)
        CU(cuMemCreate(&h[j], page, &prop, 0));

    double *one = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    double *many = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    double *map16 = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    double *unmap16 = (double *)xmalloc(sizeof(double) * (size_t)g_reps);

    for (int i = -WARMUP; i < g_reps; i++) {
        /* Access rights go with the mapping, so remap before each measurement. */
        double t0 = now_us();
        for (int j = 0; j < K; j++)
            CU(cuMemMap(va + j * page, page, 0, h[j], 0));
        double t1 = now_us();
        CU(cuMemSetAccess(va, K * page, &acc, 1));
        double t2 = now_us();
        for (int j = 0; j < K; j++)
            CU(cuMemUnmap(va + j * page, page));
        double t3 = now_us();

        for (int j = 0; j < K; j++)
            CU(cuMemMap(va + j * page, page, 0, h[j], 0));
        double t4 = now_us();
        for (int j = 0; j < K; j++)
            CU(cuMemSetAccess(va + j * page, page, &acc, 1));
        double t5 = now_us();
        for (int j = 0; j < K; j++)
            CU(cuMemUnmap(va + j * page, page));
        if (i >= 0) {
            map16[i] = t1 - t0;
            one[i] = t2 - t1;
            unmap16[i] = t3 - t2;
            many[i] = t5 - t4;
        }
    }
    for (int j = 0; j < K; j++)
        CU(cuMemRelease(h[j]));
    CU(cuMemAddressFree(va, K * page));

    add_row("cuMemSetAccess_16x2MiB_1call", "us", summarize(one, g_reps),
            "cuMemSetAccess, 16 x 2 MiB mappings, 1 call");
    add_row("cuMemSetAccess_16x2MiB_16calls", "us", summarize(many, g_reps),
            "cuMemSetAccess, 16 x 2 MiB mappings, 16 calls (total)");
    add_row("cuMemMap_16x2MiB_16calls", "us", summarize(map16, g_reps),
            "cuMemMap, 16 x 2 MiB handles (total; compare 1 x 32 MiB)");
    add_row("cuMemUnmap_16x2MiB_16calls", "us", summarize(unmap16, g_reps),
            "cuMemUnmap, 16 x 2 MiB mappings (total; compare 1 x 32 MiB)");
    free(one);
    free(many);
    free(map16);
    free(unmap16);
}

/* ---------------------------------------------------------------------------------------- */
/* 2. Host-to-device copy bandwidth                                                          */
/* ---------------------------------------------------------------------------------------- */

/* Wall time of one copy as a caller sees it: enqueue + wait. */
static double time_h2d_us(CUdeviceptr dst, const void *src, size_t bytes)
{
    double t0 = now_us();
    CU(cuMemcpyHtoDAsync(dst, src, bytes, g_stream));
    CU(cuStreamSynchronize(g_stream));
    return now_us() - t0;
}

static stats h2d_bandwidth(CUdeviceptr dst, const void *src, size_t bytes, int reps)
{
    double *v = (double *)xmalloc(sizeof(double) * (size_t)reps);
    for (int i = -2; i < reps; i++) {
        double us = time_h2d_us(dst, src, bytes);
        if (i >= 0)
            v[i] = gbps(bytes, us);
    }
    stats s = summarize(v, reps);
    free(v);
    return s;
}

static void bench_h2d(void)
{
    const size_t bytes = 256 * MiB;
    const int reps = 10;
    CUdeviceptr dst;
    void *pinned;
    CU(cuMemAlloc(&dst, bytes));
    CU(cuMemHostAlloc(&pinned, bytes, 0));
    void *pageable = xmalloc(bytes);
    fill_random(pinned, bytes, 1);
    fill_random(pageable, bytes, 2); /* also faults every page in: we time copies, not faults */

    add_row("h2d_pinned_256MiB", "GB/s", h2d_bandwidth(dst, pinned, bytes, reps),
            "cuMemcpyHtoDAsync 256 MiB from cuMemHostAlloc memory");
    add_row("h2d_pageable_256MiB", "GB/s", h2d_bandwidth(dst, pageable, bytes, reps),
            "cuMemcpyHtoDAsync 256 MiB from malloc memory");

    free(pageable);
    CU(cuMemFreeHost(pinned));
    CU(cuMemFree(dst));
}

/* ---------------------------------------------------------------------------------------- */
/* 3. HOST_NUMA VMM: zero-copy kernel reads versus device memory                              */
/* ---------------------------------------------------------------------------------------- */

static uint64_t cpu_sum32(const void *p, size_t bytes)
{
    const uint32_t *w = (const uint32_t *)p;
    uint64_t s = 0;
    for (size_t i = 0; i < bytes / 4; i++)
        s += w[i];
    return s;
}

/* Kernel read bandwidth of [va, va+bytes), checking every repetition's checksum. */
static stats kernel_read_bandwidth(CUdeviceptr va, size_t bytes, uint64_t expect, const char *what)
{
    const int reps = 10;
    CUdeviceptr out;
    CUevent start, stop;
    CU(cuMemAlloc(&out, sizeof(unsigned long long)));
    CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));
    double *v = (double *)xmalloc(sizeof(double) * reps);

    for (int i = -2; i < reps; i++) {
        CU(cuMemsetD32Async(out, 0, 2, g_stream));
        CU(cuEventRecord(start, g_stream));
        read_sum_kernel<<<(unsigned)g_sms * 8, 256, 0, g_stream>>>(
            (const uint4 *)va, bytes / 16, (unsigned long long *)out);
        LAUNCHED("read_sum_kernel");
        CU(cuEventRecord(stop, g_stream));
        CU(cuEventSynchronize(stop));
        float ms = 0;
        CU(cuEventElapsedTime(&ms, start, stop));
        unsigned long long got = 0;
        CU(cuMemcpyDtoH(&got, out, sizeof got));
        if (got != expect)
            die("read_sum_kernel over %s: checksum %llx, the CPU says %llx", what, got,
                (unsigned long long)expect);
        if (i >= 0)
            v[i] = gbps(bytes, (double)ms * 1e3);
    }
    stats s = summarize(v, reps);
    free(v);
    CU(cuEventDestroy(start));
    CU(cuEventDestroy(stop));
    CU(cuMemFree(out));
    return s;
}

static void bench_host_numa_reads(void)
{
    int supported = 0, numa_id = -1;
    CU(cuDeviceGetAttribute(&supported,
                            CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED /* 141 */,
                            g_dev));
    CU(cuDeviceGetAttribute(&numa_id, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID /* 134 */, g_dev));
    add_row("host_numa_vmm_supported", "bool", single(supported),
            "HOST_NUMA VMM supported (attribute 141)");
    add_row("host_numa_id", "id", single(numa_id), "HOST_NUMA_ID (attribute 134; -1 = no NUMA)");
    if (!supported) {
        printf("HOST_NUMA VMM is not supported on this device: zero-copy reads skipped "
               "(moevm leaves non-resident pages unmapped here).\n\n");
        return;
    }

    CUmemAllocationProp hprop = device_prop();
    hprop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    hprop.location.id = numa_id < 0 ? 0 : numa_id; /* the driver docs: 0 without NUMA */
    CUmemAllocationProp dprop = device_prop();
    size_t hg = granularity(&hprop), dg = granularity(&dprop);
    size_t bytes = round_up(round_up(256 * MiB, hg), dg);
    printf("HOST_NUMA granularity %zu KiB, device granularity %zu KiB, %zu MiB each\n\n",
           hg / 1024, dg / 1024, (size_t)(bytes / MiB));

    vmm_buf host = vmm_buf_create(&hprop, bytes);
    vmm_buf dev = vmm_buf_create(&dprop, bytes);
    void *src = xmalloc(bytes);
    fill_random(src, bytes, 3);
    uint64_t expect = cpu_sum32(src, bytes);
    /* Both filled through the driver, so the kernel reads exactly what the CPU summed. */
    CU(cuMemcpyHtoD(host.va, src, bytes));
    CU(cuMemcpyHtoD(dev.va, src, bytes));
    free(src);

    /* What the driver says about a pointer into each mapping, which the interposer answers
     * itself for managed memory (docs/interpose.md, Address queries): Open MPI reports
     * "host" for HOST_NUMA-backed VMM memory (open-mpi/ompi#12751); this row confirms it. */
    unsigned type_host = 0, type_dev = 0;
    size_t range_host = 0;
    CU(cuPointerGetAttribute(&type_host, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, host.va + 1));
    CU(cuPointerGetAttribute(&type_dev, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dev.va + 1));
    CU(cuMemGetAddressRange(NULL, &range_host, host.va + 1));
    add_row("memory_type_host_numa", "enum", single(type_host),
            "CU_POINTER_ATTRIBUTE_MEMORY_TYPE of a HOST_NUMA mapping (1 host, 2 device)");
    add_row("memory_type_device", "enum", single(type_dev),
            "the same of a device mapping");
    add_row("address_range_host_numa", "MiB", single((double)range_host / MiB),
            "cuMemGetAddressRange size of the HOST_NUMA mapping (one cuMemMap of %zu MiB)",
            (size_t)(bytes / MiB));

    stats sh = kernel_read_bandwidth(host.va, bytes, expect, "the HOST_NUMA mapping");
    stats sd = kernel_read_bandwidth(dev.va, bytes, expect, "the device mapping");
    add_row("kernel_read_host_numa_256MiB", "GB/s", sh,
            "kernel reads 256 MiB from a HOST_NUMA mapping (zero-copy)");
    add_row("kernel_read_device_256MiB", "GB/s", sd,
            "kernel reads 256 MiB from a device mapping");
    add_row("kernel_read_device_over_host_numa", "x", single(sd.med / sh.med),
            "device / HOST_NUMA read bandwidth (medians)");

    vmm_buf_destroy(&host);
    vmm_buf_destroy(&dev);
}

/* ---------------------------------------------------------------------------------------- */
/* 4. Does a remap wait for a kernel that does not touch it?                                  */
/* ---------------------------------------------------------------------------------------- */

typedef struct remap_times {
    double unmap, total; /* us */
} remap_times;

/* Points the page at va from handle `from` to handle `to`: what a move does to one page. */
static remap_times remap_page(CUdeviceptr va, size_t page, CUmemGenericAllocationHandle to)
{
    CUmemAccessDesc acc = device_rw();
    remap_times r;
    double t0 = now_us();
    CU(cuMemUnmap(va, page));
    double t1 = now_us();
    CU(cuMemMap(va, page, 0, to, 0));
    CU(cuMemSetAccess(va, page, &acc, 1));
    double t2 = now_us();
    r.unmap = t1 - t0;
    r.total = t2 - t0;
    return r;
}

static void wait_started(volatile unsigned *flag)
{
    double deadline = now_us() + 5e6;
    while (!*flag)
        if (now_us() > deadline)
            die("spin_read_kernel did not start within 5 s");
}

static void bench_remap_while_busy(void)
{
    const size_t page = 2 * MiB, busy_bytes = 64 * MiB;
    const uint64_t spin_ns = 200ull * 1000 * 1000;
    const int busy_reps = 5;
    CUmemAllocationProp prop = device_prop();
    CUmemAccessDesc acc = device_rw();

    /* The kernel reads `busy`; the page we remap is a separate reservation. */
    vmm_buf busy = vmm_buf_create(&prop, busy_bytes);
    CU(cuMemsetD32(busy.va, 0x5a5a5a5a, busy_bytes / 4));
    CUmemGenericAllocationHandle h[2];
    CUdeviceptr va;
    CU(cuMemCreate(&h[0], page, &prop, 0));
    CU(cuMemCreate(&h[1], page, &prop, 0));
    CU(cuMemAddressReserve(&va, page, 0, 0, 0));
    CU(cuMemMap(va, page, 0, h[0], 0));
    CU(cuMemSetAccess(va, page, &acc, 1));
    int cur = 0;

    CUstream spin;
    CU(cuStreamCreate(&spin, CU_STREAM_NON_BLOCKING));
    volatile unsigned *flag;
    CUdeviceptr dflag;
    CU(cuMemHostAlloc((void **)&flag, sizeof *flag, CU_MEMHOSTALLOC_DEVICEMAP));
    CU(cuMemHostGetDevicePointer(&dflag, (void *)flag, 0));

    /* Idle: the page was read by a kernel that finished; nothing else runs. */
    double *idle = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    double *idle_unmap = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    for (int i = -WARMUP; i < g_reps; i++) {
        touch(va, page, g_stream);
        CU(cuCtxSynchronize());
        cur ^= 1;
        remap_times r = remap_page(va, page, h[cur]);
        if (i >= 0) {
            idle[i] = r.total;
            idle_unmap[i] = r.unmap;
        }
    }

    /* Busy: the same, while spin_read_kernel runs ~200 ms on another stream. */
    double busy_t[busy_reps], busy_unmap[busy_reps];
    int still_running = 0;
    for (int i = 0; i < busy_reps; i++) {
        touch(va, page, g_stream);
        CU(cuStreamSynchronize(g_stream));
        *flag = 0;
        spin_read_kernel<<<(unsigned)g_sms, 1024, 0, spin>>>(
            (const uint4 *)busy.va, busy_bytes / 16, spin_ns, (volatile unsigned *)dflag, g_sink);
        LAUNCHED("spin_read_kernel");
        wait_started(flag);
        cur ^= 1;
        remap_times r = remap_page(va, page, h[cur]);
        CUresult q = cuStreamQuery(spin); /* NOT_READY: the remap did not wait for it */
        if (q == CUDA_ERROR_NOT_READY)
            still_running++;
        else
            CU(q);
        CU(cuStreamSynchronize(spin));
        busy_t[i] = r.total;
        busy_unmap[i] = r.unmap;
    }

    /* The remap waited if the kernel was never still running afterwards and the remap took
     * a good part of the spin; it did not if the kernel was always still running. */
    stats sb = summarize(busy_t, busy_reps);
    double spin_us = (double)spin_ns / 1e3;
    int waited = still_running == 0 && sb.med > 0.5 * spin_us ? 1
                 : still_running == busy_reps                 ? 0
                                                              : -1;
    add_row("remap_2MiB_idle", "us", summarize(idle, g_reps),
            "unmap+map+setaccess of a 2 MiB page, GPU idle");
    add_row("remap_2MiB_busy", "us", sb,
            "unmap+map+setaccess of a 2 MiB page, 200 ms kernel on another stream");
    add_row("unmap_2MiB_idle", "us", summarize(idle_unmap, g_reps), "cuMemUnmap alone, GPU idle");
    add_row("unmap_2MiB_busy", "us", summarize(busy_unmap, busy_reps),
            "cuMemUnmap alone, kernel running");
    add_row("remap_busy_kernel_still_running", "count", single(still_running),
            "of %d busy remaps, kernel still running after the remap", busy_reps);
    add_row("unmap_waits_for_kernel", "bool", single(waited),
            "remap waited for the unrelated kernel (1 yes, 0 no, -1 unclear)");
    printf("Verdict: %s\n\n",
           waited == 1   ? "the remap WAITED for the unrelated kernel"
           : waited == 0 ? "the remap did NOT wait for the unrelated kernel"
                         : "unclear: the kernel was still running after only some remaps");

    free(idle);
    free(idle_unmap);
    CU(cuMemFreeHost((void *)flag));
    CU(cuStreamDestroy(spin));
    CU(cuMemUnmap(va, page));
    CU(cuMemAddressFree(va, page));
    CU(cuMemRelease(h[0]));
    CU(cuMemRelease(h[1]));
    vmm_buf_destroy(&busy);
}

/* ---------------------------------------------------------------------------------------- */
/* 5. End to end: mvm_make_resident of a whole expert versus the bare copy                    */
/* ---------------------------------------------------------------------------------------- */

static void check_residency(mvm_space *space, uint32_t e, int want_resident)
{
    mvm_residency r;
    MVM(mvm_expert_residency(space, 0, e, &r));
    uint32_t want = want_resident ? r.n_pages : 0;
    if (r.resident != want || r.loading != 0)
        die("expert %u: %u of %u pages resident, %u loading; expected %u resident", e,
            r.resident, r.n_pages, r.loading, want);
}

/* libmoevm may make its own context current on the calling thread; our streams and
 * allocations belong to the primary context, so take it back before using them. */
static void own_context(void) { CU(cuCtxSetCurrent(g_ctx)); }

/* The device bytes at the expert's address must equal its home. */
static void verify_expert(mvm_space *space, uint32_t e, size_t bytes, void *scratch)
{
    CUdeviceptr addr = (CUdeviceptr)(uintptr_t)mvm_expert_addr(space, 0, e);
    own_context();
    CU(cuMemcpyDtoH(scratch, addr, bytes));
    if (memcmp(scratch, mvm_expert_home(space, 0, e), bytes) != 0)
        die("expert %u after mvm_make_resident: device bytes differ from the home", e);
}

/* A cuda space of one layer of `experts`, all of which fit in the budget. */
static mvm_space_desc one_layer(uint32_t experts, uint64_t expert_bytes)
{
    mvm_space_desc d;
    MVM(mvm_space_desc_init(&d));
    d.n_layers = 1;
    d.n_experts = experts;
    d.expert_bytes = expert_bytes;
    d.device_budget = experts * expert_bytes;
    d.backend = MVM_BACKEND_CUDA;
    d.device = g_ordinal;
    return d;
}

static void bench_make_resident(uint64_t expert_bytes)
{
    enum { EXPERTS = 8 };
    unsigned mib = (unsigned)(expert_bytes / MiB);
    mvm_space_desc d = one_layer(EXPERTS, expert_bytes);
    mvm_space *space;
    MVM(mvm_space_create(&d, &space));
    mvm_space_info info;
    MVM(mvm_space_get_info(space, &info));
    if (mib == 2)
        printf("space: backend %s, device %s, page %llu KiB, home_mapped %d, numa node %d\n\n",
               info.backend, info.device, (unsigned long long)(info.page_size / 1024),
               info.home_mapped, info.numa_node);
    for (uint32_t e = 0; e < EXPERTS; e++) {
        void *home = mvm_expert_home(space, 0, e);
        if (!home)
            die("mvm_expert_home(0, %u) returned NULL", e);
        fill_random(home, expert_bytes, 100 + e);
    }

    void *scratch = xmalloc(expert_bytes);
    double *mr = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    double *hit = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    double *all = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    for (int i = -WARMUP; i < g_reps; i++) {
        uint32_t e = (uint32_t)(i + WARMUP) % EXPERTS;
        check_residency(space, e, 0);
        double t0 = now_us();
        MVM(mvm_make_resident(space, 0, e, MVM_ALL_PAGES));
        double t1 = now_us();
        MVM(mvm_make_resident(space, 0, e, MVM_ALL_PAGES)); /* already resident: a hit */
        double t2 = now_us();
        check_residency(space, e, 1);
        verify_expert(space, e, expert_bytes, scratch);
        MVM(mvm_evict(space, 0, e, 0));
        if (i >= 0) {
            mr[i] = t1 - t0;
            hit[i] = t2 - t1;
        }
    }
    /* All the experts asked for at once, as an engine step or a launch's misses do: the
     * migration worker takes them as one batch and remaps each as its copies land. */
    for (int i = -WARMUP; i < g_reps; i++) {
        mvm_move *moves[EXPERTS];
        double t0 = now_us();
        for (uint32_t e = 0; e < EXPERTS; e++)
            MVM(mvm_make_resident_async(space, 0, e, MVM_ALL_PAGES, &moves[e]));
        for (uint32_t e = 0; e < EXPERTS; e++) {
            MVM(mvm_move_wait(moves[e], -1));
            MVM(mvm_move_release(moves[e]));
        }
        double t1 = now_us();
        for (uint32_t e = 0; e < EXPERTS; e++) {
            check_residency(space, e, 1);
            if (i == g_reps - 1)
                verify_expert(space, e, expert_bytes, scratch);
            MVM(mvm_evict(space, 0, e, 0));
        }
        if (i >= 0)
            all[i] = t1 - t0;
    }
    MVM(mvm_space_destroy(space));
    own_context();

    /* The bare copy: the floor any make-resident of this size is measured against. */
    CUdeviceptr dst;
    void *pinned;
    CU(cuMemAlloc(&dst, expert_bytes));
    CU(cuMemHostAlloc(&pinned, expert_bytes, 0));
    fill_random(pinned, expert_bytes, 7);
    double *bare = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    for (int i = -WARMUP; i < g_reps; i++) {
        double us = time_h2d_us(dst, pinned, expert_bytes);
        if (i >= 0)
            bare[i] = us;
    }
    CU(cuMemFreeHost(pinned));
    CU(cuMemFree(dst));

    stats smr = summarize(mr, g_reps), sbare = summarize(bare, g_reps);
    add_sized_row("make_resident", mib, "us", smr, "mvm_make_resident of an expert");
    add_sized_row("bare_copy", mib, "us", sbare, "cuMemcpyHtoDAsync + sync");
    add_sized_row("make_resident_hit", mib, "us", summarize(hit, g_reps),
                  "mvm_make_resident when resident");
    add_sized_row("make_resident_over_copy", mib, "x", single(smr.med / sbare.med),
                  "make_resident / bare copy (target <= 1.1 from 8 MiB)");
    stats sall = summarize(all, g_reps);
    add_sized_row("make_resident_8_at_once", mib, "us", sall,
                  "8 experts asked for at once (async), all waited for");
    add_sized_row("make_resident_8_at_once_over_copies", mib, "x",
                  single(sall.med / (EXPERTS * sbare.med)),
                  "8 at once / 8 bare copies");
    free(all);
    free(mr);
    free(hit);
    free(bare);
    free(scratch);
}

/* The times of one pass of section 6. */
struct load_evict {
    stats load, evict;
};

/* One timed pass of section 6: each repetition times making an expert resident (with
 * clean_evict, its pages' digests are taken then), lets the device write it or not, and
 * times mvm_evict; then checks that the home holds what the device held (the digest kernel
 * is right: a skipped write-back lost nothing) and that the counters say which path ran. */
static load_evict time_evictions(uint64_t expert_bytes, int clean_evict, int written)
{
    enum { EXPERTS = 4 };
    mvm_space_desc d = one_layer(EXPERTS, expert_bytes);
    d.write_back = 1;
    d.clean_evict = clean_evict;
    mvm_space *space;
    MVM(mvm_space_create(&d, &space));
    mvm_space_info info;
    MVM(mvm_space_get_info(space, &info));
    if (info.clean_evict != clean_evict)
        die("clean_evict %d asked, the space has %d (MOEVM_LOG=debug says why)", clean_evict,
            info.clean_evict);
    for (uint32_t e = 0; e < EXPERTS; e++)
        fill_random(mvm_expert_home(space, 0, e), expert_bytes, 200 + e);
    void *device_bytes = xmalloc(expert_bytes);
    double *t = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    double *tl = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    for (int i = -WARMUP; i < g_reps; i++) {
        uint32_t e = (uint32_t)(i + WARMUP) % EXPERTS;
        double l0 = now_us();
        MVM(mvm_make_resident(space, 0, e, MVM_ALL_PAGES));
        double l1 = now_us();
        CUdeviceptr addr = (CUdeviceptr)mvm_expert_addr(space, 0, e);
        own_context();
        if (written)
            CU(cuMemsetD32Async(addr + expert_bytes / 2, 0x5eed0000u + (unsigned)i, 1, g_stream));
        CU(cuStreamSynchronize(g_stream));
        CU(cuMemcpyDtoH(device_bytes, addr, expert_bytes));
        mvm_stats before, after;
        MVM(mvm_space_get_stats(space, &before));
        double t0 = now_us();
        MVM(mvm_evict(space, 0, e, 0));
        double t1 = now_us();
        MVM(mvm_space_get_stats(space, &after));
        if (memcmp(device_bytes, mvm_expert_home(space, 0, e), expert_bytes) != 0)
            die("evicted expert %u (clean_evict %d, written %d): the home differs from what "
                "the device held", e, clean_evict, written);
        uint64_t pages = (expert_bytes + info.page_size - 1) / info.page_size;
        uint64_t clean = after.pages_clean - before.pages_clean;
        uint64_t want = clean_evict ? pages - (uint64_t)written : 0;
        if (clean != want)
            die("evicted expert %u (clean_evict %d, written %d): %llu pages skipped as "
                "unchanged, expected %llu", e, clean_evict, written,
                (unsigned long long)clean, (unsigned long long)want);
        if (i >= 0)
            t[i] = t1 - t0, tl[i] = l1 - l0;
    }
    MVM(mvm_space_destroy(space));
    own_context();
    load_evict r = {summarize(tl, g_reps), summarize(t, g_reps)};
    free(t);
    free(tl);
    free(device_bytes);
    return r;
}

static void bench_clean_evict(uint64_t expert_bytes)
{
    unsigned mib = (unsigned)(expert_bytes / MiB);
    load_evict off = time_evictions(expert_bytes, 0, 0);
    load_evict same = time_evictions(expert_bytes, 1, 0);
    load_evict written = time_evictions(expert_bytes, 1, 1);
    const struct {
        const char *name;
        stats s;
        const char *about;
    } times[] = {
        {"evict_copy_back", off.evict, "mvm_evict, clean_evict off: every page copied home"},
        {"evict_unchanged", same.evict, "mvm_evict, device left it as loaded: digests only"},
        {"evict_one_page_written", written.evict,
         "mvm_evict, one page written: digests + that page"},
        {"load_unmarked", off.load, "mvm_make_resident, clean_evict off: copies only"},
        {"load_marked", same.load, "mvm_make_resident, clean_evict on: copies + one digest launch"},
    };
    for (size_t i = 0; i < sizeof times / sizeof times[0]; i++)
        add_sized_row(times[i].name, mib, "us", times[i].s, times[i].about);
    add_sized_row("evict_unchanged_over_copy", mib, "x", single(same.evict.med / off.evict.med),
                  "unchanged / copy back (what a clean eviction saves)");
    add_sized_row("load_marked_over_unmarked", mib, "x", single(same.load.med / off.load.med),
                  "what taking the digests adds to a load (target <= 1.05)");
}

/* ---------------------------------------------------------------------------------------- */
/* 7. Where a make-resident's time goes: the cuda backend's steps for 64 pages of 2 MiB       */
/* ---------------------------------------------------------------------------------------- */

/* n one-page handles of a kind, each mapped at its page of a view (as vmm/backend_cuda.c
 * lays out the device pool and the HOST_NUMA homes). */
typedef struct page_set {
    CUmemGenericAllocationHandle *h;
    CUdeviceptr view;
    size_t n, page;
} page_set;

static page_set page_set_create(const CUmemAllocationProp *prop, size_t n, size_t page)
{
    page_set s = {(CUmemGenericAllocationHandle *)xmalloc(n * sizeof(CUmemGenericAllocationHandle)),
                  0, n, page};
    /* Homes are written by the CPU through their view: grant their node access too. */
    CUmemAccessDesc acc[2] = {device_rw(), device_rw()};
    acc[1].location = prop->location;
    int n_acc = prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ? 2 : 1;
    CU(cuMemAddressReserve(&s.view, n * page, page, 0, 0));
    for (size_t i = 0; i < n; i++) {
        CU(cuMemCreate(&s.h[i], page, prop, 0));
        CU(cuMemMap(s.view + i * page, page, 0, s.h[i], 0));
    }
    CU(cuMemSetAccess(s.view, n * page, acc, n_acc));
    return s;
}

static void page_set_destroy(page_set *s)
{
    for (size_t i = 0; i < s->n; i++) {
        CU(cuMemUnmap(s->view + i * s->page, s->page));
        CU(cuMemRelease(s->h[i]));
    }
    CU(cuMemAddressFree(s->view, s->n * s->page));
    free(s->h);
}

/* Points every page of the expert range at `to`'s handles, page by page: unmap, map and
 * grant access, as a load (to = pool) or an eviction (to = homes) does. */
static double remap_all_us(CUdeviceptr expert, const page_set *to)
{
    CUmemAccessDesc acc = device_rw();
    double t0 = now_us();
    for (size_t i = 0; i < to->n; i++) {
        CUdeviceptr va = expert + i * to->page;
        CU(cuMemUnmap(va, to->page));
        CU(cuMemMap(va, to->page, 0, to->h[i], 0));
        CU(cuMemSetAccess(va, to->page, &acc, 1));
    }
    return now_us() - t0;
}

/* One copy per page, all queued on the stream, then one wait. */
static double copy_pages_us(CUdeviceptr dst, const void *src, size_t n, size_t page)
{
    double t0 = now_us();
    for (size_t i = 0; i < n; i++)
        CU(cuMemcpyHtoDAsync(dst + i * page, (const char *)src + i * page, page, g_stream));
    CU(cuStreamSynchronize(g_stream));
    return now_us() - t0;
}

static void bench_make_resident_steps(void)
{
    int supported = 0, numa_id = -1;
    CU(cuDeviceGetAttribute(&supported,
                            CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, g_dev));
    CU(cuDeviceGetAttribute(&numa_id, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, g_dev));
    if (!supported) {
        printf("HOST_NUMA VMM is not supported on this device: skipped.\n\n");
        return;
    }
    enum { PAGES = 64 };
    CUmemAllocationProp dprop = device_prop(), hprop = device_prop();
    hprop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    hprop.location.id = numa_id < 0 ? 0 : numa_id;
    size_t page = round_up(round_up(2 * MiB, granularity(&hprop)), granularity(&dprop));
    size_t bytes = PAGES * page;
    page_set pool = page_set_create(&dprop, PAGES, page);
    page_set home = page_set_create(&hprop, PAGES, page);
    fill_random((void *)(uintptr_t)home.view, bytes, 11); /* the CPU writes homes through the view */

    /* The expert's range starts on its homes, as a non-resident expert does. */
    CUdeviceptr expert;
    CUmemAccessDesc acc = device_rw();
    CU(cuMemAddressReserve(&expert, bytes, page, 0, 0));
    for (size_t i = 0; i < PAGES; i++)
        CU(cuMemMap(expert + i * page, page, 0, home.h[i], 0));
    CU(cuMemSetAccess(expert, bytes, &acc, 1));

    void *pinned;
    CU(cuMemHostAlloc(&pinned, bytes, 0));
    fill_random(pinned, bytes, 12);

    double *t[7];
    for (int k = 0; k < 7; k++)
        t[k] = (double *)xmalloc(sizeof(double) * (size_t)g_reps);
    for (int i = -WARMUP; i < g_reps; i++) {
        double v[7];
        v[0] = copy_pages_us(pool.view, (const void *)(uintptr_t)home.view, PAGES, page);
        v[1] = copy_pages_us(pool.view, pinned, PAGES, page);
        v[2] = copy_pages_us(pool.view, pinned, 1, bytes);
        v[3] = remap_all_us(expert, &pool); /* a load: homes -> pool */
        v[4] = remap_all_us(expert, &home); /* an eviction: pool -> homes */
        /* A load whose remaps run while its copies do: the driver's VMM calls and the DMA
         * overlap only if the driver lets them. */
        double t0 = now_us();
        for (size_t p = 0; p < PAGES; p++)
            CU(cuMemcpyHtoDAsync(pool.view + p * page,
                                 (const char *)(uintptr_t)home.view + p * page, page, g_stream));
        double queued = now_us();
        remap_all_us(expert, &pool);
        CU(cuStreamSynchronize(g_stream));
        v[5] = now_us() - t0;
        v[6] = queued - t0;
        remap_all_us(expert, &home);
        if (i >= 0)
            for (int k = 0; k < 7; k++)
                t[k][i] = v[k];
    }
    own_context();
    static const struct {
        const char *name, *what;
    } rows[7] = {
        {"copy_64_pages_from_homes", "64 copies of a page, HOST_NUMA homes -> pool view"},
        {"copy_64_pages_from_pinned", "64 copies of a page, cuMemHostAlloc -> pool view"},
        {"copy_one_from_pinned", "one copy of all 64 pages, cuMemHostAlloc -> pool view"},
        {"remap_64_pages_load", "64 x (unmap home, map pool handle, set access): a load"},
        {"remap_64_pages_evict", "64 x (unmap pool, map home handle, set access): an evict"},
        {"copy_and_remap_overlapped", "64 copies from homes queued, then the load's remaps, then wait"},
        {"copy_queue_64", "queueing the 64 copies alone (host time)"},
    };
    for (int k = 0; k < 7; k++)
        add_row(rows[k].name, "us", summarize(t[k], g_reps), "%s (%zu MiB)", rows[k].what,
                (size_t)(bytes / MiB));
    double copy = summarize(t[0], g_reps).med, remap = summarize(t[3], g_reps).med;
    add_row("overlap_saving", "x", single((copy + remap) / summarize(t[5], g_reps).med),
            "(copies + load remaps) / the two overlapped: 2 = full overlap, 1 = none");

    for (int k = 0; k < 7; k++)
        free(t[k]);
    CU(cuMemFreeHost(pinned));
    for (size_t i = 0; i < PAGES; i++)
        CU(cuMemUnmap(expert + i * page, page));
    CU(cuMemAddressFree(expert, bytes));
    page_set_destroy(&home);
    page_set_destroy(&pool);
}

/* ---------------------------------------------------------------------------------------- */
/* Main                                                                                      */
/* ---------------------------------------------------------------------------------------- */

static void print_device(void)
{
    char name[256], bus[32];
    int major, minor, driver;
    CU(cuDeviceGetName(name, sizeof name, g_dev));
    CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g_dev));
    CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g_dev));
    CU(cuDeviceGetAttribute(&g_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g_dev));
    CU(cuDeviceGetPCIBusId(bus, sizeof bus, g_dev));
    CU(cuDriverGetVersion(&driver));
    CUmemAllocationProp prop = device_prop();
    size_t rec = 0;
    CU(cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    printf("# vmm_costs\n\n");
    printf("- device %d: %s, sm_%d%d, %d SMs, PCI %s\n", g_ordinal, name, major, minor, g_sms,
           bus);
    printf("- driver CUDA %d.%d, built with CUDA %d.%d, moevm %s\n", driver / 1000,
           driver % 1000 / 10, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10, mvm_version());
    printf("- VMM granularity: minimum %zu KiB, recommended %zu KiB\n", granularity(&prop) / 1024,
           rec / 1024);
    printf("- latencies: host wall time per call, median of %d after %d warm-up\n", g_reps,
           WARMUP);
}

static int wanted(const char *only, int section)
{
    if (!only)
        return 1;
    for (const char *p = only; *p; p++)
        if (*p - '0' == section)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            g_ordinal = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            g_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else
            die("usage: vmm_costs [--device N] [--reps N (>= 20)] [--only 1,2,3,4,5,6,7]");
    }
    if (g_reps < 20)
        die("--reps %d: at least 20 repetitions are needed for a stable median", g_reps);

    /* The primary context: the one the CUDA runtime (our <<<>>> launches) uses too. VMM
     * addresses are process-wide, so moevm's mappings are readable from it either way. */
    CU(cuInit(0));
    CU(cuDeviceGet(&g_dev, g_ordinal));
    CU(cuDevicePrimaryCtxRetain(&g_ctx, g_dev));
    CU(cuCtxSetCurrent(g_ctx));
    CU(cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING));
    CUdeviceptr sink;
    CU(cuMemAlloc(&sink, sizeof *g_sink));
    g_sink = (unsigned long long *)sink;
    print_device();

    if (wanted(only, 1)) {
        section_begin("1. VMM call latency (device memory, PINNED)");
        bench_call_latency(2 * MiB);
        bench_call_latency(32 * MiB);
        bench_call_latency(256 * MiB);
        bench_set_access_batch();
        section_end();
    }
    if (wanted(only, 2)) {
        section_begin("2. Host-to-device copy bandwidth (256 MiB, median of 10)");
        bench_h2d();
        section_end();
    }
    if (wanted(only, 3)) {
        section_begin("3. HOST_NUMA VMM: kernel reads from host memory vs device memory");
        bench_host_numa_reads();
        section_end();
    }
    if (wanted(only, 4)) {
        section_begin("4. Remapping a 2 MiB page while a kernel runs on another stream");
        bench_remap_while_busy();
        section_end();
    }
    if (wanted(only, 5)) {
        section_begin("5. mvm_make_resident of a whole expert vs the bare copy");
        static const uint64_t sizes[] = {2 * MiB, 8 * MiB, 32 * MiB, 128 * MiB};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            bench_make_resident(sizes[i]);
        section_end();
    }

    if (wanted(only, 6)) {
        section_begin("6. Eviction from a write_back space: unchanged pages skip the copy home");
        bench_clean_evict(2 * MiB);
        bench_clean_evict(32 * MiB);
        section_end();
    }
    if (wanted(only, 7)) {
        section_begin("7. Where a make-resident's time goes: the cuda backend's steps, 64 pages");
        bench_make_resident_steps();
        section_end();
    }

    CU(cuMemFree((CUdeviceptr)g_sink));
    CU(cuStreamDestroy(g_stream));
    CU(cuDevicePrimaryCtxRelease(g_dev));
    printf("\ndone\n");
    return 0;
}
