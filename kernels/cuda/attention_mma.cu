/*
 * Attention on the tensor cores (kernels/cuda/kernels.h, mvm_g_attention_mma): ops.cu's
 * mvm_g_attention's result, in the same splits and parts, combined by its combine kernel.
 *
 * Why: a kv head's rows are read by every query head of its group. ops.cu's kernel gives a
 * thread a position, each walking a row of its own, and a block at most 8 heads: for
 * DeepSeek-V3's latent rows (128 heads over one 576-wide row) the cache was read 16 times at
 * 16 GB/s on an H100 and an H200, under 1% of their bandwidth, and grouped-query attention
 * reached 9-15% (docs/perf/engine.md); at 4,096 positions DeepSeek-V3's 61 layers would
 * take ~18 ms a token. Here the scores and the weighted sum are matrix products: a block's
 * 16 rows are (query, head) pairs that share a kv head (16 heads of a query where the group
 * is 16 or more; else the whole group for 16 / group consecutive queries of a batch), 32
 * positions at a time are staged in shared memory with 16-byte loads, and mma.sync
 * m16n8k16 (F16 in, F32 sums) does 16 x 8 x 16 multiply-adds a warp instruction.
 *
 * Precision: the CUDA cores' kernel sums F32 products; F16 operands would lose 3 decimal
 * digits of the queries and the softmax weights. Each F32 operand is split into two halves,
 * hi = its F16 rounding and lo = the F16 rounding of what hi misses, and both are
 * multiplied (the cache's halves are exact): about 22 bits of each, at twice the products,
 * which the tensor cores have to spare here. The queries are scaled by a.scale before the
 * split (the CPU scales the dot product), which keeps them further from F16's range.
 *
 * A block: 4 warps, 16 rows, one of the n_split ranges of its last query's positions (the
 * others mask what they do not see: causal within a batch), 32 positions at a time:
 * 1. the tile's key rows, and value rows where they are others, into shared memory (rows
 *    past the range zeroed: a weight of 0 times a poisoned row would be NaN), each padded
 *    by 8 halves so that the fragment loads of 8 rows fall on 4 bank groups rather than
 *    one (576 halves are 9 times 32 banks);
 * 2. scores: each warp takes a quarter of the row's 16-wide steps (its query fragments kept
 *    in registers for the whole range), all 32 positions, and leaves its partial sums in
 *    shared memory; the four are added as the softmax reads them;
 * 3. softmax with a running max and sum (in double, as the CPU's), a warp per row and a
 *    lane per position; the weights as hi and lo halves;
 * 4. the weighted value rows: each warp owns a quarter of the output's 8-column groups, its
 *    sums in registers, rescaled by the new max before the tile's products.
 * mma.sync needs compute capability 8.0: the module is compute_80 and loaded only there
 * (engine/compute/gpu.c); elsewhere attention keeps to ops.cu's kernel.
 */
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/device.cuh"

#define AMMA_STEPS_WARP (MVM_G_AMMA_DIM / 16 / MVM_G_WARPS) /* a warp's 16-wide steps: 9 */
#define AMMA_GROUPS_WARP (MVM_G_AMMA_DIM / 8 / MVM_G_WARPS) /* its 8-column groups: 18 */
#define AMMA_POS_GROUPS (MVM_G_AMMA_TILE / 8)               /* 8-position groups a tile */
#define AMMA_PAD 8 /* halves after each staged row */

#ifdef __CUDACC__
/* c += a b on the warp's fragments (the PTX ISA's layout for m16n8k16 with .f16, g = lane /
 * 4, t = lane % 4; each register two halves, the lower k in the low 16 bits): a[0] A's row
 * g, k 2t and 2t + 1; a[1] row g + 8; a[2], a[3] those rows' k 2t + 8, 2t + 9; b[0] B's
 * column g, k 2t, 2t + 1; b[1] k 2t + 8, 2t + 9; c[0], c[1] row g, columns 2t, 2t + 1; c[2],
 * c[3] row g + 8. tests/cuda_emu.h emulates it so. */
