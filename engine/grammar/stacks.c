/*
 * The matcher's stacks (see stacks.h), step for step as llama-grammar.cpp moves them, so
 * that a grammar accepts here exactly what it accepts there.
 */
#include "engine/grammar/stacks.h"

#include <stdlib.h>
#include <string.h>

void gr_stacks_free(gr_stacks *s)
{
    free(s->pool);
    free(s->at);
    *s = (gr_stacks){0};
}

static uint64_t hash_of(const uint32_t *st, uint32_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the words */
    for (uint32_t i = 0; i < len; i++)
        h = (h ^ st[i]) * 0x100000001b3ull;
    return h;
}

static int find(const gr_stacks *s, const uint32_t *st, uint32_t len, uint64_t h)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (s->at[i].hash == h && s->at[i].len == len &&
            !memcmp(gr_stack_data(s, i), st, len * sizeof *st))
            return 1;
    return 0;
}

/* Appends a stack (st must not point into s's pool); -1: no memory. */
static int push_stack(gr_stacks *s, const uint32_t *st, uint32_t len, uint64_t h)
{
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? 2 * s->cap : 8;
        struct gr_stack *at = realloc(s->at, cap * sizeof *at);
        if (!at)
            return -1;
        s->at = at, s->cap = cap;
    }
    if (s->n_pool + len > s->cap_pool || !s->pool) { /* a pool even for empty stacks */
        size_t cap = s->cap_pool ? 2 * s->cap_pool : 64;
        while (cap < s->n_pool + len)
            cap *= 2;
        uint32_t *pool = realloc(s->pool, cap * sizeof *pool);
        if (!pool)
            return -1;
        s->pool = pool, s->cap_pool = cap;
    }
    memcpy(s->pool + s->n_pool, st, len * sizeof *st);
    s->at[s->n++] = (struct gr_stack){s->n_pool, len, h};
    s->n_pool += len;
    return 0;
}

static int add_unique(gr_stacks *s, const uint32_t *st, uint32_t len)
{
    uint64_t h = hash_of(st, len);
    return find(s, st, len, h) ? 0 : push_stack(s, st, len, h);
}

static int end_of_alternate(const gr_elem *e)
{
    return e->type == GR_END || e->type == GR_ALT;
}

/* A scratch stack of cap words; grows as needed. */
typedef struct scratch {
    uint32_t *v;
    uint32_t cap;
} scratch;

static int reserve(scratch *t, uint32_t n)
{
    if (n <= t->cap)
        return 0;
    uint32_t cap = t->cap ? t->cap : 16;
    while (cap < n)
        cap *= 2;
    uint32_t *v = realloc(t->v, cap * sizeof *v);
    if (!v)
        return -1;
    t->v = v, t->cap = cap;
    return 0;
}

/* Pushes onto todo, for each alternate of rule ref's rule, the stack cur[0..len) with its
 * top (the reference) replaced by what follows the reference and the alternate's start. */
static int expand_ref(const gr_rules *r, const uint32_t *cur, uint32_t len, gr_stacks *todo,
                      scratch *t)
{
    const uint32_t top = cur[len - 1];
    const gr_elem *e = r->elems;
    uint32_t sub = r->start[e[top].value];
    if (reserve(t, len + 1))
        return -1;
    for (;;) {
        uint32_t n = len - 1;
        memcpy(t->v, cur, n * sizeof *cur);
        if (!end_of_alternate(&e[top + 1]))
            t->v[n++] = top + 1;
        if (!end_of_alternate(&e[sub]))
            t->v[n++] = sub;
        if (push_stack(todo, t->v, n, 0))
            return -1;
        while (!end_of_alternate(&e[sub]))
            sub++;
        if (e[sub].type != GR_ALT)
            return 0;
        sub++;
    }
}

int gr_advance(const gr_rules *r, const uint32_t *st, uint32_t len, gr_stacks *out)
{
    gr_stacks todo = {0}, seen = {0};
    scratch cur = {0}, t = {0};
    int rc = push_stack(&todo, st, len, 0);
    while (!rc && todo.n) {
        /* pop the last stack into cur: pushing onto todo may overwrite its words */
        const uint32_t n = todo.at[todo.n - 1].len;
        if ((rc = reserve(&cur, n + 1)))
            break;
        memcpy(cur.v, gr_stack_data(&todo, todo.n - 1), n * sizeof *cur.v);
        todo.n_pool = todo.at[--todo.n].off;
        const uint64_t h = hash_of(cur.v, n);
        if (find(&seen, cur.v, n, h))
            continue;
        if ((rc = push_stack(&seen, cur.v, n, h)))
            break;
        if (n > 0 && r->elems[cur.v[n - 1]].type == GR_RULE_REF)
            rc = expand_ref(r, cur.v, n, &todo, &t);
        else /* empty, or a character class on top */
            rc = add_unique(out, cur.v, n);
    }
    gr_stacks_free(&todo);
    gr_stacks_free(&seen);
    free(cur.v);
    free(t.v);
    return rc;
}

