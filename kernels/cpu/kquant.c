/*
 * The K-quants' and IQ4_XS's conversions: dequantization exactly as ggml's
 * dequantize_row_q{4,5,6}_K and dequantize_row_iq4_xs, and a quantizer for mkmodel (the Q8_K
 * activations' is kernels/blocks.h's, shared with the device).
 *
 * The quantizer is simpler than llama.cpp's (make_qkx2_quants / make_qx_quants search the
 * scale that minimises a weighted error; this one takes the range): per sub-block the scale
 * maps the range onto the quants, the super-block's d (and dmin) maps the largest sub-block
 * scale (and min) onto the 6- or 8-bit scale codes, and each quant is rounded against the
 * scale as stored. Its files hold valid K-quant data that llama.cpp reads identically; only
 * the quantization error is somewhat larger than llama-quantize's, which does not matter for
 * the random weights mkmodel writes.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/dispatch.h"

/* ---- Q4_K / Q5_K ---------------------------------------------------------------------- */

/* Stores the 6-bit scale and min codes of the 8 sub-blocks (mvm_k_scale_min's packing). */
static void pack_scale_min(const uint8_t sc[8], const uint8_t m[8], uint8_t out[12])
{
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        out[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        out[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

/* One Q4_K (bits 4) or Q5_K (bits 5) super-block: x = d·sc·q - dmin·m, q in [0, 2^bits). The
 * sub-block's min is clamped to at most 0, as ggml does, so that dmin·m >= 0. Fills d, dmin,
 * scales and q[256] (the quants in element order); the caller packs q. */
static void quantize_q45(const float *x, int bits, uint16_t *d_out, uint16_t *dmin_out,
                         uint8_t scales[12], uint8_t q[MVM_QK_K])
{
    const int qmax = (1 << bits) - 1;
    float scale[8], min[8], max_scale, max_min;
    mvm_k_sub_ranges(x, 8, 32, qmax, scale, min, &max_scale, &max_min);
    const uint16_t dh = mvm_fp32_to_fp16(max_scale / 63), mh = mvm_fp32_to_fp16(max_min / 63);
    const float d = mvm_k_h2f(dh), dmin = mvm_k_h2f(mh);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0 ? mvm_k_clampi(mvm_k_nearest(scale[j] / d), 0, 63) : 0);
        m[j] = (uint8_t)(dmin > 0 ? mvm_k_clampi(mvm_k_nearest(min[j] / dmin), 0, 63) : 0);
        const float step = d * sc[j], off = dmin * m[j];
        for (int l = 0; l < 32; l++)
            q[32 * j + l] = (uint8_t)mvm_k_round_to(x[32 * j + l] + off, step, 0, qmax);
    }
    *d_out = dh;
    *dmin_out = mh;
    pack_scale_min(sc, m, scales);
}

static void quantize_q4_K(const float *x, mvm_block_q4_K *y)
{
    uint8_t q[MVM_QK_K];
    quantize_q45(x, 4, &y->d, &y->dmin, y->scales, q);
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < 32; l++)
            y->qs[32 * k + l] = (uint8_t)(q[64 * k + l] | q[64 * k + 32 + l] << 4);
}

static void quantize_q5_K(const float *x, mvm_block_q5_K *y)
{
    uint8_t q[MVM_QK_K];
    quantize_q45(x, 5, &y->d, &y->dmin, y->scales, q);
    memset(y->qh, 0, sizeof y->qh);
    for (int k = 0; k < 4; k++) {
        for (int l = 0; l < 32; l++) {
            const uint8_t lo = q[64 * k + l], hi = q[64 * k + 32 + l];
            y->qs[32 * k + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            y->qh[l] |= (uint8_t)((lo >> 4) << (2 * k) | (hi >> 4) << (2 * k + 1));
        }
    }
}

/* ---- Q6_K ----------------------------------------------------------------------------- */

/* x = d·sc·(q - 32), q in [0, 64), sc an int8 per 16 elements. */
static void quantize_q6_K(const float *x, mvm_block_q6_K *y)
{
    float scale[16], max_scale = 0;
    for (int j = 0; j < 16; j++) {
        float amax = 0;
        for (int l = 0; l < 16; l++)
            amax = fmaxf(amax, fabsf(x[16 * j + l]));
        scale[j] = amax / 31;
        max_scale = fmaxf(max_scale, scale[j]);
    }
    y->d = mvm_fp32_to_fp16(max_scale / 127);
    const float d = mvm_k_h2f(y->d);
    uint8_t q[MVM_QK_K];
    for (int j = 0; j < 16; j++) {
        y->scales[j] = (int8_t)(d > 0 ? mvm_k_clampi(mvm_k_nearest(scale[j] / d), 0, 127) : 0);
        const float step = d * y->scales[j];
        for (int l = 0; l < 16; l++)
            q[16 * j + l] = (uint8_t)(mvm_k_round_to(x[16 * j + l], step, -32, 31) + 32);
    }
    memset(y->ql, 0, sizeof y->ql);
    memset(y->qh, 0, sizeof y->qh);
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < 4; k++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t v = q[128 * h + 32 * k + l];
                y->ql[64 * h + 32 * (k & 1) + l] |= (uint8_t)((v & 15) << (4 * (k >> 1)));
                y->qh[32 * h + l] |= (uint8_t)((v >> 4) << (2 * k));
            }
        }
    }
}

/* ---- dequantization ------------------------------------------------------------------- */

