/*
 * fake_kernels.c: the modules, functions and kernel launches of fakecuda (libcuda.so.1).
 *
 * An interposer that makes memory resident at kernel launch has to be tested on launches
 * that really read and write "device" memory, through the parameter layout a real kernel
 * has. So any image loads (cuModuleLoadData and cuLibraryLoadData do not look at it) and
 * gives a module, or a library, with six fixed kernels, run synchronously on the host
 * inside the launch call:
 *   fk_fill_u32 (CUdeviceptr dst, uint32_t value, uint64_t n)   dst[i] = value, i < n
 *   fk_sum_u32  (CUdeviceptr out, CUdeviceptr in, uint64_t n)   *(uint64_t *)out = sum in[0..n)
 *   fk_copy     (CUdeviceptr dst, CUdeviceptr src, uint64_t bytes)
 *   fk_scale_f32(CUdeviceptr x, float a, uint64_t n)            x[i] *= a
 *   fk_copy_args(struct { CUdeviceptr dst, src; uint64_t bytes; } a)   one 24-byte parameter,
 *               as PyTorch passes its tensors (Array<char *, N>) and CUTLASS its Params
 *   fk_routed_sum(CUdeviceptr w, CUdeviceptr ids, CUdeviceptr out, uint32_t k, uint64_t bytes)
 *               out[j] (uint64_t) = sum of the uint32_t words of expert ids[j] (int32_t, read
 *               from device memory) of the fused tensor w, experts of `bytes` each, j < k <= 8:
 *               handed the tensor's base, the ids, then the output, as llama.cpp's
 *               mul_mat_vec_q is
 * and, under the name and signature of libmoevm's own kernel (vmm/digest.cu), the page digest
 * of vmm/digest.h, so the cuda backend's clean evictions run here as on a GPU:
 *   mvm_digest_pages (mvm_digest_args a)   one 56-byte parameter (vmm/digest.h)
 *               page i < n at base + ids[i] * page_words; answers 0: digests[2 ids[i]..] =
 *               its digest; else answers[i] = (its digest == digests[2 ids[i]..]).
 *               The accumulators `work` must be writable; the fake leaves them as they are.
 * Each parameter sits at an offset aligned to its size (at most 8), as nvcc lays them out
 * (8-byte pointers, 4-byte uint32_t and float, 8-byte uint64_t, 8-aligned structs), and
 * cuFuncGetParamInfo says so (for a library's CUkernel handles, which cuLaunchKernel
 * takes in place of a CUfunction, only cuKernelGetParamInfo does). A launch into a stream
 * being captured (fake_graphs.c) records a graph node instead of running.
 * The grid and block shapes are checked against the device's limits but do not change what
 * a kernel computes (as for grid-stride loops).
 *
 * The deprecated launch forms are there too, because a program may still use them: the
 * pre-CUDA-4 API (cuFuncSetBlockShape, cuParamSetSize, cuParamSet[ifv] at offsets the caller
 * picks, then cuLaunch, cuLaunchGrid or cuLaunchGridAsync, which launch with that buffer as
 * `extra`, so its size must be the kernel's), and cuLaunchCooperativeKernelMultiDevice,
 * which runs each entry of its list in turn. The real one wants each entry on a different
 * device; the fake takes entries on any stream of the current context, so that one fake
 * device can stand for several.
 *
 * Before a kernel runs, every range it reads must be readable and every range it writes
 * read-write for the current device (cuMemAlloc memory always is), else the launch returns
 * CUDA_ERROR_ILLEGAL_ADDRESS and touches nothing; an element pointer not aligned to its type
 * gives CUDA_ERROR_MISALIGNED_ADDRESS. A real GPU reports both asynchronously and the
 * context is lost after; the fake reports them from the launch and stays usable, so tests
 * can go on. The bytes of the ranges of each successful launch (a range read and written
 * counts once) are counted by what backs them, DEVICE or HOST_NUMA allocations, for
 * fakecuda_kernel_bytes (the program's kernels only: not mvm_digest_pages).
 */
#include <cuda.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "fakecuda_internal.h"
#include "vmm/digest.h"

#define FK_MAX_ACCESS (2 + FK_ROUTED_MAX)
#define FK_ROUTED_MAX 8 /* experts one fk_routed_sum launch may route to */
#define FK_MAX_SHARED (48u << 10) /* dynamic shared memory per block without opt-in */

/* A range a kernel touches: `need` is CU_MEM_ACCESS_FLAGS_PROT_READ or _READWRITE. */
struct fk_access {
    uintptr_t va;
    size_t n, align;
    unsigned need;
};

struct fk_kernel {
    const char *name;
    unsigned nparams;
    unsigned char size[FK_MAX_PARAMS]; /* bytes of each parameter */
    /* The ranges it touches, from its parameters: how many, or -1 if a size overflows. */
    int (*ranges)(const uint64_t *p, struct fk_access *acc);
    void (*run)(const uint64_t *p);
    int libmoevm; /* libmoevm's own kernel: left out of fakecuda_kernel_bytes */
    /* A plugin's kernel (FAKECUDA_KERNELS): one parameter, run on its raw bytes in the
     * launch's shape, its memory neither checked nor counted (ranges and run are NULL). */
    fakecuda_kernel_fn run_shaped;
};

