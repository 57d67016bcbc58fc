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
#ifndef __CUDA_ARCH__
#include <time.h>
#endif

#include "kernels/cuda/kernels.h"

#define FULL_MASK 0xffffffffu

/* *a, and *b unless NULL, summed over each aligned group of `lanes` lanes (a power of two,
 * at most 32) by rounds of xor shuffles, the nearest lanes first or the farthest; every
 * lane of a group gets the group's sums. A pair's two shuffles of a round are issued
 * together. After tests/cuda_emu.h, which emulates the shuffles with fiber switches, its
 * emu_xor_sums gives the same sums from one exchange. Every lane of the warp must call it. */
template <typename V>
static __device__ __forceinline__ void xor_sums(V *a, V *b, uint32_t lanes, bool nearest_first)
{
#ifdef CUDA_EMU_XOR_SUMS
    emu_xor_sums(a, b, lanes, nearest_first);
#else
    for (uint32_t i = 1; i < lanes; i <<= 1) {
        const int o = (int)(nearest_first ? i : lanes / 2 / i);
        *a += __shfl_xor_sync(FULL_MASK, *a, o);
        if (b)
            *b += __shfl_xor_sync(FULL_MASK, *b, o);
    }
#endif
}

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

/* Lanes of a warp that share one 32-element unit of type T (a Q block, or a chunk of a K
 * super-block) in a row's dot product, each taking 32 / unit_lanes of its quants. ROW: a
 * decode row read in place, row-major (its units one run): Q8_0's block four lanes of two
 * words; else (a tile's rows, or a gather of units a group apart: an expert's down row)
 * eight lanes of one word. The 4- and 5-bit types' 16 bytes of nibbles a word a lane (its
 * 8 quants). A warp's load then reads 4 to 8 neighbouring units in one contiguous run; a
 * lane per unit read 32 units 34 bytes apart, a run over 9 cache lines per load, for each
 * of a Q8_0 block's 16 loads. On an H200 (bench/gpu/kernel_lab.cu, 2026-11-26) four lanes a
 * Q8_0 block read OLMoE's decode rows 1.5x as fast as eight (up 16.9 against 24.7 µs), and
 * eight its down rows 1.2x as fast as four (15.6 against 18.5).
 * Q4_K's, Q5_K's and Q6_K's chunks: 8 quants a lane in a tile kernel, so that the 32 lanes
 * take one super-block; with CHUNK (a decode kernel's product: one activation, a row or a
 * gather) a whole chunk a lane, a warp four super-blocks a round. The tile kernels keep 8 a
 * lane for their one-row tiles too: their instances of the chunk layout took 128 registers
 * or spilled (ptxas, sm_90), where the decode kernels' took fewer than before. Until
 * 2026-11-28 decode took 8 a lane too: the
 * 32 lanes of one super-block summed their integers over five rounds of shuffles for every
 * 144 bytes (Q4_K), each of a chunk's four lanes unpacked its scale again, and an H200 read
 * Qwen3-30B-A3B's Q4_K decode rows at 549 GB/s, its down rows (three super-blocks, three
 * rounds) at 501, where its Q8_0 rows came at 1,368 (bench_gpu_experts).
 * The table types (IQ4_NL, MXFP4: a lookup per nibble) and the other K types keep a lane
 * per unit and the shared code. */
template <enum mvm_wtype T, bool ROW = false, bool CHUNK = false>
static __device__ __forceinline__ uint32_t unit_lanes()
{
    if (T == MVM_W_Q8_0)
        return ROW ? 4 : 8;
    if (T == MVM_W_Q4_K || T == MVM_W_Q5_K || T == MVM_W_Q6_K)
        return CHUNK ? 1 : 4;
    if (mvm_k_is_q(T) && !mvm_k_is_table(T))
        return 4;
    return 1;
}

