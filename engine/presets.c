/*
 * mkmodel presets: `tiny` (tests: small enough that a NumPy reference runs in a second) and
 * the real shapes of the MoE models the papers and users run, from their published
 * configurations (config.json on Hugging Face):
 *   mixtral-8x7b        Mixtral-8x7B-v0.1: 32 layers, 4096 wide, 8 experts x 14336, top-2
 *   qwen3-30b-a3b       Qwen3-30B-A3B: 48 layers, 2048 wide, 128 experts x 768, top-8
 *   qwen1.5-moe-a2.7b   Qwen1.5-MoE-A2.7B: 24 layers, 60 experts x 1408, top-4, shared 5632
 *   olmoe-1b-7b         OLMoE-1B-7B-0924: 16 layers, 2048 wide, 64 experts x 1024, top-8
 *   deepseek-v2-lite    DeepSeek-V2-Lite's MoE shape (64 routed experts x 1408, top-6, two
 *                       shared experts = one of 2816, 27 layers, vocab 102400) on the qwen2moe
 *                       architecture: moevm has no MLA attention yet, and the expert side is
 *                       what memory management is about. Its first dense layer is an MoE
 *                       layer here.
 */
#include <stdio.h>
#include <string.h>

#include "engine/mkmodel.h"

#define TINY(a, kv, hd, ff, ffe, sh) \
    {"tiny", "for tests: 2 layers, 64 wide, 8 experts, top-2", \
     {a, "moevm tiny " a, 512, 64, 2, 4, kv, hd, 256, ff, ffe, sh, 8, 2, 10000.0f, 1e-5f, 0, 0}}

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
    {"deepseek-v2-lite", "DeepSeek-V2-Lite MoE shape on qwen2moe (64 experts, top-6, shared)",
     {"qwen2moe", "DeepSeek-V2-Lite-like (random weights)", 102400, 2048, 27, 16, 16, 128, 32768,
      10944, 1408, 2816, 64, 6, 10000.0f, 1e-6f, 0, 0}},
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
