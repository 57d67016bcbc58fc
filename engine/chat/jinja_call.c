/*
 * Calls: arguments bound as Python binds them; the globals Hugging Face's environment has
 * (range, which the sandbox caps at 100000 items; namespace; dict; raise_exception;
 * strftime_now); the methods of dicts (items, keys, values, get, copy), lists and tuples
 * (index, count) and strings (jinja_str.c); loop.* and loop.cycle.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/chat/jinja_impl.h"

mvm_status mvm_jinja_eval_args(jx *st, const jnode *n, jargs *a)
{
    memset(a, 0, sizeof *a);
    size_t total = n->nkids + n->nkw;
    if (total) {
        if (!(a->pos = malloc(total * sizeof *a->pos)))
            return jx_nomem();
        a->kwv = a->pos + n->nkids;
        a->kwn = n->kwname;
    }
    /* Positional values, then keywords, into one array; a counts each once it holds it, so
     * a failure drops exactly what was evaluated. */
    for (size_t i = 0; i < total; i++) {
        bool kw = i >= n->nkids;
        const jnode *arg = kw ? n->kw[i - n->nkids] : n->kids[i];
        mvm_status rc = jx_eval(st, arg, &a->pos[i]);
        if (rc != MVM_OK) {
            mvm_jinja_args_drop(a);
            return rc;
        }
        if (kw)
            a->nkw++;
        else
            a->npos++;
    }
    st->line = n->line;
    return MVM_OK;
}

void mvm_jinja_args_drop(jargs *a)
{
    for (size_t i = 0; i < a->npos; i++)
        jv_drop(a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++)
        jv_drop(a->kwv[i]);
    free(a->pos);
    memset(a, 0, sizeof *a);
}

mvm_status mvm_jinja_bind(jx *st, const char *fn, const jargs *a, const char *const *names,
                          size_t n, jv *vals, uint32_t *given)
{
    *given = 0;
    if (a->npos > n)
        return jx_fail(st, MVM_ERR_INVALID, "%s() takes at most %zu argument(s) (%zu given)", fn,
                       n, a->npos);
    for (size_t i = 0; i < a->npos; i++) {
        vals[i] = a->pos[i];
        *given |= 1u << i;
    }
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i = 0;
        while (i < n && strcmp(names[i], a->kwn[k]) != 0)
            i++;
        if (i == n)
            return jx_fail(st, MVM_ERR_INVALID, "%s() got an unexpected keyword argument '%s'",
                           fn, a->kwn[k]);
        if (*given & (1u << i))
            return jx_fail(st, MVM_ERR_INVALID, "%s() got multiple values for argument '%s'", fn,
                           names[i]);
        vals[i] = a->kwv[k];
        *given |= 1u << i;
    }
    return MVM_OK;
}

/* ---- globals -------------------------------------------------------------------------------- */

static mvm_status int_arg(jx *st, jv v, int64_t *out)
{
    if (jv_as_int(v, out))
        return MVM_OK;
    return jx_fail(st, MVM_ERR_INVALID, "'%s' object cannot be interpreted as an integer",
                   jv_type_name(v));
}

static mvm_status call_range(jx *st, const jargs *a, jv *out)
{
    int64_t v[3] = {0, 0, 1};
    if (a->nkw)
        return jx_fail(st, MVM_ERR_INVALID, "range() takes no keyword arguments");
    if (a->npos < 1 || a->npos > 3)
        return jx_fail(st, MVM_ERR_INVALID, "range expected 1 to 3 arguments, got %zu", a->npos);
    for (size_t i = 0; i < a->npos; i++) {
        mvm_status rc = int_arg(st, a->pos[i], &v[a->npos == 1 ? 1 : i]);
        if (rc != MVM_OK)
            return rc;
    }
    if (v[2] == 0)
        return jx_fail(st, MVM_ERR_INVALID, "range() arg 3 must not be zero");
    __int128 span = (__int128)v[1] - v[0] + v[2] + (v[2] > 0 ? -1 : 1);
    __int128 count = (v[2] > 0 ? v[1] > v[0] : v[1] < v[0]) ? span / v[2] : 0;
    if (count > JX_MAX_RANGE)
        return jx_fail(st, MVM_ERR_RANGE, "Range too big. The sandbox blocks ranges larger than "
                                          "MAX_RANGE (%d).", JX_MAX_RANGE);
    size_t n = (size_t)count;
    jlist *l = jlist_new(JL_RANGE, n);
    if (!l)
        return jx_nomem();
    for (size_t i = 0; i < n; i++)
        l->v[l->n++] = jv_int(v[0] + (int64_t)i * v[2]);
    l->r_start = v[0], l->r_stop = v[1], l->r_step = v[2];
    *out = jv_of_list(l);
    return MVM_OK;
}