int gr_initial(const gr_rules *r, gr_stacks *out)
{
    const gr_elem *e = r->elems;
    for (uint32_t pos = r->start[r->root];; pos++) {
        uint32_t st = pos;
        if (gr_advance(r, &st, !end_of_alternate(&e[pos]), out))
            return -1;
        while (!end_of_alternate(&e[pos]))
            pos++;
        if (e[pos].type != GR_ALT)
            return 0;
    }
}

int gr_match_char(const gr_elem *pos, uint32_t chr, const gr_elem **after)
{
    int found = 0;
    const int positive = pos->type == GR_CHAR || pos->type == GR_CHAR_ANY;
    do {
        if (pos[1].type == GR_CHAR_RNG_UPPER) {
            found = found || (pos->value <= chr && chr <= pos[1].value);
            pos += 2;
        } else {
            found = found || pos->type == GR_CHAR_ANY || pos->value == chr;
            pos += 1;
        }
    } while (pos->type == GR_CHAR_ALT);
    *after = pos;
    return found == positive;
}

int gr_match_partial(const gr_elem *pos, gr_partial p)
{
    const int positive = pos->type == GR_CHAR || pos->type == GR_CHAR_ANY;
    if (p.n_remain < 0)
        return 0;
    /* the code points the sequence could still become: none below what its length encodes
     * (llama.cpp's special cases, and more: E0 80 cannot become U+0800) nor above U+10FFFF */
    uint32_t low = p.value << (p.n_remain * 6);
    uint32_t high = low | ((1u << (p.n_remain * 6)) - 1);
    low = low < p.min ? p.min : low;
    high = high > 0x10FFFF ? 0x10FFFF : high;
    if (low > high)
        return 0;
    do {
        if (pos->type == GR_CHAR_ANY)
            return 1;
        if (pos[1].type == GR_CHAR_RNG_UPPER) {
            if (pos->value <= high && low <= pos[1].value)
                return positive;
            pos += 2;
        } else {
            if (low <= pos->value && pos->value <= high)
                return positive;
            pos += 1;
        }
    } while (pos->type == GR_CHAR_ALT);
    return !positive;
}

uint32_t gr_decode(const char *bytes, size_t len, gr_partial start, uint32_t *out,
                   gr_partial *end)
{
    static const int len_of[16] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};
    static const uint32_t min_of[4] = {0, 0x80, 0x800, 0x10000};
    const uint8_t *s = (const uint8_t *)bytes, *stop = s + len;
    uint32_t n = 0, value = start.value, min = start.min;
    int remain = start.n_remain;
    /* Stricter than llama.cpp, which takes any byte as a continuation and overlong forms
     * as characters: a text cut into pieces elsewhere would then read otherwise (the
     * fuzzer found both), and an overlong quote is no quote to a JSON parser. */
    for (; s < stop && *s && remain > 0; s++, remain--) {
        if (*s >> 6 != 2)
            goto invalid;
        value = (value << 6) + (*s & 0x3F);
    }
    if (start.n_remain > 0 && remain == 0) {
        if (value < min || value > 0x10FFFF)
            goto invalid;
        out[n++] = value;
    }
    while (s < stop && *s) {
        remain = len_of[*s >> 4] - 1;
        if (remain < 0)
            goto invalid;
        min = min_of[remain];
        value = *s++ & ((1u << (7 - remain)) - 1);
        for (; s < stop && *s && remain > 0; s++, remain--) {
            if (*s >> 6 != 2)
                goto invalid;
            value = (value << 6) + (*s & 0x3F);
        }
        if (remain == 0 && (value < min || value > 0x10FFFF))
            goto invalid;
        if (remain == 0)
            out[n++] = value;
    }
    out[n] = 0;
    *end = (gr_partial){value, remain, min};
    return n;
invalid:
    out[0] = 0;
    *end = (gr_partial){0, -1, 0};
    return 0;
}

int gr_accept_char(const gr_rules *r, const gr_stacks *stacks, uint32_t chr, gr_stacks *out)
{
    out->n = 0, out->n_pool = 0;
    scratch t = {0};
    int rc = 0;
    for (uint32_t i = 0; i < stacks->n && !rc; i++) {
        const uint32_t len = stacks->at[i].len;
        const uint32_t *st = gr_stack_data(stacks, i);
        const gr_elem *after;
        if (len == 0 || !gr_match_char(&r->elems[st[len - 1]], chr, &after))
            continue;
        if ((rc = reserve(&t, len)))
            break;
        memcpy(t.v, st, (len - 1) * sizeof *st);
        uint32_t n = len - 1;
        if (!end_of_alternate(after))
            t.v[n++] = (uint32_t)(after - r->elems);
        rc = gr_advance(r, t.v, n, out);
    }
    free(t.v);
    return rc;
}