/* Quants j..j+3 of Q block blk (not a table type) against the activations' quants aq, into
 * the integer sums: Q8_0's bytes j..j+3; for the 4- and 5-bit types byte j..j+3's nibbles,
 * quants j..j+3 and j+16..j+19, with Q5's fifth bits from qh (asum: the activations' sum,
 * for the types with a min or a bias). kernels/blocks.h's mvm_k_block_q a word at a time:
 * one load pair and one __dp4a per four quants, nibbles unpacked four at a time. */
template <enum mvm_wtype T>
static __device__ __forceinline__ void q_word(const uint8_t *blk, const uint8_t *aq, int j,
                                              uint32_t qh, int *sum, int *asum)
{
    const mvm_k_qlayout L = mvm_k_qlay(T);
    if (T == MVM_W_Q8_0) {
        *sum = __dp4a(word_at(blk + L.qs + j), word_at(aq + j), *sum);
        return;
    }
    const int q = word_at(blk + L.qs + j), a_lo = word_at(aq + j);
    const int a_hi = word_at(aq + j + MVM_QBLOCK / 2);
    int lo = q & 0x0F0F0F0F, hi = q >> 4 & 0x0F0F0F0F;
    if (L.qh) {
        lo |= fifth_bits(qh >> j);
        hi |= fifth_bits(qh >> (j + MVM_QBLOCK / 2));
    }
    *sum = __dp4a(hi, a_hi, __dp4a(lo, a_lo, *sum));
    if (L.m || L.bias)
        *asum = __dp4a(0x01010101, a_hi, __dp4a(0x01010101, a_lo, *asum));
}

/* Part k (< unit_lanes<T, ROW>) of Q block blk (not a table type) against its Q8_0
 * activation block, into the integer sums. */
template <enum mvm_wtype T, bool ROW>
static __device__ __forceinline__ void q_part(const uint8_t *blk, const mvm_block_q8_0 *a,
                                              uint32_t k, int *sum, int *asum)
{
    const mvm_k_qlayout L = mvm_k_qlay(T);
    const uint32_t qh = L.qh ? (uint32_t)word_at(blk + L.qh) : 0;
    const int words = (T == MVM_W_Q8_0 ? MVM_QBLOCK : MVM_QBLOCK / 2) / 4;
    const int per = words / (int)unit_lanes<T, ROW>();
#pragma unroll
    for (int w = 0; w < per; w++)
        q_word<T>(blk, (const uint8_t *)a->qs, 4 * ((int)k * per + w), qh, sum, asum);
}

/* Q block blk's float from its integer sums: mvm_k_block_q's, the f16 scale at 0 and min
 * at L.m read as 16-bit loads (the shared code's memcpy is two byte loads). */
template <enum mvm_wtype T>
static __device__ __forceinline__ float q_scale(const uint8_t *blk, const mvm_block_q8_0 *a,
                                                int sum, int asum)
{
    const mvm_k_qlayout L = mvm_k_qlay(T);
    const uint16_t *h = (const uint16_t *)blk;
    return mvm_k_qfloat(L.m != 0, sum - L.bias * asum, asum, mvm_k_h2f(h[0]),
                        L.m ? mvm_k_h2f(h[L.m / 2]) : 0, mvm_k_h2f(a->d));
}

/* Quants l0..l0+nl-1 (multiples of 4) of chunk c (< 8) of super-block blk of K type T
 * against its Q8_K block, into the integer sums: kernels/blocks.h's mvm_k_kchunk a word at
 * a time for Q4_K, Q5_K and Q6_K (the types of a Q4_K_M file), the nibbles, fifth and high
 * bits of four quants unpacked by shifts and masks, one __dp4a. A chunk-wide term (Q4_K's
 * and Q5_K's min, Q6_K's offset of 32 per 16 quants) is added by the part that holds its
 * first quant, so the parts of a chunk add up to its sums. The other K types keep the
 * shared code, a whole chunk at a time (l0 = 0, nl = 32). */
