/*
 * Routing trace files (trace.h, docs/trace-format.md). Loading parses one line at a time
 * with cJSON (a trace can be 100 MB; only the dense arrays are kept), keys records by
 * (req, tok, layer) as the format asks, and enforces every rule of the format; the rules on
 * a row's values (check_row) are the same code for loading and for saving, so a trace that
 * saves is a trace that loads.
 */
#include "tools/trace.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "vmm/error.h"
#include "vmm/file_replace.h"

/* ---- allocation ------------------------------------------------------------------------ */

/* Header values are kept exactly through JSON's doubles up to 2^53. */
#define MAX_EXACT 9007199254740992.0

/* The most floats of scores (layers x experts), or of hidden states (layers x n_embd), a
 * token may carry: 16 MiB. Real models carry at most a few hundred thousand (61 x 384
 * experts, 61 x 7168 wide); a header that promises more is damaged, and would have the
 * loader reserve gigabytes before its first record. */
#define MAX_ROW_FLOATS (1u << 22)

/* What is wrong with a header's shape, or NULL. */
static const char *header_problem(const mvm_trace_header *h)
{
    if (!h->n_layers || !h->n_experts || !h->top_k || !h->n_embd || !h->n_ff_exp)
        return "n_layers, n_experts, top_k, n_embd and n_ff_exp must be at least 1";
    if (h->top_k > h->n_experts)
        return "top_k is larger than n_experts";
    if (!h->expert_bytes || (double)h->expert_bytes > MAX_EXACT)
        return "expert_bytes must be in 1..2^53";
    if ((uint64_t)h->n_layers * h->n_experts > MAX_ROW_FLOATS ||
        (uint64_t)h->n_layers * h->n_embd > MAX_ROW_FLOATS)
        return "n_layers x n_experts and n_layers x n_embd must be at most 4194304 (no "
               "model is that large)";
    return NULL;
}

/* p grown to count elements of elem bytes (realloc), or NULL with p left as it was. */
static void *grown(void *p, size_t count, size_t elem)
{
    if (elem && count > SIZE_MAX / elem)
        return NULL;
    size_t bytes = count * elem;
    return realloc(p, bytes ? bytes : 1);
}

/* ptr = grown(ptr, count): 0, or -1 with ptr unchanged. Needs a `void *tmp_` in scope. */
#define RESIZE(ptr, count) \
    ((tmp_ = grown((ptr), (count), sizeof *(ptr))) != NULL ? ((ptr) = tmp_, 0) : -1)

/* Room for cap tokens in every array (hidden only when the trace has it). */
static int reserve_tokens(mvm_trace *t, uint32_t cap, int with_hidden)
{
    const mvm_trace_header *h = &t->hdr;
    void *tmp_;
    size_t rows = (size_t)cap * h->n_layers;
    if (rows / h->n_layers != cap || rows > SIZE_MAX / h->n_experts ||
        rows > SIZE_MAX / h->n_embd)
        return -1;
    return RESIZE(t->req, cap) || RESIZE(t->tok, cap) ||
           RESIZE(t->scores, rows * h->n_experts) || RESIZE(t->experts, rows * h->top_k) ||
           RESIZE(t->weights, rows * h->top_k) ||
           (with_hidden && RESIZE(t->hidden, rows * h->n_embd));
}

static mvm_trace *trace_shell(const mvm_trace_header *h)
{
    mvm_trace *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->hdr = *h;
    t->hdr.model = strdup(h->model);
    t->hdr.arch = strdup(h->arch);
    if (!t->hdr.model || !t->hdr.arch) {
        mvm_trace_free(t);
        return NULL;
    }
    return t;
}

void mvm_trace_free(mvm_trace *t)
{
    if (!t)
        return;
    free(t->hdr.model);
    free(t->hdr.arch);
    free(t->req);
    free(t->tok);
    free(t->scores);
    free(t->experts);
    free(t->weights);
    free(t->hidden);
    free(t);
}

