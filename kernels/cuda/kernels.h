/*
 * The engine's device kernels (the .cu files of kernels/cuda): what the host and the
 * kernels agree on.
 *
 * Every kernel takes one struct by value, so the host, the kernel and the CPU emulation of
 * the tests (tests/cuda_emu.h) read the same fields at the same offsets; device pointers are
 * mvm_dptr (a CUdeviceptr). Each kernel's launch shape is computed here, once, from its
 * arguments (mvm_g_*_shape): blocks of `block` threads on a gx x gy grid.
 *
 * The numerics are the CPU kernels' (kernels/cpu/kernels.h), so that the two backends agree
 * to float rounding: the weight types are the CPU's (enum mvm_wtype), and every block of a
 * Q or K type is multiplied with its activation block by kernels/blocks.h's integer code,
 * which both compile. F32/F16/BF16 weights are read against F32 activations; the 32-element
 * Q types against activations quantized to Q8_0 blocks, the K-quants against Q8_K blocks
 * (mvm_g_quantize, llama.cpp's reference rounding); the expert's intermediate activations
 * are quantized per group to its down matrix's format, with the routing weight folded in,
 * as the CPU does; RMSNorm and softmax sum in double.
 *
 * Kernel names: mvm_g_<kernel> for the type-free ones; mvm_g_<kernel>_<type> with <type> the
 * ggml name of a weight type (mvm_k_wtype_name: f32 ... q6_K) for those that read weights,
 * one function per type (MVM_G_FOR_TYPES).
 *
 * The tensor-core path's kernels (gemm.cu) have theirs in kernels/cuda/gemm.h.
 *
 * No argument struct has padding: each names its spare bytes (`pad`, zero), because a CUDA
 * graph (engine/compute/gpu_graph.c) compares a token's arguments with the last token's
 * byte for byte, and a complete initializer leaves padding as the stack had it, which
 * would update the node every token. The host compilers are told to refuse padding here.
 */
#ifndef MVM_KERNELS_CUDA_KERNELS_H
#define MVM_KERNELS_CUDA_KERNELS_H

#include <stdint.h>

#include "kernels/blocks.h"
#include "kernels/rope.h"

#ifdef __CUDACC__
#define MVM_G_FN static __host__ __device__ __forceinline__
#else
#define MVM_G_FN static inline
#endif

#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wpadded"
#endif

typedef uint64_t mvm_dptr;

/* X(name, type) for every weight type: the typed kernels' instances. */
#define MVM_G_FOR_TYPES(X)                                                                     \
    X(f32, MVM_W_F32) X(f16, MVM_W_F16) X(bf16, MVM_W_BF16) X(q8_0, MVM_W_Q8_0)                \
    X(q4_0, MVM_W_Q4_0) X(q4_1, MVM_W_Q4_1) X(q5_0, MVM_W_Q5_0) X(q5_1, MVM_W_Q5_1)            \
    X(iq4_nl, MVM_W_IQ4_NL) X(q2_K, MVM_W_Q2_K) X(q3_K, MVM_W_Q3_K) X(q4_K, MVM_W_Q4_K)        \
    X(q5_K, MVM_W_Q5_K) X(q6_K, MVM_W_Q6_K) X(iq4_xs, MVM_W_IQ4_XS) X(mxfp4, MVM_W_MXFP4)      \
    X(iq2_xxs, MVM_W_IQ2_XXS) X(iq2_xs, MVM_W_IQ2_XS) X(iq2_s, MVM_W_IQ2_S)                    \
    X(iq3_xxs, MVM_W_IQ3_XXS) X(iq3_s, MVM_W_IQ3_S) X(iq1_s, MVM_W_IQ1_S) X(iq1_m, MVM_W_IQ1_M)

/* X(name, type) for the weight types of the mmq kernels (kernels/cuda/mmq.cu; their
 * experts' up and down and dense products): Q8_0 and the table types against Q8_0
 * activation blocks, the K-quants and IQ4_XS against Q8_K's. The one list of them: the
 * kernels' instances, the engine's choice (engine/compute/gpu.c, forward_cuda_gemm.c) and
 * the tests'. */
#define MVM_G_MMQ_TYPES(X)                                                                     \
    X(q8_0, MVM_W_Q8_0) X(iq4_nl, MVM_W_IQ4_NL) X(mxfp4, MVM_W_MXFP4) X(q2_K, MVM_W_Q2_K)      \
    X(q3_K, MVM_W_Q3_K) X(q4_K, MVM_W_Q4_K) X(q5_K, MVM_W_Q5_K) X(q6_K, MVM_W_Q6_K)            \
    X(iq4_xs, MVM_W_IQ4_XS)

/* Which kernels a translation unit makes. The device's PTX comes as one module per weight
 * type (kernels/cuda/typed.cu, compiled with -DMVM_G_TYPE=q4_K -DMVM_G_WTYPE=MVM_W_Q4_K and
 * so on: only that type's instances; a second type with MVM_G_TYPE2, MVM_G_WTYPE2, as f32's
 * beside q8_0's: CMakeLists.txt says why) beside modules of the kernels of no type
 * (-DMVM_G_UNTYPED), so that the driver compiles for the GPU only the types a model has
 * (engine/compute/gpu.c). Without either (the CPU's emulation, tests/cuda_emu.h): all. */
#define MVM_G_APPLY(X, name, type) X(name, type)
#if defined(MVM_G_TYPE2)
#define MVM_G_TYPED_KERNELS(X)                                                                 \
    MVM_G_APPLY(X, MVM_G_TYPE, MVM_G_WTYPE) MVM_G_APPLY(X, MVM_G_TYPE2, MVM_G_WTYPE2)
#define MVM_G_UNTYPED_KERNELS 0
#elif defined(MVM_G_TYPE)
#define MVM_G_TYPED_KERNELS(X) MVM_G_APPLY(X, MVM_G_TYPE, MVM_G_WTYPE)
#define MVM_G_UNTYPED_KERNELS 0
#elif defined(MVM_G_UNTYPED)
#define MVM_G_TYPED_KERNELS(X)
#define MVM_G_UNTYPED_KERNELS 1
#else
#define MVM_G_TYPED_KERNELS(X) MVM_G_FOR_TYPES(X)
#define MVM_G_UNTYPED_KERNELS 1
#endif

