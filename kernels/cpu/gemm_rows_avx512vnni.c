/*
 * The AVX-512 VNNI level's K-quant products (Q4_K, Q5_K, Q6_K) for a few tokens: what an
 * expert receives in prefill (a prompt of P tokens routed top-k among E experts gives each
 * about P·k/E: OLMoE at pp64, 8). gemm_avx512vnni.c hands here the products of fewer than
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
 * The results are bitwise dotn's (dispatch.h's contract; test_kernels checks every count):
 * the integer sums are exact in any order, and each lane's float work per super-block is
 * avx2.h's in the same order (avx2_k45_finish for Q4_K and Q5_K; ad·(d·sum) for Q6_K),
 * added into its sum in super-block order. A block cut short by the matrix's edge repeats its
 * last row (computed, never stored).
 */
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

AVX512_INLINE void rblock_q45(int q5, const uint8_t *const p[16], const uint8_t *base, __m512i idx,
                              rblock *R)
{
    const size_t qs = q5 ? offsetof(mvm_block_q5_K, qs) : offsetof(mvm_block_q4_K, qs);
    const __m512i nib = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
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
            __m512i lo = _mm512_and_si512(T[m], nib);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi16(T[m], 4), nib);
            if (q5) { /* bits 2k, 2k + 1 of qh's same bytes */
                const __m512i b = H[D % 8];
                lo = _mm512_or_si512(
                    lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(b, 2 * k), one), 4));
                hi = _mm512_or_si512(
                    hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(b, 2 * k + 1), one),
                                          4));
            }
            R->q[g] = lo;
            R->q[g + 8] = hi;
        }
    }
    /* avx2_k45_scales, 16 rows at a time: U[0], U[1] the scales 0-3, 4-7, U[2], U[3] the mins */
    const __m512i dd = rows_field(base, idx, 0);
    const __m512i u0 = rows_field(base, idx, 4), u1 = rows_field(base, idx, 8);
    const __m512i u2 = rows_field(base, idx, 12);
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

AVX512_INLINE void rblock_q6(const uint8_t *const p[16], const uint8_t *base, __m512i idx,
                             rblock *R)
{
    const __m512i nib = _mm512_set1_epi8(0x0F), three = _mm512_set1_epi8(3);
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
                const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(L[m], 4 * s), nib);
                const __m512i hb = _mm512_and_si512(
                    _mm512_srli_epi16(H[8 * h + m % 8], 4 * s + 2 * (m / 8)), three);
                R->q[16 * c + m] = _mm512_or_si512(lo, _mm512_slli_epi16(hb, 4));
            }
    }
    __m512i S[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        S[i] = rows_field(base, idx, offsetof(mvm_block_q6_K, scales) + 4 * (size_t)i);
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) /* the int8 scale j, sign-extended */
        R->sc[j] = _mm512_srai_epi32(_mm512_slli_epi32(S[j / 4], 24 - 8 * (j % 4)), 24);
    const __m512i low16 = _mm512_set1_epi32(0xFFFF);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        R->mp[j] = _mm512_or_si512(_mm512_and_si512(R->sc[2 * j], low16),
                                   _mm512_slli_epi32(R->sc[2 * j + 1], 16));
    /* d is the block's last 2 bytes: read from 2 earlier, so as not to read past the block */
    R->d = half_lo(_mm512_srli_epi32(rows_field(base, idx, offsetof(mvm_block_q6_K, d) - 2), 16));
}

/* NT tokens a[0 .. NT - 1] against a super-block of 16 rows: s[i] (the 16 rows' sums of
 * token i, 16 floats) += each pair's float. A sub-block's products gather in an int32 lane
 * per row (vpdpbusd, 4 quants a step; below 8 tokens in two chains, to hide its latency),
 * then take the sub-block's scale, an exact product. */
AVX512_INLINE void rtokens(int q6, int NT, const rblock *R, const mvm_block_q8_K *const a[],
                           float (*s)[16])
{
    const int sub = q6 ? 4 : 8, n_sub = MVM_QK_K / 4 / sub, C = NT >= 8 ? 1 : 2;
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
    for (int i = 0; i < NT; i++) {
        __m512i ms = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++) {
            int32_t b;
            memcpy(&b, a[i]->bsums + 2 * p, 4);
            ms = _mm512_dpwssd_epi32(ms, R->mp[p], _mm512_set1_epi32(b));
        }
        const __m512 ad = _mm512_set1_ps(a[i]->d);
        __m512 f;
        if (q6) { /* the offset: -32 · Σ scale · bsum */
            const __m512i sum = _mm512_sub_epi32(tot[i], _mm512_slli_epi32(ms, 5));
            f = _mm512_mul_ps(ad, _mm512_mul_ps(R->d, _mm512_cvtepi32_ps(sum)));
        } else {
            const __m512 m = _mm512_mul_ps(R->dmin, _mm512_cvtepi32_ps(ms));
            f = _mm512_mul_ps(ad, _mm512_fmsub_ps(R->d, _mm512_cvtepi32_ps(tot[i]), m));
        }
        _mm512_storeu_ps(s[i], _mm512_add_ps(_mm512_loadu_ps(s[i]), f));
    }
}

