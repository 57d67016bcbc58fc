/*
 * Device helpers of the engine's kernels (the .cu files of kernels/cuda): a row's dot
 * products split across the lanes of a warp, warp and block reductions. The blocks of the
 * weight types and their integer dot products are kernels/blocks.h's, which the CPU kernels
 * use too. Written so that the same source also builds as C++ on the CPU after
 * tests/cuda_emu.h, where the shuffles are emulated.
 */
#ifndef MVM_KERNELS_CUDA_DEVICE_CUH
#define MVM_KERNELS_CUDA_DEVICE_CUH

#include <math.h>
#include <stdint.h>

#include "kernels/cuda/kernels.h"

#define FULL_MASK 0xffffffffu

/* Unit u (32 elements) of a row of Q or K type T against the row's activations: the Q
 * block u, or chunk u % 8 of super-block u / 8, so that a warp's lanes can share a
 * super-block. */
template <enum mvm_wtype T>
static __device__ __forceinline__ float unit_dot(const uint8_t *w, const uint8_t *act, uint32_t u)
{
    if (mvm_k_is_q(T))
        return mvm_k_block_q(T, w + (uint64_t)u * mvm_k_block_bytes(T),
                             (const mvm_block_q8_0 *)act + u);
    const uint8_t *blk = w + (uint64_t)(u / 8) * mvm_k_block_bytes(T);
    const mvm_block_q8_K *a = (const mvm_block_q8_K *)act + u / 8;
    uint8_t s[16];
    const uint8_t *s16 = mvm_k_kscales(T, blk, s);
    int32_t sum = 0, msum = 0;
    mvm_k_kchunk(T, blk, s16, a, (int)(u % 8), &sum, &msum);
    return mvm_k_kscale(T, blk, a, sum, msum);
}

/* One block of type T as the expert's down slot holds it (32 elements of a float type, a Q
 * block, a K super-block) against its activations (floats, a Q8_0 or a Q8_K block). */
template <enum mvm_wtype T>
static __device__ __forceinline__ float block_dot(const uint8_t *w, const uint8_t *a)
{
    if (mvm_k_is_q(T))
        return mvm_k_block_q(T, w, (const mvm_block_q8_0 *)a);
    if (mvm_k_is_k(T))
        return mvm_k_kblock(T, w, (const mvm_block_q8_K *)a);
    float s = 0;
    for (int j = 0; j < MVM_QBLOCK; j++)
        s += mvm_k_elem(T, w, j) * ((const float *)a)[j];
    return s;
}

/* This lane's part of the dot products of one weight row (n elements of type T) with the
 * activations act[0..nt) (the weights' activation format): acc[i] += its terms. The lanes of
 * a warp split the row, elements (float types) or 32-element units (unit_dot) in turn, so
 * the warp reads it in contiguous runs; each weight read serves every activation of the
 * tile. */
template <enum mvm_wtype T>
static __device__ __forceinline__ void row_dot_tile(const uint8_t *w, const uint8_t *const *act,
                                                    uint32_t nt, uint32_t n, float *acc)
{
    const uint32_t lane = threadIdx.x & 31;
    if (mvm_k_block_elems(T) > 1) {
        for (uint32_t u = lane; u < n / MVM_QBLOCK; u += 32)
#pragma unroll
            for (int i = 0; i < MVM_G_TILE; i++)
                if ((uint32_t)i < nt)
                    acc[i] += unit_dot<T>(w, act[i], u);
    } else {
        for (uint32_t e = lane; e < n; e += 32) {
            const float wv = mvm_k_elem(T, w, e);
#pragma unroll
            for (int i = 0; i < MVM_G_TILE; i++)
                if ((uint32_t)i < nt)
                    acc[i] += wv * ((const float *)act[i])[e];
        }
    }
}

template <typename V> static __device__ __forceinline__ V warp_sum(V v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

/* The block's sum (or max) in every thread. Every thread of the block must call it; `tmp`
 * is MVM_G_WARPS values of shared memory, free again when it returns. */
template <typename V> static __device__ __forceinline__ V block_sum(V v, V *tmp)
{
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0)
        tmp[threadIdx.x >> 5] = v;
    __syncthreads();
    V s = 0;
    for (int w = 0; w < MVM_G_WARPS; w++)
        s += tmp[w];
    __syncthreads();
    return s;
}

static __device__ __forceinline__ float block_max(float v, float *tmp)
{
    v = warp_max(v);
    if ((threadIdx.x & 31) == 0)
        tmp[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = tmp[0];
    for (int w = 1; w < MVM_G_WARPS; w++)
        m = fmaxf(m, tmp[w]);
    __syncthreads();
    return m;
}

static __device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

#endif
