/* The GGUF v3 writer (see gguf_write.h). */
#include "engine/gguf/gguf_write.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "vmm/error.h"
#include "vmm/file_replace.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "GGUF values are little-endian and are written from memory: this needs a little-endian host"
#endif

typedef struct wkv {
    char *key;
    uint32_t type; /* the value's type; for arrays, the element type */
    int is_arr;
    uint64_t n;    /* elements; 1 for a scalar */
    void *data;    /* numeric values, n * size bytes */
    char **strs;   /* strings: n NUL-terminated copies */
} wkv;

typedef struct wtensor {
    char *name;
    enum mvm_ggml_type type;
    uint32_t n_dims;
    uint64_t ne[4];
    uint64_t nbytes;
    const void *data; /* the caller's, or NULL for the data function */
} wtensor;

struct mvm_gguf_writer {
    wkv *kvs;
    uint64_t n_kv, cap_kv;
    wtensor *ts;
    uint64_t n_ts, cap_ts;
    mvm_gguf_write_data_fn data_fn;
    void *data_ctx;
};

typedef unsigned long long ull;

mvm_status mvm_gguf_writer_new(mvm_gguf_writer **out)
{
    if (!out)
        return mvm_fail(MVM_ERR_INVALID, "mvm_gguf_writer_new: NULL out");
    if (!(*out = calloc(1, sizeof **out)))
        return mvm_fail(MVM_ERR_NOMEM, "cannot allocate a GGUF writer");
    return MVM_OK;
}

static void kv_free(wkv *e)
{
    for (uint64_t i = 0; e->strs && i < e->n; i++)
        free(e->strs[i]);
    free(e->strs);
    free(e->data);
    free(e->key);
}

void mvm_gguf_writer_free(mvm_gguf_writer *w)
{
    if (!w)
        return;
    for (uint64_t i = 0; i < w->n_kv; i++)
        kv_free(&w->kvs[i]);
    for (uint64_t i = 0; i < w->n_ts; i++)
        free(w->ts[i].name);
    free(w->kvs);
    free(w->ts);
    free(w);
}

/* The array `arr` with room for entry n (doubling), or NULL with `arr` intact. */
static void *room_for(void *arr, uint64_t n, uint64_t *cap, size_t size)
{
    if (n < *cap)
        return arr;
    uint64_t c = *cap ? *cap * 2 : 16;
    void *a = c > SIZE_MAX / size ? NULL : realloc(arr, c * size);
    if (a)
        *cap = c;
    return a;
}

static mvm_status check_alignment(const wkv *e)
{
    if (e->is_arr || e->type != MVM_GGUF_U32)
        return mvm_fail(MVM_ERR_INVALID, "key 'general.alignment' must be a u32, not %s%s",
                        e->is_arr ? "an array of " : "", mvm_gguf_type_name(e->type));
    uint32_t a;
    memcpy(&a, e->data, 4);
    if (a == 0 || (a & (a - 1)) || a > MVM_GGUF_MAX_ALIGNMENT)
        return mvm_fail(MVM_ERR_INVALID,
                        "key 'general.alignment': %u is not a power of two up to %u", a,
                        MVM_GGUF_MAX_ALIGNMENT);
    return MVM_OK;
}

/* Sets `key` to the value in `e` (whose key field is filled in here), taking ownership of
 * e's allocations, which it frees on failure. */
static mvm_status put(mvm_gguf_writer *w, const char *key, wkv *e)
{
    mvm_status st = MVM_OK;
    if (!w || !key || !*key)
        st = mvm_fail(MVM_ERR_INVALID, "gguf writer: %s", !w ? "NULL writer" : "empty key");
    else if (e->n > MVM_GGUF_MAX_ARRAY)
        st = mvm_fail(MVM_ERR_INVALID, "key '%s': %llu elements, over the limit of %llu", key,
                      (ull)e->n, (ull)MVM_GGUF_MAX_ARRAY);
    else if (strcmp(key, "general.alignment") == 0)
        st = check_alignment(e);
    if (st == MVM_OK && !(e->key = strdup(key)))
        st = mvm_fail(MVM_ERR_NOMEM, "key '%s': out of memory", key);
    uint64_t i = 0;
    while (st == MVM_OK && i < w->n_kv && strcmp(w->kvs[i].key, key) != 0)
        i++;
    wkv *kvs = st == MVM_OK ? room_for(w->kvs, i, &w->cap_kv, sizeof *w->kvs) : NULL;
    if (st == MVM_OK && !kvs)
        st = mvm_fail(MVM_ERR_NOMEM, "key '%s': out of memory", key);
    if (st != MVM_OK) {
        kv_free(e);
        return st;
    }
    w->kvs = kvs;
    if (i < w->n_kv)
        kv_free(&w->kvs[i]);
    else
        w->n_kv++;
    w->kvs[i] = *e;
    return MVM_OK;
}

