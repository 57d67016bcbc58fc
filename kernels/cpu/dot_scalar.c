/*
 * The portable level: dot products and the expert down loop in plain C, for CPUs without
 * AVX2 and for non-x86 builds. The Q dot products sum each block in int32 and scale once per
 * block, as ggml's generic ggml_vec_dot_q8_0_q8_0 does; the float ones keep 8 partial sums so
 * that the compiler can vectorize them with the baseline ISA without reassociating.
 */
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/kdot.h"

static inline float dot_float(enum mvm_wtype t, const uint8_t *w, const float *a, size_t n)
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

/* One Q block (type t) against one Q8_0 activation block. */
static inline float block_q(enum mvm_wtype t, const uint8_t *blk, const mvm_block_q8_0 *a)
{
    int32_t sum = 0;
    uint16_t d;
    if (t == MVM_W_Q8_0) {
        const mvm_block_q8_0 *x = (const mvm_block_q8_0 *)blk;
        for (int j = 0; j < MVM_QBLOCK; j++)
            sum += x->qs[j] * a->qs[j];
        d = x->d;
    } else {
        const mvm_block_q4_0 *x = (const mvm_block_q4_0 *)blk;
        for (int j = 0; j < MVM_QBLOCK / 2; j++)
            sum += ((x->qs[j] & 0x0F) - 8) * a->qs[j] +
                   ((x->qs[j] >> 4) - 8) * a->qs[j + MVM_QBLOCK / 2];
        d = x->d;
    }
    return (float)sum * (mvm_k_h2f(d) * mvm_k_h2f(a->d));
}

static inline float dot_q(enum mvm_wtype t, const uint8_t *w, const mvm_block_q8_0 *a, size_t n)
{
    const size_t bytes = mvm_k_block_bytes(t);
    float s = 0;
    for (size_t b = 0; b < n / MVM_QBLOCK; b++)
        s += block_q(t, w + b * bytes, a + b);
    return s;
}

/* One 32-element dot product per output, for both kinds of activations. */
static inline void down(enum mvm_wtype t, const uint8_t *w, const void *a, float *out, size_t n)
{
    const size_t bytes = mvm_k_block_bytes(t);
    for (size_t j = 0; j < n; j++)
        out[j] += mvm_k_is_q(t) ? dot_q(t, w + j * bytes, a, MVM_QBLOCK)
                                : dot_float(t, w + j * bytes, a, MVM_QBLOCK);
}

MVM_K_LEVEL(mvm_k_level_scalar, , dot_float, dot_q, down, down, mvm_k_dot_k, mvm_k_down_k)
