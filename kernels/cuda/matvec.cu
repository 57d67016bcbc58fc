/*
 * Row-major matrix products of the engine's non-expert weights (attention, router, shared
 * expert, output) and the quantization of their activations to Q8_0 or Q8_K blocks
 * (kernels/cuda/kernels.h).
 *
 * A warp computes one output row for a tile of up to MVM_G_TILE tokens: its lanes split the
 * row (kernels/cuda/device.cuh, row_dot) and reduce with shuffles, so each weight byte
 * is read once per tile. Decode is one token: the kernel is then a matrix-vector product,
 * bound by reading the weights; where it has few rows, a block's warps share each row
 * (mvm_g_matvec_split), so that enough loads are in flight. F32 rows (routers) over several
 * tokens, where the weights are the small side, share the block's staged activations
 * instead (matvec_f32_tile).
 */
#include "kernels/cuda/device.cuh"

#if MVM_G_UNTYPED_KERNELS
extern "C" __global__ void __launch_bounds__(MVM_G_THREADS) mvm_g_quantize(mvm_g_quantize_args a)
{
    const enum mvm_wtype t = (enum mvm_wtype)a.type;
    const int k = mvm_k_is_k(t); /* a warp per Q8_K block, 8 lanes per Q8_0 block */
    const uint32_t b = k ? blockIdx.x * MVM_G_WARPS + (threadIdx.x >> 5)
                         : (blockIdx.x * blockDim.x + threadIdx.x) / 8;
    const uint32_t row = blockIdx.y, len = (uint32_t)mvm_k_block_elems(t), nb = a.n / len;
    if (k ? b >= nb : b / 4 * 4 >= nb) /* whole warps: the rest take part in the shuffles */
        return;
    const float *x = (const float *)a.x + row * a.x_stride + (uint64_t)b * len;
    uint8_t *q = (uint8_t *)a.q + row * a.q_stride + mvm_k_act_bytes(t, (uint64_t)b * len);
    if (k)
        warp_q8_K_block(x, (mvm_block_q8_K *)q);
    else
        group8_q8_0_block(x, (mvm_block_q8_0 *)q, b < nb);
}
#endif

/* The part of a row of n elements that warp `warp` of `warps` takes (a block a row:
 * mvm_g_matvec_split): whole runs, the last warp's to the row's end; *e0 its first
 * element, returns its length. */
template <enum mvm_wtype T>
static __device__ __forceinline__ uint32_t row_part(uint32_t n, uint32_t warp, uint32_t warps,
                                                    uint32_t *e0)
{
    const uint32_t unit = run_elems<T>(), units = n / unit;
    *e0 = units * warp / warps * unit;
    return (warp + 1 == warps ? n : units * (warp + 1) / warps * unit) - *e0;
}

#define MVM_G_F32_CHUNK 512 /* a tile's activations staged at a time, floats a token: 16 KiB */

/* Whether a product of F32 rows over several tokens takes matvec_f32_tile: its rows and
 * activations 16-byte aligned, rows of whole float4s. Decode (one token) has its own path
 * (row_dot_f32x4), and a block a row (split) is decode's. */
template <enum mvm_wtype T> /* F32; a template, so that modules of other types leave it out */
static __device__ __forceinline__ bool f32_tile_fits(const mvm_g_matvec_args &a)
{
    const uint64_t at = a.w | a.w2 | a.w3 | a.row_bytes | a.w_head | a.act | a.act_stride |
                        a.act_head;
    return a.n_tok > 1 && a.split <= 1 && a.n_in % 4 == 0 && at % 16 == 0;
}

/* matvec's F32 rows (routers) over a tile of tokens: the block's four warps share the
 * tile's activations, staged in shared memory a chunk at a time in 16-byte loads, each warp
 * streaming its row with all of a chunk's loads in flight. A warp a row read its tile's 8
 * activations itself, 9 bytes from L2 for each byte of weights, one round trip of 9 loads
 * after another (a router of 64 x 2048 over 512 tokens: 68 µs on an H200,
 * bench/gpu/ktrace.sh, session 106, against 2.4 for one token). A lane takes the elements
 * row_dot_tile's lane takes, lane + 32 i, and adds their products in the same order, so the
 * sums are that path's bit for bit. */
