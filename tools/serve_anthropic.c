/*
 * Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens), as llama.cpp's
 * server serves it (tools/server/server-chat.cpp's server_chat_convert_anthropic_to_oai,
 * server-task.cpp's to_json_anthropic*): the body is read into an OpenAI chat request, which
 * moevm serves as any other, and the reply is written back in Anthropic's shape, whole or as
 * its stream of events (docs/serve.md, "Anthropic's Messages API").
 *
 * The request: `system` (a string or text blocks), `messages` (`user` and `assistant` turns
 * of a string or blocks: `text`; `thinking`, the turn's reasoning; `redacted_thinking`,
 * dropped; `tool_use`, a call; `tool_result`, a `tool` message after the turn), `tools`
 * ({name, description, input_schema}), `tool_choice` (auto, any, tool with its name, none;
 * `disable_parallel_tool_use`), `stop_sequences`, `max_tokens` (4096 where missing, as
 * llama.cpp), `temperature`, `top_p`, `top_k`, `stream`, `thinking` ({"type": "enabled",
 * "budget_tokens": N}: llama.cpp's reasoning budget; "disabled": the template's
 * enable_thinking false) and `chat_template_kwargs`. Stricter than llama.cpp, which passes
 * what it does not know along: a block of another type (an image, a document) or a tool
 * that is one of Anthropic's own (no input_schema) is a 400 naming it, as moevm computes
 * text and runs no tools; a `tool_choice` naming a tool keeps that name (llama.cpp forces
 * any tool). `metadata` and the rest are accepted and ignored.
 *
 * The reply: `content` blocks in order, `thinking` (signature ""), `text`, then each
 * `tool_use` (its `input` the call's arguments); `stop_reason` end_turn, max_tokens,
 * stop_sequence (with `stop_sequence`) or tool_use; `usage` with the prompt's tokens read
 * from a slot's cache as `cache_read_input_tokens`.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat/json_prefix.h"
#include "tools/cli.h"
#include "tools/serve_anthropic.h"

/* ---- the request --------------------------------------------------------------------------- */

static int fail(char *bad, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *bad, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bad, cap, fmt, ap);
    va_end(ap);
    return -1;
}

/* A tool_result's content: a string, or text blocks joined. */
static int tool_result(const cJSON *block, cJSON *out, int i, char *bad, size_t cap)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(block, "tool_use_id");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(block, "content");
    if (!cJSON_IsString(id))
        return fail(bad, cap, "'messages'[%d]: a tool_result block needs its tool_use_id", i);
    size_t len = 1;
    const cJSON *t;
    cJSON_ArrayForEach(t, (cJSON_IsArray(c) ? c : NULL))
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(t, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text))
            return fail(bad, cap, "'messages'[%d]: a tool_result's content holds text blocks "
                        "only (moevm computes text)", i);
        len += strlen(text->valuestring);
    }
    if (c && !cJSON_IsString(c) && !cJSON_IsArray(c))
        return fail(bad, cap, "'messages'[%d]: a tool_result's content is a string or text "
                    "blocks", i);
    char *joined = malloc(cJSON_IsString(c) ? strlen(c->valuestring) + 1 : len);
    if (!joined)
        return fail(bad, cap, "out of memory");
    joined[0] = '\0';
    if (cJSON_IsString(c))
        strcpy(joined, c->valuestring);
    cJSON_ArrayForEach(t, (cJSON_IsArray(c) ? c : NULL))
        strcat(joined, cJSON_GetObjectItemCaseSensitive(t, "text")->valuestring);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
    cJSON_AddStringToObject(m, "content", joined);
    cJSON_AddItemToArray(out, m);
    free(joined);
    return 0;
}

