/*
 * Byte-level BPE encoding, as llama.cpp's llm_tokenizer_bpe: the pre-tokenizer cuts the
 * text into words; each byte of a word starts as its byte-level symbol's token, and the
 * adjacent pair of the lowest merge rank is merged — ties to the leftmost pair — until no
 * adjacent pair has a merge. Merges only ever make tokens (loading checks that every merge
 * result is one), so the final symbols are tokens, except a byte whose symbol is not in
 * the vocabulary, which llama.cpp drops and so does this. Pre-tokenizers whose vocabularies
 * ignore merges (Llama 3's) take a word that is a token as that token first.
 */
#include <stdlib.h>

#include "engine/tokenizer/tokenizer_impl.h"
#include "vmm/error.h"

typedef struct sym {
    int32_t id;         /* the token, -1 for a byte without one */
    uint32_t n;         /* bytes; 0 once merged into its left */
    int32_t prev, next; /* neighbours in the word, -1 at the ends */
} sym;

typedef struct bpe {
    const mvm_tokenizer *t;
    sym *w;
    size_t cap;
    tok_heap q;
    char *spelt; /* a word in byte-level symbols, 2 bytes per byte at most */
} bpe;

/* Queues the merge of symbols l and r if their tokens have one. */
static mvm_status try_pair(bpe *b, int32_t l, int32_t r)
{
    if (l < 0 || r < 0 || b->w[l].id < 0 || b->w[r].id < 0)
        return MVM_OK;
    const uint32_t *rank =
        tok_u64map_get(&b->t->merge_rank, tok_pair_key((uint32_t)b->w[l].id, (uint32_t)b->w[r].id));
    if (!rank)
        return MVM_OK;
    return tok_heap_push(&b->q, (tok_bigram){-(double)*rank, l, r, b->w[l].n + b->w[r].n});
}

/* The token whose text is the word spelt in byte-level symbols, or -1. */
static int32_t whole_word(const bpe *b, const uint8_t *s, size_t n)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += tok_byte_symbol(s[i], b->spelt + len);
    return tok_strtab_find(&b->t->text, b->spelt, len);
}

static mvm_status encode_word(bpe *b, const uint8_t *s, size_t n, tok_out *o)
{
    if (n > b->cap) {
        sym *w = realloc(b->w, n * sizeof *w);
        char *spelt = realloc(b->spelt, 2 * n);
        if (w)
            b->w = w;
        if (spelt)
            b->spelt = spelt;
        if (!w || !spelt)
            return mvm_fail(MVM_ERR_NOMEM, "tokenizer: no memory for a word of %zu bytes", n);
        b->cap = n;
    }
    int32_t whole = b->t->ignore_merges ? whole_word(b, s, n) : -1;
    if (whole >= 0) {
        tok_emit(o, whole);
        return MVM_OK;
    }
    int32_t count = (int32_t)n;
    for (int32_t i = 0; i < count; i++)
        b->w[i] = (sym){b->t->byte_token[s[i]], 1, i - 1, i + 1 < count ? i + 1 : -1};
    b->q.n = 0;
    mvm_status st = MVM_OK;
    for (int32_t i = 1; st == MVM_OK && i < count; i++)
        st = try_pair(b, i - 1, i);
    tok_bigram m;
    while (st == MVM_OK && tok_heap_pop(&b->q, &m)) {
        sym *l = &b->w[m.left], *r = &b->w[m.right];
        /* Stale: a symbol was merged away or grew since (sizes only grow). */
        if (l->n == 0 || r->n == 0 || l->n + r->n != m.size)
            continue;
        l->id = b->t->merge_result[(uint32_t)-m.prio];
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            b->w[r->next].prev = m.left;
        st = try_pair(b, l->prev, m.left);
        if (st == MVM_OK)
            st = try_pair(b, m.left, l->next);
    }
    for (int32_t i = 0; st == MVM_OK && i >= 0; i = b->w[i].next)
        if (b->w[i].id >= 0)
            tok_emit(o, b->w[i].id);
    return st;
}

mvm_status tok_bpe_encode(const mvm_tokenizer *t, const char *text, size_t len, tok_out *o)
{
    const uint8_t *s = (const uint8_t *)text;
    bpe b = {t, NULL, 0, {0}, NULL};
    tok_pieces words = {0};
    mvm_status st = tok_pretok_split(t->pre, s, len, &words);
    for (size_t i = 0, start = 0; st == MVM_OK && i < words.n; start = words.end[i++])
        st = encode_word(&b, s + start, words.end[i] - start, o);
    tok_pieces_free(&words);
    tok_heap_free(&b.q);
    free(b.w);
    free(b.spelt);
    return st;
}
