/* The texts that fill a built-in vocabulary (see vocab_fill.h). */
#include "engine/synth/vocab_fill.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/synth/vocab_build.h"
#include "vmm/error.h"

/* Longer letter runs are left out (the corpus has none), so a text fits in TEXT_MAX. */
#define WORD_MAX 40
#define TEXT_MAX (2 * WORD_MAX + 4)

struct fill {
    tok_strtab *out;
    uint32_t want;
    tok_strtab words;   /* lower case, by id */
    uint32_t *by_rank;  /* word ids, most frequent first */
    uint32_t n_words;
};

static int full(const struct fill *f)
{
    return f->out->n >= f->want;
}

/* Appends s[0..n) unless it is there already or the table is full. */
static mvm_status emit(struct fill *f, const char *s, size_t n)
{
    if (full(f) || tok_strtab_find(f->out, s, n) >= 0)
        return MVM_OK;
    return tok_strtab_push(f->out, s, n, 1);
}

/* ASCII only: the locale's classes would make the texts depend on the machine. */
static int is_letter(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* The ranked word `rank`, after a space when `space`, capitalised when `capital`, then
 * `tail`, into buf; returns its length. */
static size_t form(const struct fill *f, uint32_t rank, int space, int capital, const char *tail,
                   char *buf)
{
    uint32_t id = f->by_rank[rank];
    size_t n = 0, len = f->words.len[id], tail_len = strlen(tail);
    if (space)
        buf[n++] = ' ';
    memcpy(buf + n, tok_strtab_str(&f->words, id), len);
    if (capital)
        buf[n] = (char)(buf[n] - 'a' + 'A');
    memcpy(buf + n + len, tail, tail_len);
    return n + len + tail_len;
}

/* The corpus's distinct words in lower case, with their counts. */
static mvm_status collect_words(struct fill *f, uint64_t **counts)
{
    size_t cap = 0;
    mvm_status st = MVM_OK;
    for (size_t p = 0; p < mvm_vocab_corpus_n && st == MVM_OK; p++) {
        const char *s = mvm_vocab_corpus[p];
        for (size_t i = 0, j; s[i] && st == MVM_OK; i = j) {
            char w[WORD_MAX];
            for (j = i; is_letter(s[j]); j++)
                if (j - i < WORD_MAX)
                    w[j - i] = lower(s[j]);
            if (j == i)
                j++;
            if (j - i > WORD_MAX || !is_letter(s[i]))
                continue;
            int32_t id = tok_strtab_find(&f->words, w, j - i);
            if (id < 0) {
                id = (int32_t)f->words.n;
                if (f->words.n == cap) {
                    uint64_t *c = realloc(*counts, (cap = 2 * cap + 1024) * sizeof *c);
                    if (!c)
                        return mvm_fail(MVM_ERR_NOMEM, "vocabulary: no memory for word counts");
                    *counts = c;
                }
                (*counts)[id] = 0;
                st = tok_strtab_push(&f->words, w, j - i, 1);
            }
            if (st == MVM_OK)
                (*counts)[id]++;
        }
    }
    f->n_words = f->words.n;
    return st;
}

struct ranked {
    uint64_t count;
    const char *text;
    uint32_t id;
};

static int by_count(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    return x->count != y->count ? (x->count < y->count ? 1 : -1) : strcmp(x->text, y->text);
}

/* Ranks the corpus's words: most frequent first, ties in alphabetical order. */
static mvm_status rank_words(struct fill *f)
{
    uint64_t *counts = NULL;
    mvm_status st = collect_words(f, &counts);
    struct ranked *r = NULL;
    if (st == MVM_OK) {
        r = malloc((f->n_words ? f->n_words : 1) * sizeof *r);
        f->by_rank = malloc((f->n_words ? f->n_words : 1) * sizeof *f->by_rank);
        if (!r || !f->by_rank)
            st = mvm_fail(MVM_ERR_NOMEM, "vocabulary: no memory for %u words", f->n_words);
    }
    for (uint32_t i = 0; st == MVM_OK && i < f->n_words; i++)
        r[i] = (struct ranked){counts[i], tok_strtab_str(&f->words, i), i};
    if (st == MVM_OK)
        qsort(r, f->n_words, sizeof *r, by_count);
    for (uint32_t i = 0; st == MVM_OK && i < f->n_words; i++)
        f->by_rank[i] = r[i].id;
    free(r);
    free(counts);
    return st;
}

/* Each word as " word", " Word", "word", "Word": every word in one form before the next. */
static mvm_status word_forms(struct fill *f)
{
    mvm_status st = MVM_OK;
    char buf[TEXT_MAX];
    for (int k = 0; k < 4; k++)
        for (uint32_t r = 0; r < f->n_words && st == MVM_OK; r++)
            st = emit(f, buf, form(f, r, k < 2, k % 2, "", buf));
    return st;
}

/* Word pieces: " " + a prefix, and a suffix, of two letters or more with two left over. */
static mvm_status pieces(struct fill *f)
{
    mvm_status st = MVM_OK;
    char buf[TEXT_MAX];
    for (uint32_t r = 0; r < f->n_words && st == MVM_OK; r++) {
        uint32_t id = f->by_rank[r], len = f->words.len[id];
        const char *w = tok_strtab_str(&f->words, id);
        for (uint32_t k = 2; k + 2 <= len && st == MVM_OK; k++) {
            buf[0] = ' ';
            memcpy(buf + 1, w, k);
            st = emit(f, buf, k + 1);
            if (st == MVM_OK)
                st = emit(f, w + k, len - k);
        }
    }
    return st;
}

/* " word" and a punctuation mark. */
static mvm_status punctuated(struct fill *f)
{
    static const char *const marks[] = {",", ".", ";", ":", "!", "?"};
    mvm_status st = MVM_OK;
    char buf[TEXT_MAX];
    for (size_t m = 0; m < sizeof marks / sizeof *marks; m++)
        for (uint32_t r = 0; r < f->n_words && st == MVM_OK; r++)
            st = emit(f, buf, form(f, r, 1, 0, marks[m], buf));
    return st;
}

/* The corpus's pairs of words parted by one space, as written ("Great Britain"). */
static mvm_status corpus_pairs(struct fill *f)
{
    mvm_status st = MVM_OK;
    char buf[TEXT_MAX];
    for (size_t p = 0; p < mvm_vocab_corpus_n && st == MVM_OK; p++) {
        const char *s = mvm_vocab_corpus[p];
        size_t prev = 0, prev_len = 0; /* the word before, 0 long when none */
        for (size_t i = 0, j; s[i] && st == MVM_OK; i = j) {
            for (j = i; is_letter(s[j]); j++)
                ;
            if (j == i) {
                j++;
                continue;
            }
            if (prev_len && prev + prev_len + 1 == i && s[i - 1] == ' ' &&
                prev_len <= WORD_MAX && j - i <= WORD_MAX) {
                buf[0] = ' ';
                memcpy(buf + 1, s + prev, prev_len + 1 + (j - i));
                st = emit(f, buf, prev_len + 2 + (j - i));
            }
            prev = i;
            prev_len = j - i;
        }
    }
    return st;
}

/* Any two different words, " word word", by the sum of their ranks: as many as needed. */
static mvm_status any_pairs(struct fill *f)
{
    mvm_status st = MVM_OK;
    char buf[TEXT_MAX];
    uint32_t w = f->n_words;
    for (uint64_t sum = 1; w && sum + 1 < 2ull * w && !full(f) && st == MVM_OK; sum++)
        for (uint32_t a = sum < w ? 0 : (uint32_t)(sum - w + 1); a <= sum && a < w && st == MVM_OK;
             a++) {
            uint32_t b = (uint32_t)(sum - a);
            if (a == b)
                continue;
            size_t n = form(f, a, 1, 0, "", buf);
            st = emit(f, buf, n + form(f, b, 1, 0, "", buf + n));
        }
    return st;
}

mvm_status mvm_vocab_fill_texts(uint32_t n, tok_strtab *out)
{
    struct fill f = {.out = out, .want = n};
    mvm_status st = rank_words(&f);
    mvm_status (*const rounds[])(struct fill *) = {word_forms, pieces, punctuated, corpus_pairs,
                                                   any_pairs};
    for (size_t i = 0; i < sizeof rounds / sizeof *rounds && st == MVM_OK; i++)
        st = rounds[i](&f);
    for (uint32_t u = 0; !full(&f) && st == MVM_OK; u++) { /* numbers never run out */
        char buf[16];
        st = emit(&f, buf, (size_t)snprintf(buf, sizeof buf, " %u", u));
    }
    tok_strtab_free(&f.words);
    free(f.by_rank);
    return st;
}
