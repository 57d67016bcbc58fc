/*
 * The engine's device kernels (the .cu files of kernels/cuda): what the host and the
 * kernels agree on.
 *
 * Every kernel takes one struct by value, so the host, the kernel and the CPU emulation of
 * the tests (tests/cuda_emu.h) read the same fields at the same offsets; device pointers are
 * mvm_dptr (a CUdeviceptr). Each kernel's launch shape is computed here, once, from its
 * arguments (mvm_g_*_shape): blocks of `block` threads on a gx x gy grid.
 *
 * The numerics follow the CPU kernels (kernels/cpu/kernels.h) so that the two backends agree
 * to float rounding: F32/F16/BF16 weights are read against F32 activations; Q8_0/Q4_0 weights
 * against activations quantized to Q8_0 (mvm_g_quantize_q8_0, llama.cpp's reference
 * rounding), their blocks summed in integers and scaled once per block; the expert's
 * intermediate activations are quantized per group for the Q types, with the routing weight
 * folded in, as the CPU does; RMSNorm and softmax sum in double.
 *
 * Kernel names: mvm_g_<kernel> for the type-free ones; mvm_g_<kernel>_<type> with <type> one
 * of f32 f16 bf16 q8_0 q4_0 (mvm_g_type_suffix) for those that read weights.
 */
#ifndef MVM_KERNELS_CUDA_KERNELS_H
#define MVM_KERNELS_CUDA_KERNELS_H

#include <stdint.h>

#ifdef __CUDACC__
#define MVM_G_FN static __host__ __device__ __forceinline__
#else
#define MVM_G_FN static inline
#endif

typedef uint64_t mvm_dptr;

/* Weight types, numbered as enum mvm_wtype (kernels/cpu/kernels.h). */
enum { MVM_G_F32, MVM_G_F16, MVM_G_BF16, MVM_G_Q8_0, MVM_G_Q4_0, MVM_G_NTYPES };

#define MVM_G_QBLOCK 32      /* elements per Q block; channels per expert group */
#define MVM_G_Q8_BYTES 34    /* one Q8_0 block: f16 scale, 32 int8 */
#define MVM_G_Q4_BYTES 18    /* one Q4_0 block: f16 scale, 16 bytes of nibbles */
#define MVM_G_THREADS 128    /* threads per block, every kernel */
#define MVM_G_WARPS (MVM_G_THREADS / 32)
#define MVM_G_TILE 8         /* tokens (or expert rows) each weight read serves */

typedef struct mvm_g_shape {
    uint32_t gx, gy, block;
} mvm_g_shape;

MVM_G_FN const char *mvm_g_type_suffix(int t)
{
    return t == MVM_G_F32 ? "f32" : t == MVM_G_F16 ? "f16" : t == MVM_G_BF16 ? "bf16"
         : t == MVM_G_Q8_0 ? "q8_0" : "q4_0";
}

MVM_G_FN int mvm_g_is_q(int t) { return t == MVM_G_Q8_0 || t == MVM_G_Q4_0; }

/* Bytes of the 32-element block of type t (a float type's 32 elements). */
MVM_G_FN uint32_t mvm_g_block_bytes(int t)
{
    return t == MVM_G_Q8_0 ? MVM_G_Q8_BYTES : t == MVM_G_Q4_0 ? MVM_G_Q4_BYTES
         : t == MVM_G_F32 ? 4 * MVM_G_QBLOCK : 2 * MVM_G_QBLOCK;
}

/* Bytes of n elements of type t (n % 32 == 0 for the Q types). */
MVM_G_FN uint64_t mvm_g_row_bytes(int t, uint64_t n)
{
    return mvm_g_is_q(t) ? n / MVM_G_QBLOCK * mvm_g_block_bytes(t)
                         : n * (t == MVM_G_F32 ? 4 : 2);
}

/* Bytes of one channel group of a channel-major expert (kernels/cpu/kernels.h): 32 gate
 * rows, 32 up rows, then n_embd down blocks of 32. */
