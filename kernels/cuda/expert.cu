/*
 * The routed experts of one MoE layer on the device (kernels/cuda/kernels.h): the
 * channel-major expert FFN of kernels/cpu/expert.c in three kernels (four with a K-quant
 * down), reading every expert
 * through its fixed address in the expert space, whatever backs its pages (device memory,
 * or its host home mapped for the device).
 *
 * up1, down1: a decode step's (one row an expert), a warp per channel or output and
 *       active expert, reading its rows in place (expert_up1, expert_down1); between them
 *       mvm_g_expert_quantize where down reads blocks. Their _keep twins also store what
 *       they read where wstore says (read-through); apart, so that the copy's registers
 *       (ptxas, sm_90: down1 q8_0 32 without it, 72 with) leave the others' occupancy.
 * up:   a block per (32 channels, active expert); its 16 warps take the 64 weight rows
 *       (32 gate, 32 up) four each and compute their dot products for a tile of the
 *       expert's rows, then the block their unit (SwiGLU, or gpt-oss's with the group's
 *       biases) and writes the tile's 32 intermediate activations per row in down's
 *       activation format (a Q8_0 block for a Q type, floats for a float type); for a
 *       K-quant down, whose Q8_K blocks span 256 channels, as floats that
 *       mvm_g_expert_quantize then makes Q8_K blocks.
 * down: a warp per output, whose row is its block of each group's down slot: the lanes
 *       split it as they split a row-major row (kernels/cuda/device.cuh, row_dot), for
 *       a tile of rows, then add gpt-oss's down bias weighted, as the CPU does after the
 *       groups.
 * sum:  each token adds its experts' rows in routing order: no atomics, so a run is
 *       reproducible.
 * The split into up and down keeps the intermediate activations (n_ff per row) in memory
 * between them instead of a cross-block reduction over groups.
 */
#include "kernels/cuda/expert.cuh"

/* The 32 activations of each of the tile's nt rows (hs), channels c0.. of h's rows: one
 * Q8_0 block or 32 floats in down's activation format, or with a K-quant down floats at
 * c0 of hf's rows (n_ff floats each), which mvm_g_expert_quantize makes Q8_K blocks.
 * (Unused in the module of the kernels of no type: kernels.h, MVM_G_UNTYPED.) */
[[maybe_unused]] static __device__ void store_h(const mvm_g_expert_args &a,
                                                float (*hs)[MVM_QBLOCK], uint32_t r,
                                                uint32_t nt, uint32_t c0)
{
    const enum mvm_wtype down = (enum mvm_wtype)a.down;
    if (mvm_k_is_k(down)) {
        const uint64_t n_ff = (uint64_t)a.n_groups * MVM_QK_K;
        float *hf = (float *)a.hf + r * n_ff + c0;
        for (uint32_t k = threadIdx.x; k < nt * MVM_QBLOCK; k += blockDim.x)
            hf[k / MVM_QBLOCK * n_ff + k % MVM_QBLOCK] = hs[k / MVM_QBLOCK][k % MVM_QBLOCK];
        return;
    }
    uint8_t *h = (uint8_t *)a.h + (uint64_t)r * a.h_stride + mvm_k_act_bytes(down, c0);
    if (mvm_k_is_q(down)) {
        if (threadIdx.x < nt)
            mvm_k_q8_0_block(hs[threadIdx.x], (mvm_block_q8_0 *)(h + threadIdx.x * a.h_stride));
    } else {
        for (uint32_t k = threadIdx.x; k < nt * MVM_QBLOCK; k += blockDim.x)
            ((float *)(h + k / MVM_QBLOCK * a.h_stride))[k % MVM_QBLOCK] =
                hs[k / MVM_QBLOCK][k % MVM_QBLOCK];
    }
}

/* A block per 32 channels (a slice of a group) and active expert: with a K-quant down a
 * group is 256 channels, and a block per group left most of the device idle (Qwen3-30B-A3B's
 * decode: 24 blocks on 132 SMs). A decode step reads each row once, so its time is the
 * memory's latency times the rounds a warp reads in turn: with a warp per channel (16 rows
 * of 2 KiB in turn, 8 warps an SM on OLMoE) an H200 ran up at 222 GB/s of its 3,800
 * (2026-11-26); with 16 warps taking four rows each, four times the rows were in flight
 * (810 GB/s). A decode step's experts take expert_up1. */