/* ---- the kernels; p[] holds the parameters as 64-bit words: a 4-byte one zero-extended,
 * an aggregate as its 8-byte words ---- */
#define FK_MAX_WORDS 7
_Static_assert(sizeof(mvm_digest_args) <= FK_MAX_WORDS * 8 &&
                   sizeof(mvm_digest_args) <= FK_PARAM_BYTES,
               "mvm_digest_args must fit the fake's parameter words");

static int bytes_of(uint64_t n, size_t elem, size_t *bytes)
{
    if (n > SIZE_MAX / elem) return -1;
    *bytes = (size_t)n * elem;
    return 0;
}

static struct fk_access rw(uint64_t va, size_t n, size_t align)
{
    return (struct fk_access){(uintptr_t)va, n, align, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
}

static struct fk_access ro(uint64_t va, size_t n, size_t align)
{
    return (struct fk_access){(uintptr_t)va, n, align, CU_MEM_ACCESS_FLAGS_PROT_READ};
}

static int fill_ranges(const uint64_t *p, struct fk_access *acc)
{
    size_t n;
    if (bytes_of(p[2], sizeof(uint32_t), &n)) return -1;
    acc[0] = rw(p[0], n, sizeof(uint32_t));
    return 1;
}

static void fill_run(const uint64_t *p)
{
    uint32_t *dst = (uint32_t *)(uintptr_t)p[0];
    for (uint64_t i = 0; i < p[2]; i++) dst[i] = (uint32_t)p[1];
}

static int sum_ranges(const uint64_t *p, struct fk_access *acc)
{
    size_t n;
    if (bytes_of(p[2], sizeof(uint32_t), &n)) return -1;
    acc[0] = rw(p[0], sizeof(uint64_t), sizeof(uint64_t));
    acc[1] = ro(p[1], n, sizeof(uint32_t));
    return 2;
}

static void sum_run(const uint64_t *p)
{
    const uint32_t *in = (const uint32_t *)(uintptr_t)p[1];
    uint64_t sum = 0;
    for (uint64_t i = 0; i < p[2]; i++) sum += in[i];
    *(uint64_t *)(uintptr_t)p[0] = sum;
}

static int copy_ranges(const uint64_t *p, struct fk_access *acc)
{
    size_t n;
    if (bytes_of(p[2], 1, &n)) return -1;
    acc[0] = rw(p[0], n, 1);
    acc[1] = ro(p[1], n, 1);
    return 2;
}

static void copy_run(const uint64_t *p)
{
    memmove((void *)(uintptr_t)p[0], (const void *)(uintptr_t)p[1], (size_t)p[2]);
}

static int scale_ranges(const uint64_t *p, struct fk_access *acc)
{
    size_t n;
    if (bytes_of(p[2], sizeof(float), &n)) return -1;
    acc[0] = rw(p[0], n, sizeof(float));
    return 1;
}

static void scale_run(const uint64_t *p)
{
    float *x = (float *)(uintptr_t)p[0], a;
    uint32_t bits = (uint32_t)p[1];
    memcpy(&a, &bits, sizeof a);
    for (uint64_t i = 0; i < p[2]; i++) x[i] *= a;
}

/* mvm_digest_pages reads its page list from "device" memory, so that list is checked here
 * first; the pages lie in [base, base + (largest id + 1) * page). */
static int digest_ranges(const uint64_t *p, struct fk_access *acc)
{
    mvm_digest_args a;
    memcpy(&a, p, sizeof a);
    size_t ids_bytes, page_bytes, span, digests, work;
    size_t host_numa;
    const uint64_t *ids = (const uint64_t *)(uintptr_t)a.ids;
    if (!a.n) return 0;
    if (bytes_of(a.n, sizeof(uint64_t), &ids_bytes) ||
        bytes_of(a.page_words, sizeof(uint64_t), &page_bytes))
        return -1;
    if (a.ids % sizeof(uint64_t) ||
        !fk_device_range(a.ids, ids_bytes, CU_MEM_ACCESS_FLAGS_PROT_READ, &host_numa))
        return -1;
    uint64_t top = 0;
    for (uint64_t i = 0; i < a.n; i++) top = ids[i] > top ? ids[i] : top;
    if (top == UINT64_MAX || bytes_of(top + 1, page_bytes, &span) ||
        bytes_of(top + 1, 2 * sizeof(uint64_t), &digests) ||
        bytes_of(a.n, 3 * sizeof(uint64_t), &work))
        return -1;
    acc[0] = ro(a.ids, ids_bytes, sizeof(uint64_t));
    acc[1] = ro(a.base, span, sizeof(uint64_t));
    acc[2] = a.answers ? ro(a.digests, digests, sizeof(uint64_t))
                       : rw(a.digests, digests, sizeof(uint64_t));
    acc[3] = rw(a.work, work, sizeof(uint64_t));
    if (!a.answers) return 4;
    acc[4] = rw(a.answers, ids_bytes, sizeof(uint64_t));
    return 5;
}

static void digest_run(const uint64_t *p)
{
    mvm_digest_args a;
    memcpy(&a, p, sizeof a);
    const uint64_t *base = (const uint64_t *)(uintptr_t)a.base;
    const uint64_t *ids = (const uint64_t *)(uintptr_t)a.ids;
    uint64_t *digests = (uint64_t *)(uintptr_t)a.digests;
    uint64_t *answers = (uint64_t *)(uintptr_t)a.answers;
    for (uint64_t i = 0; i < a.n; i++) {
        uint64_t d[2], *want = digests + 2 * ids[i];
        mvm_digest_words(base + ids[i] * a.page_words, a.page_words, d);
        if (answers) {
            answers[i] = d[0] == want[0] && d[1] == want[1];
        } else {
            want[0] = d[0];
            want[1] = d[1];
        }
    }
}

/* fk_routed_sum reads its expert ids from "device" memory: checked first, then each
 * routed expert is a range of its own (so the bytes count by where each expert is). */
static int routed_ranges(const uint64_t *p, struct fk_access *acc)
{
    size_t host_numa;
    uint64_t w = p[0], at = p[1], out = p[2], k = p[3], bytes = p[4];
    const int32_t *ids = (const int32_t *)(uintptr_t)at;
    if (k > FK_ROUTED_MAX || at % sizeof *ids ||
        !fk_device_range(at, k * sizeof *ids, CU_MEM_ACCESS_FLAGS_PROT_READ, &host_numa))
        return -1;
    acc[0] = rw(out, k * sizeof(uint64_t), sizeof(uint64_t));
    acc[1] = ro(at, k * sizeof *ids, sizeof *ids);
    for (uint64_t j = 0; j < k; j++) {
        if (ids[j] < 0 || (uint64_t)ids[j] > UINT64_MAX / (bytes ? bytes : 1) - 1) return -1;
        acc[2 + j] = ro(w + (uint64_t)ids[j] * bytes, bytes, sizeof(uint32_t));
    }
    return (int)(2 + k);
}

static void routed_run(const uint64_t *p)
{
    const int32_t *ids = (const int32_t *)(uintptr_t)p[1];
    uint64_t *out = (uint64_t *)(uintptr_t)p[2];
    for (uint64_t j = 0; j < p[3]; j++) {
        const uint32_t *e = (const uint32_t *)(uintptr_t)(p[0] + (uint64_t)ids[j] * p[4]);
        uint64_t sum = 0;
        for (uint64_t i = 0; i < p[4] / sizeof *e; i++) sum += e[i];
        out[j] = sum;
    }
}

static const struct fk_kernel fk_kernels[] = {
    {"fk_fill_u32", 3, {8, 4, 8}, fill_ranges, fill_run},
    {"fk_sum_u32", 3, {8, 8, 8}, sum_ranges, sum_run},
    {"fk_copy", 3, {8, 8, 8}, copy_ranges, copy_run},
    {"fk_scale_f32", 3, {8, 4, 8}, scale_ranges, scale_run},
    {"fk_copy_args", 1, {24}, copy_ranges, copy_run},
    {"fk_routed_sum", 5, {8, 8, 8, 4, 8}, routed_ranges, routed_run},
    {"mvm_digest_pages", 1, {sizeof(mvm_digest_args)}, digest_ranges, digest_run, 1},
};
#define FK_NKERNELS (sizeof fk_kernels / sizeof fk_kernels[0])

/* ---- plugin kernels: FAKECUDA_KERNELS names a shared object whose
 * fakecuda_register_kernels(add) adds kernels by name, loaded at the first module load ---- */
#define FK_MAX_PLUGIN 320 /* the engine registers 8 typed kernels a weight type, and more */
#define FK_MAX_KERNELS (FK_NKERNELS + FK_MAX_PLUGIN)
static struct fk_kernel g_plugin[FK_MAX_PLUGIN];
static unsigned g_n_plugin;
static int g_plugin_loaded; /* 1: loaded (or none named); -1: it failed, modules fail too */

static int add_kernel(const char *name, size_t param_bytes, fakecuda_kernel_fn run)
{
    if (g_n_plugin == FK_MAX_PLUGIN || !name || !run || !param_bytes ||
        param_bytes > FK_PARAM_BYTES || param_bytes > 255) {
        fprintf(stderr, "fakecuda: FAKECUDA_KERNELS: cannot add kernel %s\n", name ? name : "?");
        return -1;
    }
    g_plugin[g_n_plugin++] = (struct fk_kernel){.name = name, .nparams = 1,
                                                .size = {(unsigned char)param_bytes},
                                                .run_shaped = run};
    return 0;
}

static int load_plugin(void)
{
    const char *path = getenv("FAKECUDA_KERNELS");
    if (g_plugin_loaded)
        return g_plugin_loaded;
    g_plugin_loaded = 1;
    if (!path || !*path)
        return 1;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    void (*reg)(fakecuda_add_kernel_fn) =
        h ? (void (*)(fakecuda_add_kernel_fn))dlsym(h, "fakecuda_register_kernels") : NULL;
    if (!reg) {
        fprintf(stderr, "fakecuda: FAKECUDA_KERNELS=%s: %s\n", path,
                h ? "no fakecuda_register_kernels" : dlerror());
        return g_plugin_loaded = -1;
    }
    reg(add_kernel);
    return 1;
}

/* Kernel i of every module: the fixed ones, then the plugin's. */
static const struct fk_kernel *kernel_at(size_t i)
{
    return i < FK_NKERNELS ? &fk_kernels[i] : &g_plugin[i - FK_NKERNELS];
}

/* Offsets of the parameters, each aligned to its size (at most 8); returns the size of the
 * whole parameter buffer. */
static size_t param_layout(const struct fk_kernel *k, size_t off[FK_MAX_PARAMS])
{
    size_t end = 0;
    for (unsigned i = 0; i < k->nparams; i++) {
        size_t a = k->size[i] < 8 ? k->size[i] : 8;
        off[i] = (end + a - 1) / a * a;
        end = off[i] + k->size[i];
    }
    return end;
}

/* ---- modules and functions ---- */

struct CUfunc_st {
    const struct fk_kernel *kernel;
    struct CUmod_st *mod;
    /* the pre-CUDA-4 launch state of a module's function */
    unsigned block[3];
    unsigned char params[FK_PARAM_BYTES];
    size_t param_size;
};

/* A module, or a library (cuLibraryLoadData: its CUkernel handles are `kerns`, which
 * cuLaunchKernel takes in place of a CUfunction, and which cuFuncGetParamInfo refuses, so
 * that a caller must know to ask cuKernelGetParamInfo). */
struct CUmod_st {
    struct CUmod_st *next;
    CUcontext ctx;
    int library;
    char *entries; /* a PTX image's kernels, ";name;name;", or NULL: any image has them all */
    int waits;     /* PTX whose every kernel has griddepcontrol.wait (fk_kernel_waits) */
    size_t n; /* kernels */
    struct CUfunc_st funcs[FK_MAX_KERNELS];
    struct CUfunc_st kerns[FK_MAX_KERNELS];
};

static struct CUmod_st *g_modules;
static unsigned long long g_kernel_bytes[2]; /* [0] device-backed, [1] HOST_NUMA-backed */

static struct CUmod_st *module_find(CUmodule m)
{
    struct CUmod_st *x = g_modules;
    while (x && x != m) x = x->next;
    return x;
}

static int in_table(const void *h, const struct CUfunc_st *t, size_t n)
{
    uintptr_t a = (uintptr_t)h, lo = (uintptr_t)t;
    return a >= lo && a < lo + n * sizeof *t && (a - lo) % sizeof *t == 0;
}

/* A handle that cuModuleGetFunction gave out, from a module still loaded. */
static struct CUfunc_st *func_find(CUfunction f)
{
    for (struct CUmod_st *m = g_modules; m; m = m->next)
        if (!m->library && in_table(f, m->funcs, m->n)) return f;
    return NULL;
}

/* A handle that cuLibraryGetKernel gave out, from a library still loaded. */
static struct CUfunc_st *kern_find(CUkernel k)
{
    for (struct CUmod_st *m = g_modules; m; m = m->next)
        if (m->library && in_table(k, m->kerns, m->n)) return (struct CUfunc_st *)k;
    return NULL;
}

/* A function or a kernel, whatever context it belongs to. */
static struct CUfunc_st *any_find(CUfunction f)
{
    struct CUfunc_st *fn = func_find(f);
    return fn ? fn : kern_find((CUkernel)f);
}

/* What cuLaunchKernel accepts: a function of the current context, or a kernel. */
static struct CUfunc_st *launchable(CUfunction f)
{
    struct CUfunc_st *fn = func_find(f);
    if (fn) return fn->mod->ctx == fk_current_ctx() ? fn : NULL;
    return kern_find((CUkernel)f);
}

/* The kernels a PTX image defines (its `.entry` names) as ";a;b;", or NULL for another
 * kind of image (a test's stand-in), which has every kernel: so that, as on a GPU, a kernel
 * is found only in the module whose PTX has it. *bad: out of memory. */
static char *ptx_entries(const char *image, int *bad)
{
    *bad = 0;
    if (strncmp(image, "//", 2) != 0 || !strstr(image, ".version"))
        return NULL;
    size_t cap = 64, len = 1;
    char *out = malloc(cap);
    if (!out) return *bad = 1, NULL;
    strcpy(out, ";");
    for (const char *p = strstr(image, ".entry "); p; p = strstr(p, ".entry ")) {
        p += strlen(".entry ");
        size_t n = strcspn(p, "( \t\n");
        if (len + n + 2 > cap) {
            while (len + n + 2 > cap) cap *= 2;
            char *grown = realloc(out, cap);
            if (!grown) return free(out), *bad = 1, NULL;
            out = grown;
        }
        memcpy(out + len, p, n);
        len += n;
        out[len++] = ';';
        out[len] = 0;
    }
    return out;
}

static size_t count_of(const char *text, const char *what)
{
    size_t n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

/* What the driver's compiler says of a PTX image (0: it compiles): griddepcontrol (programmatic
 * dependent launch) needs a `.target` of sm_90 or later, and the target may not be newer than
 * the device. */
static CUresult ptx_check(const char *image)
{
    const char *t = strstr(image, ".target sm_");
    const int sm = t ? atoi(t + strlen(".target sm_")) : 0;
    if (strstr(image, "griddepcontrol") && sm < 90) return CUDA_ERROR_INVALID_PTX;
    if (sm > 10 * fk_cc_major() + 9) return CUDA_ERROR_NO_BINARY_FOR_GPU;
    return CUDA_SUCCESS;
}

static CUresult module_load(CUmodule *pm, const void *image, int library)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!pm || !image) return CUDA_ERROR_INVALID_VALUE;
    if (load_plugin() < 0) return CUDA_ERROR_INVALID_IMAGE;
    fk_module_delay();
    struct CUmod_st *m = calloc(1, sizeof *m);
    int bad = 0;
    if (m) m->entries = ptx_entries(image, &bad);
    if (!m || bad) return free(m), CUDA_ERROR_OUT_OF_MEMORY;
    if (m->entries && (rc = ptx_check(image)) != CUDA_SUCCESS)
        return free(m->entries), free(m), rc;
    m->waits = m->entries && count_of(image, "griddepcontrol.wait") >= count_of(image, ".entry ");
    m->ctx = fk_current_ctx();
    m->library = library;
    m->n = FK_NKERNELS + g_n_plugin;
    for (size_t i = 0; i < m->n; i++) {
        m->funcs[i] = (struct CUfunc_st){kernel_at(i), m};
        m->kerns[i] = (struct CUfunc_st){kernel_at(i), m};
    }
    m->next = g_modules;
    g_modules = m;
    *pm = m;
    return CUDA_SUCCESS;
}