#define MVM_G_THREADS 128    /* threads per block, every kernel */
#define MVM_G_WARPS (MVM_G_THREADS / 32)
#define MVM_G_TILE 8         /* tokens (or expert rows) each weight read serves */
#define MVM_G_UP_THREADS 512 /* mvm_g_expert_up's: a warp per 4 of its block's 64 rows */
/* mvm_g_expert_down1_keep's: 16 outputs a block, whose blocks of a group lie together and
 * are copied as one run: 16 Q8_0 blocks are 544 bytes, whole 32-byte sectors of the bus's
 * reads, where 4 (136 bytes) shared their end sectors with the next block's run and read
 * them twice (36 GB/s against 50 for up's rows, bench_gpu_experts on an H200). */
#define MVM_G_KEEP_THREADS 512

typedef struct mvm_g_shape {
    uint32_t gx, gy, block;
} mvm_g_shape;

MVM_G_FN uint32_t mvm_g_div_up(uint64_t n, uint32_t d) { return (uint32_t)((n + d - 1) / d); }

/* A thread per element of `rows` rows of `per_row`: blocks of MVM_G_THREADS along a row (x),
 * a row per y. */
MVM_G_FN mvm_g_shape mvm_g_rows_shape(uint64_t per_row, uint32_t rows)
{
    mvm_g_shape s = {mvm_g_div_up(per_row, MVM_G_THREADS), rows, MVM_G_THREADS};
    return s;
}

/* ---- mvm_g_quantize: rows of F32 -> the activation blocks of weight type `type` (Q8_0 for
 * the 32-element Q types, Q8_K for the K-quants). Row i: n floats at x + i * x_stride floats
 * -> mvm_k_act_bytes(type, n) bytes at q + i * q_stride (a multiple of 4 for Q8_K, whose
 * scale is an f32). 8 lanes per Q8_0 block, a warp per Q8_K block. */
typedef struct mvm_g_quantize_args {
    mvm_dptr x, q;
    uint64_t x_stride, q_stride;
    uint32_t n, n_rows, type, pad;
} mvm_g_quantize_args;

MVM_G_FN mvm_g_shape mvm_g_quantize_shape(const mvm_g_quantize_args *a)
{
    const enum mvm_wtype t = (enum mvm_wtype)a->type;
    const uint64_t blocks = a->n / mvm_k_block_elems(t);
    return mvm_g_rows_shape(blocks * (mvm_k_is_k(t) ? 32 : 8), a->n_rows);
}

/* ---- mvm_g_matvec_<type>: y[i][r] = row r of w . act[i] for r < n_out, i < n_tok.
 * w: n_out rows of n_in elements, row_bytes apart (ggml layout). act[i] at act + i *
 * act_stride bytes in the weights' activation format (mvm_k_act_bytes).
 * y[i][r] at y + (i * y_stride + r) floats. One warp per row (or part of a row: split),
 * its lanes taking the row's floats, or its Q blocks and 32-element chunks of K
 * super-blocks, in turn; a block's rows are read once for a tile of MVM_G_TILE tokens (gy
 * tiles).
 * With n_head > 1, n_head such products in one launch (MLA's per-head matrices): head g's
 * w, act and y are the above plus g * w_head bytes, g * act_head bytes and g * y_head
 * floats (gy: n_head x the tiles). 0 or 1: one. With accumulate, y[i][r] += the product
 * (a residual added in the product's own pass). With n_out2 (n_out3) rows more, one head,
 * the same launch multiplies the same activations by a second (third) matrix of the same
 * type and width at w2 (w3), into y2 (y3) with rows y_stride2 (y_stride3) floats apart: a
 * layer's q, k and v, or an FFN's gate and up, in one launch. With split = MVM_G_WARPS
 * (mvm_g_matvec_split), a block's warps share each row instead, each taking a part of
 * its blocks, and their sums are added in warp order (0 or 1: a warp a row). */
typedef struct mvm_g_matvec_args {
    mvm_dptr w, act, y;
    uint64_t row_bytes, act_stride, y_stride, w_head, act_head, y_head;
    uint32_t n_in, n_out, n_tok, n_head, accumulate, split;
    mvm_dptr w2, y2, w3, y3;
    uint64_t y_stride2, y_stride3;
    uint32_t n_out2, n_out3;
} mvm_g_matvec_args;

#define MVM_G_MATVEC_SPLIT_ROWS 2048u /* rows of a decode product that a block a row takes */
#define MVM_G_MATVEC_SPLIT_COLS 1024u /* if its rows are at least this long */

/* The warps of a row for a product of `rows` rows of n_in elements over n_tok tokens and
 * n_head heads: a block's (MVM_G_WARPS) for a decode product of few long rows, else one.
 * A warp a row gave an attention output of 2048 rows 16 warps an SM of an H200's 132, too
 * few to keep its loads in flight: 6.1-6.8 µs a q8_0 2048 x 2048 product, against 4.9-5.1
 * with a block of 128 threads a row; at 6144 rows the two are even (bench/gpu/kernel_lab.cu,
 * docs/perf/engine.md, session 72, run H). A short row is a few blocks a warp already: split
 * four ways, its warps would add up more than they read (and the emulator's tiny models,
 * whose rows are all short, would run their every product in four times the blocks). */
MVM_G_FN uint32_t mvm_g_matvec_split(uint64_t rows, uint32_t n_in, uint32_t n_tok,
                                     uint32_t n_head)
{
    return n_tok == 1 && n_head <= 1 && rows <= MVM_G_MATVEC_SPLIT_ROWS &&
                   n_in >= MVM_G_MATVEC_SPLIT_COLS
               ? MVM_G_WARPS
               : 1;
}

MVM_G_FN uint32_t mvm_g_matvec_tiles(const mvm_g_matvec_args *a)
{
    return mvm_g_div_up(a->n_tok, MVM_G_TILE);
}

MVM_G_FN mvm_g_shape mvm_g_matvec_shape(const mvm_g_matvec_args *a)
{
    const uint64_t rows = (uint64_t)a->n_out + a->n_out2 + a->n_out3;
    mvm_g_shape s = {(uint32_t)(a->split > 1 ? rows : mvm_g_div_up(rows, MVM_G_WARPS)),
                     mvm_g_matvec_tiles(a) * (a->n_head > 1 ? a->n_head : 1), MVM_G_THREADS};
    return s;
}

