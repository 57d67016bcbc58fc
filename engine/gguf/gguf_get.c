/* The GGUF reader's accessors and typed getters (see gguf.h); parsing is in gguf.c. */
#include <stdio.h>
#include <string.h>

#include "engine/gguf/gguf_impl.h"
#include "vmm/error.h"

typedef unsigned long long ull;

uint32_t mvm_gguf_version(const mvm_gguf *g) { return g->version; }
uint64_t mvm_gguf_n_keys(const mvm_gguf *g) { return g->n_kv; }
uint64_t mvm_gguf_n_tensors(const mvm_gguf *g) { return g->n_tensors; }
uint32_t mvm_gguf_alignment(const mvm_gguf *g) { return g->alignment; }
uint64_t mvm_gguf_data_offset(const mvm_gguf *g) { return g->data_offset; }

int64_t mvm_gguf_find_key(const mvm_gguf *g, const char *key)
{
    return mvm_gguf_ix_probe(g, 0, key, strlen(key), NULL);
}

mvm_gguf_str mvm_gguf_key_name(const mvm_gguf *g, uint64_t i)
{
    return i < g->n_kv ? name_of(g, 0, i) : (mvm_gguf_str){NULL, 0};
}

enum mvm_gguf_type mvm_gguf_key_type(const mvm_gguf *g, uint64_t i)
{
    if (i >= g->n_kv)
        return MVM_GGUF_TYPE_COUNT;
    return g->kvs[i].is_arr ? MVM_GGUF_ARR : (enum mvm_gguf_type)g->kvs[i].type;
}

/* ---- typed getters ---- */

/* "u32", or "arr[u32]" for an array: the type as messages show it. */
static const char *type_str(const kv *e, char buf[16])
{
    if (!e->is_arr)
        return mvm_gguf_type_name(e->type);
    snprintf(buf, 16, "arr[%s]", mvm_gguf_type_name(e->type));
    return buf;
}

/* The key's entry if it exists and holds a scalar of type `want` (`want` ==
 * MVM_GGUF_TYPE_COUNT: any integer type). */
static mvm_status lookup(const mvm_gguf *g, const char *key, uint32_t want, const kv **out)
{
    int64_t i = mvm_gguf_find_key(g, key);
    if (i < 0)
        return mvm_fail(MVM_ERR_INVALID, "missing key '%s'", key);
    const kv *e = &g->kvs[i];
    int integer = e->type <= MVM_GGUF_I32 || e->type == MVM_GGUF_U64 || e->type == MVM_GGUF_I64;
    int ok = !e->is_arr && (want == MVM_GGUF_TYPE_COUNT ? integer : e->type == want);
    if (!ok) {
        char buf[16];
        return mvm_fail(MVM_ERR_INVALID, "key '%s' has type %s, expected %s", key,
                        type_str(e, buf),
                        want == MVM_GGUF_TYPE_COUNT ? "an integer" : mvm_gguf_type_name(want));
    }
    *out = e;
    return MVM_OK;
}

/* An integer key's value, whatever its width, if it lies in [lo, hi]: *raw holds its bits
 * sign-extended to 64, so that the caller's cast gives the value. */
static mvm_status get_int(const mvm_gguf *g, const char *key, const char *want, int64_t lo,
                          uint64_t hi, uint64_t *raw)
{
    const kv *e = NULL;
    mvm_status st = lookup(g, key, MVM_GGUF_TYPE_COUNT, &e);
    if (st != MVM_OK)
        return st;
    uint32_t bits = mvm_gguf_type_size(e->type) * 8;
    int is_signed = e->type == MVM_GGUF_I8 || e->type == MVM_GGUF_I16 ||
                    e->type == MVM_GGUF_I32 || e->type == MVM_GGUF_I64;
    uint64_t v = 0;
    memcpy(&v, e->data, bits / 8); /* the low bytes: the host is little-endian */
    if (is_signed && bits < 64 && (v >> (bits - 1)) & 1)
        v |= ~0ull << bits;
    int neg = is_signed && (v >> 63);
    if (neg ? (int64_t)v < lo : v > hi) {
        char num[24];
        snprintf(num, sizeof num, neg ? "-%llu" : "%llu", neg ? (ull)(0 - v) : (ull)v);
        return mvm_fail(MVM_ERR_RANGE, "key '%s' = %s (%s) does not fit %s", key, num,
                        mvm_gguf_type_name(e->type), want);
    }
    *raw = v;
    return MVM_OK;
}

mvm_status mvm_gguf_get_u32(const mvm_gguf *g, const char *key, uint32_t *out)
{
    uint64_t v = 0;
    mvm_status st = get_int(g, key, "u32", 0, UINT32_MAX, &v);
    if (st == MVM_OK)
        *out = (uint32_t)v;
    return st;
}

mvm_status mvm_gguf_get_i32(const mvm_gguf *g, const char *key, int32_t *out)
{
    uint64_t v = 0;
    mvm_status st = get_int(g, key, "i32", INT32_MIN, INT32_MAX, &v);
    if (st == MVM_OK)
        *out = (int32_t)(int64_t)v;
    return st;
}

