/*
 * Device helpers of the engine's kernels (the .cu files of kernels/cuda): a row's dot
 * products split across the lanes of a warp, warp and block reductions. The blocks of the
 * weight types and their integer dot products are kernels/blocks.h's, which the CPU kernels
 * use too. Written so that the same source also builds as C++ on the CPU after
 * tests/cuda_emu.h, where the shuffles are emulated.
 */
#ifndef MVM_KERNELS_CUDA_DEVICE_CUH
#define MVM_KERNELS_CUDA_DEVICE_CUH

#include <assert.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/kernels.h"

#define FULL_MASK 0xffffffffu

/* Four bytes at 2-byte aligned p as one word. The 32-element Q blocks are 18 to 34 bytes,
 * so their quants are only 2-byte aligned, and a misaligned 32-bit load faults on a GPU:
 * two 16-bit loads instead (the emulated build checks the alignment the GPU needs). */
static __device__ __forceinline__ int word_at(const uint8_t *p)
{
#ifndef __CUDA_ARCH__
    assert(((uintptr_t)p & 1) == 0);
#endif
    const uint16_t *h = (const uint16_t *)p;
    return (int)((uint32_t)h[0] | (uint32_t)h[1] << 16);
}

/* Bits 0..3 of b as bit 4 of bytes 0..3: a Q5 type's fifth bits of four quants. */
static __device__ __forceinline__ int fifth_bits(uint32_t b)
{
    return (int)((b << 4 & 0x10u) | (b << 11 & 0x1000u) | (b << 18 & 0x100000u) |
                 (b << 25 & 0x10000000u));
}

/* One Q block (type T) against one Q8_0 activation block: kernels/blocks.h's
 * mvm_k_block_q, computed a word at a time. The shared code reads a byte per quant and sums
 * the activations even where the type has no use for the sum; here four quants are one
 * load pair and one __dp4a (nibbles unpacked four at a time, Q5's fifth bits added by
 * shifts), and the activations' sum (also a __dp4a) only for the types with a min or a
 * bias. The same integer sums and the same float formula: the CPU's result bit for bit.
 * The table types (IQ4_NL, MXFP4: a lookup per nibble) keep the shared code. */
template <enum mvm_wtype T>
static __device__ __forceinline__ float block_q(const uint8_t *blk, const mvm_block_q8_0 *a)
{
    if (mvm_k_is_table(T))
        return mvm_k_block_q(T, blk, a);
    const mvm_k_qlayout L = mvm_k_qlay(T);
    const uint8_t *aq = (const uint8_t *)a->qs;
    int sum = 0, asum = 0;
    if (T == MVM_W_Q8_0) {
#pragma unroll
        for (int j = 0; j < MVM_QBLOCK; j += 4)
            sum = __dp4a(word_at(blk + L.qs + j), word_at(aq + j), sum);
    } else {
        const uint32_t qh = L.qh ? (uint32_t)word_at(blk + L.qh) : 0;
#pragma unroll
        for (int j = 0; j < MVM_QBLOCK / 2; j += 4) {
            const int q = word_at(blk + L.qs + j), a_lo = word_at(aq + j);
            const int a_hi = word_at(aq + j + MVM_QBLOCK / 2);
            int lo = q & 0x0F0F0F0F, hi = q >> 4 & 0x0F0F0F0F;
            if (L.qh) {
                lo |= fifth_bits(qh >> j);
                hi |= fifth_bits(qh >> (j + MVM_QBLOCK / 2));
            }
            sum = __dp4a(hi, a_hi, __dp4a(lo, a_lo, sum));
            if (L.m || L.bias)
                asum = __dp4a(0x01010101, a_hi, __dp4a(0x01010101, a_lo, asum));
        }
        sum -= L.bias * asum;
    }
    /* the f16 scale at 0 and min at L.m, as 16-bit loads (the shared code's memcpy is two
     * byte loads) */
    const uint16_t *h = (const uint16_t *)blk;
    return mvm_k_qfloat(L.m != 0, sum, asum, mvm_k_h2f(h[0]), L.m ? mvm_k_h2f(h[L.m / 2]) : 0,
                        mvm_k_h2f(a->d));
}

/* Chunk c (< 8) of super-block blk of K type T against its Q8_K block: kernels/blocks.h's
 * mvm_k_kchunk a word at a time for Q4_K, Q5_K and Q6_K (the types of a Q4_K_M file): the
 * nibbles, fifth and high bits of four quants unpacked by shifts and masks, one __dp4a. The
 * same integer sums. The other K types keep the shared code. */