mvm_status mvm_trace_new(const mvm_trace_header *h, uint32_t n_tokens, int with_hidden,
                         mvm_trace **out)
{
    *out = NULL;
    const char *why = h->model && h->arch ? header_problem(h) : "model and arch must be set";
    if (why)
        return mvm_fail(MVM_ERR_INVALID, "trace shape: %s", why);
    mvm_trace *t = trace_shell(h);
    if (!t || reserve_tokens(t, n_tokens, with_hidden)) {
        mvm_trace_free(t);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a trace of %u tokens", n_tokens);
    }
    size_t rows = (size_t)n_tokens * h->n_layers;
    memset(t->scores, 0, rows * h->n_experts * sizeof *t->scores);
    memset(t->experts, 0, rows * h->top_k * sizeof *t->experts);
    memset(t->weights, 0, rows * h->top_k * sizeof *t->weights);
    if (with_hidden)
        memset(t->hidden, 0, rows * h->n_embd * sizeof *t->hidden);
    for (uint32_t i = 0; i < n_tokens; i++) {
        t->req[i] = 0;
        t->tok[i] = i;
    }
    t->n_tokens = n_tokens;
    *out = t;
    return MVM_OK;
}

/* ---- the rules of a row ---------------------------------------------------------------- */

/* What is wrong with token i's row at layer l, written into why, or NULL. */
static const char *check_row(const mvm_trace *t, uint32_t i, uint32_t l, char *why, size_t cap)
{
    const mvm_trace_header *h = &t->hdr;
    const float *s = mvm_trace_scores(t, i, l), *w = mvm_trace_weights(t, i, l);
    const int32_t *x = mvm_trace_experts(t, i, l);
    for (uint32_t e = 0; e < h->n_experts; e++)
        if (!isfinite(s[e]) || s[e] < 0) {
            snprintf(why, cap, "scores[%u] = %g: scores must be finite and >= 0", e, s[e]);
            return why;
        }
    for (uint32_t k = 0; k < h->top_k; k++) {
        if (x[k] < 0 || (uint32_t)x[k] >= h->n_experts) {
            snprintf(why, cap, "experts[%u] = %d is not an expert (n_experts %u)", k, x[k],
                     h->n_experts);
            return why;
        }
        for (uint32_t j = 0; j < k; j++)
            if (x[j] == x[k]) {
                snprintf(why, cap, "expert %d selected twice (experts[%u] and [%u])", x[k], j, k);
                return why;
            }
        if (!isfinite(w[k])) {
            snprintf(why, cap, "weights[%u] is not finite", k);
            return why;
        }
    }
    if (t->hidden) {
        const float *hs = mvm_trace_hidden(t, i, l);
        for (uint32_t d = 0; d < h->n_embd; d++)
            if (!isfinite(hs[d])) {
                snprintf(why, cap, "hidden[%u] is not finite", d);
                return why;
            }
    }
    return NULL;
}

/* ---- (req, tok) -> token index --------------------------------------------------------- */

typedef struct tokmap {
    uint64_t *keys;
    uint32_t *vals; /* index + 1; 0 = empty slot */
    size_t cap, n;  /* cap: a power of two */
} tokmap;

