/* vmm_costs sections 1-4: the CUDA driver's own costs (vmm_costs.cu says what each
 * measures). */
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
/* 1. Per-call VMM latency                                                                   */
/* ---------------------------------------------------------------------------------------- */

void bench_call_latency(size_t bytes)
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
void bench_set_access_batch(void)
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

void bench_h2d(void)
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

/* The homes moevm reads in place where they are not HOST_NUMA handles (MOEVM_HOME_MAP=off,
 * the default, or a device without HOST_NUMA VMM: vmm/backend_cuda.c): page-aligned host
 * memory registered with DEVICEMAP, read at cuMemHostGetDevicePointer's address. */
static void registered_reads(void)
{
    const size_t bytes = 256 * MiB;
    void *p = NULL;
    if (posix_memalign(&p, 2 * MiB, bytes))
        die("out of host memory for %zu MiB", (size_t)(bytes / MiB));
    fill_random(p, bytes, 5);
    const uint64_t expect = cpu_sum32(p, bytes);
    CU(cuMemHostRegister(p, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    CUdeviceptr d = 0;
    CU(cuMemHostGetDevicePointer(&d, p, 0));
    stats s = kernel_read_bandwidth(d, bytes, expect, "registered host memory");
    add_row("kernel_read_registered_256MiB", "GB/s", s,
            "kernel reads 256 MiB of registered host memory in place (the homes moevm "
            "reads with MOEVM_HOME_MAP=off)");
    CU(cuMemHostUnregister(p));
    free(p);
}

void bench_host_numa_reads(void)
{
    registered_reads();
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

void bench_remap_while_busy(void)
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

/* Does a small cuMemcpyHtoDAsync from pageable memory wait for the kernel before it on its
 * stream? The engine uploads each decode step's routing (rows, active lists, the CPU
 * experts' rows) from pageable buffers onto the stream its kernels run on
 * (engine/compute/gpu.c, mvm_gpu_upload); the driver's documentation says an async copy from
 * pageable memory "may" synchronize with the stream when it stages it. If it does, every
 * such upload behind a kernel or a copy wait costs the host that wait. Pinned memory beside
 * it for reference. */
void bench_upload_while_busy(void)
{
    const size_t busy_bytes = 64 * MiB;
    const uint64_t spin_ns = 50ull * 1000 * 1000;
    static const size_t sizes[] = {256, 8 << 10, 64 << 10, 1 << 20};
    CUmemAllocationProp prop = device_prop();
    vmm_buf busy = vmm_buf_create(&prop, busy_bytes);
    CU(cuMemsetD32(busy.va, 0x5a5a5a5a, busy_bytes / 4));
    CUdeviceptr dst;
    CU(cuMemAlloc(&dst, 1 << 20));
    void *pinned;
    CU(cuMemHostAlloc(&pinned, 1 << 20, 0));
    char *pageable = (char *)xmalloc(1 << 20);
    fill_random(pageable, 1 << 20, 7);
    volatile unsigned *flag;
    CUdeviceptr dflag;
    CU(cuMemHostAlloc((void **)&flag, sizeof *flag, CU_MEMHOSTALLOC_DEVICEMAP));
    CU(cuMemHostGetDevicePointer(&dflag, (void *)flag, 0));
    const int reps = 5;
    for (size_t k = 0; k <= sizeof sizes / sizeof *sizes; k++) {
        const int is_pinned = k == sizeof sizes / sizeof *sizes; /* last: pinned, 8 KiB */
        const size_t n = is_pinned ? 8 << 10 : sizes[k];
        double t[reps];
        int running = 0;
        for (int i = 0; i < reps; i++) {
            *flag = 0;
            spin_read_kernel<<<(unsigned)g_sms, 1024, 0, g_stream>>>(
                (const uint4 *)busy.va, busy_bytes / 16, spin_ns, (volatile unsigned *)dflag,
                g_sink);
            LAUNCHED("spin_read_kernel");
            wait_started(flag);
            double t0 = now_us();
            CU(cuMemcpyHtoDAsync(dst, is_pinned ? pinned : pageable, n, g_stream));
            t[i] = now_us() - t0;
            CUresult q = cuStreamQuery(g_stream);
            if (q == CUDA_ERROR_NOT_READY)
                running++;
            else
                CU(q);
            CU(cuStreamSynchronize(g_stream));
        }
        char name[64];
        snprintf(name, sizeof name, "upload_%s_%zuB_busy", is_pinned ? "pinned" : "pageable", n);
        add_row(name, "us", summarize(t, reps),
                "cuMemcpyHtoDAsync of %zu B from %s memory behind a 50 ms kernel on its stream "
                "(the kernel still ran after %d of %d)", n, is_pinned ? "pinned" : "pageable",
                running, reps);
    }
    printf("Verdict: an upload that takes ~50000 us waited for the kernel; one of a few us "
           "was staged without waiting\n\n");
    free(pageable);
    CU(cuMemFreeHost((void *)flag));
    CU(cuMemFreeHost(pinned));
    CU(cuMemFree(dst));
    vmm_buf_destroy(&busy);
}
