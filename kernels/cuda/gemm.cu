/*
 * The element-wise kernels around the tensor-core products (kernels/cuda/kernels.h): a
 * batch's weights dequantized to F16 (a matrix's rows, or a channel-major expert's gate, up
 * and down parts laid out as plain matrices), its activations converted to F16 (an expert's
 * tokens gathered on the way), an expert's unit between its gate/up and down products, and
 * the rows of several experts' batched products put back among the step's; and the
 * softmax between a prompt's attention products.
 * cuBLAS multiplies the F16 matrices with F32 accumulation (engine/compute/blas.c); these
 * kernels only move and convert, so they are bound by memory, a thread per 32 elements or
 * per element.
 */
#include "kernels/cuda/device.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/dequant.h"

/* Slot blockIdx.y of a list of experts (kernels.h): its expert, where its rows begin among
 * the step's and how many it has; without a list, one expert of n_rows rows from row 0. */
struct list_slot {
    uint32_t e, row0, n;
};

static __device__ list_slot slot_of(const mvm_g_experts_list &l, uint32_t n_rows)
{
    if (!l.experts)
        return {0, 0, n_rows};
    const uint32_t e = ((const uint32_t *)l.experts)[blockIdx.y];
    return {e, ((const uint32_t *)l.off)[e], ((const uint32_t *)l.cnt)[e]};
}

/* Where slot sl (blockIdx.y's) reads its expert, from the list's base (kernels.h). */
static __device__ uint64_t slot_bytes(const mvm_g_experts_list &l, const list_slot &sl)
{
    return l.at ? ((const uint64_t *)l.at)[blockIdx.y] : sl.e * l.w_stride;
}

/* The thread's element (row r, column c) of its slot, the slot's rows of `cols` elements
 * numbered along x: false past the slot's own rows. */
static __device__ bool slot_cell(const mvm_g_experts_list &l, uint32_t n_rows, uint32_t cols,
                                 list_slot &sl, uint32_t &r, uint32_t &c)
{
    const uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    r = (uint32_t)(t / cols), c = (uint32_t)(t % cols);
    sl = slot_of(l, n_rows);
    return r < sl.n;
}

template <enum mvm_wtype T> static __device__ void dequant(const mvm_g_dequant_args &a)
{
    const uint32_t chunks = a.n_in / MVM_QBLOCK;
    const uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (uint64_t)chunks * a.n_rows)
        return;
    const uint32_t r = (uint32_t)(t / chunks), c = (uint32_t)(t % chunks);
    const uint32_t grp = r / a.per, in = r % a.per;
    const list_slot sl = slot_of(a.list, 0);
    const uint8_t *w = (const uint8_t *)a.w + slot_bytes(a.list, sl);
    float x[MVM_QBLOCK];
    mvm_k_chunk_values(T, w + grp * a.group_bytes + in * a.row_bytes, c, x);
    uint16_t *d = (uint16_t *)a.dst + blockIdx.y * a.dst_expert +
                  ((uint64_t)grp * a.dst_rows + in) * a.dst_stride +
                  (uint64_t)grp * a.dst_cols + (uint64_t)c * MVM_QBLOCK;
    /* four 16-byte stores, not 32 of two bytes: a chunk starts 16-byte aligned (kernels.h) */
#ifndef __CUDA_ARCH__
    assert(((uintptr_t)d & 15) == 0);
#endif
#pragma unroll
    for (int q = 0; q < MVM_QBLOCK / 8; q++) {
        uint32_t h[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            h[j] = (uint32_t)mvm_k_f2h(x[8 * q + 2 * j]) |
                   (uint32_t)mvm_k_f2h(x[8 * q + 2 * j + 1]) << 16;
        ((uint4 *)d)[q] = make_uint4(h[0], h[1], h[2], h[3]);
    }
}

#define DEQUANT(name, T)                                                                   \
    extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)                            \
        mvm_g_dequant_##name(mvm_g_dequant_args a)                                         \
    {                                                                                      \
        dequant<T>(a);                                                                     \
    }
MVM_G_TYPED_KERNELS(DEQUANT)
#undef DEQUANT

