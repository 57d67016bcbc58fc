/*
 * The lexer, as jinja2's (lexer.py) with trim_blocks and lstrip_blocks: the source's
 * newlines become \n and one trailing newline is dropped; text runs to the next {{, {% or
 * {#; a '-' after an opener strips the whitespace before it, a '-' before a closer the
 * whitespace after; lstrip_blocks drops a block's or comment's indentation when only
 * whitespace precedes it on its line ('+' keeps it), trim_blocks the newline after a block
 * or comment ('+%}' keeps it). Inside tags: names, strings, numbers and operators, the
 * brackets balanced (a closer inside brackets is an operator).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat/jinja_impl.h"

typedef struct lexer {
    const char *s;
    size_t n, pos;
    size_t line_at; /* line_no is the line of offset line_at */
    int line_no;
    int line_starting; /* the last thing matched ended with a newline */
    char brackets[JX_MAX_NEST];
    int depth;
    jtoks *out;
    jarena *arena;
} lexer;

static int line_of(lexer *L, size_t off)
{
    for (; L->line_at < off; L->line_at++)
        L->line_no += L->s[L->line_at] == '\n';
    return L->line_no;
}

static mvm_status lex_fail(lexer *L, size_t off, const char *fmt, ...) MVM_PRINTF(3, 4);
static mvm_status lex_fail(lexer *L, size_t off, const char *fmt, ...)
{
    char where[48];
    snprintf(where, sizeof where, "template line %d", line_of(L, off));
    va_list ap;
    va_start(ap, fmt);
    mvm_failv(MVM_ERR_INVALID, where, fmt, ap);
    va_end(ap);
    return MVM_ERR_INVALID;
}

static jtok *emit(lexer *L, int type, size_t at, size_t len)
{
    jtoks *o = L->out;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 256;
        jtok *t = realloc(o->t, cap * sizeof *t);
        if (!t)
            return NULL;
        o->t = t;
        o->cap = cap;
    }
    jtok *t = &o->t[o->n++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    t->at = at;
    t->len = len;
    t->line = line_of(L, at);
    return t;
}

/* Python's \s at s[at] (0: not whitespace), its length in *len. */
static int space_at(const lexer *L, size_t at, size_t *len)
{
    uint32_t cp;
    *len = mvm_jinja_utf8_next(L->s + at, L->n - at, &cp);
    return mvm_jinja_isspace(cp);
}

static size_t skip_space(const lexer *L, size_t at)
{
    size_t len;
    while (at < L->n && space_at(L, at, &len))
        at += len;
    return at;
}

/* Where the whitespace ending at `end` (not before `lo`) starts. */
static size_t rstrip(const lexer *L, size_t lo, size_t end)
{
    while (end > lo) {
        size_t b = end - 1;
        while (b > lo && ((unsigned char)L->s[b] & 0xC0) == 0x80 && end - b < 4)
            b--;
        uint32_t cp;
        if (mvm_jinja_utf8_next(L->s + b, end - b, &cp) != end - b || !mvm_jinja_isspace(cp))
            break;
        end = b;
    }
    return end;
}

static int at_str(const lexer *L, size_t at, const char *lit)
{
    size_t k = strlen(lit);
    return at + k <= L->n && memcmp(L->s + at, lit, k) == 0;
}

/* The end of the text [lo, open) before a tag whose opener has `sign`: '-' strips its
 * trailing whitespace; lstrip_blocks (blocks and comments) its last line's indentation. */
static size_t text_end(const lexer *L, size_t lo, size_t open, char sign, int lstrip)
{
    if (sign == '-')
        return rstrip(L, lo, open);
    if (sign == '+' || !lstrip)
        return open;
    size_t l_pos = open;
    while (l_pos > lo && L->s[l_pos - 1] != '\n')
        l_pos--;
    if (l_pos == open || (l_pos == lo && !L->line_starting))
        return open;
    return rstrip(L, l_pos, open) == l_pos ? l_pos : open;
}

static mvm_status emit_data(lexer *L, size_t lo, size_t hi)
{
    if (hi > lo && !emit(L, JT_DATA, lo, hi - lo))
        return jx_nomem();
    return MVM_OK;
}

/* A closer "+X}", "-X}" then whitespace, or "X}" then (blocks, comments) one newline, at
 * `at`: its end, or 0. */