static mvm_status set_numeric(mvm_gguf_writer *w, const char *key, enum mvm_gguf_type type,
                              int is_arr, const void *values, uint64_t n)
{
    const char *k = key ? key : "";
    uint32_t size = mvm_gguf_type_size(type);
    if (!size)
        return mvm_fail(MVM_ERR_INVALID, "key '%s': %s is not a numeric type", k,
                        mvm_gguf_type_name(type));
    if (n && !values)
        return mvm_fail(MVM_ERR_INVALID, "key '%s': NULL value", k);
    wkv e = {.type = type, .is_arr = is_arr, .n = n};
    if (n > MVM_GGUF_MAX_ARRAY)
        return put(w, key, &e); /* reports the limit */
    if (n && !(e.data = malloc(n * size)))
        return mvm_fail(MVM_ERR_NOMEM, "key '%s': out of memory", k);
    if (n)
        memcpy(e.data, values, n * size);
    return put(w, key, &e);
}

mvm_status mvm_gguf_writer_set_arr(mvm_gguf_writer *w, const char *key,
                                   enum mvm_gguf_type elem_type, const void *values, uint64_t n)
{
    return set_numeric(w, key, elem_type, 1, values, n);
}

mvm_status mvm_gguf_writer_set_val(mvm_gguf_writer *w, const char *key, enum mvm_gguf_type type,
                                   const void *value)
{
    return set_numeric(w, key, type, 0, value, 1);
}

mvm_status mvm_gguf_writer_set_u32(mvm_gguf_writer *w, const char *key, uint32_t v)
{
    return mvm_gguf_writer_set_val(w, key, MVM_GGUF_U32, &v);
}

mvm_status mvm_gguf_writer_set_i32(mvm_gguf_writer *w, const char *key, int32_t v)
{
    return mvm_gguf_writer_set_val(w, key, MVM_GGUF_I32, &v);
}

mvm_status mvm_gguf_writer_set_u64(mvm_gguf_writer *w, const char *key, uint64_t v)
{
    return mvm_gguf_writer_set_val(w, key, MVM_GGUF_U64, &v);
}

mvm_status mvm_gguf_writer_set_f32(mvm_gguf_writer *w, const char *key, float v)
{
    return mvm_gguf_writer_set_val(w, key, MVM_GGUF_F32, &v);
}

mvm_status mvm_gguf_writer_set_bool(mvm_gguf_writer *w, const char *key, int v)
{
    uint8_t b = v != 0;
    return mvm_gguf_writer_set_val(w, key, MVM_GGUF_BOOL, &b);
}

mvm_status mvm_gguf_writer_set_arr_f32(mvm_gguf_writer *w, const char *key,
                                       const float *values, uint64_t n)
{
    return mvm_gguf_writer_set_arr(w, key, MVM_GGUF_F32, values, n);
}

mvm_status mvm_gguf_writer_set_arr_i32(mvm_gguf_writer *w, const char *key,
                                       const int32_t *values, uint64_t n)
{
    return mvm_gguf_writer_set_arr(w, key, MVM_GGUF_I32, values, n);
}

static mvm_status set_strs(mvm_gguf_writer *w, const char *key, int is_arr,
                           const char *const *strs, uint64_t n)
{
    wkv e = {.type = MVM_GGUF_STR, .is_arr = is_arr, .n = n};
    const char *k = key ? key : "";
    if (n > MVM_GGUF_MAX_ARRAY || !n)
        return put(w, key, &e); /* the limit, or an empty array: nothing to copy */
    if (!strs)
        return mvm_fail(MVM_ERR_INVALID, "key '%s': NULL strings", k);
    if (!(e.strs = calloc(n, sizeof *e.strs)))
        return mvm_fail(MVM_ERR_NOMEM, "key '%s': out of memory", k);
    for (uint64_t i = 0; i < n; i++) {
        mvm_status st = MVM_OK;
        if (!strs[i])
            st = mvm_fail(MVM_ERR_INVALID, "key '%s': string %llu is NULL", k, (ull)i);
        else if (strlen(strs[i]) > MVM_GGUF_MAX_STRING)
            st = mvm_fail(MVM_ERR_INVALID, "key '%s': string %llu is over the limit of %llu bytes",
                          k, (ull)i, (ull)MVM_GGUF_MAX_STRING);
        else if (!(e.strs[i] = strdup(strs[i])))
            st = mvm_fail(MVM_ERR_NOMEM, "key '%s': out of memory", k);
        if (st != MVM_OK) {
            kv_free(&e);
            return st;
        }
    }
    return put(w, key, &e);
}

