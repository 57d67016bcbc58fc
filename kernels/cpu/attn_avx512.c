/*
 * The AVX-512 levels' attention (kernels.h's mvm_k_attn_block; both levels, VNNI or not: it
 * has no integer products). ops.c's portable version calls the level's dot product for each
 * query and cached row and its axpy for each weight, so a prompt's attention converted every
 * F16 row once per query and reduced every score across a vector's lanes: at pp512 of an
 * OLMoE shape a fifth of the time for a fiftieth of the arithmetic (docs/perf/cpu.md). Here
 * the rows are taken 16 at a time (a tile):
 *   - scores: a query's products with the tile's 16 rows summed 16 lanes wide over the head
 *     in order, then across the lanes all 16 at once (reduce16: a transposing tree, not 16
 *     separate reductions), so the 16 scores come out as one vector;
 *   - weighted values: each query's output accumulated 128 elements at a time in registers
 *     over the tile's rows in order;
 *   - a call of several queries of one KV head (a prompt's tokens, a group of heads)
 *     converts each tile of the F16 cache to F32 once for them all, the n_kv heads' parts
 *     of each row together, and prefetches the tiles AHEAD;
 *   - the softmax 16 at a time, with its own e^x (exp16), returning its log-normaliser;
 *   - where two queries of one KV head both reach a whole tile (F16 heads of whole
 *     vectors), they take it together, each row's load used for both (scores16x2,
 *     add_values2): a prompt's 32 tokens 4-5% faster, Qwen3's groups 8-10%.
 *   - a Q8_0 cache's blocks are converted as they are read (ldkv, and ldq8 a block at a
 *     time in the sweep: the scale times the quants, the products mvm_k_dequantize
 *     rounds), so the tiles and the sweep compute what an F32 cache of those values
 *     gives; at length, where decode reads the cache from memory, 53% of F16's bytes:
 *     OLMoE's tg32 at 4096 positions 1.1-1.6x faster in the engine, the same within noise
 *     at 512 (docs/perf/cpu.md, session 117). The other block types llama.cpp's -ctk
 *     takes (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) the same way a block at a time (ldblock),
 *     their type not a constant of the loops (an instance each would cost compile time;
 *     whether it would gain is not measured), in the tiles' unmasked instance with BF16
 *     (prompts at F16's speed; docs/perf/cpu.md, session 125).
 * One query a KV head (decode without grouped heads) takes no tiles: attn_sweep, below,
 * reads the cache in place in row order.
 * Each query's arithmetic is the same whatever the other queries of the call are (the
 * conversion is exact, the sums' orders fixed), so the block gives each query bit for bit
 * what a call for it alone gives, as kernels.h promises. bench_cpu_attention, one thread,
 * F16 cache, against the AVX2 level (ops.c's path; docs/perf/cpu.md): OLMoE's 16 heads over
 * 2048 positions 487 against 1053 us, Qwen3-30B-A3B's groups of 8 over 32768 11.1 against
 * 35.7 ms, a prompt's 32 tokens over 2048 6.3 against 22.2 ms.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/exp_poly.h"

/* Positions a tile (a vector's lanes). */
#define TILE 16
/* The widest rows handled here, n_kv heads (the tiles are on the stack: 16 x 1024 floats,
 * 64 KiB); wider ones go to ops.c's. DeepSeek's latent heads are 576. */
#define HEAD_MAX MVM_K_ATTN_ROW_MAX

static inline __mmask16 first(size_t n)
{
    return n >= 16 ? ALL16 : (__mmask16)((1u << n) - 1);
}

/* Tiles read ahead of the one in use: a long context's cache comes from memory, 16 rows a
 * tile in one stream, and without the prefetch one query over 32768 F16 rows took 774 us
 * against ops.c's 627 (with it, 304; docs/perf/cpu.md). Into L2, not L1: a unit of one head
 * reads a part of rows 4 KiB apart (OLMoE's), all in the same sets of the L1 (12 ways), so
 * the tiles ahead evicted the one being converted; a prompt's 32 tokens over 8192 positions
 * 23.6-24.0 -> 19.8-20.0 ms (docs/perf/cpu.md, session 116). */
#define AHEAD 2

/* Prefetches the 16 rows of bytes each, stride apart, from p (prefetches never fault, so
 * rows past the cache's end are harmless). */
AVX512_INLINE void prefetch_tile(const uint8_t *p, size_t stride, size_t bytes)
{
    for (size_t r = 0; r < TILE; r++)
        for (size_t o = 0; o < bytes; o += 64)
            _mm_prefetch((const char *)p + r * stride + o, _MM_HINT_T1);
}