template <enum mvm_wtype T>
static __device__ __forceinline__ void kpart(const uint8_t *blk, const uint8_t *s16,
                                             const mvm_block_q8_K *a, int c, int l0, int nl,
                                             int32_t *sum, int32_t *msum)
{
    const uint8_t *aq = (const uint8_t *)(a->qs + 32 * c);
    if (T == MVM_W_Q4_K || T == MVM_W_Q5_K) {
        const mvm_block_q4_K *x4 = (const mvm_block_q4_K *)blk;
        const mvm_block_q5_K *x5 = (const mvm_block_q5_K *)blk;
        const uint8_t *qs = (T == MVM_W_Q5_K ? x5->qs : x4->qs) + 32 * (c / 2);
        const int shift = 4 * (c % 2);
        int s = 0;
        if (nl == 32 && (uintptr_t)qs % 16 == 0 && (uintptr_t)aq % 4 == 0) {
            /* a whole chunk (a decode product's lane): its 32 bytes of nibbles in two 16-byte
             * loads and the activations a word a load, where the 2-byte loads of word_at
             * took four times the instructions (the super-blocks are 144 and 176 bytes,
             * so a row at a 16-byte boundary keeps every one there) */
            const uint4 q0 = ((const uint4 *)qs)[0], q1 = ((const uint4 *)qs)[1];
            const int q[8] = {(int)q0.x, (int)q0.y, (int)q0.z, (int)q0.w,
                              (int)q1.x, (int)q1.y, (int)q1.z, (int)q1.w};
#pragma unroll
            for (int l = 0; l < 32; l += 4) {
                int v = q[l / 4] >> shift & 0x0F0F0F0F;
                if (T == MVM_W_Q5_K)
                    v |= (word_at(x5->qh + l) >> c & 0x01010101) << 4;
                s = __dp4a(v, *(const int *)(aq + l), s);
            }
        } else {
#pragma unroll
            for (int l = l0; l < l0 + nl; l += 4) {
                int v = word_at(qs + l) >> shift & 0x0F0F0F0F;
                if (T == MVM_W_Q5_K)
                    v |= (word_at(x5->qh + l) >> c & 0x01010101) << 4;
                s = __dp4a(v, word_at(aq + l), s);
            }
        }
        uint8_t sc, m;
        mvm_k_scale_min(x4->scales, c, &sc, &m); /* at the same offset in both */
        *sum += sc * s;
        if (l0 == 0)
            *msum += m * (a->bsums[2 * c] + a->bsums[2 * c + 1]);
    } else if (T == MVM_W_Q6_K) {
        const mvm_block_q6_K *x = (const mvm_block_q6_K *)blk;
        const int h = c / 4, k = c % 4;
        const uint8_t *ql = x->ql + 64 * h + 32 * (k & 1), *qh = x->qh + 32 * h;
        const int shift = 4 * (k >> 1);
        int s0 = 0, s1 = 0; /* the chunk's two halves, a scale each */
#pragma unroll
        for (int l = l0; l < l0 + nl; l += 4) {
            const int v = (word_at(ql + l) >> shift & 0x0F0F0F0F) |
                          (word_at(qh + l) >> (2 * k) & 0x03030303) << 4;
            const int d = __dp4a(v, word_at(aq + l), 0);
            s0 += l < 16 ? d : 0;
            s1 += l < 16 ? 0 : d;
        }
        if (l0 == 0)
            s0 -= 32 * a->bsums[2 * c];
        if (l0 <= 16 && 16 < l0 + nl)
            s1 -= 32 * a->bsums[2 * c + 1];
        *sum += x->scales[2 * c] * s0 + x->scales[2 * c + 1] * s1;
    } else {
        mvm_k_kchunk(T, blk, s16, a, c, sum, msum);
    }
}

/* The elements of a run of type T: a block (Q, K) or 32 (float types). */
template <enum mvm_wtype T> static __device__ __forceinline__ uint32_t run_elems()
{
    return mvm_k_block_elems(T) > 1 ? (uint32_t)mvm_k_block_elems(T) : MVM_QBLOCK;
}

