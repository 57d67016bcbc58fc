/*
 * The AVX-512 VNNI level's multi-row kernels (dispatch.h's mvm_k_gemm_fn) for the types most
 * files are made of (Q8_0, and the K-quants of llama.cpp's Q4_K_M and Q5_K_M: Q4_K, Q5_K,
 * Q6_K): prefill's matrix products and an expert's batch, in tiles of 4 rows by 4 tokens.
 *
 * Why tiles: the dotn kernels (avx2.h) unpack a row's block once for up to 4 tokens, but each
 * token then spends 8 instructions per 64 weights (maddubs, madd with the sub-block's scale,
 * add, two loads) and two horizontal sums per super-block. Here a 64-weight chunk costs one
 * vpmaddubsw and one vpdpwssd per (row, token) pair (the scale in both halves of each int32
 * lane: pair sums of at most 2·63·128 do not saturate), each weight chunk is unpacked once
 * per row tile into a panel that every token tile reads, and each activation chunk is
 * loaded once for 4 rows; the 16 pairs' sums are reduced together at the end of the
 * super-block (hsum16: 45 instructions for 16 horizontal sums), and the mins (Q4_K, Q5_K)
 * and Q6_K's -32 offset come from the activations' block sums as ever. (vpdpbusd into a
 * zeroed register, then vpdpwssd with the scale in the low half, measured the same.)
 * Q8_0 keeps its 8-block steps: each pair's 8 block sums come from 4 vpdpbusd (weights + 128,
 * the activations' 128·Σa taken off) and a transposing reduction shared by two rows, then
 * one multiply-add of the 8 scales' products, as avx2_dotn_q does it; the down loop's
 * "rows" are 8 outputs' blocks, as avx2_downn_q takes them.
 *
 * The results are bitwise dotn's (dispatch.h's contract; test_kernels checks it at every
 * size and tail): the integer sums are exact in any order, and the float work per
 * super-block is avx2.h's, in the same order, 16 lanes at once (avx2_k45_finish for Q4_K and
 * Q5_K; ad·(d·sum) for Q6_K), added into each pair's sum in super-block order. A tile cut
 * short by the matrix's edge repeats its last row or token and does not store them.
 */
#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#define MVM_K_VNNI 1
#include "kernels/cpu/avx512.h"

/* Rows and tokens of a tile: 16 accumulators, half of the 32 vector registers. Pair p of a
 * tile is lane p = 4·token + row of the 16-lane vectors, so a token's 4 rows are adjacent
 * floats of its output. */
#define TILE 4

/* Lane p of the result: the sum of v[p]'s 16 lanes. Pairs of vectors are interleaved and
 * added (32-bit, then 64-bit), which leaves each 128-bit lane with 4 vectors' partial sums,
 * and the 128-bit lanes are then added across by two rounds of shuffles. */
AVX512_INLINE __m512i hsum16(const __m512i v[16])
{
    __m512i s1[8], s2[4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        s1[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                                 _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        s2[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(s1[2 * i], s1[2 * i + 1]),
                                 _mm512_unpackhi_epi64(s1[2 * i], s1[2 * i + 1]));
    const __m512i a = _mm512_add_epi32(_mm512_shuffle_i32x4(s2[0], s2[1], 0x88),
                                       _mm512_shuffle_i32x4(s2[0], s2[1], 0xDD));
    const __m512i b = _mm512_add_epi32(_mm512_shuffle_i32x4(s2[2], s2[3], 0x88),
                                       _mm512_shuffle_i32x4(s2[2], s2[3], 0xDD));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xDD));
}

/* Lane p of the result: v4[p % 4] (a row's value in each pair) or v4[p / 4] (a token's). */
AVX512_INLINE __m512 by_row(const float v4[TILE])
{
    return _mm512_permutexvar_ps(_mm512_set_epi32(3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0),
                                 _mm512_castps128_ps512(_mm_loadu_ps(v4)));
}
AVX512_INLINE __m512 by_token(const float v4[TILE])
{
    return _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(_mm_loadu_ps(v4)));
}

/* The scale vector of a 64-weight chunk: lane l gets s[base + l / per] in both of its int16
 * halves (s: 16 int32 lanes, high halves zero), vpdpwssd's factor for vpmaddubsw's pairs. */
