/*
 * The small F32 ops of the engine's forward pass on the device (kernels/cuda/kernels.h), as
 * kernels/cpu/ops.c computes them: RMSNorm with its squares summed in double (and its
 * output quantized for the next product in the same pass where asked), the rotary
 * embedding with the CPU's angle formula (kernels/rope.h), a layer's new queries, keys and
 * values made ready in one launch (QK norm, rotary embedding, the keys and values into the
 * cache: mvm_g_qk_rope, the three kernels' arithmetic), causal attention (windowed, with
 * sinks: gpt-oss) over an F32, F16 or Q8_0 KV cache whose softmax sums in double, split over
 * the positions as flash-decoding does (kernels.h), the stores into that cache, and the
 * element-wise adds (residual, bias, gated shared expert) and SwiGLU.
 */
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/device.cuh"

#define RMS_ROUND 16u /* elements a thread loads at once in mvm_g_rmsnorm (a row of 2048) */
#define SUM_ROUND 8u /* experts' rows mvm_g_rmsnorm's expert sum loads at once */
#define SUM_COLS 4u  /* ... for this many of a thread's columns */
#define ATTN_KROUND 4u /* 16-byte loads of a key row mvm_g_attention issues at once */
#define ATTN_VROUND 8u /* positions' values it loads at once */

/* The factor that normalises row x of n floats: 1 / sqrt(mean(x^2) + eps), the squares
 * summed in double. A thread's elements in rounds of RMS_ROUND, each round's loads issued
 * before any is used: one at a time, a row of 2048 floats was 16 waits on the memory a
 * loop, and the kernel took 12 µs on an H200 (bench/gpu/ktrace.sh, 2026-11-26). The same
 * order of additions wherever it runs, so the same sum. */
