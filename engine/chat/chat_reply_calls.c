/* Each syntax's tool-call markup (chat_reply.h lists them), read into OpenAI's calls.
 *
 * A block whose closing marker has not come is "may yet be completed" while the reply
 * streams, and is read to the reply's end once it is over (a model that stops at its
 * end-of-turn token before closing the block still made its call). A block that closes
 * around something else is not a call.
 *
 * Where a grammar holds the calls (o->held), a block the text ends in is read "cut": its
 * whole calls, then the last one once its name is whole, with its arguments as far as
 * they are certain (engine/chat/json_prefix.h; an XML syntax's parameters whole, and a
 * string parameter's text so far). The grammar sees that what was begun as a call ends as
 * one, so the parts reported never have to be taken back. */
#include "engine/chat/chat_reply_impl.h"

#include <stdlib.h>
#include <string.h>

#include "engine/chat/json_prefix.h"

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

/* Adds {"type": "function", "function": {name, arguments (a text)}}; 0 when out of memory. */
static int add_call_text(cJSON *calls, cr_span name, const char *args)
{
    char *n = strndup(name.p, name.n);
    cJSON *call = n && args ? cJSON_CreateObject() : NULL, *fn;
    int ok = call && cJSON_AddStringToObject(call, "type", "function") &&
             (fn = cJSON_AddObjectToObject(call, "function")) &&
             cJSON_AddStringToObject(fn, "name", n) &&
             cJSON_AddStringToObject(fn, "arguments", args);
    if (ok)
        cJSON_AddItemToArray(calls, call);
    else
        cJSON_Delete(call);
    free(n);
    return ok;
}

static int add_call(cJSON *calls, cr_span name, const cJSON *args)
{
    char *a = cJSON_PrintUnformatted(args);
    const int ok = add_call_text(calls, name, a);
    free(a);
    return ok;
}

/* The print of a (a healed tree's part) without its last `strip` characters, malloc'd. */
static char *print_cut(const cJSON *a, size_t strip)
{
    char *p = cJSON_PrintUnformatted(a);
    const size_t n = p ? strlen(p) : 0;
    if (p && n >= strip)
        p[n - strip] = '\0';
    return p;
}

/* A call whose arguments are a JSON object's text; -1 when they are not one. Cut: a call
 * with a whole name and its arguments as far as they are certain. */
static int json_call(cJSON *calls, cr_span name, cr_span args, int cut)
{
    args = cr_trim(args), name = cr_trim(name);
    cJSON *a = cJSON_ParseWithLength(args.p, args.n);
    int ok = name.n && cJSON_IsObject(a) ? add_call(calls, name, a) : -1;
    cJSON_Delete(a);
    if (ok == -1 && cut && name.n) {
        char *p = NULL;
        size_t end;
        const int r = mvm_json_prefix(args.p, args.n, &p, &end);
        ok = r == 0 && (!p || p[0] == '{') ? add_call_text(calls, name, p ? p : "") : -1;
        free(p);
    }
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

/* Whether the schema of tool's parameter `key` (NUL-terminated) says it is a string. */
static int string_param(const mvm_chat_reply_opts *o, cr_span tool, const char *key)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(param_schema(o->tool_list, tool, key),
                                                         "type");
    return cJSON_IsString(type) && !strcmp(type->valuestring, "string");
}

/* Adds key: value to args, value a string where the schema says so or it is no JSON (only a
 * string one when `strings_only`). 1 when added, 0 when not (out of memory, a key said
 * twice, or not a string under strings_only). */
