/*
 * Operators and lookups with Python's semantics: arithmetic (floor division and modulo,
 * true division, ** with a negative exponent a float; an int overflow is an error, where
 * Python would grow the integer), + and * on strings and lists, `in`; and the sandbox's
 * getattr/getitem: an attribute is a method first (dict.items), then an item, a missing
 * one undefined; methods that mutate are refused as ImmutableSandboxedEnvironment does.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat/jinja_impl.h"

mvm_status mvm_jinja_undefined_error(jx *st, jv u)
{
    jv obj = {.t = u.aux}; /* only the type is known: a list is named as a list */
    const char *tn = u.aux == JV_LIST ? "list" : jv_type_name(obj);
    switch (u.sub) {
    case JU_NAME: return jx_fail(st, MVM_ERR_INVALID, "'%s' is undefined", u.u.hint);
    case JU_ATTR:
        return jx_fail(st, MVM_ERR_INVALID, "'%s object' has no attribute '%s'", tn, u.u.hint);
    case JU_ITEM: return jx_fail(st, MVM_ERR_INVALID, "'%s object' has no such element", tn);
    case JU_UNSAFE:
        return jx_fail(st, MVM_ERR_INVALID, "access to attribute '%s' of '%s' object is unsafe.",
                       u.u.hint, tn);
    case JU_MSG: return jx_fail(st, MVM_ERR_INVALID, "%s", u.u.hint);
    default: return jx_fail(st, MVM_ERR_INVALID, "an undefined value was used");
    }
}

/* ---- arithmetic -------------------------------------------------------------------------- */

static mvm_status type_error(jx *st, const char *op, jv a, jv b)
{
    return jx_fail(st, MVM_ERR_INVALID, "unsupported operand type(s) for %s: '%s' and '%s'", op,
                   jv_type_name(a), jv_type_name(b));
}

static mvm_status overflow(jx *st)
{
    return jx_fail(st, MVM_ERR_INVALID, "integer overflow (64-bit integers only)");
}

/* Python's float divmod: the floor quotient and the modulo with the divisor's sign. */
static void float_divmod(double x, double y, double *div, double *mod)
{
    double m = fmod(x, y), d = (x - m) / y;
    if (m != 0) {
        if ((y < 0) != (m < 0)) {
            m += y;
            d -= 1.0;
        }
    } else {
        m = copysign(0.0, y);
    }
    if (d != 0) {
        double fl = floor(d);
        if (d - fl > 0.5)
            fl += 1.0;
        d = fl;
    } else {
        d = copysign(0.0, x / y);
    }
    *div = d, *mod = m;
}

static mvm_status int_pow(jx *st, int64_t a, int64_t b, jv *out)
{
    if (b < 0) {
        if (a == 0)
            return jx_fail(st, MVM_ERR_INVALID, "0.0 cannot be raised to a negative power");
        *out = jv_float(pow((double)a, (double)b));
        return MVM_OK;
    }
    int64_t r = 1, base = a;
    while (b) {
        if ((b & 1) && __builtin_mul_overflow(r, base, &r))
            return overflow(st);
        b >>= 1;
        if (b && __builtin_mul_overflow(base, base, &base))
            return overflow(st);
    }
    *out = jv_int(r);
    return MVM_OK;
}

