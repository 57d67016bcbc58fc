/*
 * The lattice-grid super-blocks (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M;
 * kernels/iqgrid.h) in 512-bit vectors, for the AVX-512 levels' products of few tokens
 * (decode's dot products and down rows, up to MVM_K_NT tokens: kernels/cpu/dispatch.h's
 * mvm_k_gemm), as avx512_q23_sums are Q2_K's, and for the rows the multi-row kernels
 * unpack (gemm_k_avx512vnni.h). Part of avx2_kquant.h, which includes it where
 * MVM_K_AVX512 is set.
 *
 * Their decode is bound by the arithmetic, not the memory: the AVX2 block spent about 30
 * instructions on each chunk of 32 quants, half of them scalar work (four grid entries
 * loaded and inserted, the sign bits spread for a byte shuffle and a compare). Here a
 * super-block is decoded a pair of chunks (64 quants) a vector: the sign bits of all its
 * groups at once, the seven-bit ones spread into bytes and completed with each byte's parity
 * in vector shifts, then each pair's 64 bits are a mask that negates the token's quants (a
 * masked subtract), where the types that store all 8 bits give the mask as stored; the
 * scales of all its sub-blocks in one vector, spread over the pairs' int32 lanes by a
 * permute. vpdpbusd multiplies the grid entries, unsigned, with the signed quants, and
 * avx512_kstep.h takes a step of 8 blocks' sums to floats at once. Every sum is the AVX2
 * block's integer and the float work is mvm_k_kscale's, lane by lane, so the results are
 * bit for bit the other levels' (test_kernels, test_levels_agree).
 * Two threads' decode of OLMoE's shape (3 layers), alternating rounds on a Zen 4, tok/s:
 * IQ2_XXS 60-74 -> 77-82, IQ2_XS 39-45 -> 69-77, IQ2_S 46-51 -> 57-71, IQ3_XXS 43-54 ->
 * 50-59, IQ3_S 29-34 -> 32-34, then 41-45 -> 49-50 with its entries gathered; IQ1_S
 * 45-56 -> 53-66 and IQ1_M 30-41 -> 48-61, which had kept the AVX2 block, then IQ1_S 42-49
 * -> 57-62 by avx512_iq1s_sums and IQ1_M 62-65 -> 65-73 by avx512_iq1m_sums; on a Zen 5,
 * IQ3_XXS 113-115 -> 140-142 and IQ3_S 86-94 -> 130-149 with their entries by codes
 * (iq3_mags) (docs/perf/cpu.md).
 */
#ifndef MVM_KERNELS_CPU_AVX2_KQUANT_H
#error "kernels/cpu/avx512_iqgrid.h is part of avx2_kquant.h: include kernels/cpu/avx2.h"
#endif

/* A super-block decoded: pair z's grid entries (mag: quants 64z .. 64z + 63, unsigned), the
 * mask of its negative quants and each int32 lane's scale (a lane is 4 quants); sub, the
 * sub-blocks' scales (int32 lane s: sub-block s's, of 32 quants or of 16 where the type has
 * 16; the lanes past the sub-blocks undefined), which the multi-row kernels take. */
typedef struct {
    __m512i mag[4], scale[4], sub;
    __mmask64 neg[4];
} iq_pairs;

/* Lane c (64 bits) of the result: chunk c's 32 sign bits, element 8l + j's at bit 8l + j,
 * from the word sw whose bits 7l .. 7l + 6 are group l's first seven (the eighth makes the
 * group's count of minus signs even, as mvm_k_ksign4's). */
