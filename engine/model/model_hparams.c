/*
 * A model's hyper-parameters from its GGUF metadata, as llama.cpp reads them: the shape,
 * the rotary embedding with its context extension, deepseek2's family's blocks and routing
 * (minimax-m2's too), deepseek2's latent attention and gpt-oss's window (model_load.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/model/model_load.h"

/*
 * The rotary embedding: freq_base, rope.dimension_count and the context extension as
 * llama.cpp reads them. rope.scaling.type is none, linear or yarn (linear when only a factor
 * is given, as llama.cpp defaults; longrope and others are refused); the factor comes from
 * rope.scaling.factor or the older rope.scale_linear. YaRN's original context defaults to
 * context_length, its betas to 32 and 1, its ext_factor to 1. Magnitude: attn_factor (1),
 * times yarn_attn_factor where a file has it (our reading: both scale the rotated dims, as
 * each does in llama.cpp, which never meets both in one file), times 1 + 0.1 ln(factor)
 * under YaRN, as ggml's rope_yarn and Hugging Face's get_mscale apply it.
 */
static mvm_status read_rope(struct loader *ld, const mvm_arch *arch, mvm_hparams *hp)
{
    mvm_rope *r = &hp->rope;
    *r = (mvm_rope){.n_rot = hp->head_dim, .neox = (uint32_t)arch->rope_neox, .base = 10000.0f,
                    .freq_scale = 1.0f, .mscale = 1.0f};
    float factor = 0, attn = 1, yarn_attn = 1, beta_fast = 32, beta_slow = 1, ext = 1;
    float log_mul = 0;
    hp->kq_scale = 1.0f / sqrtf((float)hp->head_dim);
    uint32_t orig_ctx = hp->n_ctx_train;
    if (mvm_ld_f32(ld, "rope.freq_base", &r->base, 0) ||
        mvm_ld_u32(ld, "rope.dimension_count", &r->n_rot, 0) ||
        mvm_ld_f32(ld, "rope.scale_linear", &factor, 0) ||
        mvm_ld_f32(ld, "rope.scaling.factor", &factor, 0) ||
        mvm_ld_f32(ld, "rope.scaling.attn_factor", &attn, 0) ||
        mvm_ld_u32(ld, "rope.scaling.original_context_length", &orig_ctx, 0) ||
        mvm_ld_f32(ld, "rope.scaling.yarn_ext_factor", &ext, 0) ||
        mvm_ld_f32(ld, "rope.scaling.yarn_attn_factor", &yarn_attn, 0) ||
        mvm_ld_f32(ld, "rope.scaling.yarn_beta_fast", &beta_fast, 0) ||
        mvm_ld_f32(ld, "rope.scaling.yarn_beta_slow", &beta_slow, 0) ||
        mvm_ld_f32(ld, "rope.scaling.yarn_log_multiplier", &log_mul, 0))
        return ld->st;
    if (r->n_rot == 0 || r->n_rot % 2 || r->n_rot > hp->head_dim)
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "rope.dimension_count %u is not an even number "
                           "up to the head size %u", r->n_rot, hp->head_dim);
    if (!(r->base > 1) || !(r->base < 1e30f))
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "rope.freq_base %g out of range", r->base);
    char key[128], type[16] = "linear";
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch->name);
    mvm_gguf_str str;
    if (mvm_gguf_find_key(ld->g, key) >= 0 &&
        (mvm_gguf_get_str(ld->g, key, &str) != MVM_OK ||
         mvm_gguf_str_copy(str, type, sizeof type) != MVM_OK))
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "%s: not a short string", key);
    int yarn = strcmp(type, "yarn") == 0;
    if (strcmp(type, "none") != 0 && strcmp(type, "linear") != 0 && !yarn)
        return mvm_ld_fail(ld, MVM_ERR_UNSUPPORTED, "%s '%s': moevm computes none, linear and "
                           "yarn", key, type);
    if (factor == 0 || strcmp(type, "none") == 0)
        return MVM_OK; /* llama.cpp: no factor (or 0) is no scaling; YaRN's ramp would blend
                          equal angles and its magnitude be 1 */
    if (!(factor > 0 && factor < 1e6f) || (yarn && factor < 1))
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "rope.scaling.factor %g out of range (%s)",
                           factor, yarn ? "YaRN needs 1 or more" : "must be positive");
    if (!(attn > 0 && attn < 1e3f) || !(yarn_attn > 0 && yarn_attn < 1e3f))
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "rope.scaling attention factor %g / %g out of "
                           "range", attn, yarn_attn);
    if (!(log_mul >= 0 && log_mul < 10))
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "rope.scaling.yarn_log_multiplier %g out of range",
                           log_mul);
    if (!yarn) {
        r->freq_scale = 1.0f / factor;
        r->mscale = attn;
    }
    if (yarn && (orig_ctx < 2 || !(beta_fast > 0 && beta_fast < 1e6f) ||
        !(beta_slow > 0 && beta_slow < 1e6f) || !(ext >= 0 && ext <= 1)))
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "YaRN parameters out of range: "
                           "original_context_length %u, yarn_beta_fast %g, yarn_beta_slow %g, "
                           "yarn_ext_factor %g", orig_ctx, beta_fast, beta_slow, ext);
    if (yarn) {
        mvm_k_rope_yarn(r, factor, orig_ctx, beta_fast, beta_slow, ext, attn * yarn_attn);
        /* the context the extension reaches, as llama.cpp re-adjusts n_ctx_train for a
         * YaRN factor of the user's: what the warnings and defaults measure against */
        const double reach = (double)orig_ctx * factor;
        if (reach > hp->n_ctx_train)
            hp->n_ctx_train = reach < (1u << 24) ? (uint32_t)reach : 1u << 24;
    }
    if (arch->deepseek) {
        /* llama.cpp's deepseek2 (and Hugging Face's DeepseekV2Attention): the rotation keeps
         * its length and the scores take YaRN's magnitude squared instead, from
         * yarn_log_multiplier (0.1 x mscale_all_dim as llama.cpp's converter writes it). */
        float m = attn * yarn_attn * (1.0f + log_mul * logf(1.0f / r->freq_scale));
        r->mscale = attn * yarn_attn;
        hp->kq_scale = m * m / sqrtf((float)hp->head_dim);
    }
    return MVM_OK;
}

