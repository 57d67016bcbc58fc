/* Building and writing the built-in vocabularies (see vocab_build.h). */
#include "engine/synth/vocab_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/synth/vocab_fill.h"
#include "engine/tokenizer/tokenizer_impl.h"
#include "vmm/error.h"

struct mvm_vocab_store {
    tok_strtab tokens, merges;
};

#define KEY(name) "tokenizer.ggml." name

static const char space_mark[3] = {'\xE2', '\x96', '\x81'}; /* U+2581 */

/* DeepSeek's special tokens are spelled with full-width bars and "▁": "<｜User｜>". */
#define DS(name) "<\xEF\xBD\x9C" name "\xEF\xBD\x9C>"
#define SP "\xE2\x96\x81"
#define DS_BOS DS("begin" SP "of" SP "sentence")
#define DS_EOS DS("end" SP "of" SP "sentence")
/* The turn and tool-call delimiters of DeepSeek-V3's chat format (templates/deepseek3.jinja). */
#define DS_CHAT DS("User"), DS("Assistant"), DS("tool" SP "calls" SP "begin"), \
    DS("tool" SP "calls" SP "end"), DS("tool" SP "call" SP "begin"), \
    DS("tool" SP "call" SP "end"), DS("tool" SP "sep"), DS("tool" SP "outputs" SP "begin"), \
    DS("tool" SP "outputs" SP "end"), DS("tool" SP "output" SP "begin"), \
    DS("tool" SP "output" SP "end")

/* s[0..n) with its spaces spelled "▁", as SentencePiece writes them, into buf (3n bytes at
 * most); returns the length. */
static size_t spm_escape(const uint8_t *s, size_t n, char *buf)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ')
            memcpy(buf + len, space_mark, 3), len += 3;
        else
            buf[len++] = (char)s[i];
    }
    return len;
}

/* s[0..n) in GPT-2's byte-level alphabet into buf (2n bytes at most); returns the length. */
static size_t spell_bytes(const uint8_t *s, size_t n, char *buf)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += tok_byte_symbol(s[i], buf + len);
    return len;
}

/* The corpus's words as `pre` cuts them, with their counts; `escape` spells spaces "▁". */
static mvm_status count_words(enum tok_pre pre, int escape, tok_strtab *words,
                              uint64_t **counts)
{
    size_t cap = 0, cap_counts = 0;
    char *buf = NULL;
    tok_pieces pieces = {0};
    mvm_status st = MVM_OK;
    for (size_t p = 0; p < mvm_vocab_corpus_n && st == MVM_OK; p++) {
        const uint8_t *s = (const uint8_t *)mvm_vocab_corpus[p];
        size_t n = strlen(mvm_vocab_corpus[p]);
        if (3 * n > cap) {
            free(buf);
            if (!(buf = malloc(cap = 3 * n))) {
                st = mvm_fail(MVM_ERR_NOMEM, "vocabulary: no memory for the corpus");
                break;
            }
        }
        if ((st = tok_pretok_split(pre, s, n, &pieces)) != MVM_OK)
            break;
        for (size_t i = 0, pos = 0; i < pieces.n && st == MVM_OK; pos = pieces.end[i++]) {
            size_t len = pieces.end[i] - pos;
            if (escape)
                len = spm_escape(s + pos, len, buf);
            else
                memcpy(buf, s + pos, len);
            int32_t id = tok_strtab_find(words, buf, len);
            if (id < 0) {
                id = (int32_t)words->n;
                if (words->n == cap_counts) {
                    uint64_t *c = realloc(*counts, (cap_counts = 2 * cap_counts + 1024) *
                                                       sizeof *c);
                    if (!c) {
                        st = mvm_fail(MVM_ERR_NOMEM, "vocabulary: no memory for word counts");
                        break;
                    }
                    *counts = c;
                }
                if ((st = tok_strtab_push(words, buf, len, 1)) != MVM_OK)
                    break;
                (*counts)[id] = 0;
            }
            (*counts)[id]++;
        }
    }
    tok_pieces_free(&pieces);
    free(buf);
    return st;
}

