/*
 * A grammar's state and what it allows next (see grammar.h and include/moevm/engine.h):
 * llama.cpp's matcher (llama-grammar.cpp). Which tokens may come next is decided as there,
 * by rejecting candidates stack by stack: the tokens whose next character a stack's top
 * class takes go on, one character further, against the stacks that class leads to; the
 * others are tried against the next stack. So a vocabulary is filtered by one pass over
 * it per stack, and deeper passes only over tokens that got that far.
 *
 * The vocabulary is decoded once an engine (grammar_vocab.c): each token's code points (a
 * token whose bytes end inside a character keeps the partial character). Tokens that end
 * a reply are allowed only where the grammar is complete; tokens without text and tokens
 * holding a NUL byte never are.
 *
 * A lazy grammar (mvm_grammar_set_lazy) allows everything and only watches the text
 * (grammar_lazy.c) until a trigger word shows; then the state advances over the text from
 * the word on, and constrains from there.
 */
#include "engine/grammar/grammar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/stacks.h"
#include "vmm/error.h"

struct mvm_grammar {
    gr_rules rules;
    gr_stacks stacks;
    gr_partial part;    /* a character the text so far ends inside of */
    const gr_vocab *v;  /* the engine's; NULL for a grammar made by mvm_grammar_parse */
    gr_lazy *lazy;      /* waiting for a trigger word; NULL: constraining */
};

/* A token being matched: its code points from cp on (0: all matched). */
typedef struct cand {
    uint32_t id;
    const uint32_t *cp;
    gr_partial end;
} cand;

typedef struct cands {
    cand *v;
    uint32_t n, cap;
} cands;

static int cand_push(cands *c, cand x)
{
    if (c->n == c->cap) {
        uint32_t cap = c->cap ? 2 * c->cap : 16;
        cand *v = realloc(c->v, cap * sizeof *v);
        if (!v)
            return -1;
        c->v = v, c->cap = cap;
    }
    c->v[c->n++] = x;
    return 0;
}

static int reject(const gr_rules *r, const gr_stacks *stacks, const cand *in, uint32_t n,
                  cands *rej);

/* llama.cpp's reject_candidates_for_stack: into rej, those of in[0..n) stack st[0..len)
 * cannot take. */
static int reject_for_stack(const gr_rules *r, const uint32_t *st, uint32_t len,
                            const cand *in, uint32_t n, cands *rej)
{
    if (len == 0) { /* the sentence is over: only tokens with nothing left pass */
        for (uint32_t i = 0; i < n; i++)
            if ((*in[i].cp || in[i].end.n_remain) && cand_push(rej, in[i]))
                return -1;
        return 0;
    }
    const gr_elem *top = &r->elems[st[len - 1]], *after;
    cands next = {0};
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        if (!*in[i].cp) /* matched to its end: a partial character must fit the class */
            rc = in[i].end.n_remain && !gr_match_partial(top, in[i].end)
                     ? cand_push(rej, in[i]) : 0;
        else if (gr_match_char(top, *in[i].cp, &after))
            rc = cand_push(&next, (cand){in[i].id, in[i].cp + 1, in[i].end});
        else
            rc = cand_push(rej, in[i]);
    }
    if (!rc && next.n) {
        gr_match_char(top, 0, &after);
        uint32_t *below = malloc((len + 1) * sizeof *below), m = len - 1;
        gr_stacks nexts = {0};
        cands nrej = {0};
        rc = below ? 0 : -1;
        if (!rc) {
            memcpy(below, st, m * sizeof *st);
            if (after->type != GR_END && after->type != GR_ALT)
                below[m++] = (uint32_t)(after - r->elems);
            rc = gr_advance(r, below, m, &nexts) || reject(r, &nexts, next.v, next.n, &nrej);
        }
        for (uint32_t i = 0; !rc && i < nrej.n; i++)
            rc = cand_push(rej, (cand){nrej.v[i].id, nrej.v[i].cp - 1, nrej.v[i].end});
        free(below);
        free(nrej.v);
        gr_stacks_free(&nexts);
    }
    free(next.v);
    return rc;
}

/* Those of in[0..n) that no stack takes, into rej (empty on entry). */
static int reject(const gr_rules *r, const gr_stacks *stacks, const cand *in, uint32_t n,
                  cands *rej)
{
    cands a = {0}, b = {0};
    int rc = 0;
    const cand *cur = in;
    for (uint32_t s = 0; s < stacks->n && n && !rc; s++) {
        b.n = 0;
        rc = reject_for_stack(r, gr_stack_data(stacks, s), stacks->at[s].len, cur, n, &b);
        cands t = a;
        a = b, b = t;
        cur = a.v, n = a.n;
    }
    free(b.v);
    if (rc || cur == in) { /* failed, or no stack to try: all of in are rejected */
        free(a.v);
        a = (cands){0};
        for (uint32_t i = 0; !rc && i < n; i++)
            rc = cand_push(&a, in[i]);
    }
    *rej = a;
    return rc;
}

