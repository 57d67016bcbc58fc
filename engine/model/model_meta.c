/*
 * What a user puts in place of a model file's metadata (model.h's mvm_model_meta), applied
 * to the open file before the loader reads it, as llama.cpp applies its --override-kv and
 * its context's RoPE parameters: every reader (the shape, the tokenizer, the chat template)
 * then sees the values given.
 *
 * The RoPE options become the architecture's own keys (llama.cpp's names for them), so
 * that model_hparams.c reads and checks them as it reads a file's: `--rope-scale N` is
 * rope.scaling.factor N, `--rope-freq-base` rope.freq_base, `--yarn-orig-ctx`
 * rope.scaling.original_context_length, and so on.
 */
#include <stdio.h>

#include "engine/model/model_load.h"

mvm_status mvm_ld_meta_kv(struct loader *ld, const mvm_model_meta *meta)
{
    for (uint32_t i = 0; meta && i < meta->n_kv; i++) {
        mvm_gguf_override o;
        if (mvm_gguf_override_parse(meta->kv[i], &o) != MVM_OK ||
            mvm_gguf_override_apply(ld->g, &o) != MVM_OK)
            return mvm_ld_fail(ld, MVM_ERR_INVALID, "%s", mvm_last_error());
    }
    return MVM_OK;
}

#define F32(v) {.type = MVM_GGUF_F32, .f = (v)}

mvm_status mvm_ld_meta_rope(struct loader *ld, const mvm_model_meta *meta)
{
    const mvm_rope_params *r = meta ? meta->rope : NULL;
    if (!r)
        return MVM_OK;
    /* each option given, as the key "{arch}.{suffix}" */
    const struct {
        int given;
        const char *suffix;
        mvm_gguf_override o;
    } keys[] = {
        {r->scaling != NULL, "rope.scaling.type", {.type = MVM_GGUF_STR, .s = r->scaling}},
        {r->scale != 0, "rope.scaling.factor", F32(r->scale)},
        {r->freq_base != 0, "rope.freq_base", F32(r->freq_base)},
        {r->yarn_orig_ctx != 0, "rope.scaling.original_context_length",
         {.type = MVM_GGUF_I64, .i = r->yarn_orig_ctx}},
        {r->yarn_beta_fast != 0, "rope.scaling.yarn_beta_fast", F32(r->yarn_beta_fast)},
        {r->yarn_beta_slow != 0, "rope.scaling.yarn_beta_slow", F32(r->yarn_beta_slow)},
        {r->yarn_ext_set, "rope.scaling.yarn_ext_factor", F32(r->yarn_ext_factor)},
    };
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        if (!keys[k].given)
            continue;
        mvm_gguf_override o = keys[k].o;
        snprintf(o.key, sizeof o.key, "%s.%s", ld->arch->name, keys[k].suffix);
        if (mvm_gguf_override_apply(ld->g, &o) != MVM_OK)
            return mvm_ld_fail(ld, MVM_ERR_INVALID, "%s", mvm_last_error());
    }
    return MVM_OK;
}
