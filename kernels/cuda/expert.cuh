/*
 * Where the routed-expert kernels (kernels/cuda/expert.cu, and the tensor-core ones of
 * kernels/cuda/mmq.cu) find an active expert's weights in the expert space: its base, a
 * down row, its down bias. The layout is kernels/cpu/kernels.h's; the arguments kernels.h's
 * mvm_g_expert_args.
 */
#ifndef MVM_KERNELS_CUDA_EXPERT_CUH
#define MVM_KERNELS_CUDA_EXPERT_CUH

#include "kernels/cuda/device.cuh"

#define U32(p) ((const uint32_t *)(p))

/* Where active expert blockIdx.y, expert e, is read: the launch's own address for it (wptr,
 * nonzero: the device pool's view of a slab that is still being mapped at the expert's
 * address, MOEVM_LOAD_WAIT=device-view, or its home's device address, read in place), else
 * its fixed address in the expert space. */
static __device__ __forceinline__ const uint8_t *expert_base(const mvm_g_expert_args &a,
                                                             uint32_t e)
{
    const uint64_t w = a.wptr ? ((const uint64_t *)a.wptr)[blockIdx.y] : 0;
    return w ? (const uint8_t *)w : (const uint8_t *)a.experts + e * a.expert_stride;
}

/* Whether active expert blockIdx.y is the CPU's (its wptr entry MVM_G_ADDR_CPU, set by the
 * route kernel: kernels.h, the CPU's share): its blocks do nothing, and its rows are not
 * read. */
static __device__ __forceinline__ bool expert_on_cpu(const mvm_g_expert_args &a)
{
    return a.wptr && ((const uint64_t *)a.wptr)[blockIdx.y] == MVM_G_ADDR_CPU;
}

/* Read-through (wstore): where the bytes at src, inside active expert blockIdx.y (expert e)
 * as it is read, are stored as read; NULL where the launch stores none of its. */
static __device__ __forceinline__ uint8_t *store_of(const mvm_g_expert_args &a, uint32_t e,
                                                    const uint8_t *src)
{
    const uint64_t s = a.wstore ? ((const uint64_t *)a.wstore)[blockIdx.y] : 0;
    return s ? (uint8_t *)s + (src - expert_base(a, e)) : NULL;
}

/* The block copies `count` runs of `part` bytes, `stride` apart, from src to dst (laid out
 * alike), in units of U: each thread's loads (eight at a time) issued before its stores. */
template <typename U>
static __device__ __forceinline__ void block_copy_runs_as(uint8_t *dst, const uint8_t *src,
                                                          uint64_t stride, uint32_t part,
                                                          uint32_t count)
{
    const uint32_t per = part / sizeof(U), total = per * count;
    for (uint32_t i0 = threadIdx.x; i0 < total; i0 += 8 * blockDim.x) {
        U v[8];
        uint32_t at[8]; /* offsets from src: an expert's, under 4 GiB */
#pragma unroll
        for (uint32_t u = 0; u < 8; u++) {
            const uint32_t i = i0 + u * blockDim.x;
            at[u] = i / per * (uint32_t)stride + i % per * (uint32_t)sizeof(U);
            if (i < total)
                v[u] = *(const U *)(src + at[u]);
        }
#pragma unroll
        for (uint32_t u = 0; u < 8; u++)
            if (i0 + u * blockDim.x < total)
                *(U *)(dst + at[u]) = v[u];
    }
}

/* Read-through's stores: the block copies the rows its warps are about to read from their
 * home into the slab, over the bus once, and they read them there (after a __syncthreads),
 * so that every type's product reads as it does from any other address. The block's rows
 * lie together (up1's channels' gate rows, their up rows; down1's outputs' blocks of each
 * group), so it copies them as `count` runs of `part` bytes `stride` apart, in the widest
 * unit their alignment allows (16 bytes for Q8_0's rows and for 16 of its 34-byte blocks;
 * bytes for MXFP4's 17): long runs of wide loads, in whole 32-byte sectors, are what a read
 * over the bus wants: on an H200 a Qwen3-30B-A3B Q8_0 miss took the engine 140 us where
 * each warp copied its own down row's 34-byte blocks, 120 us with a block's runs of four
 * (136 bytes: down read its home at 36 GB/s, up's rows at 50, a kernel streaming
 * HOST_NUMA memory at 51; docs/perf/offload.md, 2026-11-27); hence down1_keep's 16. */
static __device__ __forceinline__ void block_copy_runs(uint8_t *dst, const uint8_t *src,
                                                       uint64_t stride, uint32_t part,
                                                       uint32_t count)
{
    const uint64_t align = (uintptr_t)dst | (uintptr_t)src | (count > 1 ? stride : 0) | part;
    if (align % 16 == 0)
        block_copy_runs_as<uint4>(dst, src, stride, part, count);
    else if (align % 8 == 0)
        block_copy_runs_as<uint2>(dst, src, stride, part, count);
    else if (align % 4 == 0)
        block_copy_runs_as<uint32_t>(dst, src, stride, part, count);
    else if (align % 2 == 0)
        block_copy_runs_as<uint16_t>(dst, src, stride, part, count);
    else
        block_copy_runs_as<uint8_t>(dst, src, stride, part, count);
}

/* Output j's row of expert e's down: its block of each group's down slot, the blocks a
 * group apart. */
static __device__ __forceinline__ const uint8_t *down_row(const mvm_g_expert_args &a,
                                                          mvm_k_expert_fmt f, uint32_t e,
                                                          uint32_t j)
{
    const uint64_t G = mvm_k_expert_group_channels(f);
    return expert_base(a, e) + 2 * G * mvm_k_row_bytes(f.gate_up, a.n_embd) +
           (uint64_t)j * mvm_k_row_bytes(f.down, G);
}

/* gpt-oss's down bias of output j of expert e (0 without one), which each row adds weighted
 * by its routing weight after the groups. */
static __device__ __forceinline__ float down_bias(const mvm_g_expert_args &a, uint32_t e,
                                                  uint32_t j)
{
    return a.down_bias ? ((const float *)a.down_bias)[(uint64_t)e * a.n_embd + j] : 0;
}

/* The unit of one channel of row r: gate and up's sums gs and us (with gpt-oss's, the
 * group's biases at the group's end, gate's then up's, channel s of G), times the row's
 * routing weight. */
static __device__ __forceinline__ float expert_unit(const mvm_g_expert_args &a,
                                                    const uint8_t *group_end, uint32_t G,
                                                    uint32_t s, float gs, float us, uint32_t r)
{
    const float *bias = (const float *)(group_end - 2 * G * sizeof(float));
    const float w = ((const float *)a.row_w)[r];
    return a.glu == MVM_GLU_OAI ? mvm_k_glu_oai(gs + bias[s], us + bias[G + s]) * w
                                : silu(gs) * us * w;
}

#endif