static void module_unlink(struct CUmod_st *m)
{
    struct CUmod_st **pm = &g_modules;
    while (*pm != m) pm = &(*pm)->next;
    *pm = m->next;
    free(m->entries);
    free(m);
}

static CUresult module_unload(CUmodule m, int library)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!m || !module_find(m) || m->library != library) return CUDA_ERROR_INVALID_HANDLE;
    module_unlink(m);
    return CUDA_SUCCESS;
}

/* cuModuleGetFunction (a CUfunction) and cuLibraryGetKernel (a CUkernel). */
static CUresult module_get(void **out, CUmodule m, const char *name, int library)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
    if (!m || !module_find(m) || m->library != library) return CUDA_ERROR_INVALID_HANDLE;
    if (m->entries) {
        char key[256];
        int n = snprintf(key, sizeof key, ";%s;", name);
        if (n < 0 || (size_t)n >= sizeof key || !strstr(m->entries, key))
            return CUDA_ERROR_NOT_FOUND;
    }
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(kernel_at(i)->name, name) == 0)
            return *out = library ? &m->kerns[i] : &m->funcs[i], CUDA_SUCCESS;
    return CUDA_ERROR_NOT_FOUND;
}

int fk_kernel_waits(CUfunction f)
{
    struct CUfunc_st *fn = any_find(f);
    return fn && fn->mod->waits;
}

