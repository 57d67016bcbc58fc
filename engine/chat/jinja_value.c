/*
 * Values: strings, lists, dicts, namespaces and functions with their references; Python's
 * truthiness, equality, order and hashing over them (1 == 1.0 == True, also as dict keys);
 * iteration and len() as jinja2 sees them (undefined iterates as empty and has length 0).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat/jinja_impl.h"

mvm_status mvm_jinja_fail(jx *st, mvm_status s, const char *fmt, ...)
{
    char where[48];
    snprintf(where, sizeof where, "template line %d", st->line);
    va_list ap;
    va_start(ap, fmt);
    mvm_failv(s, where, fmt, ap);
    va_end(ap);
    return s;
}

mvm_status mvm_jinja_nomem(void) { return mvm_fail(MVM_ERR_NOMEM, "template: out of memory"); }

/* ---- strings and buffers -------------------------------------------------------------------- */

jstr *mvm_jinja_str_new(const char *s, size_t len)
{
    jstr *str = malloc(sizeof *str + len + 1);
    if (!str)
        return NULL;
    str->h.rc = 1;
    str->h.depth = 0;
    str->markup = 0;
    str->len = len;
    if (len)
        memcpy(str->s, s, len);
    str->s[len] = 0;
    str->ncp = mvm_jinja_utf8_count(s, len);
    return str;
}

mvm_status mvm_jinja_str_value(jx *st, const char *s, size_t len, jv *out)
{
    if (len > JX_MAX_BYTES)
        return jx_fail(st, MVM_ERR_RANGE, "a string of over %u bytes", JX_MAX_BYTES);
    jstr *str = jstr_new(s, len);
    if (!str)
        return jx_nomem();
    *out = jv_of_str(str);
    return MVM_OK;
}

mvm_status mvm_jinja_buf_put(jx *st, jbuf *b, const char *s, size_t n)
{
    if (n > JX_MAX_BYTES - b->n)
        return jx_fail(st, MVM_ERR_RANGE, "the output is over %u bytes", JX_MAX_BYTES);
    if (n >= 256 && mvm_jinja_charge(st, n >> 8) != MVM_OK)
        return MVM_ERR_RANGE;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return jx_nomem();
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return MVM_OK;
}

mvm_status mvm_jinja_buf_value(jx *st, jbuf *b, jv *out)
{
    mvm_status rc = jx_strv(st, b->p ? b->p : "", b->n, out);
    free(b->p);
    memset(b, 0, sizeof *b);
    return rc;
}

mvm_status mvm_jinja_buf_finish(jx *st, jbuf *b, mvm_status rc, jv *out)
{
    if (rc == MVM_OK)
        return jbuf_value(st, b, out);
    free(b->p);
    return rc;
}

/* ---- containers ------------------------------------------------------------------------------- */

jlist *mvm_jinja_list_new(int kind, size_t cap)
{
    jlist *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->h.rc = 1;
    l->kind = (uint8_t)kind;
    if (cap) {
        l->v = malloc(cap * sizeof *l->v);
        if (!l->v) {
            free(l);
            return NULL;
        }
        l->cap = cap;
    }
    return l;
}

static uint32_t depth_of(jv v) { return v.t >= JV_LIST ? v.u.h->depth : 0; }

static mvm_status deeper(jx *st, jhdr *h, jv v)
{
    uint32_t d = depth_of(v) + 1;
    if (d > JX_MAX_DEPTH)
        return jx_fail(st, MVM_ERR_RANGE, "values nested deeper than %d", JX_MAX_DEPTH);
    if (d > h->depth)
        h->depth = d;
    return MVM_OK;
}

mvm_status mvm_jinja_list_push(jx *st, jlist *l, jv v)
{
    mvm_status rc = (l->n & 15) == 15 ? mvm_jinja_charge(st, 1) : MVM_OK;
    if (rc == MVM_OK)
        rc = deeper(st, &l->h, v);
    if (rc == MVM_OK && l->n == JX_MAX_ITEMS)
        rc = jx_fail(st, MVM_ERR_RANGE, "a list of over %u items", JX_MAX_ITEMS);
    if (rc == MVM_OK && l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        jv *nv = realloc(l->v, cap * sizeof *nv);
        if (nv) {
            l->v = nv;
            l->cap = cap;
        } else {
            rc = jx_nomem();
        }
    }
    if (rc != MVM_OK) {
        jv_drop(v);
        return rc;
    }
    l->v[l->n++] = v;
    return MVM_OK;
}

