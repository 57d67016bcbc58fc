/*
 * vmm_costs — what only a GPU can tell us about the costs behind moevm's design.
 *
 *   1. latency of cuMemCreate / cuMemMap / cuMemSetAccess / cuMemUnmap / cuMemRelease at
 *      2, 32 and 256 MiB per handle, and cuMemSetAccess over 16 x 2 MiB mappings in one call
 *      versus 16 calls (the pool and remap design of docs/architecture.md, "Choices made
 *      here", depends on these);
 *   2. host-to-device copy bandwidth from pinned and from pageable memory;
 *   3. a kernel's read bandwidth from registered host memory (the homes moevm reads in
 *      place with MOEVM_HOME_MAP=off), HOST_NUMA VMM support and the same from a HOST_NUMA
 *      mapping (zero-copy over PCIe: what reading a non-resident expert costs) versus
 *      device memory;
 *   4. whether remapping an unrelated page waits for a kernel running on another stream, and
 *      whether a small upload from pageable memory waits for the kernel before it on its
 *      stream (the engine's decode uploads its routing so);
 *   5. end to end: mvm_make_resident of a whole expert versus the bare cuMemcpyHtoDAsync;
 *   6. eviction from a write_back space (the interposer's): a page the device left as it was
 *      loaded skips the copy home (vmm/digest.cu decides), against clean_evict off, and what
 *      the digests taken at load add to it; each eviction's home is checked against what
 *      the device held;
 *   7. where a make-resident's time goes: the cuda backend's steps for 64 pages of 2 MiB
 *      (per-page copies from the HOST_NUMA homes and from pinned memory, the load's and the
 *      eviction's remaps), and whether the remaps overlap the copies' DMA;
 *   8. an on-demand load asked while a prefetch of another expert is on the bus: how long
 *      it waits with the prefetch in one piece and in MOEVM_COPY_PIECE's pieces, which it
 *      overtakes (vmm/migrate.c), and what the pieces cost the prefetch;
 *   9. PreScope's AsyncIO: a load split across 1 to 4 copy lanes (MOEVM_COPY_STREAMS,
 *      vmm/cuda_lanes.c), one expert and 8 at once, against the bare copy split the same way
 *      (what decides the option's default).
 *
 * Output: per section, a markdown table and one machine-readable line per result:
 *   RESULT <name> <value> <unit>
 * Every CUDA call is checked; a failure exits with one line naming the call.
 *
 * The code: vmm_costs.h (shared parts), this file (them and main), vmm_costs_driver.cu
 * (sections 1-4), vmm_costs_space.cu (sections 5-9).
 *
 * Usage: vmm_costs [--device N] [--reps N] [--only 1,2,3,4,5,6,7,8,9]
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

#include "vmm_costs.h"

/* ---------------------------------------------------------------------------------------- */
/* Failing loudly                                                                            */
/* ---------------------------------------------------------------------------------------- */

void die(const char *fmt, ...)
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

void cu_check(CUresult r, const char *call, const char *file, int line)
{
    if (r == CUDA_SUCCESS)
        return;
    const char *name = NULL, *text = NULL;
    cuGetErrorName(r, &name);
    cuGetErrorString(r, &text);
    die("%s failed: %s (%s) [%s:%d]", call, name ? name : "?", text ? text : "?",
        file, line);
}

/* A <<<>>> launch reports a bad configuration only through the runtime's last error. */
void launch_check(const char *kernel, const char *file, int line)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        die("launch of %s failed: %s (%s) [%s:%d]", kernel, cudaGetErrorName(e),
            cudaGetErrorString(e), file, line);
}

void mvm_check(mvm_status s, const char *call, const char *file, int line)
{
    if (s != MVM_OK)
        die("%s failed: %s: %s [%s:%d]", call, mvm_status_name(s), mvm_last_error(),
            file, line);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        die("malloc(%zu) failed", n);
    return p;
}

/* ---------------------------------------------------------------------------------------- */
/* Globals, time, statistics                                                                 */
/* ---------------------------------------------------------------------------------------- */

CUdevice g_dev;
CUcontext g_ctx;   /* the device's primary context */
int g_ordinal;
int g_sms;
int g_reps = 30;  /* timed repetitions per latency measurement (>= 20) */
CUstream g_stream; /* the benchmark's own non-blocking stream */

double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place. */
stats summarize(double *v, int n)
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

stats single(double v)
{
    stats s = {v, v, v, 1};
    return s;
}

/* Bytes per microsecond -> GB/s (1e9 bytes). */
double gbps(size_t bytes, double us) { return (double)bytes / (us * 1e3); }

