/*
 * The AVX2 and AVX-VNNI levels' multi-row kernel (gemm_q_avx2.c, gemm_q_avxvnni.c: this header
 * compiled for each) for the 32-element Q types, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * IQ4_NL and MXFP4 (dispatch.h's mvm_k_gemm_fn; the table is tiles_avx2.h's), bitwise
 * avx2_dotn_q's and avx2_downn_q's floats (test_kernels).
 *
 * A vector's 8 lanes are 8 rows. Each row's block is unpacked once for all the call's tokens
 * and the 8 rows' blocks transposed (avx2_transpose8_i32), so that word i of the result holds
 * quants 4i .. 4i + 3 of the 8 rows: Q8_0 and the table types keep it as |w| and w, the sides
 * of the sign trick, the others as their unsigned quants. A token then broadcasts its own 4
 * quants against the word, and its block costs 8 times a sign, a maddubs, a madd and an add
 * (the unsigned types a maddubs and an int16 add, widened once per 4 or 8 words: q_run), the
 * 8 rows' sums landing in their lanes with nothing left to reduce, then one conversion and
 * one fused scaling by the rows' scales times its own. avx2_dotn_q instead reduces each row's
 * 8 blocks' sums across the lanes (21 shuffles and adds a row and 8 blocks) and gathers the
 * token's 8 scales through the stack each time: 48 vector instructions for 256 products of a
 * row and a token against 35 here, on a Zen 3 that issues about 2.4 of them a cycle either
 * way. One thread, a Q8_0 matrix of 512 x 2048 (1.1 MB) and 32 tokens (docs/perf/cpu.md,
 * session 137): dotn 25-28 GMAC/s, this 50-52; a first version that kept dotn's reduction
 * across the lanes but converted the scales once a call and unpacked each row once for all
 * the tokens ran 1.25-1.4x dotn. The down loop's 8 outputs are transposed the same way (its
 * slots are single blocks); there this runs 5-10% below that first version's reduction
 * (bench-only: 2048 outputs by 8 to 32 tokens), which was kept out for one kernel instead of
 * two: the down products are a tenth of a prompt. Rows are taken 16 at a time, two sets of 8
 * in the lanes, so that each broadcast of a token's 4 quants meets 16 rows (session 138, one
 * thread, 1024 x 2048 by 32 tokens: Q8_0 50-52 -> 57 GMAC/s, Q4_0 50-63 -> 69-86).
 *
 * Bitwise: the blocks' sums are exact integers (at most 32·255·128), so summing them in
 * another order, or taking a biased type's bias·Σa off by starting its sum at −bias·Σa
 * (q_corr) rather than from each product, gives the same integer. Each lane's float work is
 * avx2_dotn_q's: a row's block b is scaled by ws·da into its sum for b mod 8 (then the min
 * term by wm·da), and the 8 sums are added as avx2_hsum adds its lanes; where the row has tail
 * blocks (nb % 8) the sums are transposed back into a row's lanes and the tail goes through
 * avx2_qblock, as there. The down loop (add) is avx2_downn_q's with its 8 outputs in the lanes
 * as they are there.
 *
 * With AVX-VNNI (MVM_K_VNNI) each word's products are one vpdpbusd straight into the token's
 * int32 sums, for every type, and Q8_0 and the table types drop the sign trick: their quants
 * + 128 are the unsigned side (q_bias; vpdpbusd's int32 sums of 4 products do not saturate
 * as maddubs's int16 pairs would), each token's sums starting at −128·Σa. Q8_0's 32 products
 * of 8 rows are then one vpdpbusd instead of a sign, a maddubs, a madd and an add. One
 * thread, an OLMoE Q8_0 expert in L2, 4-64 tokens, in-process A/B on an Emerald Rapids core
 * (docs/perf/cpu.md, session 143): the level's first version (the sign trick kept) 1.05-1.38x
 * the AVX2 level, this 1.12-1.38x that.
 */
#ifndef MVM_KERNELS_CPU_GEMM_Q_AVX2_H
#define MVM_KERNELS_CPU_GEMM_Q_AVX2_H

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/avx2.h"

/* Tokens whose products share a word's loads: their sums and the word's two sides fill about
 * 8 of AVX2's 16 registers (8 tokens ran no faster). */
#define QL_NT 4
/* Tokens whose sums a tile of rows keeps at once (8 KiB of accumulators). */
#define QR_TOKENS 32

