/*
 * The AVX-512 VNNI level's multi-row kernels (dispatch.h's mvm_k_gemm_fn) for the types most
 * files are made of (the 32-element Q types Q8_0 to MXFP4, the K-quants of llama.cpp's Q2_K
 * to Q6_K mixes: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, and the lattice-grid types IQ1_S ..
 * IQ3_S of the smallest files): prefill's matrix products and an expert's batch. This header
 * has the K-quants' code (gemm_k), which gemm_avx512vnni.c instantiates for the K-quants,
 * IQ3_S and IQ1_M (with the level's table) and gemm_iq_avx512vnni.c for the other
 * lattice-grid types: in one file, its 13 instances took 77 s to compile under ASan+UBSan,
 * the longest step of `make test`'s builds (docs/perf/tests.md). The 32-element Q types
 * are gemm_q_avx512vnni.c's, the lanes' helpers gemm_lanes.h's.
 *
 * K-quants: a vector's 16 lanes are 16 tokens. The tokens' Q8_K quants are interleaved once
 * per call (kacts: one load gives the same 4 quants of 16 tokens), a row's super-block is
 * unpacked once per token group (krow), and each step of 4 quants is one vpdpbusd per row:
 * the row's 4 quants broadcast (unsigned) against the 16 tokens' (signed), 64 products into
 * int32 lanes that are already the pairs' sums. A sub-block's sum then takes its scale
 * (vpmulld, exact), the mins' or offset's term comes from the tokens' block sums (vpdpwssd
 * with the row's pairs), and the float work per super-block is done for 16 pairs at once,
 * with no horizontal sums at all. A group of up to 8 tokens, which would leave half the
 * lanes idle, gives each token two lanes, one per half of the super-block (split), added
 * before the float work. Against the earlier tiles of 4 rows by 4 tokens (one vpmaddubsw
 * and one vpdpwssd per 64 products, and a 45-instruction reduction of 16 pairs per
 * super-block) this halves the multiplies: Q4_K_M prefill +30% at pp64 and +37% at pp512
 * (docs/perf/cpu.md). y's block of rows by tokens is moved through 8 x 8 transposes.
 *
 * The results are bitwise dotn's (dispatch.h's contract; test_kernels checks it at every
 * size and tail): the integer sums are exact in any order, and the float work per
 * super-block is avx2.h's, in the same order, 16 lanes at once (avx2_k45_finish for Q4_K and
 * Q5_K; ad·(d·sum) for Q6_K), added into each pair's sum in super-block order. A block cut
 * short by the matrix's edge repeats its last row (computed, never stored) and leaves its
 * missing tokens' lanes zero.
 */
#ifndef MVM_KERNELS_CPU_GEMM_K_AVX512VNNI_H
#define MVM_KERNELS_CPU_GEMM_K_AVX512VNNI_H

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#define MVM_K_VNNI 1
#include "kernels/cpu/gemm_lanes.h"

/* ---- K-quants: a vector's lanes are 16 tokens ------------------------------------------- */

/* Q2_K, Q3_K, Q6_K and the lattice-grid types with a scale per 16 (IQ2_XS, IQ2_S, IQ1_M):
 * 16 sub-blocks of 16, each with a scale (and Q2_K's a min), the quants of all but Q2_K
 * offset (-4, -32, -64); the others here (Q4_K, Q5_K, IQ4_XS, and IQ2_XXS, IQ3_XXS, IQ3_S,
 * IQ1_S, whose chunks of 32 have one scale) have 8 of 32, which halves the sub-block sums'
 * scale products. */
AVX512_INLINE int k_sub16(enum mvm_wtype t)
{
    return t == MVM_W_Q6_K || t == MVM_W_Q3_K || t == MVM_W_Q2_K || t == MVM_W_IQ2_XS ||
           t == MVM_W_IQ2_S || t == MVM_W_IQ1_M;
}

