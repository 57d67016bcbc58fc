/*
 * The AVX2 level's SwiGLU (kernels.h's mvm_k_swiglu): x[i] = silu(x[i]) * y[i], 8 at a time,
 * for the experts' groups (expert.c) and the dense FFNs. ops.c's portable loop calls libm's
 * expf once an element: in a Q4_K_M prompt of OLMoE's shape on a Zen 3 that was 3% of the
 * time (the exp and its loop; docs/perf/cpu.md, session 139), as much as the attention's
 * softmax.
 *
 * e^-x as attn_avx512.c's exp16 has it (Cephes' expf polynomial, within 2 ulp of expf), the
 * power of two built in the exponent's bits since AVX2 has no scalef: x·log2(e) rounded to
 * n, r = x - n·ln 2 (ln 2 in two parts), e^r·2^n. The argument is clamped to where 2^n is a
 * normal float, and above that e^-x is +inf, as expf's is from 88.72 on (here from 127 ln 2
 * = 88.03: silu(x) for x < -88.03 is -0, libm's -5e-37 at most). Then x / (1 + e^-x) · y,
 * divided as the portable loop divides: an element differs from it by the exp's 2 ulp alone.
 * A tail of fewer than 8 goes through the same vector code from a copy, so that an element's
 * result never depends on where it sits in x.
 */
#include <string.h>

#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/avx2.h"

/* e^x for 8 floats: +inf above 127 ln 2 (where n would pass 127), no lower than 2^-126. */
AVX2_INLINE __m256 exp8(__m256 x)
{
    const __m256 hi = _mm256_set1_ps(88.0296919311f);
    const __m256 over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3365447504f)), hi);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_blendv_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)),
                            _mm256_set1_ps(__builtin_inff()), over);
}

AVX2_INLINE __m256 swiglu8(__m256 x, __m256 y)
{
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1), e)), y);
}

AVX2_TARGET void mvm_k_swiglu_avx2(float *x, const float *y, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, swiglu8(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    if (i == n)
        return;
    float a[8] = {0}, b[8] = {0};
    memcpy(a, x + i, (n - i) * sizeof *a);
    memcpy(b, y + i, (n - i) * sizeof *b);
    _mm256_storeu_ps(a, swiglu8(_mm256_loadu_ps(a), _mm256_loadu_ps(b)));
    memcpy(x + i, a, (n - i) * sizeof *a);
}

#endif