/* Types whose quants are signed: without VNNI their products take the sign trick
 * (avx2_qdot_i32); with it their quants + 128 are vpdpbusd's unsigned side (q_bias). */
AVX2_INLINE int q_signed(enum mvm_wtype t)
{
    return t == MVM_W_Q8_0 || mvm_k_is_table(t);
}

/* b where a row's quant is its unsigned side less b, so that a block's products with a token
 * are its sum less b·Σa: Q4_0's and Q5_0's bias, and with VNNI the signed types' 128 (the
 * sign trick's |w|, a sign and a product, then becomes one vpdpbusd of w + 128). A token's
 * sums start at −b·Σa (q_corr). */
AVX2_INLINE int q_bias(enum mvm_wtype t)
{
    return q_signed(t) ? (MVM_K_VNNI ? 128 : 0) : (int)mvm_k_qlay(t).bias;
}

/* Up to 8 blocks of 8 rows, the rows in the lanes: u[j][i] word i of block j, the products'
 * unsigned side, s[j][i] (signed types without VNNI) the sign the activations take; ws[j] and
 * wm[j] block j's scales and mins (else the scales). */
typedef struct {
    __m256i u[8][8], s[8][8];
    __m256 ws[8], wm[8];
} qlanes;

/* The f16 at byte `field` of the block at r[i] + o of 8 rows as floats, or (field -1)
 * MXFP4's E8M0 scale byte as avx2_wscales8 makes it. */
AVX2_INLINE __m256 qlanes_halves(const uint8_t *const r[8], size_t o, int field)
{
    uint16_t h[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        h[i] = field < 0 ? r[i][o] : mvm_k_block_d(r[i] + o + field);
    const __m128i v = _mm_loadu_si128((const __m128i *)h);
    return field < 0 ? avx2_e8m0_half8(_mm256_cvtepu16_epi32(v)) : _mm256_cvtph_ps(v);
}

/* Blocks 0 .. nblk - 1 at byte off of the rows r[0 .. 7]. */
AVX2_INLINE void qlanes_fill(enum mvm_wtype t, const uint8_t *const r[8], size_t off, int nblk,
                             qlanes *Q)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    const size_t bytes = mvm_k_block_bytes(t);
    for (int j = 0; j < nblk; j++) {
        const size_t o = off + j * bytes;
        __m256i v[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            v[i] = avx2_qload(t, r[i] + o);
        avx2_transpose8_i32(v);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            if (!q_signed(t))
                Q->u[j][i] = v[i];
            else if (MVM_K_VNNI) /* w + 128 (q_bias) */
                Q->u[j][i] = _mm256_xor_si256(v[i], _mm256_set1_epi8((char)0x80));
            else
                Q->u[j][i] = _mm256_sign_epi8(v[i], v[i]), Q->s[j][i] = v[i];
        }
        Q->ws[j] = qlanes_halves(r, o, t == MVM_W_MXFP4 ? -1 : 0);
        Q->wm[j] = L.m ? qlanes_halves(r, o, (int)L.m) : Q->ws[j];
    }
}

/* Words whose int16 pair sums a token adds before one madd widens them, for the unsigned types:
 * Q4_0's and Q4_1's pairs reach 2·15·127, so a block's 8 words; Q5_0's and Q5_1's 2·31·127, 4.
 * The signed types' (the sign trick's |w| reaches 128) are widened word by word. */
AVX2_INLINE int q_run(enum mvm_wtype t)
{
    return q_signed(t) ? 1 : t == MVM_W_Q5_0 || t == MVM_W_Q5_1 ? 4 : 8;
}

/* S[x][k]: the exact sums, Q[x]'s 8 rows in the lanes (x < NX), of block j's products with
 * token k's block at a + k·as (k < NT), each started at corr[k] (q_corr: −q_bias·Σa, which
 * takes off what the bias adds; NULL: 0). With two sets of rows, each broadcast of a token's
 * quants meets 16 rows. */