/* cuFuncGetParamInfo (fn from func_find) and cuKernelGetParamInfo (from kern_find). */
static CUresult param_info(struct CUfunc_st *fn, const void *handle, size_t index,
                           size_t *offset, size_t *size)
{
    size_t off[FK_MAX_PARAMS];
    if (!handle || !offset) return CUDA_ERROR_INVALID_VALUE;
    if (!fn) return CUDA_ERROR_INVALID_HANDLE;
    if (index >= fn->kernel->nparams) return CUDA_ERROR_INVALID_VALUE;
    param_layout(fn->kernel, off);
    *offset = off[index];
    if (size) *size = fn->kernel->size[index];
    return CUDA_SUCCESS;
}

/* ---- launches ---- */

/* The limits of a compute capability 9.0 device. */
static int shape_ok(const unsigned grid[3], const unsigned block[3], unsigned shared)
{
    unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
    return grid[0] && grid[1] && grid[2] && grid[0] <= 0x7fffffffu && grid[1] <= 65535 &&
           grid[2] <= 65535 && block[0] && block[1] && block[2] && block[0] <= 1024 &&
           block[1] <= 1024 && block[2] <= 64 && threads <= 1024 && shared <= FK_MAX_SHARED;
}

/* The buffer of `extra` ({CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE,
 * &size, CU_LAUNCH_PARAM_END}, in any order); its size must be the kernel's. */
