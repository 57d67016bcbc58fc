/*
 * Element conversions, row sizes, activation preparation and (de)quantization, all with
 * llama.cpp's reference rounding so that a model written by mkmodel or converted from a GGUF
 * holds the bits llama.cpp would have written. Scalar on purpose: these run once per weight
 * at load or once per activation vector, never in a hot loop.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/dispatch.h"

float mvm_fp16_to_fp32(uint16_t h)
{
    return mvm_k_h2f(h);
}

/* blocks.h has it (mvm_k_f2h), as the device kernels use it too. */
uint16_t mvm_fp32_to_fp16(float f)
{
    return mvm_k_f2h(f);
}

float mvm_bf16_to_fp32(uint16_t h)
{
    return mvm_k_bf2f(h);
}

/* ggml_compute_fp32_to_bf16: round to nearest even on the upper 16 bits; nan is forced
 * quiet (bit 6 of the result) so that the rounding cannot turn it into inf. */
uint16_t mvm_fp32_to_bf16(float f)
{
    const uint32_t u = mvm_k_f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

const char *mvm_k_wtype_name(enum mvm_wtype t)
{
    static const char *const names[MVM_W_COUNT] = {
        [MVM_W_F32] = "f32",       [MVM_W_F16] = "f16",   [MVM_W_BF16] = "bf16",
        [MVM_W_Q8_0] = "q8_0",     [MVM_W_Q4_0] = "q4_0", [MVM_W_Q4_1] = "q4_1",
        [MVM_W_Q5_0] = "q5_0",     [MVM_W_Q5_1] = "q5_1", [MVM_W_IQ4_NL] = "iq4_nl",
        [MVM_W_Q2_K] = "q2_K",     [MVM_W_Q3_K] = "q3_K", [MVM_W_Q4_K] = "q4_K",
        [MVM_W_Q5_K] = "q5_K",     [MVM_W_Q6_K] = "q6_K", [MVM_W_IQ4_XS] = "iq4_xs",
        [MVM_W_MXFP4] = "mxfp4",   [MVM_W_IQ2_XXS] = "iq2_xxs", [MVM_W_IQ2_XS] = "iq2_xs",
        [MVM_W_IQ2_S] = "iq2_s",   [MVM_W_IQ3_XXS] = "iq3_xxs", [MVM_W_IQ3_S] = "iq3_s",
        [MVM_W_IQ1_S] = "iq1_s",   [MVM_W_IQ1_M] = "iq1_m"};
    return (unsigned)t < MVM_W_COUNT ? names[t] : "unknown";
}

void mvm_k_prepare_act(enum mvm_wtype t, const float *x, void *act, size_t n)
{
    if ((mvm_k_is_k(t) || mvm_k_is_q(t)) && mvm_k_kernels->quantize_act) {
        mvm_k_kernels->quantize_act(mvm_k_is_k(t), x, act, n);
        return;
    }
    if (mvm_k_is_k(t)) {
        for (size_t b = 0; b < n / MVM_QK_K; b++)
            mvm_k_q8_K_block(x + b * MVM_QK_K, (mvm_block_q8_K *)act + b);
        return;
    }
    mvm_k_quantize(mvm_k_is_q(t) ? MVM_W_Q8_0 : MVM_W_F32, x, act, n);
}

/* quantize_row_q4_0_ref, _q4_1_ref, _q5_0_ref, _q5_1_ref on one block of type t.
 * Without a min (Q4_0, Q5_0): d = -(the value of largest magnitude, the first on ties) /
 * bias, so that value maps to quant 0 exactly and the rest of the range covers the other
 * side; q = min(max_q, trunc(x / d + bias + 0.5)). With one (Q4_1, Q5_1): m = the minimum,
 * d = (max - min) / max_q, q = min(max_q, trunc((x - m) / d + 0.5)). */
static void quantize_q_block(enum mvm_wtype t, const float *x, uint8_t *blk)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    const int max_q = L.qh ? 31 : 15;
    float d, lo = 0.0f;
    if (L.m) {
        float max = -FLT_MAX;
        lo = FLT_MAX;
        for (int j = 0; j < MVM_QBLOCK; j++) {
            lo = x[j] < lo ? x[j] : lo;
            max = x[j] > max ? x[j] : max;
        }
        d = (max - lo) / (float)max_q;
        const uint16_t m = mvm_fp32_to_fp16(lo);
        memcpy(blk + L.m, &m, sizeof m);
    } else {
        d = mvm_k_signed_max(x, MVM_QBLOCK) / -(float)L.bias;
    }
    const float id = d ? 1.0f / d : 0.0f;
    const uint16_t dh = mvm_fp32_to_fp16(d);
    memcpy(blk, &dh, sizeof dh);
    uint32_t qh = 0;
    for (int j = 0; j < MVM_QBLOCK; j++) {
        /* Separate statements, as in ggml, so that no compiler fuses the product and the
         * sum into an fma (a different rounding). */
        const float v = (x[j] - lo) * id;
        const int8_t r = (int8_t)(v + ((float)L.bias + 0.5f));
        const uint8_t q = (uint8_t)(r < max_q ? r : max_q);
        if (j < MVM_QBLOCK / 2)
            blk[L.qs + j] = q & 0x0F;
        else
            blk[L.qs + j - MVM_QBLOCK / 2] |= (uint8_t)(q << 4);
        qh |= (uint32_t)(q >> 4) << j;
    }
    if (L.qh)
        memcpy(blk + L.qh, &qh, sizeof qh);
}

/* IQ4_NL on one block, more simply than ggml's quantize_iq4_nl (which searches the scale
 * minimising the error): d maps the value of largest magnitude onto -127, the table's end,
 * and each element takes the table entry nearest x / d (the lower one on ties). */
