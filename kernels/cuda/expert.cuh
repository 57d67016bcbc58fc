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
