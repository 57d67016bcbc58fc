/* Each syntax's tool-call markup (chat_reply.h lists them), read into OpenAI's calls.
 *
 * A block whose closing marker has not come is "may yet be completed" while the reply
 * streams, and is read to the reply's end once it is over (a model that stops at its
 * end-of-turn token before closing the block still made its call). A block that closes
 * around something else is not a call. */
#include "engine/chat/chat_reply_impl.h"

#include <stdlib.h>
#include <string.h>

#define DS_CALLS "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END "<｜tool▁calls▁end｜>"
#define DS_CALL "<｜tool▁call▁begin｜>"
#define DS_CALL_END "<｜tool▁call▁end｜>"
#define DS_SEP "<｜tool▁sep｜>"
#define KIMI_CALLS "<|tool_calls_section_begin|>"

const char *cr_call_start(mvm_chat_syntax s)
{
    switch (s) {
    case MVM_CHAT_MINIMAX_M2: return "<minimax:tool_call>";
    case MVM_CHAT_GLM45:
    case MVM_CHAT_QWEN3_CODER:
    case MVM_CHAT_HERMES: return "<tool_call>";
    case MVM_CHAT_DEEPSEEK_R1:
    case MVM_CHAT_DEEPSEEK_V31: return DS_CALLS;
    case MVM_CHAT_KIMI_K2: return KIMI_CALLS;
    case MVM_CHAT_MISTRAL: return "[TOOL_CALLS]";
    default: return "";
    }
}

static cr_span after(cr_span s, const char *at, size_t skip)
{
    return (cr_span){at + skip, s.n - (size_t)(at - s.p) - skip};
}

static int eat(cr_span *s, const char *m)
{
    const size_t k = strlen(m);
    if (s->n < k || memcmp(s->p, m, k))
        return 0;
    s->p += k, s->n -= k;
    return 1;
}

/* The text of s up to `m` into *head, s moved past m; 0 when m does not come. */
static int until(cr_span *s, const char *m, cr_span *head)
{
    const char *at = cr_find(*s, m);
    if (!at)
        return 0;
    *head = (cr_span){s->p, (size_t)(at - s->p)};
    *s = after(*s, at, strlen(m));
    return 1;
}

/* Adds {"type": "function", "function": {name, arguments}}; 0 when out of memory. */
static int add_call(cJSON *calls, cr_span name, const cJSON *args)
{
    char *n = strndup(name.p, name.n), *a = cJSON_PrintUnformatted(args);
    cJSON *call = n && a ? cJSON_CreateObject() : NULL, *fn;
    int ok = call && cJSON_AddStringToObject(call, "type", "function") &&
             (fn = cJSON_AddObjectToObject(call, "function")) &&
             cJSON_AddStringToObject(fn, "name", n) && cJSON_AddStringToObject(fn, "arguments", a);
    if (ok)
        cJSON_AddItemToArray(calls, call);
    else
        cJSON_Delete(call);
    free(n), free(a);
    return ok;
}

/* A call whose arguments are a JSON object's text; -1 when they are not one. */
static int json_call(cJSON *calls, cr_span name, cr_span args)
{
    args = cr_trim(args), name = cr_trim(name);
    cJSON *a = cJSON_ParseWithLength(args.p, args.n);
    const int ok = name.n && cJSON_IsObject(a) ? add_call(calls, name, a) : -1;
    cJSON_Delete(a);
    return ok == 1 ? 1 : -1;
}

/* ---- XML-style arguments: typed by the tool's schema ------------------------------------ */

static const cJSON *param_schema(const cJSON *tools, cr_span tool, const char *key)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (cJSON_IsString(n) && strlen(n->valuestring) == tool.n &&
            !memcmp(n->valuestring, tool.p, tool.n)) {
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
            return cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(p, "properties"), key);
        }
    }
    return NULL;
}

/* Adds key: value to args, value a string where the schema says so or it is no JSON. */
static int put_arg(const mvm_chat_reply_opts *o, cJSON *args, cr_span tool, cr_span key,
                   cr_span value)
{
    char *k = strndup(key.p, key.n);
    const cJSON *type = k ? cJSON_GetObjectItemCaseSensitive(
                                param_schema(o->tool_list, tool, k), "type")
                          : NULL;
    const int text = cJSON_IsString(type) && !strcmp(type->valuestring, "string");
    cr_span v = cr_trim(value);
    cJSON *item = text ? NULL : cJSON_ParseWithLength(v.p, v.n);
    if (!item) {
        char *s = strndup(value.p, value.n);
        item = s ? cJSON_CreateString(s) : NULL;
        free(s);
    }
    const int ok = k && item && !cJSON_GetObjectItemCaseSensitive(args, k) &&
                   cJSON_AddItemToObject(args, k, item);
    if (!ok)
        cJSON_Delete(item);
    free(k);
    return ok;
}