template <enum mvm_wtype GU> static __device__ void expert_up(const mvm_g_expert_args &a)
{
    const mvm_k_expert_fmt f = {GU, (enum mvm_wtype)a.down, (enum mvm_k_glu)a.glu, 0};
    const uint32_t e = U32(a.active)[blockIdx.y], c0 = blockIdx.x * MVM_QBLOCK;
    const uint32_t r0 = U32(a.off)[e], nr = U32(a.cnt)[e];
    const uint32_t G = (uint32_t)mvm_k_expert_group_channels(f), g = c0 / G, s0 = c0 % G;
    const uint64_t row = mvm_k_row_bytes(GU, a.n_embd);
    const uint64_t group = mvm_k_expert_group_bytes(f, a.n_embd);
    const uint8_t *gate = expert_base(a, e) + g * group;
    const uint8_t *up = gate + G * row;
    __shared__ float hs[MVM_G_TILE][MVM_QBLOCK], dots[2][MVM_G_TILE][MVM_QBLOCK];
    for (uint32_t t0 = 0; t0 < nr; t0 += MVM_G_TILE) {
        const uint32_t nt = nr - t0 < MVM_G_TILE ? nr - t0 : MVM_G_TILE;
        const uint8_t *act[MVM_G_TILE];
#pragma unroll
        for (int i = 0; i < MVM_G_TILE; i++)
            act[i] = (const uint8_t *)a.act +
                     U32(a.row_tok)[r0 + t0 + ((uint32_t)i < nt ? i : 0)] * a.act_stride;
        /* rows j: gate's of channels 0..31 of the slice, then up's */
        for (uint32_t j = threadIdx.x >> 5; j < 2 * MVM_QBLOCK; j += blockDim.x >> 5) {
            const uint32_t c = j % MVM_QBLOCK, part = j / MVM_QBLOCK;
            float acc[MVM_G_TILE] = {0};
            row_dot<GU, false>((part ? up : gate) + (s0 + c) * row, run_bytes<GU>(), act, nt,
                        a.n_embd, acc);
#pragma unroll
            for (int i = 0; i < MVM_G_TILE; i++)
                if ((uint32_t)i < nt) {
                    const float s = warp_sum(acc[i]);
                    if ((threadIdx.x & 31) == 0)
                        dots[part][i][c] = s;
                }
        }
        __syncthreads();
        for (uint32_t k = threadIdx.x; k < nt * MVM_QBLOCK; k += blockDim.x) {
            const uint32_t i = k / MVM_QBLOCK, c = k % MVM_QBLOCK;
            hs[i][c] = expert_unit(a, gate + group, G, s0 + c, dots[0][i][c], dots[1][i][c],
                                   r0 + t0 + i);
        }
        __syncthreads();
        store_h(a, hs, r0 + t0, nt, c0);
        __syncthreads(); /* hs is the next tile's */
    }
}

/* Decode's up: a warp per (channel, active expert), its gate and up rows read in place in
 * one loop (kernels/cuda/device.cuh, row_dot_tile: four rounds in flight, a Q8_0 block four
 * lanes of two words), the unit by its first lane. On an H200 (bench/gpu/kernel_lab.cu,
 * 2026-11-26) this shape read OLMoE's decode up at 2.1-2.2 TB/s (16.3 µs), where a block
 * per 32 channels of 16 warps (expert_up, 128 registers, a block an SM) took 42.4 and a
 * block per channel whose eight warps split its two rows 41.4: with this little work a
 * block, the blocks' start, barrier and sums cost more than their loads. The unit's output
 * is a float: where down reads Q8_0 or Q8_K blocks, mvm_g_expert_quantize makes them from
 * hf once every channel is done. (897f782 read the two rows one after the other: 21.0 µs
 * in the engine, bench/gpu/ktrace.sh; this loop is not measured on a GPU yet.) */
