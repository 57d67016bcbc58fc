/*
 * The GGUF reader and writer: a round trip through the writer of every value type and
 * several tensor types; then corrupt files, built by an independent serializer in this
 * file (so the reader is not only checked against our own writer), each damaged in one
 * place and required to fail with the right status and a message naming the damage; every
 * truncation of a valid file; writer failures, which must leave no file behind; and split
 * models (gguf-split's parts), whole and damaged.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine/gguf/ggml_types.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_write.h"
#include "vmm/error.h"

static char dir[64];

/* A path in the test's directory, in one of 16 rotating buffers so that several can be
 * live at once. */
static const char *in_dir(const char *name)
{
    static char paths[16][128];
    static int next;
    char *p = paths[next++ % 16];
    snprintf(p, 128, "%s/%s", dir, name);
    return p;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* Random bytes, none zero: a reader that returned zeroed or misplaced data cannot pass. */
static void fill_random(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        p[i] = (uint8_t)(rng >> 24) ? (uint8_t)(rng >> 24) : 1;
    }
}

static void test_types(void)
{
    uint64_t b;
    CHECK_ST(mvm_ggml_row_bytes(MVM_GGML_F32, 7, &b), MVM_OK);
    CHECK(b == 28);
    CHECK_ST(mvm_ggml_row_bytes(MVM_GGML_Q8_0, 64, &b), MVM_OK);
    CHECK(b == 68);
    CHECK_ST(mvm_ggml_row_bytes(MVM_GGML_Q4_K, 512, &b), MVM_OK);
    CHECK(b == 288);
    CHECK_ST(mvm_ggml_row_bytes(MVM_GGML_Q6_K, 256, &b), MVM_OK);
    CHECK(b == 210);
    CHECK_ST(mvm_ggml_row_bytes(MVM_GGML_BF16, 3, &b), MVM_OK);
    CHECK(b == 6);
    CHECK_ST(mvm_ggml_row_bytes(MVM_GGML_Q4_0, 33, &b), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "q4_0") && strstr(mvm_last_error(), "33"));
    CHECK_ST(mvm_ggml_row_bytes(MVM_GGML_I64, UINT64_MAX / 4, &b), MVM_ERR_RANGE);
    const int removed[] = {4, 5, 31, 32, 33, 36, 37, 38, MVM_GGML_TYPE_COUNT, 1000, -1};
    for (size_t i = 0; i < sizeof removed / sizeof *removed; i++) {
        CHECK(mvm_ggml_type_get((enum mvm_ggml_type)removed[i]) == NULL);
        CHECK_ST(mvm_ggml_row_bytes((enum mvm_ggml_type)removed[i], 32, &b), MVM_ERR_INVALID);
        CHECK(strcmp(mvm_ggml_type_name((enum mvm_ggml_type)removed[i]), "unknown") == 0);
    }
    CHECK(strcmp(mvm_ggml_type_name(MVM_GGML_Q2_K), "q2_K") == 0);
    CHECK(mvm_ggml_type_get(MVM_GGML_MXFP4)->block_bytes == 17);
}

/* ---- round trip through the writer ---- */

enum { N_T = 5 };
static const char *const t_names[N_T] = {"token_embd.weight", "blk.0.attn_norm.weight",
                                         "blk.0.ffn_up_exps.weight", "output.weight",
                                         "blk.0.ffn_gate_inp.weight"};
static const enum mvm_ggml_type t_types[N_T] = {MVM_GGML_F16, MVM_GGML_F32, MVM_GGML_Q8_0,
                                                MVM_GGML_Q4_0, MVM_GGML_F32};
static const uint32_t t_dims[N_T] = {2, 1, 3, 4, 2};
static const uint64_t t_ne[N_T][4] = {
    {32, 5, 1, 1}, {33, 1, 1, 1}, {64, 3, 2, 1}, {32, 3, 1, 2}, {8, 4, 1, 1}};
static uint8_t *t_data[N_T];
static uint64_t t_bytes[N_T];

/* Streams tensor 4, as mkmodel will for models larger than memory. */
static mvm_status stream_tensor(void *ctx, uint64_t i, FILE *f)
{
    (void)ctx;
    return fwrite(t_data[i], 1, t_bytes[i], f) == t_bytes[i] ? MVM_OK : MVM_ERR_BACKEND;
}

static const char *const vocab[] = {"<s>", "</s>", "hello", "", "w\xc3\xb6rld", "a b c"};
static const int32_t ints[] = {1, -2, 3, INT32_MIN, INT32_MAX};
static const float floats[] = {0.5f, -1.25f, 3e30f};
static const uint8_t u8s[] = {0, 1, 255};
static const int16_t i16s[] = {-32768, 7};
static const uint64_t u64s[] = {0, UINT64_MAX};
static const double f64s[] = {3.141592653589793, -0.0};
static const uint8_t bools[] = {1, 0, 1};