/* Elements e .. e + 15 of a cache's row (or a part of one) at `row` as F32: load16 and the
 * float loads and stores, without their masks where the head is whole vectors (`full`, a
 * constant in each instance of the sweeps and the tiles, as the type is in the F16 and Q8_0
 * ones): the same values, but an unmasked store forwards to the load of the next row's
 * step, an unmasked F16 load folds into its conversion, and the loops have no branches on
 * the type or the shape (perf put a third of the sweep's samples on them). Q8_0 (e a
 * multiple of 16: its heads are whole blocks, never masked): the block's scale times its
 * quants, the product mvm_k_dequantize rounds, so the tiles hold the values an F32 cache
 * would. */
/* 16 quants of a Q8_0 block times its scale d (converted, in every lane). */
AVX512_INLINE __m512 q8x16(__m512 d, const int8_t *qs)
{
    const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)qs);
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
}

/* Q8_0 block b's scale in every lane (blocks are 2-byte aligned: loaded by value). */
AVX512_INLINE __m512 q8_scale(const mvm_block_q8_0 *b)
{
    return _mm512_cvtph_ps(_mm256_set1_epi16((short)b->d));
}

/* Whether a cache of type t is read a block of 32 at a time (Q8_0 and the 4- and 5-bit
 * types; every head whole blocks). */
AVX512_INLINE int is_block(enum mvm_wtype t)
{
    return t == MVM_W_Q8_0 || t == MVM_W_Q4_0 || t == MVM_W_Q4_1 || t == MVM_W_Q5_0 ||
           t == MVM_W_Q5_1 || t == MVM_W_IQ4_NL;
}

/* Elements e .. e + 31 of a Q8_0 row (a block: e a multiple of 32) as ldkv gives them,
 * the block's scale converted once for both halves: the decode sweep's loops take a block
 * a step, as a step of 16 converted the scale twice. */
AVX512_INLINE void ldq8(const uint8_t *row, size_t e, __m512 *lo, __m512 *hi)
{
    const mvm_block_q8_0 *b = (const mvm_block_q8_0 *)(const void *)row + e / MVM_QBLOCK;
    const __m512 d = q8_scale(b);
    *lo = q8x16(d, b->qs);
    *hi = q8x16(d, b->qs + 16);
}

/* The same for a row of any block type (is_block): the values mvm_k_dequantize gives, bit
 * for bit (d times a quant of at most 8 bits is exact in F32, so a fused or separate add
 * of Q4_1's and Q5_1's min rounds once either way). */
AVX512_INLINE void ldblock(enum mvm_wtype t, const uint8_t *row, size_t e, __m512 *lo,
                           __m512 *hi)
{
    if (t == MVM_W_Q8_0) {
        ldq8(row, e, lo, hi);
        return;
    }
    const uint8_t *blk = row + e / MVM_QBLOCK * mvm_k_block_bytes(t);
    const mvm_k_qlayout L = mvm_k_qlay(t);
    const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(blk + L.qs));
    const __m128i nib = _mm_set1_epi8(0x0F);
    __m128i n0 = _mm_and_si128(b, nib), n1 = _mm_and_si128(_mm_srli_epi16(b, 4), nib);
    if (t == MVM_W_IQ4_NL) { /* the nibbles index the table's 16 int8 values */
        const __m128i tab = _mm_set_epi64x((long long)MVM_K_IQ4NL_HI, (long long)MVM_K_IQ4NL_LO);
        n0 = _mm_shuffle_epi8(tab, n0);
        n1 = _mm_shuffle_epi8(tab, n1);
    }
    __m512i q0 = _mm512_cvtepi8_epi32(n0), q1 = _mm512_cvtepi8_epi32(n1);
    if (L.qh) { /* the fifth bits, bit j for element j */
        uint32_t h;
        memcpy(&h, blk + L.qh, sizeof h);
        const __m512i s = _mm512_set1_epi32(16);
        q0 = _mm512_mask_add_epi32(q0, (__mmask16)h, q0, s);
        q1 = _mm512_mask_add_epi32(q1, (__mmask16)(h >> 16), q1, s);
    }
    const __m512i bias = _mm512_set1_epi32(L.bias);
    const __m512 d = _mm512_set1_ps(mvm_k_block_scale(t, blk));
    *lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(q0, bias)));
    *hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(q1, bias)));
    if (L.m) {
        const __m512 m = _mm512_set1_ps(mvm_k_h2f(mvm_k_block_h(blk, L.m)));
        *lo = _mm512_add_ps(*lo, m);
        *hi = _mm512_add_ps(*hi, m);
    }
}

