/*
 * What the GBNF parser (gbnf.c) hands the matcher (grammar.c): llama.cpp's rule encoding
 * (llama-grammar.h), so that its matching algorithm carries over step for step. A rule is
 * a run of elements: its alternates one after another, each a sequence of characters
 * classes and rule references, separated by GR_ALT and closed by GR_END. A character
 * class is a GR_CHAR (or GR_CHAR_NOT for [^...], GR_CHAR_ANY for .) followed by its other
 * members as GR_CHAR_ALT, each optionally followed by GR_CHAR_RNG_UPPER (the upper end of
 * a range). Repetitions and groups were rewritten by the parser into helper rules.
 */
#ifndef MVM_ENGINE_GRAMMAR_GRAMMAR_IMPL_H
#define MVM_ENGINE_GRAMMAR_GRAMMAR_IMPL_H

#include <stdint.h>

#include "moevm/engine.h"

/* A partly decoded UTF-8 character: its bits so far, the bytes it still needs (0: none
 * pending; -1: the bytes were not UTF-8), and the least code point its length may encode
 * (a smaller one is an overlong encoding, which is not UTF-8). */
typedef struct gr_partial {
    uint32_t value;
    int n_remain;
    uint32_t min;
} gr_partial;

enum gr_type {
    GR_END,            /* end of a rule */
    GR_ALT,            /* start of the rule's next alternate */
    GR_RULE_REF,       /* value: the rule's id */
    GR_CHAR,           /* value: a code point (the first member of a class) */
    GR_CHAR_NOT,       /* the first member of a negated class */
    GR_CHAR_RNG_UPPER, /* value: the inclusive upper end of the member before it */
    GR_CHAR_ALT,       /* value: a further member of the class */
    GR_CHAR_ANY,       /* any character */
};

typedef struct gr_elem {
    uint32_t type; /* enum gr_type */
    uint32_t value;
} gr_elem;

/* Every rule in one array: rule r's elements start at elems[start[r]]. */
typedef struct gr_rules {
    gr_elem *elems;
    uint32_t n_elems;
    uint32_t *start;
    uint32_t n_rules;
    uint32_t root;
} gr_rules;

/* A vocabulary decoded for matching (grammar.c): each token's bytes, code points and kind
 * (text, end of generation, or never allowed). Built once an engine, the first time a
 * grammar is bound to it (mvm_engine_grammar_vocab), and shared by its grammars. */
enum { GR_TOK_TEXT, GR_TOK_EOG, GR_TOK_NEVER };
typedef struct gr_vocab {
    uint32_t n;
    uint8_t *kind;      /* GR_TOK_* */
    char *bytes;
    uint32_t *byte_off; /* token i: bytes[byte_off[i] .. byte_off[i + 1]) */
    uint32_t *cp;       /* token i's code points from cp[cp_off[i]], then a 0 */
    uint32_t *cp_off;
    gr_partial *cp_end; /* what its bytes leave undecoded */
} gr_vocab;
/* grammar_vocab.c */
mvm_status gr_vocab_build(const mvm_engine *e, gr_vocab **out);
void gr_vocab_free(gr_vocab *v);
/* Binds grammar g (grammar.c) to vocabulary v. */
void gr_bind(mvm_grammar *g, const gr_vocab *v);

/* A lazy grammar's watch for its trigger words (grammar_lazy.c). */
typedef struct gr_lazy gr_lazy;
/* From t (copied); MVM_ERR_INVALID for no words, an empty one, or half a quiet block. */
mvm_status gr_lazy_new(const mvm_grammar_triggers *t, gr_lazy **out);
void gr_lazy_free(gr_lazy *l);
/* Watches text[0..n) after what came before: 1 when a trigger word has appeared, with
 * *from[0..*len) the text from its first byte on (l's, valid until the next call); 0 while
 * none has; -1 without memory. */
int gr_lazy_watch(gr_lazy *l, const char *text, size_t n, const char **from, size_t *len);
/* The trigger last found was refused (what follows it is no sentence): looks past it. */
void gr_lazy_skip(gr_lazy *l);

/* Parses GBNF text; MVM_ERR_INVALID naming the line and column of the fault. */
mvm_status gr_parse(const char *src, gr_rules *out);
void gr_rules_free(gr_rules *r);

#endif
