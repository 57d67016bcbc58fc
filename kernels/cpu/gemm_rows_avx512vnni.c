/*
 * The AVX-512 VNNI level's K-quant products (Q4_K, Q5_K, Q6_K; tiled, Q2_K to Q6_K and
 * IQ4_XS) for a few tokens: what an expert receives in prefill (a prompt of P tokens routed
 * top-k among E experts gives each about P·k/E: OLMoE at pp64, 8). gemm_avx512vnni.c hands
 * here the products of fewer than
 * MVM_K_ROWS_TOKENS tokens over rows of several super-blocks (gate and up, the attention's
 * projections); one super-block a row (the channel-major expert's down slots) stays with the
 * tokens in the lanes, whose rows stream in order: rows in the lanes there, each block of
 * 16 rows unpacked for its one super-block, measured 5-18% slower at 4 to 15 tokens.
 *
 * A vector's 16 lanes are 16 rows. The rows' super-block is unpacked once (rblock: 16 rows'
 * dwords transposed into lanes, nibbles split, scales decoded 16 rows at a time) and every
 * token then costs only its products: one vpdpbusd per 4 quants, the token's 4 quants
 * broadcast straight from its Q8_K block, with no lane idle whatever the count. With tokens
 * in the lanes instead, 9 tokens left 7 of 16 lanes idle, each row was unpacked per call and
 * the tokens' quants and y's block went through transposes. bench_cpu_expert_tokens
 * (docs/perf/cpu.md) measured the two.
 *
 * Tiled experts (kernels.h, "Expert tiles") store each 16 rows' super-block transposed
 * already, so their kernel (gemm_tiles, the level's tiles table) loads a word of 16 rows and
 * splits its nibbles as the products use it: no transposes, no unpacked copy (but for Q5_K
 * and Q6_K tiles with more than TILE_UNPACK_TOKENS tokens), and every token count goes
 * through it. An OLMoE Q4_K_M expert streamed from memory, GMAC/s against the untiled
 * kernels (bench_cpu_expert_tokens, 2026-11-25): 1 token 40-42 -> 37-40, 2 51 -> 81-85, 4
 * 90 -> 166, 8 156 -> 196, 16 217 -> 227, 32 253 -> 232, 64 264 -> 245; Q5_K_M's 2 49 -> 85,
 * 8 130 -> 179, 64 258 -> 223 (docs/perf/cpu.md). IQ4_XS tiles too (a super-block of 256
 * like the K-quants', its nibbles through IQ4_NL's table + 128 and the 128 taken off with
 * the bsums, as Q6_K's 32): on a Zen 4, 1, 4, 8, 64 tokens 21, 43, 83, 130 -> 33, 94, 120,
 * 135 GMAC/s against its untiled kernel (gemm_k_avx512vnni.h's); Q3_K (2 bits + a high
 * bit, offset 4) 23, 39, 75, 120 -> 32, 83, 94, 124; Q2_K (2 bits, mins per 16) 29, 43,
 * 83, 122 -> 48, 100, 112, 126.
 *
 * The results are bitwise dotn's (dispatch.h's contract; test_kernels checks every count):
 * the integer sums are exact in any order, and each lane's float work per super-block is
 * avx2.h's in the same order (avx2_k45_finish for Q4_K and Q5_K; ad·(d·sum) for Q6_K and
 * IQ4_XS), added into its sum in super-block order. A block cut short by the matrix's edge
 * repeats its last row (computed, never stored).
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#define MVM_K_VNNI 1
#include "kernels/cpu/gemm_lanes.h"

/* 16 rows' super-block: q[g] lane i = row i's quants 4g .. 4g + 3 (unsigned), in the order
 * of the Q8_K quants they meet; sc[j] the sub-blocks' scales (Q4_K, Q5_K: 8 of 32 quants;
 * Q6_K: 16 of 16, signed) as int32; mp[p] the int16 pairs the token's bsums pair p meets:
 * Q4_K, Q5_K the min of sub-block p twice (bsums 2p, 2p + 1 are its halves), Q6_K the
 * scales 2p, 2p + 1; the f16 scales as floats. */
typedef struct {
    __m512i q[MVM_QK_K / 4];
    __m512i sc[16];
    __m512i mp[8];
    __m512 d, dmin;
} rblock;