/* ---- mvm_g_mmq_matmul_<type> (kernels/cuda/mmq.cu): matvec's product, its arguments and
 * results, on the int8 tensor cores for a batch of tokens: a block takes MVM_G_MMQ_TILE rows
 * of one matrix (of up to three, as matvec's parts) against MVM_G_MMQ_TILE tokens of one
 * head; split is not read. For mmq's types (Q8_0, IQ4_NL, MXFP4, Q2_K to Q6_K, IQ4_XS) on a
 * device of compute capability 8.0; the weights 2-byte aligned (MXFP4's: any), the
 * activations as mvm_g_quantize writes them, 4-byte aligned. Grid: (the matrices' row
 * tiles, the token tiles x n_head), MVM_G_THREADS a block. */
#define MVM_G_MMQ_TILE 64u

MVM_G_FN mvm_g_shape mvm_g_mmq_matmul_shape(const mvm_g_matvec_args *a)
{
    const uint32_t T = MVM_G_MMQ_TILE;
    mvm_g_shape s = {mvm_g_div_up(a->n_out, T) + mvm_g_div_up(a->n_out2, T) +
                         mvm_g_div_up(a->n_out3, T),
                     mvm_g_div_up(a->n_tok, T) * (a->n_head > 1 ? a->n_head : 1),
                     MVM_G_THREADS};
    return s;
}

/* ---- the routed experts of one MoE layer, in three kernels -------------------------------
 * Rows are (token, expert) pairs grouped by expert: expert active[a] (a < n_active) has rows
 * off[e] .. off[e] + cnt[e] - 1 (uint32 arrays indexed by expert id), row r computes token
 * row_tok[r] with routing weight row_w[r]. Expert e of the layer is channel-major at
 * experts + e * expert_stride (its fixed address in the expert space), its types gate_up and
 * down (enum mvm_wtype) and its unit glu (enum mvm_k_glu; kernels/cpu/kernels.h has the
 * layout): n_groups groups of G = mvm_k_expert_group_channels channels (32, or 256 with a
 * K-quant down).
 *
 * mvm_g_expert_up_<gate_up type>: h[r] = glu(gate . act, up . act) * row_w[r] for every
 *   channel, act = act + row_tok[r] * act_stride bytes (the token's activations in gate_up's
 *   format); glu: silu(g) * u, or MVM_GLU_OAI's on g and u plus the group's biases. h[r] at
 *   h + r * h_stride bytes in down's activation format: n_ff floats (float types) or n_ff /
 *   32 Q8_0 blocks (Q types); with a K-quant down, n_ff floats at hf + r * n_ff floats, for
 *   mvm_g_expert_quantize. Grid: (32 channels, active expert), MVM_G_UP_THREADS a block.
 * mvm_g_expert_up1_<gate_up type>: the same for a step whose active experts have one row
 *   each (a decode token's; one_row set), a warp per (channel, active expert): h[r] as
 *   floats for a float down, else hf[r] (n_ff floats) for mvm_g_expert_quantize. Grid:
 *   (channels, a warp each; active expert). mvm_g_expert_up1_keep_<type>, and down1's
 *   twin: the same, storing what they read where wstore says (wstore set).
 * mvm_g_expert_quantize (after up with a K-quant down, after up1 with a Q or K one):
 *   h[r] = hf[r]'s n_ff floats in down's activation format (Q8_K blocks, or Q8_0 blocks).
 *   Grid: (group, active expert).
 * mvm_g_expert_down_<down type>: out[r][j] = sum over groups of down_g[j] . h[r]_g, plus
 *   row_w[r] * down_bias[e][j] with a down bias (gpt-oss: n_embd floats per expert at
 *   down_bias + e * n_embd; 0: none), j < n_embd, out[r] at out + r * n_embd floats.
 *   Grid: (outputs, a warp each; active expert).
 * mvm_g_expert_down1_<down type>: the same for a step whose active experts have one row
 *   each (one_row), without down's tile of rows. Grid: down's; its _keep twin's
 *   (MVM_G_KEEP_THREADS a block, a warp an output).
 * mvm_g_expert_mmq_up_<gate_up type>, mvm_g_expert_mmq_down_<down type> (kernels/cuda/mmq.cu):
 *   up's and down's results on the int8 tensor cores, for a step of several rows (mmq set,
 *   one_row not), for Q8_0, IQ4_NL and MXFP4 experts and K-quant ones (Q2_K to Q6_K,
 *   IQ4_XS gate/up and down: Q2_K's to Q6_K's, IQ4_XS's): h[r] as
 *   up's (Q8_0 blocks; with a K down, hf's floats for mvm_g_expert_quantize), out[r] as
 *   down's. Grids: up's, and (64 outputs, active expert); MVM_G_THREADS a block. The
 *   module needs compute capability 8.0 (int8 mma.sync).
 * mvm_g_expert_sum: x[i][j] += sum over k < top_k of out[tok_rows[i * top_k + k]][j]: each
 *   token adds its experts' outputs in its own order, so the sum is deterministic (no
 *   atomics). Grid: (output range, token). */
typedef struct mvm_g_expert_args {
    mvm_dptr experts, act, active, off, cnt, row_tok, row_w, h, out, down_bias, hf;
    mvm_dptr wptr; /* 0, or [n_active] addresses: active expert i read there, not at
                      experts + e * expert_stride, where nonzero (device-view, or its
                      home read in place) */
    mvm_dptr wstore; /* 0, or [n_active] addresses (up1 and down1 only): where nonzero,
                        active expert i's bytes are stored there as they are read, laid out
                        as where they are read (read-through: vmm/fill.c) */
    uint64_t expert_stride, act_stride, h_stride;
    uint32_t n_embd, n_groups, n_active, gate_up, down, glu;
    uint32_t one_row; /* every active expert has one row: up1 (mvm_gpu_experts_up) */
    uint32_t mmq;     /* up and down by the mmq kernels where a step has several rows
                         (mvm_gpu_experts_up): Q8_0, IQ4_NL, MXFP4, Q2_K to Q6_K or
                         IQ4_XS experts, on a device that has them (MOEVM_MMQ) */
} mvm_g_expert_args;

