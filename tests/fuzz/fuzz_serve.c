/*
 * libFuzzer target for `moevm serve`'s requests (tools/serve_api.c, tools/serve_llama.c):
 * the body of a POST to /v1/completions, /v1/chat/completions or llama.cpp's /completion,
 * which comes from the network, read as the server reads it, then answered as the server
 * answers it; for /completion's route, the same body also to /tokenize, /detokenize and
 * /apply-template; a prompt may list several (up to 4 here: a request each). The first
 * byte's bits 0-1 pick the route: /v1/completions, chat, llama.cpp's /completion or its
 * /infill (a code model's prompt of prefix, suffix and extra files); OpenAI's n too; bits 2-7 how many of the last bytes are the reply's text instead
 * (a model's bytes, which need not be UTF-8); the rest is the body. Promises (a broken one
 * traps, so libFuzzer reports it like a crash):
 *   - a request is read, or refused with status 400 and an error object that parses as
 *     JSON; never both, never neither;
 *   - a request read keeps its fields in their ranges (sampling, max_tokens, stops, slot,
 *     log-probabilities);
 *   - the whole response and every stream chunk of the reply parse as JSON, their text is
 *     the reply's bytes made valid UTF-8 (tools/cli_utf8.c), and nothing is cut;
 *   - /tokenize, /detokenize and /apply-template answer a JSON object: their result with
 *     200, or an error object with a one-line message and 400;
 *   - a request read has sampling parameters the sampler takes, and DRY's breakers (its own
 *     where it gives them and DRY is on) of tokens of the vocabulary (serve_sampling.c);
 *   - a request read that names a grammar, a JSON Schema or a response_format with one, or
 *     forces a tool call, has a grammar of its own (tools/serve_grammar.c, serve_tools.c);
 *   - a chat's reply read into its parts (the syntax picked by the input's length): its
 *     message well formed (content, reasoning, calls with ids and JSON-object arguments,
 *     "tool_calls" the finish where it has calls), and its stream's deltas, the reply cut
 *     anywhere, adding up to that message (a call's arguments in pieces where the grammar
 *     holds the calls and lets the reply through).
 * The engine is a double here (mvm_engine_tokenize: a token a byte; mvm_engine_chat_format:
 * "role: content" lines, refusing what a template could not render): the tokenizers and
 * the chat templates have their own targets (fuzz_inputs.c), this one is the JSON around
 * them. Built and run by tests/fuzz/run_fuzz.sh.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat/json_prefix.h"
#include "engine/forward/sampler.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_impl.h"
#include "tools/cli.h"
#include "tools/serve_anthropic.h"
#include "tools/serve_responses.h"
#include "tools/serve_api.h"
#include "vmm/error.h"

static void require(int cond)
{
    if (!cond)
        __builtin_trap();
}

/* ---- the engine's double ------------------------------------------------------------- */

struct mvm_engine {
    int unused;
};

mvm_status mvm_engine_tokenize(const mvm_engine *e, const char *text, size_t len,
                               int add_special, int parse_special, int32_t *out, size_t cap,
                               size_t *n)
{
    (void)e, (void)parse_special;
    *n = 0;
    for (size_t i = 0; i < len;) { /* what a real vocabulary refuses: text that is not UTF-8 */
        size_t k = mvm_cli_utf8_char((const unsigned char *)text + i, len - i);
        if (!k)
            return mvm_fail(MVM_ERR_INVALID, "byte %zu is not UTF-8", i);
        i += k;
    }
    if (add_special && *n < cap)
        out[(*n)++] = 1; /* BOS */
    for (size_t i = 0; i < len; i++) {
        if (*n == cap)
            return mvm_fail(MVM_ERR_RANGE, "more than %zu tokens", cap);
        out[(*n)++] = 2 + (unsigned char)text[i];
    }
    return MVM_OK;
}

/* Token 1 is the BOS (a control token: no bytes), 2 + b the byte b. */
enum { N_VOCAB = 258 };

size_t mvm_engine_token_piece(const mvm_engine *e, int32_t id, char *buf, size_t cap)
{
    (void)e;
    if (id < 2 || id >= N_VOCAB)
        return 0;
    if (cap)
        buf[0] = (char)(id - 2);
    return 1;
}

