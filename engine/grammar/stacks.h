/*
 * The matcher's state: llama.cpp's pushdown stacks (llama-grammar.cpp). A stack is the
 * positions still to match, innermost rule last; its top is always a character class (or
 * it is empty: the sentence may end there). The grammar's state is the set of stacks the
 * text so far may have reached. Used by grammar.c (matching text) and grammar_vocab.c
 * (which tokens may come next).
 */
#ifndef MVM_ENGINE_GRAMMAR_STACKS_H
#define MVM_ENGINE_GRAMMAR_STACKS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/grammar/grammar_impl.h"

/* A set of stacks, each a run of element indices (bottom first) in one pool. */
typedef struct gr_stacks {
    uint32_t *pool;
    size_t n_pool, cap_pool;
    struct gr_stack {
        size_t off;
        uint32_t len;
        uint64_t hash;
    } *at;
    uint32_t n, cap;
} gr_stacks;

static inline const uint32_t *gr_stack_data(const gr_stacks *s, uint32_t i)
{
    return s->pool + s->at[i].off;
}

void gr_stacks_free(gr_stacks *s);

/* Adds to out every stack that stack st[0..len) expands into, llama.cpp's
 * advance_stack: rule references at the top replaced by each of their alternates until
 * a character class (or nothing) is on top; duplicates are added once. -1: no memory. */
int gr_advance(const gr_rules *r, const uint32_t *st, uint32_t len, gr_stacks *out);

/* The stacks a sentence starts from (root's alternates expanded); -1: no memory. */
int gr_initial(const gr_rules *r, gr_stacks *out);

/* Whether class element pos matches chr; *after: the element past the class. */
int gr_match_char(const gr_elem *pos, uint32_t chr, const gr_elem **after);

/* Whether some completion of the partial character could match class element pos. */
int gr_match_partial(const gr_elem *pos, gr_partial p);

/* Decodes bytes[0..len) after the partial character start into out (at most len + 1 code
 * points, then a 0), llama.cpp's decode_utf8: *end is what is left undecoded; a sequence
 * that is not UTF-8 gives no code points and n_remain -1 (a lead byte followed by one that
 * does not continue it, and an overlong form, too, which llama.cpp reads as characters). A NUL ends the decoding, as the
 * C string it is in llama.cpp. Returns the number of code points. */
uint32_t gr_decode(const char *bytes, size_t len, gr_partial start, uint32_t *out,
                   gr_partial *end);

/* The stacks stacks reach by matching code point chr (into out, emptied first); -1: no
 * memory. */
int gr_accept_char(const gr_rules *r, const gr_stacks *stacks, uint32_t chr, gr_stacks *out);

#endif
