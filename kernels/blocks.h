/*
 * llama.cpp's weight blocks (ggml-common.h), their activation blocks, and the integer dot
 * product of one weight block with one activation block: the arithmetic both backends
 * share. The CPU kernels (kernels/cpu: the portable level directly, the AVX2 and AVX-512
 * levels integer for integer) and the device kernels (kernels/cuda/device.cuh) include it,
 * so the two compute the same integers and round only where the other does. Plain C that
 * also compiles as CUDA C++, every function for the host and the device (MVM_BLK_FN).
 *
 * Types (enum mvm_wtype; kernels/cpu/kernels.h has their formulas):
 *   F32, F16, BF16                  against F32 activations
 *   Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,   blocks of 32 against Q8_0 activation blocks: summed in
 *   IQ4_NL, MXFP4                   int32, scaled once per block
 *   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,   super-blocks of 256 against Q8_K blocks
 *   IQ4_XS, and the lattice-grid
 *   types IQ2_XXS, IQ2_XS, IQ2_S,
 *   IQ3_XXS, IQ3_S, IQ1_S, IQ1_M
 *   (kernels/iqgrid.h)
 *
 * The K-quants, per super-block: the quants are summed in int32 per sub-block, scaled by the
 * sub-block's integer scale, and only the total is converted: exact, since every sum is far
 * below 2^31 (Q6_K: 16 sub-blocks x 64 x 16 x 32 x 127 < 2^27). The mins of Q4_K/Q5_K
 * (x = d·sc·q - dmin·m) and Q2_K, the -32 offset of Q6_K and the -4 of Q3_K's quants
 * without their third bit come out of the activation sums the Q8_K block carries (bsums), as
 * in ggml. Then, in float,
 *     Q2_K, Q4_K, Q5_K:  a.d · (d · Σ sc·(q·a) - dmin · Σ m·bsum)
 *     Q3_K:              a.d · d · Σ (s - 32)·(q·a - 4·bsum), q with the third bit
 *     Q6_K:              a.d · d · Σ sc·(q·a - 32·bsum)
 *     IQ4_XS:            a.d · d · Σ (s - 32)·(table[q]·a)
 * (ggml's IQ4_XS dot product converts each sub-block's sum to float; here the whole
 * super-block is summed in int32, 8 x 32 x 127 x 127 x 32 < 2^31, so it rounds once.)
 * The integer sums come in chunks of 32 elements (mvm_k_kchunk), so that the lanes of a GPU
 * warp can share a super-block; the CPU adds a super-block's 8 chunks before converting.
 */
#ifndef MVM_KERNELS_BLOCKS_H
#define MVM_KERNELS_BLOCKS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* MVM_BLK_UNROLL(n) before a loop of n steps unrolls it in both compilers: a decoder that
 * fills a small array in a loop otherwise leaves it in memory, and reading it back as one
 * vector stalls on store forwarding (kernels/iqgrid.h: 4x slower on AVX2). */
#define MVM_BLK_PRAGMA(x) _Pragma(#x)
#ifdef __CUDACC__
#include <cuda_fp16.h>
#define MVM_BLK_FN static __host__ __device__ __forceinline__
#define MVM_BLK_UNROLL(n) MVM_BLK_PRAGMA(unroll n)
#else
#define MVM_BLK_FN static inline __attribute__((always_inline))
#define MVM_BLK_UNROLL(n) MVM_BLK_PRAGMA(GCC unroll n)
#endif

#ifdef __cplusplus
#define MVM_BLK_ASSERT(c, msg) static_assert(c, msg)
#else
#define MVM_BLK_ASSERT(c, msg) _Static_assert(c, msg)
#endif

enum mvm_wtype {
    MVM_W_F32,
    MVM_W_F16,
    MVM_W_BF16,
    MVM_W_Q8_0,
    MVM_W_Q4_0,
    MVM_W_Q4_1,
    MVM_W_Q5_0,
    MVM_W_Q5_1,
    MVM_W_IQ4_NL,
    MVM_W_Q2_K,
    MVM_W_Q3_K,
    MVM_W_Q4_K,
    MVM_W_Q5_K,
    MVM_W_Q6_K,
    MVM_W_IQ4_XS,
    MVM_W_MXFP4,
    MVM_W_IQ2_XXS, /* the lattice-grid types (kernels/iqgrid.h), IQ2_XXS .. IQ1_M in this order */
    MVM_W_IQ2_XS,
    MVM_W_IQ2_S,
    MVM_W_IQ3_XXS,
    MVM_W_IQ3_S,
    MVM_W_IQ1_S,
    MVM_W_IQ1_M,
    MVM_W_COUNT
};