template <enum mvm_wtype GU, bool KEEP>
static __device__ void expert_up1(const mvm_g_expert_args &a)
{
    if (expert_on_cpu(a))
        return;
    const mvm_k_expert_fmt f = {GU, (enum mvm_wtype)a.down, (enum mvm_k_glu)a.glu, 0};
    const uint32_t e = U32(a.active)[blockIdx.y], r = U32(a.off)[e];
    const uint32_t ch = blockIdx.x * MVM_G_WARPS + (threadIdx.x >> 5);
    const uint32_t G = (uint32_t)mvm_k_expert_group_channels(f), g = ch / G, s = ch % G;
    const uint64_t row = mvm_k_row_bytes(GU, a.n_embd);
    const uint64_t group = mvm_k_expert_group_bytes(f, a.n_embd);
    const uint8_t *gate = expert_base(a, e) + g * group;
    uint8_t *keep = KEEP ? store_of(a, e, gate) : NULL;
    if (keep) { /* read-through: the block's gate rows and up rows (and gpt-oss's biases)
                   kept, read there; the block's warps are channels s0.. of one group */
        const uint32_t s0 = s - (threadIdx.x >> 5);
        block_copy_runs(keep + s0 * row, gate + s0 * row, G * row,
                        (uint32_t)(MVM_G_WARPS * row), 2);
        const uint64_t bias = group - 2 * G * sizeof(float); /* at the group's end */
        if (a.glu == MVM_GLU_OAI && (threadIdx.x & 31) < 2) {
            const uint64_t at = bias + ((threadIdx.x & 31) * G + s) * sizeof(float);
            *(float *)(keep + at) = *(const float *)(gate + at);
        }
        __syncthreads();
        gate = keep;
    }
    const uint8_t *act = (const uint8_t *)a.act + U32(a.row_tok)[r] * a.act_stride;
    float acc[2] = {0, 0}; /* the gate row's, the up row's: one loop, G rows apart */
    row_dot_tile<GU, 1, 4, true, 2, true>(gate + s * row, run_bytes<GU>(), &act, 1, a.n_embd,
                                          acc, G * row);
    const float gs = warp_sum(acc[0]), us = warp_sum(acc[1]);
    if ((threadIdx.x & 31) != 0)
        return;
    const float v = expert_unit(a, gate + group, G, s, gs, us, r);
    if (mvm_k_block_elems(f.down) == 1)
        ((float *)((uint8_t *)a.h + (uint64_t)r * a.h_stride))[ch] = v;
    else
        ((float *)a.hf)[(uint64_t)r * a.n_groups * G + ch] = v;
}

#if MVM_G_UNTYPED_KERNELS
/* Each row's group g of hf (up's floats) in down's activation format in h: a K-quant
 * down's 256 channels as a Q8_K block, a warp per row; a Q type's 32 as a Q8_0 block, a
 * thread per row. A block per (group, active expert). */
extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)
    mvm_g_expert_quantize(mvm_g_expert_args a)
{
    if (expert_on_cpu(a))
        return;
    const uint32_t e = U32(a.active)[blockIdx.y], g = blockIdx.x;
    const uint32_t r0 = U32(a.off)[e], nr = U32(a.cnt)[e];
    if (mvm_k_is_k((enum mvm_wtype)a.down)) {
        for (uint32_t r = r0 + (threadIdx.x >> 5); r < r0 + nr; r += MVM_G_WARPS)
            warp_q8_K_block((const float *)a.hf + ((uint64_t)r * a.n_groups + g) * MVM_QK_K,
                            (mvm_block_q8_K *)((uint8_t *)a.h + (uint64_t)r * a.h_stride) + g);
        return;
    }
    for (uint32_t r = r0 + threadIdx.x; r < r0 + nr; r += blockDim.x)
        mvm_k_q8_0_block((const float *)a.hf + ((uint64_t)r * a.n_groups + g) * MVM_QBLOCK,
                         (mvm_block_q8_0 *)((uint8_t *)a.h + (uint64_t)r * a.h_stride) + g);
}
#endif

template <enum mvm_wtype DN> static __device__ void expert_down(const mvm_g_expert_args &a)
{
    const mvm_k_expert_fmt f = {(enum mvm_wtype)a.gate_up, DN, (enum mvm_k_glu)a.glu, 0};
    const uint32_t e = U32(a.active)[blockIdx.y];
    const uint32_t j = blockIdx.x * MVM_G_WARPS + (threadIdx.x >> 5);
    if (j >= a.n_embd) /* the whole warp: no block-wide barrier below */
        return;
    const uint32_t r0 = U32(a.off)[e], nr = U32(a.cnt)[e];
    const uint32_t G = (uint32_t)mvm_k_expert_group_channels(f);
    const uint64_t group = mvm_k_expert_group_bytes(f, a.n_embd);
    const uint8_t *down = down_row(a, f, e, j);
    const float b = down_bias(a, e, j);
    for (uint32_t t0 = 0; t0 < nr; t0 += MVM_G_TILE) {
        const uint32_t nt = nr - t0 < MVM_G_TILE ? nr - t0 : MVM_G_TILE;
        const uint8_t *h[MVM_G_TILE];
#pragma unroll
        for (int i = 0; i < MVM_G_TILE; i++)
            h[i] = (const uint8_t *)a.h + (uint64_t)(r0 + t0 + ((uint32_t)i < nt ? i : 0)) *
                                              a.h_stride;
        float acc[MVM_G_TILE] = {0};
        row_dot<DN, false>(down, group, h, nt, a.n_groups * G, acc); /* a gather */
#pragma unroll
        for (int i = 0; i < MVM_G_TILE; i++)
            if ((uint32_t)i < nt) {
                const float s = warp_sum(acc[i]);
                if ((threadIdx.x & 31) == 0)
                    ((float *)a.out)[(uint64_t)(r0 + t0 + i) * a.n_embd + j] =
                        a.down_bias ? s + ((const float *)a.row_w)[r0 + t0 + i] * b : s;
            }
    }
}

