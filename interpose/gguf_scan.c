/*
 * The fused expert tensors of a GGUF file (gguf_scan.h). The layout, as ggml writes it:
 * magic "GGUF", version, tensor count, key count; the keys (name, type, value); the tensor
 * infos (name, dimensions, sizes, type, offset in the data section); padding to
 * general.alignment (32 by default); the data. Keys are skipped but for general.alignment
 * and the experts a token routes to; every count and length is bounded by ggml's limits and
 * by the file's size before it is used, so a corrupt file fails with a reason and never
 * allocates more than it holds.
 */
#define _FILE_OFFSET_BITS 64
#include "interpose/gguf_scan.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_STRING (64ull << 20) /* ggml's limits */
#define MAX_ARRAY (64ull << 20)
#define MAX_NAME 64
#define MAX_KEY 64 /* the longest key name kept; longer ones are skipped */
#define MAX_DIMS 4
#define MIN_TENSOR_BYTES (8 + 4 + 8 + 4 + 8) /* the smallest tensor info */
enum { T_U32 = 4, T_STR = 8, T_ARR = 9, T_COUNT = 13 };
static const uint8_t type_size[T_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

typedef struct scan {
    FILE *f;
    uint64_t size;
    char *err;
    size_t cap;
    bool failed;
} scan;

static int fail(scan *s, const char *fmt, ...)
{
    if (!s->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->err, s->cap, fmt, ap);
        va_end(ap);
    }
    s->failed = true;
    return -1;
}

/* Reads n bytes into p; on failure p is zeros (a short read must not leave half a value
 * for a caller to act on). */
static int get(scan *s, void *p, size_t n)
{
    if (s->failed || fread(p, 1, n, s->f) != n) {
        memset(p, 0, n);
        return fail(s, "truncated at byte %lld", (long long)ftello(s->f));
    }
    return 0;
}

static uint64_t get_u64(scan *s)
{
    uint64_t v = 0;
    get(s, &v, sizeof v);
    return v;
}

static uint32_t get_u32(scan *s)
{
    uint32_t v = 0;
    get(s, &v, sizeof v);
    return v;
}

static int skip(scan *s, uint64_t n)
{
    if (s->failed || n > s->size || fseeko(s->f, (off_t)n, SEEK_CUR) != 0 ||
        (uint64_t)ftello(s->f) > s->size)
        return fail(s, "a length of %llu runs past the end", (unsigned long long)n);
    return 0;
}

/* A string's length, checked; the caller reads or skips its bytes. */
static uint64_t str_len(scan *s)
{
    uint64_t n = get_u64(s);
    if (!s->failed && n > MAX_STRING)
        fail(s, "a string of %llu bytes", (unsigned long long)n);
    return s->failed ? 0 : n;
}

/* Skips one value of `type`; a u32 goes into *u32 instead when u32 is given. */
static int skip_value(scan *s, uint32_t type, uint32_t *u32)
{
    if (type >= T_COUNT)
        return fail(s, "value type %u", type);
    if (type == T_STR)
        return skip(s, str_len(s));
    if (type != T_ARR) {
        if (u32 && type == T_U32)
            return get(s, u32, sizeof *u32);
        return skip(s, type_size[type]);
    }
    uint32_t elem = get_u32(s);
    uint64_t count = get_u64(s);
    if (s->failed || elem >= T_COUNT || elem == T_ARR || count > MAX_ARRAY)
        return fail(s, "an array of %llu values of type %u", (unsigned long long)count, elem);
    if (elem != T_STR)
        return skip(s, count * type_size[elem]);
    for (uint64_t i = 0; i < count && !s->failed; i++)
        skip(s, str_len(s));
    return s->failed ? -1 : 0;
}

static bool ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* The keys, skipped but for two: general.alignment (a u32, or the file is refused, as ggml
 * refuses it) and `<arch>.expert_used_count` (a u32, else ignored: only routing reads it). */
static int skip_keys(scan *s, uint64_t n_kv, uint32_t *alignment, uint32_t *used)
{
    for (uint64_t i = 0; i < n_kv && !s->failed; i++) {
        uint64_t len = str_len(s);
        char key[MAX_KEY] = {0};
        bool kept = len < MAX_KEY; /* names longer than any of the two are skipped */
        if (kept ? get(s, key, len) : skip(s, len))
            return -1;
        bool is_align = len == strlen("general.alignment") &&
                        memcmp(key, "general.alignment", len) == 0;
        /* a name with a NUL byte names nothing (the engine's reader refuses the file) */
        bool is_used = kept && !memchr(key, 0, len) && ends_with(key, len, ".expert_used_count");
        uint32_t type = get_u32(s);
        if (is_align && type != T_U32)
            return fail(s, "general.alignment is not a u32");
        skip_value(s, type, is_align ? alignment : is_used ? used : NULL);
    }
    if (!s->failed && (*alignment == 0 || *alignment > MVM_GGUF_MAX_ALIGNMENT ||
                       (*alignment & (*alignment - 1))))
        return fail(s, "alignment %u", *alignment);
    return s->failed ? -1 : 0;
}