static __device__ __forceinline__ void mma_f16(float c[4], const uint32_t a[4],
                                               const uint32_t b[2])
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* 16 bytes from global src into shared dst by cp.async (compute capability 8.0): no register
 * holds them on the way, so a thread has every load of its tile in flight at once; with
 * zero, dst is zeroed and src not read. cp_async_wait_all waits for the thread's copies.
 * tests/cuda_emu.h copies at once. */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, bool zero)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src),
                 "r"(zero ? 0 : 16)
                 : "memory");
#endif
}

static __device__ __forceinline__ void cp_async_wait_all(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}
#endif

/* x as hi + lo halves (above). */
static __device__ __forceinline__ void halves(float x, uint16_t *hi, uint16_t *lo)
{
    *hi = mvm_k_f2h(x);
    *lo = mvm_k_f2h(x - mvm_k_h2f(*hi));
}

/* Two floats, the first at the lower k, as the hi and lo registers of a fragment. */
static __device__ __forceinline__ void pair_halves(float x0, float x1, uint32_t *hi,
                                                   uint32_t *lo)
{
    uint16_t h0, l0, h1, l1;
    halves(x0, &h0, &l0);
    halves(x1, &h1, &l1);
    *hi = h0 | (uint32_t)h1 << 16;
    *lo = l0 | (uint32_t)l1 << 16;
}

/* A block's shared memory (16-byte aligned: cp.async's rows). */
struct alignas(16) amma_shared {
    /* the tile's key rows, then its value rows where they are others (kernels.h: rows of at
     * most MVM_G_AMMA_DIM / 2 then), as words of two halves, the lower element in the low
     * 16 bits */
    uint32_t rows[MVM_G_AMMA_TILE * (MVM_G_AMMA_DIM + AMMA_PAD) / 2];
    float sums[MVM_G_WARPS][16][MVM_G_AMMA_TILE]; /* the warps' partial scores */
    uint16_t w_hi[16][MVM_G_AMMA_TILE], w_lo[16][MVM_G_AMMA_TILE];
    float run_max[16], rescale[16];
    double run_sum[16];
    uint32_t seen[16]; /* the positions each row's query sees */
};

/* What a block's thread works on: its rows' queries and heads, its positions, and its place
 * in a warp. Row r is query i0 + r / hb, head h0 + r % hb. */
struct amma_at {
    uint32_t i0, nq, h0, hb, kv_head, split, n_split, j0, j1;
    uint32_t hd, stride, vrows; /* the row's halves; a staged row's words; the value rows' */
    uint32_t warp, g, t;        /* lane = 4 g + t */
};

/* Whether row r is a query of the batch. */
static __device__ __forceinline__ bool amma_row(const amma_at &at, uint32_t r)
{
    return r / at.hb < at.nq;
}

/* The float offset of row r's query head in a.q and a.out. */
static __device__ __forceinline__ uint64_t amma_at_row(const mvm_g_attention_args &a,
                                                       const amma_at &at, uint32_t r)
{
    return ((uint64_t)(at.i0 + r / at.hb) * a.n_head + at.h0 + r % at.hb) * at.hd;
}

/* The warp's 16-wide steps of the 16 rows' queries, scaled, as A fragments (hi and lo). */
static __device__ __forceinline__ void amma_queries(const mvm_g_attention_args &a,
                                                    const amma_at &at,
                                                    uint32_t q_hi[AMMA_STEPS_WARP][4],
                                                    uint32_t q_lo[AMMA_STEPS_WARP][4])
{
#pragma unroll
    for (uint32_t j = 0; j < AMMA_STEPS_WARP; j++) {
        const uint32_t k0 = (at.warp + j * MVM_G_WARPS) * 16;
#pragma unroll
        for (uint32_t r = 0; r < 4; r++) {
            const uint32_t row = at.g + 8 * (r & 1), k = k0 + 2 * at.t + 8 * (r >> 1);
            const bool in = k0 < at.hd && amma_row(at, row);
            const float *q = (const float *)a.q + (in ? amma_at_row(a, at, row) : 0);
            pair_halves(in ? q[k] * a.scale : 0.0f, in ? q[k + 1] * a.scale : 0.0f,
                        &q_hi[j][r], &q_lo[j][r]);
        }
    }
}

