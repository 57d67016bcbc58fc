/*
 * The schema's JSON. cJSON parses it, but it is laxer than nlohmann's parser (llama.cpp's)
 * and keeps no number's text, so a scan of the text holds it to nlohmann's rules (no
 * leading zeros, no control characters or invalid UTF-8 in strings, no number out of a
 * double's range, no key twice in an object) and records every number as written: a const
 * or an enum writes its values back as nlohmann's dump() does, where 1 and 1.0, or 2^64 - 1
 * and its nearest double, differ.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/json_schema_impl.h"

static void text_fail(js_ctx *c, const char *s, size_t at, const char *what)
{
    unsigned line = 1, col = 1;
    for (size_t i = 0; i < at; i++) {
        col++;
        if (s[i] == '\n') {
            line++;
            col = 1;
        }
    }
    js_fail(c, NULL, "malformed JSON at line %u, column %u%s%s", line, col, what ? ": " : "",
            what ? what : "");
}

/* The length of the UTF-8 character at s[0..n) (nlohmann's strictness: no overlong form,
 * no surrogate, nothing past U+10FFFF), 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    const unsigned char b = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b < 0x80)
        return 1;
    if (b >= 0xC2 && b <= 0xDF)
        len = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        lo = b == 0xE0 ? 0xA0 : 0x80;
        hi = b == 0xED ? 0x9F : 0xBF;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        lo = b == 0xF0 ? 0x90 : 0x80;
        hi = b == 0xF4 ? 0x8F : 0xBF;
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

static int hexval(char h)
{
    return h >= '0' && h <= '9' ? h - '0'
           : h >= 'a' && h <= 'f' ? h - 'a' + 10
           : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                  : -1;
}

/* The string at s[i] (its opening quote); the offset after it. cJSON checks the surrogate
 * pairs, not the escapes' hex digits (it reads "\u00(" as U+0000); U+0000 is refused
 * because cJSON's strings end there. */
static size_t scan_string(js_ctx *c, const char *s, size_t n, size_t i)
{
    for (i++; i < n && c->st == MVM_OK;) {
        const unsigned char ch = (unsigned char)s[i];
        if (ch == '"')
            return i + 1;
        if (ch == '\\' && i + 1 < n && s[i + 1] == 'u') {
            int v = 0;
            for (size_t k = i + 2; k < i + 6; k++)
                v = k < n && hexval(s[k]) >= 0 && v >= 0 ? v * 16 + hexval(s[k]) : -1;
            if (v <= 0)
                text_fail(c, s, i, v ? "a \\u escape without four hex digits"
                                     : "U+0000 in a string is not supported");
            i += 6;
        } else if (ch == '\\') {
            if (i + 1 >= n || !strchr("\"\\/bfnrt", s[i + 1]) || !s[i + 1])
                text_fail(c, s, i, "an unknown escape");
            i += 2;
        } else if (ch < 0x20) {
            text_fail(c, s, i, "a control character in a string");
        } else {
            const size_t len = utf8_len((const unsigned char *)s + i, n - i);
            if (!len)
                text_fail(c, s, i, "invalid UTF-8 in a string");
            i += len;
        }
    }
    return n;
}

static int is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static void push_number(js_ctx *c, size_t at, size_t len)
{
    if (c->n_num % 256 == 0) {
        size_t *a = (size_t *)js_alloc(c, (c->n_num + 256) * sizeof *a);
        uint32_t *l = (uint32_t *)js_alloc(c, (c->n_num + 256) * sizeof *l);
        if (!a || !l)
            return;
        if (c->n_num) {
            memcpy(a, c->num_at, c->n_num * sizeof *a);
            memcpy(l, c->num_len, c->n_num * sizeof *l);
        }
        c->num_at = a;
        c->num_len = l;
    }
    c->num_at[c->n_num] = at;
    c->num_len[c->n_num++] = (uint32_t)len;
}

/* The number at s[i]: JSON's grammar exactly, and a double's range (nlohmann's "number
 * overflow"); the offset after it. */
