/*
 * What the CPU kernel files share and the contract (kernels.h) does not show, besides the
 * block layouts and conversions both backends share (kernels/blocks.h): the quantizers'
 * helpers, and the per-SIMD-level table of hot kernels that simd.c selects once and
 * matvec.c / expert.c call through.
 */
#ifndef MVM_KERNELS_CPU_DISPATCH_H
#define MVM_KERNELS_CPU_DISPATCH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/kernels.h"

/* The 32 quants of a Q block of type t as integers, bias subtracted: x_j = d * q[j] (+ m). */
static inline void mvm_k_qunpack(enum mvm_wtype t, const uint8_t *blk, int8_t q[MVM_QBLOCK])
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    if (t == MVM_W_Q8_0) {
        memcpy(q, blk + L.qs, MVM_QBLOCK);
        return;
    }
    if (t == MVM_W_IQ4_NL) {
        for (int j = 0; j < MVM_QBLOCK / 2; j++) {
            q[j] = (int8_t)mvm_k_iq4nl(blk[L.qs + j] & 0x0F);
            q[j + 16] = (int8_t)mvm_k_iq4nl(blk[L.qs + j] >> 4);
        }
        return;
    }
    uint32_t qh = 0;
    if (L.qh)
        memcpy(&qh, blk + L.qh, sizeof qh);
    for (int j = 0; j < MVM_QBLOCK / 2; j++) {
        const uint8_t b = blk[L.qs + j];
        q[j] = (int8_t)(((b & 0x0F) | (qh >> j & 1) << 4) - L.bias);
        q[j + 16] = (int8_t)(((b >> 4) | (qh >> (j + 16) & 1) << 4) - L.bias);
    }
}

/* ---- what the K quantizers of kquant.c and kquant23.c share ---------------------------- */

/* ggml's nearest_int: round half to even (the default rounding mode), for |x| < 2^22. */
static inline int mvm_k_nearest(float x)
{
    return (int)lrintf(x);
}

static inline int mvm_k_clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* The quant of v in steps of `step`, clamped to [lo, hi]; 0 when the step is 0. */
static inline int mvm_k_round_to(float v, float step, int lo, int hi)
{
    return step != 0 ? mvm_k_clampi(mvm_k_nearest(v / step), lo, hi) : 0;
}

/* The ranges of n_sub sub-blocks of len elements of x, for the quantizers with a min
 * (x = d·sc·q - dmin·m): scale[j] maps [min(0, lowest), highest] onto [0, qmax], min[j] is
 * minus the lower end (>= 0, as ggml clamps it); *max_scale, *max_min their maxima. */
static inline void mvm_k_sub_ranges(const float *x, int n_sub, int len, int qmax, float *scale,
                                    float *min, float *max_scale, float *max_min)
{
    *max_scale = *max_min = 0;
    for (int j = 0; j < n_sub; j++) {
        float lo = 0, hi = x[len * j];
        for (int l = 0; l < len; l++) {
            lo = fminf(lo, x[len * j + l]);
            hi = fmaxf(hi, x[len * j + l]);
        }
        scale[j] = (hi - lo) / (float)qmax;
        min[j] = -lo;
        *max_scale = fmaxf(*max_scale, scale[j]);
        *max_min = fmaxf(*max_min, min[j]);
    }
}

/* Q2_K / Q3_K on one super-block: mkmodel's quantizer and ggml's dequantization
 * (kquant23.c). */
void mvm_k_quantize_q23(enum mvm_wtype t, const float *x, void *blk);
void mvm_k_dequantize_q23(enum mvm_wtype t, const void *blk, float *y);
/* The K-quants' quantize / dequantize of n elements (kquant.c; n % 256 == 0). */
void mvm_k_quantize_k(enum mvm_wtype t, const float *src, void *dst, size_t n);
void mvm_k_dequantize_k(enum mvm_wtype t, const void *src, float *dst, size_t n);

/* ---- the hot kernels of one SIMD level -------------------------------------------------- */

/* dot(w, act) over n elements: w one row of type t, act in t's activation format
 * (mvm_k_act_bytes: F32 for float types, Q8_0 blocks for Q types, Q8_K for K types; n a
 * multiple of the block). */
typedef float (*mvm_k_dot_fn)(const void *w, const void *act, size_t n);
/* The expert FFN's hot loop, out[j] += dot(down block j, a) for j < n_embd: down holds
 * n_embd blocks of type t (mvm_k_block_bytes, one per output), a is the group's
 * intermediate activations (one mvm_block_q8_0 for Q types, one mvm_block_q8_K for K types,
 * 32 floats for float types). n_embd % 32 == 0 for Q and K types. */
typedef void (*mvm_k_down_fn)(const void *down, const void *a, float *out, size_t n_embd);

struct mvm_k_level {
    mvm_k_dot_fn dot[MVM_W_COUNT];
    mvm_k_down_fn down[MVM_W_COUNT];
};

/* Defines the table `name` of a level from its four generic kernels, which take the weight
 * type first and are inlined into one entry point per type (attr: the level's target):
 *   float dot_float(t, const uint8_t *w, const float *act, size_t n)
 *   float dot_q(t, const uint8_t *w, const mvm_block_q8_0 *act, size_t n)
 *   void down_float(t, const uint8_t *w, const float *a, float *out, size_t n)
 *   void down_q(t, const uint8_t *w, const mvm_block_q8_0 *a, float *out, size_t n)
 *   float dot_k(t, const uint8_t *w, const mvm_block_q8_K *act, size_t n)
 *   void down_k(t, const uint8_t *w, const mvm_block_q8_K *a, float *out, size_t n)
 * (the last two: kernels/blocks.h's for the portable level, avx2.h's for the others). */
