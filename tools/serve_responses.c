/*
 * OpenAI's Responses API (POST /v1/responses), as llama.cpp's server serves it
 * (tools/server/server-chat.cpp's server_chat_convert_responses_to_chatcmpl, server-task.cpp's
 * to_json_oaicompat_resp*): the body is read into a chat request, which moevm serves as any
 * other, and the reply is written back as a response, whole or as its events (docs/serve.md,
 * "OpenAI's Responses API").
 *
 * The request: `instructions` (a system message), `input` (a string, the user's message, or
 * items: messages of `user`, `system`, `developer` (a system message) or `assistant`, their
 * content a string or input_text/output_text/refusal parts; `function_call`s, which join
 * the assistant turn before them; `function_call_output`s, a tool message each; `reasoning`,
 * the assistant turn's reasoning), `tools` ({type: function, name, description,
 * parameters}), `tool_choice` (auto, none, required, {type: function, name}),
 * `parallel_tool_calls`, `max_output_tokens`, `temperature`, `top_p`, `stream`,
 * `reasoning.effort` (the chat's reasoning_effort), `text.format` (text, json_object,
 * json_schema: the chat's response_format). The body's other fields go along as they are,
 * as llama.cpp sends them: a chat's own (top_k, logit_bias, grammar, ...) work, and `store`,
 * `metadata`, `include`, `truncation` are ignored as a chat ignores fields it does not know.
 * There is no store: `previous_response_id` is a 400, as in llama.cpp. Stricter than
 * llama.cpp, which skips them with a warning in its log: a tool of another type (web
 * search, file search...) or an image or file part is a 400 naming it, as moevm computes
 * text and runs no tools itself.
 *
 * The reply: `output` items in order, a `reasoning` item (its text as reasoning_text
 * content), a `message` item (one output_text part), a `function_call` item per call;
 * status `completed`, or `incomplete` with incomplete_details.reason `max_output_tokens`;
 * usage with the prompt's cached tokens. A stream sends OpenAI's events with their
 * sequence numbers, output and content indices and item ids, each item added, its deltas,
 * its done events, and the whole response in response.completed (llama.cpp sends the deltas
 * and the done items without indices).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/cli.h"
#include "tools/serve_responses.h"

/* ---- the request ---------------------------------------------------------------------------- */

/* The text of parts (input_text, output_text, refusal) or of a string, into a message's
 * content parts. */
static int content(const cJSON *c, cJSON *msg, const char *where, int i, char *bad, size_t cap)
{
    if (cJSON_IsString(c)) {
        cJSON_AddStringToObject(msg, "content", c->valuestring);
        return 0;
    }
    cJSON *parts = cJSON_AddArrayToObject(msg, "content");
    const cJSON *p;
    cJSON_ArrayForEach(p, (cJSON_IsArray(c) ? c : NULL))
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(
            p, !strcmp(t, "refusal") ? "refusal" : "text");
        if ((strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "refusal")) ||
            !cJSON_IsString(text)) {
            snprintf(bad, cap, "'%s'[%d]: a '%.40s' part: moevm takes input_text, output_text "
                     "and refusal parts (it computes text)", where, i, t);
            return -1;
        }
        cJSON *part = cJSON_CreateObject();
        cJSON_AddStringToObject(part, "type", "text");
        cJSON_AddStringToObject(part, "text", text->valuestring);
        cJSON_AddItemToArray(parts, part);
    }
    if (!cJSON_IsArray(c)) {
        snprintf(bad, cap, "'%s'[%d]: content must be a string or parts", where, i);
        return -1;
    }
    return 0;
}

/* The assistant message the item joins: the last message when it is the assistant's, else
 * a new one. */
static cJSON *assistant(cJSON *messages)
{
    cJSON *last = messages->child ? messages->child->prev : NULL;
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(last, "role");
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "assistant"))
        return last;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddItemToArray(messages, m);
    return m;
}