static mvm_status num_op(jx *st, int op, jv a, jv b, jv *out)
{
    int64_t x, y, r;
    if (jv_as_int(a, &x) && jv_as_int(b, &y)) {
        int of = 0;
        switch (op) {
        case JOP_ADD: of = __builtin_add_overflow(x, y, &r); break;
        case JOP_SUB: of = __builtin_sub_overflow(x, y, &r); break;
        case JOP_MUL: of = __builtin_mul_overflow(x, y, &r); break;
        case JOP_POW: return int_pow(st, x, y, out);
        case JOP_DIV:
            if (y == 0)
                return jx_fail(st, MVM_ERR_INVALID, "division by zero");
            *out = jv_float((double)x / (double)y);
            return MVM_OK;
        default:
            if (y == 0)
                return jx_fail(st, MVM_ERR_INVALID, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1)
                return op == JOP_MOD ? (*out = jv_int(0), MVM_OK) : overflow(st);
            r = op == JOP_FLOORDIV ? x / y : x % y;
            if ((x % y != 0) && ((x < 0) != (y < 0)))
                r = op == JOP_FLOORDIV ? r - 1 : r + y;
        }
        if (of)
            return overflow(st);
        *out = jv_int(r);
        return MVM_OK;
    }
    double p = jv_num(a), q = jv_num(b), d, m;
    switch (op) {
    case JOP_ADD: *out = jv_float(p + q); return MVM_OK;
    case JOP_SUB: *out = jv_float(p - q); return MVM_OK;
    case JOP_MUL: *out = jv_float(p * q); return MVM_OK;
    case JOP_POW:
        if (p == 0 && q < 0)
            return jx_fail(st, MVM_ERR_INVALID, "0.0 cannot be raised to a negative power");
        if (p < 0 && q != floor(q))
            return jx_fail(st, MVM_ERR_INVALID, "a complex result (not supported)");
        *out = jv_float(pow(p, q));
        if (isinf(out->u.f) && !isinf(p) && !isinf(q))
            return jx_fail(st, MVM_ERR_INVALID, "(34, 'Numerical result out of range')");
        return MVM_OK;
    default:
        if (q == 0)
            return jx_fail(st, MVM_ERR_INVALID, "float %s by zero",
                           op == JOP_DIV ? "division" : op == JOP_MOD ? "modulo" : "floor division");
        if (op == JOP_DIV) {
            *out = jv_float(p / q);
            return MVM_OK;
        }
        float_divmod(p, q, &d, &m);
        *out = jv_float(op == JOP_FLOORDIV ? d : m);
        return MVM_OK;
    }
}

/* s * n, the list l * n. */
static mvm_status repeat(jx *st, jv seq, int64_t n, jv *out)
{
    if (n < 0)
        n = 0;
    if (seq.t == JV_STR) {
        const jstr *s = seq.u.s;
        if (s->len && (uint64_t)n > JX_MAX_BYTES / s->len)
            return jx_fail(st, MVM_ERR_RANGE, "a string of over %u bytes", JX_MAX_BYTES);
        jbuf b = {0};
        mvm_status rc = jbuf_put(st, &b, "", 0);
        for (int64_t i = 0; rc == MVM_OK && i < n; i++)
            rc = jbuf_put(st, &b, s->s, s->len);
        return jbuf_finish(st, &b, rc, out);
    }
    const jlist *l = seq.u.l;
    if (l->n && (uint64_t)n > JX_MAX_ITEMS / l->n)
        return jx_fail(st, MVM_ERR_RANGE, "a list of over %u items", JX_MAX_ITEMS);
    if (mvm_jinja_charge(st, ((uint64_t)n * l->n) >> 4) != MVM_OK)
        return MVM_ERR_RANGE;
    jlist *r = jlist_new(l->kind, (size_t)n * l->n);
    if (!r)
        return jx_nomem();
    for (int64_t i = 0; i < n; i++)
        for (size_t k = 0; k < l->n; k++)
            r->v[r->n++] = jv_ref(l->v[k]);
    r->h.depth = l->h.depth;
    *out = jv_of_list(r);
    return MVM_OK;
}

static int plain_seq(jv v) { return v.t == JV_LIST && (v.u.l->kind == JL_LIST || v.u.l->kind == JL_TUPLE); }

/* Markup + str escapes the str (markupsafe's __add__ and __radd__). */
static mvm_status escaped(jx *st, jv v, jv *out)
{
    if (v.t == JV_STR && !v.u.s->markup) {
        static const jargs none = {0};
        return mvm_jinja_filter(st, mvm_jinja_filter_id("escape"), v, &none, out);
    }
    *out = jv_ref(v);
    return MVM_OK;
}

