/*
 * `moevm serve`'s request reader (tools/serve_api.c) against malformed bodies: what a client
 * can send to /v1/completions, /v1/chat/completions and llama.cpp's /completion, valid
 * requests first, then seeded mutations of them (bytes flipped, spans cut or repeated, JSON
 * fragments and wrong types spliced in, truncation, NUL bytes); the prompt shapes of
 * llama.cpp's server (text, token ids, both mixed) against the tokenizer; several prompts
 * in one request. Every body must give either a request whose fields are in range or a
 * 4xx whose error object is JSON with a one-line message; never a crash,
 * a leak or undefined behaviour (the sanitizer builds run this too). test_serve.py checks
 * the same reader over HTTP for each field it names; this walks the inputs no list names.
 *
 *   test_serve_api MOEVM_CLI WORKDIR
 * (the CLI makes the tiny model whose tokenizer and chat template the reader uses)
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/grammar/grammar.h"
#include "tools/serve_anthropic.h"
#include "tools/serve_api.h"
#include "tools/serve_responses.h"

static const char *const seeds[] = {
    "{\"prompt\": \"Once upon a time\", \"max_tokens\": 8, \"temperature\": 0.5, "
    "\"top_p\": 0.9, \"top_k\": 20, \"min_p\": 0.05, \"seed\": 3, \"stop\": [\"\\n\", \".\"], "
    "\"stream\": true, \"repeat_penalty\": 1.1, \"ignore_eos\": false, \"user\": \"x\"}",
    "{\"model\": \"tiny\", \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi \\u00e9\"}]}], "
    "\"max_tokens\": 4, \"stop\": \"x\", \"logit_bias\": {}, \"logprobs\": true, "
    "\"top_logprobs\": 3}",
    "{\"prompt\": [\"a\"], \"n\": 1}",
    "{\"messages\": [{\"role\": \"user\", \"content\": \"\"}], \"stream\": false}",
    "{\"prompt\": [5, \"Once\", 7], \"n_predict\": 3, \"id_slot\": 1, \"cache_prompt\": false, "
    "\"return_tokens\": true, \"repeat_last_n\": -1, \"n_probs\": 4, \"grammar\": \"\", "
    "\"logit_bias\": [[5, false], [\"a\", 1.5]]}",
    "{\"prompt\": \"x\", \"frequency_penalty\": 0.5, \"presence_penalty\": 0.5, "
    "\"dry_multiplier\": 0.8, \"dry_penalty_last_n\": 32, \"dry_sequence_breakers\": [\"\\n\"], "
    "\"typical_p\": 0.9, \"top_n_sigma\": 1, \"xtc_probability\": 0.5, \"mirostat\": 0, "
    "\"dynatemp_range\": 0.5, \"min_keep\": 1}",
};

/* Fragments a mutation splices in: structure, wrong types, extremes, escapes, field names. */
static const char *const fragments[] = {
    "{",   "}",     "[",     "]",           ",",        ":",           "\"",
    "null", "true", "false", "-1",          "0",        "1e999",       "-1e999",
    "0.5", "4294967296", "-0", "1.0e-400", "\\u0000", "\\ud800",      "\\",
    "\"max_tokens\":", "\"messages\":", "\"prompt\":", "\"stop\":", "\"content\":",
    "\"role\":",        "\"stream\":",   "\"top_k\":",  "\"seed\":", "[[[[[[[[[[[[[[[[",
    "{\"a\":{\"a\":{\"a\":", "[\"\", \"\", \"\", \"\", \"\", \"\"]", "\"\\n\\n\\n\"",
    "{\"type\": \"image_url\"}", "\xff\xfe", "\xc3",
};

static uint64_t rng = 7;
static uint32_t next(uint32_t n) /* 0 .. n - 1 */
{
    return (uint32_t)(check_rng_next(&rng) % (n ? n : 1));
}

/* One to four edits of b (its length in *len, room for cap bytes). */
static void mutate(char *b, size_t *len, size_t cap)
{
    for (uint32_t k = 1 + next(4); k--;) {
        size_t n = *len, at = next((uint32_t)n + 1);
        switch (next(6)) {
        case 0: /* a byte, any value (NUL included) */
            if (n)
                b[next((uint32_t)n)] = (char)next(256);
            break;
        case 1: { /* a span cut */
            size_t cut = next((uint32_t)(n - at) + 1);
            memmove(b + at, b + at + cut, n - at - cut);
            *len = n - cut;
            break;
        }
        case 2: { /* a span repeated */
            size_t span = next((uint32_t)(n - at) + 1);
            if (n + span <= cap) {
                memmove(b + at + span, b + at, n - at);
                *len = n + span;
            }
            break;
        }
        case 3: /* truncated */
            *len = at;
            break;
        default: { /* a fragment spliced in */
            const char *f = fragments[next(sizeof fragments / sizeof *fragments)];
            size_t fl = strlen(f);
            if (n + fl <= cap) {
                memmove(b + at + fl, b + at, n - at);
                memcpy(b + at, f, fl);
                *len = n + fl;
            }
        }
        }
    }
}

