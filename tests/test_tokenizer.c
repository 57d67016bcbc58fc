/*
 * The tokenizers, the built-in vocabularies and the sampler.
 *
 *  - Pre-tokenizer splits (GPT-2 and Qwen2 regexes) on strings worked out by hand from the
 *    regexes: contractions, digits, space runs, newlines, punctuation, non-ASCII letters
 *    and numbers, combining marks, invalid UTF-8.
 *  - Known answers on small hand-built vocabularies written into a GGUF file: SentencePiece
 *    (score order, the leftmost-tie rule, byte and unknown fallback) and byte-level BPE
 *    (rank order, the leftmost tie, pre-token boundaries, GPT-2's byte alphabet).
 *  - Malformed vocabularies, each failing with the right status and a message naming the
 *    key or value.
 *  - The built vocabularies of every style: exactly n_vocab unique tokens, loadable, the
 *    corpus compressed (the ratio is printed), decode(encode(x)) == x on random bytes,
 *    the same vocabulary on every build, special tokens where the styles put them.
 *  - The sampler: parameter checks, greedy and its ties, seeds, top-k/top-p/min-p,
 *    frequencies against softmax (chi-square), top-k/top-p cutting through equal logits,
 *    the repetition penalty against a direct computation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "engine/forward/sampler.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_write.h"
#include "engine/synth/vocab_build.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_impl.h"
#include "vmm/error.h"

static char dir[64];
static char path[128];

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint32_t next_rand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- pre-tokenizers ---------------------------------------------------------------- */

/* The pieces of s joined by '|'. */
static const char *split(enum tok_pre pre, const char *s)
{
    static char out[512];
    size_t n = strlen(s), o = 0;
    tok_pieces p = {0};
    if (tok_pretok_split(pre, (const uint8_t *)s, n, &p) != MVM_OK)
        return "(failed)";
    for (size_t i = 0, pos = 0; i < p.n; pos = p.end[i++]) {
        if (p.end[i] <= pos || p.end[i] > n || (i + 1 == p.n && p.end[i] != n)) {
            tok_pieces_free(&p);
            return "(bad cut)";
        }
        if (pos)
            out[o++] = '|';
        memcpy(out + o, s + pos, p.end[i] - pos);
        o += p.end[i] - pos;
    }
    tok_pieces_free(&p);
    out[o] = 0;
    return out;
}

#define CHECK_SPLIT(pre, s, want)                                                               \
    do {                                                                                        \
        const char *got_ = split(pre, s);                                                       \
        CHECK(strcmp(got_, want) == 0);                                                         \
        if (strcmp(got_, want) != 0)                                                            \
            fprintf(stderr, "  split of \"%s\": got \"%s\", want \"%s\"\n", s, got_, want);     \
    } while (0)

static void test_pretok_gpt2(void)
{
    const enum tok_pre p = TOK_PRE_GPT2;
    CHECK_SPLIT(p, "Hello  world's 1234!\n\n\xC3\x89t\xC3\xA9",
                "Hello| | world|'s| 1234|!|\n|\n|\xC3\x89t\xC3\xA9");
    /* Contractions are case-sensitive; "'" alone is punctuation. */
    CHECK_SPLIT(p, "I'M here, they'll go it'", "I|'|M| here|,| they|'ll| go| it|'");
    CHECK_SPLIT(p, "we've we'd I'm you're", "we|'ve| we|'d| I|'m| you|'re");
    /* Space runs: the last space goes to the next word; trailing runs stay whole. */
    CHECK_SPLIT(p, "a   b  ", "a|  | b|  ");
    CHECK_SPLIT(p, "x\ty(z) (z)", "x|\t|y|(|z|)| (|z|)");
    CHECK_SPLIT(p, "a ... b", "a| ...| b");
    CHECK_SPLIT(p, "x!!\n\ny", "x|!!|\n|\n|y");
    CHECK_SPLIT(p, "a\r\n b", "a|\r\n| b");
    /* Digits group; ½ (No) and Arabic-Indic ٣ (Nd) are numbers, ï é letters. */
    CHECK_SPLIT(p, "na\xC3\xAFve caf\xC3\xA9 3\xC2\xBD \xD9\xA3",
                "na\xC3\xAFve| caf\xC3\xA9| 3\xC2\xBD| \xD9\xA3");
    /* A combining mark (Mn) is neither letter nor number. */
    CHECK_SPLIT(p, "cafe\xCC\x81s", "cafe|\xCC\x81|s");
    /* NO-BREAK SPACE is whitespace; " ?" is only U+0020. */
    CHECK_SPLIT(p, "a\xC2\xA0" "b", "a|\xC2\xA0|b");
    /* Invalid bytes are "other" code points of one byte each. */
    CHECK_SPLIT(p, "a\xFF" "b", "a|\xFF|b");
    CHECK_SPLIT(p, "\xC3(x \xE2\x82", "\xC3(|x| \xE2\x82");
}

static void test_pretok_qwen2(void)
{
    const enum tok_pre p = TOK_PRE_QWEN2;
    CHECK_SPLIT(p, "Hello  world's 1234!\n\n\xC3\x89t\xC3\xA9",
                "Hello| | world|'s| |1|2|3|4|!\n\n|\xC3\x89t\xC3\xA9");
    /* Contractions fold case; a non-letter may lead a word. */
    CHECK_SPLIT(p, "I'M here, they'LL go it'", "I|'M| here|,| they|'LL| go| it|'");
    CHECK_SPLIT(p, "a   b  ", "a|  | b|  ");
    CHECK_SPLIT(p, "x\ty(z) (z)", "x|\ty|(z|)| (|z|)");
    CHECK_SPLIT(p, "a ... b", "a| ...| b");
    CHECK_SPLIT(p, "x!!\n\ny", "x|!!\n\n|y");
    CHECK_SPLIT(p, "a\r\n b", "a|\r\n| b");
    CHECK_SPLIT(p, "  \nfoo", "  \n|foo");
    CHECK_SPLIT(p, "na\xC3\xAFve caf\xC3\xA9 3\xC2\xBD \xD9\xA3",
                "na\xC3\xAFve| caf\xC3\xA9| |3|\xC2\xBD| |\xD9\xA3");
    CHECK_SPLIT(p, "cafe\xCC\x81s", "cafe|\xCC\x81s");
    CHECK_SPLIT(p, "a\xC2\xA0" "b", "a|\xC2\xA0" "b");
    CHECK_SPLIT(p, "a\xFF" "b", "a|\xFF" "b");
}

/* The chained pre-tokenizers: each regex cuts the pieces the earlier ones left. The
 * answers are what Python's re gives for the regexes (tests/ref/check_pretok.py checks
 * thousands more that way); the comments say why they look as they do. */
