/*
 * The AVX2 and AVX-VNNI levels' multi-row kernels for Q4_K, Q5_K and Q6_K (tiles_avx2.c,
 * tiles_avxvnni.c: this header compiled for each), the types of llama.cpp's Q4_K_M and
 * Q5_K_M files: over tiled expert rows (dispatch.h's tiles table; kernels.h, "Expert tiles"), the
 * gate and up rows and the down slots of a host space's experts at every token count, decode's
 * one included; and over row-major rows (its gemm table, mvm_k_gemm: prefill's dense products,
 * 3 tokens and more), each 16 rows' super-block tiled on the way in by 8 x 8 transposes of
 * dwords, once for up to TILE_TOKENS tokens. The gemm table also takes the 32-element Q types,
 * gemm_q_avx2.h's kernel.
 *
 * A vector's 8 lanes are 8 rows: a tile of 16 rows is two halves, and a load of a tile word gives
 * the same 4 bytes of 8 rows. Its nibbles are split once for up to TILE_NT tokens, and each token
 * then costs a vpbroadcastd of its 4 quants from its Q8_K block (Q4_K: one for both halves) and
 * one maddubs per 32 products, whose int16 pairs are summed in int16 over a sub-block (Q4_K: 8
 * words of pairs at most 2·15·127, so at most 30480; Q5_K's quants reach 31, so 4 words a sum,
 * Q6_K's 63, so 2) before one madd applies the 8 rows' scales. Row after row (avx2.h's dot
 * product) each 32 products take a maddubs, a madd and an add, and each row its scales'
 * unpacking and horizontal sums. Against it, one thread (docs/perf/cpu.md, session 136): a Q4_K
 * matrix of 2048-element rows at 1, 4, 32 tokens 20, 22, 24 -> 28, 47, 62 GMAC/s; an OLMoE Q4_K_M
 * expert at 8 and 64 tokens 19-23 -> 34-39 and 17-21 -> 33-41. Session 138 kept the sums'
 * chains as written (AVX2_KEEP) and took Q4_K's halves together: 1024 x 2048 Q4_K tiles by 64
 * tokens about 65 -> 90 GMAC/s.
 *
 * The results are bitwise avx2.h's dotn (dispatch.h's contract; test_kernels checks every count,
 * the experts' tiles and the level's gemm): the integer sums are exact in any order, and each
 * lane's float work per super-block is avx2.h's in the same order (avx2_k45_finish for Q4_K and
 * Q5_K, ad·(d·sum) for Q6_K with its -32 taken off through the scales and the token's bsums),
 * added into the row's sum in super-block order.
 *
 * With AVX-VNNI (MVM_K_VNNI, k_step) a word's products are one vpdpbusd into an int32 per token
 * and rows instead of a maddubs and an int16 add, a sub-block's sum then scaled by one vpmulld
 * (k_scaled) instead of a madd: Q4_K's sub-block of 8 words 11 instructions a token instead of
 * 17, Q5_K's 11 instead of 18, Q6_K's 4 words 7 instead of 10; Q4_HI16 then spares the high
 * nibbles' shift. One thread, an OLMoE Q4_K_M expert in L2, 1-64 tokens, in-process A/B on an
 * Emerald Rapids core (docs/perf/cpu.md, session 143): 1.03-1.13x the AVX2 level, and
 * Q4_HI16 1.03-1.06x on top. Little for an instruction that fuses three: that core issues
 * vpdpbusd, like maddubs, on ports 0 and 1 only, while the int16 adds it replaces also took
 * port 5.
 */
#ifndef MVM_KERNELS_CPU_TILES_AVX2_H
#define MVM_KERNELS_CPU_TILES_AVX2_H

#include <string.h>

#include "kernels/cpu/avx2.h"

/* Tokens whose products share a word's unpacking: their int16 and int32 sums and the word's two
 * halves fill AVX2's 16 registers. */