/* no control tokens: the same */
size_t mvm_engine_token_piece_special(const mvm_engine *e, int32_t id, char *buf, size_t cap)
{
    return mvm_engine_token_piece(e, id, buf, cap);
}

uint32_t mvm_engine_n_vocab(const mvm_engine *e)
{
    (void)e;
    return N_VOCAB;
}

int mvm_engine_is_eog(const mvm_engine *e, int32_t id)
{
    (void)e;
    return id == 0; /* token 0: the end of a reply */
}

/* Grammars (tools/serve_grammar.c) over this vocabulary, decoded once as the engine does. */
mvm_status mvm_grammar_create(const mvm_engine *e, const char *gbnf, mvm_grammar **out)
{
    static gr_vocab *v;
    mvm_status st = v ? MVM_OK : gr_vocab_build(e, &v);
    *out = NULL;
    if (st == MVM_OK && (st = mvm_grammar_parse(gbnf, out)) == MVM_OK)
        gr_bind(*out, v);
    return st;
}

const char *mvm_engine_token_text(const mvm_engine *e, int32_t id)
{
    (void)e;
    return id == 1 ? "<s>" : id >= 0 && id < N_VOCAB ? "x" : NULL;
}

/* A code model's: the three FIM tokens and a file separator (no repository token). */
void mvm_engine_get_fim(const mvm_engine *e, mvm_engine_fim *out)
{
    (void)e;
    *out = (mvm_engine_fim){.pre = 250, .suf = 251, .mid = 252, .pad = -1, .rep = -1,
                            .sep = 253};
}

/* The template's source picks the syntax a chat's reply is read in
 * (engine/chat/chat_reply.h): each input gets one of them, by its length. */
static const char *const syntax_templates[] = {
    "{{ messages }}", "<|channel|>", "<minimax:tool_call>", "<arg_key>",
    "<tool_call><function=<parameter=", "<tool_call>", "tool▁call▁begin ```json",
    "tool▁call▁begin", "<|tool_call_begin|>", "[TOOL_CALLS]"};
static const char *fuzz_template = "{{ messages }}";

/* the double's vocabulary has no control tokens to keep (tools/cli_engine.c) */
uint32_t mvm_cli_reply_markers(const mvm_engine *e, int32_t *ids, uint32_t cap)
{
    (void)e, (void)ids, (void)cap;
    return 0;
}

const char *mvm_engine_chat_template(const mvm_engine *e)
{
    (void)e;
    return fuzz_template;
}

/* The messages JSON that the server made must parse; a message that is not an object with
 * a string role and a string or null content is what a template refuses. */
mvm_status mvm_engine_chat_format(const mvm_engine *e, const char *messages_json,
                                  const char *extra_json, int add_generation_prompt,
                                  char **out)
{
    (void)e, (void)add_generation_prompt;
    *out = NULL;
    cJSON *msgs = cJSON_Parse(messages_json);
    require(cJSON_IsArray(msgs));
    if (extra_json) {
        cJSON *extra = cJSON_Parse(extra_json);
        require(cJSON_IsObject(extra));
        cJSON_Delete(extra);
    }
    size_t len = 1;
    for (const cJSON *m = msgs->child; m; m = m->next) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsString(role) || !(cJSON_IsString(content) || cJSON_IsNull(content))) {
            cJSON_Delete(msgs);
            return mvm_fail(MVM_ERR_INVALID, "chat template: a message without role or content");
        }
        len += strlen(role->valuestring) + 3 +
               (cJSON_IsString(content) ? strlen(content->valuestring) : 0);
    }
    char *text = malloc(len), *o = text;
    require(text != NULL);
    for (const cJSON *m = msgs->child; m; m = m->next) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        o += sprintf(o, "%s: %s\n", cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring,
                     cJSON_IsString(content) ? content->valuestring : "");
    }
    cJSON_Delete(msgs);
    *out = text;
    return MVM_OK;
}

/* ---- the promises ---------------------------------------------------------------------- */

/* JSON text that parses, as an object; returned for the caller to read and delete. */
static cJSON *parsed(const char *json)
{
    require(json != NULL);
    cJSON *o = cJSON_Parse(json);
    require(cJSON_IsObject(o));
    return o;
}