static void test_pretok_chained(void)
{
    /* llama.cpp's default: punctuation runs first ('`' is not among them), then GPT-2's
     * regex, then digits cut in threes. */
    CHECK_SPLIT(TOK_PRE_DEFAULT, "Hello, world!! 1234567 x+y=z `a` ~~",
                "Hello|,| world|!!| |123|456|7| x|+|y|=|z| `|a|`| |~~");
    CHECK_SPLIT(TOK_PRE_DEFAULT, "3.14159 \xC2\xBD\xD9\xA3\xD9\xA4 ok...",
                "3|.|141|59| |\xC2\xBD\xD9\xA3\xD9\xA4| ok|...");
    /* Llama 3: Qwen2's regex with digits in threes. */
    CHECK_SPLIT(TOK_PRE_LLAMA3, "Hello  world's 1234567!\n\nIT'S",
                "Hello| | world|'s| |123|456|7|!\n\n|IT|'S");
    CHECK_SPLIT(TOK_PRE_LLAMA3, "x\ty 12345 a1b", "x|\ty| |123|45| a|1|b");
    /* DeepSeek-LLM: newlines alone; its letters take any one space before them (NO-BREAK
     * SPACE too), but not Armenian small letters; digits stay together. */
    CHECK_SPLIT(TOK_PRE_DEEPSEEK_LLM,
                "Hello, world! 1234567\n\n  \xC2\xA0x\xD5\xA1\xD4\xB1 abc123",
                "Hello|,| world|!| |1234567|\n|\n|  |\xC2\xA0x|\xD5\xA1|\xD4\xB1| abc|123");
    /* Its punctuation class holds the ASCII letters, and its CJK one everything from
     * U+0800, IDEOGRAPHIC SPACE and Devanagari included. */
    CHECK_SPLIT(TOK_PRE_DEEPSEEK_LLM,
                "\xE4\xB8\xAD\xE6\x96\x87 ab\xEF\xBC\x81\xE3\x80\x82  \xE0\xA4\x95\xE0\xA4\xBF  ",
                "\xE4\xB8\xAD\xE6\x96\x87| ab|\xEF\xBC\x81|\xE3\x80\x82|  |"
                "\xE0\xA4\x95\xE0\xA4\xBF|  ");
    CHECK_SPLIT(TOK_PRE_DEEPSEEK_LLM, "don't  stop\xE2\x80\x99s", "don|'|t| | stop|\xE2\x80\x99|s");
    CHECK_SPLIT(TOK_PRE_DEEPSEEK_LLM, "a \xE3\x80\x80" "b", "a| |\xE3\x80\x80|b");
    /* DeepSeek-Coder: letters and punctuation runs, digits one by one. */
    CHECK_SPLIT(TOK_PRE_DEEPSEEK_CODER, "def f(x):\n    return x**2  # 12",
                "def| f|(|x|):|\n|   | return| x|**|2| | #| |1|2");
    CHECK_SPLIT(TOK_PRE_DEEPSEEK_CODER, "\xE4\xB8\xAD\xE6\x96\x87" "abc, 42",
                "\xE4\xB8\xAD\xE6\x96\x87|abc|,| |4|2");
    /* DeepSeek-V3: digits in threes, CJK and kana runs apart, then one punctuation mark
     * joins the ASCII word after it, marks join letters, symbols join punctuation. */
    CHECK_SPLIT(TOK_PRE_DEEPSEEK3, "Hello, world! 1234567\n\nx",
                "Hello|,| world|!| |123|456|7|\n\n|x");
    CHECK_SPLIT(TOK_PRE_DEEPSEEK3, "(hello) ((x ~~ \xE2\x80\x9Cquoted\xE2\x80\x9D",
                "(hello|)| ((|x| ~~| \xE2\x80\x9C|quoted|\xE2\x80\x9D");
    CHECK_SPLIT(TOK_PRE_DEEPSEEK3,
                "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xA7\xE3\x81\x99\xE3\x80\x82"
                "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 cafe\xCC\x81s",
                "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xA7\xE3\x81\x99|\xE3\x80\x82|"
                "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4| cafe\xCC\x81s");
    CHECK_SPLIT(TOK_PRE_DEEPSEEK3, "don't\tstop\r\n  end  ", "don|'t|\tstop|\r\n| | end|  ");
    /* An invalid byte is a symbol, as llama.cpp's U+FFFD in its place is. */
    CHECK_SPLIT(TOK_PRE_DEEPSEEK3, "a\xFF" "b \xFF\xFE\nc", "a|\xFF|b| \xFF\xFE\n|c");
    CHECK_SPLIT(TOK_PRE_DEEPSEEK_LLM, "", "");
    /* Kimi K2: Han runs apart (kana are not Han), words cut before a capital that starts
     * a lower-case run, capitals alone or before their word stay whole, digits in threes. */
    CHECK_SPLIT(TOK_PRE_KIMI_K2, "getUserName HTTPServer iPhone ABC 12345",
                "get|User|Name| HTTPServer| i|Phone| ABC| |123|45");
    CHECK_SPLIT(TOK_PRE_KIMI_K2,
                "\xE4\xB8\xAD\xE6\x96\x87" "abc\xE6\x97\xA5\xE6\x9C\xAC\xE3\x83\x86\xE3\x82\xAD",
                "\xE4\xB8\xAD\xE6\x96\x87|abc|\xE6\x97\xA5\xE6\x9C\xAC|"
                "\xE3\x83\x86\xE3\x82\xAD");
    /* Contractions ride on the word and fold as Unicode does: long s is an 's'. Titlecase
     * (U+01C5) is a capital; a lone capital followed by punctuation is a word of its own. */
    CHECK_SPLIT(TOK_PRE_KIMI_K2, "don't DON'T it'\xC5\xBFs \xC7\x85ungla X.",
                "don't| DON'T| it'\xC5\xBF|s| \xC7\x85ungla| X|.");
    /* A mark is in both letter classes, so it can end a run of capitals ("ABC" + U+0301 is
     * one word by backtracking into it); a Han iteration mark (U+3005) is Han, and the
     * ideographic number zero (U+3007) joins Han, not digits. No space leads a Han run. */
    CHECK_SPLIT(TOK_PRE_KIMI_K2, "ABC\xCC\x81" "DE \xE4\xBA\xBA\xE3\x80\x85\xE3\x80\x87" "1",
                "ABC\xCC\x81|DE| |\xE4\xBA\xBA\xE3\x80\x85\xE3\x80\x87|1");
    CHECK_SPLIT(TOK_PRE_KIMI_K2, "x  \n\n y\t\tz ", "x|  \n\n| y|\t|\tz| ");
    /* o200k: Kimi K2's words with Han as letters (Lo: in both classes, so a Han run takes
     * the capital after it), and signs take the slashes and newlines after them. */
    CHECK_SPLIT(TOK_PRE_O200K, "getUserName \xE4\xB8\xAD\xE6\x96\x87" "Ab 12345",
                "get|User|Name| \xE4\xB8\xAD\xE6\x96\x87" "Ab| |123|45");
    CHECK_SPLIT(TOK_PRE_O200K, "a */\n/b x//y", "a| */\n/|b| x|//|y");
    CHECK_SPLIT(TOK_PRE_KIMI_K2, "a */\n/b", "a| */\n|/b");
}

static void test_byte_alphabet(void)
{
    /* GPT-2's bytes_to_unicode, at the points everyone knows. */
    static const struct { uint8_t b; const char *sym; } known[] = {
        {' ', "\xC4\xA0"}, {'\n', "\xC4\x8A"}, {'\t', "\xC4\x89"}, {0x00, "\xC4\x80"},
        {0x7F, "\xC4\xA1"}, {0xA0, "\xC5\x82"}, {0xAD, "\xC5\x83"}, {'a', "a"},
        {'!', "!"}, {0xA1, "\xC2\xA1"}, {0xFF, "\xC3\xBF"},
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        char s[2];
        size_t n = tok_byte_symbol(known[i].b, s);
        CHECK(n == strlen(known[i].sym) && memcmp(s, known[i].sym, n) == 0);
    }
    int seen[256] = {0};
    for (unsigned b = 0; b < 256; b++) {
        char s[2];
        size_t n = tok_byte_symbol((uint8_t)b, s);
        uint32_t cp;
        CHECK(tok_utf8_decode((const uint8_t *)s, n, &cp) == n);
        CHECK(tok_symbol_byte(cp) == (int)b);
        seen[b]++;
    }
    for (unsigned b = 0; b < 256; b++)
        CHECK(seen[b] == 1);
    CHECK(tok_symbol_byte(0x20) == -1 && tok_symbol_byte(0x144) == -1);
}

/* ---- hand-built vocabularies -------------------------------------------------------- */

/* Writes w (and frees it), then loads a tokenizer from the file. */
static mvm_status load_from(mvm_gguf_writer *w, mvm_tokenizer **t)
{
    *t = NULL;
    CHECK_ST(mvm_gguf_writer_write(w, path), MVM_OK);
    mvm_gguf_writer_free(w);
    mvm_gguf *g;
    mvm_status st = mvm_gguf_open(path, &g);
    CHECK(st == MVM_OK);
    if (st != MVM_OK)
        return st;
    st = mvm_tokenizer_load(g, t);
    mvm_gguf_close(g);
    unlink(path);
    return st;
}

enum { SPM_N = 267 };
static const char *spm_tokens[SPM_N];
static float spm_scores[SPM_N];
static int32_t spm_types[SPM_N];

/* <unk> <s> </s> <0x00>..<0xFF>, then "▁" a b c ab bc "▁a" ca. "ab" and "bc" tie. */
static mvm_gguf_writer *spm_writer(int with_bytes)
{
    static char bytes[256][8];
    static const char *const pieces[] = {"\xE2\x96\x81", "a", "b", "c", "ab", "bc",
                                         ("\xE2\x96\x81" "a"), "ca"};
    static const float piece_scores[] = {-1, -1, -1, -1, -2, -2, -3, -1.5f};
    uint32_t n = 0;
    memset(spm_scores, 0, sizeof spm_scores);
    spm_tokens[n] = "<unk>", spm_types[n++] = MVM_TOKEN_UNKNOWN;
    spm_tokens[n] = "<s>", spm_types[n++] = MVM_TOKEN_CONTROL;
    spm_tokens[n] = "</s>", spm_types[n++] = MVM_TOKEN_CONTROL;
    for (unsigned b = 0; with_bytes && b < 256; b++) {
        snprintf(bytes[b], 8, "<0x%02X>", b);
        spm_tokens[n] = bytes[b], spm_types[n++] = MVM_TOKEN_BYTE;
    }
    for (int i = 0; i < 8; i++) {
        spm_tokens[n] = pieces[i];
        spm_scores[n] = piece_scores[i];
        spm_types[n++] = MVM_TOKEN_NORMAL;
    }
    mvm_gguf_writer *w;
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", spm_tokens, n), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", spm_scores, n), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", spm_types, n), MVM_OK);
    return w;
}

/* Encodes s (no BOS) and compares with want[0..n). */
static int encodes_to(const mvm_tokenizer *t, const char *s, int add_special, const int32_t *want,
                      size_t n)
{
    int32_t out[64];
    size_t got;
    if (mvm_tokenizer_encode(t, s, strlen(s), add_special, out, 64, &got) != MVM_OK)
        return 0;
    int ok = got == n && memcmp(out, want, n * sizeof *out) == 0;
    if (!ok) {
        fprintf(stderr, "  \"%s\" ->", s);
        for (size_t i = 0; i < got; i++)
            fprintf(stderr, " %d", out[i]);
        fprintf(stderr, " (want");
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", want[i]);
        fprintf(stderr, ")\n");
    }
    return ok;
}

#define ENCODES(t, s, special, ...)                                                             \
    do {                                                                                        \
        const int32_t want_[] = {__VA_ARGS__};                                                  \
        CHECK(encodes_to(t, s, special, want_, sizeof want_ / sizeof *want_));                  \
    } while (0)

/* The concatenated pieces of ids[0..n) in out (NUL-terminated); returns the length. */
static size_t decode(const mvm_tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = mvm_tokenizer_piece(t, ids[i], NULL, 0);
        if (len + k >= cap)
            return SIZE_MAX;
        CHECK(mvm_tokenizer_piece(t, ids[i], out + len, k) == k);
        len += k;
    }
    out[len] = 0;
    return len;
}