/* 1. the nt key rows from position t0, and value rows after them where they are others,
 * into shared memory, 16 bytes a copy, all of a thread's in flight at once; the rest zeroed.
 * Why cp.async: a load through registers followed by its store keeps one load a thread in
 * flight, 2 KiB a block, a few GB/s an SM at the memory's latency. */
static __device__ __forceinline__ void amma_stage(const mvm_g_attention_args &a,
                                                  const amma_at &at, amma_shared &sh,
                                                  uint32_t t0, uint32_t nt)
{
    const uint32_t chunks = at.hd / 8, n = MVM_G_AMMA_TILE * chunks * (at.vrows ? 2 : 1);
    const uint64_t kv_dim = (uint64_t)a.n_head_kv * at.hd;
    for (uint32_t u = threadIdx.x; u < n; u += blockDim.x) {
        const uint32_t v_half = u >= MVM_G_AMMA_TILE * chunks;
        const uint32_t w = u - v_half * MVM_G_AMMA_TILE * chunks, r = w / chunks, c = w % chunks;
        const uint4 *src = (const uint4 *)(v_half ? a.vc : a.kc);
        const uint64_t at_row = r < nt ? (uint64_t)(t0 + r) * kv_dim : 0;
        cp_async16(&sh.rows[v_half * at.vrows + r * at.stride + c * 4],
                   src + (at_row + (uint64_t)at.kv_head * at.hd) / 8 + c, r >= nt);
    }
    cp_async_wait_all();
}

/* 2. the warp's partial scores of the 16 rows at the tile's 32 positions, into sh.sums. */
static __device__ __forceinline__ void amma_scores(const amma_at &at, amma_shared &sh,
                                                   const uint32_t q_hi[AMMA_STEPS_WARP][4],
                                                   const uint32_t q_lo[AMMA_STEPS_WARP][4])
{
    float s[AMMA_POS_GROUPS][4];
#pragma unroll
    for (uint32_t pg = 0; pg < AMMA_POS_GROUPS; pg++)
        s[pg][0] = s[pg][1] = s[pg][2] = s[pg][3] = 0;
#pragma unroll
    for (uint32_t j = 0; j < AMMA_STEPS_WARP; j++) {
        const uint32_t k0 = (at.warp + j * MVM_G_WARPS) * 16;
        if (k0 >= at.hd)
            break;
#pragma unroll
        for (uint32_t pg = 0; pg < AMMA_POS_GROUPS; pg++) {
            const uint32_t *kr = &sh.rows[(pg * 8 + at.g) * at.stride + k0 / 2 + at.t];
            const uint32_t b[2] = {kr[0], kr[4]};
            mma_f16(s[pg], q_hi[j], b);
            mma_f16(s[pg], q_lo[j], b);
        }
    }
#pragma unroll
    for (uint32_t pg = 0; pg < AMMA_POS_GROUPS; pg++)
#pragma unroll
        for (uint32_t e = 0; e < 4; e++)
            sh.sums[at.warp][at.g + 8 * (e >> 1)][pg * 8 + 2 * at.t + (e & 1)] = s[pg][e];
}

/* 3. the weights of the tile's positions t0.. that each row's query sees, as hi and lo
 * halves, and the running max and sum: a warp a row, a lane a position. A row that sees
 * none of them (an earlier query of the batch) keeps its max, sum and outputs. */
static __device__ __forceinline__ void amma_softmax(const amma_at &at, amma_shared &sh,
                                                    uint32_t t0, uint32_t nt)
{
    const uint32_t lane = threadIdx.x & 31;
    for (uint32_t h = at.warp; h < 16; h += MVM_G_WARPS) {
        float x = -INFINITY;
        if (lane < nt && t0 + lane < sh.seen[h]) {
            x = 0;
            for (uint32_t w = 0; w < MVM_G_WARPS; w++)
                x += sh.sums[w][h][lane];
        }
        const float mx = fmaxf(sh.run_max[h], warp_max(x));
        const float e = x > -INFINITY ? expf(x - mx) : 0.0f;
        const double part = warp_sum((double)e);
        halves(e, &sh.w_hi[h][lane], &sh.w_lo[h][lane]);
        if (lane == 0) {
            /* 0 before the first tile; 1 while the row has seen nothing */
            const float r = mx > -INFINITY ? expf(sh.run_max[h] - mx) : 1.0f;
            sh.rescale[h] = r;
            sh.run_sum[h] = sh.run_sum[h] * r + part;
            sh.run_max[h] = mx;
        }
    }
}

