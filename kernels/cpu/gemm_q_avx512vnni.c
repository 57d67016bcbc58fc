/*
 * The AVX-512 VNNI level's multi-row kernel for the 32-element Q types, Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, IQ4_NL and MXFP4 (dispatch.h's mvm_k_gemm_fn; the table is
 * gemm_avx512vnni.c's), bitwise avx2_dotn_q's and avx2_downn_q's floats (test_kernels).
 *
 * Every type is Q8_0's kernel with another block decoder: a row's block is unpacked once
 * into its 32 signed values + 128 (qblock_u8: nibbles less the bias, the fifth bits, or the
 * table's values), and from there on the products, exact integers, are Q8_0's. The scales
 * are the types' (MXFP4's power of two); Q4_1 and Q5_1 add their min term, the min times
 * the token block's Σa (its 128·Σa, which the +128 needs anyway, shifted back), after the
 * scale's, as avx2_dotn_q adds it. Before, these types went 4 tokens at a time through
 * their dot products: Q4_0 prefill at 0.56-0.59x llama.cpp's CPU build, MXFP4_MOE 0.89x
 * (docs/perf/cpu.md).
 *
 * Matrix products: a vector's 16 lanes are 16 tokens, as for the K-quants. The tokens'
 * blocks are interleaved once per call (qacts, on the heap: a row of any length), 8 rows'
 * blocks a step + 128 (the unsigned side) once per group, and each block is 8 vpdpbusd per
 * row (the row's 4 quants broadcast against 16 tokens'), its +128's products taken off
 * (128·Σa, per token), then S·(ws·da) fused into lane j = block mod 8 of the pair's 8-lane
 * accumulator as avx2_dotn_q does, and the 8 lanes added as avx2_hsum adds them. Against the
 * 4 x 4 tiles before (a transposing reduction of each pair's step), twice the products a
 * second in L2 (bench_cpu_kernels: 81 -> 157 GB/s at 32 tokens), Q8_0 pp512 +31%. A group
 * of up to 8 tokens (a short prompt's experts) gives each token two lanes, the blocks of a
 * pair, the lanes of each parity summed as avx2_hsum's two halves and then added: pp64 +10%.
 *
 * The down loop puts 16 outputs in the lanes instead (its rows are single blocks): unpacked
 * and transposed once for all the tokens, each token then costs only its products, and y
 * takes the 16 outputs as they are. Against tiles of 4 x 8 outputs by one token, whose sums
 * were reduced across the lanes, an OLMoE Q8_0 expert of 64 tokens streamed 94 -> 109
 * GMAC/s (bench_cpu_expert_tokens), Q8_0 pp512 +11% (docs/perf/cpu.md).
 *
 * A Q8_0 expert stored in tiles (kernels.h, "Expert tiles"; the tiles table's Q8_0 entry,
 * mvm_k_tiles_q8_0_vnni) needs no unpacking at all: its gate and up rows are 16 to a vector
 * as loaded (q8t_rows: rows in the lanes, a token's quants broadcast, each token's 8 lanes of
 * blocks on the stack), its down slots are what the down loop unpacks them into. Against the
 * untiled kernels (with the down loop above), 8, 16 and 64 tokens streamed 70, 93, 106 ->
 * 80-83, 113-118, 121-132 GMAC/s; Q8_0 pp64 +16% and pp512 +18%, but the engine's decode
 * 0-12% slower (it comes and goes with the hour), so only where MOEVM_EXPERT_TILES=all
 * asks (docs/perf/cpu.md).
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#define MVM_K_VNNI 1
#include "kernels/cpu/gemm_lanes.h"

/* ---- a block's quants and the scales of 8 ------------------------------------------- */

/* The 32 quants of a block of type t as unsigned bytes, each its signed value + 128
 * (vpdpbusd's unsigned side), in the order of the activation's quants. */
AVX512_INLINE __m256i qblock_u8(enum mvm_wtype t, const uint8_t *blk)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    const __m256i v128 = _mm256_set1_epi8((char)0x80);
    if (t == MVM_W_Q8_0 || mvm_k_is_table(t)) /* signed bytes already */
        return _mm256_xor_si256(avx2_qload(t, blk), v128);
    /* unsigned quants (fifth bits in): their value is q - bias */
    return _mm256_add_epi8(avx2_qload(t, blk), _mm256_set1_epi8((char)(128 - L.bias)));
}

