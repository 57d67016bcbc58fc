/*
 * What the AVX-512 VNNI level's multi-row kernels share (gemm_avx512vnni.c for the K-quants,
 * gemm_q_avx512vnni.c for the 32-element Q types): a vector's 16 lanes are 16 tokens, so the tokens'
 * quants are interleaved once per call (transpose16) and a block of outputs, [token][row]
 * in y, is moved in and out of the lanes through 8 x 8 transposes (ylanes_load/store).
 * Included by those files only, after they define MVM_K_VNNI.
 */
#ifndef MVM_KERNELS_CPU_GEMM_LANES_H
#define MVM_KERNELS_CPU_GEMM_LANES_H

#include "kernels/cpu/avx512.h"

/* 16 vectors' 16 int32 lanes transposed: lane j of out[i] is lane i of in[j]. */
AVX512_INLINE void transpose16(const __m512i in[16], __m512i out[16])
{
    __m512i t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    /* u[4i + m]'s 128-bit lane L: rows 4i..4i+3 of column 4L + m */
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        const __m512i v1 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x88);
        const __m512i v2 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xDD);
        const __m512i w1 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x88);
        const __m512i w2 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xDD);
        out[m] = _mm512_shuffle_i32x4(v1, w1, 0x88);
        out[4 + m] = _mm512_shuffle_i32x4(v2, w2, 0x88);
        out[8 + m] = _mm512_shuffle_i32x4(v1, w1, 0xDD);
        out[12 + m] = _mm512_shuffle_i32x4(v2, w2, 0xDD);
    }
}

/* A multi-row kernel's block of NR rows from `row` (rb bytes apart), nr of them in the
 * matrix: the rest repeat its last (computed, never stored). */
AVX512_INLINE void block_rows(const uint8_t *w, size_t rb, size_t row, int NR, int nr,
                              const uint8_t *rows[])
{
    for (int r = 0; r < NR; r++)
        rows[r] = w + (row + (size_t)(r < nr ? r : nr - 1)) * rb;
}

/* 8 vectors of 8 floats transposed in place (the classic unpack, shuffle, permute). */
AVX512_INLINE void transpose8(__m256 r[8])
{
    __m256 t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}

/* y's block of 8 rows by 16 tokens ([token][row], ys apart) as s[r] (lane i: token i), and
 * back: the rows and tokens past nr and nt are zero and never stored. */
AVX512_INLINE void ylanes_load(const float *y, size_t ys, int nr, int nt, __m512 s[8])
{
    const __mmask8 rows = (__mmask8)((1u << nr) - 1);
    __m256 lo[8], hi[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        lo[i] = i < nt ? _mm256_maskz_loadu_ps(rows, y + (size_t)i * ys) : _mm256_setzero_ps();
        hi[i] = 8 + i < nt ? _mm256_maskz_loadu_ps(rows, y + (size_t)(8 + i) * ys)
                           : _mm256_setzero_ps();
    }
    transpose8(lo);
    transpose8(hi);
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        s[r] = _mm512_insertf32x8(_mm512_castps256_ps512(lo[r]), hi[r], 1);
}
AVX512_INLINE void ylanes_store(float *y, size_t ys, int nr, int nt, const __m512 s[8])
{
    const __mmask8 rows = (__mmask8)((1u << nr) - 1);
    __m256 lo[8], hi[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        lo[r] = _mm512_castps512_ps256(s[r]);
        hi[r] = _mm512_extractf32x8_ps(s[r], 1);
    }
    transpose8(lo);
    transpose8(hi);
    for (int i = 0; i < nt; i++)
        _mm256_mask_storeu_ps(y + (size_t)i * ys, rows, i < 8 ? lo[i] : hi[i - 8]);
}

/* Below this many tokens the K-quant products over rows of several super-blocks have the
 * rows in the lanes instead (gemm_rows_avx512vnni.c: no lane idle at any count); at it and
 * above, the tokens. An OLMoE expert streamed from memory (bench_cpu_expert_tokens, its gate
 * and up products so, GMAC/s against the tokens in the lanes): Q4_K at 4 tokens 52 against
 * 40, at 8 82 against 78, at 12 89 against 76, at 15 96 against 99; Q5_K ahead up to 12,
 * behind from 13. */
#define MVM_K_ROWS_TOKENS 13

/* Whether the type has a rows-in-lanes kernel (mvm_k_gemm_rows_vnni): the K-quants whose
 * super-blocks rblock decodes. */
static inline int mvm_k_has_rows_vnni(enum mvm_wtype t)
{
    return t == MVM_W_Q4_K || t == MVM_W_Q5_K || t == MVM_W_Q6_K;
}

/* The K-quants' products of fewer than MVM_K_ROWS_TOKENS tokens (gemm_rows_avx512vnni.c),
 * t one that mvm_k_has_rows_vnni takes; mvm_k_gemm_fn's arguments otherwise. */
void mvm_k_gemm_rows_vnni(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                          const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y,
                          size_t ys, int add);

/* The 32-element Q types' products (gemm_q_avx512vnni.c): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * IQ4_NL and MXFP4; mvm_k_gemm_fn's arguments otherwise. */
void mvm_k_gemm_q_vnni(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                       const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y, size_t ys,
                       int add);

/* A tiled Q8_0 expert's products (gemm_q_avx512vnni.c), the tiles table's entry. */
void mvm_k_tiles_q8_0_vnni(const void *w, size_t rb, size_t n_rows, const void *act, size_t as,
                           size_t n_tok, size_t n, float *y, size_t ys, int add);

#endif