AVX512_INLINE __m512i chunk_scales(__m512i s, int base, int per)
{
    __m512i idx = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    idx = per == 8 ? _mm512_srli_epi32(idx, 3) : _mm512_srli_epi32(idx, 2);
    const __m512i lo = _mm512_permutexvar_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(base)), s);
    return _mm512_or_si512(lo, _mm512_slli_epi32(lo, 16));
}

/* acc[p] += the tile's products of chunk c (64 weights each: w[r]) with the tokens' 64
 * activations, scaled by sc[r]. */
AVX512_INLINE void tile_chunk(__m512i acc[16], const __m512i w[TILE], const __m512i sc[TILE],
                              const mvm_block_q8_K *const a[TILE], int c)
{
#pragma GCC unroll 4
    for (int t = 0; t < TILE; t++) {
        const __m512i av = _mm512_loadu_si512(a[t]->qs + 64 * c);
#pragma GCC unroll 4
        for (int r = 0; r < TILE; r++)
            acc[TILE * t + r] =
                _mm512_dpwssd_epi32(acc[TILE * t + r], _mm512_maddubs_epi16(w[r], av), sc[r]);
    }
}

/* Chunk c of a Q4_K/Q5_K super-block: sub-block 2c from the low nibbles of qs[32c..], 2c+1
 * from the high ones, the fifth bits of Q5_K from bits 2c and 2c+1 of qh. */
AVX512_INLINE __m512i q45_chunk(const uint8_t *qs, const uint8_t *qh, int c)
{
    const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
    __m512i w = _mm512_and_si512(
        _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1),
        _mm512_set1_epi8(0x0F));
    if (qh) {
        const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
        const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * c)),
                                                 _mm256_set1_epi16((short)(2 * c + 1)), 1);
        w = _mm512_or_si512(w, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(h, shift),
                                                                  _mm512_set1_epi8(1)),
                                                 4));
    }
    return w;
}

/* Chunk c of a Q6_K super-block, quants 0..63 (the -32 is the offset term): ql[64h..] nibbles
 * (low for even c, high for odd), bits 4(c & 1) and 4(c & 1) + 2 of qh[32h..], h = c / 2. */
AVX512_INLINE __m512i q6_chunk(const mvm_block_q6_K *x, int c)
{
    const int h = c >> 1, s = 4 * (c & 1);
    const __m512i lo = _mm512_and_si512(
        _mm512_srli_epi16(_mm512_loadu_si512(x->ql + 64 * h), (unsigned)s), _mm512_set1_epi8(0x0F));
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qh + 32 * h)));
    const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16((short)s),
                                             _mm256_set1_epi16((short)(s + 2)), 1);
    const __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(qh, shift), _mm512_set1_epi8(3));
    return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
}

/* One super-block of a tile's 4 rows, unpacked once for every tile of tokens that meets it:
 * chunk c's quants and scale vectors per row (the quants in a register for vpmaddubsw's
 * unsigned side, the scales a memory operand of vpdpwssd), the mins as the rows' side of
 * the mins' products (rows_j: Q4_K, Q5_K) or -32·scale for the offset (Q6_K), and the f16
 * scales by row. */
typedef struct {
    __m512i w[4][TILE], sc[4][TILE];
    __m512i mins[4]; /* Q4_K, Q5_K: j = 0..3: lane p has row p % 4's mins 2j, 2j+1 (int16) */
    __m512i off[TILE]; /* Q6_K: row r's -32·scale (16 int16; |.| <= 4096), high half zero */
    __m512 d, dmin;
} panel;

/* The super-blocks a panel holds at most: 16 of them take 43 KiB of the stack, and a row
 * longer than 4096 weights is taken in pieces of this many super-blocks. */
#define PANEL_SB 16

/* Lane p: row p % 4's (rows) or token p / 4's (toks) int32 lane 4·(its index) + j, of the
 * 128-bit lanes of v (row or token i in 128-bit lane i). */
AVX512_INLINE __m512i rows_j(__m512i v, int j)
{
    return _mm512_permutexvar_epi32(
        _mm512_add_epi32(_mm512_set_epi32(12, 8, 4, 0, 12, 8, 4, 0, 12, 8, 4, 0, 12, 8, 4, 0),
                         _mm512_set1_epi32(j)),
        v);
}
AVX512_INLINE __m512i toks_j(__m512i v, int j)
{
    return _mm512_permutexvar_epi32(
        _mm512_add_epi32(_mm512_set_epi32(12, 12, 12, 12, 8, 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0),
                         _mm512_set1_epi32(j)),
        v);
}