/* The f16s at byte off of n blocks (n <= 8) at x, bytes apart, as floats (past n: zero), or
 * MXFP4's E8M0 scales as avx2_wscales8 makes them: one gather, as halves stored one by one
 * and loaded as a vector would wait for the stores. */
AVX512_INLINE __m256 qscales8(enum mvm_wtype t, const uint8_t *x, size_t bytes, size_t off,
                              int n)
{
    const __m256i at = _mm256_add_epi32(
        _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)bytes)),
        _mm256_set1_epi32((int)off));
    const __m256i d32 = _mm256_mmask_i32gather_epi32(_mm256_setzero_si256(),
                                                     (__mmask8)((1u << n) - 1), at, x, 1);
    if (t != MVM_W_MXFP4 || off)
        return _mm256_cvtph_ps(_mm256_cvtepi32_epi16(d32));
    return _mm256_maskz_mov_ps((__mmask8)((1u << n) - 1),
                               avx2_e8m0_half8(_mm256_and_si256(d32, _mm256_set1_epi32(0xFF))));
}

/* ---- the down loop: a vector's 16 lanes are 16 outputs ------------------------------- */

/* 16 outputs' slots (one block each, rb bytes apart): q[g] lane k = output k's quants 4g ..
 * 4g + 3 (qblock_u8, unsigned), d and m their scales and mins (MXFP4: its powers of two).
 * Rows k and k + 8 share a vector, then one 8 x 8 transpose of dwords in each 256-bit half
 * puts every output in its lane. */
typedef struct {
    __m512i q[8];
    __m512 d, m;
} qslots;

AVX512_INLINE void qslots_fill(enum mvm_wtype t, const uint8_t *w, size_t rb, qslots *W)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    __m512i in[8], a[8], u[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        in[k] = _mm512_inserti64x4(_mm512_castsi256_si512(qblock_u8(t, w + k * rb)),
                                   qblock_u8(t, w + (k + 8) * rb), 1);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        a[2 * k] = _mm512_unpacklo_epi32(in[2 * k], in[2 * k + 1]);
        a[2 * k + 1] = _mm512_unpackhi_epi32(in[2 * k], in[2 * k + 1]);
    }
    /* u[4h + c]: rows 4h .. 4h + 3 (and + 8) of dwords c (128-bit lanes 0, 2) and c + 4 */
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        u[4 * h] = _mm512_unpacklo_epi64(a[4 * h], a[4 * h + 2]);
        u[4 * h + 1] = _mm512_unpackhi_epi64(a[4 * h], a[4 * h + 2]);
        u[4 * h + 2] = _mm512_unpacklo_epi64(a[4 * h + 1], a[4 * h + 3]);
        u[4 * h + 3] = _mm512_unpackhi_epi64(a[4 * h + 1], a[4 * h + 3]);
    }
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        W->q[c] = _mm512_permutex2var_epi64(u[c], lo, u[4 + c]);
        W->q[c + 4] = _mm512_permutex2var_epi64(u[c], hi, u[4 + c]);
    }
    W->d = _mm512_insertf32x8(_mm512_castps256_ps512(qscales8(t, w, rb, 0, 8)),
                              qscales8(t, w + 8 * rb, rb, 0, 8), 1);
    W->m = L.m ? _mm512_insertf32x8(_mm512_castps256_ps512(qscales8(t, w, rb, L.m, 8)),
                                    qscales8(t, w + 8 * rb, rb, L.m, 8), 1)
               : W->d;
}

/* A Q8_0 tile (kernels.h, "Expert tiles"): 16 rows' block, their scales (f16, row i's at
 * 2i) and then their quants + 128, word g of row i at 32 + 64g + 4i: the lanes qslots_fill
 * makes, as stored. */
#define Q8T_BYTES (16 * sizeof(mvm_block_q8_0))

/* Tiles ahead of their use that are prefetched into L1, and into L2 before that, as
 * avx2.h's avx2_prefetch_tiles; a Q8_0 tile is an eighth of a K-quant tile's products, so
 * further ahead. An OLMoE expert streamed on a Zen 4, 8 and 16
 * tokens, GMAC/s (bench_cpu_expert_tokens q8_0+tiles): 2 and 3 tiles ahead 65, 102; 4 and
 * 8, 77, 116; 8 and 16, 84, 112; 16 and 32, 60-72, 84-104. */
