/*
 * The filters over sequences, as jinja2's: the ones jinja2 writes as generators (map,
 * select, reject, selectattr, rejectattr, unique, items, reverse) give a one-pass iterator
 * here too (truthy even when empty, without a length), so that `|list` and `|length`
 * behave as they do there. Sorting is stable; case is ignored as jinja2 ignores it (a
 * string key lowered); attribute paths ("a.b.0") are looked up item by item.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/chat/jinja_impl.h"

mvm_status mvm_jinja_fold(jx *st, jv v, jv *out)
{
    if (v.t != JV_STR) {
        *out = jv_ref(v);
        return MVM_OK;
    }
    return mvm_jinja_case_value(st, v.u.s->s, v.u.s->len, JCASE_LOWER, out);
}

/* An error after *out was made: it is released, *out left holding nothing. */
static mvm_status fail_out(jv *out, mvm_status rc)
{
    jv_drop(*out);
    *out = jv_none();
    return rc;
}

/* One part of an attribute path: digits are an index, anything else a key. */
static mvm_status path_part(jx *st, const char *s, size_t n, jv *out)
{
    size_t i = 0;
    int64_t v = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9' && v < 100000000000000000)
        v = v * 10 + (s[i++] - '0');
    if (n && i == n) {
        *out = jv_int(v);
        return MVM_OK;
    }
    return jx_strv(st, s, n, out);
}

/* make_attrgetter: item looked up by each part of attr; deflt (when not NULL) replaces an
 * undefined after any part. */
static mvm_status path_default(jx *st, jv item, jv attr, const jv *deflt, jv *out)
{
    *out = jv_ref(item);
    if (attr.t == JV_NONE)
        return MVM_OK;
    const char *s = attr.t == JV_STR ? attr.u.s->s : NULL;
    size_t len = s ? attr.u.s->len : 0, at = 0;
    do {
        jv key, next;
        size_t end = at;
        while (s && end < len && s[end] != '.')
            end++;
        mvm_status rc = s ? path_part(st, s + at, end - at, &key) : (key = jv_ref(attr), MVM_OK);
        if (rc == MVM_OK) {
            rc = mvm_jinja_getitem(st, *out, key, &next);
            jv_drop(key);
        }
        jv_drop(*out);
        *out = jv_none();
        if (rc != MVM_OK)
            return rc;
        *out = next;
        if (deflt && out->t == JV_UNDEF)
            *out = jv_ref(*deflt);
        at = end + 1;
    } while (s && at <= len);
    return MVM_OK;
}

mvm_status mvm_jinja_attr_path(jx *st, jv item, jv attr, jv *out)
{
    return path_default(st, item, attr, NULL, out);
}

/* The sort key of item: [part, ...] for "a,b" (make_multi_attrgetter), strings lowered
 * unless case matters. */
static mvm_status sort_key(jx *st, jv item, jv attr, int fold, jv *out)
{
    jlist *key = jlist_new(JL_LIST, 1);
    if (!key)
        return jx_nomem();
    *out = jv_of_list(key);
    const char *s = attr.t == JV_STR ? attr.u.s->s : NULL;
    size_t len = s ? attr.u.s->len : 0, at = 0;
    do {
        size_t end = at;
        while (s && end < len && s[end] != ',')
            end++;
        jv one = jv_none(), v, f;
        mvm_status rc = s ? jx_strv(st, s + at, end - at, &one) : (one = jv_ref(attr), MVM_OK);
        if (rc == MVM_OK) {
            rc = path_default(st, item, one, NULL, &v);
            jv_drop(one);
        }
        if (rc == MVM_OK) {
            rc = fold ? mvm_jinja_fold(st, v, &f) : (f = jv_ref(v), MVM_OK);
            jv_drop(v);
        }
        if (rc == MVM_OK)
            rc = jlist_push(st, key, f);
        if (rc != MVM_OK)
            return rc;
        at = end + 1;
    } while (s && at <= len);
    return MVM_OK;
}

/* A stable merge sort of idx[0..n) by keys (reverse: descending, ties kept in order). */
static mvm_status merge_sort(jx *st, const jv *keys, size_t *idx, size_t *tmp, size_t n, int rev)
{
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int lt;
                mvm_status rc = rev ? jv_less(st, keys[idx[i]], keys[idx[j]], &lt)
                                    : jv_less(st, keys[idx[j]], keys[idx[i]], &lt);
                if (rc != MVM_OK)
                    return rc;
                tmp[k++] = lt ? idx[j++] : idx[i++];
            }
            while (i < mid)
                tmp[k++] = idx[i++];
            while (j < hi)
                tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, n * sizeof *idx);
    }
    return MVM_OK;
}

