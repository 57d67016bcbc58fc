/*
 * The model loader's internals, shared by its files: model.c (the tensors, the experts, the
 * API), model_load.c (checked access to keys and tensors), model_hparams.c (the
 * hyper-parameters) and model_mla.c (deepseek2's latent attention and dense blocks). Every
 * message starts with the file's path; the first failure is kept in ld->st.
 */
#ifndef MVM_ENGINE_MODEL_MODEL_LOAD_H
#define MVM_ENGINE_MODEL_MODEL_LOAD_H

#include "engine/model/model.h"
#include "vmm/error.h"

/* Loading context: the file name prefixes every message. */
struct loader {
    const char *path;
    mvm_gguf *g;
    const mvm_arch *arch;
    mvm_status st;
    int probe;          /* mvm_model_probe: shapes only, nothing converted or allocated */
};

/* Appends the names of the types in `set` (a bit per type) to buf, `sep`-separated. */
void mvm_ld_append_types(char *buf, size_t size, unsigned set, const char *sep);
mvm_status mvm_ld_fail(struct loader *ld, mvm_status s, const char *fmt, ...) MVM_PRINTF(3, 4);
/* "{arch}.{suffix}" as a u32, f32 or bool; absent keys leave the value alone unless
 * required (u32, f32). */
mvm_status mvm_ld_u32(struct loader *ld, const char *suffix, uint32_t *v, int required);
mvm_status mvm_ld_f32(struct loader *ld, const char *suffix, float *v, int required);
mvm_status mvm_ld_bool(struct loader *ld, const char *suffix, int *v);
/* The tensor called `name`, or NULL (an error when required). */
const mvm_gguf_tensor *mvm_ld_find(struct loader *ld, const char *name, int required);
/* t has n_dims dimensions [ne0, ne1, ne2] (unused ones 1). */
mvm_status mvm_ld_shape(struct loader *ld, const mvm_gguf_tensor *t, uint32_t n_dims,
                        uint64_t ne0, uint64_t ne1, uint64_t ne2);
/* t's type as the kernels know it, in whole blocks. */
mvm_status mvm_ld_type(struct loader *ld, const mvm_gguf_tensor *t, int *wtype);
/* A vector of n floats (F32, as llama.cpp requires of norms and biases), or NULL. */
const float *mvm_ld_vec(struct loader *ld, const char *name, uint32_t n, int required);
/* `rows` vectors of n floats (ggml ne = [n, rows]; F32, as gpt-oss's expert biases), or
 * NULL. */
const float *mvm_ld_table(struct loader *ld, const char *name, uint32_t n, uint32_t rows,
                          int required);
/* A matrix of `rows` rows of `cols` elements (ggml ne = [cols, rows]). */
mvm_status mvm_ld_mat(struct loader *ld, const char *name, uint32_t cols, uint32_t rows,
                      mvm_weight *w);

/* The user's metadata (model_meta.c): the --override-kv specs, before the architecture is
 * read; the RoPE options as the architecture's keys, after. */
mvm_status mvm_ld_meta_kv(struct loader *ld, const mvm_model_meta *meta);
mvm_status mvm_ld_meta_rope(struct loader *ld, const mvm_model_meta *meta);
/* Every hyper-parameter the architecture has (model_hparams.c). */
mvm_status mvm_ld_hparams(struct loader *ld, mvm_hparams *hp);
/* Block blk's norms and attention (model_block.c); deepseek2's latent attention alone
 * (model_mla.c); one of deepseek2's or glm4moe's leading dense blocks (model_block.c). */
mvm_status mvm_ld_bind_block(struct loader *ld, const mvm_hparams *hp, uint32_t blk,
                             mvm_layer *L);
mvm_status mvm_ld_bind_mla(struct loader *ld, const mvm_hparams *hp, uint32_t blk,
                           mvm_layer *L);
mvm_status mvm_ld_bind_dense(struct loader *ld, const mvm_hparams *hp, uint32_t blk,
                             mvm_layer *L);

#endif
