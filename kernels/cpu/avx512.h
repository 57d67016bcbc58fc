/*
 * The AVX-512 levels' blocks (F, BW, VL, DQ; dot_avx512.c, and dot_avx512vnni.c, which defines
 * MVM_K_VNNI 1 first): float dot products 16 elements a register with a masked tail instead
 * of a scalar one; everything else is the AVX2 code of avx2.h, compiled for the level's
 * target (with VNNI, its integer dot products fused).
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
#include "kernels/cpu/avx2.h"

#define AVX512_INLINE static inline __attribute__((always_inline)) AVX512_TARGET

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

#endif