static size_t closer(const lexer *L, size_t at, char x, int trim)
{
    char c2[3] = {x, '}', 0};
    if (at < L->n && L->s[at] == '+' && at_str(L, at + 1, c2) && x != '}')
        return at + 3;
    if (at < L->n && L->s[at] == '-' && at_str(L, at + 1, c2))
        return skip_space(L, at + 3);
    if (at_str(L, at, c2))
        return at + 2 + (trim && at + 2 < L->n && L->s[at + 2] == '\n');
    return 0;
}

/* {% raw %}: `\s*raw\s*(-%}\s*|%})` after the opener; the end or 0. */
static size_t raw_begin(const lexer *L, size_t at)
{
    at = skip_space(L, at);
    if (!at_str(L, at, "raw"))
        return 0;
    at = skip_space(L, at + 3);
    if (at_str(L, at, "-%}"))
        return skip_space(L, at + 3);
    return at_str(L, at, "%}") ? at + 2 : 0;
}

static mvm_status lex_raw(lexer *L, size_t open_at)
{
    for (size_t i = L->pos; i + 1 < L->n; i++) {
        if (L->s[i] != '{' || L->s[i + 1] != '%')
            continue;
        size_t q = i + 2;
        char sign = q < L->n && (L->s[q] == '-' || L->s[q] == '+') ? L->s[q] : 0;
        q = skip_space(L, q + (sign != 0));
        if (!at_str(L, q, "endraw"))
            continue;
        size_t end = closer(L, skip_space(L, q + 6), '%', 1);
        if (!end)
            continue;
        mvm_status rc = emit_data(L, L->pos, text_end(L, L->pos, i, sign, 1));
        L->pos = end;
        L->line_starting = L->s[end - 1] == '\n';
        return rc;
    }
    return lex_fail(L, open_at, "Missing end of raw directive");
}

static mvm_status lex_comment(lexer *L, size_t open_at)
{
    for (size_t i = L->pos; i < L->n; i++) {
        size_t end = closer(L, i, '#', 1);
        if (end) {
            L->pos = end;
            L->line_starting = L->s[end - 1] == '\n';
            return MVM_OK;
        }
    }
    return lex_fail(L, open_at, "Missing end of comment tag");
}

static mvm_status lex_tag(lexer *L, char kind);

static mvm_status lex_root(lexer *L)
{
    while (L->pos < L->n) {
        size_t open = L->pos;
        const char *p = L->s + open;
        for (;;) {
            p = memchr(p, '{', (size_t)(L->s + L->n - p));
            if (!p || p + 1 >= L->s + L->n || p[1] == '{' || p[1] == '%' || p[1] == '#')
                break;
            p++;
        }
        if (!p || p + 1 >= L->s + L->n)
            return emit_data(L, L->pos, L->n);
        open = (size_t)(p - L->s);
        char kind = p[1];
        size_t after = open + 2;
        char sign = after < L->n && (L->s[after] == '-' || L->s[after] == '+') ? L->s[after] : 0;
        after += sign != 0;
        size_t raw_end = kind == '%' ? raw_begin(L, after) : 0;
        mvm_status rc = emit_data(L, L->pos, text_end(L, L->pos, open, sign, kind != '{'));
        if (rc != MVM_OK)
            return rc;
        L->pos = after;
        L->line_starting = 0;
        if (raw_end) {
            L->pos = raw_end;
            L->line_starting = L->s[raw_end - 1] == '\n';
            rc = lex_raw(L, open);
        } else if (kind == '#') {
            rc = lex_comment(L, open);
        } else {
            if (!emit(L, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, open, after - open))
                return jx_nomem();
            rc = lex_tag(L, kind);
        }
        if (rc != MVM_OK)
            return rc;
    }
    return MVM_OK;
}

/* ---- inside tags ------------------------------------------------------------------------- */

static int digit(const lexer *L, size_t at) { return at < L->n && L->s[at] >= '0' && L->s[at] <= '9'; }

/* (\d+_)*\d+ at `at`: its end, or 0. */
static size_t digits(const lexer *L, size_t at)
{
    if (!digit(L, at))
        return 0;
    for (;;) {
        while (digit(L, at))
            at++;
        if (at < L->n && L->s[at] == '_' && digit(L, at + 1))
            at++;
        else
            return at;
    }
}

