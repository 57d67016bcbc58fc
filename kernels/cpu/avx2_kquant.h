/*
 * avx2.h's K-quant blocks (Q2_K .. Q6_K, IQ4_XS and the lattice-grid types) against Q8_K
 * activations: the dot product and the down loop of the K types, and the scale unpacking and
 * float rounding that gemm_avx512vnni.c's kernels share. Part of avx2.h, which includes it
 * after the blocks it uses (the target attributes, avx2_dpbusd, AVX2_TOK, the prefetch);
 * not a header of its own.
 */
#ifndef MVM_KERNELS_CPU_AVX2_H
#error "kernels/cpu/avx2_kquant.h is part of kernels/cpu/avx2.h: include that"
#endif
#ifndef MVM_KERNELS_CPU_AVX2_KQUANT_H
#define MVM_KERNELS_CPU_AVX2_KQUANT_H

/* ---- K-quant super-blocks against Q8_K activations ------------------------------------ */

/* The K kernels below take each token's Q8_K block of the super-block in a[k] and leave
 * token k's float in r[k]. */

/* Q4_K/Q5_K's packed six-bit scales as ggml unpacks them: bytes 0-7 of u, the mins 8-15. */
AVX2_INLINE void avx2_k45_scales(const uint8_t *scales, uint32_t u[4])
{
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & 0x0F0F0F0F) | (((u[1] >> 6) & 0x03030303) << 4);
    const uint32_t mins_lo = u[1] & 0x3F3F3F3F;
    u[1] = (u[2] & 0x0F0F0F0F) | (((u[0] >> 6) & 0x03030303) << 4);
    u[2] = mins_lo;
    u[0] &= 0x3F3F3F3F;
}

/* The 8 mins of avx2_k45_scales's u, each twice as int16: one madd with a token's 16 bsums
 * gives the mins' term. */
AVX2_INLINE __m256i avx2_k45_mins16(const uint32_t u[4])
{
    const __m128i each_min_twice =
        _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    return _mm256_cvtepu8_epi16(_mm_shuffle_epi8(
        _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]), each_min_twice));
}

/* A Q4_K/Q5_K super-block's float, ad·(d·sum - dmin·msum), rounded as every x86 level and
 * gemm_avx512vnni.c's kernels do: fused with d·sum, spelled out (a compiler contracts the plain
 * expression as it chooses). */
AVX2_INLINE float avx2_k45_finish(float ad, uint16_t d, uint16_t dmin, int32_t sum, int32_t msum)
{
    const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)dmin << 16 | d)));
    const __m128 m = _mm_mul_ss(_mm_movehdup_ps(dm), _mm_set_ss((float)msum));
    const __m128 s = _mm_fmsub_ss(dm, _mm_set_ss((float)sum), m);
    return _mm_cvtss_f32(_mm_mul_ss(_mm_set_ss(ad), s));
}

/* The int16 element b of each 128-bit lane of v in all that lane's elements: a byte shuffle,
 * where v holds 8 scales (or two sets of 8) widened to int16. */
AVX2_INLINE __m256i avx2_lane_word(__m256i v, int b)
{
    return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)(0x0100 + 0x0202 * b)));
}

/* 16 int8 scales widened to int16, the even ones' in the low 128-bit lane and the odd ones' in
 * the high one: avx2_lane_word(.., b) then gives scale 2b in the low lane, 2b + 1 in the high,
 * for the types whose 32 quants a step are two sub-blocks of 16, one a lane. */
AVX2_INLINE __m256i avx2_even_odd16(__m128i s8)
{
    return _mm256_cvtepi8_epi16(
        _mm_shuffle_epi8(s8, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)));
}

/* The exact sums of the 8 int32 lanes of x and of y, as (x's, y's). */
AVX2_INLINE void avx2_hsum2_i32(__m256i x, __m256i y, int32_t *sx, int32_t *sy)
{
    const __m256i h = _mm256_hadd_epi32(x, y); /* x01 x23 y01 y23 | x45 x67 y45 y67 */
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    s = _mm_hadd_epi32(s, s); /* x y x y */
    *sx = _mm_cvtsi128_si32(s);
    *sy = _mm_extract_epi32(s, 1);
}

/* Q4_K / Q5_K (qh non-NULL): kernels/blocks.h's Q4_K/Q5_K chunks with the 32-element sums
 * done by maddubs (quants unsigned, at most 2·31·127 a pair: no int16 saturation) and madd
 * with the sub-block's scale; the same integers, so the same float result as every level.
 * The 8 six-bit scales and mins are unpacked together (avx2_k45_scales), the scales widened
 * once to int16 and each broadcast by one byte shuffle, and the mins' term is one madd of
 * them, each twice, with the 16 bsums. The loops are unrolled so that every shift is an
 * immediate: kept rolled, GCC shifted by registers and extracted each scale with scalar code,
 * and the block ran at 7.3 GB/s in L2 on an AVX2-only EPYC (docs/perf/cpu.md, session 136). */
