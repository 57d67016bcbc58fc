/*
 * The channel-major expert (kernels.h): packing llama.cpp's row-major slices into groups of
 * 32 channels, and the FFN over a range of groups. Per group: 64 gate/up dot products, the
 * SwiGLU with the routing weight folded in (the down product is linear in it), then the
 * down product over all n_embd outputs, which reads a third of the group's bytes in blocks of
 * 32 and is the level's dedicated down kernel.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/dispatch.h"

size_t mvm_k_expert_group_bytes(enum mvm_wtype t, size_t n_embd)
{
    return 2 * MVM_QBLOCK * mvm_k_row_bytes(t, n_embd) + n_embd * mvm_k_block_bytes(t);
}

/* Tokens per tile of the batch: their intermediate activations live on the stack, and each
 * gate/up row is read once per tile (from L1 for all but the first token). */
#define TOK_TILE 8

void mvm_k_expert_ffn_batch(enum mvm_wtype t, const void *expert, size_t n_embd, const void *act,
                            size_t act_stride, const float *weights, size_t n_tok, float *out,
                            size_t out_stride, size_t g0, size_t g1)
{
    const mvm_k_dot_fn dot = mvm_k_kernels->dot[t];
    const mvm_k_down_fn down = mvm_k_kernels->down[t];
    const size_t row = mvm_k_row_bytes(t, n_embd);
    const size_t group = mvm_k_expert_group_bytes(t, n_embd);
    for (size_t g = g0; g < g1; g++) {
        const uint8_t *gate = (const uint8_t *)expert + g * group;
        const uint8_t *up = gate + MVM_QBLOCK * row, *dn = up + MVM_QBLOCK * row;
        for (size_t t0 = 0; t0 < n_tok; t0 += TOK_TILE) {
            const size_t nt = n_tok - t0 < TOK_TILE ? n_tok - t0 : TOK_TILE;
            const uint8_t *a = (const uint8_t *)act + t0 * act_stride;
            float h[TOK_TILE][MVM_QBLOCK];
            for (size_t c = 0; c < MVM_QBLOCK; c++)
                for (size_t i = 0; i < nt; i++)
                    h[i][c] = dot(gate + c * row, a + i * act_stride, n_embd);
            for (size_t c = 0; c < MVM_QBLOCK; c++) {
                for (size_t i = 0; i < nt; i++) {
                    const float u = dot(up + c * row, a + i * act_stride, n_embd);
                    h[i][c] = h[i][c] / (1.0f + expf(-h[i][c])) * u * weights[t0 + i];
                }
            }
            for (size_t i = 0; i < nt; i++) {
                float *o = out + (t0 + i) * out_stride;
                if (mvm_k_is_q(t)) {
                    mvm_block_q8_0 q; /* as ggml quantizes ffn_down's input */
                    mvm_k_quantize_q8_0_block(h[i], &q);
                    down(dn, &q, o, n_embd);
                } else {
                    down(dn, h[i], o, n_embd);
                }
            }
        }
    }
}

void mvm_k_expert_ffn(enum mvm_wtype t, const void *expert, size_t n_embd, const void *act,
                      float weight, float *out, size_t g0, size_t g1)
{
    mvm_k_expert_ffn_batch(t, expert, n_embd, act, 0, &weight, 1, out, 0, g0, g1);
}

/* Gate and up rows c..c+31 are already contiguous in the row-major slices; down's 32-element
 * slot for output j and group g is block g of down row j, one whole quant block for the Q
 * types, so packing is copying and never re-quantizes. */
void mvm_k_expert_pack(enum mvm_wtype t, const void *gate, const void *up, const void *down,
                       size_t n_embd, size_t n_ff, void *dst)
{
    const size_t rows = MVM_QBLOCK * mvm_k_row_bytes(t, n_embd);
    const size_t down_row = mvm_k_row_bytes(t, n_ff), blk = mvm_k_block_bytes(t);
    uint8_t *d = dst;
    for (size_t g = 0; g < n_ff / MVM_QBLOCK; g++) {
        memcpy(d, (const uint8_t *)gate + g * rows, rows);
        memcpy(d + rows, (const uint8_t *)up + g * rows, rows);
        d += 2 * rows;
        for (size_t j = 0; j < n_embd; j++, d += blk)
            memcpy(d, (const uint8_t *)down + j * down_row + g * blk, blk);
    }
}