static void quantize_iq4_nl_block(const float *x, uint8_t *blk)
{
    const uint16_t dh = mvm_fp32_to_fp16(mvm_k_signed_max(x, MVM_QBLOCK) / -127);
    memcpy(blk, &dh, sizeof dh);
    const float d = mvm_k_h2f(dh), id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < MVM_QBLOCK; j++) {
        const uint8_t best = mvm_k_iq4_nearest(x[j] * id);
        if (j < MVM_QBLOCK / 2)
            blk[2 + j] = best;
        else
            blk[2 + j - MVM_QBLOCK / 2] |= (uint8_t)(best << 4);
    }
}

/* quantize_row_mxfp4_ref on one block: the scale is the power of two 2^(e - 128) with e =
 * floor(log2(amax)) - 2 + 127, which puts the largest magnitude in [4, 8) of it, below the
 * table's 12 (its E2M1 6, doubled), and each element takes the entry whose multiple of d is
 * nearest x (the first in table order on ties). */
static void quantize_mxfp4_block(const float *x, uint8_t *blk)
{
    float amax = 0.0f;
    for (int j = 0; j < MVM_QBLOCK; j++)
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    const uint8_t e = amax > 0.0f ? (uint8_t)(floorf(log2f(amax)) - 2 + 127) : 0;
    const float d = mvm_k_e8m0_half(e);
    blk[0] = e;
    for (int j = 0; j < MVM_QBLOCK; j++) {
        int best = 0; /* best_index_mxfp4 */
        float best_err = fabsf(x[j]);
        for (int k = 1; k < 16; k++) {
            const float err = fabsf((float)mvm_k_table(MVM_W_MXFP4, k) * d - x[j]);
            if (err < best_err)
                best = k, best_err = err;
        }
        if (j < MVM_QBLOCK / 2)
            blk[1 + j] = (uint8_t)best;
        else
            blk[1 + j - MVM_QBLOCK / 2] |= (uint8_t)(best << 4);
    }
}

/* The types of one scale per 32 (or no blocks at all). */
static void quantize_blocks(enum mvm_wtype t, const float *src, void *dst, size_t n)
{
    switch (t) {
    case MVM_W_F32: memcpy(dst, src, n * sizeof *src); break;
    case MVM_W_F16:
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = mvm_fp32_to_fp16(src[i]);
        break;
    case MVM_W_BF16:
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = mvm_fp32_to_bf16(src[i]);
        break;
    case MVM_W_Q8_0:
        for (size_t b = 0; b < n / MVM_QBLOCK; b++)
            mvm_k_q8_0_block(src + b * MVM_QBLOCK, (mvm_block_q8_0 *)dst + b);
        break;
    case MVM_W_Q4_0:
    case MVM_W_Q4_1:
    case MVM_W_Q5_0:
    case MVM_W_Q5_1:
        for (size_t b = 0; b < n / MVM_QBLOCK; b++)
            quantize_q_block(t, src + b * MVM_QBLOCK, (uint8_t *)dst + b * mvm_k_block_bytes(t));
        break;
    case MVM_W_IQ4_NL:
        for (size_t b = 0; b < n / MVM_QBLOCK; b++)
            quantize_iq4_nl_block(src + b * MVM_QBLOCK, (uint8_t *)dst + b * 18);
        break;
    case MVM_W_MXFP4:
        for (size_t b = 0; b < n / MVM_QBLOCK; b++)
            quantize_mxfp4_block(src + b * MVM_QBLOCK, (uint8_t *)dst + b * 17);
        break;
    default: break;
    }
}

void mvm_k_quantize(enum mvm_wtype t, const float *src, void *dst, size_t n)
{
    /* the super-block types (K-quants, IQ4_XS, the grid types) have their own files */
    if (mvm_k_is_iqgrid(t))
        mvm_k_quantize_iq(t, src, dst, n);
    else if (mvm_k_is_k(t))
        mvm_k_quantize_k(t, src, dst, n);
    else
        quantize_blocks(t, src, dst, n);
}

/* The same types back to floats. */
static void dequantize_blocks(enum mvm_wtype t, const void *src, float *dst, size_t n)
{
    switch (t) {
    case MVM_W_F32:
    case MVM_W_F16:
    case MVM_W_BF16:
        for (size_t i = 0; i < n; i++)
            dst[i] = mvm_k_elem(t, src, i);
        break;
    case MVM_W_Q8_0:
    case MVM_W_Q4_0:
    case MVM_W_Q4_1:
    case MVM_W_Q5_0:
    case MVM_W_Q5_1:
    case MVM_W_IQ4_NL:
    case MVM_W_MXFP4:
        for (size_t b = 0; b < n / MVM_QBLOCK; b++) {
            const uint8_t *blk = (const uint8_t *)src + b * mvm_k_block_bytes(t);
            const mvm_k_qlayout L = mvm_k_qlay(t);
            const float d = mvm_k_block_scale(t, blk);
            int8_t q[MVM_QBLOCK];
            mvm_k_qunpack(t, blk, q);
            for (int j = 0; j < MVM_QBLOCK; j++)
                dst[b * MVM_QBLOCK + j] =
                    L.m ? d * q[j] + mvm_k_h2f(mvm_k_block_h(blk, L.m)) : d * q[j];
        }
        break;
    default: break;
    }
}

void mvm_k_dequantize(enum mvm_wtype t, const void *src, float *dst, size_t n)
{
    if (mvm_k_is_iqgrid(t))
        mvm_k_dequantize_iq(t, src, dst, n);
    else if (mvm_k_is_k(t))
        mvm_k_dequantize_k(t, src, dst, n);
    else
        dequantize_blocks(t, src, dst, n);
}