static __device__ __forceinline__ float rms_scale(const float *x, uint32_t n, float eps,
                                                  double *tmp)
{
    const uint32_t step = blockDim.x;
    double part = 0;
    for (uint32_t i0 = threadIdx.x; i0 < n; i0 += RMS_ROUND * step) {
        float v[RMS_ROUND];
#pragma unroll
        for (uint32_t k = 0; k < RMS_ROUND; k++)
            v[k] = i0 + k * step < n ? x[i0 + k * step] : 0.0f;
#pragma unroll
        for (uint32_t k = 0; k < RMS_ROUND; k++)
            if (i0 + k * step < n)
                part += (double)(v[k] * v[k]);
    }
    const double sum = block_sum(part, tmp);
    const float mean = (float)(sum / (double)n);
    return 1.0f / sqrtf(mean + eps);
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS) mvm_g_rmsnorm(mvm_g_rmsnorm_args a)
{
    __shared__ double tmp[MVM_G_WARPS];
    const uint32_t second = blockIdx.x >= a.n_rows; /* a row of x2's, in place */
    const uint64_t row = second ? blockIdx.x - a.n_rows : blockIdx.x;
    const float *x = (const float *)(second ? a.x2 : a.x) + row * a.x_stride;
    float *out = second ? (float *)a.x2 + row * a.x_stride : (float *)a.out + row * a.out_stride;
    float *out2 = a.out2 && !second ? (float *)a.out2 + row * a.out_stride : NULL;
    const float *w = (const float *)(second ? a.w2 : a.w);
    const uint32_t step = blockDim.x;
    if (a.sum_out && !second) { /* mvm_g_expert_sum's additions, in its order */
        const uint32_t *rows = (const uint32_t *)a.sum_rows + row * a.sum_k;
        const float *so = (const float *)a.sum_out;
        float *xs = (float *)a.x + row * a.x_stride;
        /* A round's experts (their indices loaded once) for SUM_COLS of a thread's columns,
         * every value loaded before any is added: column by column, each load behind its
         * row's index (which the store to x could have changed), a decode row of 2048 on
         * 128 threads was 32 waits on the memory. On an H200 the norm took 9.7 µs a call
         * averaged over a decode token's 33, half of them with the sum (bench/gpu/ktrace.sh,
         * 2026-11-30), 7.1 without one (profile.sh, 2026-11-28): ~12.5 µs with it. */
        for (uint32_t j0 = threadIdx.x; j0 < a.n; j0 += SUM_COLS * step) {
            /* x's columns too before any store: each store to x could be the next load's
             * address for all the compiler knows, and kept them one behind the other */
            float s[SUM_COLS] = {0}, xv[SUM_COLS];
#pragma unroll
            for (uint32_t c = 0; c < SUM_COLS; c++)
                xv[c] = j0 + c * step < a.n ? xs[j0 + c * step] : 0.0f;
            for (uint32_t k0 = 0; k0 < a.sum_k; k0 += SUM_ROUND) {
                uint64_t at[SUM_ROUND];
#pragma unroll
                for (uint32_t k = 0; k < SUM_ROUND; k++)
                    at[k] = k0 + k < a.sum_k ? (uint64_t)rows[k0 + k] * a.n : 0;
                float v[SUM_COLS][SUM_ROUND];
#pragma unroll
                for (uint32_t c = 0; c < SUM_COLS; c++)
#pragma unroll
                    for (uint32_t k = 0; k < SUM_ROUND; k++) {
                        const uint32_t j = j0 + c * step;
                        v[c][k] = k0 + k < a.sum_k && j < a.n ? so[at[k] + j] : 0.0f;
                    }
#pragma unroll
                for (uint32_t c = 0; c < SUM_COLS; c++)
#pragma unroll
                    for (uint32_t k = 0; k < SUM_ROUND; k++)
                        if (k0 + k < a.sum_k)
                            s[c] += v[c][k];
            }
#pragma unroll
            for (uint32_t c = 0; c < SUM_COLS; c++)
                if (j0 + c * step < a.n)
                    xs[j0 + c * step] = xv[c] + s[c];
        }
        __syncthreads();
    }
    const float scale = rms_scale(x, a.n, a.eps, tmp); /* (out may be x: the loads go first) */
    for (uint32_t i0 = threadIdx.x; i0 < a.n; i0 += RMS_ROUND * step) {
        float v[RMS_ROUND], g[RMS_ROUND];
#pragma unroll
        for (uint32_t k = 0; k < RMS_ROUND; k++) {
            const uint32_t i = i0 + k * step;
            v[k] = i < a.n ? x[i] : 0.0f;
            g[k] = w && i < a.n ? w[i] : 1.0f;
        }
#pragma unroll
        for (uint32_t k = 0; k < RMS_ROUND; k++) {
            const uint32_t i = i0 + k * step;
            if (i >= a.n)
                continue;
            const float o = v[k] * scale * g[k];
            out[i] = o;
            if (out2)
                out2[i] = o;
        }
    }
    if (!a.q || second)
        return;
    __syncthreads(); /* the row's floats, written by the block, read back by it */
    block_quantize_row(out, (uint8_t *)a.q + row * a.q_stride, (enum mvm_wtype)a.q_type, a.n);
}

/* Pair i of the head at p rotated for position pos (kernels/rope.h's `rope`). */
static __device__ __forceinline__ void rope_pair(const mvm_rope &r, uint32_t pos, uint32_t i,
                                                 float *p)
{
    const uint32_t half = r.n_rot / 2;
    float c, s;
    mvm_rope_cos_sin(&r, pos, i, &c, &s);
    const uint32_t i0 = r.neox ? i : 2 * i, i1 = r.neox ? i + half : 2 * i + 1;
    const float x0 = p[i0], x1 = p[i1];
    p[i0] = x0 * c - x1 * s;
    p[i1] = x0 * s + x1 * c;
}

/* x into element `at` of the KV cache's rows at dst, an F16 cache's (rounded to nearest even)
 * or an F32 one's. */
static __device__ __forceinline__ void kv_put(mvm_dptr dst, uint64_t at, float x, uint32_t t)
{
    if (t == MVM_W_F16)
        ((uint16_t *)dst)[at] = mvm_k_f2h(x);
    else
        ((float *)dst)[at] = x;
}

/* n floats x into elements at.. of the cache's rows at dst, as type t, by every thread of
 * the block (a Q8_0 cache: at and n whole blocks, quantized as the CPU quantizes them). */
