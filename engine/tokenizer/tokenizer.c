/*
 * Loading a tokenizer from tokenizer.ggml.* and validating it (see tokenizer.h), and the
 * small accessors. Encoding is in tok_spm.c and tok_bpe.c, decoding in tok_piece.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tokenizer_impl.h"
#include "vmm/error.h"

#define KEY(name) "tokenizer.ggml." name

/* Token texts as messages show them: at most 40 bytes, anything but printable ASCII as
 * \xHH, so a message stays one line whatever the file holds. */
static const char *shown(const char *s, size_t n, char out[200])
{
    size_t o = 0;
    for (size_t i = 0; i < n && i < 40; i++) {
        uint8_t c = (uint8_t)s[i];
        if (c >= 0x20 && c < 0x7F && c != '\\')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, 5, "\\x%02X", c);
    }
    if (n > 40)
        memcpy(out + o, "...", 3), o += 3;
    out[o] = 0;
    return out;
}

static int str_is(mvm_gguf_str s, const char *want)
{
    return s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

const tok_pre_name tok_pre_names[] = {
    {"default", TOK_PRE_DEFAULT, 0, 0},     {"gpt-2", TOK_PRE_GPT2, 0, 0},
    {"gpt2", TOK_PRE_GPT2, 0, 0},           {"olmo", TOK_PRE_GPT2, 0, 0},
    {"qwen2", TOK_PRE_QWEN2, 0, 0},         {"llama3", TOK_PRE_LLAMA3, 1, 1},
    {"llama-v3", TOK_PRE_LLAMA3, 1, 1},     {"llama-bpe", TOK_PRE_LLAMA3, 1, 1},
    {"falcon3", TOK_PRE_LLAMA3, 1, 1},      {"dbrx", TOK_PRE_LLAMA3, 0, 0},
    {"smaug-bpe", TOK_PRE_LLAMA3, 0, 0},    {"deepseek-llm", TOK_PRE_DEEPSEEK_LLM, 0, 0},
    {"deepseek-coder", TOK_PRE_DEEPSEEK_CODER, 0, 0},
    {"deepseek-v3", TOK_PRE_DEEPSEEK3, 0, 0},
    {"kimi-k2", TOK_PRE_KIMI_K2, 1, 0},     /* ignore_merges: tiktoken's, see tokenizer.h */
    /* GLM-4.5's: llama.cpp's CHATGLM4 regex is LLAMA3's, its contractions folded in ASCII */
    {"glm4", TOK_PRE_LLAMA3, 0, 0},         {"chatglm-bpe", TOK_PRE_LLAMA3, 0, 0},
    /* llama.cpp's GPT4O regex, for gpt-oss and Llama 4's files and MiniMax-M2's */
    {"gpt-4o", TOK_PRE_O200K, 0, 0},        {"llama4", TOK_PRE_O200K, 0, 0},
    {"minimax-m2", TOK_PRE_O200K, 0, 0},
};
const size_t tok_pre_names_n = sizeof tok_pre_names / sizeof *tok_pre_names;

static mvm_status load_model(const mvm_gguf *g, mvm_tokenizer *t)
{
    mvm_gguf_str s;
    char buf[200];
    mvm_status st = mvm_gguf_get_str(g, KEY("model"), &s);
    if (st != MVM_OK)
        return st;
    if (str_is(s, "llama")) {
        t->model = TOK_MODEL_SPM;
        return MVM_OK;
    }
    if (!str_is(s, "gpt2"))
        return mvm_fail(MVM_ERR_UNSUPPORTED, "tokenizer model '%s' is not supported (%s: "
                        "llama or gpt2)", shown(s.ptr, s.len, buf), KEY("model"));
    t->model = TOK_MODEL_BPE;
    t->pre = TOK_PRE_DEFAULT; /* what a file without the key gets in llama.cpp */
    if (mvm_gguf_find_key(g, KEY("pre")) < 0)
        return MVM_OK;
    if ((st = mvm_gguf_get_str(g, KEY("pre"), &s)) != MVM_OK)
        return st;
    for (size_t i = 0; i < tok_pre_names_n; i++) {
        if (str_is(s, tok_pre_names[i].name)) {
            t->pre = tok_pre_names[i].pre;
            t->ignore_merges = tok_pre_names[i].ignore_merges;
            t->add_bos = tok_pre_names[i].add_bos; /* the default; add_bos_token overrides it */
            return MVM_OK;
        }
    }
    char known[300];
    size_t o = 0;
    for (size_t i = 0; i < tok_pre_names_n; i++)
        o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", i ? ", " : "",
                              tok_pre_names[i].name);
    return mvm_fail(MVM_ERR_UNSUPPORTED, "%s '%s' is not supported (%s)", KEY("pre"),
                    shown(s.ptr, s.len, buf), known);
}

