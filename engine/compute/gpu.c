/*
 * The engine's device (engine/compute/gpu.h) on the CUDA driver API. The driver table is vmm's
 * (vmm/backend_cuda.h), loaded the same way, so one MOEVM_CUDA_LIBRARY serves both; the
 * context is the device's primary context, which the expert space's cuda backend retains
 * too, so expert addresses are valid in this engine's kernels.
 *
 * The kernels come as PTX modules generated from kernels/cuda at build time: six of the
 * kernels of no weight type (matvec, expert, ops, gemm, mmq, attention_mma), loaded and
 * looked up at open, so that a driver that cannot JIT the PTX, or a module missing a kernel,
 * fails there with the module or kernel named; and one a weight type (kernels/cuda/typed.cu:
 * its products, experts and dequantization), loaded when a kernel of that type is first
 * launched, so that the driver compiles only the two or three types a model has. mmq and
 * attention_mma are loaded only on a device of compute capability 8.0 or later. cuBLAS
 * (blas.h) is loaded only when a product first wants the tensor cores.
 */
#include "engine/compute/gpu.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine/compute/blas.h"
#include "engine/compute/clock.h"
#include "engine/compute/gpu_graph.h"
#include "engine/compute/gpu_profile.h"
#include "engine/compute/ptx_pdl.h"
#include "kernels/cpu/kernels.h"
#include "vmm/backend_cuda.h"
#include "vmm/error.h"

#ifdef MVM_ENGINE_PTX
#include "mvm_g_attention_mma_ptx.h"
#include "mvm_g_expert_ptx.h"
#include "mvm_g_gemm_ptx.h"
#include "mvm_g_matvec_ptx.h"
#include "mvm_g_mmq_ptx.h"
#include "mvm_g_ops_ptx.h"
#include "mvm_g_typed_ptx.h"
#else
#define MVM_G_TYPED_PTX {0} /* no kernels: load_kernels says why */
#endif

/* MOD_MMQ's and MOD_ATTN_MMA's PTX is compute_80 (mma.sync): loaded only where the device is
 * 8.0 or newer, else their kernels are missing (mvm_gpu_has) and the engine takes the other
 * paths. */
enum { MOD_MATVEC, MOD_EXPERT, MOD_OPS, MOD_GEMM, MOD_MMQ, MOD_ATTN_MMA, MOD_COUNT };
/* A kernel of the weight type's own module (kernels/cuda/typed.cu), loaded at its first
 * launch. */
#define MOD_TYPED MOD_COUNT

/* The weight types of the mmq kernels (kernels/cuda/kernels.h, MVM_G_MMQ_TYPES) as bits. */
#define W_BIT(t) (1ull << (t))
#define MMQ_BIT(name, t) | W_BIT(t)
#define MMQ_TYPES (0 MVM_G_MMQ_TYPES(MMQ_BIT))

/* Each kernel: its module, base name, whether it has one function per weight type, and
 * which types (a bit each; 0: every one). */