#define Q8T_AHEAD 8
#define Q8T_AHEAD_L2 16
/* Tokens from which a pass prefetches: fewer leave the memory to the hardware's prefetcher,
 * which streams tiles faster by itself than beside the instructions. One token (decode),
 * GMAC/s streamed: 16.5-17.6 with them, 19.2-21.0 without (the untiled kernels 19.1-20.5);
 * 3 tokens the same; 4, 45-46 without, 49-50 with; 8, 48-56 without, 79-86 with. */
#define Q8T_PREFETCH_TOKENS 4

AVX512_INLINE void q8t_load(const uint8_t *tile, qslots *W)
{
    W->d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)tile));
    W->m = W->d;
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
        W->q[g] = _mm512_loadu_si512(tile + 32 + 64 * g);
}

/* Σ of an activation block's 32 quants (its −128·Σa takes off what the weights' + 128 add,
 * its Σa·d is a min type's term). */
AVX512_INLINE int32_t qblock_sum(const mvm_block_q8_0 *a)
{
    int32_t sum = 0;
    for (int j = 0; j < MVM_QBLOCK; j++)
        sum += a->qs[j];
    return sum;
}

/* Tokens whose sums are prepared once for all the outputs. */
#define Q_TOKENS 32

/* The down loop: n_rows outputs (n_rows % 32 == 0, as the down kernels' contract has it) of
 * one block each against tokens' single blocks, avx2_downn_q's floats: out += the block sum
 * times ws·da (then + wm times Σa·da). 16 outputs are unpacked into the lanes once for all
 * the tokens (qslots), and a token's block then costs its 8 vpdpbusd, its 4 quants broadcast
 * from memory, the sum starting from its −128·Σa, and the scaling straight into its 16
 * outputs in y. Before, tiles of 4 x 8 outputs by one token (rows in blocks, each reduced
 * across lanes) spent two instructions on shuffles for every product. */
AVX512_INLINE void gemm_q_down(enum mvm_wtype t, int tiled, const uint8_t *w, size_t rb,
                               size_t n_rows, const uint8_t *act, size_t as, size_t n_tok,
                               float *y, size_t ys)
{
    const int min = mvm_k_qlay(t).m != 0;
    int32_t corr[Q_TOKENS]; /* −128·Σa */
    float da[Q_TOKENS], ms[Q_TOKENS];
    for (size_t tb = 0; tb < n_tok; tb += Q_TOKENS) {
        const size_t ntb = n_tok - tb < Q_TOKENS ? n_tok - tb : Q_TOKENS;
        const uint8_t *at = act + tb * as;
        for (size_t i = 0; i < ntb; i++) {
            const mvm_block_q8_0 *a = AVX2_TOK(mvm_block_q8_0, at, as, i);
            const int32_t sum = qblock_sum(a);
            corr[i] = -128 * sum;
            da[i] = _cvtsh_ss(a->d);
            ms[i] = (float)sum * da[i]; /* the one rounding avx2_downn_q's has */
        }
        for (size_t r0 = 0; r0 < n_rows; r0 += 32) {
            const uint8_t *w32 = w + r0 * rb;
            /* the next 32 slots: their time ahead of their use */
            if (!tiled || ntb >= Q8T_PREFETCH_TOKENS)
                avx2_prefetch_rows(w32 + 32 * rb, 32 * rb);
            qslots W[2];
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                if (tiled) /* Q8_0's tiles: the lanes as stored */
                    q8t_load(w32 + 16 * rb * (size_t)h, &W[h]);
                else
                    qslots_fill(t, w32 + 16 * rb * (size_t)h, rb, &W[h]);
            for (size_t i = 0; i < ntb; i++) {
                const int8_t *q = AVX2_TOK(mvm_block_q8_0, at, as, i)->qs;
                /* each half's sum in two chains, of the even and the odd 4-quant groups */
                __m512i s[2][2];
                s[0][0] = s[1][0] = _mm512_set1_epi32(corr[i]);
                s[0][1] = s[1][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int g = 0; g < 8; g++) {
                    int32_t q4;
                    memcpy(&q4, q + 4 * g, 4);
                    const __m512i b4 = _mm512_set1_epi32(q4);
#pragma GCC unroll 2
                    for (int h = 0; h < 2; h++)
                        s[h][g & 1] = _mm512_dpbusd_epi32(s[h][g & 1], W[h].q[g], b4);
                }
                const __m512 d = _mm512_set1_ps(da[i]);
                float *o = y + (tb + i) * ys + r0;
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    const __m512i sum = _mm512_add_epi32(s[h][0], s[h][1]);
                    __m512 r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(W[h].d, d),
                                               _mm512_loadu_ps(o + 16 * h));
                    if (min)
                        r = _mm512_fmadd_ps(W[h].m, _mm512_set1_ps(ms[i]), r);
                    _mm512_storeu_ps(o + 16 * h, r);
                }
            }
        }
    }
}