jdict *mvm_jinja_dict_new(void)
{
    jdict *d = calloc(1, sizeof *d);
    if (d)
        d->h.rc = 1;
    return d;
}

static mvm_status reindex(jdict *d)
{
    size_t icap = 16;
    while (icap < d->n * 2)
        icap *= 2;
    uint32_t *idx = calloc(icap, sizeof *idx);
    if (!idx)
        return jx_nomem();
    for (size_t i = 0; i < d->n; i++) {
        size_t h = (size_t)mvm_jinja_hash(d->k[i]) & (icap - 1);
        while (idx[h])
            h = (h + 1) & (icap - 1);
        idx[h] = (uint32_t)i + 1;
    }
    free(d->idx);
    d->idx = idx;
    d->icap = icap;
    return MVM_OK;
}

static int find(const jdict *d, jv k, size_t *at)
{
    if (d->idx) {
        size_t h = (size_t)mvm_jinja_hash(k) & (d->icap - 1);
        for (; d->idx[h]; h = (h + 1) & (d->icap - 1))
            if (jv_equal(d->k[d->idx[h] - 1], k)) {
                *at = d->idx[h] - 1;
                return 1;
            }
        return 0;
    }
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], k)) {
            *at = i;
            return 1;
        }
    return 0;
}

jv *mvm_jinja_dict_get(const jdict *d, jv k, int *unhashable)
{
    size_t at;
    *unhashable = !mvm_jinja_hashable(k);
    return !*unhashable && find(d, k, &at) ? &d->v[at] : NULL;
}

jv *mvm_jinja_dict_get_str(const jdict *d, const char *s, size_t len)
{
    if (d->idx) {
        jstr *k = jstr_new(s, len); /* a probe key: big dicts only */
        if (!k)
            return NULL;
        size_t at;
        int found = find(d, jv_of_str(k), &at);
        free(k);
        return found ? &d->v[at] : NULL;
    }
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s->len == len && memcmp(d->k[i].u.s->s, s, len) == 0)
            return &d->v[i];
    return NULL;
}

