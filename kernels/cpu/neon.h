/*
 * The 64-bit ARM levels' kernels (AArch64 Advanced SIMD): the `neon` level (dot_neon.c;
 * ARMv8.0, so every AArch64 CPU) and the `dotprod` level (dot_dotprod.c, which defines
 * MVM_K_DOTPROD 1 first: ARMv8.2's SDOT, which Neoverse N1, V1 and V2 have — Graviton 2 to 4,
 * Grace, Ampere Altra — and Apple's M cores). The two differ only in the int8 dot product
 * (neon_dot), which gives the same integers either way. dot_dotprod.c is compiled for
 * ARMv8.2 with SDOT as a whole (CMakeLists.txt), not by target attributes as the x86 levels
 * are: clang up to 15 declares the SDOT intrinsic only for a file compiled for it.
 *
 * The Q and K types compute kernels/blocks.h's integers (a Q block's Σ q_w·q_a, a K
 * super-block's scaled sub-block sums and min terms) and round them with the portable level's
 * own expressions (mvm_k_qfloat, mvm_k_kscale), adding the blocks into each output in the same
 * order: so their results are the portable level's, bit for bit, and test_kernels checks that.
 * Unlike the x86 levels' maddubs, whose unsigned-by-signed products are why those levels bend
 * the quants into unsigned ranges, AArch64's byte products are signed by signed: every weight
 * is unpacked to its signed value (bias, offset or table applied) in int8, and one product
 * serves all types. The float types keep four vector accumulators (their order differs from
 * the portable level's; test_kernels bounds the error as for every level).
 *
 * Every kernel takes n_tok tokens (dispatch.h): the weights are unpacked once per block, and
 * every token then does what it would do alone.
 *
 * Not measured: no ARM machine has run these (tests/cross/aarch64.sh runs them under
 * qemu-user, which checks results, not speed). Hence nothing here is tuned for speed beyond
 * the obvious — no software prefetch (the x86 levels' was measured to help there; ARM's
 * hardware prefetchers differ), one super-block's 256 quants unpacked into 16 registers.
 */
#ifndef MVM_KERNELS_CPU_NEON_H
#define MVM_KERNELS_CPU_NEON_H

#include <arm_neon.h>

#include "kernels/cpu/dispatch.h"

#ifndef MVM_K_DOTPROD
#define MVM_K_DOTPROD 0
#endif
#define NEON_INLINE MVM_K_INLINE

/* Token i's activations, as `type`, of n_tok at base, stride bytes apart. */
#define NEON_TOK(type, base, stride, i) ((const type *)((const uint8_t *)(base) + (i) * (stride)))

/* An f16 as a float, by the hardware's conversion (exact, as mvm_k_h2f is). */
NEON_INLINE float neon_h2f(uint16_t h)
{
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* acc plus, in each int32 lane, four products of signed bytes of a and b (which four differs
 * between the two forms; the lanes' total does not). Without SDOT: the products widened to
 * int16 (at most 128·128: no overflow), then pairs of them added into the lanes. */
NEON_INLINE int32x4_t neon_dot(int32x4_t acc, int8x16_t a, int8x16_t b)
{
#if MVM_K_DOTPROD
    return vdotq_s32(acc, a, b);
#else
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}

/* ---- float weights ---------------------------------------------------------------------- */

/* 4 elements of float type t at p, as F32. */
NEON_INLINE float32x4_t neon_load4(enum mvm_wtype t, const uint8_t *p)
{
    switch (t) {
    case MVM_W_F16: return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p)));
    case MVM_W_BF16: return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)p), 16));
    default: return vld1q_f32((const float *)p);
    }
}

NEON_INLINE float neon_dot_float(enum mvm_wtype t, const uint8_t *w, const float *a, size_t n)
{
    const size_t es = t == MVM_W_F32 ? 4 : 2;
    /* four accumulators: FMA latency times two pipes */
    float32x4_t s0 = vdupq_n_f32(0), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const uint8_t *p = w + i * es;
        s0 = vfmaq_f32(s0, neon_load4(t, p), vld1q_f32(a + i));
        s1 = vfmaq_f32(s1, neon_load4(t, p + 4 * es), vld1q_f32(a + i + 4));
        s2 = vfmaq_f32(s2, neon_load4(t, p + 8 * es), vld1q_f32(a + i + 8));
        s3 = vfmaq_f32(s3, neon_load4(t, p + 12 * es), vld1q_f32(a + i + 12));
    }
    for (; i + 4 <= n; i += 4)
        s0 = vfmaq_f32(s0, neon_load4(t, w + i * es), vld1q_f32(a + i));
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    for (; i < n; i++)
        s += mvm_k_elem(t, w, i) * a[i];
    return s;
}