enum { N_SEQ = 2 };

/* A request in range, or a 4xx with a JSON error object whose message is one line. */
static int well_formed(serve_req *r, int status, char *error)
{
    if (r) {
        int ok = !error && r->n_prompt > 0 && r->n_stop <= SERVE_MAX_STOP &&
                 r->id_slot >= -1 && r->id_slot < N_SEQ &&
                 r->top_logprobs <= SERVE_MAX_LOGPROBS && (r->logprobs || !r->top_logprobs) &&
                 r->max_tokens >= -1 && r->sp.temperature >= 0 && r->sp.top_k >= 0 &&
                 r->sp.top_p >= 0 && r->sp.top_p <= 1 && r->sp.min_p >= 0 && r->sp.min_p <= 1;
        for (uint32_t i = 0; i < r->n_stop; i++)
            ok &= r->stop[i] != NULL && r->stop[i][0] != 0;
        return ok;
    }
    cJSON *o = error ? cJSON_Parse(error) : NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "error"),
                                                      "message");
    int ok = status >= 400 && status < 500 && cJSON_IsString(m) && m->valuestring[0] &&
             !strchr(m->valuestring, '\n');
    if (!ok)
        fprintf(stderr, "  status %d, error %s\n", status, error ? error : "(none)");
    cJSON_Delete(o);
    return ok;
}

/* The prompt a request read: its tokens' pieces, in order (malloc'd). */
static char *prompt_of(const serve_api *a, const serve_req *r)
{
    char *text = calloc(1, 64 * (size_t)r->n_prompt + 1), *at = text;
    for (uint32_t i = 0; text && i < r->n_prompt; i++)
        at += mvm_engine_token_piece(a->e, r->prompt[i], at, 64);
    return text;
}

/* Content given as text parts reaches the template joined in order, however many parts
 * (each copied once: joined with strcat, an 8 MiB body of short parts took seconds). */
static void test_content_parts(const serve_api *a)
{
    enum { N = 150 };
    char *body = malloc(64 + N * 16), *at = body;
    at += sprintf(at, "{\"messages\": [{\"role\": \"user\", \"content\": [");
    for (int i = 0; i < N; i++) {
        const char *part = i == 0 ? "<" : i == N - 1 ? ">" : "x";
        at += sprintf(at, "%s{\"text\": \"%s\"}", i ? ", " : "", part);
    }
    strcpy(at, "]}]}");
    int status = 0;
    char *error = NULL;
    serve_req *r = serve_api_request(a, SERVE_CHAT, body, strlen(body), &status, &error);
    CHECK(r != NULL);
    char *prompt = r ? prompt_of(a, r) : NULL, want[N + 1];
    memset(want, 'x', N);
    want[0] = '<', want[N - 1] = '>', want[N] = '\0';
    CHECK(prompt && strstr(prompt, want));
    if (!r)
        fprintf(stderr, "  %d parts: %s\n", N, error ? error : "(no error)");
    free(prompt), serve_req_release(r), free(error), free(body);
}

/* The command line's template variables (--reasoning off, --chat-template-kwargs) reach
 * every chat's render, and a request's chat_template_kwargs win over them. */
static void test_default_kwargs(const serve_api *api)
{
    serve_api a = *api;
    cJSON *kw = cJSON_Parse("{\"enable_thinking\": false}");
    a.default_kwargs = kw;
    const char *plain = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}",
               *on = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
                     "\"chat_template_kwargs\": {\"enable_thinking\": true}}";
    char bad[256] = "";
    cJSON *b1 = cJSON_Parse(plain), *b2 = cJSON_Parse(on), *b3 = cJSON_Parse(plain);
    char *off_text = serve_api_chat_text(&a, b1, bad, sizeof bad);
    char *on_text = serve_api_chat_text(&a, b2, bad, sizeof bad);
    char *model_text = serve_api_chat_text(api, b3, bad, sizeof bad);
    /* Qwen3's template writes an empty reasoning block where thinking is off */
    CHECK(off_text && strstr(off_text, "<think>\n\n</think>"));
    CHECK(on_text && model_text && !strcmp(on_text, model_text) &&
          !strstr(on_text, "</think>"));
    CHECK(cJSON_GetArraySize(kw) == 1); /* the command line's own are left as they were */
    free(off_text), free(on_text), free(model_text);
    cJSON_Delete(b1), cJSON_Delete(b2), cJSON_Delete(b3), cJSON_Delete(kw);
}

/* A reply's bytes in the response: invalid UTF-8 and NUL bytes (a byte token <0x00>) each
 * become U+FFFD, and nothing after them is lost. */