MVM_G_FN mvm_g_shape mvm_g_expert_up_shape(const mvm_g_expert_args *a)
{
    mvm_g_shape s = {a->n_groups * (mvm_k_is_k((enum mvm_wtype)a->down) ? MVM_QK_K / MVM_QBLOCK
                                                                         : 1),
                     a->n_active, MVM_G_UP_THREADS};
    return s;
}

MVM_G_FN mvm_g_shape mvm_g_expert_up1_shape(const mvm_g_expert_args *a)
{
    const uint32_t G = mvm_k_is_k((enum mvm_wtype)a->down) ? MVM_QK_K : MVM_QBLOCK;
    mvm_g_shape s = {a->n_groups * G / MVM_G_WARPS, a->n_active, MVM_G_THREADS};
    return s;
}

MVM_G_FN mvm_g_shape mvm_g_expert_quantize_shape(const mvm_g_expert_args *a)
{
    mvm_g_shape s = {a->n_groups, a->n_active, MVM_G_THREADS};
    return s;
}

MVM_G_FN mvm_g_shape mvm_g_expert_down_shape(const mvm_g_expert_args *a)
{
    mvm_g_shape s = {mvm_g_div_up(a->n_embd, MVM_G_WARPS), a->n_active, MVM_G_THREADS};
    return s;
}

MVM_G_FN mvm_g_shape mvm_g_expert_down1_shape(const mvm_g_expert_args *a)
{
    return mvm_g_expert_down_shape(a);
}

MVM_G_FN mvm_g_shape mvm_g_expert_down1_keep_shape(const mvm_g_expert_args *a)
{
    mvm_g_shape s = {mvm_g_div_up(a->n_embd, MVM_G_KEEP_THREADS / 32), a->n_active,
                     MVM_G_KEEP_THREADS};
    return s;
}

MVM_G_FN mvm_g_shape mvm_g_expert_mmq_up_shape(const mvm_g_expert_args *a)
{
    mvm_g_shape s = mvm_g_expert_up_shape(a);
    s.block = MVM_G_THREADS;
    return s;
}

MVM_G_FN mvm_g_shape mvm_g_expert_mmq_down_shape(const mvm_g_expert_args *a)
{
    mvm_g_shape s = {mvm_g_div_up(a->n_embd, MVM_G_MMQ_TILE), a->n_active, MVM_G_THREADS};
    return s;
}

typedef struct mvm_g_expert_sum_args {
    mvm_dptr x, out, tok_rows;
    uint32_t n_embd, n_tok, top_k, pad;
} mvm_g_expert_sum_args;

MVM_G_FN mvm_g_shape mvm_g_expert_sum_shape(const mvm_g_expert_sum_args *a)
{
    return mvm_g_rows_shape(a->n_embd, a->n_tok);
}

/* ---- mvm_g_route: one token's routing on the device, the host's (engine/forward/moe_step.c,
 * route_token and group) computed where the router's logits are, so that a decode step whose
 * experts are all resident need not wait for the host (engine/forward/forward_cuda.c,
 * moe_routed_here). From logits[E]: the probabilities (softmax summed in double, or
 * sigmoid); the choosing key, plus choose_bias[E] (0: none), and with n_group > 1 groups of
 * E / n_group experts those outside the n_group_used best groups at -inf (a group's key its
 * best expert's, plus its second best's under sigmoid: policy/router.h); the top_k by key,
 * NaN lowest and ties to the lower index (mvm_k_topk); their weights, the probabilities,
 * divided by their sum with norm_topk, times scale. Out, as the host lays one token's step
 * out: the experts ascending in active[0..top_k), expert e's one row at off[e] = its place
 * there with cnt[e] = 1, row_tok[r] = 0, row_w[r] its weight, tok_rows[k] the k-th choice's
 * row; and sel[k] (int32) and w[k], the choice best first, for the host's policies. With
 * `given` (top_k int32 experts, then their top_k float weights: a benchmark's replayed
 * routing, mvm_ctx_policies.route_override) the choice is that one instead. With `addr`
 * (E uint64: where each expert is read, 0 its own address; a decode step at a budget,
 * engine/forward/forward_cuda_route.c) wptr[r] = addr[active[r]], the expert launch's
 * per-expert addresses (mvm_g_expert_args.wptr), MVM_G_ADDR_FILL cleared. Read-through
 * (with wstore): the choices whose addr has MVM_G_ADDR_FILL set (a home read in place), in
 * choice order, take the next slabs of pool[0..n_pool) (uint64 device addresses) while any
 * is left: wstore[r] = that slab (mvm_g_expert_args.wstore; 0 for the others), and
 * claims[1 + i] = layer * n_expert + expert for pool slab i (uint32s), claims[0] the
 * choices so far that were to be kept, slab or not (the slabs taken: the first
 * min(claims[0], n_pool); the host zeroes claims[0] before a token's first layer). A slab
 * of 0 keeps nothing (wstore 0). One warp;
 * n_expert <= MVM_G_ROUTE_MAX_E, top_k <= 32, n_group <= 32. */
#define MVM_G_ROUTE_MAX_E 1024
#define MVM_G_ADDR_FILL 1ull /* an addr entry's low bit (addresses are page-aligned) */
#define MVM_G_ADDR_CPU 2ull  /* a wptr entry: the CPU computes this expert (the kernels skip
                                its block) */
typedef struct mvm_g_route_args {
    mvm_dptr logits, choose_bias, active, off, cnt, row_tok, tok_rows, row_w, sel, w, given;
    mvm_dptr addr, wptr;
    mvm_dptr pool, claims, wstore;
    mvm_dptr share, token, hidden, on_cpu; /* the CPU's share (below; share 0: none) */
    float scale;
    uint32_t n_expert, top_k, n_group, n_group_used, sigmoid, norm_topk, n_pool, layer;
    uint32_t n_embd, cpu_row, zero_row;
    uint32_t n_tok, pad; /* n_tok: mvm_g_route_rows's tokens (below) */
} mvm_g_route_args;

MVM_G_FN mvm_g_shape mvm_g_route_shape(const mvm_g_route_args *a)
{
    (void)a;
    mvm_g_shape s = {1, 1, 32};
    return s;
}

