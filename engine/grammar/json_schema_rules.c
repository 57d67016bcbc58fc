/*
 * The rule texts of json-schema-to-grammar.cpp that are not one schema's: build_repetition,
 * build_min_max_int, _not_strings and _pattern_to_rule, ported line for line. Mended where
 * llama.cpp's text means something else than it should:
 *   - open integer ranges (a minimum, or a maximum below 0, alone): the digits after the
 *     first that start with a zero lost it (llama.cpp accepted 100 and 15 for a minimum of
 *     105), a longer rest starting with 0 was missing after a 1 (10227276 refused for a
 *     minimum of 1139242), and a negative maximum allowed leading zeros ("-01" for -5);
 *   - a key other than the object's names: a name's ']', '\' or '^', or a '-' between two
 *     characters, written raw into a character class, ended or changed the class;
 *   - in a pattern, a quantifier after an escape or a quote applied to the whole literal
 *     before it ("ab\.+" read as ("ab.")+), and one after a multi-byte character to its last
 *     byte.
 * A pattern llama.cpp cannot convert (it falls back to any string) is refused here.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/json_schema_impl.h"

char *js_repetition(js_ctx *c, const char *item, int min, int max, const char *separator)
{
    const int has_max = max != JS_UNBOUNDED;
    if (!item)
        return NULL;
    if (max == 0)
        return js_str(c, "");
    if (min == 0 && max == 1)
        return JS_CAT(c, item, "?");
    if (!*separator) {
        if (min == 1 && !has_max)
            return JS_CAT(c, item, "+");
        if (min == 0 && !has_max)
            return JS_CAT(c, item, "*");
        return has_max ? js_fmt(c, "%s{%d,%d}", item, min, max) : js_fmt(c, "%s{%d,}", item, min);
    }
    const char *rest = js_repetition(c, JS_CAT(c, "(", separator, " ", item, ")"),
                                     min == 0 ? 0 : min - 1, has_max ? max - 1 : max, "");
    char *r = JS_CAT(c, item, " ", rest);
    return min == 0 ? JS_CAT(c, "(", r, ")?") : r;
}

/* ---- integer ranges ---------------------------------------------------------------------- */

static void digit_range(js_sb *o, char from, char to)
{
    js_sb_addf(o, from == to ? "[%c]" : "[%c-%c]", from, to);
}

static void more_digits(js_sb *o, int min, int max)
{
    js_sb_add(o, "[0-9]");
    if (min == max && min == 1)
        return;
    js_sb_addf(o, "{%d", min);
    if (max != min) {
        js_sb_add(o, ",");
        if (max != JS_UNBOUNDED)
            js_sb_addf(o, "%d", max);
    }
    js_sb_add(o, "}");
}

static void repeat_digit(char *buf, char d, size_t n)
{
    memset(buf, d, n);
    buf[n] = 0;
}

/* The numbers of from's length from `from` to `to` (digit strings of one length). */
static void uniform_range(js_sb *o, const char *from, const char *to)
{
    size_t i = 0;
    while (from[i] && to[i] && from[i] == to[i])
        i++;
    if (i > 0) {
        js_sb_add(o, "\"");
        js_sb_addn(o, from, i);
        js_sb_add(o, "\"");
    }
    if (!from[i] || !to[i])
        return;
    if (i > 0)
        js_sb_add(o, " ");
    const size_t sub_len = strlen(from) - i - 1;
    if (!sub_len) {
        js_sb_addf(o, "[%c-%c]", from[i], to[i]);
        return;
    }
    char zeros[24], nines[24];
    repeat_digit(zeros, '0', sub_len);
    repeat_digit(nines, '9', sub_len);
    int to_reached = 0;
    js_sb_add(o, "(");
    if (strcmp(from + i + 1, zeros) == 0) {
        digit_range(o, from[i], (char)(to[i] - 1));
        js_sb_add(o, " ");
        more_digits(o, (int)sub_len, (int)sub_len);
    } else {
        js_sb_addf(o, "[%c] (", from[i]);
        uniform_range(o, from + i + 1, nines);
        js_sb_add(o, ")");
        if (from[i] < to[i] - 1) {
            js_sb_add(o, " | ");
            to_reached = strcmp(to + i + 1, nines) == 0;
            digit_range(o, (char)(from[i] + 1), (char)(to_reached ? to[i] : to[i] - 1));
            js_sb_add(o, " ");
            more_digits(o, (int)sub_len, (int)sub_len);
        }
    }
    if (!to_reached) {
        js_sb_add(o, " | ");
        digit_range(o, to[i], to[i]);
        js_sb_add(o, " ");
        uniform_range(o, zeros, to + i + 1);
    }
    js_sb_add(o, ")");
}

