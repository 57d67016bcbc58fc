/*
 * mkmodel presets: `tiny` (tests: small enough that a NumPy reference runs in a second) and
 * the real shapes of the MoE models the papers and users run, from their published
 * configurations (config.json on Hugging Face):
 *   mixtral-8x7b        Mixtral-8x7B-v0.1: 32 layers, 4096 wide, 8 experts x 14336, top-2
 *   qwen3-30b-a3b       Qwen3-30B-A3B: 48 layers, 2048 wide, 128 experts x 768, top-8
 *   qwen1.5-moe-a2.7b   Qwen1.5-MoE-A2.7B: 24 layers, 60 experts x 1408, top-4, shared 5632
 *   olmoe-1b-7b         OLMoE-1B-7B-0924: 16 layers, 2048 wide, 64 experts x 1024, top-8
 *   deepseek-v2-lite    DeepSeek-V2-Lite: 27 blocks (1 dense), MLA, 64 experts x 1408,
 *                       top-6, 2 shared, vocab 102400
 *   deepseek-v3         DeepSeek-V3 (and R1): 61 blocks (3 dense), MLA with a q bottleneck,
 *                       256 experts x 2048, top-8 in 4 of 8 groups, 1 shared, vocab 129280
 *   kimi-k2             Kimi K2: V3's design with 384 experts, 64 heads, 1 dense block, no
 *                       groups, vocab 163840 and its own tokenizer
 *   glm-4.5-air         GLM-4.5-Air: 46 blocks (1 dense) + 1 NextN, 4096 wide, 96 heads of
 *                       128 (8 kv), 128 experts x 1408, top-8, 1 shared, vocab 151552
 *   glm-4.5             GLM-4.5 (and 4.6): 92 blocks (3 dense) + 1 NextN, 5120 wide, QK
 *                       norm, 160 experts x 1536, top-8, 1 shared
 *   minimax-m2          MiniMax-M2: 62 blocks, 3072 wide, 48 heads of 128 (8 kv), QK norm,
 *                       RoPE on 64 dims, 256 experts x 1536, top-8 by sigmoid, vocab 200064
 *   gpt-oss-20b         gpt-oss-20b: 24 blocks, 2880 wide, 64 heads of 64 (8 kv), sinks, a
 *                       128-position window on every other block, 32 experts x 2880, top-4
 *   gpt-oss-120b        gpt-oss-120b: the same with 36 blocks and 128 experts
 */
#include <stdio.h>
#include <string.h>

#include "engine/synth/mkmodel.h"

#define TINY(a, kv, hd, ff, ffe, sh) \
    {"tiny", "for tests: 2 layers, 64 wide, 8 experts, top-2", \
     {a, "moevm tiny " a, 512, 64, 2, 4, kv, hd, 256, ff, ffe, sh, 8, 2, 10000.0f, 1e-5f, 0, 0}}

/* A tiny deepseek2 (3 blocks, 64 wide, MLA with a 32-wide latent, 8 experts, top-2, 1
 * shared) with its own routing and MLA fields after the common ones. */
#define TINY_DS(name, about, gname, base, eps, ...) \
    {name, about, \
     {"deepseek2", gname, 512, 64, 3, 4, 4, 48, 256, 128, 64, 0, 8, 2, base, eps, 0, 0, 0, "", \
      0, 0, {.n_dense = 1, .kv_lora = 32, .n_rot = 16, .v_dim = 16, .n_shared = 1, \
             __VA_ARGS__}}}

/* A tiny glm4moe with its own QK norm and scale after the common fields. */
#define TINY_GLM(name, about, gname, ...) \
    {name, about, \
     {"glm4moe", gname, 512, 64, 3, 4, 2, 32, 256, 128, 64, 0, 8, 2, 1e6f, 1e-5f, 0, 0, 0, "", \
      0, 0, {.n_dense = 1, .n_rot = 16, .n_shared = 1, .n_nextn = 1, .sigmoid = 1, .bias = 1, \
             .norm = 1, __VA_ARGS__}}}