AVX512_INLINE __m512 ldkv(enum mvm_wtype t, const uint8_t *row, size_t e, __mmask16 m, int full)
{
    if (t == MVM_W_Q8_0) {
        const mvm_block_q8_0 *b = (const mvm_block_q8_0 *)(const void *)row + e / MVM_QBLOCK;
        return q8x16(q8_scale(b), b->qs + e % MVM_QBLOCK);
    }
    if (is_block(t)) {
        __m512 lo, hi;
        ldblock(t, row, e, &lo, &hi);
        return e % MVM_QBLOCK ? hi : lo;
    }
    const uint8_t *p = row + e * (t == MVM_W_F32 ? 4 : 2);
    if (!full)
        return load16(t, p, m);
    if (t == MVM_W_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return t == MVM_W_F32 ? _mm512_loadu_ps(p) : load16(t, p, ALL16);
}

AVX512_INLINE __m512 ldf(const float *p, __mmask16 m, int full)
{
    return full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

AVX512_INLINE void stf(float *p, __mmask16 m, __m512 x, int full)
{
    if (full)
        _mm512_storeu_ps(p, x);
    else
        _mm512_mask_storeu_ps(p, m, x);
}

/* dst[(r * n_kv + g) * hp + d] = element d of KV head g of row r as F32 (r < nr, g < n_kv),
 * d < hp (hd rounded up to 16; 0 past hd): a tile of the cache converted once for all the
 * call's queries. */
AVX512_INLINE void rows_tile(enum mvm_wtype t, const uint8_t *src, size_t stride, size_t nr,
                             size_t n_kv, size_t hd, size_t hp, float *dst, int full)
{
    for (size_t r = 0; r < nr; r++)
        for (size_t g = 0; g < n_kv; g++) {
            float *to = dst + (r * n_kv + g) * hp;
            for (size_t d0 = 0; is_block(t) && d0 < hd; d0 += 32) { /* a block converted once */
                __m512 lo, hi;
                ldblock(t, src + r * stride, g * hd + d0, &lo, &hi);
                _mm512_store_ps(to + d0, lo);
                _mm512_store_ps(to + d0 + 16, hi);
            }
            for (size_t d0 = 0; !is_block(t) && d0 < hp; d0 += 16)
                _mm512_store_ps(to + d0, ldkv(t, src + r * stride, g * hd + d0, first(hd - d0),
                                              full));
        }
}

/* Lane r of the result: the sum of acc[r]'s 16 lanes, in a fixed tree (pairs of lanes, then
 * of 64-bit pairs, then of 128-bit quarters). */
AVX512_INLINE __m512 reduce16(const __m512 acc[16])
{
    __m512 u[8], v[4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) /* lanes of each 128-bit quarter: r0 r1 r0 r1, rows 2i, 2i+1 */
        u[i] = _mm512_add_ps(_mm512_unpacklo_ps(acc[2 * i], acc[2 * i + 1]),
                             _mm512_unpackhi_ps(acc[2 * i], acc[2 * i + 1]));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) { /* each quarter: rows 4i .. 4i+3 */
        const __m512d a = _mm512_castps_pd(u[2 * i]), b = _mm512_castps_pd(u[2 * i + 1]);
        v[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    const __m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x88),
                                    _mm512_shuffle_f32x4(v[0], v[1], 0xDD));
    const __m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(v[2], v[3], 0x88),
                                    _mm512_shuffle_f32x4(v[2], v[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xDD));
}

/* The scores of query qv over rows 0 .. nr-1 of a converted tile (F32, stride bytes apart),
 * one a lane (the lanes past nr 0): each row's products summed 16 lanes wide over d in
 * order, then across the lanes by reduce16, whichever rows and queries the call has.
 * `full` (a constant): 16 rows of whole vectors, no masks and no branches. */
AVX512_INLINE __m512 scores16(const uint8_t *k, size_t stride, size_t nr, const float *qv,
                              size_t hd, int full)
{
    __m512 acc[16];
#pragma GCC unroll 16
    for (size_t r = 0; r < 16; r++)
        acc[r] = _mm512_setzero_ps();
    for (size_t d0 = 0; d0 < hd; d0 += 16) {
        const __mmask16 m = full ? ALL16 : first(hd - d0);
        const __m512 qc = ldf(qv + d0, m, full);
#pragma GCC unroll 16
        for (size_t r = 0; r < 16; r++)
            if (full || r < nr)
                acc[r] = _mm512_fmadd_ps(
                    qc, ldf((const float *)(const void *)(k + r * stride) + d0, m, full), acc[r]);
    }
    return reduce16(acc);
}

/* scores16 for two queries over the same whole tile of whole vectors (a prompt's
 * consecutive tokens, or a group's heads, of one KV head): each row's load taken for both,
 * 8 rows a pass (16 sums in registers), so a tile's rows are read from L1 half as often.
 * Each score is the same sum as scores16's: its 16 lanes over d in order, then reduce16's
 * tree, which is the same for every accumulator it is given; lanes 0-7 of a pass are qa's
 * rows, 8-15 qb's. */
AVX512_INLINE void scores16x2(const uint8_t *k, size_t stride, const float *qa, const float *qb,
                              size_t hd, __m512 *sa, __m512 *sb)
{
    __m512 half[2];
    for (size_t h = 0; h < 2; h++) {
        __m512 acc[16];
#pragma GCC unroll 16
        for (size_t r = 0; r < 16; r++)
            acc[r] = _mm512_setzero_ps();
        for (size_t d0 = 0; d0 < hd; d0 += 16) {
            const __m512 ca = _mm512_loadu_ps(qa + d0), cb = _mm512_loadu_ps(qb + d0);
#pragma GCC unroll 8
            for (size_t r = 0; r < 8; r++) {
                const __m512 kr =
                    _mm512_loadu_ps((const float *)(const void *)(k + (8 * h + r) * stride) + d0);
                acc[r] = _mm512_fmadd_ps(ca, kr, acc[r]);
                acc[8 + r] = _mm512_fmadd_ps(cb, kr, acc[8 + r]);
            }
        }
        half[h] = reduce16(acc);
    }
    *sa = _mm512_shuffle_f32x4(half[0], half[1], 0x44); /* qa's rows 0-7, then 8-15 */
    *sb = _mm512_shuffle_f32x4(half[0], half[1], 0xEE);
}

/* out += Σ_r w[r] · row r of a converted tile (F32, stride bytes apart) over the first nr
 * rows, 128 elements at a time, each element's sum in row order. `full` (a constant): 16
 * rows of whole vectors. */
AVX512_INLINE void add_values(const float *w, size_t nr, const uint8_t *v, size_t stride,
                              size_t hd, float *out, int full)
{
    if (full) /* the row count a constant, so that the loop over the rows unrolls */
        nr = 16;
    for (size_t d0 = 0; d0 < hd; d0 += 128) {
        const size_t nv = (hd - d0 >= 128 ? 128 : hd - d0 + 15) / 16;
        __m512 acc[8];
#pragma GCC unroll 8
        for (size_t c = 0; c < 8; c++) {
            const __mmask16 m = full ? ALL16 : first(hd - d0 - 16 * c);
            acc[c] = c < nv ? ldf(out + d0 + 16 * c, m, full) : _mm512_setzero_ps();
        }
#pragma GCC unroll 16
        for (size_t r = 0; r < nr; r++) {
            const __m512 wr = _mm512_set1_ps(w[r]);
            const float *vr = (const float *)(const void *)(v + r * stride) + d0;
#pragma GCC unroll 8
            for (size_t c = 0; c < 8; c++)
                if (c < nv)
                    acc[c] = _mm512_fmadd_ps(
                        wr, ldf(vr + 16 * c, full ? ALL16 : first(hd - d0 - 16 * c), full),
                        acc[c]);
        }
#pragma GCC unroll 8
        for (size_t c = 0; c < 8; c++)
            if (c < nv)
                stf(out + d0 + 16 * c, full ? ALL16 : first(hd - d0 - 16 * c), acc[c], full);
    }
}

/* add_values for two queries over the same whole tile of whole vectors: each row's load
 * taken for both, 64 elements of each query's output in registers a pass. Each output
 * element is the same sum as add_values gives it, the rows in order. */
AVX512_INLINE void add_values2(const float *wa, const float *wb, const uint8_t *v, size_t stride,
                               size_t hd, float *oa, float *ob)
{
    for (size_t d0 = 0; d0 < hd; d0 += 64) {
        const size_t nv = hd - d0 >= 64 ? 4 : (hd - d0) / 16;
        __m512 a[4], b[4];
#pragma GCC unroll 4
        for (size_t c = 0; c < 4; c++) {
            a[c] = c < nv ? _mm512_loadu_ps(oa + d0 + 16 * c) : _mm512_setzero_ps();
            b[c] = c < nv ? _mm512_loadu_ps(ob + d0 + 16 * c) : _mm512_setzero_ps();
        }
#pragma GCC unroll 16
        for (size_t r = 0; r < 16; r++) {
            const __m512 xa = _mm512_set1_ps(wa[r]), xb = _mm512_set1_ps(wb[r]);
            const float *vr = (const float *)(const void *)(v + r * stride) + d0;
#pragma GCC unroll 4
            for (size_t c = 0; c < 4; c++)
                if (c < nv) {
                    const __m512 x = _mm512_loadu_ps(vr + 16 * c);
                    a[c] = _mm512_fmadd_ps(xa, x, a[c]);
                    b[c] = _mm512_fmadd_ps(xb, x, b[c]);
                }
        }
#pragma GCC unroll 4
        for (size_t c = 0; c < 4; c++)
            if (c < nv) {
                _mm512_storeu_ps(oa + d0 + 16 * c, a[c]);
                _mm512_storeu_ps(ob + d0 + 16 * c, b[c]);
            }
    }
}

/* e^x for 16 floats: x = n·ln 2 + r (|r| <= ln 2 / 2, ln 2 in two parts), e^r by Cephes'
 * expf polynomial, times 2^n by scalef, which goes to 0 below the smallest subnormal; x is
 * clamped first so that -inf (a masked score, a missing sink) gives 0 and not inf - inf.
 * Within 2 ulp of expf on softmax's arguments (x <= 0). */
AVX512_INLINE __m512 exp16(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(MVM_EXP_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = MVM_EXP_R(_mm512, n, x);
    return _mm512_scalef_ps(MVM_EXP_POLY(_mm512, r), n);
}

/* ops.c's mvm_k_softmax_sink 16 at a time: the terms summed in double as there, in 16
 * partial sums. */
AVX512_INLINE float softmax16(float *x, size_t n, float sink)
{
    __m512 mv = _mm512_set1_ps(sink);
    for (size_t i = 0; i < n; i += 16)
        mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(mv, first(n - i), x + i));
    const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
    __m512d s0 = _mm512_setzero_pd(), s1 = s0;
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = first(n - i);
        const __m512 xi = _mm512_maskz_loadu_ps(m, x + i);
        const __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(xi, max)));
        _mm512_mask_storeu_ps(x + i, m, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    const __m512 sk = exp16(_mm512_sub_ps(_mm512_set1_ps(sink), max));
    const double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) + (double)_mm512_cvtss_f32(sk);
    const __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
    for (size_t i = 0; i < n; i += 16)
        _mm512_mask_storeu_ps(x + i, first(n - i),
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(first(n - i), x + i), inv));
    return (float)((double)_mm512_cvtss_f32(max) + log(sum)); /* ln of the softmax's sum */
}

