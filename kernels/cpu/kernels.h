/*
 * CPU compute kernels: pure functions over caller-owned buffers (no allocation, no threads,
 * no globals beyond the SIMD level chosen once at start-up). The engine's thread pool splits
 * work into row / channel-group ranges and calls these on each range, so every kernel takes
 * a [begin, end) range and writes only its part of the output.
 *
 * Weight types and their blocks are llama.cpp's (ggml-common.h):
 *   F32, F16 (IEEE half), BF16 (upper 16 bits of an F32),
 *   Q8_0: 32 elements as { f16 d; int8 qs[32]; }            34 bytes, x = d * q
 *   Q4_0: 32 elements as { f16 d; uint8 qs[16]; }           18 bytes, x = d * (nibble - 8),
 *         element j < 16 in the low nibble of qs[j], element j + 16 in its high nibble.
 *   Q4_1: { f16 d, m; uint8 qs[16]; }                        20 bytes, x = d * nibble + m
 *   Q5_0: { f16 d; uint8 qh[4]; uint8 qs[16]; }              22 bytes, x = d * (q - 16)
 *   Q5_1: { f16 d, m; uint8 qh[4]; uint8 qs[16]; }           24 bytes, x = d * q + m
 *         q = the nibble (as Q4_0) with bit j of qh (a little-endian u32) as its fifth bit.
 *         llama-quantize writes Q5_0/Q5_1 where a Q4_K/Q5_K matrix has rows that are not
 *         whole 256-element super-blocks (Qwen1.5/2-MoE's 1408-channel experts).
 *   IQ4_NL: as Q4_0, but x = d * kvalues[nibble], a fixed non-linear table of 16 int8
 *         (Q2_K/Q3_K's fallback where rows are not whole super-blocks).
 *   the K-quants, super-blocks of 256 elements (dispatch.h has their layouts):
 *   Q2_K  16 sub-blocks of 16, 2-bit quants, 4-bit scale and min each   84 bytes
 *   Q3_K  16 sub-blocks of 16, 3-bit quants, 6-bit signed scale each   110 bytes
 *   Q4_K  8 sub-blocks of 32, 4-bit quants, 6-bit scale and min each   144 bytes
 *   Q5_K  the same with a fifth bit per quant                          176 bytes
 *   Q6_K  16 sub-blocks of 16, 6-bit quants, 8-bit scale each          210 bytes
 *   IQ4_XS 8 sub-blocks of 32, IQ4_NL's table, 6-bit signed scale each 136 bytes
 *         (blocks.h; Q8_K activations as the K-quants', IQ4_NL where rows are not whole
 *         super-blocks)
 *   the lattice-grid types, super-blocks of 256 whose groups of 8 (IQ3: 4) elements are one
 *   entry of a fixed grid with signs (kernels/iqgrid.h has their layouts), Q8_K activations,
 *   IQ4_NL where rows are not whole super-blocks:
 *   IQ2_XXS 66 bytes, IQ2_XS 74, IQ2_S 82, IQ3_XXS 98, IQ3_S 110, IQ1_S 50, IQ1_M 56
 *
 * Activations: for F32/F16/BF16 weights a dot product takes the activation vector as F32;
 * for the 32-element Q types it takes it quantized to Q8_0, for the super-block types to
 * Q8_K (256 elements, an f32 scale and the sums of each 16 quants), as ggml does
 * (vec_dot_type), so the integer dot products stay in int8. mvm_k_act_bytes() says how many
 * bytes an activation vector of n elements takes for a weight type, mvm_k_prepare_act()
 * makes it.
 *
 * Alignment: every buffer (weights, activations, strides included) is aligned to its element:
 * 4 bytes for F32, 2 for F16, BF16 and the Q blocks (whose scale is an f16). Nothing needs
 * more, the SIMD code loads unaligned; but F32/F16/BF16 rows at 64-byte boundaries spare the
 * AVX-512 level's loads from splitting cache lines (about a fifth faster when in cache).
 */