AVX2_INLINE void avx2_kblock_q45(const uint8_t *scales, uint16_t d, uint16_t dmin,
                                 const uint8_t *qs, const uint8_t *qh,
                                 const mvm_block_q8_K *const a[], const int nt, float r[])
{
    const __m256i nib = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i hbits = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    uint32_t u[4];
    avx2_k45_scales(scales, u);
    const __m256i mins16 = avx2_k45_mins16(u);
    const __m256i sc16 = _mm256_broadcastsi128_si256(
        _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[1], (int)u[0])));
    __m256i acc[MVM_K_NT];
    for (int i = 0; i < nt; i++)
        acc[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * k));
        __m256i lo = _mm256_and_si256(q, nib), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), nib);
        if (qh) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(
                                         _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * k), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(
                                         _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * k + 1), one),
                                         4));
        }
        const __m256i s0 = avx2_lane_word(sc16, 2 * k), s1 = avx2_lane_word(sc16, 2 * k + 1);
        for (int i = 0; i < nt; i++) {
            const __m256i alo = _mm256_loadu_si256((const __m256i *)(a[i]->qs + 64 * k));
            const __m256i ahi = _mm256_loadu_si256((const __m256i *)(a[i]->qs + 64 * k + 32));
            acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, alo), s0));
            acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, ahi), s1));
        }
    }
    for (int i = 0; i < nt; i++) {
        int32_t sum, msum;
        avx2_hsum2_i32(acc[i], _mm256_madd_epi16(mins16, _mm256_loadu_si256(
                                                             (const __m256i *)a[i]->bsums)),
                       &sum, &msum);
        r[i] = avx2_k45_finish(a[i]->d, d, dmin, sum, msum);
    }
}

/* Q6_K: kernels/blocks.h's Q6_K chunks; each 32 quants are two sub-blocks of 16, one per
 * 128-bit lane, so one madd applies both scales (int8, signed: madd takes int16 on both
 * sides), broadcast within the lanes by a byte shuffle of the scales widened once with the
 * even sub-blocks' in the low lane and the odd ones' in the high lane (avx2_even_odd16).
 * The -32 of every quant is taken off by starting each token's sums at -32 times a madd of
 * the scales with its bsums: the same integers as subtracting it at the end. Unrolled, so
 * that the shifts are immediates: a rolled loop with scalar scales and offset ran at 6.1
 * GB/s in L2 on an AVX2-only EPYC (docs/perf/cpu.md, session 136). */
AVX2_INLINE void avx2_kblock_q6(const mvm_block_q6_K *x, const mvm_block_q8_K *const a[],
                                const int nt, float r[])
{
    const __m256i nib = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
    const __m128i s8 = _mm_loadu_si128((const __m128i *)x->scales);
    const __m256i sc16 = _mm256_cvtepi8_epi16(s8);
    const __m256i pairs = avx2_even_odd16(s8);
    __m256i acc[MVM_K_NT];
    for (int i = 0; i < nt; i++)
        acc[i] = _mm256_sub_epi32(
            _mm256_setzero_si256(),
            _mm256_slli_epi32(
                _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)a[i]->bsums)), 5));
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i ql = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32 * (k & 1)));
            const __m256i lo = _mm256_and_si256(k >> 1 ? _mm256_srli_epi16(ql, 4) : ql, nib);
            /* bits 2k, 2k + 1 of each qh byte moved to bits 4, 5 */
            const __m256i hs = k == 0   ? _mm256_slli_epi16(qh, 4)
                               : k == 1 ? _mm256_slli_epi16(qh, 2)
                               : k == 2 ? qh
                                        : _mm256_srli_epi16(qh, 2);
            const __m256i q = _mm256_or_si256(lo, _mm256_and_si256(hs, bits45));
            const __m256i sc = avx2_lane_word(pairs, 4 * h + k);
            for (int i = 0; i < nt; i++) {
                const __m256i aq =
                    _mm256_loadu_si256((const __m256i *)(a[i]->qs + 128 * h + 32 * k));
                acc[i] =
                    _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(q, aq), sc));
            }
        }
    }
    const float d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(x->d)));
    for (int i = 0; i < nt; i++)
        r[i] = a[i]->d * (d * (float)avx2_hsum_i32(acc[i]));
}

/* Q3_K's 16 six-bit scales less 32, as int8: mvm_k_q3_scales's four words, each shifted
 * and masked in its own 32-bit lane. */
AVX2_INLINE __m128i avx2_q3_scales(const uint8_t *scales)
{
    uint32_t w[3];
    memcpy(w, scales, sizeof w);
    const __m128i lo = _mm_and_si128(
        _mm_srlv_epi32(_mm_set_epi32((int)w[1], (int)w[0], (int)w[1], (int)w[0]),
                       _mm_set_epi32(4, 4, 0, 0)),
        _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(
        _mm_srlv_epi32(_mm_set1_epi32((int)w[2]), _mm_set_epi32(6, 4, 2, 0)), _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi32(hi, 4)), _mm_set1_epi8(32));
}

