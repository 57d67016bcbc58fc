/*
 * UTF-8 and the character properties Python's str methods use: whitespace (isspace), \w,
 * isprintable (for repr), and the full case mappings of upper/lower/title/capitalize with
 * lower()'s final sigma, from a table generated from Python itself (jinja_case.inc).
 * Letters, numbers and printability come from the tokenizer's Unicode tables.
 */
#include <stdlib.h>

#include "engine/chat/jinja_impl.h"
#include "engine/tokenizer/tokenizer_impl.h"

typedef struct jcase_range {
    uint32_t lo, hi;
    uint8_t stride; /* 2: every other code point (a cased pair's alternation) */
    int32_t delta;
} jcase_range;
typedef struct jcase_multi {
    uint32_t cp;
    uint32_t out[3]; /* 0-terminated when shorter */
} jcase_multi;
typedef struct jcase_span {
    uint32_t lo, hi;
} jcase_span;

#include "engine/chat/jinja_case.inc"

#define COUNT(a) (sizeof a / sizeof *a)

size_t mvm_jinja_utf8_next(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[0];
    size_t len = c < 0x80 ? 1 : c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (len == 0 || len > n) {
        *cp = TOK_CP_INVALID; /* a stray byte stands for itself: one "code point" */
        return 1;
    }
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80) {
            *cp = TOK_CP_INVALID;
            return 1;
        }
        v = v << 6 | (u[i] & 0x3F);
    }
    *cp = v;
    return len;
}

size_t mvm_jinja_utf8_put(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t mvm_jinja_utf8_count(const char *s, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        if ((unsigned char)s[i] < 0x80) {
            i++;
        } else {
            i += mvm_jinja_utf8_next(s + i, n - i, &cp);
        }
        count++;
    }
    return count;
}

size_t mvm_jinja_cp_offset(const jstr *s, size_t i)
{
    if (s->ncp == s->len)
        return i;
    size_t at = 0;
    for (size_t k = 0; k < i && at < s->len; k++) {
        uint32_t cp;
        at += mvm_jinja_utf8_next(s->s + at, s->len - at, &cp);
    }
    return at;
}

int mvm_jinja_isspace(uint32_t cp)
{
    if (cp < 0x80)
        return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
    return cp != TOK_CP_INVALID && (cp == 0x85 || tok_cp_class(cp) == TOK_SPACE);
}

int mvm_jinja_isword(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
               cp == '_';
    if (cp == TOK_CP_INVALID)
        return 0;
    enum tok_class c = tok_cp_class(cp);
    return c == TOK_LETTER || c == TOK_NUMBER;
}

/* Python prints every character but the categories C* (controls, format, surrogates, private
 * use, unassigned) and Z* (separators) other than the space: the tokenizer's "other" and
 * whitespace classes. */
int mvm_jinja_printable(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= 0x20 && cp < 0x7F;
    if (cp == TOK_CP_INVALID)
        return 0;
    enum tok_class c = tok_cp_class(cp);
    return c != TOK_OTHER && c != TOK_SPACE;
}

static int in_spans(const jcase_span *t, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < t[mid].lo)
            hi = mid;
        else if (cp > t[mid].hi)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

static int cased(uint32_t cp) { return in_spans(jcase_cased, COUNT(jcase_cased), cp); }
static int ignorable(uint32_t cp)
{
    return in_spans(jcase_ignorable, COUNT(jcase_ignorable), cp);
}

/* cp mapped by one table into out[]; returns how many code points (1..3). */
static size_t map_cp(const jcase_range *r, size_t nr, const jcase_multi *m, size_t nm,
                     uint32_t cp, uint32_t out[3])
{
    size_t lo = 0, hi = nm;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m[mid].cp == cp) {
            size_t k = 0;
            while (k < 3 && m[mid].out[k])
                out[k] = m[mid].out[k], k++;
            return k;
        }
        if (m[mid].cp < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    lo = 0, hi = nr;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo) {
            hi = mid;
        } else if (cp > r[mid].hi) {
            lo = mid + 1;
        } else {
            out[0] = (cp - r[mid].lo) % r[mid].stride ? cp : (uint32_t)((int64_t)cp + r[mid].delta);
            return 1;
        }
    }
    out[0] = cp;
    return 1;
}

