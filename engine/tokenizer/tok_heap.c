/*
 * The merge queue of the tokenizers and the trainer: a binary max-heap of candidate
 * merges. Entries go stale when a neighbouring merge consumes one of their symbols; users
 * skip those when popped (cheaper than finding and removing them).
 */
#include <stdlib.h>

#include "engine/tokenizer/tokenizer_impl.h"
#include "vmm/error.h"

/* Whether a comes out before b. */
static int before(const tok_bigram *a, const tok_bigram *b)
{
    if (a->prio != b->prio)
        return a->prio > b->prio;
    if (a->left != b->left)
        return a->left < b->left;
    return a->right < b->right;
}

mvm_status tok_heap_push(tok_heap *h, tok_bigram b)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        tok_bigram *e = cap <= SIZE_MAX / sizeof *e ? realloc(h->e, cap * sizeof *e) : NULL;
        if (!e)
            return mvm_fail(MVM_ERR_NOMEM, "merge queue: no memory for %zu entries", cap);
        h->e = e;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && before(&b, &h->e[(i - 1) / 2])) {
        h->e[i] = h->e[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->e[i] = b;
    return MVM_OK;
}

int tok_heap_pop(tok_heap *h, tok_bigram *out)
{
    if (h->n == 0)
        return 0;
    *out = h->e[0];
    tok_bigram last = h->e[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && before(&h->e[c + 1], &h->e[c]))
            c++;
        if (!before(&h->e[c], &last))
            break;
        h->e[i] = h->e[c];
        i = c;
    }
    if (h->n > 0)
        h->e[i] = last;
    return 1;
}

void tok_heap_free(tok_heap *h)
{
    free(h->e);
    h->e = NULL;
    h->n = h->cap = 0;
}