static void test_spm_known(void)
{
    mvm_tokenizer *t;
    CHECK_ST(load_from(spm_writer(1), &t), MVM_OK);
    if (!t)
        return;
    enum { SP = 259, A, B, C, AB, BC, SP_A, CA };
    CHECK(mvm_tokenizer_n_vocab(t) == SPM_N);
    CHECK(mvm_tokenizer_bos(t) == 1 && mvm_tokenizer_eos(t) == 2);
    /* "▁abc": ab and bc score -2, above "▁a": the leftmost of the tie wins, then nothing
     * forms "▁ab" or "abc". Taking bc would give "▁a" + "bc". */
    ENCODES(t, "abc", 0, SP, AB, C);
    /* "▁bca": ca (-1.5) beats bc (-2) although bc is further left. */
    ENCODES(t, "bca", 0, SP, B, CA);
    /* é is no piece: its bytes C3 A9 fall back to <0xC3> <0xA9>. */
    ENCODES(t, "a\xC3\xA9", 0, SP_A, 3 + 0xC3, 3 + 0xA9);
    /* Spaces are "▁" too; BOS comes with add_special (add_bos_token defaults to true). */
    ENCODES(t, " a", 0, SP, SP_A);
    ENCODES(t, "a", 1, 1, SP_A);
    ENCODES(t, "", 1, 1);
    size_t n = 99;
    CHECK_ST(mvm_tokenizer_encode(t, "", 0, 0, NULL, 0, &n), MVM_OK);
    CHECK(n == 0);
    /* Decoding: "▁" is a space, byte tokens are their byte, control tokens nothing. */
    int32_t ids[8];
    CHECK_ST(mvm_tokenizer_encode(t, "ca b\xC3\xA9", 4 + 2, 1, ids, 8, &n), MVM_OK);
    char text[64];
    CHECK(decode(t, ids, n, text, sizeof text) == 7 && strcmp(text, " ca b\xC3\xA9") == 0);
    char buf[4] = "xyz";
    CHECK(mvm_tokenizer_piece(t, SP_A, buf, 1) == 2 && buf[0] == ' ' && buf[1] == 'y');
    CHECK(mvm_tokenizer_piece(t, 0, buf, 4) == 0 && mvm_tokenizer_piece(t, 1, buf, 4) == 0);
    CHECK(mvm_tokenizer_piece(t, -1, buf, 4) == 0 && mvm_tokenizer_piece(t, SPM_N, buf, 4) == 0);
    /* Too small an output: MVM_ERR_RANGE, the needed count, the first tokens written. */
    CHECK_ST(mvm_tokenizer_encode(t, "bca", 3, 1, ids, 2, &n), MVM_ERR_RANGE);
    CHECK(n == 4 && ids[0] == 1 && ids[1] == SP);
    CHECK(mvm_tokenizer_is_eog(t, 2) && !mvm_tokenizer_is_eog(t, 1) &&
          !mvm_tokenizer_is_eog(t, -1) && !mvm_tokenizer_is_eog(t, SPM_N));
    mvm_tokenizer_free(t);

    /* Without byte tokens, bytes fall back to the unknown token. */
    CHECK_ST(load_from(spm_writer(0), &t), MVM_OK);
    if (t) {
        ENCODES(t, "a\xC3\xA9", 0, SP_A - 256, 0, 0);
        mvm_tokenizer_free(t);
    }
    /* ... the one tokenizer.ggml.unknown_token_id names. */
    mvm_gguf_writer *w = spm_writer(0);
    CHECK_ST(mvm_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 1), MVM_OK);
    CHECK_ST(load_from(w, &t), MVM_OK);
    if (t) {
        ENCODES(t, "\xC3", 0, SP - 256, 1);
        mvm_tokenizer_free(t);
    }
}

enum { BPE_N = 270 };
static const char *bpe_tokens[BPE_N];
static int32_t bpe_types[BPE_N];
static const char *const bpe_merges[] = {"h e", "l l", "he ll", "\xC4\xA0 w", "o r",
                                         "\xC4\xA0w or", "l d", "hell o", "e l",
                                         "o \xC4\xA0", "1 2"};

/* The 256 byte symbols (token id = byte), then the merge results in rank order, then
 * <|endoftext|> (EOS) and <|im_end|> typed NORMAL (which loading makes CONTROL), then "hel",
 * which no merge makes. `pre` NULL: no tokenizer.ggml.pre. */
static mvm_gguf_writer *bpe_writer(const char *pre)
{
    static char sym[256][3];
    static const char *const merged[] = {"he", "ll", "hell", "\xC4\xA0w", "or",
                                         "\xC4\xA0wor", "ld", "hello", "el", "o\xC4\xA0",
                                         "12", "<|endoftext|>", "<|im_end|>", "hel"};
    for (unsigned b = 0; b < 256; b++) {
        sym[b][tok_byte_symbol((uint8_t)b, sym[b])] = 0;
        bpe_tokens[b] = sym[b];
        bpe_types[b] = MVM_TOKEN_NORMAL;
    }
    for (int i = 0; i < BPE_N - 256; i++) {
        bpe_tokens[256 + i] = merged[i];
        bpe_types[256 + i] = i == 11 ? MVM_TOKEN_CONTROL : MVM_TOKEN_NORMAL;
    }
    mvm_gguf_writer *w;
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"), MVM_OK);
    if (pre)
        CHECK_ST(mvm_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", bpe_tokens, BPE_N), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", bpe_types, BPE_N),
             MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", bpe_merges, 11), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 267), MVM_OK);
    return w;
}

static void test_bpe_known(void)
{
    enum { HE = 256, LL, HELL, G_W, OR, G_WOR, LD, HELLO, EL, O_G, N12, EOT, IM_END, HEL };
    mvm_tokenizer *t;
    mvm_gguf_writer *w;
    CHECK_ST(load_from(bpe_writer("gpt-2"), &t), MVM_OK);
    if (!t)
        return;
    /* "hello": h e (rank 0) before e l (8), then l l, he ll, hell o. " world": Ġ w, o r,
     * Ġw or, l d. "o Ġ" (rank 9) never applies: o and Ġ are in different pre-tokens. */
    ENCODES(t, "hello world", 0, HELLO, G_WOR, LD);
    /* Equal ranks: the leftmost pair. */
    ENCODES(t, "lll", 0, LL, 'l');
    ENCODES(t, "hel", 0, HE, 'l');
    /* GPT-2 keeps " 12" together, so "1 2" applies after the space. */
    ENCODES(t, " 12", 0, ' ', N12);
    ENCODES(t, "a\n", 0, 'a', '\n');
    /* No BOS by default for "gpt2"; EOS only with add_eos_token. */
    ENCODES(t, "he", 1, HE);
    char text[64];
    int32_t ids[16];
    size_t n;
    CHECK_ST(mvm_tokenizer_encode(t, "hello world\n\xFF\xC3", 14, 0, ids, 16, &n), MVM_OK);
    CHECK(decode(t, ids, n, text, sizeof text) == 14 &&
          memcmp(text, "hello world\n\xFF\xC3", 14) == 0);
    char buf[8];
    CHECK(mvm_tokenizer_piece(t, G_WOR, buf, 8) == 4 && memcmp(buf, " wor", 4) == 0);
    CHECK(strcmp(mvm_tokenizer_text(t, G_WOR), "\xC4\xA0wor") == 0);
    CHECK(strcmp(mvm_tokenizer_text(t, EOT), "<|endoftext|>") == 0);
    CHECK(mvm_tokenizer_text(t, BPE_N) == NULL && mvm_tokenizer_text(t, -1) == NULL);
    CHECK(mvm_tokenizer_piece(t, 0xAD, buf, 8) == 1 && (uint8_t)buf[0] == 0xAD);
    /* <|im_end|> ends generation and, like every end token, decodes to nothing. */
    CHECK(mvm_tokenizer_is_eog(t, EOT) && mvm_tokenizer_is_eog(t, IM_END));
    CHECK(!mvm_tokenizer_is_eog(t, HELLO));
    CHECK(mvm_tokenizer_piece(t, IM_END, buf, 8) == 0 && mvm_tokenizer_piece(t, EOT, buf, 8) == 0);
    CHECK(mvm_tokenizer_bos(t) == 11 && mvm_tokenizer_eos(t) == EOT); /* llama.cpp's default */
    mvm_tokenizer_free(t);

    /* llama.cpp's "default", also what a file without the key gets, cuts digits in threes
     * after GPT-2's regex: "1212" is "121" and "2". */
    const char *const defaults[] = {"default", NULL};
    for (int i = 0; i < 2; i++) {
        CHECK_ST(load_from(bpe_writer(defaults[i]), &t), MVM_OK);
        if (t) {
            ENCODES(t, "1212", 0, N12, '1', '2');
            mvm_tokenizer_free(t);
        }
    }
    CHECK_ST(load_from(bpe_writer("gpt-2"), &t), MVM_OK);
    if (t) {
        ENCODES(t, "1212", 0, N12, N12);
        ENCODES(t, "hel", 0, HE, 'l');
        mvm_tokenizer_free(t);
    }
    /* Llama 3's vocabularies ignore merges: a pre-token that is a token is that token. They
     * also add BOS unless the file says otherwise (llama.cpp's default id 11 here). "dbrx"
     * has the same regex without either. */
    CHECK_ST(load_from(bpe_writer("llama-bpe"), &t), MVM_OK);
    if (t) {
        ENCODES(t, "hel hello", 0, HEL, ' ', HELLO);
        ENCODES(t, "hel", 1, 11, HEL);
        mvm_tokenizer_free(t);
    }
    w = bpe_writer("llama3");
    CHECK_ST(mvm_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 0), MVM_OK);
    CHECK_ST(load_from(w, &t), MVM_OK);
    if (t) {
        ENCODES(t, "hel", 1, HEL);
        mvm_tokenizer_free(t);
    }
    /* GLM-4.5's "glm4" (and "chatglm-bpe") is dbrx's kind: Llama 3's regex, merges applied,
     * no BOS. */
    static const char *const merging_llama3[] = {"dbrx", "glm4", "chatglm-bpe"};
    for (size_t i = 0; i < 3; i++) {
        CHECK_ST(load_from(bpe_writer(merging_llama3[i]), &t), MVM_OK);
        if (t) {
            ENCODES(t, "hel", 1, HE, 'l');
            mvm_tokenizer_free(t);
        }
    }
    /* gpt-oss's, Llama 4's and MiniMax-M2's o200k regex: merges applied, no BOS. */
    static const char *const o200k[] = {"gpt-4o", "llama4", "minimax-m2"};
    for (size_t i = 0; i < 3; i++) {
        CHECK_ST(load_from(bpe_writer(o200k[i]), &t), MVM_OK);
        if (t) {
            CHECK(t->pre == TOK_PRE_O200K);
            ENCODES(t, "hel", 1, HE, 'l');
            mvm_tokenizer_free(t);
        }
    }
    /* Kimi K2 ignores merges too (tiktoken's shortcut), but adds no BOS by default. */
    CHECK_ST(load_from(bpe_writer("kimi-k2"), &t), MVM_OK);
    if (t) {
        ENCODES(t, "hel hello", 1, HEL, ' ', HELLO);
        mvm_tokenizer_free(t);
    }

    /* Qwen2 splits digits, so "1 2" never applies. */
    CHECK_ST(load_from(bpe_writer("qwen2"), &t), MVM_OK);
    if (t) {
        ENCODES(t, " 12", 0, ' ', '1', '2');
        ENCODES(t, "hello world", 0, HELLO, G_WOR, LD);
        mvm_tokenizer_free(t);
    }
    w = bpe_writer("olmo");
    CHECK_ST(mvm_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 1), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", HE), MVM_OK);
    CHECK_ST(load_from(w, &t), MVM_OK);
    if (t) {
        ENCODES(t, "ll", 1, HE, LL, EOT);
        ENCODES(t, "ll", 0, LL);
        mvm_tokenizer_free(t);
    }
}