#define TILE_NT 4
/* Tokens a tile's sums are kept for at once (the rest in further passes over the rows). */
#define TILE_TOKENS 32
/* With VNNI, Q4_K's high nibbles are taken in place, each quant times 16: one and a word
 * instead of a shift and an and. vpdpbusd's int32 sums hold the factor (a sub-block's at most
 * 32·240·127, scaled at most 63·16 times that and 8 of them added: under 2^29), the low
 * nibbles' sub-blocks take it through their scales (thalf_scales) and a super-block's sums shed
 * it by one shift (exact: every term is a multiple of 16). Without VNNI maddubs's int16 pairs
 * would saturate. */
#define Q4_HI16 MVM_K_VNNI

/* 8 rows' scales of a tile half: sc[j] sub-block j's scale (lane_scale: in both int16 of a
 * lane for madd, or with VNNI an int32 for vpmulld), mp[p] the int16 pair the token's pair p
 * of sums meets (Q4_K: the mins of sub-blocks 2p, 2p + 1, against its sub-blocks' sums; Q6_K:
 * scales 2p, 2p + 1 against bsums 2p, 2p + 1), the f16 scales as floats. */
typedef struct {
    __m256i sc[16];
    __m256i mp[8];
    __m256 d, dmin;
} thalf;

/* In each dword lane of v, bytes lo and hi (0..3, 0x80: none) as its two int16. */
AVX2_INLINE __m256i lane_bytes(__m256i v, int lo, int hi)
{
    const char l = (char)lo, h = (char)hi, z = (char)0x80;
    const __m128i idx = _mm_setr_epi8(l, z, h, z, (char)(l + 4), z, (char)(h + 4), z, (char)(l + 8),
                                      z, (char)(h + 8), z, (char)(l + 12), z, (char)(h + 12), z);
    return _mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(idx));
}

/* The same, sign-extended: each byte moved to its int16's top, then shifted back. */
AVX2_INLINE __m256i lane_bytes_signed(__m256i v, int lo, int hi)
{
    const char l = (char)lo, h = (char)hi, z = (char)0x80;
    const __m128i idx =
        _mm_setr_epi8(z, l, z, h, z, (char)(l + 4), z, (char)(h + 4), z, (char)(l + 8), z,
                      (char)(h + 8), z, (char)(l + 12), z, (char)(h + 12));
    return _mm256_srai_epi16(_mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(idx)), 8);
}

/* Byte b of each dword lane of v as that lane's scale of a sub-block's sums: without VNNI in
 * both of its int16 (the sums are int16 pairs, which madd scales and adds); with it as an int32
 * (a sub-block's sum is vpdpbusd's int32, which vpmulld scales: k_scaled), sign-extended from
 * the top byte. */
AVX2_INLINE __m256i lane_scale(__m256i v, int b, int is_signed)
{
    if (!MVM_K_VNNI)
        return is_signed ? lane_bytes_signed(v, b, b) : lane_bytes(v, b, b);
    if (!is_signed)
        return lane_bytes(v, b, 0x80);
    const char z = (char)0x80;
    const __m128i idx = _mm_setr_epi8(z, z, z, (char)b, z, z, z, (char)(b + 4), z, z, z,
                                      (char)(b + 8), z, z, z, (char)(b + 12));
    return _mm256_srai_epi32(_mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(idx)), 24);
}

/* A sub-block's sums acc in the lanes times its scales sc (lane_scale), as int32. */
AVX2_INLINE __m256i k_scaled(__m256i acc, __m256i sc)
{
    return MVM_K_VNNI ? _mm256_mullo_epi32(acc, sc) : _mm256_madd_epi16(acc, sc);
}

