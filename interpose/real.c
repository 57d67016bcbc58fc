/*
 * The real entry points, and how the program reaches our hooks instead of them.
 *
 * A program reaches the driver three ways, and each must end in our hook:
 *   1. linked against libcuda: LD_PRELOAD puts our exported cu* symbols first;
 *   2. dlopen("libcuda.so.1") + dlsym(handle, name): a handle-scoped lookup ignores
 *      LD_PRELOAD, so we export dlsym itself and substitute hooks in what it returns;
 *   3. cuGetProcAddress[_v2] (the CUDA runtime since 11.3, PyTorch's driver API access):
 *      we call the real one and route by the returned pointer, not by the name, because
 *      only the pointer says which exact versioned or _ptsz function the driver picked
 *      (as vgpu-manager's library/src/loader.c does).
 * Both substitutions compare a real function's address with the table below, so a lookup
 * of something we do not hook returns the real thing untouched.
 *
 * Nothing here runs in a constructor. libcuda and NVML are looked up with RTLD_NOLOAD:
 * the interposer never loads a driver library the program did not load itself.
 */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "interpose/preload.h"
#include "vmm/options.h"

/* dlsym and what it runs first are called by sanitizer runtimes while they start, before
 * their shadow memory exists: those functions must not be instrumented. */
#define MVM_EARLY __attribute__((no_sanitize("address", "undefined", "thread")))

_Thread_local int mvm_in_interposer;
mvm_real mvm_real_fn;

typedef void *(*dlsym_fn)(void *, const char *);
static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int cuda_loaded, nvml_loaded;
static void *_Atomic cuda_base, *_Atomic nvml_base; /* load addresses of the two libraries */

/* The public dlsym would find ours: ask for glibc's by version, newest first. Found lazily
 * without pthread_once (sanitizer runtimes intercept it, and call dlsym before they can run
 * an interceptor); two threads racing here store the same value. */
MVM_EARLY static dlsym_fn real_dlsym_fn(void)
{
    static _Atomic(dlsym_fn) found;
    dlsym_fn f = atomic_load_explicit(&found, memory_order_acquire);
    if (f)
        return f;
    f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!f)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (f)
        atomic_store_explicit(&found, f, memory_order_release);
    return f;
}
#define real_dlsym (real_dlsym_fn())

typedef struct route {
    const char *sym;
    void *slot;      /* the mvm_real_fn field holding the real function */
    void *hook;      /* NULL: used, not hooked */
    bool nvml;
} route;