/* ---- malformed vocabularies --------------------------------------------------------- */

static void expect_bad(mvm_gguf_writer *w, mvm_status want, const char *in_message)
{
    mvm_tokenizer *t;
    mvm_status st = load_from(w, &t);
    CHECK(st == want && t == NULL);
    CHECK(strstr(mvm_last_error(), in_message) != NULL);
    if (st != want || !strstr(mvm_last_error(), in_message))
        fprintf(stderr, "  got %s \"%s\", want %s with \"%s\"\n", mvm_status_name(st),
                mvm_last_error(), mvm_status_name(want), in_message);
    mvm_tokenizer_free(t);
}

static void test_malformed(void)
{
    const mvm_status INV = MVM_ERR_INVALID, UNS = MVM_ERR_UNSUPPORTED;
    mvm_gguf_writer *w;
    static const int32_t ints[3] = {1, 2, 3};

    /* Model and pre-tokenizer. */
    w = spm_writer(1);
    CHECK_ST(mvm_gguf_writer_set_str(w, "tokenizer.ggml.model", "bert"), MVM_OK);
    expect_bad(w, UNS, "tokenizer model 'bert' is not supported");
    w = bpe_writer("falcon");
    expect_bad(w, UNS, "tokenizer.ggml.pre 'falcon' is not supported");
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", spm_tokens, 3), MVM_OK);
    expect_bad(w, INV, "tokenizer.ggml.model");

    /* Tokens. */
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"), MVM_OK);
    expect_bad(w, INV, "'tokenizer.ggml.tokens'");
    w = spm_writer(1);
    CHECK_ST(mvm_gguf_writer_set_arr_i32(w, "tokenizer.ggml.tokens", ints, 3), MVM_OK);
    expect_bad(w, INV, "tokenizer.ggml.tokens is an array of i32");
    w = spm_writer(1);
    CHECK_ST(mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", NULL, 0), MVM_OK);
    expect_bad(w, INV, "tokenizer.ggml.tokens has 0 tokens");
    w = spm_writer(1);
    spm_tokens[200] = "ab";
    CHECK_ST(mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", spm_tokens, SPM_N), MVM_OK);
    expect_bad(w, INV, "token 263 'ab' repeats token 200");

    /* Scores and types. */
    w = spm_writer(1);
    CHECK_ST(mvm_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", spm_scores, SPM_N - 1),
             MVM_OK);
    expect_bad(w, INV, "tokenizer.ggml.scores has 266 elements for 267 tokens");
    w = spm_writer(1);
    CHECK_ST(mvm_gguf_writer_set_arr_i32(w, "tokenizer.ggml.scores", spm_types, SPM_N), MVM_OK);
    expect_bad(w, INV, "tokenizer.ggml.scores is an array of i32, expected f32");
    w = spm_writer(1);
    spm_scores[100] = NAN;
    CHECK_ST(mvm_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", spm_scores, SPM_N), MVM_OK);
    expect_bad(w, INV, "tokenizer.ggml.scores[100] is NaN");
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", spm_tokens, SPM_N), MVM_OK);
    expect_bad(w, INV, "'tokenizer.ggml.scores'");
    w = spm_writer(1);
    CHECK_ST(mvm_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", spm_types, 5), MVM_OK);
    expect_bad(w, INV, "tokenizer.ggml.token_type has 5 elements");
    w = spm_writer(1);
    spm_types[7] = 9;
    CHECK_ST(mvm_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", spm_types, SPM_N),
             MVM_OK);
    expect_bad(w, INV, "tokenizer.ggml.token_type[7] = 9");
    w = spm_writer(1);
    spm_tokens[3 + 0x41] = "<0xG1>";
    CHECK_ST(mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", spm_tokens, SPM_N), MVM_OK);
    expect_bad(w, INV, "byte token 68 is '<0xG1>'");

    /* Special token ids and flags. */
    w = spm_writer(1);
    CHECK_ST(mvm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", SPM_N), MVM_OK);
    expect_bad(w, INV, "tokenizer.ggml.bos_token_id = 267 is out of range");
    w = spm_writer(1);
    CHECK_ST(mvm_gguf_writer_set_i32(w, "tokenizer.ggml.eos_token_id", -1), MVM_OK);
    expect_bad(w, INV, "tokenizer.ggml.eos_token_id");
    w = spm_writer(1);
    CHECK_ST(mvm_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 1u << 20), MVM_OK);
    expect_bad(w, INV, "tokenizer.ggml.padding_token_id");
    w = spm_writer(1);
    CHECK_ST(mvm_gguf_writer_set_str(w, "tokenizer.ggml.unknown_token_id", "0"), MVM_OK);
    expect_bad(w, INV, "tokenizer.ggml.unknown_token_id");
    w = spm_writer(1);
    CHECK_ST(mvm_gguf_writer_set_u32(w, "tokenizer.ggml.add_bos_token", 1), MVM_OK);
    expect_bad(w, INV, "tokenizer.ggml.add_bos_token");
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK); /* 3 tokens: no room for the default BOS 11 */
    CHECK_ST(mvm_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", bpe_tokens, 3), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", NULL, 0), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1), MVM_OK);
    expect_bad(w, INV, "add_bos_token is set but there is no BOS token");

    /* Merges. */
    static const char *bad_merges[][1] = {{"hello"}, {"h"}, {"h q\xC4\xA0"}, {"ll o"}};
    static const char *const why[] = {"'hello' is not \"left right\"", "'h' is not",
                                      "the right side is not a token",
                                      "'ll o': the result is not a token"};
    for (int i = 0; i < 4; i++) {
        w = bpe_writer("gpt-2");
        CHECK_ST(mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", bad_merges[i], 1),
                 MVM_OK);
        expect_bad(w, INV, why[i]);
    }
    w = bpe_writer("qwen2");
    CHECK_ST(mvm_gguf_writer_set_arr_i32(w, "tokenizer.ggml.merges", ints, 3), MVM_OK);
    expect_bad(w, INV, "tokenizer.ggml.merges is an array of i32");
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", bpe_tokens, BPE_N), MVM_OK);
    expect_bad(w, INV, "'tokenizer.ggml.merges'");
}

/* ---- built vocabularies --------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static mvm_tokenizer *load_built(const mvm_vocab *v)
{
    mvm_gguf_writer *w;
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
    CHECK_ST(mvm_vocab_write(v, w), MVM_OK);
    mvm_tokenizer *t;
    CHECK_ST(load_from(w, &t), MVM_OK);
    return t;
}

/* Random text: letters, spaces, digits, punctuation, newlines, valid multi-byte UTF-8,
 * NUL, and invalid UTF-8 (lone continuation and lead bytes, truncated sequences). The SPM
 * check leaves out U+2581, which SentencePiece decodes as a space. */
static size_t random_text(char *s, size_t cap, int with_space_mark)
{
    static const char *const frags[] = {
        "a", "e", "t", "the", "The", " ", " ", "  ", "\n", "\t", "'s", "'LL", "0", "42",
        "1776", ".", ",", "!", "--", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80",
        "\xC2\xA0", "\xCC\x81", "\xC3", "\xF0\x9F", "\xBF", "\xFF", "\xFE", "\xC0\x80",
        "\xE2\x96\x81", " of", " and", "ing", "",
    };
    size_t n_frags = sizeof frags / sizeof *frags, len = 0;
    for (uint32_t k = next_rand() % 24; k > 0; k--) {
        uint32_t r = next_rand() % (n_frags + 2);
        if (r == n_frags - 1 && len + 1 < cap) { /* "": a NUL byte */
            s[len++] = 0;
            continue;
        }
        if (r >= n_frags) { /* any byte */
            if (len + 1 < cap)
                s[len++] = (char)(next_rand() & 0xFF);
            continue;
        }
        if (!with_space_mark && r == 30)
            continue;
        size_t fl = strlen(frags[r]);
        if (len + fl < cap)
            memcpy(s + len, frags[r], fl), len += fl;
    }
    if (!with_space_mark) /* random bytes may form U+2581 too */
        for (size_t i = 0; i + 2 < len; i++)
            if (memcmp(s + i, "\xE2\x96\x81", 3) == 0)
                s[i] = 'x';
    return len;
}

/* decode(encode(x)) == x for BPE, " " + x (x not empty) for SPM. */
static void check_roundtrips(const mvm_tokenizer *t, int spm, int rounds)
{
    char x[256], back[1024], want[260];
    int32_t ids[300];
    int bad = 0;
    for (int r = 0; r < rounds; r++) {
        size_t n = random_text(x, sizeof x, !spm), got;
        if (mvm_tokenizer_encode(t, x, n, 0, ids, 300, &got) != MVM_OK) {
            bad++;
            continue;
        }
        size_t wn = spm && n ? n + 1 : n;
        if (spm && n)
            want[0] = ' ';
        memcpy(want + (spm && n), x, n);
        size_t bn = decode(t, ids, got, back, sizeof back);
        if (bn != wn || memcmp(back, want, wn) != 0) {
            if (!bad)
                fprintf(stderr, "  round trip of %zu bytes failed (%zu tokens, %zu back)\n", n,
                        got, bn);
            bad++;
        }
    }
    CHECK(bad == 0);
}

/* Tokens per byte of the corpus, which every vocabulary should beat. */
static double corpus_ratio(const mvm_tokenizer *t)
{
    static int32_t ids[8192];
    size_t bytes = 0, tokens = 0;
    for (size_t p = 0; p < mvm_vocab_corpus_n; p++) {
        size_t len = strlen(mvm_vocab_corpus[p]), n;
        CHECK_ST(mvm_tokenizer_encode(t, mvm_vocab_corpus[p], len, 0, ids, 8192, &n), MVM_OK);
        bytes += len;
        tokens += n;
    }
    return (double)bytes / (double)tokens;
}

static void check_built(enum mvm_vocab_style style, uint32_t n_vocab, int full)
{
    static const char *const names[] = {"llama", "qwen2", "olmo", "dsv2",
                                        "dsv3",  "kimi",  "glm4", "mm2", "oss"};
    mvm_vocab v;
    double t0 = now_s();
    CHECK_ST(mvm_vocab_build(style, n_vocab, &v), MVM_OK);
    double built = now_s() - t0;
    if (!v.tokens)
        return;
    CHECK(v.n_tokens == n_vocab);
    const char **sorted = malloc(n_vocab * sizeof *sorted);
    memcpy(sorted, v.tokens, n_vocab * sizeof *sorted);
    qsort(sorted, n_vocab, sizeof *sorted, cmp_str);
    uint32_t dups = 0;
    for (uint32_t i = 1; i < n_vocab; i++)
        dups += strcmp(sorted[i - 1], sorted[i]) == 0;
    CHECK(dups == 0);
    free(sorted);
    uint32_t unused = 0;
    for (uint32_t i = 0; i < n_vocab; i++)
        unused += v.types[i] == MVM_TOKEN_UNUSED;
    CHECK(v.n_learned > 0 && v.n_learned <= MVM_VOCAB_MAX_LEARNED);
    CHECK(unused == 0); /* what the corpus does not teach is words (vocab_fill.h) */
    mvm_tokenizer *t = load_built(&v);
    if (t) {
        CHECK(mvm_tokenizer_n_vocab(t) == n_vocab);
        CHECK(mvm_tokenizer_eos(t) == v.eos && mvm_tokenizer_bos(t) == v.bos);
        CHECK(mvm_tokenizer_is_eog(t, v.eos));
        double ratio = corpus_ratio(t);
        CHECK(ratio > (n_vocab < 1000 ? 1.5 : 3.0));
        fprintf(stderr, "  %-5s n_vocab %6u: %4u learned, corpus %.2f bytes/token, built in "
                "%.3f s\n", names[style], n_vocab, v.n_learned, ratio, built);
        if (full)
            check_roundtrips(t, style == MVM_VOCAB_LLAMA, 400);
        mvm_tokenizer_free(t);
    }
    mvm_vocab_free(&v);
}

static void test_built(void)
{
    for (int s = MVM_VOCAB_LLAMA; s <= MVM_VOCAB_GPTOSS; s++) {
        check_built((enum mvm_vocab_style)s, 512, 1);
        check_built((enum mvm_vocab_style)s, 151936, s <= MVM_VOCAB_OLMO);
    }
    check_built(MVM_VOCAB_LLAMA, 32000, 0);
    check_built(MVM_VOCAB_OLMO, 50304, 0);
    check_built(MVM_VOCAB_DEEPSEEK, 102400, 1);
    check_built(MVM_VOCAB_DEEPSEEK3, 129280, 1);
    check_built(MVM_VOCAB_KIMI, 163840, 1);
    check_built(MVM_VOCAB_GLM4, 151552, 1);
    check_built(MVM_VOCAB_MINIMAX, 200064, 1);
    check_built(MVM_VOCAB_GPTOSS, 201088, 1);
    /* The smallest vocabularies: bytes and specials only, still round-tripping. */
    mvm_vocab v;
    CHECK_ST(mvm_vocab_build(MVM_VOCAB_LLAMA, 261, &v), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "261") && strstr(mvm_last_error(), "262"));
    CHECK_ST(mvm_vocab_build(MVM_VOCAB_QWEN2, 258, &v), MVM_ERR_INVALID);
    CHECK_ST(mvm_vocab_build(MVM_VOCAB_OLMO, 260, &v), MVM_ERR_INVALID);
    CHECK_ST(mvm_vocab_build(MVM_VOCAB_OLMO, (64u << 20) + 1, &v), MVM_ERR_INVALID);
    CHECK_ST(mvm_vocab_build(MVM_VOCAB_OLMO, 261, &v), MVM_OK);
    CHECK(v.n_tokens == 261 && v.n_learned == 0 && v.n_merges == 0);
    mvm_tokenizer *t = load_built(&v);
    if (t) {
        check_roundtrips(t, 0, 100);
        mvm_tokenizer_free(t);
    }
    mvm_vocab_free(&v);
    mvm_vocab_free(&v); /* zeroed: a no-op */
    CHECK_ST(mvm_vocab_build(MVM_VOCAB_LLAMA, 262, &v), MVM_OK);
    CHECK(v.n_tokens == 262 && v.n_learned == 0 && strcmp(v.tokens[259], "\xE2\x96\x81") == 0 &&
          strcmp(v.tokens[260], "[INST]") == 0 && v.types[261] == MVM_TOKEN_CONTROL);
    t = load_built(&v);
    if (t) {
        check_roundtrips(t, 1, 100);
        mvm_tokenizer_free(t);
    }
    mvm_vocab_free(&v);
}

/* Two builds give the same vocabulary, token for token and merge for merge. */
static void test_built_deterministic(void)
{
    for (int style = MVM_VOCAB_LLAMA; style <= MVM_VOCAB_GPTOSS; style++) {
        mvm_vocab a, b;
        CHECK_ST(mvm_vocab_build((enum mvm_vocab_style)style, 4096, &a), MVM_OK);
        CHECK_ST(mvm_vocab_build((enum mvm_vocab_style)style, 4096, &b), MVM_OK);
        int same = a.tokens && b.tokens && a.n_merges == b.n_merges;
        for (uint32_t i = 0; same && i < 4096; i++)
            same = strcmp(a.tokens[i], b.tokens[i]) == 0 && a.types[i] == b.types[i] &&
                   (!a.scores || a.scores[i] == b.scores[i]);
        for (uint32_t i = 0; same && i < a.n_merges; i++)
            same = strcmp(a.merges[i], b.merges[i]) == 0;
        CHECK(same);
        mvm_vocab_free(&a);
        mvm_vocab_free(&b);
    }
}

static void test_built_specials(void)
{
    mvm_vocab v;
    CHECK_ST(mvm_vocab_build(MVM_VOCAB_QWEN2, 151936, &v), MVM_OK);
    mvm_tokenizer *t = load_built(&v);
    if (t) {
        /* The byte symbols sit where GPT-2 and Qwen2 have them. */
        ENCODES(t, "!", 0, 0);
        ENCODES(t, " ", 0, 220);
        ENCODES(t, "\n", 0, 198);
        CHECK(strcmp(v.tokens[v.eos], "<|endoftext|>") == 0 && v.pad == v.eos);
        CHECK(strcmp(v.tokens[v.eos + 2], "<|im_end|>") == 0);
        CHECK(mvm_tokenizer_is_eog(t, v.eos + 2) && !mvm_tokenizer_is_eog(t, v.eos + 1));
        int32_t the = tok_strtab_find(&t->text, "\xC4\xA0the", 5); /* " the", learned */
        CHECK(the >= 256 && the < v.eos);
        ENCODES(t, " the", 1, the); /* and no BOS */
        CHECK(v.types[v.eos] == MVM_TOKEN_CONTROL && v.types[v.n_tokens - 1] == MVM_TOKEN_NORMAL);
        /* Qwen's FIM tokens, found by their spellings (the file has no fim_*_token_id);
         * the pad, repository and file separator end a generation, as in llama.cpp */
        static const char *const fim[MVM_FIM_COUNT] = {
            [MVM_FIM_PRE] = "<|fim_prefix|>", [MVM_FIM_SUF] = "<|fim_suffix|>",
            [MVM_FIM_MID] = "<|fim_middle|>", [MVM_FIM_PAD] = "<|fim_pad|>",
            [MVM_FIM_REP] = "<|repo_name|>", [MVM_FIM_SEP] = "<|file_sep|>"};
        for (int f = 0; f < MVM_FIM_COUNT; f++) {
            const int32_t id = mvm_tokenizer_fim(t, (enum mvm_fim)f);
            CHECK(id > v.eos && strcmp(mvm_tokenizer_text(t, id), fim[f]) == 0 &&
                  t->type[id] == MVM_TOKEN_CONTROL &&
                  mvm_tokenizer_is_eog(t, id) == (f >= MVM_FIM_PAD));
        }
        CHECK(mvm_tokenizer_fim(t, MVM_FIM_COUNT) == -1);
        mvm_tokenizer_free(t);
    }
    mvm_vocab_free(&v);
    CHECK_ST(mvm_vocab_build(MVM_VOCAB_OLMO, 50304, &v), MVM_OK);
    if (v.tokens && (t = load_built(&v)) != NULL) { /* no FIM tokens */
        for (int f = 0; f < MVM_FIM_COUNT; f++)
            CHECK(mvm_tokenizer_fim(t, (enum mvm_fim)f) == -1);
        mvm_tokenizer_free(t);
    }
    if (v.tokens) {
        CHECK(strcmp(v.tokens[v.pad], "<|padding|>") == 0 && v.bos == v.eos && !v.add_bos);
        CHECK(strcmp(v.pre, "olmo") == 0 && strcmp(v.model, "gpt2") == 0);
    }
    mvm_vocab_free(&v);
    /* DeepSeek's add their BOS, and end with EOS; V2's pre-tokenizer keeps "1776" whole,
     * V3's cuts it in threes. */
    for (int style = MVM_VOCAB_DEEPSEEK; style <= MVM_VOCAB_DEEPSEEK3; style++) {
        int v3 = style == MVM_VOCAB_DEEPSEEK3;
        CHECK_ST(mvm_vocab_build((enum mvm_vocab_style)style, 102400, &v), MVM_OK);
        t = v.tokens ? load_built(&v) : NULL;
        if (!t)
            continue;
        CHECK(strcmp(v.pre, v3 ? "deepseek-v3" : "deepseek-llm") == 0);
        CHECK(strstr(v.tokens[v.bos], "begin\xE2\x96\x81of\xE2\x96\x81sentence") && v.add_bos);
        CHECK(strstr(v.tokens[v.eos], "end\xE2\x96\x81of\xE2\x96\x81sentence") && v.pad == v.eos);
        CHECK(mvm_tokenizer_is_eog(t, v.eos) && !mvm_tokenizer_is_eog(t, v.bos));
        int32_t ids[8];
        size_t n;
        CHECK_ST(mvm_tokenizer_encode(t, " 1776", 5, 1, ids, 8, &n), MVM_OK);
        int32_t digits = tok_strtab_find(&t->text, "1776", 4);
        CHECK(n >= 3 && ids[0] == v.bos && ids[1] == 220); /* the space alone */
        CHECK(v3 ? digits < 0 || ids[2] != digits : n == 3 && ids[2] == digits);
        mvm_tokenizer_free(t);
        mvm_vocab_free(&v);
    }
    /* Kimi K2's adds no BOS, ends with [EOS] or <|im_end|>, and cuts "getUserName" (a piece
     * that is a token is that token: the vocabulary ignores merges). */
    CHECK_ST(mvm_vocab_build(MVM_VOCAB_KIMI, 163840, &v), MVM_OK);
    t = v.tokens ? load_built(&v) : NULL;
    if (t) {
        CHECK(strcmp(v.pre, "kimi-k2") == 0 && !v.add_bos && v.pad == v.eos);
        CHECK(strcmp(v.tokens[v.bos], "[BOS]") == 0 && strcmp(v.tokens[v.eos], "[EOS]") == 0);
        CHECK(mvm_tokenizer_is_eog(t, v.eos) && mvm_tokenizer_is_eog(t, v.eos + 1));
        int32_t ids[8], get = tok_strtab_find(&t->text, "get", 3);
        size_t n;
        CHECK_ST(mvm_tokenizer_encode(t, "getUser", 7, 1, ids, 8, &n), MVM_OK);
        CHECK(get >= 0 && n >= 2 && ids[0] == get);
        mvm_tokenizer_free(t);
    }
    mvm_vocab_free(&v);
    /* GLM-4.5's adds no BOS ([gMASK]: the chat template writes it), ends with
     * <|endoftext|>, and pre-tokenizes with Llama 3's regex (ref_pretok checks that one
     * against Python's re), merges applied. */
    CHECK_ST(mvm_vocab_build(MVM_VOCAB_GLM4, 151552, &v), MVM_OK);
    t = v.tokens ? load_built(&v) : NULL;
    if (t) {
        CHECK(strcmp(v.pre, "glm4") == 0 && !v.add_bos && v.pad == v.eos);
        CHECK(strcmp(v.tokens[v.bos], "[gMASK]") == 0 &&
              strcmp(v.tokens[v.eos], "<|endoftext|>") == 0 &&
              strcmp(v.tokens[v.bos + 1], "<sop>") == 0);
        CHECK(mvm_tokenizer_is_eog(t, v.eos) && !mvm_tokenizer_is_eog(t, v.bos));
        CHECK(t->pre == TOK_PRE_LLAMA3 && !t->ignore_merges && !t->add_bos);
        int32_t ids[8];
        size_t n;
        CHECK_ST(mvm_tokenizer_encode(t, "1776", 4, 1, ids, 8, &n), MVM_OK);
        CHECK(n >= 1 && ids[0] != v.bos);
        mvm_tokenizer_free(t);
    }
    mvm_vocab_free(&v);
    /* MiniMax-M2's adds no BOS (its chat template writes ]~!b[ first), ends with [e~[,
     * and pre-tokenizes with o200k's regex, merges applied. */
    CHECK_ST(mvm_vocab_build(MVM_VOCAB_MINIMAX, 200064, &v), MVM_OK);
    t = v.tokens ? load_built(&v) : NULL;
    if (t) {
        CHECK(strcmp(v.pre, "minimax-m2") == 0 && !v.add_bos && v.pad == v.eos);
        CHECK(strcmp(v.tokens[v.bos], "]~!b[") == 0 && strcmp(v.tokens[v.eos], "[e~[") == 0 &&
              strcmp(v.tokens[v.eos + 1], "]!d~[") == 0);
        CHECK(mvm_tokenizer_is_eog(t, v.eos) && !mvm_tokenizer_is_eog(t, v.bos));
        CHECK(t->pre == TOK_PRE_O200K && !t->ignore_merges && !t->add_bos);
        mvm_tokenizer_free(t);
    }
    mvm_vocab_free(&v);
    CHECK_ST(mvm_vocab_build(MVM_VOCAB_LLAMA, 32000, &v), MVM_OK);
    t = v.tokens ? load_built(&v) : NULL;
    if (t) {
        CHECK(strcmp(v.tokens[0], "<unk>") == 0 && strcmp(v.tokens[3 + 0x0A], "<0x0A>") == 0);
        CHECK(v.scores[259] == 0 && v.scores[260] == -1 && v.types[259] == MVM_TOKEN_NORMAL);
        int32_t ids[8];
        size_t n;
        CHECK_ST(mvm_tokenizer_encode(t, "\xC3\xA9", 2, 1, ids, 8, &n), MVM_OK);
        CHECK(n == 4 && ids[0] == 1 && ids[2] == 3 + 0xC3 && ids[3] == 3 + 0xA9);
        mvm_tokenizer_free(t);
    }
    mvm_vocab_free(&v);
}

/* Special tokens written as text (mvm_tokenizer_encode_special): each special token's
 * text becomes that token and the text between is encoded piece by piece, checked against
 * the plain encoder on the pieces for random mixes; a cut-off special text stays text. */
static void test_encode_special(void)
{
    static const enum mvm_vocab_style styles[] = {MVM_VOCAB_QWEN2, MVM_VOCAB_LLAMA};
    static const char *const words[] = {"user\n", "hello there", " ", "\n\n", "<|im",
                                        "|>", "<s", "caf\xC3\xA9 ", "x"};
    for (int si = 0; si < 2; si++) {
        mvm_vocab v;
        CHECK_ST(mvm_vocab_build(styles[si], si ? 32000 : 151936, &v), MVM_OK);
        mvm_tokenizer *t = v.tokens ? load_built(&v) : NULL;
        if (!t) {
            mvm_vocab_free(&v);
            continue;
        }
        const char *const specials[] = {si ? "<s>" : "<|im_start|>", si ? "</s>" : "<|im_end|>"};
        const int32_t special_ids[] = {si ? 1 : v.eos + 1, si ? 2 : v.eos + 2};
        uint64_t rng = 99;
        for (int trial = 0; trial < 200; trial++) {
            char text[512];
            int32_t want[512], got[512];
            size_t len = 0, nw = 0, n = 0, start = 0;
            for (int k = 0; k < 8; k++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t r = (uint32_t)(rng >> 33);
                if (r % 3 == 0) { /* a special token: the text before it as plain pieces */
                    size_t m = 0;
                    CHECK_ST(mvm_tokenizer_encode(t, text + start, len - start, 0, want + nw,
                                                  512 - nw, &m), MVM_OK);
                    nw += m;
                    want[nw++] = special_ids[r / 3 % 2];
                    len += (size_t)sprintf(text + len, "%s", specials[r / 3 % 2]);
                    start = len;
                } else {
                    len += (size_t)sprintf(text + len, "%s", words[r / 3 % 9]);
                }
            }
            size_t m = 0;
            CHECK_ST(mvm_tokenizer_encode(t, text + start, len - start, 0, want + nw, 512 - nw,
                                          &m), MVM_OK);
            nw += m;
            for (size_t i = 0; i < 512; i++)
                got[i] = -7; /* poisoned */
            CHECK_ST(mvm_tokenizer_encode_special(t, text, len, 0, got, 512, &n), MVM_OK);
            CHECK(n == nw && memcmp(got, want, n * sizeof *got) == 0);
        }
        /* a special text cut short is text; the plain encoder never makes specials */
        int32_t ids[64];
        size_t n;
        const char *cut = si ? "<s" : "<|im_start|";
        CHECK_ST(mvm_tokenizer_encode_special(t, cut, strlen(cut), 0, ids, 64, &n), MVM_OK);
        for (size_t i = 0; i < n; i++)
            CHECK(ids[i] != special_ids[0]);
        CHECK_ST(mvm_tokenizer_encode(t, specials[1], strlen(specials[1]), 0, ids, 64, &n), MVM_OK);
        CHECK(n > 1);
        CHECK_ST(mvm_tokenizer_encode_special(t, specials[1], strlen(specials[1]), 0, ids, 64, &n),
                 MVM_OK);
        CHECK(n == 1 && ids[0] == special_ids[1]);
        mvm_tokenizer_free(t);
        mvm_vocab_free(&v);
    }
}

/* ---- the sampler ---------------------------------------------------------------------- */

static mvm_sampler *sampler(float temp, int32_t top_k, float top_p, float min_p, uint64_t seed,
                            uint32_t n)
{
    mvm_sampler_params p = {temp, top_k, top_p, min_p, seed};
    mvm_sampler *s = NULL;
    CHECK_ST(mvm_sampler_create(&p, n, &s), MVM_OK);
    return s;
}

static void test_sampler_params(void)
{
    const mvm_sampler_params bad[] = {
        {-0.1f, 0, 1, 0, 0}, {NAN, 0, 1, 0, 0}, {INFINITY, 0, 1, 0, 0}, {1, -1, 1, 0, 0},
        {1, 0, -0.1f, 0, 0}, {1, 0, 1.5f, 0, 0}, {1, 0, NAN, 0, 0},    {1, 0, 1, -0.1f, 0},
        {1, 0, 1, 2, 0},
    };
    static const char *const names[] = {"temperature", "temperature", "temperature", "top_k",
                                        "top_p", "top_p", "top_p", "min_p", "min_p"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mvm_sampler *s = (mvm_sampler *)1;
        CHECK_ST(mvm_sampler_create(&bad[i], 10, &s), MVM_ERR_INVALID);
        CHECK(s == NULL && strstr(mvm_last_error(), names[i]));
    }
    mvm_sampler_params ok = {0.8f, 40, 0.95f, 0.05f, 1};
    mvm_sampler *s;
    /* a zeroed struct is greedy with every filter off (top_p 0 as 1) */
    float row[4] = {0.5f, 3, -1, 2};
    CHECK_ST(mvm_sampler_create(&(mvm_sampler_params){0}, 4, &s), MVM_OK);
    CHECK(s && mvm_sampler_sample(s, row, 4) == 1);
    mvm_sampler_free(s);
    CHECK_ST(mvm_sampler_create(&ok, 0, &s), MVM_ERR_INVALID);
    mvm_sampler_free(NULL);
}

static void test_sampler_greedy(void)
{
    float l[8] = {0.5f, 2, -1, 3, 1, 3, NAN, -INFINITY};
    mvm_sampler *g = sampler(0, 0, 1, 0, 1, 1000);
    CHECK(mvm_sampler_sample(g, l, 8) == 3); /* ties: the lowest id */
    CHECK(mvm_sampler_sample(g, l, 3) == 1);
    CHECK(mvm_sampler_sample(g, l, 0) == -1 && mvm_sampler_sample(g, l, 1001) == -1);
    float nans[2] = {NAN, NAN}, infs[3] = {-INFINITY, -INFINITY, -INFINITY};
    CHECK(mvm_sampler_sample(g, nans, 2) == -1);
    mvm_sampler *s = sampler(1, 0, 1, 0, 1, 8);
    CHECK(mvm_sampler_sample(s, nans, 2) == -1 && mvm_sampler_sample(s, infs, 3) == 0);
    float pinf[3] = {1, INFINITY, 2};
    CHECK(mvm_sampler_sample(s, pinf, 3) == 1);
    /* top-k 1 and a tiny top-p are greedy, ties included. */
    mvm_sampler *k1 = sampler(1.5f, 1, 1, 0, 7, 1000), *p0 = sampler(1.5f, 0, 1e-6f, 0, 7, 1000);
    float big[1000];
    int same = 1;
    for (int r = 0; r < 200; r++) {
        for (int i = 0; i < 1000; i++)
            big[i] = (float)(next_rand() % 50) * 0.1f;
        int32_t want = mvm_sampler_sample(g, big, 1000);
        same &= mvm_sampler_sample(k1, big, 1000) == want && mvm_sampler_sample(p0, big, 1000) == want;
    }
    CHECK(same);
    mvm_sampler_free(g);
    mvm_sampler_free(s);
    mvm_sampler_free(k1);
    mvm_sampler_free(p0);
}

static void test_sampler_seed(void)
{
    float l[100];
    for (int i = 0; i < 100; i++)
        l[i] = (float)((i * 37) % 11) * 0.3f;
    mvm_sampler *a = sampler(1, 20, 0.9f, 0.01f, 42, 100), *b = sampler(1, 20, 0.9f, 0.01f, 42, 100);
    mvm_sampler *c = sampler(1, 20, 0.9f, 0.01f, 43, 100);
    int same = 1, differ = 0;
    for (int r = 0; r < 500; r++) {
        int32_t x = mvm_sampler_sample(a, l, 100), y = mvm_sampler_sample(b, l, 100);
        same &= x == y && x >= 0 && x < 100;
        differ |= mvm_sampler_sample(c, l, 100) != x;
    }
    CHECK(same && differ);
    mvm_sampler_free(a);
    mvm_sampler_free(b);
    mvm_sampler_free(c);
}

/* Draws n_draws tokens and returns chi-square of the counts against want[] (probabilities
 * that sum to 1; a token with probability 0 drawn even once fails outright). */
static double chi_square(mvm_sampler *s, const float *l, uint32_t n, const double *want,
                         int n_draws)
{
    int counts[16] = {0};
    for (int r = 0; r < n_draws; r++) {
        int32_t id = mvm_sampler_sample(s, (float *)l, n);
        if (id < 0 || id >= (int32_t)n)
            return INFINITY;
        counts[id]++;
    }
    double chi = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (want[i] == 0) {
            if (counts[i])
                return INFINITY;
            continue;
        }
        double e = want[i] * n_draws;
        chi += (counts[i] - e) * (counts[i] - e) / e;
    }
    return chi;
}