static mvm_status load_tokens(const mvm_gguf *g, mvm_tokenizer *t)
{
    enum mvm_gguf_type type;
    uint64_t n;
    mvm_status st = mvm_gguf_get_arr(g, KEY("tokens"), &type, &n);
    if (st != MVM_OK)
        return st;
    if (type != MVM_GGUF_STR)
        return mvm_fail(MVM_ERR_INVALID, "%s is an array of %s, expected str", KEY("tokens"),
                        mvm_gguf_type_name(type));
    if (n == 0 || n > INT32_MAX)
        return mvm_fail(MVM_ERR_INVALID, "%s has %llu tokens", KEY("tokens"),
                        (unsigned long long)n);
    uint64_t key = (uint64_t)mvm_gguf_find_key(g, KEY("tokens"));
    for (uint32_t i = 0; i < n; i++) {
        mvm_gguf_str s;
        char buf[200];
        st = mvm_gguf_arr_str(g, key, i, &s);
        if (st != MVM_OK)
            return st;
        int32_t dup = tok_strtab_find(&t->text, s.ptr, s.len);
        if (dup >= 0)
            return mvm_fail(MVM_ERR_INVALID, "%s: token %u '%s' repeats token %d",
                            KEY("tokens"), i, shown(s.ptr, s.len, buf), dup);
        st = tok_strtab_push(&t->text, s.ptr, s.len, 1);
        if (st != MVM_OK)
            return st;
    }
    return MVM_OK;
}

/* The numeric array `name` with one `want` element per token, or NULL when it is absent
 * and not required. */
static mvm_status token_array(const mvm_gguf *g, const mvm_tokenizer *t, const char *name,
                              enum mvm_gguf_type want, int required, const void **data)
{
    *data = NULL;
    int64_t key = mvm_gguf_find_key(g, name);
    if (key < 0)
        return required ? mvm_fail(MVM_ERR_INVALID, "missing key '%s'", name) : MVM_OK;
    enum mvm_gguf_type type;
    uint64_t n;
    mvm_status st = mvm_gguf_get_arr(g, name, &type, &n);
    if (st != MVM_OK)
        return st;
    if (type != want)
        return mvm_fail(MVM_ERR_INVALID, "%s is an array of %s, expected %s", name,
                        mvm_gguf_type_name(type), mvm_gguf_type_name(want));
    if (n != t->text.n)
        return mvm_fail(MVM_ERR_INVALID, "%s has %llu elements for %u tokens", name,
                        (unsigned long long)n, t->text.n);
    return mvm_gguf_arr_data(g, (uint64_t)key, &type, data, &n);
}

static mvm_status load_scores_and_types(const mvm_gguf *g, mvm_tokenizer *t)
{
    uint32_t n = t->text.n;
    const void *scores = NULL, *types = NULL;
    mvm_status st = token_array(g, t, KEY("scores"), MVM_GGUF_F32, t->model == TOK_MODEL_SPM,
                                &scores);
    if (st == MVM_OK)
        st = token_array(g, t, KEY("token_type"), MVM_GGUF_I32, 0, &types);
    if (st != MVM_OK)
        return st;
    t->type = malloc(n);
    t->eog = calloc(n, 1);
    if (scores)
        t->score = malloc((size_t)n * sizeof *t->score);
    if (!t->type || !t->eog || (scores && !t->score))
        return mvm_fail(MVM_ERR_NOMEM, "tokenizer: no memory for %u tokens", n);
    for (uint32_t i = 0; i < n; i++) {
        int32_t type = MVM_TOKEN_NORMAL;
        if (types)
            memcpy(&type, (const char *)types + 4 * (size_t)i, 4); /* maybe unaligned */
        if (type < MVM_TOKEN_UNDEFINED || type > MVM_TOKEN_BYTE)
            return mvm_fail(MVM_ERR_INVALID, "%s[%u] = %d is not a token type (0..6)",
                            KEY("token_type"), i, type);
        t->type[i] = (uint8_t)type;
        if (scores) {
            memcpy(&t->score[i], (const char *)scores + 4 * (size_t)i, 4);
            if (isnan(t->score[i]))
                return mvm_fail(MVM_ERR_INVALID, "%s[%u] is NaN", KEY("scores"), i);
        }
    }
    return MVM_OK;
}