mvm_status mvm_gguf_get_u64(const mvm_gguf *g, const char *key, uint64_t *out)
{
    uint64_t v = 0;
    mvm_status st = get_int(g, key, "u64", 0, UINT64_MAX, &v);
    if (st == MVM_OK)
        *out = v;
    return st;
}

mvm_status mvm_gguf_get_f32(const mvm_gguf *g, const char *key, float *out)
{
    const kv *e = NULL;
    mvm_status st = lookup(g, key, MVM_GGUF_F32, &e);
    if (st == MVM_OK)
        memcpy(out, e->data, 4);
    return st;
}

mvm_status mvm_gguf_get_bool(const mvm_gguf *g, const char *key, int *out)
{
    const kv *e = NULL;
    mvm_status st = lookup(g, key, MVM_GGUF_BOOL, &e);
    if (st == MVM_OK)
        *out = e->data[0] != 0; /* as ggml: any nonzero byte is true */
    return st;
}

mvm_status mvm_gguf_get_str(const mvm_gguf *g, const char *key, mvm_gguf_str *out)
{
    const kv *e = NULL;
    mvm_status st = lookup(g, key, MVM_GGUF_STR, &e);
    if (st == MVM_OK)
        *out = str_at(e->data);
    return st;
}

mvm_status mvm_gguf_get_arr(const mvm_gguf *g, const char *key, enum mvm_gguf_type *elem_type,
                            uint64_t *count)
{
    int64_t i = mvm_gguf_find_key(g, key);
    if (i < 0)
        return mvm_fail(MVM_ERR_INVALID, "missing key '%s'", key);
    const kv *e = &g->kvs[i];
    if (!e->is_arr)
        return mvm_fail(MVM_ERR_INVALID, "key '%s' has type %s, expected an array", key,
                        mvm_gguf_type_name(e->type));
    if (elem_type)
        *elem_type = (enum mvm_gguf_type)e->type;
    if (count)
        *count = e->count;
    return MVM_OK;
}

/* The array at key_index, checking the index and that it is (`strings`) or is not a
 * string array. */
static mvm_status array_at(const mvm_gguf *g, uint64_t key_index, int strings, const kv **out)
{
    if (key_index >= g->n_kv)
        return mvm_fail(MVM_ERR_RANGE, "key index %llu out of range (%llu keys)",
                        (ull)key_index, (ull)g->n_kv);
    const kv *e = &g->kvs[key_index];
    if (!e->is_arr || (e->type == MVM_GGUF_STR) != strings) {
        char s[72], buf[16];
        return mvm_fail(MVM_ERR_INVALID, "key '%s' has type %s, expected %s",
                        mvm_gguf_shown(e->key, e->key_len, s), type_str(e, buf),
                        strings ? "arr[str]" : "a numeric array");
    }
    *out = e;
    return MVM_OK;
}

mvm_status mvm_gguf_arr_str(const mvm_gguf *g, uint64_t key_index, uint64_t i,
                            mvm_gguf_str *out)
{
    const kv *e = NULL;
    mvm_status st = array_at(g, key_index, 1, &e);
    if (st != MVM_OK)
        return st;
    if (i >= e->count) {
        char s[72];
        return mvm_fail(MVM_ERR_RANGE, "key '%s': element %llu out of range (%llu elements)",
                        mvm_gguf_shown(e->key, e->key_len, s), (ull)i, (ull)e->count);
    }
    *out = str_at(e->strs[i]);
    return MVM_OK;
}

mvm_status mvm_gguf_arr_data(const mvm_gguf *g, uint64_t key_index,
                             enum mvm_gguf_type *elem_type, const void **data, uint64_t *count)
{
    const kv *e = NULL;
    mvm_status st = array_at(g, key_index, 0, &e);
    if (st != MVM_OK)
        return st;
    *elem_type = (enum mvm_gguf_type)e->type;
    *data = e->count ? e->data : NULL;
    *count = e->count;
    return MVM_OK;
}

mvm_status mvm_gguf_str_copy(mvm_gguf_str s, char *buf, size_t cap)
{
    if (s.len >= cap)
        return mvm_fail(MVM_ERR_RANGE, "a string of %llu bytes does not fit a buffer of %zu",
                        (ull)s.len, cap);
    const char *nul = memchr(s.ptr, 0, s.len);
    if (nul)
        return mvm_fail(MVM_ERR_INVALID, "string contains a NUL byte at position %llu",
                        (ull)(nul - s.ptr));
    memcpy(buf, s.ptr, s.len);
    buf[s.len] = '\0';
    return MVM_OK;
}

const mvm_gguf_tensor *mvm_gguf_tensor_at(const mvm_gguf *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i].pub : NULL;
}

const mvm_gguf_tensor *mvm_gguf_find_tensor(const mvm_gguf *g, const char *name)
{
    int64_t i = mvm_gguf_ix_probe(g, 1, name, strlen(name), NULL);
    return i < 0 ? NULL : &g->tensors[i].pub;
}
