/*
 * mvm_json_schema_to_grammar's entry and what the converter's files share: failures and
 * their place in the schema, the arena and its strings, the rule table, llama.cpp's
 * built-in rules, and the grammar's text.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar_impl.h"
#include "engine/grammar/json_schema_impl.h"

/* ---- failures and paths ------------------------------------------------------------------ */

/* The path as text into buf[cap], its keys shortened: the message has 512 bytes. */
static size_t path_text(const js_path *p, char *buf, size_t cap)
{
    size_t n = p->up ? path_text(p->up, buf, cap) : 0;
    if (n + 1 >= cap)
        return n;
    int w = !p->up  ? snprintf(buf + n, cap - n, "%.60s", p->key)
            : p->key ? snprintf(buf + n, cap - n, "/%.40s", p->key)
                     : snprintf(buf + n, cap - n, "/%zu", p->idx);
    if (w > 0)
        n += (size_t)w;
    return n < cap ? n : cap - 1;
}

void js_fail(js_ctx *c, const js_path *at, const char *fmt, ...)
{
    if (c->st != MVM_OK)
        return;
    char msg[320], where[180] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at)
        path_text(at, where, sizeof where);
    c->st = mvm_fail(MVM_ERR_INVALID, "json_schema: %s%s%s", msg, at ? " at " : "", where);
}

static void js_nomem(js_ctx *c)
{
    if (c->st == MVM_OK)
        c->st = mvm_fail(MVM_ERR_NOMEM, "json_schema: out of memory");
}

/* ---- the arena and its strings ----------------------------------------------------------- */

struct js_chunk {
    js_chunk *next;
    size_t used, cap;
};

void *js_alloc(js_ctx *c, size_t n)
{
    if (c->st != MVM_OK)
        return NULL;
    if (n > JS_MAX_ARENA) {
        js_fail(c, NULL, "the schema is too large to convert");
        return NULL;
    }
    n = (n + 7) & ~(size_t)7; /* pointers are stored here too */
    js_chunk *ch = c->arena;
    if (!ch || ch->cap - ch->used < n) {
        const size_t cap = n > (64u << 10) ? n : (64u << 10);
        if (c->arena_bytes + cap > JS_MAX_ARENA) {
            js_fail(c, NULL, "the schema is too large to convert (over %u MiB of work)",
                    JS_MAX_ARENA >> 20);
            return NULL;
        }
        ch = (js_chunk *)malloc(sizeof *ch + cap);
        if (!ch) {
            js_nomem(c);
            return NULL;
        }
        ch->next = c->arena;
        ch->used = 0;
        ch->cap = cap;
        c->arena = ch;
        c->arena_bytes += cap;
    }
    void *p = (char *)(ch + 1) + ch->used;
    ch->used += n;
    return p;
}

char *js_strn(js_ctx *c, const char *s, size_t n)
{
    char *p = s ? (char *)js_alloc(c, n + 1) : NULL;
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

char *js_str(js_ctx *c, const char *s)
{
    return s ? js_strn(c, s, strlen(s)) : NULL;
}

char *js_fmt(js_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = n >= 0 ? (char *)js_alloc(c, (size_t)n + 1) : NULL;
    if (p) {
        va_start(ap, fmt);
        vsnprintf(p, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return p;
}

char *js_catn(js_ctx *c, const char *const *parts, size_t n)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (!parts[i])
            return NULL;
        len += strlen(parts[i]);
    }
    char *p = (char *)js_alloc(c, len + 1);
    if (!p)
        return NULL;
    char *w = p;
    for (size_t i = 0; i < n; i++) {
        const size_t k = strlen(parts[i]);
        memcpy(w, parts[i], k);
        w += k;
    }
    *w = 0;
    return p;
}

void js_sb_addn(js_sb *b, const char *s, size_t n)
{
    if (!b->c || b->c->st != MVM_OK)
        return;
    if (b->cap - b->n <= n) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap - b->n <= n)
            cap *= 2;
        char *p = (char *)js_alloc(b->c, cap); /* the old block stays in the arena */
        if (!p)
            return;
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void js_sb_add(js_sb *b, const char *s)
{
    if (!s) {
        b->c = NULL; /* a part failed: so does the whole */
        return;
    }
    js_sb_addn(b, s, strlen(s));
}

void js_sb_addf(js_sb *b, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof tmp)
        js_sb_addn(b, tmp, (size_t)n);
}

char *js_sb_done(js_sb *b)
{
    if (!b->c || b->c->st != MVM_OK)
        return NULL;
    return b->p ? b->p : js_str(b->c, "");
}