static mvm_gguf_writer *build_writer(uint32_t alignment)
{
    mvm_gguf_writer *w;
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
    if (alignment)
        CHECK_ST(mvm_gguf_writer_set_u32(w, "general.alignment", alignment), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_str(w, "general.architecture", "mixtral"), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_u32(w, "mixtral.block_count", 99), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_u32(w, "mixtral.block_count", 1), MVM_OK); /* replaces */
    CHECK_ST(mvm_gguf_writer_set_i32(w, "test.i32", -7), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_u64(w, "test.u64", 1ull << 40), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_f32(w, "test.f32", 1e-5f), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_bool(w, "test.bool", 1), MVM_OK);
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 65000;
    int16_t i16 = -30000;
    int64_t i64 = -(1ll << 50);
    double f64 = 2.5e300;
    CHECK_ST(mvm_gguf_writer_set_val(w, "test.u8", MVM_GGUF_U8, &u8), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_val(w, "test.i8", MVM_GGUF_I8, &i8), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_val(w, "test.u16", MVM_GGUF_U16, &u16), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_val(w, "test.i16", MVM_GGUF_I16, &i16), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_val(w, "test.i64", MVM_GGUF_I64, &i64), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_val(w, "test.f64", MVM_GGUF_F64, &f64), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", vocab, 6), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_str(w, "test.no_strings", NULL, 0), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_i32(w, "test.ints", ints, 5), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_f32(w, "test.floats", floats, 3), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr(w, "test.u8s", MVM_GGUF_U8, u8s, 3), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr(w, "test.i16s", MVM_GGUF_I16, i16s, 2), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr(w, "test.u64s", MVM_GGUF_U64, u64s, 2), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr(w, "test.f64s", MVM_GGUF_F64, f64s, 2), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr(w, "test.bools", MVM_GGUF_BOOL, bools, 3), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr(w, "test.empty", MVM_GGUF_U32, NULL, 0), MVM_OK);
    mvm_gguf_writer_set_data_fn(w, stream_tensor, NULL);
    for (int i = 0; i < N_T; i++)
        CHECK_ST(mvm_gguf_writer_add_tensor(w, t_names[i], t_types[i], t_dims[i], t_ne[i],
                                            i == 4 ? NULL : t_data[i], t_bytes[i]),
                 MVM_OK);
    return w;
}

static int str_is(mvm_gguf_str s, const char *want)
{
    return s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

static void check_numeric_arr(const mvm_gguf *g, const char *key, enum mvm_gguf_type type,
                              const void *want, uint64_t n)
{
    int64_t k = mvm_gguf_find_key(g, key);
    enum mvm_gguf_type t;
    const void *data;
    uint64_t count;
    CHECK(k >= 0);
    CHECK_ST(mvm_gguf_arr_data(g, (uint64_t)k, &t, &data, &count), MVM_OK);
    CHECK(t == type && count == n);
    CHECK(n == 0 ? data == NULL : memcmp(data, want, n * mvm_gguf_type_size(type)) == 0);
}

static void check_model(const mvm_gguf *g, uint32_t alignment)
{
    CHECK(mvm_gguf_version(g) == 3);
    CHECK(mvm_gguf_alignment(g) == alignment);
    CHECK(mvm_gguf_n_keys(g) == 22u + (alignment != 32));
    CHECK(mvm_gguf_n_tensors(g) == N_T);
    CHECK(mvm_gguf_data_offset(g) % alignment == 0);

    mvm_gguf_str s;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    int b;
    CHECK_ST(mvm_gguf_get_str(g, "general.architecture", &s), MVM_OK);
    CHECK(str_is(s, "mixtral"));
    CHECK_ST(mvm_gguf_get_u32(g, "mixtral.block_count", &u32), MVM_OK);
    CHECK(u32 == 1);
    CHECK_ST(mvm_gguf_get_i32(g, "test.i32", &i32), MVM_OK);
    CHECK(i32 == -7);
    CHECK_ST(mvm_gguf_get_u64(g, "test.u64", &u64), MVM_OK);
    CHECK(u64 == 1ull << 40);
    CHECK_ST(mvm_gguf_get_f32(g, "test.f32", &f), MVM_OK);
    CHECK(f == 1e-5f);
    CHECK_ST(mvm_gguf_get_bool(g, "test.bool", &b), MVM_OK);
    CHECK(b == 1);
    /* Integers of any width, as long as the value fits. */
    CHECK_ST(mvm_gguf_get_u32(g, "test.u8", &u32), MVM_OK);
    CHECK(u32 == 200);
    CHECK_ST(mvm_gguf_get_i32(g, "test.i8", &i32), MVM_OK);
    CHECK(i32 == -100);
    CHECK_ST(mvm_gguf_get_u64(g, "test.u16", &u64), MVM_OK);
    CHECK(u64 == 65000);
    CHECK_ST(mvm_gguf_get_i32(g, "test.i16", &i32), MVM_OK);
    CHECK(i32 == -30000);
    CHECK_ST(mvm_gguf_get_u32(g, "test.i32", &u32), MVM_ERR_RANGE);
    CHECK(strstr(mvm_last_error(), "'test.i32'") && strstr(mvm_last_error(), "-7"));
    CHECK_ST(mvm_gguf_get_u32(g, "test.u64", &u32), MVM_ERR_RANGE);
    CHECK_ST(mvm_gguf_get_i32(g, "test.i64", &i32), MVM_ERR_RANGE);
    CHECK_ST(mvm_gguf_get_u64(g, "test.i64", &u64), MVM_ERR_RANGE);
    /* Wrong types name the key and both types; a missing key says so. */
    CHECK_ST(mvm_gguf_get_f32(g, "mixtral.block_count", &f), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "'mixtral.block_count'") && strstr(mvm_last_error(), "u32") &&
          strstr(mvm_last_error(), "f32"));
    CHECK_ST(mvm_gguf_get_u32(g, "test.f64", &u32), MVM_ERR_INVALID);
    CHECK_ST(mvm_gguf_get_str(g, "test.ints", &s), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "arr[i32]") && strstr(mvm_last_error(), "str"));
    CHECK_ST(mvm_gguf_get_bool(g, "test.u8", &b), MVM_ERR_INVALID);
    CHECK_ST(mvm_gguf_get_u32(g, "no.such.key", &u32), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "missing key 'no.such.key'"));
    CHECK(mvm_gguf_find_key(g, "no.such.key") == -1);
    CHECK(mvm_gguf_find_key(g, "test") == -1);

    int64_t ki = mvm_gguf_find_key(g, "test.f64");
    CHECK(ki >= 0 && mvm_gguf_key_type(g, (uint64_t)ki) == MVM_GGUF_F64);
    CHECK(str_is(mvm_gguf_key_name(g, (uint64_t)ki), "test.f64"));
    double d; /* no f64 getter: the value follows the 8-byte name and the type */
    memcpy(&d, mvm_gguf_key_name(g, (uint64_t)ki).ptr + 8 + 4, 8);
    CHECK(d == 2.5e300);
    CHECK(mvm_gguf_key_name(g, 1000).ptr == NULL);
    CHECK(mvm_gguf_key_type(g, 1000) == MVM_GGUF_TYPE_COUNT);

    enum mvm_gguf_type et;
    uint64_t n;
    CHECK_ST(mvm_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n), MVM_OK);
    CHECK(et == MVM_GGUF_STR && n == 6);
    CHECK_ST(mvm_gguf_get_arr(g, "test.u8", &et, &n), MVM_ERR_INVALID);
    int64_t tok = mvm_gguf_find_key(g, "tokenizer.ggml.tokens");
    CHECK(tok >= 0 && mvm_gguf_key_type(g, (uint64_t)tok) == MVM_GGUF_ARR);
    for (uint64_t i = 0; i < 6; i++) {
        CHECK_ST(mvm_gguf_arr_str(g, (uint64_t)tok, i, &s), MVM_OK);
        CHECK(str_is(s, vocab[i]));
    }
    CHECK_ST(mvm_gguf_arr_str(g, (uint64_t)tok, 6, &s), MVM_ERR_RANGE);
    CHECK_ST(mvm_gguf_arr_str(g, (uint64_t)mvm_gguf_find_key(g, "test.ints"), 0, &s),
             MVM_ERR_INVALID);
    CHECK_ST(mvm_gguf_arr_str(g, 1000, 0, &s), MVM_ERR_RANGE);
    CHECK_ST(mvm_gguf_get_arr(g, "test.no_strings", &et, &n), MVM_OK);
    CHECK(et == MVM_GGUF_STR && n == 0);
    const void *data;
    CHECK_ST(mvm_gguf_arr_data(g, (uint64_t)tok, &et, &data, &n), MVM_ERR_INVALID);
    check_numeric_arr(g, "test.ints", MVM_GGUF_I32, ints, 5);
    check_numeric_arr(g, "test.floats", MVM_GGUF_F32, floats, 3);
    check_numeric_arr(g, "test.u8s", MVM_GGUF_U8, u8s, 3);
    check_numeric_arr(g, "test.i16s", MVM_GGUF_I16, i16s, 2);
    check_numeric_arr(g, "test.u64s", MVM_GGUF_U64, u64s, 2);
    check_numeric_arr(g, "test.f64s", MVM_GGUF_F64, f64s, 2);
    check_numeric_arr(g, "test.bools", MVM_GGUF_BOOL, bools, 3);
    check_numeric_arr(g, "test.empty", MVM_GGUF_U32, NULL, 0);

    uint64_t prev_end = 0;
    for (int i = 0; i < N_T; i++) {
        const mvm_gguf_tensor *t = mvm_gguf_tensor_at(g, (uint64_t)i);
        CHECK(t && strcmp(t->name, t_names[i]) == 0);
        if (!t)
            continue;
        CHECK(mvm_gguf_find_tensor(g, t_names[i]) == t);
        CHECK(t->type == t_types[i] && t->n_dims == t_dims[i]);
        CHECK(memcmp(t->ne, t_ne[i], sizeof t->ne) == 0);
        CHECK(t->nbytes == t_bytes[i]);
        CHECK(t->offset % alignment == 0 && t->offset >= prev_end);
        CHECK((uintptr_t)t->data % alignment == 0); /* the mapping is page-aligned */
        CHECK(memcmp(t->data, t_data[i], t_bytes[i]) == 0);
        prev_end = t->offset + t->nbytes;
    }
    CHECK(mvm_gguf_tensor_at(g, N_T) == NULL);
    CHECK(mvm_gguf_find_tensor(g, "blk.0") == NULL);
}

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    uint8_t *p = malloc(*len);
    CHECK(p && fread(p, 1, *len, f) == *len);
    fclose(f);
    return p;
}