static CUresult extra_buffer(void **extra, size_t want, const unsigned char **buf)
{
    const size_t *size = NULL;
    *buf = NULL;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) *buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = extra[i + 1];
        else return CUDA_ERROR_INVALID_VALUE;
    }
    return *buf && size && *size == want ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Packs the parameters, from kernelParams (one pointer per parameter) or from extra, never
 * both, into the kernel's layout in raw[]. */
static CUresult pack(const struct fk_kernel *k, void **params, void **extra,
                     unsigned char raw[FK_PARAM_BYTES])
{
    size_t off[FK_MAX_PARAMS], total = param_layout(k, off);
    const unsigned char *buf = NULL;
    if (params && extra) return CUDA_ERROR_INVALID_VALUE;
    if (extra) {
        CUresult rc = extra_buffer(extra, total, &buf);
        if (rc) return rc;
        memcpy(raw, buf, total);
        return CUDA_SUCCESS;
    }
    if (!params && k->nparams) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < k->nparams; i++) {
        if (!params[i]) return CUDA_ERROR_INVALID_VALUE;
        memcpy(raw + off[i], params[i], k->size[i]);
    }
    return CUDA_SUCCESS;
}

/* The words p[] of packed parameters. */
static void words(const struct fk_kernel *k, const unsigned char *raw, uint64_t p[FK_MAX_WORDS])
{
    size_t off[FK_MAX_PARAMS], w = 0;
    param_layout(k, off);
    for (unsigned i = 0; i < k->nparams; i++) {
        uint32_t v32;
        if (k->size[i] == sizeof v32) {
            memcpy(&v32, raw + off[i], sizeof v32);
            p[w++] = v32;
            continue;
        }
        for (size_t b = 0; b < k->size[i]; b += sizeof *p) memcpy(&p[w++], raw + off[i] + b, 8);
    }
}