/* A token group's activations for one super-block, interleaved so that one load gives the
 * same 4 quants of 16 tokens: q[g] lane i = token i's qs[4g .. 4g+3]; bs[j] lane i = a pair
 * of its int16 sums (Q4_K, Q5_K: the 32-quant sub-blocks 2j, 2j + 1, j < 4; Q6_K: bsums 2j,
 * 2j + 1, j < 8); d lane i = its scale. Lanes past the group's tokens are zero.
 * Split, for groups of up to 8 tokens, whose lanes would otherwise idle: the pair of lanes
 * 2i, 2i + 1 is token i's two halves of the super-block, q[g] (g < 32) holding quants 4g..
 * and 128 + 4g.., bs[p] the pairs P·h + p of half h (P: the pairs per half), d its scale in
 * both; the two lanes' sums are added before the float work. */
typedef struct {
    __m512i q[MVM_QK_K / 4];
    __m512i bs[8];
    __m512 d;
} kacts;

/* The super-blocks a token group's kacts hold at once (37 KiB of the stack); a longer row
 * is taken in pieces, each pair's sum carried in y between them. */
#define KPIECE_SB 8

/* A group's kacts (split: up to 8 tokens) for super-blocks k0 .. k0 + kn - 1 of tokens
 * a[0 .. nt - 1]. */
AVX512_INLINE void kacts_fill(enum mvm_wtype t, int split, const uint8_t *act, size_t as, int nt,
                              size_t k0, size_t kn, kacts *A)
{
    const int P = (k_sub16(t) ? 8 : 4) >> split; /* pairs per lane */
    for (size_t k = 0; k < kn; k++) {
        const mvm_block_q8_K *a[16];
        for (int i = 0; i < 16; i++)
            a[i] = AVX2_TOK(mvm_block_q8_K, act, as, i < nt ? i : 0) + k0 + k;
        /* lane l: token l >> split's chunk c, or (split) chunk c + 2 (l & 1) */
        for (int c = 0; c < 4 >> split; c++) {
            __m512i in[16];
#pragma GCC unroll 16
            for (int l = 0; l < 16; l++)
                in[l] = (l >> split) < nt
                    ? _mm512_loadu_si512(a[l >> split]->qs + 64 * (c + 2 * (l & split)))
                    : _mm512_setzero_si512();
            transpose16(in, A[k].q + 16 * c);
        }
        int32_t bs[8][16] = {{0}};
        float d[16] = {0};
        for (int l = 0; l < 16 && (l >> split) < nt; l++) {
            const int i = l >> split, h = l & split;
            const int16_t *b = a[i]->bsums;
            d[l] = a[i]->d;
            for (int p = 0; p < P; p++) {
                const int j = P * h + p; /* the pair's index in the whole super-block */
                const int lo = k_sub16(t) ? b[2 * j] : b[4 * j] + b[4 * j + 1];
                const int hi = k_sub16(t) ? b[2 * j + 1] : b[4 * j + 2] + b[4 * j + 3];
                bs[p][l] = (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16);
            }
        }
        for (int p = 0; p < 8; p++)
            A[k].bs[p] = _mm512_loadu_si512(bs[p]);
        A[k].d = _mm512_loadu_ps(d);
    }
}

/* A row's super-block unpacked: its 256 quants, unsigned (vpdpbusd's unsigned side), in
 * order (broadcast 4 at a time) or, split, as 32 pairs of 4 from the two halves (broadcast
 * 8 at a time: quants 4g.. and 128 + 4g..); the sub-blocks' scales and the pairs the mins'
 * (Q4_K, Q5_K) or offset's (Q6_K) products take, as int32 (split: as int64 of the two
 * halves' lanes); and the f16 scales as floats. */
typedef struct {
    uint8_t q[MVM_QK_K];
    int32_t sc[16];   /* 8 sub-blocks of 32, or 16 of 16 (k_sub16) */
    int32_t pair[8];  /* int16 pairs: mins 2j, 2j + 1 (Q4_K, Q5_K: j < 4; Q2_K: j < 8);
                       * the offset types (Q3_K, Q6_K, IQ4_XS, the grid types): scales */
    int64_t sc2[8], pair2[4];
    float d, dmin;
} krow;