static void roundtrip(uint32_t alignment)
{
    mvm_gguf_writer *w = build_writer(alignment == 32 ? 0 : alignment);
    const char *path = in_dir("model.gguf");
    CHECK_ST(mvm_gguf_writer_write(w, path), MVM_OK);
    mvm_gguf_writer_free(w);
    CHECK(access(in_dir("model.gguf.tmp"), F_OK) != 0);

    mvm_gguf *g;
    CHECK_ST(mvm_gguf_open(path, &g), MVM_OK);
    if (g)
        check_model(g, alignment);
    mvm_gguf_close(g);

    /* The same bytes from memory, and as version 2 (the same layout). */
    size_t len = 0;
    uint8_t *p = read_file(path, &len);
    if (!p)
        return;
    uint8_t *copy = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
    memcpy(copy, p, len);
    CHECK_ST(mvm_gguf_from_memory(copy, len, &g), MVM_OK);
    if (g)
        check_model(g, alignment);
    mvm_gguf_close(g);
    copy[4] = 2;
    CHECK_ST(mvm_gguf_from_memory(copy, len, &g), MVM_OK);
    CHECK(g && mvm_gguf_version(g) == 2);
    mvm_gguf_close(g);
    free(copy);
    free(p);
    unlink(path);
}

/* The test tensors' bytes, random; and their release. */
static void make_tensor_data(void)
{
    for (int i = 0; i < N_T; i++) {
        uint64_t elems = t_ne[i][0] * t_ne[i][1] * t_ne[i][2] * t_ne[i][3];
        CHECK_ST(mvm_ggml_row_bytes(t_types[i], elems, &t_bytes[i]), MVM_OK);
        t_data[i] = malloc(t_bytes[i]);
        fill_random(t_data[i], t_bytes[i]);
    }
}