/* Appends a token; the texts of a vocabulary must be unique (llama.cpp asserts it). */
static mvm_status add_token(mvm_vocab *v, const char *s, size_t n, int32_t type, float score)
{
    tok_strtab *t = &v->store->tokens;
    if (tok_strtab_find(t, s, n) >= 0)
        return mvm_fail(MVM_ERR_INVALID, "vocabulary: token '%.*s' would appear twice",
                        (int)n, s);
    mvm_status st = tok_strtab_push(t, s, n, 1);
    if (st != MVM_OK)
        return st;
    v->types[t->n - 1] = type;
    if (v->scores)
        v->scores[t->n - 1] = score;
    return MVM_OK;
}

/* Fills the vocabulary up to n_vocab with words (vocab_fill.h) spelled as its tokens are:
 * NORMAL tokens that no BPE merge makes; SentencePiece, which merges any pair that is a
 * token, gets them scored below every other, so that the learned pieces come first and a
 * fill token only joins what they leave. n_vocab texts are enough: at most as many as the
 * vocabulary holds are in it already. */
static mvm_status fill(mvm_vocab *v, uint32_t n_vocab)
{
    tok_strtab texts = {0};
    mvm_status st = mvm_vocab_fill_texts(n_vocab, &texts);
    size_t longest = 0;
    for (uint32_t i = 0; st == MVM_OK && i < texts.n; i++)
        longest = texts.len[i] > longest ? texts.len[i] : longest;
    char *buf = st == MVM_OK ? malloc(3 * longest + 1) : NULL;
    if (st == MVM_OK && !buf)
        st = mvm_fail(MVM_ERR_NOMEM, "vocabulary: no memory for a token");
    float score = 0;
    for (uint32_t i = 0; v->scores && i < v->store->tokens.n; i++)
        score = v->scores[i] < score ? v->scores[i] : score;
    for (uint32_t i = 0; i < texts.n && v->store->tokens.n < n_vocab && st == MVM_OK; i++) {
        const uint8_t *s = (const uint8_t *)tok_strtab_str(&texts, i);
        size_t n = v->scores ? spm_escape(s, texts.len[i], buf) : spell_bytes(s, texts.len[i], buf);
        if (tok_strtab_find(&v->store->tokens, buf, n) < 0)
            st = add_token(v, buf, n, MVM_TOKEN_NORMAL, --score);
    }
    free(buf);
    tok_strtab_free(&texts);
    return st;
}

static int by_count(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b; /* {count, id} */
    return x[0] != y[0] ? (x[0] < y[0] ? 1 : -1) : (x[1] > y[1]) - (x[1] < y[1]);
}

/* The corpus's characters, "▁" first (without it a space would decode as its escape),
 * then by frequency: order[i][1] is a symbol id. */
static uint64_t (*char_order(const tok_bpe_model *m))[2]
{
    uint64_t (*order)[2] = malloc((m->n_base ? m->n_base : 1) * sizeof *order);
    if (!order)
        return NULL;
    for (uint32_t i = 0; i < m->n_base; i++) {
        int mark = m->sym.len[i] == 3 && memcmp(tok_strtab_str(&m->sym, i), space_mark, 3) == 0;
        order[i][0] = mark ? UINT64_MAX : m->base_count[i];
        order[i][1] = i;
    }
    qsort(order, m->n_base, sizeof *order, by_count);
    return order;
}

/* Mistral's chat delimiters, CONTROL tokens in its later (v3) tokenizers, which Mixtral's
 * chat template (templates/mixtral.jinja) writes around each user turn. */
static const char *const llama_chat[] = {"[INST]", "[/INST]"};
#define N_LLAMA_CHAT (sizeof llama_chat / sizeof *llama_chat)

/* SentencePiece style: specials, byte tokens, learned pieces (score -rank), then the
 * corpus's characters, which SentencePiece always keeps, so learned pieces get the room
 * the characters leave, and the chat delimiters. */
