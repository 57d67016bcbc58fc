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
 *   - a call of several queries (a prompt's tokens, a group of heads) converts each tile of
 *     the F16 cache to F32 once for them all; one query (decode without grouped heads)
 *     reads the cache as it is, and the tiles AHEAD are prefetched either way;
 *   - the softmax 16 at a time, with its own e^x (exp16).
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

/* Positions a tile (a vector's lanes). */
#define TILE 16
/* The largest head handled here (the tiles are on the stack: 16 x 1024 floats, 64 KiB);
 * larger ones go to ops.c's. DeepSeek's latent heads are 576. */
#define HEAD_MAX 1024

static inline __mmask16 first(size_t n)
{
    return n >= 16 ? ALL16 : (__mmask16)((1u << n) - 1);
}

/* Tiles read ahead of the one in use: a long context's cache comes from memory, 16 rows a
 * tile in one stream, and without the prefetch one query over 32768 F16 rows took 774 us
 * against ops.c's 627 (with it, 304; docs/perf/cpu.md). */
#define AHEAD 2

/* Prefetches the 16 rows of bytes each, stride apart, from p (prefetches never fault, so
 * rows past the cache's end are harmless). */
AVX512_INLINE void prefetch_tile(const uint8_t *p, size_t stride, size_t bytes)
{
    for (size_t r = 0; r < TILE; r++)
        for (size_t o = 0; o < bytes; o += 64)
            _mm_prefetch((const char *)p + r * stride + o, _MM_HINT_T0);
}

/* dst[r * hp + d] = element d of row r as F32 (r < nr), d < hp (hd rounded up to 16; 0
 * past hd): a tile of the cache converted once for all the call's queries. */
AVX512_INLINE void rows_tile(enum mvm_wtype t, const uint8_t *src, size_t stride, size_t nr,
                             size_t hd, size_t hp, float *dst)
{
    const size_t es = t == MVM_W_F32 ? 4 : 2;
    for (size_t r = 0; r < nr; r++)
        for (size_t d0 = 0; d0 < hp; d0 += 16)
            _mm512_store_ps(dst + r * hp + d0,
                            load16(t, src + r * stride + d0 * es, first(hd - d0)));
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

/* The scores of query qv over rows 0 .. nr-1 of k (type t, stride bytes apart), one a lane
 * (the lanes past nr 0): each row's products summed 16 lanes wide over d in order, then
 * across the lanes by reduce16, whichever rows and queries the call has. */
AVX512_INLINE __m512 scores16(enum mvm_wtype t, const uint8_t *k, size_t stride, size_t nr,
                              const float *qv, size_t hd)
{
    const size_t es = t == MVM_W_F32 ? 4 : 2;
    __m512 acc[16];
#pragma GCC unroll 16
    for (size_t r = 0; r < 16; r++)
        acc[r] = _mm512_setzero_ps();
    for (size_t d0 = 0; d0 < hd; d0 += 16) {
        const __mmask16 m = first(hd - d0);
        const __m512 qc = _mm512_maskz_loadu_ps(m, qv + d0);
#pragma GCC unroll 16
        for (size_t r = 0; r < 16; r++)
            if (r < nr)
                acc[r] = _mm512_fmadd_ps(qc, load16(t, k + r * stride + d0 * es, m), acc[r]);
    }
    return reduce16(acc);
}

/* out += Σ_r w[r] · row r of v (type t, stride bytes apart) over the first nr rows, 128
 * elements at a time, each element's sum in row order. */
AVX512_INLINE void add_values(const float *w, size_t nr, enum mvm_wtype t, const uint8_t *v,
                              size_t stride, size_t hd, float *out)
{
    const size_t es = t == MVM_W_F32 ? 4 : 2;
    for (size_t d0 = 0; d0 < hd; d0 += 128) {
        const size_t nv = (hd - d0 >= 128 ? 128 : hd - d0 + 15) / 16;
        __m512 acc[8];
#pragma GCC unroll 8
        for (size_t c = 0; c < 8; c++)
            acc[c] = c < nv ? _mm512_maskz_loadu_ps(first(hd - d0 - 16 * c), out + d0 + 16 * c)
                            : _mm512_setzero_ps();
        for (size_t r = 0; r < nr; r++) {
            const __m512 wr = _mm512_set1_ps(w[r]);
#pragma GCC unroll 8
            for (size_t c = 0; c < 8; c++)
                if (c < nv)
                    acc[c] = _mm512_fmadd_ps(
                        wr, load16(t, v + r * stride + (d0 + 16 * c) * es, first(hd - d0 - 16 * c)),
                        acc[c]);
        }
#pragma GCC unroll 8
        for (size_t c = 0; c < 8; c++)
            if (c < nv)
                _mm512_mask_storeu_ps(out + d0 + 16 * c, first(hd - d0 - 16 * c), acc[c]);
    }
}

/* e^x for 16 floats: x = n·ln 2 + r (|r| <= ln 2 / 2, ln 2 in two parts), e^r by Cephes'
 * expf polynomial, times 2^n by scalef, which goes to 0 below the smallest subnormal; x is
 * clamped first so that -inf (a masked score, a missing sink) gives 0 and not inf - inf.
 * Within 2 ulp of expf on softmax's arguments (x <= 0). */
AVX512_INLINE __m512 exp16(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1));
    return _mm512_scalef_ps(y, n);
}