/* Q2_K (hmask NULL) / Q3_K: kernels/blocks.h's Q2_K/Q3_K chunks; the bits 2j of
 * qs[32h..32h+31] are sub-blocks i = 8h+2j and i+1, one per 128-bit lane, so one madd applies
 * both scales (quants at most 7: no int16 saturation in maddubs). The scales are widened once
 * with the even sub-blocks' in the low lane and the odd ones' in the high lane, and each pair
 * is broadcast within the lanes by one byte shuffle. The mins of Q2_K and the -4 of Q3_K
 * come from bsums. */
AVX2_INLINE void avx2_kblock_q23(const uint8_t *qs, const uint8_t *hmask, const uint8_t *scales,
                                 uint16_t d, uint16_t dmin, const mvm_block_q8_K *const a[],
                                 const int nt, float r[])
{
    const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    const __m256i hbits =
        hmask ? _mm256_loadu_si256((const __m256i *)hmask) : _mm256_setzero_si256();
    /* Q2_K's 16 bytes of scale and min; Q3_K's 12 are read as words (no load past them) */
    const __m128i raw = hmask ? _mm_setzero_si128() : _mm_loadu_si128((const __m128i *)scales);
    const __m128i sc8 = hmask ? avx2_q3_scales(scales) : _mm_and_si128(raw, _mm_set1_epi8(15));
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    const __m256i mins16 =
        _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15)));
    const __m256i pairs = avx2_even_odd16(sc8);
    __m256i acc[MVM_K_NT];
    int32_t offset[MVM_K_NT], msum[MVM_K_NT];
    for (int i = 0; i < nt; i++) {
        /* madd does the 16 products of scales (or mins) and sub-block sums and the pair sums */
        const __m256i bsums = _mm256_loadu_si256((const __m256i *)a[i]->bsums);
        offset[i] = hmask ? avx2_hsum_i32(_mm256_madd_epi16(sc16, bsums)) : 0;
        msum[i] = hmask ? 0 : avx2_hsum_i32(_mm256_madd_epi16(mins16, bsums));
        acc[i] = _mm256_setzero_si256();
    }
    for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
        for (int j = 0; j < 4; j++) {
            __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), three);
            const int b = 4 * h + j; /* Q3_K's high bit, moved to bit 2 */
            if (hmask)
                v = _mm256_or_si256(v, _mm256_and_si256(b >= 2 ? _mm256_srli_epi16(hbits, b - 2)
                                                               : _mm256_slli_epi16(hbits, 2 - b),
                                                        four));
            const __m256i s = avx2_lane_word(pairs, b);
            for (int i = 0; i < nt; i++) {
                const __m256i aq =
                    _mm256_loadu_si256((const __m256i *)(a[i]->qs + 128 * h + 32 * j));
                acc[i] =
                    _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(v, aq), s));
            }
        }
    }
    for (int i = 0; i < nt; i++) {
        const int32_t sum = avx2_hsum_i32(acc[i]) - 4 * offset[i];
        r[i] = hmask ? a[i]->d * (mvm_k_h2f(d) * (float)sum)
                     : a[i]->d * (mvm_k_h2f(d) * (float)sum - mvm_k_h2f(dmin) * (float)msum[i]);
    }
}

#if MVM_K_AVX512
/* Chunk c of a Q2_K (hmask NULL) or Q3_K super-block, quants 64c .. 64c + 63 (0 .. 7; Q3_K's
 * -4 is the caller's): the bit pairs 2j and 2j + 2 of qs[32h ..] (j = 2(c & 1), h = c / 2),
 * and Q3_K's high bits 4h + j and 4h + j + 1 of hmask, added as 4 where a byte test finds
 * them. The dot product's block and gemm_avx512vnni.c's rows take it. */
AVX2_INLINE __m512i avx512_q23_chunk(const uint8_t *qs, const uint8_t *hmask, int c)
{
    const int h = c >> 1, j = 2 * (c & 1);
    const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * h)));
    const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * j)),
                                             _mm256_set1_epi16((short)(2 * j + 2)), 1);
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(q, shift), _mm512_set1_epi8(3));
    if (!hmask)
        return lo;
    const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)hmask));
    const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (4 * h + j))),
                                           _mm256_set1_epi8((char)(2 << (4 * h + j))), 1);
    return _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(hm, bit), lo, _mm512_set1_epi8(4));
}

/* avx2_dpbusd 16 lanes wide: acc plus each int32 lane's 4 products of unsigned bytes of u
 * with signed bytes of s (without VNNI, maddubs and madd: the callers' pairs stay within
 * int16). */
AVX2_INLINE __m512i avx512_dpbusd(__m512i acc, __m512i u, __m512i s)
{
#if MVM_K_VNNI
    return _mm512_dpbusd_epi32(acc, u, s);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s),
                                                   _mm512_set1_epi16(1)));
#endif
}

/* A token's products over a super-block, each sub-block's times its scale, in 16 int32 lanes
 * whose sum is the block's: q[c] the quants 64c .. 64c + 63 (unsigned), sc[c] each int32
 * lane's scale, aqs the token's 256 quants. */
