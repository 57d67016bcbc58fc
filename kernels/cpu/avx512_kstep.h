/*
 * The AVX-512 levels' K-type products of few tokens (decode's dot products and down rows, up
 * to MVM_K_NT tokens: kernels/cpu/dispatch.h's mvm_k_gemm takes more): the K types' (all
 * but Q6_K: avx512_kstep_ok) super-blocks KSTEP at a time, each block's integers first
 * (avx2_kquant.h's avx512_*_sums for Q2_K .. Q5_K and IQ4_XS, avx512_iqgrid.h's
 * avx512_iq_sums for the lattice types), then the step's floats 8 lanes at once
 * (avx512_kstep_floats). Each block's sum, conversion and scaling had been one chain of
 * dependent instructions too long for the core to overlap the next block's decoding with:
 * perf put 40% of the lattice types' samples on it. One thread, rows in L2, on a Zen 5:
 * Q2_K 17.2-17.4 -> 20.9-21.9 GB/s, Q3_K 18.2-18.4 -> 20.6-20.8, Q4_K 23-24 -> 26.5-27.4,
 * Q5_K 24.8-25.2 -> 29.2-30.1 (docs/perf/cpu.md, session 113). Every sum is the AVX2
 * block's integer and every float its block's, lane by lane the same operations, so the
 * results are bit for bit the other levels' (test_kernels, test_levels_agree). Part of
 * avx2_kquant.h, which includes it where MVM_K_AVX512 is set.
 */
#ifndef MVM_KERNELS_CPU_AVX2_KQUANT_H
#error "kernels/cpu/avx512_kstep.h is part of avx2_kquant.h: include kernels/cpu/avx2.h"
#endif

/* Super-blocks a step takes before their floats: 8, the lanes of one vector of floats. */
#define KSTEP 8

/* The K types that take the steps: all but Q6_K (avx2_kquant.h's avx512_kblock_q6 says
 * why). */
AVX2_INLINE int avx512_kstep_ok(enum mvm_wtype t)
{
    return t == MVM_W_Q2_K || t == MVM_W_Q3_K || t == MVM_W_Q4_K || t == MVM_W_Q5_K ||
           t == MVM_W_IQ4_XS || avx512_iq_ok(t);
}

/* The scale and the min (0 where the type has none) of K super-block blk, as f16. */
AVX2_INLINE void avx512_kstep_d(enum mvm_wtype t, const uint8_t *blk, uint16_t *d,
                                uint16_t *dmin)
{
    uint16_t h = 0, m = 0;
    switch (t) {
    case MVM_W_Q2_K:
        h = ((const mvm_block_q2_K *)blk)->d;
        m = ((const mvm_block_q2_K *)blk)->dmin;
        break;
    case MVM_W_Q3_K: h = ((const mvm_block_q3_K *)blk)->d; break;
    case MVM_W_Q4_K:
        h = ((const mvm_block_q4_K *)blk)->d;
        m = ((const mvm_block_q4_K *)blk)->dmin;
        break;
    case MVM_W_Q5_K:
        h = ((const mvm_block_q5_K *)blk)->d;
        m = ((const mvm_block_q5_K *)blk)->dmin;
        break;
    case MVM_W_IQ4_XS: h = ((const mvm_block_iq4_xs *)blk)->d; break;
    default: h = mvm_k_iq_d(t, blk); break;
    }
    *d = h;
    *dmin = m;
}

/* Super-block blk's integers for nt tokens into acc[i · stride] and off[i · stride]
 * (avx2_kquant.h says what they hold; off is left alone for the types with no term). */
AVX2_INLINE void avx512_kstep_sums(enum mvm_wtype t, const uint8_t *blk,
                                   const mvm_block_q8_K *const a[], const int nt, __m512i *acc,
                                   __m256i *off, size_t stride)
{
    switch (t) {
    case MVM_W_Q2_K: {
        const mvm_block_q2_K *x = (const mvm_block_q2_K *)blk;
        avx512_q23_sums(x->qs, NULL, x->scales, a, nt, acc, off, stride);
        break;
    }
    case MVM_W_Q3_K: {
        const mvm_block_q3_K *x = (const mvm_block_q3_K *)blk;
        avx512_q23_sums(x->qs, x->hmask, x->scales, a, nt, acc, off, stride);
        break;
    }
    case MVM_W_Q4_K: {
        const mvm_block_q4_K *x = (const mvm_block_q4_K *)blk;
        avx512_q45_sums(x->scales, x->qs, NULL, a, nt, acc, off, stride);
        break;
    }
    case MVM_W_Q5_K: {
        const mvm_block_q5_K *x = (const mvm_block_q5_K *)blk;
        avx512_q45_sums(x->scales, x->qs, x->qh, a, nt, acc, off, stride);
        break;
    }
    case MVM_W_IQ4_XS:
        avx512_iq4xs_sums((const mvm_block_iq4_xs *)blk, a, nt, acc, stride);
        break;
    default: avx512_iq_sums(t, blk, a, nt, acc, stride); break;
    }
}

