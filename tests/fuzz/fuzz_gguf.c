/*
 * libFuzzer target for the GGUF reader: parse the input and, when it parses, use every
 * accessor on every key and tensor, touching every byte they point to, so that ASan sees
 * any pointer the reader hands out past the input. What the reader promises once a file
 * opened (see gguf.h) is checked too, and a broken promise traps.
 *
 * The interposer's own scan of the same bytes (interpose/gguf_scan.c, which reads a
 * program's model file with plain stdio) runs on every input too: it must never fail
 * memory-wise, and on a file the reader accepts it must accept it and list exactly the
 * fused expert tensors the reader has, at the same offsets, with the same experts and the
 * top-k of the last `*.expert_used_count` u32 key it keeps (a name under 64 bytes).
 */
#define _GNU_SOURCE /* fmemopen */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf.h"
#include "interpose/gguf_scan.h"

static const uint8_t *lo, *hi; /* the input */
static volatile uint8_t sink;  /* keeps the touching reads */

static void require(int cond)
{
    if (!cond)
        __builtin_trap();
}

static void touch(const void *p, uint64_t n)
{
    const uint8_t *b = p;
    require(n == 0 || (b >= lo && b <= hi && n <= (uint64_t)(hi - b)));
    uint8_t x = 0;
    for (uint64_t i = 0; i < n; i++)
        x ^= b[i];
    sink = x;
}

/* Every getter on a key, by name; the one for its own type must succeed. */
static void walk_getters(const mvm_gguf *g, const char *key, enum mvm_gguf_type t)
{
    uint32_t u32;
    int32_t i32;
    uint64_t u64, n;
    float f;
    int b;
    mvm_gguf_str s;
    enum mvm_gguf_type et;
    int fits_u32 = mvm_gguf_get_u32(g, key, &u32) == MVM_OK;
    mvm_gguf_get_i32(g, key, &i32);
    int fits_u64 = mvm_gguf_get_u64(g, key, &u64) == MVM_OK;
    require(!fits_u32 || (fits_u64 && u64 == u32));
    require((mvm_gguf_get_f32(g, key, &f) == MVM_OK) == (t == MVM_GGUF_F32));
    require((mvm_gguf_get_bool(g, key, &b) == MVM_OK) == (t == MVM_GGUF_BOOL));
    require((mvm_gguf_get_arr(g, key, &et, &n) == MVM_OK) == (t == MVM_GGUF_ARR));
    require((mvm_gguf_get_str(g, key, &s) == MVM_OK) == (t == MVM_GGUF_STR));
    if (t == MVM_GGUF_STR) {
        touch(s.ptr, s.len);
        char buf[32];
        mvm_gguf_str_copy(s, buf, sizeof buf);
    }
}

static void walk_array(const mvm_gguf *g, uint64_t k)
{
    enum mvm_gguf_type et;
    const void *data;
    uint64_t n;
    if (mvm_gguf_arr_data(g, k, &et, &data, &n) == MVM_OK) {
        require(et != MVM_GGUF_STR && et != MVM_GGUF_ARR);
        touch(data, n * mvm_gguf_type_size(et));
        return;
    }
    mvm_gguf_str s;
    for (uint64_t i = 0; mvm_gguf_arr_str(g, k, i, &s) == MVM_OK; i++)
        touch(s.ptr, s.len);
}

/* The top-k the scan must report: the last key ending ".expert_used_count", named in under
 * 64 bytes, whose value is a u32 (0: none). */
static uint32_t used_count(const mvm_gguf *g)
{
    static const char suffix[] = ".expert_used_count";
    uint32_t used = 0;
    for (uint64_t k = 0; k < mvm_gguf_n_keys(g); k++) {
        mvm_gguf_str name = mvm_gguf_key_name(g, k);
        size_t n = sizeof suffix - 1;
        uint32_t v;
        char key[64];
        if (name.len < 64 && name.len >= n && memcmp(name.ptr + name.len - n, suffix, n) == 0 &&
            mvm_gguf_key_type(g, k) == MVM_GGUF_U32 &&
            mvm_gguf_str_copy(name, key, sizeof key) == MVM_OK &&
            mvm_gguf_get_u32(g, key, &v) == MVM_OK)
            used = v;
    }
    return used;
}

/* The scan of the input; against the reader's view when g (the reader accepted it). */
static void check_scan(const uint8_t *data, size_t size, const mvm_gguf *g)
{
    FILE *f = size ? fmemopen((void *)data, size, "rb") : NULL;
    if (!f)
        return;
    mvm_gguf_fused *fused = NULL;
    uint32_t n = 0;
    char err[160];
    int rc = mvm_gguf_scan_fused_stream(f, size, &fused, &n, err, sizeof err);
    fclose(f);
    require(rc == 0 || (n == 0 && !fused && err[0]));
    if (g) {
        require(rc == 0);
        uint32_t want = 0, used = used_count(g);
        for (uint64_t i = 0; i < mvm_gguf_n_tensors(g); i++) {
            const mvm_gguf_tensor *t = mvm_gguf_tensor_at(g, i);
            if (t->n_dims != 3 || !strstr(t->name, "_exps") || t->ne[2] < 2)
                continue;
            uint64_t at = mvm_gguf_data_offset(g) + t->offset;
            uint32_t k = 0;
            while (k < n && fused[k].offset != at)
                k++;
            require(k < n && fused[k].experts == t->ne[2] && fused[k].used == used &&
                    fused[k].room >= t->nbytes && at + fused[k].room <= size);
            want++;
        }
        require(n == want);
    }
    free(fused);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mvm_gguf *g;
    if (mvm_gguf_from_memory(data, size, &g) != MVM_OK) {
        check_scan(data, size, NULL);
        return 0;
    }
    check_scan(data, size, g);
    lo = data;
    hi = data + size;
    uint32_t a = mvm_gguf_alignment(g);
    require(a && (a & (a - 1)) == 0 && mvm_gguf_data_offset(g) <= size);
    for (uint64_t k = 0; k < mvm_gguf_n_keys(g); k++) {
        mvm_gguf_str name = mvm_gguf_key_name(g, k);
        touch(name.ptr, name.len);
        enum mvm_gguf_type t = mvm_gguf_key_type(g, k);
        require(t < MVM_GGUF_TYPE_COUNT);
        char *key = malloc(name.len + 1);
        if (key && mvm_gguf_str_copy(name, key, name.len + 1) == MVM_OK) {
            require(mvm_gguf_find_key(g, key) == (int64_t)k); /* keys are unique */
            walk_getters(g, key, t);
        }
        free(key);
        if (t == MVM_GGUF_ARR)
            walk_array(g, k);
    }
    for (uint64_t i = 0; i < mvm_gguf_n_tensors(g); i++) {
        const mvm_gguf_tensor *t = mvm_gguf_tensor_at(g, i);
        require(t && mvm_gguf_find_tensor(g, t->name) == t);
        require(strlen(t->name) < MVM_GGUF_MAX_NAME && t->n_dims >= 1 && t->n_dims <= 4);
        require(t->offset % a == 0 && (uintptr_t)t->data - (uintptr_t)data ==
                                          mvm_gguf_data_offset(g) + t->offset);
        uint64_t bytes;
        require(mvm_ggml_row_bytes(t->type, t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3],
                                   &bytes) == MVM_OK && bytes == t->nbytes);
        touch(t->data, t->nbytes);
    }
    require(mvm_gguf_tensor_at(g, mvm_gguf_n_tensors(g)) == NULL);
    mvm_gguf_close(g);
    return 0;
}