/* items sorted by keys into a new list of `kind`. */
static mvm_status sorted(jx *st, const jlist *items, const jv *keys, int rev, int kind, jv *out)
{
    size_t n = items->n;
    size_t *idx = malloc((n + 1) * 2 * sizeof *idx);
    jlist *r = idx ? jlist_new(kind, n) : NULL;
    if (!r) {
        free(idx);
        return jx_nomem();
    }
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    mvm_status rc = merge_sort(st, keys, idx, idx + n + 1, n, rev);
    for (size_t i = 0; rc == MVM_OK && i < n; i++)
        r->v[r->n++] = jv_ref(items->v[idx[i]]);
    free(idx);
    r->h.depth = items->h.depth;
    if (rc != MVM_OK) {
        jv_drop(jv_of_list(r));
        return rc;
    }
    *out = jv_of_list(r);
    return MVM_OK;
}

static mvm_status keys_of(jx *st, const jlist *items, jv attr, int fold, jv **out)
{
    jv *keys = calloc(items->n + 1, sizeof *keys);
    if (!keys)
        return jx_nomem();
    for (size_t i = 0; i < items->n; i++) {
        mvm_status rc = sort_key(st, items->v[i], attr, fold, &keys[i]);
        if (rc != MVM_OK) {
            for (size_t k = 0; k <= i; k++)
                jv_drop(keys[k]);
            free(keys);
            return rc;
        }
    }
    *out = keys;
    return MVM_OK;
}

static void keys_free(jv *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        jv_drop(keys[i]);
    free(keys);
}

static mvm_status do_sort(jx *st, const jlist *items, const jv *a, jv *out)
{
    jv *keys;
    mvm_status rc = keys_of(st, items, a[2], !jv_truthy(a[1]), &keys);
    if (rc != MVM_OK)
        return rc;
    rc = sorted(st, items, keys, jv_truthy(a[0]), JL_LIST, out);
    keys_free(keys, items->n);
    return rc;
}

static mvm_status dictsort(jx *st, jv v, const jv *a, jv *out)
{
    if (v.t == JV_UNDEF)
        return jx_undef_err(st, v);
    if (v.t != JV_DICT)
        return jx_fail(st, MVM_ERR_INVALID, "'%s' object has no attribute 'items'",
                       jv_type_name(v));
    const char *by = a[1].t == JV_STR ? a[1].u.s->s : "";
    if (strcmp(by, "key") && strcmp(by, "value"))
        return jx_fail(st, MVM_ERR_INVALID, "You can only sort by either \"key\" or \"value\"");
    jargs none = {0};
    jv items;
    mvm_status rc = mvm_jinja_call_method(st, v, "items", &none, &items);
    if (rc != MVM_OK)
        return rc;
    jv pos = jv_int(by[0] == 'k' ? 0 : 1);
    jv *keys;
    rc = keys_of(st, items.u.l, pos, !jv_truthy(a[0]), &keys);
    if (rc == MVM_OK) {
        rc = sorted(st, items.u.l, keys, jv_truthy(a[2]), JL_LIST, out);
        keys_free(keys, items.u.l->n);
    }
    jv_drop(items);
    return rc;
}

/* unique, min, max: the key of make_attrgetter (one path), folded unless case matters. */
static mvm_status single_key(jx *st, jv item, jv attr, int fold, jv *out)
{
    jv v;
    mvm_status rc = path_default(st, item, attr, NULL, &v);
    if (rc != MVM_OK || !fold) {
        *out = v;
        return rc;
    }
    rc = mvm_jinja_fold(st, v, out);
    jv_drop(v);
    return rc;
}

static mvm_status unique(jx *st, const jlist *items, const jv *a, jv *out)
{
    jlist *r = jlist_new(JL_ITER, 0);
    jdict *seen = r ? jdict_new() : NULL;
    if (!seen) {
        free(r);
        return jx_nomem();
    }
    *out = jv_of_list(r);
    mvm_status rc = MVM_OK;
    for (size_t i = 0; rc == MVM_OK && i < items->n; i++) {
        jv k;
        int unhashable;
        rc = single_key(st, items->v[i], a[1], !jv_truthy(a[0]), &k);
        if (rc != MVM_OK)
            break;
        if (jdict_get(seen, k, &unhashable) || unhashable) {
            if (unhashable)
                rc = jx_fail(st, MVM_ERR_INVALID, "unhashable type: '%s'", jv_type_name(k));
            jv_drop(k);
            continue;
        }
        rc = jdict_set(st, seen, k, jv_none());
        if (rc == MVM_OK)
            rc = jlist_push(st, r, jv_ref(items->v[i]));
    }
    jv_drop(jv_of_dict(seen));
    return rc == MVM_OK ? rc : fail_out(out, rc);
}