/* dict(mapping, **kw) and namespace(mapping, **kw): the pairs into d. */
static mvm_status fill_dict(jx *st, const char *fn, jdict *d, const jargs *a)
{
    if (a->npos > 1)
        return jx_fail(st, MVM_ERR_INVALID, "%s expected at most 1 argument, got %zu", fn,
                       a->npos);
    mvm_status rc = MVM_OK;
    if (a->npos == 1) {
        if (a->pos[0].t != JV_DICT)
            return jx_fail(st, MVM_ERR_INVALID, "%s() of a %s (only a dict is supported)", fn,
                           jv_type_name(a->pos[0]));
        const jdict *src = a->pos[0].u.d;
        for (size_t i = 0; rc == MVM_OK && i < src->n; i++)
            rc = jdict_set(st, d, jv_ref(src->k[i]), jv_ref(src->v[i]));
    }
    for (size_t i = 0; rc == MVM_OK && i < a->nkw; i++) {
        jv k;
        rc = jx_strv(st, a->kwn[i], strlen(a->kwn[i]), &k);
        if (rc == MVM_OK)
            rc = jdict_set(st, d, k, jv_ref(a->kwv[i]));
    }
    return rc;
}

static mvm_status call_raise(jx *st, const jargs *a)
{
    if (a->npos != 1 || a->nkw)
        return jx_fail(st, MVM_ERR_INVALID, "raise_exception() takes one argument");
    jv msg;
    mvm_status rc = jx_to_str(st, a->pos[0], &msg);
    if (rc != MVM_OK)
        return rc;
    char line[512]; /* mvm_fail's size; a copy: the string may be the template's own */
    snprintf(line, sizeof line, "%s", msg.u.s->s);
    jv_drop(msg);
    for (char *c = line; *c; c++) /* one line, as every message */
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    /* an empty message (or one that starts with a NUL) must still say what failed */
    return mvm_fail(MVM_ERR_INVALID, "%s", line[0] ? line : "the template raised an exception "
                                                           "without a message");
}

static mvm_status call_strftime(jx *st, const jargs *a, jv *out)
{
    if (a->npos != 1 || a->nkw || a->pos[0].t != JV_STR)
        return jx_fail(st, MVM_ERR_INVALID, "strftime_now() takes one string");
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    const jstr *fmt = a->pos[0].u.s;
    for (size_t cap = 256; cap <= 65536; cap *= 4) {
        char *buf = malloc(cap);
        if (!buf)
            return jx_nomem();
        size_t n = strftime(buf, cap, fmt->s, &tm);
        if (n || fmt->len == 0 || cap == 65536) {
            mvm_status rc = jx_strv(st, buf, n, out);
            free(buf);
            return rc;
        }
        free(buf);
    }
    return jx_strv(st, "", 0, out);
}

/* ---- methods --------------------------------------------------------------------------------- */