/* one newline each side of an XML value is the markup's, not the value's */
static cr_span unwrap(cr_span v)
{
    if (v.n && v.p[0] == '\n')
        v.p++, v.n--;
    if (v.n && v.p[v.n - 1] == '\n')
        v.n--;
    return v;
}

/* ---- the syntaxes ---------------------------------------------------------------------- */

static int hermes(cr_span b, cJSON *calls)
{
    b = cr_trim(b);
    cJSON *j = cJSON_ParseWithLength(b.p, b.n);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    cJSON *parsed = cJSON_IsString(a) ? cJSON_Parse(a->valuestring) : NULL;
    int ok = -1;
    if (cJSON_IsString(n) && n->valuestring[0] && cJSON_IsObject(parsed ? parsed : a))
        ok = add_call(calls, (cr_span){n->valuestring, strlen(n->valuestring)},
                      parsed ? parsed : a) ? 1 : -1;
    cJSON_Delete(j), cJSON_Delete(parsed);
    return ok;
}

/* <function=NAME> <parameter=KEY>VALUE</parameter>... </function> */
static int qwen3_coder(const mvm_chat_reply_opts *o, cr_span b, cJSON *calls)
{
    cr_span name, key, value;
    b = cr_trim(b);
    if (!eat(&b, "<function=") || !until(&b, ">", &name) || !name.n)
        return -1;
    cJSON *args = cJSON_CreateObject();
    int ok = args != NULL;
    for (b = cr_trim(b); ok && !eat(&b, "</function>"); b = cr_trim(b))
        ok = eat(&b, "<parameter=") && until(&b, ">", &key) && until(&b, "</parameter>", &value) &&
             put_arg(o, args, name, key, unwrap(value));
    ok = ok && !b.n && add_call(calls, name, args);
    cJSON_Delete(args);
    return ok ? 1 : -1;
}

/* NAME <arg_key>K</arg_key><arg_value>V</arg_value>..., or NAME {json} */
static int glm45(const mvm_chat_reply_opts *o, cr_span b, cJSON *calls)
{
    cr_span name = b, key, value;
    const char *nl = cr_find(b, "\n"), *k = cr_find(b, "<arg_key>");
    const char *end = nl && (!k || nl < k) ? nl : k;
    name.n = end ? (size_t)(end - b.p) : b.n;
    b = cr_trim(after(b, b.p, name.n)), name = cr_trim(name);
    if (b.n && b.p[0] == '{')
        return json_call(calls, name, b);
    cJSON *args = cJSON_CreateObject();
    int ok = args && name.n;
    for (; ok && b.n; b = cr_trim(b))
        ok = eat(&b, "<arg_key>") && until(&b, "</arg_key>", &key) && (b = cr_trim(b), 1) &&
             eat(&b, "<arg_value>") && until(&b, "</arg_value>", &value) &&
             put_arg(o, args, name, cr_trim(key), value);
    ok = ok && add_call(calls, name, args);
    cJSON_Delete(args);
    return ok ? 1 : -1;
}

/* <invoke name="N"><parameter name="K">V</parameter>...</invoke>, one or more */
static int minimax(const mvm_chat_reply_opts *o, cr_span b, cJSON *calls)
{
    cr_span name, key, value, body;
    int n = 0;
    for (b = cr_trim(b); b.n; b = cr_trim(b), n++) {
        if (!eat(&b, "<invoke name=\"") || !until(&b, "\">", &name) ||
            !until(&b, "</invoke>", &body))
            return -1;
        cJSON *args = cJSON_CreateObject();
        int ok = args != NULL;
        for (body = cr_trim(body); ok && body.n; body = cr_trim(body))
            ok = eat(&body, "<parameter name=\"") && until(&body, "\">", &key) &&
                 until(&body, "</parameter>", &value) && put_arg(o, args, name, key, value);
        ok = ok && add_call(calls, name, args);
        cJSON_Delete(args);
        if (!ok)
            return -1;
    }
    return n ? 1 : -1;
}

/* <｜tool▁call▁begin｜>...<｜tool▁call▁end｜>, one or more: R1's "function<sep>NAME\n```json
 * ARGS```", V3.1's "NAME<sep>ARGS" */
static int deepseek(int r1, cr_span b, cJSON *calls)
{
    cr_span call, head, args;
    int n = 0;
    for (b = cr_trim(b); b.n; b = cr_trim(b), n++) {
        if (!eat(&b, DS_CALL))
            return -1;
        if (!until(&b, DS_CALL_END, &call))
            call = b, b.n = 0; /* the reply ended inside it */
        if (!until(&call, DS_SEP, &head))
            return -1;
        if (!r1) {
            if (json_call(calls, head, call) < 0)
                return -1;
            continue;
        }
        cr_span name;
        if (!until(&call, "\n", &name) || (call = cr_trim(call), !eat(&call, "```json")) ||
            !until(&call, "```", &args) || cr_trim(call).n || json_call(calls, name, args) < 0)
            return -1;
    }
    return n ? 1 : -1;
}