/* The low (hi 0) or high int16 of each dword lane of v as floats (f16). */
AVX2_INLINE __m256 lane_half(__m256i v, int hi)
{
    const __m256i h =
        hi ? _mm256_srli_epi32(v, 16) : _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
    return _mm256_cvtph_ps(
        _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
}

/* Word w of the tile's half (x8 of 2): the same 4 bytes of its 8 rows. */
AVX2_INLINE __m256i tile_word(const uint8_t *tile, int x8, int w)
{
    return _mm256_loadu_si256((const __m256i *)(tile + 64 * w + 32 * x8));
}

/* Q4_K: words 0 (d, dmin) and 1-3 (the scales and mins, unpacked as avx2_k45_scales does, lane-
 * wise). Q6_K: words 48-51 (16 signed scales), its d after the words, row by row. */
AVX2_INLINE void thalf_scales(enum mvm_wtype t, const uint8_t *tile, int x8, thalf *H)
{
    if (t == MVM_W_Q6_K) {
#pragma GCC unroll 4
        for (int w = 0; w < 4; w++) {
            const __m256i s = tile_word(tile, x8, 48 + w);
#pragma GCC unroll 4
            for (int b = 0; b < 4; b++)
                H->sc[4 * w + b] = lane_scale(s, b, 1);
            H->mp[2 * w] = lane_bytes_signed(s, 0, 1);
            H->mp[2 * w + 1] = lane_bytes_signed(s, 2, 3);
        }
        H->d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(tile + 64 * 52 + 16 * x8)));
        return;
    }
    const __m256i dd = tile_word(tile, x8, 0), u0 = tile_word(tile, x8, 1);
    const __m256i u1 = tile_word(tile, x8, 2), u2 = tile_word(tile, x8, 3);
    const __m256i six = _mm256_set1_epi8(0x3F), four = _mm256_set1_epi8(0x0F);
    const __m256i two = _mm256_set1_epi8(0x03);
    const __m256i sc_lo = _mm256_and_si256(u0, six), mn_lo = _mm256_and_si256(u1, six);
    const __m256i sc_hi =
        _mm256_or_si256(_mm256_and_si256(u2, four),
                        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u0, 6), two), 4));
    const __m256i mn_hi =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), four),
                        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u1, 6), two), 4));
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++) {
        H->sc[b] = lane_scale(sc_lo, b, 0);
        H->sc[4 + b] = lane_scale(sc_hi, b, 0);
    }
    if (t == MVM_W_Q4_K && Q4_HI16) /* the low nibbles' sub-blocks, 0, 2, 4, 6, times 16 too */
        for (int j = 0; j < 8; j += 2)
            H->sc[j] = _mm256_slli_epi32(H->sc[j], 4);
    H->mp[0] = lane_bytes(mn_lo, 0, 1), H->mp[1] = lane_bytes(mn_lo, 2, 3);
    H->mp[2] = lane_bytes(mn_hi, 0, 1), H->mp[3] = lane_bytes(mn_hi, 2, 3);
    H->d = lane_half(dd, 0), H->dmin = lane_half(dd, 1);
}

/* The token's 4 quants at qs + 4g in every lane. */
AVX2_INLINE __m256i tok4(const int8_t *qs, int g)
{
    int32_t x;
    memcpy(&x, qs + 4 * g, 4);
    return _mm256_set1_epi32(x);
}

/* The pairs a token's sums meet (thalf's mp): Q4_K its 8 sub-blocks' sums (bsums 2j and
 * 2j + 1 added), two to a dword; Q6_K its bsums, two to a dword. */
AVX2_INLINE void tok_pairs(enum mvm_wtype t, const mvm_block_q8_K *a, int32_t pairs[8])
{
    if (t == MVM_W_Q6_K) {
        memcpy(pairs, a->bsums, 8 * sizeof *pairs);
        return;
    }
    for (int p = 0; p < 4; p++) {
        const int lo = a->bsums[4 * p] + a->bsums[4 * p + 1];
        const int hi = a->bsums[4 * p + 2] + a->bsums[4 * p + 3];
        pairs[p] = (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16);
    }
}

