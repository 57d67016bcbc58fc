/* The certain part of a JSON value still being written (json_prefix.h).
 *
 * One pass over the text keeps the last safe point: where it is, how deep the containers
 * open there are, and whether it lies inside a value string. The text up to it, closed
 * (a quote, then a bracket for each open container, innermost first), is parsed and
 * printed by cJSON; the closers' characters are the print's last ones, and what comes
 * before them is the certain part. */
#include "engine/chat/json_prefix.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

enum { KEY_OR_END, KEY, COLON, VALUE, VALUE_OR_END, COMMA_OR_END };

typedef struct scan {
    const unsigned char *t;
    size_t n, i;
    char open[MVM_JSON_PREFIX_DEPTH]; /* '{' or '[' */
    int phase[MVM_JSON_PREFIX_DEPTH]; /* what the container expects next */
    int depth;
    size_t cut;      /* text[0..cut) is certain */
    int cut_depth;   /* containers open at cut */
    int cut_string;  /* cut lies inside a value string */
    int have_cut;
} scan;

static int is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void safe(scan *s, int in_string)
{
    s->cut = s->i, s->cut_depth = s->depth, s->cut_string = in_string, s->have_cut = 1;
}

static int hex4(const unsigned char *p, unsigned *v)
{
    *v = 0;
    for (int k = 0; k < 4; k++) {
        const unsigned char c = p[k];
        const unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                           : c >= 'a' && c <= 'f' ? c - 'a' + 10u
                           : c >= 'A' && c <= 'F' ? c - 'A' + 10u
                                                  : 16u;
        if (d > 15)
            return 0;
        *v = *v << 4 | d;
    }
    return 1;
}

/* The length of the escape at s->t[s->i] (a backslash): 0 when the text ends inside it,
 * -1 when it is not one. */
static int escape_len(const scan *s)
{
    const size_t left = s->n - s->i;
    if (left < 2)
        return 0;
    if (!s->t[s->i + 1] || !strchr("\"\\/bfnrtu", s->t[s->i + 1]))
        return -1;
    if (s->t[s->i + 1] != 'u')
        return 2;
    unsigned v, w;
    if (left < 6)
        return 0;
    if (!hex4(s->t + s->i + 2, &v))
        return -1;
    if (v < 0xD800 || v > 0xDBFF)
        return 6;
    /* a high surrogate means nothing without the low one after it */
    if (left < 12)
        return memcmp(s->t + s->i + 6, "\\u", left - 6 < 2 ? left - 6 : 2) ? -1 : 0;
    if (s->t[s->i + 6] != '\\' || s->t[s->i + 7] != 'u' || !hex4(s->t + s->i + 8, &w) ||
        w < 0xDC00 || w > 0xDFFF)
        return -1;
    return 12;
}

/* The length of the UTF-8 character at s->t[s->i] as far as its lead byte says; 0 when the
 * text ends inside it. (Bytes that are not UTF-8 go through one at a time, as cJSON takes
 * them.) */
static size_t char_len(const scan *s)
{
    const unsigned char c = s->t[s->i];
    const size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return s->i + k <= s->n ? k : 0;
}

/* A string from its opening quote: 1 when whole (s->i past its closing quote), 0 when the
 * text ends inside it, -1 when it is not one. Inside a value string, each whole character
 * is a safe point. */
static int string(scan *s, int value)
{
    s->i++;
    for (;;) {
        if (value)
            safe(s, 1);
        if (s->i >= s->n)
            return 0;
        const unsigned char c = s->t[s->i];
        if (c == '"') {
            s->i++;
            return 1;
        }
        const int k = c == '\\' ? escape_len(s) : (int)char_len(s);
        if (k <= 0)
            return k;
        s->i += (size_t)k;
    }
}

/* A number or a literal: 1 when whole (something follows it), 0 when the text ends in it,
 * -1 when it is neither. */
static int scalar(scan *s)
{
    static const char *const words[] = {"true", "false", "null"};
    for (int w = 0; w < 3; w++) {
        const size_t k = strlen(words[w]);
        if (s->t[s->i] != (unsigned char)words[w][0])
            continue;
        const size_t have = s->n - s->i < k ? s->n - s->i : k;
        if (memcmp(s->t + s->i, words[w], have))
            return -1;
        if (have < k)
            return 0;
        s->i += k;
        return 1;
    }
    const size_t start = s->i;
    while (s->i < s->n && s->t[s->i] && strchr("0123456789+-.eE", s->t[s->i]))
        s->i++;
    if (s->i == start)
        return -1;
    return s->i < s->n ? 1 : 0; /* a number may go on until something else follows */
}

