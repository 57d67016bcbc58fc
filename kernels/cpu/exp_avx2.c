/*
 * The AVX2 level's functions of e^x, 8 elements at a time where ops.c's portable ones call
 * libm's expf once an element (in a Q4_K_M prompt of OLMoE's shape on a Zen 3, 3.5% of the
 * time in the SwiGLU and 2% in the attention's softmax; docs/perf/cpu.md, session 139):
 *   - the SwiGLU (kernels.h's mvm_k_swiglu), x[i] = silu(x[i]) * y[i], for the experts'
 *     groups (expert.c) and the dense FFNs: x / (1 + e^-x) · y, divided as the portable loop
 *     divides, so that an element differs from it by the exp's error alone;
 *   - the attention's softmax with a sink (ops.c's mvm_k_attn_weights, which both ops.c's
 *     attention and attn_avx2.c call, so that the two still agree bit for bit): the terms
 *     summed in double as there, 8 partial sums in place of one. The router's softmax stays
 *     ops.c's at every level: a level never changes which experts a token takes.
 *
 * e^x as attn_avx512.c's exp16 has it (exp_poly.h: Cephes' expf polynomial, within 2 ulp), the
 * power of two built in the exponent's bits since AVX2 has no scalef: x·log2(e) rounded to
 * n, r = x - n·ln 2 (ln 2 in two parts), e^r·2^n. Where 2^n would not be a normal float it
 * is +inf above 127 ln 2 = 88.03 (expf's from 88.72: silu(x) for x < -88.03 is -0, libm's
 * -5e-37 at most) and 0 below -126 ln 2 = -87.34 (expf's subnormals there, 1e-38 and less
 * against the softmax's largest term, 1): a masked score or a missing sink (-inf) weighs 0.
 * A tail of fewer than 8 goes through the same vector code, so that an element's result
 * never depends on where it sits in x.
 */
#include <math.h>

#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/exp_poly.h"

/* e^x for 8 floats: +inf above 127 ln 2 (where n would pass 127), 0 below -126 ln 2. */
AVX2_INLINE __m256 exp8(__m256 x)
{
    const __m256 hi = _mm256_set1_ps(88.0296919311f), lo = _mm256_set1_ps(-87.3365447504f);
    const __m256 over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ), under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(MVM_EXP_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = MVM_EXP_R(_mm256, n, x), y = MVM_EXP_POLY(_mm256, r);
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 v = _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
    return _mm256_blendv_ps(v, _mm256_set1_ps(__builtin_inff()), over);
}

/* Lanes 0 .. n - 1 set (all for n >= 8): the loads and stores, a tail's masked. */
AVX2_INLINE __m256i first_lanes(size_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n < 8 ? (int)n : 8),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

AVX2_INLINE __m256 swiglu8(__m256 x, __m256 y)
{
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1), e)), y);
}

AVX2_TARGET void mvm_k_swiglu_avx2(float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        const __m256i m = first_lanes(n - i);
        _mm256_maskstore_ps(x + i, m,
                            swiglu8(_mm256_maskload_ps(x + i, m), _mm256_maskload_ps(y + i, m)));
    }
}

AVX2_TARGET float mvm_k_softmax_sink_avx2(float *x, size_t n, float sink)
{
    __m256 mv = _mm256_set1_ps(sink);
    for (size_t i = 0; i < n; i += 8) { /* (max_ps's second operand wins over a nan) */
        const __m256i m = first_lanes(n - i);
        mv = _mm256_max_ps(
            _mm256_blendv_ps(mv, _mm256_maskload_ps(x + i, m), _mm256_castsi256_ps(m)), mv);
    }
    float lanes[8], max = sink;
    _mm256_storeu_ps(lanes, mv);
    for (int l = 0; l < 8; l++)
        max = lanes[l] > max ? lanes[l] : max;
    const __m256 mx = _mm256_set1_ps(max);
    __m256d s0 = _mm256_setzero_pd(), s1 = s0;
    for (size_t i = 0; i < n; i += 8) {
        const __m256i m = first_lanes(n - i);
        const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), mx)),
                                       _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(x + i, m, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double d[4];
    _mm256_storeu_pd(d, _mm256_add_pd(s0, s1));
    const double sum = (d[0] + d[1]) + (d[2] + d[3]) +
                       (double)_mm256_cvtss_f32(exp8(_mm256_sub_ps(_mm256_set1_ps(sink), mx)));
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (size_t i = 0; i < n; i += 8) {
        const __m256i m = first_lanes(n - i);
        _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv));
    }
    return (float)((double)max + log(sum)); /* ln of the softmax's sum, as ops.c's */
}

#endif