MVM_K_DOTN_ONE_BY_ONE(, neon_dotn_float, neon_dot_float, float)

/* out += s * row (dispatch.h's axpy). */
NEON_INLINE void neon_axpy_float(enum mvm_wtype t, const uint8_t *row, float s, float *out,
                                 size_t n)
{
    const size_t es = t == MVM_W_F32 ? 4 : 2;
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(out + i, vfmaq_n_f32(vld1q_f32(out + i), neon_load4(t, row + i * es), s));
    for (; i < n; i++)
        out[i] += s * mvm_k_elem(t, row, i);
}

/* 4 partial sums of one 32-element block of float type t at p times the activations a. */
NEON_INLINE float32x4_t neon_block_float(enum mvm_wtype t, const uint8_t *p,
                                         const float32x4_t a[8])
{
    const size_t es = t == MVM_W_F32 ? 4 : 2;
    float32x4_t lo = vmulq_f32(neon_load4(t, p), a[0]);
    float32x4_t hi = vmulq_f32(neon_load4(t, p + 4 * es), a[1]);
    for (int k = 2; k < 8; k += 2) {
        lo = vfmaq_f32(lo, neon_load4(t, p + 4 * k * es), a[k]);
        hi = vfmaq_f32(hi, neon_load4(t, p + 4 * (k + 1) * es), a[k + 1]);
    }
    return vaddq_f32(lo, hi);
}

NEON_INLINE void neon_down_float(enum mvm_wtype t, const uint8_t *w, const float *act, float *out,
                                 size_t n)
{
    float32x4_t a[8];
    for (int k = 0; k < 8; k++)
        a[k] = vld1q_f32(act + 4 * k);
    const size_t bytes = mvm_k_block_bytes(t);
    size_t j = 0;
    /* four outputs a step, their partial sums reduced together by two rounds of pairwise
     * adds into one vector */
    for (; j + 4 <= n; j += 4) {
        const uint8_t *p = w + j * bytes;
        const float32x4_t v01 = vpaddq_f32(neon_block_float(t, p, a),
                                           neon_block_float(t, p + bytes, a));
        const float32x4_t v23 = vpaddq_f32(neon_block_float(t, p + 2 * bytes, a),
                                           neon_block_float(t, p + 3 * bytes, a));
        vst1q_f32(out + j, vaddq_f32(vld1q_f32(out + j), vpaddq_f32(v01, v23)));
    }
    for (; j < n; j++)
        out[j] += vaddvq_f32(neon_block_float(t, w + j * bytes, a));
}

MVM_K_DOWNN_ONE_BY_ONE(, neon_downn_float, neon_down_float, float)

/* ---- the 32-element Q types against Q8_0 activations ------------------------------------ */

/* The 16-entry int8 table of table type t (IQ4_NL, MXFP4). */
NEON_INLINE int8x16_t neon_table(enum mvm_wtype t)
{
    const int mx = t == MVM_W_MXFP4;
    return vcombine_s8(vcreate_s8(mx ? MVM_K_MXFP4_LO : MVM_K_IQ4NL_LO),
                       vcreate_s8(mx ? MVM_K_MXFP4_HI : MVM_K_IQ4NL_HI));
}

/* The fifth bits of a Q5_0/Q5_1 block, bit j of the little-endian u32 at p as 0x10 in byte
 * j of q[0] (j < 16) or q[1] (j - 16): each byte tests its bit in a copy of the u32's byte
 * j / 8. */
