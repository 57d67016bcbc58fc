/*
 * The GGUF reader (see gguf.h). Parsing mirrors ggml's gguf_init_from_reader: header, then
 * the key-value pairs, then general.alignment, then the tensor infos, then the data
 * section. Every read goes through a cursor that never moves past the end of the buffer,
 * and every size computed from file values is checked for overflow before it is used.
 */
#include "engine/gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/gguf/gguf_impl.h"
#include "vmm/error.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "GGUF values are little-endian and are read in place: this needs a little-endian host"
#endif

/* The smallest encodings of a key-value pair (name length, a 1-byte name, type, a u8) and
 * of a tensor info (name length, empty name, n_dims, one dimension, type, offset): a header
 * claiming more entries than the file can hold at this size fails before anything is
 * allocated. */
#define MIN_KV_BYTES (8 + 1 + 4 + 1)
#define MIN_TENSOR_BYTES (8 + 4 + 8 + 4 + 8)

typedef struct parser {
    mvm_gguf *g;
    uint64_t pos;
    const char *input;  /* the path, or "gguf buffer" */
    char where[160];    /* the part being parsed: "header", "key 3 'general.name'" */
} parser;

typedef unsigned long long ull;

static const struct {
    const char *name;
    uint32_t size;
} value_types[MVM_GGUF_TYPE_COUNT] = {
    [MVM_GGUF_U8] = {"u8", 1},   [MVM_GGUF_I8] = {"i8", 1},     [MVM_GGUF_U16] = {"u16", 2},
    [MVM_GGUF_I16] = {"i16", 2}, [MVM_GGUF_U32] = {"u32", 4},   [MVM_GGUF_I32] = {"i32", 4},
    [MVM_GGUF_F32] = {"f32", 4}, [MVM_GGUF_BOOL] = {"bool", 1}, [MVM_GGUF_STR] = {"str", 0},
    [MVM_GGUF_ARR] = {"arr", 0}, [MVM_GGUF_U64] = {"u64", 8},   [MVM_GGUF_I64] = {"i64", 8},
    [MVM_GGUF_F64] = {"f64", 8},
};

const char *mvm_gguf_type_name(enum mvm_gguf_type t)
{
    return (unsigned)t < MVM_GGUF_TYPE_COUNT ? value_types[t].name : "unknown";
}

uint32_t mvm_gguf_type_size(enum mvm_gguf_type t)
{
    return (unsigned)t < MVM_GGUF_TYPE_COUNT ? value_types[t].size : 0;
}

/* A name from the file as it may appear in a message: at most 64 bytes, anything not
 * printable ASCII as '?', so that a hostile name cannot break the one-line message. */
const char *mvm_gguf_shown(const char *s, uint64_t n, char buf[72])
{
    uint64_t k = n < 64 ? n : 64;
    for (uint64_t i = 0; i < k; i++)
        buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    strcpy(buf + k, n > k ? "..." : "");
    return buf;
}

static mvm_status bad(const parser *p, mvm_status s, const char *fmt, ...) MVM_PRINTF(3, 4);
static mvm_status bad(const parser *p, mvm_status s, const char *fmt, ...)
{
    char where[320];
    snprintf(where, sizeof where, "%s: %s", p->input, p->where);
    va_list ap;
    va_start(ap, fmt);
    mvm_failv(s, where, fmt, ap);
    va_end(ap);
    return s;
}

static uint64_t left(const parser *p) { return p->g->len - p->pos; }

static mvm_status past_end(const parser *p, const char *what)
{
    return bad(p, MVM_ERR_INVALID, "%s at offset %llu runs past the end of the file (%llu bytes)",
               what, (ull)p->pos, (ull)p->g->len);
}

/* Takes n bytes at the cursor; 0 (cursor unmoved) if fewer are left. */
static int take(parser *p, uint64_t n, const uint8_t **at)
{
    if (n > left(p))
        return 0;
    *at = p->g->base + p->pos;
    p->pos += n;
    return 1;
}

