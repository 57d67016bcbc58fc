/*
 * The certain part of a JSON value being written (engine/chat/json_prefix.h):
 *   - hand cases: what is certain after a bracket, a key, a number that may go on, half an
 *     escape, half a surrogate pair, half a UTF-8 character; whole values and what follows
 *     them; texts that are not JSON;
 *   - 300 random values, written with random spacing and escapes (\/, \uXXXX for any
 *     character, surrogate pairs, raw UTF-8), read at every length: each certain part is a
 *     prefix of the whole value's print (cJSON's, made apart), of the next length's, and the
 *     whole text is the whole value;
 *   - corrupted texts never give a part that cJSON's reading of them contradicts.
 */
#include "check.h"

#include <cjson/cJSON.h>

#include "engine/chat/json_prefix.h"

/* The certain part of text (its first n bytes), "<whole>" + print when whole, "<none>",
 * or "<bad>". */
static char got[4096];
static const char *part(const char *text, size_t n)
{
    char *p = NULL;
    size_t end = 0;
    const int r = mvm_json_prefix(text, n, &p, &end);
    snprintf(got, sizeof got, "%s%s", r == 1 ? "<whole>" : r < 0 ? "<bad>" : p ? "" : "<none>",
             p ? p : "");
    free(p);
    return got;
}

