/*
 * What the CPU kernel files share and the contract (kernels.h) does not show: the block
 * layouts, the inline element conversions, and the per-SIMD-level table of hot kernels that
 * simd.c selects once and matvec.c / expert.c call through.
 */
#ifndef MVM_KERNELS_CPU_DISPATCH_H
#define MVM_KERNELS_CPU_DISPATCH_H

#include <stdint.h>
#include <string.h>

#include "kernels/cpu/kernels.h"

/* ggml's block_q8_0 / block_q4_0 (ggml-common.h). Only 2-byte aligned: a row of blocks sits
 * wherever the file put it, so SIMD code loads the quants unaligned. */
typedef struct {
    uint16_t d;
    int8_t qs[MVM_QBLOCK];
} mvm_block_q8_0;
typedef struct {
    uint16_t d;
    uint8_t qs[MVM_QBLOCK / 2];
} mvm_block_q4_0;
_Static_assert(sizeof(mvm_block_q8_0) == 34 && sizeof(mvm_block_q4_0) == 18, "ggml block sizes");

static inline int mvm_k_is_q(enum mvm_wtype t)
{
    return t == MVM_W_Q8_0 || t == MVM_W_Q4_0;
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

/* Bytes of one 32-element block of type t: the expert's down slot, a Q block. */
static inline size_t mvm_k_block_bytes(enum mvm_wtype t)
{
    switch (t) {
    case MVM_W_F32: return 4 * MVM_QBLOCK;
    case MVM_W_Q8_0: return sizeof(mvm_block_q8_0);
    case MVM_W_Q4_0: return sizeof(mvm_block_q4_0);
    default: return 2 * MVM_QBLOCK;
    }
}

/* The scale of a Q8_0 or Q4_0 block (both start with it). */
static inline uint16_t mvm_k_block_d(const void *blk)
{
    uint16_t d;
    memcpy(&d, blk, sizeof d);
    return d;
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

/* ---- the hot kernels of one SIMD level -------------------------------------------------- */

/* dot(w, act) over n elements: w one row of type t, act in t's activation format
 * (mvm_k_act_bytes: F32 for float types, Q8_0 blocks for Q types; n % 32 == 0 for those). */
typedef float (*mvm_k_dot_fn)(const void *w, const void *act, size_t n);
/* The expert FFN's hot loop, out[j] += dot(down block j, a) for j < n_embd: down holds
 * n_embd blocks of 32 elements of type t (one per output), a is the group's 32 intermediate
 * activations (one mvm_block_q8_0 for Q types, 32 floats for float types). For Q types
 * n_embd % 32 == 0 (the gate and up rows are whole blocks), so their loops have no tail. */
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
 *   void down_q(t, const uint8_t *w, const mvm_block_q8_0 *a, float *out, size_t n) */
#define MVM_K_LEVEL_TYPE(attr, dot, down, type, sfx)                                               \
    attr static float dot_##sfx(const void *w, const void *act, size_t n)                          \
    {                                                                                              \
        return dot(type, w, act, n);                                                               \
    }                                                                                              \
    attr static void down_##sfx(const void *w, const void *a, float *out, size_t n)                \
    {                                                                                              \
        down(type, w, a, out, n);                                                                  \
    }
#define MVM_K_LEVEL(name, attr, dot_float, dot_q, down_float, down_q)                              \
    MVM_K_LEVEL_TYPE(attr, dot_float, down_float, MVM_W_F32, f32)                                  \
    MVM_K_LEVEL_TYPE(attr, dot_float, down_float, MVM_W_F16, f16)                                  \
    MVM_K_LEVEL_TYPE(attr, dot_float, down_float, MVM_W_BF16, bf16)                                \
    MVM_K_LEVEL_TYPE(attr, dot_q, down_q, MVM_W_Q8_0, q8_0)                                        \
    MVM_K_LEVEL_TYPE(attr, dot_q, down_q, MVM_W_Q4_0, q4_0)                                        \
    const struct mvm_k_level name = {                                                              \
        .dot = {[MVM_W_F32] = dot_f32,                                                             \
                [MVM_W_F16] = dot_f16,                                                             \
                [MVM_W_BF16] = dot_bf16,                                                           \
                [MVM_W_Q8_0] = dot_q8_0,                                                           \
                [MVM_W_Q4_0] = dot_q4_0},                                                          \
        .down = {[MVM_W_F32] = down_f32,                                                           \
                 [MVM_W_F16] = down_f16,                                                           \
                 [MVM_W_BF16] = down_bf16,                                                         \
                 [MVM_W_Q8_0] = down_q8_0,                                                         \
                 [MVM_W_Q4_0] = down_q4_0},                                                        \
    };

extern const struct mvm_k_level mvm_k_level_scalar; /* dot_scalar.c */
#if defined(__x86_64__) || defined(__i386__)
extern const struct mvm_k_level mvm_k_level_avx2;   /* dot_avx2.c */
extern const struct mvm_k_level mvm_k_level_avx512; /* dot_avx512.c */
#endif

/* The table of the level in use (simd.c); set before any thread runs a kernel. */
extern const struct mvm_k_level *mvm_k_kernels;

#endif