static void test_sampler_frequencies(void)
{
    /* Softmax at temperature 0.7 over six logits (5 degrees of freedom: the 99.999th
     * percentile of chi-square is about 25.7). */
    const float l[6] = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f, 1.0f};
    double p[6], z = 0;
    for (int i = 0; i < 6; i++)
        z += p[i] = exp(l[i] / 0.7);
    for (int i = 0; i < 6; i++)
        p[i] /= z;
    mvm_sampler *s = sampler(0.7f, 0, 1, 0, 123, 6);
    double chi = chi_square(s, l, 6, p, 200000);
    fprintf(stderr, "  temperature 0.7: chi-square %.2f (5 degrees of freedom)\n", chi);
    CHECK(chi < 25.7);
    mvm_sampler_free(s);

    /* Probabilities .5 .3 .15 .05: top-p .75 keeps the first two, min-p .25 the first three
     * (p >= .125), top-k 3 the first three; all renormalized. */
    const float q[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    const double top2[4] = {0.5 / 0.8, 0.3 / 0.8, 0, 0}, top3[4] = {0.5 / 0.95, 0.3 / 0.95,
                                                                    0.15 / 0.95, 0};
    s = sampler(1, 0, 0.75f, 0, 5, 4);
    CHECK(chi_square(s, q, 4, top2, 50000) < 20);
    mvm_sampler_free(s);
    s = sampler(1, 0, 1, 0.25f, 6, 4);
    CHECK(chi_square(s, q, 4, top3, 50000) < 25);
    mvm_sampler_free(s);
    s = sampler(1, 3, 1, 0, 7, 4);
    CHECK(chi_square(s, q, 4, top3, 50000) < 25);
    mvm_sampler_free(s);
    /* A large vocabulary: only the hot tokens survive top-k 40 and top-p. */
    enum { N = 151936 };
    float *big = malloc(N * sizeof *big);
    for (uint32_t i = 0; i < N; i++)
        big[i] = -5.0f - (float)(next_rand() % 1000) * 0.01f;
    const uint32_t hot[4] = {77777, 3, 150000, 4242};
    for (int i = 0; i < 4; i++)
        big[hot[i]] = q[i] + 10;
    s = sampler(1, 40, 0.75f, 0, 8, N);
    int ok = 1;
    for (int r = 0; r < 300; r++) {
        int32_t id = mvm_sampler_sample(s, big, N);
        ok &= id == (int32_t)hot[0] || id == (int32_t)hot[1];
    }
    CHECK(ok);
    mvm_sampler_free(s);
    free(big);
}

