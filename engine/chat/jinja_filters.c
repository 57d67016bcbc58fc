/*
 * The filters on single values, as jinja2's filters.py (and Hugging Face's tojson, which is
 * json.dumps: no HTML escaping, ensure_ascii off); the ones over sequences are in
 * jinja_seq.c. A filter jinja2 has but this subset does not fails when it runs, so that a
 * template naming one in a branch it never takes still renders.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat/jinja_impl.h"

enum {
    JFF_ABS, JFF_CAPITALIZE, JFF_DEFAULT, JFF_ESCAPE, JFF_FLOAT, JFF_INDENT, JFF_INT, JFF_LOWER,
    JFF_REPLACE, JFF_ROUND, JFF_SAFE, JFF_STRING, JFF_TITLE, JFF_TOJSON, JFF_TRIM, JFF_UPPER,
    JFF_WORDCOUNT, JFF_CENTER, JFF_ATTR, JFF_UNSUPPORTED,
};

static const struct { const char *name; int id; } FILTERS[] = {
    {"abs", JFF_ABS}, {"capitalize", JFF_CAPITALIZE}, {"d", JFF_DEFAULT},
    {"default", JFF_DEFAULT}, {"e", JFF_ESCAPE}, {"escape", JFF_ESCAPE}, {"float", JFF_FLOAT},
    {"indent", JFF_INDENT}, {"int", JFF_INT}, {"lower", JFF_LOWER}, {"replace", JFF_REPLACE},
    {"round", JFF_ROUND}, {"safe", JFF_SAFE}, {"string", JFF_STRING}, {"title", JFF_TITLE},
    {"tojson", JFF_TOJSON}, {"trim", JFF_TRIM}, {"upper", JFF_UPPER},
    {"wordcount", JFF_WORDCOUNT}, {"center", JFF_CENTER}, {"attr", JFF_ATTR},
    {"count", JFS_LENGTH}, {"length", JFS_LENGTH}, {"first", JFS_FIRST}, {"last", JFS_LAST},
    {"list", JFS_LIST}, {"join", JFS_JOIN}, {"reverse", JFS_REVERSE}, {"sort", JFS_SORT},
    {"unique", JFS_UNIQUE}, {"map", JFS_MAP}, {"select", JFS_SELECT}, {"reject", JFS_REJECT},
    {"selectattr", JFS_SELECTATTR}, {"rejectattr", JFS_REJECTATTR}, {"items", JFS_ITEMS},
    {"dictsort", JFS_DICTSORT}, {"sum", JFS_SUM}, {"min", JFS_MIN}, {"max", JFS_MAX},
    /* jinja2's, not here: a render that reaches one fails */
    {"batch", JFF_UNSUPPORTED}, {"slice", JFF_UNSUPPORTED}, {"groupby", JFF_UNSUPPORTED},
    {"format", JFF_UNSUPPORTED}, {"random", JFF_UNSUPPORTED}, {"pprint", JFF_UNSUPPORTED},
    {"striptags", JFF_UNSUPPORTED}, {"truncate", JFF_UNSUPPORTED},
    {"urlencode", JFF_UNSUPPORTED}, {"urlize", JFF_UNSUPPORTED}, {"wordwrap", JFF_UNSUPPORTED},
    {"xmlattr", JFF_UNSUPPORTED}, {"filesizeformat", JFF_UNSUPPORTED},
    {"forceescape", JFF_UNSUPPORTED},
};
#define NFILTERS (sizeof FILTERS / sizeof *FILTERS)

int mvm_jinja_filter_id(const char *name)
{
    for (size_t i = 0; i < NFILTERS; i++)
        if (strcmp(name, FILTERS[i].name) == 0)
            return (int)i;
    return -1;
}

/* soft_str: a string as it is, anything else as str() makes it. */
static mvm_status soft_str(jx *st, jv v, jv *out) { return jx_to_str(st, v, out); }