MVM_G_FN uint64_t mvm_g_group_bytes(int t, uint64_t n_embd)
{
    return 2 * MVM_G_QBLOCK * mvm_g_row_bytes(t, n_embd) + n_embd * mvm_g_block_bytes(t);
}

MVM_G_FN uint32_t mvm_g_div_up(uint64_t n, uint32_t d) { return (uint32_t)((n + d - 1) / d); }

/* ---- mvm_g_quantize_q8_0: rows of F32 -> rows of Q8_0 blocks (the Q types' activations).
 * Row i: n floats at x + i * x_stride floats -> n / 32 blocks at q + i * q_stride bytes. */
typedef struct mvm_g_quantize_args {
    mvm_dptr x, q;
    uint64_t x_stride, q_stride;
    uint32_t n, n_rows;
} mvm_g_quantize_args;

MVM_G_FN mvm_g_shape mvm_g_quantize_shape(const mvm_g_quantize_args *a)
{
    mvm_g_shape s = {mvm_g_div_up((uint64_t)a->n / MVM_G_QBLOCK, MVM_G_THREADS), a->n_rows,
                     MVM_G_THREADS};
    return s;
}

/* ---- mvm_g_matvec_<type>: y[i][r] = row r of w . act[i] for r < n_out, i < n_tok.
 * w: n_out rows of n_in elements, row_bytes apart (ggml layout). act[i] at act + i *
 * act_stride bytes: n_in floats for the float types, n_in / 32 Q8_0 blocks for the Q types.
 * y[i][r] at y + (i * y_stride + r) floats. One warp per row; a block's rows are read once
 * for a tile of MVM_G_TILE tokens (gy tiles). */
typedef struct mvm_g_matvec_args {
    mvm_dptr w, act, y;
    uint64_t row_bytes, act_stride, y_stride;
    uint32_t n_in, n_out, n_tok;
} mvm_g_matvec_args;

MVM_G_FN mvm_g_shape mvm_g_matvec_shape(const mvm_g_matvec_args *a)
{
    mvm_g_shape s = {mvm_g_div_up(a->n_out, MVM_G_WARPS), mvm_g_div_up(a->n_tok, MVM_G_TILE),
                     MVM_G_THREADS};
    return s;
}

/* ---- the routed experts of one MoE layer, in three kernels -------------------------------
 * Rows are (token, expert) pairs grouped by expert: expert active[a] (a < n_active) has rows
 * off[e] .. off[e] + cnt[e] - 1 (uint32 arrays indexed by expert id), row r computes token
 * row_tok[r] with routing weight row_w[r]. Expert e of the layer is channel-major at
 * experts + e * expert_stride (its fixed address in the expert space).
 *
 * mvm_g_expert_up_<type>: h[r] = silu(gate . act) * (up . act) * row_w[r] for every channel,
 *   act = act + row_tok[r] * act_stride bytes (the token's activations in the weights'
 *   format). h[r] at h + r * h_stride bytes: n_ff floats (float types) or n_ff / 32 Q8_0
 *   blocks (Q types). Grid: (group, active expert).
 * mvm_g_expert_down_<type>: out[r][j] = sum over groups of down_g[j] . h[r]_g, j < n_embd,
 *   out[r] at out + r * n_embd floats. Grid: (output range, active expert).
 * mvm_g_expert_sum: x[i][j] += sum over k < top_k of out[tok_rows[i * top_k + k]][j]: each
 *   token adds its experts' outputs in its own order, so the sum is deterministic (no
 *   atomics). Grid: (output range, token). */
typedef struct mvm_g_expert_args {
    mvm_dptr experts, act, active, off, cnt, row_tok, row_w, h, out;
    uint64_t expert_stride, act_stride, h_stride;
    uint32_t n_embd, n_groups, n_active;
} mvm_g_expert_args;

MVM_G_FN mvm_g_shape mvm_g_expert_up_shape(const mvm_g_expert_args *a)
{
    mvm_g_shape s = {a->n_groups, a->n_active, MVM_G_THREADS};
    return s;
}