static mvm_status concat(jx *st, jv a, jv b, jv *out)
{
    if (a.t == JV_STR && b.t == JV_STR && (a.u.s->markup || b.u.s->markup)) {
        jv ea, eb;
        mvm_status rc = escaped(st, a, &ea);
        if (rc != MVM_OK)
            return rc;
        rc = escaped(st, b, &eb);
        if (rc == MVM_OK) {
            ea.u.s->markup = eb.u.s->markup = 0; /* both escaped: joined as they are */
            rc = concat(st, ea, eb, out);
            ea.u.s->markup = eb.u.s->markup = 1;
            jv_drop(eb);
        }
        jv_drop(ea);
        if (rc == MVM_OK)
            out->u.s->markup = 1;
        return rc;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        if (a.u.s->len + b.u.s->len > JX_MAX_BYTES)
            return jx_fail(st, MVM_ERR_RANGE, "a string of over %u bytes", JX_MAX_BYTES);
        if (mvm_jinja_charge(st, (a.u.s->len + b.u.s->len) >> 8) != MVM_OK)
            return MVM_ERR_RANGE;
        jstr *s = malloc(sizeof *s + a.u.s->len + b.u.s->len + 1);
        if (!s)
            return jx_nomem();
        s->h.rc = 1, s->h.depth = 0, s->markup = 0;
        s->len = a.u.s->len + b.u.s->len;
        s->ncp = a.u.s->ncp + b.u.s->ncp;
        memcpy(s->s, a.u.s->s, a.u.s->len);
        memcpy(s->s + a.u.s->len, b.u.s->s, b.u.s->len + 1);
        *out = jv_of_str(s);
        return MVM_OK;
    }
    const jlist *x = a.u.l, *y = b.u.l;
    if (x->n + y->n > JX_MAX_ITEMS)
        return jx_fail(st, MVM_ERR_RANGE, "a list of over %u items", JX_MAX_ITEMS);
    if (mvm_jinja_charge(st, (x->n + y->n) >> 4) != MVM_OK)
        return MVM_ERR_RANGE;
    jlist *r = jlist_new(x->kind, x->n + y->n);
    if (!r)
        return jx_nomem();
    for (size_t i = 0; i < x->n; i++)
        r->v[r->n++] = jv_ref(x->v[i]);
    for (size_t i = 0; i < y->n; i++)
        r->v[r->n++] = jv_ref(y->v[i]);
    r->h.depth = x->h.depth > y->h.depth ? x->h.depth : y->h.depth;
    *out = jv_of_list(r);
    return MVM_OK;
}

