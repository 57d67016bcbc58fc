/*
 * Python's str methods that templates call: strip/lstrip/rstrip, split (on a separator or
 * on whitespace), splitlines, startswith/endswith (a string or a tuple), replace, the case
 * methods, find/rfind/index/rindex/count, join. Positions are code points, as Python's.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/chat/jinja_impl.h"

enum {
    SM_STRIP, SM_LSTRIP, SM_RSTRIP, SM_SPLIT, SM_SPLITLINES, SM_STARTSWITH, SM_ENDSWITH,
    SM_REPLACE, SM_UPPER, SM_LOWER, SM_TITLE, SM_CAPITALIZE, SM_FIND, SM_RFIND, SM_INDEX,
    SM_RINDEX, SM_COUNT, SM_JOIN, SM_FORMAT, SM_COUNT_,
};
static const char *const NAMES[SM_COUNT_] = {
    "strip", "lstrip", "rstrip", "split", "splitlines", "startswith", "endswith", "replace",
    "upper", "lower", "title", "capitalize", "find", "rfind", "index", "rindex", "count", "join",
    "format"};

int mvm_jinja_str_method_id(const char *name)
{
    for (int i = 0; i < SM_COUNT_; i++)
        if (strcmp(name, NAMES[i]) == 0)
            return i;
    return -1;
}

/* Whether cp is one of chars' code points (chars NULL: whitespace). */
static int in_set(const jstr *chars, uint32_t cp)
{
    if (!chars)
        return mvm_jinja_isspace(cp);
    for (size_t at = 0; at < chars->len;) {
        uint32_t c;
        at += mvm_jinja_utf8_next(chars->s + at, chars->len - at, &c);
        if (c == cp)
            return 1;
    }
    return 0;
}

/* The start of the code point that ends at s[end] (s[lo..end) holds one). */
static size_t prev_cp(const char *s, size_t lo, size_t end)
{
    size_t b = end - 1;
    while (b > lo && ((unsigned char)s[b] & 0xC0) == 0x80 && end - b < 4)
        b--;
    uint32_t cp;
    return mvm_jinja_utf8_next(s + b, end - b, &cp) == end - b ? b : end - 1;
}

mvm_status mvm_jinja_strip(jx *st, jstr *s, const jstr *chars, int how, jv *out)
{
    size_t lo = 0, hi = s->len;
    while ((how & 1) && lo < hi) {
        uint32_t cp;
        size_t len = mvm_jinja_utf8_next(s->s + lo, hi - lo, &cp);
        if (!in_set(chars, cp))
            break;
        lo += len;
    }
    while ((how & 2) && hi > lo) {
        size_t b = prev_cp(s->s, lo, hi);
        uint32_t cp;
        mvm_jinja_utf8_next(s->s + b, hi - b, &cp);
        if (!in_set(chars, cp))
            break;
        hi = b;
    }
    if (lo == 0 && hi == s->len) {
        *out = jv_ref(jv_of_str(s));
        return MVM_OK;
    }
    return jx_strv(st, s->s + lo, hi - lo, out);
}

mvm_status mvm_jinja_replace(jx *st, jstr *s, const jstr *old, const jstr *new_, int64_t count,
                             jv *out)
{
    jbuf b = {0};
    mvm_status rc = jbuf_put(st, &b, "", 0);
    size_t at = 0;
    if (old->len == 0) { /* new before every code point and at the end */
        for (; rc == MVM_OK && count != 0 && at <= s->len; count--) {
            rc = jbuf_put(st, &b, new_->s, new_->len);
            if (at == s->len || rc != MVM_OK) {
                at = s->len + 1;
                break;
            }
            uint32_t cp;
            size_t len = mvm_jinja_utf8_next(s->s + at, s->len - at, &cp);
            rc = jbuf_put(st, &b, s->s + at, len);
            at += len;
        }
        if (rc == MVM_OK && at < s->len)
            rc = jbuf_put(st, &b, s->s + at, s->len - at);
    } else {
        while (rc == MVM_OK && count != 0) {
            const char *hit = memmem(s->s + at, s->len - at, old->s, old->len);
            if (!hit)
                break;
            rc = jbuf_put(st, &b, s->s + at, (size_t)(hit - s->s) - at);
            if (rc == MVM_OK)
                rc = jbuf_put(st, &b, new_->s, new_->len);
            at = (size_t)(hit - s->s) + old->len;
            count--;
        }
        if (rc == MVM_OK)
            rc = jbuf_put(st, &b, s->s + at, s->len - at);
    }
    return jbuf_finish(st, &b, rc, out);
}