static void free_tensor_data(void)
{
    for (int i = 0; i < N_T; i++)
        free(t_data[i]);
}

static void test_roundtrip(void)
{
    make_tensor_data();
    roundtrip(32);
    roundtrip(64);
    roundtrip(4096);
    free_tensor_data();
}

/* This process's resident pages of mapped files, in KiB (/proc/self/status: RssFile). */
static long rss_file_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssFile: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

/* Released tensor bytes leave the process's memory and still read back as they were; a
 * buffer the handle does not map (from_memory) is left alone. */
static void test_release(void)
{
    enum { N = 16 << 20 };
    static const uint64_t ne[4] = {N / 4, 1, 1, 1};
    uint8_t *src = malloc(N);
    fill_random(src, N);
    mvm_gguf_writer *w;
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_str(w, "general.architecture", "mixtral"), MVM_OK);
    CHECK_ST(mvm_gguf_writer_add_tensor(w, "big", MVM_GGML_F32, 1, ne, src, N), MVM_OK);
    const char *path = in_dir("release.gguf");
    CHECK_ST(mvm_gguf_writer_write(w, path), MVM_OK);
    mvm_gguf_writer_free(w);
    mvm_gguf *g;
    CHECK_ST(mvm_gguf_open(path, &g), MVM_OK);
    const mvm_gguf_tensor *t = g ? mvm_gguf_find_tensor(g, "big") : NULL;
    CHECK(t != NULL);
    if (t) {
        CHECK(memcmp(t->data, src, N) == 0); /* every page read: resident */
        long before = rss_file_kib();
        mvm_gguf_release(g, t->data, N);
        long after = rss_file_kib();
        /* the kernel's counters lag by a few dozen pages */
        CHECK(before >= 0 && after >= 0 && before - after >= (N >> 10) * 3 / 4);
        CHECK(memcmp(t->data, src, N) == 0); /* from the file again */
        mvm_gguf_release(g, (const uint8_t *)t->data + 100, 10); /* within a page: nothing */
        CHECK(memcmp(t->data, src, N) == 0);
    }
    mvm_gguf_close(g);
    size_t len = 0;
    uint8_t *bytes = read_file(path, &len);
    uint8_t *copy = bytes ? aligned_alloc(4096, (len + 4095) / 4096 * 4096) : NULL;
    if (copy) {
        memcpy(copy, bytes, len);
        CHECK_ST(mvm_gguf_from_memory(copy, len, &g), MVM_OK);
        t = g ? mvm_gguf_find_tensor(g, "big") : NULL;
        CHECK(t != NULL);
        if (t) {
            mvm_gguf_release(g, t->data, N); /* anonymous memory: released, it would be zeros */
            CHECK(memcmp(t->data, src, N) == 0);
        }
        mvm_gguf_close(g);
    }
    free(copy);
    free(bytes);
    free(src);
    unlink(path);
}

static void test_str_copy(void)
{
    char buf[8];
    CHECK_ST(mvm_gguf_str_copy((mvm_gguf_str){"abcdefg", 7}, buf, sizeof buf), MVM_OK);
    CHECK(strcmp(buf, "abcdefg") == 0);
    CHECK_ST(mvm_gguf_str_copy((mvm_gguf_str){"abcdefgh", 8}, buf, sizeof buf), MVM_ERR_RANGE);
    CHECK(strstr(mvm_last_error(), "8 bytes"));
    CHECK_ST(mvm_gguf_str_copy((mvm_gguf_str){"ab\0cd", 5}, buf, sizeof buf), MVM_ERR_INVALID);
    CHECK_ST(mvm_gguf_str_copy((mvm_gguf_str){"", 0}, buf, 1), MVM_OK);
    CHECK(buf[0] == '\0');
}

/* ---- corrupt files, from an independent serializer ---- */

typedef struct buf {
    uint8_t p[2048];
    size_t n;
} buf;