static size_t slot_of(const tokmap *m, uint64_t key)
{
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (m->cap - 1);
    while (m->vals[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

/* The index of key, or UINT32_MAX. */
static uint32_t tokmap_find(const tokmap *m, uint64_t key)
{
    if (!m->cap)
        return UINT32_MAX;
    size_t i = slot_of(m, key);
    return m->vals[i] ? m->vals[i] - 1 : UINT32_MAX;
}

/* Adds a key that is not there; -1 when out of memory. */
static int tokmap_put(tokmap *m, uint64_t key, uint32_t index)
{
    if (2 * (m->n + 1) > m->cap) {
        tokmap bigger = {calloc(m->cap ? 2 * m->cap : 64, sizeof *m->keys),
                         calloc(m->cap ? 2 * m->cap : 64, sizeof *m->vals),
                         m->cap ? 2 * m->cap : 64, m->n};
        if (!bigger.keys || !bigger.vals) {
            free(bigger.keys);
            free(bigger.vals);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->vals[i]) {
                size_t j = slot_of(&bigger, m->keys[i]);
                bigger.keys[j] = m->keys[i];
                bigger.vals[j] = m->vals[i];
            }
        free(m->keys);
        free(m->vals);
        *m = bigger;
    }
    size_t i = slot_of(m, key);
    m->keys[i] = key;
    m->vals[i] = index + 1;
    m->n++;
    return 0;
}

static void tokmap_free(tokmap *m)
{
    free(m->keys);
    free(m->vals);
}

static uint64_t key_of(uint32_t req, uint32_t tok) { return (uint64_t)req << 32 | tok; }

/* ---- loading --------------------------------------------------------------------------- */

typedef struct loader {
    const char *path;
    unsigned long line;
    mvm_trace *t;                /* NULL until the header is read */
    uint32_t cap;                /* tokens the arrays hold */
    uint8_t *seen;               /* [cap][L]: a record was read */
    unsigned long *first_line;   /* [cap]: where each token first appeared */
    tokmap map;
    int hidden;                  /* -1 before the first record, then whether records carry it */
    unsigned long first_record;  /* its line */
} loader;

static mvm_status bad(const loader *ld, const char *fmt, ...) MVM_PRINTF(2, 3);
static mvm_status bad(const loader *ld, const char *fmt, ...)
{
    char where[320];
    snprintf(where, sizeof where, "%s:%lu", ld->path, ld->line);
    va_list ap;
    va_start(ap, fmt);
    mvm_failv(MVM_ERR_INVALID, where, fmt, ap);
    va_end(ap);
    return MVM_ERR_INVALID;
}

static mvm_status get_uint(const loader *ld, const cJSON *o, const char *key, double max,
                           uint64_t *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!it)
        return bad(ld, "no \"%s\"", key);
    double v = it->valuedouble;
    if (!cJSON_IsNumber(it) || !(v >= 0 && v <= max) || v != floor(v))
        return bad(ld, "\"%s\" must be an integer in 0..%.0f", key, max);
    *out = (uint64_t)v;
    return MVM_OK;
}

static mvm_status get_string(const loader *ld, const cJSON *o, const char *key,
                             const char **out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(it))
        return bad(ld, it ? "\"%s\" must be a string" : "no \"%s\"", key);
    *out = it->valuestring;
    return MVM_OK;
}

/* The array `key` of exactly n numbers: as floats into f, or as integers into x. */
static mvm_status get_numbers(const loader *ld, const cJSON *o, const char *key, uint32_t n,
                              const char *n_is, float *f, int32_t *x)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(a))
        return bad(ld, a ? "\"%s\" must be an array" : "no \"%s\"", key);
    uint32_t i = 0;
    for (const cJSON *it = a->child; it; it = it->next, i++) {
        if (i == n)
            return bad(ld, "\"%s\" has more than %u numbers (%s)", key, n, n_is);
        double v = it->valuedouble;
        if (!cJSON_IsNumber(it))
            return bad(ld, "%s[%u] is not a number", key, i);
        if (f)
            f[i] = (float)v;
        else if (v != floor(v) || !(v >= INT32_MIN && v <= INT32_MAX))
            return bad(ld, "%s[%u] is not an integer", key, i);
        else
            x[i] = (int32_t)v;
    }
    if (i != n)
        return bad(ld, "\"%s\" has %u numbers, expected %u (%s)", key, i, n, n_is);
    return MVM_OK;
}

/* A key twice in one object: cJSON would silently take the first. */
static mvm_status no_duplicates(const loader *ld, const cJSON *o)
{
    for (const cJSON *a = o->child; a; a = a->next)
        for (const cJSON *b = o->child; b != a; b = b->next)
            if (strcmp(a->string, b->string) == 0)
                return bad(ld, "\"%s\" given twice", a->string);
    return MVM_OK;
}