/*
 * The blocks of deepseek2's family (deepseek2, glm4moe), as llama.cpp names their keys:
 * leading dense blocks and shared experts. glm4moe's trailing NextN blocks
 * (nextn_predict_layers) are counted out of the MoE layers.
 */
static mvm_status read_lead(struct loader *ld, mvm_hparams *hp)
{
    uint32_t n_shared = 0, blocks = hp->n_layer;
    if (mvm_ld_u32(ld, "leading_dense_block_count", &hp->n_dense, 0) ||
        mvm_ld_u32(ld, "feed_forward_length", &hp->n_ff, hp->n_dense > 0) ||
        mvm_ld_u32(ld, "expert_shared_count", &n_shared, 0) ||
        (ld->arch->glm && mvm_ld_u32(ld, "nextn_predict_layers", &hp->n_nextn, 0)))
        return ld->st;
    if ((uint64_t)hp->n_dense + hp->n_nextn >= blocks)
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "leading_dense_block_count %u and "
                           "nextn_predict_layers %u leave none of the %u blocks for experts",
                           hp->n_dense, hp->n_nextn, blocks);
    hp->n_layer = blocks - hp->n_dense - hp->n_nextn;
    hp->n_ff_shexp = n_shared; /* times the experts' size once that is known */
    return MVM_OK;
}

/*
 * The routing keys of deepseek2's family and minimax-m2, as llama.cpp names them. They
 * default as llama.cpp does: for DeepSeek-V2's files, which lack them, softmax, no groups,
 * no renormalisation; glm4moe's and minimax-m2's gating is sigmoid unless the file says
 * otherwise (mvm_arch.gating), and minimax-m2 renormalises.
 */