/* The text in an answer equals want: /completion's content, or the choice's (its
 * message's or delta's content, or its text); a delta without content stands for empty
 * text. */
static void check_text(const cJSON *o, enum serve_kind kind, const char *want)
{
    if (kind == SERVE_LLAMA) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "content");
        require(cJSON_IsString(t) && strcmp(t->valuestring, want) == 0);
        return;
    }
    const int chat = kind == SERVE_CHAT;
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
    require(cJSON_IsObject(c));
    const cJSON *t;
    if (chat) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(c, "message");
        m = m ? m : cJSON_GetObjectItemCaseSensitive(c, "delta");
        t = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!t && !want[0])
            return;
    } else {
        t = cJSON_GetObjectItemCaseSensitive(c, "text");
    }
    require(cJSON_IsString(t) && strcmp(t->valuestring, want) == 0);
}

static void check_request(const serve_api *a, const serve_req *r, enum serve_kind kind)
{
    require(r->kind == kind && r->n_prompt >= 1 && r->n_prompt < a->n_ctx);
    require(r->id_slot >= -1 && r->id_slot < (int32_t)a->n_seq);
    require(r->top_logprobs <= SERVE_MAX_LOGPROBS && (r->logprobs || !r->top_logprobs));
    for (uint32_t i = 0; i < r->n_prompt; i++)
        require(r->prompt[i] >= 0 && (uint32_t)r->prompt[i] < a->n_vocab);
    require(r->sp.temperature >= 0 && r->sp.temperature <= 100);
    require(r->sp.top_p > 0 && r->sp.top_p <= 1 && r->sp.top_k >= 0);
    require(r->sp.min_p >= 0 && r->sp.min_p <= 1 && r->sp.repeat_penalty > 0);
    require(r->max_tokens >= -1);
    mvm_sampler *s = NULL; /* the sampler takes every request's parameters */
    require(mvm_sampler_create(&r->sp, a->n_vocab, &s) == MVM_OK);
    mvm_sampler_free(s);
    /* DRY's breakers: the request's own where it made them, of tokens of the vocabulary */
    require(!r->own_breakers || r->breakers == r->own_breakers);
    for (uint32_t b = 0; r->breakers && b < r->breakers->n; b++)
        require(r->breakers->b[b].head >= 0 && (uint32_t)r->breakers->b[b].head < a->n_vocab &&
                r->breakers->b[b].len <= 20);
    require(r->n_stop <= SERVE_MAX_STOP);
    for (uint32_t i = 0; i < r->n_stop; i++)
        require(r->stop[i] && r->stop[i][0] && strlen(r->stop[i]) <= 256);
}

/* Whether a body asks for a constraint: a grammar, a JSON Schema, or a response_format
 * other than text. */
static int asks_grammar(const char *body, size_t len)
{
    cJSON *o = cJSON_ParseWithLength(body, len);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "grammar");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(o, "json_schema");
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(o, "response_format");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
    int asks = (cJSON_IsString(g) && g->valuestring[0]) || (js && !cJSON_IsNull(js)) ||
               (cJSON_IsString(type) && strcmp(type->valuestring, "text") != 0);
    cJSON_Delete(o);
    return asks;
}

/* The ids of a /completion answer: `tokens` an array of n ids (where the request streams
 * or asks for them, as llama.cpp's server gives them). */
static void check_ids(const cJSON *o, uint32_t n)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tokens");
    require(cJSON_IsArray(t) && (uint32_t)cJSON_GetArraySize(t) == n);
}

/* An answer's log-probabilities, where the request asked for them: one entry a token. */
static void check_logprobs(const cJSON *o, const serve_req *r, uint32_t n)
{
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
    const cJSON *lp = r->kind == SERVE_LLAMA
                          ? cJSON_GetObjectItemCaseSensitive(o, "completion_probabilities")
                          : cJSON_GetObjectItemCaseSensitive(c, "logprobs");
    if (!r->logprobs) {
        require(!lp || cJSON_IsNull(lp));
        return;
    }
    if (r->kind == SERVE_CHAT)
        lp = cJSON_GetObjectItemCaseSensitive(lp, "content");
    else if (r->kind == SERVE_COMPLETION)
        lp = cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs");
    require(cJSON_IsArray(lp) && (uint32_t)cJSON_GetArraySize(lp) == n);
}