void js_vec_push(js_ctx *c, js_vec *v, const void *x)
{
    if (c->st != MVM_OK)
        return;
    if (v->n == v->cap) {
        const size_t cap = v->cap ? v->cap * 2 : 8;
        const void **p = (const void **)js_alloc(c, cap * sizeof *p);
        if (!p)
            return;
        if (v->n)
            memcpy(p, v->p, v->n * sizeof *p);
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = x;
}

/* ---- the rule table ---------------------------------------------------------------------- */

static size_t hash_str(const char *s)
{
    size_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static js_rule *rule_slot(js_ctx *c, const char *name)
{
    size_t i = hash_str(name) & (c->cap_rules - 1);
    while (c->rules[i].name && strcmp(c->rules[i].name, name) != 0)
        i = (i + 1) & (c->cap_rules - 1);
    return &c->rules[i];
}

const char *js_rule_get(js_ctx *c, const char *name)
{
    return c->cap_rules ? rule_slot(c, name)->body : NULL;
}

static void rule_put(js_ctx *c, const char *name, const char *body)
{
    if (c->n_rules * 2 >= c->cap_rules) {
        const size_t cap = c->cap_rules ? c->cap_rules * 2 : 256;
        js_rule *old = c->rules;
        const size_t old_cap = c->cap_rules;
        js_rule *t = (js_rule *)js_alloc(c, cap * sizeof *t);
        if (!t)
            return;
        memset(t, 0, cap * sizeof *t);
        c->rules = t;
        c->cap_rules = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].name)
                *rule_slot(c, old[i].name) = old[i];
    }
    js_rule *r = rule_slot(c, name);
    if (r->name)
        c->out_bytes -= strlen(r->body);
    else {
        r->name = name;
        c->n_rules++;
        c->out_bytes += strlen(name) + 6; /* " ::= " and the newline */
    }
    r->body = body;
    c->out_bytes += strlen(body);
    if (c->out_bytes > JS_MAX_OUTPUT)
        js_fail(c, NULL, "the grammar would exceed %u MiB", JS_MAX_OUTPUT >> 20);
}

static int rule_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '-';
}

char *js_rule_name(js_ctx *c, const char *name)
{
    js_sb b = {c, NULL, 0, 0};
    for (const char *s = name; s && *s;) {
        if (rule_char(*s))
            js_sb_addn(&b, s++, 1);
        else {
            js_sb_add(&b, "-");
            while (*s && !rule_char(*s))
                s++;
        }
    }
    return name ? js_sb_done(&b) : NULL;
}

char *js_add_rule(js_ctx *c, const char *name, const char *body)
{
    if (!name || !body || c->st != MVM_OK)
        return NULL;
    char *esc = js_rule_name(c, name);
    if (!esc)
        return NULL;
    const char *cur = js_rule_get(c, esc);
    if (cur && strcmp(cur, body) != 0) {
        for (unsigned long i = 0;; i++) {
            char *key = js_fmt(c, "%s%lu", esc, i);
            if (!key)
                return NULL;
            cur = js_rule_get(c, key);
            if (!cur || strcmp(cur, body) == 0) {
                esc = key;
                break;
            }
        }
    }
    if (!cur)
        rule_put(c, esc, body);
    return c->st == MVM_OK ? esc : NULL;
}

/* ---- the built-in rules ------------------------------------------------------------------ */

/* llama.cpp's PRIMITIVE_RULES and STRING_FORMAT_RULES (their text as it has them). */
static const js_builtin builtins[] = {
    {"boolean", "(\"true\" | \"false\")", {NULL}},
    {"decimal-part", "[0-9]{1,16}", {NULL}},
    {"integral-part", "[0] | [1-9] [0-9]{0,15}", {NULL}},
    {"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)?",
     {"integral-part", "decimal-part", NULL}},
    {"integer", "(\"-\"? integral-part)", {"integral-part", NULL}},
    {"value", "object | array | string | number | boolean | null",
     {"object", "array", "string", "number", "boolean", "null", NULL}},
    {"object",
     "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? space "
     "\"}\"",
     {"string", "value", NULL}},
    {"array", "\"[\" space ( value (\",\" space value)* )? space \"]\"", {"value", NULL}},
    {"uuid",
     "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} "
     "\"-\" [0-9a-fA-F]{12} \"\\\"\"",
     {NULL}},
    {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})", {NULL}},
    {"string", "\"\\\"\" char* \"\\\"\"", {"char", NULL}},
    {"null", "\"null\"", {NULL}},
    {"date",
     "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \"3\" "
     "[0-1] )",
     {NULL}},
    {"time",
     "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? ( "
     "\"Z\" | ( \"+\" | \"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
     {NULL}},
    {"date-time", "date \"T\" time", {"date", "time", NULL}},
    {"date-string", "\"\\\"\" date \"\\\"\"", {"date", NULL}},
    {"time-string", "\"\\\"\" time \"\\\"\"", {"time", NULL}},
    {"date-time-string", "\"\\\"\" date-time \"\\\"\"", {"date-time", NULL}},
};