mvm_status mvm_gguf_writer_set_str(mvm_gguf_writer *w, const char *key, const char *v)
{
    return set_strs(w, key, 0, &v, 1);
}

mvm_status mvm_gguf_writer_set_arr_str(mvm_gguf_writer *w, const char *key,
                                       const char *const *strs, uint64_t n)
{
    return set_strs(w, key, 1, strs, n);
}

void mvm_gguf_writer_set_data_fn(mvm_gguf_writer *w, mvm_gguf_write_data_fn fn, void *ctx)
{
    w->data_fn = fn;
    w->data_ctx = ctx;
}

mvm_status mvm_gguf_writer_add_tensor(mvm_gguf_writer *w, const char *name,
                                      enum mvm_ggml_type type, uint32_t n_dims,
                                      const uint64_t *ne, const void *data, uint64_t nbytes)
{
    if (!w || !name)
        return mvm_fail(MVM_ERR_INVALID, "gguf writer: NULL %s", w ? "tensor name" : "writer");
    size_t len = strlen(name);
    if (len >= MVM_GGUF_MAX_NAME)
        return mvm_fail(MVM_ERR_INVALID, "tensor '%s': name is %zu bytes, over ggml's limit of %d",
                        name, len, MVM_GGUF_MAX_NAME - 1);
    for (uint64_t i = 0; i < w->n_ts; i++)
        if (strcmp(w->ts[i].name, name) == 0)
            return mvm_fail(MVM_ERR_INVALID, "tensor '%s' added twice", name);
    if (n_dims == 0 || n_dims > 4 || !ne)
        return mvm_fail(MVM_ERR_INVALID, "tensor '%s': %u dimensions (must be 1 to 4)", name,
                        ne ? n_dims : 0);
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .nbytes = nbytes,
                 .data = data};
    uint64_t elems = 1;
    for (uint32_t j = 0; j < n_dims; j++) {
        if (ne[j] == 0 || ne[j] > INT64_MAX || elems > INT64_MAX / ne[j])
            return mvm_fail(MVM_ERR_INVALID,
                            "tensor '%s': dimension %u (%llu) is 0 or makes over 2^63 elements",
                            name, j, (ull)ne[j]);
        t.ne[j] = ne[j];
        elems *= ne[j];
    }
    const mvm_ggml_type_info *ti = mvm_ggml_type_get(type);
    if (!ti)
        return mvm_fail(MVM_ERR_INVALID, "tensor '%s': unknown ggml type %u", name,
                        (unsigned)type);
    if (ne[0] % ti->block)
        return mvm_fail(MVM_ERR_INVALID,
                        "tensor '%s': dimension 0 (%llu) is not a multiple of the %s block size %u",
                        name, (ull)ne[0], ti->name, ti->block);
    uint64_t want;
    if (mvm_ggml_row_bytes(type, elems, &want) != MVM_OK)
        return mvm_fail_prefix(MVM_ERR_INVALID, "tensor '%s'", name);
    if (nbytes != want)
        return mvm_fail(MVM_ERR_INVALID,
                        "tensor '%s': %llu bytes given, but %llu elements of %s take %llu",
                        name, (ull)nbytes, (ull)elems, ti->name, (ull)want);
    wtensor *ts = room_for(w->ts, w->n_ts, &w->cap_ts, sizeof *w->ts);
    if (!ts || !(t.name = strdup(name)))
        return mvm_fail(MVM_ERR_NOMEM, "tensor '%s': out of memory", name);
    w->ts = ts;
    w->ts[w->n_ts++] = t;
    return MVM_OK;
}

/* ---- writing ---- */

typedef struct out {
    FILE *f;
    const char *path; /* the .tmp file, for messages */
    uint64_t pos;
    mvm_status st;
} out;

static void emit(out *o, const void *p, size_t n)
{
    if (o->st != MVM_OK || n == 0)
        return;
    if (fwrite(p, 1, n, o->f) != n)
        o->st = mvm_fail(MVM_ERR_BACKEND, "fwrite to %s failed: %s", o->path, strerror(errno));
    o->pos += n;
}

static void emit_u32(out *o, uint32_t v) { emit(o, &v, 4); }
static void emit_u64(out *o, uint64_t v) { emit(o, &v, 8); }