static mvm_status push_str(jx *st, jlist *l, const char *s, size_t n)
{
    jv v;
    mvm_status rc = jx_strv(st, s, n, &v);
    return rc == MVM_OK ? jlist_push(st, l, v) : rc;
}

/* s.split(sep, maxsplit); sep NULL splits on runs of whitespace, as Python does. */
static mvm_status split_(jx *st, const jstr *s, const jstr *sep, int64_t maxsplit, jv *out)
{
    if (sep && sep->len == 0)
        return jx_fail(st, MVM_ERR_INVALID, "empty separator");
    jlist *l = jlist_new(JL_LIST, 0);
    if (!l)
        return jx_nomem();
    *out = jv_of_list(l);
    mvm_status rc = MVM_OK;
    size_t at = 0, n = s->len;
    if (sep) {
        for (; maxsplit != 0 && rc == MVM_OK; maxsplit--) {
            const char *hit = memmem(s->s + at, n - at, sep->s, sep->len);
            if (!hit)
                break;
            rc = push_str(st, l, s->s + at, (size_t)(hit - s->s) - at);
            at = (size_t)(hit - s->s) + sep->len;
        }
        return rc == MVM_OK ? push_str(st, l, s->s + at, n - at) : rc;
    }
    uint32_t cp;
    size_t len;
#define SPACE_AT(i) ((len = mvm_jinja_utf8_next(s->s + (i), n - (i), &cp)), mvm_jinja_isspace(cp))
    for (; maxsplit != 0 && rc == MVM_OK; maxsplit--) {
        while (at < n && SPACE_AT(at))
            at += len;
        if (at == n)
            return rc;
        size_t j = at;
        while (at < n && !SPACE_AT(at))
            at += len;
        rc = push_str(st, l, s->s + j, at - j);
    }
    while (rc == MVM_OK && at < n && SPACE_AT(at))
        at += len;
#undef SPACE_AT
    return rc == MVM_OK && at < n ? push_str(st, l, s->s + at, n - at) : rc;
}

/* str.splitlines: \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029 end lines. */
static mvm_status splitlines_(jx *st, const jstr *s, int keepends, jv *out)
{
    jlist *l = jlist_new(JL_LIST, 0);
    if (!l)
        return jx_nomem();
    *out = jv_of_list(l);
    mvm_status rc = MVM_OK;
    size_t start = 0;
    for (size_t at = 0; rc == MVM_OK && at < s->len;) {
        uint32_t cp;
        size_t len = mvm_jinja_utf8_next(s->s + at, s->len - at, &cp);
        int eol = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) ||
                  cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (!eol) {
            at += len;
            continue;
        }
        size_t end = at + len + (cp == '\r' && at + 1 < s->len && s->s[at + 1] == '\n');
        rc = push_str(st, l, s->s + start, (keepends ? end : at) - start);
        at = start = end;
    }
    return rc == MVM_OK && start < s->len ? push_str(st, l, s->s + start, s->len - start) : rc;
}

/* The list split_/splitlines_ made is released when they fail. */
static mvm_status split(jx *st, const jstr *s, const jstr *sep, int64_t maxsplit, jv *out)
{
    *out = jv_none();
    mvm_status rc = split_(st, s, sep, maxsplit, out);
    if (rc != MVM_OK) {
        jv_drop(*out);
        *out = jv_none();
    }
    return rc;
}

static mvm_status splitlines(jx *st, const jstr *s, int keepends, jv *out)
{
    *out = jv_none();
    mvm_status rc = splitlines_(st, s, keepends, out);
    if (rc != MVM_OK) {
        jv_drop(*out);
        *out = jv_none();
    }
    return rc;
}