NEON_INLINE void neon_bits5(const uint8_t *p, uint8x16_t q[2])
{
    uint32_t h;
    memcpy(&h, p, sizeof h);
    const uint8x16_t word = vreinterpretq_u8_u32(vdupq_n_u32(h));
    const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
    const uint8x16_t idx01 = vcombine_u8(vdup_n_u8(0), vdup_n_u8(1));
    const uint8x16_t idx23 = vcombine_u8(vdup_n_u8(2), vdup_n_u8(3));
    const uint8x16_t fifth = vdupq_n_u8(0x10);
    q[0] = vandq_u8(vtstq_u8(vqtbl1q_u8(word, idx01), bit), fifth);
    q[1] = vandq_u8(vtstq_u8(vqtbl1q_u8(word, idx23), bit), fifth);
}

/* The 32 quants of a block of Q type t as signed bytes, elements 0..15 in q[0] and 16..31 in
 * q[1]: Q8_0's as they are, the table types' table values, the others' unsigned quants less
 * the bias (mvm_k_qunpack's values). */
NEON_INLINE void neon_qload(enum mvm_wtype t, const uint8_t *blk, int8x16_t q[2])
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    if (t == MVM_W_Q8_0) {
        q[0] = vld1q_s8((const int8_t *)(blk + L.qs));
        q[1] = vld1q_s8((const int8_t *)(blk + L.qs + 16));
        return;
    }
    const uint8x16_t b = vld1q_u8(blk + L.qs);
    uint8x16_t u[2] = {vandq_u8(b, vdupq_n_u8(0x0F)), vshrq_n_u8(b, 4)};
    if (mvm_k_is_table(t)) {
        q[0] = vqtbl1q_s8(neon_table(t), u[0]);
        q[1] = vqtbl1q_s8(neon_table(t), u[1]);
        return;
    }
    if (L.qh) {
        uint8x16_t h[2];
        neon_bits5(blk + L.qh, h);
        u[0] = vorrq_u8(u[0], h[0]);
        u[1] = vorrq_u8(u[1], h[1]);
    }
    q[0] = vsubq_s8(vreinterpretq_s8_u8(u[0]), vdupq_n_s8((int8_t)L.bias));
    q[1] = vsubq_s8(vreinterpretq_s8_u8(u[1]), vdupq_n_s8((int8_t)L.bias));
}

/* A Q block's weights, unpacked once for all tokens: the quants and the scale and min. */
typedef struct {
    int8x16_t q[2];
    float ws, wm;
} neon_qblk;

NEON_INLINE neon_qblk neon_qblock_load(enum mvm_wtype t, const uint8_t *blk)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    neon_qblk w;
    neon_qload(t, blk, w.q);
    w.ws = t == MVM_W_MXFP4 ? mvm_k_block_scale(t, blk) : neon_h2f(mvm_k_block_d(blk));
    w.wm = L.m ? neon_h2f(mvm_k_block_h(blk, L.m)) : 0;
    return w;
}

/* The block against one activation block: mvm_k_block_q's integers and rounding. */
NEON_INLINE float neon_qblock(enum mvm_wtype t, const neon_qblk *w, const mvm_block_q8_0 *a)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    const int8x16_t a0 = vld1q_s8(a->qs), a1 = vld1q_s8(a->qs + 16);
    const int32_t sum = vaddvq_s32(neon_dot(neon_dot(vdupq_n_s32(0), w->q[0], a0), w->q[1], a1));
    /* 16 bytes sum to at most 2048 in magnitude: vaddlvq's int16 holds them */
    const int32_t asum = L.m ? vaddlvq_s8(a0) + vaddlvq_s8(a1) : 0;
    return mvm_k_qfloat(L.m != 0, sum, asum, w->ws, w->wm, neon_h2f(a->d));
}

/* ---- the K super-blocks against Q8_K activations ---------------------------------------- */

/* A K super-block unpacked as 16 sub-blocks of 16: sub-block i holds elements 16i..16i+15
 * as signed bytes (Q3_K's -4 and Q6_K's -32 applied, IQ4_XS's table), with the integer scale
 * sc[i] and, for Q2_K, Q4_K and Q5_K, the min m[i] (a 32-element sub-block's scale and min
 * twice). Then Σ sc[i]·(q_i·a_i) and Σ m[i]·bsums[i] are mvm_k_kchunk's sums. The loaders
 * write the scales to an array, which neon_kload then loads as vectors. The loops that
 * fill and read it are unrolled on request, so that its quants can live in registers (16 of
 * AArch64's 32) rather than be stored and loaded again for each token. */
