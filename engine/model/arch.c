/*
 * The supported architectures, as llama.cpp names them in GGUF and as their public
 * definitions (Hugging Face transformers: Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V2/V3,
 * Glm4Moe, MiniMaxM2, GptOss) compute:
 *
 *   llama     Mixtral-style experts in a llama model. RoPE on adjacent pairs (llama.cpp's
 *             converter permutes q/k so that this equals HF's rotate_half). Router softmax,
 *             top-k, weights renormalised (Mixtral softmaxes the top-k logits: the same).
 *   qwen2moe  Qwen1.5-MoE: q/k/v biases, NEOX RoPE, softmax + top-k NOT renormalised
 *             (norm_topk_prob = false), plus a shared expert scaled by sigmoid(w · h).
 *   qwen3moe  Qwen3-MoE: per-head RMSNorm of q and k before RoPE (QK-norm), NEOX RoPE,
 *             top-k renormalised (norm_topk_prob = true), head_dim from key_length.
 *   olmoe     OLMoE: RMSNorm over the whole q and k projections (not per head), NEOX RoPE,
 *             top-k not renormalised.
 *   deepseek2 DeepSeek-V2/V2-Lite/V3 (llama.cpp's name for all of them): multi-head latent
 *             attention with RoPE on adjacent pairs of a separate rope part of q and k,
 *             leading dense blocks, ungated shared experts, and routing from the metadata:
 *             softmax or sigmoid, group-limited, with a choosing bias, renormalised or not,
 *             scaled (expert_gating_func, expert_group_count, exp_probs_b,
 *             expert_weights_norm, expert_weights_scale). engine/model/model_hparams.c reads them.
 *             Groups are ranked by their best expert with softmax (DeepSeek-V2, V2.5), by
 *             their two best with sigmoid (V3, Kimi K2), as DeepSeek's code does; llama.cpp
 *             sums the two best for both (engine/forward/moe_step.c).
 *   glm4moe   GLM-4.5, GLM-4.5-Air, GLM-4.6 (Hugging Face's Glm4Moe): grouped-query
 *             attention with q/k/v biases, NEOX RoPE on the first rope.dimension_count dims
 *             of each head (half of them: partial_rotary_factor 0.5), a per-head QK norm
 *             where the file has one (GLM-4.5, not Air), and deepseek2's leading dense
 *             blocks, ungated shared experts and routing keys (sigmoid with a choosing bias
 *             by default, as llama.cpp's; renormalised only where expert_weights_norm says
 *             so, llama.cpp's default). The norm before the FFN is post_attention_norm.
 *             The last nextn_predict_layers blocks are the multi-token-prediction head:
 *             their tensors are in the file, but, as in llama.cpp, they are not computed
 *             and their experts take no place in the expert space.
 *   minimax-m2 MiniMax-M2 (Hugging Face's MiniMaxM2, llama.cpp's minimax-m2 graph):
 *             grouped-query attention with RMSNorm over the whole q and k projections (as
 *             olmoe), NEOX RoPE on the first rope.dimension_count dims of each head (64 of
 *             128), no shared expert nor dense block, and deepseek2's routing keys: sigmoid
 *             with a choosing bias, renormalised, unscaled. Our reading where the two
 *             disagree: llama.cpp always renormalises and takes no default gating; here
 *             expert_weights_norm, where a file has it, decides, and a file without
 *             expert_gating_func gets sigmoid, the only gating MiniMax-M2 has.
 *   gpt-oss   OpenAI's gpt-oss-20b and -120b (Hugging Face's GptOss, llama.cpp's openai-moe
 *             graph): grouped-query attention with q/k/v/o biases, NEOX RoPE with the file's
 *             YaRN, a learned sink logit per head in each softmax (attn_sinks), and a window
 *             of attention.sliding_window positions on the blocks with an even index (llama.cpp's
 *             swa pattern 2: a query at t sees keys at t - window + 1 .. t), the others
 *             attending over the whole context; the FFN after post_attention_norm; a router
 *             with a bias, top-k of its logits weighted by the softmax over those k
 *             (llama.cpp's SOFTMAX_WEIGHT: computed here as the softmax over all experts,
 *             renormalised, which is the same); experts with gate, up and down biases and the
 *             clamped SwiGLU (MVM_GLU_OAI; alpha 1.702 and limit 7 are not in the file, as
 *             llama.cpp hard-codes them). Our reading where Hugging Face and llama.cpp differ:
 *             YaRN's ramp ends are floored and ceiled as llama.cpp does (gpt-oss's config says
 *             truncate: false).
 *
 * The experts' intermediate size is expert_feed_forward_length for the Qwen MoEs, deepseek2,
 * glm4moe, minimax-m2 and gpt-oss, and feed_forward_length for llama and olmoe, as llama.cpp
 * reads them.
 */
#include <stdio.h>
#include <string.h>

#include "engine/model/model.h"

#define FF "feed_forward_length"
#define FF_EXP "expert_feed_forward_length"
static const mvm_arch arches[] = {
    {.name = "llama", .norm_topk = 1, .expert_ff_key = FF},
    {.name = "qwen2moe", .rope_neox = 1, .qkv_bias = 1, .shared_expert = 1,
     .expert_ff_key = FF_EXP},
    {.name = "qwen3moe", .rope_neox = 1, .norm_topk = 1, .qk_norm = MVM_QK_NORM_HEAD,
     .expert_ff_key = FF_EXP},
    {.name = "olmoe", .rope_neox = 1, .qk_norm = MVM_QK_NORM_FULL, .expert_ff_key = FF},
    {.name = "deepseek2", .shared_expert = 2, .expert_ff_key = FF_EXP, .deepseek = 1, .lead = 1,
     .routing = 1, .gating = 1},
    {.name = "glm4moe", .rope_neox = 1, .qkv_bias = 1, .qk_norm = MVM_QK_NORM_HEAD,
     .shared_expert = 2, .expert_ff_key = FF_EXP, .lead = 1, .glm = 1, .routing = 1,
     .gating = 2, .post_norm = 1},
    {.name = "minimax-m2", .rope_neox = 1, .norm_topk = 1, .qk_norm = MVM_QK_NORM_FULL,
     .expert_ff_key = FF_EXP, .routing = 1, .gating = 2},
    {.name = "gpt-oss", .rope_neox = 1, .norm_topk = 1, .qkv_bias = 1, .expert_ff_key = FF_EXP,
     .post_norm = 1, .oai = 1},
};
#undef FF
#undef FF_EXP

const mvm_arch *mvm_arch_find(const char *name)
{
    for (size_t i = 0; i < sizeof arches / sizeof *arches; i++)
        if (strcmp(arches[i].name, name) == 0)
            return &arches[i];
    return NULL;
}

const char *mvm_arch_names(void)
{
    return "llama (Mixtral-style), qwen2moe, qwen3moe, olmoe, deepseek2, glm4moe, minimax-m2, "
           "gpt-oss";
}