/* ---- matrix products: a vector's lanes are 16 tokens, as the K-quants' ------------------ */

/* A token group's activations for one block: q[g] lane i = token i's qs[4g .. 4g+3]
 * (signed); corr lane i = 128·Σ its 32 quants, what the weights' + 128 adds to a block's sum
 * (they are vpdpbusd's unsigned side); d lane i = its scale. Lanes past the group's tokens
 * are zero. Split, for up to 8 tokens: an entry is a pair of blocks 2m, 2m + 1, lane 2i + h
 * token i's block 2m + h. */
typedef struct {
    __m512i q[8], corr;
    __m512 d;
} qacts;

/* The group's ne qacts entries (blocks, or split: pairs of blocks) of tokens a[0 .. nt - 1],
 * two entries a transpose. */
AVX512_INLINE void qacts_fill(int split, const uint8_t *act, size_t as, int nt, size_t ne,
                              qacts *A)
{
    const __m512i v128 = _mm512_set1_epi8((char)0x80);
    for (size_t e = 0; e < ne; e += 2) {
        const int two = e + 1 < ne;
        __m512i in[16], out[16];
        uint16_t dh[2][16] = {{0}};
#pragma GCC unroll 16
        for (int l = 0; l < 16; l++) {
            if ((l >> split) >= nt) {
                in[l] = _mm512_setzero_si512();
                continue;
            }
            /* lane l's blocks in entries e and e + 1 */
            const mvm_block_q8_0 *x = AVX2_TOK(mvm_block_q8_0, act, as, l >> split) +
                                      (split ? 2 * e + (size_t)(l & 1) : e);
            const size_t next = split ? 2 : 1;
            const __m256i lo = _mm256_loadu_si256((const __m256i *)x[0].qs);
            const __m256i hi = two ? _mm256_loadu_si256((const __m256i *)x[next].qs)
                                   : _mm256_setzero_si256();
            in[l] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            dh[0][l] = x[0].d;
            dh[1][l] = two ? x[next].d : 0;
        }
        transpose16(in, out);
        for (int h = 0; h < 1 + two; h++) {
            qacts *Q = &A[e + (size_t)h];
            Q->corr = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                Q->q[g] = out[8 * h + g];
                Q->corr = _mm512_dpbusd_epi32(Q->corr, v128, Q->q[g]);
            }
            Q->d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dh[h]));
        }
    }
}

/* 8 rows' blocks j0 .. j0 + n - 1 (n <= 8): quants (qblock_u8), scales and, for Q4_1 and
 * Q5_1, mins; split (n = 8), as 4 pairs of blocks whose 4-quant groups alternate (broadcast
 * 8 at a time). */
typedef struct {
    uint8_t q[8][8][MVM_QBLOCK]; /* [row][block], or [row][pair][group g of 2m, of 2m + 1] */
    float d[8][8], m[8][8];
} qrows;

AVX512_INLINE void qrows_fill(enum mvm_wtype t, int split, const uint8_t *const rows[8],
                              size_t rb, size_t j0, int n, qrows *R)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    const size_t bytes = mvm_k_block_bytes(t);
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        const uint8_t *x = rows[r] + j0 * bytes;
        /* the next block of rows' step: a block's time ahead of its use; and the block after
         * it into L2 first, as the K-quant tiles (avx2.h's avx2_prefetch_tiles):
         * on a Zen 4 an expert's 4 and 8 tokens streamed from 33 and 57 GMAC/s to 39 and
         * 67 (bench_cpu_expert_tokens q8_0, docs/perf/cpu.md) */
        avx2_prefetch_rows(x + 8 * rb, (size_t)n * bytes);
        avx2_prefetch_rows_l2(x + 16 * rb, (size_t)n * bytes);
