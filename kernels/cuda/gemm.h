/*
 * The tensor-core path's kernels (kernels/cuda/gemm.cu): what the host
 * (engine/forward/forward_cuda_gemm.c) and they agree on, in kernels/cuda/kernels.h's terms
 * (one argument struct a kernel, its launch shape computed here, no padding).
 */
#ifndef MVM_KERNELS_CUDA_GEMM_H
#define MVM_KERNELS_CUDA_GEMM_H

#include "kernels/cuda/kernels.h"

#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wpadded"
#endif

/* ---- the tensor-core path (kernels/cuda/gemm.cu): a batch's products as F16 matrices that
 * cuBLAS multiplies (engine/forward/forward_cuda_gemm.c says when) --------------------------
 * mvm_g_dequant_<type>: weight rows to F16 (kernels/dequant.h). Source row r < n_rows, n_in
 *   elements, at w + (r / per) * group_bytes + (r % per) * row_bytes; its elements go to
 *   row (r / per) * dst_rows + r % per of dst (dst_stride halves apart), from column
 *   (r / per) * dst_cols. A matrix: per = n_rows. A channel-major expert's gate and up rows: per = 2 G (a
 *   group's gate rows, then its up rows), group_bytes the group's, dst_rows = 2 G. Its down
 *   slots (n_embd rows of G per group): per = n_embd, n_in = G, dst_rows = 0, dst_cols = G, so
 *   that each group's slots are the next G columns of one [n_embd][channels] matrix. dst,
 *   dst_stride and dst_cols make every chunk start 16-byte aligned (multiples of 8 halves). A
 *   thread per 32 elements, the rows' chunks numbered in one run along x: a down's slots are
 *   rows of one chunk, and more of them than a grid's 65535 rows (OLMoE: 2048 x 32 = 65536), so
 *   a block of such rows would also leave 127 of its 128 threads idle.
 *   Several experts at once (mvm_g_experts_list): slot s (< n_exp, along y) reads from w +
 *   at[s] (or experts[s] * w_stride) bytes and writes from dst + s * dst_expert halves. */
typedef struct mvm_g_experts_list {
    mvm_dptr experts;      /* uint32 expert ids, one a slot; 0: one expert (slot 0, no list) */
    mvm_dptr off, cnt;     /* with a list: the step's rows of each expert (by expert id) */
    uint64_t w_stride;     /*   bytes between experts' weights */
    uint32_t n_exp;        /*   slots (0 counts as 1) */
    uint32_t pad;
    mvm_dptr at;           /*   0, or [n_exp] uint64 wrapping offsets of each slot's expert */
} mvm_g_experts_list;

typedef struct mvm_g_dequant_args {
    mvm_dptr w, dst;
    uint64_t row_bytes, group_bytes, dst_stride;
    uint32_t n_in, n_rows, per, dst_rows, dst_cols, pad;
    uint64_t dst_expert;
    mvm_g_experts_list list;
} mvm_g_dequant_args;

MVM_G_FN uint32_t mvm_g_list_slots(const mvm_g_experts_list *l)
{
    return l->n_exp ? l->n_exp : 1;
}

MVM_G_FN mvm_g_shape mvm_g_dequant_shape(const mvm_g_dequant_args *a)
{
    return mvm_g_rows_shape((uint64_t)(a->n_in / MVM_QBLOCK) * a->n_rows,
                            mvm_g_list_slots(&a->list));
}

/* mvm_g_to_half: n_rows rows of n floats to F16, row i read at x + src(i) * x_stride floats
 *   (src(i) = idx[i], a uint32, with idx: an expert's tokens; else i) and written at dst + i
 *   * dst_stride halves. */
typedef struct mvm_g_to_half_args {
    mvm_dptr x, idx, dst;
    uint64_t x_stride, dst_stride;
    uint32_t n, n_rows;
} mvm_g_to_half_args;