AVX2_INLINE __m512i avx512_xxs_signs(__m512i sw)
{
    const __m512i lo7 = _mm512_set1_epi64(0x7F);
    /* A | (B & C): group l's seven bits into byte l */
    __m512i y = _mm512_and_si512(sw, lo7);
    y = _mm512_ternarylogic_epi64(y, _mm512_slli_epi64(sw, 1), _mm512_slli_epi64(lo7, 8), 0xF8);
    y = _mm512_ternarylogic_epi64(y, _mm512_slli_epi64(sw, 2), _mm512_slli_epi64(lo7, 16), 0xF8);
    y = _mm512_ternarylogic_epi64(y, _mm512_slli_epi64(sw, 3), _mm512_slli_epi64(lo7, 24), 0xF8);
    /* each byte's parity in its bit 0: the bits the shifts bring in from the next byte never
     * reach it */
    __m512i p = _mm512_xor_si512(y, _mm512_srli_epi64(y, 4));
    p = _mm512_xor_si512(p, _mm512_srli_epi64(p, 2));
    p = _mm512_xor_si512(p, _mm512_srli_epi64(p, 1));
    return _mm512_ternarylogic_epi64(y, _mm512_slli_epi64(p, 7),
                                     _mm512_set1_epi64((long long)0x80808080ull), 0xF8);
}

/* The scales of the pairs' lanes, from sc (int32 lane s: sub-block s's scale, of 32 quants,
 * or of 16 where per16). */
AVX2_INLINE void iq_lanes(__m512i sc, int per16, iq_pairs *P)
{
    const __m512i i = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i sub = per16 ? _mm512_srli_epi32(i, 2) : _mm512_srli_epi32(i, 3);
    P->sub = sc;
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++)
        P->scale[z] = _mm512_permutexvar_epi32(
            _mm512_add_epi32(sub, _mm512_set1_epi32(per16 ? 4 * z : 2 * z)), sc);
}

/* The pairs' masks of negative quants, from their 4 × 64 sign bits. */
AVX2_INLINE void iq_signs(const uint64_t bits[4], iq_pairs *P)
{
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++)
        P->neg[z] = _cvtu64_mask64(bits[z]);
}

/* 2·v + 1 for the 16 nibbles of v's low 8 bytes, in order (low, then high), as int32 lanes. */
AVX2_INLINE __m512i iq_nibble_scales(__m128i v)
{
    const __m128i m = _mm_set1_epi8(15);
    const __m128i n =
        _mm_unpacklo_epi8(_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16(v, 4), m));
    const __m512i s = _mm512_cvtepu8_epi32(n);
    return _mm512_add_epi32(_mm512_add_epi32(s, s), _mm512_set1_epi32(1));
}

/* The 12-bit codes (kernels/iqgrid.h: mvm_k_iq3xxs_codes, _iq3s_codes) of 32 grid indices
 * (iw: words below 64·pairs) in a table of `pairs` pairs of vectors: a word permute over
 * each pair's 64 codes by the index's low six bits, then its bits 6, 7 (and 8) pick among
 * them. */
AVX2_INLINE __m512i iq_codes(__m512i iw, const uint16_t *codes, int pairs)
{
    const __m512i *T = (const __m512i *)codes;
    __m512i r[8];
#pragma GCC unroll 8
    for (int k = 0; k < pairs; k++)
        r[k] = _mm512_permutex2var_epi16(_mm512_load_si512(T + 2 * k), iw,
                                         _mm512_load_si512(T + 2 * k + 1));
    for (int bit = 6, n = pairs; n > 1; bit++, n /= 2) {
        const __mmask32 m = _mm512_test_epi16_mask(iw, _mm512_set1_epi16((short)(1 << bit)));
#pragma GCC unroll 4
        for (int k = 0; k < n / 2; k++)
            r[k] = _mm512_mask_blend_epi16(m, r[2 * k], r[2 * k + 1]);
    }
    return r[0];
}

/* 16 codes (words) as their entries' 64 bytes: each code's four 3-bit fields into the
 * bytes of its int32 lane, then each field's level (levels: the grid's eight) by a byte
 * shuffle. */
AVX2_INLINE __m512i iq_code_entries(__m256i codes, const uint8_t *levels)
{
    const __m512i c = _mm512_cvtepu16_epi32(codes);
    const __m512i lv = _mm512_broadcast_i32x4(_mm_loadl_epi64((const __m128i *)levels));
    __m512i x = _mm512_and_si512(c, _mm512_set1_epi32(7));
    x = _mm512_ternarylogic_epi32(x, _mm512_slli_epi32(c, 5), _mm512_set1_epi32(0x700), 0xF8);
    x = _mm512_ternarylogic_epi32(x, _mm512_slli_epi32(c, 10), _mm512_set1_epi32(0x70000), 0xF8);
    x = _mm512_ternarylogic_epi32(x, _mm512_slli_epi32(c, 15), _mm512_set1_epi32(0x7000000),
                                  0xF8);
    return _mm512_shuffle_epi8(lv, x);
}