#pragma GCC unroll 8
        for (int j = 0; j < n && !split; j++)
            _mm256_storeu_si256((__m256i *)R->q[r][j], qblock_u8(t, x + j * bytes));
#pragma GCC unroll 4
        for (int m = 0; m < 4 && split; m++) {
            const __m256i a = qblock_u8(t, x + 2 * m * bytes);
            const __m256i b = qblock_u8(t, x + (2 * m + 1) * bytes);
            const __m256i lo = _mm256_unpacklo_epi32(a, b), hi = _mm256_unpackhi_epi32(a, b);
            _mm256_storeu_si256((__m256i *)R->q[r][2 * m], _mm256_permute2x128_si256(lo, hi, 0x20));
            _mm256_storeu_si256((__m256i *)R->q[r][2 * m + 1],
                                _mm256_permute2x128_si256(lo, hi, 0x31));
        }
        _mm256_storeu_ps(R->d[r], qscales8(t, x, bytes, 0, n));
        if (L.m)
            _mm256_storeu_ps(R->m[r], qscales8(t, x, bytes, L.m, n));
    }
}

/* The 8 rows' exact sums of entry j (block j, or split: pair j) against the group's entry
 * (lanes: tokens, or split: tokens' blocks). */
AVX512_INLINE void qblock_sums(int split, const qrows *R, int j, const qacts *A, __m512i acc[8])
{
    const uint8_t *w = R->q[0][j << split]; /* row r's entry j at w + r·sizeof R->q[0] */
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        acc[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        const __m512i a = _mm512_load_si512(&A->q[g]);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            const uint8_t *p = w + r * sizeof R->q[0];
            acc[r] = _mm512_dpbusd_epi32(acc[r],
                                         split ? _mm512_set1_epi64(*(const int64_t *)(p + 8 * g))
                                               : _mm512_set1_epi32(*(const int32_t *)(p + 4 * g)),
                                         a);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        acc[r] = _mm512_sub_epi32(acc[r], A->corr);
}

/* A row's two floats at p (a pair's scales or mins) alternating in the lanes. */
AVX512_INLINE __m512 pair_lanes(const float *p)
{
    int64_t pair;
    memcpy(&pair, p, sizeof pair);
    return _mm512_castsi512_ps(_mm512_set1_epi64(pair));
}

/* Rows r0.. (nr of them, 8 computed) of a matrix product, avx2_dotn_q's floats: lane j of its
 * accumulator (F[j]) takes blocks j, j + 8, ... (S·(ws·da) fused into it, then for a type
 * with a min Σa·(wm·da)), a last partial step's blocks go a 4-quant group g to lane g
 * (avx2_qblock), and the 8 lanes are added as avx2_hsum adds them. */
AVX512_INLINE void q_rows(enum mvm_wtype t, int split, const uint8_t *const rows[8], size_t rb,
                          size_t nb, const qacts *A, float *y, size_t ys, int nr, int nt)
{
    const int min = mvm_k_qlay(t).m != 0;
    __m512 F[8][8]; /* [lane j][row]; split: [pair m][row], lane 2i + h holding lane 2m + h */
    const int E = 8 >> split; /* entries a step */
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            F[j][r] = _mm512_setzero_ps();
    qrows R;
    size_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        qrows_fill(t, split, rows, rb, b, 8, &R);
        for (int j = 0; j < E; j++) {
            const qacts *Q = &A[(b >> split) + (size_t)j];
            __m512i acc[8];
            qblock_sums(split, &R, j, Q, acc);
            /* the entry's Σa (min types only: corr is 128·Σa exactly) */
            const __m512 asum = _mm512_cvtepi32_ps(_mm512_srai_epi32(Q->corr, 7));
            __m512 *Fj = F[j];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                /* split: the pair's two scales, alternating in the lanes */
                const __m512 ws = split ? pair_lanes(&R.d[r][2 * j]) : _mm512_set1_ps(R.d[r][j]);
                Fj[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), _mm512_mul_ps(ws, Q->d),
                                        Fj[r]);
                if (min) {
                    const __m512 wm = split ? pair_lanes(&R.m[r][2 * j])
                                            : _mm512_set1_ps(R.m[r][j]);
                    Fj[r] = _mm512_fmadd_ps(asum, _mm512_mul_ps(wm, Q->d), Fj[r]);
                }
            }
        }
    }
    if (b < nb) { /* never split */
        const __m512i v128 = _mm512_set1_epi8((char)0x80);
        qrows_fill(t, 0, rows, rb, b, (int)(nb - b), &R);
        for (int j = 0; b + (size_t)j < nb; j++) {
            const qacts *Q = &A[b + (size_t)j];
            for (int g = 0; g < 8; g++) {
                const __m512i c4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v128, Q->q[g]);
                const __m512 asum4 = _mm512_cvtepi32_ps(_mm512_srai_epi32(c4, 7));
#pragma GCC unroll 8
                for (int r = 0; r < 8; r++) {
                    int32_t w4;
                    memcpy(&w4, R.q[r][j] + 4 * g, 4);
                    const __m512i s = _mm512_sub_epi32(
                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi32(w4), Q->q[g]),
                        c4);
                    F[g][r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(R.d[r][j]), Q->d),
                                              _mm512_cvtepi32_ps(s), F[g][r]);
                    if (min)
                        F[g][r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(R.m[r][j]), Q->d),
                                                  asum4, F[g][r]);
                }
            }
        }
    }
    __m512 out[8];
    /* split: lane 2i + h sums the lanes of parity h, as avx2_hsum's two halves, then lane 2i
     * takes 2i + 1's (the token's (F0 + F4 + F2 + F6) + (F1 + F5 + F3 + F7)) */
    const __m512i once = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        if (split) {
            const __m512 h = _mm512_add_ps(_mm512_add_ps(F[0][r], F[2][r]),
                                           _mm512_add_ps(F[1][r], F[3][r]));
            out[r] = _mm512_permutexvar_ps(
                once, _mm512_add_ps(h, _mm512_permute_ps(h, _MM_SHUFFLE(2, 3, 0, 1))));
            continue;
        }
        out[r] = _mm512_add_ps(
            _mm512_add_ps(_mm512_add_ps(F[0][r], F[4][r]), _mm512_add_ps(F[2][r], F[6][r])),
            _mm512_add_ps(_mm512_add_ps(F[1][r], F[5][r]), _mm512_add_ps(F[3][r], F[7][r])));
    }
    ylanes_store(y, ys, nr, nt, out);
}

