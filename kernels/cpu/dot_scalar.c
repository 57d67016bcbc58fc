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

/* One Q block (type t) against one Q8_0 activation block: d_w d_a sum(q_w q_a), plus for
 * the types with a min m_w d_a sum(q_a) (ggml takes that sum from its Q8_1 activations).
 * The bias of Q4_0/Q5_0 comes off as bias sum(q_a), so that the loop over the unsigned
 * quants is the same for all four 4- and 5-bit types (and the compiler vectorizes it). */
static inline float block_q(enum mvm_wtype t, const uint8_t *blk, const mvm_block_q8_0 *a)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    int32_t sum = 0, asum = 0;
    for (int j = 0; j < MVM_QBLOCK; j++)
        asum += a->qs[j];
    if (t == MVM_W_Q8_0) {
        for (int j = 0; j < MVM_QBLOCK; j++)
            sum += (int8_t)blk[L.qs + j] * a->qs[j];
    } else if (t == MVM_W_IQ4_NL) {
        for (int j = 0; j < MVM_QBLOCK / 2; j++)
            sum += mvm_k_iq4nl_values[blk[L.qs + j] & 0x0F] * a->qs[j] +
                   mvm_k_iq4nl_values[blk[L.qs + j] >> 4] * a->qs[j + 16];
    } else {
        uint32_t qh = 0;
        if (L.qh)
            memcpy(&qh, blk + L.qh, sizeof qh);
        for (int j = 0; j < MVM_QBLOCK / 2; j++) {
            const uint8_t b = blk[L.qs + j];
            sum += ((b & 0x0F) | (int)(qh >> j & 1) << 4) * a->qs[j] +
                   ((b >> 4) | (int)(qh >> (j + 16) & 1) << 4) * a->qs[j + 16];
        }
        sum -= L.bias * asum;
    }
    const float da = mvm_k_h2f(a->d);
    const float s = (float)sum * (mvm_k_h2f(mvm_k_block_d(blk)) * da);
    return L.m ? s + (float)asum * (mvm_k_h2f(mvm_k_block_h(blk, L.m)) * da) : s;
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