/* A chat's message read from its reply: a string or null content, a string reasoning, the
 * calls as OpenAI gives them (ids from the request's), "tool_calls" the finish exactly when
 * it has calls. */
static void check_message(const cJSON *choice, const serve_req *r)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(choice, "message");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    const cJSON *reasoning = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *c;
    const cJSON *finish = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
    require(cJSON_IsString(content) || (cJSON_IsNull(content) && calls));
    require(!reasoning || (cJSON_IsString(reasoning) && reasoning->valuestring[0]));
    require(!calls || (cJSON_IsArray(calls) && calls->child && r->reply.tools));
    require(cJSON_IsString(finish) &&
            !strcmp(finish->valuestring, calls ? "tool_calls" : "stop"));
    int i = 0;
    cJSON_ArrayForEach(c, calls)
    {
        char id[80];
        snprintf(id, sizeof id, "call_%s_%d", r->id, i++);
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        require(!strcmp(cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring, id));
        require(cJSON_IsString(name) && name->valuestring[0] && cJSON_IsString(args));
        cJSON *parsed_args = cJSON_Parse(args->valuestring);
        char *certain = NULL;
        size_t end;
        /* held, a call the reply's end cut off has the certain part of its arguments */
        require(cJSON_IsObject(parsed_args) ||
                (r->reply.held &&
                 mvm_json_prefix(args->valuestring, strlen(args->valuestring), &certain,
                                 &end) == 0 &&
                 !strcmp(certain ? certain : "", args->valuestring)));
        cJSON_Delete(parsed_args), free(certain);
    }
}

/* Appends a delta's `key` text to *acc (malloc'd). */
static void gather(char **acc, const cJSON *delta, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(delta, key);
    if (!cJSON_IsString(v))
        return;
    size_t n = *acc ? strlen(*acc) : 0, k = strlen(v->valuestring);
    char *grown = realloc(*acc, n + k + 1);
    require(grown != NULL);
    memcpy(grown + n, v->valuestring, k + 1);
    *acc = grown;
}

/* A chat's stream, as the server reads the reply while it grows (tools/serve_http.c): the
 * deltas of its prefixes (cut anywhere, inside a character too) add up to the whole
 * message: its reasoning, its content, its calls. */
static void check_deltas(const serve_req *r, const char *want, const cJSON *message)
{
    const size_t n = strlen(want);
    serve_sent sent = {0};
    char *reasoning = NULL, *content = NULL;
    cJSON *calls = cJSON_CreateArray(), *c;
    const size_t cuts[] = {n / 3, n / 2, n, n};
    for (size_t i = 0; i < 4; i++) {
        cJSON *d = serve_tools_delta(r, want, cuts[i], i == 3, &sent);
        gather(&reasoning, d, "reasoning_content");
        gather(&content, d, "content");
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(d, "tool_calls"))
        {
            /* a call begins with its id; more of the last one's arguments follow (held) */
            const cJSON *ix = cJSON_GetObjectItemCaseSensitive(c, "index");
            const int more = !cJSON_GetObjectItemCaseSensitive(c, "id");
            require(cJSON_IsNumber(ix) && ix->valueint == cJSON_GetArraySize(calls) - more &&
                    (!more || r->reply.held));
            if (more) {
                cJSON *fn = cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetArrayItem(calls, ix->valueint), "function");
                char *args = NULL;
                gather(&args, fn, "arguments");
                gather(&args, cJSON_GetObjectItemCaseSensitive(c, "function"), "arguments");
                cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", cJSON_CreateString(args));
                free(args);
                continue;
            }
            cJSON *copy = cJSON_Duplicate(c, 1);
            cJSON_DeleteItemFromObjectCaseSensitive(copy, "index");
            cJSON_AddItemToArray(calls, copy);
        }
        cJSON_Delete(d);
    }
    const cJSON *wc = cJSON_GetObjectItemCaseSensitive(message, "content");
    const cJSON *wr = cJSON_GetObjectItemCaseSensitive(message, "reasoning_content");
    const cJSON *wcalls = cJSON_GetObjectItemCaseSensitive(message, "tool_calls");
    require(!strcmp(content ? content : "", cJSON_IsString(wc) ? wc->valuestring : ""));
    require(!strcmp(reasoning ? reasoning : "", cJSON_IsString(wr) ? wr->valuestring : ""));
    require(wcalls ? cJSON_Compare(calls, wcalls, 1) : !calls->child);
    cJSON_Delete(calls);
    free(reasoning), free(content);
}