static size_t scan_number(js_ctx *c, const char *s, size_t n, size_t i)
{
    size_t j = i + (s[i] == '-');
    if (j < n && s[j] == '0')
        j++;
    else if (j < n && is_digit(s[j]))
        while (j < n && is_digit(s[j]))
            j++;
    else
        text_fail(c, s, j, "a number without digits");
    if (j < n && s[j] == '.') {
        if (++j >= n || !is_digit(s[j]))
            text_fail(c, s, j, "a number's fraction without digits");
        while (j < n && is_digit(s[j]))
            j++;
    }
    if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        j += j + 1 < n && (s[j + 1] == '+' || s[j + 1] == '-') ? 2 : 1;
        if (j >= n || !is_digit(s[j]))
            text_fail(c, s, j, "a number's exponent without digits");
        while (j < n && is_digit(s[j]))
            j++;
    }
    if (j < n && (is_digit(s[j]) || s[j] == '.' || s[j] == 'e' || s[j] == 'E' || s[j] == '+' ||
                  s[j] == '-'))
        text_fail(c, s, j, "a malformed number");
    const char *num = js_strn(c, s + i, j - i);
    if (num && !isfinite(strtod(num, NULL)))
        text_fail(c, s, i, "a number out of a double's range");
    push_number(c, i, j - i);
    return j;
}

