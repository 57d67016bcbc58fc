/*
 * A loaded MoE model: hyper-parameters from the GGUF metadata, the non-expert weights as
 * pointers into the mapped file, and the experts in a moevm space (channel-major, in their
 * host homes). See engine/model/arch.c for what each architecture means.
 */
#ifndef MVM_ENGINE_MODEL_MODEL_H
#define MVM_ENGINE_MODEL_MODEL_H

#include <stdint.h>

#include "engine/compute/pool.h"
#include "engine/gguf/gguf.h"
#include "kernels/cpu/kernels.h"
#include "moevm/engine.h"
#include "moevm/moevm.h"
#include "policy/policy.h"
#include "vmm/options.h"

enum mvm_qk_norm {
    MVM_QK_NORM_NONE,
    MVM_QK_NORM_HEAD, /* RMSNorm over each head's head_dim values (qwen3moe) */
    MVM_QK_NORM_FULL, /* RMSNorm over the whole projected q / k vector (olmoe) */
};

/* What distinguishes the supported architectures (llama.cpp's names and conventions). */
typedef struct mvm_arch {
    const char *name;           /* general.architecture */
    int rope_neox;              /* rotate pairs (i, i + n_rot/2), else (2i, 2i+1) */
    int norm_topk;              /* renormalise the selected experts' weights to sum 1 */
    int qkv_bias;               /* attn_{q,k,v}.bias present */
    enum mvm_qk_norm qk_norm;
    int shared_expert;          /* ffn_*_shexp: qwen2moe's with a sigmoid gate (1), or
                                   deepseek2's ungated, expert_shared_count experts wide (2) */
    const char *expert_ff_key;  /* the key holding the experts' intermediate size */
    int deepseek;               /* deepseek2: multi-head latent attention (MLA) */
    int lead;                   /* deepseek2's family (deepseek2, glm4moe): leading dense blocks
                                   and shared experts described by the metadata */
    int routing;                /* the routing described by the metadata (deepseek2's keys):
                                   deepseek2, glm4moe, minimax-m2 */
    int gating;                 /* with `routing`: the gating a file without
                                   expert_gating_func gets, 1 softmax or 2 sigmoid */
    int glm;                    /* glm4moe: the per-head QK norm is optional (GLM-4.5 has it,
                                   Air not), and the trailing NextN (multi-token prediction)
                                   blocks are not computed, as llama.cpp skips them */
    int post_norm;              /* the norm before the FFN is post_attention_norm (glm4moe,
                                   gpt-oss), not ffn_norm */
    int oai;                    /* gpt-oss: attention sinks and an output bias, sliding-window
                                   attention on every other block, a biased router, and biased
                                   experts with the clamped SwiGLU (MVM_GLU_OAI) */
} mvm_arch;

/* The architecture called `name`, or NULL. */
const mvm_arch *mvm_arch_find(const char *name);
/* The supported architectures' names, for messages and --help. */
const char *mvm_arch_names(void);

typedef struct mvm_hparams {
    /* n_layer counts the MoE blocks, the only ones the expert space, the policies and the
     * traces see; deepseek2's and glm4moe's n_dense dense blocks (FFN n_ff wide) come
     * before them, so MoE layer l is the file's blk.{n_dense + l}; glm4moe's n_nextn NextN
     * blocks come after them and are not computed. */
    uint32_t n_vocab, n_embd, n_layer, n_dense, n_ff, n_head, n_head_kv, head_dim, n_ctx_train;
    uint32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp, n_nextn;
    float rms_eps;
    mvm_rope rope;              /* with the architecture's pairing and any context extension */
    float kq_scale;             /* attention scores' scale: 1/sqrt(head_dim), or MLA's */
    /* MLA (deepseek2): q from n_embd through a q_lora bottleneck (0: one matrix), keys and
     * values from one kv_lora-wide latent per token; per head, head_dim = nope + rope.n_rot
     * dims of query and key, v_dim of value. */
    uint32_t q_lora, kv_lora, nope, v_dim;
    /* Routing: softmax or (sigmoid_gate) sigmoid of the router's logits; the top-k chosen
     * among the n_group_used best of n_group expert groups (0: no groups) by score plus the
     * layer's expert_bias; their weights renormalised (norm_topk), then times expert_scale. */
    int sigmoid_gate, norm_topk;
    float expert_scale;
    uint32_t n_group, n_group_used;
    /* gpt-oss: the blocks with an even index attend over the last n_swa positions only */
    uint32_t n_swa;
} mvm_hparams;

