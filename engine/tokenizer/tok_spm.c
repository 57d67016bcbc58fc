/*
 * SentencePiece-style encoding, as llama.cpp's llm_tokenizer_spm: spaces become "▁"
 * (U+2581), a "▁" is prepended (add_space_prefix), the text is cut into UTF-8 characters,
 * and the adjacent pair whose concatenation is the vocabulary token of the highest score is
 * merged — ties to the leftmost pair — until no adjacent pair forms a token. Every final
 * piece is a token or falls back to one byte token per byte.
 *
 * One deviation: llama.cpp cuts characters by their lead byte alone, so a truncated
 * sequence swallows the bytes after it — the start of an escaped space, which then decodes
 * as "▁". Here an invalid sequence is cut into single bytes, which changes nothing for
 * valid UTF-8 and lets any text round-trip.
 */
#include <stdlib.h>

#include "engine/tokenizer/tokenizer_impl.h"
#include "vmm/error.h"

typedef struct piece {
    size_t start, n;    /* bytes of the escaped text; n = 0 once merged into its left */
    int32_t prev, next; /* neighbours, -1 at the ends */
} piece;

typedef struct spm {
    const mvm_tokenizer *t;
    const char *s;
    piece *p;
    tok_heap q;
} spm;

/* Queues the merge of pieces l and r if their concatenation is a token. */
static mvm_status try_pair(spm *m, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return MVM_OK;
    size_t size = m->p[l].n + m->p[r].n;
    int32_t id = tok_strtab_find(&m->t->text, m->s + m->p[l].start, size);
    if (id < 0)
        return MVM_OK;
    return tok_heap_push(&m->q, (tok_bigram){m->t->score[id], l, r, size});
}

static mvm_status merge_all(spm *m)
{
    tok_bigram b;
    mvm_status st = MVM_OK;
    while (st == MVM_OK && tok_heap_pop(&m->q, &b)) {
        piece *l = &m->p[b.left], *r = &m->p[b.right];
        /* Stale: a piece was merged away or grew since (sizes only grow). */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            m->p[r->next].prev = b.left;
        st = try_pair(m, l->prev, b.left);
        if (st == MVM_OK)
            st = try_pair(m, b.left, l->next);
    }
    return st;
}

/* Each final piece as its token, or byte by byte (every byte has a fallback: SPM
 * vocabularies always have an unknown token, 0 by default). */
static void emit_all(const spm *m, tok_out *o)
{
    for (int32_t i = 0; i >= 0; i = m->p[i].next) {
        const char *s = m->s + m->p[i].start;
        int32_t id = tok_strtab_find(&m->t->text, s, m->p[i].n);
        if (id >= 0)
            tok_emit(o, id);
        else
            for (size_t k = 0; k < m->p[i].n; k++)
                tok_emit(o, m->t->byte_token[(uint8_t)s[k]]);
    }
}

mvm_status tok_spm_encode(const mvm_tokenizer *t, const char *text, size_t len, tok_out *o)
{
    size_t n = t->add_space_prefix ? 3 : 0;
    for (size_t i = 0; i < len; i++)
        n += text[i] == ' ' ? 3 : 1;
    char *s = malloc(n);
    piece *p = malloc(n * sizeof *p);
    if (!s || !p) {
        free(s);
        free(p);
        return mvm_fail(MVM_ERR_NOMEM, "tokenizer: no memory for %zu bytes of text", len);
    }
    size_t k = 0;
    if (t->add_space_prefix)
        s[k++] = '\xE2', s[k++] = '\x96', s[k++] = '\x81';
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ')
            s[k++] = '\xE2', s[k++] = '\x96', s[k++] = '\x81';
        else
            s[k++] = text[i];
    }
    int32_t count = 0;
    for (size_t off = 0; off < n; count++) {
        uint32_t cp;
        size_t cl = tok_utf8_decode((const uint8_t *)s + off, n - off, &cp);
        p[count] = (piece){off, cl, count - 1, count + 1};
        off += p[count].n;
    }
    p[count - 1].next = -1;
    spm m = {t, s, p, {0}};
    mvm_status st = MVM_OK;
    for (int32_t i = 1; st == MVM_OK && i < count; i++)
        st = try_pair(&m, i - 1, i);
    if (st == MVM_OK)
        st = merge_all(&m);
    if (st == MVM_OK)
        emit_all(&m, o);
    tok_heap_free(&m.q);
    free(s);
    free(p);
    return st;
}