/* A tile's row pointers from row r0 of w (rows rb bytes apart), the last of the nr rows the
 * matrix has left repeated into the slots past it (computed, never stored). */
AVX512_INLINE void tile_rows(const uint8_t *w, size_t rb, size_t r0, int nr,
                             const uint8_t *rows[TILE])
{
    for (int r = 0; r < TILE; r++)
        rows[r] = w + (r0 + (size_t)(r < nr ? r : nr - 1)) * rb;
}

/* Four 128-bit values as the 128-bit lanes of one vector. */
AVX512_INLINE __m512i lanes4(const __m128i v[TILE])
{
    const __m512i r = _mm512_inserti32x4(_mm512_castsi128_si512(v[0]), v[1], 1);
    return _mm512_inserti32x4(_mm512_inserti32x4(r, v[2], 2), v[3], 3);
}

AVX512_INLINE void panel_fill(enum mvm_wtype t, const uint8_t *const b[TILE], panel *P)
{
    uint16_t dh[2 * TILE] = {0}; /* the rows' f16 scales, then their mins' */
    __m128i mins[TILE];
#pragma GCC unroll 4
    for (int r = 0; r < TILE; r++) {
        if (t == MVM_W_Q6_K) {
            const mvm_block_q6_K *x = (const mvm_block_q6_K *)b[r];
            const __m128i s8 = _mm_loadu_si128((const __m128i *)x->scales);
            const __m512i s = _mm512_and_si512(_mm512_cvtepi8_epi32(s8), _mm512_set1_epi32(0xFFFF));
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                P->w[c][r] = q6_chunk(x, c);
                P->sc[c][r] = chunk_scales(s, 4 * c, 4);
            }
            P->off[r] = _mm512_inserti64x4(
                _mm512_castsi256_si512(
                    _mm256_mullo_epi16(_mm256_cvtepi8_epi16(s8), _mm256_set1_epi16(-32))),
                _mm256_setzero_si256(), 1);
            dh[r] = x->d;
            continue;
        }
        const mvm_block_q4_K *x4 = (const mvm_block_q4_K *)b[r];
        const mvm_block_q5_K *x5 = (const mvm_block_q5_K *)b[r];
        const int q5 = t == MVM_W_Q5_K;
        uint32_t u[4];
        avx2_k45_scales(x4->scales, u);
        const __m512i s = _mm512_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)u[1], (int)u[0]));
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            P->w[c][r] = q45_chunk(q5 ? x5->qs : x4->qs, q5 ? x5->qh : NULL, c);
            P->sc[c][r] = chunk_scales(s, 2 * c, 8);
        }
        mins[r] = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[3], (int)u[2]));
        dh[r] = x4->d;
        dh[TILE + r] = x4->dmin;
    }
    if (t != MVM_W_Q6_K) {
        const __m512i m = lanes4(mins);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            P->mins[j] = rows_j(m, j);
    }
    /* the 8 halves in one conversion (exact, as mvm_k_h2f's) */
    float f[2 * TILE];
    _mm256_storeu_ps(f, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh)));
    P->d = by_row(f);
    P->dmin = by_row(f + TILE);
}

/* The 16 pairs' floats of one super-block: the panel's rows against the tokens' Q8_K blocks
 * a[t]. Q4_K/Q5_K: avx2_k45_finish, 16 lanes at once; Q6_K: ad·(d·sum), the offset joining
 * each pair's integer sum first. */
AVX512_INLINE __m512 tile_sb(enum mvm_wtype t, const panel *P, const mvm_block_q8_K *const a[TILE])
{
    __m512i acc[16];
    float ad[TILE];
#pragma GCC unroll 4
    for (int i = 0; i < TILE; i++) {
        ad[i] = a[i]->d;
        if (t == MVM_W_Q6_K) {
            const __m512i bs = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a[i]->bsums)),
                _mm256_setzero_si256(), 1);