AVX2_INLINE void qlanes_sums(enum mvm_wtype t, const int NT, const int NX, const qlanes *Q, int j,
                             const uint8_t *a, size_t as, const int32_t *corr,
                             __m256i S[][QL_NT])
{
    const int run = q_run(t);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i p16[2][QL_NT];
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
#pragma GCC unroll 2
        for (int x = 0; x < NX; x++)
            S[x][k] = corr ? _mm256_set1_epi32(corr[k]) : _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
#pragma GCC unroll 4
        for (int k = 0; k < NT; k++) {
            int32_t a4;
            memcpy(&a4, AVX2_TOK(mvm_block_q8_0, a, as, k)->qs + 4 * i, sizeof a4);
            const __m256i qa = _mm256_set1_epi32(a4);
#pragma GCC unroll 2
            for (int x = 0; x < NX; x++) {
                const __m256i u = Q[x].u[j][i];
                const __m256i b = q_signed(t) && !MVM_K_VNNI ? _mm256_sign_epi8(qa, Q[x].s[j][i])
                                                             : qa;
                if (MVM_K_VNNI) { /* vpdpbusd: the int32 sums at once, every type */
                    S[x][k] = avx2_dpbusd(S[x][k], u, b);
                    AVX2_KEEP(S[x][k]);
                    continue;
                }
                const __m256i p = _mm256_maddubs_epi16(u, b);
                p16[x][k] = i % run ? _mm256_add_epi16(p16[x][k], p) : p;
                AVX2_KEEP(p16[x][k]);
                if (i % run == run - 1) {
                    S[x][k] = _mm256_add_epi32(S[x][k], _mm256_madd_epi16(p16[x][k], ones));
                    AVX2_KEEP(S[x][k]);
                }
            }
        }
    }
}

/* What qlanes_sums starts NT tokens' sums at, their Σa at asum (stride ast): −q_bias·Σa, or
 * NULL where the type has no bias. */
AVX2_INLINE const int32_t *q_corr(enum mvm_wtype t, const int NT, const int32_t *asum, size_t ast,
                                  int32_t corr[QL_NT])
{
    if (!q_bias(t))
        return NULL;
    for (int k = 0; k < NT; k++)
        corr[k] = -q_bias(t) * asum[k * ast];
    return corr;
}

/* Σ of an activation block's quants. */
AVX2_INLINE int32_t qblock_asum(const mvm_block_q8_0 *a)
{
    return avx2_hsum_i32(avx2_qsum_i32(_mm256_loadu_si256((const __m256i *)a->qs)));
}

/* Tokens' blocks' scales as floats and their quants' sums (types with a bias or a min), nb a
 * token, converted once for all the rows. */
typedef struct {
    float *da;
    int32_t *asum;
} qtoks;

AVX2_INLINE void qtoks_fill(enum mvm_wtype t, const uint8_t *act, size_t as, size_t nt, size_t nb,
                            qtoks A)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    for (size_t k = 0; k < nt; k++) {
        const mvm_block_q8_0 *a = AVX2_TOK(mvm_block_q8_0, act, as, k);
        for (size_t b = 0; b < nb; b++) {
            A.da[k * nb + b] = _cvtsh_ss(a[b].d);
            A.asum[k * nb + b] = q_bias(t) || L.m ? qblock_asum(a + b) : 0;
        }
    }
}

/* NT tokens' (at act, their scales and sums at A) products with blocks b .. b + 7 of Q[x] (x <
 * NX), into F[x][k][j], their sums of blocks j mod 8, rows in the lanes. */
AVX2_INLINE void qlanes_tokens(enum mvm_wtype t, const int NT, const int NX, const qlanes *Q,
                               size_t b, const uint8_t *act, size_t as, qtoks A, size_t nb,
                               __m256 (*F[2])[8])
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    for (int j = 0; j < 8; j++) {
        __m256i S[2][QL_NT];
        int32_t corr[QL_NT];
        qlanes_sums(t, NT, NX, Q, j, act + (b + j) * sizeof(mvm_block_q8_0), as,
                    q_corr(t, NT, A.asum + b + j, nb, corr), S);
#pragma GCC unroll 4
        for (int k = 0; k < NT; k++) {
            const size_t at = k * nb + b + j;
            const __m256 da = _mm256_broadcast_ss(A.da + at);
#pragma GCC unroll 2
            for (int x = 0; x < NX; x++) {
                __m256 *f = &F[x][k][j];
                *f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[x][k]), _mm256_mul_ps(Q[x].ws[j], da),
                                     *f);
                if (L.m)
                    *f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_set1_epi32(A.asum[at])),
                                         _mm256_mul_ps(Q[x].wm[j], da), *f);
            }
        }
    }
}