/* Decode's down: expert_down for one row an expert, without the tile's loop and its
 * pointers (15.6 µs against 17.8 for OLMoE's on an H200, bench/gpu/kernel_lab.cu,
 * 2026-11-26). A block per output whose warps split its row took 29.9. */
template <enum mvm_wtype DN, bool KEEP>
static __device__ void expert_down1(const mvm_g_expert_args &a)
{
    if (expert_on_cpu(a))
        return;
    const mvm_k_expert_fmt f = {(enum mvm_wtype)a.gate_up, DN, (enum mvm_k_glu)a.glu, 0};
    const uint32_t e = U32(a.active)[blockIdx.y], r = U32(a.off)[e];
    const uint32_t W = KEEP ? MVM_G_KEEP_THREADS / 32 : MVM_G_WARPS; /* outputs a block */
    const uint32_t j0 = blockIdx.x * W, j = j0 + (threadIdx.x >> 5);
    const uint32_t G = (uint32_t)mvm_k_expert_group_channels(f);
    const uint64_t group = mvm_k_expert_group_bytes(f, a.n_embd);
    const uint8_t *down = down_row(a, f, e, j), *first = down_row(a, f, e, j0);
    uint8_t *keep = KEEP ? store_of(a, e, first) : NULL;
    if (keep) { /* read-through: the block's outputs' blocks of each group kept (a run a
                   group), read there */
        const uint32_t rows = a.n_embd - j0 < W ? a.n_embd - j0 : W;
        block_copy_runs(keep, first, group, (uint32_t)(rows * mvm_k_row_bytes(f.down, G)),
                        a.n_groups);
        __syncthreads();
        down = keep + (down - first);
    }
    if (j >= a.n_embd) /* the whole warp, after the block's copy and barrier */
        return;
    const uint8_t *h = (const uint8_t *)a.h + (uint64_t)r * a.h_stride;
    float s = 0;
    row_dot<DN>(down, group, &h, 1, a.n_groups * G, &s);
    s = warp_sum(s);
    if ((threadIdx.x & 31) != 0)
        return;
    if (a.down_bias)
        s += ((const float *)a.row_w)[r] * down_bias(a, e, j);
    ((float *)a.out)[(uint64_t)r * a.n_embd + j] = s;
}

#if MVM_G_UNTYPED_KERNELS
extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)
    mvm_g_expert_sum(mvm_g_expert_sum_args a)
{
    const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (j >= a.n_embd)
        return;
    float s = 0;
    for (uint32_t k = 0; k < a.top_k; k++)
        s += ((const float *)a.out)[(uint64_t)U32(a.tok_rows)[i * a.top_k + k] * a.n_embd + j];
    ((float *)a.x)[(uint64_t)i * a.n_embd + j] += s;
}

/* NaN ranks lowest (kernels/cpu/ops.c's key). */
static __device__ __forceinline__ float rank_key(float v) { return isnan(v) ? -INFINITY : v; }

/* Whether (v, i) ranks ahead of (bv, bi): the larger key, the lower index among equals;
 * bi UINT32_MAX is no candidate. */
static __device__ __forceinline__ bool ranks_ahead(float v, uint32_t i, float bv, uint32_t bi)
{
    return i != UINT32_MAX && (bi == UINT32_MAX || v > bv || (v == bv && i < bi));
}

/* p[e] = the probabilities of the logits x[e], as kernels/cpu/ops.c's softmax and
 * policy/router.c's sigmoid compute them. */
static __device__ void route_probs(const mvm_g_route_args &a, const float *x, float *p)
{
    const uint32_t lane = threadIdx.x, E = a.n_expert;
    if (a.sigmoid) {
        for (uint32_t e = lane; e < E; e += 32)
            p[e] = 1.0f / (1.0f + expf(-x[e]));
        return;
    }
    float top = -INFINITY;
    for (uint32_t e = lane; e < E; e += 32)
        top = x[e] > top ? x[e] : top;
    top = warp_max(top);
    double part = 0;
    for (uint32_t e = lane; e < E; e += 32)
        part += p[e] = expf(x[e] - top);
    const float inv = (float)(1.0 / warp_sum(part));
    for (uint32_t e = lane; e < E; e += 32)
        p[e] *= inv;
}