MVM_G_FN mvm_g_shape mvm_g_expert_down_shape(const mvm_g_expert_args *a)
{
    mvm_g_shape s = {mvm_g_div_up(a->n_embd, MVM_G_THREADS), a->n_active, MVM_G_THREADS};
    return s;
}

typedef struct mvm_g_expert_sum_args {
    mvm_dptr x, out, tok_rows;
    uint32_t n_embd, n_tok, top_k;
} mvm_g_expert_sum_args;

MVM_G_FN mvm_g_shape mvm_g_expert_sum_shape(const mvm_g_expert_sum_args *a)
{
    mvm_g_shape s = {mvm_g_div_up(a->n_embd, MVM_G_THREADS), a->n_tok, MVM_G_THREADS};
    return s;
}

/* ---- small F32 ops ----------------------------------------------------------------------
 * mvm_g_rmsnorm: out[i] = x[i] / sqrt(mean(x[i]^2) + eps) * w (w = 0: no scale) for n_rows
 *   rows of n floats, x[i] at x + i * x_stride, out[i] at out + i * out_stride floats (out
 *   may be x). One block per row. */
typedef struct mvm_g_rmsnorm_args {
    mvm_dptr x, out, w;
    uint64_t x_stride, out_stride;
    uint32_t n, n_rows;
    float eps;
} mvm_g_rmsnorm_args;

MVM_G_FN mvm_g_shape mvm_g_rmsnorm_shape(const mvm_g_rmsnorm_args *a)
{
    mvm_g_shape s = {a->n_rows, 1, MVM_G_THREADS};
    return s;
}

/* mvm_g_rope: the rotary embedding of kernels/cpu (mvm_k_rope) in place on n_tok tokens of
 * n_heads heads of head_dim floats (token i at x + i * stride floats, at position pos0 + i). */
typedef struct mvm_g_rope_args {
    mvm_dptr x;
    uint64_t stride;
    uint32_t n_tok, n_heads, head_dim, n_rot, pos0, neox;
    float base;
} mvm_g_rope_args;

MVM_G_FN mvm_g_shape mvm_g_rope_shape(const mvm_g_rope_args *a)
{
    mvm_g_shape s = {mvm_g_div_up((uint64_t)a->n_heads * (a->n_rot / 2), MVM_G_THREADS),
                     a->n_tok, MVM_G_THREADS};
    return s;
}

/* mvm_g_attention: causal attention of n_tok queries at positions pos0.. over the KV cache.
 * Query i, head h: q + i * q_dim + h * head_dim; keys and values of position p for kv head
 * h / (n_head / n_head_kv) at kc, vc + p * kv_dim + that head's offset (floats); the output
 * like the query in out. scores: n_tok * n_head rows of n_ctx floats of scratch. One block
 * per (head, query). */
typedef struct mvm_g_attention_args {
    mvm_dptr q, kc, vc, out, scores;
    uint32_t n_tok, pos0, n_head, n_head_kv, head_dim, n_ctx;
    float scale;
} mvm_g_attention_args;

MVM_G_FN mvm_g_shape mvm_g_attention_shape(const mvm_g_attention_args *a)
{
    mvm_g_shape s = {a->n_head, a->n_tok, MVM_G_THREADS};
    return s;
}

/* mvm_g_add: x[i][j] += g(i) * y[i][j] for n_tok rows of n floats, x[i] at x + i * n,
 *   y[i] at y + i * y_stride (0: one row for all, a bias), g(i) = sigmoid(gate[i]) with a
 *   gate (the shared expert's), else 1.
 * mvm_g_swiglu (the same arguments, no gate): x[i][j] = silu(x[i][j]) * y[i][j]. */
typedef struct mvm_g_add_args {
    mvm_dptr x, y, gate;
    uint64_t y_stride;
    uint32_t n, n_tok;
} mvm_g_add_args;

MVM_G_FN mvm_g_shape mvm_g_add_shape(const mvm_g_add_args *a)
{
    mvm_g_shape s = {mvm_g_div_up(a->n, MVM_G_THREADS), a->n_tok, MVM_G_THREADS};
    return s;
}

#endif