/* The 16 rows at w (nr of them real: the others repeat the last, computed, never stored), as
 * two sets of 8 in the lanes, against nt <= QR_TOKENS tokens: y as avx2_dotn_q leaves it. */
AVX2_INLINE void q_rows(enum mvm_wtype t, const uint8_t *w, size_t rb, int nr, const uint8_t *act,
                        size_t as, size_t nt, size_t nb, qtoks A, float *y, size_t ys)
{
    const size_t bytes = mvm_k_block_bytes(t);
    const uint8_t *r[16];
    for (int i = 0; i < 16; i++)
        r[i] = w + (size_t)(i < nr ? i : nr - 1) * rb;
    __m256 F[2][QR_TOKENS][8];
    for (int x = 0; x < 2; x++)
        for (size_t k = 0; k < nt; k++)
            for (int j = 0; j < 8; j++)
                F[x][k][j] = _mm256_setzero_ps();
    size_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        qlanes Q[2];
        for (int i = 0; i < 16; i++)
            avx2_prefetch_rows(r[i] + b * bytes, 8 * bytes);
        qlanes_fill(t, r, b * bytes, 8, &Q[0]);
        qlanes_fill(t, r + 8, b * bytes, 8, &Q[1]);
        size_t k = 0;
        for (; k + QL_NT <= nt; k += QL_NT)
            qlanes_tokens(t, QL_NT, 2, Q, b, act + k * as, as,
                          (qtoks){A.da + k * nb, A.asum + k * nb}, nb,
                          (__m256(*[2])[8]){F[0] + k, F[1] + k});
        for (; k < nt; k++)
            qlanes_tokens(t, 1, 2, Q, b, act + k * as, as, (qtoks){A.da + k * nb, A.asum + k * nb},
                          nb, (__m256(*[2])[8]){F[0] + k, F[1] + k});
    }
    for (int x = 0; x < 2 && 8 * x < nr; x++) {
        const int nx = nr - 8 * x < 8 ? nr - 8 * x : 8;
        for (size_t k = 0; k < nt; k++) {
            __m256 *v = F[x][k];
            float out[8];
            if (b == nb) { /* avx2_hsum's order, lane by lane */
                const __m256 s02 =
                    _mm256_add_ps(_mm256_add_ps(v[0], v[4]), _mm256_add_ps(v[2], v[6]));
                const __m256 s13 =
                    _mm256_add_ps(_mm256_add_ps(v[1], v[5]), _mm256_add_ps(v[3], v[7]));
                _mm256_storeu_ps(out, _mm256_add_ps(s02, s13));
            } else { /* each row's 8 sums into its own lanes, then its tail as avx2_dotn_q's */
                __m256i xs[8];
                for (int j = 0; j < 8; j++)
                    xs[j] = _mm256_castps_si256(v[j]);
                avx2_transpose8_i32(xs);
                const mvm_block_q8_0 *a = AVX2_TOK(mvm_block_q8_0, act, as, k);
                for (int i = 0; i < nx; i++) {
                    __m256 s = _mm256_castsi256_ps(xs[i]);
                    for (size_t c = b; c < nb; c++)
                        s = avx2_qblock(t, r[8 * x + i] + c * bytes, a + c, s);
                    out[i] = avx2_hsum(s);
                }
            }
            memcpy(y + k * ys + 8 * x, out, (size_t)nx * sizeof *out);
        }
    }
}

/* The down loop: n_rows outputs (n_rows % 32 == 0), each one block, against nt <= QR_TOKENS
 * tokens' single blocks: y += as avx2_downn_q adds. 8 outputs are unpacked into the lanes once
 * for all the tokens. */
