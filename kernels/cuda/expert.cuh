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

/* Read-through (wstore): where the bytes at src, inside active expert blockIdx.y (expert e)
 * as it is read, are stored as read; NULL where the launch stores none of its. */
static __device__ __forceinline__ uint8_t *store_of(const mvm_g_expert_args &a, uint32_t e,
                                                    const uint8_t *src)
{
    const uint64_t s = a.wstore ? ((const uint64_t *)a.wstore)[blockIdx.y] : 0;
    return s ? (uint8_t *)s + (src - expert_base(a, e)) : NULL;
}

/* The warp copies n bytes from src to dst, which lie alike against 16 bytes (an expert's
 * bytes read in place and their slab: both page-aligned): 16-byte loads, all of a lane's
 * in flight at once where the row is short (a decode row: 2 KiB, four a lane), the
 * unaligned ends byte by byte. Read-through's stores: the warp copies the rows it is about
 * to read from their home into the slab, over the bus once, then reads them there, so that
 * every type's product reads as it does from any other address. The caller orders the
 * copy before its reads (__syncwarp). */
static __device__ __forceinline__ void warp_copy(uint8_t *dst, const uint8_t *src, uint64_t n)
{
    const uint32_t lane = threadIdx.x & 31;
    uint64_t head = (16 - ((uintptr_t)src & 15)) & 15;
    head = head < n ? head : n;
    if (lane < head)
        dst[lane] = src[lane];
    const uint64_t n16 = (n - head) / 16;
    const uint4 *s16 = (const uint4 *)(src + head);
    uint4 *d16 = (uint4 *)(dst + head);
    for (uint64_t k0 = lane; k0 < n16; k0 += 4 * 32) {
        uint4 v[4];
#pragma unroll
        for (uint32_t u = 0; u < 4; u++)
            if (k0 + 32 * u < n16)
                v[u] = s16[k0 + 32 * u];
#pragma unroll
        for (uint32_t u = 0; u < 4; u++)
            if (k0 + 32 * u < n16)
                d16[k0 + 32 * u] = v[u];
    }
    for (uint64_t k = head + n16 * 16 + lane; k < n; k += 32)
        dst[k] = src[k];
}

/* The warp copies `count` runs of `part` bytes, `stride` apart, from src to dst (laid out
 * alike): an expert's down row, its block of each group. Every lane's loads of all the runs
 * are issued before any store, 16 a lane at a time, in halfwords where the runs allow
 * (MXFP4's 17-byte blocks do not): the runs then cost about one round trip over the bus
 * together, where a warp_copy per run waited for one each (24 for a Qwen3-30B-A3B Q8_0
 * down row). Not measured on a GPU yet. */
static __device__ __forceinline__ void warp_copy_runs(uint8_t *dst, const uint8_t *src,
                                                      uint64_t stride, uint32_t part,
                                                      uint32_t count)
{
    const uint32_t lane = threadIdx.x & 31;
    const bool half = part % 2 == 0 && stride % 2 == 0 && (uintptr_t)src % 2 == 0;
    const uint32_t unit = half ? 2 : 1, per = part / unit, total = per * count;
    for (uint32_t i0 = 0; i0 < total; i0 += 16 * 32) {
        uint16_t v[16];
        uint32_t at[16]; /* offsets from src: an expert's, under 4 GiB */
#pragma unroll
        for (uint32_t u = 0; u < 16; u++) {
            const uint32_t i = i0 + u * 32 + lane;
            at[u] = i / per * (uint32_t)stride + i % per * unit;
            if (i < total)
                v[u] = half ? *(const uint16_t *)(src + at[u]) : src[at[u]];
        }
#pragma unroll
        for (uint32_t u = 0; u < 16; u++) {
            if (i0 + u * 32 + lane >= total)
                break;
            if (half)
                *(uint16_t *)(dst + at[u]) = v[u];
            else
                dst[at[u]] = (uint8_t)v[u];
        }
    }
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