static void emit_str(out *o, const char *s)
{
    size_t n = strlen(s);
    emit_u64(o, n);
    emit(o, s, n);
}

static void pad_to(out *o, uint64_t alignment)
{
    static const uint8_t zeros[256];
    uint64_t pad = (alignment - o->pos % alignment) % alignment;
    while (pad) {
        size_t k = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        emit(o, zeros, k);
        pad -= k;
    }
}

static uint32_t alignment_of(const mvm_gguf_writer *w)
{
    uint32_t a = MVM_GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kvs[i].key, "general.alignment") == 0)
            memcpy(&a, w->kvs[i].data, 4); /* a u32 power of two: checked when set */
    return a;
}

static void emit_metadata(out *o, const mvm_gguf_writer *w, uint64_t alignment)
{
    emit(o, "GGUF", 4);
    emit_u32(o, 3);
    emit_u64(o, w->n_ts);
    emit_u64(o, w->n_kv);
    for (uint64_t i = 0; i < w->n_kv; i++) {
        const wkv *e = &w->kvs[i];
        emit_str(o, e->key);
        if (e->is_arr) {
            emit_u32(o, MVM_GGUF_ARR);
            emit_u32(o, e->type);
            emit_u64(o, e->n);
        } else {
            emit_u32(o, e->type);
        }
        if (e->type == MVM_GGUF_STR)
            for (uint64_t j = 0; j < e->n; j++)
                emit_str(o, e->strs[j]);
        else
            emit(o, e->data, e->n * mvm_gguf_type_size(e->type));
    }
    uint64_t offset = 0;
    for (uint64_t i = 0; i < w->n_ts; i++) {
        const wtensor *t = &w->ts[i];
        emit_str(o, t->name);
        emit_u32(o, t->n_dims);
        for (uint32_t j = 0; j < t->n_dims; j++)
            emit_u64(o, t->ne[j]);
        emit_u32(o, (uint32_t)t->type);
        emit_u64(o, offset);
        offset += (t->nbytes + alignment - 1) / alignment * alignment;
    }
    pad_to(o, alignment);
}

static void emit_data(out *o, const mvm_gguf_writer *w, uint64_t alignment)
{
    for (uint64_t i = 0; i < w->n_ts && o->st == MVM_OK; i++) {
        const wtensor *t = &w->ts[i];
        if (t->data) {
            emit(o, t->data, t->nbytes);
        } else {
            off_t before = ftello(o->f);
            o->st = w->data_fn(w->data_ctx, i, o->f);
            off_t after = ftello(o->f);
            if (o->st == MVM_OK && (before < 0 || after - before != (off_t)t->nbytes))
                o->st = mvm_fail(MVM_ERR_INVALID,
                                 "tensor '%s': the data function wrote %lld bytes, not %llu",
                                 t->name, (long long)(after - before), (ull)t->nbytes);
            o->pos += t->nbytes;
        }
        pad_to(o, alignment);
    }
}

/* Checks what add_tensor could not: every tensor has its data, and the data section's
 * size fits 64 bits. */
static mvm_status check_complete(const mvm_gguf_writer *w, uint64_t alignment)
{
    uint64_t total = 0;
    for (uint64_t i = 0; i < w->n_ts; i++) {
        const wtensor *t = &w->ts[i];
        if (!t->data && !w->data_fn)
            return mvm_fail(MVM_ERR_INVALID, "tensor '%s' has no data and no data function is set",
                            t->name);
        uint64_t padded = (t->nbytes / alignment + (t->nbytes % alignment != 0)) * alignment;
        if (__builtin_add_overflow(total, padded, &total))
            return mvm_fail(MVM_ERR_INVALID, "tensor '%s': the data section passes 2^64 bytes",
                            t->name);
    }
    return MVM_OK;
}

mvm_status mvm_gguf_writer_write(mvm_gguf_writer *w, const char *path)
{
    if (!w || !path)
        return mvm_fail(MVM_ERR_INVALID, "mvm_gguf_writer_write: NULL %s", w ? "path" : "writer");
    uint64_t alignment = alignment_of(w);
    mvm_status st = check_complete(w, alignment);
    if (st != MVM_OK)
        return st;
    mvm_file_replace file;
    if ((st = mvm_file_replace_open(&file, path, "wb")) != MVM_OK)
        return st;
    out o = {.f = file.f, .path = file.tmp};
    emit_metadata(&o, w, alignment);
    emit_data(&o, w, alignment);
    return mvm_file_replace_commit(&file, o.st);
}