#pragma GCC unroll 4
            for (int r = 0; r < TILE; r++)
                acc[TILE * i + r] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), P->off[r], bs);
        } else {
#pragma GCC unroll 4
            for (int r = 0; r < TILE; r++)
                acc[TILE * i + r] = _mm512_setzero_si512();
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++)
        tile_chunk(acc, P->w[c], P->sc[c], a, c);
    const __m512 sum = _mm512_cvtepi32_ps(hsum16(acc));
    if (t == MVM_W_Q6_K)
        return _mm512_mul_ps(by_token(ad), _mm512_mul_ps(P->d, sum));
    /* sub-block j's activation sum: bsums 2j and 2j + 1 (at most 32·128: an int16) */
    __m128i sums[TILE];
#pragma GCC unroll 4
    for (int i = 0; i < TILE; i++)
        sums[i] = _mm256_cvtepi32_epi16(_mm256_madd_epi16(
            _mm256_loadu_si256((const __m256i *)a[i]->bsums), _mm256_set1_epi16(1)));
    const __m512i tv = lanes4(sums);
    __m512i ms = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        ms = _mm512_dpwssd_epi32(ms, P->mins[j], toks_j(tv, j));
    const __m512 m = _mm512_mul_ps(P->dmin, _mm512_cvtepi32_ps(ms));
    return _mm512_mul_ps(by_token(ad), _mm512_fmsub_ps(P->d, sum, m));
}

/* One tile of tokens a[t] (Q8_K blocks from the panels' first super-block on) against n
 * panels: each pair's sum starts at its y (add, or a later piece of the row) or 0 and takes
 * the super-blocks in order. */
AVX512_INLINE void tile(enum mvm_wtype t, const panel *P, size_t n,
                        const mvm_block_q8_K *const a[TILE], float *y, size_t ys, int n_rows,
                        int n_tok, int from_y)
{
    /* a token's n_rows outputs by masked moves (a loop of scalars became a memcpy call) */
    const __mmask8 rows = (__mmask8)((1u << n_rows) - 1);
    float v[16] = {0};
    for (int i = 0; i < n_tok && from_y; i++)
        _mm_storeu_ps(v + TILE * i, _mm_maskz_loadu_ps(rows, y + i * ys));
    __m512 s = _mm512_loadu_ps(v);
    for (size_t k = 0; k < n; k++) {
        const mvm_block_q8_K *ak[TILE];
#pragma GCC unroll 4
        for (int i = 0; i < TILE; i++)
            ak[i] = a[i] + k;
        s = _mm512_add_ps(s, tile_sb(t, &P[k], ak));
    }
    _mm512_storeu_ps(v, s);
    for (int i = 0; i < n_tok; i++)
        _mm_mask_storeu_ps(y + i * ys, rows, _mm_loadu_ps(v + TILE * i));
}

AVX512_INLINE void gemm_k(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                          const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y,
                          size_t ys, int add)
{
    const size_t nb = n / MVM_QK_K, bytes = mvm_k_block_bytes(t);
    panel P[nb < PANEL_SB ? (nb ? nb : 1) : PANEL_SB]; /* the stack a row's length needs */
    for (size_t r0 = 0; r0 < n_rows; r0 += TILE) {
        const int nr = n_rows - r0 < TILE ? (int)(n_rows - r0) : TILE;
        const uint8_t *rows[TILE];
        tile_rows(w, rb, r0, nr, rows);
        for (size_t k0 = 0; k0 < nb; k0 += PANEL_SB) {
            const size_t kn = nb - k0 < PANEL_SB ? nb - k0 : PANEL_SB;
            for (size_t k = 0; k < kn; k++) {
                const uint8_t *b[TILE];
#pragma GCC unroll 4
                for (int r = 0; r < TILE; r++) {
                    b[r] = rows[r] + (k0 + k) * bytes;
                    avx2_prefetch(b[r], bytes);
                }
                panel_fill(t, b, &P[k]);
            }
            for (size_t t0 = 0; t0 < n_tok; t0 += TILE) {
                const int nt = n_tok - t0 < TILE ? (int)(n_tok - t0) : TILE;
                const mvm_block_q8_K *toks[TILE];
                for (int i = 0; i < TILE; i++)
                    toks[i] = AVX2_TOK(mvm_block_q8_K, act, as,
                                       t0 + (size_t)(i < nt ? i : nt - 1)) + k0;
                tile(t, P, kn, toks, y + t0 * ys + r0, ys, nr, nt, add || k0 > 0);
            }
        }
    }
}