/* key[e] = p[e] plus the choose bias, with the experts outside the n_group_used best groups
 * at -inf (policy/router.c, mvm_router_key). */
static __device__ void route_key(const mvm_g_route_args &a, const float *p, float *key)
{
    __shared__ float group[32];
    const uint32_t lane = threadIdx.x, E = a.n_expert, n = a.n_group;
    const float *b = (const float *)a.choose_bias;
    for (uint32_t e = lane; e < E; e += 32)
        key[e] = p[e] + (b ? b[e] : 0.0f);
    __syncthreads();
    if (n <= 1)
        return;
    const uint32_t G = E / n;
    if (lane < n) {
        float best = -INFINITY, second = -INFINITY;
        for (uint32_t e = lane * G; e < (lane + 1) * G; e++) {
            const float v = rank_key(key[e]);
            if (v > best)
                second = best, best = v;
            else if (v > second)
                second = v;
        }
        const float k = a.sigmoid ? best + second : best;
        group[lane] = isnan(k) ? -INFINITY : k;
    }
    __syncthreads();
    if (lane < n) {
        uint32_t ahead = 0;
        for (uint32_t h = 0; h < n; h++)
            ahead += group[h] > group[lane] || (group[h] == group[lane] && h < lane);
        for (uint32_t e = lane * G; ahead >= a.n_group_used && e < (lane + 1) * G; e++)
            key[e] = -INFINITY;
    }
    __syncthreads();
}

/* This lane's best not yet taken among its experts (lane, lane + 32, ...), by key.
 * bi UINT32_MAX when it has none left. */
static __device__ __forceinline__ void lane_best(const mvm_g_route_args &a, const float *key,
                                                 const uint8_t *taken, float *bv,
                                                 uint32_t *bi)
{
    *bv = -INFINITY, *bi = UINT32_MAX;
    for (uint32_t e = threadIdx.x; e < a.n_expert; e += 32)
        if (!taken[e] && ranks_ahead(rank_key(key[e]), e, *bv, *bi))
            *bv = rank_key(key[e]), *bi = e;
}

/* For lane k < K the k-th of the K best by key, 0 for the other lanes; NaN lowest, ties to
 * the lower index (mvm_k_topk's order): the best not yet taken, K times, lane k keeping round
 * k's. Each lane keeps its own best; a round is the warp's
 * argmax of those, and only the lane that held the winner looks for its next one (a scan
 * of every lane's experts a round, each round a block barrier, took most of 8.7 µs of
 * OLMoE's decode step on an H200: bench/gpu/ktrace.sh, 2026-11-26). */
static __device__ uint32_t route_topk(const mvm_g_route_args &a, const float *key,
                                      uint8_t *taken)
{
    const uint32_t lane = threadIdx.x;
    for (uint32_t e = lane; e < a.n_expert; e += 32)
        taken[e] = 0;
    __syncwarp();
    float mv;
    uint32_t mi, mine = 0;
    lane_best(a, key, taken, &mv, &mi);
    for (uint32_t k = 0; k < a.top_k; k++) {
        float bv = mv;
        uint32_t bi = mi;
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(FULL_MASK, bv, o);
            const uint32_t oi = __shfl_xor_sync(FULL_MASK, bi, o);
            if (ranks_ahead(ov, oi, bv, bi))
                bv = ov, bi = oi;
        }
        mine = k == lane ? bi : mine;
        if (bi != UINT32_MAX && bi == mi) { /* the winner was this lane's: its next best */
            taken[bi] = 1;
            lane_best(a, key, taken, &mv, &mi);
        }
    }
    return mine;
}

/* Whether this lane's choice (read at `at`) goes to the CPU (kernels.h, the CPU's share):
 * the misses in choice order, each to the CPU while its threads' running time with it ends
 * before the link's with it. Every lane walks the same choices, so all agree. */
static __device__ uint32_t route_cpu(const mvm_g_route_args &a, uint64_t at)
{
    const mvm_g_cpu_token *t = (const mvm_g_cpu_token *)a.token;
    if (!a.share || !(t->cpu_us > 0))
        return 0;
    const uint32_t lane = threadIdx.x;
    const uint32_t miss = lane < a.top_k && (a.wstore ? (at & MVM_G_ADDR_FILL) != 0 : at != 0);
    uint32_t mine = 0;
    float cpu = 0, link = 0;
    for (uint32_t j = 0; j < a.top_k; j++) {
        if (!__shfl_sync(FULL_MASK, miss, (int)j))
            continue;
        if (cpu + t->cpu_us < link + t->link_us) {
            cpu += t->cpu_us;
            mine = j == lane ? 1 : mine;
        } else {
            link += t->link_us;
        }
    }
    return mine;
}

