/*
 * A lazy grammar's watch for its trigger (mvm_grammar_set_lazy, include/moevm/engine.h):
 * the text of the tokens accepted, scanned byte by byte for a trigger word outside the
 * quiet block (a reasoning block, where a model may write "<tool_call>" while it thinks
 * about calling). Only the bytes not yet decided are kept: those that may still begin a
 * word, so a reply of any length needs a few dozen bytes here.
 *
 * llama.cpp's lazy grammars take trigger words and regular expressions (common/chat.cpp
 * builds patterns that skip a <think> block); the words and the one quiet block are what
 * those patterns express for the syntaxes moevm forces (engine/chat/chat_reply_tools.c).
 */
#include "engine/grammar/grammar_impl.h"

#include <stdlib.h>
#include <string.h>

#include "vmm/error.h"

struct gr_lazy {
    char **words;
    size_t n_words;
    char *quiet_open, *quiet_close; /* NULL: no quiet block */
    int quiet;                      /* inside it now */
    char *buf;                      /* the bytes not yet decided */
    size_t n, cap;
};

void gr_lazy_free(gr_lazy *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n_words; i++)
        free(l->words[i]);
    free(l->words), free(l->quiet_open), free(l->quiet_close), free(l->buf);
    free(l);
}

mvm_status gr_lazy_new(const mvm_grammar_triggers *t, gr_lazy **out)
{
    *out = NULL;
    if (!t || !t->n_words || !t->words || !t->quiet_open != !t->quiet_close ||
        (t->quiet_open && (!*t->quiet_open || !*t->quiet_close)))
        return mvm_fail(MVM_ERR_INVALID, "grammar: a lazy grammar needs trigger words, and a "
                        "quiet block both its ends or neither");
    for (size_t i = 0; i < t->n_words; i++)
        if (!t->words[i] || !*t->words[i])
            return mvm_fail(MVM_ERR_INVALID, "grammar: trigger word %zu is empty", i);
    gr_lazy *l = calloc(1, sizeof *l);
    int nomem = !l || !(l->words = calloc(t->n_words, sizeof *l->words));
    for (size_t i = 0; !nomem && i < t->n_words; i++, l->n_words++)
        nomem = !(l->words[i] = strdup(t->words[i]));
    if (!nomem && t->quiet_open)
        nomem = !(l->quiet_open = strdup(t->quiet_open)) ||
                !(l->quiet_close = strdup(t->quiet_close));
    if (nomem) {
        gr_lazy_free(l);
        return mvm_fail(MVM_ERR_NOMEM, "grammar: no memory for its triggers");
    }
    l->quiet = t->quiet_open && t->quiet_start;
    *out = l;
    return MVM_OK;
}

enum { NONE, PARTIAL, FULL };

/* Whether p[0..n) starts with word (FULL), or is all a prefix of it (PARTIAL). */
static int match(const char *p, size_t n, const char *word)
{
    const size_t w = strlen(word);
    if (n >= w)
        return memcmp(p, word, w) ? NONE : FULL;
    return memcmp(p, word, n) ? NONE : PARTIAL;
}

/* Scans the undecided bytes: 1 with the trigger at the start of l->buf; 0 with the bytes
 * that may still begin a word kept. */
static int scan(gr_lazy *l)
{
    size_t i = 0;
    int fired = 0, wait = 0;
    while (i < l->n && !fired && !wait) {
        const char *p = l->buf + i;
        const size_t n = l->n - i;
        int m;
        if (l->quiet) {
            m = match(p, n, l->quiet_close);
            l->quiet = m != FULL;
            i += m == FULL ? strlen(l->quiet_close) : m == NONE;
            wait = m == PARTIAL;
            continue;
        }
        int partial = 0;
        for (size_t w = 0; w < l->n_words && !fired; w++) {
            m = match(p, n, l->words[w]);
            fired = m == FULL, partial |= m == PARTIAL;
        }
        if (fired)
            break;
        m = l->quiet_open ? match(p, n, l->quiet_open) : NONE;
        l->quiet = m == FULL;
        i += m == FULL ? strlen(l->quiet_open) : !(partial || m == PARTIAL);
        wait = partial || m == PARTIAL;
    }
    if (i) /* (nothing kept yet: no buffer either) */
        memmove(l->buf, l->buf + i, l->n - i);
    l->n -= i;
    return fired;
}

int gr_lazy_watch(gr_lazy *l, const char *text, size_t n, const char **from, size_t *len)
{
    if (l->n + n > l->cap) {
        const size_t cap = 2 * (l->n + n) + 64;
        char *b = realloc(l->buf, cap);
        if (!b)
            return -1;
        l->buf = b, l->cap = cap;
    }
    if (n)
        memcpy(l->buf + l->n, text, n);
    l->n += n;
    const int fired = scan(l);
    *from = l->buf, *len = l->n;
    return fired;
}

void gr_lazy_skip(gr_lazy *l)
{
    if (l->n) {
        memmove(l->buf, l->buf + 1, l->n - 1);
        l->n--;
    }
}