#define ROUTE_CU(field, sym, ret, params) {sym, &mvm_real_fn.field, (void *)hk_##field, false},
#define ROUTE_NVML(field, sym, ret, params) {sym, &mvm_real_fn.field, (void *)hk_##field, true},
#define USED_CU(field, sym, ret, params) {sym, &mvm_real_fn.field, NULL, false},
#define USED_NVML(field, sym, ret, params) {sym, &mvm_real_fn.field, NULL, true},
#define ROUTE_GUARDED(field, sym, params, args, touches)                                     \
    {sym, &mvm_real_fn.field, (void *)hk_##field, false},
static const route routes[] = {MVM_CU_HOOKS(ROUTE_CU) MVM_NVML_HOOKS(ROUTE_NVML)
                               MVM_CU_GUARDED(ROUTE_GUARDED)
                               MVM_CU_USED(USED_CU) MVM_NVML_USED(USED_NVML)};
#define N_ROUTES (sizeof routes / sizeof *routes)

/* The real function behind slot (a function pointer stored as bytes; see resolve). */
static void *slot_get(const route *r)
{
    void *p;
    memcpy(&p, r->slot, sizeof p);
    return p;
}

/* Function pointers and void * have the same representation on every platform CUDA runs
 * on (POSIX requires it for dlsym); memcpy keeps the compiler out of the conversion. */
static void resolve(void *lib, bool nvml)
{
    for (size_t i = 0; i < N_ROUTES; i++)
        if (routes[i].nvml == nvml) {
            void *p = real_dlsym(lib, routes[i].sym);
            memcpy(routes[i].slot, &p, sizeof p);
        }
}

static void *noload(const char *name)
{
    return dlopen(name, RTLD_NOW | RTLD_NOLOAD);
}

static void *base_of(void *lib, const char *sym)
{
    Dl_info info;
    void *p = real_dlsym(lib, sym);
    return p && dladdr(p, &info) ? info.dli_fbase : NULL;
}

int mvm_real_load(void)
{
    if (atomic_load_explicit(&cuda_loaded, memory_order_acquire))
        return 1;
    if (!real_dlsym_fn())
        return 0;
    pthread_mutex_lock(&load_mu);
    if (!atomic_load(&cuda_loaded)) {
        mvm_option_value lib;
        char msg[256];
        void *h = mvm_option_get(&mvm_opt_cuda_library, &lib, msg, sizeof msg) == MVM_OK
                      ? noload(lib.s)
                      : NULL;
        if (!h)
            h = noload("libcuda.so.1");
        if (h) {
            resolve(h, false);
            atomic_store(&cuda_base, base_of(h, "cuInit"));
            atomic_store_explicit(&cuda_loaded, 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&load_mu);
    return atomic_load(&cuda_loaded);
}

int mvm_real_load_nvml(void)
{
    if (atomic_load_explicit(&nvml_loaded, memory_order_acquire))
        return 1;
    if (!real_dlsym_fn())
        return 0;
    pthread_mutex_lock(&load_mu);
    void *h = atomic_load(&nvml_loaded) ? NULL : noload("libnvidia-ml.so.1");
    if (h) {
        resolve(h, true);
        atomic_store(&nvml_base, base_of(h, "nvmlInit_v2"));
        atomic_store_explicit(&nvml_loaded, 1, memory_order_release);
    }
    pthread_mutex_unlock(&load_mu);
    return atomic_load(&nvml_loaded);
}

void *mvm_hook_for(void *fn)
{
    if (!fn)
        return NULL;
    for (size_t i = 0; i < N_ROUTES; i++)
        if (routes[i].hook && slot_get(&routes[i]) == fn)
            return routes[i].hook;
    return NULL;
}

/* dlsym(RTLD_NEXT, name) means "after the caller's object"; called from here it would mean
 * after ours. So walk the link map from the caller's object on. (Each handle also searches
 * its object's dependencies, which is harmless for the driver's names: only libcuda and
 * NVML define them.) */
__attribute__((noinline)) static void *next_after(const void *caller, const char *name)
{
    Dl_info info;
    struct link_map *lm = NULL;
    if (!dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
        return NULL;
    for (struct link_map *l = lm->l_next; l; l = l->l_next) {
        void *h = dlopen(l->l_name[0] ? l->l_name : NULL, RTLD_LAZY | RTLD_NOLOAD);
        if (!h)
            continue;
        void *p = real_dlsym(h, name);
        dlclose(h);
        if (p)
            return p;
    }
    return NULL;
}

MVM_EARLY static bool maybe_ours(const char *name)
{
    return name && ((name[0] == 'c' && name[1] == 'u') || strncmp(name, "nvml", 4) == 0);
}

/* Lookups the driver libraries make of their own symbols pass through untouched. */
__attribute__((noinline)) static bool from_driver(const void *caller)
{
    Dl_info info;
    if (!dladdr(caller, &info) || !info.dli_fbase)
        return false;
    return info.dli_fbase == atomic_load(&cuda_base) || info.dli_fbase == atomic_load(&nvml_base);
}

/* The part of dlsym for the driver's names, after start-up. */
__attribute__((noinline)) static void *lookup_driver_name(void *handle, const char *name,
                                                          const void *caller)
{
    void *p = handle == RTLD_NEXT ? next_after(caller, name) : real_dlsym(handle, name);
    if (!p || mvm_in_interposer)
        return p;
    mvm_in_interposer++;
    if (name[0] == 'n')
        mvm_real_load_nvml();
    else
        mvm_real_load();
    void *hook = from_driver(caller) ? NULL : mvm_hook_for(p);
    mvm_in_interposer--;
    return hook ? hook : p;
}

MVM_EARLY __attribute__((visibility("default"))) void *dlsym(void *handle, const char *name)
{
    dlsym_fn real = real_dlsym_fn();
    if (!real)
        return NULL;
    /* Not ours: a tail call, so glibc sees our caller's return address and RTLD_NEXT means
     * what the caller meant (sanitizer runtimes find their "real" functions this way while
     * they start, before anything else may run). */
    if (!maybe_ours(name))
        return real(handle, name);
    return lookup_driver_name(handle, name, __builtin_return_address(0));
}

static void route_result(CUresult r, void **pfn)
{
    if (r == CUDA_SUCCESS && pfn && *pfn && !mvm_in_interposer) {
        void *hook = mvm_hook_for(*pfn);
        if (hook)
            *pfn = hook;
    }
}

CUresult hk_cuGetProcAddress_v1(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGetProcAddress_v1)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = mvm_real_fn.cuGetProcAddress_v1(symbol, pfn, version, flags);
    route_result(r, pfn);
    return r;
}

CUresult hk_cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *status)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGetProcAddress_v2)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = mvm_real_fn.cuGetProcAddress_v2(symbol, pfn, version, flags, status);
    route_result(r, pfn);
    return r;
}
