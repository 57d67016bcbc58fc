/*
 * Weights back to floats, 32 elements at a time, for the host and the device alike: the
 * device's F16 copies of weights for the tensor cores (kernels/cuda/gemm.cu) come from here.
 * The block layouts are kernels/blocks.h's.
 */
#ifndef MVM_KERNELS_DEQUANT_H
#define MVM_KERNELS_DEQUANT_H

#include "kernels/blocks.h"

/* The elements 32c .. 32c + 31 of a row of type t (F32/F16/BF16, a Q type's block c, or chunk
 * c % 8 of a K or grid type's super-block c / 8) as floats, each computed as ggml's
 * dequantize_row_* computes it (kernels/cpu's mvm_k_dequantize, which tests/test_cuda_kernels.cc
 * holds it to bit for bit). */
MVM_BLK_FN void mvm_k_chunk_values(enum mvm_wtype t, const uint8_t *row, size_t c, float x[32])
{
    if (t == MVM_W_F32 || t == MVM_W_F16 || t == MVM_W_BF16) {
        for (int l = 0; l < 32; l++)
            x[l] = mvm_k_elem(t, row, 32 * c + l);
        return;
    }
    const uint8_t *blk = row + (mvm_k_is_q(t) ? c : c / 8) * mvm_k_block_bytes(t);
    if (mvm_k_is_q(t)) {
        const mvm_k_qlayout L = mvm_k_qlay(t);
        const float d = mvm_k_block_scale(t, blk), m = L.m ? mvm_k_h2f(mvm_k_block_h(blk, L.m)) : 0;
        uint32_t qh = 0;
        if (L.qh)
            memcpy(&qh, blk + L.qh, sizeof qh);
        for (int l = 0; l < 32; l++) {
            const unsigned b = blk[L.qs + l % 16] >> (l < 16 ? 0 : 4) & 15;
            int q;
            if (t == MVM_W_Q8_0)
                q = (int8_t)blk[L.qs + l];
            else if (mvm_k_is_table(t))
                q = mvm_k_table(t, b);
            else
                q = (int)(b | (qh >> l & 1) << 4) - L.bias;
            x[l] = L.m ? d * (float)q + m : d * (float)q;
        }
        return;
    }
    const int k = (int)(c % 8), h = k / 4, j = k % 4;
    if (mvm_k_is_iqgrid(t)) {
        int8_t q[32];
        int sc[2];
        mvm_k_iq_chunk(t, blk, k, q, sc);
        const float d = mvm_k_h2f(mvm_k_iq_d(t, blk)) * mvm_k_iq_factor(t);
        for (int l = 0; l < 32; l++)
            x[l] = d * (float)sc[l / 16] * (float)q[l];
    } else if (t == MVM_W_Q4_K || t == MVM_W_Q5_K) {
        const int k5 = t == MVM_W_Q5_K;
        const uint8_t *scales = k5 ? ((const mvm_block_q5_K *)blk)->scales
                                   : ((const mvm_block_q4_K *)blk)->scales;
        const uint8_t *qs = (k5 ? ((const mvm_block_q5_K *)blk)->qs
                                : ((const mvm_block_q4_K *)blk)->qs) + 32 * (k / 2);
        uint8_t sc, m;
        mvm_k_scale_min(scales, k, &sc, &m);
        const float d1 = mvm_k_h2f(mvm_k_block_h(blk, 0)) * sc;
        const float m1 = mvm_k_h2f(mvm_k_block_h(blk, 2)) * m;
        for (int l = 0; l < 32; l++) {
            int q = qs[l] >> (4 * (k % 2)) & 15;
            if (k5)
                q += (((const mvm_block_q5_K *)blk)->qh[l] >> k & 1) << 4;
            x[l] = d1 * (float)q - m1;
        }
    } else if (t == MVM_W_Q6_K) {
        const mvm_block_q6_K *b = (const mvm_block_q6_K *)blk;
        const float d = mvm_k_h2f(b->d);
        for (int l = 0; l < 32; l++) {
            const int ql = b->ql[64 * h + 32 * (j & 1) + l] >> (4 * (j >> 1)) & 15;
            const int q = (ql | (b->qh[32 * h + l] >> (2 * j) & 3) << 4) - 32;
            x[l] = d * b->scales[2 * k + l / 16] * (float)q;
        }
    } else if (t == MVM_W_IQ4_XS) {
        const mvm_block_iq4_xs *b = (const mvm_block_iq4_xs *)blk;
        const float dl = mvm_k_h2f(b->d) * (float)(mvm_k_iq4xs_scale(b, k) - 32);
        for (int l = 0; l < 32; l++)
            x[l] = dl * (float)mvm_k_table(MVM_W_IQ4_NL, b->qs[16 * k + l % 16] >> (l < 16 ? 0 : 4)
                                                            & 15);
    } else if (t == MVM_W_Q2_K) {
        const mvm_block_q2_K *b = (const mvm_block_q2_K *)blk;
        const float d = mvm_k_h2f(b->d), dmin = mvm_k_h2f(b->dmin);
        for (int l = 0; l < 32; l++) {
            const uint8_t sc = b->scales[2 * k + l / 16];
            const int q = b->qs[32 * h + l] >> (2 * j) & 3;
            x[l] = d * (float)(sc & 15) * (float)q - dmin * (float)(sc >> 4);
        }
    } else { /* Q3_K */
        const mvm_block_q3_K *b = (const mvm_block_q3_K *)blk;
        const float d = mvm_k_h2f(b->d);
        uint8_t s[16];
        mvm_k_q3_scales(b->scales, s);
        for (int l = 0; l < 32; l++) {
            const int q = b->qs[32 * h + l] >> (2 * j) & 3;
            const int high = b->hmask[l] >> k & 1;
            x[l] = d * (float)(s[2 * k + l / 16] - 32) * (float)(q - (high ? 0 : 4));
        }
    }
}

#endif
