/*
 * What the attention kernels share (kernels/cuda/kernels.h, mvm_g_attention_args): where a
 * launch's split parts lie, the positions a query sees, and the output quantized for the
 * product after it. ops.cu's kernels on the CUDA cores and attention_mma.cu's on the tensor
 * cores (latent attention) write the same parts, which ops.cu's combine reads.
 */
#ifndef MVM_KERNELS_CUDA_ATTENTION_CUH
#define MVM_KERNELS_CUDA_ATTENTION_CUH

#include "kernels/cuda/device.cuh"

/* Where a launch's parts lie in a.part (kernels.h): the sums, maxima and outputs of row
 * r = query * n_split + split, head h. */
struct attn_parts {
    double *sum;
    float *max, *out;
};

static __device__ __forceinline__ attn_parts attn_parts_of(const mvm_g_attention_args &a)
{
    const uint64_t n = (uint64_t)a.n_tok * mvm_g_attention_splits(&a) * a.n_head;
    attn_parts p;
    p.sum = (double *)a.part;
    p.max = (float *)(p.sum + n);
    p.out = p.max + n;
    return p;
}

/* The positions query i sees: n of them (the return) from *first. */
static __device__ __forceinline__ uint32_t attn_positions(const mvm_g_attention_args &a,
                                                          uint32_t i, uint32_t *first)
{
    const uint32_t n_pos = a.pos0 + i + 1;
    *first = a.window && n_pos > a.window ? n_pos - a.window : 0;
    return n_pos - *first;
}

/* Query i's output of n floats from head h0 on (out, written by this block), quantized for
 * the output product where a.act asks (kernels.h). Every thread of the block calls it. */
static __device__ __forceinline__ void attn_quantize(const mvm_g_attention_args &a, uint32_t i,
                                                     uint32_t h0, const float *out, uint32_t n)
{
    if (!a.act)
        return;
    const enum mvm_wtype t = (enum mvm_wtype)a.act_type;
    __syncthreads(); /* the block's floats, written to memory, read back by it */
    block_quantize_row(out,
                       (uint8_t *)a.act + (uint64_t)i * a.act_stride +
                           mvm_k_act_bytes(t, (uint64_t)h0 * a.head_dim),
                       t, n);
}

#endif
