/* Decoding: the bytes a token stands for (see mvm_tokenizer_piece in tokenizer.h). */
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tokenizer_impl.h"

/* Appends p[0..n) at buf[*pos] as far as cap allows; *pos counts every byte. */
static void put(char *buf, size_t cap, size_t *pos, const char *p, size_t n)
{
    if (*pos < cap)
        memcpy(buf + *pos, p, n < cap - *pos ? n : cap - *pos);
    *pos += n;
}

/* SentencePiece text: U+2581 "▁" stands for a space. */
static void unescape(const char *s, size_t n, char *buf, size_t cap, size_t *pos)
{
    static const char mark[3] = {'\xE2', '\x96', '\x81'};
    size_t done = 0;
    for (size_t i = 0; i + 3 <= n;) {
        if (memcmp(s + i, mark, 3) == 0) {
            put(buf, cap, pos, s + done, i - done);
            put(buf, cap, pos, " ", 1);
            done = i += 3;
        } else {
            i++;
        }
    }
    put(buf, cap, pos, s + done, n - done);
}

/* Byte-level text: each character of the alphabet stands for its byte; characters outside
 * it (or invalid UTF-8) stand for themselves. */
static void unmap_bytes(const char *s, size_t n, char *buf, size_t cap, size_t *pos)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = tok_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        int b = cp == TOK_CP_INVALID ? -1 : tok_symbol_byte(cp);
        char c = (char)b;
        put(buf, cap, pos, b >= 0 ? &c : s + i, b >= 0 ? 1 : len);
        i += len;
    }
}

static size_t piece(const mvm_tokenizer *t, int32_t id, int special, char *buf, size_t cap)
{
    if (id < 0 || (uint32_t)id >= t->text.n)
        return 0;
    const char *s = tok_strtab_str(&t->text, (uint32_t)id);
    size_t n = t->text.len[id], pos = 0;
    switch (t->type[id]) {
    case MVM_TOKEN_USER_DEFINED:
        put(buf, cap, &pos, s, n);
        break;
    case MVM_TOKEN_NORMAL:
        if (t->model == TOK_MODEL_SPM)
            unescape(s, n, buf, cap, &pos);
        else
            unmap_bytes(s, n, buf, cap, &pos);
        break;
    case MVM_TOKEN_BYTE:
        if (t->model == TOK_MODEL_SPM) { /* <0xHH>, checked when loading */
            char hex[3] = {s[3], s[4], 0};
            char c = (char)strtoul(hex, NULL, 16);
            put(buf, cap, &pos, &c, 1);
        }
        break;
    case MVM_TOKEN_CONTROL:
        if (special)
            put(buf, cap, &pos, s, n);
        break;
    default: /* unknown, unused, undefined: nothing, as llama.cpp */
        break;
    }
    return pos;
}

size_t mvm_tokenizer_piece(const mvm_tokenizer *t, int32_t id, char *buf, size_t cap)
{
    return piece(t, id, 0, buf, cap);
}

size_t mvm_tokenizer_piece_special(const mvm_tokenizer *t, int32_t id, char *buf, size_t cap)
{
    return piece(t, id, 1, buf, cap);
}