#ifndef MVM_KERNELS_CPU_KERNELS_H
#define MVM_KERNELS_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/blocks.h" /* enum mvm_wtype, the block layouts */
#include "kernels/rope.h"   /* mvm_rope */

/* ggml's name of the type: "f32", "q8_0", "q4_K". */
const char *mvm_k_wtype_name(enum mvm_wtype t);
/* The sizes of blocks, rows and activation vectors (mvm_k_block_elems, mvm_k_row_bytes,
 * mvm_k_act_bytes) are in kernels/blocks.h. */

/* x (n floats) -> the activation format of type t (a copy for F32/F16/BF16, Q8_0 blocks
 * for the 32-element Q types, Q8_K blocks for the K-quants). */
void mvm_k_prepare_act(enum mvm_wtype t, const float *x, void *act, size_t n);

/* ---- SIMD level ------------------------------------------------------------------------ */
enum mvm_simd {
    MVM_SIMD_SCALAR,
    MVM_SIMD_AVX2,
    MVM_SIMD_AVXVNNI, /* AVX2 with AVX-VNNI's 256-bit vpdpbusd: Intel's cores without AVX-512 */
    MVM_SIMD_AVX512,
    MVM_SIMD_AVX512VNNI,
    MVM_SIMD_NEON,    /* 64-bit ARM */
    MVM_SIMD_DOTPROD, /* 64-bit ARM with ARMv8.2's int8 dot product */
    MVM_SIMD_COUNT
};
/* The best level this CPU supports (x86: cpuid and the OS's support for the registers;
 * ARM: the kernel's hardware capabilities): the highest in the enum, where each
 * architecture's levels are in ascending order. A CPU need not have every level below its
 * best (a Zen 4 has AVX-512 VNNI but not AVX-VNNI): mvm_k_simd_has says. */
enum mvm_simd mvm_k_simd_detect(void);
/* Selects the level every kernel uses from now on; -1 when the CPU lacks it (the level in
 * use is unchanged). Call before starting threads. Default: mvm_k_simd_detect(). */
int mvm_k_simd_use(enum mvm_simd level);
/* Whether this CPU has the level (and the build has its kernels). */
int mvm_k_simd_has(enum mvm_simd level);
enum mvm_simd mvm_k_simd_current(void);
/* "scalar", "avx2", "avxvnni", "avx512", "avx512vnni", "neon", "dotprod" */
const char *mvm_k_simd_name(enum mvm_simd level);

/* ---- conversions and (de)quantization (llama.cpp's reference rounding) ------------------ */
float mvm_fp16_to_fp32(uint16_t h);
uint16_t mvm_fp32_to_fp16(float f);      /* round to nearest even, inf/nan kept */
float mvm_bf16_to_fp32(uint16_t h);
uint16_t mvm_fp32_to_bf16(float f);      /* round to nearest even, nan kept quiet */
/* n floats -> n elements of type t (n a multiple of its block); what mkmodel writes. The
 * K-quants take a simpler search for their scales than llama.cpp's (kquant.c says which),
 * so the bits differ from llama-quantize's while the format is the same. */
void mvm_k_quantize(enum mvm_wtype t, const float *src, void *dst, size_t n);
/* n elements of type t -> floats (embedding rows, tests). */
void mvm_k_dequantize(enum mvm_wtype t, const void *src, float *dst, size_t n);

/* ---- row-major matrices (ggml layout: row r of an [n_in x n_out] weight is n_in elements
 * at w + r * row_bytes) ---------------------------------------------------------------- */
/* y[r] = dot(row r, x) for r in [r0, r1); act as mvm_k_prepare_act made it for n_in. */
void mvm_k_matvec(enum mvm_wtype t, const void *w, size_t row_bytes, size_t n_in,
                  const void *act, float *y, size_t r0, size_t r1);