/* The rows p0 .. p0 + nr - 1 of a cache (k or v: base, stride bytes a row; n_kv heads of
 * hd elements) converted into tile (F32 heads hp floats apart: hd rounded up to 16), the
 * tiles AHEAD prefetched. */
AVX512_INLINE const uint8_t *rows_at(enum mvm_wtype kv, const void *base, size_t stride,
                                     size_t p0, size_t nr, size_t n_kv, size_t hd, size_t hp,
                                     float *tile, int full)
{
    const uint8_t *p = (const uint8_t *)base + p0 * stride;
    prefetch_tile(p + AHEAD * TILE * stride, stride, mvm_k_row_bytes(kv, n_kv * hd));
    rows_tile(kv, p, stride, nr, n_kv, hd, hp, tile, full);
    return (const uint8_t *)tile;
}

/* One query a KV head (decode without grouped heads; the engine's decode at length, a part
 * of the positions with every head), the cache read in place in row order, each row's n_kv
 * heads together. Rows 4 KiB apart (OLMoE's 16 heads of 128 in F16) fall in the same sets
 * of the L1 cache: the tiles' 16 rows at a time (scores16, add_values) missed the L1 on
 * every row, and with the tiles a long context's decode read its cache at a quarter of the
 * memory's speed (docs/perf/cpu.md). Here a step takes R rows (R * heads <= reduce16's 16
 * lanes, R <= SWEEP_ROWS) and the values one row at a time. Each head's arithmetic is
 * scores16's and add_values' (its lanes over d, reduce16's lane tree, the rows in order),
 * so a head gives what the tiles give it. */