/* The four pairs' entries of IQ3_XXS or IQ3_S (t) from their 64 indices, lo (pairs 0 and
 * 1) and hi (2 and 3), as words. */
AVX2_INLINE void iq3_mags(enum mvm_wtype t, __m512i lo, __m512i hi, iq_pairs *P)
{
    const int s = t == MVM_W_IQ3_S;
    const uint16_t *codes = s ? mvm_k_iq3s_codes : mvm_k_iq3xxs_codes;
    const uint8_t *levels = s ? mvm_k_iq3s_levels : mvm_k_iq3xxs_levels;
    const __m512i c01 = iq_codes(lo, codes, s ? 8 : 4), c23 = iq_codes(hi, codes, s ? 8 : 4);
    P->mag[0] = iq_code_entries(_mm512_castsi512_si256(c01), levels);
    P->mag[1] = iq_code_entries(_mm512_extracti64x4_epi64(c01, 1), levels);
    P->mag[2] = iq_code_entries(_mm512_castsi512_si256(c23), levels);
    P->mag[3] = iq_code_entries(_mm512_extracti64x4_epi64(c23, 1), levels);
}

/* IQ2_XXS and IQ3_XXS: each chunk's word of signs (7 bits a group) and scale. */
AVX2_INLINE void iq_decode_xxs(enum mvm_wtype t, const uint8_t *blk, iq_pairs *P)
{
    const int iq3 = t == MVM_W_IQ3_XXS;
    const uint8_t *qs = blk + 2; /* after d */
    /* lane c: chunk c's word (IQ2_XXS: the second half of its 8 bytes; IQ3_XXS: after the
     * 64 bytes of grid indices) */
    const __m512i sw = iq3 ? _mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(qs + 64)))
                           : _mm512_srli_epi64(_mm512_loadu_si512(qs), 32);
    uint64_t bits[4]; /* pair z's 64 sign bits: chunk 2z's, then 2z + 1's */
    _mm256_storeu_si256((__m256i *)bits, _mm512_cvtepi64_epi32(avx512_xxs_signs(sw)));
    /* 2·s + 1 from each word's top four bits */
    const __m512i s4 = _mm512_castsi256_si512(_mm512_cvtepi64_epi32(_mm512_srli_epi64(sw, 28)));
    iq_lanes(_mm512_add_epi32(_mm512_add_epi32(s4, s4), _mm512_set1_epi32(1)), 0, P);
    iq_signs(bits, P);
    if (iq3) { /* 16 entries of 4 values a pair, elements 4k .. 4k + 3 of it */
        const __m512i ix = _mm512_loadu_si512(qs);
        iq3_mags(t, _mm512_cvtepu8_epi16(_mm512_castsi512_si256(ix)),
                 _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(ix, 1)), P);
        return;
    }
    /* IQ2_XXS: 8 entries of 8 values a pair, each chunk's 4 indices before its word; the
     * entries by loads and inserts: this CPU's gathers were slower (AMD EPYC, Zen 4: one
     * token 8.0-10.4 GMAC/s against 9.7-13.0) */
    const uint64_t *g = mvm_k_iq2xxs_grid;
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++) {
        const uint8_t *ix = qs + 16 * z;
        P->mag[z] = _mm512_setr_epi64((long long)g[ix[0]], (long long)g[ix[1]],
                                      (long long)g[ix[2]], (long long)g[ix[3]],
                                      (long long)g[ix[8]], (long long)g[ix[9]],
                                      (long long)g[ix[10]], (long long)g[ix[11]]);
    }
}