template <enum mvm_wtype T>
static __device__ __forceinline__ void kchunk(const uint8_t *blk, const uint8_t *s16,
                                              const mvm_block_q8_K *a, int c, int32_t *sum,
                                              int32_t *msum)
{
    const uint8_t *aq = (const uint8_t *)(a->qs + 32 * c);
    if (T == MVM_W_Q4_K || T == MVM_W_Q5_K) {
        const mvm_block_q4_K *x4 = (const mvm_block_q4_K *)blk;
        const mvm_block_q5_K *x5 = (const mvm_block_q5_K *)blk;
        const uint8_t *qs = (T == MVM_W_Q5_K ? x5->qs : x4->qs) + 32 * (c / 2);
        const int shift = 4 * (c % 2);
        int s = 0;
#pragma unroll
        for (int l = 0; l < 32; l += 4) {
            int v = word_at(qs + l) >> shift & 0x0F0F0F0F;
            if (T == MVM_W_Q5_K)
                v |= (word_at(x5->qh + l) >> c & 0x01010101) << 4;
            s = __dp4a(v, word_at(aq + l), s);
        }
        uint8_t sc, m;
        mvm_k_scale_min(x4->scales, c, &sc, &m); /* at the same offset in both */
        *sum += sc * s;
        *msum += m * (a->bsums[2 * c] + a->bsums[2 * c + 1]);
    } else if (T == MVM_W_Q6_K) {
        const mvm_block_q6_K *x = (const mvm_block_q6_K *)blk;
        const int h = c / 4, k = c % 4;
        const uint8_t *ql = x->ql + 64 * h + 32 * (k & 1), *qh = x->qh + 32 * h;
        const int shift = 4 * (k >> 1);
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int s = 0;
#pragma unroll
            for (int l = 16 * half; l < 16 * half + 16; l += 4) {
                const int v = (word_at(ql + l) >> shift & 0x0F0F0F0F) |
                              (word_at(qh + l) >> (2 * k) & 0x03030303) << 4;
                s = __dp4a(v, word_at(aq + l), s);
            }
            *sum += x->scales[2 * c + half] * (s - 32 * a->bsums[2 * c + half]);
        }
    } else {
        mvm_k_kchunk(T, blk, s16, a, c, sum, msum);
    }
}

/* Chunks [c0, c1) of super-block blk of K type T against its Q8_K block, scaled:
 * kernels/blocks.h's mvm_k_kblock (all eight chunks) with kchunk. */
template <enum mvm_wtype T>
static __device__ __forceinline__ float kchunks(const uint8_t *blk, const mvm_block_q8_K *a,
                                                int c0, int c1)
{
    uint8_t s[16];
    const uint8_t *s16 = mvm_k_kscales(T, blk, s);
    int32_t sum = 0, msum = 0;
#pragma unroll
    for (int c = c0; c < c1; c++)
        kchunk<T>(blk, s16, a, c, &sum, &msum);
    return mvm_k_kscale(T, blk, a, sum, msum);
}

/* Unit u (32 elements) of a row of Q or K type T against the row's activations: the Q
 * block u, or chunk u % 8 of super-block u / 8, so that a warp's lanes can share a
 * super-block. */
template <enum mvm_wtype T>
static __device__ __forceinline__ float unit_dot(const uint8_t *w, const uint8_t *act, uint32_t u)
{
    if (mvm_k_is_q(T))
        return block_q<T>(w + (uint64_t)u * mvm_k_block_bytes(T), (const mvm_block_q8_0 *)act + u);
    const int c = (int)(u % 8);
    return kchunks<T>(w + (uint64_t)(u / 8) * mvm_k_block_bytes(T),
                      (const mvm_block_q8_K *)act + u / 8, c, c + 1);
}

/* One block of type T as the expert's down slot holds it (32 elements of a float type, a Q
 * block, a K super-block) against its activations (floats, a Q8_0 or a Q8_K block). */
template <enum mvm_wtype T>
static __device__ __forceinline__ float block_dot(const uint8_t *w, const uint8_t *a)
{
    if (mvm_k_is_q(T))
        return block_q<T>(w, (const mvm_block_q8_0 *)a);
    if (mvm_k_is_k(T))
        return kchunks<T>(w, (const mvm_block_q8_K *)a, 0, 8);
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