static size_t exponent(const lexer *L, size_t at)
{
    if (at >= L->n || (L->s[at] != 'e' && L->s[at] != 'E'))
        return 0;
    at++;
    if (at < L->n && (L->s[at] == '+' || L->s[at] == '-'))
        at++;
    return digits(L, at);
}

/* jinja2's float_re: digits with a fraction, an exponent, or both; not after a dot. */
static size_t float_end(const lexer *L, size_t at)
{
    if (at > 0 && L->s[at - 1] == '.')
        return 0;
    size_t d = digits(L, at), e;
    if (!d)
        return 0;
    if (d < L->n && L->s[d] == '.') {
        size_t f = digits(L, d + 1);
        if (f && (e = exponent(L, f)))
            return e;
    }
    if ((e = exponent(L, d)))
        return e;
    if (d < L->n && L->s[d] == '.')
        return digits(L, d + 1);
    return 0;
}

static int digit_of(char c, int base)
{
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99;
    return v < base ? v : -1;
}

/* jinja2's integer_re: 0b/0o/0x with digits, or decimal ('_' between digits). Its end or 0;
 * the value in *v (*overflow set past 64 bits). */
static size_t int_end(const lexer *L, size_t at, int64_t *v, int *overflow)
{
    int base = 10;
    size_t i = at;
    if (L->s[at] == '0' && at + 1 < L->n) {
        char c = L->s[at + 1];
        base = c == 'b' || c == 'B' ? 2 : c == 'o' || c == 'O' ? 8 : c == 'x' || c == 'X' ? 16 : 10;
    }
    uint64_t acc = 0;
    *overflow = 0;
    if (base != 10) {
        i = at + 2;
        size_t start = i;
        for (;;) {
            size_t j = i + (i < L->n && L->s[i] == '_');
            if (j >= L->n || digit_of(L->s[j], base) < 0)
                break;
            if (acc > (UINT64_MAX - 15) / (uint64_t)base)
                *overflow = 1;
            acc = acc * (uint64_t)base + (uint64_t)digit_of(L->s[j], base);
            i = j + 1;
        }
        if (i > start) {
            *overflow |= acc > INT64_MAX;
            *v = (int64_t)acc;
            return i;
        }
        i = at; /* "0x" without digits: the integer 0, then a name */
    }
    int zero = L->s[at] == '0';
    for (i = at;;) {
        size_t j = i + (i > at && i < L->n && L->s[i] == '_');
        if (!digit(L, j) || (zero && L->s[j] != '0'))
            break;
        if (acc > (UINT64_MAX - 9) / 10)
            *overflow = 1;
        acc = acc * 10 + (uint64_t)(L->s[j] - '0');
        i = j + 1;
    }
    *overflow |= acc > INT64_MAX;
    *v = (int64_t)acc;
    return i;
}

static size_t name_end(const lexer *L, size_t at)
{
    size_t i = at;
    while (i < L->n) {
        unsigned char c = (unsigned char)L->s[i];
        uint32_t cp = c;
        size_t len = c < 0x80 ? 1 : mvm_jinja_utf8_next(L->s + i, L->n - i, &cp);
        if (!mvm_jinja_isword(cp) || (i == at && c >= '0' && c <= '9'))
            break;
        i += len;
    }
    return i;
}