/* Reads a little-endian u32 or u64 (size 4 or 8); 0 if fewer bytes are left. */
static int rd(parser *p, void *v, uint32_t size)
{
    const uint8_t *a;
    if (!take(p, size, &a))
        return 0;
    memcpy(v, a, size);
    return 1;
}

/* A length-prefixed string; `what`, followed by element index `idx` unless it is
 * UINT64_MAX, names it in messages. */
static mvm_status rd_str(parser *p, const char *what, uint64_t idx, mvm_gguf_str *out)
{
    uint64_t n = 0;
    const uint8_t *a;
    int has_len = rd(p, &n, 8);
    if (has_len && n <= MVM_GGUF_MAX_STRING && take(p, n, &a)) {
        *out = (mvm_gguf_str){(const char *)a, n};
        return MVM_OK;
    }
    char w[64];
    if (idx == UINT64_MAX)
        snprintf(w, sizeof w, "%s", what);
    else
        snprintf(w, sizeof w, "%s %llu", what, (ull)idx);
    if (!has_len)
        return past_end(p, w);
    if (n > MVM_GGUF_MAX_STRING)
        return bad(p, MVM_ERR_INVALID, "%s is %llu bytes, over the limit of %llu", w, (ull)n,
                   (ull)MVM_GGUF_MAX_STRING);
    return bad(p, MVM_ERR_INVALID,
               "%s of %llu bytes at offset %llu runs past the end of the file (%llu bytes)", w,
               (ull)n, (ull)p->pos, (ull)p->g->len);
}

/* The name that opens the i-th key or tensor info (`what`: "key", "tensor"); until it is
 * read, messages place the error at "<what> <i>". */
static mvm_status rd_name(parser *p, const char *what, uint64_t i, mvm_gguf_str *name)
{
    snprintf(p->where, sizeof p->where, "%s %llu", what, (ull)i);
    return rd_str(p, "name", UINT64_MAX, name);
}

/* The array `arr` grown to hold `need` entries (doubling), or NULL with `arr` intact. The
 * counts were checked against the file size, but growing as entries parse means a bogus
 * count in a large file fails at its first bad entry rather than with a huge allocation. */
void *mvm_gguf_grow(void *arr, uint64_t *cap, uint64_t need, size_t size)
{
    if (need <= *cap)
        return arr;
    uint64_t c = *cap ? *cap * 2 : 16;
    void *n = c > SIZE_MAX / size ? NULL : realloc(arr, c * size);
    if (n)
        *cap = c;
    return n;
}

/* ---- names: FNV-1a over open addressing ---- */

int64_t mvm_gguf_ix_probe(const mvm_gguf *g, int of_tensors, const char *s, uint64_t n,
                        uint64_t **slot)
{
    const name_index *ix = of_tensors ? &g->tensor_ix : &g->key_ix;
    if (!ix->slot)
        return -1;
    uint64_t h = 14695981039346656037ull;
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    for (uint64_t at = h & ix->mask;; at = (at + 1) & ix->mask) {
        if (!ix->slot[at]) {
            if (slot)
                *slot = &ix->slot[at];
            return -1;
        }
        mvm_gguf_str e = name_of(g, of_tensors, ix->slot[at] - 1);
        if (e.len == n && memcmp(e.ptr, s, n) == 0)
            return (int64_t)(ix->slot[at] - 1);
    }
}

mvm_status mvm_gguf_ix_build(mvm_gguf *g, int of_tensors, const char *input)
{
    name_index *ix = of_tensors ? &g->tensor_ix : &g->key_ix;
    uint64_t n = of_tensors ? g->n_tensors : g->n_kv, cap = 2;
    while (cap < 2 * n)
        cap *= 2; /* n is bounded by the files' sizes, so this cannot overflow */
    free(ix->slot);
    if (!(ix->slot = calloc(cap, sizeof *ix->slot)))
        return mvm_fail(MVM_ERR_NOMEM, "%s: cannot allocate a name index of %llu entries",
                        input, (ull)cap);
    ix->mask = cap - 1;
    for (uint64_t i = 0; i < n; i++) {
        mvm_gguf_str s = name_of(g, of_tensors, i);
        uint64_t *slot = NULL;
        int64_t j = mvm_gguf_ix_probe(g, of_tensors, s.ptr, s.len, &slot);
        if (j >= 0) {
            char buf[72];
            return mvm_fail(MVM_ERR_INVALID, "%s: %s %lld and %llu: duplicate %s '%s'", input,
                            of_tensors ? "tensors" : "keys", (long long)j, (ull)i,
                            of_tensors ? "tensor name" : "key", mvm_gguf_shown(s.ptr, s.len, buf));
        }
        *slot = i + 1;
    }
    return MVM_OK;
}