static int put_arg(const mvm_chat_reply_opts *o, cJSON *args, cr_span tool, cr_span key,
                   cr_span value, int strings_only)
{
    char *k = strndup(key.p, key.n);
    const int text = k && string_param(o, tool, k);
    cr_span v = cr_trim(value);
    cJSON *item = text || strings_only ? NULL : cJSON_ParseWithLength(v.p, v.n);
    if (!item && (text || !strings_only)) {
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

/* How an XML syntax writes a parameter: KEY_OPEN key KEY_CLOSE [VALUE_OPEN] value
 * VALUE_CLOSE. */
typedef struct xml_params {
    const char *key_open, *key_close, *value_open, *value_close;
    int unwrap; /* a newline each side of the value is markup (qwen3-coder) */
} xml_params;

static const xml_params qwen3_coder_params = {"<parameter=", ">", "", "</parameter>", 1};
static const xml_params glm45_params = {"<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
                                        0};
static const xml_params minimax_params = {"<parameter name=\"", "\">", "", "</parameter>", 0};

/* A string parameter's text so far into args (cut): a tail that may become the closing
 * tag, the newline unwrap would take, or half a UTF-8 character held back. 1 when added. */
static int open_value(const mvm_chat_reply_opts *o, const xml_params *f, cJSON *args,
                      cr_span tool, cr_span key, cr_span v)
{
    const char *const close[] = {f->value_close, NULL};
    if (f->unwrap && v.n && v.p[0] == '\n')
        v.p++, v.n--;
    v = cr_releasable(v, close, 1);
    if (f->unwrap && v.n && v.p[v.n - 1] == '\n')
        v.n--;
    return put_arg(o, args, tool, key, v, 1);
}

/* The parameters of tool `name` at the front of *b into args, up to `stop` (eaten; "": to
 * b's end): 1 when read, -1 when something else comes. Cut (b runs to the text's end): 0
 * where the text ends first, a string parameter being written added with its text so far
 * (*open_string set). */
static int params(const mvm_chat_reply_opts *o, const xml_params *f, cr_span name, cr_span *b,
                  const char *stop, int cut, cJSON *args, int *open_string)
{
    cr_span key, value;
    const int fail = cut ? 0 : -1; /* cut: the grammar says the rest is still to come */
    for (*b = cr_trim(*b);; *b = cr_trim(*b)) {
        if (*stop ? eat(b, stop) : !b->n)
            return *stop || !cut ? 1 : 0;
        if (!eat(b, f->key_open) || !until(b, f->key_close, &key))
            return fail;
        if (f->value_open[0] && (*b = cr_trim(*b), !eat(b, f->value_open)))
            return fail;
        if (!until(b, f->value_close, &value)) {
            *open_string = cut && open_value(o, f, args, name, cr_trim(key), *b);
            return fail;
        }
        if (!put_arg(o, args, name, cr_trim(key), f->unwrap ? unwrap(value) : value, 0))
            return -1;
    }
}

/* An XML syntax's call of `name`, its parameters read from *b: 1, or -1 when they are not
 * its parameters. Cut: the call with those read so far. */
static int xml_call(const mvm_chat_reply_opts *o, const xml_params *f, cr_span name, cr_span *b,
                    const char *stop, int cut, cJSON *calls)
{
    int open_string = 0;
    cJSON *args = cJSON_CreateObject();
    const int r = args ? params(o, f, name, b, stop, cut, args, &open_string) : -1;
    char *text = r == 0 ? print_cut(args, open_string ? 2 : 1) : NULL; /* '"}' or '}' owed */
    const int ok = r == 1 ? add_call(calls, name, args) : r == 0 && add_call_text(calls, name, text);
    free(text);
    cJSON_Delete(args);
    return ok == 1 ? 1 : -1;
}

/* ---- the syntaxes ---------------------------------------------------------------------- */

/* A call object {"name", "arguments"} of a healed tree whose last member the text ends
 * `inner` closers deep in (0: between members): 1 with its call once the name is whole,
 * the arguments as far as certain ("" until they begin), -1 otherwise. */
static int cut_call_object(cJSON *calls, const cJSON *j, size_t inner)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "arguments"), *last = j ? j->child : NULL;
    while (last && last->next)
        last = last->next;
    if (!cJSON_IsObject(j) || !cJSON_IsString(n) || !n->valuestring[0] || (inner && last == n) ||
        (a && !cJSON_IsObject(a) && !cJSON_IsString(a)))
        return -1;
    cJSON *parsed = cJSON_IsString(a) && !(inner && last == a) ? cJSON_Parse(a->valuestring) : NULL;
    char *args = cJSON_IsObject(a)        ? print_cut(a, last == a ? inner : 0)
                 : cJSON_IsObject(parsed) ? cJSON_PrintUnformatted(parsed)
                                          : strdup("");
    const int ok = add_call_text(calls, (cr_span){n->valuestring, strlen(n->valuestring)}, args);
    free(args), cJSON_Delete(parsed);
    return ok ? 1 : -1;
}