#define MVM_QBLOCK 32 /* elements per 32-element Q block, and channels per expert group */
#define MVM_QK_K 256  /* elements per K-quant super-block */

/* ggml's block_q8_0, also the activations of every 32-element Q type. Only 2-byte aligned:
 * a row of blocks sits wherever the file put it, so SIMD code loads the quants unaligned. */
typedef struct {
    uint16_t d;
    int8_t qs[MVM_QBLOCK];
} mvm_block_q8_0;

/* Where the parts of a 32-element Q block of type t lie (ggml's block_q4_0, _q4_1, _q5_0,
 * _q5_1, _q8_0, _iq4_nl, _mxfp4): every one starts with its scale d (an f16, or MXFP4's
 * one-byte power of two, mvm_k_block_scale); the min m (x = d * q + m) at byte m, the fifth
 * bits (a little-endian u32, bit j for element j) at byte qh, the quants at byte qs; 0
 * where the block has no such part. bias is subtracted from the unsigned quants of the
 * types without a min (x = d * (q - bias)). Q8_0's quants are int8 at byte 2. */
typedef struct {
    uint8_t m, qh, qs, bias;
} mvm_k_qlayout;

MVM_BLK_FN mvm_k_qlayout mvm_k_qlay(enum mvm_wtype t)
{
    mvm_k_qlayout L = {0, 0, 2, 0}; /* Q8_0, and IQ4_NL's nibbles */
    if (t == MVM_W_Q4_0)
        L.bias = 8;
    else if (t == MVM_W_Q4_1)
        L.m = 2, L.qs = 4;
    else if (t == MVM_W_Q5_0)
        L.qh = 2, L.qs = 6, L.bias = 16;
    else if (t == MVM_W_Q5_1)
        L.m = 2, L.qh = 4, L.qs = 8;
    else if (t == MVM_W_MXFP4)
        L.qs = 1;
    return L;
}

/* IQ4_NL's quant values (ggml-common.h's kvalues_iq4nl: -127, -104, -83, -65, -49, -35,
 * -22, -10, 1, 13, 25, 38, 53, 69, 89, 113), indexed by the nibble, as the bytes of two
 * little-endian words: a constant that host and device code read alike (and the AVX2 level
 * loads as a vector). */
#define MVM_K_IQ4NL_LO 0xF6EADDCFBFAD9881ull
#define MVM_K_IQ4NL_HI 0x7159453526190D01ull

/* MXFP4's (ggml-common.h's kvalues_mxfp4: the E2M1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and
 * their negatives, doubled to integers: 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8,
 * -12; the block's scale is halved to match, mvm_k_block_scale), the same way. */
#define MVM_K_MXFP4_LO 0x0C08060403020100ull
#define MVM_K_MXFP4_HI 0xF4F8FAFCFDFEFF00ull

/* The table types: a block's nibbles index a fixed table of 16 int8 values. */
MVM_BLK_FN int mvm_k_is_table(enum mvm_wtype t)
{
    return t == MVM_W_IQ4_NL || t == MVM_W_MXFP4;
}

