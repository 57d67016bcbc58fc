/*
 * What the CPU kernel files share and the contract (kernels.h) does not show: the block
 * layouts, the inline element conversions, and the per-SIMD-level table of hot kernels that
 * simd.c selects once and matvec.c / expert.c call through.
 */
#ifndef MVM_KERNELS_CPU_DISPATCH_H
#define MVM_KERNELS_CPU_DISPATCH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/kernels.h"

/* ggml's block_q8_0 (ggml-common.h), also the activations of every 32-element Q type. Only
 * 2-byte aligned: a row of blocks sits wherever the file put it, so SIMD code loads the
 * quants unaligned. */
typedef struct {
    uint16_t d;
    int8_t qs[MVM_QBLOCK];
} mvm_block_q8_0;
_Static_assert(sizeof(mvm_block_q8_0) == 34, "ggml block size");

/* Where the parts of a 32-element Q block of type t lie (ggml's block_q4_0, _q4_1, _q5_0,
 * _q5_1, _q8_0): every one starts with its f16 scale d; the min m (x = d * q + m) at byte
 * m, the fifth bits (a little-endian u32, bit j for element j) at byte qh, the quants at
 * byte qs; 0 where the block has no such part. bias is subtracted from the unsigned quants
 * of the types without a min (x = d * (q - bias)). Q8_0's quants are int8 at byte 2. */
typedef struct {
    uint8_t m, qh, qs, bias;
} mvm_k_qlayout;

/* IQ4_NL's quant values (ggml-common.h's kvalues_iq4nl), indexed by the nibble. */
static const int8_t mvm_k_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                              1,    13,   25,  38,  53,  69,  89,  113};

static inline mvm_k_qlayout mvm_k_qlay(enum mvm_wtype t)
{
    switch (t) {
    case MVM_W_Q4_0: return (mvm_k_qlayout){0, 0, 2, 8};
    case MVM_W_Q4_1: return (mvm_k_qlayout){2, 0, 4, 0};
    case MVM_W_Q5_0: return (mvm_k_qlayout){0, 2, 6, 16};
    case MVM_W_Q5_1: return (mvm_k_qlayout){2, 4, 8, 0};
    default: return (mvm_k_qlayout){0, 0, 2, 0}; /* Q8_0, and IQ4_NL's nibbles */
    }
}

/* The K-quants' super-blocks (ggml-common.h's block_q4_K, block_q5_K, block_q6_K) and the
 * activation block they are multiplied with. Q4_K/Q5_K: element 64k + l (l < 32) is the low
 * nibble of qs[32k + l] with scale/min 2k, element 64k + 32 + l its high nibble with
 * scale/min 2k + 1; Q5_K adds bit 2k (low) or 2k + 1 (high) of qh[l] as the fifth bit. The
 * 8 six-bit scales and mins are packed into scales[12] (mvm_k_scale_min). Q6_K: elements
 * 128h + 32k + l (k < 4) take the low (k < 2) or high nibble of ql[64h + 32(k & 1) + l] and
 * bits 2k, 2k+1 of qh[32h + l], minus 32; element e has the int8 scale scales[e / 16]. */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[MVM_QK_K / 2];
} mvm_block_q4_K;
/* Q2_K and Q3_K: 16 sub-blocks of 16; element 128h + 32j + l (j < 4, l < 32) of sub-block
 * i = 8h + 2j + l / 16 takes bits 2j, 2j+1 of qs[32h + l]. Q2_K: x = d·(sc & 15)·q -
 * dmin·(sc >> 4) with sc = scales[i]. Q3_K: the third bit is bit 4h + j of hmask[l] and
 * x = d·(s - 32)·(q - 4 if that bit is clear, else q), s = the 6-bit scale i
 * (mvm_k_q3_scales). */
typedef struct {
    uint8_t scales[MVM_QK_K / 16];
    uint8_t qs[MVM_QK_K / 4];
    uint16_t d, dmin;
} mvm_block_q2_K;
typedef struct {
    uint8_t hmask[MVM_QK_K / 8];
    uint8_t qs[MVM_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} mvm_block_q3_K;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[MVM_QK_K / 8];
    uint8_t qs[MVM_QK_K / 2];
} mvm_block_q5_K;
typedef struct {
    uint8_t ql[MVM_QK_K / 2];
    uint8_t qh[MVM_QK_K / 4];
    int8_t scales[MVM_QK_K / 16];
    uint16_t d;
} mvm_block_q6_K;
/* x = d * q; bsums[i] = the sum of qs[16i .. 16i+15] (the K dot products' min terms). */
typedef struct {
    float d;
    int8_t qs[MVM_QK_K];
    int16_t bsums[MVM_QK_K / 16];
} mvm_block_q8_K;
_Static_assert(sizeof(mvm_block_q2_K) == 84 && sizeof(mvm_block_q3_K) == 110 &&
                   sizeof(mvm_block_q4_K) == 144 && sizeof(mvm_block_q5_K) == 176 &&
                   sizeof(mvm_block_q6_K) == 210 && sizeof(mvm_block_q8_K) == 292,
               "ggml K block sizes");

/* The 32-element Q types, whose activations are Q8_0 blocks. */
static inline int mvm_k_is_q(enum mvm_wtype t)
{
    return t == MVM_W_Q8_0 || t == MVM_W_Q4_0 || t == MVM_W_Q4_1 || t == MVM_W_Q5_0 ||
           t == MVM_W_Q5_1 || t == MVM_W_IQ4_NL;
}