void mvm_grammar_free(mvm_grammar *g)
{
    if (!g)
        return;
    gr_rules_free(&g->rules);
    gr_stacks_free(&g->stacks);
    gr_lazy_free(g->lazy);
    free(g);
}

mvm_status mvm_grammar_parse(const char *gbnf, mvm_grammar **out)
{
    *out = NULL;
    mvm_grammar *g = calloc(1, sizeof *g);
    if (!g)
        return mvm_fail(MVM_ERR_NOMEM, "grammar: no memory");
    mvm_status st = gr_parse(gbnf, &g->rules);
    if (st == MVM_OK && gr_initial(&g->rules, &g->stacks))
        st = mvm_fail(MVM_ERR_NOMEM, "grammar: no memory for its initial state");
    if (st != MVM_OK) {
        mvm_grammar_free(g);
        return st;
    }
    *out = g;
    return MVM_OK;
}

int mvm_grammar_complete(const mvm_grammar *g)
{
    if (g->lazy) /* no sentence begun: the text may end anywhere */
        return 1;
    if (g->part.n_remain != 0)
        return 0;
    for (uint32_t i = 0; i < g->stacks.n; i++)
        if (g->stacks.at[i].len == 0)
            return 1;
    return 0;
}

int mvm_grammar_finished(const mvm_grammar *g)
{
    return !g->lazy && g->stacks.n == 1 && g->stacks.at[0].len == 0 && g->part.n_remain == 0;
}

/* Moves the state over code points cp[0..n) and then the partial character end; 0 (the
 * state as it was) when the grammar does not take them, -1 on no memory. */
static int advance_text(mvm_grammar *g, const uint32_t *cp, uint32_t n, gr_partial end)
{
    if (end.n_remain < 0)
        return 0;
    gr_stacks cur = {0}, next = {0};
    const gr_stacks *from = &g->stacks;
    int rc = 1;
    for (uint32_t i = 0; i < n && rc == 1; i++) {
        if (gr_accept_char(&g->rules, from, cp[i], &next))
            rc = -1;
        else if (next.n == 0)
            rc = 0;
        gr_stacks t = cur;
        cur = next, next = t;
        from = &cur;
    }
    if (rc == 1 && end.n_remain > 0) { /* some stack must take what it may become */
        rc = 0;
        for (uint32_t i = 0; i < from->n && !rc; i++)
            rc = from->at[i].len && gr_match_partial(
                     &g->rules.elems[gr_stack_data(from, i)[from->at[i].len - 1]], end);
    }
    if (rc == 1 && n) {
        gr_stacks_free(&g->stacks);
        g->stacks = cur;
        cur = (gr_stacks){0};
    }
    if (rc == 1)
        g->part = end;
    gr_stacks_free(&cur);
    gr_stacks_free(&next);
    return rc;
}

/* Advances the state over text[0..len): 1, 0 (refused, the state as it was), -1 (no
 * memory). */
static int take_text(mvm_grammar *g, const char *text, size_t len)
{
    if (memchr(text, 0, len))
        return 0;
    uint32_t *cp = malloc((len + 1) * sizeof *cp);
    if (!cp)
        return -1;
    gr_partial end;
    uint32_t n = gr_decode(text, len, g->part, cp, &end);
    int rc = advance_text(g, cp, n, end);
    free(cp);
    return rc;
}

/* A lazy grammar watches text[0..len); once a trigger word shows, the state takes the text
 * from it on and the grammar constrains. 0, or -1 without memory. */
static int watch(mvm_grammar *g, const char *text, size_t len)
{
    const char *from;
    size_t n;
    int rc = gr_lazy_watch(g->lazy, text, len, &from, &n);
    while (rc == 1) {
        if ((rc = take_text(g, from, n)) == 1) {
            gr_lazy_free(g->lazy);
            g->lazy = NULL;
            return 0;
        }
        if (rc < 0)
            return -1;
        gr_lazy_skip(g->lazy);
        rc = gr_lazy_watch(g->lazy, NULL, 0, &from, &n);
    }
    return rc;
}

int mvm_grammar_accept_text(mvm_grammar *g, const char *text, size_t len)
{
    if (g->lazy)
        return watch(g, text, len) == 0;
    return take_text(g, text, len) == 1;
}

mvm_status mvm_grammar_set_lazy(mvm_grammar *g, const mvm_grammar_triggers *t)
{
    gr_lazy *l = NULL;
    mvm_status st = gr_lazy_new(t, &l);
    if (st == MVM_OK) {
        gr_lazy_free(g->lazy);
        g->lazy = l;
    }
    return st;
}

void gr_bind(mvm_grammar *g, const gr_vocab *v)
{
    g->v = v;
}