/* Step st (0..7) of chunk c of a Q4_K or Q5_K tile half: qs word 8c + st (after Q4_K's 4 words
 * of scales, Q5_K's 4 and its 8 of qh), its low nibbles (hi 0) or its high ones (Q4_HI16:
 * times 16); Q5_K's fifth bits from qh word st, bits 2c + hi. */
AVX2_INLINE __m256i q45_word(const uint8_t *tile, int x8, int q5, int c, int st, int hi)
{
    const __m256i v = tile_word(tile, x8, (q5 ? 12 : 4) + 8 * c + st), nib = _mm256_set1_epi8(0x0F);
    if (!q5 && hi && Q4_HI16)
        return _mm256_andnot_si256(nib, v);
    const __m256i q = _mm256_and_si256(hi ? _mm256_srli_epi16(v, 4) : v, nib);
    if (!q5)
        return q;
    const __m256i h = _mm256_srli_epi16(tile_word(tile, x8, 4 + st), 2 * c + hi);
    return _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(1)), 4));
}

/* Step m (0..15) of a Q6_K tile half's 8h ..: ql word 16h + m, its low nibbles (hi 0) or its
 * high ones, with their top bits from qh word 32 + 8h + m % 8 (bits 2(m / 8) + 4hi). */
AVX2_INLINE __m256i q6_word(const uint8_t *tile, int x8, int h, int m, int hi)
{
    const __m256i L = tile_word(tile, x8, 16 * h + m), Q = tile_word(tile, x8, 32 + 8 * h + m % 8);
    const __m256i nib = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi8(0x30);
    /* bits sh, sh + 1 of each byte to bits 4, 5 by one 16-bit shift (sh a constant where the
     * loops unroll): what crosses from the int16's other byte lands outside them */
    const int sh = 2 * (m / 8) + 4 * hi;
    const __m256i q2 = sh <= 4 ? _mm256_slli_epi16(Q, 4 - sh) : _mm256_srli_epi16(Q, sh - 4);
    return _mm256_or_si256(_mm256_and_si256(hi ? _mm256_srli_epi16(L, 4) : L, nib),
                           _mm256_and_si256(q2, top));
}

/* Word st of a run of `run` words of a sub-block: acc, the run's sums, plus the products of the
 * 8 rows' quants q with a token's 4 (b) in the lanes, as int16 pairs (maddubs, then an int16
 * add) or with VNNI as int32 (vpdpbusd); at the run's end tot += acc scaled by sc (k_scaled). */
AVX2_INLINE void k_step(__m256i q, __m256i b, int st, int run, __m256i sc, __m256i *acc,
                        __m256i *tot)
{
    if (MVM_K_VNNI) {
        *acc = avx2_dpbusd(st % run ? *acc : _mm256_setzero_si256(), q, b);
    } else {
        const __m256i p = _mm256_maddubs_epi16(q, b);
        *acc = st % run ? _mm256_add_epi16(*acc, p) : p;
    }
    AVX2_KEEP(*acc);
    if (st % run == run - 1) {
        *tot = _mm256_add_epi32(*tot, k_scaled(*acc, sc));
        AVX2_KEEP(*tot);
    }
}

/* NT tokens against NX halves of a tile from half x8 (H: theirs; NX 2 for Q4_K only, the Q6_K
 * loop takes 1): s[i][8 x8 ..] (the halves' rows' sums of token i) += each row's float of the
 * super-block. A sub-block at a time, so that a token holds two sums a half (its int16 and its
 * int32) and the 16 registers take TILE_NT tokens (with two halves, GCC keeps the int32 sums
 * on the stack, a load and a store a sub-block): each word is loaded once a sub-block, the low
 * and the high nibbles' separately. Q4_K: chunk c's 8 words (4 + 8c ..) hold sub-blocks 2c
 * (low nibbles, token quants 64c + 4st ..) and 2c + 1 (high, 64c + 32 + 4st ..). Q6_K, as
 * gemm_rows_avx512vnni.c's tile_quants: steps m = 4m4 .. 4m4 + 3 of half h (q6_word) hold sub-
 * blocks 8h + m4 (low nibbles, quants 128h + 4m ..) and 8h + 4 + m4 (high, 64 on). U: the
 * halves' quants already unpacked (tile_unpack's u[x8]), or NULL: from the tile. */
