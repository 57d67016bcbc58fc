/*
 * GBNF grammars (engine/grammar/): the parser's refusals, each naming its fault; the texts
 * grammars accept and reject (llama.cpp's own example grammars among them, with its
 * repetition bounds, classes and escapes, characters split between calls); and, bound to a
 * tiny model's vocabulary, the tokens allowed next: the stack-by-stack filter
 * (mvm_grammar_apply, mvm_grammar_allows) against the reference of matching each token's
 * text after the text so far, at states reached by random walks; the sampler under a
 * grammar, greedy and drawn, spelling only sentences of it and ending only where it may.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/grammar/grammar.h"
#include "tiny_engine.h"
#include "vmm/error.h"

/* Whether text is a whole sentence of gbnf. */
static int sentence(const char *gbnf, const char *text)
{
    mvm_grammar *g = NULL;
    if (mvm_grammar_parse(gbnf, &g) != MVM_OK) {
        fprintf(stderr, "parse: %s\n", mvm_last_error());
        return -1;
    }
    int ok = mvm_grammar_accept_text(g, text, strlen(text)) && mvm_grammar_complete(g);
    mvm_grammar_free(g);
    return ok;
}

static void test_parse_errors(void)
{
    /* groups nested past the limit: refused, not a stack overflow (2048 deep parses) */
    for (int deep = 2048; deep <= 100000; deep += 97952) {
        char *g = malloc(2 * (size_t)deep + 32), *o = g;
        o += sprintf(o, "root ::= ");
        memset(o, '(', (size_t)deep), o += deep;
        o += sprintf(o, "\"a\"");
        memset(o, ')', (size_t)deep), o += deep;
        *o = '\0';
        mvm_grammar *gr = NULL;
        mvm_status st = mvm_grammar_parse(g, &gr);
        CHECK(deep == 2048 ? st == MVM_OK && mvm_grammar_accept_text(gr, "a", 1)
                           : st == MVM_ERR_INVALID && strstr(mvm_last_error(), "nested over"));
        mvm_grammar_free(gr);
        free(g);
    }
    static const struct {
        const char *gbnf, *says;
    } cases[] = {
        {"root ::= foo", "undefined rule 'foo'"},
        {"start ::= \"a\"", "no rule 'root'"},
        {"root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive"},
        {"root ::= x\nx ::= y \"a\"\ny ::= | x", "left-recursive"},
        {"root ::= (\"a\" | root)* \"b\"", "left-recursive"},
        {"root ::= \"a\\q\"", "line 1, column 12: unknown escape '\\q'"},
        {"root ::= \"abc", "unexpected end of input"},
        {"root ::= [a-", "unexpected end of input"},
        {"root ::= \"\\x4\"", "expecting 2 hex digits"},
        {"root ::= []", "empty character class"},
        {"root ::= \"a\"{2001}", "over 2000 repetitions"},
        {"root ::= (\"a\"{0,100}){0,100}", "over 2000 rules"},
        {"root ::= \"a\"{3,2}", "maximum is below its minimum"},
        {"root ::= \"a\"{x}", "expecting an integer"},
        {"root ::= \"a\"{2 3}", "expecting ',' or '}'"},
        {"root ::= * \"a\"", "expecting something before the repetition"},
        {"root ::= (\"a\"", "expecting ')'"},
        {"root := \"a\"", "expecting ::="},
        {"root ::= \"a\"\n  ::= \"b\"", "line 2, column 3: expecting a rule name"},
        {"root ::= <think> \"a\"", "token references"},
        {"root ::= \"a\" ) ", "expecting the end of the line"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mvm_grammar *g = (mvm_grammar *)&cases; /* poisoned: must come back NULL */
        mvm_status st = mvm_grammar_parse(cases[i].gbnf, &g);
        CHECK(st == MVM_ERR_INVALID && g == NULL);
        if (!strstr(mvm_last_error(), cases[i].says)) {
            CHECK(!"the message names the fault");
            fprintf(stderr, "  %s\n  got: %s\n  want: %s\n", cases[i].gbnf, mvm_last_error(),
                    cases[i].says);
        }
    }
}

/* llama.cpp's grammars/arithmetic.gbnf, list.gbnf and json.gbnf, as it ships them. */
static const char arithmetic[] =
    "root  ::= (expr \"=\" ws term \"\\n\")+\n"
    "expr  ::= term ([-+*/] term)*\n"
    "term  ::= ident | num | \"(\" ws expr \")\" ws\n"
    "ident ::= [a-z] [a-z0-9_]* ws\n"
    "num   ::= [0-9]+ ws\n"
    "ws    ::= [ \\t\\n]*\n";
static const char list[] = "root ::= item+\n\n# Excludes various line break characters\n"
                           "item ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n";
static const char json[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n\n"
    "object ::=\n  \"{\" ws (\n            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n  )? \"}\" ws\n\n"
    "array  ::=\n  \"[\" ws (\n            value\n    (\",\" ws value)*\n  )? \"]\" ws\n\n"
    "string ::=\n  \"\\\"\" (\n    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n  )* \"\\\"\" ws\n\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? "
    "([eE] [-+]? [0-9] [1-9]{0,15})? ws\n\n"
    "# Optional space: by convention, applied in this grammar after literal chars when allowed\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static void test_sentences(void)
{
    static const struct {
        const char *gbnf, *text;
        int ok;
    } cases[] = {
        {arithmetic, "a=b\n", 1}, {arithmetic, "x1 = (y + 2) * 3\n7=7\n", 0},
        {arithmetic, "x1 *(y +2)= 3\n7=7\n", 1}, {arithmetic, "=1\n", 0},
        {list, "- one\n- two\n", 1}, {list, "- one\n-two\n", 0}, {list, "", 0},
        {list, "- caf\xc3\xa9 \xe2\x82\xac\n", 1}, {list, "- a\xe2\x80\xa8" "b\n", 0},
        {json, "{\"a\": [1, -2.5e3, true, null, \"x\\u00e9\\n\"], \"b\": {}}", 1},
        {json, "{\"a\": [1, 2,]}", 0}, {json, "{\"a\" 1}", 0}, {json, "[1]", 0},
        {json, "{\"a\": 01}", 0}, {json, "{\"a\": 1e-05, \"b\":\n  -0.5}", 1},
        {json, "{\"a\": \"\x01\"}", 0},
        {"root ::= \"a\"{2,4}", "a", 0}, {"root ::= \"a\"{2,4}", "aa", 1},
        {"root ::= \"a\"{2,4}", "aaaa", 1}, {"root ::= \"a\"{2,4}", "aaaaa", 0},
        {"root ::= \"a\"{3}", "aaa", 1}, {"root ::= \"a\"{3}", "aa", 0},
        {"root ::= \"ab\"{2,} \"c\"", "ababababc", 1}, {"root ::= \"ab\"{2,} \"c\"", "abc", 0},
        {"root ::= \"x\"? \"y\"+ \"z\"*", "yy", 1}, {"root ::= \"x\"? \"y\"+ \"z\"*", "xz", 0},
        {"root ::= [^a-c] .", "d\xe2\x82\xac", 1}, {"root ::= [^a-c] .", "bz", 0},
        {"root ::= [\\x41-\\x43\\u00e9] \"\\t\\\\\\\"\"", "\xc3\xa9\t\\\"", 1},
        {"root ::= [\\x41-\\x43\\u00e9] \"\\t\\\\\\\"\"", "D\t\\\"", 0},
        {"root ::= \"\\U0001F600\" # a comment\n", "\xf0\x9f\x98\x80", 1},
        {"root ::= (\"a\" | \"b\" (\"c\" | ))+\n", "abcbba", 1},
        {"root ::= \"\"", "", 1}, {"root ::= \"\"", "a", 0},
        {"root ::= .+", "\xc3x", 0}, /* a lead byte not continued: not UTF-8 */
        {"root ::= .+", "\xc1\xa9", 0}, {"root ::= .+", "\xe0\x80\xa9", 0}, /* overlong */
        {"root ::= .+", "\xf4\x90\x80\x80", 0}, {"root ::= .+", "\xf4\x8f\xbf\xbf", 1},
        {"root ::= a\r\na ::= \"q\" a | \"!\"", "qqq!", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int got = sentence(cases[i].gbnf, cases[i].text);
        CHECK(got == cases[i].ok);
        if (got != cases[i].ok)
            fprintf(stderr, "  case %zu: '%s' gave %d\n", i, cases[i].text, got);
    }
}

/* A text fed byte by byte, characters split between calls; a refused step leaves the state
 * as it was; complete and finished tell a sentence that may go on from one that may not. */
static void test_state(void)
{
    mvm_grammar *g = NULL;
    CHECK_ST(mvm_grammar_parse("root ::= \"\xe2\x82\xac\" [0-9]{1,2}", &g), MVM_OK);
    if (!g)
        return;
    CHECK(mvm_grammar_accept_text(g, "\xe2", 1) && !mvm_grammar_complete(g));
    CHECK(!mvm_grammar_accept_text(g, "\xe2", 1)); /* not a continuation byte */
    CHECK(!mvm_grammar_accept_text(g, "\x82\xad", 2)); /* U+20AD is not U+20AC */
    CHECK(mvm_grammar_accept_text(g, "\x82", 1) && mvm_grammar_accept_text(g, "\xac", 1));
    CHECK(!mvm_grammar_complete(g) && !mvm_grammar_accept_text(g, "x", 1));
    CHECK(mvm_grammar_accept_text(g, "4", 1));
    CHECK(mvm_grammar_complete(g) && !mvm_grammar_finished(g));
    CHECK(!mvm_grammar_accept_text(g, "23", 2)); /* three digits: refused whole */
    CHECK(mvm_grammar_accept_text(g, "2", 1));
    CHECK(mvm_grammar_complete(g) && mvm_grammar_finished(g));
    CHECK(!mvm_grammar_accept_text(g, "2", 1) && !mvm_grammar_accept_text(g, "a\0b", 3));
    mvm_grammar_free(g);
}

/* A lazy grammar: nothing refused until a trigger word shows outside the quiet block; from
 * the word on, the text is held to the grammar. */
static void test_lazy(void)
{
    const char *gbnf = "root ::= \"<call>\" [0-9]+ \"</call>\"";
    const char *const words[] = {"<call>"};
    const mvm_grammar_triggers plain = {words, 1, NULL, NULL, 0};
    const mvm_grammar_triggers think = {words, 1, "<think>", "</think>", 0};
    const mvm_grammar_triggers inside = {words, 1, "<think>", "</think>", 1};
    mvm_grammar *g = NULL;
    CHECK_ST(mvm_grammar_parse(gbnf, &g), MVM_OK);
    if (!g)
        return;
    CHECK_ST(mvm_grammar_set_lazy(g, &(mvm_grammar_triggers){words, 0, NULL, NULL, 0}),
             MVM_ERR_INVALID);
    CHECK_ST(mvm_grammar_set_lazy(g, &(mvm_grammar_triggers){(const char *[]){""}, 1, NULL,
                                                             NULL, 0}), MVM_ERR_INVALID);
    CHECK_ST(mvm_grammar_set_lazy(g, &(mvm_grammar_triggers){words, 1, "<think>", NULL, 0}),
             MVM_ERR_INVALID);
    CHECK_ST(mvm_grammar_set_lazy(g, &plain), MVM_OK);
    /* anything before the word, which may come split; then the grammar holds */
    CHECK(mvm_grammar_accept_text(g, "x < <<ca", 8));
    CHECK(mvm_grammar_complete(g) && !mvm_grammar_finished(g));
    CHECK(mvm_grammar_accept_text(g, "ll>1", 4) && !mvm_grammar_complete(g));
    CHECK(!mvm_grammar_accept_text(g, "x", 1));
    CHECK(mvm_grammar_accept_text(g, "2</call>", 8) && mvm_grammar_finished(g));
    mvm_grammar_free(g);
    /* a word whose sequel the grammar refuses is passed over */
    CHECK_ST(mvm_grammar_parse(gbnf, &g), MVM_OK);
    CHECK_ST(mvm_grammar_set_lazy(g, &plain), MVM_OK);
    CHECK(mvm_grammar_accept_text(g, "<call>a <call", 13) && mvm_grammar_complete(g));
    CHECK(mvm_grammar_accept_text(g, ">7</call>", 9) && mvm_grammar_finished(g));
    mvm_grammar_free(g);
    /* a word inside the reasoning block is no trigger; the block may start the text */
    for (int k = 0; k < 2; k++) {
        CHECK_ST(mvm_grammar_parse(gbnf, &g), MVM_OK);
        CHECK_ST(mvm_grammar_set_lazy(g, k ? &inside : &think), MVM_OK);
        const char *text = k ? "<call>5" : "a <think> <call>5"; /* a sentence so far */
        CHECK(mvm_grammar_accept_text(g, text, strlen(text)));
        CHECK(mvm_grammar_accept_text(g, "</th", 4) && mvm_grammar_accept_text(g, "ink>", 4));
        CHECK(mvm_grammar_complete(g));
        CHECK(mvm_grammar_accept_text(g, " <call>6", 8) && !mvm_grammar_complete(g));
        CHECK(!mvm_grammar_accept_text(g, "</think>", 8));
        CHECK(mvm_grammar_accept_text(g, "</call>", 7) && mvm_grammar_finished(g));
        mvm_grammar_free(g);
    }
}

/* ---- bound to a vocabulary ------------------------------------------------------------ */

static mvm_engine *engine;
static uint32_t n_vocab;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next_random(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* The reference: whether token id may follow text[0..len) in gbnf, by matching the text
 * and the token's bytes from the start. */
static int reference_allows(const char *gbnf, const char *text, size_t len, int32_t id)
{
    char piece[256];
    size_t n = mvm_engine_token_piece_special(engine, id, piece, sizeof piece);
    mvm_grammar *g = NULL;
    if (mvm_grammar_parse(gbnf, &g) != MVM_OK || !mvm_grammar_accept_text(g, text, len)) {
        mvm_grammar_free(g);
        return -1;
    }
    int ok;
    if (mvm_engine_is_eog(engine, id))
        ok = mvm_grammar_complete(g);
    else
        ok = n > 0 && n <= sizeof piece && !memchr(piece, 0, n) &&
             mvm_grammar_accept_text(g, piece, n);
    mvm_grammar_free(g);
    return ok;
}

/* Random walks through gbnf by allowed tokens: at each state, the filter's verdict on
 * every token equals the reference's. */
static void check_filter(const char *gbnf, int steps)
{
    mvm_grammar *g = NULL;
    CHECK_ST(mvm_grammar_create(engine, gbnf, &g), MVM_OK);
    if (!g)
        return;
    float *l = malloc(n_vocab * sizeof *l);
    char text[4096];
    size_t len = 0;
    for (int s = 0; s < steps; s++) {
        for (uint32_t i = 0; i < n_vocab; i++)
            l[i] = (float)(next_random() % 1000) / 100.0f; /* random, never the mask */
        CHECK_ST(mvm_grammar_apply(g, l, n_vocab), MVM_OK);
        uint32_t allowed[64], n_allowed = 0, wrong = 0;
        for (uint32_t i = 0; i < n_vocab; i++) {
            int want = reference_allows(gbnf, text, len, (int32_t)i);
            wrong += (l[i] > -INFINITY) != want || mvm_grammar_allows(g, (int32_t)i) != want;
            if (want && !mvm_engine_is_eog(engine, (int32_t)i) && n_allowed < 64)
                allowed[n_allowed++] = i;
        }
        CHECK(wrong == 0);
        if (n_allowed == 0)
            break;
        uint32_t t = allowed[next_random() % n_allowed];
        CHECK_ST(mvm_grammar_accept(g, (int32_t)t), MVM_OK);
        len += mvm_engine_token_piece_special(engine, (int32_t)t, text + len,
                                              sizeof text - len - 1);
        if (len > sizeof text - 300)
            break;
    }
    free(l);
    mvm_grammar_free(g);
}

/* Sampling under a grammar: what comes out is a sentence of it (complete when an EOG
 * token ended it), greedy or drawn, and a refused token leaves the grammar where it was. */
static void check_sampling(const char *gbnf, float temperature)
{
    mvm_grammar *g = NULL, *ref = NULL;
    mvm_sampler *s = NULL;
    CHECK_ST(mvm_grammar_create(engine, gbnf, &g), MVM_OK);
    CHECK_ST(mvm_grammar_parse(gbnf, &ref), MVM_OK);
    CHECK_ST(mvm_sampler_create(&(mvm_sampler_params){.temperature = temperature,
                                                      .seed = next_random()},
                                n_vocab, &s), MVM_OK);
    if (!g || !ref || !s)
        goto out;
    CHECK_ST(mvm_sampler_set_grammar(s, g), MVM_OK);
    float *l = malloc(n_vocab * sizeof *l);
    int ended = 0;
    for (int step = 0; step < 60 && !ended; step++) {
        for (uint32_t i = 0; i < n_vocab; i++)
            l[i] = (float)(next_random() % 4000) / 400.0f;
        int32_t t = mvm_sampler_sample(s, l, n_vocab);
        CHECK(t >= 0);
        if (t < 0)
            break;
        char piece[256];
        size_t n = mvm_engine_token_piece_special(engine, t, piece, sizeof piece);
        if (mvm_engine_is_eog(engine, t)) {
            ended = 1;
            CHECK(mvm_grammar_complete(ref));
        } else {
            CHECK(mvm_grammar_accept_text(ref, piece, n));
        }
        ended |= mvm_grammar_finished(g);
    }
    free(l);
    CHECK(mvm_grammar_accept(g, -1) == MVM_ERR_INVALID);
out:
    mvm_sampler_free(s);
    mvm_grammar_free(g);
    mvm_grammar_free(ref);
}

/* A control token is matched by its text, as llama.cpp's grammars match it: a grammar can
 * make a model write its markup ("<|im_start|>", a tool call's opening). */
static void test_control_tokens(void)
{
    int32_t id[2];
    size_t k = 0;
    CHECK_ST(mvm_engine_tokenize(engine, "<|im_start|>", 12, 0, 1, id, 2, &k), MVM_OK);
    CHECK(k == 1);
    CHECK(mvm_engine_token_piece(engine, id[0], NULL, 0) == 0); /* control: no plain text */
    const char *gbnf = "root ::= \"<|im_start|>\" [a-z]+";
    mvm_grammar *g = NULL;
    CHECK_ST(mvm_grammar_create(engine, gbnf, &g), MVM_OK);
    if (g) {
        CHECK(mvm_grammar_allows(g, id[0]));
        CHECK_ST(mvm_grammar_accept(g, id[0]), MVM_OK);
        CHECK(!mvm_grammar_allows(g, id[0]));
    }
    mvm_grammar_free(g);
    check_filter(gbnf, 4);
    /* lazy on that token: every token fits before it, the grammar's after */
    const char *const word[] = {"<|im_start|>"};
    CHECK_ST(mvm_grammar_create(engine, gbnf, &g), MVM_OK);
    CHECK_ST(mvm_grammar_set_lazy(g, &(mvm_grammar_triggers){word, 1, NULL, NULL, 0}), MVM_OK);
    float *l = malloc(n_vocab * sizeof *l);
    if (g && l) {
        for (uint32_t i = 0; i < n_vocab; i++)
            l[i] = 1;
        CHECK_ST(mvm_grammar_apply(g, l, n_vocab), MVM_OK);
        uint32_t masked = 0;
        for (uint32_t i = 0; i < n_vocab; i++)
            masked += !(l[i] > -INFINITY) + !mvm_grammar_allows(g, (int32_t)i);
        CHECK(masked == 0);
        int32_t text[8];
        CHECK_ST(mvm_engine_tokenize(engine, "Hi 42", 5, 0, 0, text, 8, &k), MVM_OK);
        for (size_t i = 0; i < k; i++)
            CHECK_ST(mvm_grammar_accept(g, text[i]), MVM_OK);
        CHECK_ST(mvm_grammar_accept(g, id[0]), MVM_OK);
        CHECK(!mvm_grammar_allows(g, id[0]) && !mvm_grammar_allows(g, text[k - 1]));
        CHECK_ST(mvm_grammar_apply(g, l, n_vocab), MVM_OK);
        CHECK(!(l[id[0]] > -INFINITY));
    }
    free(l);
    mvm_grammar_free(g);
}

static void test_vocabulary(void)
{
    check_filter(json, 24);
    check_filter(list, 12);
    check_filter("root ::= \"caf\xc3\xa9\" [0-9]{1,3} (\" \" [a-z]+)*", 10);
    for (int k = 0; k < 4; k++) {
        check_sampling(json, 0);
        check_sampling(json, 1.0f);
        check_sampling(arithmetic, 0.7f);
        check_sampling("root ::= (\"yes\" | \"no\") \".\"", 1.0f);
    }
    /* a finished grammar with the end masked (--ignore-eos): no token fits, the draw says
     * so */
    mvm_grammar *g = NULL;
    mvm_sampler *s = NULL;
    CHECK_ST(mvm_grammar_create(engine, "root ::= \"\"", &g), MVM_OK);
    CHECK_ST(mvm_sampler_create(&(mvm_sampler_params){.temperature = 0}, n_vocab, &s), MVM_OK);
    if (g && s) {
        float *l = calloc(n_vocab, sizeof *l);
        mvm_engine_mask_eog(engine, l);
        CHECK(mvm_grammar_finished(g));
        CHECK_ST(mvm_sampler_set_grammar(s, g), MVM_OK);
        CHECK(mvm_sampler_sample(s, l, n_vocab) == -1);
        CHECK_ST(mvm_sampler_set_grammar(s, NULL), MVM_OK);
        CHECK(mvm_sampler_sample(s, l, n_vocab) == 0);
        free(l);
    }
    mvm_sampler_free(s);
    mvm_grammar_free(g);
}

int main(void)
{
    RUN(test_parse_errors);
    RUN(test_sentences);
    RUN(test_state);
    RUN(test_lazy);
    if ((engine = tiny_engine())) {
        n_vocab = mvm_engine_n_vocab(engine);
        RUN(test_vocabulary);
        RUN(test_control_tokens);
    }
    mvm_engine_free(engine);
    TEST_END();
}