static const float *ref_logits;

static int ref_order(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (ref_logits[x] != ref_logits[y])
        return ref_logits[x] > ref_logits[y] ? -1 : 1;
    return x < y ? -1 : 1;
}

static void test_sampler_ties(void)
{
    /* Seven logit levels over 5000 tokens, so that top-k and top-p cut through runs of
     * equal logits: they must keep the lowest ids of a run. The reference nucleus comes
     * from qsort and a plain cumulative sum. */
    enum { N = 5000 };
    static float l[N];
    static uint32_t order[N];
    static uint8_t in_ref[N], seen[N];
    for (uint32_t i = 0; i < N; i++)
        l[i] = -0.5f * (float)(i % 7), order[i] = i;
    ref_logits = l;
    qsort(order, N, sizeof *order, ref_order);
    double z = 0, cum = 0;
    for (uint32_t i = 0; i < N; i++)
        z += exp(l[i]);
    uint32_t kept = 0;
    while (kept < N && (cum += exp(l[order[kept]])) < 0.3 * z)
        kept++;
    kept++;
    for (uint32_t i = 0; i < kept; i++)
        in_ref[order[i]] = 1;
    CHECK(kept > 100 && kept < 715); /* part of the top level, ids 0, 7, 14... */
    mvm_sampler *s = sampler(1, 0, 0.3f, 0, 9, N);
    int ok = 1;
    uint32_t distinct = 0;
    for (int r = 0; r < 1000; r++) {
        int32_t id = mvm_sampler_sample(s, l, N);
        ok &= id >= 0 && id < N && in_ref[id];
        if (ok && !seen[id]++)
            distinct++;
    }
    CHECK(ok && distinct > kept / 2); /* ~86% expected */
    mvm_sampler_free(s);
    /* All equal: top-k 10 is ids 0..9, each drawn. */
    for (uint32_t i = 0; i < N; i++)
        l[i] = 1.0f;
    memset(seen, 0, sizeof seen);
    s = sampler(2, 10, 1, 0, 10, N);
    ok = 1;
    for (int r = 0; r < 2000; r++) {
        int32_t id = mvm_sampler_sample(s, l, N);
        ok &= id >= 0 && id < 10;
        if (id >= 0 && id < N)
            seen[id] = 1;
    }
    for (int i = 0; i < 10; i++)
        ok &= seen[i];
    CHECK(ok);
    mvm_sampler_free(s);
}

