/*
 * Device helpers of the engine's kernels (the .cu files of kernels/cuda): reading the weight types,
 * Q8_0 quantization, warp and block reductions. Written so that the same source also builds
 * as C++ on the CPU after tests/cuda_emu.h, where the conversions are the CPU kernels' own
 * (kernels/cpu/convert.c) and the shuffles are emulated.
 */
#ifndef MVM_KERNELS_CUDA_DEVICE_CUH
#define MVM_KERNELS_CUDA_DEVICE_CUH

#include <math.h>
#include <stdint.h>

#include "kernels/cuda/kernels.h"

#ifdef __CUDACC__
#include <cuda_fp16.h>
static __device__ __forceinline__ float mvm_g_h2f(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}
static __device__ __forceinline__ uint16_t mvm_g_f2h(float f)
{
    return __half_as_ushort(__float2half_rn(f));
}
static __device__ __forceinline__ float mvm_g_bf2f(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}
#else
extern "C" float mvm_fp16_to_fp32(uint16_t h);
extern "C" uint16_t mvm_fp32_to_fp16(float f);
extern "C" float mvm_bf16_to_fp32(uint16_t h);
static inline float mvm_g_h2f(uint16_t h) { return mvm_fp16_to_fp32(h); }
static inline uint16_t mvm_g_f2h(float f) { return mvm_fp32_to_fp16(f); }
static inline float mvm_g_bf2f(uint16_t h) { return mvm_bf16_to_fp32(h); }
#endif

#define FULL_MASK 0xffffffffu

/* Element i of a row of float type T. */
template <int T> static __device__ __forceinline__ float elem(const uint8_t *row, uint32_t i)
{
    if (T == MVM_G_F32)
        return ((const float *)row)[i];
    if (T == MVM_G_F16)
        return mvm_g_h2f(((const uint16_t *)row)[i]);
    return mvm_g_bf2f(((const uint16_t *)row)[i]);
}

/* One Q block of type T against one Q8_0 activation block, summed in integers and scaled
 * once (kernels/cpu/dot_scalar.c). */
template <int T>
static __device__ __forceinline__ float block_q(const uint8_t *w, const uint8_t *a)
{
    const int8_t *aq = (const int8_t *)(a + 2);
    int32_t sum = 0;
    if (T == MVM_G_Q8_0) {
        const int8_t *wq = (const int8_t *)(w + 2);
        for (int j = 0; j < MVM_G_QBLOCK; j++)
            sum += wq[j] * aq[j];
    } else {
        const uint8_t *wq = w + 2;
        for (int j = 0; j < MVM_G_QBLOCK / 2; j++)
            sum += ((wq[j] & 0x0F) - 8) * aq[j] + ((wq[j] >> 4) - 8) * aq[j + MVM_G_QBLOCK / 2];
    }
    return (float)sum * (mvm_g_h2f(*(const uint16_t *)w) * mvm_g_h2f(*(const uint16_t *)a));
}

/* One 32-element block of type T against its 32 activations (F32 or one Q8_0 block). */
template <int T>
static __device__ __forceinline__ float block_dot(const uint8_t *w, const uint8_t *a)
{
    if (mvm_g_is_q(T))
        return block_q<T>(w, a);
    float s = 0;
    for (int j = 0; j < MVM_G_QBLOCK; j++)
        s += elem<T>(w, j) * ((const float *)a)[j];
    return s;
}

/* This lane's part of the dot products of one weight row (n elements of type T) with the
 * activations act[0..nt) (the weights' activation format): acc[i] += its terms. The lanes of
 * a warp split the row, elements (float types) or blocks (Q types) in turn, so the warp reads
 * it in contiguous runs; each weight read serves every activation of the tile. */
template <int T>
static __device__ __forceinline__ void row_dot_tile(const uint8_t *w, const uint8_t *const *act,
                                                    uint32_t nt, uint32_t n, float *acc)
{
    const uint32_t lane = threadIdx.x & 31;
    if (mvm_g_is_q(T)) {
        const uint32_t bw = mvm_g_block_bytes(T);
        for (uint32_t b = lane; b < n / MVM_G_QBLOCK; b += 32)
#pragma unroll
            for (int i = 0; i < MVM_G_TILE; i++)
                if ((uint32_t)i < nt)
                    acc[i] += block_q<T>(w + (uint64_t)b * bw,
                                         act[i] + (uint64_t)b * MVM_G_Q8_BYTES);
    } else {
        for (uint32_t e = lane; e < n; e += 32) {
            const float wv = elem<T>(w, e);
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

/* llama.cpp's quantize_row_q8_0_ref on 32 floats (kernels/cpu/convert.c). */
static __device__ __forceinline__ void quantize_block_q8_0(const float *x, uint8_t *q)
{
    float amax = 0.0f;
    for (int j = 0; j < MVM_G_QBLOCK; j++)
        amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    *(uint16_t *)q = mvm_g_f2h(d);
    for (int j = 0; j < MVM_G_QBLOCK; j++)
        ((int8_t *)(q + 2))[j] = (int8_t)roundf(x[j] * id);
}

static __device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

#endif