static mvm_status build_llama(mvm_vocab *v, uint32_t n_vocab, const tok_bpe_model *m)
{
    static const char *const specials[3] = {"<unk>", "<s>", "</s>"};
    static const int32_t special_types[3] = {MVM_TOKEN_UNKNOWN, MVM_TOKEN_CONTROL,
                                             MVM_TOKEN_CONTROL};
    mvm_status st = MVM_OK;
    for (int i = 0; i < 3 && st == MVM_OK; i++)
        st = add_token(v, specials[i], strlen(specials[i]), special_types[i], 0);
    for (unsigned b = 0; b < 256 && st == MVM_OK; b++) {
        char s[8];
        st = add_token(v, s, (size_t)snprintf(s, sizeof s, "<0x%02X>", b), MVM_TOKEN_BYTE, 0);
    }
    uint32_t room = n_vocab - v->store->tokens.n - N_LLAMA_CHAT, learned = m->sym.n - m->n_base;
    uint32_t chars = m->n_base < room ? m->n_base : room;
    v->n_learned = learned < room - chars ? learned : room - chars;
    float rank = 0;
    for (uint32_t i = m->n_base; i < m->n_base + v->n_learned && st == MVM_OK; i++)
        st = add_token(v, tok_strtab_str(&m->sym, i), m->sym.len[i], MVM_TOKEN_NORMAL, -rank++);
    uint64_t (*order)[2] = st == MVM_OK ? char_order(m) : NULL;
    if (st == MVM_OK && !order)
        st = mvm_fail(MVM_ERR_NOMEM, "vocabulary: no memory for %u characters", m->n_base);
    for (uint32_t i = 0; i < chars && st == MVM_OK; i++)
        st = add_token(v, tok_strtab_str(&m->sym, (uint32_t)order[i][1]),
                       m->sym.len[order[i][1]], MVM_TOKEN_NORMAL, -rank++);
    free(order);
    for (size_t i = 0; i < N_LLAMA_CHAT && st == MVM_OK; i++)
        st = add_token(v, llama_chat[i], strlen(llama_chat[i]), MVM_TOKEN_CONTROL, 0);
    v->unk = 0;
    v->bos = 1;
    v->eos = 2;
    v->pad = -1;
    v->add_bos = 1;
    return st;
}

/* The byte-level spelling of symbol `id` in buf (2 bytes per byte at most). */
static size_t spell(const tok_bpe_model *m, uint32_t id, char *buf)
{
    return spell_bytes((const uint8_t *)tok_strtab_str(&m->sym, id), m->sym.len[id], buf);
}

/* The byte-level styles: the pre-tokenizer, the special tokens after the learned ones
 * (CONTROL; each family's chat delimiters after its BOS and EOS), which of them are BOS,
 * EOS and padding, and which texts end a turn and a message where the EOS does not (NULL:
 * none). Kimi's models carry DeepSeek-V3's chat template, so they have its delimiters and
 * its end of a turn, <｜end▁of▁sentence｜>. */
#define MAX_SPECIALS 16
static const struct byte_style {
    const char *pre;
    enum tok_pre split;
    const char *specials[MAX_SPECIALS];
    int bos, eos, pad, add_bos;
    const char *eot, *eom;
} byte_styles[] = {
    /* Qwen's own FIM tokens too (every Qwen2.5/3 vocabulary has them; Qwen3-Coder's
     * completions use them: llama.cpp's /infill) */
    [MVM_VOCAB_QWEN2] = {"qwen2", TOK_PRE_QWEN2,
                         {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>",
                          "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
                          "<|file_sep|>"}, 0, 0, 0, 0},
    [MVM_VOCAB_OLMO] = {"olmo", TOK_PRE_GPT2,
                        {"<|endoftext|>", "<|padding|>", "<|system|>", "<|user|>",
                         "<|assistant|>"}, 0, 0, 1, 0},
    [MVM_VOCAB_DEEPSEEK] = {"deepseek-llm", TOK_PRE_DEEPSEEK_LLM,
                            {DS_BOS, DS_EOS, DS_CHAT}, 0, 1, 1, 1},
    [MVM_VOCAB_DEEPSEEK3] = {"deepseek-v3", TOK_PRE_DEEPSEEK3, {DS_BOS, DS_EOS, DS_CHAT},
                             0, 1, 1, 1},
    [MVM_VOCAB_KIMI] = {"kimi-k2", TOK_PRE_KIMI_K2,
                        {"[BOS]", "[EOS]", "<|im_end|>", DS_EOS, DS_CHAT}, 0, 1, 1, 0, DS_EOS},
    /* GLM-4.5's turn ends where the next one's role starts, as its converted files say */
    [MVM_VOCAB_GLM4] = {"glm4", TOK_PRE_LLAMA3,
                        {"<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>",
                         "<|assistant|>", "<|observation|>"}, 1, 0, 0, 0,
                        "<|user|>", "<|observation|>"},
    [MVM_VOCAB_MINIMAX] = {"minimax-m2", TOK_PRE_O200K,
                           {"]~!b[", "[e~[", "]!d~[", "]~b]"}, 0, 1, 1, 0},
    [MVM_VOCAB_GPTOSS] = {"gpt-4o", TOK_PRE_O200K,
                          {"<|startoftext|>", "<|endoftext|>", "<|return|>", "<|start|>",
                           "<|message|>", "<|end|>", "<|channel|>", "<|call|>"}, 0, 2, 1, 0},
};

