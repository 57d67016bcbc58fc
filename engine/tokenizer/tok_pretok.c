/*
 * Cutting a text into pre-tokens: decode it once into code points and classes, then let each
 * of the pre-tokenizer's regexes (tok_regex.c) cut every piece the earlier ones left into
 * its matches and the text between them. This is how llama.cpp's unicode_regex_split and
 * Hugging Face's Sequence of Split pre-tokenizers chain regexes; a one-regex pre-tokenizer
 * (GPT-2's, Qwen2's) is the same thing with one pass over one piece.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tokenizer_impl.h"
#include "vmm/error.h"

void tok_pieces_free(tok_pieces *p)
{
    free(p->end);
    free(p->cp);
    free(p->cls);
    free(p->off);
    free(p->cut);
    memset(p, 0, sizeof *p);
}

/* Room for a text of n bytes: at most n code points, and as many pieces. */
static mvm_status reserve(tok_pieces *p, size_t n)
{
    if (n <= p->cap && p->end)
        return MVM_OK;
    size_t cap = n > 2 * p->cap ? n : 2 * p->cap;
    tok_pieces grown = {0};
    grown.end = malloc((cap + 1) * sizeof *grown.end);
    grown.cut = malloc((cap + 1) * sizeof *grown.cut);
    grown.off = malloc((cap + 1) * sizeof *grown.off);
    grown.cp = malloc((cap + 1) * sizeof *grown.cp);
    grown.cls = malloc(cap + 1);
    if (!grown.end || !grown.cut || !grown.off || !grown.cp || !grown.cls) {
        tok_pieces_free(&grown);
        return mvm_fail(MVM_ERR_NOMEM, "tokenizer: no memory to pre-tokenize %zu bytes", n);
    }
    tok_pieces_free(p);
    grown.cap = cap;
    *p = grown;
    return MVM_OK;
}

/* Decodes s into p->cp, p->cls and p->off (where each code point starts; off[m] = n);
 * returns the number of code points m. */
static size_t decode(const uint8_t *s, size_t n, tok_pieces *p)
{
    size_t m = 0;
    for (size_t pos = 0; pos < n; m++) {
        p->off[m] = pos;
        pos += tok_utf8_decode(s + pos, n - pos, &p->cp[m]);
        p->cls[m] = (uint8_t)tok_cp_class(p->cp[m]);
    }
    p->off[m] = n;
    return m;
}

static int find(const tok_pass *pass, const tok_text *t, size_t p, size_t end, size_t *ms,
                size_t *me)
{
    if (pass->find)
        return pass->find(t, p, end, ms, me);
    for (; p < end; p++) {
        size_t e = pass->match(t, p, end);
        if (e > p) {
            *ms = p, *me = e;
            return 1;
        }
    }
    return 0;
}

/* Cuts the k pieces ending at cur[] by one regex into next[]; returns their number. Every
 * piece is non-empty, so there are never more than code points. */
static size_t apply(const tok_pass *pass, const tok_text *t, const size_t *cur, size_t k,
                    size_t *next)
{
    size_t out = 0;
    for (size_t i = 0, start = 0; i < k; start = cur[i++]) {
        size_t end = cur[i], gap = start, ms, me;
        while (gap < end && find(pass, t, gap, end, &ms, &me)) {
            if (ms > gap)
                next[out++] = ms;
            next[out++] = gap = me;
        }
        if (gap < end)
            next[out++] = end;
    }
    return out;
}

mvm_status tok_pretok_split(enum tok_pre pre, const uint8_t *s, size_t n, tok_pieces *out)
{
    mvm_status st = reserve(out, n);
    if (st != MVM_OK)
        return st;
    size_t m = decode(s, n, out), k = m > 0, n_pass;
    const tok_pass *passes = tok_pretok_passes(pre, &n_pass);
    const tok_text t = {out->cp, out->cls};
    size_t *cur = out->end, *next = out->cut;
    cur[0] = m;
    for (size_t i = 0; i < n_pass && k; i++) {
        k = apply(&passes[i], &t, cur, k, next);
        size_t *swap = cur;
        cur = next, next = swap;
    }
    for (size_t i = 0; i < k; i++) /* code points to bytes; cur may be out->end itself */
        out->end[i] = out->off[cur[i]];
    out->n = k;
    return MVM_OK;
}