mvm_status mvm_jinja_dict_set(jx *st, jdict *d, jv k, jv v)
{
    mvm_status rc = MVM_OK;
    size_t at;
    if (!mvm_jinja_hashable(k))
        rc = jx_fail(st, MVM_ERR_INVALID, "unhashable type: '%s'", jv_type_name(k));
    else if (find(d, k, &at)) {
        rc = deeper(st, &d->h, v);
        if (rc == MVM_OK) {
            jv_drop(d->v[at]);
            d->v[at] = v;
            jv_drop(k);
            return MVM_OK;
        }
    } else if (d->n == JX_MAX_ITEMS) {
        rc = jx_fail(st, MVM_ERR_RANGE, "a dict of over %u items", JX_MAX_ITEMS);
    } else if ((rc = deeper(st, &d->h, v)) == MVM_OK && d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *nk = realloc(d->k, cap * sizeof *nk);
        if (nk)
            d->k = nk;
        jv *nv = nk ? realloc(d->v, cap * sizeof *nv) : NULL;
        if (nv)
            d->v = nv, d->cap = cap;
        else
            rc = jx_nomem();
    }
    if (rc != MVM_OK) {
        jv_drop(k), jv_drop(v);
        return rc;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
    if (d->n > 8 && (!d->idx || d->n * 2 > d->icap))
        return reindex(d);
    if (d->idx) {
        size_t h = (size_t)mvm_jinja_hash(k) & (d->icap - 1);
        while (d->idx[h])
            h = (h + 1) & (d->icap - 1);
        d->idx[h] = (uint32_t)d->n;
    }
    return MVM_OK;
}

jns *mvm_jinja_ns_new(jx *st)
{
    jns *ns = calloc(1, sizeof *ns);
    jdict *d = ns ? jdict_new() : NULL;
    if (!d) {
        free(ns);
        return NULL;
    }
    ns->h.rc = 1;
    ns->attrs = d;
    ns->prev = &st->live_ns;
    ns->next = st->live_ns.next;
    if (ns->next)
        ns->next->prev = ns;
    st->live_ns.next = ns;
    return ns;
}

mvm_status mvm_jinja_ns_set(jx *st, jns *ns, const char *name, jv v)
{
    jv k;
    mvm_status rc = jx_strv(st, name, strlen(name), &k);
    if (rc != MVM_OK) {
        jv_drop(v);
        return rc;
    }
    uint32_t d = depth_of(v) + 1;
    if (d > ns->h.depth)
        ns->h.depth = d > JX_MAX_DEPTH ? JX_MAX_DEPTH : d;
    return jdict_set(st, ns->attrs, k, v);
}

mvm_status mvm_jinja_func_value(int id, jv self_, jv *out)
{
    jfunc *f = calloc(1, sizeof *f);
    if (!f) {
        jv_drop(self_);
        return jx_nomem();
    }
    f->h.rc = 1;
    f->id = id;
    f->self_ = self_;
    *out = (jv){.t = JV_FUNC, .u.fn = f};
    return MVM_OK;
}

static void free_dict(jdict *d)
{
    for (size_t i = 0; i < d->n; i++)
        jv_drop(d->k[i]), jv_drop(d->v[i]);
    free(d->k), free(d->v), free(d->idx);
    free(d);
}

void mvm_jinja_drop(jv v)
{
    if (v.t < JV_STR || v.u.h->rc < 0 || --v.u.h->rc > 0)
        return;
    switch (v.t) {
    case JV_LIST:
        for (size_t i = 0; i < v.u.l->n; i++)
            jv_drop(v.u.l->v[i]);
        free(v.u.l->v);
        break;
    case JV_DICT: free_dict(v.u.d); return;
    case JV_NS:
        free_dict(v.u.ns->attrs);
        v.u.ns->prev->next = v.u.ns->next;
        if (v.u.ns->next)
            v.u.ns->next->prev = v.u.ns->prev;
        break;
    case JV_FUNC: jv_drop(v.u.fn->self_); break;
    case JV_LOOP: jv_drop(jv_of_list(v.u.lp->seq)); break;
    default: break;
    }
    free(v.u.h);
}

/* What is left holds itself through cycles: every one made immortal, then emptied, then
 * freed, so that emptying one never frees another under the walk. */
void mvm_jinja_ns_release_all(jx *st)
{
    for (jns *ns = st->live_ns.next; ns; ns = ns->next)
        ns->h.rc = -2;
    for (jns *ns = st->live_ns.next; ns; ns = ns->next) {
        free_dict(ns->attrs);
        ns->attrs = NULL;
    }
    while (st->live_ns.next) {
        jns *next = st->live_ns.next->next;
        free(st->live_ns.next);
        st->live_ns.next = next;
    }
}

/* ---- Python semantics ---------------------------------------------------------------------------- */

int mvm_jinja_truthy(jv v)
{
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.u.l->kind == JL_ITER || v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

/* Exact int-float comparison: -1, 0, 1 (2: a NaN). */
static int cmp_int_float(int64_t i, double f)
{
    if (isnan(f))
        return 2;
    if (f >= 9223372036854775808.0)
        return -1;
    if (f < -9223372036854775808.0)
        return 1;
    double fl = floor(f);
    int64_t fi = (int64_t)fl;
    if (i != fi)
        return i < fi ? -1 : 1;
    return fl == f ? 0 : -1;
}

static int num_cmp(jv a, jv b)
{
    if (a.t != JV_FLOAT && b.t != JV_FLOAT)
        return a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
    if (a.t == JV_FLOAT && b.t == JV_FLOAT)
        return isnan(a.u.f) || isnan(b.u.f) ? 2 : a.u.f < b.u.f ? -1 : a.u.f > b.u.f;
    if (a.t == JV_FLOAT) {
        int c = cmp_int_float(b.u.i, a.u.f);
        return c == 2 ? 2 : -c;
    }
    return cmp_int_float(a.u.i, b.u.f);
}

static int str_cmp(const jstr *a, const jstr *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->s, b->s, n); /* UTF-8's byte order is the code points' */
    return c ? (c < 0 ? -1 : 1) : a->len < b->len ? -1 : a->len > b->len;
}

/* Lists and tuples compare with each other only as the same kind. */
static int seq_kind(const jlist *l) { return l->kind == JL_TUPLE ? 1 : l->kind == JL_LIST ? 0 : 2; }

int mvm_jinja_equal(jv a, jv b)
{
    if (jv_is_num(a) && jv_is_num(b))
        return num_cmp(a, b) == 0;
    if (a.t != b.t)
        return 0;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a.u.s->len == b.u.s->len && memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0;
    case JV_LIST: {
        jlist *x = a.u.l, *y = b.u.l;
        if (x == y)
            return 1;
        if (seq_kind(x) != seq_kind(y) || seq_kind(x) == 2 || x->n != y->n)
            return 0;
        for (size_t i = 0; i < x->n; i++)
            if (!jv_equal(x->v[i], y->v[i]))
                return 0;
        return 1;
    }
    case JV_DICT: {
        if (a.u.d->n != b.u.d->n)
            return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            int unh;
            jv *o = jdict_get(b.u.d, a.u.d->k[i], &unh);
            if (!o || !jv_equal(a.u.d->v[i], *o))
                return 0;
        }
        return 1;
    }
    case JV_MACRO: return a.u.macro == b.u.macro;
    default: return a.u.h == b.u.h;
    }
}

