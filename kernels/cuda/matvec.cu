/*
 * Row-major matrix products of the engine's non-expert weights (attention, router, shared
 * expert, output) and the quantization of their activations to Q8_0 or Q8_K blocks
 * (kernels/cuda/kernels.h).
 *
 * A warp computes one output row for a tile of up to MVM_G_TILE tokens: its lanes split the
 * row (kernels/cuda/device.cuh, row_dot) and reduce with shuffles, so each weight byte
 * is read once per tile. Decode is one token: the kernel is then a matrix-vector product,
 * bound by reading the weights; where it has few rows, a block's warps share each row
 * (mvm_g_matvec_split), so that enough loads are in flight.
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

template <enum mvm_wtype T> static __device__ void matvec(const mvm_g_matvec_args &a)
{
    __shared__ float part[MVM_G_WARPS][MVM_G_TILE];
    const uint32_t warp = threadIdx.x >> 5, warps = a.split > 1 ? MVM_G_WARPS : 1;
    uint32_t r = warps > 1 ? blockIdx.x : blockIdx.x * MVM_G_WARPS + warp;
    const uint32_t tiles = mvm_g_matvec_tiles(&a), g = blockIdx.y / tiles;
    const uint32_t t0 = blockIdx.y % tiles * MVM_G_TILE;
    if (r >= a.n_out + a.n_out2 + a.n_out3) /* the whole warp (block, split): no barrier */
        return;
    mvm_dptr w = a.w, yp = a.y; /* the matrix the row is of: w's rows, then w2's, then w3's */
    uint64_t y_stride = a.y_stride;
    if (r >= a.n_out + a.n_out2)
        r -= a.n_out + a.n_out2, w = a.w3, yp = a.y3, y_stride = a.y_stride3;
    else if (r >= a.n_out)
        r -= a.n_out, w = a.w2, yp = a.y2, y_stride = a.y_stride2;
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
    row_dot<T>((const uint8_t *)w + g * a.w_head + (uint64_t)r * a.row_bytes +
                   e0 / run_elems<T>() * run_bytes<T>(),
               run_bytes<T>(), act, nt, n, acc);
    float *y = (float *)yp + g * a.y_head;
#pragma unroll
    for (int i = 0; i < MVM_G_TILE; i++)
        if ((uint32_t)i < nt) {
            const float s = warp_sum(acc[i]);
            float *out = &y[(t0 + i) * y_stride + r];
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
        float *out = &y[(t0 + threadIdx.x) * y_stride + r];
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