static void hand_cases(void)
{
    static const char *const cases[][2] = {
        {"", "<none>"},
        {"  ", "<none>"},
        {"{", "{"},
        {" {\"a\"", "{"},
        {"{\"a\":", "{"},
        {"{\"a\":1", "{"},            /* 1 may become 12 */
        {"{\"a\":12 ", "{\"a\":12"},   /* ... not once something follows it */
        {"{\"a\":12,", "{\"a\":12"},
        {"{\"a\":12,\"b", "{\"a\":12"},
        {"{\"a\":\"", "{\"a\":\""},
        {"{\"a\":\"x\\", "{\"a\":\"x"},
        {"{\"a\":\"x\\u00", "{\"a\":\"x"},
        {"{\"a\":\"x\\u00e9", "{\"a\":\"x\xc3\xa9"},
        {"{\"a\":\"\\ud83d", "{\"a\":\""},
        {"{\"a\":\"\\ud83d\\ude0", "{\"a\":\""},
        {"{\"a\":\"\\ud83d\\ude00", "{\"a\":\"\xf0\x9f\x98\x80"},
        {"{\"a\":\"\xc3", "{\"a\":\""},
        {"{\"a\":\"\\/\\n\"", "{\"a\":\"/\\n\""},
        {"{\"a\":tr", "{"},
        {"{\"a\":true", "{\"a\":true"},
        {"{\"a\":[1,{\"b\":[", "{\"a\":[1,{\"b\":["},
        {"{\"a\":[1,{\"b\":[]}]", "{\"a\":[1,{\"b\":[]}]"},
        {"[", "["},
        {"[\"ab", "[\"ab"},
        {"\"ab", "<none>"},  /* a bare string says nothing until whole */
        {"12", "<none>"},
        {"{}", "<whole>{}"},
        {" {\"a\" : 1.50e1 }</tool_call>", "<whole>{\"a\":15}"},
        {"[1, 2]x", "<whole>[1,2]"},
        {"\"s\"", "<whole>\"s\""},
        {"{,", "<bad>"},
        {"{\"a\" 1", "<bad>"},
        {"{\"a\":1,}", "<bad>"},
        {"[1,]", "<bad>"},
        {"{\"a\":nul1}", "<bad>"},
        {"{\"a\":\"\\x\"}", "<bad>"},
        {"{\"a\":\"\\ud83dx\"}", "<bad>"},
        {"}", "<bad>"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *g = part(cases[i][0], strlen(cases[i][0]));
        CHECK(!strcmp(g, cases[i][1]));
        if (strcmp(g, cases[i][1]))
            fprintf(stderr, "  case %zu '%s': got '%s', want '%s'\n", i, cases[i][0], g,
                    cases[i][1]);
    }
    /* deeper than the scan follows: certain to the last level it follows, whole at the end */
    char deep[2 * MVM_JSON_PREFIX_DEPTH + 8];
    size_t n = 0;
    for (int d = 0; d < MVM_JSON_PREFIX_DEPTH + 2; d++)
        deep[n++] = '[';
    char want[sizeof deep];
    memcpy(want, deep, MVM_JSON_PREFIX_DEPTH);
    want[MVM_JSON_PREFIX_DEPTH] = '\0';
    CHECK(!strcmp(part(deep, n), want));
    for (int d = 0; d < MVM_JSON_PREFIX_DEPTH + 2; d++)
        deep[n++] = ']';
    CHECK(!strncmp(part(deep, n), "<whole>[[[", 10));
}

/* ---- random values ------------------------------------------------------------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t draw(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

typedef struct text {
    char p[16384];
    size_t n;
} text;

static void put(text *t, const char *s)
{
    const size_t k = strlen(s);
    if (t->n + k < sizeof t->p)
        memcpy(t->p + t->n, s, k), t->n += k;
}

static void space(text *t)
{
    static const char *const ws[] = {"", "", "", " ", "\n  ", "\t"};
    put(t, ws[draw(6)]);
}

/* A code point, as raw UTF-8 or escaped. */
static void code_point(text *t)
{
    static const uint32_t pool[] = {'a', 'Z', '0', ' ', '"', '\\', '/', '\n', '\t', 0x01, 0x1f,
                                    0x7f, 0xe9, 0x3b1, 0x20ac, 0x4e2d, 0xffff, 0x1f600,
                                    0x10348, '<', '}', ']', ','};
    const uint32_t c = pool[draw(sizeof pool / sizeof pool[0])];
    char b[16];
    if (c == '"' || c == '\\' || c < 0x20 || draw(4) == 0) {
        if (c >= 0x10000) { /* a surrogate pair */
            const uint32_t v = c - 0x10000;
            snprintf(b, sizeof b, "\\u%04x\\u%04X", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
        } else if (c == '/' && draw(2)) {
            snprintf(b, sizeof b, "\\/");
        } else if (c == '\n' && draw(2)) {
            snprintf(b, sizeof b, "\\n");
        } else {
            snprintf(b, sizeof b, "\\u%04X", c);
        }
    } else if (c < 0x80) {
        b[0] = (char)c, b[1] = '\0';
    } else if (c < 0x800) {
        b[0] = (char)(0xC0 | c >> 6), b[1] = (char)(0x80 | (c & 0x3F)), b[2] = '\0';
    } else if (c < 0x10000) {
        b[0] = (char)(0xE0 | c >> 12), b[1] = (char)(0x80 | (c >> 6 & 0x3F));
        b[2] = (char)(0x80 | (c & 0x3F)), b[3] = '\0';
    } else {
        b[0] = (char)(0xF0 | c >> 18), b[1] = (char)(0x80 | (c >> 12 & 0x3F));
        b[2] = (char)(0x80 | (c >> 6 & 0x3F)), b[3] = (char)(0x80 | (c & 0x3F)), b[4] = '\0';
    }
    put(t, b);
}

static void string_of(text *t)
{
    put(t, "\"");
    for (uint32_t k = draw(12); k-- > 0;)
        code_point(t);
    put(t, "\"");
}

static void value(text *t, int depth)
{
    static const char *const scalars[] = {"0", "-1", "12", "3.25", "-0.5e3", "1E-2", "1e+400",
                                          "100000000000000000000", "0.1", "true", "false",
                                          "null", "7"};
    const uint32_t kind = depth > 3 ? draw(2) : draw(5);
    if (kind == 0) {
        put(t, scalars[draw(sizeof scalars / sizeof scalars[0])]);
    } else if (kind == 1) {
        string_of(t);
    } else {
        const int obj = kind != 4;
        put(t, obj ? "{" : "[");
        for (uint32_t k = draw(4), i = 0; i < k; i++) {
            space(t);
            if (i)
                put(t, ","), space(t);
            if (obj)
                string_of(t), space(t), put(t, ":"), space(t);
            value(t, depth + 1);
            space(t);
        }
        put(t, obj ? "}" : "]");
    }
}

static void random_values(void)
{
    int checked = 0, bad = 0;
    for (int round = 0; round < 300; round++) {
        text t = {.n = 0};
        space(&t);
        /* mostly the shape of a call's arguments, an object; else a list (a bare number
         * at the top is never whole: it may go on) */
        put(&t, round % 3 ? "{\"k\":" : "[");
        value(&t, 0);
        put(&t, round % 3 ? "}" : "]");
        const size_t whole_len = t.n;
        put(&t, round % 2 ? "</tool_call>" : "");
        cJSON *j = cJSON_ParseWithLength(t.p, whole_len);
        char *full = j ? cJSON_PrintUnformatted(j) : NULL;
        cJSON_Delete(j);
        if (!full) {
            bad++;
            continue;
        }
        char *last = NULL;
        int ok = 1;
        for (size_t n = 0; n <= t.n && ok; n++) {
            char *p = NULL;
            size_t end = 0;
            const int r = mvm_json_prefix(t.p, n, &p, &end);
            if (n < whole_len) {
                ok = r == 0 && (!p || !strncmp(full, p, strlen(p))) &&
                     (!last || (p && !strncmp(p, last, strlen(last))));
            } else {
                ok = r == 1 && end == whole_len && p && !strcmp(p, full);
            }
            if (!ok)
                fprintf(stderr, "  round %d at %zu of '%.*s': r %d, '%s' after '%s' (full '%s')\n",
                        round, n, (int)t.n, t.p, r, p ? p : "(null)", last ? last : "(null)",
                        full);
            if (r == 0 && p)
                free(last), last = p;
            else
                free(p);
        }
        CHECK(ok);
        free(last), free(full);
        checked++;
    }
    CHECK(checked > 250 && bad == 0);
}

/* Corrupted texts: where cJSON reads the whole, the part must agree with its print. */
static void corrupted(void)
{
    int contradicted = 0, bad_seen = 0;
    for (int round = 0; round < 1500; round++) {
        text t = {.n = 0};
        value(&t, 0);
        if (!t.n)
            continue;
        t.p[draw((uint32_t)t.n)] = "{}[]\",:\\x0 "[draw(12)];
        const char *parse_end = NULL;
        cJSON *j = cJSON_ParseWithLengthOpts(t.p, t.n, &parse_end, 0);
        char *full = j ? cJSON_PrintUnformatted(j) : NULL;
        cJSON_Delete(j);
        for (size_t n = 1; n <= t.n; n += 1 + draw(3)) {
            char *p = NULL;
            size_t end = 0;
            const int r = mvm_json_prefix(t.p, n, &p, &end);
            bad_seen += r < 0;
            if (full && r >= 0 && p && strncmp(full, p, strlen(p)))
                contradicted++;
            free(p);
        }
        free(full);
    }
    CHECK(contradicted == 0);
    CHECK(bad_seen > 100);
}

int main(void)
{
    hand_cases();
    random_values();
    corrupted();
    TEST_END();
}
