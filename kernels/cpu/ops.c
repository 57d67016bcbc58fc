/*
 * The small F32 ops around the matrix products. Each is linear in its input size and runs
 * once per token and layer (or per head), a fraction of a percent of a token's time, so plain
 * C suffices, written as llama.cpp computes them so that results match it closely. The
 * attention, whose cost grows with the context, is the level's own where it has one
 * (attn_avx512.c), else goes through the level's dot product and axpy; rmsnorm's sum of
 * squares is a loop that gcc -O2 vectorizes; the rest call expf or are one short pass.
 */
#include <math.h>

#include "kernels/cpu/dispatch.h"
#include "kernels/rope.h"

void mvm_k_rmsnorm(float *out, const float *x, const float *w, size_t n, float eps)
{
    /* The squares summed in double as ggml_compute_forward_rms_norm does, but on 8 partial
     * sums: one chain of dependent double additions would cost 4 cycles an element. */
    double acc[8] = {0}, sum = 0;
    const size_t n8 = n - n % 8;
    for (size_t i = 0; i < n8; i += 8)
#pragma GCC unroll 8
        for (size_t k = 0; k < 8; k++)
            acc[k] += (double)(x[i + k] * x[i + k]);
    for (size_t i = n8; i < n; i++)
        sum += (double)(x[i] * x[i]);
    for (size_t k = 0; k < 8; k++)
        sum += acc[k];
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] * scale * (w ? w[i] : 1.0f);
}

void mvm_k_rope(float *x, size_t n_heads, size_t head_dim, size_t pos, const mvm_rope *r)
{
    const size_t half = r->n_rot / 2;
    for (size_t i = 0; i < half; i++) {
        /* The angle is computed the same way for both pairings; at pos 0 it is 0 and the
         * rotation is the identity (times mscale). */
        float c, s;
        mvm_rope_cos_sin(r, (uint32_t)pos, (uint32_t)i, &c, &s);
        const size_t i0 = r->neox ? i : 2 * i, i1 = r->neox ? i + half : 2 * i + 1;
        for (size_t h = 0; h < n_heads; h++) {
            float *p = x + h * head_dim;
            const float a = p[i0], b = p[i1];
            p[i0] = a * c - b * s;
            p[i1] = a * s + b * c;
        }
    }
}

/* ggml_rope_yarn_corr_dim: the pair index whose wavelength fits n_rotations turns into
 * the original context, as a real number. */
static float yarn_corr_dim(uint32_t n_rot, uint32_t orig_ctx, float n_rotations, float base)
{
    return (float)n_rot * logf((float)orig_ctx / (n_rotations * 2.0f * (float)M_PI)) /
           (2.0f * logf(base));
}

void mvm_k_rope_yarn(mvm_rope *r, float factor, uint32_t orig_ctx, float beta_fast,
                     float beta_slow, float ext_factor, float attn_factor)
{
    r->freq_scale = 1.0f / factor;
    r->ext_factor = ext_factor;
    r->corr_lo = fmaxf(0.0f, floorf(yarn_corr_dim(r->n_rot, orig_ctx, beta_fast, r->base)));
    r->corr_hi = fminf((float)(r->n_rot - 1),
                       ceilf(yarn_corr_dim(r->n_rot, orig_ctx, beta_slow, r->base)));
    r->mscale = attn_factor * (ext_factor != 0.0f ? 1.0f + 0.1f * logf(factor) : 1.0f);
}