/* The same for n_tok activation vectors (act + i*act_stride bytes) into y + i*y_stride
 * floats: each weight row is read once for all tokens (prefill), and the blocks of the
 * quantized types are unpacked once for every few tokens; the results are bitwise those of
 * matvec, token by token. */
void mvm_k_matmul(enum mvm_wtype t, const void *w, size_t row_bytes, size_t n_in,
                  const void *act, size_t act_stride, size_t n_tok, float *y, size_t y_stride,
                  size_t r0, size_t r1);

/* ---- the channel-major expert (docs/engine.md, "Experts in the space") ------------------
 * An expert's gate and up matrices share one type and its down matrix may have another
 * (llama.cpp's Q4_K_M gives ffn_down_exps Q6_K in some layers, Q4_K in the others). With
 * hidden size n_embd and n_ff intermediate channels it is n_ff/G groups of G channels
 * (G = mvm_k_expert_group_channels: 32, or 256 when down is a K-quant, whose blocks span
 * 256 channels), stored one after another, each
 *     gate rows c..c+G-1   (G rows of n_embd elements, type gate_up)
 *     up rows   c..c+G-1   (G rows of n_embd elements, type gate_up)
 *     down      n_embd blocks of G elements: for output j, down[j][c..c+G-1] (type down)
 * so a prefix of the expert's bytes holds whole groups, and the FFN output is the sum over
 * groups of  down_g · (silu(gate_g · x) * (up_g · x)). The types (mvm_k_expert_fmt) and the
 * group's sizes (mvm_k_expert_group_channels, _bytes) are in kernels/blocks.h, as the device
 * kernels read the layout too. */

/* ---- Expert tiles ------------------------------------------------------------------------
 * Where the CPU computes the experts (a host space) and its level has the kernels (AVX-512
 * VNNI: Q2_K to Q6_K, IQ4_XS and Q8_0, so Q2_K, Q3_K_M, Q4_K_M, Q5_K_M and IQ4_XS files, and
 * Q8_0's where MOEVM_EXPERT_TILES=all asks: they decode up to 12% slower; AVX2: Q4_K to Q6_K,
 * so Q4_K_M, Q5_K_M and Q6_K files, tiles_avx2.h), each group's gate
 * rows, up rows and down slots are stored in tiles of 16 rows rather than row after row: the
 * 16 rows' blocks of one super-block interleaved by 4-byte word (word w of row i at 64w +
 * 4i, and a block's last bytes % 4 bytes, Q3_K's and Q6_K's d, after its words, row by row;
 * Q8_0's block: the 16 scales first, then its quants + 128 by word), the tiles of a 16-row
 * chunk in block order. One load then gives a word of 16 rows, which is what the kernels
 * that keep 16 rows in a vector's lanes multiply, without the transposes each product would
 * otherwise repeat (kernels/cpu/gemm_rows_avx512vnni.c, gemm_q_avx512vnni.c). Each group,
 * and so each prefix of groups, keeps its bytes and its place; only the order within it
 * changes. */
/* Whether the level in use has the tile kernels for f's types. Every shape of those types
 * tiles: a group is 32 or 256 channels, and rows (n_embd) of whole blocks, both multiples of
 * 16 rows. */
int mvm_k_expert_tiles_ok(mvm_k_expert_fmt f);

/* One type for all three matrices, SwiGLU. */
static inline mvm_k_expert_fmt mvm_k_expert_uniform(enum mvm_wtype t)
{
    return (mvm_k_expert_fmt){t, t, MVM_GLU_SILU, 0};
}
/* out[j] += weight * sum over groups g in [g0, g1) of the group's output, j < n_embd.
 * act: x prepared for f.gate_up and n_embd. For Q and K types the G intermediate
 * activations of a group are quantized to down's activation format before the down product
 * (as ggml quantizes the input of ffn_down; unlike ggml, which scales the expert's output,
 * the routing weight is folded into these activations first — the same in exact
 * arithmetic, one rounding fewer per output); for float types they stay F32. */