/* The lanes' sums of v[j], j < m, in lane j of the result (0 past m). */
AVX2_INLINE __m256i avx512_kstep_hsum(const __m256i v[KSTEP], size_t m)
{
    __m256i h[KSTEP];
#pragma GCC unroll 8
    for (size_t j = 0; j < KSTEP; j++)
        h[j] = j < m ? v[j] : _mm256_setzero_si256();
    return avx2_hsum8_i32(h);
}

/* Super-block blk's integers for nt tokens (avx512_kstep_sums), their 16 lanes of products
 * added in halves to 8: acc[i][k], off[i][k]. */
AVX2_INLINE void avx512_kstep_block(enum mvm_wtype t, const uint8_t *blk,
                                    const mvm_block_q8_K *const a[], const int nt,
                                    __m256i acc[][KSTEP], __m256i off[][KSTEP], size_t k)
{
    __m512i sum[MVM_K_NT];
    __m256i o[MVM_K_NT];
    avx512_kstep_sums(t, blk, a, nt, sum, o, 1);
    for (int i = 0; i < nt; i++) {
        acc[i][k] = _mm256_add_epi32(_mm512_castsi512_si256(sum[i]),
                                     _mm512_extracti64x4_epi64(sum[i], 1));
        off[i][k] = o[i];
    }
}

/* r[i · rs + k] = super-block k's float for token i (k < m) from the step's integers: each
 * type's block float (avx2_kquant.h's AVX2 blocks; mvm_k_kscale's for the lattice types),
 * lane by lane the same operations. ad[i][k] token i's block scale, d and dmin the blocks'
 * (avx512_kstep_d; all KSTEP set, those past m to anything). Inlined with m a constant for
 * a whole step, the lanes past m cost nothing. */
AVX2_INLINE void avx512_kstep_floats(enum mvm_wtype t, __m256i acc[][KSTEP],
                                     __m256i off[][KSTEP], const float ad[][KSTEP],
                                     const uint16_t *d, const uint16_t *dmin, int nt, size_t m,
                                     float *r, size_t rs)
{
    const __mmask8 k = (__mmask8)((1u << m) - 1);
    const __m256 vd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d));
    const __m256 vm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dmin));
    const int has_off = t == MVM_W_Q2_K || t == MVM_W_Q3_K || t == MVM_W_Q4_K ||
                        t == MVM_W_Q5_K;
    for (int i = 0; i < nt; i++) {
        const __m256i s = avx512_kstep_hsum(acc[i], m);
        __m256i o = _mm256_setzero_si256();
        if (has_off) {
            __m256i h[KSTEP];
#pragma GCC unroll 8
            for (size_t j = 0; j < KSTEP; j++)
                h[j] = j < m ? off[i][j] : _mm256_setzero_si256();
            o = avx2_hsum8_i32(h);
        }
        const __m256 va = _mm256_maskz_loadu_ps(k, ad[i]);
        __m256 v;
        switch (t) {
        case MVM_W_Q2_K: /* ad·(d·sum - dmin·msum), unfused as avx512_q23_sums's block was */
            v = _mm256_mul_ps(va, _mm256_sub_ps(_mm256_mul_ps(vd, _mm256_cvtepi32_ps(s)),
                                                _mm256_mul_ps(vm, _mm256_cvtepi32_ps(o))));
            break;
        case MVM_W_Q3_K: /* ad·(d·(sum - 4·offset)) */
            v = _mm256_mul_ps(va, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_sub_epi32(
                                                        s, _mm256_slli_epi32(o, 2)))));
            break;
        case MVM_W_Q4_K:
        case MVM_W_Q5_K: /* avx2_k45_finish */
            v = _mm256_mul_ps(va, _mm256_fmsub_ps(vd, _mm256_cvtepi32_ps(s),
                                                  _mm256_mul_ps(vm, _mm256_cvtepi32_ps(o))));
            break;
        case MVM_W_IQ4_XS: v = _mm256_mul_ps(va, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(s))); break;
        default: /* mvm_k_kscale: ad·(d·sum)·factor */
            v = _mm256_mul_ps(_mm256_mul_ps(va, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(s))),
                              _mm256_set1_ps(mvm_k_iq_factor(t)));
            break;
        }
        _mm256_mask_storeu_ps(r + i * rs, k, v);
    }
}