static const struct {
    int module;
    const char *name;
    int typed;
    unsigned long long types;
} kernels[MVM_GK_COUNT] = {
    [MVM_GK_QUANTIZE] = {MOD_MATVEC, "mvm_g_quantize", 0},
    [MVM_GK_MATVEC] = {MOD_TYPED, "mvm_g_matvec", 1},
    [MVM_GK_EXPERT_UP] = {MOD_TYPED, "mvm_g_expert_up", 1},
    [MVM_GK_EXPERT_UP1] = {MOD_TYPED, "mvm_g_expert_up1", 1},
    [MVM_GK_EXPERT_DOWN1] = {MOD_TYPED, "mvm_g_expert_down1", 1},
    [MVM_GK_EXPERT_UP1_KEEP] = {MOD_TYPED, "mvm_g_expert_up1_keep", 1},
    [MVM_GK_EXPERT_DOWN1_KEEP] = {MOD_TYPED, "mvm_g_expert_down1_keep", 1},
    [MVM_GK_EXPERT_DOWN] = {MOD_TYPED, "mvm_g_expert_down", 1},
    [MVM_GK_EXPERT_QUANTIZE] = {MOD_EXPERT, "mvm_g_expert_quantize", 0},
    [MVM_GK_EXPERT_MMQ_UP] = {MOD_MMQ, "mvm_g_expert_mmq_up", 1, MMQ_TYPES},
    [MVM_GK_EXPERT_MMQ_DOWN] = {MOD_MMQ, "mvm_g_expert_mmq_down", 1, MMQ_TYPES},
    [MVM_GK_MMQ_MATMUL] = {MOD_MMQ, "mvm_g_mmq_matmul", 1, MMQ_TYPES},
    [MVM_GK_EXPERT_SUM] = {MOD_EXPERT, "mvm_g_expert_sum", 0},
    [MVM_GK_ROUTE] = {MOD_EXPERT, "mvm_g_route", 0},
    [MVM_GK_ROUTE_ROWS] = {MOD_EXPERT, "mvm_g_route_rows", 0},
    [MVM_GK_ROUTE_GROUP] = {MOD_EXPERT, "mvm_g_route_group", 0},
    [MVM_GK_CPU_WAIT] = {MOD_EXPERT, "mvm_g_cpu_wait", 0},
    [MVM_GK_RMSNORM] = {MOD_OPS, "mvm_g_rmsnorm", 0},
    [MVM_GK_ROPE] = {MOD_OPS, "mvm_g_rope", 0},
    [MVM_GK_QK_ROPE] = {MOD_OPS, "mvm_g_qk_rope", 0},
    [MVM_GK_ATTENTION] = {MOD_OPS, "mvm_g_attention", 0},
    [MVM_GK_ATTENTION_COMBINE] = {MOD_OPS, "mvm_g_attention_combine", 0},
    [MVM_GK_ATTENTION_MMA] = {MOD_ATTN_MMA, "mvm_g_attention_mma", 0},
    [MVM_GK_STORE_ROWS] = {MOD_OPS, "mvm_g_store_rows", 0},
    [MVM_GK_ADD] = {MOD_OPS, "mvm_g_add", 0},
    [MVM_GK_SWIGLU] = {MOD_OPS, "mvm_g_swiglu", 0},
    [MVM_GK_DEQUANT] = {MOD_TYPED, "mvm_g_dequant", 1},
    [MVM_GK_TO_HALF] = {MOD_GEMM, "mvm_g_to_half", 0},
    [MVM_GK_GLU_HALF] = {MOD_GEMM, "mvm_g_glu_half", 0},
    [MVM_GK_ROWS_OUT] = {MOD_GEMM, "mvm_g_rows_out", 0},
    [MVM_GK_ATTN_SOFTMAX] = {MOD_GEMM, "mvm_g_attn_softmax", 0},
};

/* What the profile (gpu_profile.h) times beside the kernels: the copies, by direction, and
 * cuBLAS's products. */
enum { PROF_UPLOAD = MVM_GK_COUNT, PROF_DOWNLOAD, PROF_ON_DEVICE, PROF_GEMM, PROF_KINDS };

struct mvm_gpu {
    mvm_gpu_prof *prof; /* MOEVM_GPU_PROFILE, or NULL */
    const char *prof_names[PROF_KINDS];
    struct cu_api cu;
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    CUmodule modules[MOD_COUNT];
    CUmodule typed[MVM_W_COUNT]; /* each weight type's, once a kernel of it was launched */
    CUfunction fn[MVM_GK_COUNT][MVM_W_COUNT]; /* untyped kernels: [k][0] */
    mvm_blas *blas;      /* mvm_gpu_gemm_open's, or NULL */
    mvm_status blas_st;  /* and its answer, once asked (blas_asked) */
    char blas_why[256];
    int blas_asked;
    mvm_gpu_graph *graph; /* mvm_gpu_record's, opened at the first */
    int graphs_off;       /* the driver has none, or refused one */
    int recording;
    CUstream aside;               /* mvm_gpu_download_aside's, made at its first */
    CUevent queued;               /* ... recorded on the compute stream, waited for there */
    CUevent marks[MVM_GPU_MARKS]; /* mvm_gpu_mark's, each made at its first record */
    int pdl; /* MVM_GPU_PDL on a device that has it: every module's PTX waits at each
                kernel's start (ptx_pdl.c), and the graphs' kernels follow by programmatic
                edges */
};

