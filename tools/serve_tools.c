/*
 * A chat's tools and its reply's parts, as llama.cpp's server (--jinja) and OpenAI's API
 * have them (docs/serve.md, "Tool calls and reasoning"):
 *   - the request's `tools` go to the chat template, which describes them to the model, and
 *     the arguments of earlier calls in `messages` become objects, as templates index them
 *     (llama.cpp's func_args_not_string);
 *   - the reply is read back (engine/chat/chat_reply.h, the syntax found from the template):
 *     `reasoning_content`, `content`, and `tool_calls` with ids, finish_reason "tool_calls";
 *     a stream sends each part as it becomes certain, a call's arguments in pieces where a
 *     grammar holds it (else whole);
 *   - `tool_choice` "required" or a function forces a call with a grammar of its tools'
 *     schemas; "none" reads no calls; `parallel_tool_calls` lets a forced reply make several;
 *   - `reasoning_format` "none" leaves the reasoning in the content (--reasoning-format).
 * The syntax's markup that the vocabulary has as control tokens is kept in the reply's text
 * (llama.cpp's preserved tokens): the reader needs it.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli_engine.h"
#include "tools/serve_api.h"

/* ---- the request --------------------------------------------------------------------------- */

static int check_tools(const cJSON *tools, char *bad, size_t cap)
{
    if (!cJSON_IsArray(tools))
        goto shape;
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
            !cJSON_IsObject(fn) || !cJSON_IsString(name) || !name->valuestring[0] ||
            strlen(name->valuestring) > 256 || (params && !cJSON_IsObject(params))) {
            snprintf(bad, cap, "'tools'[%d] must be {\"type\": \"function\", \"function\": "
                     "{\"name\": a name, \"parameters\": a JSON Schema object}}", i);
            return -1;
        }
    }
    return 0;
shape:
    snprintf(bad, cap, "'tools' must be an array of {\"type\": \"function\", \"function\": "
             "{...}}");
    return -1;
}

/* tool_choice: "none", "auto", "required", or {"type": "function", "function": {"name"}}. */
static int tool_choice(const cJSON *body, serve_req *r, char *bad, size_t cap)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(body, "tool_choice");
    if (!c || cJSON_IsNull(c) || (cJSON_IsString(c) && !strcmp(c->valuestring, "auto")))
        return 0;
    if (cJSON_IsString(c) && !strcmp(c->valuestring, "none")) {
        r->reply.tools = 0;
        return 0;
    }
    r->force_call = 1;
    if (cJSON_IsString(c) && !strcmp(c->valuestring, "required"))
        return 0;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(c, "function"), "name");
    if (cJSON_IsObject(c) && cJSON_IsString(name)) {
        r->force_name = strdup(name->valuestring);
        if (r->force_name)
            return 0;
        snprintf(bad, cap, "out of memory");
        return -1;
    }
    snprintf(bad, cap, "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
             "\"function\", \"function\": {\"name\": ...}}");
    return -1;
}

/* Whether the body asks for a grammar of its own (serve_grammar.c's fields). */
static int own_grammar(const cJSON *body)
{
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(body, "grammar");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(body, "json_schema");
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(body, "response_format");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
    return (cJSON_IsString(g) && g->valuestring[0]) || (js && !cJSON_IsNull(js)) ||
           (cJSON_IsString(type) && strcmp(type->valuestring, "text"));
}

int serve_tools_read(const serve_api *a, const cJSON *body, serve_req *r, char *bad,
                     size_t cap)
{
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(body, "tools");
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(body, "reasoning_format");
    r->parse_reply = 1;
    r->reply.syntax = mvm_chat_syntax_of(mvm_engine_chat_template(a->e));
    r->reply.reasoning = !a->reasoning_none;
    if (format && !cJSON_IsNull(format)) {
        const char *f = cJSON_IsString(format) ? format->valuestring : "";
        if (strcmp(f, "none") && strcmp(f, "auto") && strcmp(f, "deepseek")) {
            snprintf(bad, cap, "'reasoning_format' must be \"none\", \"auto\" or \"deepseek\"");
            return -1;
        }
        r->reply.reasoning = strcmp(f, "none") != 0;
    }
    if (serve_api_flag(body, "parallel_tool_calls", &r->parallel_calls, bad, cap))
        return -1;
    r->n_keep = mvm_cli_reply_markers(a->e, r->keep, SERVE_MAX_KEEP);
    if (!tools || cJSON_IsNull(tools) || (cJSON_IsArray(tools) && !tools->child))
        return 0;
    if (check_tools(tools, bad, cap))
        return -1;
    r->reply.tools = 1;
    if (tool_choice(body, r, bad, cap))
        return -1;
    /* under "auto", a call the model begins is held to its tools, the syntax allowing
     * (and no other grammar binding: serve_api.c's bind_tools) */
    r->lazy_call = !r->force_call && r->reply.tools && mvm_chat_tool_trigger(r->reply.syntax);
    if (r->force_call && own_grammar(body)) {
        snprintf(bad, cap, "a 'tool_choice' that forces a call makes its own grammar: give "
                 "no 'grammar', 'json_schema' or 'response_format' with it");
        return -1;
    }
    if (!(r->tools = cJSON_Duplicate(tools, 1))) {
        snprintf(bad, cap, "out of memory");
        return -1;
    }
    r->reply.tool_list = r->tools;
    return 0;
}

