/*
 * Special tokens written as text: a chat template's output ("<|im_start|>user\n...") names
 * its control tokens by their texts, and they must become those tokens, not the characters
 * "<", "|", "im", ... (tokenizer.h's mvm_tokenizer_encode_special). As llama.cpp's
 * tokenizer_st_partition with parse_special: the texts of the CONTROL and USER_DEFINED
 * tokens are found, the longest first where several start at one place, and the text
 * between them is encoded as usual, each piece on its own (so SentencePiece's space prefix
 * starts every piece, as llama.cpp gives it after a special token).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tokenizer_impl.h"
#include "vmm/error.h"

struct by_len {
    uint32_t len;
    int32_t id;
};

static int longer_first(const void *a, const void *b)
{
    const struct by_len *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : 1;
}

static int is_special(const mvm_tokenizer *t, uint32_t id)
{
    return (t->type[id] == MVM_TOKEN_CONTROL || t->type[id] == MVM_TOKEN_USER_DEFINED) &&
           t->text.len[id] > 0;
}

mvm_status tok_special_index(mvm_tokenizer *t)
{
    uint32_t n = 0;
    for (uint32_t id = 0; id < t->text.n; id++)
        n += is_special(t, id);
    struct by_len *tmp = n ? malloc(n * sizeof *tmp) : NULL;
    if (n && (!tmp || !(t->special = malloc(n * sizeof *t->special)))) {
        free(tmp);
        return mvm_fail(MVM_ERR_NOMEM, "tokenizer: no memory for %u special tokens", n);
    }
    n = 0;
    for (uint32_t id = 0; id < t->text.n; id++)
        if (is_special(t, id)) {
            tmp[n++] = (struct by_len){t->text.len[id], (int32_t)id};
            t->special_first[(uint8_t)tok_strtab_str(&t->text, id)[0]] = 1;
        }
    if (n)
        qsort(tmp, n, sizeof *tmp, longer_first);
    for (uint32_t i = 0; i < n; i++)
        t->special[i] = tmp[i].id;
    t->n_special = n;
    free(tmp);
    return MVM_OK;
}

/* The special token whose text starts s[0..n), the longest; -1 for none. */
static int32_t special_at(const mvm_tokenizer *t, const char *s, size_t n)
{
    if (!t->special_first[(uint8_t)s[0]])
        return -1;
    for (uint32_t i = 0; i < t->n_special; i++) {
        int32_t id = t->special[i];
        uint32_t len = t->text.len[id];
        if (len <= n && memcmp(s, tok_strtab_str(&t->text, (uint32_t)id), len) == 0)
            return id;
    }
    return -1;
}

static mvm_status encode_plain(const mvm_tokenizer *t, const char *s, size_t n, tok_out *o)
{
    if (n == 0)
        return MVM_OK;
    return t->model == TOK_MODEL_SPM ? tok_spm_encode(t, s, n, o) : tok_bpe_encode(t, s, n, o);
}

mvm_status tok_special_encode(const mvm_tokenizer *t, const char *text, size_t len, tok_out *o)
{
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t id = special_at(t, text + i, len - i);
        if (id < 0)
            continue;
        mvm_status st = encode_plain(t, text + start, i - start, o);
        if (st != MVM_OK)
            return st;
        tok_emit(o, id);
        i += t->text.len[id] - 1;
        start = i + 1;
    }
    return encode_plain(t, text + start, len - start, o);
}