#define SWEEP_ROWS 4
#define SWEEP_AHEAD 8 /* rows prefetched ahead: a few, as each row takes every L1 set */

/* scratch[g * rows + p] = head g's score of row p; heads 16 at a time (lane a of a step: row
 * p0 + a / ng of head g0 + a % ng). */
AVX512_INLINE void sweep_scores(enum mvm_wtype kv, const uint8_t *k, size_t stride,
                                size_t rows, size_t n_kv, size_t hd, const float *q,
                                float scale, float *scratch, int full)
{
    const size_t bytes = mvm_k_row_bytes(kv, n_kv * hd);
    const size_t R = n_kv >= 16 ? 1 : 16 / n_kv < SWEEP_ROWS ? 16 / n_kv : SWEEP_ROWS;
    const __m512 sv = _mm512_set1_ps(scale);
    /* lane a's place in scratch: head a % ng0, row a / ng0 of the step (ng0 heads a group;
     * past 16 heads a step is one row, and a smaller last group masks its other lanes) */
    const size_t ng0 = n_kv < 16 ? n_kv : 16;
    _Alignas(64) int32_t at[16];
    for (size_t a = 0; a < 16; a++)
        at[a] = (int32_t)((a % ng0) * rows + a / ng0);
    for (size_t p0 = 0; p0 < rows; p0 += R) {
        const size_t nr = rows - p0 < R ? rows - p0 : R;
        for (size_t r = 0; r < nr; r++)
            for (size_t o = 0; o < bytes; o += 64)
                _mm_prefetch((const char *)k + (p0 + r + SWEEP_AHEAD) * stride + o, _MM_HINT_T0);
        for (size_t g0 = 0; g0 < n_kv; g0 += 16) {
            const size_t ng = n_kv - g0 < 16 ? n_kv - g0 : 16;
            const uint8_t *row = k + p0 * stride;
            /* lane by lane (the row's heads in order), each lane's sum over d in order */
            __m512 acc[16];
#pragma GCC unroll 16
            for (size_t a = 0; a < 16; a++) {
                acc[a] = _mm512_setzero_ps();
                if (a >= nr * ng)
                    continue;
                const float *qa = q + (g0 + a % ng) * hd;
                const uint8_t *ka = row + (a / ng) * stride;
                const size_t e = (g0 + a % ng) * hd;
                for (size_t d0 = 0; is_block(kv) && d0 < hd; d0 += 32) { /* the same sums */
                    __m512 lo, hi;
                    ldblock(kv, ka, e + d0, &lo, &hi);
                    acc[a] = _mm512_fmadd_ps(_mm512_loadu_ps(qa + d0), lo, acc[a]);
                    acc[a] = _mm512_fmadd_ps(_mm512_loadu_ps(qa + d0 + 16), hi, acc[a]);
                }
                for (size_t d0 = 0; !is_block(kv) && d0 < hd; d0 += 16) {
                    const __mmask16 m = first(hd - d0);
                    acc[a] = _mm512_fmadd_ps(ldf(qa + d0, m, full),
                                             ldkv(kv, ka, e + d0, m, full), acc[a]);
                }
            }
            const __m512i to = _mm512_add_epi32(_mm512_load_si512(at),
                                                _mm512_set1_epi32((int32_t)(g0 * rows + p0)));
            _mm512_mask_i32scatter_ps(scratch, first(nr * ng), to,
                                      _mm512_mul_ps(reduce16(acc), sv), 4);
        }
    }
}