static void min_max_int(js_sb *o, int64_t min, int64_t max, int decimals_left, int top_level);

/* From a minimum of two or more digits, no maximum. */
static void open_range(js_sb *o, int64_t min, int less, int top_level)
{
    char s[24], nines[24];
    snprintf(s, sizeof s, "%lld", (long long)min);
    const int len = (int)strlen(s);
    const char c = s[0];
    if (c > '1' || !top_level) { /* inside, a longer tail may start with 0 */
        digit_range(o, top_level ? '1' : '0', (char)(c - 1));
        js_sb_add(o, " ");
        more_digits(o, len, less);
        js_sb_add(o, " | ");
    }
    digit_range(o, c, c);
    js_sb_add(o, " (");
    if (s[1] == '0' && s[2]) { /* the rest keeps its zeros: exactly len - 1 digits, or more */
        repeat_digit(nines, '9', (size_t)len - 1);
        if (strspn(s + 1, "0") == (size_t)len - 1)
            more_digits(o, len - 1, less);
        else {
            uniform_range(o, s + 1, nines);
            if (len <= less) {
                js_sb_add(o, " | ");
                more_digits(o, len, less);
            }
        }
    } else
        min_max_int(o, strtoll(s + 1, NULL, 10), INT64_MAX, less, 0);
    js_sb_add(o, ")");
    if (c < '9') {
        js_sb_add(o, " | ");
        digit_range(o, (char)(c + 1), '9');
        js_sb_add(o, " ");
        more_digits(o, len - 1, less);
    }
}

static void min_max_int(js_sb *o, int64_t min, int64_t max, int decimals_left, int top_level)
{
    const int has_min = min != INT64_MIN, has_max = max != INT64_MAX;
    const int less = decimals_left - 1 > 1 ? decimals_left - 1 : 1;
    char min_s[24], max_s[24], nines[24];
    if (has_min && has_max) {
        if (min < 0 && max < 0) {
            js_sb_add(o, "\"-\" (");
            min_max_int(o, -max, -min, decimals_left, 1);
            js_sb_add(o, ")");
            return;
        }
        if (min < 0) {
            js_sb_add(o, "\"-\" (");
            min_max_int(o, 0, -min, decimals_left, 1);
            js_sb_add(o, ") | ");
            min = 0;
        }
        snprintf(min_s, sizeof min_s, "%lld", (long long)min);
        snprintf(max_s, sizeof max_s, "%lld", (long long)max);
        for (size_t digits = strlen(min_s); digits < strlen(max_s); digits++) {
            repeat_digit(nines, '9', digits);
            uniform_range(o, min_s, nines);
            min_s[0] = '1';
            repeat_digit(min_s + 1, '0', digits);
            js_sb_add(o, " | ");
        }
        uniform_range(o, min_s, max_s);
    } else if (has_min && min < 0) {
        js_sb_add(o, "\"-\" (");
        min_max_int(o, INT64_MIN, -min, decimals_left, 0);
        js_sb_add(o, ") | [0] | [1-9] ");
        more_digits(o, 0, decimals_left - 1);
    } else if (has_min && min == 0) {
        if (top_level) {
            js_sb_add(o, "[0] | [1-9] ");
            more_digits(o, 0, less);
        } else
            more_digits(o, 1, decimals_left);
    } else if (has_min && min <= 9) {
        const char c = (char)('0' + min), start = top_level ? '1' : '0';
        if (c > start) {
            digit_range(o, start, (char)(c - 1));
            js_sb_add(o, " ");
            more_digits(o, 1, less);
            js_sb_add(o, " | ");
        }
        digit_range(o, c, '9');
        js_sb_add(o, " ");
        more_digits(o, 0, less);
    } else if (has_min)
        open_range(o, min, less, top_level);
    else if (max >= 0) {
        if (top_level) {
            js_sb_add(o, "\"-\" [1-9] ");
            more_digits(o, 0, less);
            js_sb_add(o, " | ");
        }
        min_max_int(o, 0, max, decimals_left, 1);
    } else {
        js_sb_add(o, "\"-\" ("); /* top level: a negative's digits have no leading zero */
        min_max_int(o, -max, INT64_MAX, decimals_left, 1);
        js_sb_add(o, ")");
    }
}