AVX2_INLINE __m512i avx512_kprod(const __m512i q[4], const __m512i sc[4], const int8_t *aqs)
{
    __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m512i aq = _mm512_loadu_si512(aqs + 64 * c);
        acc = _mm512_add_epi32(
            acc, _mm512_mullo_epi32(avx512_dpbusd(_mm512_setzero_si512(), q[c], aq), sc[c]));
    }
    return acc;
}

/* The AVX-512 levels' K super-blocks below give their integers for nt tokens, and
 * avx512_kstep_floats their floats 8 blocks at once (avx512_dotn_k): token i's products
 * times the sub-blocks' scales in the 16 lanes of acc[i · stride] (avx512_kprod), and in
 * the 8 lanes of off[i · stride] the term its float takes off: the mins' (Q2_K, Q4_K, Q5_K)
 * or Q3_K's offset (its 4) with the token's bsums; none for IQ4_XS. Q6_K keeps its block
 * (avx512_kblock_q6).
 *
 * avx2_kblock_q23's integers in 512-bit vectors, for the AVX-512 levels: a super-block's 256
 * quants in four vectors of 64 (avx512_q23_chunk), multiplied with the token's quants 4 at a
 * time (vpdpbusd, or maddubs and madd without VNNI: the quants are at most 7, so no int16
 * saturation), each int32 lane then times its sub-block's scale (every 4 lanes one
 * sub-block). The integers are the AVX2 block's exactly and the float work the same, so the
 * results are bit for bit its. A decode of OLMoE's shape at Q3_K_M spent 57% of its time
 * in the AVX2 block, which splits the quants 32 at a time and applies each pair of scales
 * by a shuffle and a madd (docs/perf/cpu.md). */
AVX2_INLINE void avx512_q23_sums(const uint8_t *qs, const uint8_t *hmask, const uint8_t *scales,
                                 const mvm_block_q8_K *const a[], const int nt, __m512i *acc,
                                 __m256i *off, size_t stride)
{
    const __m128i raw = hmask ? _mm_setzero_si128() : _mm_loadu_si128((const __m128i *)scales);
    const __m128i sc8 = hmask ? avx2_q3_scales(scales) : _mm_and_si128(raw, _mm_set1_epi8(15));
    /* Q3_K's offset: its scales; Q2_K's mins: the high nibbles */
    const __m256i off16 =
        hmask ? _mm256_cvtepi8_epi16(sc8)
              : _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15)));
    const __m512i sc32 = _mm512_cvtepi8_epi32(sc8);
    __m512i q[4], sc[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        q[k] = avx512_q23_chunk(qs, hmask, k);
        sc[k] = _mm512_permutexvar_epi32(
            _mm512_add_epi32(_mm512_set1_epi32(4 * k),
                             _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)),
            sc32);
    }
    for (int i = 0; i < nt; i++) {
        acc[i * stride] = avx512_kprod(q, sc, a[i]->qs);
        off[i * stride] =
            _mm256_madd_epi16(off16, _mm256_loadu_si256((const __m256i *)a[i]->bsums));
    }
}
#endif

#if MVM_K_AVX512
/* Chunk c of a Q4_K/Q5_K super-block, quants 64c .. 64c + 63 in order: sub-block 2c from
 * the low nibbles of qs[32c..], 2c+1 from the high ones, the fifth bits of Q5_K from bits
 * 2c and 2c+1 of qh. The dot product's block and gemm_avx512vnni.c's rows take it. */
AVX2_INLINE __m512i avx512_q45_chunk(const uint8_t *qs, const uint8_t *qh, int c)
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

/* Chunk c of a Q6_K super-block, quants 64c .. 64c + 63 (the -32 is the offset term):
 * ql[64h..] nibbles (low for even c, high for odd), bits 4(c & 1) and 4(c & 1) + 2 of
 * qh[32h..], h = c / 2. The dot product's block and gemm_avx512vnni.c's rows take it. */
AVX2_INLINE __m512i avx512_q6_chunk(const mvm_block_q6_K *x, int c)
{
    const int h = c >> 1, s = 4 * (c & 1);
    const __m512i lo = _mm512_and_si512(
        _mm512_srli_epi16(_mm512_loadu_si512(x->ql + 64 * h), (unsigned)s), _mm512_set1_epi8(0x0F));
    const __m512i qh =
        _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qh + 32 * h)));
    const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16((short)s),
                                             _mm256_set1_epi16((short)(s + 2)), 1);
    const __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(qh, shift), _mm512_set1_epi8(3));
    return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
}

/* 16 int32 lanes of sc32 spread over a vector of 64 quants, each lane the scale of its 4
 * quants' sub-block: lane i takes sc32's lane first + i / per (per: lanes a sub-block). */
AVX2_INLINE __m512i avx512_lane_scales(__m512i sc32, int first, int per)
{
    const __m512i i = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i idx = _mm512_add_epi32(
        _mm512_set1_epi32(first), per == 4 ? _mm512_srli_epi32(i, 2) : _mm512_srli_epi32(i, 3));
    return _mm512_permutexvar_epi32(idx, sc32);
}