/* The value of `nibble` in the table of table type t (IQ4_NL or MXFP4). */
MVM_BLK_FN int mvm_k_table(enum mvm_wtype t, unsigned nibble)
{
    const int mx = t == MVM_W_MXFP4;
#ifdef __CUDA_ARCH__
    const uint64_t w = nibble < 8 ? (mx ? MVM_K_MXFP4_LO : MVM_K_IQ4NL_LO)
                                  : (mx ? MVM_K_MXFP4_HI : MVM_K_IQ4NL_HI);
    return (int8_t)(w >> (8 * (nibble & 7)));
#else
    /* tables made of the same words: the host compiler vectorizes their lookups (the
     * shifts cost the portable level 40%) */
#define MVM_K_BYTE(w, i) (int8_t)((w) >> (8 * (i)))
#define MVM_K_ROW(lo, hi)                                                                      \
    {MVM_K_BYTE(lo, 0), MVM_K_BYTE(lo, 1), MVM_K_BYTE(lo, 2), MVM_K_BYTE(lo, 3),               \
     MVM_K_BYTE(lo, 4), MVM_K_BYTE(lo, 5), MVM_K_BYTE(lo, 6), MVM_K_BYTE(lo, 7),               \
     MVM_K_BYTE(hi, 0), MVM_K_BYTE(hi, 1), MVM_K_BYTE(hi, 2), MVM_K_BYTE(hi, 3),               \
     MVM_K_BYTE(hi, 4), MVM_K_BYTE(hi, 5), MVM_K_BYTE(hi, 6), MVM_K_BYTE(hi, 7)}
    static const int8_t values[2][16] = {MVM_K_ROW(MVM_K_IQ4NL_LO, MVM_K_IQ4NL_HI),
                                         MVM_K_ROW(MVM_K_MXFP4_LO, MVM_K_MXFP4_HI)};
#undef MVM_K_ROW
#undef MVM_K_BYTE
    return values[mx][nibble];
#endif
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
/* IQ4_XS (ggml's block_iq4_xs): IQ4_NL's table in 8 sub-blocks of 32 with 6-bit scales.
 * Sub-block i takes the low (i even) or high nibble of scales_l[i / 2] as the scale's low 4
 * bits and bits 2i, 2i+1 of scales_h as its top 2, x = d·(s - 32)·table[q]; its element
 * 32i + l is the low (l < 16) or high nibble of qs[16i + l % 16]. */
typedef struct {
    uint16_t d, scales_h;
    uint8_t scales_l[MVM_QK_K / 64];
    uint8_t qs[MVM_QK_K / 2];
} mvm_block_iq4_xs;
/* x = d * q; bsums[i] = the sum of qs[16i .. 16i+15] (the K dot products' min terms). */
typedef struct {
    float d;
    int8_t qs[MVM_QK_K];
    int16_t bsums[MVM_QK_K / 16];
} mvm_block_q8_K;
MVM_BLK_ASSERT(sizeof(mvm_block_q8_0) == 34 && sizeof(mvm_block_q2_K) == 84 &&
                   sizeof(mvm_block_q3_K) == 110 && sizeof(mvm_block_q4_K) == 144 &&
                   sizeof(mvm_block_q5_K) == 176 && sizeof(mvm_block_q6_K) == 210 &&
                   sizeof(mvm_block_iq4_xs) == 136 && sizeof(mvm_block_q8_K) == 292,
               "ggml block sizes");

/* The 32-element Q types, whose activations are Q8_0 blocks. */
MVM_BLK_FN int mvm_k_is_q(enum mvm_wtype t)
{
    return t == MVM_W_Q8_0 || t == MVM_W_Q4_0 || t == MVM_W_Q4_1 || t == MVM_W_Q5_0 ||
           t == MVM_W_Q5_1 || mvm_k_is_table(t);
}

/* The lattice-grid types (kernels/iqgrid.h). */
MVM_BLK_FN int mvm_k_is_iqgrid(enum mvm_wtype t)
{
    return t >= MVM_W_IQ2_XXS && t <= MVM_W_IQ1_M;
}

/* The K-quants and the other super-block types, whose activations are Q8_K blocks. */
MVM_BLK_FN int mvm_k_is_k(enum mvm_wtype t)
{
    return t == MVM_W_Q2_K || t == MVM_W_Q3_K || t == MVM_W_Q4_K || t == MVM_W_Q5_K ||
           t == MVM_W_Q6_K || t == MVM_W_IQ4_XS || mvm_k_is_iqgrid(t);
}

/* Bytes of one block of type t as the expert's down slot holds it: 32 elements of a float
 * type, one Q block, or one K super-block. */
MVM_BLK_FN uint32_t mvm_k_block_bytes(enum mvm_wtype t)
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
    case MVM_W_IQ4_XS: return sizeof(mvm_block_iq4_xs);
    case MVM_W_MXFP4: return 17;
    case MVM_W_IQ2_XXS: return 66;
    case MVM_W_IQ2_XS: return 74;
    case MVM_W_IQ2_S: return 82;
    case MVM_W_IQ3_XXS: return 98;
    case MVM_W_IQ3_S: return 110;
    case MVM_W_IQ1_S: return 50;
    case MVM_W_IQ1_M: return 56;
    default: return 2 * MVM_QBLOCK;
    }
}

