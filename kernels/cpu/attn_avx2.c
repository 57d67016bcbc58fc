/*
 * The AVX2 level's attention (kernels.h's mvm_k_attn_block) for several queries a KV head: a
 * prompt's tokens, or a group's heads. ops.c's portable version calls the level's dot product
 * for each query and cached row and its axpy for each weight, so a prompt converted every F16
 * row once per query, reduced every score across a vector's lanes on its own and loaded and
 * stored a query's output once per row: at pp512 of a 3-layer OLMoE Q4_K_M file 13% of the
 * time on a Zen 3 (docs/perf/cpu.md, session 138). Here the rows are taken TILE at a time:
 *   - a tile of the cache is converted to F32 once for all the call's queries, the n_kv
 *     heads' parts of each row together (F16 by F16C, the other types by avx2.h's kv_row);
 *   - a query's scores over the tile's 8 rows are summed two rows at a time and reduced
 *     across the lanes all 8 together (scores8: a transposing tree);
 *   - a query's output is accumulated 64 elements at a time in registers over the tile's
 *     rows, loaded and stored once a tile.
 * Every score and every output element is ops.c's with the level's dot product and axpy, bit
 * for bit: avx2.h's avx2_dot_float sums a row in four accumulators over 32 elements, the rest
 * 8 at a time into the first, adds them as (s0 + s1) + (s2 + s3) and reduces the lanes as
 * avx2_hsum does ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), which scores8's tree
 * repeats lane for lane; its axpy is one FMA an element a row, in row order, as here; the
 * softmax is ops.c's step (mvm_k_attn_weights, with the level's exp_avx2.c). So a query gives
 * the same whether this file or ops.c computes it, and ops.c keeps what is not taken here: one
 * query a KV head (decode without grouped heads, which reads the cache in place in one
 * stream), heads not a multiple of 8 elements, a KV head wider than a tile's row.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/avx2.h"

/* Positions a tile (a vector's lanes). */
#define TILE 8
/* The widest part of a row a tile holds (n_kv heads; wider calls go in parts of KV heads):
 * 8 x 1024 floats, 32 KiB on the stack. */
#define ROW_MAX MVM_K_ATTN_ROW_MAX

/* Rows p0 .. p0 + nr - 1 (nr <= TILE) of a cache of type kv, stride bytes apart, the first
 * w elements of each (the call's KV heads) as F32 into tile (row r at r * w): the values
 * ops.c's dot product and axpy read (F16 converted exactly, the others as kv_row gives
 * them); the rows past nr zeros (scores8 reads all 8). */
AVX2_INLINE void convert_tile(enum mvm_wtype kv, const uint8_t *src, size_t stride, size_t p0,
                              size_t nr, size_t w, float *tile)
{
    for (size_t r = 0; r < nr; r++) {
        const uint8_t *row = src + (p0 + r) * stride;
        float *to = tile + r * w;
        if (kv == MVM_W_F16)
            for (size_t e = 0; e < w; e += 8)
                _mm256_storeu_ps(to + e, avx2_load8(MVM_W_F16, row + 2 * e));
        else if (kv == MVM_W_F32)
            memcpy(to, row, w * sizeof *to);
        else
            avx2_kv_row(kv, row, to, w);
    }
    memset(tile + nr * w, 0, (TILE - nr) * w * sizeof *tile);
}

/* One row's sum as avx2_dot_float keeps it before its reduction, (s0 + s1) + (s2 + s3). */
AVX2_INLINE __m256 row_sum(const float *k, const float *q, size_t hd)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t d = 0;
    for (; d + 32 <= hd; d += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(k + d), _mm256_loadu_ps(q + d), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(k + d + 8), _mm256_loadu_ps(q + d + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(k + d + 16), _mm256_loadu_ps(q + d + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(k + d + 24), _mm256_loadu_ps(q + d + 24), s3);
    }
    for (; d < hd; d += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(k + d), _mm256_loadu_ps(q + d), s0);
    return _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
}

/* Query q's scores over a tile's 8 rows (w floats apart), lane r row r's: each row's sum
 * (row_sum), then the 8 reduced together in avx2_hsum's tree. Rows past the call's are read
 * (the tile's stale rows: finite or not, their lanes are not used). */
AVX2_INLINE __m256 scores8(const float *tile, size_t w, const float *q, size_t hd)
{
    __m256 a[4];
    for (int r = 0; r < 8; r += 2) {
        const __m256 x = row_sum(tile + r * w, q, hd), y = row_sum(tile + (r + 1) * w, q, hd);
        /* [x's l0+l4 .. l3+l7 | y's] */
        a[r / 2] =
            _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
    }
    /* within each 4 lanes (a row's): (0 + 2, 1 + 3), rows 0 2 | 1 3, then 4 6 | 5 7 */
    const __m256 b0 =
        _mm256_add_ps(_mm256_shuffle_ps(a[0], a[1], 0x44), _mm256_shuffle_ps(a[0], a[1], 0xEE));
    const __m256 b1 =
        _mm256_add_ps(_mm256_shuffle_ps(a[2], a[3], 0x44), _mm256_shuffle_ps(a[2], a[3], 0xEE));
    /* (0 + 2) + (1 + 3): rows 0 2 4 6 | 1 3 5 7 */
    const __m256 s =
        _mm256_add_ps(_mm256_shuffle_ps(b0, b1, 0x88), _mm256_shuffle_ps(b0, b1, 0xDD));
    return _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* out += Σ_r wt[r] · row r of a tile (w floats apart) over its first nr rows, 64 elements at
 * a time, each element's sum in row order (the axpy's FMA). */
