/* cuBLAS at run time (engine/compute/blas.h). */
#include "engine/compute/blas.h"

#include <cublas_v2.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/error.h"

/* X(field, symbol, parameters): what the engine calls, by their exported names (cublas_v2.h
 * maps cublasCreate and the others to these). */
#define BLAS_API(X)                                                                            \
    X(create, "cublasCreate_v2", (cublasHandle_t *))                                           \
    X(destroy, "cublasDestroy_v2", (cublasHandle_t))                                           \
    X(set_stream, "cublasSetStream_v2", (cublasHandle_t, cudaStream_t))                        \
    X(set_workspace, "cublasSetWorkspace_v2", (cublasHandle_t, void *, size_t))                \
    X(gemm_ex, "cublasGemmEx",                                                                 \
      (cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,      \
       const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *, \
       cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t))                             \
    X(gemm_batched_ex, "cublasGemmBatchedEx",                                                  \
      (cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,      \
       const void *const *, cudaDataType, int, const void *const *, cudaDataType, int,         \
       const void *, void *const *, cudaDataType, int, int, cublasComputeType_t,               \
       cublasGemmAlgo_t))

struct mvm_blas {
    void *lib;
    cublasHandle_t handle;
#define FIELD(field, sym, params) cublasStatus_t(*field) params;
    BLAS_API(FIELD)
#undef FIELD
};

static mvm_status blas_fail(cublasStatus_t s, const char *what)
{
    return mvm_fail(MVM_ERR_BACKEND, "%s failed: cuBLAS status %d", what, (int)s);
}

static mvm_status load(mvm_blas *b, const char *lib)
{
    static const char *const defaults[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    const int search = strcmp(lib, "auto") == 0;
    const char *tried = search ? defaults[0] : lib;
    if (!search)
        b->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    for (size_t i = 0; search && !b->lib && i < sizeof defaults / sizeof *defaults; i++)
        b->lib = dlopen(tried = defaults[i], RTLD_NOW | RTLD_LOCAL);
    if (!b->lib)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "no cuBLAS (%s): %s", tried, dlerror());
#define LOOKUP(field, sym, params)                                                             \
    if (!(*(void **)&b->field = dlsym(b->lib, sym)))                                           \
        return mvm_fail(MVM_ERR_UNSUPPORTED, "%s lacks %s", tried, sym);
    BLAS_API(LOOKUP)
#undef LOOKUP
    return MVM_OK;
}

mvm_status mvm_blas_open(const char *lib, void *stream, mvm_dptr workspace, size_t ws_bytes,
                         mvm_blas **out)
{
    *out = NULL;
    mvm_blas *b = calloc(1, sizeof *b);
    if (!b)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory opening cuBLAS");
    mvm_status st = load(b, lib);
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    if (st == MVM_OK && (s = b->create(&b->handle)) != CUBLAS_STATUS_SUCCESS)
        st = blas_fail(s, "cublasCreate");
    if (st == MVM_OK && (s = b->set_stream(b->handle, stream)) != CUBLAS_STATUS_SUCCESS)
        st = blas_fail(s, "cublasSetStream");
    if (st == MVM_OK && workspace &&
        (s = b->set_workspace(b->handle, (void *)(uintptr_t)workspace, ws_bytes)) !=
            CUBLAS_STATUS_SUCCESS)
        st = blas_fail(s, "cublasSetWorkspace");
    if (st != MVM_OK) {
        mvm_blas_close(b);
        return st;
    }
    *out = b;
    return MVM_OK;
}

void mvm_blas_close(mvm_blas *b)
{
    if (!b)
        return;
    if (b->handle)
        b->destroy(b->handle);
    if (b->lib)
        dlclose(b->lib);
    free(b);
}

/* The engine's row-major shapes as cuBLAS's: whether they fit its ints. */
static int fits(uint32_t m, uint32_t n, uint32_t k, uint64_t ldw, uint64_t ldx, uint64_t ldy)
{
    return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && ldw <= INT_MAX && ldx <= INT_MAX &&
           ldy <= INT_MAX;
}

mvm_status mvm_blas_gemm(mvm_blas *b, uint32_t m, uint32_t n, uint32_t k, mvm_dptr w,
                         uint64_t ldw, mvm_dptr x, uint64_t ldx, mvm_dptr y, uint64_t ldy,
                         float beta)
{
    if (!fits(m, n, k, ldw, ldx, ldy))
        return mvm_fail(MVM_ERR_RANGE, "cublasGemmEx: a %u x %u x %u product is too large",
                        m, n, k);
    /* cuBLAS is column-major: y's rows are the columns of an m x n matrix C, w's those of a
     * k x m matrix A, x's those of a k x n matrix B, and C = A^T B + beta C */
    const float alpha = 1.0f;
    cublasStatus_t s = b->gemm_ex(b->handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n, (int)k,
                                  &alpha, (const void *)(uintptr_t)w, CUDA_R_16F, (int)ldw,
                                  (const void *)(uintptr_t)x, CUDA_R_16F, (int)ldx, &beta,
                                  (void *)(uintptr_t)y, CUDA_R_32F, (int)ldy,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS ? MVM_OK : blas_fail(s, "cublasGemmEx");
}

mvm_status mvm_blas_gemm_batched(mvm_blas *b, const mvm_blas_batch *p)
{
    if (!fits(p->m, p->n, p->k, p->ldw, p->ldx, p->ldy) || p->count > INT_MAX)
        return mvm_fail(MVM_ERR_RANGE, "cublasGemmBatchedEx: %u products of %u x %u x %u are "
                        "too large", p->count, p->m, p->n, p->k);
    const float alpha = 1.0f, beta = 0.0f; /* as mvm_blas_gemm, each product on its own */
    cublasStatus_t s = b->gemm_batched_ex(
        b->handle, p->w_by_k ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, (int)p->m, (int)p->n,
        (int)p->k, &alpha, (const void *const *)(uintptr_t)p->w, CUDA_R_16F, (int)p->ldw,
        (const void *const *)(uintptr_t)p->x, CUDA_R_16F, (int)p->ldx, &beta,
        (void *const *)(uintptr_t)p->y, CUDA_R_32F, (int)p->ldy, (int)p->count,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS ? MVM_OK : blas_fail(s, "cublasGemmBatchedEx");
}