/* The repetition penalty (llama.cpp's): against a direct computation on random logits and
 * histories, into a poisoned buffer; then through the sampler, greedy and sampled. */
static void test_sampler_repeat_penalty(void)
{
    const mvm_sampler_params bad[] = {{1, 0, 1, 0, 0, -1.0f, 64}, {1, 0, 1, 0, 0, NAN, 64},
                                      {1, 0, 1, 0, 0, INFINITY, 64}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mvm_sampler *s = (mvm_sampler *)1;
        CHECK_ST(mvm_sampler_create(&bad[i], 10, &s), MVM_ERR_INVALID);
        CHECK(s == NULL && strstr(mvm_last_error(), "repeat_penalty"));
    }
    enum { N = 1000, PREV = 300 };
    static float l[N], keep[N], out[N], want[N];
    static int32_t prev[PREV];
    static uint8_t in_window[N];
    const float penalties[] = {1.3f, 0.7f, 2.0f};
    const uint32_t last_n[] = {64, 1, 0, PREV + 50};
    int exact = 1, untouched = 1, same = 1;
    for (int r = 0; r < 24; r++) {
        for (uint32_t i = 0; i < N; i++) /* some exactly 0, the sign's boundary */
            l[i] = (float)((int)(next_rand() % 2001) - 1000) * 0.005f;
        memcpy(keep, l, sizeof l);
        for (uint32_t i = 0; i < PREV; i++) /* repeats, and ids outside the vocabulary */
            prev[i] = i % 37 == 5 ? -1 : i % 41 == 7 ? N + 3 : (int32_t)(next_rand() % 200);
        mvm_sampler_params p = {1, 40, 0.9f, 0, (uint64_t)r, penalties[r % 3], last_n[r % 4]};
        memset(in_window, 0, sizeof in_window);
        for (uint32_t i = PREV > p.repeat_last_n ? PREV - p.repeat_last_n : 0; i < PREV; i++)
            if (prev[i] >= 0 && prev[i] < N)
                in_window[prev[i]] = 1;
        for (uint32_t i = 0; i < N; i++)
            want[i] = !in_window[i] ? l[i] : l[i] > 0 ? l[i] / p.repeat_penalty
                                                       : l[i] * p.repeat_penalty;
        for (uint32_t i = 0; i < N; i++)
            out[i] = NAN;
        mvm_sampler_penalize(&p, l, N, prev, PREV, out);
        exact &= memcmp(out, want, sizeof out) == 0;
        /* The sampler with the penalty draws what one without draws from the penalised
         * logits, from the same seed: greedy, and top-k/top-p sampling. */
        mvm_sampler_params plain = p;
        plain.repeat_penalty = 1;
        for (float temp = 0; temp <= 1; temp += 1) {
            p.temperature = plain.temperature = temp;
            mvm_sampler *a, *b;
            CHECK_ST(mvm_sampler_create(&p, N, &a), MVM_OK);
            CHECK_ST(mvm_sampler_create(&plain, N, &b), MVM_OK);
            for (int d = 0; d < 50; d++)
                same &= mvm_sampler_sample_after(a, l, N, prev, PREV) ==
                        mvm_sampler_sample(b, want, N);
            mvm_sampler_free(a);
            mvm_sampler_free(b);
        }
        untouched &= memcmp(l, keep, sizeof l) == 0;
    }
    CHECK(exact && untouched && same);
    /* Greedy: 3 beats 2.9 until 3 was seen; divided by 1.1 it is 2.73. Outside the last
     * repeat_last_n, or with no history given, it wins again. */
    float g[4] = {3.0f, 2.9f, -1.0f, 0.5f};
    const int32_t seen0[] = {0}, long_ago[] = {0, 3, 3};
    mvm_sampler_params gp = {0, 0, 1, 0, 1, 1.1f, 2};
    mvm_sampler *s;
    CHECK_ST(mvm_sampler_create(&gp, 4, &s), MVM_OK);
    CHECK(mvm_sampler_sample_after(s, g, 4, seen0, 1) == 1);
    CHECK(mvm_sampler_sample_after(s, g, 4, long_ago, 3) == 0);
    CHECK(mvm_sampler_sample(s, g, 4) == 0 && g[0] == 3.0f);
    mvm_sampler_free(s);
}