/* One of a turn's blocks into its text, reasoning, calls, or the tool messages after it. */
static int block(const cJSON *b, cJSON *text, cJSON *reasoning, cJSON *calls, cJSON *results,
                 int i, char *bad, size_t cap)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    const cJSON *v;
    if (!strcmp(t, "text") && cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(b, "text"))) {
        cJSON *part = cJSON_CreateObject();
        cJSON_AddStringToObject(part, "type", "text");
        cJSON_AddStringToObject(part, "text", v->valuestring);
        cJSON_AddItemToArray(text, part);
        return 0;
    }
    if (!strcmp(t, "thinking") &&
        cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(b, "thinking"))) {
        cJSON_AddItemToArray(reasoning, cJSON_CreateString(v->valuestring));
        return 0;
    }
    if (!strcmp(t, "redacted_thinking"))
        return 0; /* encrypted for Anthropic's models: nothing a template could show */
    if (!strcmp(t, "tool_use")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name");
        const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
        if (!cJSON_IsString(id) || !cJSON_IsString(name) || (input && !cJSON_IsObject(input)))
            return fail(bad, cap, "'messages'[%d]: a tool_use block is {\"id\", \"name\", "
                        "\"input\": {...}}", i);
        char *args = input ? cJSON_PrintUnformatted(input) : strdup("{}");
        cJSON *call = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(call, "function");
        cJSON_AddStringToObject(call, "id", id->valuestring);
        cJSON_AddStringToObject(call, "type", "function");
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        cJSON_AddStringToObject(fn, "arguments", args ? args : "{}");
        cJSON_AddItemToArray(calls, call);
        free(args);
        return 0;
    }
    if (!strcmp(t, "tool_result"))
        return tool_result(b, results, i, bad, cap);
    snprintf(bad, cap, "'messages'[%d]: a '%.40s' block: moevm takes text, thinking, tool_use "
             "and tool_result blocks (it computes text)", i, t);
    return -1;
}

/* Turn i into OpenAI's messages: the turn, then its tool results. */
static int turn(const cJSON *m, int i, cJSON *out, char *bad, size_t cap)
{
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsString(role) ||
        (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")) ||
        !(cJSON_IsString(content) || cJSON_IsArray(content)))
        return fail(bad, cap, "'messages'[%d] must be {\"role\": \"user\" or \"assistant\", "
                    "\"content\": a string or blocks}", i);
    if (cJSON_IsString(content)) {
        cJSON_AddItemToArray(out, cJSON_Duplicate(m, 1));
        return 0;
    }
    cJSON *text = cJSON_CreateArray(), *reasoning = cJSON_CreateArray();
    cJSON *calls = cJSON_CreateArray(), *results = cJSON_CreateArray();
    int rc = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, content)
    {
        if (!rc)
            rc = block(b, text, reasoning, calls, results, i, bad, cap);
    }
    if (!rc && (text->child || calls->child || reasoning->child)) {
        cJSON *msg = cJSON_CreateObject();
        cJSON_AddStringToObject(msg, "role", role->valuestring);
        if (text->child)
            cJSON_AddItemToObject(msg, "content", text), text = NULL;
        else
            cJSON_AddStringToObject(msg, "content", "");
        if (calls->child)
            cJSON_AddItemToObject(msg, "tool_calls", calls), calls = NULL;
        size_t len = 1;
        const cJSON *r;
        cJSON_ArrayForEach(r, reasoning) len += strlen(r->valuestring);
        char *joined = reasoning->child ? calloc(1, len) : NULL;
        cJSON_ArrayForEach(r, (joined ? reasoning : NULL)) strcat(joined, r->valuestring);
        if (joined)
            cJSON_AddStringToObject(msg, "reasoning_content", joined);
        free(joined);
        cJSON_AddItemToArray(out, msg);
    }
    while (!rc && results->child)
        cJSON_AddItemToArray(out, cJSON_DetachItemViaPointer(results, results->child));
    cJSON_Delete(text), cJSON_Delete(reasoning), cJSON_Delete(calls), cJSON_Delete(results);
    return rc;
}