static int hermes(cr_span b, int cut, cJSON *calls)
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
    size_t owed, end;
    if (ok == -1 && cut) { /* (a whole value that is no call stays none) */
        if (mvm_json_heal(b.p, b.n, &j, &owed, &end) == 0 && j)
            ok = cut_call_object(calls, j, owed - 1); /* the object's own '}' is owed */
        cJSON_Delete(j);
    }
    return ok;
}

/* <function=NAME> <parameter=KEY>VALUE</parameter>... </function> */
static int qwen3_coder(const mvm_chat_reply_opts *o, cr_span b, int cut, cJSON *calls)
{
    cr_span name;
    b = cr_trim(b);
    if (!eat(&b, "<function=") || !until(&b, ">", &name) || !name.n)
        return -1;
    cJSON *got = cJSON_CreateArray();
    int ok = got ? xml_call(o, &qwen3_coder_params, name, &b, "</function>", cut, got) : -1;
    ok = ok == 1 && (cut || !cr_trim(b).n) ? 1 : -1; /* cut: a closing tag's start may follow */
    while (ok == 1 && got->child)
        cJSON_AddItemToArray(calls, cJSON_DetachItemViaPointer(got, got->child));
    cJSON_Delete(got);
    return ok;
}

/* NAME <arg_key>K</arg_key><arg_value>V</arg_value>..., or NAME {json} */
static int glm45(const mvm_chat_reply_opts *o, cr_span b, int cut, cJSON *calls)
{
    cr_span name = b;
    const char *nl = cr_find(b, "\n"), *k = cr_find(b, "<arg_key>");
    const char *end = nl && (!k || nl < k) ? nl : k;
    if (!end && cut)
        return -1; /* the name may go on */
    name.n = end ? (size_t)(end - b.p) : b.n;
    b = cr_trim(after(b, b.p, name.n)), name = cr_trim(name);
    if (b.n && b.p[0] == '{')
        return json_call(calls, name, b, cut);
    return name.n ? xml_call(o, &glm45_params, name, &b, "", cut, calls) : -1;
}

/* <invoke name="N"><parameter name="K">V</parameter>...</invoke>, one or more */
static int minimax(const mvm_chat_reply_opts *o, cr_span b, int cut, cJSON *calls)
{
    cr_span name, body;
    int n = 0;
    for (b = cr_trim(b); b.n; b = cr_trim(b), n++) {
        if (!eat(&b, "<invoke name=\"") || !until(&b, "\">", &name))
            return cut && n ? 1 : -1; /* cut: the next call's name is not whole yet */
        const int last = !until(&b, "</invoke>", &body);
        if (last && !cut)
            return -1;
        if (last)
            body = b, b.n = 0;
        if (xml_call(o, &minimax_params, name, &body, "", last, calls) < 0)
            return -1;
    }
    return n ? 1 : -1;
}

/* <｜tool▁call▁begin｜>...<｜tool▁call▁end｜>, one or more: R1's "function<sep>NAME\n```json
 * ARGS```", V3.1's "NAME<sep>ARGS" */
static int deepseek(int r1, cr_span b, int cut, cJSON *calls)
{
    cr_span call, head, args, name;
    int n = 0;
    for (b = cr_trim(b); b.n; b = cr_trim(b), n++) {
        if (!eat(&b, DS_CALL))
            return cut && n ? 1 : -1;
        const int last = !until(&b, DS_CALL_END, &call);
        if (last)
            call = b, b.n = 0; /* the reply ended inside it */
        const int c = cut && last;
        if (!until(&call, DS_SEP, &head))
            return c && n ? 1 : -1;
        if (!r1) {
            if (json_call(calls, head, call, c) < 0)
                return -1;
            continue;
        }
        if (!until(&call, "\n", &name) || (call = cr_trim(call), !eat(&call, "```json")))
            return c && n ? 1 : -1;
        if (!until(&call, "```", &args)) {
            if (!c)
                return -1;
            args = call, call.n = 0;
        }
        /* (cut: what follows the fence may be the start of the call's end marker) */
        if ((cr_trim(call).n && !c) || json_call(calls, name, args, c) < 0)
            return -1;
    }
    return n ? 1 : -1;
}