static mvm_status parse_header(loader *ld, const cJSON *o)
{
    const char *format = NULL, *model = NULL, *arch = NULL, *scores = NULL;
    uint64_t version = 0, v[6] = {0};
    static const char *const dims[6] = {"n_layers", "n_experts", "top_k", "expert_bytes",
                                        "n_embd", "n_ff_exp"};
    mvm_status st;
    if (!cJSON_GetObjectItemCaseSensitive(o, "format"))
        return bad(ld, "the first line is not a trace header (no \"format\")");
    if ((st = get_string(ld, o, "format", &format)) != MVM_OK)
        return st;
    if (strcmp(format, "moevm-trace") != 0)
        return bad(ld, "format \"%s\" is not \"moevm-trace\"", format);
    if ((st = get_uint(ld, o, "version", UINT32_MAX, &version)) != MVM_OK)
        return st;
    if (version != 1)
        return bad(ld, "trace version %llu; this reader knows version 1",
                   (unsigned long long)version);
    if ((st = get_string(ld, o, "model", &model)) != MVM_OK ||
        (st = get_string(ld, o, "arch", &arch)) != MVM_OK ||
        (st = get_string(ld, o, "scores", &scores)) != MVM_OK)
        return st;
    if (strcmp(scores, "softmax") != 0 && strcmp(scores, "sigmoid") != 0)
        return bad(ld, "scores \"%s\": version 1 traces hold \"softmax\" or \"sigmoid\" "
                   "scores", scores);
    for (int i = 0; i < 6; i++)
        if ((st = get_uint(ld, o, dims[i], i == 3 ? MAX_EXACT : UINT32_MAX, &v[i])) != MVM_OK)
            return st;
    const cJSON *renorm = cJSON_GetObjectItemCaseSensitive(o, "weights_renormalised");
    if (!cJSON_IsBool(renorm))
        return bad(ld, renorm ? "\"weights_renormalised\" must be true or false"
                              : "no \"weights_renormalised\"");
    mvm_trace_header h = {(char *)model, (char *)arch, (uint32_t)v[0], (uint32_t)v[1],
                          (uint32_t)v[2], v[3], (uint32_t)v[4], (uint32_t)v[5],
                          cJSON_IsTrue(renorm), strcmp(scores, "sigmoid") == 0};
    const char *why = header_problem(&h);
    if (why)
        return bad(ld, "%s", why);
    if (!(ld->t = trace_shell(&h)))
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", ld->path);
    return MVM_OK;
}

/* The index of token (req, tok), adding it (and growing the arrays) when new. */
static mvm_status token_index(loader *ld, uint32_t req, uint32_t tok, uint32_t *out)
{
    mvm_trace *t = ld->t;
    uint32_t i = tokmap_find(&ld->map, key_of(req, tok));
    if (i != UINT32_MAX) {
        *out = i;
        return MVM_OK;
    }
    if (t->n_tokens == UINT32_MAX - 1)
        return bad(ld, "too many tokens");
    if (t->n_tokens == ld->cap) {
        uint32_t cap = ld->cap > UINT32_MAX / 2 ? UINT32_MAX - 1 : ld->cap ? 2 * ld->cap : 64;
        void *tmp_;
        if (reserve_tokens(t, cap, ld->hidden == 1) ||
            RESIZE(ld->seen, (size_t)cap * t->hdr.n_layers) || RESIZE(ld->first_line, cap))
            return mvm_fail(MVM_ERR_NOMEM, "%s:%lu: out of memory for %u tokens", ld->path,
                            ld->line, cap);
        memset(ld->seen + (size_t)ld->cap * t->hdr.n_layers, 0,
               (size_t)(cap - ld->cap) * t->hdr.n_layers);
        ld->cap = cap;
    }
    i = t->n_tokens;
    if (tokmap_put(&ld->map, key_of(req, tok), i))
        return mvm_fail(MVM_ERR_NOMEM, "%s:%lu: out of memory", ld->path, ld->line);
    t->req[i] = req;
    t->tok[i] = tok;
    ld->first_line[i] = ld->line;
    t->n_tokens++;
    *out = i;
    return MVM_OK;
}