static mvm_status escape(jx *st, jv v, jv *out)
{
    if (v.t == JV_STR && v.u.s->markup) {
        *out = jv_ref(v);
        return MVM_OK;
    }
    jv s;
    mvm_status rc = soft_str(st, v, &s);
    if (rc != MVM_OK)
        return rc;
    jbuf b = {0};
    rc = jbuf_put(st, &b, "", 0);
    size_t run = 0;
    const jstr *t = s.u.s;
    for (size_t i = 0; rc == MVM_OK && i <= t->len; i++) {
        const char *rep = i == t->len ? "" : t->s[i] == '&' ? "&amp;" : t->s[i] == '<' ? "&lt;"
                                         : t->s[i] == '>' ? "&gt;" : t->s[i] == '"' ? "&#34;"
                                         : t->s[i] == '\'' ? "&#39;" : NULL;
        if (!rep) {
            run++;
            continue;
        }
        rc = jbuf_put(st, &b, t->s + i - run, run);
        run = 0;
        if (rc == MVM_OK)
            rc = jbuf_puts(st, &b, rep);
    }
    jv_drop(s);
    rc = jbuf_finish(st, &b, rc, out);
    if (rc == MVM_OK)
        out->u.s->markup = 1;
    return rc;
}

static mvm_status case_filter(jx *st, jv v, int how, jv *out)
{
    jv s;
    mvm_status rc = soft_str(st, v, &s);
    if (rc != MVM_OK)
        return rc;
    rc = mvm_jinja_case_value(st, s.u.s->s, s.u.s->len, how, out);
    jv_drop(s);
    return rc;
}

/* Python's float(str): whitespace around, a sign, digits with single '_' between them, a
 * fraction and an exponent, or inf/infinity/nan in any case. 0 when it is not one. */
static int parse_float(const char *s, double *out)
{
    char buf[128];
    size_t k = 0;
    while (*s == ' ' || (*s >= '\t' && *s <= '\r'))
        s++;
    const char *end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || (end[-1] >= '\t' && end[-1] <= '\r')))
        end--;
    if (end == s || end - s >= (long)sizeof buf)
        return 0;
    for (const char *p = s; p < end; p++) {
        if (*p == '_') {
            int ok = p > s && p + 1 < end && p[-1] >= '0' && p[-1] <= '9' && p[1] >= '0' && p[1] <= '9';
            if (!ok)
                return 0;
            continue;
        }
        if (!strchr("0123456789+-.eEinfatyINFATY", *p))
            return 0;
        buf[k++] = *p;
    }
    buf[k] = 0;
    const char *b = buf + (buf[0] == '+' || buf[0] == '-');
    if ((*b < '0' || *b > '9') && *b != '.') {
        if (strcasecmp(b, "inf") && strcasecmp(b, "infinity") && strcasecmp(b, "nan"))
            return 0;
    } else if (strpbrk(buf, "xXpP")) {
        return 0;
    }
    char *stop;
    *out = strtod(buf, &stop);
    return *stop == 0 && (b[0] != '.' || (b[1] >= '0' && b[1] <= '9'));
}