void mvm_k_expert_ffn(mvm_k_expert_fmt f, const void *expert, size_t n_embd, const void *act,
                      float weight, float *out, size_t g0, size_t g1);
/* The same for n_tok tokens routed to this expert: act + i*act_stride bytes, weights[i],
 * out + i*out_stride floats; each group's weights are read once for all tokens and unpacked
 * once for every few; bitwise the same as one call per token. */
void mvm_k_expert_ffn_batch(mvm_k_expert_fmt f, const void *expert, size_t n_embd,
                            const void *act, size_t act_stride, const float *weights,
                            size_t n_tok, float *out, size_t out_stride, size_t g0, size_t g1);
/* An out_stride for n floats a token that the batch's down products take at full speed:
 * whole cache lines, an odd number of them. Each channel group adds into every token's row
 * at one offset, token after token; rows a multiple of 4 KiB apart (OLMoE's n_embd of 2048
 * floats: 8 KiB) fall in one set of the L1 cache, and each token's load of its row waited
 * on the store to the row before it (their addresses' low 12 bits equal): Q8_0 experts of
 * 64 tokens in tiles ran at 142 GMAC/s with rows 8 KiB apart, 244 a line further
 * (docs/perf/cpu.md, session 116). */
static inline size_t mvm_k_row_floats(size_t n)
{
    const size_t lines = (n * sizeof(float) + 63) / 64;
    return (lines | 1) * (64 / sizeof(float));
}
/* Row-major (llama.cpp) expert slices -> one channel-major expert: gate and up are
 * [n_embd x n_ff] (n_ff rows of n_embd, type f.gate_up), down is [n_ff x n_embd] (n_embd
 * rows of n_ff, type f.down), each given by its first row. Writes n_ff/G groups to dst
 * (n_ff % G == 0), tiled if f.tiles (which mvm_k_expert_tiles_ok must allow). Used at
 * load. */
void mvm_k_expert_pack(mvm_k_expert_fmt f, const void *gate, const void *up, const void *down,
                       size_t n_embd, size_t n_ff, void *dst);
/* With MVM_GLU_OAI: the gate and up biases (n_ff floats each) into each group's slots of a
 * packed expert. */
void mvm_k_expert_pack_bias(mvm_k_expert_fmt f, const float *gate_b, const float *up_b,
                            size_t n_embd, size_t n_ff, void *dst);

/* ---- element-wise and small ops (F32) --------------------------------------------------- */
/* out = x / sqrt(mean(x^2) + eps) * w  (w may be NULL: no scale). out may equal x. */
void mvm_k_rmsnorm(float *out, const float *x, const float *w, size_t n, float eps);
/* Rotary embedding in place on n_heads heads of head_dim floats at position pos: the first
 * r->n_rot dims of each head turn pair by pair as kernels/rope.h says (neox = 0: pairs (2i,
 * 2i+1), llama.cpp ROPE_TYPE_NORM, llama/Mixtral; neox = 1: pairs (i, i + n_rot/2),
 * ROPE_TYPE_NEOX, qwen2moe/qwen3moe/olmoe), with the model's context extension if any. */
void mvm_k_rope(float *x, size_t n_heads, size_t head_dim, size_t pos, const mvm_rope *r);
/* YaRN on r (whose n_rot and base are set): llama.cpp's rope_ext parameters for a model
 * extended `factor` times beyond its original context orig_ctx. freq_scale = 1/factor; the
 * blend runs between ggml_rope_yarn_corr_dims' pairs for beta_fast and beta_slow turns
 * (floored, ceiled, clamped to 0..n_rot-1); mscale = attn_factor · (1 + 0.1 ln factor) when
 * ext_factor is not 0 (ggml's magnitude correction), else attn_factor. */
void mvm_k_rope_yarn(mvm_rope *r, float factor, uint32_t orig_ctx, float beta_fast,
                     float beta_slow, float ext_factor, float attn_factor);