char *js_int_range(js_ctx *c, int64_t min, int64_t max)
{
    js_sb o = {c, NULL, 0, 0};
    js_sb_add(&o, "(");
    min_max_int(&o, min, max, 16, 1);
    js_sb_add(&o, ")");
    return js_sb_done(&o);
}

/* ---- keys other than a set of names ------------------------------------------------------ */

static size_t utf8_lead_len(unsigned char b)
{
    return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

/* One character of a name inside a character class, escaped where it would end the class
 * (']', '\'), negate it (a first '^') or make a range (a '-' between two). */
static void class_char(js_sb *o, const char *ch, size_t len, int first, int last)
{
    if (len == 1 && (*ch == ']' || *ch == '\\'))
        js_sb_add(o, *ch == ']' ? "\\]" : "\\\\");
    else if (len == 1 && *ch == '-' && !last)
        js_sb_add(o, "\\-");
    else if (len == 1 && *ch == '^' && first)
        js_sb_add(o, "\\x5E");
    else
        js_sb_addn(o, ch, len);
}

/* A trie node: the sorted names [lo, hi) share its first d bytes; i: its next child. */
typedef struct js_trie {
    size_t lo, hi, d, i;
    int any;
    js_sb rejects;
} js_trie;

static void trie_open(js_ctx *c, js_trie *t, const char *const *names, const size_t *len,
                      size_t lo, size_t hi, size_t d)
{
    *t = (js_trie){lo, hi, d, lo, 0, {c, NULL, 0, 0}};
    for (size_t i = lo; i < hi;) {
        if (len[i] == d) {
            i++;
            continue;
        }
        const size_t b = utf8_lead_len((unsigned char)names[i][d]);
        js_sb_addn(&t->rejects, names[i] + d, b);
        const size_t g = i;
        while (i < hi && len[i] >= d + b && memcmp(names[i] + d, names[g] + d, b) == 0)
            i++;
    }
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* llama.cpp's _not_strings over the trie of the names (children in code point order, which
 * is UTF-8's byte order), walked with a stack of its own. */
char *js_not_strings(js_ctx *c, const char *const *names_in, size_t n)
{
    const char *ch = js_add_primitive(c, "char", "char");
    const char **names = (const char **)js_alloc(c, (n + 1) * sizeof *names);
    size_t *len = (size_t *)js_alloc(c, (n + 1) * sizeof *len), longest = 0;
    if (!ch || !names || !len)
        return NULL;
    memcpy(names, names_in, n * sizeof *names);
    qsort(names, n, sizeof *names, cmp_name);
    int empty = 0;
    for (size_t i = 0; i < n; i++) {
        len[i] = strlen(names[i]);
        longest = len[i] > longest ? len[i] : longest;
        empty |= !len[i];
    }
    if (longest > JS_MAX_KEY) { /* the rule nests a group a character */
        js_fail(c, NULL, "a property name of over %d bytes beside additionalProperties is not "
                "supported", JS_MAX_KEY);
        return NULL;
    }
    js_trie *stack = (js_trie *)js_alloc(c, (longest + 2) * sizeof *stack);
    js_sb o = {c, NULL, 0, 0};
    js_sb_add(&o, "[\"] ( ");
    size_t sp = 0, made = 1; /* the rules a GBNF parser makes of it: groups, repetitions */
    if (stack)
        trie_open(c, &stack[sp++], names, len, 0, n, 0);
    while (sp && c->st == MVM_OK) {
        js_trie *t = &stack[sp - 1];
        while (t->i < t->hi && len[t->i] == t->d)
            t->i++;
        if (t->i >= t->hi) {
            if (t->any) {
                made++;
                js_sb_add(&o, " | [^\"");
                const char *r = t->rejects.p;
                for (size_t k = 0; k < t->rejects.n;) {
                    const size_t b = utf8_lead_len((unsigned char)r[k]);
                    class_char(&o, r + k, b, 0, k + b >= t->rejects.n);
                    k += b;
                }
                js_sb_add(&o, "] ");
                js_sb_add(&o, ch);
                js_sb_add(&o, "*");
            }
            if (--sp)
                js_sb_add(&o, ")");
            continue;
        }
        const char *p = names[t->i] + t->d;
        const size_t b = utf8_lead_len((unsigned char)*p), g = t->i;
        int deeper = 0;
        while (t->i < t->hi && len[t->i] >= t->d + b && memcmp(names[t->i] + t->d, p, b) == 0)
            deeper |= len[t->i++] > t->d + b;
        js_sb_add(&o, t->any++ ? " | [" : "[");
        class_char(&o, p, b, 1, 1);
        js_sb_add(&o, "]");
        made++;
        if (deeper) {
            js_sb_add(&o, " (");
            trie_open(c, &stack[sp++], names, len, g, t->i, t->d + b);
        } else {
            js_sb_add(&o, " ");
            js_sb_add(&o, ch);
            js_sb_add(&o, "+");
        }
    }
    js_sb_add(&o, empty ? " ) [\"]" : " )? [\"]");
    if (!empty && made > JS_MAX_REPEAT) /* llama.cpp's parser refuses the '?' */
        js_fail(c, NULL, "additionalProperties beside these property names needs a rule of "
                "keys that llama.cpp's grammar parser refuses (over %d rules)", JS_MAX_REPEAT);
    return js_sb_done(&o);
}

/* ---- patterns ---------------------------------------------------------------------------- */

/* A piece of a pattern's rule: a literal's text (quoted when written) or a rule's text. */
typedef struct js_lr {
    const char *s;
    int lit; /* 1: a literal; 2: a rule that is a repetition; 3: the '|' between two */
} js_lr;

typedef struct js_pat {
    js_ctx *c;
    const char *s, *pattern, *name; /* s: the pattern between its anchors */
    size_t i, n;
    int depth;
    const js_path *at;
    js_vec subs, ids; /* llama.cpp's sub_rule_ids: a repeated rule's text, its rule */
} js_pat;

static void pat_fail(js_pat *p, int unsupported, const char *why)
{
    js_fail(p->c, p->at, unsupported ? "pattern '%.60s' is not supported: %s"
                                     : "invalid pattern '%.60s': %s",
            p->pattern, why);
}

static const char *to_rule(js_ctx *c, js_lr x)
{
    return x.lit == 1 ? JS_CAT(c, "\"", x.s, "\"") : x.s;
}

/* A growing array of pieces. */
typedef struct js_seq {
    js_lr *p;
    size_t n, cap;
} js_seq;

static void seq_push(js_ctx *c, js_seq *q, const char *s, int lit)
{
    if (!s) /* a failure before */
        return;
    if (q->n == q->cap) {
        const size_t cap = q->cap ? q->cap * 2 : 8;
        js_lr *p = (js_lr *)js_alloc(c, cap * sizeof *p);
        if (!p)
            return;
        if (q->n)
            memcpy(p, q->p, q->n * sizeof *p);
        q->p = p;
        q->cap = cap;
    }
    q->p[q->n++] = (js_lr){s, lit};
}

/* The pieces joined by spaces, consecutive literals merged into one. */
static js_lr join_seq(js_ctx *c, const js_seq *q)
{
    js_sb out = {c, NULL, 0, 0}, lit = {c, NULL, 0, 0};
    int any = 0;
    for (size_t i = 0; i <= q->n; i++) {
        if (i < q->n && q->p[i].lit == 1) {
            js_sb_add(&lit, q->p[i].s);
            continue;
        }
        if (lit.n) {
            js_sb_add(&out, any++ ? " \"" : "\"");
            js_sb_addn(&out, lit.p, lit.n);
            js_sb_add(&out, "\"");
            lit.n = 0;
        }
        if (i < q->n) {
            js_sb_add(&out, any++ ? " " : "");
            js_sb_add(&out, q->p[i].s);
        }
    }
    return (js_lr){js_sb_done(&out), 0};
}

/* gbnf_escape_length: the length of a GBNF escape at s[i] (llama-grammar.cpp's parse_char
 * knows \x.., \u...., \U........, \t \r \n \\ \" \[ \] \-), 0 for none. */
static size_t gbnf_escape_length(const char *s, size_t n, size_t i)
{
    if (i + 1 >= n || s[i] != '\\')
        return 0;
    const char e = s[i + 1];
    const size_t hex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (!hex)
        return strchr("trn\\\"[]-", e) && e ? 2 : 0;
    if (i + 2 + hex > n)
        return 0;
    for (size_t k = i + 2; k < i + 2 + hex; k++)
        if (!strchr("0123456789abcdefABCDEF", s[k]) || !s[k])
            return 0;
    return 2 + hex;
}

static int non_literal(char ch)
{
    return ch && strchr("|.()[]{}*+?^$", ch) != NULL;
}

static int quantifier(char ch)
{
    return ch == '*' || ch == '+' || ch == '?' || ch == '{';
}

/* A run of literal characters at s[i]. */
static void pat_literal(js_pat *p, js_seq *q)
{
    const char *s = p->s;
    js_sb lit = {p->c, NULL, 0, 0};
    while (p->i < p->n) {
        const size_t i = p->i;
        if (s[i] == '\\') {
            if (i == p->n - 1) {
                pat_fail(p, 0, "trailing backslash");
                return;
            }
            const int plain = non_literal(s[i + 1]); /* \. is '.', raw in a GBNF string */
            const size_t e = plain ? 2 : gbnf_escape_length(s, p->n, i);
            if (!e) {
                pat_fail(p, 1, "an escape other than GBNF's (\\x, \\u, \\t, ...)");
                return;
            }
            if (lit.n && i + e < p->n && quantifier(s[i + e]))
                break;
            js_sb_addn(&lit, plain ? s + i + 1 : s + i, plain ? 1 : e);
            p->i += e;
        } else if (s[i] == '"') {
            if (lit.n && i + 1 < p->n && quantifier(s[i + 1]))
                break;
            js_sb_add(&lit, "\\\"");
            p->i++;
        } else {
            const size_t e = utf8_lead_len((unsigned char)s[i]), next = i + e;
            if (non_literal(s[i]) ||
                !(next >= p->n || !lit.n || s[next] == '.' || !non_literal(s[next])))
                break;
            js_sb_addn(&lit, s + i, e < p->n - i ? e : p->n - i);
            p->i = next;
        }
    }
    if (!lit.n) {
        pat_fail(p, 1, "a stray ']' or '}'");
        return;
    }
    seq_push(p->c, q, js_sb_done(&lit), 1);
}

/* A character class, copied: its escapes must be GBNF's. */
static void pat_class(js_pat *p, js_seq *q)
{
    const size_t start = p->i++;
    while (p->i < p->n && p->s[p->i] != ']') {
        if (p->s[p->i] == '\\') {
            const size_t e = gbnf_escape_length(p->s, p->n, p->i);
            if (!e) {
                pat_fail(p, 1, "an escape in a character class other than GBNF's");
                return;
            }
            p->i += e;
        } else
            p->i++;
    }
    if (p->i >= p->n) {
        pat_fail(p, 0, "unterminated character class");
        return;
    }
    if (p->i == start + 1 || (p->i == start + 2 && p->s[start + 1] == '^')) {
        pat_fail(p, 1, "an empty character class"); /* GBNF has none */
        return;
    }
    p->i++;
    seq_push(p->c, q, js_strn(p->c, p->s + start, p->i - start), 0);
}

/* A count of a {m,n}: digits, at most llama.cpp's grammar parser's limit. */
static int pat_count(js_pat *p, const char *s, size_t n, int *out)
{
    int v = 0;
    for (size_t k = 0; k < n; k++) {
        if (s[k] < '0' || s[k] > '9' || v > JS_MAX_REPEAT) {
            pat_fail(p, 1, "invalid number in curly brackets");
            return 0;
        }
        v = v * 10 + (s[k] - '0');
    }
    if (!n || v > JS_MAX_REPEAT) {
        pat_fail(p, 1, n ? "a repetition count above llama.cpp's limit of 2000"
                         : "invalid number in curly brackets");
        return 0;
    }
    *out = v;
    return 1;
}

/* {m}, {m,}, {,n}, {m,n} after the last piece. */
static void pat_braces(js_pat *p, js_seq *q)
{
    const size_t start = ++p->i;
    while (p->i < p->n && p->s[p->i] != '}')
        p->i++;
    if (p->i >= p->n) {
        pat_fail(p, 1, "unterminated curly brackets");
        return;
    }
    const char *in = p->s + start, *comma = memchr(in, ',', p->i - start);
    const size_t len = p->i++ - start;
    int min = 0, max = JS_UNBOUNDED;
    if (comma && memchr(comma + 1, ',', len - (size_t)(comma + 1 - in))) {
        pat_fail(p, 1, "wrong number of values in curly brackets");
        return;
    }
    if (!comma) {
        if (!pat_count(p, in, len, &min))
            return;
        max = min;
    } else if ((comma > in && !pat_count(p, in, (size_t)(comma - in), &min)) ||
               (comma + 1 < in + len &&
                !pat_count(p, comma + 1, len - (size_t)(comma + 1 - in), &max)))
        return;
    if (min > max) {
        pat_fail(p, 0, "a repetition {m,n} with m above n");
        return;
    }
    if (!q->n) {
        pat_fail(p, 0, "nothing to repeat");
        return;
    }
    js_lr *last = &q->p[q->n - 1];
    if (last->lit >= 2) {
        pat_fail(p, 0, last->lit == 2 ? "a quantifier after a quantifier" : "nothing to repeat");
        return;
    }
    if (!last->lit) {
        size_t k = 0;
        while (k < p->subs.n && strcmp((const char *)p->subs.p[k], last->s) != 0)
            k++;
        if (k == p->subs.n) {
            js_vec_push(p->c, &p->subs, last->s);
            js_vec_push(p->c, &p->ids, js_add_rule(p->c, js_fmt(p->c, "%s-%zu", p->name,
                                                                p->subs.n), last->s));
        }
        if (p->c->st != MVM_OK)
            return;
        last->s = (const char *)p->ids.p[k];
    }
    last->s = js_repetition(p->c, last->lit ? JS_CAT(p->c, "\"", last->s, "\"") : last->s, min,
                            max, "");
    last->lit = 2;
}

/* The pattern from s[i] to its end or the ')' closing a group, as one piece. */
static js_lr pat_transform(js_pat *p)
{
    js_ctx *c = p->c;
    js_seq q = {NULL, 0, 0};
    while (p->i < p->n && c->st == MVM_OK) {
        const char ch = p->s[p->i];
        if (ch == '.') {
            seq_push(c, &q, js_add_rule(c, "dot", "[^\\x0A\\x0D]"), 0);
            p->i++;
        } else if (ch == '(') {
            if (++p->i < p->n && p->s[p->i] == '?') {
                if (p->i + 1 >= p->n || p->s[p->i + 1] != ':') {
                    pat_fail(p, 1, "a group other than (...) and (?:...)");
                    break;
                }
                p->i += 2;
            }
            if (++p->depth > 100) {
                pat_fail(p, 1, "pattern nesting too deep");
                break;
            }
            seq_push(c, &q, JS_CAT(c, "(", to_rule(c, pat_transform(p)), ")"), 0);
        } else if (ch == ')') {
            p->i++;
            if (!p->depth)
                pat_fail(p, 0, "unbalanced parentheses");
            p->depth--;
            return join_seq(c, &q);
        } else if (ch == '^' || ch == '$') {
            pat_fail(p, 1, "an anchor inside the pattern");
        } else if (ch == '[') {
            pat_class(p, &q);
        } else if (ch == '|') {
            seq_push(c, &q, "|", 3);
            p->i++;
        } else if (ch == '*' || ch == '+' || ch == '?') {
            /* x*? is lazy, the same strings; x** would be a left-recursive rule */
            const int last = q.n ? q.p[q.n - 1].lit : 3;
            if (last == 3 || (last == 2 && ch != '?')) {
                pat_fail(p, 0, last == 3 ? "nothing to repeat" : "a quantifier after a quantifier");
                break;
            }
            q.p[q.n - 1] = (js_lr){JS_CAT(c, to_rule(c, q.p[q.n - 1]), (char[]){ch, 0}), 2};
            p->i++;
        } else if (ch == '{') {
            pat_braces(p, &q);
        } else
            pat_literal(p, &q);
    }
    return join_seq(c, &q);
}

char *js_pattern(js_ctx *c, const char *pattern, const char *name, const js_path *at)
{
    const size_t len = strlen(pattern);
    js_pat p = {c, pattern + 1, pattern, name, 0, len ? len - 2 : 0, 0, at, {0}, {0}};
    if (len < 2 || pattern[0] != '^' || pattern[len - 1] != '$') {
        pat_fail(&p, 1, "it is not anchored with '^' and '$'");
        return NULL;
    }
    const char *rule = to_rule(c, pat_transform(&p));
    if (p.depth)
        pat_fail(&p, 0, "unbalanced parentheses");
    return js_add_rule(c, name, JS_CAT(c, "\"\\\"\" (", rule, ") \"\\\"\""));
}