typedef struct {
    int8x16_t q[16];
    int32x4_t sc[4]; /* sc[i] in lane i % 4 of sc[i / 4] */
    int16_t m[16];
    int has_min;
} neon_kblk;

/* Q4_K / Q5_K (qh non-NULL): element 64k + l (l < 32) is the low nibble of qs[32k + l], 64k
 * + 32 + l its high nibble; Q5_K's fifth bits are bits 2k and 2k + 1 of qh[l]. */
NEON_INLINE void neon_kload_q45(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                                neon_kblk *k, int32_t sc16[16])
{
    const uint8x16_t nib = vdupq_n_u8(0x0F), fifth = vdupq_n_u8(0x10);
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        uint8_t sc, m;
        mvm_k_scale_min(scales, c, &sc, &m);
        sc16[2 * c] = sc16[2 * c + 1] = sc;
        k->m[2 * c] = k->m[2 * c + 1] = m;
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
#pragma GCC unroll 2
        for (int half = 0; half < 2; half++) {
            const uint8x16_t b = vld1q_u8(qs + 32 * j + 16 * half);
            uint8x16_t lo = vandq_u8(b, nib), hi = vshrq_n_u8(b, 4);
            if (qh) {
                const uint8x16_t h = vld1q_u8(qh + 16 * half);
                lo = vorrq_u8(lo, vandq_u8(vtstq_u8(h, vdupq_n_u8((uint8_t)(1u << 2 * j))), fifth));
                hi = vorrq_u8(hi, vandq_u8(vtstq_u8(h, vdupq_n_u8((uint8_t)(2u << 2 * j))), fifth));
            }
            k->q[4 * j + half] = vreinterpretq_s8_u8(lo);
            k->q[4 * j + 2 + half] = vreinterpretq_s8_u8(hi);
        }
    }
}

/* Q6_K: element 128h + 32k + l (k < 4) is the low (k < 2) or high nibble of
 * ql[64h + 32(k & 1) + l] with bits 2k, 2k + 1 of qh[32h + l] above it, less 32. */
NEON_INLINE void neon_kload_q6(const mvm_block_q6_K *x, neon_kblk *k, int32_t sc16[16])
{
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        sc16[i] = x->scales[i];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) { /* sub-block i = 8h + 2k + half */
        const int h = i / 8, kk = i / 2 % 4, half = i % 2;
        const uint8x16_t ql = vld1q_u8(x->ql + 64 * h + 32 * (kk & 1) + 16 * half);
        const uint8x16_t qh = vld1q_u8(x->qh + 32 * h + 16 * half);
        const uint8x16_t lo =
            vandq_u8(vshlq_u8(ql, vdupq_n_s8((int8_t)(-4 * (kk >> 1)))), vdupq_n_u8(15));
        const uint8x16_t hi =
            vandq_u8(vshlq_u8(qh, vdupq_n_s8((int8_t)(4 - 2 * kk))), vdupq_n_u8(0x30));
        k->q[i] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, hi)), vdupq_n_s8(32));
    }
}

/* Q2_K (hmask NULL) / Q3_K: sub-block 8h + 2j + half takes bits 2j, 2j + 1 of
 * qs[32h + 16·half + l]; Q3_K's third bit is bit 4h + j of hmask[16·half + l], and its quants
 * are less 4. */
NEON_INLINE void neon_kload_q23(const uint8_t *qs, const uint8_t *hmask, neon_kblk *k)
{
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) { /* sub-block i = 8h + 2j + half */
        const int h = i / 8, j = i / 2 % 4, half = i % 2;
        const uint8x16_t b = vld1q_u8(qs + 32 * h + 16 * half);
        uint8x16_t v = vandq_u8(vshlq_u8(b, vdupq_n_s8((int8_t)(-2 * j))), vdupq_n_u8(3));
        int8x16_t q = vreinterpretq_s8_u8(v);
        if (hmask) {
            const uint8x16_t hm = vld1q_u8(hmask + 16 * half);
            v = vorrq_u8(v, vandq_u8(vtstq_u8(hm, vdupq_n_u8((uint8_t)(1u << (4 * h + j)))),
                                     vdupq_n_u8(4)));
            q = vsubq_s8(vreinterpretq_s8_u8(v), vdupq_n_s8(4));
        }
        k->q[i] = q;
    }
}

