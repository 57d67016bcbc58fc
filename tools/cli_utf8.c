/* UTF-8 for the text the CLI and the server show or send (tools/cli.h): what a character
 * is, and a model's bytes made valid. A file of their own, with no other dependency, so that
 * the server's fuzz target (tests/fuzz/fuzz_serve.c) links them without the CLI. */
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"

size_t mvm_cli_utf8_char(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || len > n)
        return 0;
    /* the second byte's range narrows for E0, ED, F0 and F4 (RFC 3629's table) */
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

char *mvm_cli_valid_utf8(const char *text, size_t n)
{
    char *out = malloc(3 * n + 1), *o = out;
    const unsigned char *s = (const unsigned char *)(text ? text : "");
    for (size_t i = 0; out && i < n;) {
        size_t k = s[i] ? mvm_cli_utf8_char(s + i, n - i) : 0;
        if (k) {
            memcpy(o, s + i, k), o += k, i += k;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3), o += 3, i++;
        }
    }
    if (out)
        *o = '\0';
    return out;
}