static int message_item(const cJSON *item, cJSON *messages, int i, char *bad, size_t cap)
{
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(item, "role");
    const char *r = cJSON_IsString(role) ? role->valuestring : "";
    if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "developer") &&
        strcmp(r, "assistant")) {
        snprintf(bad, cap, "'input'[%d]: a message's role is user, system, developer or "
                 "assistant", i);
        return -1;
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(item, "content");
    if (!strcmp(r, "assistant")) { /* after its reasoning or calls, the same turn's text */
        cJSON *m = assistant(messages);
        cJSON_DeleteItemFromObjectCaseSensitive(m, "content");
        return content(c, m, "input", i, bad, cap);
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", !strcmp(r, "developer") ? "system" : r);
    cJSON_AddItemToArray(messages, m);
    return content(c, m, "input", i, bad, cap);
}

static int call_item(const cJSON *item, cJSON *messages, int i, char *bad, size_t cap)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(item, "call_id");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(item, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(item, "arguments");
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args)) {
        snprintf(bad, cap, "'input'[%d]: a function_call is {\"call_id\", \"name\", "
                 "\"arguments\": a JSON text}", i);
        return -1;
    }
    cJSON *m = assistant(messages), *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (!calls)
        calls = cJSON_AddArrayToObject(m, "tool_calls");
    cJSON *call = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(call, "function");
    cJSON_AddStringToObject(call, "id", id->valuestring);
    cJSON_AddStringToObject(call, "type", "function");
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    cJSON_AddStringToObject(fn, "arguments", args->valuestring);
    cJSON_AddItemToArray(calls, call);
    return 0;
}

static int output_item(const cJSON *item, cJSON *messages, int i, char *bad, size_t cap)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(item, "call_id");
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(item, "output");
    if (!cJSON_IsString(id)) {
        snprintf(bad, cap, "'input'[%d]: a function_call_output needs its call_id", i);
        return -1;
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
    cJSON_AddItemToArray(messages, m);
    return content(out, m, "input", i, bad, cap);
}

/* A reasoning item: its content's (or summary's) texts, the assistant turn's reasoning. */
static int reasoning_item(const cJSON *item, cJSON *messages)
{
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(item, "content"), *p;
    if (!cJSON_IsArray(parts) || !parts->child)
        parts = cJSON_GetObjectItemCaseSensitive(item, "summary");
    size_t len = 1;
    cJSON_ArrayForEach(p, (cJSON_IsArray(parts) ? parts : NULL))
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
        len += cJSON_IsString(t) ? strlen(t->valuestring) : 0;
    }
    char *text = calloc(1, len);
    if (!text)
        return -1;
    cJSON_ArrayForEach(p, (cJSON_IsArray(parts) ? parts : NULL))
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (cJSON_IsString(t))
            strcat(text, t->valuestring);
    }
    cJSON *m = assistant(messages);
    cJSON_DeleteItemFromObjectCaseSensitive(m, "reasoning_content");
    cJSON_AddStringToObject(m, "reasoning_content", text);
    free(text);
    return 0;
}

static int input(const cJSON *in, cJSON *messages, char *bad, size_t cap)
{
    if (cJSON_IsString(in)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", in->valuestring);
        cJSON_AddItemToArray(messages, m);
        return 0;
    }
    if (!cJSON_IsArray(in) || !in->child) {
        snprintf(bad, cap, "'input' must be a string or a non-empty array of items");
        return -1;
    }
    int i = 0, rc = 0;
    for (const cJSON *item = in->child; item && !rc; item = item->next, i++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : "message";
        if (!strcmp(t, "message"))
            rc = message_item(item, messages, i, bad, cap);
        else if (!strcmp(t, "function_call"))
            rc = call_item(item, messages, i, bad, cap);
        else if (!strcmp(t, "function_call_output"))
            rc = output_item(item, messages, i, bad, cap);
        else if (!strcmp(t, "reasoning"))
            rc = reasoning_item(item, messages);
        else
            rc = -1, snprintf(bad, cap, "'input'[%d]: an item of type '%.40s': moevm takes "
                              "message, function_call, function_call_output and reasoning "
                              "items", i, t);
    }
    /* an assistant turn made of calls or reasoning alone has empty content */
    for (cJSON *m = messages->child; m; m = m->next)
        if (!cJSON_GetObjectItemCaseSensitive(m, "content"))
            cJSON_AddStringToObject(m, "content", "");
    return rc;
}