/* ---- a prompt batch routed on the device (engine/forward/forward_cuda_prompt.c) -----------
 * mvm_g_route_rows: mvm_g_route's choice for each of n_tok tokens, a block (one warp) each,
 * from logits [n_tok][n_expert]: sel[t][k] (int32) and w[t][k], best first, as the host's
 * route_token makes them, or with `given` ([n_tok][2 top_k]: a token's experts, then their
 * weights) that choice; no `addr` or CPU share, and no layout. mvm_g_route_group
 * (one block): those rows grouped by expert as the host's group() lays a step out
 * (engine/forward/moe_step.c): off[e] and cnt[e] for every expert, each expert's rows in the
 * order of the choices (token by token), row_tok[r] their token, row_w[r] their weight,
 * tok_rows[t][k] the row of token t's k-th choice, and active[e] = e for every expert, so
 * that the expert launches take n_expert blocks a slice (those of an expert with no rows do
 * nothing). A choice outside 0 .. n_expert - 1 (a device that answers wrongly) takes no
 * row: its tok_rows entry is zero_row, whose out row reads zeros. */
#define MVM_G_GROUP_WARPS 8 /* mvm_g_route_group's: each takes a run of the choices */
typedef struct mvm_g_route_group_args {
    mvm_dptr sel, w, active, off, cnt, row_tok, tok_rows, row_w;
    uint32_t n_expert, top_k, n_tok, zero_row;
} mvm_g_route_group_args;

MVM_G_FN mvm_g_shape mvm_g_route_rows_shape(const mvm_g_route_args *a)
{
    mvm_g_shape s = {a->n_tok, 1, 32};
    return s;
}

MVM_G_FN mvm_g_shape mvm_g_route_group_shape(const mvm_g_route_group_args *a)
{
    (void)a;
    mvm_g_shape s = {1, 1, MVM_G_GROUP_WARPS * 32};
    return s;
}

/* ---- the CPU's share of a decode step routed on the device at a budget ------------------
 * (engine/forward/forward_cuda_cpu.c, MOEVM_DEVICE_CPU.) With route's `share` set, its misses
 * (an addr entry with MVM_G_ADDR_FILL where wstore is set, else any nonzero one: a home read
 * in place) go, in choice order, to the CPU's threads while their running sum of per-miss
 * times ends before the link's: cpu_us and link_us, per miss, of the token's words at
 * `token` (mvm_g_cpu_token, after the token's position: the host sends them with its row
 * each token, so the graph's arguments stay the same). Those choices take no slab, their
 * wptr entry is MVM_G_ADDR_CPU (the expert kernels skip them), on_cpu[k] (int32, the stage)
 * is 1 for them and 0 for the others, and their tok_rows entry is out's row cpu_row for the
 * first and zero_row (zeros) for the rest, so that the sum adds the CPU's row once. The
 * kernel writes the layer's share, host memory mapped for the device: their experts and
 * weights in choice order, n, the router input `hidden` (n_embd floats), then, after a
 * system fence, the token's number in `token`, which the host's threads wait for. They
 * compute the rows, write their sum to `out` and store `done` = the token's number, always
 * (a failure too: they never leave the device waiting).
 * mvm_g_cpu_wait: where any on_cpu[k] is set, waits for the share's `done` to be the
 * token's number (at most timeout_ns: then `late` = the token's number, for the host, and
 * the token's gave_up too, so that its later layers do not wait), then copies the share's
 * out to `row` (n_embd floats: out's row cpu_row). One block. */
typedef struct mvm_g_cpu_token {
    uint32_t tok;         /* the token's number (nonzero) */
    float cpu_us, link_us; /* a miss's time on the CPU (0: it takes none), read in place */
    uint32_t gave_up;     /* the device's: tok once a wait of the token gave up (0 sent) */
} mvm_g_cpu_token;

#define MVM_G_CPU_SHARE_HEAD 512u /* the header's bytes; then hidden, then out */
typedef struct mvm_g_cpu_share {
    uint32_t token, n;  /* written by the device, token last */
    int32_t expert[32];
    float w[32];
    uint32_t pad0[14];
    uint32_t done;      /* 320: written by the host, on a line of its own */
    uint32_t pad1[15];
    uint32_t late;      /* 384: the device's, where its wait gave up */
    uint32_t pad2[31];
} mvm_g_cpu_share;

/* Where a layer's share's out starts (hidden at the header's end), and its bytes: the
 * parts rounded to 64 bytes. */
MVM_G_FN uint64_t mvm_g_cpu_share_out(uint32_t n_embd)
{
    return MVM_G_CPU_SHARE_HEAD + (((uint64_t)n_embd * 4 + 63) & ~(uint64_t)63);
}
#define mvm_g_cpu_share_bytes(n_embd) (2 * mvm_g_cpu_share_out(n_embd) - MVM_G_CPU_SHARE_HEAD)

typedef struct mvm_g_cpu_wait_args {
    mvm_dptr share, token, on_cpu, row;
    uint64_t timeout_ns;
    uint32_t n_embd, top_k;
} mvm_g_cpu_wait_args;

MVM_G_FN mvm_g_shape mvm_g_cpu_wait_shape(const mvm_g_cpu_wait_args *a)
{
    (void)a;
    mvm_g_shape s = {1, 1, MVM_G_THREADS};
    return s;
}

/* ---- small F32 ops ----------------------------------------------------------------------
 * mvm_g_rmsnorm: out[i] = x[i] / sqrt(mean(x[i]^2) + eps) * w (w = 0: no scale) for n_rows
 *   rows of n floats, x[i] at x + i * x_stride, out[i] at out + i * out_stride floats (out
 *   may be x); with q (0: none), out[i] also quantized to q + i * q_stride bytes in the
 *   activation format of weight type q_type (a Q or K type), as mvm_g_quantize writes it:
 *   the next product's input, in the same pass; with out2 (0: none), out[i] also copied to
 *   out2 + i * out_stride floats (a decode step's router input, kept for the host). With
 *   n_rows2 rows more, the same launch also normalises those of x2 in place (rows of n
 *   floats x_stride apart, weights w2; no q or out2 for them): a layer's query and key
 *   heads at once. With sum_out (0: none), x's rows first take the routed experts' rows
 *   as mvm_g_expert_sum adds them, x[i] += the sum over k < sum_k of sum_out's row
 *   sum_rows[i * sum_k + k] (rows of n floats; uint32 indices), written back to x, then
 *   normed: a decode token's MoE step and the next norm in one launch. One block per
 *   row. */