AVX2_INLINE void thalf_tokens(enum mvm_wtype t, const int NT, const int NX, const thalf *H,
                              const uint8_t *tile, int x8, const mvm_block_q8_K *const a[],
                              const int32_t pairs[][8], float (*s)[16], const __m256i *U)
{
    __m256i tot[2][TILE_NT], acc[2][TILE_NT];
#pragma GCC unroll 4
    for (int i = 0; i < NT; i++)
#pragma GCC unroll 2
        for (int x = 0; x < NX; x++)
            tot[x][i] = _mm256_setzero_si256();
    if (t != MVM_W_Q6_K) {
        /* words a sum: int16 pairs reach 2·15·127 (Q4_K), 2·31·127 (Q5_K); VNNI's int32
         * take a sub-block */
        const int q5 = t == MVM_W_Q5_K, run = q5 && !MVM_K_VNNI ? 4 : 8;
#pragma GCC unroll 1
        for (int c = 0; c < 4; c++)
#pragma GCC unroll 2
            for (int hi = 0; hi < 2; hi++) {
#pragma GCC unroll 8
                for (int st = 0; st < 8; st++) {
                    __m256i q[2];
#pragma GCC unroll 2
                    for (int x = 0; x < NX; x++)
                        q[x] = U ? _mm256_load_si256(U + 64 * x + 16 * c + 8 * hi + st)
                                 : q45_word(tile, x8 + x, q5, c, st, hi);
#pragma GCC unroll 4
                    for (int i = 0; i < NT; i++) {
                        const __m256i b = tok4(a[i]->qs, 16 * c + 8 * hi + st);
#pragma GCC unroll 2
                        for (int x = 0; x < NX; x++)
                            k_step(q[x], b, st, run, H[x].sc[2 * c + hi], &acc[x][i],
                                   &tot[x][i]);
                    }
                }
            }
    } else {
#pragma GCC unroll 1
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
            for (int m4 = 0; m4 < 4; m4++)
#pragma GCC unroll 2
                for (int hi = 0; hi < 2; hi++)
#pragma GCC unroll 4
                    for (int st = 0; st < 4; st++) {
                        const int m = 4 * m4 + st;
                        const __m256i q = U ? _mm256_load_si256(U + 32 * h + 16 * hi + m)
                                            : q6_word(tile, x8, h, m, hi);
                        /* two words a sum: int16 pairs reach 2·63·127; VNNI's int32 take
                         * a sub-block (4 words) */
#pragma GCC unroll 4
                        for (int i = 0; i < NT; i++)
                            k_step(q, tok4(a[i]->qs, 32 * h + m + 16 * hi), st, MVM_K_VNNI ? 4 : 2,
                                   H->sc[8 * h + m4 + 4 * hi], &acc[0][i], &tot[0][i]);
                    }
    }
    const int np = t == MVM_W_Q6_K ? 8 : 4;
#pragma GCC unroll 4
    for (int i = 0; i < NT; i++)
#pragma GCC unroll 2
        for (int x = 0; x < NX; x++) {
            __m256i ms = _mm256_setzero_si256();
            for (int p = 0; p < np; p++)
                ms = _mm256_add_epi32(
                    ms, _mm256_madd_epi16(H[x].mp[p], _mm256_set1_epi32(pairs[i][p])));
            const __m256 ad = _mm256_set1_ps(a[i]->d);
            __m256 f;
            if (t == MVM_W_Q6_K) {
                const __m256i sum = _mm256_sub_epi32(tot[x][i], _mm256_slli_epi32(ms, 5));
                f = _mm256_mul_ps(ad, _mm256_mul_ps(H[x].d, _mm256_cvtepi32_ps(sum)));
            } else {
                const __m256 m = _mm256_mul_ps(H[x].dmin, _mm256_cvtepi32_ps(ms));
                const __m256i sum = t == MVM_W_Q4_K && Q4_HI16 ? _mm256_srai_epi32(tot[x][i], 4)
                                                                 : tot[x][i];
                f = _mm256_mul_ps(ad, _mm256_fmsub_ps(H[x].d, _mm256_cvtepi32_ps(sum), m));
            }
            float *r = s[i] + 8 * (x8 + x);
            _mm256_storeu_ps(r, _mm256_add_ps(_mm256_loadu_ps(r), f));
        }
}