/* Lane i of out[m]: dword m of the 64 bytes at p[i] + off. */
AVX512_INLINE void rows_dwords(const uint8_t *const p[16], size_t off, __m512i out[16])
{
    __m512i in[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        in[i] = _mm512_loadu_si512(p[i] + off);
    transpose16(in, out);
}

/* Lane i: the dword at base + idx[i] + off (each row's field). */
AVX512_INLINE __m512i rows_field(const uint8_t *base, __m512i idx, size_t off)
{
    return _mm512_i32gather_epi32(idx, base + off, 1);
}

/* Two f16 in each lane (low, high) -> floats. */
AVX512_INLINE __m512 half_lo(__m512i v)
{
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

/* avx2_k45_scales, 16 rows at a time, from each row's first four dwords (dd: d and dmin;
 * u0 .. u2: the 12 bytes of 6-bit scales and mins). */
AVX512_INLINE void rblock_q45_scales(__m512i dd, __m512i u0, __m512i u1, __m512i u2, rblock *R)
{
    const __m512i nib = _mm512_set1_epi8(0x0F);
    /* U[0], U[1] the scales 0-3, 4-7, U[2], U[3] the mins */
    const __m512i m6 = _mm512_set1_epi8(0x3F), top = _mm512_set1_epi8(0x03);
    const __m512i U[4] = {
        _mm512_and_si512(u0, m6),
        _mm512_or_si512(_mm512_and_si512(u2, nib),
                        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), top), 4)),
        _mm512_and_si512(u1, m6),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), nib),
                        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), top), 4))};
    const __m512i byte = _mm512_set1_epi32(0xFF);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        R->sc[j] = _mm512_and_si512(_mm512_srli_epi32(U[j / 4], 8 * (j % 4)), byte);
        const __m512i mn = _mm512_and_si512(_mm512_srli_epi32(U[2 + j / 4], 8 * (j % 4)), byte);
        R->mp[j] = _mm512_or_si512(mn, _mm512_slli_epi32(mn, 16));
    }
    R->d = half_lo(dd);
    R->dmin = half_lo(_mm512_srli_epi32(dd, 16));
}

/* Q6_K's 16 int8 scales of each row (S[i]: its dword i). */
AVX512_INLINE void rblock_q6_scales(const __m512i S[4], rblock *R)
{
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) /* the int8 scale j, sign-extended */
        R->sc[j] = _mm512_srai_epi32(_mm512_slli_epi32(S[j / 4], 24 - 8 * (j % 4)), 24);
    const __m512i low16 = _mm512_set1_epi32(0xFFFF);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        R->mp[j] = _mm512_or_si512(_mm512_and_si512(R->sc[2 * j], low16),
                                   _mm512_slli_epi32(R->sc[2 * j + 1], 16));
}

/* Quants of a few low bits and a top part: each byte's bits under `low` from n and, at the
 * bits of `top` (its lowest bit pos), h's same byte's bits from bit `bit` on. Rotating h's
 * dwords by pos - bit (mod 32) carries those bits, in every byte, to top's place in that
 * byte (what a rotation carries across bytes lands outside top, which the mask drops); one
 * ternary op then merges: a rotate, an and and the merge where shifting, masking, shifting
 * back and or-ing took four and one more for n's mask. Q5_K: a nibble and 1 bit; Q6_K: a
 * nibble and 2; Q3_K: 2 bits and 1. */
AVX512_INLINE __m512i quants_top(__m512i n, int low, __m512i h, int bit, int pos, int top)
{
    const __m512i t = _mm512_and_si512(_mm512_rolv_epi32(h, _mm512_set1_epi32((pos - bit) & 31)),
                                       _mm512_set1_epi8((char)top));
    return _mm512_ternarylogic_epi32(t, n, _mm512_set1_epi8((char)low), 0xF8); /* A | (B & C) */
}

/* Q5_K's: n's low nibbles, bit `bit` of h as the fifth. */
AVX512_INLINE __m512i q5_quants(__m512i n, __m512i h, int bit)
{
    return quants_top(n, 0x0F, h, bit, 4, 0x10);
}

AVX512_INLINE void rblock_q45(int q5, const uint8_t *const p[16], const uint8_t *base, __m512i idx,
                              rblock *R)
{
    const size_t qs = q5 ? offsetof(mvm_block_q5_K, qs) : offsetof(mvm_block_q4_K, qs);
    const __m512i nib = _mm512_set1_epi8(0x0F);
    __m512i H[16];
    if (q5)
        rows_dwords(p, offsetof(mvm_block_q5_K, qh), H); /* qh's 8 dwords, then qs's */
    for (int h = 0; h < 2; h++) {
        __m512i T[16];
        rows_dwords(p, qs + 64 * (size_t)h, T);
#pragma GCC unroll 16
        for (int m = 0; m < 16; m++) {
            /* qs dword D = 16h + m: bytes 32k + 4(D % 8).. of chunk k = D / 8, the low
             * nibbles quants 64k + 4(D % 8).. (sub-block 2k), the high ones 32 further */
            const int D = 16 * h + m, k = D / 8, g = 16 * k + D % 8;
            if (q5) { /* bits 2k, 2k + 1 of qh's same bytes */
                R->q[g] = q5_quants(T[m], H[D % 8], 2 * k);
                R->q[g + 8] = q5_quants(_mm512_srli_epi16(T[m], 4), H[D % 8], 2 * k + 1);
            } else {
                R->q[g] = _mm512_and_si512(T[m], nib);
                R->q[g + 8] = _mm512_and_si512(_mm512_srli_epi16(T[m], 4), nib);
            }
        }
    }
    rblock_q45_scales(rows_field(base, idx, 0), rows_field(base, idx, 4),
                      rows_field(base, idx, 8), rows_field(base, idx, 12), R);
}