int serve_tools_copy(const serve_req *from, serve_req *to)
{
    to->parse_reply = from->parse_reply, to->reply = from->reply;
    to->force_call = from->force_call, to->parallel_calls = from->parallel_calls;
    to->lazy_call = from->lazy_call;
    memcpy(to->keep, from->keep, sizeof to->keep);
    to->n_keep = from->n_keep;
    to->tools = from->tools ? cJSON_Duplicate(from->tools, 1) : NULL;
    to->reply.tool_list = to->tools;
    to->force_name = from->force_name ? strdup(from->force_name) : NULL;
    return (from->tools && !to->tools) || (from->force_name && !to->force_name) ? -1 : 0;
}

char *serve_tools_grammar(const serve_req *r, char *bad, size_t cap)
{
    char *gbnf = NULL;
    /* a lazy grammar starts at the call: the reasoning before it is free */
    const int thinking = r->force_call && r->reply.thinking_open;
    if ((r->force_call || r->lazy_call) &&
        mvm_chat_tool_grammar(r->reply.syntax, r->tools, r->force_name, r->parallel_calls,
                              thinking, &gbnf, bad, cap))
        return NULL;
    return gbnf;
}

int serve_tools_lazy(serve_req *r, char *bad, size_t cap)
{
    const char *word = mvm_chat_tool_trigger(r->reply.syntax), *open, *close;
    mvm_chat_reasoning_marks(r->reply.syntax, &open, &close);
    const mvm_grammar_triggers t = {&word, 1, open, close, r->reply.thinking_open};
    if (mvm_grammar_set_lazy(r->grammar, &t) == MVM_OK)
        return 0;
    snprintf(bad, cap, "%s", mvm_last_error());
    return -1;
}

/* ---- the template's variables ------------------------------------------------------------ */

int serve_tools_template_vars(cJSON *body, cJSON *vars)
{
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages"), *m, *c;
    cJSON_ArrayForEach(m, msgs)
    {
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "tool_calls"))
        {
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
            cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            cJSON *obj = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
            if (cJSON_IsObject(obj))
                cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj), obj = NULL;
            cJSON_Delete(obj);
        }
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(body, "tools");
    if (!cJSON_IsArray(tools) || !tools->child ||
        cJSON_GetObjectItemCaseSensitive(vars, "tools"))
        return 0;
    cJSON *copy = cJSON_Duplicate(tools, 1);
    return copy && cJSON_AddItemToObject(vars, "tools", copy) ? 0 : -1;
}

/* ---- the reply ----------------------------------------------------------------------------- */

/* Call i gets its id ("call_" the request's id and the index) and, in a stream, its index. */
static void name_call(const serve_req *r, cJSON *c, int i, int indexed)
{
    char id[80];
    snprintf(id, sizeof id, "call_%s_%d", r->id, i);
    cJSON_AddItemToObject(c, "id", cJSON_CreateString(id));
    if (indexed)
        cJSON_AddItemToObject(c, "index", cJSON_CreateNumber(i));
}

cJSON *serve_tools_message(const serve_req *r, const char *text, size_t n)
{
    cJSON *m = mvm_chat_reply_parse(&r->reply, text, n, 0), *c;
    int i = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "tool_calls"))
        name_call(r, c, i++, 0);
    return m;
}

const char *serve_tools_finish(const char *finish, int calls)
{
    return finish && !strcmp(finish, "stop") && calls ? "tool_calls" : finish;
}

cJSON *serve_tools_delta(const serve_req *r, const char *text, size_t n, int final,
                         serve_sent *sent)
{
    cJSON *m = mvm_chat_reply_parse(&r->reply, text, n, !final);
    cJSON *d = m ? cJSON_CreateObject() : NULL;
    static const char *const parts[] = {"reasoning_content", "content"};
    size_t *at[] = {&sent->reasoning, &sent->content};
    int any = 0;
    for (int i = 0; d && i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, parts[i]);
        const size_t len = cJSON_IsString(v) ? strlen(v->valuestring) : 0;
        if (len > *at[i]) { /* a longer prefix of the same text (chat_reply.h) */
            cJSON_AddStringToObject(d, parts[i], v->valuestring + *at[i]);
            *at[i] = len, any = 1;
        }
    }
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *fresh = NULL;
    const int n_calls = cJSON_GetArraySize(calls);
    /* the last call begun may have more of its arguments (chat_reply.h: held) */
    for (int i = sent->calls ? sent->calls - 1 : 0; d && i < n_calls; i++) {
        cJSON *c = cJSON_GetArrayItem(calls, i);
        const char *args = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(c, "function"), "arguments"));
        const size_t len = args ? strlen(args) : 0;
        if (i < sent->calls && len <= sent->args)
            continue;
        cJSON *item = i < sent->calls ? cJSON_CreateObject() : cJSON_Duplicate(c, 1);
        if (!fresh)
            fresh = cJSON_AddArrayToObject(d, "tool_calls");
        cJSON_AddItemToArray(fresh, item);
        if (i < sent->calls) {
            cJSON_AddNumberToObject(item, "index", i);
            cJSON_AddStringToObject(cJSON_AddObjectToObject(item, "function"), "arguments",
                                    args + sent->args);
        } else {
            name_call(r, item, i, 1);
        }
        sent->args = len, any = 1;
    }
    sent->calls = n_calls > sent->calls ? n_calls : sent->calls;
    cJSON_Delete(m);
    if (!any) {
        cJSON_Delete(d);
        return NULL;
    }
    return d;
}
