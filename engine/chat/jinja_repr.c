/*
 * Values as text, as Python writes them: str() for {{ }} and ~ (None, True, 1.0, lists and
 * dicts as their repr), repr() inside containers (strings quoted and escaped the way
 * Python chooses), floats as the shortest text that reads back the same (0.1, 1e+16), and
 * json.dumps for tojson (ensure_ascii, indent, separators, sort_keys).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat/jinja_impl.h"

size_t mvm_jinja_float_repr(double f, char *buf)
{
    if (isnan(f))
        return (size_t)sprintf(buf, "nan");
    if (isinf(f))
        return (size_t)sprintf(buf, f < 0 ? "-inf" : "inf");
    if (f == 0)
        return (size_t)sprintf(buf, signbit(f) ? "-0.0" : "0.0");
    /* The shortest of %.{p}e that reads back as f: Python's 'r' format picks those digits. */
    char e[40];
    for (int p = 0; p < 17; p++) {
        snprintf(e, sizeof e, "%.*e", p, f);
        if (strtod(e, NULL) == f)
            break;
    }
    char digits[24];
    size_t nd = 0;
    const char *q = e + (e[0] == '-');
    for (; *q && *q != 'e'; q++)
        if (*q != '.')
            digits[nd++] = *q;
    int exp10 = atoi(q + 1);
    int decpt = exp10 + 1; /* value = 0.DIGITS x 10^decpt */
    size_t k = 0;
    if (f < 0)
        buf[k++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            buf[k++] = '0', buf[k++] = '.';
            for (int i = 0; i < -decpt; i++)
                buf[k++] = '0';
            memcpy(buf + k, digits, nd), k += nd;
        } else {
            for (int i = 0; i < decpt; i++)
                buf[k++] = (size_t)i < nd ? digits[i] : '0';
            buf[k++] = '.';
            if ((size_t)decpt < nd) {
                memcpy(buf + k, digits + decpt, nd - (size_t)decpt);
                k += nd - (size_t)decpt;
            } else {
                buf[k++] = '0';
            }
        }
    } else {
        buf[k++] = digits[0];
        if (nd > 1) {
            buf[k++] = '.';
            memcpy(buf + k, digits + 1, nd - 1), k += nd - 1;
        }
        k += (size_t)sprintf(buf + k, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    buf[k] = 0;
    return k;
}

static mvm_status repr_str(jx *st, jbuf *b, const jstr *s)
{
    int has_single = memchr(s->s, '\'', s->len) != NULL;
    char quote = has_single && !memchr(s->s, '"', s->len) ? '"' : '\'';
    mvm_status rc = jbuf_put(st, b, &quote, 1);
    size_t run = 0; /* bytes copied as they are, written in one go */
    for (size_t at = 0; rc == MVM_OK && at < s->len;) {
        uint32_t cp;
        size_t len = mvm_jinja_utf8_next(s->s + at, s->len - at, &cp);
        char esc[12];
        int n = 0;
        if (cp == (uint32_t)quote || cp == '\\')
            n = sprintf(esc, "\\%c", (char)cp);
        else if (cp == '\t' || cp == '\n' || cp == '\r')
            n = sprintf(esc, "\\%c", cp == '\t' ? 't' : cp == '\n' ? 'n' : 'r');
        else if (cp > 0x10FFFF)
            n = sprintf(esc, "\\x%02x", (unsigned char)s->s[at]);
        else if (!mvm_jinja_printable(cp))
            n = sprintf(esc, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
        if (n) {
            rc = jbuf_put(st, b, s->s + at - run, run);
            run = 0;
            if (rc == MVM_OK)
                rc = jbuf_put(st, b, esc, (size_t)n);
        } else {
            run += len;
        }
        at += len;
        if (at == s->len && rc == MVM_OK)
            rc = jbuf_put(st, b, s->s + at - run, run);
    }
    return rc == MVM_OK ? jbuf_put(st, b, &quote, 1) : rc;
}

static mvm_status write_items(jx *st, jbuf *b, const jv *v, size_t n, const char *open,
                              const char *close)
{
    mvm_status rc = jbuf_puts(st, b, open);
    for (size_t i = 0; rc == MVM_OK && i < n; i++) {
        if (i)
            rc = jbuf_put(st, b, ", ", 2);
        if (rc == MVM_OK)
            rc = jx_write_repr(st, b, v[i]);
    }
    return rc == MVM_OK ? jbuf_puts(st, b, close) : rc;
}

static mvm_status write_dict(jx *st, jbuf *b, const jdict *d)
{
    mvm_status rc = jbuf_put(st, b, "{", 1);
    for (size_t i = 0; rc == MVM_OK && i < d->n; i++) {
        if (i)
            rc = jbuf_put(st, b, ", ", 2);
        if (rc == MVM_OK)
            rc = jx_write_repr(st, b, d->k[i]);
        if (rc == MVM_OK)
            rc = jbuf_put(st, b, ": ", 2);
        if (rc == MVM_OK)
            rc = jx_write_repr(st, b, d->v[i]);
    }
    return rc == MVM_OK ? jbuf_put(st, b, "}", 1) : rc;
}

static mvm_status write_list(jx *st, jbuf *b, const jlist *l)
{
    char tmp[96];
    switch (l->kind) {
    case JL_TUPLE:
        return write_items(st, b, l->v, l->n, "(", l->n == 1 ? ",)" : ")");
    case JL_ITER: return jbuf_puts(st, b, "<generator object>");
    case JL_RANGE:
        if (l->r_step == 1)
            snprintf(tmp, sizeof tmp, "range(%lld, %lld)", (long long)l->r_start,
                     (long long)l->r_stop);
        else
            snprintf(tmp, sizeof tmp, "range(%lld, %lld, %lld)", (long long)l->r_start,
                     (long long)l->r_stop, (long long)l->r_step);
        return jbuf_puts(st, b, tmp);
    case JL_ITEMS: return write_items(st, b, l->v, l->n, "dict_items([", "])");
    case JL_KEYS: return write_items(st, b, l->v, l->n, "dict_keys([", "])");
    case JL_VALUES: return write_items(st, b, l->v, l->n, "dict_values([", "])");
    default: return write_items(st, b, l->v, l->n, "[", "]");
    }
}

static mvm_status write_value(jx *st, jbuf *b, jv v, int repr)
{
    char tmp[64];
    switch (v.t) {
    case JV_UNDEF: return repr ? jbuf_puts(st, b, "Undefined") : MVM_OK;
    case JV_NONE: return jbuf_puts(st, b, "None");
    case JV_BOOL: return jbuf_puts(st, b, v.u.i ? "True" : "False");
    case JV_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i);
        return jbuf_puts(st, b, tmp);
    case JV_FLOAT: return jbuf_put(st, b, tmp, mvm_jinja_float_repr(v.u.f, tmp));
    case JV_STR: return repr ? repr_str(st, b, v.u.s) : jbuf_put(st, b, v.u.s->s, v.u.s->len);
    case JV_LIST: return write_list(st, b, v.u.l);
    case JV_DICT: return write_dict(st, b, v.u.d);
    case JV_NS: {
        if (v.u.ns->busy)
            return jbuf_puts(st, b, "<Namespace {...}>");
        v.u.ns->busy = 1;
        mvm_status rc = jbuf_puts(st, b, "<Namespace ");
        if (rc == MVM_OK)
            rc = write_dict(st, b, v.u.ns->attrs);
        v.u.ns->busy = 0;
        return rc == MVM_OK ? jbuf_puts(st, b, ">") : rc;
    }
    case JV_MACRO: {
        mvm_status rc = jbuf_puts(st, b, "<Macro ");
        if (rc == MVM_OK)
            rc = repr_str(st, b, v.u.macro->lit.u.s);
        return rc == MVM_OK ? jbuf_puts(st, b, ">") : rc;
    }
    case JV_FUNC: return jbuf_puts(st, b, "<built-in function>");
    default:
        snprintf(tmp, sizeof tmp, "<LoopContext %zu/%zu>", v.u.lp->i + 1, v.u.lp->seq->n);
        return jbuf_puts(st, b, tmp);
    }
}

mvm_status mvm_jinja_write_str(jx *st, jbuf *b, jv v) { return write_value(st, b, v, 0); }
mvm_status mvm_jinja_write_repr(jx *st, jbuf *b, jv v) { return write_value(st, b, v, 1); }

mvm_status mvm_jinja_to_str(jx *st, jv v, jv *out)
{
    if (v.t == JV_STR) {
        *out = jv_ref(v);
        return MVM_OK;
    }
    jbuf b = {0};
    mvm_status rc = write_value(st, &b, v, 0);
    return jbuf_finish(st, &b, rc, out);
}

/* ---- json.dumps ------------------------------------------------------------------------------ */

static mvm_status json_str(jx *st, jbuf *b, const char *s, size_t len, int ascii)
{
    mvm_status rc = jbuf_put(st, b, "\"", 1);
    size_t run = 0;
    for (size_t at = 0; rc == MVM_OK && at < len;) {
        uint32_t cp;
        size_t n = mvm_jinja_utf8_next(s + at, len - at, &cp);
        char esc[16];
        int k = 0;
        static const char shorts[] = "\"\"\\\\\bb\ff\nn\rr\tt";
        for (size_t i = 0; shorts[i] && !k; i += 2)
            if (cp == (unsigned char)shorts[i])
                k = sprintf(esc, "\\%c", shorts[i + 1]);
        if (!k && (cp < 0x20 || (ascii && cp >= 0x7F))) {
            if (cp > 0x10FFFF)
                cp = 0xFFFD;
            if (cp >= 0x10000)
                k = sprintf(esc, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                            0xDC00 + ((cp - 0x10000) & 0x3FF));
            else
                k = sprintf(esc, "\\u%04x", cp);
        }
        if (k) {
            rc = jbuf_put(st, b, s + at - run, run);
            run = 0;
            if (rc == MVM_OK)
                rc = jbuf_put(st, b, esc, (size_t)k);
        } else {
            run += n;
        }
        at += n;
        if (at == len && rc == MVM_OK)
            rc = jbuf_put(st, b, s + at - run, run);
    }
    return rc == MVM_OK ? jbuf_put(st, b, "\"", 1) : rc;
}

static mvm_status json_float(jx *st, jbuf *b, double f)
{
    char tmp[40];
    if (isnan(f))
        return jbuf_puts(st, b, "NaN");
    if (isinf(f))
        return jbuf_puts(st, b, f < 0 ? "-Infinity" : "Infinity");
    return jbuf_put(st, b, tmp, mvm_jinja_float_repr(f, tmp));
}

static mvm_status json_key(jx *st, jbuf *b, jv k, int ascii)
{
    char tmp[40];
    switch (k.t) {
    case JV_STR: return json_str(st, b, k.u.s->s, k.u.s->len, ascii);
    case JV_NONE: return jbuf_puts(st, b, "\"null\"");
    case JV_BOOL: return jbuf_puts(st, b, k.u.i ? "\"true\"" : "\"false\"");
    case JV_INT:
        snprintf(tmp, sizeof tmp, "\"%lld\"", (long long)k.u.i);
        return jbuf_puts(st, b, tmp);
    case JV_FLOAT: {
        jbuf t = {0};
        mvm_status rc = json_float(st, &t, k.u.f);
        if (rc == MVM_OK)
            rc = json_str(st, b, t.p, t.n, 0);
        free(t.p);
        return rc;
    }
    default:
        return jx_fail(st, MVM_ERR_INVALID, "keys must be str, int, float, bool or None, not %s",
                       jv_type_name(k));
    }
}

static mvm_status json_value(jx *st, jbuf *b, jv v, const jjson_opts *o, int level);

/* The newline and indentation before an item at `level` (nothing without indent). */
static mvm_status json_indent(jx *st, jbuf *b, const jjson_opts *o, int level)
{
    if (!o->indent)
        return MVM_OK;
    mvm_status rc = jbuf_put(st, b, "\n", 1);
    for (int i = 0; rc == MVM_OK && i < level; i++)
        rc = jbuf_puts(st, b, o->indent);
    return rc;
}

/* The order of d's keys: sorted when sort_keys (a stable insertion sort: dicts are small). */
static mvm_status key_order(jx *st, const jdict *d, const jjson_opts *o, size_t *ord)
{
    for (size_t i = 0; i < d->n; i++) {
        size_t j = i;
        while (o->sort_keys && j > 0) {
            int lt;
            mvm_status rc = jv_less(st, d->k[i], d->k[ord[j - 1]], &lt);
            if (rc != MVM_OK)
                return rc;
            if (!lt)
                break;
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = i;
    }
    return MVM_OK;
}

static mvm_status json_dict(jx *st, jbuf *b, const jdict *d, const jjson_opts *o, int level)
{
    if (d->n == 0)
        return jbuf_puts(st, b, "{}");
    size_t *ord = malloc(d->n * sizeof *ord);
    if (!ord)
        return jx_nomem();
    mvm_status rc = key_order(st, d, o, ord);
    if (rc == MVM_OK)
        rc = jbuf_put(st, b, "{", 1);
    for (size_t i = 0; rc == MVM_OK && i < d->n; i++) {
        if (i)
            rc = jbuf_puts(st, b, o->item_sep);
        if (rc == MVM_OK)
            rc = json_indent(st, b, o, level + 1);
        if (rc == MVM_OK)
            rc = json_key(st, b, d->k[ord[i]], o->ascii);
        if (rc == MVM_OK)
            rc = jbuf_puts(st, b, o->key_sep);
        if (rc == MVM_OK)
            rc = json_value(st, b, d->v[ord[i]], o, level + 1);
    }
    free(ord);
    if (rc == MVM_OK)
        rc = json_indent(st, b, o, level);
    return rc == MVM_OK ? jbuf_put(st, b, "}", 1) : rc;
}

static mvm_status json_value(jx *st, jbuf *b, jv v, const jjson_opts *o, int level)
{
    char tmp[40];
    switch (v.t) {
    case JV_NONE: return jbuf_puts(st, b, "null");
    case JV_BOOL: return jbuf_puts(st, b, v.u.i ? "true" : "false");
    case JV_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i);
        return jbuf_puts(st, b, tmp);
    case JV_FLOAT: return json_float(st, b, v.u.f);
    case JV_STR: return json_str(st, b, v.u.s->s, v.u.s->len, o->ascii);
    case JV_DICT: return json_dict(st, b, v.u.d, o, level);
    case JV_LIST:
        if (v.u.l->kind == JL_LIST || v.u.l->kind == JL_TUPLE) {
            const jlist *l = v.u.l;
            if (l->n == 0)
                return jbuf_puts(st, b, "[]");
            mvm_status rc = jbuf_put(st, b, "[", 1);
            for (size_t i = 0; rc == MVM_OK && i < l->n; i++) {
                if (i)
                    rc = jbuf_puts(st, b, o->item_sep);
                if (rc == MVM_OK)
                    rc = json_indent(st, b, o, level + 1);
                if (rc == MVM_OK)
                    rc = json_value(st, b, l->v[i], o, level + 1);
            }
            if (rc == MVM_OK)
                rc = json_indent(st, b, o, level);
            return rc == MVM_OK ? jbuf_put(st, b, "]", 1) : rc;
        }
        break;
    default: break;
    }
    return jx_fail(st, MVM_ERR_INVALID, "Object of type %s is not JSON serializable",
                   jv_type_name(v));
}

mvm_status mvm_jinja_write_json(jx *st, jbuf *b, jv v, const jjson_opts *o)
{
    return json_value(st, b, v, o, 0);
}