/* One stream event of the reply's piece text[0..n) (the ids of its bytes, for /completion). */
static char *chunk(const serve_api *a, serve_req *r, const char *text, size_t n, int first,
                   const char *finish, size_t at)
{
    if (r->kind != SERVE_LLAMA)
        return serve_api_chunk(a, r, text, n, (uint32_t)at, (uint32_t)(at + n), first, finish);
    return serve_llama_chunk(a, r, text, n, (uint32_t)at, (uint32_t)(at + n), finish != NULL);
}

/* The reply text[0..n) answered whole and in two chunks (cut at `cut`, maybe inside a
 * character, as the engine thread never does: each chunk is still valid JSON). */
static void check_answers(const serve_api *a, serve_req *r, const char *text, size_t n)
{
    require(serve_req_append(r, text, n) == 0);
    serve_logprob row[1 + SERVE_MAX_LOGPROBS];
    for (size_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j <= r->top_logprobs; j++) /* alternatives of every kind of byte */
            row[j] = (serve_logprob){2 + (unsigned char)text[(i + j) % n], -(float)j};
        if (r->top_logprobs)
            row[r->top_logprobs].id = -1; /* fewer than asked for had a probability */
        require(serve_req_add_token(r, row[0].id, row) == 0);
        r->n_gen++;
    }
    r->finish = "stop";
    /* the engine writes only what the request's grammar lets through, a token at a time
     * (a lazy grammar constrains from its trigger's token on): a reply it refuses is read
     * as one no grammar held */
    for (size_t i = 0; r->grammar && r->reply.held && i < n; i++)
        r->reply.held = mvm_grammar_accept_text(r->grammar, text + i, 1);
    char *want = mvm_cli_valid_utf8(text, n);
    require(want != NULL && strlen(want) >= n); /* every byte kept, or replaced */
    char *json = r->kind == SERVE_LLAMA ? serve_llama_response(a, r) : serve_api_response(a, r);
    cJSON *o = parsed(json);
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
    if (r->parse_reply) { /* a chat read into its parts */
        check_message(choice, r);
        check_deltas(r, want, cJSON_GetObjectItemCaseSensitive(choice, "message"));
    } else {
        check_text(o, r->kind, want);
    }
    check_logprobs(o, r, (uint32_t)n);
    if (r->kind == SERVE_LLAMA)
        check_ids(o, r->stream || r->return_tokens ? (uint32_t)n : 0);
    cJSON_Delete(o);
    free(json);
    free(want);
    const size_t cut = n / 2;
    const struct { const char *s; size_t n; int first; const char *finish; } parts[] = {
        {text, cut, 1, NULL}, {text + cut, n - cut, 0, NULL}, {"", 0, 0, "length"}};
    for (size_t i = 0, at = 0; i < sizeof parts / sizeof *parts; at += parts[i++].n) {
        char *ev = chunk(a, r, parts[i].s, parts[i].n, parts[i].first, parts[i].finish, at);
        require(ev && strncmp(ev, "data: ", 6) == 0);
        const size_t len = strlen(ev);
        require(len >= 8 && strcmp(ev + len - 2, "\n\n") == 0);
        ev[len - 2] = '\0';
        char *piece = mvm_cli_valid_utf8(parts[i].s, parts[i].n);
        require(piece != NULL && strlen(piece) >= parts[i].n);
        o = parsed(ev + 6);
        check_text(o, r->kind, piece);
        check_logprobs(o, r, (uint32_t)parts[i].n);
        if (r->kind == SERVE_LLAMA)
            check_ids(o, r->stream || r->return_tokens ? (uint32_t)parts[i].n : 0);
        cJSON_Delete(o);
        free(piece);
        free(ev);
    }
}