/* The optional token id at `key` into *id (which keeps its default when the key is
 * absent). */
static mvm_status get_id(const mvm_gguf *g, const mvm_tokenizer *t, const char *key,
                         int32_t *id)
{
    if (mvm_gguf_find_key(g, key) < 0)
        return MVM_OK;
    uint32_t v;
    if (mvm_gguf_get_u32(g, key, &v) != MVM_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", mvm_last_error()); /* mvm_fail overwrites it */
        return mvm_fail(MVM_ERR_INVALID, "%s", msg);
    }
    if (v >= t->text.n)
        return mvm_fail(MVM_ERR_INVALID, "%s = %u is out of range (%u tokens)", key, v,
                        t->text.n);
    *id = (int32_t)v;
    return MVM_OK;
}

static mvm_status get_flag(const mvm_gguf *g, const char *key, int *flag)
{
    return mvm_gguf_find_key(g, key) < 0 ? MVM_OK : mvm_gguf_get_bool(g, key, flag);
}

/* Texts that llama.cpp treats as end of generation (and as CONTROL tokens) whatever the
 * file says: end of turn, end of text, gpt-oss's return and tool call, and the FIM
 * pad/repo/file-separator tokens. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<|return|>", "<|call|>", "<EOT>", "<|fim_pad|>", "<fim-pad>", "<PAD>", "<|fim_repo|>",
    "<|repo_name|>", "<fim-repo>", "<REPO>", "<|file_sep|>",
};

/* The FIM tokens: their keys (and the older names of the first three), then, where a key
 * is missing, the spellings llama.cpp's vocabulary loader looks for. */