/* `system`: a string, or text blocks joined. */
static int system_message(const cJSON *sys, cJSON *messages, char *bad, size_t cap)
{
    if (!sys || cJSON_IsNull(sys))
        return 0;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "system");
    if (cJSON_IsString(sys)) {
        cJSON_AddStringToObject(m, "content", sys->valuestring);
        cJSON_AddItemToArray(messages, m);
        return 0;
    }
    cJSON *parts = cJSON_AddArrayToObject(m, "content");
    const cJSON *b;
    cJSON_ArrayForEach(b, (cJSON_IsArray(sys) ? sys : NULL))
    {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(b, "text");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text))
            break;
        cJSON *part = cJSON_CreateObject();
        cJSON_AddStringToObject(part, "type", "text");
        cJSON_AddStringToObject(part, "text", text->valuestring);
        cJSON_AddItemToArray(parts, part);
    }
    if (!cJSON_IsArray(sys) || cJSON_GetArraySize(parts) != cJSON_GetArraySize(sys)) {
        cJSON_Delete(m);
        return fail(bad, cap, "'system' must be a string or text blocks");
    }
    cJSON_AddItemToArray(messages, m);
    return 0;
}

static int tools(const cJSON *in, cJSON *out, char *bad, size_t cap)
{
    if (!in || cJSON_IsNull(in))
        return 0;
    if (!cJSON_IsArray(in))
        return fail(bad, cap, "'tools' must be an array of {\"name\", \"input_schema\"}");
    cJSON *list = cJSON_AddArrayToObject(out, "tools");
    int i = 0;
    for (const cJSON *t = in->child; t; t = t->next, i++) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        if (!cJSON_IsString(name) || !cJSON_IsObject(schema))
            return fail(bad, cap, "'tools'[%d] must be {\"name\", \"description\", "
                        "\"input_schema\"} (Anthropic's own tools, which its servers run, are "
                        "not taken)", i);
        cJSON *tool = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(tool, "function");
        cJSON_AddStringToObject(tool, "type", "function");
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        if (cJSON_IsString(desc))
            cJSON_AddStringToObject(fn, "description", desc->valuestring);
        cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(schema, 1));
        cJSON_AddItemToArray(list, tool);
    }
    return 0;
}

static int tool_choice(const cJSON *tc, cJSON *out, char *bad, size_t cap)
{
    if (!tc || cJSON_IsNull(tc))
        return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    const cJSON *serial = cJSON_GetObjectItemCaseSensitive(tc, "disable_parallel_tool_use");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(t, "auto") || !strcmp(t, "none") || !strcmp(t, "any")) {
        cJSON_AddStringToObject(out, "tool_choice", !strcmp(t, "any") ? "required" : t);
    } else if (!strcmp(t, "tool") && cJSON_IsString(name)) {
        cJSON *c = cJSON_AddObjectToObject(out, "tool_choice");
        cJSON_AddStringToObject(c, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", name->valuestring);
    } else {
        return fail(bad, cap, "'tool_choice' must be {\"type\": \"auto\", \"any\", \"none\" or "
                    "\"tool\" (with its \"name\")}");
    }
    cJSON_AddBoolToObject(out, "parallel_tool_calls", !cJSON_IsTrue(serial));
    return 0;
}

/* `thinking`: enabled with a budget, or disabled. */
static int thinking(const cJSON *th, cJSON *out, char *bad, size_t cap)
{
    if (!th || cJSON_IsNull(th))
        return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(th, "type");
    const cJSON *budget = cJSON_GetObjectItemCaseSensitive(th, "budget_tokens");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(t, "enabled") && (!budget || cJSON_IsNumber(budget))) {
        cJSON_AddNumberToObject(out, "reasoning_budget_tokens",
                                budget ? budget->valuedouble : 10000);
        return 0;
    }
    if (!strcmp(t, "disabled")) {
        cJSON *kw = cJSON_GetObjectItemCaseSensitive(out, "chat_template_kwargs");
        if (!cJSON_IsObject(kw)) {
            cJSON_DeleteItemFromObjectCaseSensitive(out, "chat_template_kwargs");
            kw = cJSON_AddObjectToObject(out, "chat_template_kwargs");
        }
        cJSON_DeleteItemFromObjectCaseSensitive(kw, "enable_thinking");
        cJSON_AddFalseToObject(kw, "enable_thinking");
        return 0;
    }
    return fail(bad, cap, "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or "
                "{\"type\": \"disabled\"}");
}