static uint32_t n_specials(enum mvm_vocab_style style)
{
    uint32_t n = 0;
    while (n < MAX_SPECIALS && byte_styles[style].specials[n])
        n++;
    return n;
}

/* The id of special token `text` (NULL: none), -1 when there is none. */
static int32_t special_id(const mvm_vocab *v, const char *text)
{
    return text ? tok_strtab_find(&v->store->tokens, text, strlen(text)) : -1;
}

/* Byte-level BPE: the byte symbols in GPT-2's order (by code point), learned tokens and
 * their merges, then the specials. */
static mvm_status build_bytes(mvm_vocab *v, enum mvm_vocab_style style,
                              const tok_bpe_model *m)
{
    mvm_status st = MVM_OK;
    for (uint32_t cp = 0; cp < 0x144 && st == MVM_OK; cp++) {
        int b = tok_symbol_byte(cp);
        char s[2];
        if (b >= 0)
            st = add_token(v, s, tok_byte_symbol((uint8_t)b, s), MVM_TOKEN_NORMAL, 0);
    }
    size_t longest = 0;
    for (uint32_t i = 0; i < m->sym.n; i++)
        longest = m->sym.len[i] > longest ? m->sym.len[i] : longest;
    char *buf = malloc(2 * longest + 1); /* two spelt symbols and a space */
    if (st == MVM_OK && !buf)
        st = mvm_fail(MVM_ERR_NOMEM, "vocabulary: no memory for a token");
    for (uint32_t i = m->n_base; i < m->sym.n && st == MVM_OK; i++)
        st = add_token(v, buf, spell(m, i, buf), MVM_TOKEN_NORMAL, 0);
    for (uint32_t i = 0; i < m->n_merges && st == MVM_OK; i++) {
        size_t n = spell(m, m->merge[i][0], buf);
        buf[n++] = ' ';
        n += spell(m, m->merge[i][1], buf + n);
        st = tok_strtab_push(&v->store->merges, buf, n, 0);
    }
    free(buf);
    const struct byte_style *bs = &byte_styles[style];
    int32_t first = (int32_t)v->store->tokens.n;
    for (uint32_t i = 0; i < n_specials(style) && st == MVM_OK; i++)
        st = add_token(v, bs->specials[i], strlen(bs->specials[i]), MVM_TOKEN_CONTROL, 0);
    v->bos = first + bs->bos;
    v->eos = first + bs->eos;
    v->pad = first + bs->pad;
    v->eot = special_id(v, bs->eot);
    v->eom = special_id(v, bs->eom);
    v->unk = -1;
    v->add_bos = bs->add_bos;
    v->n_learned = m->sym.n - m->n_base;
    return st;
}

/* Trains on the corpus cut into words as the style will be tokenized. */
static mvm_status train(enum mvm_vocab_style style, uint32_t max_new, tok_bpe_model *m)
{
    int llama = style == MVM_VOCAB_LLAMA;
    tok_strtab words = {0};
    uint64_t *counts = NULL;
    mvm_status st = count_words(llama ? TOK_PRE_GPT2 : byte_styles[style].split, llama, &words,
                                &counts);
    if (st == MVM_OK)
        st = tok_train_bpe(&words, counts, llama ? TOK_UNIT_CHAR : TOK_UNIT_BYTE, max_new, 2, m);
    tok_strtab_free(&words);
    free(counts);
    return st;
}

/* Points tokens and merges into the finished tables, which no longer move. */
static mvm_status publish(mvm_vocab *v)
{
    const tok_strtab *tokens = &v->store->tokens, *merges = &v->store->merges;
    v->n_tokens = tokens->n;
    v->n_merges = merges->n;
    v->tokens = malloc((size_t)tokens->n * sizeof *v->tokens);
    if (v->scores == NULL) /* byte-level */
        v->merges = malloc((merges->n ? merges->n : 1) * sizeof *v->merges);
    if (!v->tokens || (!v->scores && !v->merges))
        return mvm_fail(MVM_ERR_NOMEM, "vocabulary: no memory for %u tokens", tokens->n);
    for (uint32_t i = 0; i < tokens->n; i++)
        v->tokens[i] = tok_strtab_str(tokens, i);
    for (uint32_t i = 0; i < merges->n; i++)
        v->merges[i] = tok_strtab_str(merges, i);
    return MVM_OK;
}

