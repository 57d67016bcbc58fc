/*
 * fakecuda: a test double of the CUDA driver library (libcuda.so.1) on host memory.
 *
 * Tests load the fake with dlopen (or through LD_LIBRARY_PATH under a library that dlopens
 * "libcuda.so.1") and reach these inspection and control functions with dlsym, so nothing
 * links against the fake. The function-pointer typedefs below are for exactly that.
 *
 * Environment (read once, on the first call into the library):
 *   FAKECUDA_DEVICES       number of devices, 0..16 (default 1; 0 behaves like NO_DEVICE)
 *   FAKECUDA_MEM           memory per device in bytes, K/M/G suffixes (default 1G)
 *   FAKECUDA_GRANULARITY   VMM granularity in bytes, K/M/G (default 2M; power of two,
 *                          multiple of the host page size)
 *   FAKECUDA_HOST_NUMA     1: device attribute 141 reads 1 and HOST_NUMA allocations work
 *                          (default); 0: attribute 141 reads 0, HOST_NUMA creation fails
 *   FAKECUDA_NO_DEVICE     1: cuInit returns CUDA_ERROR_NO_DEVICE
 *   FAKECUDA_COPY_DELAY_US every cuMemcpy* with a non-zero size sleeps this long first
 *   FAKECUDA_MODULE_DELAY_MS every module load (cuModuleLoadData, cuLibraryLoadData) sleeps
 *                          this long first, as a driver compiling PTX
 *   FAKECUDA_FAIL          "name:N[:ERROR],...": the Nth call of cu<name> fails
 *   FAKECUDA_FAIL_FROM     same syntax: the Nth call and every later one fail
 *   FAKECUDA_KERNELS       a shared object of kernels to add to every module's five (read at
 *                          the first module load): its fakecuda_register_kernels(add) calls
 *                          add(name, param_bytes, run) for each, a kernel of one parameter
 *                          that run(params, grid, block) computes on the host (the engine's
 *                          kernels through tests/cuda_emu.h). A plugin that does not load
 *                          fails every module load with CUDA_ERROR_INVALID_IMAGE.
 *   FAKECUDA_ROUTE_BAD     1: the engine's plugin (fake_engine_kernels.cc) makes the
 *                          routing kernel's first choice one past the last expert; 2: the
 *                          first expert of its CPU's share (MOEVM_DEVICE_CPU), where any
 * A malformed variable is reported on stderr and makes cuInit fail (CUDA_ERROR_INVALID_VALUE).
 */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st; /* CUstream from cuda.h is `struct CUstream_st *` */

/* Calls of a cu* function since load or the last fakecuda_reset_counters(), counting failed
 * ones too. `name` is the base name ("cuMemAlloc"): the versioned and per-thread exports
 * count under it, and "_v2", "_ptsz", "_ptds" suffixes are accepted and ignored. Unknown
 * names give 0. */
unsigned long fakecuda_calls(const char *name);
/* cuMemCreate allocations still alive: not yet released, or released but still mapped. */
int fakecuda_live_handles(void);
/* Bytes currently mapped with cuMemMap. */
size_t fakecuda_mapped_bytes(void);
/* cuMemAddressReserve ranges not yet freed. */
int fakecuda_live_reservations(void);
/* Bytes that successful kernel launches (fake_kernels.c) read or wrote in memory backed by
 * HOST_NUMA allocations (host_numa != 0), or by device memory: DEVICE allocations and
 * cuMemAlloc memory (host_numa == 0). A range a kernel both reads and writes counts once.
 * libmoevm's own digest kernel (mvm_digest_pages) is not counted. */
unsigned long long fakecuda_kernel_bytes(int host_numa);
/* Zeroes the counters of fakecuda_calls and fakecuda_kernel_bytes (not the fault-injection
 * counts). */
void fakecuda_reset_counters(void);
/* Replaces all fault-injection rules (including those from the environment) with `spec`,
 * counting calls from now on. Syntax: comma-separated "name:N[:ERROR]"; "name:N+[:ERROR]"
 * fails the Nth call and every later one. ERROR is a CUDA_ERROR_* name or a number; the
 * default is CUDA_ERROR_OUT_OF_MEMORY for cuMemCreate, cuMemAlloc, cuMemAllocPitch,
 * cuMemAllocAsync, cuMemAddressReserve and cuMemHostRegister, CUDA_ERROR_UNKNOWN for the
 * rest. NULL or "" clears every rule.
 * Returns 0, or -1 (rules unchanged, message on stderr) for a malformed spec. */
int fakecuda_set_fail(const char *spec);
/* hold != 0: the stream's work "does not finish": events recorded on it from now on stay
 * not ready, cuEventSynchronize and cuStreamSynchronize on it block. hold == 0 completes
 * that work. NULL (or CU_STREAM_LEGACY / CU_STREAM_PER_THREAD) means the default stream.
 * A held stream that is destroyed lives on until released here. */
