/*
 * The pre-tokenizers' regexes, matched by hand over code points (no regex library), as
 * llama.cpp's llm_tokenizer_bpe lists them for each tokenizer.ggml.pre:
 *
 *   GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   default: [\p{P}\$\+<=>\^~\|]+, GPT-2's, \p{N}+, [0-9][0-9][0-9]
 *   Qwen2:   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
 *            | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   Llama 3: Qwen2's with \p{N}{1,3}
 *   DeepSeek-LLM (V2): [\r\n], \s?[CASED]+, \s?[!-/:-~！-／：-～‘-‟　-。]+, \s+$,
 *            [一-龥ࠀ-一가-퟿]+, \p{N}+
 *   DeepSeek-Coder: [\r\n], \s?\p{L}+, \s?\p{P}+, [一-龥ࠀ-一가-퟿]+, \p{N}
 *   DeepSeek-V3: \p{N}{1,3}, [一-龥぀-ゟ゠-ヿ]+,
 *            [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
 *            | ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   Kimi K2: [\p{Han}]+|[^\r\n\p{L}\p{N}]?[CAP]*[LOW]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 *            |[^\r\n\p{L}\p{N}]?[CAP]+[LOW]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}
 *            | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *            with CAP = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]] and
 *            LOW = [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]] (Moonshot's pat_str)
 *   o200k:   Kimi K2's without the Han alternative, Han in CAP and LOW (it is Lo), and
 *            " ?[^\s\p{L}\p{N}]+[\r\n/]*" (tiktoken's o200k_base: GPT-4o, gpt-oss, Llama 4,
 *            MiniMax-M2)
 *
 * Each matcher returns the end of the match at p the way a backtracking engine finds it:
 * alternatives in order, quantifiers greedy. Two consequences that look odd but are the
 * regexes': a run of n > 1 spaces before a word leaves its last space to the word
 * ("a   b" -> "a", "  ", " b"), and GPT-2's " ?" is only U+0020, so a tab before a word is a
 * piece of its own.
 *
 * The classes are Unicode's (tok_unicode.c), which is what the models' own tokenizers
 * (Hugging Face's, on Oniguruma) use. llama.cpp runs the DeepSeek regexes through
 * std::regex on a text whose non-ASCII characters it first collapses to one byte per
 * class, and its ASCII \p{S} there lacks '~': so " ~~" is one piece here and in Hugging
 * Face's tokenizer but two in llama.cpp's.
 *
 * Kimi K2 is likewise Moonshot's regex as tiktoken runs it, where llama.cpp's hand-written
 * kimi-k2 matcher takes any letters as one word: "getUserName" is "get", "User", "Name"
 * here and in Kimi's tokenizer, one piece in llama.cpp's. o200k is tiktoken's too; llama.cpp
 * writes its CAP as "a letter but a-z" and LOW as "a letter but A-Z", which agree on ASCII
 * and differ on cased letters elsewhere: "aÉ" is "a", "É" here and in tiktoken (É is Lu),
 * one piece in llama.cpp. Its (?i:) folds as Unicode's
 * simple case folding does, so "'ſ" (long s) is a contraction; the other pre-tokenizers keep
 * llama.cpp's ASCII-only '[sS]'. Characters assigned after Unicode 14.0 (the tables') are
 * of no class here: Han extension H and I, for one, are symbols to tiktoken's newer tables.
 */
#include "engine/tokenizer/tokenizer_impl.h"

#define MASK(cls) (1u << (cls))
#define LETTERS MASK(TOK_LETTER)
#define NUMBERS MASK(TOK_NUMBER)
/* [^\s\p{L}\p{N}] */
#define NON_WORD (MASK(TOK_OTHER) | MASK(TOK_MARK) | MASK(TOK_PUNCT) | MASK(TOK_SYMBOL))

static int in(const tok_text *t, size_t i, unsigned mask)
{
    return mask >> t->cls[i] & 1;
}

/* The end of the run of classes `mask` from p, at most max long. */
static size_t run_max(const tok_text *t, size_t p, size_t end, unsigned mask, size_t max)
{
    size_t q = p;
    while (q < end && q - p < max && in(t, q, mask))
        q++;
    return q;
}