static int tools(const cJSON *in, cJSON *out, char *bad, size_t cap)
{
    if (!in || cJSON_IsNull(in))
        return 0;
    if (!cJSON_IsArray(in)) {
        snprintf(bad, cap, "'tools' must be an array of function tools");
        return -1;
    }
    cJSON *list = cJSON_AddArrayToObject(out, "tools");
    int i = 0;
    for (const cJSON *t = in->child; t; t = t->next, i++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
            !cJSON_IsString(name)) {
            snprintf(bad, cap, "'tools'[%d] must be {\"type\": \"function\", \"name\", "
                     "\"parameters\"} (OpenAI's own tools, which its servers run, are not "
                     "taken)", i);
            return -1;
        }
        cJSON *tool = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(tool, "function");
        cJSON_AddStringToObject(tool, "type", "function");
        static const char *const keys[] = {"name", "description", "parameters"};
        for (size_t k = 0; k < 3; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, keys[k]);
            if (v && !cJSON_IsNull(v))
                cJSON_AddItemToObject(fn, keys[k], cJSON_Duplicate(v, 1));
        }
        cJSON_AddItemToArray(list, tool);
    }
    return 0;
}

/* tool_choice: a string as the chat's, {type: function, name} as the chat's shape. */
static int tool_choice(const cJSON *tc, cJSON *out, char *bad, size_t cap)
{
    if (!tc || cJSON_IsNull(tc) || cJSON_IsString(tc)) {
        if (tc && !cJSON_IsNull(tc))
            cJSON_AddItemToObject(out, "tool_choice", cJSON_Duplicate(tc, 1));
        return 0;
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name)) {
        snprintf(bad, cap, "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                 "{\"type\": \"function\", \"name\": ...}");
        return -1;
    }
    cJSON *c = cJSON_AddObjectToObject(out, "tool_choice");
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", name->valuestring);
    return 0;
}

/* text.format into the chat's response_format; reasoning.effort into reasoning_effort. */
static int formats(const cJSON *in, cJSON *out, char *bad, size_t cap)
{
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(in, "text"), "format");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(fmt, "type");
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "json_schema")) {
        cJSON *rf = cJSON_AddObjectToObject(out, "response_format"), *js;
        cJSON_AddStringToObject(rf, "type", "json_schema");
        js = cJSON_AddObjectToObject(rf, "json_schema");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(fmt, "schema");
        if (schema)
            cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(schema, 1));
    } else if (cJSON_IsString(type) && !strcmp(type->valuestring, "json_object")) {
        cJSON_AddStringToObject(cJSON_AddObjectToObject(out, "response_format"), "type",
                                "json_object");
    } else if (fmt && !(cJSON_IsString(type) && !strcmp(type->valuestring, "text"))) {
        snprintf(bad, cap, "'text.format' must be {\"type\": \"text\"}, {\"type\": "
                 "\"json_object\"} or {\"type\": \"json_schema\", \"schema\": ...}");
        return -1;
    }
    const cJSON *effort = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(in, "reasoning"), "effort");
    if (effort && !cJSON_IsNull(effort))
        cJSON_AddItemToObject(out, "reasoning_effort", cJSON_Duplicate(effort, 1));
    return 0;
}