/* ops.c's mvm_k_softmax_sink 16 at a time: the terms summed in double as there, in 16
 * partial sums. */
AVX512_INLINE void softmax16(float *x, size_t n, float sink)
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
}

/* The rows p0 .. p0 + nr - 1 of a cache (k or v: base, stride bytes a row) as the call
 * reads them: converted into tile (F32 rows hp floats apart: hd rounded up to 16) when
 * several queries share them, else in place; the tiles AHEAD prefetched either way. */
AVX512_INLINE const uint8_t *rows_at(enum mvm_wtype kv, const void *base, size_t stride,
                                     size_t p0, size_t nr, size_t hd, size_t hp, int shared,
                                     float *tile)
{
    const uint8_t *p = (const uint8_t *)base + p0 * stride;
    prefetch_tile(p + AHEAD * TILE * stride, stride, hd * (kv == MVM_W_F32 ? 4 : 2));
    if (!shared)
        return p;
    rows_tile(kv, p, stride, nr, hd, hp, tile);
    return (const uint8_t *)tile;
}

AVX512_TARGET int mvm_k_attn_block_avx512(const float *q, size_t q_stride, size_t n_tok,
                                          size_t n_q, const uint32_t *n_pos, enum mvm_wtype kv,
                                          const void *k, const void *v, size_t kv_stride,
                                          size_t head_dim, float scale, const float *sinks,
                                          float *scratch, float *restrict out)
{
    if ((kv != MVM_W_F32 && kv != MVM_W_F16 && kv != MVM_W_BF16) || head_dim > HEAD_MAX)
        return 0;
    const size_t hd = head_dim, hp = (hd + 15) & ~(size_t)15, nq = n_tok * n_q;
    const size_t es = kv == MVM_W_F32 ? 4 : 2, stride = kv_stride * es;
    /* one query reads the cache as it is; several, a tile converted once for them all */
    const int shared = nq > 1;
    const enum mvm_wtype tt = shared ? MVM_W_F32 : kv;
    const size_t ts = shared ? hp * sizeof(float) : stride;
    _Alignas(64) float tile[TILE * HEAD_MAX];
    size_t rows = 0; /* the longest query's */
    for (size_t i = 0; i < n_tok; i++)
        rows = n_pos[i] > rows ? n_pos[i] : rows;
    const __m512 sv = _mm512_set1_ps(scale);
    for (size_t p0 = 0; p0 < rows; p0 += TILE) {
        const size_t nr = rows - p0 < TILE ? rows - p0 : TILE;
        const uint8_t *kt = rows_at(kv, k, stride, p0, nr, hd, hp, shared, tile);
        for (size_t qi = 0; qi < nq; qi++) {
            const size_t i = qi / n_q, reach = n_pos[i];
            if (reach <= p0) /* a prompt's early tokens stop before its later tiles */
                continue;
            const size_t n = reach - p0 < nr ? reach - p0 : nr;
            const __m512 s = scores16(tt, kt, ts, n, q + i * q_stride + (qi % n_q) * hd, hd);
            _mm512_mask_storeu_ps(scratch + qi * rows + p0, first(n), _mm512_mul_ps(s, sv));
        }
    }
    for (size_t qi = 0; qi < nq; qi++) {
        const size_t i = qi / n_q, j = qi % n_q;
        softmax16(scratch + qi * rows, n_pos[i], sinks ? sinks[j] : -INFINITY);
        memset(out + i * q_stride + j * hd, 0, hd * sizeof *out);
    }
    for (size_t p0 = 0; p0 < rows; p0 += TILE) {
        const size_t nr = rows - p0 < TILE ? rows - p0 : TILE;
        const uint8_t *vt = rows_at(kv, v, stride, p0, nr, hd, hp, shared, tile);
        for (size_t qi = 0; qi < nq; qi++) {
            const size_t i = qi / n_q, reach = n_pos[i];
            if (reach > p0)
                add_values(scratch + qi * rows + p0, reach - p0 < nr ? reach - p0 : nr, tt, vt,
                           ts, hd, out + i * q_stride + (qi % n_q) * hd);
        }
    }
    return 1;
}

#endif
