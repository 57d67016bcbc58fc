/*
 * vmm_costs's shared parts (vmm_costs.cu has the overview and main): failing loudly, the
 * device and timing globals, statistics, the result tables, VMM buffers, and the sections'
 * entry points (vmm_costs_driver.cu: sections 1-4, the driver's own costs;
 * vmm_costs_space.cu: sections 5-9, moevm's space on top of them).
 */
#ifndef MVM_BENCH_GPU_VMM_COSTS_H
#define MVM_BENCH_GPU_VMM_COSTS_H

#include <cuda.h>

#include <stddef.h>
#include <stdint.h>

#include "moevm/moevm.h"

#define MiB (1024ull * 1024ull)

/* ---- failing loudly: one line naming the call, then exit(1) ---- */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void cu_check(CUresult r, const char *call, const char *file, int line);
/* A <<<>>> launch reports a bad configuration only through the runtime's last error. */
void launch_check(const char *kernel, const char *file, int line);
void mvm_check(mvm_status s, const char *call, const char *file, int line);
#define CU(call) cu_check((call), #call, __FILE__, __LINE__)
#define LAUNCHED(kernel) launch_check(kernel, __FILE__, __LINE__)
#define MVM(call) mvm_check((call), #call, __FILE__, __LINE__)
void *xmalloc(size_t n);

/* ---- globals, time, statistics ---- */
extern CUdevice g_dev;
extern CUcontext g_ctx;         /* the device's primary context */
extern int g_ordinal;
extern int g_sms;
extern int g_reps;              /* timed repetitions per latency measurement (>= 20) */
enum { WARMUP = 3 };
extern CUstream g_stream;       /* the benchmark's own non-blocking stream */
extern unsigned long long *g_sink; /* device scratch word for kernels' side effects */

double now_us(void);
/* Wall time of one copy on g_stream as a caller sees it: enqueue + wait. */
double time_h2d_us(CUdeviceptr dst, const void *src, size_t bytes);

typedef struct stats {
    double med, min, max;
    int n;
} stats;

/* Sorts v in place. */
stats summarize(double *v, int n);
stats single(double v);
/* Bytes per microsecond -> GB/s (1e9 bytes). */
double gbps(size_t bytes, double us);

/* ---- results: one markdown table per section, then its RESULT lines ---- */
void add_row(const char *name, const char *unit, stats s, const char *what_fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A row of a per-size result: named "<base>_<mib>MiB", described as "<what>, <mib> MiB". */
void add_sized_row(const char *base, unsigned mib, const char *unit, stats s, const char *what);
void section_begin(const char *title);
void section_end(void);

/* ---- VMM helpers ---- */
CUmemAllocationProp device_prop(void);
CUmemAccessDesc device_rw(void);
size_t granularity(const CUmemAllocationProp *p);
static inline size_t round_up(size_t x, size_t g) { return (x + g - 1) / g * g; }

/* One handle mapped at its own reserved range with device read/write access. */
typedef struct vmm_buf {
    CUdeviceptr va;
    size_t bytes;
    CUmemGenericAllocationHandle h;
} vmm_buf;
vmm_buf vmm_buf_create(const CUmemAllocationProp *prop, size_t bytes);
void vmm_buf_destroy(vmm_buf *b);
/* Reads one word per 64 KiB of [va, va+bytes) on stream s, so that the GPU has translated
 * the mapping before it is unmapped. */
void touch(CUdeviceptr va, size_t bytes, CUstream s);
/* Random bytes (xorshift64*), so that a read of zeros or stale data cannot pass a check. */
void fill_random(void *p, size_t bytes, uint64_t seed);

/* ---- the sections ---- */
void bench_call_latency(size_t bytes);       /* 1 */
void bench_set_access_batch(void);           /* 1 */
void bench_h2d(void);                        /* 2 */
void bench_host_numa_reads(void);            /* 3 */
void bench_remap_while_busy(void);           /* 4 */
void bench_upload_while_busy(void);          /* 4 */
void bench_make_resident(uint64_t expert_bytes, int slots); /* 5 */
void bench_clean_evict(uint64_t expert_bytes);   /* 6 */
void bench_make_resident_steps(void);        /* 7 */
void bench_overtake(uint64_t expert_bytes);  /* 8 */
void bench_copy_lanes(uint64_t expert_bytes); /* 9 */

#endif