typedef struct mvm_g_rmsnorm_args {
    mvm_dptr x, out, w, q, out2, x2, w2, sum_out, sum_rows;
    uint64_t x_stride, out_stride, q_stride;
    uint32_t n, n_rows, q_type, n_rows2;
    float eps;
    uint32_t sum_k;
} mvm_g_rmsnorm_args;

MVM_G_FN mvm_g_shape mvm_g_rmsnorm_shape(const mvm_g_rmsnorm_args *a)
{
    mvm_g_shape s = {a->n_rows + a->n_rows2, 1, MVM_G_THREADS};
    return s;
}

/* A decode graph's position (engine/forward/forward_cuda_route.c): where the kernels that
 * take one (rope, store_rows, attention) have `pos` set, they read pos0 from that uint32 on
 * the device (kernels/cuda/device.cuh, mvm_g_pos0), which the token's upload writes, so
 * that their arguments stay the same from token to token and the graph needs no update
 * (0: pos0 as given). */

/* mvm_g_rope: the rotary embedding of kernels/cpu (mvm_k_rope) in place on n_tok tokens of
 * n_heads heads of head_dim floats (token i at x + i * stride floats, at position pos0 + i),
 * as kernels/rope.h's `rope` says; and in the same launch on a second such tensor (x2,
 * stride2, n_heads2, head_dim2; n_heads2 0: none): a layer's queries and keys at once.
 * pos: mvm_g_pos0. */
typedef struct mvm_g_rope_args {
    mvm_dptr x, x2;
    uint64_t stride, stride2;
    uint32_t n_tok, n_heads, head_dim, n_heads2, head_dim2, pos0;
    mvm_rope rope;
    mvm_dptr pos;
} mvm_g_rope_args;

MVM_G_FN mvm_g_shape mvm_g_rope_shape(const mvm_g_rope_args *a)
{
    return mvm_g_rows_shape((uint64_t)(a->n_heads + a->n_heads2) * (a->rope.n_rot / 2),
                            a->n_tok);
}

/* mvm_g_qk_rope: a layer's new rows made ready for attention in one launch, what mvm_g_rmsnorm
 * (the QK norm), mvm_g_rope and mvm_g_store_rows do one after the other, the same floats:
 * for n_tok tokens (token i at position pos0 + i: mvm_g_pos0) with queries at q_in + i *
 * q_stride floats (n_head heads of head_dim) and keys and values at k, v + i * kv_stride
 * (n_head_kv heads): the queries and keys normed (norm: MVM_G_QK_NORM_NONE; _HEAD, each
 * head by the head_dim weights q_norm or k_norm; _ROWS, each row by its row's weights),
 * then rotated; the queries written at q (as q_in, and never q_in itself: a head's block
 * reads its whole row while another may have written its own head), the keys and values
 * into the cache, row i at kc, vc + (i + *pos, or i without pos) * cache_stride elements,
 * as elements of kv_type (an mvm_wtype: F32, F16 or Q8_0, mvm_g_kv_type_ok). A block per query head, key head and value head, per token
 * (heads of at most MVM_G_QK_HEAD_MAX floats): with _ROWS each head's block sums its whole
 * row's squares, in the one order, so every head of a row gets the factor one block of the
 * row would. One block a row had left a decode token's queries to one block of the card
 * (OLMoE-1B-7B: 14 µs a layer on an H200, docs/perf/engine.md, session 106). */
/* The KV cache types the device's kernels store and read: F32, F16 and Q8_0 (llama.cpp's
 * `-ctk q8_0 -ctv q8_0`: ggml's blocks, as the CPU backend's cache keeps them). Q8_0's rows
 * are read block by block, its scale and 32 quants in 9 aligned words (ops.cu). The other
 * types the CPU takes (engine/forward/kv_cache.h) are refused on the device: each would need
 * a read path of its own, and none has been measured on a GPU. */
MVM_G_FN int mvm_g_kv_type_ok(uint32_t t)
{
    return t == MVM_W_F32 || t == MVM_W_F16 || t == MVM_W_Q8_0;
}

enum { MVM_G_QK_NORM_NONE, MVM_G_QK_NORM_HEAD, MVM_G_QK_NORM_ROWS };
#define MVM_G_QK_HEAD_MAX 1024
typedef struct mvm_g_qk_rope_args {
    mvm_dptr q_in, q, k, v, q_norm, k_norm, kc, vc, pos;
    uint64_t q_stride, kv_stride, cache_stride;
    uint32_t n_tok, n_head, n_head_kv, head_dim, norm, kv_type, pos0;
    float eps;
    mvm_rope rope;
} mvm_g_qk_rope_args;

MVM_G_FN mvm_g_shape mvm_g_qk_rope_shape(const mvm_g_qk_rope_args *a)
{
    mvm_g_shape s = {a->n_head + 2 * a->n_head_kv, a->n_tok, MVM_G_THREADS};
    return s;
}

/* mvm_g_attention: causal attention of n_tok queries at positions pos0.. over the KV cache.
 * Query i, head h: q + i * q_dim + h * head_dim; keys and values of position p for kv head
 * h / (n_head / n_head_kv) at kc, vc + row(p) * kv_dim + that head's offset (floats); the
 * output like the query in out. With a window (gpt-oss: 0 for none), query i sees its last
 * `window` positions only, from `first`; with a ring (engine/forward/kv_cache.h: 0 for none)
 * they are the consecutive rows from first % ring, else row(p) = p. With sinks (n_head
 * floats; 0 for none), head h's softmax has the extra logit sinks[h] in its denominator
 * (kernels/cpu's mvm_k_attn_heads). The cache's elements are of kv_type (an mvm_wtype:
 * F32, F16 or Q8_0, whose blocks of 32 the offsets above count by element).
 *
 * Split as flash-decoding does, so that a long context's decode fills the device and reads
 * the cache once per group of heads:
 * - a block takes a unit of up to MVM_G_ATTN_HEADS heads that share a kv head (a GQA group,
 *   or deepseek2's heads over the latent rows), one query, and one of n_split ranges of the
 *   positions; it reads each key and value row once for all its heads, MVM_G_ATTN_TILE
 *   positions at a time, with a running max and sum (the sum in double, as the CPU's);
 * - with one split it writes the output; with more, each block leaves its heads' max, sum
 *   and unnormalised output in `part` (mvm_g_attention_part_bytes), and
 *   mvm_g_attention_combine (a block per (head, query)) rescales and adds them.
 * n_split (mvm_g_attention_splits) gives about MVM_G_ATTN_BLOCKS blocks, never a range
 * shorter than a tile.
 * With act (0: none), whichever kernel writes a head's output also quantizes it, query i's
 * row at act + i * act_stride bytes in the activation format of the Q type act_type (blocks
 * of 32: head_dim a multiple of 32), as mvm_g_quantize writes it: the output product's
 * input, without a launch of its own. */