static void put(buf *b, const void *d, size_t n)
{
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s)
{
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

/* What a case changes in the base file (zeroed fields keep the base value). */
typedef struct variant {
    const char *key2;  /* the name of key 2 (base "tokenizer.ggml.tokens") */
    const char *name1; /* the name of tensor 1 (base "output.weight") */
    uint32_t align_type;
} variant;

/* Where the fields a case may patch lie in the base file. */
typedef struct layout {
    size_t version, n_tensors, arch_len, kv0_type, align_val, key2, arr_type, ints_count,
        ndims0, ne0[2], name1, ne1, type1, offset1, end;
} layout;

/* A valid file: 4 keys (a string, general.alignment = 32, a string array, an i32 array)
 * and 2 tensors (f32 [64, 2] at 0, q8_0 [32] at 512), ending exactly where the last
 * tensor's data ends so that every shorter prefix is invalid. */
static void base_file(buf *b, layout *l, const variant *v)
{
    b->n = 0;
    put(b, "GGUF", 4);
    l->version = b->n;
    put_u32(b, 3);
    l->n_tensors = b->n;
    put_u64(b, 2);
    put_u64(b, 4);
    put_str(b, "general.architecture");
    l->kv0_type = b->n;
    put_u32(b, 8);
    l->arch_len = b->n;
    put_str(b, "llama");
    put_str(b, "general.alignment");
    put_u32(b, v->align_type ? v->align_type : 4);
    l->align_val = b->n;
    put_u32(b, 32);
    l->key2 = b->n + 8;
    put_str(b, v->key2 ? v->key2 : "tokenizer.ggml.tokens");
    put_u32(b, 9);
    l->arr_type = b->n;
    put_u32(b, 8);
    put_u64(b, 3);
    put_str(b, "a");
    put_str(b, "bc");
    put_str(b, "def");
    put_str(b, "test.ints");
    put_u32(b, 9);
    put_u32(b, 5);
    l->ints_count = b->n;
    put_u64(b, 3);
    put_u32(b, 1), put_u32(b, 2), put_u32(b, 3);

    put_str(b, "blk.0.ffn_up_exps.weight");
    l->ndims0 = b->n;
    put_u32(b, 2);
    l->ne0[0] = b->n;
    put_u64(b, 64);
    l->ne0[1] = b->n;
    put_u64(b, 2);
    put_u32(b, 0);
    put_u64(b, 0);
    l->name1 = b->n + 8;
    put_str(b, v->name1 ? v->name1 : "output.weight");
    put_u32(b, 1);
    l->ne1 = b->n;
    put_u64(b, 32);
    l->type1 = b->n;
    put_u32(b, 8);
    l->offset1 = b->n;
    put_u64(b, 512);
    while (b->n % 32)
        b->p[b->n++] = 0;
    fill_random(b->p + b->n, 512 + 34);
    b->n += 512 + 34;
    l->end = b->n;
}

static void patch32(buf *b, size_t at, uint32_t v) { memcpy(b->p + at, &v, 4); }
static void patch64(buf *b, size_t at, uint64_t v) { memcpy(b->p + at, &v, 8); }

/* Parses exactly n bytes (a heap copy, so that ASan sees any read past them) and expects
 * failure with `want` and a message containing `needle`. */
static void expect_fail(const char *what, const uint8_t *p, size_t n, mvm_status want,
                        const char *needle)
{
    uint8_t *copy = malloc(n ? n : 1);
    memcpy(copy, p, n);
    mvm_gguf *g = (mvm_gguf *)copy;
    mvm_status st = mvm_gguf_from_memory(copy, n, &g);
    int ok = st == want && g == NULL && strstr(mvm_last_error(), needle) &&
             strstr(mvm_last_error(), "gguf buffer: ");
    CHECK(ok);
    if (!ok)
        fprintf(stderr, "  case '%s': got %s \"%s\", wanted %s with \"%s\"\n", what,
                mvm_status_name(st), mvm_last_error(), mvm_status_name(want), needle);
    mvm_gguf_close(st == MVM_OK ? g : NULL);
    free(copy);
}

static void test_base_is_valid(void)
{
    buf b;
    layout l;
    base_file(&b, &l, &(variant){0});
    mvm_gguf *g;
    CHECK_ST(mvm_gguf_from_memory(b.p, b.n, &g), MVM_OK);
    if (!g)
        return;
    const mvm_gguf_tensor *t = mvm_gguf_find_tensor(g, "output.weight");
    CHECK(t && t->nbytes == 34 && t->offset == 512);
    CHECK(t && (const uint8_t *)t->data + 34 == b.p + b.n);
    mvm_gguf_close(g);
}

static void test_truncation(void)
{
    buf b;
    layout l;
    base_file(&b, &l, &(variant){0});
    for (size_t n = 0; n < b.n; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, b.p, n);
        mvm_gguf *g = NULL;
        mvm_status st = mvm_gguf_from_memory(copy, n, &g);
        CHECK(st == MVM_ERR_INVALID && g == NULL && strstr(mvm_last_error(), "gguf buffer: "));
        if (st != MVM_ERR_INVALID)
            fprintf(stderr, "  truncated to %zu bytes: %s\n", n, mvm_status_name(st));
        mvm_gguf_close(g);
        free(copy);
    }
    expect_fail("header only", b.p, 24, MVM_ERR_INVALID, "cannot fit");
    expect_fail("empty", b.p, 0, MVM_ERR_INVALID, "too short for the GGUF magic");
    expect_fail("in a string array", b.p, l.arr_type + 40, MVM_ERR_INVALID,
                "key 2 'tokenizer.ggml.tokens': string 2 of 3 bytes");
    expect_fail("in tensor data", b.p, b.n - 1, MVM_ERR_INVALID,
                "tensor 'output.weight': data [");
}

