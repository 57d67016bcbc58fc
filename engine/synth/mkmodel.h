/*
 * Synthetic models: a GGUF file for any supported architecture and size, with
 * deterministic random weights and a trained vocabulary (engine/synth/vocab_build.h), written the
 * way llama.cpp writes and reads them (tensor names, shapes, metadata keys), so the same
 * file loads in llama.cpp. Tests, demos and benchmarks use these, since no model download
 * is possible where moevm is built.
 */
#ifndef MVM_ENGINE_SYNTH_MKMODEL_H
#define MVM_ENGINE_SYNTH_MKMODEL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/compute/pool.h"
#include "engine/synth/vocab_build.h"
#include "kernels/cpu/kernels.h"
#include "moevm/moevm.h"

typedef struct mvm_model_spec {
    char arch[16];               /* llama | qwen2moe | qwen3moe | olmoe | deepseek2 | glm4moe |
                                    minimax-m2 | gpt-oss */
    char name[64];               /* general.name */
    uint32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ctx;
    uint32_t n_ff;               /* feed_forward_length (the experts' size for llama/olmoe) */
    uint32_t n_ff_exp;           /* expert_feed_forward_length (qwen2moe, qwen3moe) */
    uint32_t n_ff_shexp;         /* qwen2moe's shared expert */
    uint32_t n_expert, n_expert_used;
    float rope_base, rms_eps;
    enum mvm_wtype type;         /* of every matrix but the router (f32, as llama.cpp keeps it) */
    int k_mix;                   /* with q4_K/q5_K: llama.cpp's _M mix (mkmodel.c, tensor_type) */
    uint64_t seed;
    /* Context extension written as rope.scaling.*: "" (none), "linear" or "yarn", with
     * its factor and (yarn) the original context length. */
    char rope_scaling[8];
    float rope_factor;
    uint32_t rope_orig_ctx;
    /* deepseek2 and glm4moe (deepseek2's family): n_layer blocks of which the first n_dense
     * have a dense FFN (n_ff wide); n_shared ungated shared experts; routing by softmax or
     * sigmoid, with a choosing bias, in n_group groups of which n_group_used are kept,
     * renormalised (norm), times scale; RoPE on the first n_rot dims of each head.
     * deepseek2 only: MLA with head_dim = nope + n_rot query/key dims per head, v_dim value
     * dims, a kv_lora latent and (q_lora > 0) a q bottleneck; its older single attn_kv_b
     * tensor (kv_b) or llama.cpp's newer attn_k_b and attn_v_b; yarn_log_mul for YaRN;
     * Kimi K2's vocabulary (kimi) rather than DeepSeek's. glm4moe only: n_nextn NextN
     * blocks after the n_layer (written, never computed) and the per-head QK norm (qk_norm,
     * GLM-4.5's; Air has none); n_rot 0 is the whole head. minimax-m2 takes the routing
     * (sigmoid, bias, norm, scale; no groups) and n_rot, no dense block nor shared expert. */
    struct {
        uint32_t n_dense, q_lora, kv_lora, n_rot, v_dim, n_shared, n_group, n_group_used;
        uint32_t n_nextn;
        int kv_b, sigmoid, bias, norm, kimi, qk_norm;
        float scale, yarn_log_mul;
    } ds;
    uint32_t n_swa;              /* gpt-oss: attention.sliding_window (every other block's) */
} mvm_model_spec;

typedef struct mvm_preset {
    const char *name;
    const char *about;
    mvm_model_spec spec;         /* type and seed are the caller's */
} mvm_preset;

/* The preset called `name` for `arch` ("tiny" exists for every architecture, the others
 * fix theirs; arch NULL = the preset's own, or llama for tiny). NULL if there is none. */
const mvm_preset *mvm_preset_find(const char *name, const char *arch);
/* Prints the presets with their shapes and sizes at `type`. */
void mvm_preset_list(enum mvm_wtype type);
/* The i-th preset in --list's order (from 0), NULL past the last: for tests that want
 * every one. */
const mvm_preset *mvm_preset_at(size_t i);

/* The experts' intermediate size of a spec (n_ff or n_ff_exp by architecture). */
uint32_t mvm_spec_expert_ff(const mvm_model_spec *s);
/* Checks a spec: a supported architecture, consistent head counts, block-aligned sizes
 * for quantised types... MVM_ERR_INVALID naming the field. */
mvm_status mvm_spec_check(const mvm_model_spec *s);
/* Bytes of all tensor data at the spec's type, and of the experts alone. */
void mvm_spec_bytes(const mvm_model_spec *s, uint64_t *total, uint64_t *experts);

typedef void (*mvm_mkmodel_progress)(void *ctx, uint64_t done, uint64_t total);

/* Builds the vocabulary a model of s's kind carries (its family's style, s->n_vocab
 * tokens: vocab_build.h); free it with mvm_vocab_free. */
mvm_status mvm_spec_vocab(const mvm_model_spec *s, mvm_vocab *out);

/* The chat template (Jinja) a model of s's architecture carries as tokenizer.chat_template:
 * its family's format (engine/synth/chat_templates.c); NULL for none. */
const char *mvm_chat_template_for(const mvm_model_spec *s);

/* Writes the model to `path` (via path.tmp + rename: a failure leaves no partial file),
 * generating the weights on the pool's threads. */
mvm_status mvm_mkmodel_write(const mvm_model_spec *s, const char *path, mvm_pool *pool,
                             mvm_mkmodel_progress progress, void *progress_ctx);

#endif
