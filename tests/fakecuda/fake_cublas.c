/*
 * The cuBLAS calls of the engine's tensor-core path (engine/compute/blas.c), answered by the
 * fake driver's library on its host memory, so that a test points MOEVM_CUBLAS_LIBRARY at
 * the fake libcuda.so.1 and the engine's F16 products run here: cublasCreate_v2,
 * cublasDestroy_v2, cublasSetStream_v2, cublasSetWorkspace_v2, and cublasGemmEx and
 * cublasGemmBatchedEx (its pointer arrays in device memory) with F16 inputs, an F32 output
 * and F32 accumulation (column-major, either operand transposed, as
 * cuBLAS defines them). Like the fake's kernels, a product runs when it is queued. Calls are
 * counted and fail on request as the driver's are (fakecuda.h: "cublasGemmEx:3"); an
 * injected failure is CUBLAS_STATUS_EXECUTION_FAILED. An operand outside memory the device
 * may access fails the call with CUBLAS_STATUS_EXECUTION_FAILED and writes nothing (where
 * cuBLAS would fault the stream).
 */
#include <cublas_v2.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fakecuda_internal.h"

struct cublasContext {
    CUcontext ctx;
    CUstream stream;
};

/* The call's status: an injected failure, a missing cuInit or context, or `body`'s. */
#define FK_BLAS(fn, body)                                                                      \
    {                                                                                          \
        CUresult rc_ = fk_enter(FN_##fn, 1);                                                   \
        if (!rc_) rc_ = fk_need_ctx();                                                         \
        const int no_ctx_ = rc_ == CUDA_ERROR_NOT_INITIALIZED ||                               \
                            rc_ == CUDA_ERROR_INVALID_CONTEXT;                                 \
        cublasStatus_t st_ = no_ctx_ ? CUBLAS_STATUS_NOT_INITIALIZED                           \
                             : rc_   ? CUBLAS_STATUS_EXECUTION_FAILED                          \
                                     : (body);                                                 \
        fk_leave(CUDA_SUCCESS);                                                                \
        return st_;                                                                            \
    }

static cublasStatus_t create(cublasHandle_t *h)
{
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = calloc(1, sizeof **h);
    if (!*h) return CUBLAS_STATUS_ALLOC_FAILED;
    (*h)->ctx = fk_current_ctx();
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) FK_BLAS(cublasCreate, create(h))

cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
    FK_BLAS(cublasDestroy, h ? (free(h), CUBLAS_STATUS_SUCCESS) : CUBLAS_STATUS_NOT_INITIALIZED)

static cublasStatus_t set_stream(cublasHandle_t h, CUstream s)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!fk_stream_ok(s)) return CUBLAS_STATUS_INVALID_VALUE;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
    FK_BLAS(cublasSetStream, set_stream(h, (CUstream)s))

static cublasStatus_t set_workspace(cublasHandle_t h, void *ws, size_t bytes)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && (!ws || (uintptr_t)ws % 256 ||
                  !fk_device_range((uintptr_t)ws, bytes, CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                                   NULL)))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes)
    FK_BLAS(cublasSetWorkspace, set_workspace(h, ws, bytes))

/* IEEE half -> float, written out (the engine's converter is the thing under test). */
static float half(uint16_t h)
{
    const int e = h >> 10 & 31, m = h & 1023;
    const float v = e == 0 ? ldexpf((float)m, -24)
                  : e == 31 ? (m ? NAN : INFINITY)
                            : ldexpf((float)(m | 1024), e - 25);
    return h >> 15 ? -v : v;
}

/* A column-major operand of `rows` x `cols` (its stored shape) with leading dimension ld:
 * whether it lies in memory the device may access. */
static int operand_ok(const void *p, int rows, int cols, int ld, size_t elem, unsigned need)
{
    if (!rows || !cols) return 1;
    const size_t n = ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * elem;
    return p && fk_device_range((uintptr_t)p, n, need, NULL);
}

/* A product's arguments as cuBLAS checks them, then its operands' memory. */
static cublasStatus_t gemm_check(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                 int m, int n, int k, const void *alpha, const void *A, int lda,
                                 const void *B, int ldb, const void *beta, const void *C, int ldc)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) ||
        m < 0 || n < 0 || k < 0 || !alpha || !beta || lda < (ta == CUBLAS_OP_N ? m : k) ||
        ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m || lda < 1 || ldb < 1 || ldc < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    const unsigned rd = CU_MEM_ACCESS_FLAGS_PROT_READ, rw = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (!operand_ok(A, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda, 2, rd) ||
        !operand_ok(B, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb, 2, rd) ||
        !operand_ok(C, m, n, ldc, 4, rw))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    return CUBLAS_STATUS_SUCCESS;
}

/* A product's operands as floats, each half converted once rather than once a product it
 * enters (the conversions took a tenth of test_forward_gpu): op(A) row by row, op(B)
 * column by column, k floats each. */
struct gemm_scratch {
    float *a, *b;
};