/* The named event at *at, "event: T\ndata: {...\"type\": \"T\"...}\n\n": its data, *at moved past
 * it and *name its T (in place). */
static cJSON *named_event(char **at, const char **name)
{
    require(!strncmp(*at, "event: ", 7));
    char *nl = strchr(*at, '\n'), *end = nl ? strstr(nl, "\n\n") : NULL;
    require(nl && end && !strncmp(nl + 1, "data: ", 6));
    *nl = '\0', *end = '\0';
    cJSON *o = parsed(nl + 7);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    require(cJSON_IsString(type) && !strcmp(type->valuestring, *at + 7));
    *name = *at + 7, *at = end + 2;
    return o;
}

/* Anthropic's events in text[0..): content blocks started and stopped in turn, by
 * increasing index. *open: the block started, -1 none. */
static void check_events(char *text, int *open, int *next)
{
    for (char *at = text; *at;) {
        const char *name;
        cJSON *o = named_event(&at, &name);
        const cJSON *index = cJSON_GetObjectItemCaseSensitive(o, "index");
        if (!strcmp(name, "content_block_start"))
            require(*open < 0 && index->valueint == *next), *open = *next;
        else if (!strcmp(name, "content_block_delta"))
            require(index->valueint == *open);
        else if (!strcmp(name, "content_block_stop"))
            require(index->valueint == *open), *open = -1, ++*next;
        cJSON_Delete(o);
    }
}

/* The chat request `chat` (freed) reads into, its whole reply text[0..n) and done with
 * `finish`; NULL with *status and *error (malloc'd) where it does not read. */
static serve_req *replied(const serve_api *a, char *chat, const char *text, size_t n,
                          const char *finish, int *status, char **error)
{
    serve_req *r = serve_api_request(a, SERVE_CHAT, chat, strlen(chat), status, error);
    free(chat);
    if (r) {
        require(serve_req_append(r, text, n) == 0);
        r->n_gen = (uint32_t)n, r->finish = finish;
    }
    return r;
}

/* Every item of o's `field` has one of the three types. */
static void require_types(const cJSON *o, const char *field, const char *const types[3])
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, field), *item;
    require(cJSON_IsArray(list));
    cJSON_ArrayForEach(item, list)
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "type");
        require(cJSON_IsString(type) && (!strcmp(type->valuestring, types[0]) ||
                                         !strcmp(type->valuestring, types[1]) ||
                                         !strcmp(type->valuestring, types[2])));
    }
}

/* The deltas a stream of r's reply sends: half of it, then all (an array; NULL entries
 * left out). */
static cJSON *deltas_of(const serve_req *r, const char *text, size_t n)
{
    char *valid = mvm_cli_valid_utf8(text, n);
    require(valid != NULL);
    const size_t all = strlen(valid);
    serve_sent sent = {0};
    cJSON *list = cJSON_CreateArray();
    for (size_t cut = all / 2;; cut = all) {
        cJSON *d = serve_tools_delta(r, valid, cut, cut == all, &sent);
        if (d)
            cJSON_AddItemToArray(list, d);
        if (cut == all)
            break;
    }
    free(valid);
    return list;
}

/* Anthropic's Messages API over the same body: refused in one line, or a chat request whose
 * reply reads back as a message with blocks, and as a stream of well-formed events. */