/* Python's int(str, 10): whitespace around, a sign, digits with single '_' between. */
static int parse_int(const char *s, int64_t *out, int *overflow)
{
    while (*s == ' ' || (*s >= '\t' && *s <= '\r'))
        s++;
    int neg = *s == '-';
    s += *s == '-' || *s == '+';
    if (*s < '0' || *s > '9')
        return 0;
    uint64_t v = 0;
    *overflow = 0;
    for (; (*s >= '0' && *s <= '9') || (*s == '_' && s[1] >= '0' && s[1] <= '9'); s++) {
        if (*s == '_')
            continue;
        if (v > (UINT64_MAX - 9) / 10)
            *overflow = 1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    while (*s == ' ' || (*s >= '\t' && *s <= '\r'))
        s++;
    if (*s)
        return 0;
    *overflow |= v > (uint64_t)INT64_MAX + neg;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

static mvm_status to_number(jx *st, jv v, int want_int, jv deflt, jv *out)
{
    if (v.t == JV_UNDEF)
        return jx_undef_err(st, v);
    double f;
    int64_t i;
    int of = 0;
    if (want_int && v.t == JV_STR && parse_int(v.u.s->s, &i, &of) && !of) {
        *out = jv_int(i);
        return MVM_OK;
    }
    int ok = jv_is_num(v) ? (f = jv_num(v), 1) : v.t == JV_STR && parse_float(v.u.s->s, &f);
    if (ok && want_int && (v.t == JV_INT || v.t == JV_BOOL)) {
        *out = jv_int(v.u.i);
        return MVM_OK;
    }
    if (ok && want_int && isinf(f))
        return jx_fail(st, MVM_ERR_INVALID, "cannot convert float infinity to integer");
    if (ok && want_int && !isnan(f) && fabs(f) >= 9223372036854775808.0)
        return jx_fail(st, MVM_ERR_INVALID, "integer overflow (64-bit integers only)");
    if (!ok || (want_int && isnan(f)))
        *out = jv_ref(deflt);
    else
        *out = want_int ? jv_int((int64_t)f) : jv_float(f);
    return MVM_OK;
}

static mvm_status indent(jx *st, jv v, jv width, jv first, jv blank, jv *out)
{
    if (v.t != JV_STR)
        return v.t == JV_UNDEF ? jx_undef_err(st, v)
                               : jx_fail(st, MVM_ERR_INVALID, "indent() of a %s", jv_type_name(v));
    jv ind;
    int64_t w = 0;
    mvm_status rc = width.t == JV_STR ? (ind = jv_ref(width), MVM_OK)
                    : jv_as_int(width, &w) ? MVM_OK
                                           : jx_fail(st, MVM_ERR_INVALID, "indent width must be an int or str");
    if (rc == MVM_OK && width.t != JV_STR) {
        jbuf sp = {0};
        rc = jbuf_put(st, &sp, "", 0);
        for (int64_t k = 0; rc == MVM_OK && k < w; k++)
            rc = jbuf_put(st, &sp, " ", 1);
        rc = jbuf_finish(st, &sp, rc, &ind);
    }
    if (rc != MVM_OK)
        return rc;
    jv lines;
    jargs none = {0};
    int splitlines = mvm_jinja_str_method_id("splitlines");
    jv withnl;
    jv nl = jv_none();
    rc = jx_strv(st, "\n", 1, &nl);
    if (rc == MVM_OK)
        rc = mvm_jinja_binop(st, JOP_ADD, v, nl, &withnl); /* s += "\n": the quirk splitlines needs */
    jv_drop(nl);
    if (rc == MVM_OK) {
        rc = mvm_jinja_str_method(st, splitlines, withnl.u.s, &none, &lines);
        jv_drop(withnl);
    }
    jbuf b = {0};
    if (rc == MVM_OK) {
        if (jv_truthy(first))
            rc = jbuf_put(st, &b, ind.u.s->s, ind.u.s->len);
        const jlist *l = lines.u.l;
        for (size_t i = 0; rc == MVM_OK && i < l->n; i++) {
            const jstr *line = l->v[i].u.s;
            if (i)
                rc = jbuf_put(st, &b, "\n", 1);
            if (rc == MVM_OK && i && (line->len || jv_truthy(blank)))
                rc = jbuf_put(st, &b, ind.u.s->s, ind.u.s->len);
            if (rc == MVM_OK)
                rc = jbuf_put(st, &b, line->s, line->len);
        }
        if (rc == MVM_OK)
            rc = jbuf_put(st, &b, "", 0);
        jv_drop(lines);
    }
    jv_drop(ind);
    return jbuf_finish(st, &b, rc, out);
}

static mvm_status do_round(jx *st, jv v, jv prec, const char *m, jv *out)
{
    int64_t p;
    if (!jv_as_int(prec, &p))
        return jx_fail(st, MVM_ERR_INVALID, "round() precision must be an integer");
    if (strcmp(m, "common") && strcmp(m, "ceil") && strcmp(m, "floor"))
        return jx_fail(st, MVM_ERR_INVALID, "method must be common, ceil or floor");
    if (!jv_is_num(v))
        return v.t == JV_UNDEF ? jx_undef_err(st, v)
                               : jx_fail(st, MVM_ERR_INVALID, "type %s doesn't define __round__",
                                         jv_type_name(v));
    double x = jv_num(v);
    if (strcmp(m, "common") != 0) { /* math.floor/ceil(value * 10**p) / 10**p: a float */
        double scale = pow(10.0, (double)p), y = x * scale;
        double r = m[0] == 'c' ? ceil(y) : floor(y);
        *out = jv_float((r == 0 ? 0.0 : r) / scale); /* math.ceil gives an int: no -0 */
        return MVM_OK;
    }
    if (v.t != JV_FLOAT && p >= 0) { /* round(int, n) is the int */
        *out = jv_int(v.u.i);
        return MVM_OK;
    }
    if (p >= 0 && p < 300 && isfinite(x)) {
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)p, x); /* correctly rounded, ties to even */
        *out = jv_float(strtod(buf, NULL));
    } else {
        double scale = pow(10.0, (double)-p);
        *out = p >= 0 ? jv_float(x) : jv_float(nearbyint(x / scale) * scale);
    }
    if (v.t != JV_FLOAT)
        *out = jv_int((int64_t)out->u.f);
    return MVM_OK;
}

