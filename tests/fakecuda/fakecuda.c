/*
 * fakecuda: a test double of the CUDA driver library (libcuda.so.1) on host memory.
 *
 * Built as a shared object named libcuda.so.1, it stands in for the real driver on machines
 * without a GPU, so that CI exercises the CUDA backend's real call sequences and error paths.
 * It implements the subset of the driver API that moevm uses, with the real ABI (every
 * signature is checked against <cuda.h>, and the exported names are the versioned ones the
 * real library exports, e.g. cuMemAlloc_v2), and mirrors the driver's rules where a test
 * could notice: nothing works before cuInit, streams/events/copies need a current context,
 * cuMemMap makes nothing accessible until cuMemSetAccess, cuMemUnmap takes whole mappings.
 *
 * The model: "device memory" is host memory. A reservation is an anonymous PROT_NONE mmap; a
 * cuMemCreate allocation is a memfd; cuMemMap maps it MAP_FIXED|MAP_SHARED over the
 * reservation, and cuMemSetAccess turns access flags into mprotect, so a test can read and
 * write mapped "device" memory through its address. Copies and memsets (fake_copies.c) and the
 * few fake kernels (fake_kernels.c) run inside the call. "Stream-ordered" allocation is immediate.
 * cuMemAlloc and cuMemCreate memory starts as 0xff bytes, not zeros, as a real device's holds
 * stale data.
 * One mutex guards all state; a condition variable wakes waiters on held streams.
 *
 * Where the real library exports per-thread-default-stream variants (_ptsz, _ptds) of a
 * function implemented here, the fake exports them too, as separate functions with their own
 * addresses (the default stream is one stream here), and cuGetProcAddress returns them for
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, so an interposer can route by pointer.
 *
 * Only the cu* functions and the fakecuda_* inspection functions (fakecuda.h) are exported;
 * everything else is static, or hidden where fake_kernels.c shares it (fakecuda_internal.h).
 * No work happens in constructors: configuration is read from the environment on the first
 * call (see fakecuda.h for the variables).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cudaTypedefs.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda.h"
#include "fakecuda_env.h"
#include "fakecuda_internal.h"

#define FK_MAX_DEV 16
#define FK_DRIVER_VERSION 13000
#define FK_MAX_RULES 32

/* The base names of FK_FUNCS (fakecuda_internal.h); `#` keeps cuda.h's macros unexpanded. */
#define FK_NAME(name) #name,
static const char *const fk_fn_names[FN_COUNT] = {FK_FUNCS(FK_NAME)};

/* ---- error codes: names and texts as the real driver reports them ---- */