MVM_G_FN mvm_g_shape mvm_g_to_half_shape(const mvm_g_to_half_args *a)
{
    return mvm_g_rows_shape(a->n, a->n_rows);
}

/* mvm_g_glu_half: an expert's unit between its two products, for channels c0 .. c0 + n_ch
 *   - 1 of n_rows rows (n_ch a multiple of G): row r's floats at gu + r * gu_stride, group
 *   by group (G gate floats, then the group's G up floats: its gate and up rows dequantized
 *   in one launch, per = 2 G); h[r][c] = glu(gate, up) * w[r] (the routing weights,
 *   floats) as F16 at h + r * h_stride halves. With MVM_GLU_OAI gate and up are biased
 *   first, channel c's biases in its group's slots (kernels/blocks.h: a group of G
 *   channels, group_bytes, the biases at its end) of the expert at `expert`.
 *   Several experts at once (list): slot s's rows are n_rows apart in gu and h (row s *
 *   n_rows + r), its first cnt[e] of them computed, e = experts[s], with the routing
 *   weights w[off[e] + r] and the biases of the expert list puts at `expert` (as dequant's
 *   w). A thread per (row, channel), numbered along x, a slot per y. */
typedef struct mvm_g_glu_half_args {
    mvm_dptr gu, h, w, expert;
    uint64_t gu_stride, h_stride, group_bytes;
    uint32_t n_ch, n_rows, c0, G, glu, pad;
    mvm_g_experts_list list;
} mvm_g_glu_half_args;

MVM_G_FN mvm_g_shape mvm_g_glu_half_shape(const mvm_g_glu_half_args *a)
{
    return mvm_g_rows_shape((uint64_t)a->n_ch * a->n_rows, mvm_g_list_slots(&a->list));
}

/* mvm_g_rows_out: the grouped products' rows back into the step's (several experts at
 *   once, list set): out[off[e] + r][j] = src[s * n_rows + r][j] (+ w[off[e] + r] *
 *   bias[e][j] with bias, gpt-oss's down bias) for r < cnt[e], j < n, e = experts[s]; src's
 *   rows n floats apart, out's too, bias's (by expert id) n floats apart. A thread per
 *   (row, float) along x, a slot per y. */
typedef struct mvm_g_rows_out_args {
    mvm_dptr src, out, w, bias;
    uint32_t n, n_rows;
    mvm_g_experts_list list;
} mvm_g_rows_out_args;

MVM_G_FN mvm_g_shape mvm_g_rows_out_shape(const mvm_g_rows_out_args *a)
{
    return mvm_g_rows_shape((uint64_t)a->n * a->n_rows, mvm_g_list_slots(&a->list));
}

/* mvm_g_attn_softmax: the weights of a prompt's attention by products (forward_cuda_gemm.c):
 *   row h * n_q + t of s (h < n_head, t < n_q; rows ld floats apart) holds query t's
 *   scores against keys at positions lo .. lo + n_k - 1. Query t is at position q0 + t and
 *   sees the keys at p <= q0 + t, with a window (0: none) only those at p > q0 + t -
 *   window. Its weights, scores times `scale`, head h's sink logit in the denominator with
 *   sinks (n_head floats; 0: none), in mvm_k_softmax_sink's order of operations (kernels/cpu),
 *   go to the same place of p as F16; the keys it does not see get 0. A block per row. */
typedef struct mvm_g_attn_softmax_args {
    mvm_dptr s, p, sinks;
    uint64_t ld;
    uint32_t n_head, n_q, n_k, lo, q0, window;
    float scale;
    uint32_t pad;
} mvm_g_attn_softmax_args;

MVM_G_FN mvm_g_shape mvm_g_attn_softmax_shape(const mvm_g_attn_softmax_args *a)
{
    mvm_g_shape s = {1, a->n_head * a->n_q, MVM_G_THREADS};
    return s;
}

#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC diagnostic pop
#endif

#endif
