/*
 * Cephes' expf for a vector width, the part every width shares: x = n·ln 2 + r with n = x·log2(e)
 * rounded and |r| <= ln 2 / 2 (ln 2 taken off in two parts, so that r is exact), then
 * e^r = 1 + r + r²·P(r), within 2 ulp of expf. pre is the intrinsics' prefix (_mm256, _mm512);
 * the caller rounds n and applies 2^n as its width can (attn_avx512.c's exp16 by scalef,
 * exp_avx2.c's exp8 in the exponent's bits).
 */
#ifndef MVM_KERNELS_CPU_EXP_POLY_H
#define MVM_KERNELS_CPU_EXP_POLY_H

#define MVM_EXP_LOG2E 1.44269504088896341f

/* r = x - n·ln 2 */
#define MVM_EXP_R(pre, n, x)                                                                       \
    pre##_fnmadd_ps(n, pre##_set1_ps(-2.12194440e-4f),                                             \
                    pre##_fnmadd_ps(n, pre##_set1_ps(0.693359375f), x))

/* e^r, P's coefficients highest first, each a fused multiply-add in turn */
#define MVM_EXP_POLY(pre, r)                                                                       \
    pre##_add_ps(                                                                                  \
        pre##_fmadd_ps(                                                                            \
            pre##_fmadd_ps(                                                                        \
                pre##_fmadd_ps(                                                                    \
                    pre##_fmadd_ps(                                                                \
                        pre##_fmadd_ps(pre##_fmadd_ps(pre##_set1_ps(1.9875691500e-4f), r,          \
                                                      pre##_set1_ps(1.3981999507e-3f)),            \
                                       r, pre##_set1_ps(8.3334519073e-3f)),                        \
                        r, pre##_set1_ps(4.1665795894e-2f)),                                       \
                    r, pre##_set1_ps(1.6666665459e-1f)),                                           \
                r, pre##_set1_ps(5.0000001201e-1f)),                                               \
            pre##_mul_ps(r, r), r),                                                                \
        pre##_set1_ps(1))

#endif