char *serve_responses_body(const char *body, size_t len, char *bad, size_t cap)
{
    cJSON *in = serve_api_parse(body, len, bad, cap), *out = in ? cJSON_Duplicate(in, 1) : NULL;
    if (!out) {
        cJSON_Delete(in);
        return NULL;
    }
    /* the rest of the body goes along, as llama.cpp's server sends it: the chat's own fields
     * (top_k, logit_bias, a grammar...) work here too, and the Responses' own are ignored */
    static const char *const converted[] = {"input", "instructions", "tools", "tool_choice",
                                            "text", "reasoning", "max_output_tokens",
                                            "previous_response_id", "messages", "max_tokens"};
    for (size_t k = 0; k < sizeof converted / sizeof *converted; k++)
        cJSON_DeleteItemFromObjectCaseSensitive(out, converted[k]);
    cJSON *messages = cJSON_AddArrayToObject(out, "messages");
    const cJSON *prev = cJSON_GetObjectItemCaseSensitive(in, "previous_response_id");
    const cJSON *instr = cJSON_GetObjectItemCaseSensitive(in, "instructions");
    int rc = 0;
    if (prev && !cJSON_IsNull(prev))
        rc = -1, snprintf(bad, cap, "'previous_response_id': moevm keeps no responses; send "
                          "the conversation in 'input'");
    if (!rc && instr && !cJSON_IsNull(instr)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddItemToArray(messages, m);
        rc = content(instr, m, "instructions", 0, bad, cap);
    }
    rc = rc || input(cJSON_GetObjectItemCaseSensitive(in, "input"), messages, bad, cap) ||
         tools(cJSON_GetObjectItemCaseSensitive(in, "tools"), out, bad, cap) ||
         tool_choice(cJSON_GetObjectItemCaseSensitive(in, "tool_choice"), out, bad, cap) ||
         formats(in, out, bad, cap);
    const cJSON *max = cJSON_GetObjectItemCaseSensitive(in, "max_output_tokens");
    if (!rc && max && !cJSON_IsNull(max))
        cJSON_AddItemToObject(out, "max_tokens", cJSON_Duplicate(max, 1));
    char *text = rc ? NULL : cJSON_PrintUnformatted(out);
    if (!rc && !text)
        snprintf(bad, cap, "out of memory");
    cJSON_Delete(in), cJSON_Delete(out);
    return text;
}

/* ---- the reply ------------------------------------------------------------------------------ */

static const char *id_of(const serve_req *r, const char *prefix, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s_%s", prefix, r->id);
    return buf;
}

static cJSON *reasoning_out(const serve_req *r, const char *text, int done)
{
    char id[64];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "reasoning");
    cJSON_AddStringToObject(o, "id", id_of(r, "rs", id, sizeof id));
    cJSON_AddArrayToObject(o, "summary");
    cJSON *c = cJSON_AddArrayToObject(o, "content");
    if (text) {
        cJSON *part = cJSON_CreateObject();
        cJSON_AddStringToObject(part, "type", "reasoning_text");
        cJSON_AddStringToObject(part, "text", text);
        cJSON_AddItemToArray(c, part);
    }
    cJSON_AddStringToObject(o, "status", done ? "completed" : "in_progress");
    return o;
}

static cJSON *text_part(const char *text)
{
    cJSON *part = cJSON_CreateObject();
    cJSON_AddStringToObject(part, "type", "output_text");
    cJSON_AddStringToObject(part, "text", text);
    cJSON_AddArrayToObject(part, "annotations");
    return part;
}

static cJSON *message_out(const serve_req *r, const char *text, int done)
{
    char id[64];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "id", id_of(r, "msg", id, sizeof id));
    cJSON_AddStringToObject(o, "status", done ? "completed" : "in_progress");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON *c = cJSON_AddArrayToObject(o, "content");
    if (text)
        cJSON_AddItemToArray(c, text_part(text));
    return o;
}

/* A call of the chat's shape as a function_call item (its arguments "" until done). */
/* A call's item id: "fc_" and its call id. */
static const char *call_item_id(const cJSON *call, char *buf, size_t cap)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(call, "id");
    snprintf(buf, cap, "fc_%s", cJSON_IsString(id) ? id->valuestring : "");
    return buf;
}