typedef struct tinfo {
    uint64_t offset;
    uint32_t experts; /* 0: not a fused expert tensor */
} tinfo;

static int by_offset(const void *a, const void *b)
{
    uint64_t x = ((const tinfo *)a)->offset, y = ((const tinfo *)b)->offset;
    return x < y ? -1 : x > y;
}

static int read_tensor(scan *s, tinfo *t)
{
    uint64_t len = str_len(s);
    char name[MAX_NAME] = {0};
    if (!s->failed && len >= MAX_NAME)
        return fail(s, "a tensor name of %llu bytes", (unsigned long long)len);
    get(s, name, len);
    uint32_t n_dims = get_u32(s);
    if (s->failed)
        return -1;
    if (n_dims == 0 || n_dims > MAX_DIMS)
        return fail(s, "tensor '%s' has %u dimensions", name, n_dims);
    uint64_t ne[MAX_DIMS] = {1, 1, 1, 1};
    for (uint32_t d = 0; d < n_dims; d++)
        ne[d] = get_u64(s);
    get_u32(s); /* the type: the copy's length gives the bytes */
    t->offset = get_u64(s);
    t->experts = 0;
    if (!s->failed && n_dims == 3 && strstr(name, "_exps") && ne[2] >= 2 && ne[2] <= UINT32_MAX)
        t->experts = (uint32_t)ne[2];
    return s->failed ? -1 : 0;
}

/* The infos, then the data section's start and each fused tensor's room. */
static int read_tensors(scan *s, uint64_t n, uint32_t alignment, uint32_t used,
                        mvm_gguf_fused **out, uint32_t *n_out)
{
    if (n > s->size / MIN_TENSOR_BYTES)
        return fail(s, "%llu tensors in %llu bytes", (unsigned long long)n,
                    (unsigned long long)s->size);
    tinfo *t = malloc((n ? n : 1) * sizeof *t);
    mvm_gguf_fused *f = malloc((n ? n : 1) * sizeof *f);
    if (!t || !f) {
        free(t);
        free(f);
        return fail(s, "out of memory for %llu tensors", (unsigned long long)n);
    }
    for (uint64_t i = 0; i < n && !s->failed; i++)
        read_tensor(s, &t[i]);
    uint64_t data = ((uint64_t)ftello(s->f) + alignment - 1) / alignment * alignment;
    qsort(t, n, sizeof *t, by_offset);
    uint32_t k = 0;
    for (uint64_t i = 0; i < n && !s->failed; i++) {
        uint64_t at = data + t[i].offset;
        uint64_t end = i + 1 < n ? data + t[i + 1].offset : s->size;
        if (t[i].offset % alignment || at > s->size || t[i].offset > s->size || end < at ||
            (i + 1 < n && t[i + 1].offset == t[i].offset))
            fail(s, "tensor data at offset %llu", (unsigned long long)t[i].offset);
        else if (t[i].experts)
            f[k++] = (mvm_gguf_fused){at, end - at, t[i].experts, used};
    }
    free(t);
    if (s->failed || k == 0) {
        free(f);
        f = NULL;
    }
    *out = f;
    *n_out = s->failed ? 0 : k;
    return s->failed ? -1 : 0;
}

int mvm_gguf_scan_fused_stream(FILE *f, uint64_t size, mvm_gguf_fused **out, uint32_t *n,
                               char *err, size_t cap)
{
    *out = NULL;
    *n = 0;
    scan s = {.f = f, .size = size, .err = err, .cap = cap};
    char magic[4] = {0};
    get(&s, magic, sizeof magic);
    uint32_t version = get_u32(&s);
    if (!s.failed && memcmp(magic, "GGUF", 4) != 0)
        fail(&s, "no GGUF magic");
    else if (!s.failed && version != 2 && version != 3)
        fail(&s, "GGUF version %u", version);
    uint64_t n_tensors = get_u64(&s), n_kv = get_u64(&s);
    uint32_t alignment = 32, used = 0;
    if (!s.failed && skip_keys(&s, n_kv, &alignment, &used) == 0)
        read_tensors(&s, n_tensors, alignment, used, out, n);
    return s.failed ? -1 : 0;
}

int mvm_gguf_scan_fused(const char *path, mvm_gguf_fused **out, uint32_t *n, char *err,
                        size_t cap)
{
    *out = NULL;
    *n = 0;
    struct stat st;
    /* Only regular files are opened: the mappings a program has include device files (the
     * driver's pinned memory comes from /dev/nvidiactl), which must not be read. */
    const char *why = stat(path, &st) != 0 ? "cannot open it"
                      : !S_ISREG(st.st_mode) ? "not a regular file" : NULL;
    FILE *f = why ? NULL : fopen(path, "rb");
    if (!why && (!f || fstat(fileno(f), &st) != 0))
        why = "cannot open it";
    if (why) {
        if (f)
            fclose(f);
        snprintf(err, cap, "%s", why);
        return -1;
    }
    int rc = mvm_gguf_scan_fused_stream(f, (uint64_t)st.st_size, out, n, err, cap);
    fclose(f);
    return rc;
}