char *serve_anthropic_body(const char *body, size_t len, char *bad, size_t cap)
{
    cJSON *in = serve_api_parse(body, len, bad, cap), *out = in ? cJSON_CreateObject() : NULL;
    if (!out) {
        cJSON_Delete(in);
        return NULL;
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(in, "messages");
    cJSON *messages = cJSON_AddArrayToObject(out, "messages");
    int rc = cJSON_IsArray(msgs) && msgs->child
                 ? system_message(cJSON_GetObjectItemCaseSensitive(in, "system"), messages, bad,
                                  cap)
                 : fail(bad, cap, "'messages' must be a non-empty array of turns");
    int i = 0;
    for (const cJSON *m = rc ? NULL : msgs->child; m && !rc; m = m->next, i++)
        rc = turn(m, i, messages, bad, cap);
    /* the fields an OpenAI chat has under the same name and meaning */
    static const char *const same[] = {"max_tokens", "temperature", "top_p", "top_k", "stream",
                                       "chat_template_kwargs"};
    for (size_t k = 0; !rc && k < sizeof same / sizeof *same; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, same[k]);
        if (v)
            cJSON_AddItemToObject(out, same[k], cJSON_Duplicate(v, 1));
    }
    if (!rc && !cJSON_GetObjectItemCaseSensitive(out, "max_tokens"))
        cJSON_AddNumberToObject(out, "max_tokens", 4096); /* required there; llama.cpp's */
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(in, "stop_sequences");
    if (!rc && stop)
        cJSON_AddItemToObject(out, "stop", cJSON_Duplicate(stop, 1));
    rc = rc || tools(cJSON_GetObjectItemCaseSensitive(in, "tools"), out, bad, cap) ||
         tool_choice(cJSON_GetObjectItemCaseSensitive(in, "tool_choice"), out, bad, cap) ||
         thinking(cJSON_GetObjectItemCaseSensitive(in, "thinking"), out, bad, cap);
    char *text = rc ? NULL : cJSON_PrintUnformatted(out);
    if (!rc && !text)
        snprintf(bad, cap, "out of memory");
    cJSON_Delete(in), cJSON_Delete(out);
    return text;
}

/* ---- the reply ------------------------------------------------------------------------------ */

char *serve_anthropic_error(const char *message, unsigned status)
{
    const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
                     : status == 413 ? "request_too_large" : status == 503 ? "overloaded_error"
                     : status >= 500 ? "api_error" : "invalid_request_error";
    cJSON *o = cJSON_CreateObject(), *e;
    cJSON_AddStringToObject(o, "type", "error");
    e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "type", type);
    char *line = serve_api_one_line(message);
    cJSON_AddStringToObject(e, "message", line ? line : "out of memory");
    free(line);
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

char *serve_anthropic_rewrap(char *openai_error, unsigned status)
{
    cJSON *o = openai_error ? cJSON_Parse(openai_error) : NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(o, "error"), "message");
    char *out = serve_anthropic_error(cJSON_IsString(m) ? m->valuestring : "out of memory",
                                      status);
    cJSON_Delete(o);
    free(openai_error);
    return out;
}

static const char *stop_reason(const serve_req *r, int calls)
{
    if (r->finish && !strcmp(r->finish, "stop"))
        return calls ? "tool_use" : r->stop_word >= 0 ? "stop_sequence" : "end_turn";
    return "max_tokens";
}

static void add_stop(cJSON *o, const serve_req *r, int calls)
{
    cJSON_AddStringToObject(o, "stop_reason", stop_reason(r, calls));
    if (!calls && r->finish && !strcmp(r->finish, "stop") && r->stop_word >= 0 &&
        (uint32_t)r->stop_word < r->n_stop)
        cJSON_AddStringToObject(o, "stop_sequence", r->stop[r->stop_word]);
    else
        cJSON_AddNullToObject(o, "stop_sequence");
}

