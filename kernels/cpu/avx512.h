/*
 * The AVX-512 levels' blocks (F, BW, VL, DQ; dot_avx512.c, and dot_avx512vnni.c, which defines
 * MVM_K_VNNI 1 first): float dot products 16 elements a register with a masked tail instead
 * of a scalar one; every K type's super-blocks in 512-bit vectors (avx2_kquant.h's
 * avx512_*_sums, where MVM_K_AVX512 is set: they shed most of the AVX2 blocks' instructions,
 * not only their width; decode +19% to +62% on an AMD EPYC, docs/perf/cpu.md), and so the
 * lattice types with signs (avx512_iqgrid.h: decode +7% to +75% on a Zen 4), their floats a
 * step of 8 blocks at once (avx512_kstep.h); everything else is the AVX2 code of avx2.h,
 * compiled for the level's target (with VNNI, its integer dot products fused).
 *
 * Measured on a Sapphire-Rapids-class Xeon, single core, rows in L2 (64-byte aligned): the
 * 512-bit float dot products against AVX2 take F16 from 23 to 28 GB/s, BF16 from 18 to 27,
 * F32 equal (L2 bandwidth). 512-bit versions of the Q kernels (two blocks a register, 8-block
 * transposing reductions) and of the float down loop were written and measured too: the Q
 * dot product was slower (Q8_0: 15 GB/s against 19), the down loops within noise either way.
 * There 512-bit integer work issues on two ports against three for 256-bit, so two blocks a
 * register buy nothing and the pairing shuffles cost. From DRAM (decode) every kernel is
 * bound by memory at both widths.
 */
#ifndef MVM_KERNELS_CPU_AVX512_H
#define MVM_KERNELS_CPU_AVX512_H

#ifndef MVM_K_VNNI
#define MVM_K_VNNI 0
#endif

#if MVM_K_VNNI
#define AVX512_TARGET                                                                              \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#else
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#endif
/* avx2.h's blocks are inlined into this level's functions, so they carry its target. */
#define AVX2_TARGET AVX512_TARGET
#define MVM_K_AVX512 1
#include "kernels/cpu/avx2.h"

#define AVX512_INLINE MVM_K_INLINE AVX512_TARGET

/* The elements of float type t at p selected by m, as F32; the others are 0 and not read
 * (a masked load does not fault past the end of a row). */
AVX512_INLINE __m512 load16(enum mvm_wtype t, const uint8_t *p, __mmask16 m)
{
    switch (t) {
    case MVM_W_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
    case MVM_W_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
    default: return _mm512_maskz_loadu_ps(m, p);
    }
}

#define ALL16 ((__mmask16)0xFFFF)

AVX512_INLINE float dot_float(enum mvm_wtype t, const uint8_t *w, const float *a, size_t n)
{
    const size_t es = t == MVM_W_F32 ? 4 : 2;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const uint8_t *p = w + i * es;
        avx2_prefetch(p, 64 * es);
        s0 = _mm512_fmadd_ps(load16(t, p, ALL16), _mm512_loadu_ps(a + i), s0);
        s1 = _mm512_fmadd_ps(load16(t, p + 16 * es, ALL16), _mm512_loadu_ps(a + i + 16), s1);
        s2 = _mm512_fmadd_ps(load16(t, p + 32 * es, ALL16), _mm512_loadu_ps(a + i + 32), s2);
        s3 = _mm512_fmadd_ps(load16(t, p + 48 * es, ALL16), _mm512_loadu_ps(a + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16)
        s0 = _mm512_fmadd_ps(load16(t, w + i * es, ALL16), _mm512_loadu_ps(a + i), s0);
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        s1 = _mm512_fmadd_ps(load16(t, w + i * es, m), _mm512_maskz_loadu_ps(m, a + i), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

MVM_K_DOTN_ONE_BY_ONE(AVX512_TARGET, dotn_float, dot_float, float)

/* ---- the activations' quantizers: blocks.h's, 16 floats a register ---------------------- */

/* One Q8_0 block as mvm_k_q8_0_block makes it; 0 (nothing written) when the block holds a
 * NaN, whose handling there is sequential, or an infinity. roundf (half away from zero) as truncation plus
 * one where the exact remainder is at least a half. */
AVX512_INLINE int q8_0_block16(const float *x, mvm_block_q8_0 *y)
{
    const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
    if (_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q))
        return 0;
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    if (__builtin_isinf(amax)) /* inf · 0: the scalar code's NaN to int8 */
        return 0;
    const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
    y->d = mvm_k_f2h(d);
    const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
    const __m512 v[2] = {_mm512_mul_ps(a, _mm512_set1_ps(id)), _mm512_mul_ps(b, _mm512_set1_ps(id))};
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512 t = _mm512_roundscale_ps(v[h], _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v[h], t)), half,
                                                _CMP_GE_OQ);
        const __m512 r = _mm512_mask_add_ps(t, up, t,
                                            _mm512_or_ps(one, _mm512_and_ps(v[h], _mm512_set1_ps(-0.0f))));
        _mm_storeu_si128((__m128i *)(y->qs + 16 * h), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)));
    }
    return 1;
}

/* One Q8_K block as mvm_k_q8_K_block makes it (lrintf is the vector conversion's rounding,
 * nearest even); 0 when it holds a NaN or an infinity. The largest magnitude's first element sets the
 * scale, as mvm_k_signed_max picks it. */
AVX512_INLINE int q8_K_block16(const float *x, mvm_block_q8_K *y)
{
    __m512 m = _mm512_setzero_ps();
    __mmask16 nan = 0;
#pragma GCC unroll 16
    for (int i = 0; i < MVM_QK_K / 16; i++) {
        const __m512 v = _mm512_loadu_ps(x + 16 * i);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        m = _mm512_max_ps(m, _mm512_abs_ps(v));
    }
    if (nan)
        return 0;
    const float amax = _mm512_reduce_max_ps(m);
    if (__builtin_isinf(amax))
        return 0;
    if (amax == 0) {
        memset(y, 0, sizeof *y);
        return 1;
    }
    float max = 0;
    for (int i = 0; i < MVM_QK_K / 16; i++) {
        const __mmask16 at = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * i)),
                                                _mm512_set1_ps(amax), _CMP_EQ_OQ);
        if (at) {
            max = x[16 * i + __builtin_ctz(at)];
            break;
        }
    }
    const float iscale = -127.f / max;
#pragma GCC unroll 16
    for (int i = 0; i < MVM_QK_K / 16; i++) {
        const __m512i q = _mm512_min_epi32(
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_set1_ps(iscale), _mm512_loadu_ps(x + 16 * i))),
            _mm512_set1_epi32(127));
        _mm_storeu_si128((__m128i *)(y->qs + 16 * i), _mm512_cvtepi32_epi8(q));
        y->bsums[i] = (int16_t)_mm512_reduce_add_epi32(q);
    }
    y->d = 1 / iscale;
    return 1;
}

/* dispatch.h's quantize_act at the AVX-512 levels. */
AVX2_QUANTIZE_ACT(AVX512_TARGET, quantize_act, q8_K_block16, q8_0_block16)

#endif
