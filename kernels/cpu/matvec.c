/*
 * Row-major matrix times one or several activation vectors, on the dot products of the
 * selected SIMD level. Decode (matvec) streams the rows once; the dot products are the whole
 * cost and the loop here is only their driver. Prefill (matmul) takes the tokens MVM_K_NT
 * at a time, each row's blocks unpacked once for all of them, or hands blocks of rows and
 * tokens to the level's multi-row kernel where it has one for the type (mvm_k_gemm).
 */
#include "kernels/cpu/dispatch.h"

void mvm_k_matvec(enum mvm_wtype t, const void *w, size_t row_bytes, size_t n_in, const void *act,
                  float *y, size_t r0, size_t r1)
{
    const mvm_k_dot_fn dot = mvm_k_kernels->dot[t];
    for (size_t r = r0; r < r1; r++)
        y[r] = dot((const uint8_t *)w + r * row_bytes, act, n_in);
}

/* Tokens are taken in tiles whose activations fit in L2 (256 KiB is half or less of a
 * current core's L2): within a tile each row is read from memory once and then from L1 for
 * every token, while the tile's activations stay in L2. With all tokens at once instead, a
 * long prompt's activations would be streamed from L3 or memory once per row. */
#define TILE_BYTES (256u << 10)

void mvm_k_matmul(enum mvm_wtype t, const void *w, size_t row_bytes, size_t n_in, const void *act,
                  size_t act_stride, size_t n_tok, float *y, size_t y_stride, size_t r0, size_t r1)
{
    const mvm_k_dotn_fn dotn = mvm_k_kernels->dotn[t];
    const mvm_k_gemm_fn gemm = mvm_k_gemm(t, n_tok);
    size_t tile = TILE_BYTES / (act_stride ? act_stride : 1);
    if (!tile)
        tile = 1;
    for (size_t t0 = 0; t0 < n_tok; t0 += tile) {
        const size_t t1 = n_tok - t0 < tile ? n_tok : t0 + tile;
        if (gemm) {
            gemm((const uint8_t *)w + r0 * row_bytes, row_bytes, r1 - r0,
                 (const uint8_t *)act + t0 * act_stride, act_stride, t1 - t0, n_in,
                 y + t0 * y_stride + r0, y_stride, 0);
            continue;
        }
        for (size_t r = r0; r < r1; r++) {
            const void *row = (const uint8_t *)w + r * row_bytes;
            for (size_t i = t0; i < t1; i += MVM_K_NT)
                dotn(row, (const uint8_t *)act + i * act_stride, act_stride,
                     t1 - i < MVM_K_NT ? t1 - i : MVM_K_NT, n_in, y + i * y_stride + r, y_stride);
        }
    }
}