/* The reference: sorted by logit, highest first, ties by id (NaN last). */
static const float *ref_logits;
static int by_logit(const void *a, const void *b)
{
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    const float x = ref_logits[i], y = ref_logits[j];
    if ((x != x) != (y != y))
        return x != x ? 1 : -1;
    return x > y ? -1 : x < y ? 1 : (i > j) - (i < j);
}

/* mvm_sampler_logprobs against a double-precision softmax and a full sort: random logits
 * with ties, -inf (a masked token) and NaN among them; k from none to more than have a
 * probability (the rest id -1); the outputs poisoned first. */
static void test_sampler_logprobs(void)
{
    enum { N = 3000, K = 24 };
    static float l[N];
    static int32_t order[N];
    int ok = 1;
    for (int r = 0; r < 40 && ok; r++) {
        const uint32_t n = r < 4 ? 1 + (uint32_t)r : N - (uint32_t)r * 7, nan_every = 7 + r % 5;
        uint32_t numbers = 0;
        for (uint32_t i = 0; i < n; i++) {
            l[i] = (float)((int)(next_rand() % 4001) - 2000) * 0.01f; /* ties: 4001 values */
            if (i % nan_every == 3)
                l[i] = r % 2 ? NAN : -INFINITY;
            numbers += l[i] > -INFINITY; /* those with a probability */
        }
        double max = -INFINITY, sum = 0;
        for (uint32_t i = 0; i < n; i++)
            if (l[i] == l[i] && l[i] > max)
                max = l[i];
        for (uint32_t i = 0; i < n; i++)
            if (l[i] == l[i])
                sum += exp((double)l[i] - max);
        const double lse = max + log(sum);
        for (uint32_t i = 0; i < n; i++)
            order[i] = (int32_t)i;
        ref_logits = l;
        qsort(order, n, sizeof *order, by_logit);
        /* k past the tokens with a probability too, in the small rounds */
        const uint32_t k = r < 4 ? n : (uint32_t)r % (K + 1) < n ? (uint32_t)r % (K + 1) : n;
        int32_t id[K];
        float lp[K];
        for (uint32_t j = 0; j < K; j++)
            id[j] = 12345, lp[j] = NAN; /* poisoned */
        const float got = mvm_sampler_logprobs(l, n, k, id, lp);
        ok &= fabs(got - lse) <= 1e-4 * (1 + fabs(lse));
        for (uint32_t j = 0; j < k; j++) {
            const int number = j < numbers;
            ok &= number ? id[j] == order[j] && fabs(lp[j] - (l[order[j]] - lse)) <= 1e-4
                         : id[j] == -1;
        }
        ok &= k == K || id[k] == 12345; /* nothing written past k */
        if (!ok)
            fprintf(stderr, "  round %d: n %u k %u lse %g want %g\n", r, n, k, got, lse);
    }
    CHECK(ok);
    const float none[3] = {NAN, NAN, NAN};
    int32_t id = 7;
    float lp = 0;
    CHECK(mvm_sampler_logprobs(none, 3, 1, &id, &lp) == -INFINITY && id == -1);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_tokenizer.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(path, sizeof path, "%s/vocab.gguf", dir);
    RUN(test_pretok_gpt2);
    RUN(test_pretok_qwen2);
    RUN(test_pretok_chained);
    RUN(test_byte_alphabet);
    RUN(test_spm_known);
    RUN(test_bpe_known);
    RUN(test_malformed);
    RUN(test_built);
    RUN(test_built_deterministic);
    RUN(test_built_specials);
    RUN(test_encode_special);
    RUN(test_sampler_params);
    RUN(test_sampler_greedy);
    RUN(test_sampler_seed);
    RUN(test_sampler_frequencies);
    RUN(test_sampler_ties);
    RUN(test_sampler_repeat_penalty);
    RUN(test_sampler_logprobs);
    rmdir(dir);
    TEST_END();
}