/* Checks every range first, so a bad one leaves memory untouched; then counts and runs. */
static CUresult run_checked(const struct fk_kernel *k, const uint64_t *p)
{
    struct fk_access acc[FK_MAX_ACCESS];
    size_t host_numa[FK_MAX_ACCESS] = {0};
    int n = k->ranges(p, acc);
    if (n < 0) return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (int i = 0; i < n; i++) {
        if (!acc[i].n) continue;
        if (acc[i].va % acc[i].align) return CUDA_ERROR_MISALIGNED_ADDRESS;
        if (!fk_device_range(acc[i].va, acc[i].n, acc[i].need, &host_numa[i]))
            return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    for (int i = 0; i < n && !k->libmoevm; i++) {
        g_kernel_bytes[1] += host_numa[i];
        g_kernel_bytes[0] += acc[i].n - host_numa[i];
    }
    k->run(p);
    return CUDA_SUCCESS;
}

static CUresult launch(CUfunction f, const unsigned grid[3], const unsigned block[3],
                       unsigned shared, CUstream s, void **params, void **extra)
{
    unsigned char raw[FK_PARAM_BYTES];
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!fk_stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
    rc = fk_kernel_check(f, grid, block, shared, params, extra, raw);
    if (rc) return rc;
    struct CUgraph_st *g = NULL;
    rc = fk_capture_graph(s, &g);
    if (rc || g) return rc ? rc : fk_graph_add_kernel(g, f, grid, block, shared, raw);
    return fk_kernel_run(f, grid, block, raw);
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    if (!c || (c->numAttrs && !c->attrs)) return CUDA_ERROR_INVALID_VALUE;
    const unsigned grid[3] = {c->gridDimX, c->gridDimY, c->gridDimZ};
    const unsigned block[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
    return launch(f, grid, block, c->sharedMemBytes, c->hStream, params, extra);
}

/* ---- the deprecated launch forms ---- */

static CUresult set_block_shape(CUfunction f, int x, int y, int z)
{
    struct CUfunc_st *fn = func_find(f);
    if (!fn) return CUDA_ERROR_INVALID_HANDLE;
    if (x <= 0 || y <= 0 || z <= 0) return CUDA_ERROR_INVALID_VALUE;
    fn->block[0] = (unsigned)x, fn->block[1] = (unsigned)y, fn->block[2] = (unsigned)z;
    return CUDA_SUCCESS;
}

static CUresult param_set(CUfunction f, int offset, const void *value, size_t n)
{
    struct CUfunc_st *fn = func_find(f);
    if (!fn) return CUDA_ERROR_INVALID_HANDLE;
    if (offset < 0 || !value || (size_t)offset + n > FK_PARAM_BYTES) return CUDA_ERROR_INVALID_VALUE;
    memcpy(fn->params + offset, value, n);
    return CUDA_SUCCESS;
}

static CUresult param_set_size(CUfunction f, unsigned n)
{
    struct CUfunc_st *fn = func_find(f);
    if (!fn) return CUDA_ERROR_INVALID_HANDLE;
    if (n > FK_PARAM_BYTES) return CUDA_ERROR_INVALID_VALUE;
    fn->param_size = n;
    return CUDA_SUCCESS;
}

static CUresult launch_grid(CUfunction f, int width, int height, CUstream s)
{
    struct CUfunc_st *fn = func_find(f);
    if (!fn) return CUDA_ERROR_INVALID_HANDLE;
    if (width <= 0 || height <= 0) return CUDA_ERROR_INVALID_VALUE;
    size_t size = fn->param_size;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, fn->params, CU_LAUNCH_PARAM_BUFFER_SIZE,
                     &size, CU_LAUNCH_PARAM_END};
    const unsigned grid[3] = {(unsigned)width, (unsigned)height, 1};
    return launch(f, grid, fn->block, 0, s, NULL, extra);
}

/* Every entry is checked before any runs, as one launch. */
static CUresult launch_multi(CUDA_LAUNCH_PARAMS *list, unsigned n, unsigned flags)
{
    const unsigned known = CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC |
                           CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC;
    unsigned char raw[FK_PARAM_BYTES];
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!list || !n || (flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n && !rc; i++) {
        const CUDA_LAUNCH_PARAMS *p = &list[i];
        const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
        const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
        rc = !fk_stream_ok(p->hStream) ? CUDA_ERROR_INVALID_HANDLE
                                        : fk_kernel_check(p->function, grid, block,
                                                          p->sharedMemBytes, p->kernelParams,
                                                          NULL, raw);
    }
    for (unsigned i = 0; i < n && !rc; i++) {
        const CUDA_LAUNCH_PARAMS *p = &list[i];
        rc = launch(p->function, (const unsigned[3]){p->gridDimX, p->gridDimY, p->gridDimZ},
                    (const unsigned[3]){p->blockDimX, p->blockDimY, p->blockDimZ},
                    p->sharedMemBytes, p->hStream, p->kernelParams, NULL);
    }
    return rc;
}

/* ---- shared with fakecuda.c and fake_graphs.c, under the lock ---- */

CUresult fk_kernel_check(CUfunction f, const unsigned grid[3], const unsigned block[3],
                         unsigned shared, void **params, void **extra,
                         unsigned char raw[FK_PARAM_BYTES])
{
    struct CUfunc_st *fn = launchable(f);
    if (!fn) return CUDA_ERROR_INVALID_HANDLE;
    if (!shape_ok(grid, block, shared)) return CUDA_ERROR_INVALID_VALUE;
    return pack(fn->kernel, params, extra, raw);
}

unsigned fk_kernel_layout(CUfunction f, size_t off[FK_MAX_PARAMS])
{
    struct CUfunc_st *fn = any_find(f);
    if (!fn) return 0;
    param_layout(fn->kernel, off);
    return fn->kernel->nparams;
}

CUresult fk_kernel_run(CUfunction f, const unsigned grid[3], const unsigned block[3],
                       const unsigned char *raw)
{
    struct CUfunc_st *fn = any_find(f);
    uint64_t p[FK_MAX_WORDS];
    if (!fn) return CUDA_ERROR_INVALID_HANDLE; /* its module was unloaded */
    if (fn->kernel->run_shaped) {
        fn->kernel->run_shaped(raw, grid, block);
        return CUDA_SUCCESS;
    }
    words(fn->kernel, raw, p);
    return run_checked(fn->kernel, p);
}

void fk_kernels_reset_counters(void) { memset(g_kernel_bytes, 0, sizeof g_kernel_bytes); }

void fk_kernels_drop_ctx(CUcontext ctx)
{
    for (struct CUmod_st *m = g_modules, *next; m; m = next) {
        next = m->next;
        if (m->ctx == ctx) module_unlink(m);
    }
}

/* ---- the exported driver API ---- */

#define FK_LAUNCH_ARGS                                                                         \
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,         \
        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                \
        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra
#define FK_LAUNCH_BODY                                                                         \
    launch(f, (const unsigned[3]){gridDimX, gridDimY, gridDimZ},                               \
           (const unsigned[3]){blockDimX, blockDimY, blockDimZ}, sharedMemBytes, hStream,      \
           kernelParams, extra)

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
    FK_CALL(cuModuleLoadData, 1, module_load(module, image, 0))
CUresult CUDAAPI cuModuleUnload(CUmodule hmod) FK_CALL(cuModuleUnload, 1, module_unload(hmod, 0))
CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
    FK_CALL(cuModuleGetFunction, 1, module_get((void **)hfunc, hmod, name, 0))
CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                    size_t *paramSize)
    FK_CALL(cuFuncGetParamInfo, 1,
            param_info(func_find(func), func, paramIndex, paramOffset, paramSize))