/* One damage per case: build the base file, patch it, expect a failure naming the part. */
static void test_corruption(void)
{
    buf b;
    layout l;
    const variant none = {0};
#define CASE(what, variant_, patch, want, needle)                                              \
    do {                                                                                        \
        base_file(&b, &l, &(variant_));                                                         \
        patch;                                                                                  \
        expect_fail(what, b.p, b.n, want, needle);                                              \
    } while (0)

    CASE("magic", none, b.p[3] = 'X', MVM_ERR_INVALID, "bad magic 'GGUX'");
    CASE("version 0", none, patch32(&b, l.version, 0), MVM_ERR_INVALID, "version 0");
    CASE("version 1", none, patch32(&b, l.version, 1), MVM_ERR_UNSUPPORTED, "version 1");
    CASE("big-endian", none, patch32(&b, l.version, 0x03000000), MVM_ERR_UNSUPPORTED,
         "big-endian");
    CASE("version 4", none, patch32(&b, l.version, 4), MVM_ERR_UNSUPPORTED, "version 4");
    CASE("2^60 tensors", none, patch64(&b, l.n_tensors, 1ull << 60), MVM_ERR_INVALID,
         "1152921504606846976 tensors and 4 keys cannot fit");
    CASE("negative tensors", none, patch64(&b, l.n_tensors, UINT64_MAX), MVM_ERR_INVALID,
         "cannot fit");
    CASE("2^60 keys", none, patch64(&b, l.n_tensors + 8, 1ull << 60), MVM_ERR_INVALID,
         "cannot fit");
    CASE("string past end", none, patch64(&b, l.arch_len, 4000), MVM_ERR_INVALID,
         "key 0 'general.architecture': string value of 4000 bytes");
    CASE("string over limit", none, patch64(&b, l.arch_len, 1ull << 40), MVM_ERR_INVALID,
         "over the limit");
    CASE("unknown value type", none, patch32(&b, l.kv0_type, 13), MVM_ERR_INVALID,
         "key 0 'general.architecture': unknown value type 13");
    CASE("nested array", none, patch32(&b, l.arr_type, 9), MVM_ERR_INVALID,
         "key 2 'tokenizer.ggml.tokens': nested arrays");
    CASE("array past end", none, patch64(&b, l.ints_count, 1000), MVM_ERR_INVALID,
         "key 3 'test.ints': 1000 i32 values");
    CASE("array over limit", none, patch64(&b, l.ints_count, 1ull << 40), MVM_ERR_INVALID,
         "over the limit");
    CASE("duplicate key", ((variant){.key2 = "general.alignment"}), (void)0, MVM_ERR_INVALID,
         "duplicate key 'general.alignment'");
    CASE("empty key", ((variant){.key2 = ""}), (void)0, MVM_ERR_INVALID, "key 2: empty key");
    CASE("alignment 0", none, patch32(&b, l.align_val, 0), MVM_ERR_INVALID,
         "'general.alignment': 0 is not a power of two");
    CASE("alignment 3", none, patch32(&b, l.align_val, 3), MVM_ERR_INVALID,
         "'general.alignment': 3 is not a power of two");
    CASE("alignment 2^30", none, patch32(&b, l.align_val, 1u << 30), MVM_ERR_INVALID,
         "over the limit");
    CASE("alignment i32", ((variant){.align_type = 5}), (void)0, MVM_ERR_INVALID,
         "'general.alignment': must be a u32, not i32");
    CASE("n_dims 5", none, patch32(&b, l.ndims0, 5), MVM_ERR_INVALID,
         "tensor 'blk.0.ffn_up_exps.weight': has 5 dimensions");
    CASE("n_dims 0", none, patch32(&b, l.ndims0, 0), MVM_ERR_INVALID, "has 0 dimensions");
    CASE("ne 0", none, patch64(&b, l.ne0[1], 0), MVM_ERR_INVALID,
         "tensor 'blk.0.ffn_up_exps.weight': dimension 1 is 0");
    CASE("ne negative", none, patch64(&b, l.ne0[0], UINT64_MAX), MVM_ERR_INVALID,
         "dimension 0 is negative");
    CASE("ne overflow", none, (patch64(&b, l.ne0[0], 1ull << 62), patch64(&b, l.ne0[1], 4)),
         MVM_ERR_INVALID, "more than 2^63 elements");
    CASE("ne0 not whole blocks", none, patch64(&b, l.ne1, 33),
         MVM_ERR_INVALID, "dimension 0 (33) is not a multiple of the q8_0 block size 32");
    CASE("type 4", none, patch32(&b, l.type1, 4), MVM_ERR_INVALID,
         "tensor 'output.weight': unknown ggml type 4");
    CASE("type 31", none, patch32(&b, l.type1, 31), MVM_ERR_INVALID, "unknown ggml type 31");
    CASE("type -1", none, patch32(&b, l.type1, UINT32_MAX), MVM_ERR_INVALID,
         "unknown ggml type 4294967295");
    CASE("misaligned", none, patch64(&b, l.offset1, 513), MVM_ERR_INVALID,
         "tensor 'output.weight': data offset 513 is not a multiple of the alignment 32");
    CASE("past end", none, patch64(&b, l.offset1, 4096), MVM_ERR_INVALID,
         "tensor 'output.weight': data [");
    CASE("offset wraps", none, patch64(&b, l.offset1, UINT64_MAX - 31), MVM_ERR_INVALID,
         "past any file");
    CASE("overlap", none, patch64(&b, l.offset1, 480), MVM_ERR_INVALID,
         "tensor 'output.weight': data [832, 866) overlaps tensor 'blk.0.ffn_up_exps.weight'");
    CASE("duplicate tensor", ((variant){.name1 = "blk.0.ffn_up_exps.weight"}), (void)0,
         MVM_ERR_INVALID, "duplicate tensor name 'blk.0.ffn_up_exps.weight'");
    char long_name[MVM_GGUF_MAX_NAME + 1];
    memset(long_name, 'x', MVM_GGUF_MAX_NAME);
    long_name[MVM_GGUF_MAX_NAME] = '\0';
    CASE("long name", ((variant){.name1 = long_name}), (void)0, MVM_ERR_INVALID,
         "64 bytes, over ggml's limit of 63");
    CASE("NUL in name", ((variant){.name1 = "output.weight"}), b.p[l.name1 + 6] = 0,
         MVM_ERR_INVALID, "name 'output?weight' contains a NUL byte");
    /* a fuzzer's find: "\0.expert_used_count" was a key the interposer's scan read and no
     * lookup by name could reach */
    CASE("NUL in key name", none, b.p[l.key2 + 9] = 0, MVM_ERR_INVALID,
         "name 'tokenizer?ggml.tokens' contains a NUL byte");
#undef CASE

    /* A 32-byte file claiming 2^60 tensors fails at once, allocating nothing large. */
    uint8_t tiny[32] = "GGUF\3\0\0\0";
    uint64_t huge = 1ull << 60;
    memcpy(tiny + 8, &huge, 8);
    expect_fail("tiny", tiny, sizeof tiny, MVM_ERR_INVALID, "cannot fit");
}