/* Softmax in place over n floats (max-subtracted). */
void mvm_k_softmax(float *x, size_t n);
/* The same with an extra logit `sink` in the denominator (-INFINITY: none, which adds exactly
 * 0), as ggml's soft_max with sinks. Returns the log of the denominator, ln(Σ e^x + e^sink). */
float mvm_k_softmax_sink(float *x, size_t n, float sink);
/* The k largest of x[0..n) (k <= n), indices in idx, largest first; ties go to the lower
 * index (deterministic routing). */
void mvm_k_topk(const float *x, size_t n, size_t k, int *idx);
/* x[i] = silu(x[i]) * y[i]; the level's exp where it has one (exp_avx2.c: within 2 ulp of
 * expf's, which the portable loop calls). */
void mvm_k_swiglu(float *x, const float *y, size_t n);
/* n_q attention heads that share their keys and values (a GQA group, or MLA's heads over
 * the latent rows), one query each: head j's query at q + j*head_dim, its output at
 * out + j*head_dim; keys/values of positions 0..n_pos-1 at k + p*kv_stride and
 * v + p*kv_stride elements of type kv (the KV cache's: F32, F16, BF16, or a 32-element
 * block type, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, whose heads are whole blocks, head_dim
 * a multiple of 32 up to MVM_K_ATTN_ROW_MAX; BF16 and the blocks read as the F32 values
 * they hold: bit for bit what an F32 cache of those values gives); scores = q·k * scale,
 * softmax, out = Σ p v. sinks: n_q logits that take their share of each head's softmax and
 * add no value (gpt-oss's attention sinks), or NULL. scratch holds n_q * n_pos floats.
 * Each row is read from memory once for all n_q heads (a long context's cache is larger than
 * the caches); every head's arithmetic is the same whatever n_q is, bit for bit. */
void mvm_k_attn_heads(const float *q, size_t n_q, enum mvm_wtype kv, const void *k,
                      const void *v, size_t kv_stride, size_t n_pos, size_t head_dim,
                      float scale, const float *sinks, float *scratch, float *out);
/* The same for n_tok tokens of one sequence at once (a prompt's), and n_kv KV heads side by
 * side in the rows (KV head g's elements at g*head_dim of each row, n_q queries each): token
 * i's query j of KV head g at q + i*q_stride + (g*n_q + j)*head_dim (out alike; sinks[g*n_q
 * + j] its sink) attends over its first n_pos[i] positions, so each row is read once for
 * every query that reaches it, not once per token, and the n_kv heads' parts of a row,
 * which lie together, in one stream (decode without grouped heads read a long context's
 * cache 256 bytes a row at a time, head by head: docs/perf/cpu.md). scratch holds n_tok *
 * n_kv * n_q * max(n_pos) floats. Each query's arithmetic is mvm_k_attn_heads', bit for
 * bit. lse (NULL: not wanted): each query's log-normaliser, ln(Σ_p e^(score_p) + e^sink),
 * token i's query (g, j) at lse[i * n_kv * n_q + g * n_q + j]: what a caller needs to merge
 * the outputs of calls over parts of the positions (out = Σ part_out · e^(part_lse − lse)).
 * Several queries a KV head share each tile of the rows converted to F32 (the SIMD levels:
 * up to MVM_K_ATTN_ROW_MAX elements of a row a tile, n_kv * head_dim with each head rounded
 * up to 16; wider calls go in parts); one query a KV head reads the rows in place, every
 * head of a row together. */
#define MVM_K_ATTN_ROW_MAX 1024
void mvm_k_attn_block(const float *q, size_t q_stride, size_t n_tok, size_t n_q, size_t n_kv,
                      const uint32_t *n_pos, enum mvm_wtype kv, const void *k, const void *v,
                      size_t kv_stride, size_t head_dim, float scale, const float *sinks,
                      float *scratch, float *out, float *lse);
#endif