/* The K-quants, whose activations are Q8_K blocks. */
static inline int mvm_k_is_k(enum mvm_wtype t)
{
    return t == MVM_W_Q2_K || t == MVM_W_Q3_K || t == MVM_W_Q4_K || t == MVM_W_Q5_K ||
           t == MVM_W_Q6_K;
}

static inline uint32_t mvm_k_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float mvm_k_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE half -> float, ggml's ggml_compute_fp16_to_fp32 (exact for every input: normals by
 * rescaling the exponent, subnormals by the magic-bias subtraction). Inline because the
 * scalar dot products convert every element with it. */
static inline float mvm_k_h2f(uint16_t h)
{
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const float normalized = mvm_k_u2f((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    const float denormalized = mvm_k_u2f((two_w >> 17) | (126u << 23)) - 0.5f;
    return mvm_k_u2f(sign | (two_w < (1u << 27) ? mvm_k_f2u(denormalized) : mvm_k_f2u(normalized)));
}

static inline float mvm_k_bf2f(uint16_t h)
{
    return mvm_k_u2f((uint32_t)h << 16);
}

/* Bytes of one block of type t as the expert's down slot holds it: 32 elements of a float
 * type, one Q block, or one K super-block. */
static inline size_t mvm_k_block_bytes(enum mvm_wtype t)
{
    switch (t) {
    case MVM_W_F32: return 4 * MVM_QBLOCK;
    case MVM_W_Q8_0: return sizeof(mvm_block_q8_0);
    case MVM_W_Q4_0: return 18;
    case MVM_W_Q4_1: return 20;
    case MVM_W_Q5_0: return 22;
    case MVM_W_Q5_1: return 24;
    case MVM_W_IQ4_NL: return 18;
    case MVM_W_Q2_K: return sizeof(mvm_block_q2_K);
    case MVM_W_Q3_K: return sizeof(mvm_block_q3_K);
    case MVM_W_Q4_K: return sizeof(mvm_block_q4_K);
    case MVM_W_Q5_K: return sizeof(mvm_block_q5_K);
    case MVM_W_Q6_K: return sizeof(mvm_block_q6_K);
    default: return 2 * MVM_QBLOCK;
    }
}

/* The f16 at byte `at` of a block: a Q block's scale (at 0) or min. */
static inline uint16_t mvm_k_block_h(const void *blk, size_t at)
{
    uint16_t h;
    memcpy(&h, (const uint8_t *)blk + at, sizeof h);
    return h;
}

/* The scale of a Q block (every one starts with it). */
static inline uint16_t mvm_k_block_d(const void *blk)
{
    return mvm_k_block_h(blk, 0);
}

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
            q[j] = mvm_k_iq4nl_values[blk[L.qs + j] & 0x0F];
            q[j + 16] = mvm_k_iq4nl_values[blk[L.qs + j] >> 4];
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

/* Element i of a row of float type t (F32, F16 or BF16) as F32: the scalar tails. */
static inline float mvm_k_elem(enum mvm_wtype t, const void *row, size_t i)
{
    switch (t) {
    case MVM_W_F16: return mvm_k_h2f(((const uint16_t *)row)[i]);
    case MVM_W_BF16: return mvm_k_bf2f(((const uint16_t *)row)[i]);
    default: return ((const float *)row)[i];
    }
}

/* One Q8_0 block from 32 floats with quantize_row_q8_0_ref's rounding (convert.c): the
 * activations of the expert's down product are quantized with it at every SIMD level. */
void mvm_k_quantize_q8_0_block(const float *x, mvm_block_q8_0 *y);
/* One Q8_K block from 256 floats with quantize_row_q8_K_ref's rounding (kquant.c). */
void mvm_k_quantize_q8_K_block(const float *x, mvm_block_q8_K *y);
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

/* Scale and min j (< 8) of a Q4_K / Q5_K super-block, from their 6-bit packing: j < 4 in
 * the low 6 bits of bytes j and j + 4; j >= 4 in the nibbles of byte j + 4 with the top two
 * bits in bytes j - 4 and j. */
static inline void mvm_k_scale_min(const uint8_t *q, int j, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q3_K's 16 6-bit scales, unsigned (the value is out[i] - 32). Scale i has as its low 4 bits
 * the low (i < 8) or high nibble of scales[i % 8], as its top 2 bits bits 2(i / 4) and
 * 2(i / 4) + 1 of scales[8 + i % 4]; unpacked four at a time in 32-bit words, as ggml does
 * (little-endian, as ggml assumes too). */
static inline void mvm_k_q3_scales(const uint8_t *scales, uint8_t out[16])
{
    uint32_t w[3], s4[4];
    memcpy(w, scales, sizeof w);
    s4[0] = (w[0] & 0x0f0f0f0fu) | (w[2] & 0x03030303u) << 4;
    s4[1] = (w[1] & 0x0f0f0f0fu) | (w[2] >> 2 & 0x03030303u) << 4;
    s4[2] = (w[0] >> 4 & 0x0f0f0f0fu) | (w[2] >> 4 & 0x03030303u) << 4;
    s4[3] = (w[1] >> 4 & 0x0f0f0f0fu) | (w[2] >> 6 & 0x03030303u) << 4;
    memcpy(out, s4, sizeof s4);
}

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
 * (the last two: kdot.h's for the portable level, avx2.h's for the others). */
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