int mvm_jinja_method_id(jv obj, const char *name)
{
    static const struct { const char *name; int id; } dict_m[] = {
        {"items", JF_ITEMS}, {"keys", JF_KEYS}, {"values", JF_VALUES}, {"get", JF_GET},
        {"copy", JF_COPY}, {"clear", JF_UNSAFE}, {"pop", JF_UNSAFE}, {"popitem", JF_UNSAFE},
        {"setdefault", JF_UNSAFE}, {"update", JF_UNSAFE}};
    static const struct { const char *name; int id; } list_m[] = {
        {"index", JF_INDEX}, {"count", JF_COUNT}, {"append", JF_UNSAFE}, {"reverse", JF_UNSAFE},
        {"insert", JF_UNSAFE}, {"sort", JF_UNSAFE}, {"extend", JF_UNSAFE}, {"remove", JF_UNSAFE}};
    if (obj.t == JV_DICT) {
        for (size_t i = 0; i < sizeof dict_m / sizeof *dict_m; i++)
            if (strcmp(name, dict_m[i].name) == 0)
                return dict_m[i].id;
    } else if (obj.t == JV_LIST && (obj.u.l->kind == JL_LIST || obj.u.l->kind == JL_TUPLE)) {
        size_t n = obj.u.l->kind == JL_TUPLE ? 2 : sizeof list_m / sizeof *list_m;
        for (size_t i = 0; i < n; i++)
            if (strcmp(name, list_m[i].name) == 0)
                return list_m[i].id;
    } else if (obj.t == JV_STR) {
        int id = mvm_jinja_str_method_id(name);
        if (id >= 0)
            return JF_STR + id;
    }
    return JF_NONE;
}

/* d.items(), keys(), values() as lists of their kinds. */
static mvm_status dict_view(const jdict *d, int id, jv *out)
{
    int kind = id == JF_ITEMS ? JL_ITEMS : id == JF_KEYS ? JL_KEYS : JL_VALUES;
    jlist *l = jlist_new(kind, d->n);
    if (!l)
        return jx_nomem();
    *out = jv_of_list(l);
    for (size_t i = 0; i < d->n; i++) {
        if (id != JF_ITEMS) {
            l->v[l->n++] = jv_ref(id == JF_KEYS ? d->k[i] : d->v[i]);
            continue;
        }
        jlist *pair = jlist_new(JL_TUPLE, 2);
        if (!pair) {
            jv_drop(*out);
            *out = jv_none();
            return jx_nomem();
        }
        pair->v[0] = jv_ref(d->k[i]), pair->v[1] = jv_ref(d->v[i]), pair->n = 2;
        pair->h.depth = d->h.depth;
        l->v[l->n++] = jv_of_list(pair);
    }
    l->h.depth = d->h.depth + 1;
    return MVM_OK;
}

static mvm_status dict_method(jx *st, int id, const jdict *d, const jargs *a, jv *out)
{
    if (a->nkw)
        return jx_fail(st, MVM_ERR_INVALID, "dict methods take no keyword arguments");
    if (id == JF_GET) {
        if (a->npos < 1 || a->npos > 2)
            return jx_fail(st, MVM_ERR_INVALID, "get expected 1 or 2 arguments, got %zu", a->npos);
        int unhashable;
        jv *v = jdict_get(d, a->pos[0], &unhashable);
        if (unhashable)
            return jx_fail(st, MVM_ERR_INVALID, "unhashable type: '%s'", jv_type_name(a->pos[0]));
        *out = v ? jv_ref(*v) : a->npos == 2 ? jv_ref(a->pos[1]) : jv_none();
        return MVM_OK;
    }
    if (a->npos)
        return jx_fail(st, MVM_ERR_INVALID, "this dict method takes no arguments");
    if (id != JF_COPY)
        return dict_view(d, id, out);
    jdict *c = jdict_new();
    if (!c)
        return jx_nomem();
    *out = jv_of_dict(c);
    mvm_status rc = MVM_OK;
    for (size_t i = 0; rc == MVM_OK && i < d->n; i++)
        rc = jdict_set(st, c, jv_ref(d->k[i]), jv_ref(d->v[i]));
    if (rc != MVM_OK) {
        jv_drop(*out);
        *out = jv_none();
    }
    return rc;
}

static mvm_status list_method(jx *st, int id, const jlist *l, const jargs *a, jv *out)
{
    if (a->nkw || a->npos != 1)
        return jx_fail(st, MVM_ERR_INVALID, "%s() takes exactly one argument",
                       id == JF_INDEX ? "index" : "count");
    int64_t count = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (!jv_equal(l->v[i], a->pos[0]))
            continue;
        if (id == JF_INDEX) {
            *out = jv_int((int64_t)i);
            return MVM_OK;
        }
        count++;
    }
    if (id == JF_INDEX)
        return jx_fail(st, MVM_ERR_INVALID, "x not in list");
    *out = jv_int(count);
    return MVM_OK;
}