/* IQ2_XS: a 16-bit word a group, a 9-bit grid index under its 7 sign bits; scales of 16. */
AVX2_INLINE void iq_decode_iq2xs(const mvm_block_iq2_xs *x, iq_pairs *P)
{
    /* each word's 7 bits with their parity as bit 7, as avx512_xxs_signs does a byte's */
    const __m512i y = _mm512_srli_epi16(_mm512_loadu_si512(x->qs), 9);
    __m512i p = _mm512_xor_si512(y, _mm512_srli_epi16(y, 4));
    p = _mm512_xor_si512(p, _mm512_srli_epi16(p, 2));
    p = _mm512_xor_si512(p, _mm512_srli_epi16(p, 1));
    uint64_t bits[4];
    _mm256_storeu_si256((__m256i *)bits,
                        _mm512_cvtepi16_epi8(_mm512_ternarylogic_epi64(
                            y, _mm512_slli_epi16(p, 7), _mm512_set1_epi16(0x80), 0xF8)));
    iq_lanes(iq_nibble_scales(_mm_loadl_epi64((const __m128i *)x->scales)), 1, P);
    iq_signs(bits, P);
    const uint64_t *g = mvm_k_iq2xs_grid;
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++) {
        const uint16_t *q = x->qs + 8 * z;
        P->mag[z] = _mm512_setr_epi64(
            (long long)g[q[0] & 511], (long long)g[q[1] & 511], (long long)g[q[2] & 511],
            (long long)g[q[3] & 511], (long long)g[q[4] & 511], (long long)g[q[5] & 511],
            (long long)g[q[6] & 511], (long long)g[q[7] & 511]);
    }
}

/* IQ2_S and IQ3_S: all 8 sign bits stored, a byte a group (the masks as stored); grid
 * indices of 8 bits with 2 (IQ2_S) or 1 (IQ3_S) more in qh; scales of 16 (IQ2_S) or 32. */
AVX2_INLINE void iq_decode_s(enum mvm_wtype t, const uint8_t *blk, iq_pairs *P)
{
    uint64_t bits[4];
    if (t == MVM_W_IQ2_S) {
        const mvm_block_iq2_s *x = (const mvm_block_iq2_s *)blk;
        memcpy(bits, x->qs + 32, sizeof bits);
        iq_lanes(iq_nibble_scales(_mm_loadl_epi64((const __m128i *)x->scales)), 1, P);
        iq_signs(bits, P);
        const uint64_t *g = mvm_k_iq2s_grid;
#pragma GCC unroll 4
        for (int z = 0; z < 4; z++) {
            const uint8_t *q = x->qs + 8 * z;
            const unsigned h0 = x->qh[2 * z], h1 = x->qh[2 * z + 1];
            P->mag[z] = _mm512_setr_epi64(
                (long long)g[q[0] | (h0 << 8 & 0x300)], (long long)g[q[1] | (h0 << 6 & 0x300)],
                (long long)g[q[2] | (h0 << 4 & 0x300)], (long long)g[q[3] | (h0 << 2 & 0x300)],
                (long long)g[q[4] | (h1 << 8 & 0x300)], (long long)g[q[5] | (h1 << 6 & 0x300)],
                (long long)g[q[6] | (h1 << 4 & 0x300)], (long long)g[q[7] | (h1 << 2 & 0x300)]);
        }
        return;
    }
    const mvm_block_iq3_s *x = (const mvm_block_iq3_s *)blk;
    memcpy(bits, x->signs, sizeof bits);
    uint32_t sc4; /* a chunk's scale in each nibble of its pair's byte */
    memcpy(&sc4, x->scales, sizeof sc4);
    iq_lanes(iq_nibble_scales(_mm_cvtsi32_si128((int)sc4)), 0, P);
    iq_signs(bits, P);
    /* the 9-bit grid indices as words (element e's ninth bit is bit e of qh), the entries by
     * their codes as IQ3_XXS's (until session 112 by a gather, which had beaten the scalar
     * loads: one token 7.7-8.2 -> 8.7-8.9 GMAC/s; docs/perf/cpu.md). IQ2_S's 8-lane 64-bit
     * gather lost (14.5 -> 12.2), so it keeps the loads. */
    uint64_t h;
    memcpy(&h, x->qh, sizeof h);
    const __m512i ix = _mm512_loadu_si512(x->qs), nine = _mm512_set1_epi16(256);
    const __m512i lo = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(ix));
    const __m512i hi = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(ix, 1));
    iq3_mags(t, _mm512_mask_add_epi16(lo, (__mmask32)h, lo, nine),
             _mm512_mask_add_epi16(hi, (__mmask32)(h >> 32), hi, nine), P);
}

