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

/* The levels' kernels are written as templates over the weight type: each helper is forced
 * inline (MVM_K_INLINE) into every type's instance, where the type is a constant. GCC's
 * sanitizer builds define MVM_K_INLINE_FREE (CMakeLists.txt) and leave inlining to the
 * compiler: the same code, each large helper one function taking the type at run time, so
 * their checks see the same accesses and operations. GCC then compiles the SIMD files in 19
 * CPU-seconds under ASan+UBSan instead of 214, and test_kernels runs 13% longer
 * (docs/perf/tests.md, session 95). */
#ifdef MVM_K_INLINE_FREE
#define MVM_K_INLINE static inline
#else
#define MVM_K_INLINE static inline __attribute__((always_inline))
#endif

/* The 32 quants of a Q block of type t as integers, bias subtracted: x_j = d * q[j] (+ m). */
static inline void mvm_k_qunpack(enum mvm_wtype t, const uint8_t *blk, int8_t q[MVM_QBLOCK])
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    if (t == MVM_W_Q8_0) {
        memcpy(q, blk + L.qs, MVM_QBLOCK);
        return;
    }
    if (mvm_k_is_table(t)) {
        for (int j = 0; j < MVM_QBLOCK / 2; j++) {
            q[j] = (int8_t)mvm_k_table(t, blk[L.qs + j] & 0x0F);
            q[j + 16] = (int8_t)mvm_k_table(t, blk[L.qs + j] >> 4);
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

/* The first of entries lo .. hi of the IQ4_NL table at the least |v - entry| in F32. */
static inline uint8_t mvm_k_iq4_first_nearest(float v, int lo, int hi)
{
    int best = lo;
    for (int k = lo + 1; k <= hi; k++) {
        const int kv = mvm_k_table(MVM_W_IQ4_NL, k), bv = mvm_k_table(MVM_W_IQ4_NL, best);
        if (fabsf(v - (float)kv) < fabsf(v - (float)bv))
            best = k;
    }
    return (uint8_t)best;
}

/* The IQ4_NL table's entry nearest v (the lower one on ties; NaN: entry 0): IQ4_NL's and
 * IQ4_XS's quantizers (convert.c, kquant.c), and the KV cache's IQ4_NL rows. The entries
 * ascend, so v's nearest is c, the count of the midpoints between neighbours below it (each
 * exact in F32); the F32 distances' rounding (at most 2^-14 where |v| < 1024) is far under
 * the table's gaps (10 and more), so the first nearest over all 16 in F32 is among c - 1 ..
 * c + 1, where it is picked by the same rule. Larger v (rounding could tie every entry), NaN
 * and infinities take the rule over all 16. A 16-entry search was 16% of a prompt's time
 * over an IQ4_NL cache (docs/perf/cpu.md, session 125). */
static inline uint8_t mvm_k_iq4_nearest(float v)
{
    static const float mid[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f,
                                  -4.5f,   7.0f,   19.0f,  31.5f,  45.5f,  61.0f,  79.0f,
                                  101.0f};
    if (!(fabsf(v) < 1024.0f))
        return mvm_k_iq4_first_nearest(v, 0, 15);
    int c = 0;
    for (int i = 0; i < 15; i++)
        c += v > mid[i];
    return mvm_k_iq4_first_nearest(v, c > 0 ? c - 1 : 0, c < 15 ? c + 1 : 15);
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
/* The K-quants' and IQ4_XS's quantize / dequantize of n elements (kquant.c; n % 256 == 0). */
void mvm_k_quantize_k(enum mvm_wtype t, const float *src, void *dst, size_t n);
void mvm_k_dequantize_k(enum mvm_wtype t, const void *src, float *dst, size_t n);
/* The lattice-grid types' quantize / dequantize of n elements (iquant.c; n % 256 == 0). */
void mvm_k_quantize_iq(enum mvm_wtype t, const float *src, void *dst, size_t n);
void mvm_k_dequantize_iq(enum mvm_wtype t, const void *src, float *dst, size_t n);

/* ---- the hot kernels of one SIMD level -------------------------------------------------- */

/* dot(w, act) over n elements: w one row of type t, act in t's activation format
 * (mvm_k_act_bytes: F32 for float types, Q8_0 blocks for Q types, Q8_K for K types; n a
 * multiple of the block). */
typedef float (*mvm_k_dot_fn)(const void *w, const void *act, size_t n);

/* Tokens the multi-token kernels take at once: each weight block is loaded and unpacked
 * once for all of them, since prefill and an expert's batch are compute-bound and the
 * unpacking of the 4-bit and K types is a large part of a token's work (measured, one
 * thread, weights in L2: matmul 1.1-1.3x one token at a time for the 32-element Q types,
 * 1.1-1.6x for the K types; docs/perf/cpu.md). Four was chosen so that a step's eight
 * unpacked blocks and the tokens' accumulators stay near AVX2's 16 registers; other counts
 * were not measured. */
#define MVM_K_NT 4

/* y[i * y_stride] = dot(w, act + i * act_stride) for i < n_tok, 1 <= n_tok <= MVM_K_NT:
 * the same floats as n_tok calls of the dot product, bit for bit (every token's arithmetic
 * keeps its order; only the weights' loads and unpacking are shared). */
typedef void (*mvm_k_dotn_fn)(const void *w, const void *act, size_t act_stride, size_t n_tok,
                              size_t n, float *y, size_t y_stride);
/* The expert FFN's hot loop for n_tok tokens (1 <= n_tok <= MVM_K_NT): for each i,
 * out_i[j] += dot(down block j, a_i) for j < n_embd, with a_i = a + i * a_stride bytes and
 * out_i = out + i * out_stride floats. down holds n_embd blocks of type t
 * (mvm_k_block_bytes, one per output); a_i is a group's intermediate activations (one
 * mvm_block_q8_0 for Q types, one mvm_block_q8_K for K types, 32 floats for float types).
 * n_embd % 32 == 0 for Q and K types. Bitwise the same as one token at a time. */
typedef void (*mvm_k_downn_fn)(const void *down, const void *a, size_t a_stride, size_t n_tok,
                               float *out, size_t out_stride, size_t n_embd);

/* out[i] += s * row[i] for i < n, row of a float type: the attention's values, which the KV
 * cache keeps as F32 or F16 (F32 and F16 only; the other entries are NULL). */
typedef void (*mvm_k_axpy_fn)(const void *row, float s, float *out, size_t n);

/* A block of a matrix product, for levels and types that have a kernel taking several rows
 * and tokens at once: y[i * ys + r] = dot(w + r * row_bytes, act + i * act_stride) for
 * r < n_rows, i < n_tok, each float bit for bit the level's dotn with that row and token,
 * whatever the tile it was computed in. add: the down loop instead (each row one block,
 * n_rows % 32 == 0 as mvm_k_downn_fn has it): y[...] as the level's downn leaves it. */
typedef void (*mvm_k_gemm_fn)(const void *w, size_t row_bytes, size_t n_rows, const void *act,
                              size_t act_stride, size_t n_tok, size_t n, float *y, size_t ys,
                              int add);
/* Defines `name` (storage: static, or empty for an entry another file's table takes), an
 * mvm_k_gemm_fn that is fn(type, its arguments) (attr: the level's target): a table's entry
 * for one type of a kernel written over the type. */
#define MVM_K_GEMM_ENTRY(storage, attr, name, fn, type)                                            \
    attr storage void name(const void *w, size_t rb, size_t n_rows, const void *act, size_t as,    \
                           size_t n_tok, size_t n, float *y, size_t ys, int add)                   \
    {                                                                                              \
        fn(type, w, rb, n_rows, act, as, n_tok, n, y, ys, add);                                    \
    }

/* A level's mvm_k_attn_block (kernels.h), same arguments: 1 when it computed the block, 0
 * when it leaves the case (a cache type or head size it does not take) to ops.c's. */
typedef int (*mvm_k_attn_fn)(const float *q, size_t q_stride, size_t n_tok, size_t n_q,
                             size_t n_kv, const uint32_t *n_pos, enum mvm_wtype kv, const void *k,
                             const void *v, size_t kv_stride, size_t head_dim, float scale,
                             const float *sinks, float *scratch, float *out, float *lse);

/* Between a block's scores and its values (ops.c; its attention and the levels' that share
 * its arithmetic): each query's scores (token i's head h of nh at scratch + (i * nh + h) *
 * rows, its first n_pos[i]) turned into the softmax's weights with its sink (sinks[h], NULL:
 * none; the level's softmax_sink where it has one), its log-normaliser at lse[i * lse_stride
 * + h] (lse NULL: not wanted), its output (out + i * q_stride + h * head_dim) zeroed. */
void mvm_k_attn_weights(float *scratch, size_t rows, size_t n_tok, size_t nh,
                        const uint32_t *n_pos, const float *sinks, float *lse, size_t lse_stride,
                        float *out, size_t q_stride, size_t head_dim);

/* n elements (whole blocks) of a KV cache row of BF16 or a 32-element Q type t (those
 * engine/forward/kv_cache.h takes besides F32 and F16) as floats into dst, each value
 * mvm_k_dequantize's bit for bit: ops.c's attention converts a row so, once for the queries
 * that read it. */
typedef void (*mvm_k_kv_row_fn)(enum mvm_wtype t, const void *row, float *dst, size_t n);

struct mvm_k_level {
    mvm_k_dot_fn dot[MVM_W_COUNT];
    mvm_k_dotn_fn dotn[MVM_W_COUNT];
    mvm_k_downn_fn downn[MVM_W_COUNT];
    mvm_k_axpy_fn axpy[MVM_W_COUNT];
    /* NULL, or the types' multi-row kernels (NULL entries: none for that type) */
    const mvm_k_gemm_fn *gemm;
    /* NULL, or the types' kernels over tiled rows (kernels.h, "Expert tiles"), for any
     * number of tokens (NULL entries: the type is never tiled) */
    const mvm_k_gemm_fn *tiles;
    /* NULL, or the activations' quantizer: n floats (a multiple of the block) into Q8_K
     * blocks (k) or Q8_0 blocks, bit for bit blocks.h's mvm_k_q8_K_block / _q8_0_block */
    void (*quantize_act)(int k, const float *x, void *act, size_t n);
    /* NULL, or the level's attention (ops.c's otherwise) */
    mvm_k_attn_fn attn;
    /* NULL, or the level's conversion of a KV cache's rows (mvm_k_dequantize otherwise) */
    mvm_k_kv_row_fn kv_row;
    /* NULL, or the level's mvm_k_swiglu (ops.c's portable loop otherwise) */
    void (*swiglu)(float *x, const float *y, size_t n);
    /* NULL, or the level's mvm_k_softmax_sink for the attention's weights (mvm_k_attn_weights;
     * the router's stays ops.c's) */
    float (*softmax_sink)(float *x, size_t n, float sink);
};

/* Defines `name` as a generic multi-token kernel that runs the single-token `one` for each
 * token in turn (attr: the level's target), for the portable level and for the float types,
 * which gain nothing from sharing the weights: their F32 activations, 4 bytes an element and
 * token, are the larger stream (measured: matmul of F16 and F32 weights 0.77-0.89x one token
 * at a time), so the tokens' sums would only take the registers the weights' loads need.
 *   one:  float one(t, const uint8_t *w, const act_type *act, size_t n)          (dot)
 *         void one(t, const uint8_t *w, const act_type *a, float *out, size_t n)  (down) */
#define MVM_K_DOTN_ONE_BY_ONE(attr, name, one, act_type)                                           \
    attr MVM_K_INLINE void name(                                  \
        enum mvm_wtype t, const uint8_t *w, const uint8_t *act, size_t as, const int nt,           \
        size_t n, float *y, size_t ys)                                                             \
    {                                                                                              \
        for (int k = 0; k < nt; k++)                                                               \
            y[k * ys] = one(t, w, (const act_type *)(const void *)(act + k * as), n);              \
    }
#define MVM_K_DOWNN_ONE_BY_ONE(attr, name, one, act_type)                                          \
    attr MVM_K_INLINE void name(                                  \
        enum mvm_wtype t, const uint8_t *w, const uint8_t *a, size_t as, const int nt,             \
        float *out, size_t os, size_t n)                                                           \
    {                                                                                              \
        for (int k = 0; k < nt; k++)                                                               \
            one(t, w, (const act_type *)(const void *)(a + k * as), out + k * os, n);              \
    }

/* Defines the table `name` of a level from its six generic kernels, which take the weight
 * type first and the token count as a constant (1..MVM_K_NT, so that the token loops unroll
 * and the accumulators stay in registers), and are inlined into one entry point per type
 * and count (attr: the level's target):
 *   void dotn_float(t, const uint8_t *w, const uint8_t *act, size_t act_stride, int n_tok,
 *                   size_t n, float *y, size_t y_stride)      (act: F32 vectors)
 *   void dotn_q(...)                                          (act: Q8_0 blocks)
 *   void dotn_k(...)                                          (act: Q8_K blocks)
 *   void downn_float(t, const uint8_t *w, const uint8_t *a, size_t a_stride, int n_tok,
 *                    float *out, size_t out_stride, size_t n)
 *   void downn_q(...), downn_k(...)
 * The single-token dot product is dotn's with one token. MVM_K_LEVEL's last seven arguments
 * are the level's gemm and tiles tables, quantize_act, attn, kv_row, swiglu and softmax_sink,
 * or NULL where it has none. */
#define MVM_K_LEVEL_TYPE(attr, dotn, downn, type, sfx)                                             \
    attr static void dotn_##sfx(const void *w, const void *act, size_t act_stride, size_t n_tok,   \
                                size_t n, float *y, size_t y_stride)                               \
    {                                                                                              \
        switch (n_tok) {                                                                           \
        case 1: dotn(type, w, act, act_stride, 1, n, y, y_stride); break;                          \
        case 2: dotn(type, w, act, act_stride, 2, n, y, y_stride); break;                          \
        case 3: dotn(type, w, act, act_stride, 3, n, y, y_stride); break;                          \
        default: dotn(type, w, act, act_stride, MVM_K_NT, n, y, y_stride); break;                  \
        }                                                                                          \
    }                                                                                              \
    attr static float dot_##sfx(const void *w, const void *act, size_t n)                          \
    {                                                                                              \
        float y;                                                                                   \
        dotn(type, w, act, 0, 1, n, &y, 0);                                                        \
        return y;                                                                                  \
    }                                                                                              \
    attr static void downn_##sfx(const void *w, const void *a, size_t a_stride, size_t n_tok,      \
                                 float *out, size_t out_stride, size_t n)                          \
    {                                                                                              \
        switch (n_tok) {                                                                           \
        case 1: downn(type, w, a, a_stride, 1, out, out_stride, n); break;                         \
        case 2: downn(type, w, a, a_stride, 2, out, out_stride, n); break;                         \
        case 3: downn(type, w, a, a_stride, 3, out, out_stride, n); break;                         \
        default: downn(type, w, a, a_stride, MVM_K_NT, out, out_stride, n); break;                 \
        }                                                                                          \
    }
/* The entry points axpy_f32 and axpy_f16 of the generic
 *   void axpy_float(t, const uint8_t *row, float s, float *out, size_t n)   (t F32 or F16) */
#define MVM_K_LEVEL_AXPY(attr, axpy_float, type, sfx)                                              \
    attr static void axpy_##sfx(const void *row, float s, float *out, size_t n)                    \
    {                                                                                              \
        axpy_float(type, row, s, out, n);                                                          \
    }
/* The entry points pre_f32 .. pre_iq1_m that MVM_K_LEVEL_TYPE defined, indexed by type. */
#define MVM_K_TABLE(pre)                                                                           \
    {[MVM_W_F32] = pre##_f32,                                                                      \
     [MVM_W_F16] = pre##_f16,                                                                      \
     [MVM_W_BF16] = pre##_bf16,                                                                    \
     [MVM_W_Q8_0] = pre##_q8_0,                                                                    \
     [MVM_W_Q4_0] = pre##_q4_0,                                                                    \
     [MVM_W_Q4_1] = pre##_q4_1,                                                                    \
     [MVM_W_Q5_0] = pre##_q5_0,                                                                    \
     [MVM_W_Q5_1] = pre##_q5_1,                                                                    \
     [MVM_W_IQ4_NL] = pre##_iq4_nl,                                                                \
     [MVM_W_Q2_K] = pre##_q2_K,                                                                    \
     [MVM_W_Q3_K] = pre##_q3_K,                                                                    \
     [MVM_W_Q4_K] = pre##_q4_K,                                                                    \
     [MVM_W_Q5_K] = pre##_q5_K,                                                                    \
     [MVM_W_Q6_K] = pre##_q6_K,                                                                    \
     [MVM_W_IQ4_XS] = pre##_iq4_xs,                                                                \
     [MVM_W_MXFP4] = pre##_mxfp4,                                                                  \
     [MVM_W_IQ2_XXS] = pre##_iq2_xxs,                                                              \
     [MVM_W_IQ2_XS] = pre##_iq2_xs,                                                                \
     [MVM_W_IQ2_S] = pre##_iq2_s,                                                                  \
     [MVM_W_IQ3_XXS] = pre##_iq3_xxs,                                                              \
     [MVM_W_IQ3_S] = pre##_iq3_s,                                                                  \
     [MVM_W_IQ1_S] = pre##_iq1_s,                                                                  \
     [MVM_W_IQ1_M] = pre##_iq1_m}
#define MVM_K_LEVEL(name, attr, dotn_float, dotn_q, downn_float, downn_q, dotn_k, downn_k,         \
                    axpy_float, gemm_table, tiles_table, quant_act, attn_fn, kv_row_fn,            \
                    swiglu_fn, softmax_fn)                                                         \
    MVM_K_LEVEL_AXPY(attr, axpy_float, MVM_W_F32, f32)                                             \
    MVM_K_LEVEL_AXPY(attr, axpy_float, MVM_W_F16, f16)                                             \
    MVM_K_LEVEL_TYPE(attr, dotn_float, downn_float, MVM_W_F32, f32)                                \
    MVM_K_LEVEL_TYPE(attr, dotn_float, downn_float, MVM_W_F16, f16)                                \
    MVM_K_LEVEL_TYPE(attr, dotn_float, downn_float, MVM_W_BF16, bf16)                              \
    MVM_K_LEVEL_TYPE(attr, dotn_q, downn_q, MVM_W_Q8_0, q8_0)                                      \
    MVM_K_LEVEL_TYPE(attr, dotn_q, downn_q, MVM_W_Q4_0, q4_0)                                      \
    MVM_K_LEVEL_TYPE(attr, dotn_q, downn_q, MVM_W_Q4_1, q4_1)                                      \
    MVM_K_LEVEL_TYPE(attr, dotn_q, downn_q, MVM_W_Q5_0, q5_0)                                      \
    MVM_K_LEVEL_TYPE(attr, dotn_q, downn_q, MVM_W_Q5_1, q5_1)                                      \
    MVM_K_LEVEL_TYPE(attr, dotn_q, downn_q, MVM_W_IQ4_NL, iq4_nl)                                  \
    MVM_K_LEVEL_TYPE(attr, dotn_k, downn_k, MVM_W_Q2_K, q2_K)                                      \
    MVM_K_LEVEL_TYPE(attr, dotn_k, downn_k, MVM_W_Q3_K, q3_K)                                      \
    MVM_K_LEVEL_TYPE(attr, dotn_k, downn_k, MVM_W_Q4_K, q4_K)                                      \
    MVM_K_LEVEL_TYPE(attr, dotn_k, downn_k, MVM_W_Q5_K, q5_K)                                      \
    MVM_K_LEVEL_TYPE(attr, dotn_k, downn_k, MVM_W_Q6_K, q6_K)                                      \
    MVM_K_LEVEL_TYPE(attr, dotn_k, downn_k, MVM_W_IQ4_XS, iq4_xs)                                  \
    MVM_K_LEVEL_TYPE(attr, dotn_q, downn_q, MVM_W_MXFP4, mxfp4)                                    \
    MVM_K_LEVEL_TYPE(attr, dotn_k, downn_k, MVM_W_IQ2_XXS, iq2_xxs)                                \
    MVM_K_LEVEL_TYPE(attr, dotn_k, downn_k, MVM_W_IQ2_XS, iq2_xs)                                  \
    MVM_K_LEVEL_TYPE(attr, dotn_k, downn_k, MVM_W_IQ2_S, iq2_s)                                    \
    MVM_K_LEVEL_TYPE(attr, dotn_k, downn_k, MVM_W_IQ3_XXS, iq3_xxs)                                \
    MVM_K_LEVEL_TYPE(attr, dotn_k, downn_k, MVM_W_IQ3_S, iq3_s)                                    \
    MVM_K_LEVEL_TYPE(attr, dotn_k, downn_k, MVM_W_IQ1_S, iq1_s)                                    \
    MVM_K_LEVEL_TYPE(attr, dotn_k, downn_k, MVM_W_IQ1_M, iq1_m)                                    \
    const struct mvm_k_level name = {                                                              \
        .dot = MVM_K_TABLE(dot), .dotn = MVM_K_TABLE(dotn), .downn = MVM_K_TABLE(downn),          \
        .axpy = {[MVM_W_F32] = axpy_f32, [MVM_W_F16] = axpy_f16}, .gemm = gemm_table,           \
        .tiles = tiles_table, .quantize_act = quant_act, .attn = attn_fn, .kv_row = kv_row_fn,   \
        .swiglu = swiglu_fn, .softmax_sink = softmax_fn};

extern const struct mvm_k_level mvm_k_level_scalar; /* dot_scalar.c */
#if defined(__x86_64__) || defined(__i386__)
extern const struct mvm_k_level mvm_k_level_avx2;   /* dot_avx2.c */
extern const mvm_k_gemm_fn mvm_k_gemm_avx2[MVM_W_COUNT];  /* tiles_avx2.c */
extern const mvm_k_gemm_fn mvm_k_tiles_avx2[MVM_W_COUNT]; /* tiles_avx2.c */
extern const struct mvm_k_level mvm_k_level_avxvnni;         /* dot_avxvnni.c */
extern const mvm_k_gemm_fn mvm_k_gemm_avxvnni[MVM_W_COUNT];  /* tiles_avxvnni.c */
extern const mvm_k_gemm_fn mvm_k_tiles_avxvnni[MVM_W_COUNT]; /* tiles_avxvnni.c */
/* The 32-element Q types the multi-row kernels take (gemm_q_avx2.h, gemm_q_avx512vnni.c), each
 * as X(type): one instance of a kernel per type, so that its decoder's branches fold away. */
#define MVM_K_Q32_TYPES(X)                                                                         \
    X(MVM_W_Q8_0) X(MVM_W_Q4_0) X(MVM_W_Q4_1) X(MVM_W_Q5_0) X(MVM_W_Q5_1) X(MVM_W_IQ4_NL)          \
    X(MVM_W_MXFP4)
/* The AVX2 level's products of the 32-element Q types (gemm_q_avx2.h), the entries of its gemm
 * table for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4; mvm_k_gemm_fn's arguments otherwise. */
void mvm_k_gemm_q_avx2(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                       const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y, size_t ys,
                       int add);
/* The same for the AVX-VNNI level (gemm_q_avxvnni.c). */
void mvm_k_gemm_q_avxvnni(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                          const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y,
                          size_t ys, int add);
int mvm_k_attn_block_avx2(const float *q, size_t q_stride, size_t n_tok, size_t n_q, size_t n_kv,
                          const uint32_t *n_pos, enum mvm_wtype kv, const void *k, const void *v,
                          size_t kv_stride, size_t head_dim, float scale, const float *sinks,
                          float *scratch, float *out, float *lse); /* attn_avx2.c */
/* exp_avx2.c */
void mvm_k_swiglu_avx2(float *x, const float *y, size_t n);
float mvm_k_softmax_sink_avx2(float *x, size_t n, float sink);
extern const struct mvm_k_level mvm_k_level_avx512;     /* dot_avx512.c */
extern const struct mvm_k_level mvm_k_level_avx512vnni; /* dot_avx512vnni.c */
extern const mvm_k_gemm_fn mvm_k_gemm_avx512vnni[MVM_W_COUNT]; /* gemm_avx512vnni.c */
extern const mvm_k_gemm_fn mvm_k_tiles_avx512vnni[MVM_W_COUNT]; /* gemm_rows_avx512vnni.c */
int mvm_k_attn_block_avx512(const float *q, size_t q_stride, size_t n_tok, size_t n_q,
                            size_t n_kv, const uint32_t *n_pos, enum mvm_wtype kv, const void *k,
                            const void *v, size_t kv_stride, size_t head_dim, float scale,
                            const float *sinks, float *scratch, float *out,
                            float *lse); /* attn_avx512.c */
#endif
#if defined(__aarch64__)
extern const struct mvm_k_level mvm_k_level_neon;    /* dot_neon.c */
extern const struct mvm_k_level mvm_k_level_dotprod; /* dot_dotprod.c */
#endif

/* The table of the level in use (simd.c); set before any thread runs a kernel. */
extern const struct mvm_k_level *mvm_k_kernels;

/* The tokens of each pass when n_tok tokens are taken at most `most` a pass, the passes
 * made even in whole units of `unit` tokens (the multi-row kernels' lane groups): 70 at
 * most 64 a pass were 64 and 6, two unpackings of every row, the second for six tokens;
 * at most 128 they are one pass. */
static inline size_t mvm_k_even_pass(size_t n_tok, size_t most, size_t unit)
{
    const size_t passes = (n_tok + most - 1) / most, units = (n_tok + unit - 1) / unit;
    const size_t per = (units + passes - 1) / passes * unit;
    return per < most ? per : most;
}

/* The level's multi-row kernel for type t when a product of n_tok tokens should take it, or
 * NULL: fewer than MVM_K_NT tokens are the dotn kernels' (a row's blocks unpacked once for
 * up to MVM_K_NT tokens), as fast there as the multi-row kernels' mostly empty lanes. The
 * K-quants' multi-row kernels take 3 tokens too: an OLMoE Q4_K_M expert of 3 tokens
 * streamed 37 GMAC/s through them against 24 through dotn (bench_cpu_expert_tokens; at 2,
 * 22-27 against 25-26); so do the AVX2 level's (tiles_avx2.h; a Q4_K matrix of 3 tokens
 * 37-38 GMAC/s against dotn's 18, Q6_K's 16 against 14). The lattice-grid types' dotn,
 * decoded in 512-bit vectors (avx512_iqgrid.h), keep all MVM_K_NT: at 3 and 4 tokens it ran
 * 17-33 and 20-38 GMAC/s against the multi-row kernel's 16-23 and 19-30 (every grid type; at
 * 5, 17-30 in 4 + 1 against 27-37). */
static inline mvm_k_gemm_fn mvm_k_gemm(enum mvm_wtype t, size_t n_tok)
{
    const size_t least = mvm_k_is_iqgrid(t) ? MVM_K_NT + 1 : mvm_k_is_k(t) ? 3 : MVM_K_NT;
    return n_tok >= least && mvm_k_kernels->gemm ? mvm_k_kernels->gemm[t] : NULL;
}

#endif