static mvm_status read_routing(struct loader *ld, mvm_hparams *hp)
{
    uint32_t gating = 0;
    if (mvm_ld_f32(ld, "expert_weights_scale", &hp->expert_scale, 0) ||
        mvm_ld_bool(ld, "expert_weights_norm", &hp->norm_topk) ||
        mvm_ld_u32(ld, "expert_gating_func", &gating, 0) ||
        mvm_ld_u32(ld, "expert_group_count", &hp->n_group, 0) ||
        mvm_ld_u32(ld, "expert_group_used_count", &hp->n_group_used, 0))
        return ld->st;
    if (gating == 0) /* llama.cpp's "none": the architecture's own */
        gating = (uint32_t)ld->arch->gating;
    if (gating != 1 && gating != 2)
        return mvm_ld_fail(ld, MVM_ERR_UNSUPPORTED, "expert_gating_func %u: moevm computes 1 "
                           "(softmax) and 2 (sigmoid)", gating);
    hp->sigmoid_gate = gating == 2;
    if (hp->n_group > 1 && (hp->n_expert % hp->n_group || hp->n_expert / hp->n_group < 2 ||
                            hp->n_group_used == 0 || hp->n_group_used > hp->n_group ||
                            hp->n_group_used * (hp->n_expert / hp->n_group) < hp->n_expert_used))
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "expert_group_count %u / expert_group_used_count "
                           "%u do not fit %u experts, top-%u", hp->n_group, hp->n_group_used,
                           hp->n_expert, hp->n_expert_used);
    if (!(hp->expert_scale > 0 && hp->expert_scale < 1e4f))
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "expert_weights_scale %g out of range",
                           hp->expert_scale);
    return MVM_OK;
}

/*
 * deepseek2's latent attention. Files converted since llama.cpp's MLA rewrite give the
 * absorbed view in key_length (kv_lora + rope) and value_length (kv_lora) and the per-head
 * sizes in key_length_mla and value_length_mla; older files give the per-head sizes in
 * key_length and value_length.
 */
static mvm_status read_mla(struct loader *ld, mvm_hparams *hp, uint32_t key_len,
                           uint32_t val_len)
{
    uint32_t key_mla = 0, val_mla = 0, n_rot = 0;
    if (mvm_ld_u32(ld, "attention.q_lora_rank", &hp->q_lora, 0) ||
        mvm_ld_u32(ld, "attention.kv_lora_rank", &hp->kv_lora, 1) ||
        mvm_ld_u32(ld, "attention.key_length_mla", &key_mla, 0) ||
        mvm_ld_u32(ld, "attention.value_length_mla", &val_mla, 0) ||
        mvm_ld_u32(ld, "rope.dimension_count", &n_rot, 1))
        return ld->st;
    hp->head_dim = key_mla ? key_mla : key_len;
    hp->v_dim = key_mla ? val_mla : val_len;
    if (key_mla && (key_len != hp->kv_lora + n_rot || val_len != hp->kv_lora))
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "attention.key_length %u / value_length %u are "
                           "not kv_lora_rank %u + rope %u / kv_lora_rank", key_len, val_len,
                           hp->kv_lora, n_rot);
    if (hp->head_dim <= n_rot || hp->v_dim == 0 || hp->kv_lora == 0 || hp->n_head_kv != hp->n_head)
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "MLA shape: key length %u, rope %u, value length "
                           "%u, kv_lora_rank %u, head_count_kv %u (must be head_count)",
                           hp->head_dim, n_rot, hp->v_dim, hp->kv_lora, hp->n_head_kv);
    hp->nope = hp->head_dim - n_rot;
    return MVM_OK;
}