static const char *const CMP_SYM[] = {"==", "!=", "<", "<=", ">", ">="};

/* c (-1, 0, 1; 2 unordered: NaN) against the comparison op. */
static int holds(int op, int c)
{
    if (c == 2)
        return op == JCMP_NE;
    switch (op) {
    case JCMP_EQ: return c == 0;
    case JCMP_NE: return c != 0;
    case JCMP_LT: return c < 0;
    case JCMP_LE: return c <= 0;
    case JCMP_GT: return c > 0;
    default: return c >= 0;
    }
}

mvm_status mvm_jinja_compare(jx *st, int op, jv a, jv b, int *res)
{
    if (op == JCMP_EQ || op == JCMP_NE) {
        *res = jv_equal(a, b) == (op == JCMP_EQ);
        return MVM_OK;
    }
    if (jv_is_num(a) && jv_is_num(b)) {
        *res = holds(op, num_cmp(a, b));
        return MVM_OK;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        *res = holds(op, str_cmp(a.u.s, b.u.s));
        return MVM_OK;
    }
    if (a.t == JV_LIST && b.t == JV_LIST && seq_kind(a.u.l) == seq_kind(b.u.l) &&
        seq_kind(a.u.l) < 2) {
        jlist *x = a.u.l, *y = b.u.l;
        size_t i = 0;
        while (i < x->n && i < y->n && jv_equal(x->v[i], y->v[i]))
            i++;
        if (i < x->n && i < y->n)
            return mvm_jinja_compare(st, op, x->v[i], y->v[i], res);
        *res = holds(op, x->n < y->n ? -1 : x->n > y->n);
        return MVM_OK;
    }
    if (a.t == JV_UNDEF)
        return jx_undef_err(st, a);
    if (b.t == JV_UNDEF)
        return jx_undef_err(st, b);
    return jx_fail(st, MVM_ERR_INVALID, "'%s' not supported between instances of '%s' and '%s'",
                   CMP_SYM[op], jv_type_name(a), jv_type_name(b));
}

mvm_status mvm_jinja_less(jx *st, jv a, jv b, int *lt)
{
    return mvm_jinja_compare(st, JCMP_LT, a, b, lt);
}