/* Quants 64c.. (c < 4) in order, or split: 4 at a time from chunks c and c + 2 alternately. */
AVX512_INLINE void krow_quants(int split, const __m512i c[4], uint8_t *q)
{
    if (!split) {
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            _mm512_storeu_si512(q + 64 * i, c[i]);
        return;
    }
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
        _mm512_storeu_si512(q + 128 * i, _mm512_permutex2var_epi32(c[i], lo, c[i + 2]));
        _mm512_storeu_si512(q + 128 * i + 64, _mm512_permutex2var_epi32(c[i], hi, c[i + 2]));
    }
}

AVX512_INLINE void krow_fill(enum mvm_wtype t, int split, const uint8_t *b, krow *R)
{
    __m512i c[4];
    /* the scales and the pairs as int32 vectors (Q6_K: 16 and 8; Q4_K, Q5_K: 8 and 4, the
     * upper lanes zero), and split, each lane j next to lane j + half */
    __m512i sc, pair;
    int half_sc, half_pair;
    if (t == MVM_W_Q2_K) {
        const mvm_block_q2_K *x = (const mvm_block_q2_K *)b;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            c[i] = avx512_q23_chunk(x->qs, NULL, i);
        const __m128i raw = _mm_loadu_si128((const __m128i *)x->scales);
        sc = _mm512_cvtepu8_epi32(_mm_and_si128(raw, _mm_set1_epi8(15)));
        pair = _mm512_castsi256_si512(
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15))));
        half_sc = 8, half_pair = 4;
        R->d = _cvtsh_ss(x->d);
        R->dmin = _cvtsh_ss(x->dmin);
    } else if (mvm_k_is_iqgrid(t)) {
        /* decoded as the dot products' (avx512_iqgrid.h), each quant q stored as q + 64 (the
         * offset term takes the 64 off; |q| is at most 62) */
        iq_pairs P;
        avx512_iq_decode(t, b, &P);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            c[i] = _mm512_add_epi8(
                _mm512_mask_sub_epi8(P.mag[i], P.neg[i], _mm512_setzero_si512(), P.mag[i]),
                _mm512_set1_epi8(64));
        /* a scale a chunk of 32: 8, the upper lanes 0 */
        const __m128i sv =
            _mm512_cvtepi32_epi8(k_sub16(t) ? P.sub : _mm512_maskz_mov_epi32(0xFF, P.sub));
        sc = _mm512_cvtepi8_epi32(sv);
        pair = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sv)); /* int16 pairs */
        half_sc = k_sub16(t) ? 8 : 4, half_pair = k_sub16(t) ? 4 : 2;
        R->d = _cvtsh_ss(mvm_k_iq_d(t, b));
    } else if (k_sub16(t)) {
        const mvm_block_q6_K *x = (const mvm_block_q6_K *)b;
        const mvm_block_q3_K *x3 = (const mvm_block_q3_K *)b;
        const int q3 = t == MVM_W_Q3_K;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            c[i] = q3 ? avx512_q23_chunk(x3->qs, x3->hmask, i) : avx512_q6_chunk(x, i);
        const __m128i s8 = q3 ? avx2_q3_scales(x3->scales) /* less 32 */
                              : _mm_loadu_si128((const __m128i *)x->scales);
        sc = _mm512_cvtepi8_epi32(s8);
        pair = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(s8)); /* int16 pairs */
        half_sc = 8, half_pair = 4;
        R->d = _cvtsh_ss(q3 ? x3->d : x->d);
    } else if (t == MVM_W_IQ4_XS) {
        const mvm_block_iq4_xs *x = (const mvm_block_iq4_xs *)b;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            c[i] = _mm512_xor_si512(avx512_iq4xs_chunk(x->qs, i), /* + 128: unsigned */
                                    _mm512_set1_epi8((char)0x80));
        const __m128i s16 = _mm256_castsi256_si128(avx2_iq4xs_scales(x)); /* less 32 */
        sc = _mm512_cvtepi16_epi32(_mm256_zextsi128_si256(s16));
        pair = _mm512_zextsi128_si512(s16); /* int16 pairs */
        half_sc = 4, half_pair = 2;
        R->d = _cvtsh_ss(x->d);
    } else {
        const mvm_block_q4_K *x4 = (const mvm_block_q4_K *)b;
        const mvm_block_q5_K *x5 = (const mvm_block_q5_K *)b;
        const int q5 = t == MVM_W_Q5_K;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            c[i] = avx512_q45_chunk(q5 ? x5->qs : x4->qs, q5 ? x5->qh : NULL, i);
        uint32_t u[4];
        avx2_k45_scales(x4->scales, u); /* the 8 scales, then the 8 mins */
        sc = _mm512_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)u[1], (int)u[0]));
        pair = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[3], (int)u[2])));
        half_sc = 4, half_pair = 2;
        R->d = _cvtsh_ss(x4->d);
        R->dmin = _cvtsh_ss(x4->dmin);
    }
    krow_quants(split, c, R->q);
    _mm512_storeu_si512(R->sc, sc);
    _mm256_storeu_si256((__m256i *)R->pair, _mm512_castsi512_si256(pair));
    if (split) { /* lane pairs (j, j + half) */
        const __m512i by_half = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1,
                                                 8, 0);
        const __m512i by_quarter = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 7, 3, 6, 2, 5, 1,
                                                    4, 0);
        _mm512_storeu_si512(R->sc2, _mm512_permutexvar_epi32(half_sc == 8 ? by_half : by_quarter,
                                                             sc));
        const __m512i pidx = half_pair == 4 ? by_quarter
                                            : _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 7, 3,
                                                               6, 2, 3, 1, 2, 0);
        _mm256_storeu_si256((__m256i *)R->pair2,
                            _mm512_castsi512_si256(_mm512_permutexvar_epi32(pidx, pair)));
    }
}