mvm_status mvm_vocab_build(enum mvm_vocab_style style, uint32_t n_vocab, mvm_vocab *out)
{
    memset(out, 0, sizeof *out);
    int llama = style == MVM_VOCAB_LLAMA;
    const char *name = llama ? "llama" : byte_styles[style].pre;
    uint32_t fixed = llama ? 3 + 256 + 1 + N_LLAMA_CHAT : 256 + n_specials(style);
    if (n_vocab < fixed || n_vocab > MVM_GGUF_MAX_ARRAY)
        return mvm_fail(MVM_ERR_INVALID, "vocabulary of %u tokens: the %s style needs %u to "
                        "%llu", n_vocab, name, fixed, (unsigned long long)MVM_GGUF_MAX_ARRAY);
    mvm_vocab v = {.model = llama ? "llama" : "gpt2", .pre = llama ? "default" : name,
                   .eot = -1, .eom = -1};
    v.store = calloc(1, sizeof *v.store);
    v.types = malloc((size_t)n_vocab * sizeof *v.types);
    v.scores = llama ? malloc((size_t)n_vocab * sizeof *v.scores) : NULL;
    if (!v.store || !v.types || (llama && !v.scores)) {
        mvm_vocab_free(&v);
        return mvm_fail(MVM_ERR_NOMEM, "vocabulary: no memory for %u tokens", n_vocab);
    }
    tok_bpe_model m = {0};
    uint32_t room = n_vocab - fixed + llama; /* llama's "▁" is a trained character */
    mvm_status st = train(style, room < MVM_VOCAB_MAX_LEARNED ? room : MVM_VOCAB_MAX_LEARNED, &m);
    if (st == MVM_OK)
        st = llama ? build_llama(&v, n_vocab, &m) : build_bytes(&v, style, &m);
    tok_bpe_model_free(&m);
    if (st == MVM_OK)
        st = fill(&v, n_vocab);
    if (st == MVM_OK)
        st = publish(&v);
    if (st != MVM_OK) {
        mvm_vocab_free(&v);
        return st;
    }
    *out = v;
    return MVM_OK;
}

mvm_status mvm_vocab_write(const mvm_vocab *v, mvm_gguf_writer *w)
{
    mvm_status st = mvm_gguf_writer_set_str(w, KEY("model"), v->model);
    if (st == MVM_OK)
        st = mvm_gguf_writer_set_str(w, KEY("pre"), v->pre);
    if (st == MVM_OK)
        st = mvm_gguf_writer_set_arr_str(w, KEY("tokens"), v->tokens, v->n_tokens);
    if (st == MVM_OK && v->scores)
        st = mvm_gguf_writer_set_arr_f32(w, KEY("scores"), v->scores, v->n_tokens);
    if (st == MVM_OK)
        st = mvm_gguf_writer_set_arr_i32(w, KEY("token_type"), v->types, v->n_tokens);
    if (st == MVM_OK && v->merges)
        st = mvm_gguf_writer_set_arr_str(w, KEY("merges"), v->merges, v->n_merges);
    const char *const id_keys[6] = {KEY("bos_token_id"), KEY("eos_token_id"),
                                    KEY("unknown_token_id"), KEY("padding_token_id"),
                                    KEY("eot_token_id"), KEY("eom_token_id")};
    const int32_t ids[6] = {v->bos, v->eos, v->unk, v->pad, v->eot, v->eom};
    for (int i = 0; i < 6 && st == MVM_OK; i++)
        if (ids[i] >= 0)
            st = mvm_gguf_writer_set_u32(w, id_keys[i], (uint32_t)ids[i]);
    if (st == MVM_OK)
        st = mvm_gguf_writer_set_bool(w, KEY("add_bos_token"), v->add_bos);
    if (st == MVM_OK)
        st = mvm_gguf_writer_set_bool(w, KEY("add_eos_token"), 0);
    return st;
}

void mvm_vocab_free(mvm_vocab *v)
{
    if (v->store) {
        tok_strtab_free(&v->store->tokens);
        tok_strtab_free(&v->store->merges);
        free(v->store);
    }
    free(v->tokens);
    free(v->merges);
    free(v->scores);
    free(v->types);
    memset(v, 0, sizeof *v);
}