/* 16 tokens a group; the group's activations on the heap (a row of any length), or, where
 * that fails, the level's dotn kernel (the same floats). */
AVX512_INLINE void gemm_q_rows(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                               const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y,
                               size_t ys)
{
    const size_t nb = n / MVM_QBLOCK;
    qacts *A = aligned_alloc(64, nb * sizeof *A);
    for (size_t t0 = 0; A && t0 < n_tok; t0 += 16) {
        const int nt = n_tok - t0 < 16 ? (int)(n_tok - t0) : 16;
        /* up to 8 tokens: two lanes each, a block pair's (rows of whole steps only) */
        const int split = nt <= 8 && nb % 8 == 0;
        qacts_fill(split, act + t0 * as, as, nt, nb >> split, A);
        for (size_t r0 = 0; r0 < n_rows; r0 += 8) {
            const int nr = n_rows - r0 < 8 ? (int)(n_rows - r0) : 8;
            const uint8_t *rows[8];
            block_rows(w, rb, r0, 8, nr, rows);
            if (split)
                q_rows(t, 1, rows, rb, nb, A, y + t0 * ys + r0, ys, nr, nt);
            else
                q_rows(t, 0, rows, rb, nb, A, y + t0 * ys + r0, ys, nr, nt);
        }
    }
    if (A) {
        free(A);
        return;
    }
    for (size_t t0 = 0; t0 < n_tok; t0 += MVM_K_NT) {
        const int nt = n_tok - t0 < MVM_K_NT ? (int)(n_tok - t0) : MVM_K_NT;
        for (size_t r = 0; r < n_rows; r++)
            mvm_k_kernels->dotn[t](w + r * rb, act + t0 * as, as, (size_t)nt, n,
                                   y + t0 * ys + r, ys);
    }
}