static void test_reply_bytes(const serve_api *a)
{
    static const char body[] = "{\"prompt\": \"hi\"}";
    int status = 0;
    char *error = NULL;
    serve_req *r = serve_api_request(a, SERVE_COMPLETION, body, sizeof body - 1, &status,
                                     &error);
    CHECK(r != NULL);
    if (!r)
        return;
    CHECK(serve_req_append(r, "a\0b\xff\xc3", 5) == 0);
    r->finish = "stop";
    char *json = serve_api_response(a, r);
    cJSON *o = json ? cJSON_Parse(json) : NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0), "text");
    static const char want[] = "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD"; /* a, NUL, b, FF, C3 */
    CHECK(cJSON_IsString(t) && !strcmp(t->valuestring, want));
    cJSON_Delete(o), free(json), serve_req_release(r);
}

/* The tokens serve_api_tokens reads from the JSON text `prompt` (NULL when refused, the
 * message in bad). */
static int32_t *shape(const serve_api *a, const char *prompt, size_t *n, char *bad)
{
    cJSON *p = cJSON_Parse(prompt);
    int32_t *t = NULL;
    bad[0] = '\0';
    if (serve_api_tokens(a, p, "'prompt'", 1, 1, &t, n, bad, 300))
        t = NULL;
    cJSON_Delete(p);
    return t;
}

/* llama.cpp's server's prompt shapes, over a vocabulary that adds a BOS (the tiny llama):
 * text gets the BOS, ids are taken as they are, a mixed list gets the BOS only where it
 * starts with text (tokenize_mixed); control-token texts are parsed; several prompts, ids
 * outside the vocabulary and other types are refused naming the field. */