/* The layer's share written for the host's threads (kernels.h): this lane's choice (cpu:
 * it is the CPU's, the cpu_before-th of them) and, from every lane, the router input; then
 * after a system fence the token's number, which they wait for. */
static __device__ void route_share(const mvm_g_route_args &a, uint32_t cpu, uint32_t cpu_before,
                                   uint32_t cpus, uint32_t mine, float w)
{
    mvm_g_cpu_share *s = (mvm_g_cpu_share *)a.share;
    const uint32_t lane = threadIdx.x;
    if (lane < a.top_k)
        ((int32_t *)a.on_cpu)[lane] = (int32_t)cpu;
    if (cpu) {
        s->expert[cpu_before] = (int32_t)mine;
        s->w[cpu_before] = w;
    }
    float *hidden = (float *)((uint8_t *)a.share + MVM_G_CPU_SHARE_HEAD);
    for (uint32_t i = lane; cpus && i < a.n_embd; i += 32)
        hidden[i] = ((const float *)a.hidden)[i];
    if (lane == 0)
        s->n = cpus;
    __threadfence_system();
    __syncwarp();
    if (lane == 0)
        store_release_sys(&s->token, ((const mvm_g_cpu_token *)a.token)->tok);
}

/* Lane k < K's weight of its choice, from w, its probability: over the choice's sum (in
 * choice order, as the host adds them) with norm_topk, times scale. Every lane calls it. */
static __device__ float route_weight(const mvm_g_route_args &a, float w)
{
    float sum = 0;
    for (uint32_t j = 0; j < a.top_k; j++)
        sum += __shfl_sync(FULL_MASK, w, (int)j);
    w = a.norm_topk ? w / sum : w;
    return a.scale != 1.0f ? w * a.scale : w;
}

/* Lane k < K's choice, the k-th best, and in *w its weight: the given one (given: K experts,
 * then their K weights as floats), or the router's from logits[E] by the host's rule. Every
 * lane calls it. */
static __device__ uint32_t route_choice(const mvm_g_route_args &a, const float *logits,
                                        const int32_t *given, float *w)
{
    __shared__ float p[MVM_G_ROUTE_MAX_E], key[MVM_G_ROUTE_MAX_E];
    __shared__ uint8_t taken[MVM_G_ROUTE_MAX_E];
    const uint32_t K = a.top_k, lane = threadIdx.x;
    if (given) { /* a given choice comes with its weights */
        *w = lane < K ? ((const float *)given)[K + lane] : 0.0f;
        return lane < K ? (uint32_t)given[lane] : 0;
    }
    route_probs(a, logits, p);
    __syncthreads();
    route_key(a, p, key);
    const uint32_t mine = route_topk(a, key, taken);
    *w = route_weight(a, lane < K ? p[mine] : 0.0f);
    return mine;
}

extern "C" __global__ void __launch_bounds__(32) mvm_g_route(mvm_g_route_args a)
{
    const uint32_t K = a.top_k, lane = threadIdx.x;
    /* lane k < K writes the k-th choice */
    float w;
    const uint32_t mine = route_choice(a, (const float *)a.logits, (const int32_t *)a.given, &w);
    uint32_t r = 0; /* its place among the choice in expert order */
    /* read-through: the choices read at their homes that may be kept, and this one's
     * place among them in choice order */
    const uint64_t at = a.addr && lane < K ? ((const uint64_t *)a.addr)[mine] : 0;
    const uint32_t cpu = route_cpu(a, at);
    const uint32_t fill = a.wstore && (at & MVM_G_ADDR_FILL) && !cpu ? 1 : 0;
    uint32_t before = 0, fills = 0, cpu_before = 0, cpus = 0;
    for (uint32_t j = 0; j < K; j++) {
        r += __shfl_sync(FULL_MASK, mine, (int)j) < mine;
        const uint32_t f = __shfl_sync(FULL_MASK, fill, (int)j);
        before += j < lane ? f : 0;
        fills += f;
        const uint32_t c = __shfl_sync(FULL_MASK, cpu, (int)j);
        cpu_before += j < lane ? c : 0;
        cpus += c;
    }
    uint64_t store = 0;
    if (fills) { /* every lane has read claims[0] before the first lane moves it on */
        uint32_t *claims = (uint32_t *)a.claims;
        const uint32_t taken = claims[0], i = taken + before;
        if (fill && i < a.n_pool) {
            store = ((const uint64_t *)a.pool)[i];
            claims[1 + i] = a.layer * a.n_expert + mine;
        }
        __syncwarp();
        if (lane == 0)
            claims[0] = taken + fills; /* slabs taken: min(claims[0], n_pool) */
    }
    if (lane < K) {
        ((uint32_t *)a.active)[r] = mine;
        ((uint32_t *)a.off)[mine] = r;
        ((uint32_t *)a.cnt)[mine] = 1;
        ((uint32_t *)a.row_tok)[r] = 0;
        ((float *)a.row_w)[r] = w;
        ((uint32_t *)a.tok_rows)[lane] = !cpu ? r : cpu_before ? a.zero_row : a.cpu_row;
        ((int32_t *)a.sel)[lane] = (int32_t)mine;
        ((float *)a.w)[lane] = w;
        if (a.addr)
            ((uint64_t *)a.wptr)[r] = cpu ? MVM_G_ADDR_CPU : at & ~MVM_G_ADDR_FILL;
        if (a.wstore)
            ((uint64_t *)a.wstore)[r] = store;
    }
    if (a.share)
        route_share(a, lane < K ? cpu : 0, cpu_before, cpus, mine, w);
}