/* ---- Q8_0: steps of 8 blocks, as avx2_dotn_q and avx2_downn_q take them ---------------- */

/* A step of a tile's 4 weight sets: a row's blocks 8s..8s+7 (matmul) or one block of each of
 * 8 outputs (the down loop), each byte + 128 (vpdpbusd's unsigned side; the 128·Σa this
 * adds is taken off each block's sum: qtok.corr2), and their scales paired as the results
 * are: rows 0 and 1 in ws2[0], 2 and 3 in ws2[1]. */
typedef struct {
    __m512i w[TILE][4]; /* set r: blocks 2k, 2k + 1 in vector k */
    __m512 ws2[2];
} qstep;

/* A token's side of a step: its 8 blocks' quants (the same block 8 times in the down loop),
 * 128·Σa of each block and the 8 scales, each twice (for a pair of sets). */
typedef struct {
    __m512i a[4], corr2;
    __m512 da2;
} qtok;

#define Q8_STEP_BLOCKS 8

AVX512_INLINE void qstep_fill(const uint8_t *const set[TILE], size_t stride, qstep *S)
{
    __m256 ws[TILE];
#pragma GCC unroll 4
    for (int r = 0; r < TILE; r++) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const mvm_block_q8_0 *b0 = (const mvm_block_q8_0 *)(set[r] + 2 * k * stride);
            const mvm_block_q8_0 *b1 = (const mvm_block_q8_0 *)(set[r] + (2 * k + 1) * stride);
            S->w[r][k] = _mm512_xor_si512(
                _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b0->qs)),
                    _mm256_loadu_si256((const __m256i *)b1->qs), 1),
                _mm512_set1_epi8((char)0x80));
        }
        ws[r] = avx2_scales8(set[r], stride);
    }
    S->ws2[0] = _mm512_insertf32x8(_mm512_castps256_ps512(ws[0]), ws[1], 1);
    S->ws2[1] = _mm512_insertf32x8(_mm512_castps256_ps512(ws[2]), ws[3], 1);
}

/* A token's step: its blocks a[0..7], or (one_block, the down loop) block a for all 8. */
AVX512_INLINE void qtok_fill(const mvm_block_q8_0 *a, int one_block, qtok *T)
{
    const __m256i c80 = _mm256_set1_epi8((char)0x80), zero = _mm256_setzero_si256();
    __m256i c[Q8_STEP_BLOCKS];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const mvm_block_q8_0 *b0 = one_block ? a : a + 2 * k, *b1 = one_block ? a : a + 2 * k + 1;
        const __m256i q0 = _mm256_loadu_si256((const __m256i *)b0->qs);
        const __m256i q1 = _mm256_loadu_si256((const __m256i *)b1->qs);
        T->a[k] = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
        c[2 * k] = _mm256_dpbusd_epi32(zero, c80, q0);
        c[2 * k + 1] = _mm256_dpbusd_epi32(zero, c80, q1);
    }
    /* block j's 128·Σa in lane j: a transposing sum of the 8 vectors of lane sums */
    const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(c[0], c[1]), _mm256_hadd_epi32(c[2], c[3]));
    const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(c[4], c[5]), _mm256_hadd_epi32(c[6], c[7]));
    const __m256i corr = _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20),
                                          _mm256_permute2x128_si256(h0, h1, 0x31));
    T->corr2 = _mm512_inserti64x4(_mm512_castsi256_si512(corr), corr, 1);
    const __m256 da = one_block ? _mm256_set1_ps(_cvtsh_ss(a->d))
                                : avx2_scales8((const uint8_t *)a, sizeof *a);
    T->da2 = _mm512_insertf32x8(_mm512_castps256_ps512(da), da, 1);
}

/* The step's exact block sums for one token against the 4 sets, as floats: v[0] has set 0's
 * 8 blocks in lanes 0-7 and set 1's in 8-15, v[1] sets 2 and 3. Each set's 4 vectors of
 * lane sums are folded in pairs (32-bit, then 64-bit interleaves), two sets' results then
 * added across 128-bit lanes, the blocks put in order by one permute and the +128's
 * products taken off. */