/* ---- parsing ---- */

static mvm_status parse_header(parser *p, uint64_t *n_tensors, uint64_t *n_kv)
{
    const uint8_t *m;
    char s[72];
    snprintf(p->where, sizeof p->where, "header");
    if (!take(p, 4, &m))
        return bad(p, MVM_ERR_INVALID, "file is %llu bytes, too short for the GGUF magic",
                   (ull)p->g->len);
    if (memcmp(m, "GGUF", 4) != 0)
        return bad(p, MVM_ERR_INVALID, "bad magic '%s' (expected 'GGUF')",
                   mvm_gguf_shown((const char *)m, 4, s));
    uint32_t v;
    if (!rd(p, &v, 4))
        return past_end(p, "version");
    /* ggml's order: 0 is corrupt; a version whose low half is 0 is a small version read
     * with the other byte order; then version 1 (32-bit counts, dropped) and the future. */
    if (v == 0)
        return bad(p, MVM_ERR_INVALID, "bad GGUF version 0");
    if ((v & 0xffff) == 0)
        return bad(p, MVM_ERR_UNSUPPORTED,
                   "version 0x%08x reads byte-swapped: big-endian GGUF files are not supported",
                   v);
    if (v == 1)
        return bad(p, MVM_ERR_UNSUPPORTED,
                   "GGUF version 1 is no longer supported (convert the model to version 3)");
    if (v > 3)
        return bad(p, MVM_ERR_UNSUPPORTED,
                   "GGUF version %u is newer than this reader supports (2 and 3)", v);
    p->g->version = v;
    if (!rd(p, n_tensors, 8))
        return past_end(p, "tensor count");
    if (!rd(p, n_kv, 8))
        return past_end(p, "key count");
    /* The counts are int64 in ggml; a negative one is as wrong as one too large. */
    uint64_t room = left(p);
    if (*n_tensors > room / MIN_TENSOR_BYTES || *n_kv > room / MIN_KV_BYTES ||
        *n_tensors * MIN_TENSOR_BYTES + *n_kv * MIN_KV_BYTES > room)
        return bad(p, MVM_ERR_INVALID,
                   "%llu tensors and %llu keys cannot fit in the %llu bytes after the header",
                   (ull)*n_tensors, (ull)*n_kv, (ull)room);
    return MVM_OK;
}

static mvm_status parse_value(parser *p, kv *e)
{
    if (e->type == MVM_GGUF_STR && !e->is_arr) {
        mvm_gguf_str s;
        e->data = p->g->base + p->pos;
        return rd_str(p, "string value", UINT64_MAX, &s);
    }
    if (e->type == MVM_GGUF_STR) {
        /* Each element is at least its 8-byte length: check the count before allocating. */
        if (e->count > left(p) / 8)
            return bad(p, MVM_ERR_INVALID,
                       "%llu strings at offset %llu cannot fit in the file (%llu bytes)",
                       (ull)e->count, (ull)p->pos, (ull)p->g->len);
        if (e->count && !(e->strs = malloc(e->count * sizeof *e->strs)))
            return mvm_fail(MVM_ERR_NOMEM, "%s: %s: cannot allocate the index of %llu strings",
                            p->input, p->where, (ull)e->count);
        for (uint64_t i = 0; i < e->count; i++) {
            mvm_gguf_str s;
            e->strs[i] = p->g->base + p->pos;
            mvm_status st = rd_str(p, "string", i, &s);
            if (st != MVM_OK)
                return st;
        }
        e->data = e->count ? e->strs[0] : NULL;
        return MVM_OK;
    }
    uint32_t size = value_types[e->type].size;
    if (e->count > left(p) / size)
        return bad(p, MVM_ERR_INVALID,
                   "%llu %s values at offset %llu run past the end of the file (%llu bytes)",
                   (ull)e->count, value_types[e->type].name, (ull)p->pos, (ull)p->g->len);
    take(p, e->count * size, &e->data);
    return MVM_OK;
}