AVX2_INLINE void q_down(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                        const uint8_t *act, size_t as, size_t nt, float *y, size_t ys)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    __m256 da[QR_TOKENS], min_scale[QR_TOKENS];
    int32_t asum[QR_TOKENS];
    for (size_t k = 0; k < nt; k++) {
        const mvm_block_q8_0 *a = AVX2_TOK(mvm_block_q8_0, act, as, k);
        const float d = _cvtsh_ss(a->d);
        asum[k] = q_bias(t) || L.m ? qblock_asum(a) : 0;
        da[k] = _mm256_set1_ps(d);
        min_scale[k] = _mm256_set1_ps((float)asum[k] * d); /* avx2_downn_q's one rounding */
    }
    for (size_t j = 0; j < n_rows; j += 8) {
        const uint8_t *r[8];
        for (int i = 0; i < 8; i++)
            r[i] = w + (j + (size_t)i) * rb;
        qlanes Q;
        avx2_prefetch(r[0], 8 * rb);
        qlanes_fill(t, r, 0, 1, &Q);
        for (size_t k0 = 0; k0 < nt; k0 += QL_NT) {
            __m256i S[1][QL_NT];
            int32_t corr[QL_NT];
            const int n = nt - k0 < QL_NT ? (int)(nt - k0) : QL_NT;
            if (n == QL_NT)
                qlanes_sums(t, QL_NT, 1, &Q, 0, act + k0 * as, as,
                            q_corr(t, QL_NT, asum + k0, 1, corr), S);
            else
                for (int k = 0; k < n; k++) {
                    __m256i one[1][QL_NT];
                    qlanes_sums(t, 1, 1, &Q, 0, act + (k0 + k) * as, as,
                                q_corr(t, 1, asum + k0 + k, 1, corr), one);
                    S[0][k] = one[0][0];
                }
            for (int k = 0; k < n; k++) {
                float *o = y + (k0 + k) * ys + j;
                __m256 s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[0][k]),
                                           _mm256_mul_ps(Q.ws[0], da[k0 + k]), _mm256_loadu_ps(o));
                if (L.m)
                    s = _mm256_fmadd_ps(Q.wm[0], min_scale[k0 + k], s);
                _mm256_storeu_ps(o, s);
            }
        }
    }
}

/* Rows 8 at a time, each 8 against all the tokens in chunks of QR_TOKENS (the rows stay in L1
 * from one chunk to the next); the tokens' scales and sums on the heap (a row of any length),
 * or, where that fails, the level's dotn kernel (the same floats). */
AVX2_INLINE void gemm_q_rows(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                             const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y,
                             size_t ys)
{
    const size_t nb = n / MVM_QBLOCK;
    qtoks A = {malloc(n_tok * nb * sizeof *A.da), malloc(n_tok * nb * sizeof *A.asum)};
    if (A.da && A.asum) {
        qtoks_fill(t, act, as, n_tok, nb, A);
        for (size_t r0 = 0; r0 < n_rows; r0 += 16) {
            const int nr = n_rows - r0 < 16 ? (int)(n_rows - r0) : 16;
            for (size_t t0 = 0; t0 < n_tok; t0 += QR_TOKENS)
                q_rows(t, w + r0 * rb, rb, nr, act + t0 * as, as,
                       n_tok - t0 < QR_TOKENS ? n_tok - t0 : QR_TOKENS, nb,
                       (qtoks){A.da + t0 * nb, A.asum + t0 * nb}, y + t0 * ys + r0, ys);
        }
    } else {
        for (size_t t0 = 0; t0 < n_tok; t0 += MVM_K_NT) {
            const size_t nt = n_tok - t0 < MVM_K_NT ? n_tok - t0 : MVM_K_NT;
            for (size_t r = 0; r < n_rows; r++)
                mvm_k_kernels->dotn[t](w + r * rb, act + t0 * as, as, nt, n, y + t0 * ys + r, ys);
        }
    }
    free(A.da), free(A.asum);
}

#define GEMM_Q_CASE(type)                                                                          \
    case type:                                                                                     \
        if (add)                                                                                   \
            for (size_t t0 = 0; t0 < n_tok; t0 += QR_TOKENS)                                       \
                q_down(type, w, rb, n_rows, act + t0 * as, as,                                     \
                       n_tok - t0 < QR_TOKENS ? n_tok - t0 : QR_TOKENS, y + t0 * ys, ys);          \
        else                                                                                       \
            gemm_q_rows(type, w, rb, n_rows, act, as, n_tok, n, y, ys);                            \
        return;

AVX2_TARGET void AVX2_LEVEL(mvm_k_gemm_q)(enum mvm_wtype t, const uint8_t *w, size_t rb,
                                          size_t n_rows, const uint8_t *act, size_t as,
                                          size_t n_tok, size_t n, float *y, size_t ys, int add)
{
    switch (t) {
        MVM_K_Q32_TYPES(GEMM_Q_CASE)
    default: abort(); /* the table holds only these */
    }
}

#endif
