/*
 * The routed experts of one MoE layer on the device (kernels/cuda/kernels.h): the
 * channel-major expert FFN of kernels/cpu/expert.c in three kernels, reading every expert
 * through its fixed address in the expert space, whatever backs its pages (device memory,
 * or its host home mapped for the device).
 *
 * up:   a block per (channel group, active expert); a warp per channel computes its gate and
 *       up dot products for a tile of the expert's rows, then the block writes the tile's
 *       32 intermediate activations per row (quantized to one Q8_0 block for the Q types).
 * down: a thread per output (consecutive threads read consecutive 32-element down blocks of
 *       a group) sums the groups in order, as the CPU does, for a tile of rows.
 * sum:  each token adds its experts' rows in routing order: no atomics, so a run is
 *       reproducible.
 * The split into up and down keeps the intermediate activations (n_ff per row) in memory
 * between them instead of a cross-block reduction over groups.
 */
#include "kernels/cuda/device.cuh"

#define U32(p) ((const uint32_t *)(p))

template <int T> static __device__ void expert_up(const mvm_g_expert_args &a)
{
    const uint32_t e = U32(a.active)[blockIdx.y], g = blockIdx.x;
    const uint32_t r0 = U32(a.off)[e], nr = U32(a.cnt)[e];
    const uint64_t row = mvm_g_row_bytes(T, a.n_embd);
    const uint8_t *gate = (const uint8_t *)a.experts + e * a.expert_stride +
                          g * mvm_g_group_bytes(T, a.n_embd);
    const uint8_t *up = gate + MVM_G_QBLOCK * row;
    __shared__ float hs[MVM_G_TILE][MVM_G_QBLOCK];
    for (uint32_t t0 = 0; t0 < nr; t0 += MVM_G_TILE) {
        const uint32_t nt = nr - t0 < MVM_G_TILE ? nr - t0 : MVM_G_TILE;
        const uint8_t *act[MVM_G_TILE];
#pragma unroll
        for (int i = 0; i < MVM_G_TILE; i++)
            act[i] = (const uint8_t *)a.act +
                     U32(a.row_tok)[r0 + t0 + ((uint32_t)i < nt ? i : 0)] * a.act_stride;
        for (uint32_t c = threadIdx.x >> 5; c < MVM_G_QBLOCK; c += MVM_G_WARPS) {
            float ag[MVM_G_TILE] = {0}, au[MVM_G_TILE] = {0};
            row_dot_tile<T>(gate + c * row, act, nt, a.n_embd, ag);
            row_dot_tile<T>(up + c * row, act, nt, a.n_embd, au);
#pragma unroll
            for (int i = 0; i < MVM_G_TILE; i++)
                if ((uint32_t)i < nt) {
                    const float gs = warp_sum(ag[i]), us = warp_sum(au[i]);
                    if ((threadIdx.x & 31) == 0)
                        hs[i][c] = silu(gs) * us * ((const float *)a.row_w)[r0 + t0 + i];
                }
        }
        __syncthreads();
        uint8_t *h = (uint8_t *)a.h + (uint64_t)(r0 + t0) * a.h_stride;
        if (mvm_g_is_q(T)) {
            if (threadIdx.x < nt)
                quantize_block_q8_0(hs[threadIdx.x],
                                    h + threadIdx.x * a.h_stride + g * MVM_G_Q8_BYTES);
        } else {
            for (uint32_t k = threadIdx.x; k < nt * MVM_G_QBLOCK; k += blockDim.x)
                ((float *)(h + (k / MVM_G_QBLOCK) * a.h_stride))[g * MVM_G_QBLOCK +
                                                                 k % MVM_G_QBLOCK] =
                    hs[k / MVM_G_QBLOCK][k % MVM_G_QBLOCK];
        }
        __syncthreads(); /* hs is the next tile's */
    }
}

template <int T> static __device__ void expert_down(const mvm_g_expert_args &a)
{
    const uint32_t e = U32(a.active)[blockIdx.y];
    const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= a.n_embd)
        return;
    const uint32_t r0 = U32(a.off)[e], nr = U32(a.cnt)[e];
    const uint64_t group = mvm_g_group_bytes(T, a.n_embd);
    const uint32_t bw = mvm_g_block_bytes(T);
    /* a group's 32 intermediate activations: one Q8_0 block, or 32 floats */
    const uint32_t hw = mvm_g_is_q(T) ? MVM_G_Q8_BYTES : 4 * MVM_G_QBLOCK;
    const uint8_t *down = (const uint8_t *)a.experts + e * a.expert_stride +
                          2 * MVM_G_QBLOCK * mvm_g_row_bytes(T, a.n_embd) + (uint64_t)j * bw;
    for (uint32_t t0 = 0; t0 < nr; t0 += MVM_G_TILE) {
        const uint32_t nt = nr - t0 < MVM_G_TILE ? nr - t0 : MVM_G_TILE;
        const uint8_t *h = (const uint8_t *)a.h + (uint64_t)(r0 + t0) * a.h_stride;
        float acc[MVM_G_TILE] = {0};
        for (uint32_t g = 0; g < a.n_groups; g++) {
            const uint8_t *w = down + g * group;
#pragma unroll
            for (int i = 0; i < MVM_G_TILE; i++)
                if ((uint32_t)i < nt)
                    acc[i] += block_dot<T>(w, h + i * a.h_stride + g * hw);
        }
        for (uint32_t i = 0; i < nt; i++)
            ((float *)a.out)[(uint64_t)(r0 + t0 + i) * a.n_embd + j] = acc[i];
    }
}

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

#define EXPERT(name, T)                                                                    \
    extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)                            \
        mvm_g_expert_up_##name(mvm_g_expert_args a)                                        \
    {                                                                                      \
        expert_up<T>(a);                                                                   \
    }                                                                                      \
    extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)                            \
        mvm_g_expert_down_##name(mvm_g_expert_args a)                                      \
    {                                                                                      \
        expert_down<T>(a);                                                                 \
    }
EXPERT(f32, MVM_G_F32)
EXPERT(f16, MVM_G_F16)
EXPERT(bf16, MVM_G_BF16)
EXPERT(q8_0, MVM_G_Q8_0)
EXPERT(q4_0, MVM_G_Q4_0)
#undef EXPERT
