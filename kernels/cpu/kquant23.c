/*
 * Q2_K and Q3_K (dispatch.h has their layouts): dequantization exactly as ggml's
 * dequantize_row_q2_K / _q3_K, and a quantizer for mkmodel that, like kquant.c's for the
 * other K-quants, takes each sub-block's range instead of llama.cpp's error-minimising
 * search (make_qkx2_quants, make_q3_quants): valid files that llama.cpp reads identically,
 * with a larger quantization error than llama-quantize's.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/dispatch.h"


/* Element e of a super-block as (h, j, l): e = 128h + 32j + l. Stores the 2 low bits of
 * q[e] in qs (bits 2j of qs[32h + l]) for every e. */
static void pack_low2(const uint8_t q[MVM_QK_K], uint8_t qs[MVM_QK_K / 4])
{
    memset(qs, 0, MVM_QK_K / 4);
    for (int e = 0; e < MVM_QK_K; e++)
        qs[32 * (e / 128) + e % 32] |= (uint8_t)((q[e] & 3) << (2 * (e % 128 / 32)));
}

/* x = d·sc·q - dmin·m per sub-block of 16, q in [0, 3], sc and m 4-bit codes. */
static void quantize_q2_K(const float *x, mvm_block_q2_K *y)
{
    float scale[16], min[16], max_scale, max_min;
    mvm_k_sub_ranges(x, 16, 16, 3, scale, min, &max_scale, &max_min);
    y->d = mvm_fp32_to_fp16(max_scale / 15);
    y->dmin = mvm_fp32_to_fp16(max_min / 15);
    const float d = mvm_k_h2f(y->d), dmin = mvm_k_h2f(y->dmin);
    uint8_t q[MVM_QK_K];
    for (int i = 0; i < 16; i++) {
        const int sc = d > 0 ? mvm_k_clampi(mvm_k_nearest(scale[i] / d), 0, 15) : 0;
        const int m = dmin > 0 ? mvm_k_clampi(mvm_k_nearest(min[i] / dmin), 0, 15) : 0;
        y->scales[i] = (uint8_t)(sc | m << 4);
        const float step = d * (float)sc, off = dmin * (float)m;
        for (int l = 0; l < 16; l++)
            q[16 * i + l] = (uint8_t)mvm_k_round_to(x[16 * i + l] + off, step, 0, 3);
    }
    pack_low2(q, y->qs);
}

/* x = d·s·q per sub-block of 16, q in [-4, 3], s a 6-bit signed code (stored + 32): the
 * value of largest magnitude maps to -4. */
static void quantize_q3_K(const float *x, mvm_block_q3_K *y)
{
    float scale[16], max_abs = 0;
    for (int i = 0; i < 16; i++) {
        const float max = mvm_k_signed_max(x + 16 * i, 16);
        scale[i] = max / -4;
        max_abs = fmaxf(max_abs, fabsf(max) / 4);
    }
    y->d = mvm_fp32_to_fp16(max_abs / 31);
    const float d = mvm_k_h2f(y->d);
    uint8_t q[MVM_QK_K];
    memset(y->scales, 0, sizeof y->scales);
    memset(y->hmask, 0, sizeof y->hmask);
    for (int i = 0; i < 16; i++) {
        const int s = d > 0 ? mvm_k_clampi(mvm_k_nearest(scale[i] / d), -32, 31) : 0;
        const int u = s + 32;
        y->scales[i % 8] |= (uint8_t)((u & 15) << (i < 8 ? 0 : 4));
        y->scales[8 + i % 4] |= (uint8_t)((u >> 4) << (2 * (i / 4)));
        const float step = d * (float)s;
        for (int l = 0; l < 16; l++) {
            const int e = 16 * i + l;
            q[e] = (uint8_t)(mvm_k_round_to(x[e], step, -4, 3) + 4);
            y->hmask[e % 32] |= (uint8_t)((q[e] >> 2) << (4 * (e / 128) + e % 128 / 32));
        }
    }
    pack_low2(q, y->qs);
}

void mvm_k_quantize_q23(enum mvm_wtype t, const float *x, void *blk)
{
    if (t == MVM_W_Q2_K)
        quantize_q2_K(x, blk);
    else
        quantize_q3_K(x, blk);
}

void mvm_k_dequantize_q23(enum mvm_wtype t, const void *blk, float *y)
{
    if (t == MVM_W_Q2_K) {
        const mvm_block_q2_K *x = blk;
        const float d = mvm_k_h2f(x->d), dmin = mvm_k_h2f(x->dmin);
        for (int e = 0; e < MVM_QK_K; e++) {
            const uint8_t sc = x->scales[e / 16];
            const int q = (x->qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
            y[e] = d * (float)(sc & 15) * (float)q - dmin * (float)(sc >> 4);
        }
        return;
    }
    const mvm_block_q3_K *x = blk;
    const float d = mvm_k_h2f(x->d);
    uint8_t s[16];
    mvm_k_q3_scales(x->scales, s);
    for (int e = 0; e < MVM_QK_K; e++) {
        const int j = e % 128 / 32;
        const int q = (x->qs[32 * (e / 128) + e % 32] >> (2 * j)) & 3;
        const int high = (x->hmask[e % 32] >> (4 * (e / 128) + j)) & 1;
        y[e] = d * (float)(s[e / 16] - 32) * (float)(q - (high ? 0 : 4));
    }
}