/* Token blockIdx.x's choice of a prompt batch (kernels.h): mvm_g_route's, or the given one,
 * without the step's layout, which mvm_g_route_group makes for the whole batch. */
extern "C" __global__ void __launch_bounds__(32) mvm_g_route_rows(mvm_g_route_args a)
{
    const uint32_t K = a.top_k, lane = threadIdx.x, t = blockIdx.x;
    const int32_t *given = a.given ? (const int32_t *)a.given + (uint64_t)t * 2 * K : NULL;
    float w;
    const uint32_t mine =
        route_choice(a, (const float *)a.logits + (uint64_t)t * a.n_expert, given, &w);
    if (lane < K) {
        ((int32_t *)a.sel)[(uint64_t)t * K + lane] = (int32_t)mine;
        ((float *)a.w)[(uint64_t)t * K + lane] = w;
    }
}

/* A prompt batch's rows grouped by expert (kernels.h). Each warp takes a run of the choices
 * (whole rounds of 32, in order) and counts its experts' rows in it, 32 choices a round: the
 * lanes holding one expert find each other (__match_any_sync), and the lowest of them adds
 * their number. The offsets are then scanned over the experts (warp 0), each warp's count
 * turned into where its rows of that expert begin, and the warps place their rows as they
 * counted them, so that an expert's rows come in choice order. Linear in the rows: a pass
 * per expert over every row took E times as many reads, and one warp alone
 * MVM_G_GROUP_WARPS times as many rounds. */
extern "C" __global__ void __launch_bounds__(MVM_G_GROUP_WARPS * 32)
    mvm_g_route_group(mvm_g_route_group_args a)
{
    __shared__ uint32_t next[MVM_G_GROUP_WARPS][MVM_G_ROUTE_MAX_E]; /* a count, then a row */
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, E = a.n_expert;
    const uint32_t nk = a.n_tok * a.top_k;
    const uint32_t run = (nk + 32 * MVM_G_GROUP_WARPS - 1) / (32 * MVM_G_GROUP_WARPS) * 32;
    const uint32_t r_lo = warp * run, r_hi = r_lo + run < nk ? r_lo + run : nk;
    const int32_t *sel = (const int32_t *)a.sel;
    for (uint32_t e = lane; e < E; e += 32)
        next[warp][e] = 0;
    __syncthreads();
    for (int place = 0; place < 2; place++) {
        for (uint32_t r0 = r_lo; r0 < r_hi; r0 += 32) {
            const uint32_t r = r0 + lane;
            const uint32_t e = r < r_hi ? (uint32_t)sel[r] : UINT32_MAX;
            const bool ok = e < E; /* (a device that answers wrongly: no row) */
            const uint32_t peers = __match_any_sync(FULL_MASK, e);
            const uint32_t first = (uint32_t)__ffs((int)peers) - 1;
            if (place && ok) {
                const uint32_t row = next[warp][e] + __popc(peers & ((1u << lane) - 1));
                ((uint32_t *)a.row_tok)[row] = r / a.top_k;
                ((float *)a.row_w)[row] = ((const float *)a.w)[r];
                ((uint32_t *)a.tok_rows)[r] = row;
            } else if (place && r < r_hi) {
                ((uint32_t *)a.tok_rows)[r] = a.zero_row;
            }
            __syncwarp();
            if (ok && lane == first)
                next[warp][e] += __popc(peers);
            __syncwarp();
        }
        if (place)
            break;
        __syncthreads();
        if (warp == 0) { /* the experts' offsets, 32 experts a round; every expert listed */
            uint32_t carry = 0;
            for (uint32_t e0 = 0; e0 < E; e0 += 32) {
                const uint32_t e = e0 + lane;
                uint32_t total = 0;
                for (uint32_t w = 0; e < E && w < MVM_G_GROUP_WARPS; w++)
                    total += next[w][e];
                uint32_t sum = total; /* inclusive, over the round's lanes */
                for (uint32_t d = 1; d < 32; d <<= 1) {
                    const uint32_t got = __shfl_sync(FULL_MASK, sum, (int)(lane >= d ? lane - d : lane));
                    sum += lane >= d ? got : 0;
                }
                if (e < E) {
                    uint32_t at = carry + sum - total;
                    ((uint32_t *)a.off)[e] = at;
                    ((uint32_t *)a.cnt)[e] = total;
                    ((uint32_t *)a.active)[e] = e;
                    for (uint32_t w = 0; w < MVM_G_GROUP_WARPS; w++) { /* where each begins */
                        const uint32_t c = next[w][e];
                        next[w][e] = at;
                        at += c;
                    }
                }
                carry += __shfl_sync(FULL_MASK, sum, 31);
            }
        }
        __syncthreads();
    }
}

