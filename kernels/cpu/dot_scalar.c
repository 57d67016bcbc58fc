/*
 * The portable level: dot products and the expert down loop in plain C, for CPUs without
 * AVX2 and for non-x86 builds. The Q and K blocks are kernels/blocks.h's (each block summed
 * in int32 and scaled once, as ggml's generic ggml_vec_dot_q8_0_q8_0 does); the float ones
 * keep 8 partial sums so that the compiler can vectorize them with the baseline ISA without
 * reassociating.
 */
#include "kernels/cpu/dispatch.h"

/* Forced: each generic kernel must be inlined into every per-type entry point of the table,
 * where the type is a constant and its branches fold away (gcc would otherwise call one
 * shared copy, with the type a variable: 4x slower for Q4_0). */
#define SCALAR_INLINE MVM_K_INLINE

SCALAR_INLINE float dot_float(enum mvm_wtype t, const uint8_t *w, const float *a, size_t n)
{
    float acc[8] = {0};
    const size_t n8 = n - n % 8;
    /* Unrolled on request: gcc -O2 leaves the inner loop rolled, and rolled it is not
     * vectorized. */
    for (size_t i = 0; i < n8; i += 8)
#pragma GCC unroll 8
        for (size_t k = 0; k < 8; k++)
            acc[k] += mvm_k_elem(t, w, i + k) * a[i + k];
    float s = 0;
    for (size_t i = n8; i < n; i++)
        s += mvm_k_elem(t, w, i) * a[i];
    for (size_t k = 0; k < 8; k++)
        s += acc[k];
    return s;
}

/* A row of Q blocks against Q8_0 activation blocks, or of K super-blocks against Q8_K
 * blocks (kernels/blocks.h's integers, which the AVX2 and AVX-512 levels compute too). */
SCALAR_INLINE float block_dot(enum mvm_wtype t, const uint8_t *blk, const void *act, size_t b)
{
    return mvm_k_is_k(t) ? mvm_k_kblock(t, blk, (const mvm_block_q8_K *)act + b)
                         : mvm_k_block_q(t, blk, (const mvm_block_q8_0 *)act + b);
}

SCALAR_INLINE float dot_blocks(enum mvm_wtype t, const uint8_t *w, const void *act, size_t n)
{
    const size_t bytes = mvm_k_block_bytes(t);
    float s = 0;
    for (size_t b = 0; b < n / mvm_k_block_elems(t); b++)
        s += block_dot(t, w + b * bytes, act, b);
    return s;
}

/* One block's dot product per output (32 elements of a float type, a Q block, a K
 * super-block), against the group's activations. */
SCALAR_INLINE void down(enum mvm_wtype t, const uint8_t *w, const void *a, float *out, size_t n)
{
    const size_t bytes = mvm_k_block_bytes(t);
    for (size_t j = 0; j < n; j++)
        out[j] += mvm_k_block_elems(t) > 1 ? block_dot(t, w + j * bytes, a, 0)
                                           : dot_float(t, w + j * bytes, a, MVM_QBLOCK);
}

/* out += s * row (dispatch.h's axpy), chunks of 8 with a constant inner count: gcc -O2's
 * cost model vectorizes only loops whose trip count the vector width divides. */
SCALAR_INLINE void axpy_float(enum mvm_wtype t, const uint8_t *row, float s, float *out, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t k = 0; k < 8; k++)
            out[i + k] += s * mvm_k_elem(t, row, i + k);
    for (; i < n; i++)
        out[i] += s * mvm_k_elem(t, row, i);
}

/* The portable level takes the tokens one after another. */
MVM_K_DOTN_ONE_BY_ONE(, dotn_float, dot_float, float)
MVM_K_DOTN_ONE_BY_ONE(, dotn_blocks, dot_blocks, void)
MVM_K_DOWNN_ONE_BY_ONE(, downn, down, void)

MVM_K_LEVEL(mvm_k_level_scalar, , dotn_float, dotn_blocks, downn, downn, dotn_blocks, downn,
            axpy_float, NULL, NULL, NULL, NULL, NULL, NULL, NULL)