/* All n_tok tokens against R, 8, 4, 2 and 1 at a time. */
AVX512_INLINE void rblock_tokens(int q6, const rblock *R, const uint8_t *act, size_t as,
                                 size_t k, size_t n_tok, float (*s)[16])
{
    for (size_t i0 = 0; i0 < n_tok;) {
        const size_t left = n_tok - i0;
        const int NT = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        const mvm_block_q8_K *a[8];
        for (int i = 0; i < NT; i++)
            a[i] = AVX2_TOK(mvm_block_q8_K, act, as, i0 + (size_t)i) + k;
        if (NT == 8)
            rtokens(q6, 8, R, a, s + i0);
        else if (NT == 4)
            rtokens(q6, 4, R, a, s + i0);
        else if (NT == 2)
            rtokens(q6, 2, R, a, s + i0);
        else
            rtokens(q6, 1, R, a, s + i0);
        i0 += (size_t)NT;
    }
}

/* Super-block k of the 16 rows from r0 (the matrix's last repeated past its edge) on its way
 * into L1, or L2. */
AVX512_INLINE void prefetch_block(const uint8_t *w, size_t rb, size_t n_rows, size_t r0, size_t k,
                                  size_t bytes, int to_l2)
{
    for (int i = 0; i < 16; i++) {
        const size_t r = r0 + (size_t)i < n_rows ? r0 + (size_t)i : n_rows - 1;
        const char *b = (const char *)(w + r * rb + k * bytes);
        for (size_t o = 0; o < bytes; o += 64) {
            if (to_l2)
                _mm_prefetch(b + o, _MM_HINT_T1);
            else
                _mm_prefetch(b + o, _MM_HINT_T0);
        }
    }
}

/* Sixteen rows read a super-block at a time are more streams than the hardware's
 * prefetchers follow: the super-block after this one (the next rows' first after the last)
 * into L1, and the next rows' same super-block into L2, a row block ahead. Without them the
 * products of 8 tokens streamed from memory ran at 0.65 of their speed from L3; the L2 step
 * alone took 4 tokens from 45 to 55 GMAC/s (bench_cpu_expert_tokens). */
AVX512_INLINE void rows_prefetch(const uint8_t *w, size_t rb, size_t n_rows, size_t r0, size_t k,
                                 size_t nb, size_t bytes)
{
    const size_t next = r0 / 16 * nb + k + 1, pr = next / nb * 16, pk = next % nb;
    if (pr < n_rows)
        prefetch_block(w, rb, n_rows, pr, pk, bytes, 0);
    if (nb > 1 && r0 + 16 < n_rows)
        prefetch_block(w, rb, n_rows, r0 + 16, k, bytes, 1);
}

AVX512_INLINE void gemm_rows(enum mvm_wtype t, const uint8_t *w, size_t rb, size_t n_rows,
                             const uint8_t *act, size_t as, size_t n_tok, size_t n, float *y,
                             size_t ys, int add)
{
    const size_t nb = n / MVM_QK_K, bytes = mvm_k_block_bytes(t);
    const int q6 = t == MVM_W_Q6_K;
    float s[MVM_K_ROWS_TOKENS][16];
    rblock R;
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
            rblock_tokens(q6, &R, act, as, k, n_tok, s);
        }
        for (size_t i = 0; i < n_tok; i++)
            _mm512_mask_storeu_ps(y + i * ys + r0, keep, _mm512_loadu_ps(s[i]));
    }
}

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
    if (t == MVM_W_Q6_K)
        gemm_rows_q6_K(w, rb, n_rows, act, as, n_tok, n, y, ys, add);
    else if (t == MVM_W_Q5_K)
        gemm_rows_q5_K(w, rb, n_rows, act, as, n_tok, n, y, ys, add);
    else
        gemm_rows_q4_K(w, rb, n_rows, act, as, n_tok, n, y, ys, add);
}

#endif