/* IQ4_XS: sub-block c (of 32) is IQ4_NL's table at the low, then the high, nibbles of
 * qs[16c ..]. */
NEON_INLINE void neon_kload_iq4xs(const mvm_block_iq4_xs *x, neon_kblk *k, int32_t sc16[16])
{
    const int8x16_t table = neon_table(MVM_W_IQ4_NL);
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        const uint8x16_t b = vld1q_u8(x->qs + 16 * c);
        k->q[2 * c] = vqtbl1q_s8(table, vandq_u8(b, vdupq_n_u8(0x0F)));
        k->q[2 * c + 1] = vqtbl1q_s8(table, vshrq_n_u8(b, 4));
        sc16[2 * c] = sc16[2 * c + 1] = mvm_k_iq4xs_scale(x, c) - 32;
    }
}

/* The lattice-grid types: each chunk decoded by kernels/iqgrid.h (mvm_k_iq_decode), 16
 * elements a vector: two grid entries side by side; IQ2/IQ3 negate the elements whose sign
 * bit a lane-wise bit test finds ((g ^ m) - m); IQ1 adds each group's delta to 8·g. */
NEON_INLINE void neon_kload_iqgrid(enum mvm_wtype t, const uint8_t *blk, neon_kblk *k,
                                   int32_t sc16[16])
{
    const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        const mvm_k_iq_raw r = mvm_k_iq_decode(t, blk, c);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const int8x16_t g = vreinterpretq_s8_u64(
                vcombine_u64(vcreate_u64(r.g[2 * h]), vcreate_u64(r.g[2 * h + 1])));
            if (mvm_k_is_iq1(t)) {
                const int8x16_t delta =
                    vcombine_s8(vdup_n_s8((int8_t)(1 - 2 * (int)(r.dneg >> 2 * h & 1))),
                                vdup_n_s8((int8_t)(1 - 2 * (int)(r.dneg >> (2 * h + 1) & 1))));
                k->q[2 * c + h] = vaddq_s8(vshlq_n_s8(g, 3), delta);
            } else {
                const uint8x16_t b = vcombine_u8(vdup_n_u8((uint8_t)(r.neg >> 16 * h)),
                                                 vdup_n_u8((uint8_t)(r.neg >> (16 * h + 8))));
                const int8x16_t m = vreinterpretq_s8_u8(vtstq_u8(b, bit));
                k->q[2 * c + h] = vsubq_s8(veorq_s8(g, m), m);
            }
        }
        sc16[2 * c] = r.sc[0];
        sc16[2 * c + 1] = r.sc[1];
    }
}

NEON_INLINE void neon_kload(enum mvm_wtype t, const uint8_t *blk, neon_kblk *k)
{
    k->has_min = t == MVM_W_Q2_K || t == MVM_W_Q4_K || t == MVM_W_Q5_K;
    int32_t sc16[16];
    switch (t) {
    case MVM_W_Q2_K: {
        const mvm_block_q2_K *x = (const mvm_block_q2_K *)blk;
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            sc16[i] = x->scales[i] & 15;
            k->m[i] = x->scales[i] >> 4;
        }
        neon_kload_q23(x->qs, NULL, k);
        break;
    }
    case MVM_W_Q3_K: {
        const mvm_block_q3_K *x = (const mvm_block_q3_K *)blk;
        uint8_t s[16];
        mvm_k_q3_scales(x->scales, s);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            sc16[i] = s[i] - 32;
        neon_kload_q23(x->qs, x->hmask, k);
        break;
    }
    case MVM_W_Q4_K: {
        const mvm_block_q4_K *x = (const mvm_block_q4_K *)blk;
        neon_kload_q45(x->scales, x->qs, NULL, k, sc16);
        break;
    }
    case MVM_W_Q5_K: {
        const mvm_block_q5_K *x = (const mvm_block_q5_K *)blk;
        neon_kload_q45(x->scales, x->qs, x->qh, k, sc16);
        break;
    }
    case MVM_W_IQ4_XS: neon_kload_iq4xs((const mvm_block_iq4_xs *)blk, k, sc16); break;
    case MVM_W_Q6_K: neon_kload_q6((const mvm_block_q6_K *)blk, k, sc16); break;
    default: neon_kload_iqgrid(t, blk, k, sc16); break;
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        k->sc[j] = vld1q_s32(sc16 + 4 * j);
}