template <enum mvm_wtype T> /* F32 */
static __device__ void matvec_f32_tile(const mvm_g_matvec_args &a)
{
    const uint32_t C = MVM_G_F32_CHUNK, lane = threadIdx.x & 31;
    __shared__ float4 xs4[MVM_G_TILE][C / 4];
    const float(*xs)[C] = (const float(*)[C])xs4;
    uint32_t r = blockIdx.x * MVM_G_WARPS + (threadIdx.x >> 5);
    const uint32_t tiles = mvm_g_matvec_tiles(&a), g = blockIdx.y / tiles;
    const uint32_t t0 = blockIdx.y % tiles * MVM_G_TILE;
    const uint32_t nt = a.n_tok - t0 < MVM_G_TILE ? a.n_tok - t0 : MVM_G_TILE;
    const bool row = r < a.n_out + a.n_out2 + a.n_out3; /* else its warp only stages */
    const matvec_part p = matvec_part_of(a, 1, r);
    const float *wr =
        (const float *)((const uint8_t *)p.w + g * a.w_head + (uint64_t)r * a.row_bytes);
    const uint8_t *x0 = (const uint8_t *)a.act + g * a.act_head + (uint64_t)t0 * a.act_stride;
    float acc[MVM_G_TILE] = {0};
    for (uint32_t c0 = 0; c0 < a.n_in; c0 += C) {
        const uint32_t cn = a.n_in - c0 < C ? a.n_in - c0 : C; /* a multiple of 4 */
        const uint32_t per = MVM_G_TILE * C / 4 / MVM_G_THREADS; /* a thread's loads */
        float4 v[per];
        __syncthreads(); /* the chunk before is read */
#pragma unroll
        for (uint32_t i = 0; i < per; i++) {
            const uint32_t k = threadIdx.x + i * MVM_G_THREADS, t = k / (C / 4), j = k % (C / 4);
            if (t < nt && 4 * j < cn)
                v[i] = __ldg((const float4 *)(x0 + (uint64_t)t * a.act_stride + 4 * c0) + j);
        }
#pragma unroll
        for (uint32_t i = 0; i < per; i++) {
            const uint32_t k = threadIdx.x + i * MVM_G_THREADS, t = k / (C / 4), j = k % (C / 4);
            if (t < nt && 4 * j < cn)
                xs4[t][j] = v[i];
        }
        __syncthreads();
        float wv[C / 32];
#pragma unroll
        for (uint32_t i = 0; i < C / 32; i++)
            if (row && lane + 32 * i < cn)
                wv[i] = __ldg(wr + c0 + lane + 32 * i);
#pragma unroll
        for (uint32_t i = 0; i < C / 32; i++) {
            const uint32_t e = lane + 32 * i;
            if (!row || e >= cn)
                break;
#pragma unroll
            for (uint32_t t = 0; t < MVM_G_TILE; t++)
                if (t < nt)
                    acc[t] += wv[i] * xs[t][e];
        }
    }
    if (!row)
        return;
    float *y = (float *)p.y + g * a.y_head;
#pragma unroll
    for (uint32_t t = 0; t < MVM_G_TILE; t++)
        if (t < nt) {
            const float s = warp_sum(acc[t]);
            float *out = &y[(t0 + t) * p.y_stride + r];
            if (lane == 0)
                *out = a.accumulate ? *out + s : s;
        }
}

template <enum mvm_wtype T> static __device__ void matvec(const mvm_g_matvec_args &a)
{
    if (T == MVM_W_F32 && f32_tile_fits<T>(a)) {
        matvec_f32_tile<T>(a);
        return;
    }
    __shared__ float part[MVM_G_WARPS][MVM_G_TILE];
    const uint32_t warp = threadIdx.x >> 5, warps = a.split > 1 ? MVM_G_WARPS : 1;
    uint32_t r = warps > 1 ? blockIdx.x : blockIdx.x * MVM_G_WARPS + warp;
    const uint32_t tiles = mvm_g_matvec_tiles(&a), g = blockIdx.y / tiles;
    const uint32_t t0 = blockIdx.y % tiles * MVM_G_TILE;
    if (r >= a.n_out + a.n_out2 + a.n_out3) /* the whole warp (block, split): no barrier */
        return;
    const matvec_part p = matvec_part_of(a, 1, r); /* the matrix the row is of */
    uint32_t e0 = 0;
    const uint32_t n = warps > 1 ? row_part<T>(a.n_in, warp, warps, &e0) : a.n_in;
    const uint32_t nt = a.n_tok - t0 < MVM_G_TILE ? a.n_tok - t0 : MVM_G_TILE;
    const uint8_t *act[MVM_G_TILE];
#pragma unroll
    for (int i = 0; i < MVM_G_TILE; i++)
        act[i] = (const uint8_t *)a.act + g * a.act_head +
                 (uint64_t)(t0 + ((uint32_t)i < nt ? i : 0)) * a.act_stride +
                 mvm_k_act_bytes(T, e0);
    float acc[MVM_G_TILE] = {0};
    row_dot<T>((const uint8_t *)p.w + g * a.w_head + (uint64_t)r * a.row_bytes +
                   e0 / run_elems<T>() * run_bytes<T>(),
               run_bytes<T>(), act, nt, n, acc);
    float *y = (float *)p.y + g * a.y_head;
#pragma unroll
    for (int i = 0; i < MVM_G_TILE; i++)
        if ((uint32_t)i < nt) {
            const float s = warp_sum(acc[i]);
            float *out = &y[(t0 + i) * p.y_stride + r];
            if ((threadIdx.x & 31) == 0 && warps == 1)
                *out = a.accumulate ? *out + s : s;
            else if ((threadIdx.x & 31) == 0)
                part[warp][i] = s;
        }
    if (warps == 1)
        return;
    __syncthreads();
    if (threadIdx.x < nt) { /* the row's parts in warp order */
        float s = part[0][threadIdx.x];
        for (uint32_t k = 1; k < warps; k++)
            s += part[k][threadIdx.x];
        float *out = &y[(t0 + threadIdx.x) * p.y_stride + r];
        *out = a.accumulate ? *out + s : s;
    }
}

#define MATVEC(name, T)                                                                    \
    extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)                            \
        mvm_g_matvec_##name(mvm_g_matvec_args a)                                           \
    {                                                                                      \
        matvec<T>(a);                                                                      \
    }
MVM_G_TYPED_KERNELS(MATVEC)
#undef MATVEC