/* Token groups a block of rows takes at most (NR x NV <= 8 accumulators). */
#define KGROUPS 2

/* NR rows by NV token groups of int32 accumulators, zeroed (unrolled: they stay registers). */
AVX512_INLINE void zero_pairs(int NR, int NV, __m512i a[8][KGROUPS])
{
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            a[r][v] = _mm512_setzero_si512();
}

/* One super-block of NR rows against NV groups of 16 tokens (split: 8 tokens, each in a
 * pair of lanes): s[r][v] += each pair's float, avx2.h's per super-block (avx2_k45_finish
 * for Q4_K and Q5_K; ad·(d·sum − dmin·msum), unfused, for Q2_K; ad·(d·sum) for Q3_K, Q6_K
 * and IQ4_XS; ad·(d·sum)·f for the grid types, mvm_k_kscale's). A sub-block's products
 * gather in an int32 lane per token (vpdpbusd, 4 quants a step), then take the sub-block's
 * scale (an exact product: |sum| < 2^16 · 64); the same integers as every level's, so the
 * same floats. */
AVX512_INLINE void ksb(enum mvm_wtype t, int split, int NR, int NV, const krow *const R[],
                       const kacts *A[], __m512 s[][KGROUPS])
{
    const int sub = k_sub16(t) ? 4 : 8; /* steps of 4 quants per sub-block */
    const int n_sub = (MVM_QK_K / 4 / sub) >> split, P = (k_sub16(t) ? 8 : 4) >> split;
    __m512i tot[8][KGROUPS];
    zero_pairs(NR, NV, tot);
    for (int j = 0; j < n_sub; j++) {
        __m512i acc[8][KGROUPS];
        zero_pairs(NR, NV, acc);
#pragma GCC unroll 8
        for (int gg = 0; gg < sub; gg++) {
            const int g = sub * j + gg;
            __m512i a[KGROUPS];
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++)
                a[v] = A[v]->q[g];
#pragma GCC unroll 8
            for (int r = 0; r < NR; r++) {
                __m512i w;
                if (split) {
                    int64_t w8;
                    memcpy(&w8, R[r]->q + 8 * g, 8);
                    w = _mm512_set1_epi64(w8);
                } else {
                    int32_t w4;
                    memcpy(&w4, R[r]->q + 4 * g, 4);
                    w = _mm512_set1_epi32(w4);
                }
#pragma GCC unroll 2
                for (int v = 0; v < NV; v++)
                    acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], w, a[v]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const __m512i sc = split ? _mm512_set1_epi64(R[r]->sc2[j])
                                     : _mm512_set1_epi32(R[r]->sc[j]);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++)
                tot[r][v] = _mm512_add_epi32(tot[r][v], _mm512_mullo_epi32(acc[r][v], sc));
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            __m512i ms = _mm512_setzero_si512(), sum = tot[r][v];
#pragma GCC unroll 8
            for (int p = 0; p < P; p++)
                ms = _mm512_dpwssd_epi32(ms, split ? _mm512_set1_epi64(R[r]->pair2[p])
                                                   : _mm512_set1_epi32(R[r]->pair[p]),
                                         A[v]->bs[p]);
            if (split) { /* the token's two halves */
                sum = _mm512_add_epi32(sum, _mm512_shuffle_epi32(sum, _MM_PERM_CDAB));
                ms = _mm512_add_epi32(ms, _mm512_shuffle_epi32(ms, _MM_PERM_CDAB));
            }
            __m512 f;
            if (t == MVM_W_Q2_K) { /* avx2_kblock_q23's, each product rounded */
                const __m512 m = _mm512_mul_ps(_mm512_set1_ps(R[r]->dmin), _mm512_cvtepi32_ps(ms));
                f = _mm512_mul_ps(A[v]->d, _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(R[r]->d),
                                                                       _mm512_cvtepi32_ps(sum)),
                                                         m));
            } else if (t != MVM_W_Q4_K && t != MVM_W_Q5_K) {
                /* the offset: -4 (Q3_K), -32 (Q6_K), -64 (the grid types) or -128 (IQ4_XS)
                 * · Σ scale · bsum */
                const int grid = mvm_k_is_iqgrid(t);
                const unsigned o = t == MVM_W_Q3_K ? 2 : t == MVM_W_Q6_K ? 5 : grid ? 6 : 7;
                sum = _mm512_sub_epi32(sum, _mm512_slli_epi32(ms, o));
                f = _mm512_mul_ps(A[v]->d,
                                  _mm512_mul_ps(_mm512_set1_ps(R[r]->d), _mm512_cvtepi32_ps(sum)));
                if (grid) /* mvm_k_kscale's power of two, last */
                    f = _mm512_mul_ps(f, _mm512_set1_ps(mvm_k_iq_factor(t)));
            } else {
                const __m512 m = _mm512_mul_ps(_mm512_set1_ps(R[r]->dmin), _mm512_cvtepi32_ps(ms));
                f = _mm512_mul_ps(A[v]->d, _mm512_fmsub_ps(_mm512_set1_ps(R[r]->d),
                                                           _mm512_cvtepi32_ps(sum), m));
            }
            s[r][v] = _mm512_add_ps(s[r][v], f);
        }
}

