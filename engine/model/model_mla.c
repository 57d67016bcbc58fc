/* deepseek2's multi-head latent attention tensors (model_load.h; what they compute:
 * engine/forward/forward_cpu.c). */
#include <stdio.h>
#include <stdlib.h>

#include "engine/model/model_load.h"

/* A 3-D tensor [cols, rows, n] as one matrix of rows x n rows (deepseek2's per-head
 * attn_k_b and attn_v_b). */
static mvm_status mat3(struct loader *ld, const char *name, uint32_t cols, uint32_t rows,
                       uint32_t n, mvm_weight *w)
{
    const mvm_gguf_tensor *t = mvm_ld_find(ld, name, 1);
    int wt;
    if (!t || mvm_ld_shape(ld, t, 3, cols, rows, n) || mvm_ld_type(ld, t, &wt))
        return ld->st;
    *w = (mvm_weight){.type = (enum mvm_wtype)wt, .data = t->data, .rows = rows * n,
                      .cols = cols, .row_bytes = mvm_k_row_bytes((enum mvm_wtype)wt, cols)};
    return MVM_OK;
}

/* An older deepseek2 file's attn_kv_b (per head, nope key rows then v_dim value rows, of
 * kv_lora each) as the absorbed form's two matrices, in F32: wk_b's head h is the
 * transpose of its key rows, wv_b's its value rows. llama.cpp's newer converter writes
 * these as attn_k_b and attn_v_b. */
static mvm_status split_kv_b(struct loader *ld, const mvm_hparams *hp, const char *name,
                             mvm_layer *L)
{
    const uint32_t H = hp->n_head, R = hp->kv_lora, K = hp->nope, V = hp->v_dim;
    mvm_weight kv;
    if (mvm_ld_mat(ld, name, R, H * (K + V), &kv) || ld->probe)
        return ld->st;
    float *wk = malloc(((size_t)H * R * K + (size_t)H * V * R) * sizeof *wk);
    float *row = malloc(R * sizeof *row);
    if (!wk || !row) {
        free(wk), free(row);
        return mvm_ld_fail(ld, MVM_ERR_NOMEM, "out of memory to split %s", name);
    }
    float *wv = wk + (size_t)H * R * K;
    for (uint32_t h = 0; h < H; h++)
        for (uint32_t j = 0; j < K + V; j++) {
            const uint8_t *src =
                (const uint8_t *)kv.data + (size_t)(h * (K + V) + j) * kv.row_bytes;
            if (j >= K) {
                mvm_k_dequantize(kv.type, src, wv + ((size_t)h * V + j - K) * R, R);
                continue;
            }
            mvm_k_dequantize(kv.type, src, row, R);
            for (uint32_t r = 0; r < R; r++)
                wk[((size_t)h * R + r) * K + j] = row[r];
        }
    free(row);
    L->owned = wk;
    L->wk_b = (mvm_weight){MVM_W_F32, wk, H * R, K, (size_t)K * 4};
    L->wv_b = (mvm_weight){MVM_W_F32, wv, H * V, R, (size_t)R * 4};
    return MVM_OK;
}

/* deepseek2's multi-head latent attention of block `blk`. */
mvm_status mvm_ld_bind_mla(struct loader *ld, const mvm_hparams *hp, uint32_t blk, mvm_layer *L)
{
    const uint32_t H = hp->n_head, R = hp->kv_lora, rot = hp->rope.n_rot;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%u.%s", blk, s), n)
    if (hp->q_lora
            ? mvm_ld_mat(ld, NAME("attn_q_a.weight"), hp->n_embd, hp->q_lora, &L->wq_a) ||
              !(L->q_a_norm = mvm_ld_vec(ld, NAME("attn_q_a_norm.weight"), hp->q_lora, 1)) ||
              mvm_ld_mat(ld, NAME("attn_q_b.weight"), hp->q_lora, H * hp->head_dim, &L->wq_b)
            : mvm_ld_mat(ld, NAME("attn_q.weight"), hp->n_embd, H * hp->head_dim, &L->wq))
        return ld->st;
    if (mvm_ld_mat(ld, NAME("attn_kv_a_mqa.weight"), hp->n_embd, R + rot, &L->wkv_a) ||
        !(L->kv_a_norm = mvm_ld_vec(ld, NAME("attn_kv_a_norm.weight"), R, 1)) ||
        mvm_ld_mat(ld, NAME("attn_output.weight"), H * hp->v_dim, hp->n_embd, &L->wo))
        return ld->st;
    if (!mvm_ld_find(ld, NAME("attn_k_b.weight"), 0))
        return split_kv_b(ld, hp, NAME("attn_kv_b.weight"), L);
    if (mat3(ld, NAME("attn_k_b.weight"), hp->nope, R, H, &L->wk_b) ||
        mat3(ld, NAME("attn_v_b.weight"), R, hp->v_dim, H, &L->wv_b))
        return ld->st;
#undef NAME
    return MVM_OK;
}
