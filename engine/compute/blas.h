/*
 * cuBLAS for the device forward pass's large products (engine/forward/forward_cuda_gemm.c):
 * F16 matrices multiplied on the tensor cores with F32 accumulation, queued on the engine's
 * compute stream.
 *
 * Loaded at run time with dlopen, as the driver is (vmm/backend_cuda.c), so that one moevm
 * binary runs on machines without a GPU or without cuBLAS, where the integer kernels do all
 * the products. Why cuBLAS and not our own MMA kernels: its GEMMs are tuned for each
 * architecture's tensor cores and tile shapes, which a hand-written kernel matches only after
 * much tuning on the hardware; the design lists it as a dependency for this.
 */
#ifndef MVM_ENGINE_COMPUTE_BLAS_H
#define MVM_ENGINE_COMPUTE_BLAS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/kernels.h"
#include "moevm/moevm.h"

typedef struct mvm_blas mvm_blas;

/* A handle on `stream` (a CUstream) of the calling thread's current context, with
 * `workspace` (ws_bytes of device memory; 0: cuBLAS allocates its own) for its kernels, from
 * library `lib` (a name or path for dlopen; "auto": the first of libcublas.so.13,
 * libcublas.so.12 and libcublas.so that loads). MVM_ERR_UNSUPPORTED when none loads or it
 * lacks a function; MVM_ERR_BACKEND when it refuses the handle. */
mvm_status mvm_blas_open(const char *lib, void *stream, mvm_dptr workspace, size_t ws_bytes,
                         mvm_blas **out);
void mvm_blas_close(mvm_blas *b);

/* In the engine's row-major terms: y[i][r] = sum over j < k of w[r][j] * x[i][j], plus beta *
 * y[i][r], for i < n and r < m; w's rows are ldw halves apart, x's ldx halves, y's ldy
 * floats (F16 w and x, F32 y). */
mvm_status mvm_blas_gemm(mvm_blas *b, uint32_t m, uint32_t n, uint32_t k, mvm_dptr w,
                         uint64_t ldw, mvm_dptr x, uint64_t ldx, mvm_dptr y, uint64_t ldy,
                         float beta);

/* `count` products of mvm_blas_gemm's shape (beta 0) at once, one kernel for all (several
 * experts of a MoE step, a prompt's attention heads: forward_cuda_gemm.c): product i
 * multiplies the matrices at w[i] and x[i] into y[i], w, x and y device arrays of `count`
 * device pointers (mvm_dptr) that the stream's work may read. With w_by_k, w's rows are its
 * k inputs, w[j][r] (rows of m elements, ldw halves apart: attention's values), else its m
 * outputs as in mvm_blas_gemm. */
typedef struct mvm_blas_batch {
    mvm_dptr w, x, y;
    uint64_t ldw, ldx, ldy;
    uint32_t m, n, k, count;
    int w_by_k;
} mvm_blas_batch;

mvm_status mvm_blas_gemm_batched(mvm_blas *b, const mvm_blas_batch *p);

#endif
