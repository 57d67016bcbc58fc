/*
 * GPT-2's byte-level alphabet and the two pre-tokenizer regexes, matched by hand over code
 * points as llama.cpp's unicode_regex_split_custom_gpt2/_llama3 do (no regex library):
 *
 *   GPT-2:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Qwen2:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
 *           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * Each function returns the end of the one match that starts at `pos`, trying the
 * alternatives in order like the regex engine. Two consequences that look odd but are the
 * regexes': a run of n > 1 spaces before a word leaves its last space to the word
 * ("a   b" -> "a", "  ", " b"), and GPT-2's " ?" is only U+0020, so a tab before a word is a
 * piece of its own.
 */
#include "engine/tokenizer_impl.h"

/* Bytes that are printable and not a space stand for themselves; the other 68 take the
 * code points from U+0100 in byte order. */
static int is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

size_t tok_byte_symbol(uint8_t b, char out[2])
{
    unsigned cp;
    if (is_printable(b))
        cp = b;
    else if (b <= 0x20)
        cp = 0x100 + b;
    else if (b < 0xAD)
        cp = 0x100 + 33 + (b - 0x7Fu);
    else
        cp = 0x100 + 67;
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

int tok_symbol_byte(uint32_t cp)
{
    if (cp < 0x100)
        return is_printable(cp) ? (int)cp : -1;
    if (cp < 0x100 + 33)
        return (int)(cp - 0x100);
    if (cp < 0x100 + 67)
        return (int)(cp - 0x100 - 33 + 0x7F);
    return cp == 0x100 + 67 ? 0xAD : -1;
}

/* The class of the code point at s[pos] (pos < n) and its length. */
static enum tok_class class_at(const uint8_t *s, size_t n, size_t pos, size_t *len)
{
    uint32_t cp;
    *len = tok_utf8_decode(s + pos, n - pos, &cp);
    return tok_cp_class(cp);
}

/* The end of the run of class `cls` that starts at pos. */
static size_t run_of(const uint8_t *s, size_t n, size_t pos, enum tok_class cls)
{
    size_t len;
    while (pos < n && class_at(s, n, pos, &len) == cls)
        pos += len;
    return pos;
}

static uint8_t ascii_lower(uint8_t c)
{
    return c >= 'A' && c <= 'Z' ? (uint8_t)(c + 32) : c;
}

/* 's|'t|'re|'ve|'m|'ll|'d (case-folded when `fold`): the match length, or 0. The letters
 * are ASCII, so comparing bytes compares code points. */
static size_t contraction(const uint8_t *s, size_t n, size_t pos, int fold)
{
    if (s[pos] != '\'' || pos + 1 >= n)
        return 0;
    uint8_t a = s[pos + 1], b = pos + 2 < n ? s[pos + 2] : 0;
    if (fold)
        a = ascii_lower(a), b = ascii_lower(b);
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* At a whitespace code point: Qwen2's \s*[\r\n]+ (when `newlines`), then \s+(?!\S) and
 * \s+. */
static size_t spaces(const uint8_t *s, size_t n, size_t pos, int newlines)
{
    size_t q = pos, last = pos, after_newline = 0, len;
    class_at(s, n, pos, &len);
    for (;;) {
        if (s[q] == '\r' || s[q] == '\n')
            after_newline = q + 1;
        last = q;
        q += len;
        if (q >= n || class_at(s, n, q, &len) != TOK_SPACE)
            break;
    }
    if (newlines && after_newline)
        return after_newline;
    if (last > pos && q < n)
        return last; /* the run but its last space, which the next word takes */
    return q;
}

/* The class of the code point after an optional leading U+0020: what " ?X" looks at.
 * *start is where X starts; -1 when the space ends the text. */
static int class_after_space(const uint8_t *s, size_t n, size_t pos, size_t *start)
{
    size_t len;
    *start = pos + (s[pos] == ' ');
    if (*start >= n)
        return -1;
    return (int)class_at(s, n, *start, &len);
}

static size_t next_gpt2(const uint8_t *s, size_t n, size_t pos)
{
    size_t c = contraction(s, n, pos, 0), start;
    if (c)
        return pos + c;
    int cls = class_after_space(s, n, pos, &start);
    if (cls == TOK_LETTER || cls == TOK_NUMBER || cls == TOK_OTHER)
        return run_of(s, n, start, (enum tok_class)cls);
    return spaces(s, n, pos, 0);
}

static size_t next_qwen2(const uint8_t *s, size_t n, size_t pos)
{
    size_t c = contraction(s, n, pos, 1), len, start, next_len;
    if (c)
        return pos + c;
    enum tok_class c0 = class_at(s, n, pos, &len);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (s[pos] != '\r' && s[pos] != '\n' && c0 != TOK_NUMBER &&
        (c0 == TOK_LETTER ||
         (pos + len < n && class_at(s, n, pos + len, &next_len) == TOK_LETTER)))
        return run_of(s, n, pos + len, TOK_LETTER);
    /* \p{N}: digits one by one */
    if (c0 == TOK_NUMBER)
        return pos + len;
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    if (class_after_space(s, n, pos, &start) == TOK_OTHER) {
        size_t end = run_of(s, n, start, TOK_OTHER);
        while (end < n && (s[end] == '\r' || s[end] == '\n'))
            end++;
        return end;
    }
    return spaces(s, n, pos, 1);
}

size_t tok_pretok_next(enum tok_pre pre, const uint8_t *s, size_t n, size_t pos)
{
    return pre == TOK_PRE_QWEN2 ? next_qwen2(s, n, pos) : next_gpt2(s, n, pos);
}