static cJSON *call_out(const cJSON *call, int done)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(call, "id");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    char item[96];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "function_call");
    cJSON_AddStringToObject(o, "id", call_item_id(call, item, sizeof item));
    cJSON_AddStringToObject(o, "call_id", cJSON_IsString(id) ? id->valuestring : "");
    cJSON_AddStringToObject(o, "name", cJSON_IsString(name) ? name->valuestring : "");
    cJSON_AddStringToObject(o, "arguments",
                            done && cJSON_IsString(args) ? args->valuestring : "");
    cJSON_AddStringToObject(o, "status", done ? "completed" : "in_progress");
    return o;
}

/* The response object around `output` (taken; NULL: not done yet, an empty one). */
static cJSON *response(const serve_api *a, const serve_req *r, cJSON *output, int done)
{
    char id[64];
    cJSON *o = cJSON_CreateObject();
    const int cut = done && !(r->finish && !strcmp(r->finish, "stop"));
    cJSON_AddStringToObject(o, "id", id_of(r, "resp", id, sizeof id));
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)r->created);
    cJSON_AddStringToObject(o, "status", !done ? "in_progress" : cut ? "incomplete" : "completed");
    cJSON_AddNullToObject(o, "error");
    if (cut)
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason",
                                "max_output_tokens");
    else
        cJSON_AddNullToObject(o, "incomplete_details");
    cJSON_AddStringToObject(o, "model", a->model_id);
    cJSON_AddItemToObject(o, "output", output ? output : cJSON_CreateArray());
    cJSON_AddBoolToObject(o, "parallel_tool_calls", r->parallel_calls);
    cJSON_AddStringToObject(o, "tool_choice", r->force_call ? "required" : "auto");
    cJSON *tools = cJSON_AddArrayToObject(o, "tools"), *t;
    cJSON_ArrayForEach(t, r->tools) /* back in the Responses shape */
    {
        cJSON *fn = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(t, "function"), 1);
        cJSON_AddStringToObject(fn, "type", "function");
        cJSON_AddItemToArray(tools, fn);
    }
    if (done) {
        const uint32_t cached = r->n_cached < r->n_prompt ? r->n_cached : r->n_prompt;
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "input_tokens", r->n_prompt);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"),
                                "cached_tokens", cached);
        cJSON_AddNumberToObject(u, "output_tokens", r->n_gen);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"),
                                "reasoning_tokens", 0);
        cJSON_AddNumberToObject(u, "total_tokens", (double)r->n_prompt + r->n_gen);
    } else {
        cJSON_AddNullToObject(o, "usage");
    }
    return o;
}

/* The whole reply's output items and response. */
static cJSON *whole(const serve_api *a, const serve_req *r)
{
    char *t = mvm_cli_valid_utf8(r->text, r->len);
    cJSON *m = serve_tools_message(r, t ? t : "", t ? strlen(t) : 0);
    free(t);
    cJSON *output = cJSON_CreateArray();
    const cJSON *think = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(m, "content"), *c;
    if (cJSON_IsString(think) && think->valuestring[0])
        cJSON_AddItemToArray(output, reasoning_out(r, think->valuestring, 1));
    if (cJSON_IsString(text) && text->valuestring[0])
        cJSON_AddItemToArray(output, message_out(r, text->valuestring, 1));
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "tool_calls"))
        cJSON_AddItemToArray(output, call_out(c, 1));
    cJSON_Delete(m);
    return response(a, r, output, 1);
}