/* r[i][k] for a step of m blocks (avx512_kstep_floats): a whole step's with m a constant. */
AVX2_INLINE void avx512_kstep_end(enum mvm_wtype t, __m256i acc[][KSTEP], __m256i off[][KSTEP],
                                  float ad[][KSTEP], const uint16_t *d, const uint16_t *dmin,
                                  int nt, size_t m, float r[][KSTEP])
{
    if (m == KSTEP)
        avx512_kstep_floats(t, acc, off, (const float(*)[KSTEP])ad, d, dmin, nt, KSTEP, r[0],
                            KSTEP);
    else
        avx512_kstep_floats(t, acc, off, (const float(*)[KSTEP])ad, d, dmin, nt, m, r[0], KSTEP);
}

/* y[i · ys] = row w · token i, i < nt: the blocks' floats added in order, as avx2_dotn_k
 * adds its blocks'. */
AVX2_INLINE void avx512_dotn_k(enum mvm_wtype t, const uint8_t *w, const uint8_t *act,
                               size_t as, const int nt, size_t n, float *y, size_t ys)
{
    const size_t bytes = mvm_k_block_bytes(t), nb = n / MVM_QK_K;
    float s[MVM_K_NT], r[MVM_K_NT][KSTEP], ad[MVM_K_NT][KSTEP];
    uint16_t d[KSTEP] = {0}, dmin[KSTEP] = {0};
    __m256i acc[MVM_K_NT][KSTEP], off[MVM_K_NT][KSTEP];
    const mvm_block_q8_K *a[MVM_K_NT];
    for (int i = 0; i < nt; i++)
        s[i] = 0;
    for (size_t b0 = 0; b0 < nb; b0 += KSTEP) {
        const size_t m = nb - b0 < KSTEP ? nb - b0 : KSTEP;
        for (size_t k = 0; k < m; k++) {
            const uint8_t *blk = w + (b0 + k) * bytes;
            avx2_prefetch(blk, bytes);
            for (int i = 0; i < nt; i++) {
                a[i] = AVX2_TOK(mvm_block_q8_K, act, as, i) + b0 + k;
                ad[i][k] = a[i]->d;
            }
            avx512_kstep_d(t, blk, &d[k], &dmin[k]);
            avx512_kstep_block(t, blk, a, nt, acc, off, k);
        }
        avx512_kstep_end(t, acc, off, ad, d, dmin, nt, m, r);
        for (int i = 0; i < nt; i++) /* in order, as avx2_dotn_k adds them */
            for (size_t k = 0; k < m; k++)
                s[i] += r[i][k];
    }
    for (int i = 0; i < nt; i++)
        y[i * ys] = s[i];
}

/* out[i · os + j] += row j · token i, j < n, i < nt (each row one super-block). */
AVX2_INLINE void avx512_downn_k(enum mvm_wtype t, const uint8_t *w, const uint8_t *act,
                                size_t as, const int nt, float *out, size_t os, size_t n)
{
    const size_t bytes = mvm_k_block_bytes(t);
    float ad[MVM_K_NT][KSTEP], r[MVM_K_NT][KSTEP];
    uint16_t d[KSTEP] = {0}, dmin[KSTEP] = {0};
    __m256i acc[MVM_K_NT][KSTEP], off[MVM_K_NT][KSTEP];
    const mvm_block_q8_K *a[MVM_K_NT];
    for (int i = 0; i < nt; i++) {
        a[i] = AVX2_TOK(mvm_block_q8_K, act, as, i);
        for (int k = 0; k < KSTEP; k++)
            ad[i][k] = a[i]->d;
    }
    for (size_t j0 = 0; j0 < n; j0 += KSTEP) {
        const size_t m = n - j0 < KSTEP ? n - j0 : KSTEP;
        for (size_t k = 0; k < m; k++) {
            const uint8_t *blk = w + (j0 + k) * bytes;
            avx2_prefetch(blk, bytes);
            avx512_kstep_d(t, blk, &d[k], &dmin[k]);
            avx512_kstep_block(t, blk, a, nt, acc, off, k);
        }
        avx512_kstep_end(t, acc, off, ad, d, dmin, nt, m, r);
        for (int i = 0; i < nt; i++)
            for (size_t k = 0; k < m; k++)
                out[i * os + j0 + k] += r[i][k];
    }
}