/* 4. the warp's output groups rescaled, and the tile's nt value rows weighted into them. */
static __device__ __forceinline__ void amma_weigh(const amma_at &at, const amma_shared &sh,
                                                  uint32_t nt, float o[AMMA_GROUPS_WARP][4])
{
    const float r0 = sh.rescale[at.g], r1 = sh.rescale[at.g + 8];
#pragma unroll
    for (uint32_t c = 0; c < AMMA_GROUPS_WARP; c++)
        o[c][0] *= r0, o[c][1] *= r0, o[c][2] *= r1, o[c][3] *= r1;
    for (uint32_t kk = 0; kk < nt; kk += 16) {
        uint32_t a_hi[4], a_lo[4];
#pragma unroll
        for (uint32_t r = 0; r < 4; r++) {
            const uint32_t row = at.g + 8 * (r & 1), k = kk + 2 * at.t + 8 * (r >> 1);
            a_hi[r] = sh.w_hi[row][k] | (uint32_t)sh.w_hi[row][k + 1] << 16;
            a_lo[r] = sh.w_lo[row][k] | (uint32_t)sh.w_lo[row][k + 1] << 16;
        }
#pragma unroll
        for (uint32_t c = 0; c < AMMA_GROUPS_WARP; c++) {
            const uint32_t col0 = (at.warp + c * MVM_G_WARPS) * 8, S = at.stride;
            if (col0 >= at.hd)
                break;
            /* column col0 + g of rows kk + 2t, 2t + 1, 2t + 8, 2t + 9: a half of each */
            const uint32_t *v = &sh.rows[at.vrows + (kk + 2 * at.t) * S + (col0 + at.g) / 2];
            const uint32_t sh16 = at.g % 2 * 16;
            const uint32_t b[2] = {(v[0] >> sh16 & 0xFFFF) | (v[S] >> sh16) << 16,
                                   (v[8 * S] >> sh16 & 0xFFFF) | (v[9 * S] >> sh16) << 16};
            mma_f16(o[c], a_hi, b);
            mma_f16(o[c], a_lo, b);
        }
    }
}

/* Row r's part (ops.cu's layout): its query's split's row, its head. */
static __device__ __forceinline__ uint64_t amma_part(const mvm_g_attention_args &a,
                                                     const amma_at &at, uint32_t r)
{
    return ((uint64_t)(at.i0 + r / at.hb) * at.n_split + at.split) * a.n_head + at.h0 +
           r % at.hb;
}

/* The block's rows: their parts as ops.cu's kernel leaves them (several splits), or their
 * outputs, normalised and quantized where a.act asks. */