static void test_prompt_shapes(const char *cli, const char *work)
{
    char model[512], cmd[1400];
    snprintf(model, sizeof model, "%s/serve-api-llama.gguf", work);
    snprintf(cmd, sizeof cmd, "'%s' mkmodel --arch llama -o '%s' >/dev/null", cli, model);
    CHECK(system(cmd) == 0);
    mvm_engine *e = NULL;
    CHECK_ST(mvm_engine_load(&(mvm_engine_params){.model = model, .n_ctx = 64}, &e), MVM_OK);
    if (!e)
        return;
    const serve_api a = {.e = e, .model_id = "tiny", .n_ctx = 64, .n_seq = 1,
                         .n_vocab = mvm_engine_n_vocab(e)};
    int32_t text[64], with_bos[64];
    size_t nt = 0, nb = 0, n = 0;
    CHECK_ST(mvm_engine_tokenize(e, "Once upon", 9, 0, 1, text, 64, &nt), MVM_OK);
    CHECK_ST(mvm_engine_tokenize(e, "Once upon", 9, 1, 1, with_bos, 64, &nb), MVM_OK);
    CHECK(nb == nt + 1); /* the vocabulary adds a BOS: the shapes below can tell */
    char bad[300];
    int32_t *t = shape(&a, "\"Once upon\"", &n, bad);
    CHECK(t && n == nb && !memcmp(t, with_bos, nb * sizeof *t));
    free(t);
    t = shape(&a, "[\"Once upon\"]", &n, bad);
    CHECK(t && n == nb && !memcmp(t, with_bos, nb * sizeof *t));
    free(t);
    t = shape(&a, "[\"Once upon\", 7]", &n, bad);
    CHECK(t && n == nb + 1 && !memcmp(t, with_bos, nb * sizeof *t) && t[nb] == 7);
    free(t);
    t = shape(&a, "[7, \"Once upon\", 9]", &n, bad);
    CHECK(t && n == nt + 2 && t[0] == 7 && !memcmp(t + 1, text, nt * sizeof *t) &&
          t[nt + 1] == 9);
    free(t);
    t = shape(&a, "[3, 4, 5]", &n, bad);
    CHECK(t && n == 3 && t[0] == 3 && t[2] == 5);
    free(t);
    int32_t im[8];
    size_t ni = 0;
    t = shape(&a, "\"<s>\"", &n, bad); /* the BOS's text parsed: BOS, BOS */
    CHECK_ST(mvm_engine_tokenize(e, "<s>", 3, 1, 1, im, 8, &ni), MVM_OK);
    CHECK(t && n == 2 && ni == 2 && t[0] == im[0] && t[1] == im[0]);
    free(t);
    static const struct { const char *prompt, *says; } refused[] = {
        {"[\"a\", \"b\"]", "several prompts"}, {"[[1, 2], [3]]", "several prompts"},
        {"[1, {\"prompt_string\": \"a\"}]", "several prompts"},
        {"[1, 1e9]", "'prompt'[1]: 1e+09 is not a token"}, {"[-1]", "is not a token"},
        {"[1.5]", "is not a token"}, {"[true]", "must be a string, an array of token ids"},
        {"5", "must be a string"}, {"null", "must be a string"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        t = shape(&a, refused[i].prompt, &n, bad);
        CHECK(!t && strstr(bad, refused[i].says) && !strchr(bad, '\n'));
        if (t || !strstr(bad, refused[i].says))
            fprintf(stderr, "  prompt %s: %s\n", refused[i].prompt, t ? "read" : bad);
        free(t);
    }
    mvm_engine_free(e);
}

/* Several prompts in a completion: a request each, in order, with the same sampling and
 * stops of their own; the prompts' field named by index in an error; a stream, a chat's
 * messages, or more than max prompts refused. */
static void test_several_prompts(const serve_api *a)
{
    static const char body[] = "{\"prompt\": [\"Once upon\", [5, 6, 7], \"a\"], \"top_k\": 7, "
                               "\"stop\": [\"x\"], \"n_predict\": 4}";
    serve_req *r[4] = {0};
    int status = 0;
    char *error = NULL;
    uint32_t n = serve_api_requests(a, SERVE_LLAMA, body, sizeof body - 1, r, 4, &status, &error);
    CHECK(n == 3 && !error);
    for (uint32_t i = 0; i < n; i++)
        CHECK(r[i]->sp.top_k == 7 && r[i]->max_tokens == 4 && r[i]->n_stop == 1 &&
              !strcmp(r[i]->stop[0], "x") && (i == 0 || r[i]->stop[0] != r[0]->stop[0]) &&
              (i == 0 || strcmp(r[i]->id, r[0]->id) != 0));
    if (n == 3)
        CHECK(r[1]->n_prompt == 3 && r[1]->prompt[0] == 5 && r[1]->prompt[2] == 7 &&
              r[2]->n_prompt >= 1 && r[0]->n_prompt > r[2]->n_prompt);
    for (uint32_t i = 0; i < n; i++)
        serve_req_release(r[i]);
    static const struct { const char *body; const char *says; } bad[] = {
        {"{\"prompt\": [\"a\", \"b\", \"c\"]}", "lists 3 prompts; at most 2"},
        {"{\"prompt\": [\"a\", \"b\"], \"stream\": true}", "a stream takes one"},
        {"{\"prompt\": [\"a\", [1, 99999]]}", "'prompt'[1][1]: 99999 is not a token"},
        {"{\"prompt\": [\"a\", \"\"]}", "'prompt'[1] is empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        error = NULL;
        n = serve_api_requests(a, SERVE_COMPLETION, bad[i].body, strlen(bad[i].body), r, 2,
                               &status, &error);
        CHECK(n == 0 && status == 400 && error && strstr(error, bad[i].says));
        if (n || !error || !strstr(error, bad[i].says))
            fprintf(stderr, "  %s: %u requests, %s\n", bad[i].body, n, error ? error : "-");
        free(error);
    }
    /* a chat's "prompt" is no list of prompts: its messages are the one */
    static const char chat[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                               "\"prompt\": [\"a\", \"b\"]}";
    n = serve_api_requests(a, SERVE_CHAT, chat, sizeof chat - 1, r, 4, &status, &error);
    CHECK(n == 1);
    if (n)
        serve_req_release(r[0]);
}

/* logit_bias in OpenAI's shape and llama.cpp's: ids, texts (each of their tokens), false;
 * a request's n replies each carry it; a token outside the vocabulary or a bad shape is a
 * 400 naming the field. */
static void test_logit_bias(const serve_api *a)
{
    int32_t once[8];
    size_t n_once = 0;
    CHECK_ST(mvm_engine_tokenize(a->e, "Once upon", 9, 0, 0, once, 8, &n_once), MVM_OK);
    static const char obj[] = "{\"prompt\": \"x\", \"n\": 2, \"logit_bias\": {\"5\": 2.5, "
                              "\"Once upon\": -1}}";
    serve_req *r[2] = {0};
    int status = 0;
    char *error = NULL;
    uint32_t n = serve_api_requests(a, SERVE_COMPLETION, obj, sizeof obj - 1, r, 2, &status,
                                    &error);
    CHECK(n == 2 && !error);
    for (uint32_t i = 0; i < n; i++) {
        CHECK(r[i]->n_bias == 1 + n_once && r[i]->bias[0].id == 5 &&
              r[i]->bias[0].bias == 2.5f && (i == 0 || r[i]->bias != r[0]->bias));
        for (size_t k = 0; k < n_once && r[i]->n_bias == 1 + n_once; k++)
            CHECK(r[i]->bias[1 + k].id == once[k] && r[i]->bias[1 + k].bias == -1);
    }
    for (uint32_t i = 0; i < n; i++)
        serve_req_release(r[i]);
    static const char arr[] = "{\"prompt\": \"x\", \"logit_bias\": [[7, false], "
                              "[\"Once upon\", 3]]}";
    serve_req *q = serve_api_request(a, SERVE_LLAMA, arr, sizeof arr - 1, &status, &error);
    CHECK(q && q->n_bias == 1 + n_once && q->bias[0].id == 7 && isinf(q->bias[0].bias) &&
          q->bias[0].bias < 0 && q->bias[1].id == once[0] && q->bias[1].bias == 3);
    serve_req_release(q);
    static const struct { const char *body; const char *says; } bad[] = {
        {"{\"prompt\": \"x\", \"logit_bias\": {\"99999999\": 1}}", "token 99999999 is not"},
        {"{\"prompt\": \"x\", \"logit_bias\": [[-3, 1]]}", "token -3 is not"},
        {"{\"prompt\": \"x\", \"logit_bias\": [[1.5, 1]]}", "token 1.5 is not"},
        {"{\"prompt\": \"x\", \"logit_bias\": {\"5\": \"up\"}}", "'logit_bias' must be"},
        {"{\"prompt\": \"x\", \"logit_bias\": [[5]]}", "'logit_bias' must be"},
        {"{\"prompt\": \"x\", \"logit_bias\": [[5, true]]}", "'logit_bias' must be"},
        {"{\"prompt\": \"x\", \"logit_bias\": 3}", "'logit_bias' must be"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        error = NULL;
        q = serve_api_request(a, SERVE_COMPLETION, bad[i].body, strlen(bad[i].body), &status,
                              &error);
        CHECK(!q && status == 400 && error && strstr(error, bad[i].says));
        if (q || !error || !strstr(error, bad[i].says))
            fprintf(stderr, "  %s: %s\n", bad[i].body, error ? error : "-");
        serve_req_release(q), free(error);
    }
}

/* An error message stays one line when what it quotes holds a newline (a schema's
 * property name here; the fuzzer found it): the character written as an escape. */
static void test_error_one_line(const serve_api *a)
{
    static const char body[] = "{\"prompt\": \"x\", \"json_schema\": {\"type\": \"object\", "
                               "\"properties\": {\"a\\nb\": {\"type\": \"frob\"}}}}";
    int status = 0;
    char *error = NULL;
    serve_req *r = serve_api_request(a, SERVE_COMPLETION, body, sizeof body - 1, &status, &error);
    cJSON *o = error ? cJSON_Parse(error) : NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "error"),
                                                      "message");
    CHECK(!r && status == 400 && cJSON_IsString(m) && !strchr(m->valuestring, '\n'));
    if (cJSON_IsString(m))
        fprintf(stderr, "  %s\n", m->valuestring);
    cJSON_Delete(o);
    free(error);
}

/* llama.cpp's further sampling fields into the request's sampler parameters; DRY's own
 * breakers made where DRY is on (shared by a request's replies, each keeping the first
 * alive), not where it is off; each bad value a 400 naming its field. */
static void test_sampling_fields(const serve_api *a)
{
    static const char all[] =
        "{\"prompt\": \"x\", \"n\": 2, \"frequency_penalty\": 0.5, \"presence_penalty\": -0.25, "
        "\"dry_multiplier\": 0.8, \"dry_base\": 0.5, \"dry_allowed_length\": 3, "
        "\"dry_penalty_last_n\": -1, \"dry_sequence_breakers\": [\"\\n\", \"ab\"], "
        "\"top_n_sigma\": 1.5, \"typical_p\": 0.9, \"xtc_probability\": 0.5, "
        "\"xtc_threshold\": 0.2, \"dynatemp_range\": 0.3, \"dynatemp_exponent\": 2, "
        "\"mirostat\": 2, \"mirostat_tau\": 4, \"mirostat_eta\": 0.2, \"min_keep\": 2}";
    serve_req *r[2] = {0};
    int status = 0;
    char *error = NULL;
    CHECK(serve_api_requests(a, SERVE_COMPLETION, all, sizeof all - 1, r, 2, &status, &error) ==
          2);
    for (int i = 0; i < 2 && r[1]; i++) {
        const mvm_sampler_params *p = &r[i]->sp;
        CHECK(p->frequency_penalty == 0.5f && p->presence_penalty == -0.25f &&
              p->dry_multiplier == 0.8f && p->dry_base == a->defaults.dry_base &&
              p->dry_allowed_length == 3 && p->dry_last_n == a->n_ctx &&
              p->top_n_sigma == 1.5f && p->typical_p == 0.9f && p->xtc_probability == 0.5f &&
              p->xtc_threshold == 0.2f && p->dynatemp_range == 0.3f &&
              p->dynatemp_exponent == 2 && p->mirostat == 2 && p->mirostat_tau == 4 &&
              p->mirostat_eta == 0.2f && p->min_keep == 2);
        CHECK(!r[i]->own_breakers && r[i]->breakers == a->default_breakers); /* Mirostat */
    }
    serve_req_release(r[0]), serve_req_release(r[1]);
    /* DRY on: its breakers made once, the second reply reading the first's */
    static const char dry[] = "{\"prompt\": \"x\", \"n\": 2, \"dry_multiplier\": 0.8, "
                              "\"dry_penalty_last_n\": 64, "
                              "\"dry_sequence_breakers\": [\":\", \"ab\"]}";
    r[0] = r[1] = NULL;
    CHECK(serve_api_requests(a, SERVE_COMPLETION, dry, sizeof dry - 1, r, 2, &status, &error) ==
          2);
    CHECK(r[0] && r[1] && r[0]->own_breakers && r[0]->breakers == r[0]->own_breakers &&
          r[1]->breakers == r[0]->own_breakers && r[1]->owner == r[0] && !r[1]->own_breakers);
    serve_req_release(r[0]); /* r[1] still reads them (ASan would see otherwise) */
    CHECK(r[1] && r[1]->breakers && r[1]->breakers == r[1]->owner->own_breakers);
    serve_req_release(r[1]);
    /* samplers: llama.cpp's names, their other spellings, or letters */
    static const struct { const char *body; uint8_t order[4]; } orders[] = {
        {"{\"prompt\": \"x\", \"samplers\": [\"top_k\", \"Temp\", \"nucleus\", \"typ-p\"]}",
         {MVM_SAMPLER_TOP_K, MVM_SAMPLER_TEMPERATURE, MVM_SAMPLER_TOP_P, MVM_SAMPLER_TYPICAL}},
        {"{\"prompt\": \"x\", \"samplers\": \"edkt\"}",
         {MVM_SAMPLER_PENALTIES, MVM_SAMPLER_DRY, MVM_SAMPLER_TOP_K, MVM_SAMPLER_TEMPERATURE}},
        {"{\"prompt\": \"x\", \"samplers\": [\"minp\", \"xtc\", \"top-n-sigma\"]}",
         {MVM_SAMPLER_MIN_P, MVM_SAMPLER_XTC, MVM_SAMPLER_TOP_N_SIGMA, 0}},
    };
    for (size_t i = 0; i < sizeof orders / sizeof *orders; i++) {
        error = NULL;
        serve_req *q = serve_api_request(a, SERVE_COMPLETION, orders[i].body,
                                         strlen(orders[i].body), &status, &error);
        CHECK(q && !memcmp(q->sp.order, orders[i].order, 4) && !q->sp.order[4]);
        serve_req_release(q), free(error);
    }
    static const struct { const char *body; const char *says; } bad[] = {
        {"{\"prompt\": \"x\", \"samplers\": [\"foo\"]}", "'foo' is not a sampler"},
        {"{\"prompt\": \"x\", \"samplers\": [\"infill\"]}", "not supported by moevm"},
        {"{\"prompt\": \"x\", \"samplers\": []}", "0 samplers"},
        {"{\"prompt\": \"x\", \"samplers\": \"kq\"}", "'q' is not a sampler's letter"},
        {"{\"prompt\": \"x\", \"samplers\": [1]}", "'samplers' must be"},
        {"{\"prompt\": \"x\", \"samplers\": [\"k\", \"k\", \"k\", \"k\", \"k\", \"k\", \"k\", "
         "\"k\", \"k\", \"k\", \"k\", \"k\", \"k\", \"k\", \"k\", \"k\", \"k\"]}",
         "'samplers' must be"},
        {"{\"prompt\": \"x\", \"mirostat\": 3}", "'mirostat'"},
        {"{\"prompt\": \"x\", \"t_max_predict_ms\": \"soon\"}", "'t_max_predict_ms'"},
        {"{\"prompt\": \"x\", \"typical_p\": 2}", "'typical_p'"},
        {"{\"prompt\": \"x\", \"xtc_threshold\": -1}", "'xtc_threshold'"},
        {"{\"prompt\": \"x\", \"frequency_penalty\": \"a\"}", "'frequency_penalty'"},
        {"{\"prompt\": \"x\", \"dry_penalty_last_n\": -2}", "'dry_penalty_last_n'"},
        {"{\"prompt\": \"x\", \"dry_sequence_breakers\": []}", "'dry_sequence_breakers'"},
        {"{\"prompt\": \"x\", \"dry_sequence_breakers\": [\"\"]}", "'dry_sequence_breakers'"},
        {"{\"prompt\": \"x\", \"dry_sequence_breakers\": \":\"}", "'dry_sequence_breakers'"},
        {"{\"prompt\": \"x\", \"dry_sequence_breakers\": [1]}", "'dry_sequence_breakers'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        error = NULL;
        serve_req *q = serve_api_request(a, SERVE_COMPLETION, bad[i].body, strlen(bad[i].body),
                                         &status, &error);
        CHECK(!q && status == 400 && error && strstr(error, bad[i].says));
        if (q || !error || !strstr(error, bad[i].says))
            fprintf(stderr, "  %s: %s\n", bad[i].body, error ? error : "-");
        serve_req_release(q), free(error);
    }
}

/* Appends v (a string) to *acc (malloc'd). */
static void append(char **acc, const cJSON *v)
{
    const size_t n = *acc ? strlen(*acc) : 0, k = cJSON_IsString(v) ? strlen(v->valuestring) : 0;
    char *grown = realloc(*acc, n + k + 1);
    if (grown)
        memcpy(grown + n, k ? v->valuestring : "", k + 1), *acc = grown;
}

/* A held call streamed as its text grows, a byte at a time (coarse: in two deltas, the second
 * holding the arguments' end, the block's and the text after it): the chat's deltas begin
 * it with its id and name, then bring its arguments in pieces that add up to the whole
 * message's; Anthropic's input_json_deltas (each into the tool_use block) and the Responses
 * API's argument deltas add up to them too, the text after the call a block and an item of
 * its own. */
static void streamed_pieces(serve_req *r, int coarse)
{
    static const char text[] = "Let me see.\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
                               "{\"n\": 31415}}\n</tool_call>\nDone.";
    const size_t len = sizeof text - 1;
    serve_sent sent = {0};
    serve_anthropic_stream an = {0};
    serve_responses_stream rs = {0};
    char *args = NULL, *content = NULL, *events = NULL;
    int pieces = 0, begun = 0;
    for (size_t n = coarse ? len - 24 : 0; n <= len; n += coarse ? 24 : 1) {
        cJSON *d = serve_tools_delta(r, text, n, n == len, &sent);
        const cJSON *c;
        append(&content, cJSON_GetObjectItemCaseSensitive(d, "content"));
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(d, "tool_calls"))
        {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
            const int first = cJSON_GetObjectItemCaseSensitive(c, "id") != NULL;
            CHECK(cJSON_GetObjectItemCaseSensitive(c, "index")->valueint == 0);
            CHECK(first == !begun && (!first || !strcmp(cJSON_GetStringValue(
                      cJSON_GetObjectItemCaseSensitive(fn, "name")), "f")));
            begun = 1, pieces++;
            append(&args, cJSON_GetObjectItemCaseSensitive(fn, "arguments"));
        }
        char *a = d ? serve_anthropic_delta(&an, d) : NULL;
        char *e = d ? serve_responses_delta(r, &rs, d) : NULL;
        cJSON *as = cJSON_CreateString(a ? a : ""), *es = cJSON_CreateString(e ? e : "");
        append(&events, as), append(&events, es);
        cJSON_Delete(as), cJSON_Delete(es), free(a), free(e), cJSON_Delete(d);
    }
    cJSON *m = serve_tools_message(r, text, len);
    const char *whole = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(
            cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), 0), "function"), "arguments"));
    CHECK(whole && args && !strcmp(args, whole) && !strcmp(whole, "{\"n\":31415}"));
    CHECK(content && !strcmp(content, cJSON_GetStringValue(
                                          cJSON_GetObjectItemCaseSensitive(m, "content"))));
    CHECK(coarse ? pieces == 2 : pieces >= 3);
    /* the other APIs' events carry the same pieces, each into its call's block or item */
    char *anth = NULL, *resp = NULL;
    int tool_use[8] = {0}, misplaced = 0; /* by block index */
    for (const char *at = events; at && (at = strstr(at, "data: ")); at++) {
        const char *eol = strchr(at, '\n');
        cJSON *o = cJSON_ParseWithLength(at + 6, eol ? (size_t)(eol - at - 6) : strlen(at + 6));
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "type"));
        const cJSON *delta = cJSON_GetObjectItemCaseSensitive(o, "delta");
        const int index = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "index"));
        if (type && !strcmp(type, "content_block_start") && index < 8)
            tool_use[index] = !strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                                          cJSON_GetObjectItemCaseSensitive(o, "content_block"),
                                          "type")), "tool_use");
        if (type && !strcmp(type, "content_block_delta")) {
            const cJSON *piece = cJSON_GetObjectItemCaseSensitive(delta, "partial_json");
            misplaced += index >= 8 || (piece != NULL) != tool_use[index];
            append(&anth, piece);
        }
        if (type && !strcmp(type, "response.function_call_arguments.delta"))
            append(&resp, delta);
        cJSON_Delete(o);
    }
    CHECK(anth && resp && !strcmp(anth, whole) && !strcmp(resp, whole) && !misplaced);
    CHECK(an.open == 2 && an.calls == 1 && an.blocks == 2 && rs.open == 2 && rs.items == 2);
    serve_responses_stream_free(&rs);
    cJSON_Delete(m);
    free(args), free(content), free(events), free(anth), free(resp);
}