static void add_usage(cJSON *o, const serve_req *r, int done)
{
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    const uint32_t cached = r->n_cached < r->n_prompt ? r->n_cached : r->n_prompt;
    cJSON_AddNumberToObject(u, "input_tokens", r->n_prompt - cached);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", cached);
    cJSON_AddNumberToObject(u, "output_tokens", done ? r->n_gen : 0);
}

/* {"type": "message", ...} with content `content` (taken). */
static cJSON *message(const serve_api *a, const serve_req *r, cJSON *content)
{
    cJSON *o = cJSON_CreateObject();
    char id[64];
    snprintf(id, sizeof id, "msg_%s", r->id);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON_AddStringToObject(o, "model", a->model_id);
    cJSON_AddItemToObject(o, "content", content);
    return o;
}

/* A call of OpenAI's shape as a tool_use block: its arguments' JSON as the input ({} where
 * they do not read as an object, as llama.cpp). */
static cJSON *tool_use(const cJSON *call)
{
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    cJSON *input = NULL;
    size_t owed, end;
    /* arguments the reply's end cut off (chat_reply.h) as far as they go, as Anthropic's
     * SDK reads a stream's partial JSON */
    if (cJSON_IsString(args))
        mvm_json_heal(args->valuestring, strlen(args->valuestring), &input, &owed, &end);
    if (!cJSON_IsObject(input))
        cJSON_Delete(input), input = cJSON_CreateObject();
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddItemToObject(b, "id",
                          cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(call, "id"), 1));
    cJSON_AddItemToObject(b, "name",
                          cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(fn, "name"), 1));
    cJSON_AddItemToObject(b, "input", input);
    return b;
}

static cJSON *text_block(const char *type, const char *field, const char *text)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", type);
    cJSON_AddStringToObject(b, field, text);
    if (!strcmp(type, "thinking"))
        cJSON_AddStringToObject(b, "signature", ""); /* nothing signs a local model's */
    return b;
}

char *serve_anthropic_response(const serve_api *a, const serve_req *r)
{
    char *t = mvm_cli_valid_utf8(r->text, r->len);
    cJSON *m = serve_tools_message(r, t ? t : "", t ? strlen(t) : 0);
    free(t);
    cJSON *content = cJSON_CreateArray();
    const cJSON *think = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(m, "content");
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *c;
    if (cJSON_IsString(think) && think->valuestring[0])
        cJSON_AddItemToArray(content, text_block("thinking", "thinking", think->valuestring));
    if (cJSON_IsString(text) && text->valuestring[0])
        cJSON_AddItemToArray(content, text_block("text", "text", text->valuestring));
    cJSON_ArrayForEach(c, calls) cJSON_AddItemToArray(content, tool_use(c));
    cJSON *o = message(a, r, content);
    add_stop(o, r, cJSON_GetArraySize(calls));
    add_usage(o, r, 1);
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o), cJSON_Delete(m);
    return out;
}

/* ---- the stream ------------------------------------------------------------------------------ */

static cJSON *block_event(const char *type, uint32_t index)
{
    cJSON *o = serve_api_typed(type);
    cJSON_AddNumberToObject(o, "index", index);
    return o;
}

/* The open block closed, if any. */
static int close_block(serve_anthropic_stream *s, char **buf, size_t *len)
{
    if (!s->open)
        return 0;
    s->open = 0;
    return serve_api_typed_event(buf, len, block_event("content_block_stop", s->blocks++));
}

/* Text of a block kind (1 thinking, 2 text) as a delta, the block opened first. */
static int text_delta(void *ctx, int kind, const char *text, char **buf, size_t *len)
{
    serve_anthropic_stream *s = ctx;
    const char *type = kind == 1 ? "thinking" : "text";
    if (s->open != kind) {
        if (close_block(s, buf, len))
            return -1;
        cJSON *start = block_event("content_block_start", s->blocks);
        cJSON_AddItemToObject(start, "content_block", text_block(type, type, ""));
        if (serve_api_typed_event(buf, len, start))
            return -1;
        s->open = kind;
    }
    cJSON *d = block_event("content_block_delta", s->blocks);
    cJSON *delta = cJSON_AddObjectToObject(d, "delta");
    cJSON_AddStringToObject(delta, "type", kind == 1 ? "thinking_delta" : "text_delta");
    cJSON_AddStringToObject(delta, type, text);
    return serve_api_typed_event(buf, len, d);
}