static mvm_status parse_record(loader *ld, const cJSON *o)
{
    mvm_trace *t = ld->t;
    const mvm_trace_header *h = &t->hdr;
    uint64_t req = 0, tok = 0, layer = 0;
    mvm_status st;
    if (cJSON_GetObjectItemCaseSensitive(o, "format"))
        return bad(ld, "a second header (the header is the first line only)");
    if ((st = get_uint(ld, o, "req", UINT32_MAX, &req)) != MVM_OK ||
        (st = get_uint(ld, o, "tok", UINT32_MAX, &tok)) != MVM_OK ||
        (st = get_uint(ld, o, "layer", UINT32_MAX, &layer)) != MVM_OK)
        return st;
    if (layer >= h->n_layers)
        return bad(ld, "layer %llu out of range (n_layers %u)", (unsigned long long)layer,
                   h->n_layers);
    int has_hidden = cJSON_GetObjectItemCaseSensitive(o, "hidden") != NULL;
    if (ld->hidden < 0) {
        /* The first record decides whether the trace has hidden states: every record must
         * then agree, or the array would have holes. */
        ld->hidden = has_hidden;
        ld->first_record = ld->line;
    } else if (has_hidden != ld->hidden) {
        return bad(ld, "\"hidden\" is %s here but %s in the first record (line %lu)",
                   has_hidden ? "present" : "absent", has_hidden ? "absent" : "present",
                   ld->first_record);
    }
    uint32_t i = 0;
    if ((st = token_index(ld, (uint32_t)req, (uint32_t)tok, &i)) != MVM_OK)
        return st;
    uint8_t *seen = &ld->seen[(size_t)i * h->n_layers + layer];
    if (*seen)
        return bad(ld, "a second record for req %llu, tok %llu, layer %llu",
                   (unsigned long long)req, (unsigned long long)tok, (unsigned long long)layer);
    uint32_t l = (uint32_t)layer;
    if ((st = get_numbers(ld, o, "scores", h->n_experts, "n_experts",
                          mvm_trace_scores(t, i, l), NULL)) != MVM_OK ||
        (st = get_numbers(ld, o, "experts", h->top_k, "top_k", NULL,
                          mvm_trace_experts(t, i, l))) != MVM_OK ||
        (st = get_numbers(ld, o, "weights", h->top_k, "top_k", mvm_trace_weights(t, i, l),
                          NULL)) != MVM_OK)
        return st;
    if (has_hidden && (st = get_numbers(ld, o, "hidden", h->n_embd, "n_embd",
                                        mvm_trace_hidden(t, i, l), NULL)) != MVM_OK)
        return st;
    char why[160];
    if (check_row(t, i, l, why, sizeof why))
        return bad(ld, "%s", why);
    *seen = 1;
    return MVM_OK;
}

static mvm_status parse_line(loader *ld, const char *line, size_t len)
{
    if (strlen(line) != len)
        return bad(ld, "a NUL byte in the line");
    if (line[strspn(line, " \t\r\n")] == '\0')
        return bad(ld, "an empty line");
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithOpts(line, &end, 1);
    if (!o) {
        int context = end ? (int)strcspn(end, "\r\n") : 0;
        return bad(ld, "not valid JSON near '%.*s'", context < 20 ? context : 20,
                   end ? end : "");
    }
    mvm_status st = !cJSON_IsObject(o) ? bad(ld, "not a JSON object") : no_duplicates(ld, o);
    if (st == MVM_OK)
        st = ld->t ? parse_record(ld, o) : parse_header(ld, o);
    cJSON_Delete(o);
    return st;
}