/* out[g] += Σ_p w[g * rows + p] · head g of row p, the rows in order, one at a time. */
AVX512_INLINE void sweep_values(enum mvm_wtype kv, const uint8_t *v, size_t stride,
                                size_t rows, size_t n_kv, size_t hd, const float *w,
                                float *out, int full)
{
    const size_t bytes = mvm_k_row_bytes(kv, n_kv * hd);
    for (size_t p = 0; p < rows; p++) {
        const uint8_t *row = v + p * stride;
        for (size_t o = 0; o < bytes; o += 64)
            _mm_prefetch((const char *)row + SWEEP_AHEAD * stride + o, _MM_HINT_T0);
        for (size_t g = 0; g < n_kv; g++) {
            const __m512 wg = _mm512_set1_ps(w[g * rows + p]);
            for (size_t d0 = 0; is_block(kv) && d0 < hd; d0 += 32) {
                __m512 lo, hi;
                ldblock(kv, row, g * hd + d0, &lo, &hi);
                float *o = out + g * hd + d0;
                _mm512_storeu_ps(o, _mm512_fmadd_ps(wg, lo, _mm512_loadu_ps(o)));
                _mm512_storeu_ps(o + 16, _mm512_fmadd_ps(wg, hi, _mm512_loadu_ps(o + 16)));
            }
            for (size_t d0 = 0; !is_block(kv) && d0 < hd; d0 += 16) {
                const __mmask16 m = first(hd - d0);
                float *o = out + g * hd + d0;
                stf(o, m, _mm512_fmadd_ps(wg, ldkv(kv, row, g * hd + d0, m, full),
                                          ldf(o, m, full)), full);
            }
        }
    }
}

/* A token's n_kv queries, one a KV head, over its first `rows` positions. */
AVX512_TARGET static void attn_sweep(const float *q, size_t n_kv, size_t rows, enum mvm_wtype kv,
                                     const void *k, const void *v, size_t stride, size_t hd,
                                     float scale, const float *sinks, float *scratch,
                                     float *restrict out, float *lse)
{
    /* the common cases, F16 heads of whole vectors and Q8_0 (whole blocks), with their
     * type and masks as constants */
    const int f16 = kv == MVM_W_F16 && hd % 16 == 0, q8 = kv == MVM_W_Q8_0;
    if (f16)
        sweep_scores(MVM_W_F16, k, stride, rows, n_kv, hd, q, scale, scratch, 1);
    else if (q8)
        sweep_scores(MVM_W_Q8_0, k, stride, rows, n_kv, hd, q, scale, scratch, 1);
    else
        sweep_scores(kv, k, stride, rows, n_kv, hd, q, scale, scratch, 0);
    for (size_t g = 0; g < n_kv; g++) {
        const float l = softmax16(scratch + g * rows, rows, sinks ? sinks[g] : -INFINITY);
        if (lse)
            lse[g] = l;
        memset(out + g * hd, 0, hd * sizeof *out);
    }
    if (f16)
        sweep_values(MVM_W_F16, v, stride, rows, n_kv, hd, scratch, out, 1);
    else if (q8)
        sweep_values(MVM_W_Q8_0, v, stride, rows, n_kv, hd, scratch, out, 1);
    else
        sweep_values(kv, v, stride, rows, n_kv, hd, scratch, out, 0);
}