/* ---- Q8_0's tiled gate and up rows: a vector's lanes are 16 rows ----------------------- */

/* Tokens a pass, and blocks whose sums and scales a pass prepares at once (a row of 4096). */
#define Q8T_TOKENS 16
#define Q8T_PART 128

/* Blocks b0 .. b0 + nb - 1 of nt tokens: −128·Σa (what the tile's + 128 adds to a block's
 * sum) and the scale, 8 blocks at a time (avx2_hsum8_i32), then one by one. */
AVX512_INLINE void q8t_acts(const uint8_t *act, size_t as, size_t nt, size_t b0, size_t nb,
                            int32_t corr[][Q8T_PART], float da[][Q8T_PART])
{
    const __m256i c80 = _mm256_set1_epi8((char)0x80), zero = _mm256_setzero_si256();
    for (size_t i = 0; i < nt; i++) {
        const mvm_block_q8_0 *a = AVX2_TOK(mvm_block_q8_0, act, as, i) + b0;
        size_t k = 0;
        for (; k + 8 <= nb; k += 8) {
            __m256i v[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                v[j] = _mm256_dpbusd_epi32(zero, c80,
                                           _mm256_loadu_si256((const __m256i *)a[k + j].qs));
            _mm256_storeu_si256((__m256i *)&corr[i][k], _mm256_sub_epi32(zero, avx2_hsum8_i32(v)));
            _mm256_storeu_ps(&da[i][k], avx2_scales8((const uint8_t *)(a + k), sizeof *a, 0));
        }
        for (; k < nb; k++) {
            corr[i][k] = -128 * qblock_sum(&a[k]);
            da[i][k] = _cvtsh_ss(a[k].d);
        }
    }
}

/* F[i] += one tile against token i's block q (for i < nt), avx2_dotn_q's floats: the block's
 * exact sum (two chains, of the even and the odd 4-quant groups), times ws·da, into lane
 * `lane` of the token's 8 (a block of a whole step of 8: its place in the step). A block of a
 * last partial step instead puts each 4-quant group g in lane g, as avx2_qblock does. */
AVX512_INLINE void q8t_block(const qslots *W, const uint8_t *act, size_t as, size_t k,
                             size_t nt, const int32_t corr[][Q8T_PART],
                             const float da[][Q8T_PART], size_t kp, int lane,
                             __m512 F[][8])
{
    for (size_t i = 0; i < nt; i++) {
        const int8_t *q = (AVX2_TOK(mvm_block_q8_0, act, as, i) + k)->qs;
        const __m512 scale = _mm512_mul_ps(W->d, _mm512_set1_ps(da[i][kp]));
        if (lane >= 0) {
            __m512i s[2] = {_mm512_set1_epi32(corr[i][kp]), _mm512_setzero_si512()};
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                int32_t q4;
                memcpy(&q4, q + 4 * g, 4);
                s[g & 1] = _mm512_dpbusd_epi32(s[g & 1], W->q[g], _mm512_set1_epi32(q4));
            }
            F[i][lane] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s[0], s[1])), scale,
                                         F[i][lane]);
            continue;
        }
        for (int g = 0; g < 8; g++) {
            int32_t q4;
            memcpy(&q4, q + 4 * g, 4);
            const int32_t c = -128 * (q[4 * g] + q[4 * g + 1] + q[4 * g + 2] + q[4 * g + 3]);
            const __m512i sg = _mm512_dpbusd_epi32(_mm512_set1_epi32(c), W->q[g],
                                                   _mm512_set1_epi32(q4));
            F[i][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sg), scale, F[i][g]);
        }
    }
}

/* Gate or up rows of Q8_0 tiles (n_rows % 16 == 0, each of n elements) against n_tok
 * tokens: y[i·ys + r] = row r · token i, bitwise avx2_dotn_q's. The 16 rows of a tile are
 * in the lanes as loaded, a token's 4 quants broadcast from its block: a block costs a token
 * 8 vpdpbusd and its scaling, with no transpose, no unpacking and no lane idle at any count
 * of tokens. Each token keeps avx2_dotn_q's 8 lanes of blocks (F, on the stack), added as
 * avx2_hsum adds them. */