/* A value ended at s->i: the container it sits in expects a comma or its end. */
static void value_done(scan *s)
{
    if (s->depth) {
        s->phase[s->depth - 1] = COMMA_OR_END;
        safe(s, 0);
    }
}

/* One step at s->t[s->i] (no whitespace): 1 to go on, 2 when the top value is whole, 0 when
 * the text ends in a token, -1 when it is not JSON, 3 when nesting is too deep to follow. */
static int step(scan *s)
{
    const unsigned char c = s->t[s->i];
    int *phase = s->depth ? &s->phase[s->depth - 1] : NULL;
    const int top = !s->depth;
    if (phase && *phase == COLON) {
        if (c != ':')
            return -1;
        s->i++, *phase = VALUE;
        return 1;
    }
    if (phase && *phase == COMMA_OR_END) {
        if (c == ',') {
            s->i++, *phase = s->open[s->depth - 1] == '{' ? KEY : VALUE;
            return 1;
        }
        if (c != (s->open[s->depth - 1] == '{' ? '}' : ']'))
            return -1;
        s->i++, s->depth--;
        value_done(s);
        return s->depth ? 1 : 2;
    }
    if (phase && (*phase == KEY_OR_END || *phase == VALUE_OR_END) &&
        c == (*phase == KEY_OR_END ? '}' : ']')) {
        s->i++, s->depth--;
        value_done(s);
        return s->depth ? 1 : 2;
    }
    if (phase && (*phase == KEY_OR_END || *phase == KEY)) {
        if (c != '"')
            return -1;
        const int r = string(s, 0);
        if (r == 1)
            *phase = COLON;
        return r;
    }
    /* a value: at the top, or where a container expects one */
    if (c == '{' || c == '[') {
        if (s->depth == MVM_JSON_PREFIX_DEPTH)
            return 3;
        s->open[s->depth] = (char)c;
        s->phase[s->depth++] = c == '{' ? KEY_OR_END : VALUE_OR_END;
        s->i++;
        safe(s, 0);
        return 1;
    }
    const int r = c == '"' ? string(s, !top) : scalar(s);
    if (r != 1)
        return r;
    value_done(s);
    return top ? 2 : 1;
}

/* The text to the cut, closed, as cJSON reads it; *owed the closers' count. */
static cJSON *healed(const scan *s, size_t *owed)
{
    *owed = (size_t)s->cut_depth + (size_t)s->cut_string;
    char *text = malloc(s->cut + *owed + 1);
    if (!text)
        return NULL;
    memcpy(text, s->t, s->cut);
    size_t n = s->cut;
    if (s->cut_string)
        text[n++] = '"';
    for (int d = s->cut_depth; d-- > 0;)
        text[n++] = s->open[d] == '{' ? '}' : ']';
    cJSON *j = cJSON_ParseWithLength(text, n);
    free(text);
    return j;
}

int mvm_json_heal(const char *text, size_t n, cJSON **tree, size_t *owed, size_t *end)
{
    scan s = {.t = (const unsigned char *)(text ? text : ""), .n = text ? n : 0};
    *tree = NULL, *owed = 0;
    int r = 1;
    while (r == 1) {
        while (s.i < s.n && is_space(s.t[s.i]))
            s.i++;
        r = s.i < s.n ? step(&s) : 0;
    }
    if (r == 3) { /* too deep to follow: whole once cJSON reads a whole value from it */
        const char *stop = NULL;
        if ((*tree = cJSON_ParseWithLengthOpts(text, n, &stop, 0))) {
            *end = (size_t)(stop - text);
            return 1;
        }
    }
    if (r == 2) {
        *end = s.i;
        *tree = cJSON_ParseWithLength(text, s.i);
        return *tree ? 1 : -1;
    }
    if (r < 0)
        return -1;
    if (!s.have_cut)
        return 0;
    *tree = healed(&s, owed);
    return *tree ? 0 : -1;
}

int mvm_json_prefix(const char *text, size_t n, char **printed, size_t *end)
{
    cJSON *tree;
    size_t owed;
    *printed = NULL;
    const int r = mvm_json_heal(text, n, &tree, &owed, end), some = tree != NULL;
    char *out = some ? cJSON_PrintUnformatted(tree) : NULL;
    cJSON_Delete(tree);
    const size_t len = out ? strlen(out) : 0;
    if (some && (!out || len < owed)) {
        free(out);
        return -1;
    }
    if (out)
        out[len - owed] = '\0';
    *printed = out;
    return r;
}