/* IQ1_S and IQ1_M: q = 8·g ± 1 (kernels/iqgrid.h), made from pair z's 8 grid entries g (-1,
 * 0 or 1 a byte) and the 8 groups' delta signs dneg (bit l: group l's delta is -1) by byte
 * adds, then given as |q| and the mask of its negative bytes. */
AVX2_INLINE void iq1_pair(__m512i g, unsigned dneg, iq_pairs *P, int z)
{
    const __m512i g2 = _mm512_add_epi8(g, g), g4 = _mm512_add_epi8(g2, g2);
    const __m512i delta =
        _mm512_mask_blend_epi64((__mmask8)dneg, _mm512_set1_epi8(1), _mm512_set1_epi8(-1));
    const __m512i q = _mm512_add_epi8(_mm512_add_epi8(g4, g4), delta);
    P->mag[z] = _mm512_abs_epi8(q);
    P->neg[z] = _mm512_movepi8_mask(q);
}

/* IQ1_S's pair z: the 8 grid entries of its chunks 2z and 2z + 1, a chunk's u16 qh holding
 * its 4 groups' top index bits. */
AVX2_INLINE __m512i iq1s_entries(const mvm_block_iq1_s *x, int z)
{
    const uint64_t *g = mvm_k_iq1s_grid;
    const uint8_t *q = x->qs + 8 * z;
    const unsigned h0 = x->qh[2 * z], h1 = x->qh[2 * z + 1];
    return _mm512_setr_epi64(
        (long long)g[q[0] | (h0 << 8 & 0x700)], (long long)g[q[1] | (h0 << 5 & 0x700)],
        (long long)g[q[2] | (h0 << 2 & 0x700)], (long long)g[q[3] | (h0 >> 1 & 0x700)],
        (long long)g[q[4] | (h1 << 8 & 0x700)], (long long)g[q[5] | (h1 << 5 & 0x700)],
        (long long)g[q[6] | (h1 << 2 & 0x700)], (long long)g[q[7] | (h1 >> 1 & 0x700)]);
}

/* IQ1_M's pair z: the 8 grid entries of its chunks 2z and 2z + 1, group l's top index bits
 * in the low 3 bits of nibble l of qh's 4 bytes. */
AVX2_INLINE __m512i iq1m_entries(const mvm_block_iq1_m *x, int z)
{
    const uint64_t *g = mvm_k_iq1s_grid;
    const uint8_t *q = x->qs + 8 * z;
    uint32_t h;
    memcpy(&h, x->qh + 4 * z, sizeof h);
    return _mm512_setr_epi64(
        (long long)g[q[0] | (h << 8 & 0x700)], (long long)g[q[1] | (h << 4 & 0x700)],
        (long long)g[q[2] | (h & 0x700)], (long long)g[q[3] | (h >> 4 & 0x700)],
        (long long)g[q[4] | (h >> 8 & 0x700)], (long long)g[q[5] | (h >> 12 & 0x700)],
        (long long)g[q[6] | (h >> 16 & 0x700)], (long long)g[q[7] | (h >> 20 & 0x700)]);
}

/* IQ1_M's 16 scales 2·ls + 1 as int16 lanes: sub-block s's ls is bits 3 (s % 4) .. of word
 * s / 4. */
AVX2_INLINE __m256i iq1m_scales(const mvm_block_iq1_m *x)
{
    const __m256i w = _mm256_permutexvar_epi16(
        _mm256_setr_epi16(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
        _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)x->scales)));
    const __m256i ls = _mm256_and_si256(
        _mm256_srlv_epi16(w, _mm256_setr_epi16(0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9)),
        _mm256_set1_epi16(7));
    return _mm256_add_epi16(_mm256_add_epi16(ls, ls), _mm256_set1_epi16(1));
}