/* avx2_kblock_q45's integers in 512-bit vectors, for the AVX-512 levels, as
 * avx512_q23_sums are Q2_K's and Q3_K's: two sub-blocks of 32 a vector (avx512_q45_chunk),
 * the token's quants multiplied 4 at a time (vpdpbusd, or maddubs and madd: quants at most
 * 31, no int16 saturation), each int32 lane then times its sub-block's scale (8 lanes a
 * sub-block), the mins' term as avx2_kblock_q45's. A decode of a Q4_K_M file spent half its
 * time in the AVX2 blocks of Q4_K and Q6_K, bound by their unpacking (docs/perf/cpu.md). */
AVX2_INLINE void avx512_q45_sums(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                                 const mvm_block_q8_K *const a[], const int nt, __m512i *acc,
                                 __m256i *off, size_t stride)
{
    uint32_t u[4];
    avx2_k45_scales(scales, u);
    const __m256i mins16 = avx2_k45_mins16(u);
    const __m512i sc32 = _mm512_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)u[1], (int)u[0]));
    __m512i q[4], sc[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        q[c] = avx512_q45_chunk(qs, qh, c);
        sc[c] = avx512_lane_scales(sc32, 2 * c, 8);
    }
    for (int i = 0; i < nt; i++) {
        acc[i * stride] = avx512_kprod(q, sc, a[i]->qs);
        off[i * stride] =
            _mm256_madd_epi16(mins16, _mm256_loadu_si256((const __m256i *)a[i]->bsums));
    }
}

/* avx2_kblock_q6 in 512-bit vectors, the same way: four sub-blocks of 16 a vector
 * (avx512_q6_chunk, quants unsigned, at most 63: no int16 saturation without VNNI), each
 * int32 lane times its sub-block's signed scale (4 lanes a sub-block), the -32 taken off
 * through the scales against bsums; the AVX2 block's integers, so its floats. Q6_K keeps a
 * block at a time, not avx512_kstep.h's steps: there its dot product in L2 went from
 * 43.9-44.3 to 41.5-42.4 GB/s (docs/perf/cpu.md). */
AVX2_INLINE void avx512_kblock_q6(const mvm_block_q6_K *x, const mvm_block_q8_K *const a[],
                                  const int nt, float r[])
{
    const __m128i s8 = _mm_loadu_si128((const __m128i *)x->scales);
    const __m256i sc16 = _mm256_cvtepi8_epi16(s8);
    const __m512i sc32 = _mm512_cvtepi8_epi32(s8);
    __m512i q[4], sc[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        q[c] = avx512_q6_chunk(x, c);
        sc[c] = avx512_lane_scales(sc32, 4 * c, 4);
    }
    for (int i = 0; i < nt; i++) {
        const int32_t offset = avx2_hsum_i32(
            _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)a[i]->bsums)));
        const int32_t sum = _mm512_reduce_add_epi32(avx512_kprod(q, sc, a[i]->qs));
        r[i] = a[i]->d * (mvm_k_h2f(x->d) * (float)(sum - 32 * offset));
    }
}
#endif

/* IQ4_XS's 8 sub-block scales less 32, as int16 in both 128-bit lanes: the nibbles of
 * scales_l and the bit pairs of scales_h spread to a byte each by shifts and masks, rather
 * than each scale unpacked by itself (mvm_k_iq4xs_scale) and broadcast. A first kernel did
 * that, one sub-block a step: 0.75x this one's speed (docs/perf/cpu.md, "IQ4_XS"). */
AVX2_INLINE __m256i avx2_iq4xs_scales(const mvm_block_iq4_xs *x)
{
    uint32_t l;
    memcpy(&l, x->scales_l, sizeof l);
    uint64_t lo = l, hi = x->scales_h;
    lo = (lo | lo << 16) & 0x0000FFFF0000FFFFull;
    lo = (lo | lo << 8) & 0x00FF00FF00FF00FFull;
    lo = (lo | lo << 4) & 0x0F0F0F0F0F0F0F0Full;
    hi = (hi | hi << 24) & 0x000000FF000000FFull;
    hi = (hi | hi << 12) & 0x000F000F000F000Full;
    hi = (hi | hi << 6) & 0x0303030303030303ull;
    const __m128i s8 =
        _mm_sub_epi8(_mm_cvtsi64_si128((long long)(lo | hi << 4)), _mm_set1_epi8(32));
    return _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(s8));
}

/* IQ4_XS: kernels/blocks.h's IQ4_XS chunks, two sub-blocks a step: the 32 bytes of qs of
 * sub-blocks 2k and 2k+1 give their low nibbles (elements 0..15 of each, one sub-block per
 * 128-bit lane) and their high ones (16..31), each a byte shuffle of IQ4_NL's table, and
 * the activations are loaded in the same lanes. The products are the 32-element table
 * types' (|w| by a with w's sign; maddubs pairs at most 2·127·127: no int16 saturation), and
 * one madd applies both lanes' signed scales. */