AVX2_INLINE void add_values(const float *wt, size_t nr, const float *tile, size_t w, size_t hd,
                            float *out)
{
    for (size_t d0 = 0; d0 < hd; d0 += 64) {
        const size_t nv = hd - d0 >= 64 ? 8 : (hd - d0) / 8;
        __m256 acc[8];
#pragma GCC unroll 8
        for (size_t c = 0; c < 8; c++)
            acc[c] = c < nv ? _mm256_loadu_ps(out + d0 + 8 * c) : _mm256_setzero_ps();
        for (size_t r = 0; r < nr; r++) {
            const __m256 wr = _mm256_set1_ps(wt[r]);
            const float *vr = tile + r * w + d0;
#pragma GCC unroll 8
            for (size_t c = 0; c < 8; c++)
                if (c < nv)
                    acc[c] = _mm256_fmadd_ps(wr, _mm256_loadu_ps(vr + 8 * c), acc[c]);
        }
#pragma GCC unroll 8
        for (size_t c = 0; c < 8; c++)
            if (c < nv)
                _mm256_storeu_ps(out + d0 + 8 * c, acc[c]);
    }
}

/* The call's queries over the cache's tiles in order: qi = i * nh + h (token i, head h of nh =
 * n_kv * n_q) at q + i * q_stride + h * hd, its scores at scratch + qi * rows. The keys (src k,
 * values 0) into the scores, scaled; or the values (src v, values 1) weighted by the scores
 * (the softmax's weights by then) into out (alike q). */
AVX2_INLINE void tiles_pass(int values, const float *q, size_t q_stride, size_t n_tok, size_t n_q,
                            size_t n_kv, const uint32_t *n_pos, size_t rows, enum mvm_wtype kv,
                            const uint8_t *src, size_t stride, size_t hd, float scale,
                            float *scratch, float *out, float *tile)
{
    const size_t nh = n_kv * n_q, w = n_kv * hd;
    for (size_t p0 = 0; p0 < rows; p0 += TILE) {
        const size_t nr = rows - p0 < TILE ? rows - p0 : TILE;
        convert_tile(kv, src, stride, p0, nr, w, tile);
        for (size_t i = 0; i < n_tok; i++) {
            if (n_pos[i] <= p0)
                continue;
            const size_t n = n_pos[i] - p0 < nr ? n_pos[i] - p0 : nr;
            for (size_t h = 0; h < nh; h++) {
                float *sc = scratch + (i * nh + h) * rows + p0;
                const float *rows_h = tile + h / n_q * hd;
                if (values) {
                    add_values(sc, n, rows_h, w, hd, out + i * q_stride + h * hd);
                    continue;
                }
                const __m256 s = _mm256_mul_ps(scores8(rows_h, w, q + i * q_stride + h * hd, hd),
                                               _mm256_set1_ps(scale));
                float lanes[TILE];
                _mm256_storeu_ps(lanes, s);
                memcpy(sc, lanes, n * sizeof *sc);
            }
        }
    }
}

/* mvm_k_attn_block over n_kv KV heads whose rows fit a tile (n_kv * hd <= ROW_MAX), query
 * i * nh + h's lse at lse[i * lse_stride + h]. */
AVX2_TARGET static void attn_tiles(const float *q, size_t q_stride, size_t n_tok, size_t n_q,
                                   size_t n_kv, const uint32_t *n_pos, enum mvm_wtype kv,
                                   const uint8_t *k, const uint8_t *v, size_t stride, size_t hd,
                                   float scale, const float *sinks, float *scratch, float *out,
                                   float *lse, size_t lse_stride)
{
    _Alignas(32) float tile[TILE * ROW_MAX];
    size_t rows = 0; /* the longest query's */
    for (size_t i = 0; i < n_tok; i++)
        rows = n_pos[i] > rows ? n_pos[i] : rows;
    tiles_pass(0, q, q_stride, n_tok, n_q, n_kv, n_pos, rows, kv, k, stride, hd, scale, scratch,
               out, tile);
    mvm_k_attn_weights(scratch, rows, n_tok, n_kv * n_q, n_pos, sinks, lse, lse_stride, out,
                       q_stride, hd);
    tiles_pass(1, q, q_stride, n_tok, n_q, n_kv, n_pos, rows, kv, v, stride, hd, scale, scratch,
               out, tile);
}

AVX2_TARGET int mvm_k_attn_block_avx2(const float *q, size_t q_stride, size_t n_tok, size_t n_q,
                                      size_t n_kv, const uint32_t *n_pos, enum mvm_wtype kv,
                                      const void *k, const void *v, size_t kv_stride,
                                      size_t head_dim, float scale, const float *sinks,
                                      float *scratch, float *out, float *lse)
{
    /* every cache type ops.c's path reads, converted as it converts them (kv_row) */
    if (n_tok * n_q == 1 || head_dim % 8 || head_dim > ROW_MAX)
        return 0;
    const size_t stride = mvm_k_row_bytes(kv, kv_stride), hb = mvm_k_row_bytes(kv, head_dim);
    /* KV heads a tile's rows hold: wider calls in parts, each head's arithmetic the same */
    const size_t part = ROW_MAX / head_dim, qs = n_q * head_dim;
    for (size_t g = 0; g < n_kv; g += part)
        attn_tiles(q + g * qs, q_stride, n_tok, n_q, n_kv - g < part ? n_kv - g : part, n_pos, kv,
                   (const uint8_t *)k + g * hb, (const uint8_t *)v + g * hb, stride, head_dim,
                   scale, sinks ? sinks + g * n_q : NULL, scratch, out + g * qs,
                   lse ? lse + g * n_q : NULL, n_kv * n_q);
    return 1;
}

#endif