static mvm_status parse_kv(parser *p, uint64_t i, kv *e)
{
    char s[72];
    mvm_gguf_str name;
    mvm_status st = rd_name(p, "key", i, &name);
    if (st != MVM_OK)
        return st;
    if (name.len == 0)
        return bad(p, MVM_ERR_INVALID, "empty key name");
    /* no lookup by name could reach it (nor can a tensor's, refused the same way) */
    if (memchr(name.ptr, 0, name.len))
        return bad(p, MVM_ERR_INVALID, "name '%s' contains a NUL byte",
                   mvm_gguf_shown(name.ptr, name.len, s));
    e->key = name.ptr;
    e->key_len = name.len;
    snprintf(p->where, sizeof p->where, "key %llu '%s'", (ull)i, mvm_gguf_shown(name.ptr, name.len, s));
    uint32_t t;
    if (!rd(p, &t, 4))
        return past_end(p, "value type");
    e->count = 1;
    if (t == MVM_GGUF_ARR) {
        e->is_arr = 1;
        if (!rd(p, &t, 4))
            return past_end(p, "array element type");
        if (!rd(p, &e->count, 8))
            return past_end(p, "array length");
        if (t == MVM_GGUF_ARR)
            return bad(p, MVM_ERR_INVALID, "nested arrays are not supported");
    }
    if (t >= MVM_GGUF_TYPE_COUNT)
        return bad(p, MVM_ERR_INVALID, "unknown value type %u", t);
    if (e->count > MVM_GGUF_MAX_ARRAY)
        return bad(p, MVM_ERR_INVALID, "array of %llu elements is over the limit of %llu",
                   (ull)e->count, (ull)MVM_GGUF_MAX_ARRAY);
    e->type = t;
    return parse_value(p, e);
}