static mvm_status tojson(jx *st, jv v, const jv *a, uint32_t given, jv *out)
{
    jjson_opts o = {.item_sep = ", ", .key_sep = ": ", .ascii = jv_truthy(a[0]),
                    .sort_keys = jv_truthy(a[3])};
    char spaces[256];
    int64_t w;
    if ((given & 2) && a[1].t != JV_NONE) {
        if (a[1].t == JV_STR) {
            o.indent = a[1].u.s->s;
        } else if (jv_as_int(a[1], &w)) {
            w = w < 0 ? 0 : w > 255 ? 255 : w;
            memset(spaces, ' ', (size_t)w);
            spaces[w] = 0;
            o.indent = spaces;
        } else {
            return jx_fail(st, MVM_ERR_INVALID, "tojson indent must be an int or str");
        }
        o.item_sep = ",";
    }
    if ((given & 4) && a[2].t != JV_NONE) {
        const jlist *s = a[2].t == JV_LIST ? a[2].u.l : NULL;
        if (!s || s->n != 2 || s->v[0].t != JV_STR || s->v[1].t != JV_STR)
            return jx_fail(st, MVM_ERR_INVALID, "tojson separators must be two strings");
        o.item_sep = s->v[0].u.s->s, o.key_sep = s->v[1].u.s->s;
    }
    jbuf b = {0};
    mvm_status rc = jbuf_put(st, &b, "", 0);
    if (rc == MVM_OK)
        rc = mvm_jinja_write_json(st, &b, v, &o);
    return jbuf_finish(st, &b, rc, out);
}

static mvm_status center(jx *st, jv v, jv width, jv *out)
{
    int64_t w;
    jv s;
    if (!jv_as_int(width, &w))
        return jx_fail(st, MVM_ERR_INVALID, "center() width must be an integer");
    mvm_status rc = soft_str(st, v, &s);
    if (rc != MVM_OK)
        return rc;
    int64_t n = (int64_t)s.u.s->ncp, marg = w - n;
    if (marg <= 0) {
        *out = s;
        return MVM_OK;
    }
    int64_t left = marg / 2 + (marg & w & 1);
    jbuf b = {0};
    rc = jbuf_put(st, &b, "", 0);
    for (int64_t i = 0; rc == MVM_OK && i < marg; i++) {
        if (i == left)
            rc = jbuf_put(st, &b, s.u.s->s, s.u.s->len);
        if (rc == MVM_OK)
            rc = jbuf_put(st, &b, " ", 1);
    }
    if (rc == MVM_OK && left == marg)
        rc = jbuf_put(st, &b, s.u.s->s, s.u.s->len);
    jv_drop(s);
    return jbuf_finish(st, &b, rc, out);
}