AVX512_INLINE void rblock_q6(const uint8_t *const p[16], const uint8_t *base, __m512i idx,
                             rblock *R)
{
    __m512i H[16];
    rows_dwords(p, offsetof(mvm_block_q6_K, qh), H);
    for (int h = 0; h < 2; h++) {
        __m512i L[16];
        rows_dwords(p, 64 * (size_t)h, L);
#pragma GCC unroll 16
        for (int m = 0; m < 16; m++)
#pragma GCC unroll 2
            for (int s = 0; s < 2; s++) {
                /* ql[64h + 4m..]'s low (s = 0) or high nibbles are quants 64c + 4m.. of
                 * chunk c = 2h + s; their top bits are bits 4s + 2(m / 8) of
                 * qh[32h + 4(m % 8)..] (blocks.h) */
                const int c = 2 * h + s;
                R->q[16 * c + m] = quants_top(s ? _mm512_srli_epi16(L[m], 4) : L[m], 0x0F,
                                              H[8 * h + m % 8], 4 * s + 2 * (m / 8), 4, 0x30);
            }
    }
    __m512i S[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        S[i] = rows_field(base, idx, offsetof(mvm_block_q6_K, scales) + 4 * (size_t)i);
    rblock_q6_scales(S, R);
    /* d is the block's last 2 bytes: read from 2 earlier, so as not to read past the block */
    R->d = half_lo(_mm512_srli_epi32(rows_field(base, idx, offsetof(mvm_block_q6_K, d) - 2), 16));
}

/* A token's super-block against 16 rows, its scaled sub-block sums in tot's lanes: s (the
 * rows' sums) += each pair's float, avx2.h's per super-block (avx2_k45_finish for Q4_K and
 * Q5_K, the mins' term from the token's bsums; Q2_K's the same, each product rounded;
 * ad·(d·sum) for the offset types, Q3_K's -4, Q6_K's -32 and IQ4_XS's -128 taken off with
 * them). */
AVX512_INLINE void rfinish(enum mvm_wtype t, const rblock *R, __m512i tot,
                           const mvm_block_q8_K *a, float s[16])
{
    __m512i ms = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        int32_t b;
        memcpy(&b, a->bsums + 2 * p, 4);
        ms = _mm512_dpwssd_epi32(ms, R->mp[p], _mm512_set1_epi32(b));
    }
    const __m512 ad = _mm512_set1_ps(a->d);
    __m512 f;
    if (t == MVM_W_Q2_K) { /* avx2_kblock_q23's: each product rounded */
        const __m512 m = _mm512_mul_ps(R->dmin, _mm512_cvtepi32_ps(ms));
        f = _mm512_mul_ps(ad, _mm512_sub_ps(_mm512_mul_ps(R->d, _mm512_cvtepi32_ps(tot)), m));
    } else if (t != MVM_W_Q4_K && t != MVM_W_Q5_K) { /* the offset · Σ scale · bsum */
        const unsigned o = t == MVM_W_Q3_K ? 2 : t == MVM_W_Q6_K ? 5 : 7;
        const __m512i sum = _mm512_sub_epi32(tot, _mm512_slli_epi32(ms, o));
        f = _mm512_mul_ps(ad, _mm512_mul_ps(R->d, _mm512_cvtepi32_ps(sum)));
    } else {
        const __m512 m = _mm512_mul_ps(R->dmin, _mm512_cvtepi32_ps(ms));
        f = _mm512_mul_ps(ad, _mm512_fmsub_ps(R->d, _mm512_cvtepi32_ps(tot), m));
    }
    _mm512_storeu_ps(s, _mm512_add_ps(_mm512_loadu_ps(s), f));
}

/* NT tokens a[0 .. NT - 1] against a super-block of 16 rows: s[i] (the 16 rows' sums of
 * token i, 16 floats) += each pair's float. A sub-block's products gather in an int32 lane
 * per row (vpdpbusd, 4 quants a step; below 8 tokens in two chains, to hide its latency),
 * then take the sub-block's scale, an exact product. */
AVX512_INLINE void rtokens(enum mvm_wtype t, int NT, const rblock *R,
                           const mvm_block_q8_K *const a[], float (*s)[16])
{
    const int sub = t == MVM_W_Q6_K || t == MVM_W_Q3_K || t == MVM_W_Q2_K ? 4 : 8;
    const int n_sub = MVM_QK_K / 4 / sub;
    const int C = NT >= 8 ? 1 : 2;
    __m512i tot[8];
#pragma GCC unroll 8
    for (int i = 0; i < NT; i++)
        tot[i] = _mm512_setzero_si512();
    for (int j = 0; j < n_sub; j++) {
        __m512i acc[2][8];
#pragma GCC unroll 8
        for (int i = 0; i < NT; i++)
            acc[0][i] = acc[1][i] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int gg = 0; gg < sub; gg++) {
            const int g = sub * j + gg;
            const __m512i q = R->q[g];
#pragma GCC unroll 8
            for (int i = 0; i < NT; i++) {
                int32_t x;
                memcpy(&x, a[i]->qs + 4 * g, 4);
                acc[gg % C][i] = _mm512_dpbusd_epi32(acc[gg % C][i], q, _mm512_set1_epi32(x));
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < NT; i++)
            tot[i] = _mm512_add_epi32(
                tot[i], _mm512_mullo_epi32(_mm512_add_epi32(acc[0][i], acc[1][i]), R->sc[j]));
    }
#pragma GCC unroll 8
    for (int i = 0; i < NT; i++)
        rfinish(t, R, tot[i], a[i], s[i]);
}