/* The bytes of a run: row_dot_tile's stride in a row-major row. */
template <enum mvm_wtype T> static __device__ __forceinline__ uint64_t run_bytes()
{
    return mvm_k_row_bytes(T, run_elems<T>());
}

/* This lane's part of the dot products of WR weight rows (n elements of type T, wstep
 * bytes apart: an expert's gate and up rows) with the activations act[0..nt) (nt <= NT;
 * the weights' activation format): acc[r * NT + i] += its terms, the rounds unrolled U at a
 * time. A decode product (NT 1) reads each weight once, and a round at a time left it
 * waiting on the memory's latency (an H200 ran OLMoE's expert down at 578 GB/s of its
 * 3,800, 2026-11-26; unrolled four, 997): row_dot says which path a product takes. A tile
 * of NT 8 reuses each load eight times already, and unrolled too it would take twice the
 * registers. Two rows in one loop have both rows' loads in flight at once and share each
 * activation's (bench/gpu/kernel_lab.cu: OLMoE's decode up 16-17 µs so). The row's
 * blocks (Q), super-blocks (K) or 32-element runs (float types) are `stride` bytes apart:
 * their size in a row-major matrix, a group's size in an expert's down slot. The lanes of
 * a warp split the row, 32-element units (unit_lanes lanes each) or elements (float types)
 * in turn, so the warp reads it in contiguous runs; each weight read serves every
 * activation of the tile. */
template <enum mvm_wtype T, int NT, int U = 1, bool ROW = false, int WR = 1, bool CHUNK = false>
static __device__ __forceinline__ void row_dot_tile(const uint8_t *w, uint64_t stride,
                                                    const uint8_t *const *act, uint32_t nt,
                                                    uint32_t n, float *acc, uint64_t wstep = 0)
{
    const uint32_t lane = threadIdx.x & 31;
    if (mvm_k_block_elems(T) == 1) {
#pragma unroll(U)
        for (uint32_t e = lane; e < n; e += 32)
#pragma unroll
            for (int r = 0; r < WR; r++) {
                const float wv =
                    mvm_k_elem(T, w + r * wstep + e / MVM_QBLOCK * stride, e % MVM_QBLOCK);
#pragma unroll
                for (int i = 0; i < NT; i++)
                    if ((uint32_t)i < nt)
                        acc[r * NT + i] += wv * ((const float *)act[i])[e];
            }
        return;
    }
    if (mvm_k_is_table(T)) { /* a lane per block, the shared code's lookups */
#pragma unroll(U)
        for (uint32_t u = lane; u < n / MVM_QBLOCK; u += 32)
#pragma unroll
            for (int r = 0; r < WR; r++)
#pragma unroll
                for (int i = 0; i < NT; i++)
                    if ((uint32_t)i < nt)
                        acc[r * NT + i] += mvm_k_block_q(T, w + r * wstep + u * stride,
                                                         (const mvm_block_q8_0 *)act[i] + u);
        return;
    }
    /* The lanes of a block (Q) or super-block (K) add up their integer sums, and its first
     * lane scales them: the CPU's float for the block (mvm_k_block_q, mvm_k_kblock), bit
     * for bit. With a float per lane the row's sum would round differently from the CPU's
     * in the last bits, and the next layer's activations, quantized, can then round a value
     * the other way (test_forward_gpu saw 1e-2 in a tiny model's logits). Every lane runs
     * every round, for the shuffles. */
    const uint32_t per = unit_lanes<T, ROW, CHUNK>(), k = lane % per;
    const uint32_t bl = mvm_k_is_q(T) ? per : 8 * per; /* lanes per block */
    const uint32_t nb = n / (uint32_t)mvm_k_block_elems(T);
#pragma unroll(U)
    for (uint32_t b0 = 0; b0 < nb; b0 += 32 / bl) {
        const uint32_t b = b0 + lane / bl < nb ? b0 + lane / bl : 0;
#pragma unroll
        for (int r = 0; r < WR; r++) {
            const uint8_t *blk = w + r * wstep + b * stride;
            uint8_t s[16];
            const uint8_t *s16 = mvm_k_is_k(T) ? mvm_k_kscales(T, blk, s) : NULL;
#pragma unroll
            for (int i = 0; i < NT; i++)
                if ((uint32_t)i < nt) {
                    int32_t sum = 0, asum = 0; /* asum: Q's activation sum, K's min sum */
                    if (mvm_k_is_q(T))
                        q_part<T, ROW>(blk, (const mvm_block_q8_0 *)act[i] + b, k, &sum, &asum);
                    else
                        kpart<T>(blk, s16, (const mvm_block_q8_K *)act[i] + b,
                                 (int)(lane % bl / per), (int)(k * 32 / per), (int)(32 / per),
                                 &sum, &asum);
                    /* Q8_0 and Q6_K have no asum */
                    xor_sums(&sum, T != MVM_W_Q8_0 && T != MVM_W_Q6_K ? &asum : NULL, bl, true);
                    if (b0 + lane / bl < nb && lane % bl == 0)
                        acc[r * NT + i] +=
                            mvm_k_is_q(T)
                                ? q_scale<T>(blk, (const mvm_block_q8_0 *)act[i] + b, sum, asum)
                                : mvm_k_kscale(T, blk, (const mvm_block_q8_K *)act[i] + b, sum,
                                               asum);
                }
        }
    }
}