mvm_status mvm_jinja_binop(jx *st, int op, jv a, jv b, jv *out)
{
    static const char *const sym[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (a.t == JV_UNDEF)
        return jx_undef_err(st, a);
    if (b.t == JV_UNDEF)
        return jx_undef_err(st, b);
    if (jv_is_num(a) && jv_is_num(b))
        return num_op(st, op, a, b, out);
    int64_t n;
    if (op == JOP_ADD && a.t == JV_STR && b.t == JV_STR)
        return concat(st, a, b, out);
    if (op == JOP_ADD && plain_seq(a) && plain_seq(b) && a.u.l->kind == b.u.l->kind)
        return concat(st, a, b, out);
    if (op == JOP_ADD && a.t == JV_STR)
        return jx_fail(st, MVM_ERR_INVALID, "can only concatenate str (not \"%s\") to str",
                       jv_type_name(b));
    if (op == JOP_ADD && plain_seq(a) && plain_seq(b))
        return jx_fail(st, MVM_ERR_INVALID, "can only concatenate %s (not \"%s\") to %s",
                       jv_type_name(a), jv_type_name(b), jv_type_name(a));
    if (op == JOP_MUL && (a.t == JV_STR || plain_seq(a)) && jv_as_int(b, &n))
        return repeat(st, a, n, out);
    if (op == JOP_MUL && (b.t == JV_STR || plain_seq(b)) && jv_as_int(a, &n))
        return repeat(st, b, n, out);
    if (op == JOP_MOD && a.t == JV_STR)
        return jx_fail(st, MVM_ERR_INVALID, "string formatting with %% is not supported");
    return type_error(st, sym[op], a, b);
}

mvm_status mvm_jinja_contains(jx *st, jv seq, jv item, int *res)
{
    switch (seq.t) {
    case JV_UNDEF: *res = 0; return MVM_OK;
    case JV_STR:
        if (item.t != JV_STR)
            return jx_fail(st, MVM_ERR_INVALID,
                           "'in <string>' requires string as left operand, not %s",
                           jv_type_name(item));
        *res = item.u.s->len == 0 ||
               memmem(seq.u.s->s, seq.u.s->len, item.u.s->s, item.u.s->len) != NULL;
        return MVM_OK;
    case JV_DICT: {
        int unhashable;
        *res = jdict_get(seq.u.d, item, &unhashable) != NULL;
        return unhashable ? jx_fail(st, MVM_ERR_INVALID, "unhashable type: '%s'",
                                    jv_type_name(item))
                          : MVM_OK;
    }
    case JV_LIST: {
        jlist *l = seq.u.l;
        size_t i = l->kind == JL_ITER ? l->pos : 0;
        while (i < l->n && !jv_equal(l->v[i], item))
            i++;
        *res = i < l->n;
        if (l->kind == JL_ITER)
            l->pos = i < l->n ? i + 1 : l->n; /* a generator is consumed up to the match */
        return MVM_OK;
    }
    default:
        return jx_fail(st, MVM_ERR_INVALID, "argument of type '%s' is not iterable",
                       jv_type_name(seq));
    }
}

/* ---- attributes and items ------------------------------------------------------------------ */

/* obj.name: a method of obj's type first (an "unsafe" undefined for those that mutate),
 * then a dict's item or a namespace's attribute; undefined when none. A name that does not
 * outlive the render (a computed key) is left out of the undefined's message. */
static mvm_status attr(jx *st, jv obj, const char *name, size_t len, int stable, jv *out)
{
    const char *hint = stable ? name : NULL;
    if (obj.t == JV_UNDEF)
        return jx_undef_err(st, obj);
    if (obj.t == JV_LOOP)
        return mvm_jinja_loop_attr(st, obj.u.lp, name, out);
    int id = mvm_jinja_method_id(obj, name);
    if (id == JF_UNSAFE) {
        *out = jv_hint(JU_UNSAFE, obj.t, hint);
        return MVM_OK;
    }
    if (id != JF_NONE)
        return jx_funcv(id, jv_ref(obj), out);
    jv *v = obj.t == JV_DICT ? jdict_gets(obj.u.d, name, len)
            : obj.t == JV_NS ? jdict_gets(obj.u.ns->attrs, name, len)
                             : NULL;
    *out = v ? jv_ref(*v) : jv_hint(JU_ATTR, obj.t, hint);
    return MVM_OK;
}

mvm_status mvm_jinja_getattr(jx *st, jv obj, const char *name, size_t len, jv *out)
{
    return attr(st, obj, name, len, 1, out);
}

/* A subscript of a string by its code point index. */
static mvm_status str_index(jx *st, const jstr *s, int64_t i, jv *out)
{
    if (i < 0)
        i += (int64_t)s->ncp;
    if (i < 0 || (uint64_t)i >= s->ncp) {
        *out = jv_hint(JU_ITEM, JV_STR, NULL);
        return MVM_OK;
    }
    size_t at = mvm_jinja_cp_offset(s, (size_t)i);
    uint32_t cp;
    return jx_strv(st, s->s + at, mvm_jinja_utf8_next(s->s + at, s->len - at, &cp), out);
}

/* obj[key]: the item first, then (a string key) the attribute; undefined when neither. */
mvm_status mvm_jinja_getitem(jx *st, jv obj, jv key, jv *out)
{
    int64_t i;
    int unhashable;
    if (obj.t == JV_UNDEF)
        return jx_undef_err(st, obj);
    if (obj.t == JV_DICT) {
        jv *v = jdict_get(obj.u.d, key, &unhashable);
        if (v) {
            *out = jv_ref(*v);
            return MVM_OK;
        }
    } else if (obj.t == JV_LIST && obj.u.l->kind <= JL_RANGE && obj.u.l->kind != JL_ITER &&
               jv_as_int(key, &i)) {
        const jlist *l = obj.u.l;
        if (i < 0)
            i += (int64_t)l->n;
        *out = i >= 0 && (uint64_t)i < l->n ? jv_ref(l->v[i]) : jv_hint(JU_ITEM, JV_LIST, NULL);
        return MVM_OK;
    } else if (obj.t == JV_STR && jv_as_int(key, &i)) {
        return str_index(st, obj.u.s, i, out);
    }
    if (key.t == JV_STR)
        return attr(st, obj, key.u.s->s, key.u.s->len, 0, out);
    *out = jv_hint(JU_ITEM, obj.t, NULL);
    return MVM_OK;
}

/* Python's PySlice_AdjustIndices for a bound (present: b's value). */
static int64_t bound(const jv *b, int64_t len, int64_t step, int lower)
{
    int64_t v;
    if (!jv_as_int(*b, &v))
        return lower ? (step < 0 ? len - 1 : 0) : (step < 0 ? -1 : len);
    if (v < 0) {
        v += len;
        if (v < 0)
            v = step < 0 ? -1 : 0;
    } else if (v >= len) {
        v = step < 0 ? len - 1 : len;
    }
    return v;
}

mvm_status mvm_jinja_slice(jx *st, jv obj, const jv *b, jv *out)
{
    int64_t step = 1, tmp;
    if (obj.t == JV_UNDEF)
        return jx_undef_err(st, obj);
    for (int i = 0; i < 3; i++)
        if (b[i].t != JV_NONE && !jv_as_int(b[i], &tmp)) {
            *out = jv_hint(JU_ITEM, obj.t, NULL); /* a TypeError, which getitem hides */
            return MVM_OK;
        }
    if (jv_as_int(b[2], &step) && step == 0)
        return jx_fail(st, MVM_ERR_INVALID, "slice step cannot be zero");
    int is_str = obj.t == JV_STR;
    if (!is_str && !(obj.t == JV_LIST && obj.u.l->kind <= JL_RANGE && obj.u.l->kind != JL_ITER)) {
        *out = jv_hint(JU_ITEM, obj.t, NULL);
        return MVM_OK;
    }
    int64_t len = is_str ? (int64_t)obj.u.s->ncp : (int64_t)obj.u.l->n;
    int64_t lo = bound(&b[0], len, step, 1), hi = bound(&b[1], len, step, 0), n = 0;
    if (step < 0 ? hi < lo : lo < hi)
        n = step < 0 ? (lo - hi - 1) / -step + 1 : (hi - lo - 1) / step + 1;
    if (is_str) {
        const jstr *s = obj.u.s;
        if (step == 1) {
            size_t a = mvm_jinja_cp_offset(s, (size_t)lo);
            size_t z = n ? mvm_jinja_cp_offset(s, (size_t)(lo + n)) : a;
            return jx_strv(st, s->s + a, z - a, out);
        }
        jbuf buf = {0};
        mvm_status rc = jbuf_put(st, &buf, "", 0);
        for (int64_t k = 0; rc == MVM_OK && k < n; k++) {
            size_t a = mvm_jinja_cp_offset(s, (size_t)(lo + k * step));
            uint32_t cp;
            rc = jbuf_put(st, &buf, s->s + a, mvm_jinja_utf8_next(s->s + a, s->len - a, &cp));
        }
        return jbuf_finish(st, &buf, rc, out);
    }
    const jlist *l = obj.u.l;
    jlist *r = jlist_new(l->kind, (size_t)n);
    if (!r)
        return jx_nomem();
    for (int64_t k = 0; k < n; k++)
        r->v[r->n++] = jv_ref(l->v[lo + k * step]);
    r->h.depth = l->h.depth;
    if (l->kind == JL_RANGE) {
        r->r_step = l->r_step * step;
        r->r_start = l->r_start + lo * l->r_step;
        r->r_stop = l->r_start + (lo + n * step) * l->r_step;
    }
    *out = jv_of_list(r);
    return MVM_OK;
}