static mvm_status wordcount(jx *st, jv v, jv *out)
{
    jv s;
    mvm_status rc = soft_str(st, v, &s);
    if (rc != MVM_OK)
        return rc;
    int64_t words = 0;
    int in = 0;
    for (size_t at = 0; at < s.u.s->len;) {
        uint32_t cp;
        at += mvm_jinja_utf8_next(s.u.s->s + at, s.u.s->len - at, &cp);
        int w = mvm_jinja_isword(cp);
        words += w && !in;
        in = w;
    }
    jv_drop(s);
    *out = jv_int(words);
    return MVM_OK;
}

/* The filter's parameters (jinja2's signatures, less the value). */
static const char *const *params(int id, size_t *n)
{
    static const char *const p_default[] = {"default_value", "boolean"};
    static const char *const p_number[] = {"default"};
    static const char *const p_int[] = {"default", "base"};
    static const char *const p_indent[] = {"width", "first", "blank"};
    static const char *const p_replace[] = {"old", "new", "count"};
    static const char *const p_round[] = {"precision", "method"};
    static const char *const p_tojson[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    static const char *const p_trim[] = {"chars"};
    static const char *const p_center[] = {"width"};
    static const char *const p_attr[] = {"name"};
    switch (id) {
    case JFF_DEFAULT: *n = 2; return p_default;
    case JFF_FLOAT: *n = 1; return p_number;
    case JFF_INT: *n = 2; return p_int;
    case JFF_INDENT: *n = 3; return p_indent;
    case JFF_REPLACE: *n = 3; return p_replace;
    case JFF_ROUND: *n = 2; return p_round;
    case JFF_TOJSON: *n = 4; return p_tojson;
    case JFF_TRIM: *n = 1; return p_trim;
    case JFF_CENTER: *n = 1; return p_center;
    case JFF_ATTR: *n = 1; return p_attr;
    default: *n = 0; return NULL;
    }
}

static mvm_status replace_filter(jx *st, jv v, const jv *a, uint32_t given, jv *out)
{
    int64_t count = -1;
    jv s, old, nw;
    if ((given & 3) != 3)
        return jx_fail(st, MVM_ERR_INVALID, "replace() takes the old and the new string");
    if ((given & 4) && a[2].t != JV_NONE && !jv_as_int(a[2], &count))
        return jx_fail(st, MVM_ERR_INVALID, "replace() count must be an integer");
    mvm_status rc = soft_str(st, v, &s);
    if (rc != MVM_OK)
        return rc;
    if ((rc = soft_str(st, a[0], &old)) == MVM_OK) {
        if ((rc = soft_str(st, a[1], &nw)) == MVM_OK) {
            rc = mvm_jinja_replace(st, s.u.s, old.u.s, nw.u.s, count, out);
            jv_drop(nw);
        }
        jv_drop(old);
    }
    jv_drop(s);
    return rc;
}

/* attr: attributes only, never items (a dict's are its methods). */
static mvm_status attr_filter(jx *st, jv v, const jv *a, uint32_t given, jv *out)
{
    if (!(given & 1) || a[0].t != JV_STR)
        return jx_fail(st, MVM_ERR_INVALID, "attr() takes an attribute name");
    if (v.t == JV_UNDEF)
        return jx_undef_err(st, v);
    if (v.t == JV_NS || v.t == JV_LOOP)
        return mvm_jinja_getitem(st, v, a[0], out);
    int mid = mvm_jinja_method_id(v, a[0].u.s->s);
    if (mid > JF_UNSAFE)
        return jx_funcv(mid, jv_ref(v), out);
    *out = jv_hint(mid == JF_UNSAFE ? JU_UNSAFE : JU_ATTR, v.t, NULL);
    return MVM_OK;
}

static mvm_status scalar(jx *st, int id, jv v, const jv *a, uint32_t given, jv *out)
{
    jv s;
    mvm_status rc;
    switch (id) {
    case JFF_ABS:
        if (v.t == JV_FLOAT)
            *out = jv_float(fabs(v.u.f));
        else if ((v.t == JV_INT || v.t == JV_BOOL) && v.u.i != INT64_MIN)
            *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        else
            return jx_fail(st, MVM_ERR_INVALID, "bad operand type for abs(): '%s'", jv_type_name(v));
        return MVM_OK;
    case JFF_CAPITALIZE: return case_filter(st, v, JCASE_CAPITALIZE, out);
    case JFF_LOWER: return case_filter(st, v, JCASE_LOWER, out);
    case JFF_UPPER: return case_filter(st, v, JCASE_UPPER, out);
    case JFF_TITLE: return case_filter(st, v, JCASE_TITLE_WORDS, out);
    case JFF_DEFAULT:
        if (v.t == JV_UNDEF || ((given & 2) && jv_truthy(a[1]) && !jv_truthy(v))) {
            if (given & 1)
                *out = jv_ref(a[0]);
            else
                return jx_strv(st, "", 0, out);
        } else {
            *out = jv_ref(v);
        }
        return MVM_OK;
    case JFF_ESCAPE: return escape(st, v, out);
    case JFF_FLOAT: return to_number(st, v, 0, given & 1 ? a[0] : jv_float(0), out);
    case JFF_INT:
        if ((given & 2) && !(a[1].t == JV_INT && a[1].u.i == 10))
            return jx_fail(st, MVM_ERR_INVALID, "int() with a base other than 10 is not supported");
        return to_number(st, v, 1, given & 1 ? a[0] : jv_int(0), out);
    case JFF_INDENT:
        return indent(st, v, given & 1 ? a[0] : jv_int(4), a[1], a[2], out);
    case JFF_REPLACE: return replace_filter(st, v, a, given, out);
    case JFF_ROUND:
        if ((given & 2) && a[1].t != JV_STR)
            return jx_fail(st, MVM_ERR_INVALID, "method must be common, ceil or floor");
        return do_round(st, v, given & 1 ? a[0] : jv_int(0), given & 2 ? a[1].u.s->s : "common",
                        out);
    case JFF_SAFE:
        if ((rc = soft_str(st, v, &s)) != MVM_OK)
            return rc;
        rc = jx_strv(st, s.u.s->s, s.u.s->len, out);
        jv_drop(s);
        if (rc == MVM_OK)
            out->u.s->markup = 1;
        return rc;
    case JFF_STRING: return soft_str(st, v, out);
    case JFF_TOJSON: return tojson(st, v, a, given, out);
    case JFF_TRIM:
        if ((given & 1) && a[0].t != JV_NONE && a[0].t != JV_STR)
            return jx_fail(st, MVM_ERR_INVALID, "strip arg must be None or str");
        if ((rc = soft_str(st, v, &s)) != MVM_OK)
            return rc;
        rc = mvm_jinja_strip(st, s.u.s, (given & 1) && a[0].t == JV_STR ? a[0].u.s : NULL, 3, out);
        jv_drop(s);
        return rc;
    case JFF_WORDCOUNT: return wordcount(st, v, out);
    case JFF_CENTER: return center(st, v, given & 1 ? a[0] : jv_int(80), out);
    case JFF_ATTR: return attr_filter(st, v, a, given, out);
    default: return jx_fail(st, MVM_ERR_INVALID, "this filter is not supported");
    }
}

mvm_status mvm_jinja_filter(jx *st, int id, jv v, const jargs *a, jv *out)
{
    if (id < 0 || (size_t)id >= NFILTERS)
        return jx_fail(st, MVM_ERR_INVALID, "no such filter");
    int fid = FILTERS[id].id;
    if (fid >= JFS_FIRST)
        return mvm_jinja_seq_filter(st, fid, v, a, out);
    if (fid == JFF_UNSUPPORTED)
        return jx_fail(st, MVM_ERR_INVALID, "the filter '%s' is not supported", FILTERS[id].name);
    size_t n;
    const char *const *names = params(fid, &n);
    jv vals[4] = {jv_none(), jv_none(), jv_none(), jv_none()};
    uint32_t given = 0;
    mvm_status rc = mvm_jinja_bind(st, FILTERS[id].name, a, names, n, vals, &given);
    if (rc != MVM_OK)
        return rc;
    *out = jv_none();
    return scalar(st, fid, v, vals, given, out);
}