/* ---- tiles: 16 rows' super-blocks stored transposed (kernels.h, "Expert tiles") ---------- */

/* The two quant vectors of step st of sub-block pair P of a tile, and the positions (in 4s)
 * of the token quants they meet: Q4_K, Q5_K pair P = chunk P, sub-blocks 2P (low nibbles of
 * qs words 8P + st) and 2P + 1 (their high nibbles), the fifth bits from qh word st; Q6_K
 * pair P = (h, mq), sub-blocks 8h + mq and 8h + 4 + mq from ql word 16h + 4mq + st, low and
 * high nibbles, their top bits from qh word 8h + (4mq + st) % 8 (rblock_q45's and
 * rblock_q6's unpacking, one word at a time); IQ4_XS "pair" P = sub-block P alone, its
 * elements st·4.. (low nibbles of qs word 4P + st, after the two words of scales) and 16 +
 * st·4.. (their high nibbles), each through IQ4_NL's table + 128 (vpdpbusd's unsigned side;
 * rfinish takes the 128 off); Q3_K pair P = (n, jp, half) = (P / 4, P / 2 % 2, P % 2), the
 * elements 128n + 32j + 16·half + 4st.. of shifts j = 2jp (sub-block 8n + 2j + half) and
 * 2jp + 1 (two sub-blocks on) of qs word 8 + 8n + 4·half + st, each with its high bit, bit
 * 4n + j of hmask word 4·half + st, as value + 4 (rfinish takes the 4 off); Q2_K's the same
 * without the high bits, its qs words from word 4. */
AVX512_INLINE void tile_quants(enum mvm_wtype t, const uint8_t *tile, int P, int st, __m512i *lo,
                               __m512i *hi, int *glo, int *ghi)
{
    const __m512i nib = _mm512_set1_epi8(0x0F);
    if (t == MVM_W_IQ4_XS) {
        const __m512i table = _mm512_xor_si512(
            _mm512_broadcast_i32x4(
                _mm_set_epi64x((long long)MVM_K_IQ4NL_HI, (long long)MVM_K_IQ4NL_LO)),
            _mm512_set1_epi8((char)0x80));
        const __m512i T = _mm512_loadu_si512(tile + 64 * (2 + 4 * P + st));
        *lo = _mm512_shuffle_epi8(table, _mm512_and_si512(T, nib));
        *hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(T, 4), nib));
        *glo = 8 * P + st;
        *ghi = *glo + 4;
        return;
    }
    if (t == MVM_W_Q3_K || t == MVM_W_Q2_K) {
        const int n = P / 4, j = 2 * (P / 2 % 2), half = P % 2, w = 4 * half + st;
        const int q3 = t == MVM_W_Q3_K;
        const __m512i Q = _mm512_loadu_si512(tile + 64 * ((q3 ? 8 : 4) + 8 * n + w));
        const __m512i ql = _mm512_srli_epi16(Q, 2 * j), qh = _mm512_srli_epi16(Q, 2 * j + 2);
        if (q3) {
            const __m512i H = _mm512_loadu_si512(tile + 64 * w);
            *lo = quants_top(ql, 3, H, 4 * n + j, 2, 0x04);
            *hi = quants_top(qh, 3, H, 4 * n + j + 1, 2, 0x04);
        } else {
            const __m512i three = _mm512_set1_epi8(3);
            *lo = _mm512_and_si512(ql, three);
            *hi = _mm512_and_si512(qh, three);
        }
        *glo = 32 * n + 8 * j + 4 * half + st;
        *ghi = *glo + 8;
        return;
    }
    if (t == MVM_W_Q6_K) {
        const int h = P / 4, m = 4 * (P % 4) + st, sh = 2 * (m / 8);
        const __m512i L = _mm512_loadu_si512(tile + 64 * (16 * h + m));
        const __m512i H = _mm512_loadu_si512(tile + 64 * (32 + 8 * h + m % 8));
        *lo = quants_top(L, 0x0F, H, sh, 4, 0x30);
        *hi = quants_top(_mm512_srli_epi16(L, 4), 0x0F, H, 4 + sh, 4, 0x30);
        *glo = 32 * h + m;
        *ghi = *glo + 16;
        return;
    }
    const int q5 = t == MVM_W_Q5_K, D = 8 * P + st;
    const __m512i T = _mm512_loadu_si512(tile + 64 * ((q5 ? 12 : 4) + D));
    if (q5) {
        const __m512i b = _mm512_loadu_si512(tile + 64 * (4 + st));
        *lo = q5_quants(T, b, 2 * P);
        *hi = q5_quants(_mm512_srli_epi16(T, 4), b, 2 * P + 1);
    } else {
        *lo = _mm512_and_si512(T, nib);
        *hi = _mm512_and_si512(_mm512_srli_epi16(T, 4), nib);
    }
    *glo = 16 * P + st;
    *ghi = *glo + 8;
}