mvm_status mvm_ld_hparams(struct loader *ld, mvm_hparams *hp)
{
    *hp = (mvm_hparams){0};
    uint32_t key_len = 0, val_len = 0;
    if (mvm_ld_u32(ld, "embedding_length", &hp->n_embd, 1) ||
        mvm_ld_u32(ld, "block_count", &hp->n_layer, 1) ||
        mvm_ld_u32(ld, "context_length", &hp->n_ctx_train, 1) ||
        mvm_ld_u32(ld, "attention.head_count", &hp->n_head, 1) ||
        mvm_ld_u32(ld, "expert_count", &hp->n_expert, 0) ||
        mvm_ld_u32(ld, "expert_used_count", &hp->n_expert_used, 0) ||
        mvm_ld_u32(ld, "attention.key_length", &key_len, 0) ||
        mvm_ld_u32(ld, "attention.value_length", &val_len, 0) ||
        mvm_ld_f32(ld, "attention.layer_norm_rms_epsilon", &hp->rms_eps, 1))
        return ld->st;
    hp->n_head_kv = hp->n_head;
    if (mvm_ld_u32(ld, "attention.head_count_kv", &hp->n_head_kv, 0))
        return ld->st;
    /* Every block has tensors of its own: a count past the file's is refused before anything
     * is sized by it. */
    if (hp->n_layer > mvm_gguf_n_tensors(ld->g))
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "block_count %u but the file has only %llu "
                           "tensors", hp->n_layer,
                           (unsigned long long)mvm_gguf_n_tensors(ld->g));
    if (hp->n_expert == 0)
        return mvm_ld_fail(ld, MVM_ERR_UNSUPPORTED, "'%s' model without experts (%s.expert_count "
                           "is missing or 0): moevm runs mixture-of-experts models",
                           ld->arch->name, ld->arch->name);
    if (hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert)
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "%s.expert_used_count %u is not in 1..%u",
                           ld->arch->name, hp->n_expert_used, hp->n_expert);
    if (hp->n_embd == 0 || hp->n_layer == 0 || hp->n_head == 0 || hp->n_head_kv == 0 ||
        hp->n_head % hp->n_head_kv)
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "bad shape: embedding_length %u, block_count %u, "
                           "head_count %u, head_count_kv %u", hp->n_embd, hp->n_layer, hp->n_head,
                           hp->n_head_kv);
    hp->norm_topk = ld->arch->norm_topk;
    hp->expert_scale = 1.0f;
    if (ld->arch->oai && mvm_ld_u32(ld, "attention.sliding_window", &hp->n_swa, 1))
        return ld->st;
    if (ld->arch->oai && hp->n_swa == 0)
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "%s.attention.sliding_window is 0",
                           ld->arch->name);
    if ((ld->arch->lead && read_lead(ld, hp)) || (ld->arch->routing && read_routing(ld, hp)))
        return ld->st;
    if (ld->arch->deepseek) {
        if (read_mla(ld, hp, key_len, val_len))
            return ld->st;
    } else {
        hp->head_dim = key_len ? key_len : hp->n_embd / hp->n_head;
    }
    if (!key_len && hp->n_embd % hp->n_head)
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "embedding_length %u is not a multiple of "
                           "head_count %u and attention.key_length is not set", hp->n_embd,
                           hp->n_head);
    if (val_len && val_len != hp->head_dim && !ld->arch->deepseek)
        return mvm_ld_fail(ld, MVM_ERR_UNSUPPORTED, "attention.value_length %u differs from "
                           "key_length %u", val_len, hp->head_dim);
    if (!(hp->rms_eps > 0 && hp->rms_eps < 1))
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "layer_norm_rms_epsilon %g out of range",
                           hp->rms_eps);
    /* Every width, and the per-head products the kernels index with, far inside 32 bits:
     * a crafted file must not pass a shape check on a wrapped product. */
    const uint64_t lim = 1u << 24, H = hp->n_head;
    const uint64_t w[] = {hp->n_embd, hp->n_ff, hp->q_lora, hp->n_expert, hp->n_ctx_train,
                          H * ((uint64_t)hp->head_dim + hp->v_dim + hp->kv_lora),
                          (uint64_t)hp->n_head_kv * hp->head_dim};
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        if (w[i] > lim)
            return mvm_ld_fail(ld, MVM_ERR_INVALID, "sizes too large (embedding_length %u, "
                               "head_count %u, head size %u, context_length %u): moevm takes "
                               "widths up to %llu", hp->n_embd, hp->n_head, hp->head_dim,
                               hp->n_ctx_train, (unsigned long long)lim);
    return read_rope(ld, ld->arch, hp);
}