static mvm_status call_id(jx *st, int id, jv self_, const jargs *a, jv *out)
{
    switch (id) {
    case JF_RANGE: return call_range(st, a, out);
    case JF_NAMESPACE: {
        jns *ns = jns_new(st);
        if (!ns)
            return jx_nomem();
        *out = (jv){.t = JV_NS, .u.ns = ns};
        return fill_dict(st, "namespace", ns->attrs, a);
    }
    case JF_DICT: {
        jdict *d = jdict_new();
        if (!d)
            return jx_nomem();
        *out = jv_of_dict(d);
        return fill_dict(st, "dict", d, a);
    }
    case JF_RAISE: return call_raise(st, a);
    case JF_STRFTIME: return call_strftime(st, a, out);
    case JF_CYCLE:
        if (!a->npos || a->nkw)
            return jx_fail(st, MVM_ERR_INVALID, "no items for cycling given");
        *out = jv_ref(a->pos[self_.u.lp->i % a->npos]);
        return MVM_OK;
    case JF_INDEX: case JF_COUNT: return list_method(st, id, self_.u.l, a, out);
    default:
        if (id >= JF_STR)
            return mvm_jinja_str_method(st, id - JF_STR, self_.u.s, a, out);
        return dict_method(st, id, self_.u.d, a, out);
    }
}

mvm_status mvm_jinja_call(jx *st, jv fn, const jargs *a, jv *out)
{
    *out = jv_none();
    switch (fn.t) {
    case JV_MACRO: return mvm_jinja_call_macro(st, fn.u.macro, NULL, a, out);
    case JV_FUNC: {
        mvm_status rc = call_id(st, fn.u.fn->id, fn.u.fn->self_, a, out);
        if (rc != MVM_OK)
            jv_drop(*out), *out = jv_none();
        return rc;
    }
    case JV_UNDEF: return jx_undef_err(st, fn);
    default:
        return jx_fail(st, MVM_ERR_INVALID, "'%s' object is not callable", jv_type_name(fn));
    }
}

mvm_status mvm_jinja_call_method(jx *st, jv self_, const char *name, const jargs *a, jv *out)
{
    int id = self_.t == JV_UNDEF ? JF_NONE : mvm_jinja_method_id(self_, name);
    if (id > JF_UNSAFE) {
        *out = jv_none();
        mvm_status rc = call_id(st, id, self_, a, out);
        if (rc != MVM_OK)
            jv_drop(*out), *out = jv_none();
        return rc;
    }
    jv fn;
    mvm_status rc = mvm_jinja_getattr(st, self_, name, strlen(name), &fn);
    if (rc != MVM_OK)
        return rc;
    rc = mvm_jinja_call(st, fn, a, out);
    jv_drop(fn);
    return rc;
}

mvm_status mvm_jinja_loop_attr(jx *st, jloop *lp, const char *name, jv *out)
{
    size_t i = lp->i, n = lp->seq->n;
    static const char *const ints[] = {"index", "index0", "revindex", "revindex0", "length",
                                       "depth", "depth0"};
    const int64_t vals[] = {(int64_t)i + 1, (int64_t)i, (int64_t)(n - i), (int64_t)(n - i - 1),
                            (int64_t)n, 1, 0};
    for (size_t k = 0; k < sizeof ints / sizeof *ints; k++)
        if (strcmp(name, ints[k]) == 0) {
            *out = jv_int(vals[k]);
            return MVM_OK;
        }
    if (strcmp(name, "first") == 0 || strcmp(name, "last") == 0) {
        *out = jv_bool(name[0] == 'f' ? i == 0 : i + 1 == n);
    } else if (strcmp(name, "previtem") == 0) {
        *out = i > 0 ? jv_ref(lp->seq->v[i - 1]) : jv_hint(JU_MSG, 0, "there is no previous item");
    } else if (strcmp(name, "nextitem") == 0) {
        *out = i + 1 < n ? jv_ref(lp->seq->v[i + 1]) : jv_hint(JU_MSG, 0, "there is no next item");
    } else if (strcmp(name, "cycle") == 0) {
        return jx_funcv(JF_CYCLE, jv_ref((jv){.t = JV_LOOP, .u.lp = lp}), out);
    } else {
        *out = jv_hint(JU_ATTR, JV_LOOP, NULL);
    }
    (void)st;
    return MVM_OK;
}