/* IQ4_XS's 8 scales of each row, less 32, from its first two words (w0: d, then scales_h;
 * w1: scales_l): scale j's low 4 bits are nibble j of w1, its top 2 bits 2j, 2j + 1 of
 * scales_h (kernels/blocks.h); mp[p] scale p twice, for the two bsums of its sub-block. */
AVX512_INLINE void rblock_iq4xs_scales(__m512i w0, __m512i w1, rblock *R)
{
    const __m512i nib = _mm512_set1_epi32(0x0F), three = _mm512_set1_epi32(3);
    const __m512i low16 = _mm512_set1_epi32(0xFFFF), bias = _mm512_set1_epi32(32);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        const __m512i lo4 = _mm512_and_si512(_mm512_srli_epi32(w1, 4 * j), nib);
        const __m512i hi2 = _mm512_and_si512(_mm512_srli_epi32(w0, 16 + 2 * j), three);
        R->sc[j] = _mm512_sub_epi32(_mm512_or_si512(lo4, _mm512_slli_epi32(hi2, 4)), bias);
        R->mp[j] = _mm512_or_si512(_mm512_and_si512(R->sc[j], low16),
                                   _mm512_slli_epi32(R->sc[j], 16));
    }
    R->d = half_lo(w0);
}

/* Q3_K's 16 six-bit scales of each row, less 32, from its 12 bytes of them (words a[0..2]):
 * ggml's unpacking (kmask1, kmask2), 16 rows at a time, as Q6_K's int8 scales. */
AVX512_INLINE void rblock_q3_scales(const __m512i a[3], rblock *R)
{
    const __m512i low4 = _mm512_set1_epi8(0x0F), low2 = _mm512_set1_epi8(0x03);
    __m512i S[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) { /* scales 4i..4i + 3: a[i % 2]'s nibbles, a[2]'s pairs */
        const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(a[i % 2], 4 * (i / 2)), low4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(a[2], 2 * i), low2);
        S[i] = _mm512_sub_epi8(_mm512_or_si512(lo, _mm512_slli_epi16(hi, 4)),
                               _mm512_set1_epi8(32));
    }
    rblock_q6_scales(S, R);
}

/* Q2_K's 16 scales (low nibbles) and mins (high) of each row from its first 4 words; mp[p]
 * the mins 2p, 2p + 1, for the bsums of those sub-blocks; d and dmin from word 20. */
AVX512_INLINE void rblock_q2_scales(const uint8_t *tile, rblock *R)
{
    const __m512i nib = _mm512_set1_epi32(0x0F);
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        const __m512i S = _mm512_loadu_si512(tile + 64 * (p / 2));
        const int b = 16 * (p % 2); /* scale 2p's byte in the word, then 2p + 1's */
        R->sc[2 * p] = _mm512_and_si512(_mm512_srli_epi32(S, b), nib);
        R->sc[2 * p + 1] = _mm512_and_si512(_mm512_srli_epi32(S, b + 8), nib);
        R->mp[p] = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi32(S, b + 4), nib),
            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(S, b + 12), nib), 16));
    }
    const __m512i dd = _mm512_loadu_si512(tile + 64 * 20);
    R->d = half_lo(dd);
    R->dmin = half_lo(_mm512_srli_epi32(dd, 16));
}

/* A tile's scales: Q4_K, Q5_K from words 0-3, Q6_K from words 48-51 and d after word 52,
 * IQ4_XS from words 0-1, Q3_K from words 24-26 and d after word 27, Q2_K from words 0-3 and
 * 20. */
AVX512_INLINE void tile_scales(enum mvm_wtype t, const uint8_t *tile, rblock *R)
{
    if (t == MVM_W_Q2_K) {
        rblock_q2_scales(tile, R);
        return;
    }
    if (t == MVM_W_Q3_K) {
        const __m512i a[3] = {_mm512_loadu_si512(tile + 64 * 24),
                              _mm512_loadu_si512(tile + 64 * 25),
                              _mm512_loadu_si512(tile + 64 * 26)};
        rblock_q3_scales(a, R);
        R->d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(tile + 64 * 27)));
        return;
    }
    if (t == MVM_W_IQ4_XS) {
        rblock_iq4xs_scales(_mm512_loadu_si512(tile), _mm512_loadu_si512(tile + 64), R);
        return;
    }
    if (t == MVM_W_Q6_K) {
        __m512i S[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            S[i] = _mm512_loadu_si512(tile + 64 * (48 + i));
        rblock_q6_scales(S, R);
        R->d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(tile + 64 * 52)));
        return;
    }
    rblock_q45_scales(_mm512_loadu_si512(tile), _mm512_loadu_si512(tile + 64),
                      _mm512_loadu_si512(tile + 128), _mm512_loadu_si512(tile + 192), R);
}