static mvm_status parse_alignment(parser *p)
{
    mvm_gguf *g = p->g;
    g->alignment = MVM_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = mvm_gguf_find_key(g, "general.alignment");
    if (i < 0)
        return MVM_OK;
    const kv *e = &g->kvs[i];
    snprintf(p->where, sizeof p->where, "key 'general.alignment'");
    if (e->is_arr || e->type != MVM_GGUF_U32)
        return bad(p, MVM_ERR_INVALID, "must be a u32, not %s%s", e->is_arr ? "an array of " : "",
                   value_types[e->type].name);
    uint32_t a;
    memcpy(&a, e->data, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return bad(p, MVM_ERR_INVALID, "%u is not a power of two", a);
    if (a > MVM_GGUF_MAX_ALIGNMENT)
        return bad(p, MVM_ERR_INVALID, "%u is over the limit of %u", a, MVM_GGUF_MAX_ALIGNMENT);
    g->alignment = a;
    return MVM_OK;
}

static mvm_status parse_tensor_info(parser *p, uint64_t i, tensor *t)
{
    char s[72];
    mvm_gguf_str name;
    mvm_status st = rd_name(p, "tensor", i, &name);
    if (st != MVM_OK)
        return st;
    if (name.len >= MVM_GGUF_MAX_NAME)
        return bad(p, MVM_ERR_INVALID, "name '%s' is %llu bytes, over ggml's limit of %d",
                   mvm_gguf_shown(name.ptr, name.len, s), (ull)name.len, MVM_GGUF_MAX_NAME - 1);
    if (memchr(name.ptr, 0, name.len))
        return bad(p, MVM_ERR_INVALID, "name '%s' contains a NUL byte",
                   mvm_gguf_shown(name.ptr, name.len, s));
    mvm_gguf_tensor *pt = &t->pub;
    pt->name = name.ptr; /* into the file until the names are copied, after all infos */
    t->name_len = name.len;
    snprintf(p->where, sizeof p->where, "tensor '%s'", mvm_gguf_shown(name.ptr, name.len, s));

    if (!rd(p, &pt->n_dims, 4))
        return past_end(p, "dimension count");
    if (pt->n_dims == 0 || pt->n_dims > 4)
        return bad(p, MVM_ERR_INVALID, "has %u dimensions (must be 1 to 4)", pt->n_dims);
    uint64_t elems = 1;
    for (uint32_t j = 0; j < 4; j++) {
        pt->ne[j] = 1;
        if (j >= pt->n_dims)
            continue;
        if (!rd(p, &pt->ne[j], 8))
            return past_end(p, "dimension");
        if (pt->ne[j] > INT64_MAX)
            return bad(p, MVM_ERR_INVALID, "dimension %u is negative (%lld)", j,
                       (long long)pt->ne[j]);
        if (pt->ne[j] == 0)
            return bad(p, MVM_ERR_INVALID, "dimension %u is 0", j);
        if (elems > INT64_MAX / pt->ne[j])
            return bad(p, MVM_ERR_INVALID,
                       "shape has more than 2^63 elements (dimension %u is %llu)", j,
                       (ull)pt->ne[j]);
        elems *= pt->ne[j];
    }
    uint32_t type;
    if (!rd(p, &type, 4))
        return past_end(p, "type");
    pt->type = (enum mvm_ggml_type)type;
    const mvm_ggml_type_info *ti = mvm_ggml_type_get(pt->type);
    if (!ti)
        return bad(p, MVM_ERR_INVALID, "unknown ggml type %u", type);
    if (pt->ne[0] % ti->block)
        return bad(p, MVM_ERR_INVALID,
                   "dimension 0 (%llu) is not a multiple of the %s block size %u",
                   (ull)pt->ne[0], ti->name, ti->block);
    if (elems / ti->block > UINT64_MAX / ti->block_bytes)
        return bad(p, MVM_ERR_INVALID, "%llu elements of %s need more than 2^64 bytes",
                   (ull)elems, ti->name);
    pt->nbytes = elems / ti->block * ti->block_bytes;
    if (!rd(p, &pt->offset, 8))
        return past_end(p, "data offset");
    return MVM_OK;
}

/* Copies the tensor names into one NUL-terminated block (they point into the file until
 * now), each shorter than MVM_GGUF_MAX_NAME so the total cannot overflow. */
static mvm_status copy_names(parser *p)
{
    mvm_gguf *g = p->g;
    uint64_t total = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        total += g->tensors[i].name_len + 1;
    if (!g->n_tensors)
        return MVM_OK;
    if (!(g->names = malloc(total)))
        return mvm_fail(MVM_ERR_NOMEM, "%s: cannot allocate %llu bytes of tensor names",
                        p->input, (ull)total);
    char *at = g->names;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        tensor *t = &g->tensors[i];
        memcpy(at, t->pub.name, t->name_len);
        at[t->name_len] = '\0';
        t->pub.name = at;
        at += t->name_len + 1;
    }
    return MVM_OK;
}