AVX2_INLINE void avx2_kblock_iq4xs(const mvm_block_iq4_xs *x, const mvm_block_q8_K *const a[],
                                   const int nt, float r[])
{
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_set_epi64x((long long)MVM_K_IQ4NL_HI, (long long)MVM_K_IQ4NL_LO));
    const __m256i nib = _mm256_set1_epi8(0x0F), scales = avx2_iq4xs_scales(x);
    __m256i acc[MVM_K_NT];
    for (int i = 0; i < nt; i++)
        acc[i] = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * k));
        const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(q, nib));
        const __m256i hi =
            _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), nib));
        const __m256i lo_abs = _mm256_sign_epi8(lo, lo), hi_abs = _mm256_sign_epi8(hi, hi);
        const __m256i sc = _mm256_shuffle_epi8(
            scales, _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 + 0x0202 * (2 * k + 1))),
                                     _mm_set1_epi16((short)(0x0100 + 0x0202 * (2 * k)))));
        for (int i = 0; i < nt; i++) {
            const int8_t *aq = a[i]->qs + 64 * k;
            const __m256i alo = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)aq)),
                _mm_loadu_si128((const __m128i *)(aq + 32)), 1);
            const __m256i ahi = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(aq + 16))),
                _mm_loadu_si128((const __m128i *)(aq + 48)), 1);
            const __m256i plo = _mm256_maddubs_epi16(lo_abs, _mm256_sign_epi8(alo, lo));
            const __m256i phi = _mm256_maddubs_epi16(hi_abs, _mm256_sign_epi8(ahi, hi));
            acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(plo, sc));
            acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(phi, sc));
        }
    }
    for (int i = 0; i < nt; i++)
        r[i] = a[i]->d * (mvm_k_h2f(x->d) * (float)avx2_hsum_i32(acc[i]));
}

#if MVM_K_AVX512
/* Chunk c of an IQ4_XS super-block, quants 64c .. 64c + 63 in order, IQ4_NL's table values
 * (signed): sub-blocks 2c and 2c + 1 are the low, then the high, nibbles of qs[32c ..] and
 * qs[32c + 16 ..]. The dot product's block and gemm_avx512vnni.c's rows take it. */
AVX2_INLINE __m512i avx512_iq4xs_chunk(const uint8_t *qs, int c)
{
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)MVM_K_IQ4NL_HI, (long long)MVM_K_IQ4NL_LO));
    const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
    const __m512i n = _mm512_and_si512(
        _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1),
        _mm512_set1_epi8(0x0F));
    /* 128-bit lanes low 2c, low 2c + 1, high 2c, high 2c + 1 -> low 2c, high 2c, ... */
    return _mm512_shuffle_epi8(table, _mm512_shuffle_i64x2(n, n, _MM_SHUFFLE(3, 1, 2, 0)));
}

/* avx2_kblock_iq4xs's integers in 512-bit vectors, for the AVX-512 levels, as
 * avx512_q23_sums are Q2_K's and Q3_K's: sub-blocks 2c and 2c + 1 in vector c
 * (avx512_iq4xs_chunk), |w| times the token's quants given w's signs 4 at a time (vpdpbusd,
 * or maddubs and madd: pairs at most 2·127·127, no int16 saturation), each int32 lane then
 * times its sub-block's scale (8 lanes a sub-block). The integers are the AVX2 block's, so
 * the results are bit for bit its. No term to take off. */
AVX2_INLINE void avx512_iq4xs_sums(const mvm_block_iq4_xs *x, const mvm_block_q8_K *const a[],
                                   const int nt, __m512i *acc, size_t stride)
{
    const __m512i sc32 = _mm512_cvtepi16_epi32(avx2_iq4xs_scales(x)); /* lanes 0..7 */
    __m512i w[4], mag[4], sc[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        w[c] = avx512_iq4xs_chunk(x->qs, c);
        mag[c] = _mm512_abs_epi8(w[c]);
        sc[c] = _mm512_permutexvar_epi32(
            _mm512_inserti64x4(_mm512_set1_epi32(2 * c), _mm256_set1_epi32(2 * c + 1), 1), sc32);
    }
    for (int i = 0; i < nt; i++) {
        __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m512i aq = _mm512_loadu_si512(a[i]->qs + 64 * c);
            /* a's sign flipped where w < 0 (IQ4_NL's table holds no 0) */
            const __m512i as = _mm512_mask_sub_epi8(aq, _mm512_movepi8_mask(w[c]),
                                                    _mm512_setzero_si512(), aq);
            sum = _mm512_add_epi32(
                sum, _mm512_mullo_epi32(avx512_dpbusd(_mm512_setzero_si512(), mag[c], as), sc[c]));
        }
        acc[i * stride] = sum;
    }
}
#endif

/* The sign vector (bytes < 0 where q < 0) of a chunk of the types with 7 stored sign bits a
 * group, from the word that holds them (kernels/iqgrid.h's sw): each element's bit picked by
 * a byte shuffle of the broadcast word and a bit mask, the eighth of each group (shuffle index
 * 0x80: no bit) set by the parity of the seven, which vpsadbw counts per 8-byte group (255
 * per set element: the sum's low bit is the parity) and a shift moves to byte 7's sign bit.
 * Against completing them by scalar code (mvm_k_ksign4 and its gathering) and spreading
 * neg: IQ2_XS 1.5x, IQ2_XXS 1.3x, IQ3_XXS 1.1x in L2 (docs/perf/cpu.md). */
