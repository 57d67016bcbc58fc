/* Checked access to a model file's keys and tensors for the loader (model_load.h). */
#include "engine/model/model_load.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Appends the names of the types in `set` (a bit per type) to buf, `sep`-separated. */
void mvm_ld_append_types(char *buf, size_t size, unsigned set, const char *sep)
{
    for (int t = 0, k = 0; t < MVM_W_COUNT; t++) {
        size_t n = strlen(buf);
        if (set & (1u << t))
            snprintf(buf + n, size - n, "%s%s", k++ ? sep : "",
                     mvm_k_wtype_name((enum mvm_wtype)t));
    }
}

mvm_status mvm_ld_fail(struct loader *ld, mvm_status s, const char *fmt, ...)
{
    char msg[512]; /* formatted apart: an argument may be mvm_last_error(), the buffer the
                      message goes to */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ld->st = mvm_fail(s, "%s: %s", ld->path, msg);
}

/* "{arch}.{suffix}" as a u32 (u32 != NULL) or an f32; absent keys leave the value alone
 * unless required. */
static mvm_status arch_key(struct loader *ld, const char *suffix, uint32_t *u32, float *f32,
                           int required)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch->name, suffix);
    if (mvm_gguf_find_key(ld->g, key) < 0)
        return required ? mvm_ld_fail(ld, MVM_ERR_INVALID, "missing key '%s'", key) : MVM_OK;
    if ((u32 ? mvm_gguf_get_u32(ld->g, key, u32) : mvm_gguf_get_f32(ld->g, key, f32)) != MVM_OK)
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "%s", mvm_last_error());
    return MVM_OK;
}

mvm_status mvm_ld_u32(struct loader *ld, const char *suffix, uint32_t *v, int required)
{
    return arch_key(ld, suffix, v, NULL, required);
}

mvm_status mvm_ld_f32(struct loader *ld, const char *suffix, float *v, int required)
{
    return arch_key(ld, suffix, NULL, v, required);
}

mvm_status mvm_ld_bool(struct loader *ld, const char *suffix, int *v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch->name, suffix);
    if (mvm_gguf_find_key(ld->g, key) >= 0 && mvm_gguf_get_bool(ld->g, key, v) != MVM_OK)
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "%s", mvm_last_error());
    return MVM_OK;
}

const mvm_gguf_tensor *mvm_ld_find(struct loader *ld, const char *name, int required)
{
    const mvm_gguf_tensor *t = mvm_gguf_find_tensor(ld->g, name);
    if (!t && required)
        mvm_ld_fail(ld, MVM_ERR_INVALID, "missing tensor '%s'", name);
    return t;
}

mvm_status mvm_ld_shape(struct loader *ld, const mvm_gguf_tensor *t, uint32_t n_dims,
                        uint64_t ne0, uint64_t ne1, uint64_t ne2)
{
    uint64_t want[3] = {ne0, ne1, ne2};
    int ok = t->n_dims == n_dims;
    for (uint32_t i = 0; i < 3; i++)
        ok = ok && t->ne[i] == (i < n_dims ? want[i] : 1);
    if (ok)
        return MVM_OK;
    char have[96], exp[96];
    int h = snprintf(have, sizeof have, "[%llu", (unsigned long long)t->ne[0]);
    for (uint32_t i = 1; i < t->n_dims; i++)
        h += snprintf(have + h, sizeof have - (size_t)h, ", %llu", (unsigned long long)t->ne[i]);
    snprintf(have + h, sizeof have - (size_t)h, "]");
    if (n_dims == 1)
        snprintf(exp, sizeof exp, "[%llu]", (unsigned long long)ne0);
    else if (n_dims == 2)
        snprintf(exp, sizeof exp, "[%llu, %llu]", (unsigned long long)ne0, (unsigned long long)ne1);
    else
        snprintf(exp, sizeof exp, "[%llu, %llu, %llu]", (unsigned long long)ne0,
                 (unsigned long long)ne1, (unsigned long long)ne2);
    return mvm_ld_fail(ld, MVM_ERR_INVALID, "tensor '%s' has shape %s, expected %s", t->name,
                       have, exp);
}

/* The tensor's type as the kernels (both backends) know it. */
mvm_status mvm_ld_type(struct loader *ld, const mvm_gguf_tensor *t, int *wtype)
{
    *wtype = mvm_wtype_from_ggml(t->type);
    if (*wtype < 0) {
        char supported[160] = "";
        mvm_ld_append_types(supported, sizeof supported, (1u << MVM_W_COUNT) - 1, ", ");
        return mvm_ld_fail(ld, MVM_ERR_UNSUPPORTED, "tensor '%s' has type %s, which moevm cannot "
                           "compute yet (supported: %s)", t->name, mvm_ggml_type_name(t->type),
                           supported);
    }
    if (t->ne[0] % mvm_k_block_elems((enum mvm_wtype)*wtype))
        return mvm_ld_fail(ld, MVM_ERR_INVALID, "tensor '%s': rows of %llu elements are not "
                           "whole blocks", t->name, (unsigned long long)t->ne[0]);
    return MVM_OK;
}

/* A vector of n floats; norms and biases must be F32 (as llama.cpp requires too). */
const float *mvm_ld_vec(struct loader *ld, const char *name, uint32_t n, int required)
{
    return mvm_ld_table(ld, name, n, 1, required);
}

const float *mvm_ld_table(struct loader *ld, const char *name, uint32_t n, uint32_t rows,
                          int required)
{
    const mvm_gguf_tensor *t = mvm_ld_find(ld, name, required);
    if (!t || mvm_ld_shape(ld, t, rows > 1 ? 2 : 1, n, rows, 1) != MVM_OK)
        return NULL;
    if (t->type != MVM_GGML_F32) {
        mvm_ld_fail(ld, MVM_ERR_UNSUPPORTED, "tensor '%s' has type %s; norms and biases must be "
                    "f32", name, mvm_ggml_type_name(t->type));
        return NULL;
    }
    return t->data;
}

/* A matrix of `rows` rows of `cols` elements (ggml ne = [cols, rows]). */
mvm_status mvm_ld_mat(struct loader *ld, const char *name, uint32_t cols, uint32_t rows,
                      mvm_weight *w)
{
    const mvm_gguf_tensor *t = mvm_ld_find(ld, name, 1);
    int wt;
    if (!t || mvm_ld_shape(ld, t, 2, cols, rows, 1) || mvm_ld_type(ld, t, &wt))
        return ld->st;
    *w = (mvm_weight){.type = (enum mvm_wtype)wt, .data = t->data, .rows = rows, .cols = cols,
                      .row_bytes = mvm_k_row_bytes((enum mvm_wtype)wt, cols)};
    return MVM_OK;
}
