/*
 * A grammar's state and what it allows next (see grammar.h and include/moevm/engine.h):
 * llama.cpp's matcher (llama-grammar.cpp). Which tokens may come next is decided as there,
 * by rejecting candidates stack by stack: the tokens whose next character a stack's top
 * class takes go on, one character further, against the stacks that class leads to; the
 * others are tried against the next stack. So a vocabulary is filtered by one pass over
 * it per stack, and deeper passes only over tokens that got that far.
 *
 * The vocabulary is decoded once, when the grammar is bound: each token's code points (a
 * token whose bytes end inside a character keeps the partial character). Tokens that end
 * a reply are allowed only where the grammar is complete; tokens without text (control
 * tokens) and tokens holding a NUL byte never are.
 */
#include "engine/grammar/grammar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/stacks.h"
#include "vmm/error.h"

enum { TOK_TEXT, TOK_EOG, TOK_NEVER };

struct mvm_grammar {
    gr_rules rules;
    gr_stacks stacks;
    gr_partial part; /* a character the text so far ends inside of */
    /* the vocabulary (n_vocab 0 for a grammar made by mvm_grammar_parse) */
    uint32_t n_vocab;
    uint8_t *kind;
    char *bytes;
    uint32_t *byte_off; /* token i: bytes[byte_off[i] .. byte_off[i + 1]) */
    uint32_t *cp;       /* token i's code points from cp[cp_off[i]], then a 0 */
    uint32_t *cp_off;
    gr_partial *cp_end; /* what its bytes leave undecoded */
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

static void grammar_reset_vocab(mvm_grammar *g)
{
    free(g->kind), free(g->bytes), free(g->byte_off);
    free(g->cp), free(g->cp_off), free(g->cp_end);
    g->kind = NULL, g->bytes = NULL, g->byte_off = NULL;
    g->cp = NULL, g->cp_off = NULL, g->cp_end = NULL;
    g->n_vocab = 0;
}

void mvm_grammar_free(mvm_grammar *g)
{
    if (!g)
        return;
    gr_rules_free(&g->rules);
    gr_stacks_free(&g->stacks);
    grammar_reset_vocab(g);
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
    if (g->part.n_remain != 0)
        return 0;
    for (uint32_t i = 0; i < g->stacks.n; i++)
        if (g->stacks.at[i].len == 0)
            return 1;
    return 0;
}

int mvm_grammar_finished(const mvm_grammar *g)
{
    return g->stacks.n == 1 && g->stacks.at[0].len == 0 && g->part.n_remain == 0;
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

int mvm_grammar_accept_text(mvm_grammar *g, const char *text, size_t len)
{
    if (memchr(text, 0, len))
        return 0;
    uint32_t *cp = malloc((len + 1) * sizeof *cp);
    if (!cp)
        return 0;
    gr_partial end;
    uint32_t n = gr_decode(text, len, g->part, cp, &end);
    int rc = advance_text(g, cp, n, end);
    free(cp);
    return rc == 1;
}

/* Decodes the vocabulary's tokens (their text as mvm_engine_token_piece gives it). */
static mvm_status bind_vocab(mvm_grammar *g, const mvm_engine *e)
{
    const uint32_t n = mvm_engine_n_vocab(e);
    size_t total = 0, cap = 1 << 16;
    g->kind = malloc(n ? n : 1);
    g->byte_off = malloc(((size_t)n + 1) * sizeof *g->byte_off);
    g->cp_off = malloc(((size_t)n + 1) * sizeof *g->cp_off);
    g->cp_end = malloc((n ? n : 1) * sizeof *g->cp_end);
    g->bytes = malloc(cap);
    if (!g->kind || !g->byte_off || !g->cp_off || !g->cp_end || !g->bytes)
        return mvm_fail(MVM_ERR_NOMEM, "grammar: no memory for a vocabulary of %u", n);
    for (uint32_t id = 0; id < n; id++) {
        size_t len = mvm_engine_token_piece(e, id, NULL, 0);
        if (total + len > cap || total + len > UINT32_MAX / 2) {
            while (cap < total + len)
                cap *= 2;
            char *b = total + len <= UINT32_MAX / 2 ? realloc(g->bytes, cap) : NULL;
            if (!b)
                return mvm_fail(MVM_ERR_NOMEM, "grammar: no memory for the vocabulary");
            g->bytes = b;
        }
        mvm_engine_token_piece(e, id, g->bytes + total, len);
        g->byte_off[id] = (uint32_t)total;
        g->kind[id] = mvm_engine_is_eog(e, id) ? TOK_EOG
                    : len == 0 || memchr(g->bytes + total, 0, len) ? TOK_NEVER : TOK_TEXT;
        total += len;
    }
    g->byte_off[n] = (uint32_t)total;
    /* at most one code point a byte, and a 0 a token */
    if (!(g->cp = malloc((total + n + 1) * sizeof *g->cp)))
        return mvm_fail(MVM_ERR_NOMEM, "grammar: no memory for the vocabulary's characters");
    uint32_t at = 0;
    for (uint32_t id = 0; id < n; id++) {
        g->cp_off[id] = at;
        at += gr_decode(g->bytes + g->byte_off[id], g->byte_off[id + 1] - g->byte_off[id],
                        (gr_partial){0, 0}, g->cp + at, &g->cp_end[id]) + 1;
    }
    g->n_vocab = n;
    return MVM_OK;
}

mvm_status mvm_grammar_create(const mvm_engine *e, const char *gbnf, mvm_grammar **out)
{
    mvm_status st = mvm_grammar_parse(gbnf, out);
    if (st != MVM_OK)
        return st;
    if ((st = bind_vocab(*out, e)) != MVM_OK) {
        mvm_grammar_free(*out);
        *out = NULL;
    }
    return st;
}

/* Token id as a candidate: its code points decoded after the pending partial character
 * (into buf, room for its bytes + 1) when there is one, else the precomputed ones. */
static cand candidate(const mvm_grammar *g, uint32_t id, uint32_t *buf)
{
    if (g->part.n_remain == 0)
        return (cand){id, g->cp + g->cp_off[id], g->cp_end[id]};
    cand c = {id, buf, {0, 0}};
    gr_decode(g->bytes + g->byte_off[id], g->byte_off[id + 1] - g->byte_off[id], g->part,
              buf, &c.end);
    return c;
}

int mvm_grammar_allows(const mvm_grammar *g, int32_t id)
{
    if (id < 0 || (uint32_t)id >= g->n_vocab || g->kind[id] == TOK_NEVER)
        return 0;
    if (g->kind[id] == TOK_EOG)
        return mvm_grammar_complete(g);
    uint32_t *buf = malloc((g->byte_off[id + 1] - g->byte_off[id] + 1) * sizeof *buf);
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
    const int eog_ok = mvm_grammar_complete(g);
    cands in = {0}, rej = {0};
    uint32_t *buf = NULL, at = 0;
    if (g->part.n_remain && !(buf = malloc((g->byte_off[g->n_vocab] + g->n_vocab + 1) *
                                           sizeof *buf)))
        return mvm_fail(MVM_ERR_NOMEM, "grammar: no memory to decode the vocabulary");
    int rc = 0;
    for (uint32_t id = 0; id < n && !rc; id++) {
        if (!(logits[id] > -INFINITY)) /* masked already, or NaN: never drawn */
            continue;
        const int kind = id < g->n_vocab ? g->kind[id] : TOK_NEVER;
        if (kind == TOK_NEVER || (kind == TOK_EOG && !eog_ok))
            logits[id] = -INFINITY;
        else if (kind == TOK_TEXT)
            rc = cand_push(&in, candidate(g, id, buf ? buf + at : NULL)),
            at += buf ? g->byte_off[id + 1] - g->byte_off[id] + 1 : 0;
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
    if (!mvm_grammar_allows(g, id))
        return mvm_fail(MVM_ERR_INVALID, "grammar: token %d cannot come next", id);
    if (g->kind[id] == TOK_EOG)
        return MVM_OK; /* the sentence is complete; the state stays */
    const uint32_t len = g->byte_off[id + 1] - g->byte_off[id];
    uint32_t *buf = malloc((len + 1) * sizeof *buf);
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