/* [start, end) of s in bytes from optional code point bounds, as a slice takes them. */
static mvm_status span(jx *st, const jstr *s, const jargs *a, size_t first, size_t *lo, size_t *hi)
{
    int64_t b[2] = {0, (int64_t)s->ncp}, n = (int64_t)s->ncp;
    for (size_t k = 0; k < 2 && first + k < a->npos; k++) {
        jv v = a->pos[first + k];
        if (v.t == JV_NONE)
            continue;
        if (!jv_as_int(v, &b[k]))
            return jx_fail(st, MVM_ERR_INVALID, "slice indices must be integers or None");
        if (b[k] < 0)
            b[k] = b[k] + n < 0 ? 0 : b[k] + n;
        if (b[k] > n)
            b[k] = n;
    }
    *lo = mvm_jinja_cp_offset(s, (size_t)b[0]);
    *hi = b[1] < b[0] ? *lo : mvm_jinja_cp_offset(s, (size_t)b[1]);
    return MVM_OK;
}

static mvm_status affix(jx *st, int id, const jstr *s, const jargs *a, jv *out)
{
    size_t lo, hi;
    mvm_status rc = span(st, s, a, 1, &lo, &hi);
    if (rc != MVM_OK)
        return rc;
    jv p = a->pos[0];
    const jv *opts = &p;
    size_t nopt = 1;
    if (p.t == JV_LIST && p.u.l->kind == JL_TUPLE)
        opts = p.u.l->v, nopt = p.u.l->n;
    int hit = 0;
    for (size_t i = 0; i < nopt && !hit; i++) {
        if (opts[i].t != JV_STR)
            return jx_fail(st, MVM_ERR_INVALID, "%s first arg must be str or a tuple of str, not %s",
                           NAMES[id], jv_type_name(opts[i]));
        const jstr *x = opts[i].u.s;
        hit = x->len <= hi - lo &&
              memcmp(s->s + (id == SM_STARTSWITH ? lo : hi - x->len), x->s, x->len) == 0;
    }
    *out = jv_bool(hit);
    return MVM_OK;
}

static mvm_status find(jx *st, int id, const jstr *s, const jargs *a, jv *out)
{
    if (a->pos[0].t != JV_STR)
        return jx_fail(st, MVM_ERR_INVALID, "must be str, not %s", jv_type_name(a->pos[0]));
    const jstr *sub = a->pos[0].u.s;
    size_t lo, hi;
    mvm_status rc = span(st, s, a, 1, &lo, &hi);
    if (rc != MVM_OK)
        return rc;
    if (id == SM_COUNT) {
        int64_t n = 0;
        if (!sub->len) {
            *out = jv_int((int64_t)mvm_jinja_utf8_count(s->s + lo, hi - lo) + 1);
            return MVM_OK;
        }
        for (const char *p = s->s + lo; (p = memmem(p, (size_t)(s->s + hi - p), sub->s, sub->len));
             p += sub->len)
            n++;
        *out = jv_int(n);
        return MVM_OK;
    }
    int64_t at = -1;
    int last = id == SM_RFIND || id == SM_RINDEX;
    if (!sub->len)
        at = (int64_t)(last ? hi : lo);
    for (const char *p = s->s + lo; sub->len && sub->len <= (size_t)(s->s + hi - p);) {
        const char *h = memmem(p, (size_t)(s->s + hi - p), sub->s, sub->len);
        if (!h)
            break;
        at = h - s->s;
        if (!last)
            break;
        p = h + 1;
    }
    if (at < 0 && (id == SM_INDEX || id == SM_RINDEX))
        return jx_fail(st, MVM_ERR_INVALID, "substring not found");
    *out = jv_int(at < 0 ? -1 : (int64_t)mvm_jinja_utf8_count(s->s, (size_t)at));
    return MVM_OK;
}

static mvm_status join(jx *st, const jstr *sep, jv items, jv *out)
{
    jlist *l;
    mvm_status rc = jx_iter(st, items, &l);
    if (rc != MVM_OK)
        return rc;
    jbuf b = {0};
    rc = jbuf_put(st, &b, "", 0);
    for (size_t i = 0; rc == MVM_OK && i < l->n; i++) {
        if (l->v[i].t != JV_STR)
            rc = jx_fail(st, MVM_ERR_INVALID, "sequence item %zu: expected str instance, %s found",
                         i, jv_type_name(l->v[i]));
        if (rc == MVM_OK && i)
            rc = jbuf_put(st, &b, sep->s, sep->len);
        if (rc == MVM_OK)
            rc = jbuf_put(st, &b, l->v[i].u.s->s, l->v[i].u.s->len);
    }
    jv_drop(jv_of_list(l));
    return jbuf_finish(st, &b, rc, out);
}