/* rtokens over a tile: the quants unpacked as they are used, a word at a time, into the
 * two sub-blocks it holds (IQ4_XS: two halves of one), each with its own sums (below 4
 * tokens two chains each). */
AVX512_INLINE void ttokens(enum mvm_wtype t, int NT, const rblock *R, const uint8_t *tile,
                           const mvm_block_q8_K *const a[], float (*s)[16])
{
    const int q6 = t == MVM_W_Q6_K, iq = t == MVM_W_IQ4_XS;
    const int q23 = t == MVM_W_Q3_K || t == MVM_W_Q2_K; /* the same order */
    const int C = NT >= 4 ? 1 : 2, pairs = q6 || iq || q23 ? 8 : 4, steps = pairs == 8 ? 4 : 8;
    __m512i tot[8];
#pragma GCC unroll 8
    for (int i = 0; i < NT; i++)
        tot[i] = _mm512_setzero_si512();
    for (int P = 0; P < pairs; P++) {
        __m512i al[2][8], ah[2][8];
#pragma GCC unroll 8
        for (int i = 0; i < NT; i++)
            al[0][i] = al[1][i] = ah[0][i] = ah[1][i] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int st = 0; st < steps; st++) {
            __m512i lo, hi;
            int glo, ghi;
            tile_quants(t, tile, P, st, &lo, &hi, &glo, &ghi);
#pragma GCC unroll 8
            for (int i = 0; i < NT; i++) {
                int32_t x, y;
                memcpy(&x, a[i]->qs + 4 * glo, 4);
                memcpy(&y, a[i]->qs + 4 * ghi, 4);
                al[st % C][i] = _mm512_dpbusd_epi32(al[st % C][i], lo, _mm512_set1_epi32(x));
                ah[st % C][i] = _mm512_dpbusd_epi32(ah[st % C][i], hi, _mm512_set1_epi32(y));
            }
        }
        const int jlo = q6    ? 8 * (P / 4) + P % 4
                        : q23 ? 8 * (P / 4) + 4 * (P / 2 % 2) + P % 2
                        : iq  ? P
                              : 2 * P;
        const int jhi = q6 ? jlo + 4 : q23 ? jlo + 2 : iq ? P : jlo + 1;
#pragma GCC unroll 8
        for (int i = 0; i < NT; i++) {
            const __m512i l = _mm512_add_epi32(al[0][i], al[1][i]);
            const __m512i h = _mm512_add_epi32(ah[0][i], ah[1][i]);
            tot[i] = _mm512_add_epi32(
                tot[i], iq ? _mm512_mullo_epi32(_mm512_add_epi32(l, h), R->sc[jlo])
                           : _mm512_add_epi32(_mm512_mullo_epi32(l, R->sc[jlo]),
                                              _mm512_mullo_epi32(h, R->sc[jhi])));
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NT; i++)
        rfinish(t, R, tot[i], a[i], s[i]);
}

/* All n_tok tokens against the 16 rows' super-block k, 8, 4, 2 and 1 at a time: R's stored
 * quants, or (tiled, a constant) the tile's as they are used. */
AVX512_INLINE void rblock_tokens(enum mvm_wtype t, const rblock *R, int tiled, const uint8_t *tile,
                                 const uint8_t *act, size_t as, size_t k, size_t n_tok,
                                 float (*s)[16])
{
    for (size_t i0 = 0; i0 < n_tok;) {
        const size_t left = n_tok - i0;
        const int NT = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        const mvm_block_q8_K *a[8];
        for (int i = 0; i < NT; i++)
            a[i] = AVX2_TOK(mvm_block_q8_K, act, as, i0 + (size_t)i) + k;
#define RBLOCK_NT(n)                                                                               \
    if (tiled)                                                                                     \
        ttokens(t, n, R, tile, a, s + i0);                                                         \
    else                                                                                           \
        rtokens(t, n, R, a, s + i0)
        if (NT == 8)
            RBLOCK_NT(8);
        else if (NT == 4)
            RBLOCK_NT(4);
        else if (NT == 2)
            RBLOCK_NT(2);
        else
            RBLOCK_NT(1);
#undef RBLOCK_NT
        i0 += (size_t)NT;
    }
}

/* Super-block k of the 16 rows from r0 (the matrix's last repeated past its edge) on its way
 * into L1. */
AVX512_INLINE void prefetch_block(const uint8_t *w, size_t rb, size_t n_rows, size_t r0, size_t k,
                                  size_t bytes)
{
    for (int i = 0; i < 16; i++) {
        const size_t r = r0 + (size_t)i < n_rows ? r0 + (size_t)i : n_rows - 1;
        const char *b = (const char *)(w + r * rb + k * bytes);
        for (size_t o = 0; o < bytes; o += 64)
            _mm_prefetch(b + o, _MM_HINT_T0);
    }
}