/* A 2-D weight in ggml layout: `rows` rows of `cols` elements, row r at data + r*row_bytes. */
typedef struct mvm_weight {
    enum mvm_wtype type;
    const void *data;
    uint32_t rows, cols;
    size_t row_bytes;
} mvm_weight;

typedef struct mvm_layer {
    const float *attn_norm, *ffn_norm;
    mvm_weight wq, wk, wv, wo;
    /* MLA: q = wq_b · rms(wq_a · h) (or wq · h); [latent, k_pe] = wkv_a · h, the latent
     * RMS-normed by kv_a_norm; per head, wk_b (kv_lora rows of nope) takes q_nope into the
     * latent space and wv_b (v_dim rows of kv_lora) the attended latent out of it. */
    mvm_weight wq_a, wq_b, wkv_a, wk_b, wv_b;
    const float *q_a_norm, *kv_a_norm;
    float *owned;                        /* wk_b/wv_b rebuilt from an older file's attn_kv_b */
    mvm_weight ffn_w1, ffn_w3, ffn_w2;   /* a dense block's FFN: gate, up, down */
    const float *expert_bias;            /* exp_probs_b: added to the scores to choose */
    const float *bq, *bk, *bv;           /* qkv_bias */
    /* gpt-oss (oai): attn_output's bias, each head's sink logit, the window (0: the whole
     * context), the router's bias, and the experts' down biases ([n_expert][n_embd]; their
     * gate and up biases are in the packed experts, mvm_k_expert_pack_bias) */
    const float *bo, *sinks;
    uint32_t swa;
    const float *router_bias, *down_bias;
    const float *q_norm, *k_norm;        /* qk_norm (NULL: none, glm4moe without it) */
    mvm_weight router;                   /* n_expert rows of n_embd */
    const float *shexp_gate;             /* shared_expert: n_embd */
    mvm_weight shexp_w1, shexp_w3, shexp_w2; /* gate, up (n_ff_shexp rows), down (n_embd rows) */
    /* The routed experts' types (Q4_K_M mixes them by layer) and their n_ff_exp / G
     * channel groups of mvm_k_expert_group_bytes(expert_fmt, n_embd) each. */
    mvm_k_expert_fmt expert_fmt;
    uint32_t expert_groups;
} mvm_layer;

/* Bytes of one of the layer's experts (the model's expert_bytes is the largest of these). */
static inline uint64_t mvm_layer_expert_bytes(const mvm_layer *L, uint32_t n_embd)
{
    return (uint64_t)mvm_k_expert_group_bytes(L->expert_fmt, n_embd) * L->expert_groups;
}

typedef struct mvm_model {
    const mvm_arch *arch;
    mvm_hparams hp;
    mvm_gguf *gguf;
    mvm_weight tok_embd, output;
    const float *output_norm;
    mvm_layer *layers;          /* the n_layer MoE blocks */
    mvm_layer *dense;           /* the n_dense dense blocks before them (deepseek2, glm4moe) */
    /* Experts: (layer, expert) at mvm_expert_addr(space, l, e), in the layer's format;
     * expert_bytes is the largest layer's (the space's slots are all one size). */
    mvm_space *space;
    uint64_t expert_bytes;
    int experts_at_home;        /* the CPU computes every expert, reading it at its home, and
                                   nothing moves: the host backend with no budget asked for,
                                   or --n-cpu-moe at least the layers (cpu_moe), where a GPU
                                   computes the rest (plan.c) */
    int cpu_moe;                /* every MoE layer's experts stay on the CPU, whatever
                                   computes the rest (mvm_plan_cpu_moe) */
    int device;                 /* the CUDA device of a cuda space (its desc's) */
    char name[128];             /* general.name, or the file name */
    char *path;                 /* the file, as opened: messages name it */
} mvm_model;