/* One F32 row (n elements at w, 16-byte aligned, n a multiple of 4) with one F32
 * activation: 16-byte loads, eight of them in flight a lane, each lane's products added in
 * its own order (the warp's sum then differs from the CPU's in the last bits, as any
 * split of the row does). A router's rows are 64 of 2048 floats: a lane's 64 loads of 4
 * bytes waited one at a time (26 µs on an H200, bench/gpu/ktrace.sh, 2026-11-26), unrolled
 * or not. */
static __device__ __forceinline__ void row_dot_f32x4(const uint8_t *w, const float *x,
                                                     uint32_t n, float *acc)
{
    const uint32_t lane = threadIdx.x & 31, n4 = n / 4;
    const float4 *w4 = (const float4 *)w, *x4 = (const float4 *)x;
    for (uint32_t k0 = lane; k0 < n4; k0 += 32 * 8) {
        float4 wv[8], xv[8];
#pragma unroll
        for (uint32_t j = 0; j < 8; j++)
            if (k0 + 32 * j < n4) {
                wv[j] = w4[k0 + 32 * j];
                xv[j] = x4[k0 + 32 * j];
            }
#pragma unroll
        for (uint32_t j = 0; j < 8; j++)
            if (k0 + 32 * j < n4)
                *acc += wv[j].x * xv[j].x + wv[j].y * xv[j].y + wv[j].z * xv[j].z +
                        wv[j].w * xv[j].w;
    }
}

/* row_dot_tile for nt <= MVM_G_TILE activations; one (decode) with four rounds unrolled,
 * a row-major row (its units one run: stride run_bytes) with unit_lanes' ROW lanes, and an
 * aligned F32 one by row_dot_f32x4; with CHUNK (the decode kernels') a K-quant's one-row
 * products take a chunk a lane (unit_lanes), and the tile kernels pass false. A decode row
 * went through a warp's stage in shared memory until 2026-11-26: all of it in flight at
 * once, but the copy in and out took longer than the loads it saved
 * (bench/gpu/kernel_lab.cu: a q8_0 6144 x 2048 matvec 19.5 µs staged, 8.9 read in place
 * four lanes a block). */
template <enum mvm_wtype T, bool CHUNK = true>
static __device__ __forceinline__ void row_dot(const uint8_t *w, uint64_t stride,
                                               const uint8_t *const *act, uint32_t nt,
                                               uint32_t n, float *acc)
{
    if (nt != 1)
        row_dot_tile<T, MVM_G_TILE>(w, stride, act, nt, n, acc);
    else if (stride != run_bytes<T>())
        row_dot_tile<T, 1, 4, false, 1, CHUNK>(w, stride, act, 1, n, acc);
    else if (T == MVM_W_F32 && n % 4 == 0 && (uintptr_t)w % 16 == 0 &&
             (uintptr_t)act[0] % 16 == 0)
        row_dot_f32x4(w, (const float *)act[0], n, acc);
    else
        row_dot_tile<T, 1, 4, true, 1, CHUNK>(w, stride, act, 1, n, acc);
}