static void dequantize_q45(const uint8_t *scales, uint16_t dh, uint16_t mh, const uint8_t *qs,
                           const uint8_t *qh, float *y)
{
    const float d = mvm_k_h2f(dh), dmin = mvm_k_h2f(mh);
    for (int k = 0; k < 4; k++) {
        for (int half = 0; half < 2; half++) {
            uint8_t sc, m;
            mvm_k_scale_min(scales, 2 * k + half, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            for (int l = 0; l < 32; l++) {
                int q = (qs[32 * k + l] >> (4 * half)) & 15;
                if (qh)
                    q += (qh[l] >> (2 * k + half) & 1) << 4;
                *y++ = d1 * (float)q - m1;
            }
        }
    }
}

static void dequantize_q6(const mvm_block_q6_K *x, float *y)
{
    const float d = mvm_k_h2f(x->d);
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                const int ql = (x->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15;
                const int q = (ql | ((x->qh[32 * h + l] >> (2 * k)) & 3) << 4) - 32;
                const int e = 128 * h + 32 * k + l;
                y[e] = d * x->scales[e / 16] * (float)q;
            }
}

/* ---- IQ4_XS --------------------------------------------------------------------------- */

/* One IQ4_XS super-block, with IQ4_NL's rule (convert.c) in place of ggml's search
 * (quantize_row_iq4_nl_impl tries 15 scales per sub-block): each sub-block's ideal scale maps
 * its value of largest magnitude onto the table's -127; d maps the ideal scale of largest
 * magnitude onto the code -32, as ggml's d = -max_scale / 32 does; each sub-block's code is
 * its scale rounded against d, and each element takes the table entry nearest x / (d·code). */
static void quantize_iq4_xs(const float *x, mvm_block_iq4_xs *y)
{
    float scale[8], max_scale = 0;
    for (int i = 0; i < 8; i++) {
        scale[i] = mvm_k_signed_max(x + 32 * i, 32) / -127;
        if (fabsf(scale[i]) > fabsf(max_scale))
            max_scale = scale[i];
    }
    y->d = mvm_fp32_to_fp16(max_scale / -32);
    y->scales_h = 0;
    memset(y->scales_l, 0, sizeof y->scales_l);
    const float d = mvm_k_h2f(y->d);
    for (int i = 0; i < 8; i++) {
        const int code = mvm_k_round_to(scale[i], d, -32, 31);
        y->scales_l[i / 2] |= (uint8_t)(((code + 32) & 15) << (4 * (i % 2)));
        y->scales_h |= (uint16_t)(((code + 32) >> 4) << (2 * i));
        const float dl = d * (float)code, id = dl != 0 ? 1.0f / dl : 0.0f;
        for (int l = 0; l < 16; l++)
            y->qs[16 * i + l] = (uint8_t)(mvm_k_iq4_nearest(x[32 * i + l] * id) |
                                          mvm_k_iq4_nearest(x[32 * i + 16 + l] * id) << 4);
    }
}

static void dequantize_iq4_xs(const mvm_block_iq4_xs *x, float *y)
{
    const float d = mvm_k_h2f(x->d);
    for (int i = 0; i < 8; i++) {
        const float dl = d * (float)(mvm_k_iq4xs_scale(x, i) - 32);
        for (int l = 0; l < 16; l++) {
            y[32 * i + l] = dl * (float)mvm_k_table(MVM_W_IQ4_NL, x->qs[16 * i + l] & 15);
            y[32 * i + 16 + l] = dl * (float)mvm_k_table(MVM_W_IQ4_NL, x->qs[16 * i + l] >> 4);
        }
    }
}

void mvm_k_quantize_k(enum mvm_wtype t, const float *src, void *dst, size_t n)
{
    const size_t bytes = mvm_k_block_bytes(t);
    for (size_t b = 0; b < n / MVM_QK_K; b++) {
        void *blk = (uint8_t *)dst + b * bytes;
        const float *x = src + b * MVM_QK_K;
        if (t == MVM_W_Q2_K || t == MVM_W_Q3_K)
            mvm_k_quantize_q23(t, x, blk);
        else if (t == MVM_W_Q4_K)
            quantize_q4_K(x, blk);
        else if (t == MVM_W_Q5_K)
            quantize_q5_K(x, blk);
        else if (t == MVM_W_IQ4_XS)
            quantize_iq4_xs(x, blk);
        else
            quantize_q6_K(x, blk);
    }
}

void mvm_k_dequantize_k(enum mvm_wtype t, const void *src, float *dst, size_t n)
{
    const size_t bytes = mvm_k_block_bytes(t);
    for (size_t b = 0; b < n / MVM_QK_K; b++) {
        const void *blk = (const uint8_t *)src + b * bytes;
        float *y = dst + b * MVM_QK_K;
        if (t == MVM_W_Q2_K || t == MVM_W_Q3_K) {
            mvm_k_dequantize_q23(t, blk, y);
        } else if (t == MVM_W_Q4_K) {
            const mvm_block_q4_K *x = blk;
            dequantize_q45(x->scales, x->d, x->dmin, x->qs, NULL, y);
        } else if (t == MVM_W_Q5_K) {
            const mvm_block_q5_K *x = blk;
            dequantize_q45(x->scales, x->d, x->dmin, x->qs, x->qh, y);
        } else if (t == MVM_W_IQ4_XS) {
            dequantize_iq4_xs(blk, y);
        } else {
            dequantize_q6(blk, y);
        }
    }
}
