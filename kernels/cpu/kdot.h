/*
 * The K-quants' dot products against Q8_K activations in plain C: the portable level's
 * (dot_scalar.c), and the definition avx2.h's versions for the AVX2 and AVX-512 levels
 * follow integer for integer, so that every level gives the same result.
 *
 * Per super-block the quants are summed in int32 per sub-block, scaled by the sub-block's
 * integer scale, and only the super-block's total is converted: exact, since every sum is
 * far below 2^31 (Q6_K: 16 sub-blocks x 64 x 16 x 32 x 127 < 2^27). The mins of Q4_K/Q5_K
 * (x = d·sc·q - dmin·m) and Q2_K, the -32 offset of Q6_K and the -4 of Q3_K's quants
 * without their third bit come out of the activation sums the Q8_K block carries (bsums), as
 * in ggml. Then, in float,
 *     Q2_K, Q4_K, Q5_K:  a.d · (d · Σ sc·(q·a) - dmin · Σ m·bsum)
 *     Q3_K:              a.d · d · Σ (s - 32)·(q·a - 4·bsum), q with the third bit
 *     Q6_K:              a.d · d · Σ sc·(q·a - 32·bsum)
 * and a row sums its super-blocks in order.
 */
#ifndef MVM_KERNELS_CPU_KDOT_H
#define MVM_KERNELS_CPU_KDOT_H

#include "kernels/cpu/dispatch.h"

#define MVM_K_INLINE static inline __attribute__((always_inline))

/* Σ over 32 elements of (the 4 bits of q at `shift`, plus bit `hbit` of qh as the fifth
 * when qh is not NULL) · a. */
MVM_K_INLINE int32_t kdot_32(const uint8_t *q, int shift, const uint8_t *qh, int hbit,
                             const int8_t *a)
{
    int32_t s = 0;
    if (qh) {
        for (int l = 0; l < 32; l++)
            s += (((q[l] >> shift) & 15) | (((qh[l] >> hbit) & 1) << 4)) * a[l];
    } else {
        for (int l = 0; l < 32; l++)
            s += ((q[l] >> shift) & 15) * a[l];
    }
    return s;
}

/* Q4_K (qh NULL) or Q5_K super-block times one Q8_K block. */
MVM_K_INLINE float kblock_q45(const uint8_t *scales, uint16_t d, uint16_t dmin,
                              const uint8_t *qs, const uint8_t *qh, const mvm_block_q8_K *a)
{
    int32_t sum = 0, msum = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t sc0, m0, sc1, m1;
        mvm_k_scale_min(scales, 2 * k, &sc0, &m0);
        mvm_k_scale_min(scales, 2 * k + 1, &sc1, &m1);
        const uint8_t *q = qs + 32 * k;
        const int8_t *aq = a->qs + 64 * k;
        sum += sc0 * kdot_32(q, 0, qh, 2 * k, aq) + sc1 * kdot_32(q, 4, qh, 2 * k + 1, aq + 32);
        msum += m0 * (a->bsums[4 * k] + a->bsums[4 * k + 1]) +
                m1 * (a->bsums[4 * k + 2] + a->bsums[4 * k + 3]);
    }
    return a->d * (mvm_k_h2f(d) * (float)sum - mvm_k_h2f(dmin) * (float)msum);
}

MVM_K_INLINE float kblock_q6(const mvm_block_q6_K *x, const mvm_block_q8_K *a)
{
    int32_t sum = 0;
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < 4; k++) {
            const uint8_t *ql = x->ql + 64 * h + 32 * (k & 1), *qh = x->qh + 32 * h;
            const int8_t *aq = a->qs + 128 * h + 32 * k;
            const int shift = 4 * (k >> 1);
            int32_t s[2] = {0, 0};
            for (int half = 0; half < 2; half++)
                for (int l = 16 * half; l < 16 * half + 16; l++)
                    s[half] += (((ql[l] >> shift) & 15) | (((qh[l] >> (2 * k)) & 3) << 4)) * aq[l];
            const int j = 8 * h + 2 * k;
            sum += x->scales[j] * (s[0] - 32 * a->bsums[j]) +
                   x->scales[j + 1] * (s[1] - 32 * a->bsums[j + 1]);
        }
    }
    return a->d * (mvm_k_h2f(x->d) * (float)sum);
}

