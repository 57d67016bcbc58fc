/*
 * The channel-major expert (kernels.h): packing llama.cpp's row-major slices into groups of
 * G channels (32, or 256 for a K-quant down), and the FFN over a range of groups. Per group:
 * 2G gate/up dot products, the gated linear unit (SwiGLU, or gpt-oss's with the group's
 * biases) with the routing weight folded in (the down product is linear in it), then the
 * down product over all n_embd outputs, which reads a third of the group's bytes, one block
 * per output, and is the level's dedicated down kernel. A batch goes through a group
 * GROUP_TOKENS at a time: its gate and up rows as matrix products (mvm_k_matmul), its down
 * blocks by the level's multi-row kernel where it has one, else MVM_K_NT tokens at a time,
 * each weight block unpacked once for them.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dispatch.h"

/* The n_tok tokens' G intermediate activations h[i] in down's activation format, at the
 * address returned and *stride bytes apart: quantized into buf[i] for the Q and K types (as
 * ggml quantizes ffn_down's input), h itself for the float types. */
static const void *down_acts(enum mvm_wtype t, const float h[][MVM_QK_K], size_t n_tok,
                             mvm_block_q8_K *buf, size_t *stride)
{
    if (!mvm_k_is_k(t) && !mvm_k_is_q(t)) {
        *stride = sizeof h[0];
        return h;
    }
    for (size_t i = 0; i < n_tok; i++) /* one block of the G channels */
        mvm_k_prepare_act(t, h[i], &buf[i], mvm_k_is_k(t) ? MVM_QK_K : MVM_QBLOCK);
    *stride = sizeof *buf; /* the larger of the two formats */
    return buf;
}

/* Tokens a group takes at once: its gate, up and down bytes (864 KiB for a Q4_K group of
 * OLMoE's shape) are read from L2 once for this many tokens, and the multi-row kernels take
 * them as two groups of 16 lanes, each row unpacked once for both. 32 against 16: +12%
 * Q4_K_M prefill on a 2-core EPYC (3 alternating runs of each; 64 no better, measured with
 * the earlier tiles), for 73 KiB of stack (the intermediate activations). The untiled
 * super-block types take up to WIDE_TOKENS (their intermediate activations on the heap),
 * in even passes: the multi-row kernel then unpacks each row once for all of them
 * (gemm_k_wide in gemm_k_avx512vnni.h), which the lattice-grid types, whose rows cost the
 * most to unpack, need most. An expert of a 512-token prompt of OLMoE's shape gets ~64 of
 * them; at 64 a pass, the half above 64 unpacked every row again for a few tokens
 * (docs/perf/cpu.md, session 97). */
#define GROUP_TOKENS 32
#define WIDE_TOKENS 128

/* A batch's intermediate activations: gate's (then the unit's) and up's outputs, and the
 * former quantized for down, for up to n tokens. */
typedef struct {
    float (*h)[MVM_QK_K], (*u)[MVM_QK_K];
    mvm_block_q8_K *q;
} glu_bufs;

int mvm_k_expert_tiles_ok(mvm_k_expert_fmt f)
{
    const mvm_k_gemm_fn *tiles = mvm_k_kernels->tiles;
    return tiles && tiles[f.gate_up] && tiles[f.down];
}

/* n_tok tokens' gate or up products of a group (G rows), into y (MVM_QK_K floats a token). */
static void gate_up_rows(mvm_k_expert_fmt f, const uint8_t *w, size_t row, size_t n_embd,
                         const uint8_t *a, size_t as, size_t nt, float *y)
{
    const size_t G = mvm_k_expert_group_channels(f);
    if (f.tiles)
        mvm_k_kernels->tiles[f.gate_up](w, row, G, a, as, nt, n_embd, y, MVM_QK_K, 0);
    else
        mvm_k_matmul(f.gate_up, w, row, n_embd, a, as, nt, y, MVM_QK_K, 0, G);
}