/* Whether device dev's compute capability is major.0 or later. */
static mvm_status has_cc(const struct cu_api *cu, CUdevice dev, int major, int *yes)
{
    int have = 0;
    CUresult r = cu->DeviceGetAttribute(&have, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    if (r != CUDA_SUCCESS)
        return mvm_cu_fail(cu, r, "cuDeviceGetAttribute (compute capability)");
    *yes = have >= major;
    return MVM_OK;
}

/* A module from its PTX, as it is or, with g->pdl, for programmatic dependent launch; what:
 * the load, for its message. */
static mvm_status load_module(mvm_gpu *g, CUmodule *m, const char *ptx, const char *what)
{
    char *pdl = NULL;
    size_t entries;
    if (g->pdl) {
        mvm_status st = mvm_ptx_pdl(ptx, &pdl, &entries);
        if (st != MVM_OK)
            return mvm_fail(st, "%s: %s", what, mvm_last_error());
    }
    CUresult r = g->cu.ModuleLoadData(m, pdl ? pdl : ptx);
    free(pdl); /* the driver has compiled it */
    if (r != CUDA_SUCCESS) {
        *m = NULL;
        return mvm_cu_fail(&g->cu, r, what);
    }
    return MVM_OK;
}

/* The modules are PTX, which the driver compiles for the device at their first load:
 * ptxas takes a second or two for a weight type's module and 3 s for the others on the
 * development VM (all of them, 40 s: docs/perf/engine.md, session 96). The driver keeps the
 * result in its JIT cache (~/.nv/ComputeCache, CUDA_CACHE_PATH, CUDA_CACHE_MAXSIZE), so
 * only a first run, or one whose cache is off or too small, waits for it. Nothing is printed
 * during the wait, so a slow load is said once it is over, with what spares later runs. */
#define SLOW_LOAD_S 5.0

static void log_load_time(const char *what, double s)
{
    if (s >= SLOW_LOAD_S)
        mvm_log(MVM_LOG_WARN, "the driver took %.1f s to compile the device kernels %s for "
                "this GPU (their PTX); it caches the result (~/.nv/ComputeCache, "
                "CUDA_CACHE_PATH), so later runs start without it unless CUDA_CACHE_DISABLE "
                "is set or CUDA_CACHE_MAXSIZE is too small", s, what);
    else
        mvm_log(MVM_LOG_INFO, "device kernels %s loaded in %.2f s", what, s);
}

/* Kernel k's function name for type t: its name, suffixed with the type's where it is
 * typed. */
static const char *function_name(int k, int t, char *name, size_t size)
{
    if (kernels[k].typed)
        snprintf(name, size, "%s_%s", kernels[k].name, mvm_k_wtype_name((enum mvm_wtype)t));
    else
        snprintf(name, size, "%s", kernels[k].name);
    return name;
}

/* Kernel k's function of type t from module m into g->fn. */
static mvm_status get_function(mvm_gpu *g, int k, int t, CUmodule m)
{
    char name[64], what[96];
    snprintf(what, sizeof what, "cuModuleGetFunction (%s)",
             function_name(k, t, name, sizeof name));
    CU(g, g->cu.ModuleGetFunction(&g->fn[k][t], m, name), what);
    return MVM_OK;
}

/* Each type's module's PTX: types that share a module share its image. */
static const char *const typed_ptx[MVM_W_COUNT] = MVM_G_TYPED_PTX;

/* Sets the kernels (MOD_TYPED) of every type in t's module (f32's are in q8_0's:
 * CMakeLists.txt says why) to m's, or clears them where m is NULL; into names, the types. */
static mvm_status set_type_module(mvm_gpu *g, int t, CUmodule m, char *names, size_t size)
{
    mvm_status st = MVM_OK;
    size_t at = 0;
    for (int u = 0; u < MVM_W_COUNT; u++) {
        if (typed_ptx[u] != typed_ptx[t])
            continue;
        g->typed[u] = m;
        for (int k = 0; k < MVM_GK_COUNT; k++)
            if (kernels[k].module == MOD_TYPED) {
                g->fn[k][u] = NULL;
                if (m && st == MVM_OK)
                    st = get_function(g, k, u, m);
            }
        if (names && at < size)
            at += (size_t)snprintf(names + at, size - at, "%s%s", at ? " and " : "",
                                   mvm_k_wtype_name((enum mvm_wtype)u));
    }
    return st;
}

/* Weight type t's module and its kernels, at the first launch of one of them. */
static mvm_status load_type(mvm_gpu *g, int t)
{
    char what[128], types[64];
    if (!typed_ptx[t])
        return mvm_fail(MVM_ERR_UNSUPPORTED, "this moevm has no device kernels for weight type "
                        "%s (kernels/cuda/kernels.h, MVM_G_FOR_TYPES)",
                        mvm_k_wtype_name((enum mvm_wtype)t));
    const double t0 = mvm_now_s();
    snprintf(what, sizeof what, "cuModuleLoadData (kernels/cuda/typed.cu, %s)",
             mvm_k_wtype_name((enum mvm_wtype)t));
    CUmodule m = NULL;
    mvm_status st = load_module(g, &m, typed_ptx[t], what);
    if (st != MVM_OK)
        return st;
    const double took = mvm_now_s() - t0;
    st = set_type_module(g, t, m, types, sizeof types);
    if (st != MVM_OK) { /* none of its kernels, and the next launch tries again */
        set_type_module(g, t, NULL, NULL, 0);
        g->cu.ModuleUnload(m);
        return st;
    }
    snprintf(what, sizeof what, "of weight type %s", types);
    log_load_time(what, took);
    return MVM_OK;
}

static mvm_status load_kernels(mvm_gpu *g)
{
#ifdef MVM_ENGINE_PTX
    static const char *const images[MOD_COUNT] = {mvm_g_matvec_ptx, mvm_g_expert_ptx,
                                                  mvm_g_ops_ptx,    mvm_g_gemm_ptx,
                                                  mvm_g_mmq_ptx,    mvm_g_attention_mma_ptx};
    static const char *const names[MOD_COUNT] = {"matvec", "expert", "ops",
                                                 "gemm",   "mmq",    "attention_mma"};
    char what[96];
    int sm80 = 0;
    mvm_status st = has_cc(&g->cu, g->dev, 8, &sm80); /* runs MOD_MMQ's, MOD_ATTN_MMA's */
    if (st != MVM_OK)
        return st;
    const double t0 = mvm_now_s();
    for (int m = 0; m < MOD_COUNT; m++) {
        if ((m == MOD_MMQ || m == MOD_ATTN_MMA) && !sm80) {
            if (m == MOD_MMQ)
                mvm_log(MVM_LOG_INFO, "the device is older than compute capability 8.0: a "
                        "prompt's experts skip the int8 tensor-core kernels (MOEVM_MMQ), "
                        "latent attention the F16 ones");
            continue;
        }
        snprintf(what, sizeof what, "cuModuleLoadData (kernels/cuda/%s.cu)", names[m]);
        if ((st = load_module(g, &g->modules[m], images[m], what)) != MVM_OK)
            return st;
    }
    log_load_time("of no weight type", mvm_now_s() - t0);
    for (int k = 0; k < MVM_GK_COUNT && st == MVM_OK; k++)
        for (int t = 0; t < (kernels[k].typed ? MVM_W_COUNT : 1) && st == MVM_OK; t++)
            /* not: a module not loaded here, a type the kernel has not, a type's own module */
            if (kernels[k].module != MOD_TYPED &&
                mvm_gpu_would_have(sm80, (enum mvm_gpu_kernel)k, t))
                st = get_function(g, k, t, g->modules[kernels[k].module]);
    return st;
#else
    (void)g;
    return mvm_fail(MVM_ERR_UNSUPPORTED, "this moevm was built without nvcc: it has no device "
                    "kernels (rebuild with nvcc on PATH)");
#endif
}

static mvm_status open_device(mvm_gpu *g, int device, unsigned flags)
{
    mvm_status st = mvm_cu_device(&g->cu, device, &g->dev);
    if (st != MVM_OK)
        return st;
    CU(g, g->cu.PrimaryCtxRetain(&g->ctx, g->dev), "cuDevicePrimaryCtxRetain");
    CU(g, g->cu.CtxSetCurrent(g->ctx), "cuCtxSetCurrent");
    CU(g, g->cu.StreamCreate(&g->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    if (flags & MVM_GPU_PDL) {
        if ((st = has_cc(&g->cu, g->dev, 9, &g->pdl)) != MVM_OK)
            return st;
        if (!g->pdl)
            mvm_log(MVM_LOG_INFO, "MOEVM_PDL: the device is older than compute capability "
                    "9.0, which programmatic dependent launch needs: not used");
    }
    return load_kernels(g);
}

mvm_status mvm_gpu_open(int device, unsigned flags, mvm_gpu **out)
{
    *out = NULL;
    mvm_gpu *g = calloc(1, sizeof *g);
    if (!g)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory opening the GPU");
    mvm_status st = mvm_cu_load(&g->cu);
    if (st == MVM_OK)
        st = open_device(g, device, flags);
    if (st != MVM_OK) {
        mvm_gpu_close(g);
        return st;
    }
    *out = g;
    return MVM_OK;
}

mvm_status mvm_gpu_use(mvm_gpu *g)
{
    CU(g, g->cu.CtxSetCurrent(g->ctx), "cuCtxSetCurrent");
    return MVM_OK;
}

void mvm_gpu_close(mvm_gpu *g)
{
    if (!g)
        return;
    mvm_gpu_prof_free(g->prof);
    if (g->ctx) {
        g->cu.CtxSetCurrent(g->ctx);
        mvm_gpu_graph_close(g->graph);
        mvm_blas_close(g->blas);
        for (int i = 0; i < MVM_GPU_MARKS; i++)
            if (g->marks[i])
                g->cu.EventDestroy(g->marks[i]);
        if (g->queued)
            g->cu.EventDestroy(g->queued);
        if (g->aside)
            g->cu.StreamDestroy(g->aside);
        for (int m = 0; m < MOD_COUNT; m++)
            if (g->modules[m])
                g->cu.ModuleUnload(g->modules[m]);
        for (int t = 0; t < MVM_W_COUNT; t++) /* once each: types may share one */
            if (g->typed[t]) {
                const CUmodule m = g->typed[t];
                g->cu.ModuleUnload(m);
                for (int u = t; u < MVM_W_COUNT; u++)
                    if (g->typed[u] == m)
                        g->typed[u] = NULL;
            }
        if (g->stream)
            g->cu.StreamDestroy(g->stream);
        g->cu.PrimaryCtxRelease(g->dev);
    }
    free(g);
}

void *mvm_gpu_stream(const mvm_gpu *g) { return g->stream; }

int mvm_gpu_has(const mvm_gpu *g, enum mvm_gpu_kernel k, int type)
{
    if (type < 0 || type >= MVM_W_COUNT)
        return 0;
    if (kernels[k].module == MOD_TYPED) /* loaded at its first launch */
        return typed_ptx[type] != NULL;
    return g->fn[k][kernels[k].typed ? type : 0] != NULL;
}

int mvm_gpu_would_have(int sm80, enum mvm_gpu_kernel k, int type)
{
    const int module = kernels[k].module;
    if (type < 0 || type >= MVM_W_COUNT || ((module == MOD_MMQ || module == MOD_ATTN_MMA) && !sm80))
        return 0;
    return !kernels[k].typed || !kernels[k].types || (kernels[k].types & W_BIT(type));
}

mvm_status mvm_gpu_device_cc(int device, int major, int *yes)
{
    *yes = 0;
    struct cu_api cu;
    CUdevice dev;
    mvm_status st = mvm_cu_load(&cu);
    if (st == MVM_OK)
        st = mvm_cu_device(&cu, device, &dev);
    return st == MVM_OK ? has_cc(&cu, dev, major, yes) : st;
}

mvm_status mvm_gpu_profile(mvm_gpu *g)
{
    for (int k = 0; k < MVM_GK_COUNT; k++)
        g->prof_names[k] = kernels[k].name;
    g->prof_names[PROF_UPLOAD] = "copy host -> device";
    g->prof_names[PROF_DOWNLOAD] = "copy device -> host";
    g->prof_names[PROF_ON_DEVICE] = "copy or zero on the device";
    g->prof_names[PROF_GEMM] = "cublasGemmEx";
    return g->prof ? MVM_OK
                   : mvm_gpu_prof_create(&g->cu, g->stream, PROF_KINDS, g->prof_names,
                                         &g->prof);
}

void mvm_gpu_profile_report(const mvm_gpu *g, FILE *f)
{
    if (g->prof)
        mvm_gpu_prof_report(g->prof, f);
}

/* Around each queued operation, when profiling (prof_end: st, else the profile's own). */
static mvm_status prof_begin(mvm_gpu *g, int kind)
{
    if (g->recording) /* a launch or copy is recorded before it comes here */
        return mvm_fail(MVM_ERR_INVALID, "a copy to or from the host, a zeroing or a cuBLAS "
                        "product while a CUDA graph is recorded");
    return g->prof ? mvm_gpu_prof_begin(g->prof, kind) : MVM_OK;
}

static mvm_status prof_end(mvm_gpu *g, mvm_status st)
{
    mvm_status end = g->prof ? mvm_gpu_prof_end(g->prof) : MVM_OK;
    return st != MVM_OK ? st : end;
}

mvm_status mvm_gpu_alloc(mvm_gpu *g, size_t bytes, mvm_dptr *out)
{
    CUdeviceptr p = 0;
    CU(g, g->cu.MemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc");
    *out = p;
    return MVM_OK;
}

void mvm_gpu_free(mvm_gpu *g, mvm_dptr p)
{
    if (p)
        g->cu.MemFree(p);
}

mvm_status mvm_gpu_upload(mvm_gpu *g, mvm_dptr dst, const void *src, size_t bytes)
{
    /* From pageable memory an async copy is staged before it returns, so src is free again
     * (from pinned memory it is read in stream order: gpu.h); it stays in stream order with
     * the launches around it. */
    mvm_status st = prof_begin(g, PROF_UPLOAD);
    if (st == MVM_OK)
        CU(g, g->cu.MemcpyHtoDAsync(dst, src, bytes, g->stream), "cuMemcpyHtoDAsync");
    return prof_end(g, st);
}

mvm_status mvm_gpu_download_async(mvm_gpu *g, void *dst, mvm_dptr src, size_t bytes)
{
    mvm_status st = prof_begin(g, PROF_DOWNLOAD);
    if (st == MVM_OK)
        CU(g, g->cu.MemcpyDtoHAsync(dst, src, bytes, g->stream), "cuMemcpyDtoHAsync");
    return prof_end(g, st);
}

mvm_status mvm_gpu_download(mvm_gpu *g, void *dst, mvm_dptr src, size_t bytes)
{
    mvm_status st = mvm_gpu_download_async(g, dst, src, bytes);
    return st == MVM_OK ? mvm_gpu_sync(g) : st;
}

/* Page-aligned host memory registered with `flags`, and its device address where dev. */
static mvm_status host_pin(mvm_gpu *g, size_t bytes, unsigned flags, void **out, mvm_dptr *dev)
{
    *out = NULL;
    const size_t page = 4096, len = bytes ? (bytes + page - 1) / page * page : page;
    void *p = NULL;
    if (posix_memalign(&p, page, len) != 0)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for %zu bytes of pinned host memory",
                        bytes);
    CUresult r = g->cu.MemHostRegister(p, len, flags);
    if (r != CUDA_SUCCESS) {
        free(p);
        return mvm_cu_fail(&g->cu, r, "cuMemHostRegister (the engine's staging memory)");
    }
    CUdeviceptr d = 0;
    if (dev && (r = g->cu.MemHostGetDevicePointer(&d, p, 0)) != CUDA_SUCCESS) {
        mvm_gpu_host_free(g, p);
        return mvm_cu_fail(&g->cu, r, "cuMemHostGetDevicePointer (the engine's mapped memory)");
    }
    if (dev)
        *dev = (mvm_dptr)d;
    *out = p;
    return MVM_OK;
}

mvm_status mvm_gpu_host_alloc(mvm_gpu *g, size_t bytes, void **out)
{
    return host_pin(g, bytes, 0, out, NULL);
}

mvm_status mvm_gpu_host_map(mvm_gpu *g, size_t bytes, void **out, mvm_dptr *dev)
{
    return host_pin(g, bytes, CU_MEMHOSTREGISTER_DEVICEMAP, out, dev);
}

void mvm_gpu_host_free(mvm_gpu *g, void *p)
{
    if (!p)
        return;
    g->cu.MemHostUnregister(p);
    free(p);
}

mvm_status mvm_gpu_copy(mvm_gpu *g, mvm_dptr dst, mvm_dptr src, size_t bytes)
{
    if (g->recording)
        return mvm_gpu_copy_rows(g, dst, bytes, src, bytes, bytes, 1);
    mvm_status st = prof_begin(g, PROF_ON_DEVICE);
    if (st == MVM_OK)
        CU(g, g->cu.MemcpyDtoDAsync(dst, src, bytes, g->stream), "cuMemcpyDtoDAsync");
    return prof_end(g, st);
}

mvm_status mvm_gpu_zero(mvm_gpu *g, mvm_dptr dst, size_t bytes)
{
    mvm_status st = prof_begin(g, PROF_ON_DEVICE);
    if (st == MVM_OK)
        CU(g, g->cu.MemsetD8Async(dst, 0, bytes, g->stream), "cuMemsetD8Async");
    return prof_end(g, st);
}

mvm_status mvm_gpu_copy_rows(mvm_gpu *g, mvm_dptr dst, size_t dst_pitch, mvm_dptr src,
                             size_t src_pitch, size_t width, size_t rows)
{
    CUDA_MEMCPY2D p = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = src,
                       .srcPitch = src_pitch, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                       .dstDevice = dst, .dstPitch = dst_pitch, .WidthInBytes = width,
                       .Height = rows};
    if (g->recording)
        return mvm_gpu_graph_copy(g->graph, &p);
    mvm_status st = prof_begin(g, PROF_ON_DEVICE);
    if (st == MVM_OK)
        CU(g, g->cu.Memcpy2DAsync(&p, g->stream), "cuMemcpy2DAsync");
    return prof_end(g, st);
}

mvm_status mvm_gpu_sync(mvm_gpu *g)
{
    if (g->recording)
        return mvm_fail(MVM_ERR_INVALID, "a synchronisation while a CUDA graph is recorded");
    double t = g->prof ? mvm_now_s() : 0;
    CU(g, g->cu.StreamSynchronize(g->stream), "cuStreamSynchronize");
    return g->prof ? mvm_gpu_prof_synced(g->prof, mvm_now_s() - t) : MVM_OK;
}

mvm_status mvm_gpu_download_aside(mvm_gpu *g, void *dst, mvm_dptr src, size_t bytes)
{
    if (g->recording)
        return mvm_fail(MVM_ERR_INVALID, "a copy aside while a CUDA graph is recorded");
    if (!g->aside)
        CU(g, g->cu.StreamCreate(&g->aside, CU_STREAM_NON_BLOCKING), "cuStreamCreate (aside)");
    if (!g->queued)
        CU(g, g->cu.EventCreate(&g->queued, CU_EVENT_DISABLE_TIMING), "cuEventCreate (aside)");
    CU(g, g->cu.EventRecord(g->queued, g->stream), "cuEventRecord (aside)");
    CU(g, g->cu.StreamWaitEvent(g->aside, g->queued, 0), "cuStreamWaitEvent (aside)");
    CU(g, g->cu.MemcpyDtoHAsync(dst, src, bytes, g->aside), "cuMemcpyDtoHAsync (aside)");
    return MVM_OK;
}

mvm_status mvm_gpu_mark(mvm_gpu *g, unsigned i)
{
    if (!g->aside || i >= MVM_GPU_MARKS)
        return mvm_fail(MVM_ERR_INVALID, "stream mark %u %s", i,
                        g->aside ? "out of range" : "before any copy aside");
    if (!g->marks[i])
        CU(g, g->cu.EventCreate(&g->marks[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate (mark)");
    CU(g, g->cu.EventRecord(g->marks[i], g->aside), "cuEventRecord (mark)");
    return MVM_OK;
}

mvm_status mvm_gpu_wait_mark(mvm_gpu *g, unsigned i)
{
    if (i >= MVM_GPU_MARKS || !g->marks[i])
        return mvm_fail(MVM_ERR_INVALID, "stream mark %u was never recorded", i);
    double t = g->prof ? mvm_now_s() : 0;
    CU(g, g->cu.EventSynchronize(g->marks[i]), "cuEventSynchronize (mark)");
    return g->prof ? mvm_gpu_prof_synced(g->prof, mvm_now_s() - t) : MVM_OK;
}

mvm_status mvm_gpu_gemm_open(mvm_gpu *g, const char *lib, mvm_dptr workspace, size_t ws_bytes)
{
    if (!g->blas_asked) {
        g->blas_asked = 1;
        g->blas_st = mvm_blas_open(lib, g->stream, workspace, ws_bytes, &g->blas);
        if (g->blas_st != MVM_OK)
            snprintf(g->blas_why, sizeof g->blas_why, "%s", mvm_last_error());
    }
    return g->blas_st == MVM_OK ? MVM_OK : mvm_fail(g->blas_st, "%s", g->blas_why);
}

mvm_status mvm_gpu_gemm(mvm_gpu *g, uint32_t m, uint32_t n, uint32_t k, mvm_dptr w,
                        uint64_t ldw, mvm_dptr x, uint64_t ldx, mvm_dptr y, uint64_t ldy,
                        float beta)
{
    if (!g->blas)
        return mvm_fail(MVM_ERR_INVALID, "cublasGemmEx before cuBLAS was opened");
    mvm_status st = prof_begin(g, PROF_GEMM);
    if (st == MVM_OK)
        st = mvm_blas_gemm(g->blas, m, n, k, w, ldw, x, ldx, y, ldy, beta);
    return prof_end(g, st);
}

mvm_status mvm_gpu_gemm_batched(mvm_gpu *g, const mvm_blas_batch *p)
{
    if (!g->blas)
        return mvm_fail(MVM_ERR_INVALID, "cublasGemmBatchedEx before cuBLAS was opened");
    mvm_status st = prof_begin(g, PROF_GEMM);
    return prof_end(g, st == MVM_OK ? mvm_blas_gemm_batched(g->blas, p) : st);
}

mvm_status mvm_gpu_launch(mvm_gpu *g, enum mvm_gpu_kernel k, int type, const void *args,
                          size_t args_bytes, mvm_g_shape shape)
{
    if (kernels[k].typed && (type < 0 || type >= MVM_W_COUNT))
        return mvm_fail(MVM_ERR_INVALID, "%s: weight type %d", kernels[k].name, type);
    if (!shape.gx || !shape.gy) /* nothing to do: an empty grid is invalid for the driver */
        return MVM_OK;
    mvm_status st = MVM_OK;
    if (kernels[k].module == MOD_TYPED && !g->typed[type] && (st = load_type(g, type)) != MVM_OK)
        return st;
    CUfunction f = g->fn[k][kernels[k].typed ? type : 0];
    char name[64], what[96]; /* for the messages only */
    if (!f) /* mvm_gpu_has says where it may be missing */
        return mvm_fail(MVM_ERR_UNSUPPORTED, "%s: no such kernel on this device",
                        function_name(k, type, name, sizeof name));
    void *params[] = {(void *)args}; /* the one parameter: the struct (the driver knows its
                                        size from the kernel) */
    if (g->recording)
        return mvm_gpu_graph_kernel(g->graph, f, args, args_bytes, shape, kernels[k].name);
    if ((st = prof_begin(g, k)) != MVM_OK)
        return st;
    CUresult r = g->cu.LaunchKernel(f, shape.gx, shape.gy, 1, shape.block, 1, 1, 0, g->stream,
                                    params, NULL);
    if (r == CUDA_SUCCESS)
        return prof_end(g, MVM_OK);
    snprintf(what, sizeof what, "cuLaunchKernel (%s)", function_name(k, type, name, sizeof name));
    return mvm_cu_fail(&g->cu, r, what);
}

int mvm_gpu_graphs(mvm_gpu *g)
{
    if (g->graphs_off || g->prof) /* the profile times each kernel on its own */
        return 0;
    if (!g->graph &&
        mvm_gpu_graph_open(&g->cu, g->ctx, g->stream, g->pdl, &g->graph) != MVM_OK) {
        mvm_log(MVM_LOG_INFO, "%s: decode launches its kernels one by one", mvm_last_error());
        g->graphs_off = 1;
    }
    return !g->graphs_off;
}

void mvm_gpu_record(mvm_gpu *g)
{
    mvm_gpu_graph_start(g->graph);
    g->recording = 1;
}

void mvm_gpu_record_drop(mvm_gpu *g) { g->recording = 0; }

mvm_status mvm_gpu_replay(mvm_gpu *g)
{
    g->recording = 0;
    return mvm_gpu_graph_launch(g->graph, &g->graphs_off);
}

void mvm_gpu_graph_stats(const mvm_gpu *g, uint64_t *built, uint64_t *updated,
                         uint64_t *pdl_edges)
{
    mvm_gpu_graph_counts(g->graph, built, updated, pdl_edges);
}