typedef struct mvm_g_attention_args {
    mvm_dptr q, kc, vc, out, part, sinks;
    uint32_t n_tok, pos0, n_head, n_head_kv, head_dim, n_ctx, window, ring, kv_type;
    float scale;
    mvm_dptr pos; /* mvm_g_pos0; the host launches it with pos0 0 and the shape of its own
                     pos0 (mvm_gpu_attention), which the kernel's read matches */
    mvm_dptr act;
    uint64_t act_stride;
    uint32_t act_type;
    uint32_t mma; /* 1: the splits are mvm_g_attention_mma's (its heads a block, its tiles),
                     for it and the combine after it; 0: ops.cu's kernel's */
} mvm_g_attention_args;

#define MVM_G_ATTN_HEADS 8      /* heads a block computes at most */
#define MVM_G_ATTN_QFLOATS 4608 /* its heads' query floats at most (8 of deepseek2's 576) */
#define MVM_G_ATTN_TILE MVM_G_THREADS /* positions a block scores at once, a thread each */
#define MVM_G_ATTN_BLOCKS 256   /* the blocks a launch aims at (two per SM of an H100) */

/* Heads a block takes: its kv head's group, at most MVM_G_ATTN_HEADS and as many as the
 * query floats allow (0: head_dim over MVM_G_ATTN_QFLOATS, which the host refuses). */
MVM_G_FN uint32_t mvm_g_attention_unit_heads(uint32_t n_head, uint32_t n_head_kv,
                                             uint32_t head_dim)
{
    uint32_t hb = n_head / n_head_kv, fit = MVM_G_ATTN_QFLOATS / head_dim;
    hb = hb < MVM_G_ATTN_HEADS ? hb : MVM_G_ATTN_HEADS;
    return hb < fit ? hb : fit;
}

/* Units in all: each kv head's group in units of mvm_g_attention_unit_heads. */
MVM_G_FN uint32_t mvm_g_attention_units(uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim)
{
    return n_head_kv * mvm_g_div_up(n_head / n_head_kv,
                                    mvm_g_attention_unit_heads(n_head, n_head_kv, head_dim));
}

/* mvm_g_attention_mma (kernels/cuda/attention_mma.cu, compute capability 8.0 and later): the
 * same attention on the tensor cores, in the same splits, parts and combine. A block's 16
 * rows are (query, head) pairs sharing a kv head: 16 heads of one query where the group is
 * 16 or more (MLA's latent rows: 128 heads over one row, deepseek2), else the group's heads
 * for 16 / group consecutive queries. Its warps' m16n8k16 products are F16 with F32 sums,
 * each F32 operand as two halves (hi, and lo = what hi misses), so that the result keeps the
 * CUDA cores' precision. Why: a kv head's rows are read once for the whole tile, by 16-byte
 * loads; on the CUDA cores DeepSeek-V3's decode attention read its cache at under 1% of an
 * H100's bandwidth, grouped-query attention at 9-15% (docs/perf/engine.md). */
#define MVM_G_AMMA_TILE 32 /* positions a block stages at once */
#define MVM_G_AMMA_DIM 576 /* the widest row: deepseek2's latent, 512 + 64 */

/* Whether mvm_g_attention_mma computes a: an F16 cache, 16-byte aligned, groups that are a
 * multiple or a divisor of 16 heads, head_dim a multiple of 16 up to MVM_G_AMMA_DIM (half
 * that, 272, where the value rows are not the key rows: both are staged), and no window or
 * ring (gpt-oss's windowed blocks; its others, with sinks, it takes). */
/* The heads of a block's row group for n_head query heads over n_head_kv: the group's, at
 * most 16; 0 where the group is neither a multiple nor a divisor of 16 (the kernel's rows). */
MVM_G_FN uint32_t mvm_g_attention_mma_group_heads(uint32_t n_head, uint32_t n_head_kv)
{
    const uint32_t group = n_head_kv && n_head % n_head_kv == 0 ? n_head / n_head_kv : 0;
    return !group ? 0 : group % 16 == 0 ? 16 : 16 % group == 0 ? group : 0;
}

MVM_G_FN int mvm_g_attention_mma_takes(const mvm_g_attention_args *a)
{
    return a->kv_type == MVM_W_F16 && a->kc % 16 == 0 && a->vc % 16 == 0 &&
           mvm_g_attention_mma_group_heads(a->n_head, a->n_head_kv) && a->head_dim % 16 == 0 &&
           a->head_dim <= (a->kc == a->vc ? MVM_G_AMMA_DIM : 272) && !a->window && !a->ring;
}

MVM_G_FN uint32_t mvm_g_attention_mma_heads(const mvm_g_attention_args *a)
{
    return mvm_g_attention_mma_group_heads(a->n_head, a->n_head_kv);
}

/* The most positions a query of the launch sees. */
MVM_G_FN uint32_t mvm_g_attention_max_pos(const mvm_g_attention_args *a)
{
    const uint32_t n = a->pos0 + a->n_tok;
    return a->window && n > a->window ? a->window : n;
}

/* What a's splits are counted in (a->mma: mvm_g_attention_mma's, else ops.cu's kernel's): a
 * block's unit of heads, and the positions of a tile. The tensor cores' kernel takes twice
 * the heads of a latent group and tiles of 32, so its own count keeps the device as full
 * (DeepSeek-V2-Lite's 16 heads at 4,096 positions: 64 blocks of 8 heads in ops.cu's splits;
 * in those, 32 of 16; in its own, 128). */
MVM_G_FN uint32_t mvm_g_attention_split_units(const mvm_g_attention_args *a)
{
    return a->mma ? a->n_head / mvm_g_attention_mma_heads(a)
                  : mvm_g_attention_units(a->n_head, a->n_head_kv, a->head_dim);
}