static mvm_status case_of(jx *st, int id, const jstr *s, jv *out)
{
    static const int how[] = {JCASE_UPPER, JCASE_LOWER, JCASE_TITLE, JCASE_CAPITALIZE};
    return mvm_jinja_case_value(st, s->s, s->len, how[id - SM_UPPER], out);
}

/* The arguments' count against [lo, hi], and strings where a method wants them. */
static mvm_status arity(jx *st, int id, const jargs *a, size_t lo, size_t hi)
{
    if (a->npos < lo || a->npos > hi)
        return jx_fail(st, MVM_ERR_INVALID, "str.%s() takes %zu to %zu arguments (%zu given)",
                       NAMES[id], lo, hi, a->npos);
    return MVM_OK;
}

mvm_status mvm_jinja_str_method(jx *st, int id, jstr *s, const jargs *a, jv *out)
{
    static const char *const split_names[] = {"sep", "maxsplit"};
    jv sv[2] = {jv_none(), jv_int(-1)};
    uint32_t given;
    int64_t n = -1;
    mvm_status rc = MVM_OK;
    if (a->nkw && id != SM_SPLIT && id != SM_SPLITLINES)
        return jx_fail(st, MVM_ERR_INVALID, "str.%s() takes no keyword arguments", NAMES[id]);
    switch (id) {
    case SM_STRIP: case SM_LSTRIP: case SM_RSTRIP:
        if ((rc = arity(st, id, a, 0, 1)) != MVM_OK)
            return rc;
        if (a->npos && a->pos[0].t != JV_NONE && a->pos[0].t != JV_STR)
            return jx_fail(st, MVM_ERR_INVALID, "%s arg must be None or str", NAMES[id]);
        return mvm_jinja_strip(st, s, a->npos && a->pos[0].t == JV_STR ? a->pos[0].u.s : NULL,
                               id == SM_STRIP ? 3 : id == SM_LSTRIP ? 1 : 2, out);
    case SM_SPLIT:
        rc = mvm_jinja_bind(st, "split", a, split_names, 2, sv, &given);
        if (rc == MVM_OK && sv[0].t != JV_NONE && sv[0].t != JV_STR)
            rc = jx_fail(st, MVM_ERR_INVALID, "must be str or None, not %s", jv_type_name(sv[0]));
        if (rc == MVM_OK && !jv_as_int(sv[1], &n))
            rc = jx_fail(st, MVM_ERR_INVALID, "maxsplit must be an integer");
        return rc == MVM_OK ? split(st, s, sv[0].t == JV_STR ? sv[0].u.s : NULL, n < 0 ? -1 : n, out)
                            : rc;
    case SM_SPLITLINES: {
        static const char *const keep[] = {"keepends"};
        jv k = jv_bool(0);
        rc = mvm_jinja_bind(st, "splitlines", a, keep, 1, &k, &given);
        return rc == MVM_OK ? splitlines(st, s, jv_truthy(k), out) : rc;
    }
    case SM_STARTSWITH: case SM_ENDSWITH:
        return (rc = arity(st, id, a, 1, 3)) == MVM_OK ? affix(st, id, s, a, out) : rc;
    case SM_REPLACE:
        if ((rc = arity(st, id, a, 2, 3)) != MVM_OK)
            return rc;
        if (a->pos[0].t != JV_STR || a->pos[1].t != JV_STR ||
            (a->npos == 3 && !jv_as_int(a->pos[2], &n)))
            return jx_fail(st, MVM_ERR_INVALID, "replace() takes two strings and a count");
        return mvm_jinja_replace(st, s, a->pos[0].u.s, a->pos[1].u.s, n, out);
    case SM_UPPER: case SM_LOWER: case SM_TITLE: case SM_CAPITALIZE:
        return (rc = arity(st, id, a, 0, 0)) == MVM_OK ? case_of(st, id, s, out) : rc;
    case SM_FIND: case SM_RFIND: case SM_INDEX: case SM_RINDEX: case SM_COUNT:
        return (rc = arity(st, id, a, 1, 3)) == MVM_OK ? find(st, id, s, a, out) : rc;
    case SM_JOIN:
        return (rc = arity(st, id, a, 1, 1)) == MVM_OK ? join(st, s, a->pos[0], out) : rc;
    default:
        return jx_fail(st, MVM_ERR_INVALID, "str.format is not supported");
    }
}