/* Elements per block of type t: 1 for float types, 32 for the Q types, 256 for K-quants.
 * Every row length of type t is a multiple of it. */
MVM_BLK_FN size_t mvm_k_block_elems(enum mvm_wtype t)
{
    return mvm_k_is_k(t) ? MVM_QK_K : mvm_k_is_q(t) ? MVM_QBLOCK : 1;
}

/* Bytes of n elements of type t; n must be a multiple of mvm_k_block_elems(t). */
MVM_BLK_FN size_t mvm_k_row_bytes(enum mvm_wtype t, size_t n)
{
    switch (t) {
    case MVM_W_F32: return n * 4;
    case MVM_W_F16:
    case MVM_W_BF16: return n * 2;
    default: /* a Q or K type, whose block is mvm_k_block_bytes */
        return (unsigned)t < MVM_W_COUNT ? n / mvm_k_block_elems(t) * mvm_k_block_bytes(t) : 0;
    }
}

/* Bytes of an activation vector of n elements as the dot products of type t take it: n
 * floats, n / 32 Q8_0 blocks or n / 256 Q8_K blocks. */
MVM_BLK_FN size_t mvm_k_act_bytes(enum mvm_wtype t, size_t n)
{
    return mvm_k_is_k(t)   ? n / MVM_QK_K * sizeof(mvm_block_q8_K)
           : mvm_k_is_q(t) ? mvm_k_row_bytes(MVM_W_Q8_0, n)
                           : n * 4;
}

/* The gated linear unit between an expert's gate/up and down products: SwiGLU, silu(g) * u,
 * or gpt-oss's (llama.cpp's swiglu_oai, Hugging Face's GptOssExperts): gate and up biased,
 * g clamped to at most 7 and u to [-7, 7], then g * sigmoid(1.702 g) * (u + 1). */
enum mvm_k_glu { MVM_GLU_SILU, MVM_GLU_OAI };
#define MVM_K_OAI_ALPHA 1.702f
#define MVM_K_OAI_LIMIT 7.0f

/* The types of a channel-major expert (kernels/cpu/kernels.h has the layout): gate and up
 * share one, down may have another; its gated linear unit; and whether its groups' rows are
 * in the CPU's tiles (kernels/cpu/kernels.h, "Expert tiles"; the device kernels never see
 * a tiled expert). */
typedef struct mvm_k_expert_fmt {
    enum mvm_wtype gate_up, down;
    enum mvm_k_glu glu;
    int tiles;
} mvm_k_expert_fmt;

/* Channels per group: 32, or 256 when down is a K-quant, whose blocks span 256 channels. */
MVM_BLK_FN size_t mvm_k_expert_group_channels(mvm_k_expert_fmt f)
{
    return mvm_k_is_k(f.down) ? MVM_QK_K : MVM_QBLOCK;
}

/* Bytes of one group: gate and up rows, down slots, and with MVM_GLU_OAI the group's gate
 * and up biases (G floats each) after them, so that they move with the expert. */
MVM_BLK_FN size_t mvm_k_expert_group_bytes(mvm_k_expert_fmt f, size_t n_embd)
{
    const size_t g = mvm_k_expert_group_channels(f);
    return 2 * g * mvm_k_row_bytes(f.gate_up, n_embd) + n_embd * mvm_k_row_bytes(f.down, g) +
           (f.glu == MVM_GLU_OAI ? 2 * g * sizeof(float) : 0);
}

/* gpt-oss's unit on one channel, g and u biased already: llama.cpp's swiglu_oai in its order
 * of operations (x / (1 + exp(alpha * -x)) * (y + 1)), so that the CPU and the device
 * (kernels/cpu/expert.c, kernels/cuda/expert.cu) compute the same float. */
MVM_BLK_FN float mvm_k_glu_oai(float g, float u)
{
    g = g < MVM_K_OAI_LIMIT ? g : MVM_K_OAI_LIMIT;
    u = u < -MVM_K_OAI_LIMIT ? -MVM_K_OAI_LIMIT : u > MVM_K_OAI_LIMIT ? MVM_K_OAI_LIMIT : u;
    return g / (1.0f + expf(MVM_K_OAI_ALPHA * -g)) * (u + 1.0f);
}