static void check_anthropic(const serve_api *a, const char *body, size_t len, const char *text,
                            size_t n)
{
    char bad[512] = "";
    char *chat = serve_anthropic_body(body, len, bad, sizeof bad);
    require((chat == NULL) == (bad[0] != 0));
    if (!chat) { /* the error a client gets: a message on one line */
        char *e = serve_anthropic_error(bad, 400);
        cJSON *o = parsed(e);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(o, "error"), "message");
        require(cJSON_IsString(m) && m->valuestring[0] && !strchr(m->valuestring, '\n'));
        cJSON_Delete(o), free(e);
        return;
    }
    int status = 0;
    char *error = NULL;
    serve_req *r = replied(a, chat, text, n, "stop", &status, &error);
    if (!r) {
        char *e = error ? serve_anthropic_rewrap(error, (unsigned)status) : NULL;
        cJSON *o = e ? parsed(e) : NULL;
        require(!e || cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "type")));
        cJSON_Delete(o), free(e);
        return;
    }
    static const char *const blocks[3] = {"text", "thinking", "tool_use"};
    char *whole = serve_anthropic_response(a, r);
    cJSON *o = parsed(whole), *deltas = deltas_of(r, text, n), *d;
    require_types(o, "content", blocks);
    cJSON_Delete(o), free(whole);
    serve_anthropic_stream st = {0};
    int open = -1, next = 0;
    char *ev = serve_anthropic_start(a, r);
    require(ev != NULL);
    check_events(ev, &open, &next), free(ev);
    cJSON_ArrayForEach(d, deltas)
    {
        if ((ev = serve_anthropic_delta(&st, d)))
            check_events(ev, &open, &next), free(ev);
    }
    cJSON_Delete(deltas);
    ev = serve_anthropic_end(&st, r);
    require(ev != NULL);
    check_events(ev, &open, &next), free(ev);
    require(open == -1);
    serve_req_release(r);
}

/* The events of OpenAI's Responses stream in text[0..): sequence numbers *seq and on;
 * items added and done in turn by output_index. *open: the item added, -1 none. */
static void check_response_events(char *text, int *seq, int *open, int *next)
{
    for (char *at = text; *at;) {
        const char *name;
        cJSON *o = named_event(&at, &name);
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "sequence_number");
        const cJSON *index = cJSON_GetObjectItemCaseSensitive(o, "output_index");
        require(cJSON_IsNumber(n) && n->valueint == (*seq)++);
        if (!strcmp(name, "response.output_item.added"))
            require(*open < 0 && index->valueint == *next), *open = *next;
        else if (!strcmp(name, "response.output_item.done"))
            require(index->valueint == *open), *open = -1, ++*next;
        else if (index)
            require(index->valueint == *open);
        cJSON_Delete(o);
    }
}

/* OpenAI's Responses API over the same body: refused in one line, or a chat request whose
 * reply reads back as a response with output items, and as a stream of events in order. */
static void check_responses(const serve_api *a, const char *body, size_t len, const char *text,
                            size_t n)
{
    char bad[512] = "";
    char *chat = serve_responses_body(body, len, bad, sizeof bad);
    require((chat == NULL) == (bad[0] != 0));
    int status = 0;
    char *error = NULL;
    serve_req *r = chat ? replied(a, chat, text, n, n % 2 ? "stop" : "length", &status, &error)
                        : NULL;
    free(error);
    if (!r)
        return;
    static const char *const items[3] = {"message", "reasoning", "function_call"};
    char *whole = serve_responses_response(a, r);
    cJSON *o = parsed(whole), *deltas = deltas_of(r, text, n), *d;
    require_types(o, "output", items);
    cJSON_Delete(o), free(whole);
    serve_responses_stream st = {0};
    int seq = 0, open = -1, next = 0;
    char *ev = serve_responses_start(a, r, &st);
    require(ev != NULL);
    check_response_events(ev, &seq, &open, &next), free(ev);
    cJSON_ArrayForEach(d, deltas)
    {
        if ((ev = serve_responses_delta(r, &st, d)))
            check_response_events(ev, &seq, &open, &next), free(ev);
    }
    cJSON_Delete(deltas);
    ev = serve_responses_end(a, r, &st);
    require(ev != NULL);
    check_response_events(ev, &seq, &open, &next), free(ev);
    require(open == -1);
    serve_responses_stream_free(&st);
    serve_req_release(r);
}

/* A JSON object with status 200, or an error object with a one-line message and 400. */
static void check_answer_or_error(char *json, int status)
{
    cJSON *o = parsed(json);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
    if (status != 200) {
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");
        require(status == 400 && cJSON_IsString(msg) && msg->valuestring[0] &&
                !strchr(msg->valuestring, '\n'));
    } else {
        require(!err);
    }
    cJSON_Delete(o);
    free(json);
}

