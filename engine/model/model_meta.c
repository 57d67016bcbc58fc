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

/* One RoPE option as the key "{arch}.{suffix}". */
static mvm_status put(struct loader *ld, const char *suffix, mvm_gguf_override o)
{
    snprintf(o.key, sizeof o.key, "%s.%s", ld->arch->name, suffix);
    if (mvm_gguf_override_apply(ld->g, &o) != MVM_OK)
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "%s", mvm_last_error());
    return MVM_OK;
}

#define F32(v) ((mvm_gguf_override){.type = MVM_GGUF_F32, .f = (v)})

mvm_status mvm_ld_meta_rope(struct loader *ld, const mvm_model_meta *meta)
{
    const mvm_rope_params *r = meta ? meta->rope : NULL;
    if (!r)
        return MVM_OK;
    mvm_status st = MVM_OK;
    if (r->scaling)
        st = put(ld, "rope.scaling.type",
                 (mvm_gguf_override){.type = MVM_GGUF_STR, .s = r->scaling});
    if (!st && r->scale)
        st = put(ld, "rope.scaling.factor", F32(r->scale));
    if (!st && r->freq_base)
        st = put(ld, "rope.freq_base", F32(r->freq_base));
    if (!st && r->yarn_orig_ctx)
        st = put(ld, "rope.scaling.original_context_length",
                 (mvm_gguf_override){.type = MVM_GGUF_I64, .i = r->yarn_orig_ctx});
    if (!st && r->yarn_beta_fast)
        st = put(ld, "rope.scaling.yarn_beta_fast", F32(r->yarn_beta_fast));
    if (!st && r->yarn_beta_slow)
        st = put(ld, "rope.scaling.yarn_beta_slow", F32(r->yarn_beta_slow));
    if (!st && r->yarn_ext_set)
        st = put(ld, "rope.scaling.yarn_ext_factor", F32(r->yarn_ext_factor));
    return st;
}