/* A library is a module whose handles are CUkernels (struct CUlib_st is never defined). */
CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                   void **jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                   unsigned int numLibraryOptions)
    FK_CALL(cuLibraryLoadData, 1,
            ((void)jitOptions, (void)jitOptionsValues, (void)numJitOptions, (void)libraryOptions,
             (void)libraryOptionValues, (void)numLibraryOptions,
             module_load((CUmodule *)library, code, 1)))
CUresult CUDAAPI cuLibraryUnload(CUlibrary library)
    FK_CALL(cuLibraryUnload, 1, module_unload((CUmodule)library, 1))
CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
    FK_CALL(cuLibraryGetKernel, 1, module_get((void **)pKernel, (CUmodule)library, name, 1))
CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
                                      size_t *paramSize)
    FK_CALL(cuKernelGetParamInfo, 1,
            param_info(kern_find(kernel), kernel, paramIndex, paramOffset, paramSize))
CUresult CUDAAPI cuLaunchKernel(FK_LAUNCH_ARGS) FK_CALL(cuLaunchKernel, 1, FK_LAUNCH_BODY)
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                  void **kernelParams, void **extra)
    FK_CALL(cuLaunchKernelEx, 1, launch_ex(config, f, kernelParams, extra))
/* Cooperative: all blocks resident at once, which a synchronous fake always is. */
#define FK_COOP_ARGS                                                                           \
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,         \
        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                \
        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams
#define FK_COOP_BODY                                                                           \
    launch(f, (const unsigned[3]){gridDimX, gridDimY, gridDimZ},                               \
           (const unsigned[3]){blockDimX, blockDimY, blockDimZ}, sharedMemBytes, hStream,      \
           kernelParams, NULL)
CUresult CUDAAPI cuLaunchCooperativeKernel(FK_COOP_ARGS)
    FK_CALL(cuLaunchCooperativeKernel, 1, FK_COOP_BODY)

/* The deprecated forms (cuda.h marks them so; defining them is no use of them). cuParamSeti
 * and cuParamSetf count as cuParamSetv, cuLaunch and cuLaunchGrid as cuLaunchGridAsync. */
CUresult CUDAAPI cuFuncSetBlockShape(CUfunction hfunc, int x, int y, int z)
    FK_CALL(cuFuncSetBlockShape, 1, set_block_shape(hfunc, x, y, z))
CUresult CUDAAPI cuParamSetSize(CUfunction hfunc, unsigned int numbytes)
    FK_CALL(cuParamSetSize, 1, param_set_size(hfunc, numbytes))
CUresult CUDAAPI cuParamSeti(CUfunction hfunc, int offset, unsigned int value)
    FK_CALL(cuParamSetv, 1, param_set(hfunc, offset, &value, sizeof value))
CUresult CUDAAPI cuParamSetf(CUfunction hfunc, int offset, float value)
    FK_CALL(cuParamSetv, 1, param_set(hfunc, offset, &value, sizeof value))
CUresult CUDAAPI cuParamSetv(CUfunction hfunc, int offset, void *ptr, unsigned int numbytes)
    FK_CALL(cuParamSetv, 1, param_set(hfunc, offset, ptr, numbytes))
CUresult CUDAAPI cuLaunch(CUfunction f) FK_CALL(cuLaunchGridAsync, 1, launch_grid(f, 1, 1, NULL))
CUresult CUDAAPI cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
    FK_CALL(cuLaunchGridAsync, 1, launch_grid(f, grid_width, grid_height, NULL))
CUresult CUDAAPI cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height,
                                   CUstream hStream)
    FK_CALL(cuLaunchGridAsync, 1, launch_grid(f, grid_width, grid_height, hStream))
CUresult CUDAAPI cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList,
                                                      unsigned int numDevices,
                                                      unsigned int flags)
    FK_CALL(cuLaunchCooperativeKernelMultiDevice, 1,
            launch_multi(launchParamsList, numDevices, flags))

/* The per-thread-default-stream variants (fakecuda.c explains why they are separate). */
__typeof__(cuLaunchKernel) cuLaunchKernel_ptsz;
__typeof__(cuLaunchKernelEx) cuLaunchKernelEx_ptsz;
__typeof__(cuLaunchCooperativeKernel) cuLaunchCooperativeKernel_ptsz;
CUresult CUDAAPI cuLaunchKernel_ptsz(FK_LAUNCH_ARGS) FK_CALL(cuLaunchKernel, 1, FK_LAUNCH_BODY)
CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                       void **kernelParams, void **extra)
    FK_CALL(cuLaunchKernelEx, 1, launch_ex(config, f, kernelParams, extra))
CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(FK_COOP_ARGS)
    FK_CALL(cuLaunchCooperativeKernel, 1, FK_COOP_BODY)

/* ---- test inspection (fakecuda.h) ---- */

unsigned long long fakecuda_kernel_bytes(int host_numa)
{
    fk_lock();
    unsigned long long n = g_kernel_bytes[host_numa != 0];
    fk_unlock();
    return n;
}
