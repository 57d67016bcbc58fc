/*
 * A BPE trainer (see tok_train_bpe in tokenizer_impl.h), incremental as usual: pair counts
 * are kept up to date as merges rewrite the words, each pair lists the words it occurs in
 * (possibly stale or repeated: a merge rescans only those), and the most frequent pair
 * comes from a max-heap whose stale entries are corrected when they surface. A merge thus
 * costs time in proportion to the words it touches, not to the corpus.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tokenizer_impl.h"
#include "vmm/error.h"

typedef struct pair {
    uint32_t a, b;
    int64_t count;
    uint32_t head;    /* first node of the word list + 1, 0 when empty */
    uint8_t touched;  /* counted up during the current merge */
} pair;

typedef struct trainer {
    tok_bpe_model *m;
    uint32_t *seq;    /* every word's symbols, back to back */
    size_t *start;
    uint32_t *len;    /* current symbols of each word */
    const uint64_t *count;
    uint32_t *stamp;  /* the last merge that rewrote each word, + 1 */
    tok_u64map index; /* (a, b) -> pair */
    pair *pairs;
    uint32_t n_pairs, cap_pairs;
    uint32_t (*node)[2]; /* word, next node + 1 */
    uint32_t n_nodes, cap_nodes;
    uint32_t *touched;
    uint32_t n_touched, cap_touched;
    uint32_t cap_merges;
    tok_heap heap;
    uint64_t min_count;
} trainer;

static mvm_status grow(void **p, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need <= *cap)
        return MVM_OK;
    if (need > UINT32_MAX / 2)
        return mvm_fail(MVM_ERR_NOMEM, "BPE trainer: over 2^31 entries");
    uint32_t c = *cap ? *cap * 2 : 256;
    c = c < need ? need : c;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return mvm_fail(MVM_ERR_NOMEM, "BPE trainer: no memory for %u entries", c);
    *p = q;
    *cap = c;
    return MVM_OK;
}

/* Adds delta to the count of pair (a, b), creating it; a positive delta lists word w under
 * the pair and marks the pair for a heap entry. */
static mvm_status bump(trainer *t, uint32_t a, uint32_t b, int64_t delta, uint32_t w)
{
    uint64_t key = tok_pair_key(a, b);
    uint32_t *ix = tok_u64map_get(&t->index, key), p;
    mvm_status st;
    if (ix) {
        p = *ix;
    } else {
        if ((st = grow((void **)&t->pairs, &t->cap_pairs, t->n_pairs + 1, sizeof *t->pairs)) ||
            (st = tok_u64map_add(&t->index, key, t->n_pairs)))
            return st;
        p = t->n_pairs++;
        t->pairs[p] = (pair){a, b, 0, 0, 0};
    }
    t->pairs[p].count += delta;
    if (delta <= 0)
        return MVM_OK;
    if ((st = grow((void **)&t->node, &t->cap_nodes, t->n_nodes + 1, sizeof *t->node)))
        return st;
    t->node[t->n_nodes][0] = w;
    t->node[t->n_nodes][1] = t->pairs[p].head;
    t->pairs[p].head = ++t->n_nodes;
    if (!t->pairs[p].touched) {
        if ((st = grow((void **)&t->touched, &t->cap_touched, t->n_touched + 1,
                       sizeof *t->touched)))
            return st;
        t->pairs[p].touched = 1;
        t->touched[t->n_touched++] = p;
    }
    return MVM_OK;
}

/* Queues the pairs counted up since the last call that are frequent enough. */
static mvm_status push_touched(trainer *t)
{
    mvm_status st = MVM_OK;
    for (uint32_t i = 0; i < t->n_touched; i++) {
        pair *p = &t->pairs[t->touched[i]];
        p->touched = 0;
        if (st == MVM_OK && (uint64_t)p->count >= t->min_count)
            st = tok_heap_push(&t->heap, (tok_bigram){(double)p->count, (int32_t)p->a,
                                                      (int32_t)p->b, 0});
    }
    t->n_touched = 0;
    return st;
}

/* Rewrites word w with every (a, b) replaced by c, left to right, keeping the counts of the
 * pairs around each replacement right. */
static mvm_status rewrite(trainer *t, uint32_t w, uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t *s = t->seq + t->start[w], n = t->len[w], out = 0;
    int64_t f = (int64_t)t->count[w];
    mvm_status st = MVM_OK;
    for (uint32_t i = 0; i < n && st == MVM_OK;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            if (out > 0 && (st = bump(t, s[out - 1], a, -f, w)) == MVM_OK)
                st = bump(t, s[out - 1], c, f, w);
            if (st == MVM_OK && i + 2 < n && (st = bump(t, b, s[i + 2], -f, w)) == MVM_OK)
                st = bump(t, c, s[i + 2], f, w);
            if (st == MVM_OK)
                st = bump(t, a, b, -f, w);
            s[out++] = c;
            i += 2;
        } else {
            s[out++] = s[i++];
        }
    }
    t->len[w] = out;
    return st;
}