void fakecuda_stream_hold(struct CUstream_st *stream, int hold);

/* The i-th cuGetProcAddress request since load: its symbol, version and flags, and the
 * fake's own answer (NULL when it found nothing), stored through the pointers when i is below
 * the count. Returns the count. Malformed requests (NULL arguments, a version above the
 * fake's, unknown flags) are refused before they are logged. The symbol stays valid until the
 * library is unloaded. */
size_t fakecuda_getproc_request(size_t i, const char **symbol, int *version,
                                unsigned long long *flags, void **fn);

/* Every later copy sleeps `us` microseconds first (replaces FAKECUDA_COPY_DELAY_US), so
 * tests can hold moves in flight. */
void fakecuda_set_copy_delay_us(unsigned long long us);
/* The compute capability's major number every device reports from now on (9 until set: an
 * H100's), so tests can stand in for an older device. */
void fakecuda_set_cc_major(int major);
/* Copies (of any kind) that have begun, counted as they enter that delay: a test waits for
 * this to grow rather than sleeping and hoping a worker got there. */
unsigned long fakecuda_copies_begun(void);
/* Every later cuEventSynchronize sleeps `us` microseconds first, without the library's lock,
 * and an event recorded from now on is not done to cuEventQuery until `us` after its
 * record: a migration worker, waiting or polling, then sits between a load's mapping and
 * its landing for that long. */
void fakecuda_set_event_sync_delay_us(unsigned long long us);

/* While `hold` is set, every cuMemMap waits at its start (without the library's lock) until
 * it is cleared: a test can then act while another thread is inside a map, such as a
 * migration worker mapping a slab ahead of its copy. */
void fakecuda_hold_maps(int hold);
/* Waits up to timeout_ms for a map to be held; 1 if one is, else 0. */
int fakecuda_wait_map_held(unsigned timeout_ms);
/* The same for copies: while `hold` is set, every copy of bytes (any cuMemcpy*) waits at its
 * start, before its delay, until it is cleared, so that a test can act while a migration
 * worker is inside a copy (between two of a load's pieces, say). */
void fakecuda_hold_copies(int hold);
int fakecuda_wait_copy_held(unsigned timeout_ms);
/* While copies are held, lets the next n through (the held first), then holds again: a
 * test can let a worker run exactly so far. */
void fakecuda_pass_copies(unsigned n);

/* A plugin kernel (FAKECUDA_KERNELS): runs the launch of `params` (its one parameter's
 * bytes) in the shape given, synchronously. */
typedef void (*fakecuda_kernel_fn)(const void *params, const unsigned grid[3],
                                   const unsigned block[3]);
/* What fakecuda_register_kernels gets: adds a kernel; 0, or -1 when the table is full or
 * the size is above the fake's limit (192 bytes, FK_PARAM_BYTES). `name` must outlive the
 * library. */
typedef int (*fakecuda_add_kernel_fn)(const char *name, size_t param_bytes,
                                      fakecuda_kernel_fn run);

typedef unsigned long (*fakecuda_calls_fn)(const char *name);
typedef int (*fakecuda_live_handles_fn)(void);
typedef size_t (*fakecuda_mapped_bytes_fn)(void);
typedef int (*fakecuda_live_reservations_fn)(void);
typedef unsigned long long (*fakecuda_kernel_bytes_fn)(int host_numa);
typedef void (*fakecuda_reset_counters_fn)(void);
typedef int (*fakecuda_set_fail_fn)(const char *spec);
typedef void (*fakecuda_stream_hold_fn)(struct CUstream_st *stream, int hold);
typedef void (*fakecuda_set_copy_delay_us_fn)(unsigned long long us);
typedef void (*fakecuda_set_event_sync_delay_us_fn)(unsigned long long us);
typedef void (*fakecuda_set_cc_major_fn)(int major);
typedef size_t (*fakecuda_getproc_request_fn)(size_t i, const char **symbol, int *version,
                                              unsigned long long *flags, void **fn);

/* How many times the fake ran the engine's kernel `name` (FAKECUDA_KERNELS's plugin,
 * tests/fakecuda/fake_engine_kernels.cc, already loaded by the fake); 0 without it. */
static inline unsigned long fakecuda_engine_launches(const char *name)
{
    const char *path = getenv("FAKECUDA_KERNELS");
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    unsigned long (*n)(const char *) =
        h ? (unsigned long (*)(const char *))dlsym(h, "fake_engine_launches") : NULL;
    unsigned long r = n ? n(name) : 0;
    if (h)
        dlclose(h);
    return r;
}

#ifdef __cplusplus
}
#endif

#endif