AVX2_INLINE __m256i avx2_iq_ksigns(enum mvm_wtype t, uint64_t sw)
{
    /* x: a shuffle index that gives 0 (no bit: a group's eighth); h: the bit 0x80 */
    const char x = (char)0x80, h = (char)0x80;
    /* IQ2_XS: group l's element j is bit j + 1 of byte 2l + 1 */
    const __m256i xs_idx = _mm256_setr_epi8(1, 1, 1, 1, 1, 1, 1, x, 3, 3, 3, 3, 3, 3, 3, x, 5,
                                            5, 5, 5, 5, 5, 5, x, 7, 7, 7, 7, 7, 7, 7, x);
    const __m256i xs_bit = _mm256_setr_epi8(2, 4, 8, 16, 32, 64, h, 1, 2, 4, 8, 16, 32, 64, h,
                                            1, 2, 4, 8, 16, 32, 64, h, 1, 2, 4, 8, 16, 32, 64,
                                            h, 1);
    /* IQ2_XXS, IQ3_XXS: group l's element j is bit 7l + j of the word */
    const __m256i xxs_idx = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, x, 0, 1, 1, 1, 1, 1, 1, x,
                                             1, 1, 2, 2, 2, 2, 2, x, 2, 2, 2, 3, 3, 3, 3, x);
    const __m256i xxs_bit = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, 1, h, 1, 2, 4, 8, 16, 32,
                                             1, 64, h, 1, 2, 4, 8, 16, 1, 32, 64, h, 1, 2, 4, 8,
                                             1);
    const int xs = t == MVM_W_IQ2_XS;
    const __m256i bit = xs ? xs_bit : xxs_bit;
    const __m256i pick = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)sw),
                                             xs ? xs_idx : xxs_idx);
    const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(pick, bit), bit);
    const __m256i odd = _mm256_slli_epi64(_mm256_sad_epu8(neg, _mm256_setzero_si256()), 63);
    return _mm256_or_si256(_mm256_or_si256(neg, odd), _mm256_set1_epi8(1));
}

/* Chunk c of a lattice-grid super-block as 32 signed bytes q, given as |q| (*mag) and a
 * vector with q's signs (returned; maddubs takes the activations with these signs).
 * kernels/iqgrid.h decodes the grid entries, signs and deltas with scalar loads (the entries
 * are table lookups); the expansion is vector code. IQ2/IQ3, whose grids are positive: |q|
 * is the grid entries, and each sign bit is picked out of a broadcast of the 32 by a byte
 * shuffle, a bit mask and a compare (the types with 7 stored bits a group: avx2_iq_ksigns).
 * IQ1: q = 8·g + delta by byte adds. */
AVX2_INLINE __m256i avx2_iq_chunk(enum mvm_wtype t, const uint8_t *blk, int c, __m256i *scale,
                                  __m256i *mag)
{
    const mvm_k_iq_raw r = mvm_k_iq_decode(t, blk, c);
    *scale = _mm256_set_m128i(_mm_set1_epi16((short)r.sc[1]), _mm_set1_epi16((short)r.sc[0]));
    const __m256i g = _mm256_set_epi64x((long long)r.g[3], (long long)r.g[2],
                                        (long long)r.g[1], (long long)r.g[0]);
    const __m256i one = _mm256_set1_epi8(1);
    if (mvm_k_is_iq1(t)) {
        /* -1 in the bytes of group l where bit l of dneg is set, else 1: a compare, as
         * branches on the (random) delta bits were mispredicted at half the chunks */
        const __m256i gbit = _mm256_set_epi64x(8, 4, 2, 1);
        const __m256i neg = _mm256_cmpeq_epi64(
            _mm256_and_si256(_mm256_set1_epi64x((long long)r.dneg), gbit), gbit);
        const __m256i g2 = _mm256_add_epi8(g, g), g4 = _mm256_add_epi8(g2, g2);
        const __m256i q = _mm256_add_epi8(_mm256_add_epi8(g4, g4), _mm256_or_si256(neg, one));
        *mag = _mm256_sign_epi8(q, q);
        return q;
    }
    *mag = g;
    if (t == MVM_W_IQ2_XXS || t == MVM_W_IQ3_XXS || t == MVM_W_IQ2_XS)
        return avx2_iq_ksigns(t, r.sw);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)r.neg),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), one);
}

/* The lattice-grid types: kernels/blocks.h's chunks, each expanded once (avx2_iq_chunk) and
 * multiplied with every token's activations as the K-quants' are, maddubs of |q| with the
 * activations given q's signs (pairs at most 2·62·127: no int16 saturation), then madd with
 * the halves' scales. */