#define FK_ERR(code, text) {code, #code, text}
static const struct fk_error {
    CUresult code;
    const char *name, *text;
} fk_errors[] = {
    FK_ERR(CUDA_SUCCESS, "no error"),
    FK_ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    FK_ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    FK_ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    FK_ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    FK_ERR(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    FK_ERR(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
    FK_ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    FK_ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    FK_ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    FK_ERR(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
    FK_ERR(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
    FK_ERR(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    FK_ERR(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    FK_ERR(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
    FK_ERR(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
    FK_ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    FK_ERR(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    FK_ERR(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    FK_ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    FK_ERR(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
    FK_ERR(CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
           "the provided PTX was compiled with an unsupported toolchain."),
    FK_ERR(CUDA_ERROR_NOT_READY, "device not ready"),
    FK_ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    FK_ERR(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
    FK_ERR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    FK_ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    FK_ERR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
           "part or all of the requested memory range is already mapped"),
    FK_ERR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
           "pointer does not correspond to a registered memory region"),
    FK_ERR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    FK_ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    FK_ERR(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
    FK_ERR(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
           "system has unsupported display driver / cuda driver combination"),
    FK_ERR(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
    FK_ERR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#define FK_NERRORS (sizeof fk_errors / sizeof fk_errors[0])

static const struct fk_error *fk_error_find(CUresult code)
{
    for (size_t i = 0; i < FK_NERRORS; i++)
        if (fk_errors[i].code == code) return &fk_errors[i];
    return NULL;
}

/* ---- state ---- */

struct CUctx_st { unsigned refs; };    /* a primary context; its device is its array index */

struct CUstream_st {
    struct CUstream_st *next;
    struct CUctx_st *ctx;
    int held;          /* fakecuda_stream_hold: its work does not finish */
    int dead;          /* destroyed while held: kept until released */
    unsigned waiters;  /* threads in cuStreamSynchronize */
    struct CUstream_st *waits_on; /* cuStreamWaitEvent on a pending event: the held stream
                                     whose work this one's later work waits for */
};

struct CUevent_st {
    struct CUevent_st *next;
    struct CUctx_st *ctx;
    struct CUstream_st *stream; /* while pending: the held stream it waits for */
    int pending;
    unsigned flags;
    int recorded;
    double at;                  /* seconds (CLOCK_MONOTONIC) when it completed */
    double ready;               /* a query sees it done from then on: recorded under an
                                   event-wait delay, that long after its record */
};

static double event_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct fk_alloc { /* the physical memory behind one cuMemCreate handle */
    struct fk_alloc *next;
    CUmemGenericAllocationHandle id;
    size_t size;
    int fd;
    int host_numa; /* 0: DEVICE allocation on device `dev` (counted against its memory) */
    int dev;
    int released;
    unsigned long pieces; /* mapped pieces referring to it: it lives while any remain */
};

struct fk_range { /* a reservation, a cuMemAlloc block, or a registered host range */
    struct fk_range *next;
    uintptr_t va;
    size_t size;
    struct CUctx_st *ctx; /* cuMemAlloc only: the owning context */
    unsigned long long id; /* cuMemAlloc only: its buffer id */
};

/* A part of one cuMemMap mapping. cuMemSetAccess on a sub-range splits pieces so each piece
 * has uniform access; map_va/map_size remember the whole mapping so that cuMemUnmap can
 * insist on whole mappings as the real driver does. */
struct fk_piece {
    struct fk_piece *next;
    uintptr_t va, map_va;
    size_t size, map_size;
    struct fk_alloc *alloc;
    unsigned char dev_access[FK_MAX_DEV]; /* CU_MEM_ACCESS_FLAGS_PROT_* per device */
    unsigned char host_access;            /* from a HOST_NUMA access descriptor */
};

struct fk_rule {
    enum fk_fn fn;
    unsigned long nth, seen;
    int from; /* fail the nth call and all later ones */
    CUresult err;
};

static struct {
    unsigned long long devices, mem, gran, host_numa, no_device, copy_delay_us, module_delay_ms;
    int bad; /* a malformed variable: cuInit fails */
} cfg;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* The copy delay in effect: FAKECUDA_COPY_DELAY_US, or fakecuda_set_copy_delay_us. */
static _Atomic unsigned long long g_copy_delay_us;
/* The compute capability's major number the devices report (fakecuda_set_cc_major). */
static _Atomic int g_cc_major = 9;
/* What each cuEventSynchronize sleeps first, and how long after its record a query sees an
 * event done (fakecuda_set_event_sync_delay_us). */
static _Atomic unsigned long long g_event_delay_us;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER; /* a held stream was released */
static int g_initialized;
static unsigned long g_calls[FN_COUNT];
static struct fk_rule g_rules[FK_MAX_RULES];
static int g_nrules;
static size_t g_used[FK_MAX_DEV]; /* device bytes in live DEVICE allocations + cuMemAlloc */
static struct CUctx_st g_ctx[FK_MAX_DEV];
static struct CUstream_st g_default_stream; /* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD */
static struct CUstream_st *g_streams;
static struct CUevent_st *g_events;
static struct fk_alloc *g_allocs;
static struct fk_range *g_resvs, *g_devmem, *g_hostregs;
static struct fk_piece *g_pieces;
static unsigned long long g_next_buffer_id; /* cuMemAlloc blocks', from 1 as the driver's */
static CUmemGenericAllocationHandle g_next_handle = 0xfc0000;
static _Thread_local struct CUctx_st *t_ctx; /* the calling thread's current context */

/* ---- configuration ---- */

static void env_num(const char *var, unsigned long long *val, unsigned long long max)
{
    if (fk_env_num("fakecuda", var, val, max)) cfg.bad = 1;
}

/* The FK_FUNCS index of a base or exported name: cuMemcpyHtoD_v2_ptds -> cuMemcpyHtoD. */
static int fn_index(const char *name)
{
    size_t n = strlen(name);
    if (n > 5 && (strcmp(name + n - 5, "_ptsz") == 0 || strcmp(name + n - 5, "_ptds") == 0))
        n -= 5;
    if (n > 3 && strncmp(name + n - 3, "_v2", 3) == 0) n -= 3;
    for (int i = 0; i < FN_COUNT; i++)
        if (strlen(fk_fn_names[i]) == n && strncmp(fk_fn_names[i], name, n) == 0) return i;
    return -1;
}

/* Appends the rules of `spec` to rules[*n]; -1 with a message when malformed. */
static int parse_rules(const char *spec, int from, struct fk_rule *rules, int *n)
{
    char buf[1024];
    if (!spec || !*spec) return 0;
    if (strlen(spec) >= sizeof buf) goto bad;
    strcpy(buf, spec);
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item;
         item = strtok_r(NULL, ",", &save)) {
        char *name = item, *num = strchr(item, ':'), *err = NULL, *end;
        if (!num) goto bad;
        *num++ = 0;
        if ((err = strchr(num, ':'))) *err++ = 0;
        int fn = fn_index(name);
        if (fn < 0 || *n == FK_MAX_RULES || *num < '1' || *num > '9') goto bad;
        struct fk_rule r = {.fn = (enum fk_fn)fn, .from = from};
        r.nth = strtoul(num, &end, 10);
        if (*end == '+') r.from = 1, end++;
        if (*end) goto bad;
        if (fn == FN_cuMemCreate || fn == FN_cuMemAlloc || fn == FN_cuMemAllocPitch ||
            fn == FN_cuMemAllocAsync || fn == FN_cuMemAddressReserve || fn == FN_cuMemHostRegister)
            r.err = CUDA_ERROR_OUT_OF_MEMORY;
        else
            r.err = CUDA_ERROR_UNKNOWN;
        if (err && *err >= '0' && *err <= '9') {
            r.err = (CUresult)strtoul(err, &end, 10);
            if (*end || r.err == CUDA_SUCCESS) goto bad;
        } else if (err) {
            size_t i = 1; /* not CUDA_SUCCESS */
            while (i < FK_NERRORS && strcmp(fk_errors[i].name, err) != 0) i++;
            if (i == FK_NERRORS) goto bad;
            r.err = fk_errors[i].code;
        }
        rules[(*n)++] = r;
    }
    return 0;
bad:
    fprintf(stderr, "fakecuda: bad fault spec \"%s\" (want name:N[+][:CUDA_ERROR_X],...)\n",
            spec);
    return -1;
}

static void load_config(void)
{
    cfg.devices = 1;
    cfg.mem = 1ull << 30;
    cfg.gran = 2ull << 20;
    cfg.host_numa = 1;
    env_num("FAKECUDA_DEVICES", &cfg.devices, FK_MAX_DEV);
    env_num("FAKECUDA_MEM", &cfg.mem, (unsigned long long)SIZE_MAX);
    env_num("FAKECUDA_GRANULARITY", &cfg.gran, 1ull << 40);
    env_num("FAKECUDA_HOST_NUMA", &cfg.host_numa, 1);
    env_num("FAKECUDA_NO_DEVICE", &cfg.no_device, 1);
    env_num("FAKECUDA_COPY_DELAY_US", &cfg.copy_delay_us, 60000000);
    atomic_store(&g_copy_delay_us, cfg.copy_delay_us);
    env_num("FAKECUDA_MODULE_DELAY_MS", &cfg.module_delay_ms, 600000);
    unsigned long long page = (unsigned long long)sysconf(_SC_PAGESIZE);
    if (cfg.gran < page || (cfg.gran & (cfg.gran - 1))) {
        fprintf(stderr, "fakecuda: FAKECUDA_GRANULARITY=%llu: not a power of two >= %llu\n",
                cfg.gran, page);
        cfg.bad = 1;
    }
    if (parse_rules(getenv("FAKECUDA_FAIL"), 0, g_rules, &g_nrules) ||
        parse_rules(getenv("FAKECUDA_FAIL_FROM"), 1, g_rules, &g_nrules))
        cfg.bad = 1;
}

/* ---- entry and exit of every API function ---- */

/* Every rule for fn counts the call, so rules for the same function stay independent. */
static CUresult injected(enum fk_fn fn)
{
    CUresult rc = CUDA_SUCCESS;
    for (int i = 0; i < g_nrules; i++) {
        struct fk_rule *r = &g_rules[i];
        if (r->fn != fn) continue;
        r->seen++;
        if (!rc && (r->seen == r->nth || (r->from && r->seen > r->nth))) rc = r->err;
    }
    return rc;
}

/* An injected failure has no side effects: it happens before the body runs. */
CUresult fk_enter(enum fk_fn fn, int need_init)
{
    pthread_once(&g_once, load_config);
    pthread_mutex_lock(&g_lock);
    g_calls[fn]++;
    if (need_init && !g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return injected(fn);
}

CUresult fk_leave(CUresult rc)
{
    pthread_mutex_unlock(&g_lock);
    return rc;
}

void fk_lock(void)
{
    pthread_once(&g_once, load_config);
    pthread_mutex_lock(&g_lock);
}

void fk_unlock(void) { pthread_mutex_unlock(&g_lock); }

CUresult fk_need_ctx(void)
{
    if (!t_ctx) return CUDA_ERROR_INVALID_CONTEXT;
    return t_ctx->refs ? CUDA_SUCCESS : CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

CUcontext fk_current_ctx(void) { return t_ctx; }

static int ctx_dev(const struct CUctx_st *c) { return (int)(c - g_ctx); }
static int dev_ok(CUdevice d) { return d >= 0 && (unsigned long long)d < cfg.devices; }

/* ---- small helpers ---- */

static size_t overlap(uintptr_t a, size_t an, uintptr_t b, size_t bn)
{
    uintptr_t lo = a > b ? a : b, hi = (a + an < b + bn) ? a + an : b + bn;
    return hi > lo ? hi - lo : 0;
}

/* A granularity-aligned, non-empty range that does not wrap around. */
static int gran_range_ok(uintptr_t va, size_t size)
{
    return size && va % cfg.gran == 0 && size % cfg.gran == 0 && va + size > va;
}

static struct fk_range *range_find(struct fk_range *list, uintptr_t va)
{
    for (; list; list = list->next)
        if (list->va == va) return list;
    return NULL;
}

static void range_unlink(struct fk_range **list, struct fk_range *r)
{
    while (*list != r) list = &(*list)->next;
    *list = r->next;
}

static int host_numa_node_ok(int id)
{
    char path[64];
    if (id == 0) return 1; /* node 0 always, also on machines without NUMA in sysfs */
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d", id);
    return id > 0 && access(path, F_OK) == 0;
}

/* Validates the location of an allocation property (cuMemCreate, granularity). */
static CUresult prop_check(const CUmemAllocationProp *prop)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        return dev_ok(prop->location.id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        if (!cfg.host_numa) return CUDA_ERROR_NOT_SUPPORTED; /* attribute 141 reads 0 */
        return host_numa_node_ok(prop->location.id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default: /* HOST needs attribute 145 (0 here); HOST_NUMA_CURRENT is refused for VMM */
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* ---- initialization, devices, contexts ---- */

static CUresult do_init(unsigned flags)
{
    if (cfg.bad || flags) return CUDA_ERROR_INVALID_VALUE;
    if (cfg.no_device || cfg.devices == 0) return CUDA_ERROR_NO_DEVICE;
    g_initialized = 1;
    return CUDA_SUCCESS;
}

static CUresult device_attribute(int *pi, CUdevice_attribute attr, CUdevice dev)
{
    if (!pi || attr <= 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *pi = 2; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = 0xfe; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = dev; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = atomic_load(&g_cc_major); break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID: *pi = -1; break; /* device memory is not a NUMA node */
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        *pi = (int)cfg.host_numa;
        break;
    default: *pi = 0; break; /* includes HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED (145) */
    }
    return CUDA_SUCCESS;
}

static CUresult primary_retain(CUcontext *pctx, CUdevice dev)
{
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
    g_ctx[dev].refs++;
    *pctx = &g_ctx[dev];
    return CUDA_SUCCESS;
}

static void stream_maybe_free(struct CUstream_st *s);

/* The last release destroys the primary context, and with it, as in the real driver, its
 * streams, events, modules and cuMemAlloc memory (VMM allocations belong to no context). */
static CUresult primary_release(CUdevice dev)
{
    if (!dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
    struct CUctx_st *c = &g_ctx[dev];
    if (c->refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--c->refs) return CUDA_SUCCESS;
    for (struct CUstream_st *s = g_streams, *next; s; s = next) {
        next = s->next;
        if (s->ctx == c) s->dead = 1, stream_maybe_free(s);
    }
    for (struct CUevent_st **pe = &g_events, *e; (e = *pe);) {
        if (e->ctx == c) *pe = e->next, free(e);
        else pe = &e->next;
    }
    for (struct fk_range **pr = &g_devmem, *r; (r = *pr);) {
        if (r->ctx != c) { pr = &r->next; continue; }
        *pr = r->next;
        munmap((void *)r->va, r->size);
        g_used[dev] -= r->size;
        free(r);
    }
    fk_kernels_drop_ctx(c);
    return CUDA_SUCCESS;
}

static CUresult ctx_set_current(CUcontext ctx)
{
    int known = ctx == NULL;
    for (unsigned long long d = 0; d < cfg.devices; d++) known |= ctx == &g_ctx[d];
    if (!known) return CUDA_ERROR_INVALID_CONTEXT;
    t_ctx = ctx;
    return CUDA_SUCCESS;
}

/* ---- cuGetProcAddress: the fake's own exports, found with dlsym ---- */

static void *g_self, *g_self_base; /* this library's dlopen handle and load address */

/* dlsym on our own handle, but only symbols defined here: the handle's scope also covers our
 * dependencies, and libc has a "cuserid". */
static void *self_sym(const char *name)
{
    Dl_info info;
    if (!g_self && dladdr((void *)&self_sym, &info) && info.dli_fname) {
        /* The address of a static function: a cu* symbol could be interposed (LD_PRELOAD)
         * and would then name the interposer instead of this library. */
        g_self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
        g_self_base = info.dli_fbase;
    }
    void *fn = g_self ? dlsym(g_self, name) : NULL;
    return fn && dladdr(fn, &info) && info.dli_fbase == g_self_base ? fn : NULL;
}

/* Exports that a caller asking for an older CUDA version must not get (the versions of
 * cudaTypedefs.h's PFN_<name>_v<version>). A _v2 too new for the caller gives way to the
 * older export of the same base name, as cuCtxSynchronize_v2 (13.0) does to cuCtxSynchronize. */
static const struct fk_since {
    const char *name;
    int since;
} fk_since[] = {
    {"cuGetProcAddress", 11030}, {"cuGetProcAddress_v2", 12000}, {"cuCtxSynchronize_v2", 13000},
    {"cuMemAllocAsync", 11020},  {"cuMemFreeAsync", 11020},      {"cuLaunchKernelEx", 11060},
    {"cuFuncGetParamInfo", 12040},
    {"cuStreamBeginCapture_v2", 10010}, {"cuGraphInstantiateWithFlags", 11040},
    {"cuGraphInstantiateWithParams", 12000}, {"cuGraphExecUpdate_v2", 12000},
    {"cuGraphAddKernelNode_v2", 12000}, {"cuGraphKernelNodeGetParams_v2", 12000},
    {"cuGraphExecKernelNodeSetParams_v2", 12000}, {"cuLibraryLoadData", 12000},
    {"cuLibraryGetKernel", 12000}, {"cuKernelGetParamInfo", 12040},
    {"cuGraphExecNodeSetParams", 12020}, {"cuMemcpyBatchAsync_v2", 13000},
    {"cuGraphAddDependencies_v2", 12030},
};

/* The CUDA version that introduced an export (0: older than any caller), per-thread variants
 * included. */
static int export_since(const char *name)
{
    for (size_t i = 0; i < sizeof fk_since / sizeof fk_since[0]; i++) {
        size_t n = strlen(fk_since[i].name);
        const char *rest = name + n;
        if (strncmp(name, fk_since[i].name, n) == 0 &&
            (!*rest || strcmp(rest, "_ptsz") == 0 || strcmp(rest, "_ptds") == 0))
            return fk_since[i].since;
    }
    return 0;
}

/* Every cuGetProcAddress request and the fake's answer (fakecuda_getproc_request), so a test
 * can replay what a caller such as the CUDA runtime asked for. Under the lock. */
struct fk_getproc {
    char *symbol;
    int version;
    cuuint64_t flags;
    void *fn;
};
static struct fk_getproc *g_getproc;
static size_t g_getproc_n, g_getproc_cap;

static void log_request(const char *symbol, int version, cuuint64_t flags, void *fn)
{
    if (g_getproc_n == g_getproc_cap) {
        size_t cap = g_getproc_cap ? 2 * g_getproc_cap : 512;
        struct fk_getproc *more = realloc(g_getproc, cap * sizeof *more);
        if (!more) return; /* the log is for tests; the call itself goes on */
        g_getproc = more, g_getproc_cap = cap;
    }
    char *copy = strdup(symbol);
    if (copy)
        g_getproc[g_getproc_n++] = (struct fk_getproc){copy, version, flags, fn};
}

/* A base name maps to the newest ABI the caller's version allows ("cuMemAlloc" ->
 * cuMemAlloc_v2), and with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM to its per-thread
 * variant where one exists ("cuLaunchKernel" -> cuLaunchKernel_ptsz), as in the real driver. */
static CUresult proc_address(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    static const char *const suffix[] = {"_v2_ptsz", "_v2_ptds", "_ptsz", "_ptds", "_v2", ""};
    const size_t nsuffix = sizeof suffix / sizeof suffix[0];
    char name[128];
    void *fn = NULL;
    int too_new = 0;
    if (!symbol || !pfn || version > FK_DRIVER_VERSION ||
        (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                               CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
        return CUDA_ERROR_INVALID_VALUE;
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    if (strncmp(symbol, "cu", 2) == 0 && strlen(symbol) < sizeof name - 8) {
        for (size_t i = per_thread ? 0 : nsuffix - 2; !fn && i < nsuffix; i++) {
            snprintf(name, sizeof name, "%s%s", symbol, suffix[i]);
            void *f = self_sym(name);
            if (f && export_since(name) > version) too_new = 1;
            else fn = f;
        }
    }
    *pfn = fn;
    log_request(symbol, version, flags, fn);
    if (status)
        *status = fn        ? CU_GET_PROC_ADDRESS_SUCCESS
                  : too_new ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* ---- VMM: reservations, allocations, mappings ---- */

static CUresult mem_reserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                            unsigned long long flags)
{
    const int mf = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    void *p = MAP_FAILED;
    if (!ptr || flags || !size || size % cfg.gran || (align & (align - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    if (align < cfg.gran) align = cfg.gran;
    if (size > SIZE_MAX - align) return CUDA_ERROR_OUT_OF_MEMORY;
    struct fk_range *r = calloc(1, sizeof *r);
    if (!r) return CUDA_ERROR_OUT_OF_MEMORY;
#ifdef MAP_FIXED_NOREPLACE
    if (addr && addr % align == 0) { /* a hint, as for the real driver */
        p = mmap((void *)(uintptr_t)addr, size, PROT_NONE, mf | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != MAP_FAILED && p != (void *)(uintptr_t)addr) munmap(p, size), p = MAP_FAILED;
    }
#else
    (void)addr;
#endif
    if (p == MAP_FAILED) { /* over-allocate, then trim to the alignment */
        char *raw = mmap(NULL, size + align, PROT_NONE, mf, -1, 0);
        if (raw == MAP_FAILED) return free(r), CUDA_ERROR_OUT_OF_MEMORY;
        char *start = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
        if (start > raw) munmap(raw, (size_t)(start - raw));
        if (raw + size + align > start + size)
            munmap(start + size, (size_t)(raw + size + align - (start + size)));
        p = start;
    }
    r->va = (uintptr_t)p;
    r->size = size;
    r->next = g_resvs;
    g_resvs = r;
    *ptr = (CUdeviceptr)r->va;
    return CUDA_SUCCESS;
}

static CUresult mem_address_free(uintptr_t va, size_t size)
{
    struct fk_range *r = range_find(g_resvs, va);
    if (!r || r->size != size) return CUDA_ERROR_INVALID_VALUE;
    for (struct fk_piece *p = g_pieces; p; p = p->next)
        if (overlap(p->va, p->size, va, size)) return CUDA_ERROR_INVALID_VALUE; /* still mapped */
    munmap((void *)va, size);
    range_unlink(&g_resvs, r);
    free(r);
    return CUDA_SUCCESS;
}

/* cuMemCreate's contents are unspecified: the allocation starts as 0xff bytes, as cuMemAlloc's
 * does, so a reader of bytes nobody wrote fails its test. Written through the file, not a
 * mapping: ThreadSanitizer would shadow a memset of every allocation (the vmm's memset of its
 * homes was a fifth of a short interposer scenario under TSan: 1.37 s -> 1.09 s without it),
 * and the kernel's writes are not memory accesses it watches. */
static int poison_fd(int fd, size_t size)
{
    static unsigned char ones[1 << 16];
    if (!ones[0]) memset(ones, 0xff, sizeof ones);
    for (size_t off = 0; off < size;) {
        size_t n = size - off < sizeof ones ? size - off : sizeof ones;
        ssize_t w = pwrite(fd, ones, n, (off_t)off);
        if (w <= 0) return -1;
        off += (size_t)w;
    }
    return 0;
}

static CUresult mem_create(CUmemGenericAllocationHandle *handle, size_t size,
                           const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (!handle || flags || !size || size % cfg.gran) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = prop_check(prop);
    if (rc) return rc;
    int host_numa = prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
    int dev = host_numa ? 0 : prop->location.id;
    if (!host_numa && size > cfg.mem - g_used[dev]) return CUDA_ERROR_OUT_OF_MEMORY;
    struct fk_alloc *a = calloc(1, sizeof *a);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    a->fd = memfd_create("fakecuda", MFD_CLOEXEC);
    if (a->fd < 0 || ftruncate(a->fd, (off_t)size) != 0 || poison_fd(a->fd, size) != 0) {
        if (a->fd >= 0) close(a->fd);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->id = g_next_handle++;
    a->size = size;
    a->host_numa = host_numa;
    a->dev = dev;
    a->next = g_allocs;
    g_allocs = a;
    if (!host_numa) g_used[dev] += size;
    *handle = a->id;
    return CUDA_SUCCESS;
}

static struct fk_alloc *alloc_find(CUmemGenericAllocationHandle id)
{
    struct fk_alloc *a = g_allocs;
    while (a && a->id != id) a = a->next;
    return a;
}

/* Physical memory goes away once the handle is released and the last mapping is gone. */
static void alloc_maybe_free(struct fk_alloc *a)
{
    if (!a->released || a->pieces) return;
    struct fk_alloc **pa = &g_allocs;
    while (*pa != a) pa = &(*pa)->next;
    *pa = a->next;
    close(a->fd);
    if (!a->host_numa) g_used[a->dev] -= a->size;
    free(a);
}

static CUresult mem_release(CUmemGenericAllocationHandle handle)
{
    struct fk_alloc *a = alloc_find(handle);
    if (!a || a->released) return CUDA_ERROR_INVALID_VALUE;
    a->released = 1;
    alloc_maybe_free(a);
    return CUDA_SUCCESS;
}

static struct fk_range *resv_containing(uintptr_t va, size_t size)
{
    for (struct fk_range *r = g_resvs; r; r = r->next)
        if (va >= r->va && va + size <= r->va + r->size) return r;
    return NULL;
}

/* Bytes of [va, va+size) covered by mapped pieces. */
static size_t mapped_within(uintptr_t va, size_t size)
{
    size_t n = 0;
    for (struct fk_piece *p = g_pieces; p; p = p->next) n += overlap(p->va, p->size, va, size);
    return n;
}

static CUresult mem_map(uintptr_t va, size_t size, size_t offset,
                        CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    struct fk_alloc *a = alloc_find(handle);
    /* A real driver says only INVALID_VALUE; the fake says which rule refused, so that a
     * refusal a test did not expect (a race in the caller) can be told apart. */
    const char *why = !a ? "no such allocation" : a->released ? "allocation released"
        : flags ? "flags not 0" : offset ? "offset not 0"
        : !gran_range_ok(va, size) ? "address or size not granule-aligned"
        : size > a->size ? "larger than the allocation"
        : !resv_containing(va, size) ? "outside every reservation"
        : mapped_within(va, size) ? "overlaps a mapping" : NULL;
    if (why) {
        fprintf(stderr, "fakecuda: cuMemMap(0x%llx, %zu) refused: %s\n",
                (unsigned long long)va, size, why);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct fk_piece *p = calloc(1, sizeof *p);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    /* PROT_NONE: a new mapping is inaccessible until cuMemSetAccess. */
    if (mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, 0) == MAP_FAILED)
        return free(p), CUDA_ERROR_OUT_OF_MEMORY;
    p->va = p->map_va = va;
    p->size = p->map_size = size;
    p->alloc = a;
    a->pieces++;
    p->next = g_pieces;
    g_pieces = p;
    return CUDA_SUCCESS;
}

/* Splits the piece that strictly contains addr, if any, at addr. */
static int piece_split(uintptr_t addr)
{
    for (struct fk_piece *p = g_pieces; p; p = p->next) {
        if (addr <= p->va || addr >= p->va + p->size) continue;
        struct fk_piece *q = malloc(sizeof *q);
        if (!q) return -1;
        *q = *p;
        q->va = addr;
        q->size = p->va + p->size - addr;
        p->size = addr - p->va;
        p->next = q;
        p->alloc->pieces++;
        return 0;
    }
    return 0;
}

static int piece_prot(const struct fk_piece *p)
{
    unsigned u = p->host_access;
    for (int d = 0; d < FK_MAX_DEV; d++) u |= p->dev_access[d];
    if ((u & CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return PROT_READ | PROT_WRITE;
    return (u & CU_MEM_ACCESS_FLAGS_PROT_READ) ? PROT_READ : PROT_NONE;
}

static CUresult mem_set_access(uintptr_t va, size_t size, const CUmemAccessDesc *desc,
                               size_t count)
{
    if (!desc || !count || !gran_range_ok(va, size) || mapped_within(va, size) != size)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        CUmemAccess_flags f = desc[i].flags;
        if (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
        if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
            if (!dev_ok(desc[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
        } else if (desc[i].location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA) {
            /* Host access only to host allocations ("cannot specify HOST_NUMA accessibility
             * for allocations created on other location types"). */
            for (struct fk_piece *p = g_pieces; p; p = p->next)
                if (overlap(p->va, p->size, va, size) && !p->alloc->host_numa)
                    return CUDA_ERROR_INVALID_VALUE;
        } else {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (piece_split(va) || piece_split(va + size)) return CUDA_ERROR_OUT_OF_MEMORY;
    for (struct fk_piece *p = g_pieces; p; p = p->next) {
        if (!overlap(p->va, p->size, va, size)) continue;
        for (size_t i = 0; i < count; i++) {
            if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE)
                p->dev_access[desc[i].location.id] = (unsigned char)desc[i].flags;
            else
                p->host_access = (unsigned char)desc[i].flags;
        }
        if (mprotect((void *)p->va, p->size, piece_prot(p)) != 0) return CUDA_ERROR_UNKNOWN;
    }
    return CUDA_SUCCESS;
}

static CUresult mem_unmap(uintptr_t va, size_t size)
{
    if (!gran_range_ok(va, size)) return CUDA_ERROR_INVALID_VALUE;
    size_t covered = 0;
    for (struct fk_piece *p = g_pieces; p; p = p->next) {
        if (!overlap(p->va, p->size, va, size)) continue;
        if (p->map_va < va || p->map_va + p->map_size > va + size)
            return CUDA_ERROR_INVALID_VALUE; /* would cut a mapping */
        covered += p->size;
    }
    if (covered != size) return CUDA_ERROR_INVALID_VALUE;
    /* Back to a plain PROT_NONE reservation. */
    if (mmap((void *)va, size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
        return CUDA_ERROR_UNKNOWN;
    for (struct fk_piece **pp = &g_pieces, *p; (p = *pp);) {
        if (!overlap(p->va, p->size, va, size)) { pp = &p->next; continue; }
        *pp = p->next;
        p->alloc->pieces--;
        alloc_maybe_free(p->alloc);
        free(p);
    }
    return CUDA_SUCCESS;
}

/* ---- plain device memory and registered host memory ---- */

static CUresult mem_alloc(CUdeviceptr *dptr, size_t size)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    int dev = ctx_dev(t_ctx);
    if (!dptr || !size) return CUDA_ERROR_INVALID_VALUE;
    if (size > cfg.mem - g_used[dev]) return CUDA_ERROR_OUT_OF_MEMORY;
    struct fk_range *r = calloc(1, sizeof *r);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!r || p == MAP_FAILED) {
        if (p != MAP_FAILED) munmap(p, size);
        return free(r), CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* A real device hands back whatever the memory held: fill it with 0xff bytes (NaN as
     * floats, -1 as integers), so a reader of memory it never wrote fails its test rather
     * than finding the zeros a fresh mapping would give. */
    memset(p, 0xff, size);
    r->va = (uintptr_t)p;
    r->size = size;
    r->ctx = t_ctx;
    r->id = ++g_next_buffer_id;
    r->next = g_devmem;
    g_devmem = r;
    g_used[dev] += size;
    *dptr = (CUdeviceptr)r->va;
    return CUDA_SUCCESS;
}

static CUresult mem_free(uintptr_t va)
{
    CUresult rc = fk_need_ctx();
    if (rc || !va) return rc;
    struct fk_range *r = range_find(g_devmem, va);
    if (!r) return CUDA_ERROR_INVALID_VALUE;
    munmap((void *)r->va, r->size);
    g_used[ctx_dev(r->ctx)] -= r->size;
    range_unlink(&g_devmem, r);
    free(r);
    return CUDA_SUCCESS;
}

/* The real rules: 4-, 8- or 16-byte elements, rows padded to a multiple of 512 bytes. */
static CUresult mem_alloc_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                unsigned elem)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!dptr || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16) ||
        width > SIZE_MAX - 511)
        return CUDA_ERROR_INVALID_VALUE;
    size_t p = (width + 511) & ~(size_t)511;
    if (height > SIZE_MAX / p) return CUDA_ERROR_OUT_OF_MEMORY;
    rc = mem_alloc(dptr, p * height);
    if (!rc) *pitch = p;
    return rc;
}

/* Stream-ordered allocation and free happen at once: the fake's streams have no queue. */
static CUresult mem_alloc_async(CUdeviceptr *dptr, size_t size, CUstream s)
{
    CUresult rc = fk_need_ctx();
    if (!rc && !fk_stream_ok(s)) rc = CUDA_ERROR_INVALID_HANDLE;
    return rc ? rc : mem_alloc(dptr, size);
}

static CUresult mem_free_async(uintptr_t va, CUstream s)
{
    CUresult rc = fk_need_ctx();
    if (!rc && !fk_stream_ok(s)) rc = CUDA_ERROR_INVALID_HANDLE;
    return rc ? rc : mem_free(va);
}

static struct fk_range *range_holding(struct fk_range *list, uintptr_t va)
{
    for (; list; list = list->next)
        if (va >= list->va && va - list->va < list->size) return list;
    return NULL;
}

/* cuMemAlloc memory only, from its base. The handle holds the base address (bytes 0-7) and
 * the size (bytes 8-15) in host byte order, zeros after. */
static CUresult ipc_get_mem_handle(CUipcMemHandle *handle, uintptr_t va)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    struct fk_range *r = range_find(g_devmem, va);
    if (!handle || !r) return CUDA_ERROR_INVALID_VALUE;
    uint64_t base = r->va, size = r->size;
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, &base, sizeof base);
    memcpy(handle->reserved + sizeof base, &size, sizeof size);
    return CUDA_SUCCESS;
}

/* The attributes a VMM-aware caller reads, as the real driver gives them for the three kinds
 * of memory it knows:
 *   - a cuMemAlloc block: device memory of its context, its own range and buffer id;
 *   - mapped VMM memory: the reservation it lies in as the range ("the mappable address
 *     range", as cuda.h puts it), the physical allocation's id as the buffer id (so the id
 *     changes when a page is remapped), no context; and, for a HOST_NUMA allocation, host
 *     memory on no device (what Open MPI found the driver reports, open-mpi/ompi#12751);
 *   - registered host memory: host memory.
 * Other (pageable) memory is unknown to the driver: INVALID_VALUE. Attributes not modelled
 * say so with CUDA_ERROR_NOT_SUPPORTED. */
static struct fk_piece *piece_holding(uintptr_t va)
{
    for (struct fk_piece *p = g_pieces; p; p = p->next)
        if (va >= p->va && va - p->va < p->size) return p;
    return NULL;
}

static CUresult pointer_attribute(void *data, CUpointer_attribute attr, uintptr_t va)
{
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    struct fk_range *r = range_holding(g_devmem, va), *host = range_holding(g_hostregs, va);
    struct fk_piece *piece = r ? NULL : piece_holding(va);
    struct fk_range *resv = piece ? range_holding(g_resvs, va) : NULL;
    int on_host = host || (piece && piece->alloc->host_numa);
    if (!r && !piece && !host) return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = on_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        if (!r) return CUDA_ERROR_INVALID_VALUE;
        *(CUcontext *)data = r->ctx;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        if (on_host) return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = r ? ctx_dev(r->ctx) : piece->alloc->dev;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        if (host) return CUDA_ERROR_INVALID_VALUE;
        *(unsigned long long *)data = r ? r->id : piece->alloc->id;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        if (host || !(r = r ? r : resv)) return CUDA_ERROR_INVALID_VALUE;
        if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) *(CUdeviceptr *)data = (CUdeviceptr)r->va;
        else *(size_t *)data = r->size;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* The size of attribute attr's value, for the zeros of cuPointerGetAttributes. */
static size_t attribute_size(CUpointer_attribute attr)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: return sizeof(unsigned);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_CONTEXT: return sizeof(CUcontext);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: return sizeof(CUdeviceptr);
    default: return sizeof(size_t);
    }
}

/* Unlike cuPointerGetAttribute, a pointer the driver does not know is no error here: its
 * attributes read as zeros (cuda.h). Only the modelled attributes are accepted. */
static CUresult pointer_attributes(unsigned n, CUpointer_attribute *attrs, void **data,
                                   uintptr_t va)
{
    if (!n || !attrs || !data) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        CUresult rc = pointer_attribute(data[i], attrs[i], va);
        if (rc == CUDA_ERROR_INVALID_VALUE && data[i]) memset(data[i], 0, attribute_size(attrs[i]));
        else if (rc) return rc;
    }
    return CUDA_SUCCESS;
}

/* The cuMemAlloc block holding va; for mapped VMM memory, what one cuMemMap call mapped (the
 * real driver answers with "the individual segment containing the pointer", not the
 * reservation). */
static CUresult address_range(CUdeviceptr *base, size_t *size, uintptr_t va)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    uintptr_t b = 0;
    size_t n = 0;
    struct fk_range *r = range_holding(g_devmem, va);
    if (r) b = r->va, n = r->size;
    for (struct fk_piece *p = g_pieces; !r && p; p = p->next)
        if (va >= p->map_va && va - p->map_va < p->map_size) b = p->map_va, n = p->map_size;
    if (!n) return CUDA_ERROR_NOT_FOUND;
    if (base) *base = (CUdeviceptr)b;
    if (size) *size = n;
    return CUDA_SUCCESS;
}

static CUresult host_register(void *p, size_t size, unsigned flags)
{
    const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                           CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    uintptr_t va = (uintptr_t)p;
    if (!p || !size || (flags & ~known) || va + size < va) return CUDA_ERROR_INVALID_VALUE;
    for (struct fk_range *r = g_hostregs; r; r = r->next)
        if (overlap(r->va, r->size, va, size)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    struct fk_range *r = calloc(1, sizeof *r);
    if (!r) return CUDA_ERROR_OUT_OF_MEMORY;
    r->va = va;
    r->size = size;
    r->next = g_hostregs;
    g_hostregs = r;
    return CUDA_SUCCESS;
}

static CUresult host_unregister(void *p)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    struct fk_range *r = range_find(g_hostregs, (uintptr_t)p);
    if (!p || !r) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    range_unlink(&g_hostregs, r);
    free(r);
    return CUDA_SUCCESS;
}

/* Registered memory is the device's at the same address here (unified addressing). */
static CUresult host_device_pointer(CUdeviceptr *out, void *p, unsigned flags)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!out || flags) return CUDA_ERROR_INVALID_VALUE;
    if (!range_holding(g_hostregs, (uintptr_t)p)) return CUDA_ERROR_INVALID_VALUE;
    *out = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* Pinned host memory the driver allocates: registered memory that cuMemFreeHost frees. */
static CUresult host_alloc(void **pp, size_t size, unsigned flags)
{
    const unsigned known = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                           CU_MEMHOSTALLOC_WRITECOMBINED;
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!pp || !size || (flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    if (posix_memalign(&p, 4096, size)) return CUDA_ERROR_OUT_OF_MEMORY;
    if ((rc = host_register(p, size, 0))) {
        free(p);
        return rc;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

static CUresult host_free(void *p)
{
    CUresult rc = host_unregister(p);
    if (!rc) free(p);
    return rc == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED ? CUDA_ERROR_INVALID_VALUE : rc;
}

/* ---- streams, events, copies ---- */

static struct CUstream_st *stream_find(CUstream s, int even_dead)
{
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return &g_default_stream;
    for (struct CUstream_st *st = g_streams; st; st = st->next)
        if (st == s && (even_dead || !st->dead)) return st;
    return NULL;
}

/* The held stream that st's work waits for: st itself, or the one it waits on through an
 * event (cuStreamWaitEvent); NULL when its work finishes at once. */
static struct CUstream_st *stream_holder(struct CUstream_st *st)
{
    if (st->held) return st;
    if (st->waits_on && !st->waits_on->held) st->waits_on = NULL;
    return st->waits_on;
}

static void stream_maybe_free(struct CUstream_st *s)
{
    if (!s->dead || s->held || s->waiters || s == &g_default_stream) return;
    for (struct CUstream_st *x = g_streams; x; x = x->next)
        if (x->waits_on == s) x->waits_on = NULL;
    if (g_default_stream.waits_on == s) g_default_stream.waits_on = NULL;
    struct CUstream_st **ps = &g_streams;
    while (*ps != s) ps = &(*ps)->next;
    *ps = s->next;
    free(s);
}

static int event_live(const struct CUevent_st *e)
{
    for (struct CUevent_st *x = g_events; x; x = x->next)
        if (x == e) return 1;
    return 0;
}

static CUresult stream_create(CUstream *ps, unsigned flags)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!ps || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    s->ctx = t_ctx;
    s->next = g_streams;
    g_streams = s;
    *ps = s;
    return CUDA_SUCCESS;
}

static CUresult stream_destroy(CUstream s)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    struct CUstream_st *st = stream_find(s, 0);
    if (!s || !st || st == &g_default_stream) return CUDA_ERROR_INVALID_HANDLE;
    /* Like the driver, return at once; held work stays pending until released. */
    st->dead = 1;
    stream_maybe_free(st);
    return CUDA_SUCCESS;
}

static CUresult stream_sync(CUstream s)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    struct CUstream_st *st = stream_find(s, 0);
    if (!st) return CUDA_ERROR_INVALID_HANDLE;
    if (st != &g_default_stream && (rc = fk_capture_sync_conflict(s))) return rc;
    st->waiters++; /* keeps st allocated even if destroyed meanwhile */
    while (stream_holder(st)) pthread_cond_wait(&g_cond, &g_lock);
    st->waiters--;
    stream_maybe_free(st);
    return CUDA_SUCCESS;
}

int fk_stream_ok(CUstream s) { return stream_find(s, 0) != NULL; }

/* Held work of the context: the default stream's, or that of one of its streams. */
static int ctx_busy(const struct CUctx_st *c)
{
    if (g_default_stream.held) return 1;
    for (struct CUstream_st *s = g_streams; s; s = s->next)
        if (s->ctx == c && s->held) return 1;
    return 0;
}

/* cuCtxSynchronize (ctx NULL: the current one) and cuCtxSynchronize_v2. */
static CUresult ctx_sync(CUcontext ctx)
{
    CUresult rc = CUDA_SUCCESS;
    int known = 0;
    for (unsigned long long d = 0; d < cfg.devices; d++) known |= ctx == &g_ctx[d];
    if (!ctx) {
        rc = fk_need_ctx();
        ctx = t_ctx;
    } else if (!known) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else if (!ctx->refs) {
        rc = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    if (!rc) rc = fk_capture_sync_conflict(NULL);
    while (!rc && ctx_busy(ctx)) pthread_cond_wait(&g_cond, &g_lock);
    return rc;
}

static CUresult event_create(CUevent *pe, unsigned flags)
{
    const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!pe || (flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->ctx = t_ctx;
    e->flags = flags;
    e->next = g_events;
    g_events = e;
    *pe = e;
    return CUDA_SUCCESS;
}

/* Work is done synchronously, so an event is complete when recorded unless its stream is
 * held; then it completes when the stream is released. */
static CUresult event_record(CUevent e, CUstream s)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    struct CUstream_st *st = stream_find(s, 0);
    if (!e || !event_live(e) || !st) return CUDA_ERROR_INVALID_HANDLE;
    e->stream = stream_holder(st);
    e->pending = e->stream != NULL;
    e->recorded = 1;
    e->at = event_now();
    e->ready = e->at + (double)atomic_load(&g_event_delay_us) * 1e-6;
    return CUDA_SUCCESS;
}

/* s's later work waits for the work before e's last record (none recorded: no wait). Work
 * runs at once here, so only the hold carries over: while e is pending, s's events and
 * synchronisations wait for the held stream e waits for. Not modelled during a capture. */
static CUresult stream_wait_event(CUstream s, CUevent e, unsigned flags)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    struct CUstream_st *st = stream_find(s, 0);
    if (!e || !event_live(e) || !st) return CUDA_ERROR_INVALID_HANDLE;
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
    struct CUgraph_st *g = NULL;
    if ((rc = fk_capture_graph(s, &g))) return rc;
    if (g) return CUDA_ERROR_NOT_SUPPORTED;
    if (e->pending && e->stream != st) st->waits_on = e->stream;
    return CUDA_SUCCESS;
}

/* The milliseconds between two completed events, as their completion times on this clock
 * (work is done at launch, so a kernel's time is between the events around it). */
static CUresult event_elapsed(float *ms, CUevent start, CUevent end)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    if (!start || !end || !event_live(start) || !event_live(end)) return CUDA_ERROR_INVALID_HANDLE;
    if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    if (!start->recorded || !end->recorded) return CUDA_ERROR_INVALID_HANDLE;
    if (start->pending || end->pending) return CUDA_ERROR_NOT_READY;
    *ms = (float)((end->at - start->at) * 1e3);
    return CUDA_SUCCESS;
}

static CUresult event_query(CUevent e, int wait)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!e || !event_live(e)) return CUDA_ERROR_INVALID_HANDLE;
    while (wait && event_live(e) && e->pending) pthread_cond_wait(&g_cond, &g_lock);
    if (!wait && event_live(e) && e->recorded && event_now() < e->ready)
        return CUDA_ERROR_NOT_READY; /* the delay a waiter would sleep (cuEventSynchronize) */
    return event_live(e) && e->pending ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

static CUresult event_destroy(CUevent e)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!e || !event_live(e)) return CUDA_ERROR_INVALID_HANDLE;
    struct CUevent_st **pe = &g_events;
    while (*pe != e) pe = &(*pe)->next;
    *pe = e->next;
    free(e);
    return CUDA_SUCCESS;
}

/* cuMemAlloc memory is always read-write, device memory. */
int fk_device_range(uintptr_t va, size_t n, unsigned need, size_t *host_numa_bytes)
{
    int dev = ctx_dev(t_ctx);
    size_t covered = 0, host_numa = 0;
    if (va + n < va) return 0;
    for (struct fk_piece *p = g_pieces; p; p = p->next) {
        size_t o = overlap(p->va, p->size, va, n);
        if (o && (p->dev_access[dev] & need) != need) return 0;
        covered += o;
        if (p->alloc->host_numa) host_numa += o;
    }
    for (struct fk_range *r = g_devmem; r; r = r->next) covered += overlap(r->va, r->size, va, n);
    if (covered != n) return 0;
    if (host_numa_bytes) *host_numa_bytes = host_numa;
    return 1;
}

/* Whether a unified-addressing copy's side is device memory: inside a cuMemAlloc range or
 * a reservation (whose mapping and access are then checked as a device side's). */
int fk_unified_is_device(uintptr_t va)
{
    return range_holding(g_devmem, va) || range_holding(g_resvs, va);
}

/* Copies that have begun (entered their delay), for tests that wait for one. */
static _Atomic unsigned long g_copies_begun;
/* What a test may hold at its start: maps (fakecuda_hold_maps), copies (fakecuda_hold_copies). */
enum fk_hold { FK_HOLD_MAPS, FK_HOLD_COPIES, FK_HOLD_KINDS };
static void hold_point(enum fk_hold kind);

/* The configured delays: us microseconds, through signals. */
static void sleep_us(unsigned long long us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (us && nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

void fk_copy_delay(void)
{
    pthread_once(&g_once, load_config);
    hold_point(FK_HOLD_COPIES);
    atomic_fetch_add(&g_copies_begun, 1);
    sleep_us(atomic_load(&g_copy_delay_us));
}

void fk_module_delay(void)
{
    pthread_once(&g_once, load_config);
    sleep_us(cfg.module_delay_ms * 1000);
}

/* ---- small queries ---- */

static CUresult out_int(int *out, int v)
{
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    *out = v;
    return CUDA_SUCCESS;
}

static CUresult device_get(CUdevice *device, int ordinal)
{
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    return dev_ok(ordinal) ? out_int(device, ordinal) : CUDA_ERROR_INVALID_DEVICE;
}

/* kind 0: the name; 1: the PCI bus id, bus 0xfe and device N, an address that no real host
 * device has, so topology lookups by bus id fall back as they would for an unknown GPU. */
static CUresult device_string(char *buf, int len, CUdevice dev, int kind)
{
    if (!buf || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (kind == 0) snprintf(buf, (size_t)len, "fakecuda device %d", dev);
    else snprintf(buf, (size_t)len, "0000:fe:%02x.0", (unsigned)dev);
    return CUDA_SUCCESS;
}

static CUresult total_mem(size_t *bytes, CUdevice dev)
{
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = (size_t)cfg.mem;
    return CUDA_SUCCESS;
}

static CUresult ctx_get_current(CUcontext *pctx)
{
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = t_ctx;
    return CUDA_SUCCESS;
}

static CUresult ctx_get_device(CUdevice *dev)
{
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    if (!t_ctx) return CUDA_ERROR_INVALID_CONTEXT;
    *dev = ctx_dev(t_ctx);
    return CUDA_SUCCESS;
}

static CUresult mem_get_info(size_t *free, size_t *total)
{
    CUresult rc = fk_need_ctx();
    if (rc || !free || !total) return rc ? rc : CUDA_ERROR_INVALID_VALUE;
    *total = (size_t)cfg.mem;
    *free = (size_t)cfg.mem - g_used[ctx_dev(t_ctx)];
    return CUDA_SUCCESS;
}

static CUresult error_text(CUresult error, const char **pStr, int want_name)
{
    const struct fk_error *e = fk_error_find(error);
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    *pStr = !e ? NULL : want_name ? e->name : e->text;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult get_granularity(size_t *gran, const CUmemAllocationProp *prop, int option)
{
    if (!gran || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                  option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = prop_check(prop);
    if (!rc) *gran = (size_t)cfg.gran;
    return rc;
}

/* ---- the exported driver API (FK_CALL: fakecuda_internal.h) ----
 * Names are the versioned ones that the real libcuda exports and that cuda.h's macros
 * resolve to. */

CUresult CUDAAPI cuInit(unsigned int Flags) FK_CALL(cuInit, 0, do_init(Flags))
CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
    FK_CALL(cuDriverGetVersion, 0, out_int(driverVersion, FK_DRIVER_VERSION))
CUresult CUDAAPI cuDeviceGetCount(int *count)
    FK_CALL(cuDeviceGetCount, 1, out_int(count, (int)cfg.devices))
CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
    FK_CALL(cuDeviceGet, 1, device_get(device, ordinal))
CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
    FK_CALL(cuDeviceGetName, 1, device_string(name, len, dev, 0))
CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
    FK_CALL(cuDeviceGetAttribute, 1, device_attribute(pi, attrib, dev))
CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
    FK_CALL(cuDeviceGetPCIBusId, 1, device_string(pciBusId, len, dev, 1))
CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
    FK_CALL(cuDeviceTotalMem, 1, total_mem(bytes, dev))
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
    FK_CALL(cuDevicePrimaryCtxRetain, 1, primary_retain(pctx, dev))
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
    FK_CALL(cuDevicePrimaryCtxRelease, 1, primary_release(dev))
CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) FK_CALL(cuCtxSetCurrent, 1, ctx_set_current(ctx))
CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) FK_CALL(cuCtxGetCurrent, 1, ctx_get_current(pctx))
CUresult CUDAAPI cuCtxGetDevice(CUdevice *dev) FK_CALL(cuCtxGetDevice, 1, ctx_get_device(dev))
CUresult CUDAAPI cuMemGetInfo_v2(size_t *free, size_t *total)
    FK_CALL(cuMemGetInfo, 1, mem_get_info(free, total))
CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
    FK_CALL(cuGetErrorString, 0, error_text(error, pStr, 0))
CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
    FK_CALL(cuGetErrorName, 0, error_text(error, pStr, 1))
CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
    FK_CALL(cuGetProcAddress, 0, proc_address(symbol, pfn, cudaVersion, flags, symbolStatus))
CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
    FK_CALL(cuMemGetAllocationGranularity, 1, get_granularity(granularity, prop, (int)option))
CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags)
    FK_CALL(cuMemAddressReserve, 1, mem_reserve(ptr, size, alignment, addr, flags))
CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
    FK_CALL(cuMemAddressFree, 1, mem_address_free((uintptr_t)ptr, size))
CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
    FK_CALL(cuMemCreate, 1, mem_create(handle, size, prop, flags))
CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
    FK_CALL(cuMemRelease, 1, mem_release(handle))
/* fakecuda_hold_maps, fakecuda_hold_copies: a map or a copy waits at its hold point, without
 * the library's lock, while its kind is held. */
static pthread_mutex_t g_hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_hold_cv = PTHREAD_COND_INITIALIZER;
static int g_hold[FK_HOLD_KINDS];
static unsigned long g_held[FK_HOLD_KINDS];
static unsigned long g_pass[FK_HOLD_KINDS]; /* calls let through the hold still to come */

static void hold_point(enum fk_hold kind)
{
    pthread_mutex_lock(&g_hold_mu);
    if (g_hold[kind] && !g_pass[kind]) {
        g_held[kind]++;
        pthread_cond_broadcast(&g_hold_cv);
        while (g_hold[kind] && !g_pass[kind])
            pthread_cond_wait(&g_hold_cv, &g_hold_mu);
        g_held[kind]--;
    }
    if (g_hold[kind] && g_pass[kind])
        g_pass[kind]--;
    pthread_mutex_unlock(&g_hold_mu);
}

static void set_hold(enum fk_hold kind, int hold)
{
    pthread_mutex_lock(&g_hold_mu);
    g_hold[kind] = hold;
    g_pass[kind] = 0;
    pthread_cond_broadcast(&g_hold_cv);
    pthread_mutex_unlock(&g_hold_mu);
}

/* Up to timeout_ms for a call of the kind to be held: 1 if one is, else 0. */
static int wait_held(enum fk_hold kind, unsigned timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&g_hold_mu);
    int rc = 0;
    while (!g_held[kind] && rc == 0)
        rc = pthread_cond_timedwait(&g_hold_cv, &g_hold_mu, &until);
    const int held = g_held[kind] > 0;
    pthread_mutex_unlock(&g_hold_mu);
    return held;
}

void fakecuda_hold_maps(int hold) { set_hold(FK_HOLD_MAPS, hold); }
int fakecuda_wait_map_held(unsigned timeout_ms) { return wait_held(FK_HOLD_MAPS, timeout_ms); }
void fakecuda_hold_copies(int hold) { set_hold(FK_HOLD_COPIES, hold); }

void fakecuda_pass_copies(unsigned n)
{
    pthread_mutex_lock(&g_hold_mu);
    g_pass[FK_HOLD_COPIES] += n;
    pthread_cond_broadcast(&g_hold_cv);
    pthread_mutex_unlock(&g_hold_mu);
}
int fakecuda_wait_copy_held(unsigned timeout_ms) { return wait_held(FK_HOLD_COPIES, timeout_ms); }

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    hold_point(FK_HOLD_MAPS);
    CUresult rc = fk_enter(FN_cuMemMap, 1);
    return fk_leave(rc ? rc : mem_map((uintptr_t)ptr, size, offset, handle, flags));
}
CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
    FK_CALL(cuMemSetAccess, 1, mem_set_access((uintptr_t)ptr, size, desc, count))
CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
    FK_CALL(cuMemUnmap, 1, mem_unmap((uintptr_t)ptr, size))
CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
    FK_CALL(cuMemAlloc, 1, mem_alloc(dptr, bytesize))
CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) FK_CALL(cuMemFree, 1, mem_free((uintptr_t)dptr))
CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
    FK_CALL(cuMemHostRegister, 1, host_register(p, bytesize, Flags))
CUresult CUDAAPI cuMemHostUnregister(void *p) FK_CALL(cuMemHostUnregister, 1, host_unregister(p))
CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
    FK_CALL(cuMemHostGetDevicePointer, 1, host_device_pointer(pdptr, p, Flags))
CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
    FK_CALL(cuMemHostAlloc, 1, host_alloc(pp, bytesize, Flags))
CUresult CUDAAPI cuMemFreeHost(void *p) FK_CALL(cuMemFreeHost, 1, host_free(p))
CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
    FK_CALL(cuStreamCreate, 1, stream_create(phStream, Flags))
CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
    FK_CALL(cuStreamDestroy, 1, stream_destroy(hStream))
CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
    FK_CALL(cuStreamSynchronize, 1, stream_sync(hStream))
CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
    FK_CALL(cuStreamWaitEvent, 1, stream_wait_event(hStream, hEvent, Flags))
CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
    FK_CALL(cuEventCreate, 1, event_create(phEvent, Flags))
CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
    FK_CALL(cuEventRecord, 1, event_record(hEvent, hStream))
CUresult CUDAAPI cuEventQuery(CUevent hEvent) FK_CALL(cuEventQuery, 1, event_query(hEvent, 0))
/* Sleeps the event-wait delay first, outside the library's lock (other threads' calls go on
 * meanwhile), as a wait for a copy still on the bus would. */
CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    pthread_once(&g_once, load_config);
    sleep_us(atomic_load(&g_event_delay_us));
    FK_CALL(cuEventSynchronize, 1, event_query(hEvent, 1))
}
CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
    FK_CALL(cuEventElapsedTime, 1, event_elapsed(pMilliseconds, hStart, hEnd))
CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) FK_CALL(cuEventDestroy, 1, event_destroy(hEvent))

CUresult CUDAAPI cuCtxSynchronize(void) FK_CALL(cuCtxSynchronize, 1, ctx_sync(NULL))
CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) FK_CALL(cuCtxSynchronize, 1, ctx_sync(ctx))
CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes)
    FK_CALL(cuMemAllocPitch, 1,
            mem_alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes))
CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
    FK_CALL(cuMemAllocAsync, 1, mem_alloc_async(dptr, bytesize, hStream))
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
    FK_CALL(cuMemFreeAsync, 1, mem_free_async((uintptr_t)dptr, hStream))
CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
    FK_CALL(cuIpcGetMemHandle, 1, ipc_get_mem_handle(pHandle, (uintptr_t)dptr))
CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
    FK_CALL(cuPointerGetAttribute, 1, pointer_attribute(data, attribute, (uintptr_t)ptr))
CUresult CUDAAPI cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attributes,
                                        void **data, CUdeviceptr ptr)
    FK_CALL(cuPointerGetAttributes, 1, pointer_attributes(n, attributes, data, (uintptr_t)ptr))
CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
    FK_CALL(cuMemGetAddressRange, 1, address_range(pbase, psize, (uintptr_t)dptr))

/* The CUDA 11.3 entry point, without symbolStatus; cuda.h renames it to _v2. */
#undef cuGetProcAddress
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags);
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuGetProcAddress),
                                            PFN_cuGetProcAddress_v11030),
               "cuGetProcAddress: the CUDA 11.3 ABI");
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags)
    FK_CALL(cuGetProcAddress, 0, proc_address(symbol, pfn, cudaVersion, flags, NULL))

/* ---- per-thread-default-stream variants: the same bodies under their own addresses ----
 * cuda.h declares them only for CUDA_API_PER_THREAD_DEFAULT_STREAM builds, so each is
 * declared here with its legacy twin's type, which checks its signature. */

__typeof__(cuStreamSynchronize) cuStreamSynchronize_ptsz;
__typeof__(cuEventRecord) cuEventRecord_ptsz;
__typeof__(cuStreamWaitEvent) cuStreamWaitEvent_ptsz;
__typeof__(cuMemAllocAsync) cuMemAllocAsync_ptsz;
__typeof__(cuMemFreeAsync) cuMemFreeAsync_ptsz;

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
    FK_CALL(cuStreamSynchronize, 1, stream_sync(hStream))
CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
    FK_CALL(cuEventRecord, 1, event_record(hEvent, hStream))
CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
    FK_CALL(cuStreamWaitEvent, 1, stream_wait_event(hStream, hEvent, Flags))
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
    FK_CALL(cuMemAllocAsync, 1, mem_alloc_async(dptr, bytesize, hStream))
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
    FK_CALL(cuMemFreeAsync, 1, mem_free_async((uintptr_t)dptr, hStream))

/* ---- test inspection and control (fakecuda.h) ---- */

unsigned long fakecuda_calls(const char *name)
{
    int fn = name ? fn_index(name) : -1;
    fk_lock();
    unsigned long n = fn < 0 ? 0 : g_calls[fn];
    pthread_mutex_unlock(&g_lock);
    return n;
}

int fakecuda_live_handles(void)
{
    int n = 0;
    fk_lock();
    for (struct fk_alloc *a = g_allocs; a; a = a->next) n++;
    pthread_mutex_unlock(&g_lock);
    return n;
}

size_t fakecuda_getproc_request(size_t i, const char **symbol, int *version,
                                 unsigned long long *flags, void **fn)
{
    fk_lock();
    size_t n = g_getproc_n;
    if (i < n) {
        *symbol = g_getproc[i].symbol;
        *version = g_getproc[i].version;
        *flags = g_getproc[i].flags;
        *fn = g_getproc[i].fn;
    }
    pthread_mutex_unlock(&g_lock);
    return n;
}

size_t fakecuda_mapped_bytes(void)
{
    size_t n = 0;
    fk_lock();
    for (struct fk_piece *p = g_pieces; p; p = p->next) n += p->size;
    pthread_mutex_unlock(&g_lock);
    return n;
}

int fakecuda_live_reservations(void)
{
    int n = 0;
    fk_lock();
    for (struct fk_range *r = g_resvs; r; r = r->next) n++;
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* FAKECUDA_CALLS=1: every API function called, with its count, on stderr at exit: what a
 * run asked of the driver (the copies, mappings and launches of a decode at a budget). */
__attribute__((destructor)) static void report_calls(void)
{
    const char *want = getenv("FAKECUDA_CALLS");
    if (!want || strcmp(want, "1") != 0)
        return;
    fk_lock();
    for (int fn = 0; fn < FN_COUNT; fn++)
        if (g_calls[fn])
            fprintf(stderr, "fakecuda: %s called %lu times\n", fk_fn_names[fn], g_calls[fn]);
    pthread_mutex_unlock(&g_lock);
}

void fakecuda_reset_counters(void)
{
    fk_lock();
    memset(g_calls, 0, sizeof g_calls);
    fk_kernels_reset_counters();
    pthread_mutex_unlock(&g_lock);
}

unsigned long fakecuda_copies_begun(void) { return atomic_load(&g_copies_begun); }

void fakecuda_set_event_sync_delay_us(unsigned long long us)
{
    atomic_store(&g_event_delay_us, us);
}

void fakecuda_set_cc_major(int major) { atomic_store(&g_cc_major, major); }
int fk_cc_major(void) { return atomic_load(&g_cc_major); }

void fakecuda_set_copy_delay_us(unsigned long long us)
{
    pthread_once(&g_once, load_config); /* so a later first call does not override it */
    atomic_store(&g_copy_delay_us, us);
}

int fakecuda_set_fail(const char *spec)
{
    struct fk_rule rules[FK_MAX_RULES];
    int n = 0;
    if (parse_rules(spec, 0, rules, &n)) return -1;
    fk_lock();
    memcpy(g_rules, rules, (size_t)n * sizeof rules[0]);
    g_nrules = n;
    pthread_mutex_unlock(&g_lock);
    return 0;
}

void fakecuda_stream_hold(struct CUstream_st *stream, int hold)
{
    fk_lock();
    struct CUstream_st *st = stream_find(stream, 1);
    if (!st) {
        fprintf(stderr, "fakecuda: fakecuda_stream_hold: unknown stream %p\n", (void *)stream);
    } else if (hold) {
        st->held = 1;
    } else if (st->held) { /* the held work finishes: complete the events waiting for it */
        st->held = 0;
        for (struct CUevent_st *e = g_events; e; e = e->next)
            if (e->stream == st) e->pending = 0, e->stream = NULL, e->at = event_now();
        pthread_cond_broadcast(&g_cond);
        stream_maybe_free(st);
    }
    pthread_mutex_unlock(&g_lock);
}