/* IQ1_S: a chunk's u16 qh holds its 4 groups' top index bits, its scale and its delta sign;
 * IQ1_M: a group's nibble of qh holds its top index bits and delta sign, and its 16 scales
 * of 3 bits are packed 4 a word. The entries by loads: their indices cost scalar work, as
 * IQ3_S's, but a pair takes 8 of them, not 16, and a gather of the 8 (indices made in
 * vectors) lost, as IQ2_S's did (one token 9.4 against 11.7 GMAC/s); so did the 32 indices
 * made in one vector and extracted for the loads (the same at one token, two 16-17 against
 * 16-20 GMAC/s), and so did the 32 stored and read back one by one, and masked broadcasts
 * from memory in place of the inserts (one token 9-11 and 11.3-11.4 against 11.2-12.0).
 * Timing-only variants on a Zen 4 (wrong sums) placed it: one entry a pair instead of 8
 * doubled the one-token rate, the grid kept in L1 (indices cut to 6 bits) gained 8%, so the
 * entries bound it as a whole, and what can move is the vector work around them: IQ1_S's
 * dot products skip this decode (avx512_iq1s_sums). */
AVX2_INLINE void iq_decode_iq1(enum mvm_wtype t, const uint8_t *blk, iq_pairs *P)
{
    if (t == MVM_W_IQ1_S) {
        const mvm_block_iq1_s *x = (const mvm_block_iq1_s *)blk;
        const __m128i qh = _mm_loadu_si128((const __m128i *)x->qh);
        /* chunk c's scale in lane c */
        const __m512i ls = _mm512_castsi256_si512(_mm256_and_si256(
            _mm256_srli_epi32(_mm256_cvtepu16_epi32(qh), 12), _mm256_set1_epi32(7)));
        const unsigned dc = _mm_movepi16_mask(qh); /* bit c: chunk c's delta sign */
        iq_lanes(_mm512_add_epi32(_mm512_add_epi32(ls, ls), _mm512_set1_epi32(1)), 0, P);
#pragma GCC unroll 4
        for (int z = 0; z < 4; z++)
            iq1_pair(iq1s_entries(x, z),
                     (dc >> 2 * z & 1) * 0x0Fu | (dc >> (2 * z + 1) & 1) * 0xF0u, P, z);
        return;
    }
    const mvm_block_iq1_m *x = (const mvm_block_iq1_m *)blk;
    iq_lanes(_mm512_cvtepu16_epi32(iq1m_scales(x)), 1, P);
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++) {
        uint32_t h; /* group l's nibble: bits 4l .. 4l + 3 */
        memcpy(&h, x->qh + 4 * z, sizeof h);
        /* each nibble's bit 3 gathered: bit 4l + 3 to bit l */
        uint32_t d = h >> 3 & 0x11111111u;
        d = (d | d >> 3) & 0x03030303u;
        d = (d | d >> 6) & 0x000F000Fu;
        iq1_pair(iq1m_entries(x, z), (d | d >> 12) & 0xFF, P, z);
    }
}

/* The types taken here. */
AVX2_INLINE int avx512_iq_ok(enum mvm_wtype t)
{
    return t == MVM_W_IQ2_XXS || t == MVM_W_IQ3_XXS || t == MVM_W_IQ2_XS || t == MVM_W_IQ2_S ||
           t == MVM_W_IQ3_S || mvm_k_is_iq1(t);
}

/* Super-block blk of a type avx512_iq_ok takes, decoded. */
AVX2_INLINE void avx512_iq_decode(enum mvm_wtype t, const uint8_t *blk, iq_pairs *P)
{
    if (t == MVM_W_IQ2_XS)
        iq_decode_iq2xs((const mvm_block_iq2_xs *)blk, P);
    else if (t == MVM_W_IQ2_S || t == MVM_W_IQ3_S)
        iq_decode_s(t, blk, P);
    else if (mvm_k_is_iq1(t))
        iq_decode_iq1(t, blk, P);
    else
        iq_decode_xxs(t, blk, P);
}