MVM_G_FN uint32_t mvm_g_attention_tile(const mvm_g_attention_args *a)
{
    return a->mma ? MVM_G_AMMA_TILE : MVM_G_ATTN_TILE;
}

/* Tiles per split: the fewest that leave about MVM_G_ATTN_BLOCKS blocks, a block per unit
 * and query. */
MVM_G_FN uint32_t mvm_g_attention_split_tiles(const mvm_g_attention_args *a)
{
    const uint32_t units = mvm_g_attention_split_units(a);
    const uint32_t want = mvm_g_div_up(MVM_G_ATTN_BLOCKS, units * a->n_tok);
    const uint32_t tiles = mvm_g_div_up(mvm_g_attention_max_pos(a), mvm_g_attention_tile(a));
    return mvm_g_div_up(tiles, want < tiles ? want : tiles);
}

MVM_G_FN uint32_t mvm_g_attention_splits(const mvm_g_attention_args *a)
{
    return mvm_g_div_up(mvm_g_div_up(mvm_g_attention_max_pos(a), mvm_g_attention_tile(a)),
                        mvm_g_attention_split_tiles(a));
}

/* Positions [*j0, *j1) of split c of a query that sees n, counted from its first: whole
 * tiles (the last split's may be short or, for an early query of a batch, empty). */
MVM_G_FN void mvm_g_attention_range(const mvm_g_attention_args *a, uint32_t n, uint32_t c,
                                    uint32_t *j0, uint32_t *j1)
{
    const uint64_t per = (uint64_t)mvm_g_attention_split_tiles(a) * mvm_g_attention_tile(a);
    const uint64_t b = c * per, e = b + per;
    *j0 = (uint32_t)(b < n ? b : n);
    *j1 = (uint32_t)(e < n ? e : n);
}

/* Bytes of `part` that any launch of up to n_batch queries needs, by either kernel: per
 * (query, split, head) a double sum, a float max and head_dim floats of output. n_tok *
 * n_split is at most n_batch + MVM_G_ATTN_BLOCKS / units (mvm_g_attention_splits), whatever
 * the context, units the fewer of the two kernels' (mvm_g_attention_split_units). */
MVM_G_FN uint64_t mvm_g_attention_part_bytes(uint32_t n_batch, uint32_t n_head,
                                              uint32_t n_head_kv, uint32_t head_dim)
{
    const uint32_t hb = mvm_g_attention_mma_group_heads(n_head, n_head_kv);
    uint32_t units = mvm_g_attention_units(n_head, n_head_kv, head_dim);
    if (hb && n_head / hb < units)
        units = n_head / hb;
    const uint64_t rows = (uint64_t)n_batch + mvm_g_div_up(MVM_G_ATTN_BLOCKS, units);
    return rows * n_head * (sizeof(double) + sizeof(float) * (1 + (uint64_t)head_dim));
}

MVM_G_FN mvm_g_shape mvm_g_attention_shape(const mvm_g_attention_args *a)
{
    mvm_g_shape s = {mvm_g_attention_units(a->n_head, a->n_head_kv, a->head_dim) *
                         mvm_g_attention_splits(a),
                     a->n_tok, MVM_G_THREADS};
    return s;
}

/* a->mma set: its splits. */
MVM_G_FN mvm_g_shape mvm_g_attention_mma_shape(const mvm_g_attention_args *a)
{
    const uint32_t hb = mvm_g_attention_mma_heads(a);
    mvm_g_shape s = {a->n_head / hb * mvm_g_attention_splits(a),
                     mvm_g_div_up(a->n_tok, 16 / hb), MVM_G_THREADS};
    return s;
}

/* mvm_g_attention_combine: the output from the splits' parts (launched only with n_split > 1);
 * one block per (head, query). */
MVM_G_FN mvm_g_shape mvm_g_attention_combine_shape(const mvm_g_attention_args *a)
{
    mvm_g_shape s = {a->n_head, a->n_tok, MVM_G_THREADS};
    return s;
}


/* mvm_g_store_rows: n_rows rows of n floats, row i at src + i * src_stride floats, into the
 * KV cache's rows at dst + i * dst_stride elements, as elements of type (mvm_g_kv_type_ok:
 * F16 rounded to nearest even, Q8_0 quantized as mvm_k_quantize does, n and dst_stride then
 * whole blocks of 32); and in the same launch as many from src2 to dst2 (0: none), with the
 * same strides: a layer's keys and values at once. With pos (mvm_g_pos0), row i goes to
 * row *pos + i from dst (a cache block without a ring, from its first row). */
typedef struct mvm_g_store_rows_args {
    mvm_dptr dst, src, dst2, src2;
    uint64_t dst_stride, src_stride;
    uint32_t n, n_rows, type, pad;
    mvm_dptr pos;
} mvm_g_store_rows_args;

/* A Q8_0 row's blocks take 8 threads each, a thread 4 elements (device.cuh's
 * group8_q8_0_block); F16 and F32 a thread an element. */
MVM_G_FN mvm_g_shape mvm_g_store_rows_shape(const mvm_g_store_rows_args *a)
{
    return mvm_g_rows_shape(a->type == MVM_W_Q8_0 ? a->n / 4 : a->n,
                            a->dst2 ? 2 * a->n_rows : a->n_rows);
}

/* mvm_g_add: x[i][j] += g(i) * y[i][j] for n_tok rows of n floats, x[i] at x + i * n,
 *   y[i] at y + i * y_stride (0: one row for all, a bias), g(i) = sigmoid(gate[i]) with a
 *   gate (the shared expert's), else scale[i] with a scale (floats: routing weights, for
 *   gpt-oss's down bias on the tensor-core path), else 1.
 * mvm_g_swiglu (the same arguments, no gate): x[i][j] = silu(x[i][j]) * y[i][j]. */
typedef struct mvm_g_add_args {
    mvm_dptr x, y, gate;
    uint64_t y_stride;
    uint32_t n, n_tok;
    mvm_dptr scale;
} mvm_g_add_args;

MVM_G_FN mvm_g_shape mvm_g_add_shape(const mvm_g_add_args *a)
{
    return mvm_g_rows_shape(a->n, a->n_tok);
}

#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC diagnostic pop
#endif

#endif
