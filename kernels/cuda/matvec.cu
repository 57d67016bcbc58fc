/*
 * Row-major matrix products of the engine's non-expert weights (attention, router, shared
 * expert, output) and the Q8_0 quantization of their activations (kernels/cuda/kernels.h).
 *
 * A warp computes one output row for a tile of up to MVM_G_TILE tokens: its lanes split the
 * row (kernels/cuda/device.cuh, row_dot_tile) and reduce with shuffles, so each weight byte
 * is read once per tile. Decode is one token: the kernel is then a matrix-vector product,
 * bound by reading the weights.
 */
#include "kernels/cuda/device.cuh"

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)
    mvm_g_quantize_q8_0(mvm_g_quantize_args a)
{
    const uint32_t b = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y;
    if (b >= a.n / MVM_G_QBLOCK)
        return;
    quantize_block_q8_0((const float *)a.x + row * a.x_stride + (uint64_t)b * MVM_G_QBLOCK,
                        (uint8_t *)a.q + row * a.q_stride + (uint64_t)b * MVM_G_Q8_BYTES);
}

template <int T> static __device__ void matvec(const mvm_g_matvec_args &a)
{
    const uint32_t r = blockIdx.x * MVM_G_WARPS + (threadIdx.x >> 5);
    const uint32_t t0 = blockIdx.y * MVM_G_TILE;
    if (r >= a.n_out) /* the whole warp: no block-wide barrier below */
        return;
    const uint32_t nt = a.n_tok - t0 < MVM_G_TILE ? a.n_tok - t0 : MVM_G_TILE;
    const uint8_t *act[MVM_G_TILE];
#pragma unroll
    for (int i = 0; i < MVM_G_TILE; i++)
        act[i] = (const uint8_t *)a.act +
                 (uint64_t)(t0 + ((uint32_t)i < nt ? i : 0)) * a.act_stride;
    float acc[MVM_G_TILE] = {0};
    row_dot_tile<T>((const uint8_t *)a.w + (uint64_t)r * a.row_bytes, act, nt, a.n_in, acc);
#pragma unroll
    for (int i = 0; i < MVM_G_TILE; i++)
        if ((uint32_t)i < nt) {
            const float s = warp_sum(acc[i]);
            if ((threadIdx.x & 31) == 0)
                ((float *)a.y)[(t0 + i) * a.y_stride + r] = s;
        }
}

#define MATVEC(name, T)                                                                    \
    extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)                            \
        mvm_g_matvec_##name(mvm_g_matvec_args a)                                           \
    {                                                                                      \
        matvec<T>(a);                                                                      \
    }
MATVEC(f32, MVM_G_F32)
MATVEC(f16, MVM_G_F16)
MATVEC(bf16, MVM_G_BF16)
MATVEC(q8_0, MVM_G_Q8_0)
MATVEC(q4_0, MVM_G_Q4_0)
#undef MATVEC