static mvm_status load_fim(const mvm_gguf *g, mvm_tokenizer *t)
{
    static const struct {
        const char *key, *old;
        const char *texts[9];
    } fim[MVM_FIM_COUNT] = {
        [MVM_FIM_PRE] = {KEY("fim_pre_token_id"), KEY("prefix_token_id"),
                         {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                          "<｜fim▁begin｜>", "<PRE>",
                          "▁<PRE>", "<|code_prefix|>", "<|prefix|>"}},
        [MVM_FIM_SUF] = {KEY("fim_suf_token_id"), KEY("suffix_token_id"),
                         {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                          "<｜fim▁hole｜>", "<SUF>",
                          "▁<SUF>", "<|code_suffix|>", "<|suffix|>"}},
        [MVM_FIM_MID] = {KEY("fim_mid_token_id"), KEY("middle_token_id"),
                         {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                          "<｜fim▁end｜>", "<MID>",
                          "▁<MID>", "<|code_middle|>", "<|middle|>"}},
        [MVM_FIM_PAD] = {KEY("fim_pad_token_id"), NULL,
                         {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
        [MVM_FIM_REP] = {KEY("fim_rep_token_id"), NULL,
                         {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                          "<reponame>"}},
        [MVM_FIM_SEP] = {KEY("fim_sep_token_id"), NULL, {"<|file_sep|>"}},
    };
    mvm_status st = MVM_OK;
    for (int f = 0; f < MVM_FIM_COUNT && st == MVM_OK; f++) {
        t->fim[f] = -1;
        st = get_id(g, t, fim[f].key, &t->fim[f]);
        if (st == MVM_OK && t->fim[f] < 0 && fim[f].old)
            st = get_id(g, t, fim[f].old, &t->fim[f]);
        for (int i = 0; st == MVM_OK && t->fim[f] < 0 && i < 9 && fim[f].texts[i]; i++)
            if ((t->fim[f] = tok_strtab_find(&t->text, fim[f].texts[i],
                                             strlen(fim[f].texts[i]))) >= 0)
                t->type[t->fim[f]] = MVM_TOKEN_CONTROL;
    }
    return st;
}

static mvm_status load_special(const mvm_gguf *g, mvm_tokenizer *t)
{
    int spm = t->model == TOK_MODEL_SPM;
    int32_t n = (int32_t)t->text.n;
    /* llama.cpp's defaults, which only exist in a vocabulary large enough for them. */
    t->bos = spm ? 1 : 11;
    t->eos = spm ? 2 : 11;
    t->unk = spm ? 0 : -1;
    t->bos = t->bos < n ? t->bos : -1;
    t->eos = t->eos < n ? t->eos : -1;
    int32_t pad = -1, eot = -1, eom = -1; /* the padding id is only checked */
    t->add_bos = spm || t->add_bos; /* load_model's default for the pre-tokenizer */
    t->add_eos = 0;
    t->add_space_prefix = spm;
    mvm_status st = get_id(g, t, KEY("bos_token_id"), &t->bos);
    if (st == MVM_OK)
        st = get_id(g, t, KEY("eos_token_id"), &t->eos);
    if (st == MVM_OK)
        st = get_id(g, t, KEY("unknown_token_id"), &t->unk);
    if (st == MVM_OK)
        st = get_id(g, t, KEY("padding_token_id"), &pad);
    if (st == MVM_OK)
        st = get_id(g, t, KEY("eot_token_id"), &eot);
    if (st == MVM_OK)
        st = get_id(g, t, KEY("eom_token_id"), &eom);
    if (st == MVM_OK)
        st = get_flag(g, KEY("add_bos_token"), &t->add_bos);
    if (st == MVM_OK)
        st = get_flag(g, KEY("add_eos_token"), &t->add_eos);
    if (st == MVM_OK && spm)
        st = get_flag(g, KEY("add_space_prefix"), &t->add_space_prefix);
    if (st == MVM_OK)
        st = load_fim(g, t);
    if (st != MVM_OK)
        return st;
    if (t->add_bos && t->bos < 0)
        return mvm_fail(MVM_ERR_INVALID, "%s is set but there is no BOS token",
                        KEY("add_bos_token"));
    if (t->add_eos && t->eos < 0)
        return mvm_fail(MVM_ERR_INVALID, "%s is set but there is no EOS token",
                        KEY("add_eos_token"));
    for (size_t i = 0; i < sizeof eog_texts / sizeof *eog_texts; i++) {
        int32_t id = tok_strtab_find(&t->text, eog_texts[i], strlen(eog_texts[i]));
        if (id >= 0) {
            t->eog[id] = 1;
            t->type[id] = MVM_TOKEN_CONTROL;
        }
    }
    /* gpt-oss's harmony format ends each message with <|end|> and the reply with <|return|>
     * (or <|call|>): there <|end|> does not end the generation, as in llama.cpp. */
    int32_t end = tok_strtab_find(&t->text, "<|end|>", 7);
    if (end >= 0 && tok_strtab_find(&t->text, "<|return|>", 10) >= 0)
        t->eog[end] = 0;
    const int32_t ends[] = {t->eos, eot, eom};
    for (size_t i = 0; i < 3; i++)
        if (ends[i] >= 0)
            t->eog[ends[i]] = 1;
    return MVM_OK;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
         : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* SentencePiece byte tokens are spelled <0xHH>; tok_piece.c relies on it. */
static mvm_status check_byte_tokens(const mvm_tokenizer *t)
{
    for (uint32_t i = 0; i < t->text.n; i++) {
        if (t->type[i] != MVM_TOKEN_BYTE)
            continue;
        const char *s = tok_strtab_str(&t->text, i);
        char buf[200];
        if (t->text.len[i] != 6 || memcmp(s, "<0x", 3) != 0 || hex_digit(s[3]) < 0 ||
            hex_digit(s[4]) < 0 || s[5] != '>')
            return mvm_fail(MVM_ERR_INVALID, "%s: byte token %u is '%s', not <0xHH>",
                            KEY("tokens"), i, shown(s, t->text.len[i], buf));
    }
    return MVM_OK;
}

/* Each byte's fallback token, as llama.cpp's byte_to_token: SPM <0xHH>, else the byte as a
 * one-byte token, else (where llama.cpp throws) the unknown token, which SPM always has;
 * BPE: the byte's symbol in the byte-level alphabet, or -1. */
static void find_byte_tokens(mvm_tokenizer *t)
{
    for (unsigned b = 0; b < 256; b++) {
        char s[8];
        int32_t id;
        if (t->model == TOK_MODEL_BPE) {
            id = tok_strtab_find(&t->text, s, tok_byte_symbol((uint8_t)b, s));
        } else {
            snprintf(s, sizeof s, "<0x%02X>", b);
            id = tok_strtab_find(&t->text, s, 6);
            if (id < 0) {
                s[0] = (char)b;
                id = tok_strtab_find(&t->text, s, 1);
            }
            if (id < 0)
                id = t->unk;
        }
        t->byte_token[b] = id;
    }
}

/* One merge "left right": llama.cpp splits at the first space after the first byte. */
static mvm_status add_merge(mvm_tokenizer *t, uint32_t rank, mvm_gguf_str s, char *joined)
{
    char buf[200];
    const char *space = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
    if (!space)
        return mvm_fail(MVM_ERR_INVALID, "%s[%u] '%s' is not \"left right\"", KEY("merges"),
                        rank, shown(s.ptr, s.len, buf));
    size_t nl = (size_t)(space - s.ptr), nr = s.len - nl - 1;
    memcpy(joined, s.ptr, nl);
    memcpy(joined + nl, space + 1, nr);
    int32_t left = tok_strtab_find(&t->text, s.ptr, nl);
    int32_t right = tok_strtab_find(&t->text, space + 1, nr);
    int32_t result = tok_strtab_find(&t->text, joined, nl + nr);
    const char *missing = left < 0 ? "left side" : right < 0 ? "right side" : "result";
    if (left < 0 || right < 0 || result < 0)
        return mvm_fail(MVM_ERR_INVALID, "%s[%u] '%s': the %s is not a token", KEY("merges"),
                        rank, shown(s.ptr, s.len, buf), missing);
    t->merge_result[rank] = result;
    return tok_u64map_add(&t->merge_rank, tok_pair_key((uint32_t)left, (uint32_t)right), rank);
}

static mvm_status load_merges(const mvm_gguf *g, mvm_tokenizer *t)
{
    enum mvm_gguf_type type;
    uint64_t n;
    mvm_status st = mvm_gguf_get_arr(g, KEY("merges"), &type, &n);
    if (st != MVM_OK)
        return st;
    if (type != MVM_GGUF_STR)
        return mvm_fail(MVM_ERR_INVALID, "%s is an array of %s, expected str", KEY("merges"),
                        mvm_gguf_type_name(type));
    uint64_t key = (uint64_t)mvm_gguf_find_key(g, KEY("merges"));
    size_t longest = 0;
    for (uint64_t i = 0; i < n; i++) {
        mvm_gguf_str s;
        st = mvm_gguf_arr_str(g, key, i, &s);
        if (st != MVM_OK)
            return st;
        longest = s.len > longest ? (size_t)s.len : longest;
    }
    /* n <= MVM_GGUF_MAX_ARRAY: ranks fit 32 bits. */
    t->merge_result = malloc((size_t)n * sizeof *t->merge_result);
    char *joined = malloc(longest + 1);
    if ((n && !t->merge_result) || !joined)
        st = mvm_fail(MVM_ERR_NOMEM, "tokenizer: no memory for %llu merges",
                      (unsigned long long)n);
    for (uint64_t i = 0; st == MVM_OK && i < n; i++) {
        mvm_gguf_str s;
        st = mvm_gguf_arr_str(g, key, i, &s);
        if (st == MVM_OK)
            st = add_merge(t, (uint32_t)i, s, joined);
    }
    free(joined);
    return st;
}

mvm_status mvm_tokenizer_load(const mvm_gguf *g, mvm_tokenizer **out)
{
    *out = NULL;
    mvm_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return mvm_fail(MVM_ERR_NOMEM, "tokenizer: no memory");
    mvm_status st = load_model(g, t);
    if (st == MVM_OK)
        st = load_tokens(g, t);
    if (st == MVM_OK)
        st = load_scores_and_types(g, t);
    if (st == MVM_OK)
        st = load_special(g, t);
    if (st == MVM_OK && t->model == TOK_MODEL_SPM)
        st = check_byte_tokens(t);
    if (st == MVM_OK && t->model == TOK_MODEL_BPE)
        st = load_merges(g, t);
    if (st == MVM_OK)
        st = tok_special_index(t);
    if (st != MVM_OK) {
        mvm_tokenizer_free(t);
        return st;
    }
    find_byte_tokens(t);
    *out = t;
    return MVM_OK;
}

void mvm_tokenizer_free(mvm_tokenizer *t)
{
    if (!t)
        return;
    tok_strtab_free(&t->text);
    tok_u64map_free(&t->merge_rank);
    free(t->score);
    free(t->type);
    free(t->eog);
    free(t->merge_result);
    free(t->special);
    free(t);
}

uint32_t mvm_tokenizer_n_vocab(const mvm_tokenizer *t) { return t->text.n; }

const char *mvm_tokenizer_text(const mvm_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->text.n ? tok_strtab_str(&t->text, (uint32_t)id) : NULL;
}
int32_t mvm_tokenizer_bos(const mvm_tokenizer *t) { return t->bos; }
int32_t mvm_tokenizer_eos(const mvm_tokenizer *t) { return t->eos; }

int32_t mvm_tokenizer_fim(const mvm_tokenizer *t, enum mvm_fim which)
{
    return which >= 0 && which < MVM_FIM_COUNT ? t->fim[which] : -1;
}
int mvm_tokenizer_adds_bos(const mvm_tokenizer *t) { return t->add_bos && t->bos >= 0; }

int mvm_tokenizer_is_eog(const mvm_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->text.n && t->eog[id];
}

static mvm_status encode(const mvm_tokenizer *t, const char *text, size_t len, int add_special,
                         int parse_special, int32_t *out, size_t cap, size_t *n_out)
{
    tok_out o = {out, cap, 0};
    *n_out = 0;
    if (!text && len)
        return mvm_fail(MVM_ERR_INVALID, "tokenizer: NULL text of %zu bytes", len);
    /* Pieces are indexed by int32_t, and SentencePiece escaping triples spaces. */
    if (len > MVM_TOKENIZER_MAX_TEXT)
        return mvm_fail(MVM_ERR_RANGE, "tokenizer: text of %zu bytes is over the %d a call takes",
                        len, MVM_TOKENIZER_MAX_TEXT);
    if (add_special && t->add_bos)
        tok_emit(&o, t->bos);
    mvm_status st = MVM_OK;
    if (len && parse_special)
        st = tok_special_encode(t, text, len, &o);
    else if (len)
        st = t->model == TOK_MODEL_SPM ? tok_spm_encode(t, text, len, &o)
                                       : tok_bpe_encode(t, text, len, &o);
    if (st != MVM_OK)
        return st;
    if (add_special && t->add_eos)
        tok_emit(&o, t->eos);
    *n_out = o.n;
    if (o.n > cap)
        return mvm_fail(MVM_ERR_RANGE, "tokenizer: %zu tokens do not fit %zu", o.n, cap);
    return MVM_OK;
}

mvm_status mvm_tokenizer_encode(const mvm_tokenizer *t, const char *text, size_t len,
                                int add_special, int32_t *out, size_t cap, size_t *n_out)
{
    return encode(t, text, len, add_special, 0, out, cap, n_out);
}

mvm_status mvm_tokenizer_encode_special(const mvm_tokenizer *t, const char *text, size_t len,
                                        int add_special, int32_t *out, size_t cap,
                                        size_t *n_out)
{
    return encode(t, text, len, add_special, 1, out, cap, n_out);
}
