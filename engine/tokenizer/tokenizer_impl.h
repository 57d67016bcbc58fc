/*
 * The tokenizer's internals, shared by its files (tokenizer.c, tok_*.c) and the vocabulary
 * builder (vocab_build.c), which trains with the same pre-tokenizers and byte alphabet.
 * Nothing here is part of the API in tokenizer.h.
 */
#ifndef MVM_ENGINE_TOKENIZER_TOKENIZER_IMPL_H
#define MVM_ENGINE_TOKENIZER_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/tokenizer/tokenizer.h"

/* ---- UTF-8 and character classes (tok_unicode.c) ------------------------------------- */

/* \p{L}, \p{N}, \s, \p{M}, \p{P}, \p{S}, and none of them (controls, format characters,
 * private use, unassigned). */
enum tok_class { TOK_OTHER = 0, TOK_LETTER, TOK_NUMBER, TOK_SPACE, TOK_MARK, TOK_PUNCT,
                 TOK_SYMBOL };

#define TOK_CP_INVALID 0xFFFFFFFFu

/* Decodes the code point at s[0..n) (n >= 1) into *cp as llama.cpp's unicode_cpt_from_utf8
 * does: continuation bytes are checked, overlong forms and surrogates are not. Returns its
 * length; an invalid sequence is its first byte alone, with *cp = TOK_CP_INVALID. */
size_t tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
/* The class of cp; \s is llama.cpp's whitespace set. TOK_CP_INVALID is a symbol, as the
 * U+FFFD that llama.cpp puts in its place is. */
enum tok_class tok_cp_class(uint32_t cp);

/* The case of a letter (a code point of class TOK_LETTER; for others it means nothing). */
enum tok_case { TOK_CASE_UPPER, /* \p{Lu}, \p{Lt} */
                TOK_CASE_LOWER, /* \p{Ll} */
                TOK_CASE_OTHER  /* \p{Lm}, \p{Lo}: modifier letters, and scripts without case */
};
enum tok_case tok_letter_case(uint32_t cp);
/* Whether cp is in the Han script (\p{Han}: Script=Han, not Script_Extensions). */
int tok_cp_is_han(uint32_t cp);

typedef struct tok_range {
    uint32_t lo, hi;
} tok_range;

/* Whether cp is in one of the n sorted, disjoint ranges r. */
int tok_in_ranges(const tok_range *r, size_t n, uint32_t cp);

/* ---- GPT-2's byte-level alphabet (tok_bytes.c) ---------------------------------------- */

/* The UTF-8 spelling of byte b's symbol (1 or 2 bytes) in out; returns its length. */
size_t tok_byte_symbol(uint8_t b, char out[2]);
/* The byte whose symbol is code point cp, or -1 when cp is not in the alphabet. */
int tok_symbol_byte(uint32_t cp);

/* ---- pre-tokenizers (tok_pretok.c, tok_regex.c) ----------------------------------------- */

/* The regexes of tokenizer.ggml.pre, by the names tokenizer.c maps to them. */
enum tok_pre {
    TOK_PRE_GPT2,           /* GPT-2's regex */
    TOK_PRE_DEFAULT,        /* llama.cpp's "default": GPT-2's among three more */
    TOK_PRE_QWEN2,          /* Qwen2's: letters after one non-letter, digits one by one */
    TOK_PRE_LLAMA3,         /* Qwen2's with digits in threes */
    TOK_PRE_DEEPSEEK_LLM,   /* DeepSeek-LLM and -V2's six regexes */
    TOK_PRE_DEEPSEEK_CODER, /* DeepSeek-Coder's five */
    TOK_PRE_DEEPSEEK3,      /* DeepSeek-V3's three */
    TOK_PRE_KIMI_K2,        /* Kimi K2's: Han runs, words split at capitals (keep last) */
    TOK_PRE_O200K,          /* tiktoken's o200k_base: Kimi K2's with Han as letters */
};

/* A text as the regexes see it: its code points and their classes. */
typedef struct tok_text {
    const uint32_t *cp;
    const uint8_t *cls; /* enum tok_class */
} tok_text;

/*
 * One regex of a pre-tokenizer. It cuts every piece the earlier ones left into its matches
 * and the text between them (Hugging Face's Split with "isolated", llama.cpp's
 * unicode_regex_split), seeing each piece as a whole text. `match` gives the end of the
 * match that starts at code point p of the piece [.., end), or p when there is none; the
 * search tries p = start, start + 1, ... as a regex engine does. `find`, when not NULL,
 * does the whole search instead: the first match at or after p into [*ms, *me), or 0.
 */
typedef struct tok_pass {
    size_t (*match)(const tok_text *t, size_t p, size_t end);
    int (*find)(const tok_text *t, size_t p, size_t end, size_t *ms, size_t *me);
} tok_pass;

/* tokenizer.ggml.pre values, as llama.cpp (llama_vocab::impl::load) reads them, with the
 * regexes and flags it gives each; "gpt2" is taken as a spelling of "gpt-2" (tokenizer.c). */
typedef struct tok_pre_name {
    const char *name;
    enum tok_pre pre;
    int ignore_merges, add_bos;
} tok_pre_name;
extern const tok_pre_name tok_pre_names[];
extern const size_t tok_pre_names_n;

/* The regexes of `pre`, in order, and their number in *n. */
const tok_pass *tok_pretok_passes(enum tok_pre pre, size_t *n);

/* A text cut into pre-tokens: piece i ends at byte end[i] (the last at the text's length).
 * The other fields are room kept from one call to the next; zero-initialise, then free with
 * tok_pieces_free. */
typedef struct tok_pieces {
    size_t *end;
    size_t n;
    uint32_t *cp;
    uint8_t *cls;
    size_t *off, *cut;
    size_t cap;
} tok_pieces;

/* Cuts s[0..n) into pre-tokens as `pre`'s regexes do (an empty text has none). Invalid
 * UTF-8 is one code point per byte, as tok_utf8_decode reads it. MVM_ERR_NOMEM. */
mvm_status tok_pretok_split(enum tok_pre pre, const uint8_t *s, size_t n, tok_pieces *out);
void tok_pieces_free(tok_pieces *p);

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
    int ignore_merges;        /* BPE: a piece that is a token is that token (llama.cpp) */
    tok_strtab text;          /* the token texts; id = string id */
    float *score;             /* NULL when the vocabulary has none */
    uint8_t *type;            /* enum mvm_token_type */
    uint8_t *eog;
    int32_t byte_token[256];  /* SPM: the byte fallback; BPE: the byte's symbol; -1 none */
    tok_u64map merge_rank;    /* BPE: (left, right) -> rank */
    int32_t *merge_result;    /* BPE: rank -> token */
    int32_t bos, eos, unk;
    int32_t fim[MVM_FIM_COUNT]; /* -1: none */
    int add_bos, add_eos, add_space_prefix;
    int32_t *special;         /* CONTROL and USER_DEFINED tokens with a text, longest first */
    uint32_t n_special;
    uint8_t special_first[256]; /* 1 for a byte some special token's text starts with */
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

/* ---- special tokens in text (tok_special.c) ------------------------------------------ */

/* Fills t->special and special_first once the types are known. */
mvm_status tok_special_index(mvm_tokenizer *t);
/* text with the special tokens' texts as those tokens, the rest as the model encodes it */
mvm_status tok_special_encode(const mvm_tokenizer *t, const char *text, size_t len, tok_out *o);

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