/* Whether queries qi and qi + 1 of a tiles call take the tile at p0 together: both reach
 * its 16 rows, they read the same KV head (a prompt's consecutive tokens of one head, or
 * heads of one group), and its heads are whole vectors (`full`). */
AVX512_INLINE int pair_whole(int full, size_t qi, size_t nq, size_t nh, size_t n_q,
                             const uint32_t *n_pos, size_t p0, size_t nr)
{
    return full && nr == TILE && qi + 1 < nq && n_pos[qi / nh] >= p0 + TILE &&
           n_pos[(qi + 1) / nh] >= p0 + TILE && (qi % nh) / n_q == ((qi + 1) % nh) / n_q;
}

/* Where query qi of a tiles call (token qi / nh, head qi % nh) lies in q and out. */
AVX512_INLINE size_t query_at(size_t qi, size_t nh, size_t q_stride, size_t hd)
{
    return qi / nh * q_stride + qi % nh * hd;
}

/* Several queries a KV head: n_kv heads whose rows fit a tile (n_kv * hp <= HEAD_MAX), each
 * tile of the cache converted once for all its queries; token i's query h's log-normaliser
 * at lse[i * lse_stride + h]. `full` (a constant): heads of whole vectors, whose whole tiles
 * (16 rows a query reaches) take scores16's and add_values' instances without masks or
 * branches: in a prompt at length these were a third of the instructions (perf). */
AVX512_INLINE void tiles_run(const float *q, size_t q_stride, size_t n_tok, size_t n_q,
                             size_t n_kv, const uint32_t *n_pos, enum mvm_wtype kv,
                             const void *k, const void *v, size_t stride, size_t hd,
                             float scale, const float *sinks, float *scratch,
                             float *restrict out, float *lse, size_t lse_stride, int full)
{
    const size_t hp = (hd + 15) & ~(size_t)15;
    const size_t nh = n_kv * n_q, nq = n_tok * nh; /* queries a token, in all */
    const size_t ts = n_kv * hp * sizeof(float), gs = hp * sizeof(float); /* a row, a head */
    _Alignas(64) float tile[TILE * HEAD_MAX];
    size_t rows = 0; /* the longest query's */
    for (size_t i = 0; i < n_tok; i++)
        rows = n_pos[i] > rows ? n_pos[i] : rows;
    const __m512 sv = _mm512_set1_ps(scale);
    for (size_t p0 = 0; p0 < rows; p0 += TILE) {
        const size_t nr = rows - p0 < TILE ? rows - p0 : TILE;
        const uint8_t *kt = rows_at(kv, k, stride, p0, nr, n_kv, hd, hp, tile, full);
        for (size_t qi = 0; qi < nq; qi++) {
            const size_t i = qi / nh, h = qi % nh, reach = n_pos[i];
            if (reach <= p0) /* a prompt's early tokens stop before its later tiles */
                continue;
            const size_t n = reach - p0 < nr ? reach - p0 : nr;
            const float *qv = q + query_at(qi, nh, q_stride, hd);
            if (pair_whole(full, qi, nq, nh, n_q, n_pos, p0, nr)) { /* qi and qi + 1 */
                __m512 s0, s1;
                scores16x2(kt + h / n_q * gs, ts, qv, q + query_at(qi + 1, nh, q_stride, hd), hd,
                           &s0, &s1);
                _mm512_storeu_ps(scratch + qi * rows + p0, _mm512_mul_ps(s0, sv));
                _mm512_storeu_ps(scratch + (qi + 1) * rows + p0, _mm512_mul_ps(s1, sv));
                qi++;
                continue;
            }
            const __m512 s = full && n == TILE ? scores16(kt + h / n_q * gs, ts, TILE, qv, hd, 1)
                                               : scores16(kt + h / n_q * gs, ts, n, qv, hd, 0);
            _mm512_mask_storeu_ps(scratch + qi * rows + p0, first(n), _mm512_mul_ps(s, sv));
        }
    }
    for (size_t qi = 0; qi < nq; qi++) {
        const size_t i = qi / nh, h = qi % nh;
        const float l = softmax16(scratch + qi * rows, n_pos[i], sinks ? sinks[h] : -INFINITY);
        if (lse)
            lse[i * lse_stride + h] = l;
        memset(out + query_at(qi, nh, q_stride, hd), 0, hd * sizeof *out);
    }
    for (size_t p0 = 0; p0 < rows; p0 += TILE) {
        const size_t nr = rows - p0 < TILE ? rows - p0 : TILE;
        const uint8_t *vt = rows_at(kv, v, stride, p0, nr, n_kv, hd, hp, tile, full);
        for (size_t qi = 0; qi < nq; qi++) {
            const size_t h = qi % nh, reach = n_pos[qi / nh];
            if (reach <= p0)
                continue;
            const size_t n = reach - p0 < nr ? reach - p0 : nr;
            const float *w = scratch + qi * rows + p0;
            float *o = out + query_at(qi, nh, q_stride, hd);
            if (pair_whole(full, qi, nq, nh, n_q, n_pos, p0, nr)) {
                add_values2(w, scratch + (qi + 1) * rows + p0, vt + h / n_q * gs, ts, hd, o,
                            out + query_at(qi + 1, nh, q_stride, hd));
                qi++;
                continue;
            }
            if (full && n == TILE)
                add_values(w, TILE, vt + h / n_q * gs, ts, hd, o, 1);
            else
                add_values(w, n, vt + h / n_q * gs, ts, hd, o, 0);
        }
    }
}