/* Every token has a record for every layer. */
static mvm_status check_complete(loader *ld)
{
    const mvm_trace *t = ld->t;
    for (uint32_t i = 0; i < t->n_tokens; i++)
        for (uint32_t l = 0; l < t->hdr.n_layers; l++)
            if (!ld->seen[(size_t)i * t->hdr.n_layers + l])
                return mvm_fail(MVM_ERR_INVALID, "%s:%lu: req %u, tok %u (first seen here) has "
                                "no record for layer %u", ld->path, ld->first_line[i],
                                t->req[i], t->tok[i], l);
    return MVM_OK;
}

mvm_status mvm_trace_load(const char *path, mvm_trace **out)
{
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f)
        return mvm_fail(MVM_ERR_INVALID, "%s: cannot open: %s", path, strerror(errno));
    loader ld = {.path = path, .hidden = -1};
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t n;
    mvm_status st = MVM_OK;
    while (errno = 0, (n = getline(&line, &line_cap, f)) >= 0) {
        ld.line++;
        if ((st = parse_line(&ld, line, (size_t)n)) != MVM_OK)
            break;
    }
    if (st == MVM_OK && n < 0 && errno == ENOMEM)
        st = mvm_fail(MVM_ERR_NOMEM, "%s:%lu: out of memory reading a line", path, ld.line + 1);
    else if (st == MVM_OK && ferror(f))
        st = mvm_fail(MVM_ERR_BACKEND, "%s: read error: %s", path, strerror(errno));
    else if (st == MVM_OK && !ld.t)
        st = mvm_fail(MVM_ERR_INVALID, "%s: empty file (no header line)", path);
    else if (st == MVM_OK)
        st = check_complete(&ld);
    free(line);
    fclose(f);
    free(ld.seen);
    free(ld.first_line);
    tokmap_free(&ld.map);
    if (st != MVM_OK) {
        mvm_trace_free(ld.t);
        return st;
    }
    *out = ld.t;
    return MVM_OK;
}

/* ---- saving ---------------------------------------------------------------------------- */

/* exact: the shortest of 6 or 9 significant digits that reads back as exactly v (9 always
 * does for a float); otherwise 6. */
static void put_float(FILE *f, float v, int comma, int exact)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.6g", (double)v);
    if (exact && strtof(buf, NULL) != v)
        snprintf(buf, sizeof buf, "%.9g", (double)v);
    if (comma)
        fputc(',', f);
    fputs(buf, f);
}

static void put_floats(FILE *f, const char *key, const float *v, uint32_t n, int exact)
{
    fprintf(f, ",\"%s\":[", key);
    for (uint32_t i = 0; i < n; i++)
        put_float(f, v[i], i > 0, exact);
    fputc(']', f);
}

static void put_ints(FILE *f, const char *key, const int32_t *x, uint32_t n)
{
    fprintf(f, ",\"%s\":[", key);
    for (uint32_t i = 0; i < n; i++)
        fprintf(f, i ? ",%d" : "%d", (int)x[i]);
    fputc(']', f);
}

void mvm_trace_put_line(FILE *f, const mvm_trace_line *r, int exact)
{
    fprintf(f, "{\"req\":%u,\"tok\":%u,\"layer\":%u", r->req, r->tok, r->layer);
    put_floats(f, "scores", r->scores, r->n_experts, exact);
    put_ints(f, "experts", r->experts, r->top_k);
    put_floats(f, "weights", r->weights, r->top_k, exact);
    if (r->ran) {
        put_ints(f, "ran", r->ran, r->top_k);
        put_floats(f, "ran_weights", r->ran_weights, r->top_k, exact);
    }
    if (r->hidden)
        put_floats(f, "hidden", r->hidden, r->n_embd, exact);
    fputs("}\n", f);
}