/* The unpacked super-block against one Q8_K block: mvm_k_kblock's integers and rounding.
 * Four sub-blocks a step: their dot products reduced by two rounds of pairwise adds to one
 * vector of four sums, which one multiply-add scales. */
NEON_INLINE float neon_kblock(enum mvm_wtype t, const uint8_t *blk, const neon_kblk *k,
                              const mvm_block_q8_K *a)
{
    const int32x4_t zero = vdupq_n_s32(0);
    int32x4_t acc = zero;
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        int32x4_t d[4];
#pragma GCC unroll 4
        for (int l = 0; l < 4; l++)
            d[l] = neon_dot(zero, k->q[4 * j + l], vld1q_s8(a->qs + 64 * j + 16 * l));
        acc = vmlaq_s32(acc, vpaddq_s32(vpaddq_s32(d[0], d[1]), vpaddq_s32(d[2], d[3])),
                        k->sc[j]);
    }
    int32_t msum = 0;
    if (k->has_min) {
        const int16x8_t m0 = vld1q_s16(k->m), m1 = vld1q_s16(k->m + 8);
        const int16x8_t b0 = vld1q_s16(a->bsums), b1 = vld1q_s16(a->bsums + 8);
        int32x4_t p = vmull_s16(vget_low_s16(m0), vget_low_s16(b0));
        p = vmlal_high_s16(p, m0, b0);
        p = vmlal_s16(p, vget_low_s16(m1), vget_low_s16(b1));
        msum = vaddvq_s32(vmlal_high_s16(p, m1, b1));
    }
    return mvm_k_kscale(t, blk, a, vaddvq_s32(acc), msum);
}

/* ---- the rows: Q blocks or K super-blocks ------------------------------------------------ */

/* r[i] = the block at p (a Q block or a K super-block, block b of its row) times block b of
 * token i's activations, for i < nt: the weights unpacked once for all tokens. */
NEON_INLINE void neon_block_n(enum mvm_wtype t, const uint8_t *p, const uint8_t *act, size_t as,
                              const int nt, size_t b, float r[])
{
    if (mvm_k_is_k(t)) {
        neon_kblk k;
        neon_kload(t, p, &k);
        for (int i = 0; i < nt; i++)
            r[i] = neon_kblock(t, p, &k, NEON_TOK(mvm_block_q8_K, act, as, i) + b);
    } else {
        const neon_qblk q = neon_qblock_load(t, p);
        for (int i = 0; i < nt; i++)
            r[i] = neon_qblock(t, &q, NEON_TOK(mvm_block_q8_0, act, as, i) + b);
    }
}

/* The blocks' products added into each output in the portable level's order. */
NEON_INLINE void neon_dotn_blocks(enum mvm_wtype t, const uint8_t *w, const uint8_t *act,
                                  size_t as, const int nt, size_t n, float *y, size_t ys)
{
    const size_t bytes = mvm_k_block_bytes(t);
    float s[MVM_K_NT], r[MVM_K_NT];
    for (int i = 0; i < nt; i++)
        s[i] = 0;
    for (size_t b = 0; b < n / mvm_k_block_elems(t); b++) {
        neon_block_n(t, w + b * bytes, act, as, nt, b, r);
        for (int i = 0; i < nt; i++)
            s[i] += r[i];
    }
    for (int i = 0; i < nt; i++)
        y[i * ys] = s[i];
}

NEON_INLINE void neon_downn_blocks(enum mvm_wtype t, const uint8_t *w, const uint8_t *a,
                                   size_t as, const int nt, float *out, size_t os, size_t n)
{
    const size_t bytes = mvm_k_block_bytes(t);
    float r[MVM_K_NT];
    for (size_t j = 0; j < n; j++) {
        neon_block_n(t, w + j * bytes, a, as, nt, 0, r);
        for (int i = 0; i < nt; i++)
            out[i * os + j] += r[i];
    }
}

#endif