#define MVM_K_LEVEL_TYPE(attr, dot, down, type, sfx)                                               \
    attr static float dot_##sfx(const void *w, const void *act, size_t n)                          \
    {                                                                                              \
        return dot(type, w, act, n);                                                               \
    }                                                                                              \
    attr static void down_##sfx(const void *w, const void *a, float *out, size_t n)                \
    {                                                                                              \
        down(type, w, a, out, n);                                                                  \
    }
#define MVM_K_LEVEL(name, attr, dot_float, dot_q, down_float, down_q, dot_k, down_k)              \
    MVM_K_LEVEL_TYPE(attr, dot_float, down_float, MVM_W_F32, f32)                                  \
    MVM_K_LEVEL_TYPE(attr, dot_float, down_float, MVM_W_F16, f16)                                  \
    MVM_K_LEVEL_TYPE(attr, dot_float, down_float, MVM_W_BF16, bf16)                                \
    MVM_K_LEVEL_TYPE(attr, dot_q, down_q, MVM_W_Q8_0, q8_0)                                        \
    MVM_K_LEVEL_TYPE(attr, dot_q, down_q, MVM_W_Q4_0, q4_0)                                        \
    MVM_K_LEVEL_TYPE(attr, dot_q, down_q, MVM_W_Q4_1, q4_1)                                        \
    MVM_K_LEVEL_TYPE(attr, dot_q, down_q, MVM_W_Q5_0, q5_0)                                        \
    MVM_K_LEVEL_TYPE(attr, dot_q, down_q, MVM_W_Q5_1, q5_1)                                        \
    MVM_K_LEVEL_TYPE(attr, dot_q, down_q, MVM_W_IQ4_NL, iq4_nl)                                    \
    MVM_K_LEVEL_TYPE(attr, dot_k, down_k, MVM_W_Q2_K, q2_K)                                        \
    MVM_K_LEVEL_TYPE(attr, dot_k, down_k, MVM_W_Q3_K, q3_K)                                        \
    MVM_K_LEVEL_TYPE(attr, dot_k, down_k, MVM_W_Q4_K, q4_K)                                        \
    MVM_K_LEVEL_TYPE(attr, dot_k, down_k, MVM_W_Q5_K, q5_K)                                        \
    MVM_K_LEVEL_TYPE(attr, dot_k, down_k, MVM_W_Q6_K, q6_K)                                        \
    const struct mvm_k_level name = {                                                              \
        .dot = {[MVM_W_F32] = dot_f32,                                                             \
                [MVM_W_F16] = dot_f16,                                                             \
                [MVM_W_BF16] = dot_bf16,                                                           \
                [MVM_W_Q8_0] = dot_q8_0,                                                           \
                [MVM_W_Q4_0] = dot_q4_0,                                                           \
                [MVM_W_Q4_1] = dot_q4_1,                                                           \
                [MVM_W_Q5_0] = dot_q5_0,                                                           \
                [MVM_W_Q5_1] = dot_q5_1,                                                           \
                [MVM_W_IQ4_NL] = dot_iq4_nl,                                                       \
                [MVM_W_Q2_K] = dot_q2_K,                                                           \
                [MVM_W_Q3_K] = dot_q3_K,                                                           \
                [MVM_W_Q4_K] = dot_q4_K,                                                           \
                [MVM_W_Q5_K] = dot_q5_K,                                                           \
                [MVM_W_Q6_K] = dot_q6_K},                                                          \
        .down = {[MVM_W_F32] = down_f32,                                                           \
                 [MVM_W_F16] = down_f16,                                                           \
                 [MVM_W_BF16] = down_bf16,                                                         \
                 [MVM_W_Q8_0] = down_q8_0,                                                         \
                 [MVM_W_Q4_0] = down_q4_0,                                                         \
                 [MVM_W_Q4_1] = down_q4_1,                                                         \
                 [MVM_W_Q5_0] = down_q5_0,                                                         \
                 [MVM_W_Q5_1] = down_q5_1,                                                         \
                 [MVM_W_IQ4_NL] = down_iq4_nl,                                                     \
                 [MVM_W_Q2_K] = down_q2_K,                                                         \
                 [MVM_W_Q3_K] = down_q3_K,                                                         \
                 [MVM_W_Q4_K] = down_q4_K,                                                         \
                 [MVM_W_Q5_K] = down_q5_K,                                                         \
                 [MVM_W_Q6_K] = down_q6_K},                                                        \
    };

extern const struct mvm_k_level mvm_k_level_scalar; /* dot_scalar.c */
#if defined(__x86_64__) || defined(__i386__)
extern const struct mvm_k_level mvm_k_level_avx2;   /* dot_avx2.c */
extern const struct mvm_k_level mvm_k_level_avx512; /* dot_avx512.c */
#endif

/* The table of the level in use (simd.c); set before any thread runs a kernel. */
extern const struct mvm_k_level *mvm_k_kernels;

#endif