/* Merges pair p into a symbol (new, or the older one of the same text) and records it. */
static mvm_status merge(trainer *t, uint32_t p)
{
    tok_bpe_model *m = t->m;
    uint32_t a = t->pairs[p].a, b = t->pairs[p].b;
    size_t na = m->sym.len[a], nb = m->sym.len[b];
    char *text = malloc(na + nb);
    if (!text)
        return mvm_fail(MVM_ERR_NOMEM, "BPE trainer: no memory for a symbol");
    memcpy(text, tok_strtab_str(&m->sym, a), na);
    memcpy(text + na, tok_strtab_str(&m->sym, b), nb);
    int32_t c = tok_strtab_find(&m->sym, text, na + nb);
    mvm_status st = MVM_OK;
    if (c < 0) {
        c = (int32_t)m->sym.n;
        st = tok_strtab_push(&m->sym, text, na + nb, 1);
    }
    free(text);
    if (st == MVM_OK)
        st = grow((void **)&m->merge, &t->cap_merges, m->n_merges + 1, sizeof *m->merge);
    if (st != MVM_OK)
        return st;
    m->merge[m->n_merges][0] = a;
    m->merge[m->n_merges][1] = b;
    m->merge[m->n_merges][2] = (uint32_t)c;
    uint32_t stamp = ++m->n_merges;
    for (uint32_t node = t->pairs[p].head; node && st == MVM_OK; node = t->node[node - 1][1]) {
        uint32_t w = t->node[node - 1][0];
        if (t->stamp[w] != stamp) { /* a word listed twice is rewritten once */
            t->stamp[w] = stamp;
            st = rewrite(t, w, a, b, (uint32_t)c);
        }
    }
    return st == MVM_OK ? push_touched(t) : st;
}

/* The base symbols and each word's symbol sequence. */
static mvm_status split_words(trainer *t, const tok_strtab *words, enum tok_unit unit)
{
    tok_bpe_model *m = t->m;
    mvm_status st = MVM_OK;
    for (unsigned byte = 0; unit == TOK_UNIT_BYTE && byte < 256 && st == MVM_OK; byte++) {
        char c = (char)byte;
        st = tok_strtab_push(&m->sym, &c, 1, 1);
    }
    size_t total = 0;
    for (uint32_t w = 0; w < words->n; w++)
        total += words->len[w];
    t->seq = malloc((total ? total : 1) * sizeof *t->seq);
    t->start = malloc((words->n ? words->n : 1) * sizeof *t->start);
    t->len = malloc((words->n ? words->n : 1) * sizeof *t->len);
    t->stamp = calloc(words->n ? words->n : 1, sizeof *t->stamp);
    if (st == MVM_OK && (!t->seq || !t->start || !t->len || !t->stamp))
        st = mvm_fail(MVM_ERR_NOMEM, "BPE trainer: no memory for %u words", words->n);
    size_t k = 0;
    for (uint32_t w = 0; w < words->n && st == MVM_OK; w++) {
        const char *s = tok_strtab_str(words, w);
        size_t n = words->len[w];
        t->start[w] = k;
        for (size_t i = 0, cl; i < n && st == MVM_OK; i += cl) {
            uint32_t cp;
            cl = unit == TOK_UNIT_BYTE ? 1 : tok_utf8_decode((const uint8_t *)s + i, n - i, &cp);
            int32_t id = tok_strtab_find(&m->sym, s + i, cl);
            if (id < 0) {
                id = (int32_t)m->sym.n;
                st = tok_strtab_push(&m->sym, s + i, cl, 1);
            }
            t->seq[k++] = (uint32_t)id;
        }
        t->len[w] = (uint32_t)(k - t->start[w]);
    }
    m->n_base = m->sym.n;
    m->base_count = calloc(m->n_base ? m->n_base : 1, sizeof *m->base_count);
    if (st == MVM_OK && !m->base_count)
        st = mvm_fail(MVM_ERR_NOMEM, "BPE trainer: no memory for %u symbols", m->n_base);
    for (uint32_t w = 0; w < words->n && st == MVM_OK; w++)
        for (uint32_t i = 0; i < t->len[w]; i++)
            m->base_count[t->seq[t->start[w] + i]] += t->count[w];
    return st;
}

mvm_status tok_train_bpe(const tok_strtab *words, const uint64_t *counts, enum tok_unit unit,
                         uint32_t max_new, uint64_t min_count, tok_bpe_model *out)
{
    memset(out, 0, sizeof *out);
    trainer t = {.m = out, .count = counts, .min_count = min_count ? min_count : 1};
    mvm_status st = split_words(&t, words, unit);
    for (uint32_t w = 0; w < words->n && st == MVM_OK; w++)
        for (uint32_t i = 0; i + 1 < t.len[w] && st == MVM_OK; i++)
            st = bump(&t, t.seq[t.start[w] + i], t.seq[t.start[w] + i + 1],
                      (int64_t)counts[w], w);
    if (st == MVM_OK)
        st = push_touched(&t);
    tok_bigram top;
    while (st == MVM_OK && out->sym.n - out->n_base < max_new && tok_heap_pop(&t.heap, &top)) {
        uint32_t p = *tok_u64map_get(&t.index, tok_pair_key((uint32_t)top.left,
                                                            (uint32_t)top.right));
        int64_t now = t.pairs[p].count;
        if ((double)now == top.prio) {
            st = merge(&t, p);
        } else if ((uint64_t)now >= t.min_count) { /* stale: queue it at its count now */
            st = tok_heap_push(&t.heap, (tok_bigram){(double)now, top.left, top.right, 0});
        }
    }
    free(t.seq);
    free(t.start);
    free(t.len);
    free(t.stamp);
    free(t.pairs);
    free(t.node);
    free(t.touched);
    tok_u64map_free(&t.index);
    tok_heap_free(&t.heap);
    if (st != MVM_OK)
        tok_bpe_model_free(out);
    return st;
}

void tok_bpe_model_free(tok_bpe_model *m)
{
    tok_strtab_free(&m->sym);
    free(m->base_count);
    free(m->merge);
    memset(m, 0, sizeof *m);
}