typedef struct span {
    uint64_t start, end, idx;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Places every tensor's data: aligned, inside the file, and not overlapping another. */
static mvm_status place_data(parser *p)
{
    mvm_gguf *g = p->g;
    g->data_offset = p->pos;
    if (!g->n_tensors)
        return MVM_OK; /* as ggml: no padding after the infos when there is no data */
    uint64_t a = g->alignment, pad = (a - p->pos % a) % a;
    snprintf(p->where, sizeof p->where, "data section");
    if (pad > left(p))
        return bad(p, MVM_ERR_INVALID, "starts at %llu, past the end of the file (%llu bytes)",
                   (ull)(p->pos + pad), (ull)g->len);
    g->data_offset += pad;
    span *sp = malloc(g->n_tensors * sizeof *sp);
    if (!sp)
        return mvm_fail(MVM_ERR_NOMEM, "%s: cannot allocate %llu tensor spans", p->input,
                        (ull)g->n_tensors);
    mvm_status st = MVM_OK;
    char s[72], s2[72];
    for (uint64_t i = 0; i < g->n_tensors && st == MVM_OK; i++) {
        tensor *t = &g->tensors[i];
        uint64_t start = 0, end = 0;
        snprintf(p->where, sizeof p->where, "tensor '%s'", mvm_gguf_shown(t->pub.name, t->name_len, s));
        if (t->pub.offset % a)
            st = bad(p, MVM_ERR_INVALID, "data offset %llu is not a multiple of the alignment %llu",
                     (ull)t->pub.offset, (ull)a);
        else if (__builtin_add_overflow(g->data_offset, t->pub.offset, &start) ||
                 __builtin_add_overflow(start, t->pub.nbytes, &end))
            st = bad(p, MVM_ERR_INVALID, "data at offset %llu (%llu bytes) lies past any file",
                     (ull)t->pub.offset, (ull)t->pub.nbytes);
        else if (end > g->len)
            st = bad(p, MVM_ERR_INVALID,
                     "data [%llu, %llu) runs past the end of the file (%llu bytes)", (ull)start,
                     (ull)end, (ull)g->len);
        else
            t->pub.data = g->base + start;
        sp[i] = (span){start, end, i};
    }
    if (st == MVM_OK) {
        qsort(sp, g->n_tensors, sizeof *sp, span_cmp);
        /* Sorted by start, a span overlaps an earlier one iff it starts before the
         * furthest end so far. */
        span far = sp[0];
        for (uint64_t i = 1; i < g->n_tensors && st == MVM_OK; i++) {
            if (sp[i].start < far.end) {
                const tensor *t = &g->tensors[sp[i].idx], *o = &g->tensors[far.idx];
                snprintf(p->where, sizeof p->where, "tensor '%s'",
                         mvm_gguf_shown(t->pub.name, t->name_len, s));
                st = bad(p, MVM_ERR_INVALID, "data [%llu, %llu) overlaps tensor '%s' [%llu, %llu)",
                         (ull)sp[i].start, (ull)sp[i].end, mvm_gguf_shown(o->pub.name, o->name_len, s2),
                         (ull)far.start, (ull)far.end);
            }
            if (sp[i].end > far.end)
                far = sp[i];
        }
    }
    free(sp);
    return st;
}

static mvm_status parse(parser *p)
{
    mvm_gguf *g = p->g;
    uint64_t n_tensors = 0, n_kv = 0;
    mvm_status st = parse_header(p, &n_tensors, &n_kv);
    for (uint64_t i = 0; st == MVM_OK && i < n_kv; i++) {
        kv *kvs = mvm_gguf_grow(g->kvs, &g->cap_kv, i + 1, sizeof *g->kvs);
        if (!kvs)
            return mvm_fail(MVM_ERR_NOMEM, "%s: cannot allocate %llu keys", p->input, (ull)i);
        g->kvs = kvs;
        memset(&g->kvs[i], 0, sizeof g->kvs[i]);
        g->n_kv = i + 1; /* counted before parsing, so that close frees its string index */
        st = parse_kv(p, i, &g->kvs[i]);
    }
    if (st == MVM_OK)
        st = mvm_gguf_ix_build(g, 0, p->input);
    if (st == MVM_OK)
        st = parse_alignment(p);
    for (uint64_t i = 0; st == MVM_OK && i < n_tensors; i++) {
        tensor *ts = mvm_gguf_grow(g->tensors, &g->cap_tensors, i + 1, sizeof *g->tensors);
        if (!ts)
            return mvm_fail(MVM_ERR_NOMEM, "%s: cannot allocate %llu tensors", p->input, (ull)i);
        g->tensors = ts;
        memset(&g->tensors[i], 0, sizeof g->tensors[i]);
        st = parse_tensor_info(p, i, &g->tensors[i]);
        g->n_tensors = i + 1;
    }
    if (st == MVM_OK)
        st = copy_names(p);
    if (st == MVM_OK)
        st = mvm_gguf_ix_build(g, 1, p->input);
    if (st == MVM_OK)
        st = place_data(p);
    return st;
}

static mvm_status parse_buffer(const void *data, size_t len, const char *input, mvm_gguf **out)
{
    *out = NULL;
    mvm_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return mvm_fail(MVM_ERR_NOMEM, "%s: cannot allocate a GGUF handle", input);
    g->base = data;
    g->len = len;
    parser p = {.g = g, .input = input};
    mvm_status st = parse(&p);
    if (st != MVM_OK) {
        mvm_gguf_close(g);
        return st;
    }
    *out = g;
    return MVM_OK;
}

mvm_status mvm_gguf_from_memory(const void *data, size_t len, mvm_gguf **out)
{
    if (!out || (!data && len))
        return mvm_fail(MVM_ERR_INVALID, "mvm_gguf_from_memory: NULL %s", out ? "data" : "out");
    static const uint8_t empty[1];
    return parse_buffer(data ? data : empty, len, "gguf buffer", out);
}

mvm_status mvm_gguf_open(const char *path, mvm_gguf **out)
{
    if (!path || !out)
        return mvm_fail(MVM_ERR_INVALID, "mvm_gguf_open: NULL %s", path ? "out" : "path");
    mvm_status st = mvm_gguf_open_file(path, out);
    if (st == MVM_OK && (st = mvm_gguf_join_parts(*out, path)) != MVM_OK) {
        mvm_gguf_close(*out);
        *out = NULL;
    }
    return st;
}

mvm_status mvm_gguf_open_file(const char *path, mvm_gguf **out)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mvm_fail(MVM_ERR_INVALID, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    int statted = fstat(fd, &sb) == 0;
    if (!statted || !S_ISREG(sb.st_mode)) {
        int e = errno;
        close(fd);
        return mvm_fail(MVM_ERR_INVALID, "%s: %s", path,
                        statted ? "not a regular file" : strerror(e));
    }
    size_t len = (size_t)sb.st_size;
    void *map = NULL;
    if (len > 0) {
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return mvm_fail(e == ENOMEM ? MVM_ERR_NOMEM : MVM_ERR_BACKEND,
                            "%s: mmap of %zu bytes failed: %s", path, len, strerror(e));
        }
    }
    close(fd); /* the mapping keeps the file */
    static const uint8_t empty[1];
    mvm_status st = parse_buffer(map ? map : empty, len, path, out);
    if (st != MVM_OK) {
        if (map)
            munmap(map, len);
        return st;
    }
    (*out)->map = map;
    return MVM_OK;
}