static mvm_status min_max(jx *st, int id, const jlist *items, const jv *a, jv *out)
{
    if (!items->n) {
        *out = jv_hint(JU_MSG, 0, "No aggregated item, sequence was empty.");
        return MVM_OK;
    }
    jv best;
    mvm_status rc = single_key(st, items->v[0], a[1], !jv_truthy(a[0]), &best);
    if (rc != MVM_OK)
        return rc;
    size_t at = 0;
    for (size_t i = 1; rc == MVM_OK && i < items->n; i++) {
        jv k;
        int better;
        if ((rc = single_key(st, items->v[i], a[1], !jv_truthy(a[0]), &k)) != MVM_OK)
            break;
        rc = mvm_jinja_compare(st, id == JFS_MIN ? JCMP_LT : JCMP_GT, k, best, &better);
        if (rc == MVM_OK && better) {
            jv_drop(best);
            best = k, at = i;
        } else {
            jv_drop(k);
        }
    }
    jv_drop(best);
    if (rc == MVM_OK)
        *out = jv_ref(items->v[at]);
    return rc;
}

/* map: the filter args[0] (with the other args) or the attribute kw "attribute" (with
 * "default") applied to every item. */
static mvm_status map(jx *st, jv v, const jargs *a, jv *out)
{
    jlist *r = jlist_new(JL_ITER, 0);
    if (!r)
        return jx_nomem();
    *out = jv_of_list(r);
    if (!jv_truthy(v))
        return MVM_OK;
    const jv *attr = NULL, *deflt = NULL;
    int fid = -1;
    for (size_t k = 0; !a->npos && k < a->nkw; k++) {
        if (strcmp(a->kwn[k], "attribute") == 0)
            attr = &a->kwv[k];
        else if (strcmp(a->kwn[k], "default") == 0)
            deflt = &a->kwv[k];
        else
            return fail_out(out, jx_fail(st, MVM_ERR_INVALID, "Unexpected keyword argument '%s'",
                                         a->kwn[k]));
    }
    if (!attr) {
        if (!a->npos)
            return fail_out(out, jx_fail(st, MVM_ERR_INVALID, "map requires a filter argument"));
        fid = a->pos[0].t == JV_STR ? mvm_jinja_filter_id(a->pos[0].u.s->s) : -1;
        if (fid < 0)
            return fail_out(out, jx_fail(st, MVM_ERR_INVALID, "No filter named '%s'",
                                         a->pos[0].t == JV_STR ? a->pos[0].u.s->s : "?"));
    }
    jlist *items;
    mvm_status rc = jx_iter(st, v, &items);
    if (rc != MVM_OK)
        return fail_out(out, rc);
    jargs rest = {a->pos + 1, a->npos ? a->npos - 1 : 0, a->kwv, a->kwn, a->nkw};
    for (size_t i = 0; rc == MVM_OK && i < items->n; i++) {
        jv m;
        rc = attr ? path_default(st, items->v[i], *attr, deflt && deflt->t != JV_NONE ? deflt : NULL, &m)
                  : mvm_jinja_filter(st, fid, items->v[i], &rest, &m);
        if (rc == MVM_OK)
            rc = jlist_push(st, r, m);
    }
    jv_drop(jv_of_list(items));
    return rc == MVM_OK ? rc : fail_out(out, rc);
}

/* select, reject, selectattr, rejectattr: [attribute,] [test, test args...]. */
static mvm_status select_items(jx *st, int id, jv v, const jargs *a, jv *out)
{
    jlist *r = jlist_new(JL_ITER, 0);
    if (!r)
        return jx_nomem();
    *out = jv_of_list(r);
    if (!jv_truthy(v))
        return MVM_OK;
    size_t off = id == JFS_SELECTATTR || id == JFS_REJECTATTR;
    if (off && !a->npos)
        return fail_out(out, jx_fail(st, MVM_ERR_INVALID, "Missing parameter for attribute name"));
    int tid = -1;
    if (a->npos > off) {
        tid = a->pos[off].t == JV_STR ? mvm_jinja_test_id(a->pos[off].u.s->s) : -1;
        if (tid < 0)
            return fail_out(out, jx_fail(st, MVM_ERR_INVALID, "No test named '%s'",
                                         a->pos[off].t == JV_STR ? a->pos[off].u.s->s : "?"));
    }
    int keep_if = id == JFS_SELECT || id == JFS_SELECTATTR;
    /* the test's own arguments; none (and no pointer arithmetic on a NULL pos) without one */
    jargs rest = {a->npos > off ? a->pos + off + 1 : NULL, a->npos > off ? a->npos - off - 1 : 0,
                  a->kwv, a->kwn, a->nkw};
    jlist *items;
    mvm_status rc = jx_iter(st, v, &items);
    if (rc != MVM_OK)
        return fail_out(out, rc);
    for (size_t i = 0; rc == MVM_OK && i < items->n; i++) {
        jv x;
        int res = 0;
        rc = off ? mvm_jinja_attr_path(st, items->v[i], a->pos[0], &x) : (x = jv_ref(items->v[i]), MVM_OK);
        if (rc != MVM_OK)
            break;
        if (tid >= 0)
            rc = mvm_jinja_test(st, tid, x, &rest, &res);
        else
            res = jv_truthy(x);
        jv_drop(x);
        if (rc == MVM_OK && res == keep_if)
            rc = jlist_push(st, r, jv_ref(items->v[i]));
    }
    jv_drop(jv_of_list(items));
    return rc == MVM_OK ? rc : fail_out(out, rc);
}