static size_t run(const tok_text *t, size_t p, size_t end, unsigned mask)
{
    return run_max(t, p, end, mask, (size_t)-1);
}

static int newline(uint32_t cp)
{
    return cp == '\r' || cp == '\n';
}

static size_t newlines_after(const tok_text *t, size_t q, size_t end)
{
    while (q < end && newline(t->cp[q]))
        q++;
    return q;
}

static uint32_t ascii_lower(uint32_t cp)
{
    return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
}

/* How 's|'t|'re|'ve|'m|'ll|'d matches case: exactly (GPT-2), as llama.cpp's '[sS]' spells
 * it, or by Unicode's simple case folding, where long s (U+017F) is also an 's'. */
enum fold { FOLD_NONE, FOLD_ASCII, FOLD_UNICODE };

static uint32_t fold(uint32_t cp, enum fold how)
{
    if (how == FOLD_UNICODE && cp == 0x17F)
        return 's';
    return how == FOLD_NONE ? cp : ascii_lower(cp);
}

/* 's|'t|'re|'ve|'m|'ll|'d at p, folded `how`: the match length, or 0. */
static size_t contraction(const tok_text *t, size_t p, size_t end, enum fold how)
{
    if (p + 1 >= end || t->cp[p] != '\'')
        return 0;
    uint32_t a = fold(t->cp[p + 1], how), b = p + 2 < end ? fold(t->cp[p + 2], how) : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* At whitespace: \s*[\r\n]+ (when `newlines`), then \s+(?!\S) and \s+. */
static size_t spaces(const tok_text *t, size_t p, size_t end, int newlines)
{
    size_t q = p, after_newline = 0;
    for (; q < end && t->cls[q] == TOK_SPACE; q++)
        if (newline(t->cp[q]))
            after_newline = q + 1;
    if (newlines && after_newline)
        return after_newline;
    if (q - p > 1 && q < end)
        return q - 1; /* the run but its last space, which the next word takes */
    return q;
}

/* " ?X+" with X the classes `mask`: where X's run starts, or p when " ?X" fails. */
static size_t after_space(const tok_text *t, size_t p, size_t end, unsigned mask)
{
    return p + (t->cp[p] == ' ' && p + 1 < end && in(t, p + 1, mask));
}

/* ---- the one-regex pre-tokenizers ---------------------------------------------------- */

static size_t match_gpt2(const tok_text *t, size_t p, size_t end)
{
    size_t c = contraction(t, p, end, FOLD_NONE);
    if (c)
        return p + c;
    static const unsigned words[] = {LETTERS, NUMBERS, NON_WORD};
    for (int i = 0; i < 3; i++) {
        size_t q = after_space(t, p, end, words[i]);
        if (in(t, q, words[i]))
            return run(t, q, end, words[i]);
    }
    return spaces(t, p, end, 0);
}

/* Qwen2's regex, and Llama 3's with max_digits 3. */
static size_t match_qwen2_like(const tok_text *t, size_t p, size_t end, size_t max_digits)
{
    size_t c = contraction(t, p, end, FOLD_ASCII);
    if (c)
        return p + c;
    if (in(t, p, LETTERS)) /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        return run(t, p, end, LETTERS);
    if (!newline(t->cp[p]) && !in(t, p, NUMBERS) && p + 1 < end && in(t, p + 1, LETTERS))
        return run(t, p + 1, end, LETTERS);
    if (in(t, p, NUMBERS))
        return run_max(t, p, end, NUMBERS, max_digits);
    size_t q = after_space(t, p, end, NON_WORD); /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    if (in(t, q, NON_WORD))
        return newlines_after(t, run(t, q, end, NON_WORD), end);
    return spaces(t, p, end, 1);
}

static size_t match_qwen2(const tok_text *t, size_t p, size_t end)
{
    return match_qwen2_like(t, p, end, 1);
}

static size_t match_llama3(const tok_text *t, size_t p, size_t end)
{
    return match_qwen2_like(t, p, end, 3);
}

/* ---- pieces of the chained pre-tokenizers --------------------------------------------- */

/* The run of code points in the ranges r from p. */
static size_t run_ranges(const tok_text *t, size_t p, size_t end, const tok_range *r, size_t n)
{
    while (p < end && tok_in_ranges(r, n, t->cp[p]))
        p++;
    return p;
}

/* \s?X+ with X the code points in the ranges r. */
static size_t space_run_ranges(const tok_text *t, size_t p, size_t end, const tok_range *r,
                               size_t n)
{
    if (t->cls[p] == TOK_SPACE && p + 1 < end && tok_in_ranges(r, n, t->cp[p + 1]))
        return run_ranges(t, p + 1, end, r, n);
    return run_ranges(t, p, end, r, n);
}

/* \s?X+ with X the classes `mask`. */
static size_t space_run(const tok_text *t, size_t p, size_t end, unsigned mask)
{
    if (t->cls[p] == TOK_SPACE && p + 1 < end && in(t, p + 1, mask))
        return run(t, p + 1, end, mask);
    return run(t, p, end, mask);
}

static size_t match_newline(const tok_text *t, size_t p, size_t end)
{
    (void)end;
    return p + newline(t->cp[p]);
}

static size_t match_numbers(const tok_text *t, size_t p, size_t end)
{
    return run(t, p, end, NUMBERS);
}

static size_t match_number(const tok_text *t, size_t p, size_t end)
{
    return run_max(t, p, end, NUMBERS, 1);
}

static size_t match_numbers3(const tok_text *t, size_t p, size_t end)
{
    return run_max(t, p, end, NUMBERS, 3);
}

/* \s+$: the whitespace that ends the piece, found from the end in one scan. */
static int find_trailing_spaces(const tok_text *t, size_t p, size_t end, size_t *ms, size_t *me)
{
    size_t r = end;
    while (r > p && t->cls[r - 1] == TOK_SPACE)
        r--;
    *ms = r, *me = end;
    return r < end;
}

/* ---- llama.cpp's "default" ------------------------------------------------------------ */

/* [\p{P}\$\+<=>\^~\|]+: punctuation and ASCII's symbols but '`'. */
static size_t match_default_punct(const tok_text *t, size_t p, size_t end)
{
    size_t q = p;
    while (q < end && (t->cls[q] == TOK_PUNCT ||
                       (t->cls[q] == TOK_SYMBOL && t->cp[q] < 0x80 && t->cp[q] != '`')))
        q++;
    return q;
}

static size_t match_default_digits(const tok_text *t, size_t p, size_t end)
{
    size_t q = p;
    while (q < end && q - p < 3 && t->cp[q] >= '0' && t->cp[q] <= '9')
        q++;
    return q - p == 3 ? q : p;
}

/* ---- DeepSeek-LLM (V2) and DeepSeek-Coder --------------------------------------------- */

/* The letter class of DeepSeek-LLM's second regex, as its tokenizer.json spells it: mostly
 * Unicode's cased letters, without Armenian and Georgian small letters among others. */
static const tok_range ds_letters[] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA},
    {0x1BC, 0x1BF}, {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377},
    {0x37B, 0x37D}, {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C},
    {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556},
    {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF},
    {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},
    {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC},
    {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113},
    {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128},
    {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE},
    {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787},
    {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

/* [!-/:-~！-／：-～‘-‟　-。]: note that :-~ holds the ASCII letters too. */
static const tok_range ds_punct[] = {
    {0x21, 0x2F}, {0x3A, 0x7E}, {0x2018, 0x201F}, {0x3000, 0x3002}, {0xFF01, 0xFF0F},
    {0xFF1A, 0xFF5E},
};

/* [一-龥ࠀ-一가-퟿]: U+0800 to the end of the CJK ideographs, and Hangul. */
static const tok_range ds_cjk[] = {{0x800, 0x9FA5}, {0xAC00, 0xD7FF}};

#define N_OF(a) (sizeof a / sizeof *a)

static size_t match_ds_letters(const tok_text *t, size_t p, size_t end)
{
    return space_run_ranges(t, p, end, ds_letters, N_OF(ds_letters));
}

static size_t match_ds_punct(const tok_text *t, size_t p, size_t end)
{
    return space_run_ranges(t, p, end, ds_punct, N_OF(ds_punct));
}

static size_t match_ds_cjk(const tok_text *t, size_t p, size_t end)
{
    return run_ranges(t, p, end, ds_cjk, N_OF(ds_cjk));
}

static size_t match_letters(const tok_text *t, size_t p, size_t end)
{
    return space_run(t, p, end, LETTERS);
}

static size_t match_punct(const tok_text *t, size_t p, size_t end)
{
    return space_run(t, p, end, MASK(TOK_PUNCT));
}

/* ---- DeepSeek-V3 ---------------------------------------------------------------------- */

/* [一-龥぀-ゟ゠-ヿ]: CJK ideographs, hiragana and katakana. */
static const tok_range v3_cjk[] = {{0x3040, 0x309F}, {0x30A0, 0x30FF}, {0x4E00, 0x9FA5}};

static size_t match_v3_cjk(const tok_text *t, size_t p, size_t end)
{
    return run_ranges(t, p, end, v3_cjk, N_OF(v3_cjk));
}

static int ascii_letter(uint32_t cp)
{
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
}

static size_t match_v3(const tok_text *t, size_t p, size_t end)
{
    const unsigned marked = LETTERS | MASK(TOK_MARK), signs = MASK(TOK_PUNCT) | MASK(TOK_SYMBOL);
    uint32_t c = t->cp[p];
    /* [ASCII punctuation][A-Za-z]+ */
    if (c >= 0x21 && c <= 0x7E && !ascii_letter(c) && !(c >= '0' && c <= '9') && p + 1 < end &&
        ascii_letter(t->cp[p + 1])) {
        size_t q = p + 1;
        while (q < end && ascii_letter(t->cp[q]))
            q++;
        return q;
    }
    /* [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+: a mark or letter starts its run either way */
    if (in(t, p, marked))
        return run(t, p, end, marked);
    if (!newline(c) && !in(t, p, signs) && p + 1 < end && in(t, p + 1, marked))
        return run(t, p + 1, end, marked);
    size_t q = after_space(t, p, end, signs); /*  ?[\p{P}\p{S}]+[\r\n]* */
    if (in(t, q, signs))
        return newlines_after(t, run(t, q, end, signs), end);
    return t->cls[p] == TOK_SPACE ? spaces(t, p, end, 1) : p;
}

/* ---- Kimi K2 ------------------------------------------------------------------------- */

/* The classes of tiktoken's words: K2_CAP for [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], K2_LOW for
 * [\p{Ll}\p{Lm}\p{Lo}\p{M}], with Han or (K2_NO_HAN: Kimi K2's) without. Lm, Lo and marks
 * are in both. */
enum { K2_CAP = 1, K2_LOW = 2, K2_NO_HAN = 4 };

static unsigned k2_class(const tok_text *t, size_t i, unsigned k)
{
    uint8_t c = t->cls[i];
    if ((c != TOK_LETTER && c != TOK_MARK) || (k & K2_NO_HAN && tok_cp_is_han(t->cp[i])))
        return 0;
    if (c == TOK_MARK)
        return K2_CAP | K2_LOW;
    switch (tok_letter_case(t->cp[i])) {
    case TOK_CASE_UPPER: return K2_CAP;
    case TOK_CASE_LOWER: return K2_LOW;
    case TOK_CASE_OTHER: break;
    }
    return K2_CAP | K2_LOW;
}

/* k: the class (K2_CAP or K2_LOW) with K2_NO_HAN or not. */
static size_t k2_run(const tok_text *t, size_t q, size_t end, unsigned k)
{
    while (q < end && k2_class(t, q, k) & k & (K2_CAP | K2_LOW))
        q++;
    return q;
}

/* [CAP]*[LOW]+ from q: its end, or q. When no LOW follows the run of CAPs, a backtracking
 * engine gives the CAPs back one at a time until it finds one that is also a LOW (Lm, Lo,
 * a mark), which then is the word's only LOW. han: 0 or K2_NO_HAN. */
static size_t k2_cap_low(const tok_text *t, size_t q, size_t end, unsigned han)
{
    size_t low = k2_run(t, q, end, K2_CAP | han);
    if (low == end || !(k2_class(t, low, han) & K2_LOW)) {
        while (low > q && !(k2_class(t, low - 1, han) & K2_LOW))
            low--;
        if (low == q)
            return q;
        low--;
    }
    return k2_run(t, low, end, K2_LOW | han);
}

/* [CAP]+[LOW]* from q: its end, or q. */
static size_t k2_cap_word(const tok_text *t, size_t q, size_t end, unsigned han)
{
    size_t e = k2_run(t, q, end, K2_CAP | han);
    return e == q ? q : k2_run(t, e, end, K2_LOW | han);
}

/* The words, numbers, signs and spaces of tiktoken's two regexes: Kimi K2's (han:
 * K2_NO_HAN, its signs followed by [\r\n]*) and o200k's (0, [\r\n/]*). */
static size_t match_tiktoken(const tok_text *t, size_t p, size_t end, unsigned han)
{
    /* Each word with its [^\r\n\p{L}\p{N}]? lead first, then without; then the next. */
    static size_t (*const words[])(const tok_text *, size_t, size_t, unsigned) = {
        k2_cap_low, k2_cap_word};
    int lead = !newline(t->cp[p]) && !in(t, p, LETTERS | NUMBERS) && p + 1 < end;
    for (int i = 0; i < 2; i++) {
        size_t e = lead ? words[i](t, p + 1, end, han) : p + 1;
        if (e > p + 1 || (e = words[i](t, p, end, han)) > p)
            return e + contraction(t, e, end, FOLD_UNICODE);
    }
    if (in(t, p, NUMBERS))
        return run_max(t, p, end, NUMBERS, 3);
    size_t q = after_space(t, p, end, NON_WORD); /*  ?[^\s\p{L}\p{N}]+ */
    if (!in(t, q, NON_WORD))
        return spaces(t, p, end, 1);
    q = run(t, q, end, NON_WORD);
    while (q < end && (newline(t->cp[q]) || (!han && t->cp[q] == '/')))
        q++;
    return q;
}

static size_t match_kimi_k2(const tok_text *t, size_t p, size_t end)
{
    if (tok_cp_is_han(t->cp[p])) { /* [\p{Han}]+ */
        size_t q = p + 1;
        while (q < end && tok_cp_is_han(t->cp[q]))
            q++;
        return q;
    }
    return match_tiktoken(t, p, end, K2_NO_HAN);
}

static size_t match_o200k(const tok_text *t, size_t p, size_t end)
{
    return match_tiktoken(t, p, end, 0);
}

/* ---- the table ------------------------------------------------------------------------- */

static const tok_pass gpt2[] = {{match_gpt2, NULL}};
static const tok_pass qwen2[] = {{match_qwen2, NULL}};
static const tok_pass llama3[] = {{match_llama3, NULL}};
static const tok_pass default_[] = {
    {match_default_punct, NULL}, {match_gpt2, NULL}, {match_numbers, NULL},
    {match_default_digits, NULL},
};
static const tok_pass deepseek_llm[] = {
    {match_newline, NULL}, {match_ds_letters, NULL}, {match_ds_punct, NULL},
    {NULL, find_trailing_spaces}, {match_ds_cjk, NULL}, {match_numbers, NULL},
};
static const tok_pass deepseek_coder[] = {
    {match_newline, NULL}, {match_letters, NULL}, {match_punct, NULL}, {match_ds_cjk, NULL},
    {match_number, NULL},
};
static const tok_pass deepseek3[] = {
    {match_numbers3, NULL}, {match_v3_cjk, NULL}, {match_v3, NULL},
};
static const tok_pass kimi_k2[] = {{match_kimi_k2, NULL}};
static const tok_pass o200k[] = {{match_o200k, NULL}};

const tok_pass *tok_pretok_passes(enum tok_pre pre, size_t *n)
{
#define PASSES(a) (*n = N_OF(a), a)
    switch (pre) {
    case TOK_PRE_DEFAULT: return PASSES(default_);
    case TOK_PRE_QWEN2: return PASSES(qwen2);
    case TOK_PRE_LLAMA3: return PASSES(llama3);
    case TOK_PRE_DEEPSEEK_LLM: return PASSES(deepseek_llm);
    case TOK_PRE_DEEPSEEK_CODER: return PASSES(deepseek_coder);
    case TOK_PRE_DEEPSEEK3: return PASSES(deepseek3);
    case TOK_PRE_KIMI_K2: return PASSES(kimi_k2);
    case TOK_PRE_O200K: return PASSES(o200k);
    case TOK_PRE_GPT2: break;
    }
    return PASSES(gpt2);
#undef PASSES
}