#define MAP(table, cp, out)                                                                    \
    map_cp(table##_ranges, COUNT(table##_ranges), table##_multi, COUNT(table##_multi), cp, out)

/* The code points of s[from..to), decoded once (case mapping looks around each sigma). */
typedef struct cps {
    uint32_t *cp;
    size_t *at; /* byte offsets, at[n] = the end */
    size_t n;
} cps;

static mvm_status decode(const char *s, size_t n, cps *out)
{
    out->cp = malloc((n + 1) * sizeof *out->cp);
    out->at = malloc((n + 1) * sizeof *out->at);
    if (!out->cp || !out->at) {
        free(out->cp), free(out->at);
        return jx_nomem();
    }
    size_t k = 0;
    for (size_t i = 0; i < n; k++) {
        out->at[k] = i;
        i += mvm_jinja_utf8_next(s + i, n - i, &out->cp[k]);
    }
    out->at[k] = n;
    out->n = k;
    return MVM_OK;
}

/* CPython's handle_capital_sigma over the code points [lo, hi). */
static uint32_t sigma(const cps *c, size_t lo, size_t hi, size_t i)
{
    size_t j = i;
    while (j > lo && ignorable(c->cp[j - 1]))
        j--;
    int final = j > lo && cased(c->cp[j - 1]);
    if (final) {
        j = i + 1;
        while (j < hi && ignorable(c->cp[j]))
            j++;
        final = j == hi || !cased(c->cp[j]);
    }
    return final ? 0x3C2 : 0x3C3;
}

static mvm_status put_cps(jx *st, jbuf *b, const uint32_t *m, size_t k)
{
    char enc[12];
    size_t len = 0;
    for (size_t i = 0; i < k; i++)
        len += mvm_jinja_utf8_put(m[i], enc + len);
    return jbuf_put(st, b, enc, len);
}

/* One code point of s mapped: mode 0 upper, 1 lower (sigma in [lo, hi)), 2 title. An invalid
 * byte is copied as it is. */
static mvm_status map_one(jx *st, jbuf *b, const char *s, const cps *c, size_t i, int mode,
                          size_t lo, size_t hi)
{
    uint32_t cp = c->cp[i], m[3];
    if (cp == TOK_CP_INVALID)
        return jbuf_put(st, b, s + c->at[i], 1);
    size_t k;
    if (mode == 1 && cp == 0x3A3) {
        m[0] = sigma(c, lo, hi, i);
        k = 1;
    } else if (mode == 0) {
        k = MAP(jcase_upper, cp, m);
    } else if (mode == 1) {
        k = MAP(jcase_lower, cp, m);
    } else {
        k = MAP(jcase_title, cp, m);
    }
    return put_cps(st, b, m, k);
}

/* jinja2's title filter: re.split(r"([-\s({\[<]+)") and every piece item[0].upper() +
 * item[1:].lower(), each piece lowered on its own. */
static mvm_status title_words(jx *st, jbuf *b, const char *s, const cps *c)
{
    mvm_status rc = MVM_OK;
    for (size_t i = 0; i < c->n && rc == MVM_OK;) {
        size_t j = i;
        int sep = c->cp[i] == '-' || c->cp[i] == '(' || c->cp[i] == '{' || c->cp[i] == '[' ||
                  c->cp[i] == '<' || mvm_jinja_isspace(c->cp[i]);
        while (j < c->n) {
            uint32_t x = c->cp[j];
            int s2 = x == '-' || x == '(' || x == '{' || x == '[' || x == '<' || mvm_jinja_isspace(x);
            if (s2 != sep)
                break;
            j++;
        }
        rc = map_one(st, b, s, c, i, 0, i, j);
        for (size_t k = i + 1; k < j && rc == MVM_OK; k++)
            rc = map_one(st, b, s, c, k, 1, i + 1, j);
        i = j;
    }
    return rc;
}

mvm_status mvm_jinja_case(jx *st, jbuf *b, const char *s, size_t n, int how)
{
    int ascii = 1;
    for (size_t i = 0; i < n && ascii; i++)
        ascii = (unsigned char)s[i] < 0x80;
    if (ascii && (how == JCASE_UPPER || how == JCASE_LOWER)) {
        size_t at = b->n;
        mvm_status rc = jbuf_put(st, b, s, n);
        for (size_t i = at; rc == MVM_OK && i < b->n; i++) {
            char ch = b->p[i];
            if (how == JCASE_UPPER && ch >= 'a' && ch <= 'z')
                b->p[i] = (char)(ch - 32);
            else if (how == JCASE_LOWER && ch >= 'A' && ch <= 'Z')
                b->p[i] = (char)(ch + 32);
        }
        return rc;
    }
    cps c = {0};
    mvm_status rc = decode(s, n, &c);
    if (rc != MVM_OK)
        return rc;
    if (how == JCASE_TITLE_WORDS) {
        rc = title_words(st, b, s, &c);
    } else {
        int prev_cased = 0;
        for (size_t i = 0; i < c.n && rc == MVM_OK; i++) {
            int mode = how == JCASE_UPPER   ? 0
                       : how == JCASE_LOWER ? 1
                       : how == JCASE_TITLE ? (prev_cased ? 1 : 2)
                                            : (i == 0 ? 2 : 1);
            rc = map_one(st, b, s, &c, i, mode, 0, c.n);
            prev_cased = c.cp[i] != TOK_CP_INVALID && cased(c.cp[i]);
        }
    }
    free(c.cp), free(c.at);
    return rc;
}

mvm_status mvm_jinja_case_value(jx *st, const char *s, size_t n, int how, jv *out)
{
    jbuf b = {0};
    mvm_status rc = jbuf_put(st, &b, "", 0);
    if (rc == MVM_OK)
        rc = mvm_jinja_case(st, &b, s, n, how);
    return jbuf_finish(st, &b, rc, out);
}