/* avx512_iq_sums for IQ1_S in fewer vector operations. A chunk's sum of q·a, q = 8·g + δ,
 * is 8·Σ g·a plus δ·Σ a, and δ (the chunk's delta sign) holds over the whole chunk: its
 * share is δ·scale times the token's two sums of 16 quants (bsums), one vpmaddwd a token for
 * the 8 chunks. The grid's share takes 8·scale as the unsigned byte where g is not 0 (at
 * most 120: within int16 for the maddubs pairs of the levels without VNNI) and g's sign as
 * the mask that negates the token's quants, so a pair costs no byte arithmetic and a token
 * no multiply by the scales (iq_decode_iq1's pairs cost seven operations, their tokens a
 * vpmulld each). The same integers as the general path's, so the same floats
 * (test_levels_agree). One thread, OLMoE's expert shape in L2 (bench_cpu_expert_tokens, 1
 * MiB), GMAC/s: one token 11.4-12.0 -> 10.8-14.8, two 17.3-18.8 -> 20.3-27.4, four 26.4-29.7
 * -> 33.8-36.0. IQ1_M's delta signs are a group's of 8, finer than bsums: avx512_iq1m_sums. */
AVX2_INLINE void avx512_iq1s_sums(const mvm_block_iq1_s *x, const mvm_block_q8_K *const a[],
                                  const int nt, __m512i *acc, size_t stride)
{
    const __m128i qh = _mm_loadu_si128((const __m128i *)x->qh);
    /* chunk c's scale 2·ls + 1 in int16 lane c */
    const __m128i sc = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(qh, 12),
                                                                 _mm_set1_epi16(7)), 1),
                                    _mm_set1_epi16(1));
    /* byte c of each 128-bit lane: 8 times chunk c's scale */
    const __m512i s8 = _mm512_broadcast_i32x4(_mm_packus_epi16(_mm_slli_epi16(sc, 3), sc));
    /* int16 lanes 2c and 2c + 1: chunk c's scale with its delta's sign */
    const __m256i d = _mm256_cvtepu16_epi32(
        _mm_mask_sub_epi16(sc, _mm_movepi16_mask(qh), _mm_setzero_si128(), sc));
    const __m256i coef = _mm256_or_si256(d, _mm256_slli_epi32(d, 16));
    __m512i mag[4];
    __mmask64 neg[4];
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++) {
        const __m512i e = iq1s_entries(x, z);
        /* bytes 0-31: chunk 2z's, 32-63: chunk 2z + 1's */
        const __m512i pick = _mm512_inserti64x4(_mm512_set1_epi8((char)(2 * z)),
                                                _mm256_set1_epi8((char)(2 * z + 1)), 1);
        mag[z] = _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(e, e),
                                       _mm512_shuffle_epi8(s8, pick));
        neg[z] = _mm512_movepi8_mask(e);
    }
    for (int i = 0; i < nt; i++) {
        __m512i sum = _mm512_zextsi256_si512(
            _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[i]->bsums), coef));
#pragma GCC unroll 4
        for (int z = 0; z < 4; z++) {
            const __m512i aq = _mm512_loadu_si512(a[i]->qs + 64 * z);
            sum = avx512_dpbusd(sum, mag[z],
                                _mm512_mask_sub_epi8(aq, neg[z], _mm512_setzero_si512(), aq));
        }
        acc[i * stride] = sum;
    }
}

/* avx512_iq_sums for IQ1_M, as avx512_iq1s_sums: q = 8·g + δ with δ a group's of 8 quants,
 * finer than bsums, so δ's share is a second product a pair, the scale as the unsigned byte
 * and the token's quants negated where δ is -1 (at most 15: within maddubs' pairs too). A
 * 128-bit lane of pair z is sub-block 4z + L (16 quants, one scale) and its delta signs are
 * bits 3 and 7 of byte 4z + L of qh, so one shuffle index places both. Against
 * iq_decode_iq1's pairs (seven operations each) and a vpmulld a token and pair, this takes
 * four shuffles and tests a pair and a second vpdpbusd a token and pair; the same integers,
 * so the same floats (test_levels_agree). Its bytes with the scale in them (|q|·scale, up
 * to 135) had gained 0-10% and overflowed maddubs' int16 pairs without VNNI. One thread,
 * OLMoE's expert shape in L2 (bench_cpu_expert_tokens, 1 MiB), before and after in turns,
 * GMAC/s: one token 10.7-11.5 -> 13.3-13.7, two 19.7-20.0 -> 21.5-21.9, four 27.8-30.1 ->
 * 29.9-31.1. */