AVX512_INLINE void qstep_sums(const qstep *S, const qtok *T, __m512 v[2])
{
    __m512i u[TILE];
#pragma GCC unroll 4
    for (int r = 0; r < TILE; r++) {
        __m512i z[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            z[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), S->w[r][k], T->a[k]);
        const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[0], z[1]),
                                             _mm512_unpackhi_epi32(z[0], z[1]));
        const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2], z[3]),
                                             _mm512_unpackhi_epi32(z[2], z[3]));
        /* 128-bit lanes 0, 1: halves of blocks 0, 2, 4, 6; lanes 2, 3: of 1, 3, 5, 7 */
        u[r] = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
    }
    const __m512i order = _mm512_set_epi32(15, 11, 14, 10, 13, 9, 12, 8, 7, 3, 6, 2, 5, 1, 4, 0);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i x = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2 * h], u[2 * h + 1], 0x88),
                                           _mm512_shuffle_i32x4(u[2 * h], u[2 * h + 1], 0xDD));
        v[h] = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_permutexvar_epi32(order, x), T->corr2));
    }
}

/* Tokens whose steps are prepared once for all the row tiles (16 tokens x 16 steps: 96 KiB
 * of stack at most, for rows of 4096 and more). */
#define Q8_TOKENS 16

/* Matmul: rows of Q8_0 blocks against tokens' Q8_0 activations, avx2_dotn_q's floats: per
 * (row, token) 8 lanes, each step's block sums times ws·da added lane-wise, the blocks after
 * the last whole step by avx2_qblock, then avx2_hsum. Tokens go Q8_TOKENS at a time, their
 * steps prepared once; each row tile's steps are prepared once for them. A row of more than
 * PANEL_SB steps is taken in pieces, the tokens' steps then prepared again for each. */
AVX512_INLINE void gemm_q8_rows(const uint8_t *w, size_t rb, size_t n_rows, const uint8_t *act,
                                size_t as, size_t n_tok, size_t n, float *y, size_t ys)
{
    const size_t nb = n / MVM_QBLOCK, steps = nb / Q8_STEP_BLOCKS, bs = sizeof(mvm_block_q8_0);
    const size_t held = steps < PANEL_SB ? (steps ? steps : 1) : PANEL_SB;
    qstep S[held]; /* the stack a row's length needs: 2 x 9 KiB for n_embd 2048 */
    qtok T[Q8_TOKENS][held];
    for (size_t tb = 0; tb < n_tok; tb += Q8_TOKENS) {
        const size_t ntb = n_tok - tb < Q8_TOKENS ? n_tok - tb : Q8_TOKENS;
        for (size_t r0 = 0; r0 < n_rows; r0 += TILE) {
            const int nr = n_rows - r0 < TILE ? (int)(n_rows - r0) : TILE;
            const uint8_t *rows[TILE];
            tile_rows(w, rb, r0, nr, rows);
            __m512 acc[Q8_TOKENS][2];
            for (size_t i = 0; i < ntb; i++)
                acc[i][0] = acc[i][1] = _mm512_setzero_ps();
            for (size_t k0 = 0; k0 < steps; k0 += PANEL_SB) {
                const size_t kn = steps - k0 < PANEL_SB ? steps - k0 : PANEL_SB;
                for (size_t k = 0; k < kn; k++) {
                    const uint8_t *set[TILE];
                    for (int r = 0; r < TILE; r++) {
                        set[r] = rows[r] + (k0 + k) * Q8_STEP_BLOCKS * bs;
                        avx2_prefetch(set[r], Q8_STEP_BLOCKS * bs);
                    }
                    qstep_fill(set, bs, &S[k]);
                }
                if (r0 == 0 || steps > PANEL_SB)
                    for (size_t i = 0; i < ntb; i++)
                        for (size_t k = 0; k < kn; k++)
                            qtok_fill(AVX2_TOK(mvm_block_q8_0, act, as, tb + i) +
                                          (k0 + k) * Q8_STEP_BLOCKS, 0, &T[i][k]);
                for (size_t i = 0; i < ntb; i++)
                    for (size_t k = 0; k < kn; k++) {
                        __m512 v[2];
                        qstep_sums(&S[k], &T[i][k], v);
                        acc[i][0] = _mm512_fmadd_ps(v[0], _mm512_mul_ps(S[k].ws2[0], T[i][k].da2),
                                                    acc[i][0]);
                        acc[i][1] = _mm512_fmadd_ps(v[1], _mm512_mul_ps(S[k].ws2[1], T[i][k].da2),
                                                    acc[i][1]);
                    }
            }
            for (size_t i = 0; i < ntb; i++) {
                const mvm_block_q8_0 *a = AVX2_TOK(mvm_block_q8_0, act, as, tb + i);
                for (int r = 0; r < nr; r++) {
                    const __m512 a2 = acc[i][r >> 1];
                    __m256 s = (r & 1) ? _mm512_extractf32x8_ps(a2, 1) : _mm512_castps512_ps256(a2);
                    for (size_t c = steps * Q8_STEP_BLOCKS; c < nb; c++)
                        s = avx2_qblock(MVM_W_Q8_0, rows[r] + c * bs, a + c, s);
                    y[(tb + i) * ys + r0 + r] = avx2_hsum(s);
                }
            }
        }
    }
}