/* A kernel's first position: pos0, or the uint32 at pos where it is set (kernels.h). */
static __device__ __forceinline__ uint32_t mvm_g_pos0(mvm_dptr pos, uint32_t pos0)
{
    return pos ? *(const uint32_t *)pos : pos0;
}

/* the warp's sum, the farthest lanes first (offsets 16, 8, ..., 1) */
template <typename V> static __device__ __forceinline__ V warp_sum(V v)
{
    xor_sums<V>(&v, NULL, 32, false);
    return v;
}

/* Words in host memory mapped for the device that a host thread writes or waits for (the
 * CPU's share of a decode step, kernels.h: mvm_g_cpu_share): loads that acquire and stores
 * that release at the system's scope, so that what the other side wrote before its word is
 * seen after it. The emulated build's threads are the host's, with the same orders. */
static __device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t *p)
{
#ifdef __CUDA_ARCH__
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
#else
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

static __device__ __forceinline__ void store_release_sys(uint32_t *p, uint32_t v)
{
#ifdef __CUDA_ARCH__
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

/* Nanoseconds of a clock that all of the device's SMs share (a wait's time limit). */
static __device__ __forceinline__ uint64_t now_ns()
{
#ifdef __CUDA_ARCH__
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
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

/* kernels/blocks.h's mvm_k_q8_K_block by the 32 lanes of a warp, 8 floats a lane, to the
 * same bytes: the value of largest magnitude, the first on ties (each lane's first, then
 * the larger, or the earlier on equal magnitudes), each quant from it as there, and each
 * 16 quants' sum from two lanes. A thread per block left a row's quantization to one
 * thread per 256 floats. Every lane of the warp must call it. */
static __device__ __forceinline__ void warp_q8_K_block(const float *x, mvm_block_q8_K *y)
{
    const uint32_t lane = threadIdx.x & 31, j0 = 8 * lane;
    /* the lane's floats held: read again for the quants, each load waited behind the last
     * quant's store (y might have been x, for all the compiler knew) */
    float v[8];
#pragma unroll
    for (uint32_t j = 0; j < 8; j++)
        v[j] = x[j0 + j];
    float amax = 0, max = 0;
    uint32_t at = MVM_QK_K; /* where this lane's max is (none) */
#pragma unroll
    for (uint32_t j = 0; j < 8; j++)
        if (fabsf(v[j]) > amax)
            amax = fabsf(v[j]), max = v[j], at = j0 + j;
    for (int o = 16; o > 0; o >>= 1) {
        const float a2 = __shfl_xor_sync(FULL_MASK, amax, o);
        const float m2 = __shfl_xor_sync(FULL_MASK, max, o);
        const uint32_t at2 = __shfl_xor_sync(FULL_MASK, at, o);
        if (a2 > amax || (a2 == amax && at2 < at))
            amax = a2, max = m2, at = at2;
    }
    const float iscale = max != 0 ? -127.f / max : 0;
    int sum = 0;
#pragma unroll
    for (uint32_t j = 0; j < 8; j++) {
        const int r = max != 0 ? (int)lrintf(iscale * v[j]) : 0;
        const int8_t q = (int8_t)(r < 127 ? r : 127);
        y->qs[j0 + j] = q;
        sum += q;
    }
    sum += __shfl_xor_sync(FULL_MASK, sum, 1);
    if (lane % 2 == 0)
        y->bsums[lane / 2] = (int16_t)sum;
    if (lane == 0)
        y->d = max != 0 ? 1 / iscale : 0;
}

/* kernels/blocks.h's mvm_k_q8_0_block by 8 lanes (lane % 8 takes 4 floats), to the same
 * bytes: the largest magnitude (a max in any order, NaN aside), the scale and each quant
 * as there. A NaN among the 32 floats is rare and resets the CPU's running max (blocks.h):
 * then the group's first lane runs the CPU's code alone. A thread per block read its 32
 * floats one line each, 128 bytes apart across the warp (mvm_g_quantize took 4.7 µs a
 * decode step on an H200 where llama.cpp's took 3.1). Every lane of the warp must call it;
 * one whose `valid` is false (past the last block) reads and writes nothing. */
static __device__ __forceinline__ void group8_q8_0_block(const float *x, mvm_block_q8_0 *y,
                                                         bool valid)
{
    const uint32_t sub = threadIdx.x & 7;
    float v[4], amax = 0;
    int nan = 0;
#pragma unroll
    for (uint32_t j = 0; j < 4; j++) {
        v[j] = valid ? x[4 * sub + j] : 0.0f;
        amax = fmaxf(amax, fabsf(v[j]));
        nan |= isnan(v[j]);
    }
    for (int o = 1; o < 8; o <<= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(FULL_MASK, amax, o));
        nan |= __shfl_xor_sync(FULL_MASK, nan, o);
    }
    if (!valid)
        return;
    if (nan) {
        if (sub == 0)
            mvm_k_q8_0_block(x, y);
        return;
    }
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    if (sub == 0)
        y->d = mvm_k_f2h(d);
#pragma unroll
    for (uint32_t j = 0; j < 4; j++)
        y->qs[4 * sub + j] = (int8_t)roundf(v[j] * id);
}

/* Row x of n floats into q in the activation format of weight type t (a Q or K type), as
 * mvm_g_quantize writes it, by the threads of one block: 8 lanes per Q8_0 block, a warp per
 * Q8_K block. Every thread of the block must call it. */
static __device__ __forceinline__ void block_quantize_row(const float *x, uint8_t *q,
                                                          enum mvm_wtype t, uint32_t n)
{
    const uint32_t len = (uint32_t)mvm_k_block_elems(t);
    if (mvm_k_is_k(t)) {
        for (uint32_t b = threadIdx.x >> 5; b < n / len; b += blockDim.x >> 5)
            warp_q8_K_block(x + (uint64_t)b * len,
                            (mvm_block_q8_K *)(q + mvm_k_act_bytes(t, (uint64_t)b * len)));
        return;
    }
    /* 8 lanes a block; a warp's lanes go round together (the shuffles) */
    const uint32_t nb = n / len, per_round = blockDim.x / 8;
    for (uint32_t b0 = threadIdx.x / 32 * 4; b0 < nb; b0 += per_round) {
        const uint32_t b = b0 + threadIdx.x % 32 / 8;
        group8_q8_0_block(x + (uint64_t)b * len,
                          (mvm_block_q8_0 *)(q + mvm_k_act_bytes(t, (uint64_t)b * len)),
                          b < nb);
    }
}

static __device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

/* One of a product's up to three matrices (kernels.h, mvm_g_matvec_args): its weights, its
 * outputs and their stride, its rows. */
struct matvec_part {
    mvm_dptr w, y;
    uint64_t y_stride;
    uint32_t rows;
};

/* The matrix that unit u of a launch falls in, the units `per` rows each (a row, a tile of
 * rows) counted over w's rows, then w2's, then w3's; u made the unit's place in it. */
static __device__ __forceinline__ matvec_part matvec_part_of(const mvm_g_matvec_args &a,
                                                             uint32_t per, uint32_t &u)
{
    const uint32_t n0 = mvm_g_div_up(a.n_out, per), n1 = mvm_g_div_up(a.n_out2, per);
    if (u >= n0 + n1) {
        u -= n0 + n1;
        return {a.w3, a.y3, a.y_stride3, a.n_out3};
    }
    if (u >= n0) {
        u -= n0;
        return {a.w2, a.y2, a.y_stride2, a.n_out2};
    }
    return {a.w, a.y, a.y_stride, a.n_out};
}

#endif
