/*
 * A GGUF model copied with one change (a key dropped or set, a tensor dropped, re-typed or
 * re-shaped), through the reader and the writer: the mutants of tests/test_engine.c's load
 * errors and of the loader's fuzz corpus (tests/fuzz/load_corpus.c). Include check.h first.
 */
#ifndef MVM_TESTS_GGUF_MUTANT_H
#define MVM_TESTS_GGUF_MUTANT_H

#include <stdlib.h>
#include <string.h>

#include "engine/gguf/ggml_types.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_write.h"

/* Copies the model at src to dst with one change: a key dropped or set to a u32, a
 * tensor dropped, re-typed or re-shaped (its data are then zeros of the new size). */
struct mutation {
    const char *key;          /* key to change */
    int drop_key;
    uint32_t key_u32;
    const char *key_str;      /* the new value is this string, */
    float key_f32;            /* or this f32 when nonzero, else key_u32 */
    const char *tensor;       /* tensor to change */
    int drop_tensor;
    enum mvm_ggml_type type;  /* new type when retype */
    int retype;
    uint64_t ne0;             /* new first dimension when nonzero */
    const char *pad;          /* an extra string key "test.pad" of this value */
};

static void copy_key(const mvm_gguf *g, uint64_t i, mvm_gguf_writer *w)
{
    char name[256];
    mvm_gguf_str_copy(mvm_gguf_key_name(g, i), name, sizeof name);
    enum mvm_gguf_type t = mvm_gguf_key_type(g, i);
    if (t == MVM_GGUF_STR) {
        mvm_gguf_str s;
        mvm_gguf_get_str(g, name, &s);
        char *v = strndup(s.ptr, s.len);
        mvm_gguf_writer_set_str(w, name, v);
        free(v);
    } else if (t == MVM_GGUF_ARR) {
        enum mvm_gguf_type et;
        uint64_t n;
        mvm_gguf_get_arr(g, name, &et, &n);
        if (et == MVM_GGUF_STR) {
            char **v = calloc(n, sizeof *v);
            for (uint64_t k = 0; k < n; k++) {
                mvm_gguf_str s;
                mvm_gguf_arr_str(g, i, k, &s);
                v[k] = strndup(s.ptr, s.len);
            }
            mvm_gguf_writer_set_arr_str(w, name, (const char *const *)v, n);
            for (uint64_t k = 0; k < n; k++)
                free(v[k]);
            free(v);
        } else {
            const void *data;
            mvm_gguf_arr_data(g, i, &et, &data, &n);
            mvm_gguf_writer_set_arr(w, name, et, data, n);
        }
    } else {
        /* Scalars: read the raw value through the one-element array view is not available,
         * so go by type. */
        union { uint32_t u32; int32_t i32; uint64_t u64; float f32; int b; } v;
        if (t == MVM_GGUF_F32 && mvm_gguf_get_f32(g, name, &v.f32) == MVM_OK)
            mvm_gguf_writer_set_f32(w, name, v.f32);
        else if (t == MVM_GGUF_BOOL && mvm_gguf_get_bool(g, name, &v.b) == MVM_OK)
            mvm_gguf_writer_set_bool(w, name, v.b);
        else if (t == MVM_GGUF_I32 && mvm_gguf_get_i32(g, name, &v.i32) == MVM_OK)
            mvm_gguf_writer_set_i32(w, name, v.i32);
        else if (mvm_gguf_get_u64(g, name, &v.u64) == MVM_OK)
            mvm_gguf_writer_set_u32(w, name, (uint32_t)v.u64);
    }
}

static void set_key(mvm_gguf_writer *w, const char *name, const struct mutation *mu)
{
    if (mu->key_str)
        mvm_gguf_writer_set_str(w, name, mu->key_str);
    else if (mu->key_f32 != 0)
        mvm_gguf_writer_set_f32(w, name, mu->key_f32);
    else
        mvm_gguf_writer_set_u32(w, name, mu->key_u32);
}

static void write_mutant(const char *src, const char *dst, const struct mutation *mu)
{
    mvm_gguf *g;
    CHECK_ST(mvm_gguf_open(src, &g), MVM_OK);
    mvm_gguf_writer *w;
    mvm_gguf_writer_new(&w);
    for (uint64_t i = 0; i < mvm_gguf_n_keys(g); i++) {
        char name[256];
        mvm_gguf_str_copy(mvm_gguf_key_name(g, i), name, sizeof name);
        if (mu->key && strcmp(name, mu->key) == 0) {
            if (!mu->drop_key)
                set_key(w, name, mu);
            continue;
        }
        copy_key(g, i, w);
    }
    if (mu->key && !mu->drop_key && mvm_gguf_find_key(g, mu->key) < 0)
        set_key(w, mu->key, mu);
    if (mu->pad)
        mvm_gguf_writer_set_str(w, "test.pad", mu->pad);
    void *zeros[4] = {0};
    int nz = 0;
    for (uint64_t i = 0; i < mvm_gguf_n_tensors(g); i++) {
        const mvm_gguf_tensor *t = mvm_gguf_tensor_at(g, i);
        if (mu->tensor && strcmp(t->name, mu->tensor) == 0) {
            if (mu->drop_tensor)
                continue;
            uint64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}, bytes;
            enum mvm_ggml_type type = mu->retype ? mu->type : t->type;
            if (mu->ne0)
                ne[0] = mu->ne0;
            uint64_t n = ne[0] * ne[1] * ne[2] * ne[3];
            CHECK_ST(mvm_ggml_row_bytes(type, n, &bytes), MVM_OK);
            zeros[nz] = calloc(1, bytes);
            CHECK_ST(mvm_gguf_writer_add_tensor(w, t->name, type, t->n_dims, ne, zeros[nz++], bytes),
                     MVM_OK);
            continue;
        }
        CHECK_ST(mvm_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                            t->nbytes), MVM_OK);
    }
    CHECK_ST(mvm_gguf_writer_write(w, dst), MVM_OK);
    mvm_gguf_writer_free(w);
    for (int i = 0; i < nz; i++)
        free(zeros[i]);
    mvm_gguf_close(g);
}

#endif