/* The down loop: n_rows outputs (n_rows % 32 == 0, as the down kernels' contract has it) of
 * one Q8_0 block each against tokens' single blocks, avx2_downn_q's floats: out += the block
 * sum times ws·da, 8 outputs a set, 32 a tile. */
AVX512_INLINE void gemm_q8_down(const uint8_t *w, size_t rb, size_t n_rows, const uint8_t *act,
                                size_t as, size_t n_tok, float *y, size_t ys)
{
    qstep S;
    qtok T[Q8_TOKENS];
    for (size_t tb = 0; tb < n_tok; tb += Q8_TOKENS) {
        const size_t ntb = n_tok - tb < Q8_TOKENS ? n_tok - tb : Q8_TOKENS;
        for (size_t i = 0; i < ntb; i++)
            qtok_fill(AVX2_TOK(mvm_block_q8_0, act, as, tb + i), 1, &T[i]);
        for (size_t r0 = 0; r0 < n_rows; r0 += TILE * Q8_STEP_BLOCKS) {
            const uint8_t *set[TILE];
            for (int r = 0; r < TILE; r++) {
                set[r] = w + (r0 + (size_t)r * Q8_STEP_BLOCKS) * rb;
                avx2_prefetch(set[r], Q8_STEP_BLOCKS * rb);
            }
            qstep_fill(set, rb, &S);
            for (size_t i = 0; i < ntb; i++) {
                __m512 v[2];
                qstep_sums(&S, &T[i], v);
                float *o = y + (tb + i) * ys + r0;
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++)
                    _mm512_storeu_ps(o + 16 * h,
                                     _mm512_fmadd_ps(v[h], _mm512_mul_ps(S.ws2[h], T[i].da2),
                                                     _mm512_loadu_ps(o + 16 * h)));
            }
        }
    }
}

AVX512_TARGET static void gemm_q8_0(const void *w, size_t rb, size_t n_rows, const void *act,
                                    size_t as, size_t n_tok, size_t n, float *y, size_t ys,
                                    int add)
{
    if (add)
        gemm_q8_down(w, rb, n_rows, act, as, n_tok, y, ys);
    else
        gemm_q8_rows(w, rb, n_rows, act, as, n_tok, n, y, ys);
}

#define GEMM_K(sfx, type)                                                                          \
    AVX512_TARGET static void gemm_##sfx(const void *w, size_t rb, size_t n_rows, const void *act, \
                                         size_t as, size_t n_tok, size_t n, float *y, size_t ys,   \
                                         int add)                                                  \
    {                                                                                              \
        gemm_k(type, w, rb, n_rows, act, as, n_tok, n, y, ys, add);                                \
    }
GEMM_K(q4_K, MVM_W_Q4_K)
GEMM_K(q5_K, MVM_W_Q5_K)
GEMM_K(q6_K, MVM_W_Q6_K)

const mvm_k_gemm_fn mvm_k_gemm_avx512vnni[MVM_W_COUNT] = {[MVM_W_Q8_0] = gemm_q8_0,
                                                          [MVM_W_Q4_K] = gemm_q4_K,
                                                          [MVM_W_Q5_K] = gemm_q5_K,
                                                          [MVM_W_Q6_K] = gemm_q6_K};

#endif