/* Q2_K (hmask NULL) or Q3_K: sub-block i = 8h + 2j + half (16 elements) takes bits 2j of
 * qs[32h + 16·half + l] and, for Q3_K, bit 4h + j of hmask[16·half + l] as the third. */
MVM_K_INLINE float kblock_q23(const uint8_t *qs, const uint8_t *hmask, const uint8_t *scales,
                              uint16_t d, uint16_t dmin, const mvm_block_q8_K *a)
{
    int32_t sum = 0, msum = 0;
    uint8_t s3[16];
    if (hmask)
        mvm_k_q3_scales(scales, s3);
    for (int i = 0; i < 16; i++) {
        const int h = i / 8, j = i % 8 / 2, half = i % 2;
        const uint8_t *q = qs + 32 * h + 16 * half;
        const int8_t *aq = a->qs + 16 * i;
        int32_t s = 0;
        if (hmask) {
            const uint8_t *hm = hmask + 16 * half;
            for (int l = 0; l < 16; l++)
                s += (((q[l] >> (2 * j)) & 3) | ((hm[l] >> (4 * h + j)) & 1) << 2) * aq[l];
            sum += (s3[i] - 32) * (s - 4 * a->bsums[i]);
        } else {
            for (int l = 0; l < 16; l++)
                s += ((q[l] >> (2 * j)) & 3) * aq[l];
            sum += (scales[i] & 15) * s;
            msum += (scales[i] >> 4) * a->bsums[i];
        }
    }
    if (hmask)
        return a->d * (mvm_k_h2f(d) * (float)sum);
    return a->d * (mvm_k_h2f(d) * (float)sum - mvm_k_h2f(dmin) * (float)msum);
}

MVM_K_INLINE float kblock(enum mvm_wtype t, const uint8_t *blk, const mvm_block_q8_K *a)
{
    switch (t) {
    case MVM_W_Q2_K: {
        const mvm_block_q2_K *x = (const mvm_block_q2_K *)blk;
        return kblock_q23(x->qs, NULL, x->scales, x->d, x->dmin, a);
    }
    case MVM_W_Q3_K: {
        const mvm_block_q3_K *x = (const mvm_block_q3_K *)blk;
        return kblock_q23(x->qs, x->hmask, x->scales, x->d, 0, a);
    }
    case MVM_W_Q4_K: {
        const mvm_block_q4_K *x = (const mvm_block_q4_K *)blk;
        return kblock_q45(x->scales, x->d, x->dmin, x->qs, NULL, a);
    }
    case MVM_W_Q5_K: {
        const mvm_block_q5_K *x = (const mvm_block_q5_K *)blk;
        return kblock_q45(x->scales, x->d, x->dmin, x->qs, x->qh, a);
    }
    default: return kblock_q6((const mvm_block_q6_K *)blk, a);
    }
}

MVM_K_INLINE float mvm_k_dot_k(enum mvm_wtype t, const uint8_t *w, const mvm_block_q8_K *a,
                               size_t n)
{
    const size_t bytes = mvm_k_block_bytes(t);
    float s = 0;
    for (size_t b = 0; b < n / MVM_QK_K; b++)
        s += kblock(t, w + b * bytes, a + b);
    return s;
}

/* One super-block per output. */
MVM_K_INLINE void mvm_k_down_k(enum mvm_wtype t, const uint8_t *w, const mvm_block_q8_K *a,
                               float *out, size_t n)
{
    const size_t bytes = mvm_k_block_bytes(t);
    for (size_t j = 0; j < n; j++)
        out[j] += kblock(t, w + j * bytes, a);
}

#endif