/* The checks cJSON leaves out (above), and the numbers as written. */
static void scan(js_ctx *c, const char *s, size_t n)
{
    size_t i = n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; /* a BOM, as both skip */
    int depth = 0;
    while (i < n && c->st == MVM_OK) {
        const unsigned char ch = (unsigned char)s[i];
        if (ch == '"') {
            i = scan_string(c, s, n, i);
            continue;
        }
        if (ch == '-' || is_digit((char)ch)) {
            i = scan_number(c, s, n, i);
            continue;
        }
        if ((ch == '[' || ch == '{') && ++depth > JS_MAX_JSON_DEPTH)
            text_fail(c, s, i, "nested deeper than 128 levels");
        if (ch == ']' || ch == '}')
            depth--;
        if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r')
            text_fail(c, s, i, "a control character");
        i++;
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Numbers get their index among the scanned ones (cJSON walks the text in its order);
 * objects may not repeat a key (nlohmann keeps the last, cJSON finds the first). */
static void walk(js_ctx *c, cJSON *v, size_t *k)
{
    if (cJSON_IsNumber(v)) {
        if (*k >= c->n_num)
            js_fail(c, NULL, "the numbers of the JSON text do not match cJSON's");
        else
            v->valueint = (int)(*k)++;
        return;
    }
    if (cJSON_IsObject(v)) {
        const size_t n = (size_t)cJSON_GetArraySize(v);
        const char **keys = (const char **)js_alloc(c, (n ? n : 1) * sizeof *keys);
        if (!keys)
            return;
        size_t i = 0;
        for (const cJSON *m = v->child; m; m = m->next)
            keys[i++] = m->string ? m->string : "";
        qsort(keys, n, sizeof *keys, cmp_str);
        for (i = 1; i < n; i++)
            if (strcmp(keys[i - 1], keys[i]) == 0) {
                js_fail(c, NULL, "the JSON repeats the key '%.60s' in an object", keys[i]);
                return;
            }
    }
    for (cJSON *m = v->child; m && c->st == MVM_OK; m = m->next)
        walk(c, m, k);
}

cJSON *js_parse(js_ctx *c, const char *s, size_t len)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(s, len, &end, 0);
    size_t at = end && end >= s && end <= s + len ? (size_t)(end - s) : 0;
    while (root && at < len && s[at] && strchr(" \t\n\r", s[at]))
        at++;
    if (!root || at < len) {
        text_fail(c, s, at, root ? "more after the JSON value" : NULL);
        cJSON_Delete(root);
        return NULL;
    }
    scan(c, s, len);
    size_t k = 0;
    if (c->st == MVM_OK)
        walk(c, root, &k);
    if (c->st == MVM_OK && k != c->n_num)
        js_fail(c, NULL, "the numbers of the JSON text do not match cJSON's");
    if (c->st != MVM_OK) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* ---- numbers and values ------------------------------------------------------------------ */

static const char *lexeme(const js_ctx *c, const cJSON *num, size_t *len)
{
    const size_t k = (size_t)num->valueint;
    *len = c->num_len[k];
    return c->text + c->num_at[k];
}

int js_is_int_literal(const js_ctx *c, const cJSON *num)
{
    size_t n;
    const char *s = lexeme(c, num, &n);
    for (size_t i = 0; i < n; i++)
        if (s[i] == '.' || s[i] == 'e' || s[i] == 'E')
            return 0;
    return 1;
}

int js_is_integral(const js_ctx *c, const cJSON *num)
{
    (void)c;
    return num->valuedouble == floor(num->valuedouble);
}

int js_number_bound(const js_ctx *c, const cJSON *num, int round_up, int64_t *out)
{
    if (js_is_int_literal(c, num)) {
        size_t n;
        const char *s = lexeme(c, num, &n);
        char buf[32];
        if (n >= sizeof buf)
            return 0;
        memcpy(buf, s, n);
        buf[n] = 0;
        errno = 0;
        const long long v = strtoll(buf, NULL, 10);
        *out = v;
        return errno == 0;
    }
    const double d = round_up ? ceil(num->valuedouble) : floor(num->valuedouble);
    if (!(d > -9.2e18 && d < 9.2e18))
        return 0;
    *out = (int64_t)d;
    return 1;
}

/* ---- doubles as nlohmann's to_chars writes them: Grisu2 ------------------------------------ */

/* f * 2^e */
typedef struct diyfp {
    uint64_t f;
    int e;
} diyfp;

/* x * y, the upper 64 bits of the product rounded (ties up). */
static diyfp diy_mul(diyfp x, diyfp y)
{
    const uint64_t u_lo = x.f & 0xFFFFFFFFu, u_hi = x.f >> 32;
    const uint64_t v_lo = y.f & 0xFFFFFFFFu, v_hi = y.f >> 32;
    const uint64_t p0 = u_lo * v_lo, p1 = u_lo * v_hi, p2 = u_hi * v_lo, p3 = u_hi * v_hi;
    uint64_t q = (p0 >> 32) + (p1 & 0xFFFFFFFFu) + (p2 & 0xFFFFFFFFu);
    q += 1ull << 31;
    return (diyfp){p3 + (p2 >> 32) + (p1 >> 32) + (q >> 32), x.e + y.e + 64};
}

static diyfp diy_normalize(diyfp x)
{
    while (!(x.f >> 63)) {
        x.f <<= 1;
        x.e--;
    }
    return x;
}

/* 10^k as f * 2^e for k = -300, -292, ..., 324. */
static const struct {
    uint64_t f;
    int e, k;
} cached_powers[] = {
    {0xAB70FE17C79AC6CAull, -1060, -300}, {0xFF77B1FCBEBCDC4Full, -1034, -292},
    {0xBE5691EF416BD60Cull, -1007, -284}, {0x8DD01FAD907FFC3Cull, -980, -276},
    {0xD3515C2831559A83ull, -954, -268}, {0x9D71AC8FADA6C9B5ull, -927, -260},
    {0xEA9C227723EE8BCBull, -901, -252}, {0xAECC49914078536Dull, -874, -244},
    {0x823C12795DB6CE57ull, -847, -236}, {0xC21094364DFB5637ull, -821, -228},
    {0x9096EA6F3848984Full, -794, -220}, {0xD77485CB25823AC7ull, -768, -212},
    {0xA086CFCD97BF97F4ull, -741, -204}, {0xEF340A98172AACE5ull, -715, -196},
    {0xB23867FB2A35B28Eull, -688, -188}, {0x84C8D4DFD2C63F3Bull, -661, -180},
    {0xC5DD44271AD3CDBAull, -635, -172}, {0x936B9FCEBB25C996ull, -608, -164},
    {0xDBAC6C247D62A584ull, -582, -156}, {0xA3AB66580D5FDAF6ull, -555, -148},
    {0xF3E2F893DEC3F126ull, -529, -140}, {0xB5B5ADA8AAFF80B8ull, -502, -132},
    {0x87625F056C7C4A8Bull, -475, -124}, {0xC9BCFF6034C13053ull, -449, -116},
    {0x964E858C91BA2655ull, -422, -108}, {0xDFF9772470297EBDull, -396, -100},
    {0xA6DFBD9FB8E5B88Full, -369, -92}, {0xF8A95FCF88747D94ull, -343, -84},
    {0xB94470938FA89BCFull, -316, -76}, {0x8A08F0F8BF0F156Bull, -289, -68},
    {0xCDB02555653131B6ull, -263, -60}, {0x993FE2C6D07B7FACull, -236, -52},
    {0xE45C10C42A2B3B06ull, -210, -44}, {0xAA242499697392D3ull, -183, -36},
    {0xFD87B5F28300CA0Eull, -157, -28}, {0xBCE5086492111AEBull, -130, -20},
    {0x8CBCCC096F5088CCull, -103, -12}, {0xD1B71758E219652Cull, -77, -4},
    {0x9C40000000000000ull, -50, 4}, {0xE8D4A51000000000ull, -24, 12},
    {0xAD78EBC5AC620000ull, 3, 20}, {0x813F3978F8940984ull, 30, 28},
    {0xC097CE7BC90715B3ull, 56, 36}, {0x8F7E32CE7BEA5C70ull, 83, 44},
    {0xD5D238A4ABE98068ull, 109, 52}, {0x9F4F2726179A2245ull, 136, 60},
    {0xED63A231D4C4FB27ull, 162, 68}, {0xB0DE65388CC8ADA8ull, 189, 76},
    {0x83C7088E1AAB65DBull, 216, 84}, {0xC45D1DF942711D9Aull, 242, 92},
    {0x924D692CA61BE758ull, 269, 100}, {0xDA01EE641A708DEAull, 295, 108},
    {0xA26DA3999AEF774Aull, 322, 116}, {0xF209787BB47D6B85ull, 348, 124},
    {0xB454E4A179DD1877ull, 375, 132}, {0x865B86925B9BC5C2ull, 402, 140},
    {0xC83553C5C8965D3Dull, 428, 148}, {0x952AB45CFA97A0B3ull, 455, 156},
    {0xDE469FBD99A05FE3ull, 481, 164}, {0xA59BC234DB398C25ull, 508, 172},
    {0xF6C69A72A3989F5Cull, 534, 180}, {0xB7DCBF5354E9BECEull, 561, 188},
    {0x88FCF317F22241E2ull, 588, 196}, {0xCC20CE9BD35C78A5ull, 614, 204},
    {0x98165AF37B2153DFull, 641, 212}, {0xE2A0B5DC971F303Aull, 667, 220},
    {0xA8D9D1535CE3B396ull, 694, 228}, {0xFB9B7CD9A4A7443Cull, 720, 236},
    {0xBB764C4CA7A44410ull, 747, 244}, {0x8BAB8EEFB6409C1Aull, 774, 252},
    {0xD01FEF10A657842Cull, 800, 260}, {0x9B10A4E5E9913129ull, 827, 268},
    {0xE7109BFBA19C0C9Dull, 853, 276}, {0xAC2820D9623BF429ull, 880, 284},
    {0x80444B5E7AA7CF85ull, 907, 292}, {0xBF21E44003ACDD2Dull, 933, 300},
    {0x8E679C2F5E44FF8Full, 960, 308}, {0xD433179D9C8CB841ull, 986, 316},
    {0x9E19DB92B4E31BA9ull, 1013, 324},
};

/* Steps back the last digit while that brings the digits nearer the value (dist: from the
 * upper boundary) inside the rounding interval (delta). */
static void grisu2_round(char *buf, int len, uint64_t dist, uint64_t delta, uint64_t rest,
                         uint64_t ten_k)
{
    while (rest < dist && delta - rest >= ten_k &&
           (rest + ten_k < dist || dist - rest > rest + ten_k - dist)) {
        buf[len - 1]--;
        rest += ten_k;
    }
}

/* The digits of a value w between m_minus and m_plus (one exponent, -60..-32): as few as
 * stay inside, into buf[*len..); *exp decreased by the fraction's digits. */
static void grisu2_digits(char *buf, int *len, int *exp, diyfp m_minus, diyfp w, diyfp m_plus)
{
    uint64_t delta = m_plus.f - m_minus.f, dist = m_plus.f - w.f;
    const int shift = -m_plus.e;
    const uint64_t one = 1ull << shift;
    uint32_t p1 = (uint32_t)(m_plus.f >> shift), pow10 = 1;
    uint64_t p2 = m_plus.f & (one - 1);
    int n = 1;
    while (n < 10 && p1 >= pow10 * 10u) {
        pow10 *= 10;
        n++;
    }
    for (; n > 0; pow10 /= 10) {
        buf[(*len)++] = (char)('0' + p1 / pow10);
        p1 %= pow10;
        n--;
        const uint64_t rest = ((uint64_t)p1 << shift) + p2;
        if (rest <= delta) {
            *exp += n;
            grisu2_round(buf, *len, dist, delta, rest, (uint64_t)pow10 << shift);
            return;
        }
    }
    int m = 0;
    do {
        p2 *= 10;
        buf[(*len)++] = (char)('0' + (p2 >> shift));
        p2 &= one - 1;
        m++;
        delta *= 10;
        dist *= 10;
    } while (p2 > delta);
    *exp -= m;
    grisu2_round(buf, *len, dist, delta, p2, one);
}

/* nlohmann's grisu2 of d > 0 (finite): d = buf[0..*len) * 10^*exp, the shortest digits in
 * most cases, not all (0.6512849 comes out 0.6512849000000001). */
static void grisu2(double d, char *buf, int *len, int *exp)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    const uint64_t e = bits >> 52, f = bits & ((1ull << 52) - 1);
    const diyfp v = e ? (diyfp){f + (1ull << 52), (int)e - 1075} : (diyfp){f, -1074};
    const diyfp m_plus = diy_normalize((diyfp){2 * v.f + 1, v.e - 1});
    diyfp m_minus = f == 0 && e > 1 ? (diyfp){4 * v.f - 1, v.e - 2} : (diyfp){2 * v.f - 1, v.e - 1};
    m_minus.f <<= m_minus.e - m_plus.e;
    m_minus.e = m_plus.e;
    const int t = -60 - m_plus.e - 1, k = t * 78913 / (1 << 18) + (t > 0);
    const int idx = (300 + k + 7) / 8;
    const diyfp c = {cached_powers[idx].f, cached_powers[idx].e};
    const diyfp w = diy_mul(diy_normalize(v), c), lo = diy_mul(m_minus, c);
    const diyfp hi = diy_mul(m_plus, c);
    *len = 0;
    *exp = -cached_powers[idx].k;
    grisu2_digits(buf, len, exp, (diyfp){lo.f + 1, lo.e}, w, (diyfp){hi.f - 1, hi.e});
}

/* A double as nlohmann's to_chars writes it: Grisu2's digits, in fixed notation for decimal
 * exponents -4 < n <= 15, else d.ddde+XX. */
static void dump_double(js_sb *b, double d)
{
    if (signbit(d)) {
        js_sb_add(b, "-");
        d = -d;
    }
    if (d == 0) {
        js_sb_add(b, "0.0");
        return;
    }
    char dig[32];
    int k, x;
    grisu2(d, dig, &k, &x);
    dig[k] = 0;
    const int n = k + x; /* the decimal point's place after the first digit */
    if (k <= n && n <= 15) {
        js_sb_add(b, dig);
        for (int i = k; i < n; i++)
            js_sb_add(b, "0");
        js_sb_add(b, ".0");
    } else if (n > 0 && n <= 15) {
        js_sb_addn(b, dig, (size_t)n);
        js_sb_add(b, ".");
        js_sb_add(b, dig + n);
    } else if (n > -4 && n <= 0) {
        js_sb_add(b, "0.");
        for (int i = 0; i < -n; i++)
            js_sb_add(b, "0");
        js_sb_add(b, dig);
    } else {
        js_sb_addn(b, dig, 1);
        if (k > 1) {
            js_sb_add(b, ".");
            js_sb_add(b, dig + 1);
        }
        const int ex = n - 1 < 0 ? 1 - n : n - 1;
        js_sb_addf(b, "e%c%s%d", n - 1 < 0 ? '-' : '+', ex < 10 ? "0" : "", ex);
    }
}

static void dump_number(js_sb *b, const cJSON *num)
{
    const js_ctx *c = b->c;
    if (js_is_int_literal(c, num)) { /* an int64, else a uint64, else a double: nlohmann's */
        size_t n;
        const char *s = lexeme(c, num, &n);
        char buf[32];
        if (n < sizeof buf) {
            memcpy(buf, s, n);
            buf[n] = 0;
            errno = 0;
            if (buf[0] == '-') {
                const long long v = strtoll(buf, NULL, 10);
                if (errno == 0) {
                    js_sb_addf(b, "%lld", v);
                    return;
                }
            } else {
                const unsigned long long v = strtoull(buf, NULL, 10);
                if (errno == 0) {
                    js_sb_addf(b, "%llu", v);
                    return;
                }
            }
        }
    }
    dump_double(b, num->valuedouble);
}

/* nlohmann's dump_escaped without ensure_ascii: quotes, backslashes and control characters
 * escaped (\u00xx in lower case where no short form exists), the rest as it is. */
static void dump_string(js_sb *b, const char *s)
{
    js_sb_add(b, "\"");
    for (; *s; s++) {
        const unsigned char ch = (unsigned char)*s;
        const char *esc = ch == '"'    ? "\\\""
                          : ch == '\\' ? "\\\\"
                          : ch == '\b' ? "\\b"
                          : ch == '\f' ? "\\f"
                          : ch == '\n' ? "\\n"
                          : ch == '\r' ? "\\r"
                          : ch == '\t' ? "\\t"
                                       : NULL;
        if (esc)
            js_sb_add(b, esc);
        else if (ch < 0x20)
            js_sb_addf(b, "\\u%04x", ch);
        else
            js_sb_addn(b, s, 1);
    }
    js_sb_add(b, "\"");
}

void js_dump(js_sb *b, const cJSON *v)
{
    if (cJSON_IsNull(v))
        js_sb_add(b, "null");
    else if (cJSON_IsTrue(v))
        js_sb_add(b, "true");
    else if (cJSON_IsFalse(v))
        js_sb_add(b, "false");
    else if (cJSON_IsNumber(v))
        dump_number(b, v);
    else if (cJSON_IsString(v))
        dump_string(b, v->valuestring);
    else {
        const int obj = cJSON_IsObject(v);
        js_sb_add(b, obj ? "{" : "[");
        for (const cJSON *m = v->child; m; m = m->next) {
            if (m != v->child)
                js_sb_add(b, ",");
            if (obj) {
                dump_string(b, m->string ? m->string : "");
                js_sb_add(b, ":");
            }
            js_dump(b, m);
        }
        js_sb_add(b, obj ? "}" : "]");
    }
}

char *js_literal(js_ctx *c, const char *s)
{
    if (!s)
        return NULL;
    js_sb b = {c, NULL, 0, 0};
    js_sb_add(&b, "\"");
    for (; *s; s++) {
        const char *esc = *s == '\r'   ? "\\r"
                          : *s == '\n' ? "\\n"
                          : *s == '"'  ? "\\\""
                          : *s == '\\' ? "\\\\"
                                       : NULL;
        if (esc)
            js_sb_add(&b, esc);
        else
            js_sb_addn(&b, s, 1);
    }
    js_sb_add(&b, "\"");
    return js_sb_done(&b);
}