/* The header line in the format's field order. */
int mvm_trace_put_header(FILE *f, const mvm_trace_header *h)
{
    cJSON *o = cJSON_CreateObject();
    int ok = o && cJSON_AddStringToObject(o, "format", "moevm-trace") &&
             cJSON_AddNumberToObject(o, "version", 1) &&
             cJSON_AddStringToObject(o, "model", h->model) &&
             cJSON_AddStringToObject(o, "arch", h->arch) &&
             cJSON_AddNumberToObject(o, "n_layers", h->n_layers) &&
             cJSON_AddNumberToObject(o, "n_experts", h->n_experts) &&
             cJSON_AddNumberToObject(o, "top_k", h->top_k) &&
             cJSON_AddNumberToObject(o, "expert_bytes", (double)h->expert_bytes) &&
             cJSON_AddNumberToObject(o, "n_embd", h->n_embd) &&
             cJSON_AddNumberToObject(o, "n_ff_exp", h->n_ff_exp) &&
             cJSON_AddStringToObject(o, "scores", h->sigmoid_scores ? "sigmoid" : "softmax") &&
             cJSON_AddBoolToObject(o, "weights_renormalised", h->weights_renormalised);
    char *text = ok ? cJSON_PrintUnformatted(o) : NULL;
    if (text) {
        fputs(text, f);
        fputc('\n', f);
    }
    cJSON_free(text);
    cJSON_Delete(o);
    return text ? 0 : -1;
}

/* What load would refuse, refused before anything is written. */
static mvm_status check_saveable(const mvm_trace *t, const char *path)
{
    const char *why = t->hdr.model && t->hdr.arch ? header_problem(&t->hdr)
                                                  : "model and arch must be set";
    if (why)
        return mvm_fail(MVM_ERR_INVALID, "%s: cannot save the trace: %s", path, why);
    tokmap seen = {0};
    mvm_status st = MVM_OK;
    for (uint32_t i = 0; i < t->n_tokens && st == MVM_OK; i++) {
        uint32_t twin = tokmap_find(&seen, key_of(t->req[i], t->tok[i]));
        if (twin != UINT32_MAX)
            st = mvm_fail(MVM_ERR_INVALID, "%s: cannot save the trace: tokens %u and %u are "
                          "both req %u, tok %u", path, twin, i, t->req[i], t->tok[i]);
        else if (tokmap_put(&seen, key_of(t->req[i], t->tok[i]), i))
            st = mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", path);
        for (uint32_t l = 0; l < t->hdr.n_layers && st == MVM_OK; l++) {
            char buf[160];
            if (check_row(t, i, l, buf, sizeof buf))
                st = mvm_fail(MVM_ERR_INVALID, "%s: cannot save the trace: token %u (req %u, "
                              "tok %u), layer %u: %s", path, i, t->req[i], t->tok[i], l, buf);
        }
    }
    tokmap_free(&seen);
    return st;
}

mvm_status mvm_trace_save(const mvm_trace *t, const char *path)
{
    mvm_status st = check_saveable(t, path);
    if (st != MVM_OK)
        return st;
    mvm_file_replace file;
    if ((st = mvm_file_replace_open(&file, path, "w")) != MVM_OK)
        return st;
    FILE *f = file.f;
    const mvm_trace_header *h = &t->hdr;
    int bad_write = mvm_trace_put_header(f, h);
    for (uint32_t i = 0; i < t->n_tokens && !bad_write; i++)
        for (uint32_t l = 0; l < h->n_layers; l++) {
            mvm_trace_line r = {
                .req = t->req[i], .tok = t->tok[i], .layer = l, .n_experts = h->n_experts,
                .top_k = h->top_k, .n_embd = h->n_embd, .scores = mvm_trace_scores(t, i, l),
                .experts = mvm_trace_experts(t, i, l), .weights = mvm_trace_weights(t, i, l),
                .hidden = t->hidden ? mvm_trace_hidden(t, i, l) : NULL,
            };
            mvm_trace_put_line(f, &r, 1);
        }
    mvm_status wrote = bad_write ? mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", path) : MVM_OK;
    return mvm_file_replace_commit(&file, wrote);
}
