/* A block's tensors but its experts: the norms, the attention (deepseek2's latent one in
 * model_mla.c) and, in a leading dense block of deepseek2's family, the dense FFN
 * (model_load.h; what they compute: engine/forward/forward_cpu.c). */
#include <stdio.h>

#include "engine/model/model_load.h"

/* q/k/v/o projections with the architecture's biases and QK norms; gpt-oss's output bias,
 * sinks and window. */
static mvm_status bind_gqa(struct loader *ld, const mvm_hparams *hp, uint32_t blk,
                           mvm_layer *L)
{
    const mvm_arch *a = ld->arch;
    const uint32_t q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%u.%s", blk, s), n)
    if (mvm_ld_mat(ld, NAME("attn_q.weight"), hp->n_embd, q_dim, &L->wq) ||
        mvm_ld_mat(ld, NAME("attn_k.weight"), hp->n_embd, kv_dim, &L->wk) ||
        mvm_ld_mat(ld, NAME("attn_v.weight"), hp->n_embd, kv_dim, &L->wv) ||
        mvm_ld_mat(ld, NAME("attn_output.weight"), q_dim, hp->n_embd, &L->wo))
        return ld->st;
    if (a->qkv_bias &&
        (!(L->bq = mvm_ld_vec(ld, NAME("attn_q.bias"), q_dim, 1)) ||
         !(L->bk = mvm_ld_vec(ld, NAME("attn_k.bias"), kv_dim, 1)) ||
         !(L->bv = mvm_ld_vec(ld, NAME("attn_v.bias"), kv_dim, 1))))
        return ld->st;
    if (a->oai &&
        (!(L->bo = mvm_ld_vec(ld, NAME("attn_output.bias"), hp->n_embd, 1)) ||
         !(L->sinks = mvm_ld_vec(ld, NAME("attn_sinks.weight"), hp->n_head, 1))))
        return ld->st;
    L->swa = a->oai && blk % 2 == 0 ? hp->n_swa : 0; /* llama.cpp's set_swa_pattern(2) */
    /* glm4moe's norms are optional, as a pair: GLM-4.5 has them, GLM-4.5-Air not. */
    int norms = a->qk_norm != MVM_QK_NORM_NONE &&
                (!a->glm || mvm_ld_find(ld, NAME("attn_q_norm.weight"), 0) ||
                 mvm_ld_find(ld, NAME("attn_k_norm.weight"), 0));
    uint32_t qn = a->qk_norm == MVM_QK_NORM_HEAD ? hp->head_dim : q_dim;
    uint32_t kn = a->qk_norm == MVM_QK_NORM_HEAD ? hp->head_dim : kv_dim;
    if (norms &&
        (!(L->q_norm = mvm_ld_vec(ld, NAME("attn_q_norm.weight"), qn, 1)) ||
         !(L->k_norm = mvm_ld_vec(ld, NAME("attn_k_norm.weight"), kn, 1))))
        return ld->st;
#undef NAME
    return MVM_OK;
}

mvm_status mvm_ld_bind_block(struct loader *ld, const mvm_hparams *hp, uint32_t blk,
                             mvm_layer *L)
{
    char n[96];
    snprintf(n, sizeof n, "blk.%u.attn_norm.weight", blk);
    if (!(L->attn_norm = mvm_ld_vec(ld, n, hp->n_embd, 1)))
        return ld->st;
    snprintf(n, sizeof n, "blk.%u.%s.weight", blk,
             ld->arch->post_norm ? "post_attention_norm" : "ffn_norm");
    if (!(L->ffn_norm = mvm_ld_vec(ld, n, hp->n_embd, 1)))
        return ld->st;
    return ld->arch->deepseek ? mvm_ld_bind_mla(ld, hp, blk, L) : bind_gqa(ld, hp, blk, L);
}

mvm_status mvm_ld_bind_dense(struct loader *ld, const mvm_hparams *hp, uint32_t blk,
                             mvm_layer *L)
{
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%u.%s", blk, s), n)
    if (mvm_ld_bind_block(ld, hp, blk, L) ||
        mvm_ld_mat(ld, NAME("ffn_gate.weight"), hp->n_embd, hp->n_ff, &L->ffn_w1) ||
        mvm_ld_mat(ld, NAME("ffn_up.weight"), hp->n_embd, hp->n_ff, &L->ffn_w3) ||
        mvm_ld_mat(ld, NAME("ffn_down.weight"), hp->n_ff, hp->n_embd, &L->ffn_w2))
        return ld->st;
#undef NAME
    return MVM_OK;
}