/* Sixteen rows read a super-block at a time are more streams than the hardware's
 * prefetchers follow: the super-block after this one (the next rows' first after the last),
 * and the next rows' same super-block, a row block ahead. Without them the products of 8
 * tokens streamed from memory ran at 0.65 of their speed from L3; the second alone took 4
 * tokens from 45 to 55 GMAC/s (bench_cpu_expert_tokens). It went to L2 (prefetcht1) until
 * session 77: into L1 it took 4 and 8 tokens on a 2-core AMD EPYC (Zen 5 class) from 87
 * and 149 GMAC/s to 93 and 156 (docs/perf/cpu.md). */
AVX512_INLINE void rows_prefetch(const uint8_t *w, size_t rb, size_t n_rows, size_t r0, size_t k,
                                 size_t nb, size_t bytes)
{
    const size_t next = r0 / 16 * nb + k + 1, pr = next / nb * 16, pk = next % nb;
    if (pr < n_rows)
        prefetch_block(w, rb, n_rows, pr, pk, bytes);
    if (nb > 1 && r0 + 16 < n_rows)
        prefetch_block(w, rb, n_rows, r0 + 16, k, bytes);
}

AVX512_INLINE void gemm_rows(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                             const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y,
                             size_t ys, int add)
{
    const size_t nb = n / MVM_QK_K, bytes = mvm_k_block_bytes(t);
    float s[MVM_K_ROWS_TOKENS][16];
    rblock R;
    /* Q6_K's blocks leave dmin unset and never read it; said for GCC, which cannot see that
     * where the type is not a constant (dispatch.h's MVM_K_INLINE_FREE) */
    R.dmin = _mm512_setzero_ps();
    for (size_t r0 = 0; r0 < n_rows; r0 += 16) {
        const int nr = n_rows - r0 < 16 ? (int)(n_rows - r0) : 16;
        const __mmask16 keep = (__mmask16)((1u << nr) - 1);
        int32_t off[16];
        for (int i = 0; i < 16; i++)
            off[i] = (int32_t)((size_t)(i < nr ? i : nr - 1) * rb);
        const __m512i idx = _mm512_loadu_si512(off);
        for (size_t i = 0; i < n_tok; i++)
            _mm512_storeu_ps(s[i], add ? _mm512_maskz_loadu_ps(keep, y + i * ys + r0)
                                       : _mm512_setzero_ps());
        for (size_t k = 0; k < nb; k++) {
            rows_prefetch(w, rb, n_rows, r0, k, nb, bytes);
            const uint8_t *base = w + r0 * rb + k * bytes, *p[16];
            for (int i = 0; i < 16; i++)
                p[i] = base + off[i];
            if (t == MVM_W_Q6_K)
                rblock_q6(p, base, idx, &R);
            else
                rblock_q45(t == MVM_W_Q5_K, p, base, idx, &R);
            rblock_tokens(t, &R, 0, NULL, act, as, k, n_tok, s);
        }
        for (size_t i = 0; i < n_tok; i++)
            _mm512_mask_storeu_ps(y + i * ys + r0, keep, _mm512_loadu_ps(s[i]));
    }
}

/* A tile's quants unpacked into R->q (rblock's layout), as ttokens unpacks them step by step. */
AVX512_INLINE void tile_unpack(enum mvm_wtype t, const uint8_t *tile, rblock *R)
{
    const int eight = t == MVM_W_Q6_K || t == MVM_W_IQ4_XS || t == MVM_W_Q3_K || t == MVM_W_Q2_K;
    const int pairs = eight ? 8 : 4;
    const int steps = eight ? 4 : 8;
#pragma GCC unroll 8
    for (int P = 0; P < pairs; P++)
#pragma GCC unroll 8
        for (int st = 0; st < steps; st++) {
            __m512i lo, hi;
            int glo, ghi;
            tile_quants(t, tile, P, st, &lo, &hi, &glo, &ghi);
            R->q[glo] = lo, R->q[ghi] = hi;
        }
}

/* ---- the tiled product -------------------------------------------------------------- */

/* Above this many tokens a Q2_K, Q3_K, Q5_K or Q6_K tile's quants are unpacked once for all
 * of them (tile_unpack) and read back, rather than unpacked step by step for every 8 tokens:
 * their top bits come from a second word (Q2_K's several shifts of one), so unpacking is
 * dearer than reading back (Q2_K's and Q3_K's, docs/perf/cpu.md: 16 and 64 tokens 6-20%
 * faster unpacked once).
 * One thread, experts streamed (bench_cpu_expert_tokens, GMAC/s, two alternating runs):
 * Q5_K_M's 12 tokens 161-164 -> 202-211, 64 204-209 -> 224-235; Q6_K's 12 136-147 ->
 * 187-189, 64 186-193 -> 207-212; Q4_K_M's (Q4_K gate and up on the fly, Q6_K down
 * unpacked) 12 174-186 -> 226-232, 64 221-233 -> 233-239. Q4_K's own nibbles are cheaper
 * to split again than to read back (its gate and up at 64 tokens: 261 on the fly, 239
 * unpacked), and so are IQ4_XS's through their table (a Zen 4, whole experts streamed: 16
 * tokens 112-114 unpacked, 125-126 on the fly; 64 126-128, 134-136). */