/* (one float more than the operands hold: an empty product's malloc(0) may be NULL) */
static cublasStatus_t scratch_alloc(int m, int n, int k, struct gemm_scratch *s)
{
    s->a = malloc(((size_t)m * k + 1) * sizeof *s->a);
    s->b = malloc(((size_t)k * n + 1) * sizeof *s->b);
    if (s->a && s->b)
        return CUBLAS_STATUS_SUCCESS;
    free(s->a);
    free(s->b);
    return CUBLAS_STATUS_ALLOC_FAILED;
}

static void gemm_run(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                     const float *alpha, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                     const float *beta, float *C, int ldc, const struct gemm_scratch *s)
{
    for (int i = 0; i < m; i++)
        for (int l = 0; l < k; l++)
            s->a[(size_t)i * k + l] =
                half(A[ta == CUBLAS_OP_N ? i + (size_t)l * lda : l + (size_t)i * lda]);
    for (int j = 0; j < n; j++)
        for (int l = 0; l < k; l++)
            s->b[(size_t)j * k + l] =
                half(B[tb == CUBLAS_OP_N ? l + (size_t)j * ldb : j + (size_t)l * ldb]);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            const float *a = s->a + (size_t)i * k, *b = s->b + (size_t)j * k;
            double sum = 0;
            for (int l = 0; l < k; l++)
                sum += (double)a[l] * b[l];
            float *c = &C[i + (size_t)j * ldc];
            /* beta = 0 ignores C, NaN or not, as cuBLAS does */
            *c = (float)(*alpha * sum + (*beta != 0 ? (double)*beta * *c : 0));
        }
}

/* The types the engine asks for: F16 operands, an F32 result, F32 accumulation. */
static int types_ok(cudaDataType at, cudaDataType bt, cudaDataType ct, cublasComputeType_t comp)
{
    return at == CUDA_R_16F && bt == CUDA_R_16F && ct == CUDA_R_32F && comp == CUBLAS_COMPUTE_32F;
}

static cublasStatus_t gemm_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                              int m, int n, int k, const void *alpha, const void *A,
                              cudaDataType at, int lda, const void *B, cudaDataType bt, int ldb,
                              const void *beta, void *C, cudaDataType ct, int ldc,
                              cublasComputeType_t comp)
{
    if (!types_ok(at, bt, ct, comp))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    cublasStatus_t st = gemm_check(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    struct gemm_scratch s;
    if (st == CUBLAS_STATUS_SUCCESS && (st = scratch_alloc(m, n, k, &s)) == CUBLAS_STATUS_SUCCESS) {
        gemm_run(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, &s);
        free(s.a);
        free(s.b);
    }
    return st;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                            int m, int n, int k, const void *alpha, const void *A,
                            cudaDataType at, int lda, const void *B, cudaDataType bt, int ldb,
                            const void *beta, void *C, cudaDataType ct, int ldc,
                            cublasComputeType_t comp, cublasGemmAlgo_t algo)
    FK_BLAS(cublasGemmEx, ((void)algo, gemm_ex(h, ta, tb, m, n, k, alpha, A, at, lda, B, bt,
                                               ldb, beta, C, ct, ldc, comp)))

/* Every product checked (its pointer arrays in device memory, then its operands) before
 * any is computed, so that a refused call writes nothing. */
static cublasStatus_t gemm_batched_ex(cublasHandle_t h, cublasOperation_t ta,
                                      cublasOperation_t tb, int m, int n, int k,
                                      const void *alpha, const void *const A[], cudaDataType at,
                                      int lda, const void *const B[], cudaDataType bt, int ldb,
                                      const void *beta, void *const C[], cudaDataType ct,
                                      int ldc, int count, cublasComputeType_t comp)
{
    if (!types_ok(at, bt, ct, comp))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (count < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    const size_t bytes = (size_t)count * sizeof(void *);
    const unsigned rd = CU_MEM_ACCESS_FLAGS_PROT_READ;
    if (count && (!fk_device_range((uintptr_t)A, bytes, rd, NULL) ||
                  !fk_device_range((uintptr_t)B, bytes, rd, NULL) ||
                  !fk_device_range((uintptr_t)C, bytes, rd, NULL)))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    for (int i = 0; i < count; i++) {
        cublasStatus_t st =
            gemm_check(h, ta, tb, m, n, k, alpha, A[i], lda, B[i], ldb, beta, C[i], ldc);
        if (st != CUBLAS_STATUS_SUCCESS)
            return st;
    }
    struct gemm_scratch s;
    cublasStatus_t st = scratch_alloc(m, n, k, &s);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    for (int i = 0; i < count; i++)
        gemm_run(ta, tb, m, n, k, alpha, A[i], lda, B[i], ldb, beta, C[i], ldc, &s);
    free(s.a);
    free(s.b);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                   int m, int n, int k, const void *alpha,
                                   const void *const A[], cudaDataType at, int lda,
                                   const void *const B[], cudaDataType bt, int ldb,
                                   const void *beta, void *const C[], cudaDataType ct, int ldc,
                                   int count, cublasComputeType_t comp, cublasGemmAlgo_t algo)
    FK_BLAS(cublasGemmBatchedEx,
            ((void)algo, gemm_batched_ex(h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta,
                                         C, ct, ldc, count, comp)))