AVX2_INLINE void avx2_kblock_iqgrid(enum mvm_wtype t, const uint8_t *blk,
                                    const mvm_block_q8_K *const a[], const int nt, float r[])
{
    __m256i acc[MVM_K_NT];
    for (int i = 0; i < nt; i++)
        acc[i] = _mm256_setzero_si256();
    for (int c = 0; c < 8; c++) {
        __m256i scale, mag;
        const __m256i sgn = avx2_iq_chunk(t, blk, c, &scale, &mag);
        for (int i = 0; i < nt; i++) {
            const __m256i av = _mm256_loadu_si256((const __m256i *)(a[i]->qs + 32 * c));
            const __m256i p = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(av, sgn));
            acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(p, scale));
        }
    }
    for (int i = 0; i < nt; i++)
        r[i] = mvm_k_kscale(t, blk, a[i], avx2_hsum_i32(acc[i]), 0);
}

#if MVM_K_AVX512
#include "kernels/cpu/avx512_iqgrid.h"
#endif

#if MVM_K_AVX512
#include "kernels/cpu/avx512_kstep.h"
#endif

/* One super-block of K type t for nt tokens: token i's float in r[i]. The AVX-512 levels
 * take every K type but Q6_K in avx512_kstep.h's steps, so only Q6_K's block is theirs. */
AVX2_INLINE void avx2_kblock(enum mvm_wtype t, const uint8_t *blk, const mvm_block_q8_K *const a[],
                             const int nt, float r[])
{
    switch (t) {
    case MVM_W_Q2_K: {
        const mvm_block_q2_K *x = (const mvm_block_q2_K *)blk;
        avx2_kblock_q23(x->qs, NULL, x->scales, x->d, x->dmin, a, nt, r);
        break;
    }
    case MVM_W_Q3_K: {
        const mvm_block_q3_K *x = (const mvm_block_q3_K *)blk;
        avx2_kblock_q23(x->qs, x->hmask, x->scales, x->d, 0, a, nt, r);
        break;
    }
    case MVM_W_Q4_K: {
        const mvm_block_q4_K *x = (const mvm_block_q4_K *)blk;
        avx2_kblock_q45(x->scales, x->d, x->dmin, x->qs, NULL, a, nt, r);
        break;
    }
    case MVM_W_Q5_K: {
        const mvm_block_q5_K *x = (const mvm_block_q5_K *)blk;
        avx2_kblock_q45(x->scales, x->d, x->dmin, x->qs, x->qh, a, nt, r);
        break;
    }
    case MVM_W_IQ4_XS: avx2_kblock_iq4xs((const mvm_block_iq4_xs *)blk, a, nt, r); break;
#if MVM_K_AVX512
    case MVM_W_Q6_K: avx512_kblock_q6((const mvm_block_q6_K *)blk, a, nt, r); break;
#else
    case MVM_W_Q6_K: avx2_kblock_q6((const mvm_block_q6_K *)blk, a, nt, r); break;
#endif
    default: avx2_kblock_iqgrid(t, blk, a, nt, r); break;
    }
}

AVX2_INLINE void avx2_dotn_k(enum mvm_wtype t, const uint8_t *w, const uint8_t *act, size_t as,
                             const int nt, size_t n, float *y, size_t ys)
{
#if MVM_K_AVX512
    if (avx512_kstep_ok(t)) {
        avx512_dotn_k(t, w, act, as, nt, n, y, ys);
        return;
    }
#endif
    const size_t bytes = mvm_k_block_bytes(t);
    float s[MVM_K_NT], r[MVM_K_NT];
    const mvm_block_q8_K *a[MVM_K_NT];
    for (int i = 0; i < nt; i++)
        s[i] = 0;
    for (size_t b = 0; b < n / MVM_QK_K; b++) {
        avx2_prefetch(w + b * bytes, bytes);
        for (int i = 0; i < nt; i++)
            a[i] = AVX2_TOK(mvm_block_q8_K, act, as, i) + b;
        avx2_kblock(t, w + b * bytes, a, nt, r);
        for (int i = 0; i < nt; i++)
            s[i] += r[i];
    }
    for (int i = 0; i < nt; i++)
        y[i * ys] = s[i];
}

AVX2_INLINE void avx2_downn_k(enum mvm_wtype t, const uint8_t *w, const uint8_t *act, size_t as,
                              const int nt, float *out, size_t os, size_t n)
{
#if MVM_K_AVX512
    if (avx512_kstep_ok(t)) {
        avx512_downn_k(t, w, act, as, nt, out, os, n);
        return;
    }
#endif
    const size_t bytes = mvm_k_block_bytes(t);
    const mvm_block_q8_K *a[MVM_K_NT];
    float r[MVM_K_NT];
    for (int i = 0; i < nt; i++)
        a[i] = AVX2_TOK(mvm_block_q8_K, act, as, i);
    for (size_t j = 0; j < n; j++) {
        avx2_prefetch(w + j * bytes, bytes);
        avx2_kblock(t, w + j * bytes, a, nt, r);
        for (int i = 0; i < nt; i++)
            out[i * os + j] += r[i];
    }
}

#endif