AVX2_INLINE void avx512_iq1m_sums(const mvm_block_iq1_m *x, const mvm_block_q8_K *const a[],
                                  const int nt, __m512i *acc, size_t stride)
{
    const __m128i sc = _mm256_cvtepi16_epi8(iq1m_scales(x)); /* byte s: sub-block s's */
    const __m512i s1 = _mm512_broadcast_i32x4(sc);
    const __m512i s8 = _mm512_broadcast_i32x4(_mm_slli_epi16(sc, 3)); /* at most 120 */
    const __m512i qh = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)x->qh));
    /* a 128-bit lane's bytes 0-7: its first group, delta sign in bit 3; 8-15: bit 7 */
    const __m512i dbit = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)0x8080808080808080ull,
                                                               0x0808080808080808ll));
    /* byte k: k / 16, the 128-bit lane's index */
    const __m512i lane = _mm512_set_epi32(0x03030303, 0x03030303, 0x03030303, 0x03030303,
                                          0x02020202, 0x02020202, 0x02020202, 0x02020202,
                                          0x01010101, 0x01010101, 0x01010101, 0x01010101, 0, 0, 0,
                                          0);
    __m512i gmag[4], dmag[4];
    __mmask64 gneg[4], dneg[4];
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++) {
        const __m512i e = iq1m_entries(x, z);
        const __m512i p = _mm512_add_epi8(_mm512_set1_epi8((char)(4 * z)), lane);
        gmag[z] = _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(e, e), _mm512_shuffle_epi8(s8, p));
        gneg[z] = _mm512_movepi8_mask(e);
        dmag[z] = _mm512_shuffle_epi8(s1, p);
        dneg[z] = _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, p), dbit);
    }
    for (int i = 0; i < nt; i++) {
        __m512i sg = _mm512_setzero_si512(), sd = sg;
#pragma GCC unroll 4
        for (int z = 0; z < 4; z++) {
            const __m512i aq = _mm512_loadu_si512(a[i]->qs + 64 * z);
            sg = avx512_dpbusd(sg, gmag[z],
                               _mm512_mask_sub_epi8(aq, gneg[z], _mm512_setzero_si512(), aq));
            sd = avx512_dpbusd(sd, dmag[z],
                               _mm512_mask_sub_epi8(aq, dneg[z], _mm512_setzero_si512(), aq));
        }
        acc[i * stride] = _mm512_add_epi32(sg, sd);
    }
}

/* Token i's integer sum over super-block blk (kernels/iqgrid.h's: each sub-block's scale
 * times its products) as the 16 lanes of acc[i · stride] (their sum), for i < nt. */
AVX2_INLINE void avx512_iq_sums(enum mvm_wtype t, const uint8_t *blk,
                                const mvm_block_q8_K *const a[], const int nt, __m512i *acc,
                                size_t stride)
{
    if (t == MVM_W_IQ1_S) {
        avx512_iq1s_sums((const mvm_block_iq1_s *)blk, a, nt, acc, stride);
        return;
    }
    if (t == MVM_W_IQ1_M) {
        avx512_iq1m_sums((const mvm_block_iq1_m *)blk, a, nt, acc, stride);
        return;
    }
    iq_pairs P;
    avx512_iq_decode(t, blk, &P);
    for (int i = 0; i < nt; i++) {
        __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int z = 0; z < 4; z++) {
            const __m512i aq = _mm512_loadu_si512(a[i]->qs + 64 * z);
            const __m512i as = _mm512_mask_sub_epi8(aq, P.neg[z], _mm512_setzero_si512(), aq);
            sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(
                                            avx512_dpbusd(_mm512_setzero_si512(), P.mag[z], as),
                                            P.scale[z]));
        }
        acc[i * stride] = sum;
    }
}