static mvm_status join(jx *st, const jlist *items, const jv *a, uint32_t given, jv *out)
{
    jv sep;
    mvm_status rc = given & 1 ? jx_to_str(st, a[0], &sep) : jx_strv(st, "", 0, &sep);
    if (rc != MVM_OK)
        return rc;
    jbuf b = {0};
    rc = jbuf_put(st, &b, "", 0);
    for (size_t i = 0; rc == MVM_OK && i < items->n; i++) {
        jv x = items->v[i];
        if (i)
            rc = jbuf_put(st, &b, sep.u.s->s, sep.u.s->len);
        if (rc == MVM_OK && a[1].t != JV_NONE) {
            rc = mvm_jinja_attr_path(st, items->v[i], a[1], &x);
            if (rc == MVM_OK) {
                rc = jx_write_str(st, &b, x);
                jv_drop(x);
            }
        } else if (rc == MVM_OK) {
            rc = jx_write_str(st, &b, x);
        }
    }
    jv_drop(sep);
    return jbuf_finish(st, &b, rc, out);
}

static mvm_status sum(jx *st, const jlist *items, const jv *a, uint32_t given, jv *out)
{
    jv acc = given & 2 ? jv_ref(a[1]) : jv_int(0);
    mvm_status rc = MVM_OK;
    for (size_t i = 0; rc == MVM_OK && i < items->n; i++) {
        jv x, next;
        rc = a[0].t != JV_NONE ? mvm_jinja_attr_path(st, items->v[i], a[0], &x)
                               : (x = jv_ref(items->v[i]), MVM_OK);
        if (rc != MVM_OK)
            break;
        rc = mvm_jinja_binop(st, JOP_ADD, acc, x, &next);
        jv_drop(x);
        if (rc == MVM_OK) {
            jv_drop(acc);
            acc = next;
        }
    }
    if (rc != MVM_OK) {
        jv_drop(acc);
        return rc;
    }
    *out = acc;
    return MVM_OK;
}

/* reverse: a string reversed; a sequence as an iterator from its end (a generator, which
 * reversed() refuses, as a list). */
static mvm_status reverse(jx *st, jv v, jv *out)
{
    if (v.t == JV_STR) {
        static const jv rev[3] = {{.t = JV_NONE}, {.t = JV_NONE}, {.t = JV_INT, .u.i = -1}};
        return mvm_jinja_slice(st, v, rev, out);
    }
    int iter = v.t == JV_LIST && v.u.l->kind == JL_ITER;
    if (v.t != JV_LIST && v.t != JV_DICT && v.t != JV_UNDEF)
        return jx_fail(st, MVM_ERR_INVALID, "argument must be iterable");
    jlist *items;
    mvm_status rc = jx_iter(st, v, &items);
    if (rc != MVM_OK)
        return rc;
    for (size_t i = 0; i < items->n / 2; i++) {
        jv t = items->v[i];
        items->v[i] = items->v[items->n - 1 - i];
        items->v[items->n - 1 - i] = t;
    }
    items->kind = iter ? JL_LIST : JL_ITER;
    *out = jv_of_list(items);
    return MVM_OK;
}