/* Token id's length in bytes. */
static uint32_t piece_len(const gr_vocab *v, uint32_t id)
{
    return v->byte_off[id + 1] - v->byte_off[id];
}

/* Token id as a candidate: its code points decoded after the pending partial character
 * (into buf, room for its bytes + 1) when there is one, else the precomputed ones. */
static cand candidate(const mvm_grammar *g, uint32_t id, uint32_t *buf)
{
    const gr_vocab *v = g->v;
    if (g->part.n_remain == 0)
        return (cand){id, v->cp + v->cp_off[id], v->cp_end[id]};
    cand c = {id, buf, {0, 0, 0}};
    gr_decode(v->bytes + v->byte_off[id], piece_len(v, id), g->part, buf, &c.end);
    return c;
}

int mvm_grammar_allows(const mvm_grammar *g, int32_t id)
{
    const gr_vocab *v = g->v;
    if (!v || id < 0 || (uint32_t)id >= v->n)
        return 0;
    if (g->lazy)
        return 1;
    if (v->kind[id] == GR_TOK_NEVER)
        return 0;
    if (v->kind[id] == GR_TOK_EOG)
        return mvm_grammar_complete(g);
    uint32_t *buf = malloc((piece_len(v, (uint32_t)id) + 1) * sizeof *buf);
    if (!buf)
        return 0;
    cand c = candidate(g, (uint32_t)id, buf);
    cands rej = {0};
    int ok = !reject(&g->rules, &g->stacks, &c, 1, &rej) && rej.n == 0;
    free(rej.v);
    free(buf);
    return ok;
}

mvm_status mvm_grammar_apply(const mvm_grammar *g, float *logits, uint32_t n)
{
    const gr_vocab *v = g->v;
    if (!v)
        return mvm_fail(MVM_ERR_INVALID, "grammar: not bound to a vocabulary");
    if (g->lazy)
        return MVM_OK;
    const int eog_ok = mvm_grammar_complete(g);
    cands in = {0}, rej = {0};
    uint32_t *buf = NULL, at = 0;
    if (g->part.n_remain && !(buf = malloc((v->byte_off[v->n] + v->n + 1) * sizeof *buf)))
        return mvm_fail(MVM_ERR_NOMEM, "grammar: no memory to decode the vocabulary");
    int rc = 0;
    for (uint32_t id = 0; id < n && !rc; id++) {
        if (!(logits[id] > -INFINITY)) /* masked already, or NaN: never drawn */
            continue;
        const int kind = id < v->n ? v->kind[id] : GR_TOK_NEVER;
        if (kind == GR_TOK_NEVER || (kind == GR_TOK_EOG && !eog_ok))
            logits[id] = -INFINITY;
        else if (kind == GR_TOK_TEXT)
            rc = cand_push(&in, candidate(g, id, buf ? buf + at : NULL)),
            at += buf ? piece_len(v, id) + 1 : 0;
    }
    if (!rc)
        rc = reject(&g->rules, &g->stacks, in.v, in.n, &rej);
    for (uint32_t i = 0; !rc && i < rej.n; i++)
        logits[rej.v[i].id] = -INFINITY;
    free(in.v);
    free(rej.v);
    free(buf);
    return rc ? mvm_fail(MVM_ERR_NOMEM, "grammar: no memory to filter the vocabulary") : MVM_OK;
}

mvm_status mvm_grammar_accept(mvm_grammar *g, int32_t id)
{
    const gr_vocab *v = g->v;
    const int kind = v && id >= 0 && (uint32_t)id < v->n ? v->kind[id] : GR_TOK_NEVER;
    if (g->lazy && v && id >= 0 && (uint32_t)id < v->n)
        return kind == GR_TOK_EOG ||
               watch(g, v->bytes + v->byte_off[id], piece_len(v, (uint32_t)id)) == 0
                   ? MVM_OK : mvm_fail(MVM_ERR_NOMEM, "grammar: no memory");
    if (kind == GR_TOK_EOG && mvm_grammar_complete(g))
        return MVM_OK; /* the sentence is complete; the state stays */
    if (kind != GR_TOK_TEXT)
        return mvm_fail(MVM_ERR_INVALID, "grammar: token %d cannot come next", id);
    /* advance_text checks what mvm_grammar_allows would, on the way: no second pass */
    uint32_t *buf = malloc((piece_len(v, (uint32_t)id) + 1) * sizeof *buf);
    if (!buf)
        return mvm_fail(MVM_ERR_NOMEM, "grammar: no memory");
    cand c = candidate(g, (uint32_t)id, buf);
    uint32_t n = 0;
    while (c.cp[n])
        n++;
    int rc = advance_text(g, c.cp, n, c.end);
    free(buf);
    return rc == 1 ? MVM_OK
         : rc < 0  ? mvm_fail(MVM_ERR_NOMEM, "grammar: no memory")
                   : mvm_fail(MVM_ERR_INVALID, "grammar: token %d cannot come next", id);
}