#define TILE_UNPACK_TOKENS 8
/* Tokens a tile's sums are kept for at once (the rest in further passes over the rows). */
#define TILE_TOKENS 32

/* mvm_k_gemm_fn over a tiled matrix: n_rows (a multiple of 16) rows of rb bytes, each 16
 * rows nb = n / 256 tiles in order. Each tile's scales are decoded once and its quants
 * unpacked once for every 8 tokens. */
AVX512_INLINE void gemm_tiles(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                              const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y,
                              size_t ys, int add)
{
    const size_t nb = n / MVM_QK_K, tb = 16 * mvm_k_block_bytes(t);
    const uint8_t *end = w + n_rows * rb;
    float s[TILE_TOKENS][16];
    rblock R;
    for (size_t t0 = 0; t0 < n_tok; t0 += TILE_TOKENS) {
        const size_t nt = n_tok - t0 < TILE_TOKENS ? n_tok - t0 : TILE_TOKENS;
        const uint8_t *at = act + t0 * as;
        float *yt = y + t0 * ys;
        for (size_t r0 = 0; r0 < n_rows; r0 += 16) {
            for (size_t i = 0; i < nt; i++)
                _mm512_storeu_ps(s[i], add ? _mm512_loadu_ps(yt + i * ys + r0)
                                           : _mm512_setzero_ps());
            for (size_t k = 0; k < nb; k++) {
                const uint8_t *tile = w + r0 * rb + k * tb;
                avx2_prefetch_tiles(tile, tb, end);
                tile_scales(t, tile, &R);
                /* unpacked once (Q4_K's and IQ4_XS's split again as used: cheaper) */
                if (t != MVM_W_Q4_K && t != MVM_W_IQ4_XS && nt > TILE_UNPACK_TOKENS) {
                    tile_unpack(t, tile, &R);
                    rblock_tokens(t, &R, 0, NULL, at, as, k, nt, s);
                } else
                    rblock_tokens(t, &R, 1, tile, at, as, k, nt, s);
            }
            for (size_t i = 0; i < nt; i++)
                _mm512_storeu_ps(yt + i * ys + r0, _mm512_loadu_ps(s[i]));
        }
    }
}

#define GEMM_TILES(sfx, type)                                                                      \
    MVM_K_GEMM_ENTRY(static, AVX512_TARGET, tiles_##sfx, gemm_tiles, type)
GEMM_TILES(q4_K, MVM_W_Q4_K)
GEMM_TILES(q5_K, MVM_W_Q5_K)
GEMM_TILES(q6_K, MVM_W_Q6_K)
GEMM_TILES(iq4_xs, MVM_W_IQ4_XS)
GEMM_TILES(q3_K, MVM_W_Q3_K)
GEMM_TILES(q2_K, MVM_W_Q2_K)

const mvm_k_gemm_fn mvm_k_tiles_avx512vnni[MVM_W_COUNT] = {
    [MVM_W_Q2_K] = tiles_q2_K, [MVM_W_Q3_K] = tiles_q3_K,     [MVM_W_Q4_K] = tiles_q4_K,
    [MVM_W_Q5_K] = tiles_q5_K, [MVM_W_Q6_K] = tiles_q6_K, [MVM_W_IQ4_XS] = tiles_iq4_xs,
    [MVM_W_Q8_0] = mvm_k_tiles_q8_0_vnni};

#define GEMM_ROWS(sfx, type)                                                                       \
    AVX512_TARGET static void gemm_rows_##sfx(const uint8_t *w, size_t rb, size_t n_rows,          \
                                              const uint8_t *act, size_t as, size_t n_tok,         \
                                              size_t n, float *y, size_t ys, int add)              \
    {                                                                                              \
        gemm_rows(type, w, rb, n_rows, act, as, n_tok, n, y, ys, add);                             \
    }
GEMM_ROWS(q4_K, MVM_W_Q4_K)
GEMM_ROWS(q5_K, MVM_W_Q5_K)
GEMM_ROWS(q6_K, MVM_W_Q6_K)

void mvm_k_gemm_rows_vnni(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                          const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y,
                          size_t ys, int add)
{
    assert(mvm_k_has_rows_vnni(t));
    if (t == MVM_W_Q6_K)
        gemm_rows_q6_K(w, rb, n_rows, act, as, n_tok, n, y, ys, add);
    else if (t == MVM_W_Q5_K)
        gemm_rows_q5_K(w, rb, n_rows, act, as, n_tok, n, y, ys, add);
    else if (t == MVM_W_Q4_K)
        gemm_rows_q4_K(w, rb, n_rows, act, as, n_tok, n, y, ys, add);
}

#endif