/* The batch's groups g0 .. g1 - 1, tok tokens at a time into b. */
static void ffn_groups(mvm_k_expert_fmt f, const uint8_t *expert, size_t n_embd,
                       const uint8_t *act, size_t act_stride, const float *weights, size_t n_tok,
                       float *out, size_t out_stride, size_t g0, size_t g1, size_t tok,
                       glu_bufs b)
{
    const mvm_k_downn_fn downn = mvm_k_kernels->downn[f.down];
    const size_t G = mvm_k_expert_group_channels(f);
    const size_t row = mvm_k_row_bytes(f.gate_up, n_embd), slot = mvm_k_row_bytes(f.down, G);
    const size_t group = mvm_k_expert_group_bytes(f, n_embd);
    /* wide passes made even (a few tokens left over would unpack every row again); the
     * narrow ones keep whole passes, whose rest takes the paired lanes of 8 tokens */
    const size_t pass = tok > GROUP_TOKENS ? mvm_k_even_pass(n_tok, tok, 16) : tok;
    for (size_t g = g0; g < g1; g++) {
        const uint8_t *gate = expert + g * group;
        const uint8_t *up = gate + G * row, *dn = up + G * row;
        float bias[2 * MVM_QK_K]; /* MVM_GLU_OAI: gate's, then up's (unaligned in the group) */
        if (f.glu == MVM_GLU_OAI)
            memcpy(bias, dn + n_embd * slot, 2 * G * sizeof *bias);
        for (size_t t0 = 0; t0 < n_tok; t0 += pass) {
            const size_t nt = n_tok - t0 < pass ? n_tok - t0 : pass;
            const uint8_t *a = act + t0 * act_stride;
            float(*h)[MVM_QK_K] = b.h, (*u)[MVM_QK_K] = b.u;
            gate_up_rows(f, gate, row, n_embd, a, act_stride, nt, h[0]);
            gate_up_rows(f, up, row, n_embd, a, act_stride, nt, u[0]);
            for (size_t i = 0; i < nt; i++) {
                if (f.glu == MVM_GLU_OAI)
                    for (size_t c = 0; c < G; c++)
                        h[i][c] = mvm_k_glu_oai(h[i][c] + bias[c], u[i][c] + bias[G + c]);
                else
                    mvm_k_swiglu(h[i], u[i], G); /* the level's (exp_avx2.c) */
                for (size_t c = 0; c < G; c++)
                    h[i][c] *= weights[t0 + i];
            }
            size_t stride;
            const uint8_t *da = down_acts(f.down, (const float(*)[MVM_QK_K])h, nt, b.q, &stride);
            float *o = out + t0 * out_stride;
            const mvm_k_gemm_fn gemm =
                f.tiles ? mvm_k_kernels->tiles[f.down] : mvm_k_gemm(f.down, nt);
            if (gemm) {
                gemm(dn, slot, n_embd, da, stride, nt, G, o, out_stride, 1);
                continue;
            }
            for (size_t i = 0; i < nt; i += MVM_K_NT)
                downn(dn, da + i * stride, stride, nt - i < MVM_K_NT ? nt - i : MVM_K_NT,
                      o + i * out_stride, out_stride, n_embd);
        }
    }
}

void mvm_k_expert_ffn_batch(mvm_k_expert_fmt f, const void *expert, size_t n_embd,
                            const void *act, size_t act_stride, const float *weights,
                            size_t n_tok, float *out, size_t out_stride, size_t g0, size_t g1)
{
    if (n_tok > GROUP_TOKENS && !f.tiles && (mvm_k_is_k(f.gate_up) || mvm_k_is_k(f.down))) {
        glu_bufs heap = {malloc(WIDE_TOKENS * sizeof *heap.h), malloc(WIDE_TOKENS * sizeof *heap.u),
                         malloc(WIDE_TOKENS * sizeof *heap.q)};
        const int ok = heap.h && heap.u && heap.q;
        if (ok)
            ffn_groups(f, expert, n_embd, act, act_stride, weights, n_tok, out, out_stride, g0,
                       g1, WIDE_TOKENS, heap);
        free(heap.h), free(heap.u), free(heap.q);
        if (ok)
            return;
    }
    float h[GROUP_TOKENS][MVM_QK_K], u[GROUP_TOKENS][MVM_QK_K];
    mvm_block_q8_K q[GROUP_TOKENS];
    ffn_groups(f, expert, n_embd, act, act_stride, weights, n_tok, out, out_stride, g0, g1,
               GROUP_TOKENS, (glu_bufs){h, u, q});
}