AVX512_INLINE void q8t_rows(const uint8_t *w, size_t rb, size_t n_rows, const uint8_t *act,
                            size_t as, size_t n_tok, size_t n, float *y, size_t ys)
{
    const size_t nb = n / MVM_QBLOCK, whole = nb / 8 * 8;
    const uint8_t *end = w + n_rows * rb;
    int32_t corr[Q8T_TOKENS][Q8T_PART];
    float da[Q8T_TOKENS][Q8T_PART];
    __m512 F[Q8T_TOKENS][8];
    for (size_t t0 = 0; t0 < n_tok; t0 += Q8T_TOKENS) {
        const size_t nt = n_tok - t0 < Q8T_TOKENS ? n_tok - t0 : Q8T_TOKENS;
        const uint8_t *at = act + t0 * as;
        size_t held = SIZE_MAX; /* the part whose sums corr and da hold */
        for (size_t r0 = 0; r0 < n_rows; r0 += 16) {
            for (size_t i = 0; i < nt; i++)
                for (int j = 0; j < 8; j++)
                    F[i][j] = _mm512_setzero_ps();
            for (size_t b0 = 0; b0 < nb; b0 += Q8T_PART) {
                const size_t np = nb - b0 < Q8T_PART ? nb - b0 : Q8T_PART;
                if (held != b0)
                    q8t_acts(at, as, nt, b0, np, corr, da), held = b0;
                for (size_t k = b0; k < b0 + np; k++) {
                    const uint8_t *tile = w + r0 * rb + k * Q8T_BYTES;
                    if (nt >= Q8T_PREFETCH_TOKENS && tile + (Q8T_AHEAD_L2 + 1) * Q8T_BYTES <= end)
                        for (size_t o = 0; o < Q8T_BYTES; o += 64) {
                            _mm_prefetch((const char *)tile + Q8T_AHEAD * Q8T_BYTES + o, _MM_HINT_T0);
                            _mm_prefetch((const char *)tile + Q8T_AHEAD_L2 * Q8T_BYTES + o,
                                         _MM_HINT_T1);
                        }
                    qslots W;
                    q8t_load(tile, &W);
                    q8t_block(&W, at, as, k, nt, corr, da, k - b0, k < whole ? (int)(k % 8) : -1,
                              F);
                }
            }
            for (size_t i = 0; i < nt; i++) {
                const __m512 h = _mm512_add_ps(_mm512_add_ps(F[i][0], F[i][4]),
                                               _mm512_add_ps(F[i][2], F[i][6]));
                const __m512 l = _mm512_add_ps(_mm512_add_ps(F[i][1], F[i][5]),
                                               _mm512_add_ps(F[i][3], F[i][7]));
                _mm512_storeu_ps(y + (t0 + i) * ys + r0, _mm512_add_ps(h, l));
            }
        }
    }
}

/* The tiles table's Q8_0 entry (gemm_rows_avx512vnni.c): gate and up rows, or down's slots
 * (add), of a tiled expert. */
AVX512_TARGET void mvm_k_tiles_q8_0_vnni(const void *w, size_t rb, size_t n_rows,
                                         const void *act, size_t as, size_t n_tok, size_t n,
                                         float *y, size_t ys, int add)
{
    assert(n_rows % 16 == 0);
    if (add)
        gemm_q_down(MVM_W_Q8_0, 1, w, rb, n_rows, act, as, n_tok, y, ys);
    else
        q8t_rows(w, rb, n_rows, act, as, n_tok, n, y, ys);
}

#define GEMM_Q_CASE(type)                                                                          \
    case type:                                                                                     \
        if (add)                                                                                   \
            gemm_q_down(type, 0, w, rb, n_rows, act, as, n_tok, y, ys);                            \
        else                                                                                       \
            gemm_q_rows(type, w, rb, n_rows, act, as, n_tok, n, y, ys);                            \
        return;

AVX512_TARGET void mvm_k_gemm_q_vnni(enum mvm_wtype t, const uint8_t *w, size_t rb,
                                     size_t n_rows, const uint8_t *act, size_t as, size_t n_tok,
                                     size_t n, float *y, size_t ys, int add)
{
    switch (t) {
        MVM_K_Q32_TYPES(GEMM_Q_CASE)
    default:
        assert(!"mvm_k_gemm_q_vnni: not a 32-element Q type");
    }
}

#endif