/* ---- the writer's own checks and failures ---- */

static mvm_status write_short(void *ctx, uint64_t i, FILE *f)
{
    (void)ctx, (void)i;
    return fwrite("abc", 1, 3, f) == 3 ? MVM_OK : MVM_ERR_BACKEND;
}

static mvm_status write_fails(void *ctx, uint64_t i, FILE *f)
{
    (void)ctx, (void)i, (void)f;
    return mvm_fail(MVM_ERR_NOMEM, "generator ran out of memory");
}

static void test_writer_errors(void)
{
    mvm_gguf_writer *w;
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
    uint64_t ne[4] = {64, 2, 1, 1};
    static uint8_t data[4096];
    CHECK_ST(mvm_gguf_writer_add_tensor(w, "t", MVM_GGML_F32, 2, ne, data, 100), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "tensor 't'") && strstr(mvm_last_error(), "512"));
    CHECK_ST(mvm_gguf_writer_add_tensor(w, "t", (enum mvm_ggml_type)4, 2, ne, data, 512),
             MVM_ERR_INVALID);
    CHECK_ST(mvm_gguf_writer_add_tensor(w, "t", MVM_GGML_Q4_K, 2, ne, data, 512), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "block size 256"));
    CHECK_ST(mvm_gguf_writer_add_tensor(w, "t", MVM_GGML_F32, 5, ne, data, 512), MVM_ERR_INVALID);
    ne[1] = 0;
    CHECK_ST(mvm_gguf_writer_add_tensor(w, "t", MVM_GGML_F32, 2, ne, data, 0), MVM_ERR_INVALID);
    ne[1] = 2;
    CHECK_ST(mvm_gguf_writer_add_tensor(w, "t", MVM_GGML_F32, 2, ne, data, 512), MVM_OK);
    CHECK_ST(mvm_gguf_writer_add_tensor(w, "t", MVM_GGML_F32, 2, ne, data, 512), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "added twice"));
    CHECK_ST(mvm_gguf_writer_set_u32(w, "general.alignment", 3), MVM_ERR_INVALID);
    CHECK_ST(mvm_gguf_writer_set_u32(w, "general.alignment", 0), MVM_ERR_INVALID);
    CHECK_ST(mvm_gguf_writer_set_i32(w, "general.alignment", 64), MVM_ERR_INVALID);
    CHECK_ST(mvm_gguf_writer_set_u32(w, "", 1), MVM_ERR_INVALID);
    CHECK_ST(mvm_gguf_writer_set_str(w, "k", NULL), MVM_ERR_INVALID);

    /* A path in a directory that does not exist: an error, and no file. */
    CHECK_ST(mvm_gguf_writer_write(w, "/nonexistent-moevm-dir/m.gguf"), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "/nonexistent-moevm-dir/m.gguf.tmp"));
    CHECK(access("/nonexistent-moevm-dir/m.gguf", F_OK) != 0);

    /* A tensor without data and no data function; then functions that fail or lie. */
    const char *path = in_dir("bad.gguf");
    CHECK_ST(mvm_gguf_writer_add_tensor(w, "streamed", MVM_GGML_F32, 1, ne, NULL, 256), MVM_OK);
    CHECK_ST(mvm_gguf_writer_write(w, path), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "'streamed'"));
    mvm_gguf_writer_set_data_fn(w, write_short, NULL);
    CHECK_ST(mvm_gguf_writer_write(w, path), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "wrote 3 bytes, not 256"));
    mvm_gguf_writer_set_data_fn(w, write_fails, NULL);
    CHECK_ST(mvm_gguf_writer_write(w, path), MVM_ERR_NOMEM);
    CHECK(access(path, F_OK) != 0 && access(in_dir("bad.gguf.tmp"), F_OK) != 0);

    mvm_gguf_writer_free(w);

    /* The writer's layout is what the reader accepts, alignment padding included. */
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_u32(w, "general.alignment", 256), MVM_OK);
    CHECK_ST(mvm_gguf_writer_add_tensor(w, "a", MVM_GGML_Q8_0, 1, ne, data, 68), MVM_OK);
    CHECK_ST(mvm_gguf_writer_add_tensor(w, "b", MVM_GGML_F32, 1, ne, data, 256), MVM_OK);
    CHECK_ST(mvm_gguf_writer_write(w, path), MVM_OK);
    mvm_gguf_writer_free(w);
    mvm_gguf *g;
    CHECK_ST(mvm_gguf_open(path, &g), MVM_OK);
    CHECK(g && mvm_gguf_alignment(g) == 256 && mvm_gguf_tensor_at(g, 1)->offset == 256);
    mvm_gguf_close(g);
    unlink(path);

    CHECK_ST(mvm_gguf_open(in_dir("missing.gguf"), &g), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "missing.gguf") && g == NULL);
    CHECK_ST(mvm_gguf_open(dir, &g), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "not a regular file"));
    FILE *f = fopen(path, "wb");
    fclose(f);
    CHECK_ST(mvm_gguf_open(path, &g), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "bad.gguf: header: file is 0 bytes"));
    unlink(path);
}