void mvm_k_expert_ffn(mvm_k_expert_fmt f, const void *expert, size_t n_embd, const void *act,
                      float weight, float *out, size_t g0, size_t g1)
{
    mvm_k_expert_ffn_batch(f, expert, n_embd, act, 0, &weight, 1, out, 0, g0, g1);
}

/* 16 rows of nb blocks of type t (row i at src + i * stride) as nb tiles at dst. Q8_0's
 * tile puts the 16 scales first (its block's f16 leads) and its quants + 128, the unsigned
 * side of the kernels' vpdpbusd (gemm_q_avx512vnni.c, Q8T_BYTES). */
static void tile16(enum mvm_wtype t, const uint8_t *src, size_t stride, size_t nb, uint8_t *dst)
{
    const size_t bytes = mvm_k_block_bytes(t), nw = bytes / 4, tail = bytes % 4;
    for (size_t k = 0; k < nb; k++, dst += 16 * bytes)
        for (size_t i = 0; i < 16; i++) {
            const uint8_t *b = src + i * stride + k * bytes;
            if (t == MVM_W_Q8_0) {
                memcpy(dst + 2 * i, b, 2);
                for (size_t j = 0; j < MVM_QBLOCK; j++)
                    dst[32 + 64 * (j / 4) + 4 * i + j % 4] = b[2 + j] ^ 0x80;
                continue;
            }
            for (size_t w = 0; w < nw; w++)
                memcpy(dst + 64 * w + 4 * i, b + 4 * w, 4);
            memcpy(dst + 64 * nw + tail * i, b + 4 * nw, tail);
        }
}

/* Group g's G rows of n elements from the row-major slice m (rb bytes a row) at d, tiled. */
static void tile_rows(enum mvm_wtype t, const uint8_t *m, size_t rb, size_t G, size_t g,
                      size_t n, uint8_t *d)
{
    for (size_t c = 0; c < G; c += 16)
        tile16(t, m + (g * G + c) * rb, rb, n / mvm_k_block_elems(t), d + c * rb);
}

/* Gate and up rows c..c+G-1 are already contiguous in the row-major slices; down's G-element
 * slot for output j and group g is the g-th G elements of down row j, whole blocks of its
 * type (G is a multiple of the block), so packing is copying and never re-quantizes. */
void mvm_k_expert_pack(mvm_k_expert_fmt f, const void *gate, const void *up, const void *down,
                       size_t n_embd, size_t n_ff, void *dst)
{
    const size_t G = mvm_k_expert_group_channels(f), group = mvm_k_expert_group_bytes(f, n_embd);
    const size_t rb = mvm_k_row_bytes(f.gate_up, n_embd), rows = G * rb;
    const size_t down_row = mvm_k_row_bytes(f.down, n_ff), slot = mvm_k_row_bytes(f.down, G);
    const uint8_t *gm = gate, *um = up, *dm = down;
    uint8_t *d = dst;
    for (size_t g = 0; g < n_ff / G; g++, d += group) {
        uint8_t *dn = d + 2 * rows; /* the slots; MVM_GLU_OAI's biases after them (pack_bias) */
        if (f.tiles) {
            tile_rows(f.gate_up, gm, rb, G, g, n_embd, d);
            tile_rows(f.gate_up, um, rb, G, g, n_embd, d + rows);
            for (size_t j = 0; j < n_embd; j += 16)
                tile16(f.down, dm + j * down_row + g * slot, down_row, 1, dn + j * slot);
            continue;
        }
        memcpy(d, gm + g * rows, rows);
        memcpy(d + rows, um + g * rows, rows);
        for (size_t j = 0; j < n_embd; j++)
            memcpy(dn + j * slot, dm + j * down_row + g * slot, slot);
    }
}

void mvm_k_expert_pack_bias(mvm_k_expert_fmt f, const float *gate_b, const float *up_b,
                            size_t n_embd, size_t n_ff, void *dst)
{
    const size_t G = mvm_k_expert_group_channels(f), group = mvm_k_expert_group_bytes(f, n_embd);
    const size_t at = group - 2 * G * sizeof(float);
    for (size_t g = 0; g < n_ff / G; g++) {
        uint8_t *d = (uint8_t *)dst + g * group + at;
        memcpy(d, gate_b + g * G, G * sizeof *gate_b);
        memcpy(d + G * sizeof *gate_b, up_b + g * G, G * sizeof *up_b);
    }
}