/* <|tool_call_begin|>functions.NAME:I<|tool_call_argument_begin|>ARGS<|tool_call_end|>... */
static int kimi(cr_span b, int cut, cJSON *calls)
{
    cr_span id, args;
    int n = 0;
    for (b = cr_trim(b); b.n; b = cr_trim(b), n++) {
        if (!eat(&b, "<|tool_call_begin|>") || !until(&b, "<|tool_call_argument_begin|>", &id))
            return cut && n ? 1 : -1;
        const int last = !until(&b, "<|tool_call_end|>", &args);
        if (last)
            args = b, b.n = 0;
        id = cr_trim(id);
        if (id.n > 10 && !memcmp(id.p, "functions.", 10))
            id.p += 10, id.n -= 10;
        for (size_t i = id.n; i-- > 0;)
            if (id.p[i] == ':') {
                id.n = i;
                break;
            }
        if (json_call(calls, id, args, cut && last) < 0)
            return -1;
    }
    return n ? 1 : -1;
}

/* Mistral's list of call objects, cut: the whole ones, then the last as far as certain. */
static int mistral_cut(cr_span b, cJSON *calls)
{
    cJSON *j;
    size_t owed, end;
    if (mvm_json_heal(b.p, b.n, &j, &owed, &end) != 0 || !cJSON_IsArray(j)) {
        cJSON_Delete(j);
        return -1;
    }
    int n = 0; /* those it can say: a last one whose name is not whole yet is not */
    for (const cJSON *c = j->child; c; c = c->next, n++)
        if (cut_call_object(calls, c, c->next || owed < 2 ? 0 : owed - 2) < 0)
            break;
    cJSON_Delete(j);
    return n ? 1 : -1;
}

/* [TOOL_CALLS] then a JSON array of {name, arguments}, or NAME[ARGS]{json} (Mistral's later
 * tokenizers): the block ends where its JSON does. */
static int mistral(cr_span s, int partial, int held, cJSON *calls, size_t *used)
{
    cr_span b = s, name = {s.p, 0};
    eat(&b, "[TOOL_CALLS]");
    b = cr_trim(b);
    const int list = b.n && b.p[0] == '[';
    if (!list && !until(&b, "[ARGS]", &name))
        return partial ? 0 : -1;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(b.p, b.n, &end, 0);
    if (!j && held) { /* written so far */
        *used = s.n;
        const int r = list ? mistral_cut(b, calls) : json_call(calls, name, b, 1);
        return partial ? 0 : r;
    }
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

/* The calls of a block (s from its opening marker): 1 when read (*used its bytes), -1 when
 * it is not a call, 0 while it may yet be completed (partial; held: with what is certain
 * of its calls already added). */
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
        return mistral(s, partial, o->held, calls, used);
    if ((unsigned)o->syntax >= sizeof ends / sizeof ends[0] || !ends[o->syntax])
        return -1;
    cr_span b = s, body;
    int cut = 0;
    eat(&b, cr_call_start(o->syntax));
    if (!until(&b, ends[o->syntax], &body)) {
        if (partial && !o->held)
            return 0;
        body = b, b.n = 0, b.p = s.p + s.n, cut = o->held;
    }
    *used = (size_t)(b.p - s.p);
    int r;
    switch (o->syntax) {
    case MVM_CHAT_HERMES: r = hermes(body, cut, calls); break;
    case MVM_CHAT_QWEN3_CODER: r = qwen3_coder(o, body, cut, calls); break;
    case MVM_CHAT_GLM45: r = glm45(o, body, cut, calls); break;
    case MVM_CHAT_MINIMAX_M2: r = minimax(o, body, cut, calls); break;
    case MVM_CHAT_KIMI_K2: r = kimi(body, cut, calls); break;
    default: r = deepseek(o->syntax == MVM_CHAT_DEEPSEEK_R1, body, cut, calls); break;
    }
    return partial && cut ? 0 : r;
}

int cr_calls(const mvm_chat_reply_opts *o, cr_span s, int partial, cJSON *calls, size_t *used)
{
    /* a block's calls are taken whole or not at all (held: those certain while it is cut) */
    cJSON *got = cJSON_CreateArray();
    const int r = got ? block(o, s, partial, got, used) : -1;
    while (r >= 0 && got->child)
        cJSON_AddItemToArray(calls, cJSON_DetachItemViaPointer(got, got->child));
    cJSON_Delete(got);
    return r;
}

int cr_json_call(cJSON *calls, cr_span name, cr_span args, int cut)
{
    return json_call(calls, name, args, cut);
}