static __device__ __forceinline__ void kv_put_row(mvm_dptr dst, uint64_t at, const float *x,
                                                  uint32_t n, uint32_t t)
{
    if (t == MVM_W_Q8_0) {
        block_quantize_row(x, (uint8_t *)dst + mvm_k_row_bytes(MVM_W_Q8_0, at), MVM_W_Q8_0, n);
        return;
    }
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
        kv_put(dst, at + i, x[i], t);
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS) mvm_g_rope(mvm_g_rope_args a)
{
    const uint32_t half = a.rope.n_rot / 2;
    const uint32_t u = blockIdx.x * blockDim.x + threadIdx.x, tok = blockIdx.y;
    if (u >= (a.n_heads + a.n_heads2) * half)
        return;
    const uint32_t h = u / half;
    float *p = h < a.n_heads ? (float *)a.x + tok * a.stride + (uint64_t)h * a.head_dim
                             : (float *)a.x2 + tok * a.stride2 +
                                   (uint64_t)(h - a.n_heads) * a.head_dim2;
    rope_pair(a.rope, mvm_g_pos0(a.pos, a.pos0) + tok, u % half, p);
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS) mvm_g_qk_rope(mvm_g_qk_rope_args a)
{
    __shared__ float head[MVM_G_QK_HEAD_MAX];
    __shared__ double tmp[MVM_G_WARPS];
    const uint32_t hd = a.head_dim, tok = blockIdx.y, b = blockIdx.x;
    const uint64_t at = ((uint64_t)mvm_g_pos0(a.pos, 0) + tok) * a.cache_stride;
    if (b >= a.n_head + a.n_head_kv) { /* a head of the values, as they are */
        const uint32_t off = (b - a.n_head - a.n_head_kv) * hd;
        kv_put_row(a.vc, at + off, (const float *)a.v + tok * a.kv_stride + off, hd, a.kv_type);
        return;
    }
    const uint32_t key = b >= a.n_head, unit = key ? b - a.n_head : b;
    const float *row = (const float *)(key ? a.k : a.q_in) +
                       tok * (key ? a.kv_stride : a.q_stride);
    const float *x = row + (uint64_t)unit * hd;
    const float *w = (const float *)(key ? a.k_norm : a.q_norm);
    /* normed as mvm_g_rmsnorm norms a row (_ROWS: the whole row's squares, this head's
     * weights of the row's; _HEAD: the head's, every head's weights the same), into the
     * block's copy of its head */
    float scale = 1.0f;
    if (a.norm == MVM_G_QK_NORM_ROWS) {
        scale = rms_scale(row, (key ? a.n_head_kv : a.n_head) * hd, a.eps, tmp);
        w += (uint64_t)unit * hd;
    } else if (a.norm == MVM_G_QK_NORM_HEAD) {
        scale = rms_scale(x, hd, a.eps, tmp);
    }
    for (uint32_t i = threadIdx.x; i < hd; i += blockDim.x)
        head[i] = a.norm ? x[i] * scale * w[i] : x[i];
    __syncthreads();
    const uint32_t half = a.rope.n_rot / 2, pos = mvm_g_pos0(a.pos, a.pos0) + tok;
    for (uint32_t u = threadIdx.x; u < half; u += blockDim.x)
        rope_pair(a.rope, pos, u, head);
    __syncthreads();
    if (key) {
        kv_put_row(a.kc, at + (uint64_t)unit * hd, head, hd, a.kv_type);
        return;
    }
    for (uint32_t i = threadIdx.x; i < hd; i += blockDim.x)
        ((float *)a.q)[tok * a.q_stride + (uint64_t)unit * hd + i] = head[i];
}

/* Element i of the KV cache's rows at p, of type t: F32, F16, or Q8_0 (its block's scale
 * times its quant, the value mvm_k_dequantize gives). */