/* The CPU's rows of a decode step waited for and taken into out (kernels.h). A wait that
 * gives up marks the layer's share late and the token's words, so that the token's later
 * layers wait no more: the host fails the token. */
extern "C" __global__ void __launch_bounds__(MVM_G_THREADS) mvm_g_cpu_wait(mvm_g_cpu_wait_args a)
{
    __shared__ uint32_t any;
    mvm_g_cpu_share *s = (mvm_g_cpu_share *)a.share;
    mvm_g_cpu_token *t = (mvm_g_cpu_token *)a.token;
    if (threadIdx.x == 0) {
        uint32_t n = 0;
        for (uint32_t k = 0; k < a.top_k; k++)
            n += ((const int32_t *)a.on_cpu)[k] != 0;
        const uint64_t t0 = n ? now_ns() : 0;
        while (n && t->gave_up != t->tok && load_acquire_sys(&s->done) != t->tok)
            if (now_ns() - t0 > a.timeout_ns) {
                t->gave_up = t->tok;
                store_release_sys(&s->late, t->tok);
            }
        any = n;
    }
    __syncthreads();
    if (!any)
        return;
    /* over the bus: every thread's loads in flight at once, not one round trip each */
    const uint8_t *out = (const uint8_t *)a.share + mvm_g_cpu_share_out(a.n_embd);
    if (a.n_embd % 4 == 0 && a.row % 16 == 0)
        block_copy_runs_as<uint4>((uint8_t *)a.row, out, 0, a.n_embd * 4, 1);
    else
        block_copy_runs_as<uint32_t>((uint8_t *)a.row, out, 0, a.n_embd * 4, 1);
}
#endif

#define EXPERT(name, T)                                                                    \
    extern "C" __global__ void __launch_bounds__(MVM_G_UP_THREADS)                         \
        mvm_g_expert_up_##name(mvm_g_expert_args a)                                        \
    {                                                                                      \
        expert_up<T>(a);                                                                   \
    }                                                                                      \
    extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)                            \
        mvm_g_expert_up1_##name(mvm_g_expert_args a)                                       \
    {                                                                                      \
        expert_up1<T, false>(a);                                                           \
    }                                                                                      \
    extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)                            \
        mvm_g_expert_up1_keep_##name(mvm_g_expert_args a)                                  \
    {                                                                                      \
        expert_up1<T, true>(a);                                                            \
    }                                                                                      \
    extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)                            \
        mvm_g_expert_down_##name(mvm_g_expert_args a)                                      \
    {                                                                                      \
        expert_down<T>(a);                                                                 \
    }                                                                                      \
    extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)                            \
        mvm_g_expert_down1_##name(mvm_g_expert_args a)                                     \
    {                                                                                      \
        expert_down1<T, false>(a);                                                         \
    }                                                                                      \
    extern "C" __global__ void __launch_bounds__(MVM_G_KEEP_THREADS)                       \
        mvm_g_expert_down1_keep_##name(mvm_g_expert_args a)                                \
    {                                                                                      \
        expert_down1<T, true>(a);                                                          \
    }
MVM_G_TYPED_KERNELS(EXPERT)
#undef EXPERT