/* A Q5_K or Q6_K tile's quants as bytes, in the order thalf_tokens takes them (U: a half's 64
 * words): Q5_K's step st of chunk c at 16c + 8hi + st, Q6_K's step m of 8h .. at 32h + 16hi
 * + m. */
AVX2_INLINE void tile_unpack(enum mvm_wtype t, const uint8_t *tile, __m256i u[2][64])
{
    for (int x8 = 0; x8 < 2; x8++)
        if (t == MVM_W_Q5_K) {
            for (int c = 0; c < 4; c++)
#pragma GCC unroll 2
                for (int hi = 0; hi < 2; hi++)
#pragma GCC unroll 8
                    for (int st = 0; st < 8; st++)
                        u[x8][16 * c + 8 * hi + st] = q45_word(tile, x8, 1, c, st, hi);
        } else {
            for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
                for (int hi = 0; hi < 2; hi++)
#pragma GCC unroll 16
                    for (int m = 0; m < 16; m++)
                        u[x8][32 * h + 16 * hi + m] = q6_word(tile, x8, h, m, hi);
        }
}

/* All nt tokens against super-block k of a tile, TILE_NT at a time. */
AVX2_INLINE void tile_tokens(enum mvm_wtype t, const uint8_t *tile, const uint8_t *act, size_t as,
                             size_t k, size_t nt, float (*s)[16])
{
    /* Q4_K's tile halves at once: each broadcast of a token's quants meets 16 rows, and the
     * int32 sums that no longer fit the registers are kept on the stack (1.12-1.16x, one
     * thread, in cache); Q5_K's and Q6_K's unpacking needs the registers (together 0.95-0.98x
     * and 0.56-0.89x; docs/perf/cpu.md, session 138). So with VNNI: Q4_K a half at a time
     * ran 0.89-0.97x at 16-64 tokens (session 143) */
    const int NX = t == MVM_W_Q4_K ? 2 : 1;
    thalf H[2];
    thalf_scales(t, tile, 0, &H[0]);
    thalf_scales(t, tile, 1, &H[1]);
    /* Q5_K's and Q6_K's quants (7 and 6 instructions a word to unpack, as much as a token's
     * products of it) unpacked once for all nt tokens into u, where the registers took them
     * apart again for every TILE_NT: one thread, 32 tokens, 1.22-1.33x (docs/perf/cpu.md,
     * session 139). Q4_K's (one or two) are not worth the store and the load; nor is a
     * single group of tokens' (up to 3: 0.94-1.19x at 2 and 3, equal at 4). */
    _Alignas(32) __m256i u[2][64];
    const int unpacked = t != MVM_W_Q4_K && nt >= TILE_NT;
    if (unpacked)
        tile_unpack(t, tile, u);
    for (size_t i0 = 0; i0 < nt; i0 += TILE_NT) {
        const int NT = nt - i0 < TILE_NT ? (int)(nt - i0) : TILE_NT;
        const mvm_block_q8_K *a[TILE_NT] = {NULL};
        int32_t pairs[TILE_NT][8];
#pragma GCC unroll 4
        for (int i = 0; i < NT; i++) {
            a[i] = AVX2_TOK(mvm_block_q8_K, act, as, i0 + (size_t)i) + k;
            tok_pairs(t, a[i], pairs[i]);
        }
        for (int x8 = 0; x8 < 2; x8 += NX) {
            const __m256i *U = unpacked ? u[x8] : NULL;
            /* the token count a constant, so that the token loops unroll */
            switch (NT) {
            case 1: thalf_tokens(t, 1, NX, &H[x8], tile, x8, a, pairs, s + i0, U); break;
            case 2: thalf_tokens(t, 2, NX, &H[x8], tile, x8, a, pairs, s + i0, U); break;
            case 3: thalf_tokens(t, 3, NX, &H[x8], tile, x8, a, pairs, s + i0, U); break;
            default: thalf_tokens(t, TILE_NT, NX, &H[x8], tile, x8, a, pairs, s + i0, U); break;
            }
        }
    }
}