static const mvm_preset presets[] = {
    TINY("llama", 2, 16, 64, 0, 0),
    TINY("qwen2moe", 2, 16, 128, 64, 128),
    TINY("qwen3moe", 2, 32, 128, 64, 0), /* head_dim 32 != 64/4: exercises key_length */
    /* OLMoE has as many kv heads as heads, and llama.cpp sizes attn_k_norm by n_embd */
    TINY("olmoe", 4, 16, 64, 0, 0),
    {"mixtral-8x7b", "Mixtral-8x7B shape (46.7B parameters)",
     {"llama", "Mixtral-8x7B-like (random weights)", 32000, 4096, 32, 32, 8, 128, 32768, 14336,
      0, 0, 8, 2, 1e6f, 1e-5f, 0, 0}},
    {"qwen3-30b-a3b", "Qwen3-30B-A3B shape (30.5B parameters, 3.3B active)",
     {"qwen3moe", "Qwen3-30B-A3B-like (random weights)", 151936, 2048, 48, 32, 4, 128, 40960,
      6144, 768, 0, 128, 8, 1e6f, 1e-6f, 0, 0}},
    {"qwen1.5-moe-a2.7b", "Qwen1.5-MoE-A2.7B shape (14.3B parameters, 2.7B active)",
     {"qwen2moe", "Qwen1.5-MoE-A2.7B-like (random weights)", 151936, 2048, 24, 16, 16, 128, 8192,
      5632, 1408, 5632, 60, 4, 1e6f, 1e-6f, 0, 0}},
    {"olmoe-1b-7b", "OLMoE-1B-7B shape (6.9B parameters, 1.3B active)",
     {"olmoe", "OLMoE-1B-7B-like (random weights)", 50304, 2048, 16, 16, 16, 128, 4096, 1024, 0,
      0, 64, 8, 10000.0f, 1e-5f, 0, 0}},
    /* DeepSeek-V2-Lite: 27 blocks (the first dense, 10944 wide), MLA of 16 heads with a
     * 512-wide latent, 128 + 64 query/key and 128 value dims per head, YaRN x40 from 4096
     * positions; 64 routed experts x 1408, top-6, softmax, and 2 shared ones. */
    {"deepseek-v2-lite", "DeepSeek-V2-Lite shape (15.7B parameters, 2.4B active)",
     {"deepseek2", "DeepSeek-V2-Lite-like (random weights)", 102400, 2048, 27, 16, 16, 192,
      163840, 10944, 1408, 0, 64, 6, 10000.0f, 1e-6f, 0, 0, 0, "yarn", 40.0f, 4096,
      {.n_dense = 1, .kv_lora = 512, .n_rot = 64, .v_dim = 128, .n_shared = 2, .scale = 1.0f,
       .yarn_log_mul = 0.0707f}}},
    /* DeepSeek-V3: 61 blocks (3 dense, 18432 wide), MLA of 128 heads with a 1536-wide q
     * bottleneck and a 512-wide latent, YaRN x40 from 4096 (mscale_all_dim 1); 256 routed
     * experts x 2048, top-8 by sigmoid with a choosing bias in 4 of 8 groups, renormalised,
     * x2.5, and 1 shared. Kimi K2 is the same design at 384 experts, 64 heads, 1 dense
     * block, no groups, x2.827, rope base 50000 and YaRN x32. Newer llama.cpp files split
     * attn_kv_b, as these write it. */
    {"deepseek-v3", "DeepSeek-V3 shape (671B parameters, 37B active)",
     {"deepseek2", "DeepSeek-V3-like (random weights)", 129280, 7168, 61, 128, 128, 192,
      163840, 18432, 2048, 0, 256, 8, 10000.0f, 1e-6f, 0, 0, 0, "yarn", 40.0f, 4096,
      {.n_dense = 3, .q_lora = 1536, .kv_lora = 512, .n_rot = 64, .v_dim = 128, .n_shared = 1,
       .n_group = 8, .n_group_used = 4, .sigmoid = 1, .bias = 1, .norm = 1, .scale = 2.5f,
       .yarn_log_mul = 0.1f}}},
    {"kimi-k2", "Kimi K2 shape (1.03T parameters, 32B active)",
     {"deepseek2", "Kimi-K2-like (random weights)", 163840, 7168, 61, 64, 64, 192, 131072,
      18432, 2048, 0, 384, 8, 50000.0f, 1e-6f, 0, 0, 0, "yarn", 32.0f, 4096,
      {.n_dense = 1, .q_lora = 1536, .kv_lora = 512, .n_rot = 64, .v_dim = 128, .n_shared = 1,
       .n_group = 1, .n_group_used = 1, .sigmoid = 1, .bias = 1, .norm = 1, .scale = 2.827f,
       .yarn_log_mul = 0.1f, .kimi = 1}}},
    /* A small one of each deepseek2 kind for the tests, 3 blocks (the first dense), 64 wide:
     * V2-Lite's (q in one matrix, softmax, not renormalised, x2, llama.cpp's newer
     * attn_k_b/attn_v_b) and V3's (a q bottleneck, sigmoid with a choosing bias in 4 groups
     * of which 2 count, renormalised, x2.5; the older attn_kv_b). */
    TINY_DS("tiny", "for tests: 3 blocks (1 dense), 64 wide, MLA, 8 experts, top-2, 1 shared",
            "moevm tiny deepseek2", 10000.0f, 1e-5f, .scale = 2.0f),
    TINY_DS("tiny-v3", "for tests: tiny deepseek2 with V3's routing and q bottleneck",
            "moevm tiny deepseek2 v3", 10000.0f, 1e-5f, .q_lora = 32, .n_group = 4,
            .n_group_used = 2, .kv_b = 1, .sigmoid = 1, .bias = 1, .norm = 1, .scale = 2.5f,
            .yarn_log_mul = 0.0707f),
    /* DeepSeek-V2 and V2.5 (not Lite): softmax in groups, ranked by each one's best expert
     * (moe_step.c), not renormalised, x16. One group of two is kept: with top-2, keeping as
     * many groups as experts would never change the choice. */
    TINY_DS("tiny-v2", "for tests: tiny deepseek2 with V2's group-limited softmax routing",
            "moevm tiny deepseek2 v2", 10000.0f, 1e-6f, .q_lora = 32, .n_group = 2,
            .n_group_used = 1, .scale = 16.0f),
    TINY_DS("tiny-k2", "for tests: tiny deepseek2 with Kimi K2's routing and vocabulary",
            "moevm tiny kimi-k2", 50000.0f, 1e-6f, .q_lora = 32, .n_group = 1,
            .n_group_used = 1, .sigmoid = 1, .bias = 1, .norm = 1, .scale = 2.827f, .kimi = 1),
    /* GLM-4.5-Air: 46 blocks (the first dense, 10944 wide) and the NextN block, 96 heads of
     * 128 over 8 kv heads with q/k/v biases, NEOX RoPE on half of each head (base 1e6); 128
     * experts x 1408, top-8 by sigmoid with a choosing bias, renormalised, x1, 1 shared.
     * GLM-4.5 (and GLM-4.6, the same shape): 92 blocks (3 dense, 12288 wide), 5120 wide,
     * QK norm, 160 experts x 1536, x2.5. */
    {"glm-4.5-air", "GLM-4.5-Air shape (106B parameters, 12B active)",
     {"glm4moe", "GLM-4.5-Air-like (random weights)", 151552, 4096, 46, 96, 8, 128, 131072,
      10944, 1408, 0, 128, 8, 1e6f, 1e-5f, 0, 0, 0, "", 0, 0,
      {.n_dense = 1, .n_rot = 64, .n_shared = 1, .n_nextn = 1, .sigmoid = 1, .bias = 1,
       .norm = 1, .scale = 1.0f}}},
    {"glm-4.5", "GLM-4.5 / 4.6 shape (355B parameters, 32B active)",
     {"glm4moe", "GLM-4.5-like (random weights)", 151552, 5120, 92, 96, 8, 128, 131072, 12288,
      1536, 0, 160, 8, 1e6f, 1e-5f, 0, 0, 0, "", 0, 0,
      {.n_dense = 3, .n_rot = 64, .n_shared = 1, .n_nextn = 1, .sigmoid = 1, .bias = 1,
       .norm = 1, .qk_norm = 1, .scale = 2.5f}}},
    /* The tiny glm4moes, 3 blocks (the first dense) and a NextN block, 64 wide, 4 heads of
     * 32 over 2 kv heads (key_length is not 64/4), RoPE on 16 of the 32: GLM-4.5's kind
     * (QK norm, x2.5) and Air's (neither). */
    TINY_GLM("tiny", "for tests: 3 blocks (1 dense) + NextN, 64 wide, 8 experts, top-2, "
             "1 shared", "moevm tiny glm4moe", .qk_norm = 1, .scale = 2.5f),
    TINY_GLM("tiny-air", "for tests: tiny glm4moe as GLM-4.5-Air (no QK norm, x1)",
             "moevm tiny glm4moe air", .scale = 1.0f),
    /* MiniMax-M2 (and M2.1, the same shape): 62 blocks, 48 heads of 128 over 8 kv heads
     * with RMSNorm over the whole q and k, NEOX RoPE on 64 of each head's 128 dims (base
     * 5e6); 256 experts x 1536, top-8 by sigmoid with a choosing bias, renormalised. The
     * tiny one: 2 blocks, 4 heads of 32 over 2 (key_length is not 64/4), RoPE on 16. */
    {"minimax-m2", "MiniMax-M2 shape (230B parameters, 10B active)",
     {"minimax-m2", "MiniMax-M2-like (random weights)", 200064, 3072, 62, 48, 8, 128, 196608,
      1536, 1536, 0, 256, 8, 5e6f, 1e-6f, 0, 0, 0, "", 0, 0,
      {.n_rot = 64, .sigmoid = 1, .bias = 1, .norm = 1, .scale = 1.0f}}},
    {"tiny", "for tests: 2 layers, 64 wide, 8 experts, top-2, sigmoid with a bias",
     {"minimax-m2", "moevm tiny minimax-m2", 512, 64, 2, 4, 2, 32, 256, 128, 64, 0, 8, 2,
      5e6f, 1e-6f, 0, 0, 0, "", 0, 0,
      {.n_rot = 16, .sigmoid = 1, .bias = 1, .norm = 1, .scale = 1.0f}}},
    /* gpt-oss (config.json of gpt-oss-20b and -120b): 64 heads of 64 over 8 kv heads (4096
     * wide, not 2880), NEOX RoPE base 150000 with YaRN x32 from 4096, a window of 128 on the
     * even blocks; experts 2880 wide, top-4, vocab 201088 (o200k_harmony). The tiny one:
     * 3 blocks (two windowed), 4 heads of 32 over 2, a window of 5 positions (shorter than
     * the tests' prompts) and YaRN x4 from 64. */
    {"gpt-oss-20b", "gpt-oss-20b shape (20.9B parameters, 3.6B active)",
     {"gpt-oss", "gpt-oss-20b-like (random weights)", 201088, 2880, 24, 64, 8, 64, 131072,
      2880, 2880, 0, 32, 4, 150000.0f, 1e-5f, 0, 0, 0, "yarn", 32.0f, 4096, {.scale = 1.0f},
      128}},
    {"gpt-oss-120b", "gpt-oss-120b shape (116.8B parameters, 5.1B active)",
     {"gpt-oss", "gpt-oss-120b-like (random weights)", 201088, 2880, 36, 64, 8, 64, 131072,
      2880, 2880, 0, 128, 4, 150000.0f, 1e-5f, 0, 0, 0, "yarn", 32.0f, 4096, {.scale = 1.0f},
      128}},
    {"tiny", "for tests: 3 layers (2 windowed), 64 wide, sinks, biased experts, top-2",
     {"gpt-oss", "moevm tiny gpt-oss", 512, 64, 3, 4, 2, 32, 256, 128, 64, 0, 8, 2, 150000.0f,
      1e-5f, 0, 0, 0, "yarn", 4.0f, 64, {.scale = 1.0f}, 5}},
};

const mvm_preset *mvm_preset_find(const char *name, const char *arch)
{
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        const mvm_preset *p = &presets[i];
        if (strcmp(p->name, name) != 0)
            continue;
        if (!arch || strcmp(p->spec.arch, arch) == 0)
            return p;
    }
    return NULL;
}

const mvm_preset *mvm_preset_at(size_t i)
{
    return i < sizeof presets / sizeof *presets ? &presets[i] : NULL;
}

void mvm_preset_list(enum mvm_wtype type)
{
    printf("%-18s %-9s %8s %8s  %s\n", "preset", "arch", "total", "experts", "shape");
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        mvm_model_spec s = presets[i].spec;
        s.type = type;
        uint64_t total, experts;
        mvm_spec_bytes(&s, &total, &experts);
        printf("%-18s %-9s %7.2fG %7.2fG  %s\n", presets[i].name, s.arch,
               (double)total / (1 << 30), (double)experts / (1 << 30), presets[i].about);
    }
}