void mvm_gguf_release(const mvm_gguf *g, const void *p, size_t n)
{
    uintptr_t lo = (uintptr_t)p, hi = lo + n;
    if (g->map && lo >= (uintptr_t)g->map && hi <= (uintptr_t)g->map + g->len) {
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        lo = (lo + page - 1) & ~(page - 1); /* only pages wholly inside: a neighbour's bytes
                                               may still be read */
        hi &= ~(page - 1);
        if (hi > lo) /* a read-only private mapping: nothing of the file is lost */
            (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
        return;
    }
    for (uint32_t i = 0; i < g->n_parts; i++)
        mvm_gguf_release(g->parts[i], p, n);
}

void mvm_gguf_close(mvm_gguf *g)
{
    if (!g)
        return;
    if (g->map)
        munmap(g->map, g->len);
    for (uint32_t i = 0; i < g->n_parts; i++)
        mvm_gguf_close(g->parts[i]);
    free(g->parts);
    for (uint64_t i = 0; i < g->n_kv; i++)
        free(g->kvs[i].strs);
    free(g->kvs);
    free(g->tensors);
    free(g->names);
    for (uint32_t i = 0; i < g->n_owned; i++)
        free(g->owned[i]);
    free(g->owned);
    free(g->key_ix.slot);
    free(g->tensor_ix.slot);
    free(g);
}