/* mvm_k_gemm_fn over a tiled matrix: n_rows (a multiple of 16) rows of rb bytes, each 16 rows
 * nb = n / 256 tiles in order. Each tile's scales are decoded once a pass of up to TILE_TOKENS
 * tokens. */
AVX2_INLINE void gemm_tiles(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                            const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y,
                            size_t ys, int add)
{
    const size_t nb = n / MVM_QK_K, tb = 16 * mvm_k_block_bytes(t);
    const uint8_t *end = w + n_rows * rb;
    float s[TILE_TOKENS][16];
    for (size_t t0 = 0; t0 < n_tok; t0 += TILE_TOKENS) {
        const size_t nt = n_tok - t0 < TILE_TOKENS ? n_tok - t0 : TILE_TOKENS;
        const uint8_t *at = act + t0 * as;
        float *yt = y + t0 * ys;
        for (size_t r0 = 0; r0 < n_rows; r0 += 16) {
            for (size_t i = 0; i < nt; i++)
                if (add)
                    memcpy(s[i], yt + i * ys + r0, sizeof s[i]);
                else
                    memset(s[i], 0, sizeof s[i]);
            for (size_t k = 0; k < nb; k++) {
                const uint8_t *tile = w + r0 * rb + k * tb;
                avx2_prefetch_tiles(tile, tb, end);
                tile_tokens(t, tile, at, as, k, nt, s);
            }
            for (size_t i = 0; i < nt; i++)
                memcpy(yt + i * ys + r0, s[i], sizeof s[i]);
        }
    }
}

/* ---- row-major rows: each 16 rows' super-block tiled on the way in -------------------- */

/* Words 0 .. nw - 1 (nw <= 8) at byte off of 8 rows, stored as a tile's: word w of row i at dst
 * + 64w + 4i. An 8 x 8 transpose of dwords; four words are read as 16 bytes (a block's last
 * words: nothing past it). */
AVX2_INLINE void rows_words(const uint8_t *const r[8], size_t off, int nw, uint8_t *dst)
{
    __m256i v[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        v[i] = nw > 4 ? _mm256_loadu_si256((const __m256i *)(r[i] + off))
                      : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(r[i] + off)));
    avx2_transpose8_i32(v);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        _mm256_storeu_si256((__m256i *)(dst + 64 * j), v[j]);
        if (nw > 4)
            _mm256_storeu_si256((__m256i *)(dst + 64 * (j + 4)), v[j + 4]);
    }
}

/* Super-block k of 16 rows (row i at p[i]) as a tile (kernels.h, "Expert tiles"). */
AVX2_INLINE void rows_tile(enum mvm_wtype t, const uint8_t *const p[16], size_t k, uint8_t *tile)
{
    const size_t bytes = mvm_k_block_bytes(t), nw = bytes / 4, tail = bytes % 4;
    const size_t off = k * bytes;
#pragma GCC unroll 2
    for (int x8 = 0; x8 < 2; x8++)
        for (size_t w = 0; w < nw; w += 8)
            rows_words(p + 8 * x8, off + 4 * w, nw - w < 8 ? (int)(nw - w) : 8,
                       tile + 64 * w + 32 * x8);
    for (size_t i = 0; i < 16; i++)
        memcpy(tile + 64 * nw + tail * i, p[i] + off + 4 * nw, tail);
}