/* A chat's tools under "auto": a lazy grammar lets the reply be anything until the
 * syntax's call begins (this preset's: Hermes), then holds the call to the tools; "none"
 * and a request's own grammar make none, "required" one that is not lazy. */
static void test_lazy_tools(const serve_api *api)
{
    serve_api wide = *api; /* the tools' description is longer than the other prompts */
    wide.n_ctx = 1024;
    const serve_api *a = &wide;
    static const char *const choice[] = {"", ", \"tool_choice\": \"none\"",
                                         ", \"tool_choice\": \"required\"",
                                         ", \"grammar\": \"root ::= [a-z]+\""};
    for (size_t i = 0; i < sizeof choice / sizeof *choice; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": "
                 "\"hi\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
                 "\"f\", \"parameters\": {\"type\": \"object\", \"properties\": {\"n\": "
                 "{\"type\": \"integer\"}}, \"required\": [\"n\"]}}}]%s}", choice[i]);
        int status = 0;
        char *error = NULL;
        serve_req *r = serve_api_request(a, SERVE_CHAT, body, strlen(body), &status, &error);
        CHECK(r && !error);
        if (!r) {
            fprintf(stderr, "  %s: %s\n", body, error ? error : "-");
            free(error);
            continue;
        }
        CHECK(r->lazy_call == (i == 0) && (r->grammar != NULL) == (i != 1));
        CHECK(r->reply.held == (i == 0 || i == 2)); /* a tool grammar holds the calls */
        static const char call[] = "\n{\"name\": \"f\", \"arguments\": {\"n\": 3}}\n"
                                   "</tool_call>";
        if (i == 0) {
            CHECK(mvm_grammar_accept_text(r->grammar, "Let me see. <tool", 17));
            CHECK(mvm_grammar_accept_text(r->grammar, "_call>", 6));
            CHECK(!mvm_grammar_accept_text(r->grammar, "\n{\"name\": \"g\"", 14));
            CHECK(mvm_grammar_accept_text(r->grammar, call, sizeof call - 1) &&
                  mvm_grammar_finished(r->grammar));
        }
        if (i == 2)
            CHECK(!mvm_grammar_accept_text(r->grammar, "Let me", 6));
        if (i == 0)
            streamed_pieces(r, 0), streamed_pieces(r, 1);
        serve_req_release(r);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s MOEVM_CLI WORKDIR\n", argv[0]);
        return 2;
    }
    char model[512], cmd[1400];
    snprintf(model, sizeof model, "%s/serve-api-tiny.gguf", argv[2]);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && '%s' mkmodel --arch qwen3moe -o '%s' >/dev/null",
             argv[2], argv[1], model);
    CHECK(system(cmd) == 0);
    mvm_engine *e = NULL;
    CHECK_ST(mvm_engine_load(&(mvm_engine_params){.model = model, .n_ctx = 256}, &e), MVM_OK);
    if (!e)
        TEST_END();
    const serve_api a = {.e = e, .model_id = "tiny", .defaults = {.temperature = 0.8f, .top_p = 1},
                         .default_max_tokens = -1, .n_ctx = 256, .n_seq = N_SEQ,
                         .n_vocab = mvm_engine_n_vocab(e), .n_batch = 64};

    /* the seeds are valid requests, with the fields they give */
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) {
        int status = 0;
        char *error = NULL;
        const enum serve_kind kind = strstr(seeds[i], "messages") ? SERVE_CHAT
                                     : strstr(seeds[i], "n_predict") ? SERVE_LLAMA
                                                                     : SERVE_COMPLETION;
        serve_req *r = serve_api_request(&a, kind, seeds[i], strlen(seeds[i]), &status, &error);
        CHECK(r && well_formed(r, status, error));
        if (r && i == 0)
            CHECK(r->max_tokens == 8 && r->stream && r->n_stop == 2 && r->sp.top_k == 20 &&
                  r->sp.seed == 3 && !strcmp(r->stop[0], "\n") && r->cache_prompt &&
                  r->id_slot == -1 && r->sp.repeat_last_n == 0);
        if (r && kind == SERVE_LLAMA)
            CHECK(r->kind == SERVE_LLAMA && r->max_tokens == 3 && r->id_slot == 1 &&
                  !r->cache_prompt && r->return_tokens && r->sp.repeat_last_n == 256 &&
                  r->n_prompt >= 3 && r->prompt[0] == 5 && r->prompt[r->n_prompt - 1] == 7 &&
                  r->logprobs && r->top_logprobs == 4);
        if (r && kind == SERVE_CHAT && i == 1)
            CHECK(r->logprobs && r->top_logprobs == 3);
        if (!r)
            fprintf(stderr, "  seed %zu: %s\n", i, error ? error : "(no error)");
        serve_req_release(r), free(error);
    }

    test_content_parts(&a);
    test_default_kwargs(&a);
    test_reply_bytes(&a);
    test_prompt_shapes(argv[1], argv[2]);
    test_several_prompts(&a);
    test_logit_bias(&a);
    test_sampling_fields(&a);
    test_error_one_line(&a);
    test_lazy_tools(&a);

    /* their mutations, each body read as every route */
    enum { ROUNDS = 20000, CAP = 4096 };
    char *b = malloc(CAP);
    int bad = 0, accepted = 0;
    for (int round = 0; b && round < ROUNDS && bad < 5; round++) {
        const char *s = seeds[next(sizeof seeds / sizeof *seeds)];
        size_t len = strlen(s);
        memcpy(b, s, len);
        mutate(b, &len, CAP);
        for (int kind = SERVE_COMPLETION; kind <= SERVE_LLAMA; kind++) {
            int status = 0;
            char *error = NULL;
            serve_req *r = serve_api_request(&a, (enum serve_kind)kind, b, len, &status, &error);
            accepted += r != NULL;
            if (!well_formed(r, status, error)) {
                fprintf(stderr, "  round %d (kind %d): body %.*s\n", round, kind, (int)len, b);
                bad++;
            }
            serve_req_release(r), free(error);
        }
    }
    CHECK(bad == 0);
    /* the mutations must not all be refused at the first byte: some stay requests */
    CHECK(accepted > ROUNDS / 20);
    printf("  %d mutated bodies read as every route, %d accepted\n", ROUNDS, accepted);
    free(b);
    mvm_engine_free(e);
    TEST_END();
}