AVX512_TARGET static void attn_tiles(const float *q, size_t q_stride, size_t n_tok, size_t n_q,
                                     size_t n_kv, const uint32_t *n_pos, enum mvm_wtype kv,
                                     const void *k, const void *v, size_t stride, size_t hd,
                                     float scale, const float *sinks, float *scratch,
                                     float *restrict out, float *lse, size_t lse_stride)
{
    /* the common cases, F16 heads of whole vectors and Q8_0, with their type and masks as
     * constants; the other types' whole vectors (every block type's heads) without masks,
     * so that two queries take a tile together (pair_whole): a 3-layer OLMoE's pp512 at
     * 4096 positions over Q4_0 and BF16 caches ran at 72% and 49% of F16's without */
    if (kv == MVM_W_F16 && hd % 16 == 0)
        tiles_run(q, q_stride, n_tok, n_q, n_kv, n_pos, MVM_W_F16, k, v, stride, hd, scale,
                  sinks, scratch, out, lse, lse_stride, 1);
    else if (kv == MVM_W_Q8_0)
        tiles_run(q, q_stride, n_tok, n_q, n_kv, n_pos, MVM_W_Q8_0, k, v, stride, hd, scale,
                  sinks, scratch, out, lse, lse_stride, 1);
    else if (hd % 16 == 0)
        tiles_run(q, q_stride, n_tok, n_q, n_kv, n_pos, kv, k, v, stride, hd, scale, sinks,
                  scratch, out, lse, lse_stride, 1);
    else
        tiles_run(q, q_stride, n_tok, n_q, n_kv, n_pos, kv, k, v, stride, hd, scale, sinks,
                  scratch, out, lse, lse_stride, 0);
}

AVX512_TARGET int mvm_k_attn_block_avx512(const float *q, size_t q_stride, size_t n_tok,
                                          size_t n_q, size_t n_kv, const uint32_t *n_pos,
                                          enum mvm_wtype kv, const void *k, const void *v,
                                          size_t kv_stride, size_t head_dim, float scale,
                                          const float *sinks, float *scratch,
                                          float *restrict out, float *lse)
{
    const size_t hp = (head_dim + 15) & ~(size_t)15;
    if ((kv != MVM_W_F32 && kv != MVM_W_F16 && kv != MVM_W_BF16 && !is_block(kv)) ||
        hp > HEAD_MAX)
        return 0;
    const size_t stride = mvm_k_row_bytes(kv, kv_stride), hb = mvm_k_row_bytes(kv, head_dim);
    if (n_tok * n_q == 1) { /* the cache read in place: every head in one stream */
        attn_sweep(q, n_kv, n_pos[0], kv, k, v, stride, head_dim, scale, sinks, scratch, out,
                   lse);
        return 1;
    }
    /* KV heads a tile's rows hold: wider calls in parts, each head's arithmetic the same */
    const size_t part = HEAD_MAX / hp, qs = n_q * head_dim;
    for (size_t g = 0; g < n_kv; g += part)
        attn_tiles(q + g * qs, q_stride, n_tok, n_q, n_kv - g < part ? n_kv - g : part, n_pos,
                   kv, (const uint8_t *)k + g * hb, (const uint8_t *)v + g * hb, stride, head_dim,
                   scale, sinks ? sinks + g * n_q : NULL, scratch, out + g * qs,
                   lse ? lse + g * n_q : NULL, n_kv * n_q);
    return 1;
}

#endif