/* ---------------------------------------------------------------------------------------- */
/* Results: one markdown table per section, then its RESULT lines                            */
/* ---------------------------------------------------------------------------------------- */

typedef struct row {
    char name[80];  /* machine name: no spaces */
    char what[112]; /* human description */
    stats s;
    const char *unit;
} row;

static row g_rows[96]; /* section 5: two spaces, four sizes, ten rows each */
static int g_nrows;

void add_row(const char *name, const char *unit, stats s, const char *what_fmt, ...)
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
void add_sized_row(const char *base, unsigned mib, const char *unit, stats s,
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

void section_begin(const char *title)
{
    g_nrows = 0;
    printf("\n## %s\n\n", title);
    fflush(stdout);
}

void section_end(void)
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

/* Reads one word per 64 KiB so the GPU has translated (and cached in its TLBs) a mapping
 * before we unmap it: moevm only remaps pages that some kernel has read. */
__global__ void touch_kernel(const uint32_t *p, size_t words, size_t step, unsigned long long *sink)
{
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * step;
    if (i < words && p[i] == 0x9e3779b9u)
        atomicAdd(sink, 1ull);
}

/* ---------------------------------------------------------------------------------------- */
/* VMM helpers                                                                               */
/* ---------------------------------------------------------------------------------------- */

CUmemAllocationProp device_prop(void)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = (int)g_dev;
    return p;
}

CUmemAccessDesc device_rw(void)
{
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = (int)g_dev;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return a;
}

size_t granularity(const CUmemAllocationProp *p)
{
    size_t g = 0;
    CU(cuMemGetAllocationGranularity(&g, p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    return g;
}

vmm_buf vmm_buf_create(const CUmemAllocationProp *prop, size_t bytes)
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

void vmm_buf_destroy(vmm_buf *b)
{
    CU(cuMemUnmap(b->va, b->bytes));
    CU(cuMemRelease(b->h));
    CU(cuMemAddressFree(b->va, b->bytes));
}

unsigned long long *g_sink; /* device scratch word for kernels' side effects */

void touch(CUdeviceptr va, size_t bytes, CUstream s)
{
    size_t step = 64 * 1024 / 4, words = bytes / 4;
    size_t threads = (words + step - 1) / step;
    touch_kernel<<<(unsigned)((threads + 255) / 256), 256, 0, s>>>(
        (const uint32_t *)va, words, step, g_sink);
    LAUNCHED("touch_kernel");
}

/* Wall time of one copy as a caller sees it: enqueue + wait. */
double time_h2d_us(CUdeviceptr dst, const void *src, size_t bytes)
{
    double t0 = now_us();
    CU(cuMemcpyHtoDAsync(dst, src, bytes, g_stream));
    CU(cuStreamSynchronize(g_stream));
    return now_us() - t0;
}

/* Random bytes (xorshift64*), so that a read of zeros or stale data cannot pass a check. */
void fill_random(void *p, size_t bytes, uint64_t seed)
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
            die("usage: vmm_costs [--device N] [--reps N (>= 20)] [--only 1,2,3,4,5,6,7,8,9]");
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
        section_begin("3. Kernel reads from host memory in place (registered, HOST_NUMA VMM) vs "
                      "device memory");
        bench_host_numa_reads();
        section_end();
    }
    if (wanted(only, 4)) {
        section_begin("4. Driver calls while a kernel runs: a remap (another stream), uploads");
        bench_remap_while_busy();
        bench_upload_while_busy();
        section_end();
    }
    if (wanted(only, 5)) {
        section_begin("5. mvm_make_resident of a whole expert vs the bare copy");
        static const uint64_t sizes[] = {2 * MiB, 8 * MiB, 32 * MiB, 128 * MiB};
        for (int slots = 0; slots <= 1; slots++) /* pages mapped at the address, then slots */
            for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
                bench_make_resident(sizes[i], slots);
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
    if (wanted(only, 8)) {
        section_begin("8. An on-demand load asked while a prefetch is on the bus");
        bench_overtake(32 * MiB);
        bench_overtake(128 * MiB);
        section_end();
    }
    if (wanted(only, 9)) {
        section_begin("9. A load split across copy lanes (MOEVM_COPY_STREAMS)");
        bench_copy_lanes(2 * MiB);
        bench_copy_lanes(8 * MiB);
        bench_copy_lanes(32 * MiB);
        section_end();
    }

    CU(cuMemFree((CUdeviceptr)g_sink));
    CU(cuStreamDestroy(g_stream));
    CU(cuDevicePrimaryCtxRelease(g_dev));
    printf("\ndone\n");
    return 0;
}