char *serve_responses_response(const serve_api *a, const serve_req *r)
{
    cJSON *o = whole(a, r);
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

/* ---- the stream ------------------------------------------------------------------------------ */

/* {"type": type, "sequence_number": n} */
static cJSON *event(serve_responses_stream *s, const char *type)
{
    cJSON *o = serve_api_typed(type);
    cJSON_AddNumberToObject(o, "sequence_number", s->seq++);
    return o;
}

/* An event about the open item: its output_index, item_id and (a part's) content_index. */
static cJSON *item_event(serve_responses_stream *s, const serve_req *r, const char *type,
                         int part)
{
    char id[64];
    cJSON *o = event(s, type);
    cJSON_AddNumberToObject(o, "output_index", s->items);
    cJSON_AddStringToObject(o, "item_id", id_of(r, s->open == 1 ? "rs" : "msg", id, sizeof id));
    if (part)
        cJSON_AddNumberToObject(o, "content_index", 0);
    return o;
}

static cJSON *item_added(serve_responses_stream *s, const char *type, cJSON *item)
{
    cJSON *o = event(s, type);
    cJSON_AddNumberToObject(o, "output_index", s->items);
    cJSON_AddItemToObject(o, "item", item);
    return o;
}

/* An event about the open call's arguments: its output_index, item_id, and key: text. */
static cJSON *args_event(serve_responses_stream *s, const char *type, const char *key,
                         const char *text)
{
    char item[96];
    cJSON *e = event(s, type);
    cJSON_AddNumberToObject(e, "output_index", s->items);
    cJSON_AddStringToObject(e, "item_id", call_item_id(s->call, item, sizeof item));
    cJSON_AddStringToObject(e, key, text);
    return e;
}

/* The open call's done events: its arguments whole, the item. */
static int finish_call(serve_responses_stream *s, const char *args, char **buf, size_t *len)
{
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(s->call, "function"),
                                           "arguments", cJSON_CreateString(args));
    int rc = serve_api_typed_event(
        buf, len, args_event(s, "response.function_call_arguments.done", "arguments", args));
    rc |= serve_api_typed_event(buf, len, item_added(s, "response.output_item.done",
                                                     call_out(s->call, 1)));
    cJSON_Delete(s->call);
    s->call = NULL;
    return rc;
}

/* The open item's done events, if one is open. */
static int finish_item(serve_responses_stream *s, const serve_req *r, char **buf, size_t *len)
{
    if (!s->open)
        return 0;
    const char *text = s->text ? s->text : "";
    if (s->open == 3) {
        const int rc = finish_call(s, text, buf, len);
        free(s->text);
        s->text = NULL, s->len = 0, s->open = 0, s->items++;
        return rc;
    }
    cJSON *d = item_event(s, r, s->open == 1 ? "response.reasoning_text.done"
                                             : "response.output_text.done", 1);
    cJSON_AddStringToObject(d, "text", text);
    int rc = serve_api_typed_event(buf, len, d);
    if (s->open == 2) {
        cJSON *p = item_event(s, r, "response.content_part.done", 1);
        cJSON_AddItemToObject(p, "part", text_part(text));
        rc |= serve_api_typed_event(buf, len, p);
    }
    cJSON *item = s->open == 1 ? reasoning_out(r, text, 1) : message_out(r, text, 1);
    rc |= serve_api_typed_event(buf, len, item_added(s, "response.output_item.done", item));
    free(s->text);
    s->text = NULL, s->len = 0, s->open = 0, s->items++;
    return rc;
}

/* text appended to the open item's; -1 without memory. */
static int keep_text(serve_responses_stream *s, const char *text)
{
    const size_t n = strlen(text);
    char *grown = realloc(s->text, s->len + n + 1);
    if (!grown)
        return -1;
    memcpy(grown + s->len, text, n + 1);
    s->text = grown, s->len += n;
    return 0;
}

/* Text of an item kind (1 reasoning, 2 message) as a delta, the item added first. */
static int text_delta(serve_responses_stream *s, const serve_req *r, int kind, const char *text,
                      char **buf, size_t *len)
{
    if (s->open != kind) {
        if (finish_item(s, r, buf, len))
            return -1;
        cJSON *item = kind == 1 ? reasoning_out(r, NULL, 0) : message_out(r, NULL, 0);
        if (serve_api_typed_event(buf, len, item_added(s, "response.output_item.added", item)))
            return -1;
        s->open = kind;
        if (kind == 2) {
            cJSON *p = item_event(s, r, "response.content_part.added", 1);
            cJSON_AddItemToObject(p, "part", text_part(""));
            if (serve_api_typed_event(buf, len, p))
                return -1;
        }
    }
    if (keep_text(s, text))
        return -1;
    cJSON *d = item_event(s, r, kind == 1 ? "response.reasoning_text.delta"
                                          : "response.output_text.delta", 1);
    cJSON_AddStringToObject(d, "delta", text);
    return serve_api_typed_event(buf, len, d);
}