static __device__ __forceinline__ void amma_write(const mvm_g_attention_args &a,
                                                  const amma_at &at, const amma_shared &sh,
                                                  const float o[AMMA_GROUPS_WARP][4])
{
    const attn_parts p = attn_parts_of(a);
    if (at.n_split > 1 && threadIdx.x < 16 && amma_row(at, threadIdx.x)) {
        p.sum[amma_part(a, at, threadIdx.x)] = sh.run_sum[threadIdx.x];
        p.max[amma_part(a, at, threadIdx.x)] = sh.run_max[threadIdx.x];
    }
#pragma unroll
    for (uint32_t e = 0; e < 4; e++) {
        const uint32_t row = at.g + 8 * (e >> 1);
        if (!amma_row(at, row))
            continue;
        float *to = at.n_split > 1 ? p.out + amma_part(a, at, row) * at.hd
                                   : (float *)a.out + amma_at_row(a, at, row);
        /* one split: normalised, the sink (one more logit, no value) in the max and the
         * sum, as ops.cu's kernel does */
        float w = 1.0f, f = 1.0f;
        if (at.n_split == 1) {
            const float sink = a.sinks ? ((const float *)a.sinks)[at.h0 + row % at.hb] : -INFINITY;
            const float mx = fmaxf(sh.run_max[row], sink);
            w = expf(sh.run_max[row] - mx);
            f = (float)(1.0 / (sh.run_sum[row] * w + (double)expf(sink - mx)));
        }
#pragma unroll
        for (uint32_t c = 0; c < AMMA_GROUPS_WARP; c++) {
            const uint32_t col0 = (at.warp + c * MVM_G_WARPS) * 8;
            if (col0 >= at.hd)
                break;
            to[col0 + 2 * at.t + (e & 1)] = o[c][e] * w * f;
        }
    }
    for (uint32_t qq = 0; at.n_split == 1 && qq < at.nq; qq++) /* each query's hb heads */
        attn_quantize(a, at.i0 + qq, at.h0, (float *)a.out + amma_at_row(a, at, qq * at.hb),
                      at.hb * at.hd);
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)
    mvm_g_attention_mma(mvm_g_attention_args a)
{
    a.pos0 = mvm_g_pos0(a.pos, a.pos0);
    __shared__ amma_shared sh;
    amma_at at;
    const uint32_t group = a.n_head / a.n_head_kv;
    at.hb = mvm_g_attention_mma_heads(&a);
    const uint32_t upk = group / at.hb, qb = 16 / at.hb;
    at.hd = a.head_dim, at.stride = (at.hd + AMMA_PAD) / 2;
    at.vrows = a.vc == a.kc ? 0 : MVM_G_AMMA_TILE * at.stride;
    at.n_split = mvm_g_attention_splits(&a);
    const uint32_t unit = blockIdx.x / at.n_split;
    at.split = blockIdx.x % at.n_split, at.kv_head = unit / upk;
    at.h0 = at.kv_head * group + unit % upk * at.hb;
    at.i0 = blockIdx.y * qb;
    at.nq = a.n_tok - at.i0 < qb ? a.n_tok - at.i0 : qb;
    at.warp = threadIdx.x >> 5, at.g = (threadIdx.x & 31) >> 2, at.t = threadIdx.x & 3;
    uint32_t first; /* 0: no window (mvm_g_attention_mma_takes) */
    const uint32_t n = attn_positions(a, at.i0 + at.nq - 1, &first);
    mvm_g_attention_range(&a, n, at.split, &at.j0, &at.j1);
    uint32_t q_hi[AMMA_STEPS_WARP][4], q_lo[AMMA_STEPS_WARP][4];
    amma_queries(a, at, q_hi, q_lo);
    float o[AMMA_GROUPS_WARP][4];
#pragma unroll
    for (uint32_t c = 0; c < AMMA_GROUPS_WARP; c++)
        o[c][0] = o[c][1] = o[c][2] = o[c][3] = 0;
    if (threadIdx.x < 16) {
        sh.run_max[threadIdx.x] = -INFINITY;
        sh.run_sum[threadIdx.x] = 0;
        sh.seen[threadIdx.x] = amma_row(at, threadIdx.x)
                                   ? attn_positions(a, at.i0 + threadIdx.x / at.hb, &first)
                                   : 0;
    }
    for (uint32_t t0 = at.j0; t0 < at.j1; t0 += MVM_G_AMMA_TILE) {
        const uint32_t nt = at.j1 - t0 < MVM_G_AMMA_TILE ? at.j1 - t0 : (uint32_t)MVM_G_AMMA_TILE;
        __syncthreads(); /* the last tile's rows and weights are read by every warp */
        amma_stage(a, at, sh, t0, nt);
        __syncthreads();
        amma_scores(at, sh, q_hi, q_lo);
        __syncthreads();
        amma_softmax(at, sh, t0, nt);
        __syncthreads();
        amma_weigh(at, sh, nt, o);
    }
    __syncthreads(); /* an empty range's run_max and run_sum, set above, read below */
    amma_write(a, at, sh, o);
}