/* The NR rows' super-blocks k0 .. k0 + kn - 1 unpacked into R[k·NR + r], each row's next
 * block of rows prefetched (a block's time ahead of its use: one super-block ahead came too
 * late for weights read from memory). */
AVX512_INLINE void krows_fill(enum mvm_wtype t, int split, int NR, const uint8_t *const rows[],
                              size_t rb, size_t bytes, size_t k0, size_t kn, krow *R)
{
    for (size_t k = 0; k < kn; k++)
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            avx2_prefetch_rows(rows[r] + (size_t)NR * rb + (k0 + k) * bytes, bytes);
            krow_fill(t, split, rows[r] + (k0 + k) * bytes, &R[k * (size_t)NR + (size_t)r]);
        }
}

/* NR rows from rows[] (kn super-blocks from k0) against NV token groups' kacts A[v]: each
 * pair's sum starts at its y (from_y) or 0. Taken as 8 rows by 16 tokens, or 4 rows by 32
 * or 16 (y's block is read and written as 8 x 16 a group, its rows past NR unused). The
 * rows are unpacked here, super-block by super-block, or come unpacked in Rc (krows_fill's
 * R) when the caller reuses them for several calls. */
AVX512_INLINE void krows(enum mvm_wtype t, int split, int NR, int NV, const uint8_t *const rows[],
                         size_t rb, size_t bytes, size_t k0, size_t kn, const krow *Rc,
                         kacts *const A[KGROUPS], float *y, size_t ys, int nr, int nt,
                         int from_y)
{
    /* split: token i in lanes 2i and 2i + 1 */
    const __m512i twice = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i once = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512 s[8][KGROUPS];
    if (NV == 1) {
        __m512 b[8];
        if (from_y)
            ylanes_load(y, ys, nr, nt, b);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            s[r][0] = !from_y ? _mm512_setzero_ps()
                      : split ? _mm512_permutexvar_ps(twice, b[r]) : b[r];
    } else {
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            const int n = nt - 16 * v < 16 ? nt - 16 * v : 16;
            __m512 b[8];
            if (from_y)
                ylanes_load(y + (size_t)(16 * v) * ys, ys, nr, n, b);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                s[r][v] = from_y ? b[r] : _mm512_setzero_ps();
        }
    }
    for (size_t k = 0; k < kn; k++) {
        krow R[8];
        const krow *Rp[8];
        if (!Rc)
            krows_fill(t, split, NR, rows, rb, bytes, k0 + k, 1, R);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++)
            Rp[r] = Rc ? &Rc[k * (size_t)NR + (size_t)r] : &R[r];
        const kacts *Ak[KGROUPS];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            Ak[v] = A[v] + k;
        ksb(t, split, NR, NV, Rp, Ak, s);
    }
    if (NV == 1) {
        __m512 b[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            b[r] = split ? _mm512_permutexvar_ps(once, s[r][0]) : s[r][0];
        ylanes_store(y, ys, nr, nt, b);
        return;
    }
#pragma GCC unroll 2
    for (int v = 0; v < NV; v++) {
        const int n = nt - 16 * v < 16 ? nt - 16 * v : 16;
        __m512 b[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            b[r] = r < NR ? s[r][v] : _mm512_setzero_ps();
        ylanes_store(y + (size_t)(16 * v) * ys, ys, nr, n, b);
    }
}

/* krows for the shapes the callers take, each with its constants (so that its loops
 * unroll and its accumulators stay registers): 4 rows by 2 groups or 1, 8 rows by 1, split
 * or not. */
AVX512_INLINE void krows_at(enum mvm_wtype t, int split, int NR, int NV,
                            const uint8_t *const rows[], size_t rb, size_t bytes, size_t k0,
                            size_t kn, const krow *Rc, kacts *const A[KGROUPS], float *y,
                            size_t ys, int nr, int nt, int from_y)
{
    if (NV == 2)
        krows(t, 0, 4, 2, rows, rb, bytes, k0, kn, Rc, A, y, ys, nr, nt, from_y);
    else if (NR == 4)
        krows(t, 0, 4, 1, rows, rb, bytes, k0, kn, Rc, A, y, ys, nr, nt, from_y);
    else if (split)
        krows(t, 1, 8, 1, rows, rb, bytes, k0, kn, Rc, A, y, ys, nr, nt, from_y);
    else
        krows(t, 0, 8, 1, rows, rb, bytes, k0, kn, Rc, A, y, ys, nr, nt, from_y);
}

/* y's block of tokens by YTILE_ROWS rows is staged in a buffer of YTILE_STRIDE
 * floats a token. y's tokens are often a power of two of floats apart (n_embd: 8 KiB for
 * OLMoE), which puts a block's 16 to 32 token lines in one L1 set of 8 ways: written 8 rows
 * (half a line) at a time, each line was evicted before its other half came and fetched
 * twice. Staged, each token's YTILE_ROWS floats move once, whole lines in a row: the
 * expert's Q6_K down product +34% at 32 tokens (bench_cpu_expert_tokens, docs/perf/cpu.md).
 * The stride's 16 extra floats spread the tokens over the sets. */
#define YTILE_ROWS 64
#define YTILE_STRIDE (YTILE_ROWS + 16)

/* tile[i][0 .. nr) <-> y[i * ys + 0 .. nr) for nt tokens. */
AVX512_INLINE void ytile_move(float *y, size_t ys, float *tile, int nr, int nt, int to_y)
{
    const __mmask16 tail = (__mmask16)((1u << (nr % 16)) - 1);
    for (int i = 0; i < nt; i++) {
        float *a = y + (size_t)i * ys, *b = tile + (size_t)i * YTILE_STRIDE;
        float *dst = to_y ? a : b;
        const float *src = to_y ? b : a;
        int c = 0;
        for (; c + 16 <= nr; c += 16)
            _mm512_storeu_ps(dst + c, _mm512_loadu_ps(src + c));
        if (c < nr)
            _mm512_mask_storeu_ps(dst + c, tail, _mm512_maskz_loadu_ps(tail, src + c));
    }
}

/* Tokens a call of more than 32 takes at once (gemm_k_wide): their activations' pieces
 * (4.7 KiB a token group and super-block) and y's tile on the heap, 300 KiB at most. */
#define KWIDE_TOKENS 128

/* More than 32 tokens: each block of 4 rows is unpacked once (krows_fill) for up to 128
 * of them (the passes made even: mvm_k_even_pass), then taken against 32 tokens at a
 * time, as llama.cpp's tiled path unpacks a tile once for all its tokens. With the rows unpacked once per 32 tokens, as gemm_k takes
 * them, the lattice-grid types (grid entries by scalar loads) spent about half as long
 * unpacking as multiplying. One thread, 1024 rows x 2048, 112 tokens (a prompt's
 * projection), GMAC/s: IQ3_XXS 221 -> 264, IQ2_XXS 238 -> 282, Q5_K 267 -> 349, Q6_K 255
 * -> 314, Q4_K 308 -> 343 (docs/perf/cpu.md). 0 where the heap fails. */
AVX512_INLINE int gemm_k_wide(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                              const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y,
                              size_t ys, int add)
{
    const size_t nb = n / MVM_QK_K, bytes = mvm_k_block_bytes(t);
    kacts *A = aligned_alloc(64, KWIDE_TOKENS / 16 * KPIECE_SB * sizeof *A);
    float *tile = aligned_alloc(64, KWIDE_TOKENS * YTILE_STRIDE * sizeof *tile);
    krow *R = aligned_alloc(64, 4 * KPIECE_SB * sizeof *R);
    const int ok = A && tile && R;
    const size_t per = mvm_k_even_pass(n_tok, KWIDE_TOKENS, 16);
    for (size_t c0 = 0; ok && c0 < n_tok; c0 += per) {
        const int nc = n_tok - c0 < per ? (int)(n_tok - c0) : (int)per;
        const int ng = (nc + 15) / 16;
        const uint8_t *a = act + c0 * as;
        for (size_t k0 = 0; k0 < nb; k0 += KPIECE_SB) {
            const size_t kn = nb - k0 < KPIECE_SB ? nb - k0 : KPIECE_SB;
            for (int g = 0; g < ng; g++)
                kacts_fill(t, 0, a + (size_t)(16 * g) * as, as,
                           nc - 16 * g < 16 ? nc - 16 * g : 16, k0, kn, A + g * KPIECE_SB);
            const int from_y = add || k0 > 0;
            for (size_t y0 = 0; y0 < n_rows; y0 += YTILE_ROWS) {
                const int ny = n_rows - y0 < YTILE_ROWS ? (int)(n_rows - y0) : YTILE_ROWS;
                float *yt = y + c0 * ys + y0;
                if (from_y)
                    ytile_move(yt, ys, tile, ny, nc, 0);
                for (int b = 0; b < ny; b += 4) {
                    const int nr = ny - b < 4 ? ny - b : 4;
                    const uint8_t *rows[4];
                    block_rows(w, rb, y0 + (size_t)b, 4, nr, rows);
                    krows_fill(t, 0, 4, rows, rb, bytes, k0, kn, R);
                    for (int g = 0; g < ng; g += 2) {
                        kacts *const Av[KGROUPS] = {A + g * KPIECE_SB,
                                                    A + (g + 1 < ng ? g + 1 : g) * KPIECE_SB};
                        const int nt = nc - 16 * g < 32 ? nc - 16 * g : 32;
                        float *tb = tile + (size_t)(16 * g) * YTILE_STRIDE + b;
                        krows_at(t, 0, 4, nt > 16 ? 2 : 1, rows, rb, bytes, k0, kn, R, Av, tb,
                                 YTILE_STRIDE, nr, nt, from_y);
                    }
                }
                ytile_move(yt, ys, tile, ny, nc, 1);
            }
        }
    }
    free(A), free(tile), free(R);
    return ok;
}

/* Up to 32 tokens at a time (two groups: 4 rows a block), or 16 (8 rows), or up to 8 (8
 * rows, split): 8 pairs of accumulators each way, enough to hide vpdpbusd's latency; more
 * than 32, gemm_k_wide. */
AVX512_INLINE void gemm_k(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                          const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y,
                          size_t ys, int add)
{
    if (n_tok < MVM_K_ROWS_TOKENS && n > MVM_QK_K && mvm_k_has_rows_vnni(t)) {
        mvm_k_gemm_rows_vnni(t, w, rb, n_rows, act, as, n_tok, n, y, ys, add);
        return;
    }
    if (n_tok > 32 && gemm_k_wide(t, w, rb, n_rows, act, as, n_tok, n, y, ys, add))
        return;
    const size_t nb = n / MVM_QK_K, bytes = mvm_k_block_bytes(t);
    kacts A[KGROUPS][KPIECE_SB];
    float tile[32 * YTILE_STRIDE];
    for (size_t t0 = 0; t0 < n_tok; t0 += 32) {
        const int nt = n_tok - t0 < 32 ? (int)(n_tok - t0) : 32, NV = nt > 16 ? 2 : 1;
        const int NR = NV == 2 ? 4 : 8, split = nt <= 8;
        const uint8_t *a = act + t0 * as;
        for (size_t k0 = 0; k0 < nb; k0 += KPIECE_SB) {
            const size_t kn = nb - k0 < KPIECE_SB ? nb - k0 : KPIECE_SB;
            if (split)
                kacts_fill(t, 1, a, as, nt, k0, kn, A[0]);
            else
                kacts_fill(t, 0, a, as, nt < 16 ? nt : 16, k0, kn, A[0]);
            if (NV == 2)
                kacts_fill(t, 0, a + 16 * as, as, nt - 16, k0, kn, A[1]);
            kacts *const Av[KGROUPS] = {A[0], A[1]};
            const int from_y = add || k0 > 0;
            for (size_t y0 = 0; y0 < n_rows; y0 += YTILE_ROWS) {
                const int ny = n_rows - y0 < YTILE_ROWS ? (int)(n_rows - y0) : YTILE_ROWS;
                float *yt = y + t0 * ys + y0;
                if (from_y)
                    ytile_move(yt, ys, tile, ny, nt, 0);
                for (int b = 0; b < ny; b += NR) {
                    const int nr = ny - b < NR ? ny - b : NR;
                    const uint8_t *rows[8];
                    block_rows(w, rb, y0 + (size_t)b, NR, nr, rows);
                    krows_at(t, split, NR, NV, rows, rb, bytes, k0, kn, NULL, Av, tile + b,
                             YTILE_STRIDE, nr, nt, from_y);
                }
                ytile_move(yt, ys, tile, ny, nt, 1);
            }
        }
    }
}

/* gemm_k for five of the lattice-grid types, made in gemm_iq_avx512vnni.c
 * (mvm_k_gemm_vnni_<type>), for gemm_avx512vnni.c's table: the two files' instances take
 * about as long to compile (at -O2 -g1 a K-quant's took 2 s, a lattice-grid type's 6-14). */
#define MVM_K_VNNI_IQ_TYPES(X)                                                                     \
    X(iq2_xxs, MVM_W_IQ2_XXS) X(iq2_xs, MVM_W_IQ2_XS) X(iq2_s, MVM_W_IQ2_S)                      \
    X(iq3_xxs, MVM_W_IQ3_XXS) X(iq1_s, MVM_W_IQ1_S)
#define MVM_K_VNNI_DECLARE(sfx, type)                                                              \
    void mvm_k_gemm_vnni_##sfx(const void *w, size_t rb, size_t n_rows, const void *act,          \
                               size_t as, size_t n_tok, size_t n, float *y, size_t ys, int add);
MVM_K_VNNI_IQ_TYPES(MVM_K_VNNI_DECLARE)
#undef MVM_K_VNNI_DECLARE

#endif
#endif