/* Progress of a long load: called with bytes done and total, at most a few times a second. */
typedef void (*mvm_progress_fn)(void *ctx, uint64_t done, uint64_t total);

/*
 * Opens `path` and checks the architecture, every required key and every tensor's shape and
 * type; errors name the file and the key or tensor at fault. Every field is set but `space`
 * (the experts are not read yet): plan.h decides the space from the model's shape and
 * mvm_model_load_experts fills it. Non-expert weights stay in the read-only file mapping.
 */
mvm_status mvm_model_open(const char *path, mvm_model **out);
/* What a user puts in place of the file's metadata before it is read: llama.cpp's
 * --override-kv specs, then its RoPE options (engine.h), which win where both name a key. */
typedef struct mvm_model_meta {
    const char *const *kv;
    uint32_t n_kv;
    const mvm_rope_params *rope; /* may be NULL */
} mvm_model_meta;
/* mvm_model_open with `meta` (NULL: the file as it is); an override that does not parse or
 * does not fit the file's value fails the open with a message naming it. */
mvm_status mvm_model_open_meta(const char *path, const mvm_model_meta *meta, mvm_model **out);
/* Whether the CPU's tiled experts (kernels/cpu/kernels.h) may be used: auto (where only the
 * CPU reads the experts) or off. Joins the engine's options table. */
extern const mvm_option_desc mvm_opt_expert_tiles;

/* Converts m's experts into the homes of `space` (made for m: n_layers, n_experts and
 * expert_bytes are m's) on the pool's threads; only those with held[layer * n_expert + e]
 * set when held is not NULL (the distributed mode's share, dist.h): the others' homes are
 * never written, so they take no memory, and must not be computed. m owns the space from
 * this call on. The file's copy of each layer's experts is released once converted. A
 * space on a GPU moves the pool to the cores near it first (mvm_pool_move). */
mvm_status mvm_model_load_experts(mvm_model *m, mvm_space *space, mvm_pool *pool,
                                  const uint8_t *held, mvm_progress_fn progress,
                                  void *progress_ctx);
/* mvm_model_open's checks, cheaper, for tools that need a model's shape (`moevm sim
 * --model`): the file is mapped and nothing is derived or converted (so an older deepseek2
 * file's layers have no wk_b and wv_b: opening splits them out of attn_kv_b). */
mvm_status mvm_model_probe(const char *path, mvm_model **out);
void mvm_model_free(mvm_model *m);
/* The model's routers as the policy modules see them (policy.h): how they choose, the
 * layers' biases, and with `weights` every layer's router as F32 rows, whatever type the
 * file keeps it in (the gate and residual predictors and the fixedpoint configurator
 * compute with them; else r.weights is NULL). The biases point into the model, which must
 * outlive them. */
typedef struct mvm_model_router {
    mvm_router r;               /* its [n_layer] arrays are owned here */
    float *table;               /* [n_layer][n_expert][n_embd]: r.weights point into it */
} mvm_model_router;
mvm_status mvm_model_router_init(const mvm_model *m, int weights, mvm_model_router *out);
void mvm_model_router_free(mvm_model_router *mr);

/* Maps a GGUF tensor type to a kernel weight type; -1 when the engine cannot compute it. */
int mvm_wtype_from_ggml(enum mvm_ggml_type t);
/* The ggml type of a kernel weight type. */
enum mvm_ggml_type mvm_wtype_to_ggml(enum mvm_wtype t);
/* The experts' types for a summary line, in buf: "q8_0", or "q4_K, down q4_K/q6_K" when
 * the down matrices differ from gate/up or by layer; ", tiled" after them where the CPU's
 * tiles hold the experts (", tiled in N of L layers" where some layers' types have none). */
const char *mvm_model_expert_types(const mvm_model *m, char *buf, size_t size);

#endif