static mvm_status first_last(jx *st, int id, jv v, jv *out)
{
    if (id == JFS_LAST && v.t == JV_LIST && v.u.l->kind == JL_ITER)
        return jx_fail(st, MVM_ERR_INVALID, "'generator' object is not reversible");
    if (id == JFS_FIRST && v.t == JV_LIST && v.u.l->kind == JL_ITER) {
        jlist *l = v.u.l;
        *out = l->pos < l->n ? jv_ref(l->v[l->pos++])
                             : jv_hint(JU_MSG, 0, "No first item, sequence was empty.");
        return MVM_OK;
    }
    jlist *items;
    mvm_status rc = jx_iter(st, v, &items);
    if (rc != MVM_OK)
        return rc;
    if (items->n)
        *out = jv_ref(items->v[id == JFS_FIRST ? 0 : items->n - 1]);
    else
        *out = jv_hint(JU_MSG, 0, id == JFS_FIRST ? "No first item, sequence was empty."
                                                  : "No last item, sequence was empty.");
    jv_drop(jv_of_list(items));
    return MVM_OK;
}

static mvm_status items_of(jx *st, jv v, jv *out)
{
    if (v.t != JV_UNDEF && v.t != JV_DICT)
        return jx_fail(st, MVM_ERR_INVALID, "Can only get item pairs from a mapping.");
    if (v.t == JV_UNDEF) {
        jlist *l = jlist_new(JL_ITER, 0);
        *out = jv_of_list(l);
        return l ? MVM_OK : jx_nomem();
    }
    jargs none = {0};
    mvm_status rc = mvm_jinja_call_method(st, v, "items", &none, out);
    if (rc == MVM_OK)
        out->u.l->kind = JL_ITER;
    return rc;
}

static const char *const *seq_params(int id, size_t *n, const char **name)
{
    static const char *const p_join[] = {"d", "attribute"};
    static const char *const p_sort[] = {"reverse", "case_sensitive", "attribute"};
    static const char *const p_unique[] = {"case_sensitive", "attribute"};
    static const char *const p_dictsort[] = {"case_sensitive", "by", "reverse"};
    static const char *const p_sum[] = {"attribute", "start"};
    *n = 0;
    switch (id) {
    case JFS_JOIN: *n = 2, *name = "join"; return p_join;
    case JFS_SORT: *n = 3, *name = "sort"; return p_sort;
    case JFS_UNIQUE: *n = 2, *name = "unique"; return p_unique;
    case JFS_MIN: *n = 2, *name = "min"; return p_unique;
    case JFS_MAX: *n = 2, *name = "max"; return p_unique;
    case JFS_DICTSORT: *n = 3, *name = "dictsort"; return p_dictsort;
    case JFS_SUM: *n = 2, *name = "sum"; return p_sum;
    default: *name = "filter"; return NULL;
    }
}

mvm_status mvm_jinja_seq_filter(jx *st, int id, jv v, const jargs *a, jv *out)
{
    if (id == JFS_MAP)
        return map(st, v, a, out);
    if (id >= JFS_SELECT && id <= JFS_REJECTATTR)
        return select_items(st, id, v, a, out);
    size_t n;
    const char *name;
    const char *const *names = seq_params(id, &n, &name);
    jv vals[3] = {jv_none(), jv_none(), jv_none()};
    if (id == JFS_DICTSORT)
        vals[1] = (jv){.t = JV_UNDEF};
    uint32_t given = 0;
    mvm_status rc = mvm_jinja_bind(st, name, a, names, n, vals, &given);
    if (rc != MVM_OK)
        return rc;
    size_t len;
    switch (id) {
    case JFS_LENGTH:
        if ((rc = jx_len(st, v, &len)) == MVM_OK)
            *out = jv_int((int64_t)len);
        return rc;
    case JFS_FIRST: case JFS_LAST: return first_last(st, id, v, out);
    case JFS_REVERSE: return reverse(st, v, out);
    case JFS_ITEMS: return items_of(st, v, out);
    case JFS_DICTSORT: {
        jv by;
        if (!(given & 2) && (rc = jx_strv(st, "key", 3, &by)) == MVM_OK) {
            vals[1] = by;
            rc = dictsort(st, v, vals, out);
            jv_drop(by);
            return rc;
        }
        return rc == MVM_OK ? dictsort(st, v, vals, out) : rc;
    }
    default: break;
    }
    jlist *items;
    if ((rc = jx_iter(st, v, &items)) != MVM_OK)
        return rc;
    switch (id) {
    case JFS_LIST: *out = jv_of_list(items); return MVM_OK;
    case JFS_JOIN: rc = join(st, items, vals, given, out); break;
    case JFS_SORT: rc = do_sort(st, items, vals, out); break;
    case JFS_UNIQUE: rc = unique(st, items, vals, out); break;
    case JFS_MIN: case JFS_MAX: rc = min_max(st, id, items, vals, out); break;
    default: rc = sum(st, items, vals, given, out); break;
    }
    jv_drop(jv_of_list(items));
    return rc;
}