#if MVM_G_UNTYPED_KERNELS
extern "C" __global__ void __launch_bounds__(MVM_G_THREADS) mvm_g_to_half(mvm_g_to_half_args a)
{
    const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (j >= a.n)
        return;
    const uint64_t src = a.idx ? ((const uint32_t *)a.idx)[i] : i;
    ((uint16_t *)a.dst)[i * a.dst_stride + j] =
        mvm_k_f2h(((const float *)a.x)[src * a.x_stride + j]);
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS) mvm_g_glu_half(mvm_g_glu_half_args a)
{
    list_slot sl;
    uint32_t r, c;
    if (!slot_cell(a.list, a.n_rows, a.n_ch, sl, r, c))
        return;
    const uint64_t row = (uint64_t)blockIdx.y * a.n_rows + r;
    /* group c / G's gate floats, then its up floats: the rows of the product, as one
     * dequantization laid them out (kernels.h) */
    const float *gu = (const float *)a.gu + row * a.gu_stride + (uint64_t)(c / a.G) * 2 * a.G;
    float g = gu[c % a.G], u = gu[a.G + c % a.G], h;
    if (a.glu == MVM_GLU_OAI) {
        const uint32_t ch = a.c0 + c; /* the biases: the group's last 2 G floats */
        const uint8_t *expert = (const uint8_t *)a.expert + slot_bytes(a.list, sl);
        const float *bias =
            (const float *)(expert + (uint64_t)(ch / a.G + 1) * a.group_bytes) - 2 * a.G;
        h = mvm_k_glu_oai(g + bias[ch % a.G], u + bias[a.G + ch % a.G]);
    } else {
        h = silu(g) * u;
    }
    ((uint16_t *)a.h)[row * a.h_stride + c] =
        mvm_k_f2h(h * ((const float *)a.w)[sl.row0 + r]);
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS) mvm_g_rows_out(mvm_g_rows_out_args a)
{
    list_slot sl;
    uint32_t r, j;
    if (!slot_cell(a.list, a.n_rows, a.n, sl, r, j))
        return;
    const uint64_t dst = (uint64_t)sl.row0 + r;
    float y = ((const float *)a.src)[((uint64_t)blockIdx.y * a.n_rows + r) * a.n + j];
    if (a.bias) /* as mvm_g_add adds it after the per-expert product */
        y += ((const float *)a.w)[dst] * ((const float *)a.bias)[(uint64_t)sl.e * a.n + j];
    ((float *)a.out)[dst * a.n + j] = y;
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)
    mvm_g_attn_softmax(mvm_g_attn_softmax_args a)
{
    __shared__ float tmp[MVM_G_WARPS];
    __shared__ double dtmp[MVM_G_WARPS];
    const uint32_t row = blockIdx.y, h = row / a.n_q, q = a.q0 + row % a.n_q;
    const float *s = (const float *)a.s + row * a.ld;
    uint16_t *p = (uint16_t *)a.p + row * a.ld;
    /* the keys it sees: j0 .. j1 - 1 of the row (itself at least: lo <= q < lo + n_k) */
    const uint32_t first = a.window && q + 1 > a.window ? q + 1 - a.window : 0;
    const uint32_t j0 = first > a.lo ? first - a.lo : 0;
    const uint32_t j1 = q - a.lo + 1 < a.n_k ? q - a.lo + 1 : a.n_k;
    const float sink = a.sinks ? ((const float *)a.sinks)[h] : -INFINITY;
    float mx = sink;
    for (uint32_t j = j0 + threadIdx.x; j < j1; j += blockDim.x)
        mx = fmaxf(mx, s[j] * a.scale);
    mx = block_max(mx, tmp);
    double sum = 0;
    for (uint32_t j = j0 + threadIdx.x; j < j1; j += blockDim.x)
        sum += expf(s[j] * a.scale - mx);
    sum = block_sum(sum, dtmp) + expf(sink - mx);
    const float inv = (float)(1.0 / sum);
    for (uint32_t j = threadIdx.x; j < a.n_k; j += blockDim.x)
        p[j] = j >= j0 && j < j1 ? mvm_k_f2h(expf(s[j] * a.scale - mx) * inv) : 0;
}
#endif