/* <|tool_call_begin|>functions.NAME:I<|tool_call_argument_begin|>ARGS<|tool_call_end|>... */
static int kimi(cr_span b, cJSON *calls)
{
    cr_span id, args;
    int n = 0;
    for (b = cr_trim(b); b.n; b = cr_trim(b), n++) {
        if (!eat(&b, "<|tool_call_begin|>") || !until(&b, "<|tool_call_argument_begin|>", &id))
            return -1;
        if (!until(&b, "<|tool_call_end|>", &args))
            args = b, b.n = 0;
        id = cr_trim(id);
        if (id.n > 10 && !memcmp(id.p, "functions.", 10))
            id.p += 10, id.n -= 10;
        for (size_t i = id.n; i-- > 0;)
            if (id.p[i] == ':') {
                id.n = i;
                break;
            }
        if (json_call(calls, id, args) < 0)
            return -1;
    }
    return n ? 1 : -1;
}

/* [TOOL_CALLS] then a JSON array of {name, arguments}, or NAME[ARGS]{json} (Mistral's later
 * tokenizers): the block ends where its JSON does. */
static int mistral(cr_span s, int partial, cJSON *calls, size_t *used)
{
    cr_span b = s, name = {s.p, 0};
    eat(&b, "[TOOL_CALLS]");
    b = cr_trim(b);
    const int list = b.n && b.p[0] == '[';
    if (!list && !until(&b, "[ARGS]", &name))
        return partial ? 0 : -1;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(b.p, b.n, &end, 0);
    if (!j)
        return partial ? 0 : -1;
    int ok = list ? cJSON_IsArray(j) && cJSON_GetArraySize(j) > 0 : cJSON_IsObject(j);
    const cJSON *c;
    if (ok && list) {
        cJSON_ArrayForEach(c, j)
        {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name");
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "arguments");
            ok = ok && cJSON_IsString(n) && cJSON_IsObject(a) &&
                 add_call(calls, (cr_span){n->valuestring, strlen(n->valuestring)}, a);
        }
    } else if (ok) {
        ok = cr_trim(name).n && add_call(calls, cr_trim(name), j);
    }
    cJSON_Delete(j);
    *used = (size_t)(end - s.p);
    return ok ? 1 : -1;
}

static int block(const mvm_chat_reply_opts *o, cr_span s, int partial, cJSON *calls,
                 size_t *used)
{
    static const char *const ends[] = {
        [MVM_CHAT_MINIMAX_M2] = "</minimax:tool_call>", [MVM_CHAT_GLM45] = "</tool_call>",
        [MVM_CHAT_QWEN3_CODER] = "</tool_call>",         [MVM_CHAT_HERMES] = "</tool_call>",
        [MVM_CHAT_DEEPSEEK_R1] = DS_CALLS_END,           [MVM_CHAT_DEEPSEEK_V31] = DS_CALLS_END,
        [MVM_CHAT_KIMI_K2] = "<|tool_calls_section_end|>",
    };
    if (o->syntax == MVM_CHAT_MISTRAL)
        return mistral(s, partial, calls, used);
    if ((unsigned)o->syntax >= sizeof ends / sizeof ends[0] || !ends[o->syntax])
        return -1;
    cr_span b = s, body;
    eat(&b, cr_call_start(o->syntax));
    if (!until(&b, ends[o->syntax], &body)) {
        if (partial)
            return 0;
        body = b, b.n = 0, b.p = s.p + s.n;
    }
    *used = (size_t)(b.p - s.p);
    switch (o->syntax) {
    case MVM_CHAT_HERMES: return hermes(body, calls);
    case MVM_CHAT_QWEN3_CODER: return qwen3_coder(o, body, calls);
    case MVM_CHAT_GLM45: return glm45(o, body, calls);
    case MVM_CHAT_MINIMAX_M2: return minimax(o, body, calls);
    case MVM_CHAT_KIMI_K2: return kimi(body, calls);
    default: return deepseek(o->syntax == MVM_CHAT_DEEPSEEK_R1, body, calls);
    }
}

int cr_calls(const mvm_chat_reply_opts *o, cr_span s, int partial, cJSON *calls, size_t *used)
{
    /* a block's calls are taken whole or not at all */
    cJSON *got = cJSON_CreateArray();
    const int r = got ? block(o, s, partial, got, used) : -1;
    while (r == 1 && got->child)
        cJSON_AddItemToArray(calls, cJSON_DetachItemViaPointer(got, got->child));
    cJSON_Delete(got);
    return r;
}