/* ---- element conversions ---------------------------------------------------------------- */

MVM_BLK_FN uint32_t mvm_k_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

MVM_BLK_FN float mvm_k_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE half -> float: the device's conversion; on the host ggml's ggml_compute_fp16_to_fp32
 * (exact for every input, as the device's is: normals by rescaling the exponent,
 * subnormals by the magic-bias subtraction). */
MVM_BLK_FN float mvm_k_h2f(uint16_t h)
{
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(h));
#else
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const float normalized = mvm_k_u2f((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    const float denormalized = mvm_k_u2f((two_w >> 17) | (126u << 23)) - 0.5f;
    return mvm_k_u2f(sign | (two_w < (1u << 27) ? mvm_k_f2u(denormalized) : mvm_k_f2u(normalized)));
#endif
}

/* float -> IEEE half, round to nearest even: the device's conversion; on the host
 * ggml_compute_fp32_to_fp16 (the FP16 library's bit-twiddling version): scaling |f| by
 * 2^112 then 2^-110 lets the float adder do the rounding of the mantissa (including into
 * the half subnormals, and overflow to inf at 65520); nan becomes a quiet nan with the sign
 * kept. Needs the default rounding mode, as ggml does. */
MVM_BLK_FN uint16_t mvm_k_f2h(float f)
{
#ifdef __CUDA_ARCH__
    return __half_as_ushort(__float2half_rn(f));
#else
    float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
    const uint32_t w = mvm_k_f2u(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u)
        bias = 0x71000000u;
    base = mvm_k_u2f((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = mvm_k_f2u(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
#endif
}

MVM_BLK_FN float mvm_k_bf2f(uint16_t h)
{
    return mvm_k_u2f((uint32_t)h << 16);
}

/* Element i of a row of float type t (F32, F16 or BF16) as F32. */
MVM_BLK_FN float mvm_k_elem(enum mvm_wtype t, const void *row, size_t i)
{
    switch (t) {
    case MVM_W_F16: return mvm_k_h2f(((const uint16_t *)row)[i]);
    case MVM_W_BF16: return mvm_k_bf2f(((const uint16_t *)row)[i]);
    default: return ((const float *)row)[i];
    }
}

/* The f16 at byte `at` of a block: a Q block's scale (at 0) or min. */
MVM_BLK_FN uint16_t mvm_k_block_h(const void *blk, size_t at)
{
    uint16_t h;
    memcpy(&h, (const uint8_t *)blk + at, sizeof h);
    return h;
}

/* The f16 scale of a Q block (every one but MXFP4's starts with it). */
MVM_BLK_FN uint16_t mvm_k_block_d(const void *blk)
{
    return mvm_k_block_h(blk, 0);
}

/* ggml's GGML_E8M0_TO_FP32_HALF: the E8M0 exponent e (2^(e - 127)) halved, 2^(e - 128),
 * exactly (e < 2 is a subnormal float). */
MVM_BLK_FN float mvm_k_e8m0_half(uint8_t e)
{
    return mvm_k_u2f(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* The scale of a Q block of type t as a float: MXFP4's power of two, the others' f16. */
MVM_BLK_FN float mvm_k_block_scale(enum mvm_wtype t, const uint8_t *blk)
{
    return t == MVM_W_MXFP4 ? mvm_k_e8m0_half(blk[0]) : mvm_k_h2f(mvm_k_block_d(blk));
}

/* ---- activation blocks (llama.cpp's reference rounding) ---------------------------------- */

/* quantize_row_q8_0_ref on 32 floats: d = amax / 127, q = round-half-away(x * (1/d)). */
MVM_BLK_FN void mvm_k_q8_0_block(const float *x, mvm_block_q8_0 *y)
{
    float amax = 0.0f;
    for (int j = 0; j < MVM_QBLOCK; j++)
        amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]); /* ggml's MAX: a nan propagates */
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y->d = mvm_k_f2h(d);
    for (int j = 0; j < MVM_QBLOCK; j++)
        y->qs[j] = (int8_t)roundf(x[j] * id);
}

/* The value of largest magnitude among x[0..n), the first on ties (0 when all are 0): the
 * symmetric quantizers map it onto the end of their range, as ggml's do (Q8_K here; Q4_0,
 * Q5_0, IQ4_NL, Q3_K and IQ4_XS in kernels/cpu). */
MVM_BLK_FN float mvm_k_signed_max(const float *x, int n)
{
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

/* quantize_row_q8_K_ref on 256 floats: the value of largest magnitude (the first on ties)
 * maps to -127, q = nearest (half to even) of x * (-127 / it), at most 127. */
MVM_BLK_FN void mvm_k_q8_K_block(const float *x, mvm_block_q8_K *y)
{
    const float max = mvm_k_signed_max(x, MVM_QK_K);
    memset(y, 0, sizeof *y);
    if (max == 0)
        return;
    const float iscale = -127.f / max;
    for (int j = 0; j < MVM_QK_K; j++) {
        const int v = (int)lrintf(iscale * x[j]);
        y->qs[j] = (int8_t)(v < 127 ? v : 127);
    }
    for (int j = 0; j < MVM_QK_K / 16; j++) {
        int sum = 0;
        for (int i = 0; i < 16; i++)
            sum += y->qs[16 * j + i];
        y->bsums[j] = (int16_t)sum;
    }
    y->d = 1 / iscale;
}

/* ---- the 32-element Q blocks ------------------------------------------------------------ */

/* A Q block's float from its integer sums: sum = Σ q_w·q_a with the bias taken off, asum =
 * Σ q_a, ws and wm the weight block's scale and min (wm read only when it has one), da the
 * activation block's scale. The ARM levels, which compute the same integers, round them here
 * too (kernels/cpu/neon.h). */
MVM_BLK_FN float mvm_k_qfloat(int has_min, int32_t sum, int32_t asum, float ws, float wm,
                              float da)
{
    const float s = (float)sum * (ws * da);
    return has_min ? s + (float)asum * (wm * da) : s;
}

/* One Q block (type t) against one Q8_0 activation block: d_w d_a sum(q_w q_a), plus for
 * the types with a min m_w d_a sum(q_a) (ggml takes that sum from its Q8_1 activations).
 * The bias of Q4_0/Q5_0 comes off as bias sum(q_a), so that the loop over the unsigned
 * quants is the same for all four 4- and 5-bit types (and the compiler vectorizes it). */
MVM_BLK_FN float mvm_k_block_q(enum mvm_wtype t, const uint8_t *blk, const mvm_block_q8_0 *a)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    int32_t sum = 0, asum = 0;
    for (int j = 0; j < MVM_QBLOCK; j++)
        asum += a->qs[j];
    if (t == MVM_W_Q8_0) {
        for (int j = 0; j < MVM_QBLOCK; j++)
            sum += (int8_t)blk[L.qs + j] * a->qs[j];
    } else if (mvm_k_is_table(t)) {
        for (int j = 0; j < MVM_QBLOCK / 2; j++)
            sum += mvm_k_table(t, blk[L.qs + j] & 0x0F) * a->qs[j] +
                   mvm_k_table(t, blk[L.qs + j] >> 4) * a->qs[j + 16];
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
    return mvm_k_qfloat(L.m != 0, sum, asum, mvm_k_block_scale(t, blk),
                        L.m ? mvm_k_h2f(mvm_k_block_h(blk, L.m)) : 0, mvm_k_h2f(a->d));
}

/* ---- the K super-blocks ----------------------------------------------------------------- */

#include "kernels/iqgrid.h"

/* Scale and min j (< 8) of a Q4_K / Q5_K super-block, from their 6-bit packing: j < 4 in
 * the low 6 bits of bytes j and j + 4; j >= 4 in the nibbles of byte j + 4 with the top two
 * bits in bytes j - 4 and j. */
MVM_BLK_FN void mvm_k_scale_min(const uint8_t *q, int j, uint8_t *sc, uint8_t *m)
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
MVM_BLK_FN void mvm_k_q3_scales(const uint8_t *scales, uint8_t out[16])
{
    uint32_t w[3], s4[4];
    memcpy(w, scales, sizeof w);
    s4[0] = (w[0] & 0x0f0f0f0fu) | (w[2] & 0x03030303u) << 4;
    s4[1] = (w[1] & 0x0f0f0f0fu) | (w[2] >> 2 & 0x03030303u) << 4;
    s4[2] = (w[0] >> 4 & 0x0f0f0f0fu) | (w[2] >> 4 & 0x03030303u) << 4;
    s4[3] = (w[1] >> 4 & 0x0f0f0f0fu) | (w[2] >> 6 & 0x03030303u) << 4;
    memcpy(out, s4, sizeof s4);
}

/* Σ over 32 elements of (the 4 bits of q at `shift`, plus bit `hbit` of qh as the fifth
 * when qh is not NULL) · a. */
MVM_BLK_FN int32_t mvm_k_dot_32(const uint8_t *q, int shift, const uint8_t *qh, int hbit,
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

/* IQ4_XS's scale of sub-block i (< 8), unsigned (the value is it - 32). */
MVM_BLK_FN int mvm_k_iq4xs_scale(const mvm_block_iq4_xs *x, int i)
{
    return ((x->scales_l[i / 2] >> (4 * (i % 2))) & 15) | ((x->scales_h >> (2 * i)) & 3) << 4;
}

/* Q2_K's and Q3_K's 16 sub-block scales as the chunks take them: Q2_K's bytes as they are
 * (scale and min nibbles), Q3_K's unpacked (mvm_k_q3_scales) into s; nothing for the
 * others. */
MVM_BLK_FN const uint8_t *mvm_k_kscales(enum mvm_wtype t, const uint8_t *blk, uint8_t s[16])
{
    if (t == MVM_W_Q3_K)
        mvm_k_q3_scales(((const mvm_block_q3_K *)blk)->scales, s);
    return t == MVM_W_Q2_K ? ((const mvm_block_q2_K *)blk)->scales : s;
}

/* The integer sums of chunk c (< 8: elements 32c .. 32c + 31) of the super-block blk of type
 * t against its Q8_K block: *sum += Σ scale·(q·a) with the offsets applied, *msum += Σ
 * min·bsum (Q2_K, Q4_K, Q5_K). s16: mvm_k_kscales's. */
MVM_BLK_FN void mvm_k_kchunk(enum mvm_wtype t, const uint8_t *blk, const uint8_t *s16,
                             const mvm_block_q8_K *a, int c, int32_t *sum, int32_t *msum)
{
    const int8_t *aq = a->qs + 32 * c;
    if (mvm_k_is_iqgrid(t)) {
        int8_t q[32];
        int sc[2];
        mvm_k_iq_chunk(t, blk, c, q, sc);
        for (int half = 0; half < 2; half++) {
            int32_t s = 0;
            for (int l = 16 * half; l < 16 * half + 16; l++)
                s += q[l] * aq[l];
            *sum += sc[half] * s;
        }
    } else if (t == MVM_W_Q4_K || t == MVM_W_Q5_K) {
        /* sub-block c: the low (c even) or high nibbles of qs[32 (c / 2) ..] */
        const int k45 = t == MVM_W_Q5_K;
        const uint8_t *scales = k45 ? ((const mvm_block_q5_K *)blk)->scales
                                    : ((const mvm_block_q4_K *)blk)->scales;
        const uint8_t *qs = k45 ? ((const mvm_block_q5_K *)blk)->qs
                                : ((const mvm_block_q4_K *)blk)->qs;
        uint8_t sc, m;
        mvm_k_scale_min(scales, c, &sc, &m);
        *sum += sc * mvm_k_dot_32(qs + 32 * (c / 2), 4 * (c % 2),
                                  k45 ? ((const mvm_block_q5_K *)blk)->qh : NULL, c, aq);
        *msum += m * (a->bsums[2 * c] + a->bsums[2 * c + 1]);
    } else if (t == MVM_W_IQ4_XS) {
        /* sub-block c: the nibbles of qs[16c ..], low ones first */
        const mvm_block_iq4_xs *x = (const mvm_block_iq4_xs *)blk;
        const uint8_t *qs = x->qs + 16 * c;
        int32_t s = 0;
        for (int l = 0; l < 16; l++)
            s += mvm_k_table(MVM_W_IQ4_NL, qs[l] & 15) * aq[l] +
                 mvm_k_table(MVM_W_IQ4_NL, qs[l] >> 4) * aq[l + 16];
        *sum += (mvm_k_iq4xs_scale(x, c) - 32) * s;
    } else if (t == MVM_W_Q6_K) {
        /* sub-blocks 2c, 2c + 1: elements 128h + 32k + l with h = c / 4, k = c % 4 */
        const mvm_block_q6_K *x = (const mvm_block_q6_K *)blk;
        const int h = c / 4, k = c % 4;
        const uint8_t *ql = x->ql + 64 * h + 32 * (k & 1), *qh = x->qh + 32 * h;
        const int shift = 4 * (k >> 1);
        for (int half = 0; half < 2; half++) {
            int32_t s = 0;
            for (int l = 16 * half; l < 16 * half + 16; l++)
                s += (((ql[l] >> shift) & 15) | (((qh[l] >> (2 * k)) & 3) << 4)) * aq[l];
            *sum += x->scales[2 * c + half] * (s - 32 * a->bsums[2 * c + half]);
        }
    } else {
        /* Q2_K / Q3_K sub-blocks i = 2c + half: bits 2j of qs[32h + 16·half + l] with h = c / 4,
         * j = c % 4, and for Q3_K bit c (= 4h + j) of hmask[16·half + l] as the third */
        const int q3 = t == MVM_W_Q3_K;
        const uint8_t *qs = q3 ? ((const mvm_block_q3_K *)blk)->qs
                               : ((const mvm_block_q2_K *)blk)->qs;
        const int h = c / 4, j = c % 4;
        for (int half = 0; half < 2; half++) {
            const int i = 2 * c + half;
            const uint8_t *q = qs + 32 * h + 16 * half;
            const int8_t *ai = aq + 16 * half;
            int32_t s = 0;
            if (q3) {
                const uint8_t *hm = ((const mvm_block_q3_K *)blk)->hmask + 16 * half;
                for (int l = 0; l < 16; l++)
                    s += (((q[l] >> (2 * j)) & 3) | ((hm[l] >> c) & 1) << 2) * ai[l];
                *sum += (s16[i] - 32) * (s - 4 * a->bsums[i]);
            } else {
                for (int l = 0; l < 16; l++)
                    s += ((q[l] >> (2 * j)) & 3) * ai[l];
                *sum += (s16[i] & 15) * s;
                *msum += (s16[i] >> 4) * a->bsums[i];
            }
        }
    }
}

/* a.d · (d · sum - dmin · msum): the super-block's float scales on integer sums of its
 * chunks (dmin is 0 for Q3_K, Q6_K, IQ4_XS and the grid types, whose msum is 0; the grid
 * types' power of two f comes last, an exact scaling). */
MVM_BLK_FN float mvm_k_kscale(enum mvm_wtype t, const uint8_t *blk, const mvm_block_q8_K *a,
                              int32_t sum, int32_t msum)
{
    uint16_t d, dmin = 0;
    switch (t) {
    case MVM_W_Q2_K:
        d = ((const mvm_block_q2_K *)blk)->d, dmin = ((const mvm_block_q2_K *)blk)->dmin;
        break;
    case MVM_W_Q3_K: d = ((const mvm_block_q3_K *)blk)->d; break;
    case MVM_W_Q6_K: d = ((const mvm_block_q6_K *)blk)->d; break;
    case MVM_W_IQ4_XS: d = ((const mvm_block_iq4_xs *)blk)->d; break;
    case MVM_W_Q4_K:
    case MVM_W_Q5_K: d = mvm_k_block_h(blk, 0), dmin = mvm_k_block_h(blk, 2); break;
    default: /* the grid types */
        return a->d * (mvm_k_h2f(mvm_k_iq_d(t, blk)) * (float)sum) * mvm_k_iq_factor(t);
    }
    return a->d * (mvm_k_h2f(d) * (float)sum - mvm_k_h2f(dmin) * (float)msum);
}

/* One K super-block of type t against one Q8_K block. */
MVM_BLK_FN float mvm_k_kblock(enum mvm_wtype t, const uint8_t *blk, const mvm_block_q8_K *a)
{
    uint8_t s[16];
    const uint8_t *s16 = mvm_k_kscales(t, blk, s);
    int32_t sum = 0, msum = 0;
    for (int c = 0; c < 8; c++)
        mvm_k_kchunk(t, blk, s16, a, c, &sum, &msum);
    return mvm_k_kscale(t, blk, a, sum, msum);
}

#endif