static mvm_status lex_number(lexer *L, size_t *at)
{
    size_t e = float_end(L, *at);
    if (e) {
        char buf[128];
        size_t k = 0;
        for (size_t i = *at; i < e && k + 1 < sizeof buf; i++)
            if (L->s[i] != '_')
                buf[k++] = L->s[i];
        buf[k] = 0;
        jtok *t = emit(L, JT_FLOAT, *at, e - *at);
        if (!t)
            return jx_nomem();
        t->f = strtod(buf, NULL);
        *at = e;
        return MVM_OK;
    }
    int64_t v;
    int overflow;
    e = int_end(L, *at, &v, &overflow);
    if (overflow)
        return lex_fail(L, *at, "integer literal too large (64-bit integers only)");
    jtok *t = emit(L, JT_INT, *at, e - *at);
    if (!t)
        return jx_nomem();
    t->i = v;
    *at = e;
    return MVM_OK;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", ">=", "<="};
static const int OPS2_ID[] = {JO_FLOORDIV, JO_POW, JO_EQ, JO_NE, JO_GTEQ, JO_LTEQ};
static const char OPS1[] = "+-/*%~[](){}><=.:|,;";
static const int OPS1_ID[] = {JO_ADD,    JO_SUB,    JO_DIV,      JO_MUL,      JO_MOD,
                              JO_TILDE,  JO_LBRACKET, JO_RBRACKET, JO_LPAREN, JO_RPAREN,
                              JO_LBRACE, JO_RBRACE, JO_GT,       JO_LT,       JO_ASSIGN,
                              JO_DOT,    JO_COLON,  JO_PIPE,     JO_COMMA,    JO_SEMICOLON};

static mvm_status lex_op(lexer *L, size_t *at)
{
    int id = -1;
    size_t len = 2;
    for (size_t k = 0; k < sizeof OPS2 / sizeof *OPS2 && id < 0; k++)
        if (at_str(L, *at, OPS2[k]))
            id = OPS2_ID[k];
    const char *c = id < 0 ? strchr(OPS1, L->s[*at]) : NULL;
    if (id < 0 && (!c || !*c))
        return lex_fail(L, *at, "unexpected char '%c' at %zu", L->s[*at], *at);
    if (id < 0)
        id = OPS1_ID[c - OPS1], len = 1;
    char ch = L->s[*at];
    if (len == 1 && (ch == '(' || ch == '[' || ch == '{')) {
        if (L->depth == JX_MAX_NEST)
            return lex_fail(L, *at, "brackets nested deeper than %d", JX_MAX_NEST);
        L->brackets[L->depth++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
    } else if (len == 1 && (ch == ')' || ch == ']' || ch == '}')) {
        if (L->depth == 0)
            return lex_fail(L, *at, "unexpected '%c'", ch);
        if (L->brackets[--L->depth] != ch)
            return lex_fail(L, *at, "unexpected '%c', expected '%c'", ch, L->brackets[L->depth]);
    }
    jtok *t = emit(L, JT_OP, *at, len);
    if (!t)
        return jx_nomem();
    t->op = (uint8_t)id;
    *at += len;
    return MVM_OK;
}

static int hex_run(const lexer *L, size_t at, size_t end, int k, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < k; i++) {
        int d = at + (size_t)i < end ? digit_of(L->s[at + (size_t)i], 16) : -1;
        if (d < 0)
            return 0;
        *v = *v << 4 | (uint32_t)d;
    }
    return 1;
}

/* One escape at s[at] (after the backslash) appended to o; returns the bytes it took, or 0
 * on a malformed one. What Python's "unicode-escape" codec does with the text, non-ASCII
 * characters first spelled as backslashreplace spells them. */
static size_t escape_one(const lexer *L, size_t at, size_t end, char *o, size_t *k)
{
    static const char simple[] = "\\\\''\"\"a\ab\bf\fn\nr\rt\tv\v";
    char c = L->s[at];
    for (size_t i = 0; simple[i]; i += 2)
        if (simple[i] == c) {
            o[(*k)++] = simple[i + 1];
            return 1;
        }
    if (c == '\n')
        return 1; /* a line continuation */
    uint32_t v = 0;
    if (c >= '0' && c <= '7') {
        size_t i = 0;
        while (i < 3 && at + i < end && L->s[at + i] >= '0' && L->s[at + i] <= '7')
            v = v * 8 + (uint32_t)(L->s[at + i++] - '0');
        *k += mvm_jinja_utf8_put(v, o + *k);
        return i;
    }
    int width = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (width) {
        if (!hex_run(L, at + 1, end, width, &v) || v > 0x10FFFF)
            return 0;
        *k += mvm_jinja_utf8_put(v, o + *k);
        return 1 + (size_t)width;
    }
    o[(*k)++] = '\\';
    if ((unsigned char)c < 0x80) {
        o[(*k)++] = c;
        return 1;
    }
    size_t len = mvm_jinja_utf8_next(L->s + at, end - at, &v);
    if (v > 0x10FFFF) { /* not UTF-8: the byte as it is */
        o[(*k)++] = c;
        return 1;
    }
    *k += (size_t)sprintf(o + *k, v < 0x100 ? "x%02x" : v < 0x10000 ? "u%04x" : "U%08x", v);
    return len; /* at most 10 bytes for 2 to 5 read: the buffer's 3 per byte hold them */
}

static mvm_status unescape(lexer *L, size_t at, size_t end, jstr **out)
{
    char *o = malloc((end - at) * 3 + 1);
    if (!o)
        return jx_nomem();
    size_t k = 0;
    for (size_t i = at; i < end;) {
        if (L->s[i] != '\\') {
            o[k++] = L->s[i++];
            continue;
        }
        size_t used = i + 1 < end ? escape_one(L, i + 1, end, o, &k) : 0;
        if (!used) {
            free(o);
            return lex_fail(L, i, "malformed escape in a string literal");
        }
        i += 1 + used;
    }
    *out = mvm_jinja_const_str(L->arena, o, k);
    free(o);
    return *out ? MVM_OK : jx_nomem();
}

static mvm_status lex_string(lexer *L, size_t *at, int *matched)
{
    char q = L->s[*at];
    size_t i = *at + 1;
    while (i < L->n && L->s[i] != q)
        i += L->s[i] == '\\' ? 2 : 1;
    *matched = i < L->n;
    if (!*matched)
        return MVM_OK;
    jtok *t = emit(L, JT_STRING, *at, i + 1 - *at);
    if (!t)
        return jx_nomem();
    size_t start = *at + 1;
    *at = i + 1;
    return unescape(L, start, i, &L->out->t[L->out->n - 1].str);
}

static mvm_status lex_tag(lexer *L, char kind)
{
    size_t at = L->pos;
    for (;;) {
        size_t end = L->depth ? 0 : closer(L, at, kind == '%' ? '%' : '}', kind == '%');
        if (end) {
            if (!emit(L, kind == '%' ? JT_BLOCK_END : JT_VAR_END, at, end - at))
                return jx_nomem();
            L->pos = end;
            L->line_starting = L->s[end - 1] == '\n';
            return MVM_OK;
        }
        if (at >= L->n) {
            L->pos = at; /* the parser reports the missing end */
            return MVM_OK;
        }
        size_t len;
        unsigned char c = (unsigned char)L->s[at];
        mvm_status rc = MVM_OK;
        int matched = 1;
        if (space_at(L, at, &len)) {
            at = skip_space(L, at);
        } else if (c >= '0' && c <= '9') {
            rc = lex_number(L, &at);
        } else if (name_end(L, at) > at) {
            size_t e = name_end(L, at);
            if (!emit(L, JT_NAME, at, e - at))
                return jx_nomem();
            at = e;
        } else if (c == '\'' || c == '"') {
            rc = lex_string(L, &at, &matched);
            if (rc == MVM_OK && !matched)
                rc = lex_fail(L, at, "unexpected char '%c' at %zu", c, at);
        } else {
            rc = lex_op(L, &at);
        }
        if (rc != MVM_OK)
            return rc;
    }
}

/* The source with \r\n and \r as \n, less one trailing newline (keep_trailing_newline off). */
static char *normalise(const char *src, size_t len, size_t *out_len)
{
    char *s = malloc(len + 1);
    if (!s)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[k++] = '\n';
            i += i + 1 < len && src[i + 1] == '\n';
        } else {
            s[k++] = src[i];
        }
    }
    if (k > 0 && s[k - 1] == '\n')
        k--;
    s[k] = 0;
    *out_len = k;
    return s;
}

mvm_status mvm_jinja_lex(const char *src, size_t len, jarena *arena, jtoks *out)
{
    memset(out, 0, sizeof *out);
    out->src = normalise(src, len, &out->len);
    if (!out->src)
        return jx_nomem();
    lexer L = {.s = out->src, .n = out->len, .line_no = 1, .line_starting = 1, .out = out,
               .arena = arena};
    mvm_status rc = lex_root(&L);
    if (rc == MVM_OK && !emit(&L, JT_EOF, L.n, 0))
        rc = jx_nomem();
    return rc;
}

void mvm_jinja_toks_free(jtoks *t)
{
    free(t->t);
    free(t->src);
    memset(t, 0, sizeof *t);
}