/* /tokenize, /detokenize and /apply-template given the body. */
static void check_utilities(const serve_api *a, const char *body, size_t len)
{
    char *(*const routes[])(const serve_api *, const char *, size_t, int *) = {
        serve_llama_tokenize, serve_llama_detokenize, serve_llama_apply_template};
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        int status = 0;
        char *json = routes[i](a, body, len, &status);
        check_answer_or_error(json, status);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    static const enum serve_kind kinds[4] = {SERVE_COMPLETION, SERVE_CHAT, SERVE_LLAMA,
                                             SERVE_INFILL};
    const enum serve_kind asked = kinds[data[0] & 3];
    const enum serve_kind kind = asked == SERVE_INFILL ? SERVE_LLAMA : asked;
    size_t n_text = data[0] >> 2;
    n_text = n_text < size - 1 ? n_text : size - 1;
    const char *body = (const char *)data + 1, *text = body + (size - 1 - n_text);
    const size_t len = size - 1 - n_text;
    static mvm_engine engine;
    fuzz_template = syntax_templates[size % (sizeof syntax_templates / sizeof *syntax_templates)];
    const serve_api a = {.e = &engine, .model_id = "fuzz",
                         .defaults = {.temperature = 0.8f, .top_p = 0.95f, .top_k = 40,
                                      .min_p = 0.05f, .repeat_penalty = 1.0f, .seed = 7},
                         .default_max_tokens = -1, .n_ctx = 512, .n_seq = 2,
                         .n_vocab = N_VOCAB, .n_batch = 64, .model_path = "fuzz.gguf"};
    if (kind == SERVE_LLAMA)
        check_utilities(&a, body, len);
    if (asked == SERVE_CHAT) {
        check_anthropic(&a, body, len, text, n_text);
        check_responses(&a, body, len, text, n_text);
    }
    int status = 0;
    char *error = NULL;
    enum { MAX = 4 };
    serve_req *r[MAX];
    const uint32_t n = serve_api_requests(&a, asked, body, len, r, MAX, &status, &error);
    require((n == 0) != (error == NULL) && n <= MAX);
    if (!n) {
        require(status == 400 || status == 500);
        cJSON *o = parsed(error);
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");
        require(cJSON_IsString(msg) && msg->valuestring[0] && !strchr(msg->valuestring, '\n'));
        cJSON_Delete(o);
        free(error);
        return 0;
    }
    const int constrained = asks_grammar(body, len);
    for (uint32_t i = 0; i < n; i++) {
        check_request(&a, r[i], kind);
        /* a grammar: the request's, a forced call's, or the lazy one of a call under "auto"
         * (never with a grammar of the request's) */
        require((r[i]->grammar != NULL) ==
                    (constrained || r[i]->force_call || r[i]->lazy_call) &&
                !(r[i]->lazy_call && (r[i]->force_call || constrained)) &&
                (!i || !r[i]->grammar || r[i]->grammar != r[0]->grammar));
        for (uint32_t b = 0; b < r[i]->n_bias; b++) /* logit_bias: tokens of the vocabulary */
            require(r[i]->bias[b].id >= 0 && r[i]->bias[b].id < N_VOCAB &&
                    !isnan(r[i]->bias[b].bias) && r[i]->bias[b].bias < INFINITY);
        check_answers(&a, r[i], text, n_text);
    }
    /* several prompts' response: a choice (or an object) each, by index */
    char *json = n < 2 ? NULL
                 : kind == SERVE_LLAMA
                     ? serve_llama_response_list(&a, (const serve_req *const *)r, n)
                     : serve_api_response_list(&a, (const serve_req *const *)r, n);
    if (json) {
        cJSON *o = cJSON_Parse(json);
        const cJSON *list = kind == SERVE_LLAMA ? o
                                                : cJSON_GetObjectItemCaseSensitive(o, "choices");
        require(cJSON_IsArray(list) && (uint32_t)cJSON_GetArraySize(list) == n);
        for (uint32_t i = 0; i < n; i++) {
            const cJSON *ix = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(list, (int)i),
                                                               "index");
            require(cJSON_IsNumber(ix) && ix->valuedouble == i);
        }
        cJSON_Delete(o);
        free(json);
    }
    for (uint32_t i = 0; i < n; i++)
        serve_req_release(r[i]);
    return 0;
}