/* A call as its block: begun (its id) with an empty input, then its arguments as
 * input_json_deltas, in one piece or several (serve_tools_delta's); stopped when the next
 * block begins or the message ends. */
static int call_blocks(void *ctx, const cJSON *call, char **buf, size_t *len)
{
    serve_anthropic_stream *s = ctx;
    const char *args = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(call, "function"), "arguments"));
    if (cJSON_GetObjectItemCaseSensitive(call, "id")) {
        if (close_block(s, buf, len))
            return -1;
        cJSON *b = tool_use(call);
        cJSON_ReplaceItemInObjectCaseSensitive(b, "input", cJSON_CreateObject());
        cJSON *start = block_event("content_block_start", s->blocks);
        cJSON_AddItemToObject(start, "content_block", b);
        if (serve_api_typed_event(buf, len, start))
            return -1;
        s->open = 3, s->calls++;
    }
    if (!args || !args[0])
        return 0;
    cJSON *d = block_event("content_block_delta", s->blocks);
    cJSON *delta = cJSON_AddObjectToObject(d, "delta");
    cJSON_AddStringToObject(delta, "type", "input_json_delta");
    cJSON_AddStringToObject(delta, "partial_json", args);
    return serve_api_typed_event(buf, len, d);
}

char *serve_anthropic_start(const serve_api *a, const serve_req *r)
{
    cJSON *msg = message(a, r, cJSON_CreateArray());
    cJSON_AddNullToObject(msg, "stop_reason");
    cJSON_AddNullToObject(msg, "stop_sequence");
    add_usage(msg, r, 0);
    cJSON *o = serve_api_typed("message_start");
    cJSON_AddItemToObject(o, "message", msg);
    char *buf = NULL;
    size_t len = 0;
    if (serve_api_typed_event(&buf, &len, o) |
        serve_api_typed_event(&buf, &len, serve_api_typed("ping"))) {
        free(buf);
        return NULL;
    }
    return buf;
}

char *serve_anthropic_delta(serve_anthropic_stream *s, const cJSON *delta)
{
    return serve_api_delta_events(delta, &(serve_delta_sink){text_delta, call_blocks, s});
}

char *serve_anthropic_end(serve_anthropic_stream *s, const serve_req *r)
{
    char *buf = NULL;
    size_t len = 0;
    if (r->error) {
        char *e = serve_anthropic_error(r->error, 500);
        cJSON *o = e ? cJSON_Parse(e) : NULL;
        free(e);
        if (!o || serve_api_typed_event(&buf, &len, o))
            free(buf), buf = NULL;
        return buf;
    }
    cJSON *d = serve_api_typed("message_delta"), *delta = cJSON_AddObjectToObject(d, "delta");
    add_stop(delta, r, s->calls);
    add_usage(d, r, 1);
    if (close_block(s, &buf, &len) | serve_api_typed_event(&buf, &len, d) |
        serve_api_typed_event(&buf, &len, serve_api_typed("message_stop")))
        free(buf), buf = NULL;
    return buf;
}

/* ---- counting ----------------------------------------------------------------------------- */

char *serve_anthropic_count(const serve_api *a, const char *body, size_t len, int *status)
{
    char bad[512] = "";
    char *chat = serve_anthropic_body(body, len, bad, sizeof bad);
    if (!chat) {
        *status = strcmp(bad, "out of memory") ? 400 : 500;
        return serve_anthropic_error(bad, (unsigned)*status);
    }
    char *out = serve_api_count(a, chat, strlen(chat), NULL, status);
    free(chat);
    return *status == 200 ? out : serve_anthropic_rewrap(out, (unsigned)*status);
}