float mvm_k_softmax_sink(float *x, size_t n, float sink)
{
    float max = sink;
    for (size_t i = 0; i < n; i++)
        max = x[i] > max ? x[i] : max;
    double sum = expf(sink - max);
    for (size_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (size_t i = 0; i < n; i++)
        x[i] *= inv;
    return (float)((double)max + log(sum));
}

void mvm_k_softmax(float *x, size_t n)
{
    mvm_k_softmax_sink(x, n, -INFINITY);
}

/* The ranking key: nan ranks lowest, so that the order is total and k indices always come
 * out even from a broken router. */
static float key(const float *x, size_t i)
{
    return isnan(x[i]) ? -INFINITY : x[i];
}

/* For a router's sizes (n and k at most these), k rounds of a maximum over the candidates'
 * ranked keys: no branch that depends on the data, where the one pass below mispredicts
 * most of its insertions. A prompt batch routes on the host while the device waits
 * (MOEVM_LOG=info's prompt split over the fake driver, docs/perf/engine.md): a 512-token
 * batch of a 16-layer OLMoE-shaped model routed in 9.7-10.1 ms by that pass, 6.6-7.1 by
 * rounds over every key (session 107). A round's time was its chain of dependent maxima,
 * so the keys now go in groups of g = 2^s (g * g >= n), each group's maximum kept: a round
 * takes the largest of the groups' and recomputes its winner's group only, about 2 sqrt(n)
 * keys in two chains (64 experts: 16, not 64). That batch now routes in 4.8-5.3 ms
 * (session 109). */
#define TOPK_ROUNDS_N 1024
#define TOPK_ROUNDS_K 16
#define TOPK_GROUPS 32 /* sqrt(TOPK_ROUNDS_N) */

/* x[i]'s key and place as one integer, larger for the better rank: the key's order in the
 * high word (its bits, sign-flipped; -0 as +0, so that they tie as the floats do), the
 * index reversed in the low word, so among equals the lower index ranks ahead. */
static uint64_t ranked(const float *x, size_t i)
{
    float v = key(x, i);
    if (v == 0)
        v = 0;
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    b ^= b >> 31 ? 0xFFFFFFFFu : 0x80000000u;
    return (uint64_t)b << 32 | (uint32_t)~(uint32_t)i;
}

/* The largest of r[0..n), or 0 (below every key: each has its index's bits) for none. */
static uint64_t max_ranked(const uint64_t *r, size_t n)
{
    uint64_t a = 0, b = 0;
    size_t i = 0;
    for (; i + 2 <= n; i += 2) {
        a = r[i] > a ? r[i] : a;
        b = r[i + 1] > b ? r[i + 1] : b;
    }
    if (i < n)
        a = r[i] > a ? r[i] : a;
    return a > b ? a : b;
}

/* The largest of r[0..n)'s group q of 2^s keys (the last may be short). */
static uint64_t group_max(const uint64_t *r, size_t n, size_t q, unsigned s)
{
    const size_t g = (size_t)1 << s, from = q * g;
    return max_ranked(r + from, n - from < g ? n - from : g);
}

void mvm_k_topk(const float *x, size_t n, size_t k, int *idx)
{
    if (n <= TOPK_ROUNDS_N && k <= TOPK_ROUNDS_K) {
        uint64_t r[TOPK_ROUNDS_N], top[TOPK_GROUPS];
        unsigned s = 0;
        while ((size_t)1 << 2 * s < n)
            s++;
        const size_t groups = (n + ((size_t)1 << s) - 1) >> s;
        for (size_t i = 0; i < n; i++)
            r[i] = ranked(x, i);
        for (size_t q = 0; q < groups; q++)
            top[q] = group_max(r, n, q, s);
        for (size_t j = 0; j < k && j < n; j++) {
            const uint32_t at = ~(uint32_t)max_ranked(top, groups);
            idx[j] = (int)at;
            r[at] = 0;
            top[at >> s] = group_max(r, n, at >> s, s);
        }
        return;
    }
    /* One pass keeping idx[0..m) sorted, largest first; a value enters only when strictly
     * larger, so among equals the earlier (lower) index stays ahead. */
    size_t m = 0;
    for (size_t i = 0; i < n && k; i++) {
        const float v = key(x, i);
        if (m == k && !(v > key(x, (size_t)idx[k - 1])))
            continue;
        size_t p = m < k ? m++ : k - 1;
        for (; p > 0 && v > key(x, (size_t)idx[p - 1]); p--)
            idx[p] = idx[p - 1];
        idx[p] = (int)i;
    }
}

void mvm_k_swiglu(float *x, const float *y, size_t n)
{
    if (mvm_k_kernels->swiglu) {
        mvm_k_kernels->swiglu(x, y, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] / (1.0f + expf(-x[i])) * y[i];
}

/* Whether the levels' dot products and axpys read a cache of type kv in place (F32, F16);
 * the others' rows are converted to F32 first. */
static int in_place(enum mvm_wtype kv)
{
    return kv == MVM_W_F32 || kv == MVM_W_F16;
}

/* A KV head's part of a cache row (n elements at `part`) as the level's dot product and
 * axpy for F32 read it: converted into buf (BF16, the block types: by the level's kv_row
 * where it has one), or in place. */
static const void *readable(enum mvm_wtype kv, const void *part, float *buf, size_t n)
{
    if (in_place(kv))
        return part;
    if (mvm_k_kernels->kv_row)
        mvm_k_kernels->kv_row(kv, part, buf, n);
    else
        mvm_k_dequantize(kv, part, buf, n);
    return buf;
}

void mvm_k_attn_weights(float *scratch, size_t rows, size_t n_tok, size_t nh,
                        const uint32_t *n_pos, const float *sinks, float *lse, size_t lse_stride,
                        float *out, size_t q_stride, size_t head_dim)
{
    for (size_t i = 0; i < n_tok; i++)
        for (size_t h = 0; h < nh; h++) {
            float *x = scratch + (i * nh + h) * rows;
            const float sink = sinks ? sinks[h] : -INFINITY;
            const float l = mvm_k_kernels->softmax_sink
                                ? mvm_k_kernels->softmax_sink(x, n_pos[i], sink)
                                : mvm_k_softmax_sink(x, n_pos[i], sink);
            if (lse)
                lse[i * lse_stride + h] = l;
            memset(out + i * q_stride + h * head_dim, 0, head_dim * sizeof *out);
        }
}

void mvm_k_attn_block(const float *q, size_t q_stride, size_t n_tok, size_t n_q, size_t n_kv,
                      const uint32_t *n_pos, enum mvm_wtype kv, const void *k, const void *v,
                      size_t kv_stride, size_t head_dim, float scale, const float *sinks,
                      float *scratch, float *restrict out, float *lse)
{
    if (mvm_k_kernels->attn && mvm_k_kernels->attn(q, q_stride, n_tok, n_q, n_kv, n_pos, kv, k,
                                                   v, kv_stride, head_dim, scale, sinks,
                                                   scratch, out, lse))
        return;
    /* the portable way: the level's dot product per query and row, its axpy per weight; a
     * BF16 or block type's heads converted to F32 once a row for all their queries (as an
     * F32 cache holding its values, bit for bit) */
    const enum mvm_wtype read = in_place(kv) ? kv : MVM_W_F32;
    const mvm_k_dot_fn dot = mvm_k_kernels->dot[read];
    const mvm_k_axpy_fn axpy = mvm_k_kernels->axpy[read];
    const size_t stride = mvm_k_row_bytes(kv, kv_stride), nh = n_kv * n_q;
    const size_t hb = mvm_k_row_bytes(kv, head_dim); /* a head's part of a row */
    float head[MVM_K_ATTN_ROW_MAX];
    size_t rows = 0; /* the longest query's */
    for (size_t i = 0; i < n_tok; i++)
        rows = n_pos[i] > rows ? n_pos[i] : rows;
    /* position by position, each row used by every query that reaches it while it is in L1;
     * query (i, h)'s scores at scratch + (i * nh + h) * rows, h = g * n_q + j reading KV head
     * g = h / n_q */
    for (size_t p = 0; p < rows; p++)
        for (size_t g = 0; g < n_kv; g++) {
            const void *kg = readable(kv, (const uint8_t *)k + p * stride + g * hb, head, head_dim);
            for (size_t i = 0; i < n_tok; i++)
                for (size_t h = g * n_q; p < n_pos[i] && h < (g + 1) * n_q; h++)
                    scratch[(i * nh + h) * rows + p] =
                        dot(kg, q + i * q_stride + h * head_dim, head_dim) * scale;
        }
    mvm_k_attn_weights(scratch, rows, n_tok, nh, n_pos, sinks, lse, nh, out, q_stride, head_dim);
    for (size_t p = 0; p < rows; p++)
        for (size_t g = 0; g < n_kv; g++) {
            const void *vg = readable(kv, (const uint8_t *)v + p * stride + g * hb, head, head_dim);
            for (size_t i = 0; i < n_tok; i++)
                for (size_t h = g * n_q; p < n_pos[i] && h < (g + 1) * n_q; h++)
                    axpy(vg, scratch[(i * nh + h) * rows + p], out + i * q_stride + h * head_dim,
                         head_dim);
        }
}

void mvm_k_attn_heads(const float *q, size_t n_q, enum mvm_wtype kv, const void *k,
                      const void *v, size_t kv_stride, size_t n_pos, size_t head_dim,
                      float scale, const float *sinks, float *scratch, float *restrict out)
{
    const uint32_t n = (uint32_t)n_pos;
    mvm_k_attn_block(q, 0, 1, n_q, 1, &n, kv, k, v, kv_stride, head_dim, scale, sinks, scratch,
                     out, NULL);
}