/* mvm_k_gemm_fn over row-major rows: each 16 rows' super-block is tiled (rows_tile) once a pass
 * of up to TILE_TOKENS tokens and taken as the tiles are; a block cut short by the matrix's
 * edge repeats its last row (computed, never stored). The rows' next super-block is prefetched
 * a block ahead. */
AVX2_INLINE void gemm_rows(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                           const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y,
                           size_t ys, int add)
{
    const size_t nb = n / MVM_QK_K, bytes = mvm_k_block_bytes(t);
    float s[TILE_TOKENS][16];
    _Alignas(64) uint8_t tile[16 * 256];
    for (size_t t0 = 0; t0 < n_tok; t0 += TILE_TOKENS) {
        const size_t nt = n_tok - t0 < TILE_TOKENS ? n_tok - t0 : TILE_TOKENS;
        const uint8_t *at = act + t0 * as;
        float *yt = y + t0 * ys;
        for (size_t r0 = 0; r0 < n_rows; r0 += 16) {
            const size_t nr = n_rows - r0 < 16 ? n_rows - r0 : 16;
            const uint8_t *p[16];
            for (size_t i = 0; i < 16; i++)
                p[i] = w + (r0 + (i < nr ? i : nr - 1)) * rb;
            for (size_t i = 0; i < nt; i++)
                for (size_t r = 0; r < 16; r++)
                    s[i][r] = add && r < nr ? yt[i * ys + r0 + r] : 0.0f;
            for (size_t k = 0; k < nb; k++) {
                for (size_t i = 0; i < 16 && k + 1 < nb; i++)
                    avx2_prefetch_at(p[i] + k * bytes, bytes, bytes);
                rows_tile(t, p, k, tile);
                tile_tokens(t, tile, at, as, k, nt, s);
            }
            for (size_t i = 0; i < nt; i++)
                memcpy(yt + i * ys + r0, s[i], nr * sizeof(float));
        }
    }
}

/* The tables' entry for one type: fn (gemm_tiles or gemm_rows) with it fixed. */
#define ENTRY(fn, sfx, type) MVM_K_GEMM_ENTRY(static, AVX2_TARGET, fn##_##sfx, fn, type)
ENTRY(gemm_tiles, q4_K, MVM_W_Q4_K)
ENTRY(gemm_tiles, q5_K, MVM_W_Q5_K)
ENTRY(gemm_tiles, q6_K, MVM_W_Q6_K)
ENTRY(gemm_rows, q4_K, MVM_W_Q4_K)
ENTRY(gemm_rows, q5_K, MVM_W_Q5_K)
ENTRY(gemm_rows, q6_K, MVM_W_Q6_K)

const mvm_k_gemm_fn AVX2_LEVEL(mvm_k_tiles)[MVM_W_COUNT] = {[MVM_W_Q4_K] = gemm_tiles_q4_K,
                                                            [MVM_W_Q5_K] = gemm_tiles_q5_K,
                                                            [MVM_W_Q6_K] = gemm_tiles_q6_K};
/* The 32-element Q types' entries: gemm_q_avx2.h's kernel (its level's) with the type fixed. */
#define GEMM_Q(type)                                                                               \
    MVM_K_GEMM_ENTRY(static, AVX2_TARGET, gemm_q_##type, AVX2_LEVEL(mvm_k_gemm_q), type)
MVM_K_Q32_TYPES(GEMM_Q)
#define GEMM_Q_SLOT(type) [type] = gemm_q_##type,

const mvm_k_gemm_fn AVX2_LEVEL(mvm_k_gemm)[MVM_W_COUNT] = {
    MVM_K_Q32_TYPES(GEMM_Q_SLOT)
    [MVM_W_Q4_K] = gemm_rows_q4_K, [MVM_W_Q5_K] = gemm_rows_q5_K, [MVM_W_Q6_K] = gemm_rows_q6_K};

#endif