const js_builtin *js_builtin_find(const char *name)
{
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (strcmp(builtins[i].name, name) == 0)
            return &builtins[i];
    return NULL;
}

int js_is_reserved(const char *name)
{
    return strcmp(name, "root") == 0 || js_builtin_find(name) != NULL;
}

char *js_add_primitive(js_ctx *c, const char *name, const char *builtin)
{
    const js_builtin *r = js_builtin_find(builtin);
    char *n = js_add_rule(c, name, r->body);
    for (size_t i = 0; n && r->deps[i]; i++)
        if (!js_rule_get(c, r->deps[i]))
            js_add_primitive(c, r->deps[i], r->deps[i]);
    return c->st == MVM_OK ? n : NULL;
}

/* ---- the entry --------------------------------------------------------------------------- */

static int cmp_rule(const void *a, const void *b)
{
    return strcmp(((const js_rule *)a)->name, ((const js_rule *)b)->name);
}

/* The rules in their names' byte order (llama.cpp's std::map), "name ::= body" a line. */
static char *grammar_text(js_ctx *c)
{
    js_rule *r = (js_rule *)js_alloc(c, (c->n_rules ? c->n_rules : 1) * sizeof *r);
    char *out = r ? (char *)malloc(c->out_bytes + 1) : NULL;
    if (!out) {
        if (r)
            js_nomem(c);
        return NULL;
    }
    size_t n = 0, w = 0;
    for (size_t i = 0; i < c->cap_rules; i++)
        if (c->rules[i].name)
            r[n++] = c->rules[i];
    qsort(r, n, sizeof *r, cmp_rule);
    for (size_t i = 0; i < n; i++)
        w += (size_t)snprintf(out + w, c->out_bytes + 1 - w, "%s ::= %s\n", r[i].name,
                              r[i].body);
    return out;
}

static void convert(js_ctx *c, const char *schema, size_t len, char **gbnf)
{
    cJSON *root = js_parse(c, schema, len);
    if (!root)
        return;
    c->root = root;
    rule_put(c, "space", "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}");
    const js_path top = {NULL, "#", 0};
    if (js_visit(c, root, "", &top, 0))
        *gbnf = grammar_text(c);
    cJSON_Delete(root);
}

mvm_status mvm_json_schema_to_grammar(const char *schema, size_t len, char **gbnf)
{
    if (!gbnf)
        return mvm_fail(MVM_ERR_INVALID, "json_schema: no place for the grammar");
    *gbnf = NULL;
    if (!schema && len)
        return mvm_fail(MVM_ERR_INVALID, "json_schema: no schema text");
    if (len > JS_MAX_INPUT)
        return mvm_fail(MVM_ERR_INVALID, "json_schema: the schema has %zu bytes, over %u MiB",
                        len, JS_MAX_INPUT >> 20);
    js_ctx c;
    memset(&c, 0, sizeof c);
    c.text = schema ? schema : "";
    convert(&c, c.text, len, gbnf);
    while (c.arena) {
        js_chunk *next = c.arena->next;
        free(c.arena);
        c.arena = next;
    }
    if (c.st != MVM_OK) {
        free(*gbnf);
        *gbnf = NULL;
        return c.st;
    }
    if (!*gbnf)
        return mvm_fail(MVM_ERR_NOMEM, "json_schema: out of memory");
    /* what llama.cpp's converter writes and its parser then refuses (repetitions nested
     * past its limits, left recursion from a pattern like (a*)*) is refused here, so that
     * a schema converts to a grammar that parses, or fails saying why */
    gr_rules check;
    mvm_status st = gr_parse(*gbnf, &check);
    gr_rules_free(&check);
    if (st != MVM_OK) {
        free(*gbnf);
        *gbnf = NULL;
        return st == MVM_ERR_NOMEM ? st : mvm_fail_prefix(st, "json_schema: its grammar");
    }
    return MVM_OK;
}
