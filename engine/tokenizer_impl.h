/*
 * The tokenizer's internals, shared by its files (tokenizer.c, tok_*.c) and the vocabulary
 * builder (vocab_build.c), which trains with the same pre-tokenizers and byte alphabet.
 * Nothing here is part of the API in tokenizer.h.
 */
#ifndef MVM_ENGINE_TOKENIZER_IMPL_H
#define MVM_ENGINE_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/tokenizer.h"

/* ---- UTF-8 and character classes (tok_unicode.c) ------------------------------------- */

enum tok_class { TOK_OTHER = 0, TOK_LETTER, TOK_NUMBER, TOK_SPACE };

#define TOK_CP_INVALID 0xFFFFFFFFu

/* Decodes the code point at s[0..n) (n >= 1) into *cp as llama.cpp's unicode_cpt_from_utf8
 * does: continuation bytes are checked, overlong forms and surrogates are not. Returns its
 * length; an invalid sequence is its first byte alone, with *cp = TOK_CP_INVALID. */
size_t tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
/* \p{L}, \p{N}, \s (llama.cpp's whitespace set) or none of them: TOK_OTHER also for
 * TOK_CP_INVALID, which is what llama.cpp's U+FFFD replacement is. */
enum tok_class tok_cp_class(uint32_t cp);

/* ---- GPT-2's byte-level alphabet and the pre-tokenizers (tok_pretok.c) --------------- */

/* The UTF-8 spelling of byte b's symbol (1 or 2 bytes) in out; returns its length. */
size_t tok_byte_symbol(uint8_t b, char out[2]);
/* The byte whose symbol is code point cp, or -1 when cp is not in the alphabet. */
int tok_symbol_byte(uint32_t cp);

enum tok_pre { TOK_PRE_GPT2, TOK_PRE_QWEN2 };

/* The end of the pre-token that starts at s[pos] (pos < n): one match of the regex, found
 * the way llama.cpp's hand-written matchers find it. */
size_t tok_pretok_next(enum tok_pre pre, const uint8_t *s, size_t n, size_t pos);

/* ---- interned strings and integer maps (tok_strtab.c) -------------------------------- */

/* Strings back to back (each NUL-terminated) with an index from text to id. Strings that
 * were pushed without indexing (or are empty) are not found by tok_strtab_find. */
typedef struct tok_strtab {
    char *buf;
    size_t used, cap;
    size_t *off;
    uint32_t *len;
    uint32_t n, cap_n;
    uint32_t *slot; /* id + 1, 0 when empty */
    size_t mask;    /* slots - 1; 0 before the first indexed string */
    uint32_t n_indexed;
} tok_strtab;

/* Appends s[0..n) as string t->n (and indexes it when `index`): the caller checks for
 * duplicates first. MVM_ERR_NOMEM, or MVM_ERR_RANGE past UINT32_MAX - 1 strings. */
mvm_status tok_strtab_push(tok_strtab *t, const char *s, size_t n, int index);
/* The id of the indexed string s[0..n), or -1. */
int32_t tok_strtab_find(const tok_strtab *t, const char *s, size_t n);
static inline const char *tok_strtab_str(const tok_strtab *t, uint32_t id)
{
    return t->buf + t->off[id];
}
void tok_strtab_free(tok_strtab *t);

/* A map from 64-bit keys (two token ids) to 32-bit values; UINT64_MAX is not a key. */
typedef struct tok_u64map {
    uint64_t *key;
    uint32_t *val;
    size_t mask, n;
} tok_u64map;

static inline uint64_t tok_pair_key(uint32_t left, uint32_t right)
{
    return (uint64_t)left << 32 | right;
}
/* Sets key's value unless the key is present already (the first value stays: the lowest
 * merge rank wins, as llama.cpp keeps the first of duplicate merges). */
mvm_status tok_u64map_add(tok_u64map *m, uint64_t key, uint32_t val);
/* The key's value, or NULL. The pointer is valid until the next add. */
uint32_t *tok_u64map_get(const tok_u64map *m, uint64_t key);
void tok_u64map_free(tok_u64map *m);

/* ---- the merge queue (tok_heap.c) ----------------------------------------------------- */

/* A candidate merge of the symbols `left` and `right`; the highest prio comes first, ties
 * by the lowest left, then the lowest right. `size` lets the tokenizers tell a stale entry
 * from a live one. */
typedef struct tok_bigram {
    double prio;
    int32_t left, right;
    size_t size;
} tok_bigram;

typedef struct tok_heap {
    tok_bigram *e;
    size_t n, cap;
} tok_heap;

mvm_status tok_heap_push(tok_heap *h, tok_bigram b);
/* Removes the first entry into *out; 0 when the heap is empty. */
int tok_heap_pop(tok_heap *h, tok_bigram *out);
void tok_heap_free(tok_heap *h);

/* ---- the tokenizer (tokenizer.c, tok_spm.c, tok_bpe.c) -------------------------------- */

enum tok_model { TOK_MODEL_SPM, TOK_MODEL_BPE };

struct mvm_tokenizer {
    enum tok_model model;
    enum tok_pre pre;         /* BPE */
    tok_strtab text;          /* the token texts; id = string id */
    float *score;             /* NULL when the vocabulary has none */
    uint8_t *type;            /* enum mvm_token_type */
    uint8_t *eog;
    int32_t byte_token[256];  /* SPM: the byte fallback; BPE: the byte's symbol; -1 none */
    tok_u64map merge_rank;    /* BPE: (left, right) -> rank */
    int32_t *merge_result;    /* BPE: rank -> token */
    int32_t bos, eos, unk;
    int add_bos, add_eos, add_space_prefix;
};

/* Where encoding writes: ids[0..cap), counting on past cap so the caller learns the size. */
typedef struct tok_out {
    int32_t *ids;
    size_t cap, n;
} tok_out;

static inline void tok_emit(tok_out *o, int32_t id)
{
    if (o->n < o->cap)
        o->ids[o->n] = id;
    o->n++;
}

/* The model-specific part of mvm_tokenizer_encode: text without BOS/EOS. */
mvm_status tok_spm_encode(const mvm_tokenizer *t, const char *text, size_t len, tok_out *o);
mvm_status tok_bpe_encode(const mvm_tokenizer *t, const char *text, size_t len, tok_out *o);

/* ---- the BPE trainer (tok_train.c) ---------------------------------------------------- */

/* Symbols are byte strings; base symbols are single bytes (byte-level BPE: all 256, id =
 * byte) or single UTF-8 characters (SentencePiece style: those of the words, in order of
 * first appearance). */
enum tok_unit { TOK_UNIT_BYTE, TOK_UNIT_CHAR };

typedef struct tok_bpe_model {
    tok_strtab sym;       /* base symbols, then each new merge result */
    uint32_t n_base;
    uint64_t *base_count; /* occurrences of each base symbol in the corpus */
    uint32_t n_merges;
    uint32_t (*merge)[3]; /* left, right, result: result may be an older symbol of the same
                             text, which adds no symbol */
} tok_bpe_model;

/*
 * Trains BPE on words[i] occurring counts[i] times: repeatedly merges the most frequent
 * adjacent symbol pair (ties: the lowest left symbol id, then the lowest right) until
 * max_new symbols have been added or no pair occurs min_count times. Deterministic.
 */
mvm_status tok_train_bpe(const tok_strtab *words, const uint64_t *counts, enum tok_unit unit,
                         uint32_t max_new, uint64_t min_count, tok_bpe_model *out);
void tok_bpe_model_free(tok_bpe_model *m);

#endif