/* ---- split models --------------------------------------------------------------------- */

/* Part `no` of `count` at prefix-0000{no+1}-of-0000{count}.gguf: the metadata in the first,
 * split.* keys in all, as gguf-split writes them (u16, u16, i32), and tensors `names`. */
static void write_part(const char *prefix, uint16_t no, uint16_t count, int32_t total,
                       const char *const *names, size_t n)
{
    mvm_gguf_writer *w;
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
    if (no == 0)
        CHECK_ST(mvm_gguf_writer_set_str(w, "general.name", "split"), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_val(w, "split.no", MVM_GGUF_U16, &no), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_val(w, "split.count", MVM_GGUF_U16, &count), MVM_OK);
    if (no == 0)
        CHECK_ST(mvm_gguf_writer_set_i32(w, "split.tensors.count", total), MVM_OK);
    for (size_t i = 0; i < n; i++) {
        size_t t = (size_t)(names[i][0] - 'a') % N_T; /* tensor "a".."e": t_data[0..4] */
        CHECK_ST(mvm_gguf_writer_add_tensor(w, names[i], t_types[t], t_dims[t], t_ne[t],
                                            t_data[t], t_bytes[t]), MVM_OK);
    }
    char path[160];
    snprintf(path, sizeof path, "%s-%05u-of-%05u.gguf", prefix, no + 1u, count);
    CHECK_ST(mvm_gguf_writer_write(w, path), MVM_OK);
    mvm_gguf_writer_free(w);
}

static const char *const part_a[] = {"a", "b"}, *const part_b[] = {"c"},
                         *const part_c[] = {"d", "e"};

static void write_parts(const char *prefix, int32_t total)
{
    write_part(prefix, 0, 3, total, part_a, 2);
    write_part(prefix, 1, 3, 0, part_b, 1);
    write_part(prefix, 2, 3, 0, part_c, 2);
}

static void expect_split_fail(const char *path, const char *needle)
{
    mvm_gguf *g = NULL;
    CHECK_ST(mvm_gguf_open(path, &g), MVM_ERR_INVALID);
    CHECK(g == NULL && strstr(mvm_last_error(), needle) != NULL);
    if (!strstr(mvm_last_error(), needle))
        fprintf(stderr, "  want '%s', got: %s\n", needle, mvm_last_error());
}

static void test_split(void)
{
    make_tensor_data();
    char prefix[96], first[128], second[128], third[128], renamed[128];
    snprintf(prefix, sizeof prefix, "%s/m", dir);
    snprintf(first, sizeof first, "%s-00001-of-00003.gguf", prefix);
    snprintf(second, sizeof second, "%s-00002-of-00003.gguf", prefix);
    snprintf(third, sizeof third, "%s-00003-of-00003.gguf", prefix);
    snprintf(renamed, sizeof renamed, "%s/whole.gguf", dir);
    write_parts(prefix, 5);

    /* The first part opens all three: every tensor by name, with its own bytes. */
    mvm_gguf *g = NULL;
    CHECK_ST(mvm_gguf_open(first, &g), MVM_OK);
    if (g) {
        CHECK(mvm_gguf_n_tensors(g) == 5 && mvm_gguf_find_key(g, "general.name") >= 0);
        for (int t = 0; t < N_T; t++) {
            char name[2] = {(char)('a' + t), 0};
            const mvm_gguf_tensor *x = mvm_gguf_find_tensor(g, name);
            CHECK(x && x->nbytes == t_bytes[t] && memcmp(x->data, t_data[t], t_bytes[t]) == 0);
        }
        mvm_gguf_close(g);
    }

    expect_split_fail(second, "m-00002-of-00003.gguf is part 2 of 3 of a split model: open "
                      "the first, ");
    write_part(prefix, 1, 3, 0, part_c, 2); /* "d" and "e" in parts 2 and 3 */
    expect_split_fail(first, "duplicate tensor name 'd'");
    write_part(prefix, 1, 3, 0, part_b, 1);
    rename(second, third); /* part 2 under part 3's name */
    write_part(prefix, 1, 3, 0, part_b, 1);
    expect_split_fail(first, "m-00003-of-00003.gguf: says it is part 2 of 3, not part 3 of 3");
    write_parts(prefix, 6);
    expect_split_fail(first, "split.tensors.count is 6 but the 3 parts hold 5 tensors");
    unlink(third);
    expect_split_fail(first, "part 3 of 3 of this split model: ");
    CHECK(strstr(mvm_last_error(), "m-00003-of-00003.gguf: cannot open"));
    write_parts(prefix, 5);
    rename(first, renamed);
    expect_split_fail(renamed, "whole.gguf: part 1 of a split model of 3, but not named "
                      "PREFIX-00001-of-00003.gguf");
    unlink(renamed);
    unlink(second);
    unlink(third);
    free_tensor_data();
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_gguf.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_types);
    RUN(test_roundtrip);
    RUN(test_release);
    RUN(test_str_copy);
    RUN(test_base_is_valid);
    RUN(test_truncation);
    RUN(test_corruption);
    RUN(test_writer_errors);
    RUN(test_split);
    rmdir(dir);
    TEST_END();
}