static __device__ __forceinline__ float kv_elem(mvm_dptr p, uint64_t i, uint32_t t)
{
    if (t == MVM_W_Q8_0) {
        const mvm_block_q8_0 *b = (const mvm_block_q8_0 *)p + i / MVM_QBLOCK;
        return mvm_k_h2f(b->d) * (float)b->qs[i % MVM_QBLOCK];
    }
    return t == MVM_W_F16 ? mvm_k_h2f(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* acc[h] += the 8 halves of v times head h's query floats from d on, in order. */
static __device__ __forceinline__ void attn_dot8(uint4 v, const float *qs, uint32_t hd,
                                                 uint32_t d, uint32_t nh, float *acc)
{
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (uint32_t j = 0; j < 8; j++) {
        const float kd = mvm_k_h2f((uint16_t)(w[j / 2] >> (16 * (j % 2))));
#pragma unroll
        for (uint32_t h = 0; h < MVM_G_ATTN_HEADS; h++)
            if (h < nh)
                acc[h] += kd * qs[h * hd + d + j];
    }
}

/* acc[h] += the 32 values of the Q8_0 block at p times head h's query floats from d on, in
 * order, each value its scale times its quant as kv_elem's. A block is 34 bytes, only 2-byte
 * aligned: its scale and quants come in 9 aligned words (the 16 bits before or after it in
 * the first or last one never used), each word of 4 quants cut from two by one shift, not
 * 17 loads of 2 bytes. */
static __device__ __forceinline__ void attn_dot_q8_0(const uint8_t *p, const float *qs,
                                                     uint32_t hd, uint32_t d, uint32_t nh,
                                                     float *acc)
{
    const uint32_t sh = (uint32_t)((uintptr_t)p & 2) * 8; /* 0, or 16 where p is 4k + 2 */
    const uint32_t *w = (const uint32_t *)(p - sh / 8);
    uint32_t v[9];
#pragma unroll
    for (uint32_t k = 0; k < 8; k++)
        v[k] = w[k];
    /* the last word: past the block where it is 4-byte aligned, so its last 2 quants alone */
    v[8] = sh ? w[8] : ((const uint16_t *)p)[16];
    const float scale = mvm_k_h2f((uint16_t)(v[0] >> sh));
#pragma unroll
    for (uint32_t k = 0; k < 8; k++) {
        const uint32_t q4 = (uint32_t)(((uint64_t)v[k + 1] << 32 | v[k]) >> (16 + sh));
#pragma unroll
        for (uint32_t j = 0; j < 4; j++) {
            const float kd = scale * (float)(int8_t)(q4 >> 8 * j);
#pragma unroll
            for (uint32_t h = 0; h < MVM_G_ATTN_HEADS; h++)
                if (h < nh)
                    acc[h] += kd * qs[h * hd + d + 4 * k + j];
        }
    }
}

/* The scores of a tile of nt positions from kv row offset k0: a thread per position, its
 * row read once for all the unit's nh heads (the queries' floats are the same for every
 * thread: shared memory broadcasts them). */
static __device__ __forceinline__ void attn_tile_scores(const mvm_g_attention_args &a,
                                                        const float *qs,
                                                        float (*sc)[MVM_G_ATTN_TILE],
                                                        uint64_t k0, uint32_t nt, uint32_t nh)
{
    const uint32_t hd = a.head_dim, kv_dim = a.n_head_kv * hd;
    if (threadIdx.x >= nt)
        return;
    const uint64_t k = k0 + (uint64_t)threadIdx.x * kv_dim;
    float acc[MVM_G_ATTN_HEADS] = {0};
    uint32_t d = 0;
    const uint4 *kr = (const uint4 *)((const uint16_t *)a.kc + k);
    if (a.kv_type == MVM_W_Q8_0 && k % MVM_QBLOCK == 0) {
        const uint8_t *row = (const uint8_t *)a.kc + mvm_k_row_bytes(MVM_W_Q8_0, k);
        for (; d + MVM_QBLOCK <= hd; d += MVM_QBLOCK)
            attn_dot_q8_0(row + mvm_k_row_bytes(MVM_W_Q8_0, d), qs, hd, d, nh, acc);
    } else if (a.kv_type == MVM_W_F16 && (uintptr_t)kr % 16 == 0) {
        /* 8 halves a 16-byte load, in the same order: a thread's row of 128 was 128 loads
         * of 2 bytes, each a round trip to the cache; and ATTN_KROUND of those loads
         * issued before any is used, as the heads' branches between them kept the
         * compiler from moving a load ahead (one round trip each, 16 a row of 128) */
        for (; d + 8 * ATTN_KROUND <= hd; d += 8 * ATTN_KROUND) {
            uint4 v[ATTN_KROUND];
#pragma unroll
            for (uint32_t r = 0; r < ATTN_KROUND; r++)
                v[r] = kr[d / 8 + r];
#pragma unroll
            for (uint32_t r = 0; r < ATTN_KROUND; r++)
                attn_dot8(v[r], qs, hd, d + 8 * r, nh, acc);
        }
        for (; d + 8 <= hd; d += 8)
            attn_dot8(kr[d / 8], qs, hd, d, nh, acc);
    }
    for (; d < hd; d++) {
        const float kd = kv_elem(a.kc, k + d, a.kv_type);
#pragma unroll
        for (uint32_t h = 0; h < MVM_G_ATTN_HEADS; h++)
            if (h < nh)
                acc[h] += kd * qs[h * hd + d];
    }
#pragma unroll
    for (uint32_t h = 0; h < MVM_G_ATTN_HEADS; h++)
        if (h < nh)
            sc[h][threadIdx.x] = acc[h] * a.scale;
}

/* The tile's scores made weights against the running max, and the running max and sum
 * updated (rescale: the factor the heads' outputs so far take): a warp per head. */
static __device__ __forceinline__ void attn_tile_softmax(float (*sc)[MVM_G_ATTN_TILE],
                                                         float *run_max, double *run_sum,
                                                         float *rescale, uint32_t nt,
                                                         uint32_t nh)
{
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (uint32_t h = warp; h < nh; h += MVM_G_WARPS) {
        float mx = run_max[h];
        for (uint32_t t = lane; t < nt; t += 32)
            mx = fmaxf(mx, sc[h][t]);
        mx = warp_max(mx);
        double part = 0;
        for (uint32_t t = lane; t < nt; t += 32) {
            const float e = expf(sc[h][t] - mx);
            sc[h][t] = e;
            part += e;
        }
        part = warp_sum(part);
        if (lane == 0) {
            const float r = expf(run_max[h] - mx); /* 0 before the first tile */
            rescale[h] = r;
            run_sum[h] = run_sum[h] * r + part;
            run_max[h] = mx;
        }
    }
}

/* The outputs os rescaled and the tile's weighted values added: a thread per column, each
 * value read once for all the heads. */
static __device__ __forceinline__ void attn_tile_values(const mvm_g_attention_args &a,
                                                        float *os,
                                                        float (*sc)[MVM_G_ATTN_TILE],
                                                        const float *rescale, uint64_t k0,
                                                        uint32_t nt, uint32_t nh)
{
    const uint32_t hd = a.head_dim, kv_dim = a.n_head_kv * hd;
    for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float o[MVM_G_ATTN_HEADS];
#pragma unroll
        for (uint32_t h = 0; h < MVM_G_ATTN_HEADS; h++)
            o[h] = h < nh ? os[h * hd + d] * rescale[h] : 0;
        /* ATTN_VROUND positions' values loaded before any is used: one at a time, each
         * load behind the heads' branches, a tile of 128 positions was 128 round trips */
        for (uint32_t t0 = 0; t0 < nt; t0 += ATTN_VROUND) {
            float v[ATTN_VROUND];
#pragma unroll
            for (uint32_t u = 0; u < ATTN_VROUND; u++)
                v[u] = t0 + u < nt
                           ? kv_elem(a.vc, k0 + (uint64_t)(t0 + u) * kv_dim + d, a.kv_type)
                           : 0.0f;
#pragma unroll
            for (uint32_t u = 0; u < ATTN_VROUND; u++)
#pragma unroll
                for (uint32_t h = 0; h < MVM_G_ATTN_HEADS; h++)
                    if (h < nh && t0 + u < nt)
                        o[h] += sc[h][t0 + u] * v[u];
        }
#pragma unroll
        for (uint32_t h = 0; h < MVM_G_ATTN_HEADS; h++)
            if (h < nh)
                os[h * hd + d] = o[h];
    }
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)
    mvm_g_attention(mvm_g_attention_args a)
{
    a.pos0 = mvm_g_pos0(a.pos, a.pos0);
    __shared__ float qs[MVM_G_ATTN_QFLOATS], os[MVM_G_ATTN_QFLOATS];
    __shared__ float sc[MVM_G_ATTN_HEADS][MVM_G_ATTN_TILE];
    __shared__ float run_max[MVM_G_ATTN_HEADS], rescale[MVM_G_ATTN_HEADS];
    __shared__ double run_sum[MVM_G_ATTN_HEADS];
    const uint32_t hd = a.head_dim, group = a.n_head / a.n_head_kv;
    const uint32_t hb = mvm_g_attention_unit_heads(a.n_head, a.n_head_kv, hd);
    const uint32_t upk = mvm_g_attention_units(a.n_head, a.n_head_kv, hd) / a.n_head_kv;
    const uint32_t n_split = mvm_g_attention_splits(&a);
    const uint32_t unit = blockIdx.x / n_split, split = blockIdx.x % n_split, i = blockIdx.y;
    const uint32_t kv_head = unit / upk, h0 = kv_head * group + unit % upk * hb;
    const uint32_t nh = (kv_head + 1) * group - h0 < hb ? (kv_head + 1) * group - h0 : hb;
    const uint32_t q_dim = a.n_head * hd, kv_dim = a.n_head_kv * hd;
    uint32_t first, j0, j1;
    const uint32_t n = attn_positions(a, i, &first);
    /* the kv head's columns of the first position's row: the rest follow it */
    const uint64_t kvo = (uint64_t)(a.ring ? first % a.ring : first) * kv_dim +
                         (uint64_t)kv_head * hd;
    mvm_g_attention_range(&a, n, split, &j0, &j1);
    for (uint32_t e = threadIdx.x; e < nh * hd; e += blockDim.x) {
        qs[e] = ((const float *)a.q)[(uint64_t)i * q_dim + (uint64_t)h0 * hd + e];
        os[e] = 0;
    }
    if (threadIdx.x < MVM_G_ATTN_HEADS) {
        run_max[threadIdx.x] = -INFINITY;
        run_sum[threadIdx.x] = 0;
    }
    __syncthreads();
    for (uint32_t t0 = j0; t0 < j1; t0 += MVM_G_ATTN_TILE) {
        const uint32_t nt = j1 - t0 < MVM_G_ATTN_TILE ? j1 - t0 : (uint32_t)MVM_G_ATTN_TILE;
        attn_tile_scores(a, qs, sc, kvo + (uint64_t)t0 * kv_dim, nt, nh);
        __syncthreads();
        attn_tile_softmax(sc, run_max, run_sum, rescale, nt, nh);
        __syncthreads();
        attn_tile_values(a, os, sc, rescale, kvo + (uint64_t)t0 * kv_dim, nt, nh);
        __syncthreads(); /* sc is the next tile's */
    }
    if (n_split > 1) {
        const attn_parts p = attn_parts_of(a);
        const uint64_t r = ((uint64_t)i * n_split + split) * a.n_head + h0;
        for (uint32_t e = threadIdx.x; e < nh * hd; e += blockDim.x)
            p.out[r * hd + e] = os[e];
        if (threadIdx.x < nh) {
            p.sum[r + threadIdx.x] = run_sum[threadIdx.x];
            p.max[r + threadIdx.x] = run_max[threadIdx.x];
        }
        return;
    }
    /* one split: the output, the sink (one more logit, no value) in the max and the sum;
     * each head's factors once, in rescale and inv_total */
    __shared__ float inv_total[MVM_G_ATTN_HEADS];
    if (threadIdx.x < nh) {
        const uint32_t h = threadIdx.x;
        const float sink = a.sinks ? ((const float *)a.sinks)[h0 + h] : -INFINITY;
        const float mx = fmaxf(run_max[h], sink), w = expf(run_max[h] - mx);
        rescale[h] = w;
        inv_total[h] = (float)(1.0 / (run_sum[h] * w + (double)expf(sink - mx)));
    }
    __syncthreads();
    float *out = (float *)a.out + (uint64_t)i * q_dim + (uint64_t)h0 * hd;
    for (uint32_t e = threadIdx.x; e < nh * hd; e += blockDim.x)
        out[e] = os[e] * rescale[e / hd] * inv_total[e / hd];
    attn_quantize(a, i, h0, out, nh * hd);
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)
    mvm_g_attention_combine(mvm_g_attention_args a)
{
    a.pos0 = mvm_g_pos0(a.pos, a.pos0);
    const uint32_t h = blockIdx.x, i = blockIdx.y, hd = a.head_dim;
    const uint32_t n_split = mvm_g_attention_splits(&a);
    const attn_parts p = attn_parts_of(a);
    const uint64_t r0 = (uint64_t)i * n_split * a.n_head + h;
    /* each split's weight once (n_split <= MVM_G_ATTN_BLOCKS: kernels.h) */
    __shared__ float weight[MVM_G_ATTN_BLOCKS];
    __shared__ double dsum_tmp[MVM_G_WARPS];
    const float sink = a.sinks ? ((const float *)a.sinks)[h] : -INFINITY;
    /* a split without positions (an early query of a batch) left the max -inf and the sum
     * and output 0: it adds nothing */
    float mx = sink;
    for (uint32_t c = 0; c < n_split; c++)
        mx = fmaxf(mx, p.max[r0 + (uint64_t)c * a.n_head]);
    double part = threadIdx.x == 0 ? (double)expf(sink - mx) : 0;
    for (uint32_t c = threadIdx.x; c < n_split; c += blockDim.x) {
        const uint64_t r = r0 + (uint64_t)c * a.n_head;
        weight[c] = expf(p.max[r] - mx);
        part += p.sum[r] * weight[c];
    }
    /* block_sum's barrier also makes every weight visible to the whole block */
    const float inv = (float)(1.0 / block_sum(part, dsum_tmp));
    float *out = (float *)a.out + (uint64_t)i * a.n_head * hd + (uint64_t)h * hd;
    for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0;
        for (uint32_t c = 0; c < n_split; c++)
            o += p.out[(r0 + (uint64_t)c * a.n_head) * hd + d] * weight[c];
        out[d] = o * inv;
    }
    attn_quantize(a, i, h, out, hd);
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)
    mvm_g_store_rows(mvm_g_store_rows_args a)
{
    const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x, second = blockIdx.y >= a.n_rows;
    const uint32_t i = second ? blockIdx.y - a.n_rows : blockIdx.y;
    const mvm_dptr src = second ? a.src2 : a.src, dst = second ? a.dst2 : a.dst;
    const float *x = (const float *)src + i * a.src_stride;
    const uint64_t at = ((uint64_t)mvm_g_pos0(a.pos, 0) + i) * a.dst_stride;
    if (a.type == MVM_W_Q8_0) { /* 8 threads a block (the shape's), every lane a call */
        const uint32_t b = j / 8;
        group8_q8_0_block(x + (uint64_t)b * MVM_QBLOCK,
                          (mvm_block_q8_0 *)dst + at / MVM_QBLOCK + b, b < a.n / MVM_QBLOCK);
        return;
    }
    if (j < a.n)
        kv_put(dst, at + j, x[j], a.type);
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS) mvm_g_add(mvm_g_add_args a)
{
    const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (j >= a.n)
        return;
    const float g = a.gate    ? 1.0f / (1.0f + expf(-((const float *)a.gate)[i]))
                    : a.scale ? ((const float *)a.scale)[i]
                              : 1.0f;
    const float y = ((const float *)a.y)[i * a.y_stride + j];
    ((float *)a.x)[(uint64_t)i * a.n + j] += a.gate || a.scale ? g * y : y;
}

/* x[i][j] = silu(x[i][j]) * y[i][j], y[i] at y + i * y_stride (mvm_g_add_args; no gate). */
extern "C" __global__ void __launch_bounds__(MVM_G_THREADS) mvm_g_swiglu(mvm_g_add_args a)
{
    const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (j >= a.n)
        return;
    float *x = (float *)a.x + (uint64_t)i * a.n + j;
    *x = silu(*x) * ((const float *)a.y)[i * a.y_stride + j];
}