/* A call as its item: added (its first piece, with its id) with empty arguments, then its
 * arguments as deltas, in one piece or several (serve_tools_delta's); done when the next
 * item begins or the response ends. */
static int call_events(serve_responses_stream *s, const serve_req *r, const cJSON *call,
                       char **buf, size_t *len)
{
    const char *args = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(call, "function"), "arguments"));
    if (cJSON_GetObjectItemCaseSensitive(call, "id")) {
        if (finish_item(s, r, buf, len) ||
            serve_api_typed_event(buf, len, item_added(s, "response.output_item.added",
                                                       call_out(call, 0))) ||
            !(s->call = cJSON_Duplicate(call, 1)))
            return -1;
        s->open = 3;
    }
    if (!args || !args[0] || s->open != 3)
        return 0;
    if (keep_text(s, args))
        return -1;
    return serve_api_typed_event(
        buf, len, args_event(s, "response.function_call_arguments.delta", "delta", args));
}

char *serve_responses_start(const serve_api *a, const serve_req *r, serve_responses_stream *s)
{
    char *buf = NULL;
    size_t len = 0;
    cJSON *c = event(s, "response.created"), *p = event(s, "response.in_progress");
    cJSON_AddItemToObject(c, "response", response(a, r, NULL, 0));
    cJSON_AddItemToObject(p, "response", response(a, r, NULL, 0));
    if (serve_api_typed_event(&buf, &len, c) | serve_api_typed_event(&buf, &len, p)) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* serve_api_delta_events' sink: the stream and its request. */
struct sink {
    serve_responses_stream *s;
    const serve_req *r;
};

static int on_text(void *ctx, int kind, const char *text, char **buf, size_t *len)
{
    const struct sink *k = ctx;
    return text_delta(k->s, k->r, kind, text, buf, len);
}

static int on_call(void *ctx, const cJSON *call, char **buf, size_t *len)
{
    const struct sink *k = ctx;
    return call_events(k->s, k->r, call, buf, len);
}

char *serve_responses_delta(const serve_req *r, serve_responses_stream *s, const cJSON *delta)
{
    struct sink k = {s, r};
    return serve_api_delta_events(delta, &(serve_delta_sink){on_text, on_call, &k});
}

char *serve_responses_end(const serve_api *a, const serve_req *r, serve_responses_stream *s)
{
    char *buf = NULL;
    size_t len = 0;
    if (finish_item(s, r, &buf, &len)) {
        free(buf);
        return NULL;
    }
    cJSON *e;
    if (r->error) {
        char *line = serve_api_one_line(r->error);
        e = event(s, "error");
        cJSON_AddStringToObject(e, "code", "server_error");
        cJSON_AddStringToObject(e, "message", line ? line : "out of memory");
        free(line);
    } else {
        cJSON *whole_response = whole(a, r);
        const cJSON *status = cJSON_GetObjectItemCaseSensitive(whole_response, "status");
        e = event(s, !strcmp(status->valuestring, "completed") ? "response.completed"
                                                               : "response.incomplete");
        cJSON_AddItemToObject(e, "response", whole_response);
    }
    if (serve_api_typed_event(&buf, &len, e))
        free(buf), buf = NULL;
    return buf;
}

void serve_responses_stream_free(serve_responses_stream *s)
{
    free(s->text);
    cJSON_Delete(s->call);
    s->text = NULL, s->call = NULL;
}

char *serve_responses_count(const serve_api *a, const char *body, size_t len, int *status)
{
    char bad[512] = "";
    char *chat = serve_responses_body(body, len, bad, sizeof bad);
    if (!chat) {
        *status = strcmp(bad, "out of memory") ? 400 : 500;
        return serve_api_error(bad, *status == 400 ? "invalid_request_error" : "server_error");
    }
    char *out = serve_api_count(a, chat, strlen(chat), "response.input_tokens", status);
    free(chat);
    return out;
}