int mvm_jinja_hashable(jv v)
{
    if (v.t == JV_DICT)
        return 0;
    if (v.t != JV_LIST)
        return 1;
    if (v.u.l->kind != JL_TUPLE)
        return 0;
    for (size_t i = 0; i < v.u.l->n; i++)
        if (!mvm_jinja_hashable(v.u.l->v[i]))
            return 0;
    return 1;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

uint64_t mvm_jinja_hash(jv v)
{
    switch (v.t) {
    case JV_BOOL: case JV_INT: return mix((uint64_t)v.u.i);
    case JV_FLOAT: {
        double f = v.u.f;
        if (f == floor(f) && f >= -9.2e18 && f <= 9.2e18)
            return mix((uint64_t)(int64_t)f); /* equal to the int it equals */
        uint64_t bits;
        memcpy(&bits, &f, sizeof bits);
        return mix(bits);
    }
    case JV_STR: {
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; i < v.u.s->len; i++)
            h = (h ^ (unsigned char)v.u.s->s[i]) * 1099511628211ull;
        return h;
    }
    case JV_LIST: {
        uint64_t h = 0x345678;
        for (size_t i = 0; i < v.u.l->n; i++)
            h = mix(h ^ mvm_jinja_hash(v.u.l->v[i])) + i;
        return h;
    }
    case JV_UNDEF: case JV_NONE: return (uint64_t)v.t * 0x9E3779B97F4A7C15ull;
    case JV_MACRO: return mix((uint64_t)(uintptr_t)v.u.macro);
    default: return mix((uint64_t)(uintptr_t)v.u.h);
    }
}

const char *mvm_jinja_type_name(jv v)
{
    static const char *const lists[] = {"list", "tuple", "generator", "range", "dict_items",
                                        "dict_keys", "dict_values"};
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_MACRO: return "Macro";
    case JV_STR: return "str";
    case JV_LIST: return lists[v.u.l->kind];
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return "builtin_function_or_method";
    default: return "LoopContext";
    }
}

mvm_status mvm_jinja_iterate(jx *st, jv v, jlist **out)
{
    jlist *l = NULL;
    size_t items = v.t == JV_LIST ? v.u.l->n : v.t == JV_DICT ? v.u.d->n : v.t == JV_STR ? v.u.s->len : 0;
    mvm_status rc = mvm_jinja_charge(st, items >> 4);
    if (rc != MVM_OK)
        return rc;
    if (v.t == JV_UNDEF) {
        l = jlist_new(JL_LIST, 0);
    } else if (v.t == JV_LIST) {
        size_t from = v.u.l->kind == JL_ITER ? v.u.l->pos : 0, n = v.u.l->n - from;
        l = jlist_new(JL_LIST, n);
        for (size_t i = 0; l && i < n; i++)
            l->v[i] = jv_ref(v.u.l->v[from + i]);
        if (l) {
            l->n = n;
            l->h.depth = v.u.l->h.depth;
        }
        if (v.u.l->kind == JL_ITER)
            v.u.l->pos = v.u.l->n;
    } else if (v.t == JV_DICT) {
        l = jlist_new(JL_LIST, v.u.d->n);
        for (size_t i = 0; l && i < v.u.d->n; i++)
            l->v[i] = jv_ref(v.u.d->k[i]);
        if (l)
            l->n = v.u.d->n;
    } else if (v.t == JV_STR) {
        const jstr *s = v.u.s;
        l = jlist_new(JL_LIST, s->ncp);
        for (size_t at = 0; l && rc == MVM_OK && at < s->len;) {
            uint32_t cp;
            size_t len = mvm_jinja_utf8_next(s->s + at, s->len - at, &cp);
            jv c;
            rc = jx_strv(st, s->s + at, len, &c);
            if (rc == MVM_OK)
                l->v[l->n++] = c;
            at += len;
        }
    } else {
        return jx_fail(st, MVM_ERR_INVALID, "'%s' object is not iterable", jv_type_name(v));
    }
    if (!l)
        return jx_nomem();
    if (rc != MVM_OK) {
        jv_drop(jv_of_list(l));
        return rc;
    }
    *out = l;
    return MVM_OK;
}

mvm_status mvm_jinja_len(jx *st, jv v, size_t *n)
{
    switch (v.t) {
    case JV_UNDEF: *n = 0; return MVM_OK;
    case JV_STR: *n = v.u.s->ncp; return MVM_OK;
    case JV_DICT: *n = v.u.d->n; return MVM_OK;
    case JV_NS: break;
    case JV_LIST:
        if (v.u.l->kind != JL_ITER) {
            *n = v.u.l->n;
            return MVM_OK;
        }
        break;
    default: break;
    }
    return jx_fail(st, MVM_ERR_INVALID, "object of type '%s' has no len()", jv_type_name(v));
}
